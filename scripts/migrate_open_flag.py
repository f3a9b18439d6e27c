"""Re-mark the open waits of a live-dump capture written before the OPEN flag moved to bit 8.

A live dump (``ktrace.flight``) adds, on the host, one WAIT record per lane still spinning at the
dump, flagged OPEN | TIMEOUT | DETAIL. OPEN was bit 4 of the flags until it was given bit 8, when
``ktrace.gluon`` took bit 4 for LOCAL (mbarrier hand-offs, written by the device). This rewrites
those host-made records of a dump from a Triton kernel (no LOCAL event can be in it) with the bit
the schema now gives OPEN; nothing the device recorded changes.

    python scripts/migrate_open_flag.py tests/fixtures/flight_dump_h100.ktrace
"""

import sys

import numpy as np

from ktrace import schema
from ktrace.captures.file import read_capture, write_capture
from ktrace.decode import head_bytes, split_head

OLD_OPEN = 4


def main(path: str) -> None:
    cap = read_capture(path)
    if not (cap.meta or {}).get("live"):
        raise SystemExit(f"{path}: not a live dump")
    n = 0
    for rc in cap.ranks.values():
        for ln in rc.launches:
            raw = np.array(ln.raw, copy=True)
            header, _ = split_head(memoryview(raw))
            rec = raw[head_bytes(header):].view(np.uint8)  # (the records follow the header and slot counts)
            n_rec = rec.size // schema.RECORD_BYTES
            rec = rec[: n_rec * schema.RECORD_BYTES].view(schema.RECORD_DTYPE)
            kind = rec["tag"] & 0xF
            flags = (rec["tag"] >> schema.KIND_BITS) & 0xF
            old = int(schema.EventFlag.DETAIL | schema.EventFlag.TIMEOUT) | OLD_OPEN
            hit = (kind == schema.EventKind.WAIT) & (flags == old)
            new = int(schema.EventFlag.DETAIL | schema.EventFlag.TIMEOUT | schema.EventFlag.OPEN)
            rec["tag"][hit] = (rec["tag"][hit] & ~np.uint32(0xF << schema.KIND_BITS)) | np.uint32(new << schema.KIND_BITS)
            n += int(hit.sum())
            ln.raw = raw
    write_capture(path, cap)
    print(f"{path}: {n} open wait(s) re-marked")


if __name__ == "__main__":
    main(sys.argv[1])
