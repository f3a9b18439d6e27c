"""The recording side of ``ktrace record``: started in every Python process of the command.

``ktrace record`` puts :mod:`ktrace.auto._site` first on ``PYTHONPATH``, whose
``sitecustomize`` calls :func:`start` in each Python process the command starts (the program,
torchrun's workers; then the next ``sitecustomize`` on the path, if any). A process that never
imports Triton is left alone. In one that does, once the ``triton`` package is imported:

* one capture session is opened for the whole process, with ``auto`` (``ktrace.session``): every
  matching kernel launch is traced without edits; its rank is torchrun's / srun's;
* the process's first traced launch, when torch.distributed is initialised over several ranks,
  makes a small heap and calibrates the ranks' clocks over it (collective: every rank launches);
  ``torch.distributed.destroy_process_group`` and the process's exit calibrate again first;
* at exit the capture is written to ``OUT/rank<r>.ktrace`` (nothing when nothing was traced).

The parent ``ktrace record`` then merges the ranks' captures, writes the trace and the report.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading

log = logging.getLogger("ktrace")

#: The variable ``ktrace record`` passes its settings in (JSON: ``out``, ``config``, ``declare``,
#: ``run_id``).
ENV = "KTRACE_RECORD"

_lock = threading.Lock()
_session = None
_closed = False


def start() -> None:
    """Arm this process: nothing happens until Triton is imported (see the module docstring)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    from .hooks import after_import, watch

    if (_settings().get("config") or {}).get("symmetric_memory", True):
        watch()  # (before the program allocates: its rendezvous are recorded as they happen)
    # (armed once the whole triton package is imported: hooking its runtime from inside the
    # package's own import would import it half-made)
    if "triton" in sys.modules and "triton.runtime.autotuner" in sys.modules:
        _arm(sys.modules["triton"])
    else:
        after_import("triton", _arm)


def _settings() -> dict:
    return json.loads(os.environ[ENV])


def _arm(_module) -> None:
    """Open the process's session (once Triton is importable)."""
    global _session
    with _lock:
        if _session is not None:
            return
        from .. import session as S
        from . import declarations
        from .config import AutoConfig

        spec = _settings()
        for path in spec.get("declare") or ():
            declarations.load_file(path)
        cfg = AutoConfig.from_json(spec.get("config") or {})
        s = S.Session(auto=cfg, run_id=spec.get("run_id") or None)
        s._open()
        _session = s
        S._env_session = s  # (the process's session: active_session() finds it with KTRACE set)
        os.environ["KTRACE"] = "1"
        S.route_auto_launches(True)
        _hook_destroy()
        atexit.register(finish)


def _hook_destroy() -> None:
    """Calibrate (closing) before the program tears its process group down."""
    def patch(dist_mod):
        original = getattr(dist_mod, "destroy_process_group", None)
        if original is None or getattr(original, "__ktrace_wrapped__", False):
            return

        def destroy_process_group(*args, **kwargs):
            _closing_calibration()
            return original(*args, **kwargs)

        destroy_process_group.__wrapped__ = original
        destroy_process_group.__ktrace_wrapped__ = True
        dist_mod.destroy_process_group = destroy_process_group

    from .hooks import after_import

    if "torch.distributed" in sys.modules:
        patch(sys.modules["torch.distributed"])
    else:
        after_import("torch.distributed", patch)


def _closing_calibration() -> None:
    global _closed
    s = _session
    if s is None or _closed:
        return
    _closed = True
    if s.heap is None or not s.launches:
        return
    try:
        s._sync()
        s._record_timeouts()
        s._calibrate("after")
    except Exception as e:  # (never break the program's own teardown)
        s._note(f"closing clock calibration did not complete ({e})")


def finish() -> None:
    """At exit: calibrate (if the process group is still up), then write this rank's capture."""
    s = _session
    if s is None or not s.launches:
        return
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            _closing_calibration()
    except ImportError:
        pass
    out = _settings().get("out") or "."
    try:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, f"rank{int(s.rank)}.ktrace")
        s.close()
        s.save(path)
        print(f"[rank {s.rank}] ktrace: wrote {path} ({len(s.launches)} traced launches)", file=sys.stderr, flush=True)
    except Exception as e:  # at exit: say it, never raise into the interpreter's shutdown
        print(f"[rank {s.rank}] ktrace: could not write this rank's capture: {e}", file=sys.stderr, flush=True)
