"""Routing of a scale point's flows: per-flow hashed ECMP on every spine, or the
rail-symmetric candidate sets of adaptive routing and spraying, on the full fabric.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..fabrics import get_fabric
from ..paths import PathSet, PathsTruncatedWarning, mix64, shortest_paths
from ._fabric import clos_paths, ecmp_paths, rail_symmetric_paths
from ._step import StepFlows

__all__ = ["DEFAULT_MAX_PATHS", "HASHED_ROUTING", "source_port", "route_flows"]

#: Candidate paths per flow and plane under adaptive routing and spraying
#: (rail-symmetric subset, :func:`~fabric_jax.scale.rail_symmetric_paths`; a cost of the
#: fluid model, whose per-step work grows with paths x hops); hashed routing picks from
#: every spine.
DEFAULT_MAX_PATHS = 4
#: Routing policies that pin each flow to the path its hash picks.
HASHED_ROUTING = ("ecmp",)


def source_port(seed: int, flow_id) -> np.ndarray:
    """RoCEv2 UDP source port of each flow (its ECMP entropy): a hash of the flow's
    global id and the seed, so any subset of flows gets the ports the full set has."""
    with np.errstate(over="ignore"):
        h = mix64(np.asarray(flow_id, np.uint64) * np.uint64(0xD1B54A32D192ED03)
                  + np.uint64(int(seed) & 0xFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15))
    return (49152 + h % np.uint64(16384)).astype(np.int64)


def route_flows(step: StepFlows, topology, fabric, *, max_paths=DEFAULT_MAX_PATHS,
                seed: int = 0, flow_ids=None):
    """``(flows, PathSet)`` of ``step``'s flows on ``topology`` (full-fabric link ids)
    for ``fabric``'s routing.

    Two-tier Clos (:func:`~fabric_jax.scale.clos_paths`): hashed routing
    (:data:`HASHED_ROUTING`) gets, per flow and plane, the one path its per-flow hash
    picks among every spine (:func:`~fabric_jax.scale.ecmp_paths`); on ``P`` planes each
    flow is first split into ``P`` stripes, one per plane (:meth:`StepFlows.stripes`).
    Adaptive routing and spraying get the rail-symmetric candidate set of
    :func:`~fabric_jax.scale.rail_symmetric_paths` (``max_paths``).  Other fabrics
    (three tiers): :func:`fabric_jax.shortest_paths` with ``max_paths`` for every policy
    (ECMP then hashes among that subset).

    Args:
      flow_ids: ``[flows]`` global id of each flow (default ``arange``): the ECMP source
        port is a function of it, so a subset routes as it does in the full set.
    """
    fab = get_fabric(fabric)
    ids = np.arange(step.n_flows) if flow_ids is None else np.asarray(flow_ids)
    table = clos_paths(topology)
    g = step.gpus_per_server
    if table is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PathsTruncatedWarning)
            ps = shortest_paths(topology, step.src, step.dst, max_paths=max_paths, seed=seed)
        return step, ps
    if fab.routing in HASHED_ROUTING:
        P = table.n_planes
        flows = step.stripes(P)
        sid = np.repeat(ids, P) * P + np.tile(np.arange(P), ids.size)
        links = ecmp_paths(table, flows.src, flows.dst, np.tile(np.arange(P), ids.size),
                           source_port(seed, sid))[:, None, :]
        mask = np.ones((flows.n_flows, 1), bool)
    else:
        flows = step
        links, mask = rail_symmetric_paths(table, flows.src, flows.dst, flows.src // g,
                                           flows.dst // g, max_paths, seed)
    return flows, PathSet(src=flows.src.astype(np.int32), dst=flows.dst.astype(np.int32),
                          links=links, path_mask=mask, hop_mask=links >= 0,
                          n_paths=mask.sum(1).astype(np.int32))
