"""Routing problems: commodities, their candidate paths, and the links they share.

A :class:`RoutingProblem` is the host-side description every routing optimiser, baseline
and LP here works on.  A *pair* (a commodity) is a (source, destination[, tenant])
aggregate of traffic with ``demand`` bytes/s and up to ``paths`` candidate paths; a
routing is a ``[pairs, paths]`` split (rows sum to one, zero on padded paths).  Link
load, bytes/s, is

    load_l = base_load_l + sum over (pair, path, hop) with link(pair, path, hop) = l
                           of demand_pair * split_(pair, path)

and the utilisation is ``load_l / capacity_l`` on links with positive capacity.
``base_load`` is traffic whose route is fixed (host access links after aggregation,
single-path pairs, other tenants held constant).

Aggregation to switch pairs (``aggregate=True``).  In a Clos fabric every host hangs off
one switch (its *anchor*, as in :mod:`fabric_jax.paths`), so all host pairs between the
same two anchors have the same candidate paths beyond their access links, and the access
links carry the same load whatever the routing.  Merging them into one commodity is
exact for link loads and for the min-MLU LP (any per-host routing aggregates to a
per-anchor one with the same fabric loads, and conversely), and shrinks an all-to-all
on 1,024 hosts from about a million pairs to 16,256 leaf pairs.  It is *not* exact for
per-flow max-min sharing, so the completion-time objective needs ``aggregate=False``.
The host-level flows are remembered (``flow_pair``) so that per-flow ECMP hashing can be
evaluated on the aggregate.

Units: demand and load in bytes/s, capacity in bytes/s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from ..paths import PathSet, host_anchors, shortest_paths
from ..topology import Topology, host_indices

__all__ = ["RoutingProblem", "routing_problem"]


@dataclasses.dataclass(frozen=True, eq=False)
class RoutingProblem:
    """Commodities with candidate paths over a set of links (host side, NumPy).

    Attributes:
      links: ``[pairs, paths, hops]`` int32 link ids, -1 in padding.
      hop_mask: ``[pairs, paths, hops]`` bool, hops that count (a link, not padding and
        not an access link folded into ``base_load``).
      path_mask: ``[pairs, paths]`` bool, valid candidate paths.
      capacity: ``[links]`` float64 bytes/s; 0 for failed links.
      demand: ``[pairs]`` float64 bytes/s.
      base_load: ``[links]`` float64 bytes/s of traffic with a fixed route.
      tenant: ``[pairs]`` int32 index into ``tenant_names``.
      tenant_names: names of the tenants.
      pair_src: ``[pairs]`` host index of each pair's (representative) source.
      pair_dst: ``[pairs]`` host index of each pair's (representative) destination.
      flow_pair: ``[flows]`` int32 pair carrying each input flow, -1 for flows that
        never leave their anchor switch (their load is in ``base_load``).
      flow_demand: ``[flows]`` float64 bytes/s of each input flow.
      flow_access: ``[flows, 2]`` int32 access (up, down) link of each input flow whose
        load was folded into ``base_load`` (-1: none).
      extra_load: ``[links]`` float64 the caller's own fixed load (part of
        ``base_load``).
      link_names: ``[links]`` ``"u->v"`` labels for reports (may be empty).
      pair_names: ``[pairs]`` labels for reports.
    """

    links: np.ndarray
    hop_mask: np.ndarray
    path_mask: np.ndarray
    capacity: np.ndarray
    demand: np.ndarray
    base_load: np.ndarray
    tenant: np.ndarray
    tenant_names: tuple[str, ...]
    pair_src: np.ndarray
    pair_dst: np.ndarray
    flow_pair: np.ndarray
    flow_demand: np.ndarray
    flow_access: np.ndarray = None
    extra_load: np.ndarray = None
    link_names: tuple[str, ...] = ()
    pair_names: tuple[str, ...] = ()

    @property
    def n_pairs(self) -> int:
        return int(self.links.shape[0])

    @property
    def max_paths(self) -> int:
        return int(self.links.shape[1])

    @property
    def n_links(self) -> int:
        return int(self.capacity.shape[0])

    @property
    def n_tenants(self) -> int:
        return len(self.tenant_names)

    @property
    def n_paths(self) -> np.ndarray:
        """``[pairs]`` number of valid candidate paths."""
        return self.path_mask.sum(axis=1).astype(np.int32)

    def __post_init__(self):
        if self.flow_access is None:
            object.__setattr__(self, "flow_access",
                               np.full((self.flow_pair.size, 2), -1, np.int32))
        if self.extra_load is None:
            object.__setattr__(self, "extra_load", np.asarray(self.base_load, np.float64))

    def flow_traffic(self, flow_demand) -> tuple[np.ndarray, np.ndarray]:
        """``(demand [pairs], base_load [links])`` of new per-flow demands (bytes/s).

        The same flows (sources, destinations, tenants) with other rates: a new
        traffic matrix over the same candidate paths.  Access-link loads folded into
        ``base_load`` by aggregation are recomputed.
        """
        fd = _check_demand(flow_demand, self.flow_pair.size, "flow_demand")
        routed = self.flow_pair >= 0
        demand = np.bincount(self.flow_pair[routed], fd[routed], minlength=self.n_pairs)
        base = self.extra_load.copy()
        for col in range(2):
            acc = self.flow_access[:, col]
            base += np.bincount(np.maximum(acc, 0), np.where(acc >= 0, fd, 0.0),
                                minlength=self.n_links)
        return demand, base

    def with_flow_demand(self, flow_demand) -> "RoutingProblem":
        """Same flows and paths, new per-flow demands (see :meth:`flow_traffic`)."""
        demand, base = self.flow_traffic(flow_demand)
        return dataclasses.replace(self, demand=demand, base_load=base,
                                   flow_demand=np.asarray(flow_demand, np.float64))

    def with_demand(self, demand) -> "RoutingProblem":
        """Same paths, new ``[pairs]`` demand (bytes/s); ``base_load`` is kept, input
        flows scale along (use :meth:`with_flow_demand` to change a traffic matrix of
        aggregated flows, whose access-link loads are part of ``base_load``)."""
        d = _check_demand(demand, self.n_pairs, "demand")
        old = self.demand
        ratio = np.where(old > 0, d / np.where(old > 0, old, 1.0), 0.0)
        fp = np.maximum(self.flow_pair, 0)
        flow_demand = np.where(self.flow_pair >= 0, self.flow_demand * ratio[fp],
                               self.flow_demand)
        return dataclasses.replace(self, demand=d, flow_demand=flow_demand)

    def link_load(self, split, demand=None, base_load=None) -> np.ndarray:
        """``[links]`` bytes/s under a ``[pairs, paths]`` split (host, float64).

        ``demand`` ``[pairs]`` and ``base_load`` ``[links]`` default to the problem's.
        """
        split = check_split(self, split)
        d = self.demand if demand is None else np.asarray(demand, np.float64)
        w = np.where(self.hop_mask, (d[:, None] * split)[:, :, None], 0.0)
        load = np.bincount(np.where(self.hop_mask, self.links, 0).ravel(), w.ravel(),
                           minlength=self.n_links)
        return load + (self.base_load if base_load is None else base_load)

    def utilization(self, split, demand=None, base_load=None) -> np.ndarray:
        """``[links]`` load / capacity (0 on zero-capacity links)."""
        load = self.link_load(split, demand, base_load)
        cap = self.capacity
        return np.where(cap > 0, load / np.where(cap > 0, cap, 1.0), 0.0)

    def mlu(self, split, demand=None, base_load=None) -> float:
        """Maximum link utilisation of a split (exact, host)."""
        return float(self.utilization(split, demand, base_load).max(initial=0.0))

    def arrays(self, dtype=None) -> "ProblemArrays":
        """Device arrays of this problem (a pytree for jitted code)."""
        dtype = jnp.result_type(float) if dtype is None else dtype
        cap = self.capacity
        inv = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), 0.0)
        return ProblemArrays(
            link_idx=jnp.asarray(np.where(self.hop_mask, self.links, 0), jnp.int32),
            hop_w=jnp.asarray(self.hop_mask, dtype),
            path_mask=jnp.asarray(self.path_mask),
            capacity=jnp.asarray(cap, dtype),
            inv_capacity=jnp.asarray(inv, dtype),
            link_ok=jnp.asarray(cap > 0),
            demand=jnp.asarray(self.demand, dtype),
            base_load=jnp.asarray(self.base_load, dtype),
            tenant=jnp.asarray(self.tenant, jnp.int32),
        )


class ProblemArrays(NamedTuple):
    """Device-side arrays of a :class:`RoutingProblem` (all leaves traced under jit)."""

    link_idx: Any      # [pairs, paths, hops] int32 (padding -> 0, masked by hop_w)
    hop_w: Any         # [pairs, paths, hops] float 1/0
    path_mask: Any     # [pairs, paths] bool
    capacity: Any      # [links] bytes/s
    inv_capacity: Any  # [links] 1/bytes/s, 0 on zero-capacity links
    link_ok: Any       # [links] bool, capacity > 0
    demand: Any        # [pairs] bytes/s
    base_load: Any     # [links] bytes/s
    tenant: Any        # [pairs] int32


# --------------------------------------------------------------- validation
def _check_demand(demand, n, name):
    d = np.asarray(demand, np.float64)
    if d.shape != (n,):
        raise ValueError(f"{name} must have shape [pairs] = ({n},); got {d.shape}")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError(f"{name} must be finite and >= 0 bytes/s")
    return d


def check_split(problem: RoutingProblem, split) -> np.ndarray:
    """Validates a host ``[pairs, paths]`` split; returns it as float64."""
    s = np.asarray(split, np.float64)
    if s.shape != problem.path_mask.shape:
        raise ValueError(f"split must have shape [pairs, paths] = {problem.path_mask.shape}; "
                         f"got {s.shape}")
    if not np.all(np.isfinite(s)) or np.any(s < -1e-9):
        raise ValueError("split must be finite and >= 0")
    if np.any(s[~problem.path_mask] != 0):
        raise ValueError("split puts weight on invalid (padded) paths; zero it where "
                         "path_mask is False")
    if not np.allclose(s.sum(axis=1), 1.0, atol=1e-4):
        raise ValueError("split rows must sum to 1 (each pair's demand is fully routed)")
    return np.maximum(s, 0.0)


def check_flow_level(problem: RoutingProblem):
    """Raises unless every pair is one input flow with its whole path (per-flow
    objectives: max-min sharing and fluid dynamics are not preserved by aggregation)."""
    identity = (problem.flow_pair.size == problem.n_pairs
                and np.array_equal(problem.flow_pair, np.arange(problem.n_pairs)))
    if not identity or np.any(problem.flow_access >= 0):
        raise ValueError("completion-time and fluid objectives need one pair per flow with "
                         "its access links: build the problem with aggregate=False")
    if not np.all(problem.hop_mask.sum(axis=-1)[problem.path_mask] > 0):
        raise ValueError("every candidate path must cross at least one link")


def _capacity_of(topology_or_capacity, n_links=None):
    if isinstance(topology_or_capacity, Topology):
        t = topology_or_capacity
        return np.where(t.link_up, t.capacity, 0.0).astype(np.float64), _link_names(t)
    cap = np.asarray(topology_or_capacity, np.float64)
    if cap.ndim != 1:
        raise ValueError(f"capacity must be a Topology or a [links] array of bytes/s; got "
                         f"shape {cap.shape}")
    if not np.all(np.isfinite(cap)) or np.any(cap < 0):
        raise ValueError("capacity must be finite and >= 0 bytes/s (0 for a failed link)")
    return cap, ()


def _link_names(t: Topology) -> tuple[str, ...]:
    names = np.asarray(t.node_names, dtype=object)
    return tuple(f"{a}->{b}" for a, b in zip(names[t.link_src], names[t.link_dst]))


def _tenants(tenant, n, tenant_names):
    if tenant is None:
        tid = np.zeros(n, np.int32)
        names = tuple(tenant_names) if tenant_names is not None else ("all",)
        return tid, names
    t = np.asarray(tenant)
    if t.shape != (n,):
        raise ValueError(f"tenant must have shape [flows] = ({n},); got {t.shape}")
    if t.dtype.kind in "USO":
        uniq, tid = np.unique(t.astype(str), return_inverse=True)
        names = tuple(str(u) for u in uniq)
        if tenant_names is not None:
            raise ValueError("tenant_names is only for integer tenant ids; tenant holds "
                             "names already")
        return tid.astype(np.int32), names
    if not np.issubdtype(t.dtype, np.integer) or (t.size and t.min() < 0):
        raise ValueError("tenant must hold non-negative integer ids or names")
    k = int(t.max(initial=-1)) + 1
    names = (tuple(tenant_names) if tenant_names is not None
             else tuple(f"tenant{i}" for i in range(k)))
    if len(names) < k:
        raise ValueError(f"tenant_names has {len(names)} names but tenant ids go up to "
                         f"{k - 1}")
    return t.astype(np.int32), names


# ------------------------------------------------------------------ builders
def routing_problem(topology: Topology, src, dst, demand, *, tenant=None,
                    tenant_names=None, aggregate: bool = False, max_paths: int | None = None,
                    seed: int = 0, base_load=None) -> RoutingProblem:
    """Builds a :class:`RoutingProblem` from host-level flows on a topology.

    Args:
      topology: the fabric (failed links have capacity 0 and are avoided by paths).
      src: ``[flows]`` source host indices (or names).
      dst: ``[flows]`` destination host indices (or names).
      demand: ``[flows]`` bytes/s of each flow (a traffic matrix in COO form).
      tenant: optional ``[flows]`` tenant id (int) or name of each flow.
      tenant_names: names of integer tenant ids.
      aggregate: merge flows between the same two anchor switches (and tenant) into one
        pair, with access-link loads moved to ``base_load`` (exact for link loads and
        the MLU LP; see the module docstring).  Flows inside one anchor switch become
        pure ``base_load``.
      max_paths: candidate paths per pair (see :func:`~fabric_jax.paths.shortest_paths`);
        ``None`` (default): every equal-cost path.
      seed: seed of the candidate subset when a pair has more than ``max_paths``.
      base_load: optional extra ``[links]`` bytes/s with a fixed route.

    Returns:
      A :class:`RoutingProblem`; without aggregation pair ``i`` is flow ``i``.

    Raises:
      ValueError: bad shapes or values, or unreachable pairs (from ``shortest_paths``).
    """
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology; got {type(topology).__name__}")
    src_h = host_indices(topology, src, "src").reshape(-1)
    dst_h = host_indices(topology, dst, "dst").reshape(-1)
    if src_h.shape != dst_h.shape:
        raise ValueError(f"src and dst must have the same length; got {src_h.size} and "
                         f"{dst_h.size}")
    n_flows = src_h.size
    flow_demand = _check_demand(demand, n_flows, "demand")
    tid, names = _tenants(tenant, n_flows, tenant_names)
    capacity, link_names = _capacity_of(topology)
    base = np.zeros(topology.n_links)
    if base_load is not None:
        base = np.asarray(base_load, np.float64)
        if base.shape != (topology.n_links,) or not np.all(np.isfinite(base)) or np.any(base < 0):
            raise ValueError(f"base_load must be a finite, non-negative [links] = "
                             f"({topology.n_links},) array of bytes/s")
        base = base.copy()
    host_names = topology.host_names

    if not aggregate:
        ps = shortest_paths(topology, src_h, dst_h, max_paths=max_paths, seed=seed)
        pair_names = tuple(f"{host_names[s]}->{host_names[d]}" for s, d in zip(src_h, dst_h))
        return RoutingProblem(
            links=ps.links, hop_mask=ps.hop_mask, path_mask=ps.path_mask,
            capacity=capacity, demand=flow_demand, base_load=base, tenant=tid,
            tenant_names=names, pair_src=src_h.astype(np.int32),
            pair_dst=dst_h.astype(np.int32), flow_pair=np.arange(n_flows, dtype=np.int32),
            flow_demand=flow_demand, link_names=link_names, pair_names=pair_names)

    extra = base.copy()
    anchor, uplink, downlink = host_anchors(topology)
    a_src, a_dst = anchor[src_h], anchor[dst_h]
    up, down = uplink[src_h], downlink[dst_h]
    # Access links carry every flow of their host whatever the routing.
    base += np.bincount(np.maximum(up, 0), np.where(up >= 0, flow_demand, 0.0),
                        minlength=topology.n_links)
    base += np.bincount(np.maximum(down, 0), np.where(down >= 0, flow_demand, 0.0),
                        minlength=topology.n_links)
    local = (a_src == a_dst) & (up >= 0) & (down >= 0)
    keyed = np.flatnonzero(~local)
    n_nodes = topology.n_nodes
    keys = (tid[keyed].astype(np.int64) * n_nodes + a_src[keyed]) * n_nodes + a_dst[keyed]
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    flow_pair = np.full(n_flows, -1, np.int32)
    flow_pair[keyed] = inverse.reshape(-1)
    rep = keyed[first]                         # representative flow of each pair
    pair_demand = np.bincount(inverse.reshape(-1), flow_demand[keyed],
                              minlength=rep.size)
    ps = shortest_paths(topology, src_h[rep], dst_h[rep], max_paths=max_paths, seed=seed)
    # Drop the representative's access links: their load is in base_load already.
    hop_mask = ps.hop_mask.copy()
    hop_mask &= ps.links != up[rep][:, None, None]
    hop_mask &= ps.links != down[rep][:, None, None]
    node_names = topology.node_names
    pair_names = tuple(f"{node_names[a]}=>{node_names[b]}"
                       for a, b in zip(a_src[rep], a_dst[rep]))
    if len(names) > 1:
        pair_names = tuple(f"{p} [{names[t]}]" for p, t in zip(pair_names, tid[rep]))
    return RoutingProblem(
        links=ps.links, hop_mask=hop_mask, path_mask=ps.path_mask, capacity=capacity,
        demand=pair_demand, base_load=base, tenant=tid[rep], tenant_names=names,
        pair_src=src_h[rep].astype(np.int32), pair_dst=dst_h[rep].astype(np.int32),
        flow_pair=flow_pair, flow_demand=flow_demand,
        flow_access=np.stack([up, down], axis=1).astype(np.int32), extra_load=extra,
        link_names=link_names, pair_names=pair_names)


def problem_from_paths(paths: PathSet, capacity, demand, *, tenant=None,
                       tenant_names=None, base_load=None) -> RoutingProblem:
    """A :class:`RoutingProblem` from an explicit PathSet (one pair per path row).

    Args:
      paths: candidate paths (e.g. hand-built for a small instance).
      capacity: a Topology, or ``[links]`` bytes/s.
      demand: ``[pairs]`` bytes/s.
      tenant, tenant_names, base_load: as in :func:`routing_problem`.
    """
    if not isinstance(paths, PathSet):
        raise ValueError(f"paths must be a PathSet; got {type(paths).__name__}")
    cap, link_names = _capacity_of(capacity)
    n_pairs = paths.n_pairs
    if paths.links.size and paths.links.max() >= cap.size:
        raise ValueError(f"paths use link {int(paths.links.max())} but capacity has "
                         f"{cap.size} links")
    d = _check_demand(demand, n_pairs, "demand")
    tid, names = _tenants(tenant, n_pairs, tenant_names)
    base = np.zeros(cap.size) if base_load is None else np.asarray(base_load, np.float64)
    if base.shape != cap.shape or np.any(base < 0) or not np.all(np.isfinite(base)):
        raise ValueError(f"base_load must be a finite, non-negative [links] = {cap.shape} array")
    if np.any(paths.n_paths < 1):
        raise ValueError("every pair needs at least one valid path (paths.n_paths >= 1)")
    return RoutingProblem(
        links=np.asarray(paths.links, np.int32), hop_mask=np.asarray(paths.hop_mask, bool),
        path_mask=np.asarray(paths.path_mask, bool), capacity=cap, demand=d,
        base_load=base, tenant=tid, tenant_names=names,
        pair_src=np.asarray(paths.src, np.int32), pair_dst=np.asarray(paths.dst, np.int32),
        flow_pair=np.arange(n_pairs, dtype=np.int32), flow_demand=d,
        link_names=link_names,
        pair_names=tuple(f"{s}->{t}" for s, t in zip(paths.src, paths.dst)))
