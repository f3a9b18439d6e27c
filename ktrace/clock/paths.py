"""Which path each rank's clock takes to the reference, and what each rank keeps of a calibration.

Ranks of one node (one host: ``ktrace.dist_env.node_name``) that share a symmetric heap are
measured against their node's reference rank by the flag ping-pong over the heap (about 50 ns on
H200s). Nodes are chained through their hosts: the node's reference rank exchanges with its host
clock (GPU <-> host), its host exchanges timestamps with the reference rank's host over
``torch.distributed`` (host <-> host), and the reference rank exchanges with its own host. So a
rank is aligned to the reference by one of:

``reference``
    it is the reference rank.
``pingpong``
    the ping-pong against the reference rank (same node, same heap).
``host-chain``
    its own GPU<->host leg, its host's exchange with the reference host (none on the reference's
    own host), and the reference's GPU<->host leg: a node's reference rank, or a rank its heap
    does not connect to its node's reference.
``pingpong+host-chain``
    the ping-pong against its node's reference rank, then that rank's host chain.

:func:`plan_paths` decides this from the ranks' node names and heaps (the same on every rank,
so every rank takes part in the same exchanges); :func:`rank_samples` assembles what a rank's
capture file keeps of its calibrations (``ktrace.clock.model.fit_clock`` reads it). Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

#: Phases of a calibration, in the order they run.
PHASES = ("before", "after")


@dataclass(frozen=True)
class ClockPlan:
    """Who measures whom in one calibration (global ranks; identical on every rank).

    Attributes:
        reference: the rank every other is aligned to.
        nodes: each rank's node name.
        node_ref: each rank's node reference (the reference rank on its own node; else the lowest
            rank of the node).
        pingpong: ``(ref, peer)`` pairs measured over the heap for alignment.
        checks: ``(reference, peer)`` pairs measured over the heap across nodes as a check only
            (``crosscheck``: a simulation's ground truth); kept in the samples marked ``check``.
        chained: ranks whose host exchanges with the reference host (one per node other than the
            reference's).
        gpu_host: ranks that measure their GPU against their host clock (the ends of chains).
    """

    reference: int
    nodes: tuple[str, ...]
    node_ref: tuple[int, ...]
    pingpong: tuple[tuple[int, int], ...]
    checks: tuple[tuple[int, int], ...]
    chained: tuple[int, ...]
    gpu_host: tuple[int, ...]

    def path(self, rank: int) -> str:
        """``reference``, ``pingpong``, ``host-chain`` or ``pingpong+host-chain`` (see the module)."""
        if rank == self.reference:
            return "reference"
        pinged = any(p == rank for _, p in self.pingpong)
        if pinged and self.node_ref[rank] == self.reference:
            return "pingpong"
        return "pingpong+host-chain" if pinged else "host-chain"

    @property
    def multi_node(self) -> bool:
        """More than one node, or a rank that only a chain reaches."""
        return bool(self.gpu_host)


def plan_paths(nodes: Sequence[str], reference: int, heaps: Sequence[Sequence[int]], *, crosscheck: bool = False) -> ClockPlan:
    """Decide every rank's path (see the module docstring).

    Args:
        nodes: the node name of each global rank (``nodes[r]``).
        reference: the reference rank.
        heaps: for each rank, the global ranks its symmetric heap connects it to (itself included).
        crosscheck: also ping-pong the reference against every rank its heap reaches on other
            nodes, as a check (a simulation of several nodes on one host uses it as ground truth).

    Raises:
        ValueError: the reference is not a rank, or the lists disagree in length.
    """
    world = len(nodes)
    if len(heaps) != world:
        raise ValueError(f"plan_paths: {world} node names but {len(heaps)} heaps")
    if not 0 <= reference < world:
        raise ValueError(f"plan_paths: reference rank {reference} is not a rank of {world}")
    node_ref: list[int] = []
    for r in range(world):
        same = [q for q in range(world) if nodes[q] == nodes[r]]
        node_ref.append(reference if nodes[r] == nodes[reference] else min(same))
    reach = [set(int(x) for x in h) | {r} for r, h in enumerate(heaps)]
    pingpong = tuple((node_ref[r], r) for r in range(world) if r != node_ref[r] and node_ref[r] in reach[r] and r in reach[node_ref[r]])
    pinged = {p for _, p in pingpong}
    chained = tuple(sorted(node_ref[r] for r in range(world) if node_ref[r] == r and r != reference))
    orphans = tuple(r for r in range(world) if r != reference and r not in pinged and node_ref[r] != r)
    gpu_host = tuple(sorted(set(chained) | set(orphans) | ({reference} if chained or orphans else set())))
    checks = ()
    if crosscheck:
        checks = tuple((reference, r) for r in range(world)
                       if r != reference and nodes[r] != nodes[reference] and r in reach[reference] and reference in reach[r])
    return ClockPlan(reference=reference, nodes=tuple(nodes), node_ref=tuple(node_ref), pingpong=pingpong,
                     checks=checks, chained=chained, gpu_host=gpu_host)


def rank_samples(calibs: Mapping[str, Mapping], rank: int) -> dict | None:
    """What rank ``rank``'s capture keeps of its calibrations (``ktrace.clock.model`` reads it).

    Args:
        calibs: phase -> what ``ktrace.clock.calibrate.calibrate`` returned on this rank.
        rank: this rank (global).

    Returns:
        ``{"pingpong": [...], "host_anchor": {...}}`` as before, plus, from calibrations that
        recorded them: ``host_anchors`` (every phase's anchor, with its phase), ``gpu_host``
        (GPU<->host exchanges), ``host_exchange`` (this host against the reference host),
        ``reference_rank``, ``node``, ``path``, ``host_clock``, ``host_skew`` (a simulation's),
        ``cost_ns`` (nanoseconds each step took, per phase), ``edges`` (device ticks at the end
        of the opening and the start of the closing calibration, with chains) and ``notes``;
        None without calibration.
    """
    if not calibs:
        return None
    ordered = [(ph, calibs[ph]) for ph in PHASES if ph in calibs] + [(ph, c) for ph, c in calibs.items() if ph not in PHASES]
    pingpong = [s for _, c in ordered for s in (c.get("samples") or []) if int(s["peer"]) == rank]
    anchors = []
    for ph, c in ordered:
        a = (c.get("anchors") or {}).get(rank)
        if a:
            anchors.append(dict(a, phase=ph))
    first = anchors[0] if anchors else None
    out: dict = {"pingpong": pingpong,
                 "host_anchor": {k: v for k, v in first.items() if k != "phase"} if first else None}
    if not any("node" in c for _, c in ordered):
        return out  # a calibration of an older kind (or a stand-in): the old layout
    out["host_anchors"] = anchors
    out["gpu_host"] = [g for _, c in ordered for g in ([c["gpu_host"]] if c.get("gpu_host") else [])]
    out["host_exchange"] = [h for _, c in ordered for h in (c.get("host_exchange") or []) if int(h["peer"]) == rank]
    last = ordered[-1][1]
    for key in ("reference_rank", "node", "path", "host_clock", "host_skew"):
        if last.get(key) is not None:
            out[key] = last[key]
    out["cost_ns"] = {ph: c.get("cost_ns") or {} for ph, c in ordered}
    edges = {ph: int(c["edge_ticks"]) for ph, c in ordered if c.get("edge_ticks") is not None}
    if edges:
        out["edges"] = edges
    notes = [n for _, c in ordered for n in (c.get("notes") or [])]
    if notes:
        out["notes"] = notes
    return out
