"""Speed at 10 M events: one command per row of BENCHMARKS.md's "Speed at 10 M events" table, each
printing its figures and the ratio to the row's baseline.

    python benchmarks/speed.py report       # ktrace report: s and peak memory / the raw buffers (targets 3 s, 2x)
    python benchmarks/speed.py report-json  # ktrace report --json: / ktrace report (target <= 1.10)
    python benchmarks/speed.py export       # ktrace export: / a hand-written pyarrow writer of the same tables (<= 1)
    python benchmarks/speed.py merge        # ktrace merge rank files -o .pftrace: s (target 5 s)
    python benchmarks/speed.py chrome       # 2 M events: the best hand-written peer / ktrace merge -o .json (>= 5)
    python benchmarks/speed.py perfetto     # 2 M events: events/s of ktrace merge -o .pftrace (>= 1 M/s)

Common options: ``--events N`` (default 10 M; 2 M for chrome and perfetto), ``--repeat R`` (timed
runs of each side, median reported; default 3), ``--dir DIR`` (where the input is made once and
kept: default ``$TMPDIR/ktrace-speed-<events>``), ``--tree PATH`` (also run another ktrace tree,
alternating with this one: figures before and after on the same machine and load).

The input is the bundled 4 x H200 all-to-all (``ktrace/data/a2a_skewed_4xh200.ktrace``) replicated
as ``benchmarks/merge.py --source`` replicates it (byte for byte, copy k shifted k periods later,
57 B of stored buffer per event), written as one file per rank and merged into one capture with
this tree's ``ktrace merge``. Every timed run is a fresh process (``python -c`` calling
``ktrace.cli.main``, or the peer's script), run from a folder outside any tree so that
``PYTHONPATH`` alone decides which ktrace runs; its wall time, user and system CPU and peak
resident memory (``wait4``: the process and its workers) are printed with the load average
before it. Sides alternate run by run.

Baselines: ``export`` runs a hand-written writer of the same five tables in the same way
(:data:`_PEER_EXPORT`: the capture's aligned events by ``ktrace.events.aligned_events``, the
report's tables by ``build_report`` and ``wait_causes``, each converted column by column and
written by ``pyarrow.parquet.write_table``: zstd, row groups of 2^20 events and 2^16 rows as
``ktrace export``'s). ``chrome`` gives each peer the capture's aligned table (``aligned_events``,
saved beforehand and loaded before its clock starts) and times its conversion to Chrome JSON
events (complete events with name, category, pid, tid, ts, dur and the event's arguments) and
the write; ``ktrace`` is timed as the whole command (reading, decoding, aligning, pairing and
the flows included). Peers: the standard library's ``json`` and ``orjson``, each from a list of
dicts built from the columns.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "ktrace" / "data" / "a2a_skewed_4xh200.ktrace"
_RUN = "import sys; sys.argv[0] = 'ktrace'; from ktrace.cli import main; sys.exit(main())"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(cmd: list[str], tree: Path, cwd: Path) -> dict:
    """One fresh process (through :data:`_RUSAGE`): wall s, user and sys CPU s and peak resident
    memory (its own, or its largest worker's) of the command, the load average before it, and
    what the command itself printed last as JSON (a peer's own timing)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    load = _load()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _RUSAGE, *map(str, cmd)], cwd=cwd, env=env, capture_output=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        what = " ".join(str(c) if len(str(c)) < 80 else "<script>" for c in cmd)
        raise SystemExit(f"{what} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    r.update(wall_s=wall, load=load)
    return r


#: Runs a command, then prints its resource use (the command's process and its waited-for
#: children: ``ru_maxrss`` is the largest of them) and the last JSON line it printed, as JSON.
_RUSAGE = """
import json, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
if p.returncode:
    sys.stderr.buffer.write(p.stderr); sys.exit(p.returncode)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
out = {"user_s": ru.ru_utime, "sys_s": ru.ru_stime, "peak_gib": ru.ru_maxrss / 2**20}
lines = p.stdout.decode(errors="replace").strip().splitlines()
if lines and lines[-1].startswith("{"):
    out.update(json.loads(lines[-1]))
print(json.dumps(out))
"""


def prepare_input(events: float, d: Path) -> dict:
    """The replicated all-to-all: per-rank files and their merge (made once in ``d``)."""
    d.mkdir(parents=True, exist_ok=True)
    info_f = d / "info.json"
    if info_f.exists():
        return json.loads(info_f.read_text())
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from merge import build_from  # (this folder's benchmarks/merge.py)

    ranks = d / "ranks"
    ranks.mkdir(exist_ok=True)
    info = build_from(ranks, int(events), str(BUNDLED))
    merged = d / "capture.ktrace"
    subprocess.run([sys.executable, "-c", _RUN, "merge", *info["files"], "-o", str(merged)], check=True, cwd=d,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True)
    info["capture"] = str(merged)
    info_f.write_text(json.dumps(info))
    return info


def _ktrace(*args) -> list[str]:
    return [sys.executable, "-c", _RUN, *map(str, args)]


def _median(rs: list[dict], key: str = "wall_s") -> float:
    return statistics.median(r[key] for r in rs)


def _line(name: str, r: dict) -> str:
    return (f"  {name:28s} wall {r['wall_s']:6.2f} s  user {r['user_s']:6.2f}  sys {r['sys_s']:5.2f}  peak {r['peak_gib']:5.2f} GiB"
            f"  (load before {r['load']})")


def alternate(sides: dict, repeat: int, cwd: Path, before=None) -> dict:
    """Each side's runs, alternating side by side ``repeat`` times; ``before(name)`` runs untimed first."""
    got: dict = {k: [] for k in sides}
    for _ in range(repeat):
        for name, (cmd, tree) in sides.items():
            if before:
                before(name)
            r = timed(cmd, tree, cwd)
            got[name].append(r)
            print(_line(name, r), flush=True)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", choices=["report", "report-json", "export", "merge", "chrome", "perfetto"])
    ap.add_argument("--events", type=float)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--tree", type=Path, help="another ktrace tree to run alternately (before / after)")
    args = ap.parse_args()
    events = args.events or (2e6 if args.row in ("chrome", "perfetto") else 1e7)
    d = args.dir or Path(tempfile.gettempdir()) / f"ktrace-speed-{int(events)}"
    t0 = time.perf_counter()
    info = prepare_input(events, d)
    cap, raw = info["capture"], info["raw_bytes"]
    print(f"input: {info['events']:,} events, {info['input']}, {info['ranks']} ranks x {info['launches_per_rank']} launches, "
          f"raw buffers {raw / 2**20:.0f} MiB ({raw / info['events']:.0f} B/event) [{time.perf_counter() - t0:.0f} s to make or find]")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load {_load()}")
    trees = {"this tree": ROOT} | ({f"tree {args.tree}": args.tree.resolve()} if args.tree else {})
    work = Path(tempfile.mkdtemp(prefix="ktrace-speed-run-"))
    out = work / "out"

    def clean(_name=None):
        for p in work.glob("out*"):
            if p.is_dir():
                import shutil

                shutil.rmtree(p)
            else:
                p.unlink()
        os.sync()

    if args.row == "report":
        got = alternate({t: (_ktrace("report", cap, "-q"), tree) for t, tree in trees.items()}, args.repeat, work)
        for t, rs in got.items():
            w, pk = _median(rs), _median(rs, "peak_gib")
            print(f"{t}: ktrace report median {w:.2f} s = {w / 3:.2f} x the 3 s target; peak {pk:.2f} GiB = "
                  f"{pk * 2**30 / raw:.2f} x the raw buffers (target 2)")
    elif args.row == "report-json":
        for t, tree in trees.items():
            got = alternate({"report": (_ktrace("report", cap, "-q"), tree),
                             "report --json": (_ktrace("report", cap, "-q", "--json", work / "out.json"), tree)}, args.repeat, work, clean)
            a, b = _median(got["report"]), _median(got["report --json"])
            print(f"{t}: report {a:.2f} s, report --json {b:.2f} s: ratio {b / a:.2f} (target <= 1.10)")
    elif args.row == "export":
        # (the peer is this tree's: it calls ktrace's public decode and report, as a user's script would)
        sides = {f"{t}: ktrace export": (_ktrace("export", cap, out), tree) for t, tree in trees.items()}
        sides["hand-written pyarrow"] = ([sys.executable, "-c", _PEER_EXPORT, cap, str(out)], ROOT)
        got = alternate(sides, args.repeat, work, clean)
        p = got["hand-written pyarrow"]
        for t in trees:
            k = got[f"{t}: ktrace export"]
            print(f"{t}: ktrace export {_median(k):.2f} s, {_median(k, 'peak_gib'):.2f} GiB; hand-written {_median(p):.2f} s, "
                  f"{_median(p, 'peak_gib'):.2f} GiB: time ratio {_median(k) / _median(p):.2f}, memory ratio "
                  f"{_median(k, 'peak_gib') / _median(p, 'peak_gib'):.2f} (target <= 1)")
    elif args.row == "merge":
        got = alternate({t: (_ktrace("merge", *info["files"], "-o", work / "out.pftrace"), tree) for t, tree in trees.items()},
                        args.repeat, work, clean)
        for t, rs in got.items():
            w = _median(rs)
            print(f"{t}: ktrace merge (4 rank files) -> .pftrace median {w:.2f} s = {w / 5:.2f} x the 5 s target; "
                  f"{info['events'] / w / 1e6:.2f} M events/s; peak {_median(rs, 'peak_gib'):.2f} GiB")
    elif args.row == "perfetto":
        got = alternate({t: (_ktrace("merge", cap, "-o", work / "out.pftrace"), tree) for t, tree in trees.items()},
                        args.repeat, work, clean)
        for t, rs in got.items():
            rate = info["events"] / _median(rs) / 1e6
            print(f"{t}: ktrace merge -> .pftrace {_median(rs):.2f} s: {rate:.2f} M events/s = {rate:.2f} x the 1 M/s target")
    elif args.row == "chrome":
        table = work / "aligned.npy"
        subprocess.run([sys.executable, "-c", _SAVE_TABLE, cap, str(table)], check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        sides = {f"{t}: ktrace merge -> .json": (_ktrace("merge", cap, "-o", work / "out.json", "--part-mb", 1e6), tree)
                 for t, tree in trees.items()}
        sides.update({f"peer {lib}": ([sys.executable, "-c", _PEER_CHROME, lib, str(table), str(work / "out.peer.json")], ROOT)
                      for lib in ("json", "orjson")})
        got = alternate(sides, args.repeat, work, clean)
        peers = {k: _median(v, "conv_s") for k, v in got.items() if k.startswith("peer")}
        best = min(peers, key=peers.get)
        for t in trees:
            k = _median(got[f"{t}: ktrace merge -> .json"])
            print(f"{t}: ktrace merge -> .json {k:.2f} s ({info['events'] / k / 1e6:.2f} M events/s), best peer {best} "
                  f"{peers[best]:.2f} s (conversion and write only): ratio {peers[best] / k:.2f} (target >= 5)")
    print(f"load at the end {_load()}")
    return 0


#: ``python -c _SAVE_TABLE CAPTURE OUT.npy``: the capture's aligned event table, for the peers.
_SAVE_TABLE = """
import sys, numpy as np
from ktrace.captures import read_capture
from ktrace.events import aligned_events
np.save(sys.argv[2], aligned_events(read_capture(sys.argv[1])))
"""

#: ``python -c _PEER_CHROME LIB TABLE.npy OUT.json``: a hand-written Chrome JSON writer given the
#: aligned table; prints its conversion-and-write time (``conv_s``).
_PEER_CHROME = """
import json, sys, time, numpy as np
lib, table, out = sys.argv[1:4]
ev = np.load(table)
t0 = time.perf_counter()
base = int(ev["start_ns"].min())
kinds = {1: "span", 2: "mark", 3: "counter", 4: "wait", 5: "notify"}
cols = {c: ev[c].tolist() for c in ("rank", "program", "kind", "region", "start_ns", "end_ns", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5")}
rows = [{"name": f"{kinds.get(k, k)} {r:x}", "cat": kinds.get(k, "event"), "ph": "X", "pid": rk + 1, "tid": p + 2,
         "ts": (s - base) / 1000.0, "dur": (e - s) / 1000.0, "args": {"arg0": a0, "arg1": a1, "arg2": a2, "arg3": a3, "arg4": a4, "arg5": a5}}
        for rk, p, k, r, s, e, a0, a1, a2, a3, a4, a5 in zip(*cols.values())]
doc = {"traceEvents": rows, "displayTimeUnit": "ns"}
if lib == "orjson":
    import orjson
    blob = orjson.dumps(doc)
else:
    blob = json.dumps(doc, separators=(",", ":")).encode()
with open(out, "wb") as f:
    f.write(blob)
print(json.dumps({"conv_s": time.perf_counter() - t0}))
"""

#: ``python -c _PEER_EXPORT CAPTURE DIR``: a hand-written Parquet writer of the tables ``ktrace
#: export`` writes (the events with names resolved; the report's waits with their causes,
#: workgroups, causes; the findings).
_PEER_EXPORT = """
import sys, os, numpy as np, pyarrow as pa, pyarrow.parquet as pq, orjson
from ktrace.captures import read_capture
from ktrace.events import aligned_events
from ktrace.analysis import build_report, findings_json, wait_causes
path, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
name = os.path.basename(path)
cap = read_capture(path)
ev = aligned_events(cap)
kernels = {(r, ln.index): ln.kernel for r, rc in cap.ranks.items() for ln in rc.launches}
def dict_col(codes, values):
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(values, pa.string()))
def names(keys, name_of):
    u, inv = np.unique(keys, return_inverse=True)
    return dict_col(inv.reshape(-1), [name_of(x) for x in u.tolist()])
kinds = {1: "span", 2: "instant", 3: "counter", 4: "wait", 5: "notify"}
writer = None
for a in range(0, ev.size, 1 << 20):
    e = ev[a:a + (1 << 20)]
    lk = e["rank"].astype(np.int64) * (1 << 32) + e["launch"]
    t = pa.table({
        "capture": dict_col(np.zeros(e.size), [name]), "rank": e["rank"], "launch": e["launch"],
        "kernel": names(lk, lambda k: kernels[(k >> 32, k & 0xFFFFFFFF)]), "program": e["program"], "lane": e["lane"],
        "slot": e["slot"], "kind_id": e["kind"], "kind": names(e["kind"], lambda k: kinds.get(k, f"kind{k}")), "flags": e["flags"],
        "region_id": e["region"], "region": names(e["region"], cap.region_name), "hw": e["hw"], "start": e["start"], "end": e["end"],
        **{c: e[c] for c in ("arg0", "arg1", "arg2", "arg3", "arg4", "arg5")},
        "start_ns": e["start_ns"], "end_ns": e["end_ns"], "dur_ns": e["end_ns"] - e["start_ns"]})
    if writer is None:
        writer = pq.ParquetWriter(os.path.join(out, "events.parquet"), t.schema, compression="zstd")
    writer.write_table(t, row_group_size=1 << 20)
writer.close()
del ev, cap
rep = build_report(path)
def arrow(t, extra={}):
    cols = {"capture": pa.array([name] * int(t.size), pa.string())}
    for c in list(t.dtype.names) + list(extra):
        v = np.asarray(t[c]) if c in t.dtype.names else np.asarray(extra[c])
        if v.dtype.kind != "O":
            cols[c] = pa.array(v)
        elif any(isinstance(x, (list, tuple)) for x in v.tolist()):
            cols[c] = pa.array([None if x is None else [int(y) for y in x] for x in v.tolist()], pa.list_(pa.int64()))
        else:
            cols[c] = pa.array([None if x is None else str(x) for x in v.tolist()], pa.string())
    return pa.table(cols)
w = rep.tables["waits"]
wc = wait_causes(rep.trace)
extra = {c: wc[c] for c in wc.dtype.names if c not in w.dtype.names and c != "row"}
for tname, t, ex in (("waits", w, extra), ("workgroups", rep.tables["workgroups"], {}), ("causes", rep.tables["causes"], {})):
    pq.write_table(arrow(t, ex), os.path.join(out, tname + ".parquet"), compression="zstd", row_group_size=1 << 16)
f = findings_json(rep)
pq.write_table(pa.table({"capture": [name] * len(f), "finding": list(range(1, len(f) + 1)), "kind": [x["kind"] for x in f],
                         "text": [x["text"] for x in f], "data_json": [orjson.dumps(x.get("data") or {}, option=orjson.OPT_SERIALIZE_NUMPY).decode() for x in f]}),
               os.path.join(out, "findings.parquet"), compression="zstd")
"""


if __name__ == "__main__":
    sys.exit(main())
