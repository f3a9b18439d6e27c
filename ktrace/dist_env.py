"""Where this process sits among the ranks, read from the environment its launcher gave it.

Two launchers are understood, and nothing else is needed in a user's script:

``torchrun`` (``python -m torch.distributed.run``)
    every worker gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
    ``MASTER_PORT`` (and more that ktrace does not read).
Slurm's ``srun``
    every task gets ``SLURM_PROCID`` (its rank), ``SLURM_STEP_NUM_TASKS`` / ``SLURM_NTASKS``
    (the ranks of the step), ``SLURM_LOCALID`` (its index on its node) and the step's node list,
    but no rendezvous address: the first node of ``SLURM_STEP_NODELIST`` (else
    ``SLURM_JOB_NODELIST``) is taken, and a port derived from ``SLURM_JOB_ID`` (15000 + the job id
    modulo 10000), unless ``MASTER_ADDR`` / ``MASTER_PORT`` are set, which always win.

torchrun's variables win over Slurm's: ``srun torchrun ...`` starts one torchrun per node, whose
workers carry both sets, and ``SLURM_PROCID`` is then the node's index, not the worker's rank.
A batch script's own shell is not an ``srun`` task, yet Slurm gives it ``SLURM_PROCID=0`` and the
job's ``SLURM_NTASKS``: start the ranks with ``srun`` (or torchrun), not with a plain ``python``
in a job of several tasks.

:func:`rank_env` reads the environment, :func:`export_torch_env` writes what
``torch.distributed``'s ``env://`` initialisation reads (so a Slurm task initialises like a
torchrun worker), :func:`device_index` picks this rank's GPU. :data:`SAFE_ENV` is the
environment every rank must have (NVLink multicast off). :func:`node_name` says which node a
rank is on (ranks of one node share a host clock; the clock calibration chains the others).
Pure Python: importing this module pulls in neither torch nor triton.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping, MutableMapping

#: Environment of every rank, unless the user set these: NVLink multicast (NVLS) stays off in
#: NCCL, in torch's symmetric memory and in NVSHMEM (the heap's flags and stores assume it).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

#: Names this rank's node instead of the host name (``{rank}`` and ``{local_rank}`` are filled
#: in): ``KTRACE_NODE='sim{rank}'`` makes every rank a node of its own, to simulate several nodes
#: on one host (see :func:`node_name`).
NODE_ENV = "KTRACE_NODE"

#: First port of the range a Slurm task's rendezvous port is derived in (see :func:`slurm_port`):
#: below Linux's ephemeral ports (32768 and up), so no outgoing connection holds it by chance.
SLURM_PORT_BASE = 15000
SLURM_PORT_SPAN = 10000


def apply_safe_env(environ: MutableMapping[str, str] | None = None) -> None:
    """Set :data:`SAFE_ENV` in ``environ`` (default: this process's) where the user chose no value."""
    env = os.environ if environ is None else environ
    for k, v in SAFE_ENV.items():
        env.setdefault(k, v)


@dataclass(frozen=True)
class RankEnv:
    """This process's place among the ranks (validated on construction).

    Attributes:
        rank: global rank, ``0 <= rank < world_size``.
        world_size: ranks in all.
        local_rank: index of this rank on its node (which GPU it takes).
        master_addr: rendezvous host (None: not given).
        master_port: rendezvous port (None: not given).
        launcher: ``"torchrun"`` (torchrun's variables, or anything that sets ``RANK``) or
            ``"slurm"`` (an ``srun`` task).
    """

    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None = None
    master_port: int | None = None
    launcher: str = "torchrun"

    def __post_init__(self):
        if self.world_size < 1:
            raise ValueError(f"the world size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in 0..{self.world_size - 1} (world size {self.world_size})")
        if self.local_rank < 0:
            raise ValueError(f"the local rank must be >= 0, got {self.local_rank}")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ValueError(f"the rendezvous port must be in 1..65535, got {self.master_port}")
        if self.launcher not in ("torchrun", "slurm"):
            raise ValueError(f"unknown launcher {self.launcher!r}")


def _int(env: Mapping[str, str], name: str) -> int:
    text = env[name]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer (it is set by the launcher)") from None


def rank_env(environ: Mapping[str, str] | None = None) -> RankEnv | None:
    """This process's :class:`RankEnv`, or None when no launcher started it (a single process).

    Args:
        environ: the environment to read (default: this process's).

    Raises:
        ValueError: a launcher's variable is malformed or only half there (one line naming it).
    """
    env = os.environ if environ is None else environ
    port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    addr = env.get("MASTER_ADDR") or None
    if "RANK" in env or "WORLD_SIZE" in env:
        for a, b in (("RANK", "WORLD_SIZE"), ("WORLD_SIZE", "RANK")):
            if a in env and b not in env:
                raise ValueError(f"{a} is set but {b} is not: launch with torchrun or set both")
        rank = _int(env, "RANK")
        local = next((_int(env, k) for k in ("LOCAL_RANK", "SLURM_LOCALID") if env.get(k)), rank)
        return RankEnv(rank, _int(env, "WORLD_SIZE"), local, addr, port, "torchrun")
    tasks = next((k for k in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS") if env.get(k)), None)
    if env.get("SLURM_PROCID") and tasks:
        rank = _int(env, "SLURM_PROCID")
        local = _int(env, "SLURM_LOCALID") if env.get("SLURM_LOCALID") else rank
        if addr is None:
            lists = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
            nodes = next((env[k] for k in lists if env.get(k)), None)
            addr = first_host(nodes) if nodes else None
        if port is None and env.get("SLURM_JOB_ID"):
            port = slurm_port(_int(env, "SLURM_JOB_ID"))
        return RankEnv(rank, _int(env, tasks), local, addr, port, "slurm")
    return None


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list (``"gpu[03-04,07],cpu1"`` -> ``"gpu03"``).

    Each bracketed group stands for its first value, written as in the list (zero padding kept),
    which is the first host Slurm names: ``"rack[1-2]-n[01-08]"`` -> ``"rack1-n01"``.

    Raises:
        ValueError: an empty list or unbalanced brackets.
    """
    depth, first = 0, []
    for ch in nodelist.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                break
        elif ch == "," and depth == 0:
            break
        first.append(ch)
    entry = "".join(first)
    if depth != 0 or not entry or entry.count("[") != entry.count("]"):
        raise ValueError(f"cannot read the Slurm host list {nodelist!r}")
    host, rest = "", entry
    while "[" in rest:
        head, _, tail = rest.partition("[")
        group, _, rest = tail.partition("]")
        value = group.split(",")[0].split("-")[0].strip()
        if not value:
            raise ValueError(f"cannot read the Slurm host list {nodelist!r}")
        host += head + value
    return host + rest


def slurm_port(job_id: int) -> int:
    """The rendezvous port of a Slurm job's tasks when ``MASTER_PORT`` is not set: every task of
    the job derives the same one, and jobs sharing a node rarely collide. Two steps of one job
    running at once need ``MASTER_PORT`` set apart."""
    return SLURM_PORT_BASE + int(job_id) % SLURM_PORT_SPAN


def export_torch_env(re: RankEnv, environ: MutableMapping[str, str] | None = None) -> None:
    """Write ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` from
    ``re`` into ``environ`` (default: this process's) where they are not set, so that
    ``torch.distributed.init_process_group()`` (``env://``) and code reading ``RANK`` see a Slurm
    task the way they see a torchrun worker."""
    env = os.environ if environ is None else environ
    values = {"RANK": re.rank, "WORLD_SIZE": re.world_size, "LOCAL_RANK": re.local_rank,
              "MASTER_ADDR": re.master_addr, "MASTER_PORT": re.master_port}
    for k, v in values.items():
        if v is not None:
            env.setdefault(k, str(v))


def device_index(re: RankEnv, device_count: int) -> int | None:
    """The GPU this rank takes: its local rank, or the only visible one for a Slurm task bound to
    one GPU (``srun --gpus-per-task=1`` hides the others); None without a GPU.

    Raises:
        RuntimeError: fewer GPUs visible than this node's ranks need.
    """
    if device_count <= 0:
        return None
    if re.local_rank < device_count:
        return re.local_rank
    if device_count == 1 and re.launcher == "slurm":
        return 0
    raise RuntimeError(f"LOCAL_RANK {re.local_rank} but only {device_count} GPUs are visible")


def node_name(environ: Mapping[str, str] | None = None, *, rank: int | None = None, local_rank: int | None = None,
              template: str | None = None) -> str:
    """The name of the node this rank runs on: ranks with one name share a host (and its clock).

    The clock calibration measures the ranks of one node against each other over the symmetric
    heap and chains the nodes through their host clocks (``ktrace.clock.calibrate``): which path a
    rank takes follows from these names. The host name is the default; a template (argument, else
    ``$KTRACE_NODE``) overrides it, with ``{rank}`` and ``{local_rank}`` filled in, e.g.
    ``"sim{rank}"`` to treat every GPU of one host as a node of its own (a simulation of several
    nodes).

    Args:
        environ: the environment to read (default: this process's).
        rank: this process's global rank (for ``{rank}``; default: from the launcher's variables).
        local_rank: its index on the node (for ``{local_rank}``; default: from the launcher's).
        template: overrides ``$KTRACE_NODE``.

    Raises:
        ValueError: a template naming a field other than ``rank`` and ``local_rank``.
    """
    env = os.environ if environ is None else environ
    tpl = template if template is not None else env.get(NODE_ENV, "")
    if not tpl:
        return socket.gethostname()
    if rank is None or local_rank is None:
        re = rank_env(env)
        rank = (re.rank if re else 0) if rank is None else rank
        local_rank = (re.local_rank if re else 0) if local_rank is None else local_rank
    try:
        return tpl.format(rank=rank, local_rank=local_rank)
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"node name template {tpl!r} may use only {{rank}} and {{local_rank}} ({e})") from None
