"""The Perfetto writer encodes its packets with numpy (``ktrace.export.perfetto._encode``): the same
bytes as the protobuf runtime makes from ``TracePacket`` messages, for every packet shape the
writer uses, with values of every varint length (negative arguments take ten bytes) and strings."""

from __future__ import annotations

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from ktrace.export import perfetto as P

B, E, I, C = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER
SHAPES = {
    "span": P._Template(B, ("span",), ("arg0", "arg1", "rank", "program"), seq=3),
    "wait timeout, flow in": P._Template(I, ("wait", "timeout"), ("peer", "flag", "cmp"), flow="in", seq=4, str_args=frozenset({"cmp"})),
    "notify, 3 flows out": P._Template(B, ("notify",), ("peer", "value"), flow="out", n_flow=3, seq=5),
    "end": P._Template(E, seq=3, needs_state=False),
    "counter": P._Template(C, seq=3, needs_state=False),
}


def _reference(tpl: P._Template, cols: dict, fixed: dict) -> bytes:
    """The packets as the protobuf runtime writes them."""
    n = len(cols["t"])
    t = Trace()
    for i in range(n):
        def v(c):
            return fixed[c] if c in fixed else cols[c][i]

        p = t.packet.add()
        p.timestamp = int(cols["t"][i])
        p.trusted_packet_sequence_id = tpl.seq
        if tpl.needs_state:
            p.sequence_flags = P._SEQ_NEEDS
        te = p.track_event
        te.type = tpl.type
        te.track_uuid = int(cols["u"][i])
        te.category_iids.extend(tpl.categories)
        if tpl.kind == "counter":
            te.counter_value = int(v("v"))
        if tpl.kind == "start":
            te.name_iid = int(v("nm"))
            for j, iid in enumerate(tpl.arg_iids):
                a = te.debug_annotations.add(name_iid=iid)
                if j in tpl.str_pos:
                    a.string_value = str(v(f"v{j}"))
                else:
                    a.int_value = int(v(f"v{j}"))
            ids = [int(v(f"fl{j}")) for j in range(tpl.n_flow)]
            (te.flow_ids if tpl.flow == "out" else te.terminating_flow_ids).extend(ids)
    return t.SerializeToString()


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("fixed_name", [False, True])
def test_encode_is_the_runtimes_bytes(shape, fixed_name):
    tpl = SHAPES[shape]
    rng = np.random.default_rng(len(shape))
    n = 300
    # values spanning every varint length, and negative ones
    big = rng.integers(0, 2**62, n) >> rng.integers(0, 62, n)
    cols = {"t": big, "u": rng.integers(1, 2**40, n)}
    for c in tpl.columns:
        if c in cols:
            continue
        if c.startswith("v") and c != "v" and int(c[1:]) in tpl.str_pos:
            cols[c] = np.array([["ge", "eq", "ünïcode", ""][k] for k in rng.integers(0, 4, n)], dtype=object)
        elif c.startswith("fl") or c == "nm":  # (unsigned fields)
            cols[c] = big
        else:  # (int64 fields: an argument, a counter's value)
            cols[c] = np.where(rng.random(n) < 0.2, -big, big)
    fixed = {}
    if fixed_name and "nm" in cols:
        fixed["nm"] = 7
        del cols["nm"]
    assert P._encode(tpl, cols, fixed) == _reference(tpl, cols, fixed)
