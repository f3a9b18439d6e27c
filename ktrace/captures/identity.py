"""Run identity: one id per run, the same on every rank, stored in every capture of the run.

Per-rank capture files of one run must never be merged with those of another: the notifies of
one run would release the waits of the other and a report would invent hangs. Each capture
therefore carries ``run_id``, and ``merge_captures`` refuses parts whose ids differ.

Where the id comes from (:func:`run_id`), first that applies:

1. ``KTRACE_RUN_ID`` in the environment (set the same on every rank by whoever launches them);
2. ``torch.distributed``, when it is initialised: the first rank to ask draws an id and puts it
   in the process group's rendezvous store (one compare-and-set, no collective), and every
   other rank reads that one back; a restart under ``torchrun`` is a new run;
3. ``TORCHELASTIC_RUN_ID`` when ``torchrun`` set a real one;
4. a process that is not one of several ranks (``WORLD_SIZE`` unset or 1): its own id, drawn
   once per process;
5. otherwise none (``None``): the ranks cannot agree on one, and merging their files warns as
   it does for files written before run ids existed.

torch is never imported here: ``torch.distributed`` is only used if the program already did.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import time

log = logging.getLogger("ktrace")

#: The environment variable that sets the run id explicitly.
ENV_RUN_ID = "KTRACE_RUN_ID"

_process_id: str | None = None
_warned = False


def new_run_id() -> str:
    """A fresh run id: the UTC time it was drawn and 32 random bits (``20261114T101502Z-3f9a2c1d``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def store_prefix() -> str:
    """Prefix of ktrace's keys in the rendezvous store: one namespace per attempt of a run (a
    ``torchrun`` restart keeps its store, and must not see the keys of the attempt before)."""
    return f"ktrace/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"


def default_store():
    """The rendezvous store of the initialised default process group, or None (torch not
    imported, or ``torch.distributed`` not initialised)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.distributed_c10d._get_default_store()


def run_id() -> str | None:
    """This run's id, the same on every rank (see the module docstring for where it comes from);
    None when the ranks have no way to agree on one."""
    global _process_id, _warned
    given = os.environ.get(ENV_RUN_ID, "").strip()
    if given:
        return given
    try:
        store = default_store()
    except Exception as e:  # (a torch without the private accessor: fall through)
        log.debug("ktrace run id: no rendezvous store (%s)", e)
        store = None
    if store is not None:
        try:
            got = store.compare_set(store_prefix() + "run_id", "", new_run_id())
            return got.decode() if isinstance(got, bytes) else str(got)
        except Exception as e:  # the store is gone (its host rank died): say so, and go on
            log.warning("[rank %s] ktrace: the rendezvous store cannot give this run's id (%s)", os.environ.get("RANK", "?"), e)
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if elastic and elastic.lower() != "none":
        return f"torchelastic-{elastic}"
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world = 1
    if world <= 1:
        if _process_id is None:
            _process_id = new_run_id()
        return _process_id
    if not _warned:
        log.warning("[rank %s] ktrace: no way to agree on a run id with the other %d ranks (torch.distributed is "
                    "not initialised and %s is not set): captures carry none", os.environ.get("RANK", "?"), world - 1,
                    ENV_RUN_ID)
        _warned = True
    return None
