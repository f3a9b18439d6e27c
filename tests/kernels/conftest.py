"""Fixtures of the kernel tests: the process group (multi-GPU tier) and event counting."""

import os

import numpy as np
import pytest


@pytest.fixture(scope="session")
def dist():
    """This rank's ``harness.Dist``; skips outside the multi-GPU launcher or without a GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU per rank")
    if "WORLD_SIZE" not in os.environ:
        pytest.skip("run under python -m ktrace.testing.launch -n N")
    from instrumented_kernels import harness as H

    return H.setup()


def launch_counts(cap, rank: int) -> list[dict]:
    """Per launch of ``cap`` (a closed session): {kernel, SPAN, NOTIFY, WAIT, TIMEOUT, dropped}."""
    from ktrace.schema import EventFlag, EventKind

    out = []
    for ln in cap.to_capture().ranks[rank].launches:
        d = ln.decode(rank)
        ev = d.events
        out.append(
            {
                "kernel": ln.kernel,
                "SPAN": int((ev["kind"] == EventKind.SPAN).sum()),
                "NOTIFY": int((ev["kind"] == EventKind.NOTIFY).sum()),
                "WAIT": int((ev["kind"] == EventKind.WAIT).sum()),
                "TIMEOUT": int(((ev["flags"] & int(EventFlag.TIMEOUT)) != 0).sum()),
                "dropped": d.dropped,
                "events": ev,
            }
        )
    return out


def wait_durations(ev, peer: int) -> np.ndarray:
    """Durations (ticks) of the WAIT events of ``ev`` on ``peer``."""
    from ktrace.schema import EventKind

    w = ev[(ev["kind"] == EventKind.WAIT) & (ev["arg0"] == peer)]
    return (w["end"] - w["start"]).astype(np.int64)
