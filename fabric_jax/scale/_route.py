"""Routing of a scale point's flows: per-flow hashed ECMP on every spine, or the
rail-symmetric candidate sets of adaptive routing and spraying, on the full fabric.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..fabrics import get_fabric
from ..paths import PathSet, PathsTruncatedWarning, mix64, shortest_paths
from ._fabric import (clos_paths, ecmp_paths, rail_symmetric_paths, tier_paths,
                      tiered_ecmp_paths)
from ._step import StepFlows

__all__ = ["DEFAULT_MAX_PATHS", "HASHED_ROUTING", "source_port", "route_flows",
           "DEFAULT_QPS", "HASH_FIELDS", "DEFAULT_HASH", "qp_split"]

#: Candidate paths per flow and plane under adaptive routing and spraying
#: (rail-symmetric subset, :func:`~fabric_jax.scale.rail_symmetric_paths`; a cost of the
#: fluid model, whose per-step work grows with paths x hops); hashed routing picks from
#: every spine.
DEFAULT_MAX_PATHS = 4
#: Routing policies that pin each flow to the path its hash picks.
HASHED_ROUTING = ("ecmp",)
#: Queue pairs (NCCL: connections' QPs, ``NCCL_IB_QPS_PER_CONNECTION``) per connection:
#: NCCL's default is 1 (NCCL environment-variable documentation; each of a
#: connection's channels already has its own QP, which the step's flows fold into one
#: flow per rank pair).
DEFAULT_QPS = 1
#: What the switches' ECMP hash sees of a connection's QPs (:func:`route_flows`):
#:
#: * ``"qp"``: each QP its own UDP source port, so its own hash.  RoCEv2 (IBTA
#:   Supplement to the InfiniBand Architecture Specification, Annex A17 RoCEv2, "the
#:   UDP source port ... used as an entropy value"): NVIDIA ConnectX NICs derive the
#:   source port from the QP (per-QP entropy; an application may set it,
#:   ``mlx5dv_modify_qp_udp_sport``, rdma-core); Meta's RoCE fabric hashes per QP and
#:   scales QPs for entropy (Gangidi et al., "RDMA over Ethernet for Distributed AI
#:   Training at Meta Scale", SIGCOMM 2024).  ``n`` QPs on ``K`` equal-cost
#:   uplinks take ``K (1 - (1 - 1/K)^n)`` distinct ones on average (balls into bins).
#: * ``"connection"``: one 5-tuple per connection (a NIC or driver with one source port
#:   per connection, or switches hashing IP addresses only): more QPs add no entropy.
#: * ``"qp_spread"``: QP ``q`` of a connection takes the uplink ``q`` places on from the
#:   connection's hashed one, so its QPs take ``min(n, K)`` distinct uplinks: source
#:   ports chosen per path (the application setting each QP's port,
#:   ``mlx5dv_modify_qp_udp_sport``), an assumption that the sender knows the leaf's
#:   hash.
HASH_FIELDS = ("qp", "connection", "qp_spread")
DEFAULT_HASH = "qp"


def source_port(seed: int, flow_id) -> np.ndarray:
    """RoCEv2 UDP source port of each flow (its ECMP entropy): a hash of the flow's
    global id and the seed, so any subset of flows gets the ports the full set has."""
    with np.errstate(over="ignore"):
        h = mix64(np.asarray(flow_id, np.uint64) * np.uint64(0xD1B54A32D192ED03)
                  + np.uint64(int(seed) & 0xFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15))
    return (49152 + h % np.uint64(16384)).astype(np.int64)


def qp_split(step: StepFlows, planes: int, qps: int) -> StepFlows:
    """Each flow as ``planes x qps`` flows of ``size / (planes qps)`` (row ``f P Q + p Q +
    q``: plane ``p``, QP ``q``; :meth:`StepFlows.stripes`): a flow that waited for the
    connection waits for every QP of it, and "the flow" finishes with its last QP."""
    return step.stripes(int(planes) * int(qps))


def route_flows(step: StepFlows, topology, fabric, *, max_paths=DEFAULT_MAX_PATHS,
                seed: int = 0, flow_ids=None, qps: int = DEFAULT_QPS,
                hash_fields: str = DEFAULT_HASH, polarized: bool = False):
    """``(flows, PathSet)`` of ``step``'s flows on ``topology`` (full-fabric link ids)
    for ``fabric``'s routing.

    Two-tier Clos (:func:`~fabric_jax.scale.clos_paths`): hashed routing
    (:data:`HASHED_ROUTING`) gets, per flow and plane, the one path its per-flow hash
    picks among every spine (:func:`~fabric_jax.scale.ecmp_paths`); on ``P`` planes each
    flow is first split into ``P`` stripes, one per plane (:meth:`StepFlows.stripes`).
    Adaptive routing and spraying get the rail-symmetric candidate set of
    :func:`~fabric_jax.scale.rail_symmetric_paths` (``max_paths``).  Other fabrics
    (three tiers of one plane, :func:`~fabric_jax.scale.tier_paths`): hashed routing
    gets the path a hash picks at each tier among every uplink
    (:func:`~fabric_jax.scale.tiered_ecmp_paths`; ``polarized``: the same hash at every
    tier), other policies :func:`fabric_jax.shortest_paths` with ``max_paths``.  Any
    other fabric: :func:`fabric_jax.shortest_paths` for every policy (ECMP then hashes
    among that subset).

    **QPs** (``qps`` = ``Q``): under hashed routing each flow (connection) runs as ``Q``
    flows of ``size / Q`` (:func:`qp_split`, per plane stripe), each hashed as
    ``hash_fields`` says (:data:`HASH_FIELDS`): ``"qp"`` its own source port,
    ``"connection"`` the connection's, ``"qp_spread"`` the connection's hash moved ``q``
    uplinks on.  Under adaptive routing and spraying the QPs of a connection share its
    candidate set and every connection has ``Q``, so the run keeps one flow per
    connection (an assumption: per-QP congestion-control dynamics there are not
    modelled).  ``Q = 1`` routes exactly as without QPs.

    Args:
      flow_ids: ``[flows]`` global id of each flow (default ``arange``): the ECMP source
        port is a function of it, so a subset routes as it does in the full set.
      qps: QPs per connection, ``>= 1``.
      hash_fields: :data:`HASH_FIELDS`.
      polarized: three tiers, hashed routing: correlated hashing at the two tiers
        (:func:`~fabric_jax.scale.tiered_ecmp_paths`).  A two-tier or multi-plane build
        hashes once per path (the leaf; the spine's way down is unique), so there is
        nothing to correlate and it routes as without: the dual-plane build of Alibaba
        HPN removes polarisation this way.
    """
    fab = get_fabric(fabric)
    qps = int(qps)
    if qps < 1:
        raise ValueError(f"qps: QPs per connection must be >= 1; got {qps}")
    if hash_fields not in HASH_FIELDS:
        raise ValueError(f"hash_fields: must be one of {HASH_FIELDS}; got {hash_fields!r}")
    ids = np.arange(step.n_flows) if flow_ids is None else np.asarray(flow_ids)
    table = clos_paths(topology)
    g = step.gpus_per_server
    hashed = fab.routing in HASHED_ROUTING
    P = 1 if table is None else table.n_planes
    if hashed:
        flows = qp_split(step, P, qps)
        conn = np.repeat(ids, P) * P + np.tile(np.arange(P), ids.size)   # stripe id
        q = np.tile(np.arange(qps), conn.size)
        conn = np.repeat(conn, qps)
        sid = conn * qps + q if hash_fields == "qp" else conn
        offset = q if hash_fields == "qp_spread" else 0
        plane = conn % P
    tiers = tier_paths(topology) if table is None else None
    if table is None and not (hashed and tiers is not None):
        flows = flows if hashed else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PathsTruncatedWarning)
            ps = shortest_paths(topology, flows.src, flows.dst, max_paths=max_paths,
                                seed=seed)
        return flows, ps
    if hashed:
        if tiers is not None:
            links = tiered_ecmp_paths(tiers, flows.src, flows.dst, source_port(seed, sid),
                                      offset=offset, polarized=polarized)[:, None, :]
        else:
            links = ecmp_paths(table, flows.src, flows.dst, plane, source_port(seed, sid),
                               offset=offset)[:, None, :]
        mask = np.ones((flows.n_flows, 1), bool)
    else:
        flows = step
        links, mask = rail_symmetric_paths(table, flows.src, flows.dst, flows.src // g,
                                           flows.dst // g, max_paths, seed)
    return flows, PathSet(src=flows.src.astype(np.int32), dst=flows.dst.astype(np.int32),
                          links=links, path_mask=mask, hop_mask=links >= 0,
                          n_paths=mask.sum(1).astype(np.int32))
