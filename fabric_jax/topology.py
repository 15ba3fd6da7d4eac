"""Network topologies: nodes, directed links, and the builders of common AI fabrics.

A :class:`Topology` is a directed multigraph held as flat NumPy arrays on the host.
Nodes are hosts (NICs that send and receive traffic) or switches; a full-duplex cable
is two *links*, one per direction, and each link has its own

* ``capacity`` in bytes/s,
* ``latency`` in seconds (propagation plus switch traversal, charged once per hop),
* ``buffer`` in bytes (the egress queue in front of the link),
* ``link_up`` (``False`` once failed).

Hosts are addressed everywhere else in fabric_jax by their *host index*
``0 .. n_hosts-1``; ``hosts[h]`` is the node id of host ``h``.  ``node_tier`` orders
switches for up/down (valley-free) routing: 0 host, 1 leaf / edge / rail leaf,
2 spine / aggregation, 3 core.

Builders (all sizes in the unit named by the argument, converted here to bytes, seconds
and bytes/s with :mod:`fabric_jax.units`):

* :func:`leaf_spine` -- two-tier folded Clos, optionally oversubscribed, multi-plane
  (``planes=``) or three-tier (``tiers=3``: pods of leaves and spines under a
  super-spine layer);
* :func:`fat_tree` -- the three-tier k-ary fat-tree of Al-Fares et al. (SIGCOMM 2008);
* :func:`rail_optimized` -- GPU servers whose NIC ``i`` attaches to rail leaf ``i``
  (NVIDIA DGX SuperPOD reference architecture); same ``oversubscription=``,
  ``planes=`` and ``tiers=3`` options;
* :func:`from_edges` -- any graph, from an edge list or a networkx graph.

Server model (opt-in, ``gpus_per_server=...`` on every builder): hosts become GPUs.
Each server gets an NVSwitch node that every GPU of the server reaches over one NVLink
cable (``nvlink_gbps`` per direction: the whole NVLink bandwidth of a GPU, as NVSwitch
fabrics are non-blocking), and each NIC of the fabric becomes a non-host node (tier 1)
that its GPUs reach over a PCIe cable (``pcie_gbps``); GPU ``g`` of a server uses NIC
``g * nics_per_server // gpus_per_server``.  Switch tiers shift up by one (leaf 2,
spine 3, core 4).  Min-hop routing then sends intra-server traffic over NVLink (GPU ->
NVSwitch -> GPU, 2 hops) and inter-server traffic over PCIe, the NICs and the fabric
(>= 4 hops); hosts never forward, so nothing crosses another GPU.  Without
``gpus_per_server`` the builders are unchanged (hosts are NICs).  See
:func:`with_servers` and :mod:`fabric_jax.systems` for named servers.

Real topologies (issue 14).  *Multi-plane*: ``planes=P`` splits each NIC over P
independent copies of the switch layers (``link_gbps / P`` per port; Spectrum-X
Multiplane, Alibaba HPN dual-plane, DeepSeek's multi-plane fat-tree); paths never leave
a plane, and :func:`fabric_jax.paths.shortest_paths` returns the equal-cost paths of
all planes, so ECMP, spraying and adaptive routing spread over them.
*Oversubscribed leaves*: ``oversubscription=r`` gives each leaf ``1/r`` of its
downlink bandwidth upwards (slower uplinks, or fewer uplinks and spines).  *Three
tiers*: ``tiers=3`` adds pods and a super-spine layer wired as the k-ary fat-tree of
Al-Fares et al. generalised (spine ``j`` of every pod to super-spine group ``j``).

Switch radix (opt-in, ``switch_radix=...`` on :func:`leaf_spine` and
:func:`rail_optimized`): a ``ValueError`` when a leaf, spine or super-spine would need
more ports than the radix (e.g. 64 for a 64 x 800G Quantum-X800 / Spectrum-4 class
switch, 128 for 128 x 400G), naming the fixes: ``tiers=3`` or ``planes=``.  Builders
refuse rather than silently grow a tier, so node and link numbering only change when
asked for.

Default link parameters: 400 Gb/s, 1 us per link (the per-link delay of the HPCC
simulations, Li et al. SIGCOMM 2019, Sec. 5.1) and 1 MB of buffer per egress port
(a 64 MB shared-buffer 64 x 400G switch, Tomahawk-4 class, split evenly).

Example::

    topo = fat_tree(4)                     # 16 hosts, 20 switches, 96 links
    topo = topo.with_failed_links([("pod0/agg0", "core0")], bidirectional=True)
    topo.bisection_bandwidth()             # bytes/s across the host-index halves

Topologies are immutable: ``with_failed_links`` and ``with_capacity_scaled`` return new
ones.  Paths over a topology come from :func:`fabric_jax.paths.shortest_paths`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import units

__all__ = [
    "Topology",
    "fat_tree",
    "from_edges",
    "leaf_spine",
    "rail_optimized",
    "with_servers",
]

#: Kinds whose ``node_tier`` is a strict Clos layering: routing there is up/down.
CLOS_KINDS = ("leaf_spine", "fat_tree", "rail_optimized")

DEFAULT_LINK_GBPS = 400.0
DEFAULT_LATENCY_US = 1.0
DEFAULT_BUFFER_KB = 1000.0

#: H100 SXM NVLink4: 18 links x 25 GB/s per direction = 450 GB/s = 3600 Gb/s (NVIDIA
#: H100 Tensor Core GPU datasheet; NVIDIA "NVLink and NVSwitch" product page).
DEFAULT_NVLINK_GBPS = 3600.0
#: PCIe Gen5 x16: 32 GT/s x 16 lanes = 512 Gb/s raw per direction (PCI-SIG PCIe 5.0).
DEFAULT_PCIE_GBPS = 512.0
#: One NVSwitch traversal (GPU -> NVSwitch or back), microseconds; an assumption of the
#: order of a cut-through switch hop.  NCCL's per-step software costs are charged by
#: :mod:`fabric_jax.collectives`, not here.
DEFAULT_NVLINK_LATENCY_US = 0.1
#: GPU <-> NIC over the PCIe switch, microseconds (assumption, same order).
DEFAULT_PCIE_LATENCY_US = 0.1

# scipy's maximum_flow silently works in int32: integer capacities must keep every
# flow value (at most the sum of all capacities) below 2**31.
_MAXFLOW_TOTAL_UNITS = 2**30


def _frozen_array(x, dtype) -> np.ndarray:
    a = np.array(x, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Topology:
    """A network: named nodes and directed links with capacity, latency and buffer.

    Attributes:
      node_names: ``[nodes]`` unique node names.
      node_is_host: ``[nodes]`` bool, True for hosts (traffic end points).
      node_tier: ``[nodes]`` int, 0 host, 1 leaf/edge/rail leaf, 2 spine/aggregation,
        3 core/super-spine.
      hosts: ``[hosts]`` int32 node id of each host index.
      link_src: ``[links]`` int32 node id the link leaves.
      link_dst: ``[links]`` int32 node id the link enters.
      capacity: ``[links]`` float64 bytes/s.
      latency: ``[links]`` float64 seconds.
      buffer: ``[links]`` float64 bytes of egress buffer in front of the link.
      link_up: ``[links]`` bool, False for failed links.
      link_reverse: ``[links]`` int32 id of the other direction of the same cable, -1
        for a one-way link.
      host_server: ``[hosts]`` int32 server of each host; hosts of one server talk over
        NVLink, not the fabric (``rail_optimized``); elsewhere each host is its own
        server.
      name: human-readable name, e.g. ``"fat_tree(k=4)"``.
      kind: ``"leaf_spine"``, ``"fat_tree"``, ``"rail_optimized"`` or ``"graph"``.
      params: builder parameters (e.g. ``{"k": 4}``); treat as read-only.
      updown: route valley-free (up the tiers, then down) -- True for Clos kinds.
      host_transit: whether hosts may forward traffic between other nodes.
    """

    node_names: tuple[str, ...]
    node_is_host: np.ndarray
    node_tier: np.ndarray
    hosts: np.ndarray
    link_src: np.ndarray
    link_dst: np.ndarray
    capacity: np.ndarray
    latency: np.ndarray
    buffer: np.ndarray
    link_up: np.ndarray
    link_reverse: np.ndarray
    host_server: np.ndarray
    name: str = "topology"
    kind: str = "graph"
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    updown: bool = False
    host_transit: bool = False

    def __post_init__(self):
        put = functools.partial(object.__setattr__, self)
        names = tuple(str(n) for n in self.node_names)
        put("node_names", names)
        n_nodes = len(names)
        if len(set(names)) != n_nodes:
            seen, dup = set(), []
            for n in names:
                if n in seen:
                    dup.append(n)
                seen.add(n)
            raise ValueError(f"node_names must be unique; duplicated: {dup[:5]}")
        for field, dtype in (("node_is_host", bool), ("node_tier", np.int32),
                             ("hosts", np.int32), ("link_src", np.int32),
                             ("link_dst", np.int32), ("capacity", np.float64),
                             ("latency", np.float64), ("buffer", np.float64),
                             ("link_up", bool), ("link_reverse", np.int32),
                             ("host_server", np.int32)):
            value = np.asarray(getattr(self, field))
            if value.ndim != 1:
                raise ValueError(f"{field} must be a 1-D array; got shape {value.shape}")
            put(field, _frozen_array(value, dtype))
        put("params", dict(self.params))  # a copy; treat as read-only
        for field in ("node_is_host", "node_tier"):
            if getattr(self, field).shape != (n_nodes,):
                raise ValueError(f"{field} must have shape [nodes] = ({n_nodes},); "
                                 f"got {getattr(self, field).shape}")
        n_links = self.link_src.shape[0]
        for field in ("link_dst", "capacity", "latency", "buffer", "link_up",
                      "link_reverse"):
            if getattr(self, field).shape != (n_links,):
                raise ValueError(f"{field} must have shape [links] = ({n_links},) like "
                                 f"link_src; got {getattr(self, field).shape}")
        for field in ("link_src", "link_dst", "hosts"):
            ids = getattr(self, field)
            if ids.size and (ids.min() < 0 or ids.max() >= n_nodes):
                raise ValueError(f"{field} holds node ids outside [0, {n_nodes})")
        if np.any(self.link_src == self.link_dst):
            bad = int(np.flatnonzero(self.link_src == self.link_dst)[0])
            raise ValueError(f"link {bad} is a self-loop at node "
                             f"{names[self.link_src[bad]]!r}; remove it from the links")
        if not np.all(np.isfinite(self.capacity) & (self.capacity > 0)):
            raise ValueError("capacity must be finite and > 0 bytes/s on every link "
                             "(fail a link with with_failed_links instead of zeroing it)")
        for field in ("latency", "buffer"):
            v = getattr(self, field)
            if not np.all(np.isfinite(v) & (v >= 0)):
                raise ValueError(f"{field} must be finite and >= 0 on every link")
        rev = self.link_reverse
        has = rev >= 0
        if np.any(rev >= n_links) or np.any(rev < -1):
            raise ValueError(f"link_reverse must be -1 or a link id in [0, {n_links})")
        ids = np.flatnonzero(has)
        if ids.size and (np.any(rev[rev[ids]] != ids)
                         or np.any(self.link_src[rev[ids]] != self.link_dst[ids])
                         or np.any(self.link_dst[rev[ids]] != self.link_src[ids])):
            raise ValueError("link_reverse must pair each link with a link in the "
                             "opposite direction between the same two nodes")
        if len(np.unique(self.hosts)) != self.hosts.size or not np.array_equal(
                np.sort(self.hosts), np.flatnonzero(self.node_is_host)):
            raise ValueError("hosts must list every node with node_is_host=True exactly "
                             "once")
        if self.host_server.shape != self.hosts.shape or np.any(self.host_server < 0):
            raise ValueError("host_server must be a [hosts] array of ids >= 0")
        if np.any(self.node_tier[self.node_is_host] != 0) or np.any(
                self.node_tier[~self.node_is_host] < 1):
            raise ValueError("node_tier must be 0 for hosts and >= 1 for switches")

    # ------------------------------------------------------------------ sizes
    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_links(self) -> int:
        return int(self.link_src.shape[0])

    @property
    def n_hosts(self) -> int:
        return int(self.hosts.shape[0])

    @property
    def n_switches(self) -> int:
        return self.n_nodes - self.n_hosts

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(self.node_names[i] for i in self.hosts)

    def __repr__(self) -> str:
        down = int(np.count_nonzero(~self.link_up))
        return (f"Topology({self.name!r}, kind={self.kind!r}, hosts={self.n_hosts}, "
                f"switches={self.n_switches}, links={self.n_links}, down={down})")

    # ------------------------------------------------------------------ lookups
    @functools.cached_property
    def _node_of_name(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.node_names)}

    @functools.cached_property
    def _host_of_node(self) -> np.ndarray:
        h = np.full(self.n_nodes, -1, np.int64)
        h[self.hosts] = np.arange(self.n_hosts)
        return h

    def node_index(self, name: str) -> int:
        """Node id of ``name``; ValueError naming it when unknown."""
        try:
            return self._node_of_name[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown node name {name!r} (topology {self.name!r} has "
                             f"e.g. {list(self.node_names[:3])})") from None

    def link_indices(self, src_name: str, dst_name: str) -> np.ndarray:
        """All link ids from ``src_name`` to ``dst_name`` (parallel cables), ascending."""
        s, d = self.node_index(src_name), self.node_index(dst_name)
        ids = np.flatnonzero((self.link_src == s) & (self.link_dst == d))
        if ids.size == 0:
            raise ValueError(f"no link from {src_name!r} to {dst_name!r}")
        return ids

    def link_index(self, src_name: str, dst_name: str) -> int:
        """Id of the (lowest-numbered) link from ``src_name`` to ``dst_name``."""
        return int(self.link_indices(src_name, dst_name)[0])

    def host_index(self, name_or_index):
        """Host index of a host name or index (scalar -> int, array-like -> array)."""
        idx = _host_indices(self, name_or_index, "name_or_index")
        return int(idx) if idx.ndim == 0 else idx

    # ------------------------------------------------------------------ failures
    def _resolve_links(self, links, bidirectional: bool, arg: str = "links") -> np.ndarray:
        """Link ids from ids, a bool mask, or (src_name, dst_name) pairs."""
        if isinstance(links, tuple) and len(links) == 2 and all(
                isinstance(x, str) for x in links):
            links = [links]
        if isinstance(links, (Sequence, np.ndarray)) and not isinstance(links, str) \
                and len(links) > 0 and all(isinstance(x, (tuple, list)) for x in links):
            ids = []
            for pair in links:
                if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                    raise ValueError(f"{arg}: a link named by nodes must be a "
                                     f"(src_name, dst_name) pair; got {pair!r}")
                ids.append(self.link_indices(*pair))
            ids = np.concatenate(ids)
        else:
            arr = np.asarray(links)
            if arr.dtype == bool:
                if arr.shape != (self.n_links,):
                    raise ValueError(f"{arg}: a boolean mask must have shape [links] = "
                                     f"({self.n_links},); got {arr.shape}")
                ids = np.flatnonzero(arr)
            elif arr.size == 0:
                ids = np.zeros(0, np.int64)
            elif np.issubdtype(arr.dtype, np.integer):
                ids = arr.reshape(-1).astype(np.int64)
                if ids.min() < 0 or ids.max() >= self.n_links:
                    raise ValueError(f"{arg}: link ids must lie in [0, {self.n_links}); "
                                     f"got {ids[(ids < 0) | (ids >= self.n_links)][:5]}")
            else:
                raise ValueError(f"{arg} must be link ids (integers), a [links] bool mask "
                                 f"or (src_name, dst_name) pairs; got dtype {arr.dtype}")
        if bidirectional and ids.size:
            rev = self.link_reverse[ids]
            if np.any(rev < 0):
                raise ValueError(f"{arg}: links {ids[rev < 0][:5]} are one-way (no reverse "
                                 f"link); use bidirectional=False")
            ids = np.concatenate([ids, rev])
        return np.unique(ids)

    def with_failed_links(self, links, *, bidirectional: bool = False) -> "Topology":
        """A copy with ``links`` down (paths avoid them, capacity counts as zero).

        Args:
          links: link ids, a ``[links]`` bool mask, one ``(src_name, dst_name)`` pair or
            a list of them (a pair names every parallel link between the two nodes).
          bidirectional: also fail the reverse link of each (the whole cable).
        """
        ids = self._resolve_links(links, bidirectional)
        up = self.link_up.copy()
        up[ids] = False
        return dataclasses.replace(self, link_up=up)

    def with_capacity_scaled(self, links, factor, *,
                             bidirectional: bool = False) -> "Topology":
        """A copy with the capacity of ``links`` multiplied by ``factor`` (> 0).

        Args:
          links: as in :meth:`with_failed_links`.
          factor: positive scalar, or one factor per resolved link id (ascending id
            order; with ``bidirectional`` both directions get the same scalar).
          bidirectional: scale both directions of each cable.
        """
        ids = self._resolve_links(links, bidirectional)
        f = np.asarray(factor, np.float64)
        if f.ndim not in (0, 1) or (f.ndim == 1 and f.shape != ids.shape):
            raise ValueError(f"factor must be a scalar or one value per link "
                             f"({ids.size}); got shape {f.shape}")
        if not np.all(np.isfinite(f) & (f > 0)):
            raise ValueError("factor must be finite and > 0; to take a link out use "
                             "with_failed_links")
        cap = self.capacity.copy()
        cap[ids] = cap[ids] * f
        return dataclasses.replace(self, capacity=cap)

    # ------------------------------------------------------------------ analysis
    def bisection_bandwidth(self) -> float:
        """Min-cut capacity, bytes/s, from the first to the second half of the hosts.

        The halves are host indices ``[0, n_hosts // 2)`` and ``[n_hosts // 2,
        n_hosts)``; the value is the maximum flow from a super-source feeding the
        first half to a super-sink draining the second half over the links that are
        up (one direction, with the current capacities).  Computed with
        ``scipy.sparse.csgraph.maximum_flow``, which works in int32: capacities are
        expressed in units of their greatest common divisor when that keeps the total
        below 2**30 units (exact; true for any mix of whole Gb/s speeds), otherwise
        in units of ``total / 2**30`` (relative error below about 1e-6 per link).
        """
        import scipy.sparse as sp
        from scipy.sparse.csgraph import maximum_flow

        if self.n_hosts < 2:
            raise ValueError("bisection_bandwidth needs at least 2 hosts")
        up = np.flatnonzero(self.link_up)
        if up.size == 0:
            return 0.0
        cap = self.capacity[up]
        whole = np.round(cap)
        unit = None
        if np.all(np.abs(cap - whole) <= 1e-9 * cap) and np.all(whole < 2**62):
            g = int(np.gcd.reduce(whole.astype(np.int64)))
            if whole.sum() / g <= _MAXFLOW_TOTAL_UNITS:
                unit = float(g)
        if unit is None:
            unit = float(cap.sum()) / _MAXFLOW_TOTAL_UNITS
        units_cap = np.maximum(np.round(cap / unit), 0).astype(np.int64)
        big = int(units_cap.sum())
        n = self.n_nodes
        source, sink = n, n + 1
        half = self.n_hosts // 2
        first, second = self.hosts[:half], self.hosts[half:]
        rows = np.concatenate([self.link_src[up], np.full(half, source), second])
        cols = np.concatenate([self.link_dst[up], first, np.full(second.size, sink)])
        data = np.concatenate([units_cap, np.full(first.size + second.size, big)])
        graph = sp.csr_matrix((data.astype(np.int32), (rows, cols)), shape=(n + 2, n + 2))
        graph.sum_duplicates()
        return float(maximum_flow(graph, source, sink).flow_value) * unit


def _host_indices(topology: Topology, x, arg: str) -> np.ndarray:
    """Host indices (int64 array, same shape as ``x``) from host names or indices."""
    arr = np.asarray(x)
    if arr.dtype.kind in ("U", "S", "O"):
        flat = arr.reshape(-1)
        if arr.dtype.kind == "O" and not all(isinstance(v, str) for v in flat):
            raise ValueError(f"{arg} must be host names (str) or host indices (int), "
                             f"not a mix")
        uniq, inv = np.unique(flat.astype(str), return_inverse=True)
        node_of = topology._node_of_name
        nodes = np.array([node_of.get(u, -1) for u in uniq], np.int64)
        hosts = np.where(nodes >= 0, topology._host_of_node[np.maximum(nodes, 0)], -1)
        if np.any(hosts < 0):
            bad = [str(u) for u in uniq[hosts < 0][:5]]
            raise ValueError(f"{arg}: unknown host names {bad} (topology "
                             f"{topology.name!r} hosts are e.g. "
                             f"{list(topology.host_names[:3])})")
        return hosts[inv].reshape(arr.shape)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if arr.size == 0:
            return np.zeros(arr.shape, np.int64)
        raise ValueError(f"{arg} must be host indices (integers) or host names; got "
                         f"dtype {arr.dtype}")
    idx = arr.astype(np.int64)
    bad = (idx < 0) | (idx >= topology.n_hosts)
    if np.any(bad):
        raise ValueError(f"{arg}: host indices must lie in [0, {topology.n_hosts}); got "
                         f"{idx[bad][:5].tolist()}")
    return idx


# ====================================================================== builders
def _check_int(value, arg: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{arg} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{arg} must be >= {minimum}; got {value}")
    return int(value)


def _check_pos(value, arg: str, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{arg} must be a number; got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{arg} must be finite and {'>=' if allow_zero else '>'} 0; "
                         f"got {value!r}")
    return v


def _link_args(link_gbps, fabric_gbps, latency_us, buffer_kb):
    link = _check_pos(link_gbps, "link_gbps")
    fabric = link if fabric_gbps is None else _check_pos(fabric_gbps, "fabric_gbps")
    return (link, fabric, _check_pos(latency_us, "latency_us", allow_zero=True),
            _check_pos(buffer_kb, "buffer_kb", allow_zero=True))


def _build(*, name, kind, params, node_names, node_tier, n_hosts, cab_u, cab_v,
           cab_gbps, latency_us, buffer_kb, host_server=None) -> Topology:
    """Topology whose hosts are nodes ``0..n_hosts-1`` and whose cables are
    ``cab_u[c] <-> cab_v[c]`` (link ``2c`` is u->v, ``2c+1`` is v->u)."""
    cab_u = np.asarray(cab_u, np.int64)
    cab_v = np.asarray(cab_v, np.int64)
    n_cables = cab_u.size
    src = np.stack([cab_u, cab_v], axis=1).reshape(-1)
    dst = np.stack([cab_v, cab_u], axis=1).reshape(-1)
    cap = np.repeat(units.gbps(np.broadcast_to(np.asarray(cab_gbps, np.float64),
                                               (n_cables,))), 2)
    n_links = 2 * n_cables
    node_is_host = np.zeros(len(node_names), bool)
    node_is_host[:n_hosts] = True
    return Topology(
        node_names=tuple(node_names), node_is_host=node_is_host,
        node_tier=np.asarray(node_tier), hosts=np.arange(n_hosts),
        link_src=src, link_dst=dst, capacity=cap,
        latency=np.full(n_links, units.us(latency_us)),
        buffer=np.full(n_links, units.kb(buffer_kb)),
        link_up=np.ones(n_links, bool), link_reverse=np.arange(n_links) ^ 1,
        host_server=np.arange(n_hosts) if host_server is None else host_server,
        name=name, kind=kind, params=params, updown=kind in CLOS_KINDS,
        host_transit=False)


def _check_radix(switch_radix, *, leaf_ports: int, spine_ports: int, what: str,
                 fix: str) -> None:
    """ValueError when a leaf or spine needs more ports than ``switch_radix``."""
    if switch_radix is None:
        return
    radix = _check_int(switch_radix, "switch_radix", 2)
    for role, ports in (("leaf", leaf_ports), ("spine", spine_ports)):
        if ports > radix:
            raise ValueError(
                f"switch_radix={radix}: each {role} of this {what} needs {ports} ports "
                f"(more than the radix); {fix}")


def with_servers(topology: Topology, gpus_per_server: int, *,
                 nics_per_server: int | None = None,
                 nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
                 pcie_gbps: float = DEFAULT_PCIE_GBPS,
                 nvlink_latency_us: float = DEFAULT_NVLINK_LATENCY_US,
                 pcie_latency_us: float = DEFAULT_PCIE_LATENCY_US) -> Topology:
    """GPU servers on a fabric whose hosts are NICs: GPUs become the hosts.

    The hosts of ``topology`` are taken as NIC ports, ``nics_per_server`` consecutive
    host indices per server (the layout of every builder here: ``rail_optimized``'s
    ``server * nics + nic``, consecutive hosts of a leaf in ``leaf_spine``).  Each
    server gets ``gpus_per_server`` GPU hosts and one NVSwitch node:

    * NVLink: one cable GPU <-> NVSwitch of ``nvlink_gbps`` per direction.  An
      NVSwitch system is non-blocking (HGX H100: four NVSwitch chips, 18 NVLink4 links
      per GPU, 450 GB/s per direction; NVIDIA "NVIDIA H100 Tensor Core GPU
      Architecture" whitepaper, 2022), so the per-GPU NVLink bandwidth is the only
      bound modelled;
    * PCIe: one cable GPU <-> its NIC of ``pcie_gbps`` (GPU ``g`` uses NIC
      ``g * nics_per_server // gpus_per_server``: the PCIe-switch pairing of DGX/HGX
      H100, one ConnectX-7 per GPU).

    NIC nodes stop being hosts (tier 1), switch tiers shift up by one, NVSwitches are
    tier 1, GPUs tier 0.  Host index of GPU ``g`` of server ``s``: ``s *
    gpus_per_server + g``; names ``srv{s}/gpu{g}`` and ``srv{s}/nvswitch``;
    ``host_server`` is the GPU's server.  Links of ``topology`` keep their ids; the
    NVLink cables follow (link ``L0 + 2 h`` GPU ``h`` -> NVSwitch, ``L0 + 2 h + 1``
    back), then the PCIe cables (``L0 + 2 G + 2 h`` GPU -> NIC, ``+ 1`` back), with
    ``L0 = topology.n_links`` and ``G`` GPUs.  ``params`` gains ``gpus_per_server``,
    ``nics_per_server``, ``n_servers``, ``nvlink_gbps``, ``pcie_gbps``,
    ``fabric_links`` (= ``L0``) and ``server_model=True``.

    Not modelled (assumptions): PXN (NCCL forwarding across rails through NVLink)
    -- a rail-crossing flow goes through the fabric; NVLink port contention inside the
    NVSwitch chips; CPU/host memory paths.

    Args:
      topology: a fabric whose hosts are NIC ports (not already a server model).
      gpus_per_server: GPUs per server (>= 1).
      nics_per_server: NIC ports per server (default ``gpus_per_server``); must
        divide the number of hosts of ``topology``.
      nvlink_gbps: NVLink bandwidth per GPU per direction, Gb/s.
      pcie_gbps: GPU <-> NIC bandwidth per direction, Gb/s.
      nvlink_latency_us: latency of each NVLink cable (one NVSwitch hop), us.
      pcie_latency_us: latency of each PCIe cable, us.

    Raises:
      ValueError: bad sizes, hosts not a multiple of ``nics_per_server``, a topology
        that already has the server model.
    """
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology; got {type(topology).__name__}")
    if topology.params.get("server_model"):
        raise ValueError("topology already has the server model; build it from a fabric "
                         "whose hosts are NICs")
    gps = _check_int(gpus_per_server, "gpus_per_server", 1)
    nps = gps if nics_per_server is None else _check_int(nics_per_server,
                                                          "nics_per_server", 1)
    nv = _check_pos(nvlink_gbps, "nvlink_gbps")
    pc = _check_pos(pcie_gbps, "pcie_gbps")
    nv_lat = _check_pos(nvlink_latency_us, "nvlink_latency_us", allow_zero=True)
    pc_lat = _check_pos(pcie_latency_us, "pcie_latency_us", allow_zero=True)
    n_nics = topology.n_hosts
    if n_nics % nps:
        raise ValueError(f"nics_per_server={nps} does not divide the {n_nics} hosts (NIC "
                         f"ports) of {topology.name!r}; give a fabric with a whole number "
                         f"of servers")
    n_servers = n_nics // nps
    n0, n_gpus = topology.n_nodes, n_servers * gps
    gpu = np.arange(n_gpus)
    server, local = np.divmod(gpu, gps)
    gpu_node = n0 + gpu
    nvs_node = n0 + n_gpus + np.arange(n_servers)
    nic_node = topology.hosts[server * nps + local * nps // gps]
    names = (topology.node_names
             + tuple(f"srv{s}/gpu{g}" for s, g in zip(server.tolist(), local.tolist()))
             + tuple(f"srv{s}/nvswitch" for s in range(n_servers)))
    old_tier = np.where(topology.node_is_host, 1, topology.node_tier + 1)
    tier = np.concatenate([old_tier, np.zeros(n_gpus), np.ones(n_servers)])
    is_host = np.concatenate([np.zeros(n0, bool), np.ones(n_gpus, bool),
                              np.zeros(n_servers, bool)])
    cab_u = np.concatenate([gpu_node, gpu_node])
    cab_v = np.concatenate([nvs_node[server], nic_node])
    new_src = np.stack([cab_u, cab_v], axis=1).reshape(-1)
    new_dst = np.stack([cab_v, cab_u], axis=1).reshape(-1)
    L0, n_new = topology.n_links, 2 * cab_u.size
    gb = np.repeat(np.concatenate([np.full(n_gpus, nv), np.full(n_gpus, pc)]), 2)
    lat = np.repeat(np.concatenate([np.full(n_gpus, nv_lat), np.full(n_gpus, pc_lat)]), 2)
    params = dict(topology.params, gpus_per_server=gps, nics_per_server=nps,
                  n_servers=n_servers, nvlink_gbps=nv, pcie_gbps=pc, fabric_links=L0,
                  server_model=True)
    return Topology(
        node_names=names, node_is_host=is_host, node_tier=tier, hosts=gpu_node,
        link_src=np.concatenate([topology.link_src, new_src]),
        link_dst=np.concatenate([topology.link_dst, new_dst]),
        capacity=np.concatenate([topology.capacity, units.gbps(gb)]),
        latency=np.concatenate([topology.latency, units.us(lat)]),
        buffer=np.concatenate([topology.buffer,
                               np.full(n_new, units.kb(DEFAULT_BUFFER_KB))]),
        link_up=np.concatenate([topology.link_up, np.ones(n_new, bool)]),
        link_reverse=np.concatenate([topology.link_reverse, L0 + (np.arange(n_new) ^ 1)]),
        host_server=server,
        name=f"{topology.name} + {n_servers} servers x {gps} GPUs",
        kind=topology.kind, params=params, updown=topology.updown, host_transit=False)


def _maybe_servers(topo: Topology, server: dict | None, nics_per_server: int | None):
    """Apply :func:`with_servers` when a builder got ``gpus_per_server``."""
    if server is None or server.get("gpus_per_server") is None:
        return topo
    kw = {k: v for k, v in server.items() if v is not None}
    return with_servers(topo, nics_per_server=nics_per_server, **kw)


def _spread_uplinks(n_leaves: int, uplinks: int, n_spines: int):
    """Leaf ``l``'s uplink ``j`` goes to spine ``j % n_spines`` (round robin)."""
    leaf = np.repeat(np.arange(n_leaves), uplinks)
    spine = np.tile(np.arange(uplinks) % n_spines, n_leaves)
    return leaf, spine


def _uplink_plan(down: float, n_spines: int, uplinks_per_leaf, fabric: float,
                 fabric_given: bool, oversubscription):
    """``(uplinks_per_leaf, fabric_gbps)`` from any two of uplinks, speed and ratio.

    ``down`` is a leaf's downlink bandwidth (Gb/s); the ratio is ``down / (uplinks *
    fabric)``.  See :func:`leaf_spine` for the rules.
    """
    if uplinks_per_leaf is not None:
        uplinks_per_leaf = _check_int(uplinks_per_leaf, "uplinks_per_leaf", n_spines)
    if oversubscription is not None:
        ratio = _check_pos(oversubscription, "oversubscription")
        if not fabric_given:
            uplinks_per_leaf = n_spines if uplinks_per_leaf is None else uplinks_per_leaf
            fabric = down / (ratio * uplinks_per_leaf)
        elif uplinks_per_leaf is None:
            exact = down / (ratio * fabric)
            uplinks_per_leaf = int(round(exact))
            if abs(exact - uplinks_per_leaf) > 1e-9 * exact or uplinks_per_leaf < n_spines:
                raise ValueError(
                    f"oversubscription={oversubscription} with fabric_gbps={fabric:g} "
                    f"needs {exact:g} uplinks per leaf, not a whole number >= n_spines; "
                    f"give uplinks_per_leaf instead of fabric_gbps")
        elif abs(down / (uplinks_per_leaf * fabric) - ratio) > 1e-9 * ratio:
            raise ValueError(
                f"oversubscription={oversubscription} disagrees with uplinks_per_leaf="
                f"{uplinks_per_leaf} and fabric_gbps={fabric:g} (ratio "
                f"{down / (uplinks_per_leaf * fabric):g}); give only two of the three")
    uplinks_per_leaf = n_spines if uplinks_per_leaf is None else uplinks_per_leaf
    return uplinks_per_leaf, fabric


def _check_tiers_planes(tiers, planes):
    if isinstance(tiers, bool) or not isinstance(tiers, numbers.Integral) or tiers not in (2, 3):
        raise ValueError(f"tiers must be 2 (leaf-spine) or 3 (leaf, pod spine, super-spine); "
                         f"got {tiers!r}")
    return _check_int(planes, "planes", 1)


@dataclasses.dataclass(frozen=True)
class _ClosPlan:
    """Switch layers of one plane of a 2- or 3-tier folded Clos (host side)."""

    n_leaves: int
    uplinks_per_leaf: int
    n_spines: int                 # per pod (3 tiers) or in all (2 tiers)
    leaves_per_pod: int | None    # None: 2 tiers
    uplinks_per_spine: int = 0
    n_super_spines: int = 0

    @property
    def n_pods(self) -> int:
        return 1 if self.leaves_per_pod is None else -(-self.n_leaves // self.leaves_per_pod)

    @property
    def spine_down_ports(self) -> int:
        per_pod = self.n_leaves if self.leaves_per_pod is None else min(
            self.leaves_per_pod, self.n_leaves)
        return -(-per_pod * self.uplinks_per_leaf // self.n_spines)

    @property
    def super_ports(self) -> int:
        if self.leaves_per_pod is None:
            return 0
        group = self.n_super_spines // self.n_spines
        return self.n_pods * -(-self.uplinks_per_spine // group)


def _plan_tiers(*, tiers: int, n_leaves: int, uplinks: int, n_spines: int,
                leaves_per_pod, uplinks_per_spine, n_super_spines, pod_arg: str,
                pod_unit: int = 1) -> _ClosPlan:
    """Validated :class:`_ClosPlan`; ``pod_arg`` names the pod-size argument."""
    extra = dict(leaves_per_pod=leaves_per_pod, uplinks_per_spine=uplinks_per_spine,
                 n_super_spines=n_super_spines)
    if tiers == 2:
        given = [k for k, v in extra.items() if v is not None]
        if given:
            given = [pod_arg if k == "leaves_per_pod" else k for k in given]
            raise ValueError(f"{', '.join(given)} only apply with tiers=3; add tiers=3 or "
                             f"drop them")
        return _ClosPlan(n_leaves, uplinks, n_spines, None)
    if leaves_per_pod is None:
        raise ValueError(f"tiers=3 needs {pod_arg} (the size of a pod: leaves that share "
                         f"the pod's spines)")
    lpp = _check_int(leaves_per_pod, pod_arg, 1) * pod_unit
    per_pod = min(lpp, n_leaves)
    ups = (-(-per_pod * uplinks // n_spines) if uplinks_per_spine is None
           else _check_int(uplinks_per_spine, "uplinks_per_spine", 1))
    n_super = (n_spines * ups if n_super_spines is None
               else _check_int(n_super_spines, "n_super_spines", n_spines))
    if n_super % n_spines:
        raise ValueError(f"n_super_spines={n_super} must be a multiple of the {n_spines} "
                         f"spines per pod (spine j of every pod connects to super-spine "
                         f"group j); use {n_spines * max(1, n_super // n_spines)}")
    return _ClosPlan(n_leaves, uplinks, n_spines, lpp, ups, n_super)


def _clos_wiring(plan: _ClosPlan, *, n_hosts: int, host_leaf: np.ndarray, planes: int,
                 host_gbps: float, fabric_gbps: float, leaf_names: Sequence[str],
                 host_names: Sequence[str]):
    """Nodes and cables of a folded Clos with ``planes`` independent switch planes.

    Node order: hosts, then per plane its leaves, spines and super-spines.  Cable order:
    the host cables of plane 0, 1, ..., then the fabric cables of plane 0, 1, ...;
    within a plane leaf-spine cables (round robin, :func:`_spread_uplinks`) before
    spine-super-spine cables.  With one plane and two tiers this is the historical
    layout of :func:`leaf_spine` and :func:`rail_optimized` (hosts, leaves, spines).

    Returns ``(names, tiers, cab_u, cab_v, cab_gbps, cable_plane)``.
    """
    three = plan.leaves_per_pod is not None
    n_pods = plan.n_pods
    n_spine_all = plan.n_spines * n_pods if three else plan.n_spines
    n_sup = plan.n_super_spines if three else 0
    per_plane = plan.n_leaves + n_spine_all + n_sup
    if three:
        spine_names = [f"pod{p}/spine{j}" for p in range(n_pods)
                       for j in range(plan.n_spines)]
        super_names = [f"super{s}" for s in range(n_sup)]
    else:
        spine_names, super_names = [f"spine{j}" for j in range(plan.n_spines)], []
    # one plane's fabric cables, in plane-local node ids (leaf 0 = 0)
    up_leaf, up_spine = _spread_uplinks(plan.n_leaves, plan.uplinks_per_leaf, plan.n_spines)
    if three:
        up_spine = (up_leaf // plan.leaves_per_pod) * plan.n_spines + up_spine
    fab_u = [up_leaf]
    fab_v = [plan.n_leaves + up_spine]
    if three:
        group = n_sup // plan.n_spines
        sp_, u = np.divmod(np.arange(n_spine_all * plan.uplinks_per_spine),
                           plan.uplinks_per_spine)
        fab_u.append(plan.n_leaves + sp_)
        fab_v.append(plan.n_leaves + n_spine_all + (sp_ % plan.n_spines) * group + u % group)
    fab_u, fab_v = np.concatenate(fab_u), np.concatenate(fab_v)
    names = list(host_names)
    tiers = [np.zeros(n_hosts)]
    host_u, host_v, fabric_u, fabric_v = [], [], [], []
    for p in range(planes):
        base = n_hosts + p * per_plane
        pre = f"plane{p}/" if planes > 1 else ""
        names += [pre + n for n in list(leaf_names) + spine_names + super_names]
        tiers += [np.ones(plan.n_leaves), np.full(n_spine_all, 2), np.full(n_sup, 3)]
        host_u.append(np.arange(n_hosts))
        host_v.append(base + host_leaf)
        fabric_u.append(base + fab_u)
        fabric_v.append(base + fab_v)
    cab_u = np.concatenate(host_u + fabric_u)
    cab_v = np.concatenate(host_v + fabric_v)
    gb = np.concatenate([np.full(n_hosts * planes, host_gbps),
                         np.full(fab_u.size * planes, fabric_gbps)])
    plane = np.concatenate([np.repeat(np.arange(planes), n_hosts),
                            np.repeat(np.arange(planes), fab_u.size)])
    return names, np.concatenate(tiers), cab_u, cab_v, gb, plane


def _radix_fix(two_tier: bool) -> str:
    return ("use fewer hosts per leaf, more spines, tiers=3 (a super-spine layer: a "
            "three-tier Clos like fat_tree) or planes=P (P independent planes of "
            "link_gbps/P ports; give switch_radix at that port speed)" if two_tier else
            "use more pods (smaller leaves_per_pod / groups_per_pod), fewer uplinks, "
            "more super-spines (n_super_spines), or planes=P")


def _check_clos_radix(switch_radix, plan: _ClosPlan, leaf_down: int, what: str) -> None:
    """ValueError when a leaf, spine or super-spine needs more than ``switch_radix``."""
    if switch_radix is None:
        return
    three = plan.leaves_per_pod is not None
    spine = plan.spine_down_ports + (plan.uplinks_per_spine if three else 0)
    _check_radix(switch_radix, leaf_ports=leaf_down + plan.uplinks_per_leaf,
                 spine_ports=spine, what=what, fix=_radix_fix(not three))
    if three and plan.super_ports > switch_radix:
        raise ValueError(
            f"switch_radix={switch_radix}: each super-spine of this {what} needs "
            f"{plan.super_ports} ports (more than the radix); {_radix_fix(False)}")


def _plane_args(planes: int, link: float, fabric: float, fabric_given: bool):
    """Per-plane host-port and fabric speeds: the NIC's ``link`` split ``planes`` ways."""
    host = link / planes
    return host, (fabric if fabric_given else host)


def leaf_spine(n_leaves: int, n_spines: int, hosts_per_leaf: int, *,
               uplinks_per_leaf: int | None = None,
               oversubscription: float | None = None,
               link_gbps: float = DEFAULT_LINK_GBPS,
               fabric_gbps: float | None = None,
               latency_us: float = DEFAULT_LATENCY_US,
               buffer_kb: float = DEFAULT_BUFFER_KB,
               switch_radix: int | None = None,
               planes: int = 1,
               tiers: int = 2,
               leaves_per_pod: int | None = None,
               uplinks_per_spine: int | None = None,
               n_super_spines: int | None = None,
               nics_per_server: int | None = None,
               gpus_per_server: int | None = None,
               nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
               pcie_gbps: float = DEFAULT_PCIE_GBPS,
               nvlink_latency_us: float = DEFAULT_NVLINK_LATENCY_US,
               pcie_latency_us: float = DEFAULT_PCIE_LATENCY_US) -> Topology:
    """Folded Clos: hosts on leaves, leaves wired to spines (two tiers, or three with pods).

    Leaf ``l``'s uplink ``j`` goes to spine ``j % n_spines``, so with
    ``uplinks_per_leaf > n_spines`` a leaf has parallel cables to a spine (spines
    ``< uplinks_per_leaf % n_spines`` get one more).  The oversubscription ratio is
    ``hosts_per_leaf * link_gbps / (planes * uplinks_per_leaf * fabric_gbps)`` (leaf
    downlink over uplink bandwidth); give any two of ``uplinks_per_leaf``,
    ``fabric_gbps`` and ``oversubscription`` and the third follows:

    * neither ratio nor fabric speed: ``uplinks_per_leaf = n_spines`` and
      ``fabric_gbps = link_gbps / planes`` (unless given);
    * ``oversubscription`` only (or with ``uplinks_per_leaf``): uplinks default to
      ``n_spines`` and ``fabric_gbps`` is derived (each uplink ``1/ratio`` as fast);
    * ``oversubscription`` and ``fabric_gbps``: ``uplinks_per_leaf`` is derived and must
      come out a whole number >= ``n_spines`` (e.g. 2.0 with equal speeds: half as many
      uplinks, so pass half the spines);
    * all three: they must agree (relative tolerance 1e-9).

    **Planes** (``planes=P``): P independent copies of the switch layers; every host has
    one port in each plane at ``link_gbps / P`` (the NIC's bandwidth split over the
    planes), and nothing connects the planes, so every path stays inside one plane and
    min-hop routing (:func:`fabric_jax.paths.shortest_paths`) offers the equal-cost
    paths of all planes.  This is Spectrum-X Multiplane ("splits each SuperNIC across
    two or more independent network planes ... in a flat, two-tier topology", 2 or 4
    planes on ConnectX-8: NVIDIA Network Operator documentation, "NVIDIA Spectrum-X
    Ethernet Networking Platform", v26.4), Alibaba HPN's dual-plane design (each NIC's
    two 200G ports in different planes; Qian et al., SIGCOMM 2024) and DeepSeek's
    multi-plane fat-tree (Zhao et al., "Insights into DeepSeek-V3", ISCA 2025).  Port
    speed falls by P, so a switch of the same ASIC has P times the radix (a 51.2 Tb/s
    switch: 64 x 800G, 128 x 400G, 256 x 200G): give ``switch_radix`` at the per-plane
    port speed.

    **Three tiers** (``tiers=3``): the leaves form pods of ``leaves_per_pod``; each pod
    has its own ``n_spines`` spines (the leaves' uplinks spread over the pod's spines
    only), and spine ``j`` of every pod has ``uplinks_per_spine`` cables to super-spine
    group ``j`` (``n_super_spines / n_spines`` super-spines, round robin).  This is the
    k-ary fat-tree wiring of Al-Fares et al. (SIGCOMM 2008, Sec. 2.3: aggregation
    switch ``a`` of every pod to core group ``a``) generalised to any sizes, as in the
    spine planes of Facebook's data center fabric (Andreyev, 2014) and the
    super-spine layer of NVIDIA's large reference architectures.  Defaults are
    non-blocking: ``uplinks_per_spine`` = the spine's down ports, ``n_super_spines =
    n_spines * uplinks_per_spine`` (one cable to each super-spine of the group).
    ``leaf_spine(k * k // 2, k // 2, k // 2, tiers=3, leaves_per_pod=k // 2)`` has the node
    and link counts and the bisection of ``fat_tree(k)``.

    Node names: hosts ``h{i}`` (host index ``i = leaf * hosts_per_leaf + j``),
    ``leaf{l}``, ``spine{s}`` (2 tiers) or ``pod{p}/spine{s}`` and ``super{s}`` (3
    tiers); with planes every switch name gets the prefix ``plane{p}/``.  Node tiers:
    hosts 0, leaves 1, spines 2, super-spines 3.  With the defaults (one plane, two
    tiers) node and link numbering are as they always were: hosts, leaves, spines;
    host cables, then leaf-spine cables.

    Args:
      n_leaves, n_spines, hosts_per_leaf: sizes (>= 1); ``n_spines`` is per plane, and
        per pod with ``tiers=3``.
      uplinks_per_leaf: cables from each leaf to the spines, >= n_spines.
      oversubscription: downlink / uplink bandwidth of a leaf, > 0 (1 = non-blocking).
      link_gbps: host NIC speed, Gb/s (split over the planes).
      fabric_gbps: switch-to-switch link speed, Gb/s (default ``link_gbps / planes``).
      latency_us: per-link latency, microseconds.
      buffer_kb: egress buffer per link, kB.
      switch_radix: ports per switch; ValueError if a leaf needs more than
        ``hosts_per_leaf + uplinks_per_leaf``, a spine more than its down ports (plus
        ``uplinks_per_spine`` with 3 tiers) or a super-spine more than ``n_pods *
        ceil(uplinks_per_spine / group)`` (None: unchecked).  The message names the
        fixes (``tiers=3``, ``planes=``).
      planes: independent switch planes (>= 1).
      tiers: 2 (leaf-spine) or 3 (pods of leaves and spines under super-spines).
      leaves_per_pod: leaves per pod (``tiers=3`` only; the last pod may be partial).
      uplinks_per_spine: cables from each pod spine to the super-spines (``tiers=3``).
      n_super_spines: super-spines per plane, a multiple of ``n_spines`` (``tiers=3``).
      nics_per_server: NIC ports per server with the server model (default
        ``gpus_per_server``); consecutive hosts form a server.
      gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us, pcie_latency_us:
        the server model (:func:`with_servers`); ``None`` (default) keeps NIC hosts.
    """
    n_leaves = _check_int(n_leaves, "n_leaves", 1)
    n_spines = _check_int(n_spines, "n_spines", 1)
    hosts_per_leaf = _check_int(hosts_per_leaf, "hosts_per_leaf", 1)
    planes = _check_tiers_planes(tiers, planes)
    link, fabric, lat, buf = _link_args(link_gbps, fabric_gbps, latency_us, buffer_kb)
    host_gb, fabric = _plane_args(planes, link, fabric, fabric_gbps is not None)
    down = hosts_per_leaf * host_gb
    uplinks_per_leaf, fabric = _uplink_plan(down, n_spines, uplinks_per_leaf, fabric,
                                            fabric_gbps is not None, oversubscription)
    plan = _plan_tiers(tiers=tiers, n_leaves=n_leaves, uplinks=uplinks_per_leaf,
                       n_spines=n_spines, leaves_per_pod=leaves_per_pod,
                       uplinks_per_spine=uplinks_per_spine, n_super_spines=n_super_spines,
                       pod_arg="leaves_per_pod")
    n_hosts = n_leaves * hosts_per_leaf
    host = np.arange(n_hosts)
    names, tier, cab_u, cab_v, gb, _ = _clos_wiring(
        plan, n_hosts=n_hosts, host_leaf=host // hosts_per_leaf, planes=planes,
        host_gbps=host_gb, fabric_gbps=fabric,
        leaf_names=[f"leaf{i}" for i in range(n_leaves)],
        host_names=[f"h{i}" for i in range(n_hosts)])
    ratio = down / (uplinks_per_leaf * fabric)
    _check_clos_radix(switch_radix, plan, hosts_per_leaf,
                      what=f"leaf_spine ({n_leaves} leaves x {uplinks_per_leaf} uplinks, "
                           f"{n_spines} spines{' per pod' if tiers == 3 else ''})")
    params = dict(n_leaves=n_leaves, n_spines=n_spines, hosts_per_leaf=hosts_per_leaf,
                  uplinks_per_leaf=uplinks_per_leaf, oversubscription=ratio,
                  link_gbps=link, fabric_gbps=fabric, switch_radix=switch_radix,
                  planes=planes, tiers=tiers)
    name = f"leaf_spine({n_leaves}x{n_spines}, {hosts_per_leaf} hosts/leaf, {ratio:g}:1"
    if tiers == 3:
        params.update(leaves_per_pod=plan.leaves_per_pod, n_pods=plan.n_pods,
                      uplinks_per_spine=plan.uplinks_per_spine,
                      n_super_spines=plan.n_super_spines)
        name += f", 3 tiers, {plan.n_pods} pods, {plan.n_super_spines} super-spines"
    if planes > 1:
        name += f", {planes} planes"
    return _maybe_servers(_build(
        name=name + ")", kind="leaf_spine", params=params, node_names=names,
        node_tier=tier, n_hosts=n_hosts, cab_u=cab_u, cab_v=cab_v, cab_gbps=gb,
        latency_us=lat, buffer_kb=buf),
        dict(gpus_per_server=gpus_per_server, nvlink_gbps=nvlink_gbps, pcie_gbps=pcie_gbps,
             nvlink_latency_us=nvlink_latency_us, pcie_latency_us=pcie_latency_us),
        nics_per_server)


def fat_tree(k: int, *, link_gbps: float = DEFAULT_LINK_GBPS,
             fabric_gbps: float | None = None,
             latency_us: float = DEFAULT_LATENCY_US,
             buffer_kb: float = DEFAULT_BUFFER_KB,
             nics_per_server: int | None = None,
             gpus_per_server: int | None = None,
             nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
             pcie_gbps: float = DEFAULT_PCIE_GBPS,
             nvlink_latency_us: float = DEFAULT_NVLINK_LATENCY_US,
             pcie_latency_us: float = DEFAULT_PCIE_LATENCY_US) -> Topology:
    """Three-tier k-ary fat-tree (Al-Fares, Loukissas, Vahdat, SIGCOMM 2008, Sec. 2.3).

    ``k`` pods, each with ``k/2`` edge and ``k/2`` aggregation switches (a complete
    bipartite graph inside the pod); every edge switch serves ``k/2`` hosts; the
    ``(k/2)^2`` core switches form ``k/2`` groups and aggregation switch ``a`` of every
    pod connects to the ``k/2`` cores of group ``a``.  Totals: ``k^3/4`` hosts,
    ``5k^2/4`` switches, ``3k^3/4`` cables (``3k^3/2`` links); with equal link speeds
    the bisection is full (``n_hosts/2`` host links).

    Node names: hosts ``h{i}`` with ``i = (pod * k/2 + edge) * k/2 + j``,
    ``pod{p}/edge{e}``, ``pod{p}/agg{a}``, ``core{c}``.

    Args:
      k: switch radix, even and >= 2.
      link_gbps: host link speed, Gb/s.
      fabric_gbps: switch-to-switch link speed, Gb/s (default ``link_gbps``).
      latency_us: per-link latency, microseconds.
      buffer_kb: egress buffer per link, kB.
      nics_per_server: NIC ports per server with the server model (default
        ``gpus_per_server``); consecutive hosts form a server.
      gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us, pcie_latency_us:
        the server model (:func:`with_servers`); ``None`` (default) keeps NIC hosts.
    """
    k = _check_int(k, "k", 2)
    if k % 2:
        raise ValueError(f"k must be even (k/2 down and k/2 up ports); got {k}")
    link, fabric, lat, buf = _link_args(link_gbps, fabric_gbps, latency_us, buffer_kb)
    half = k // 2
    n_hosts, n_edge, n_core = k * half * half, k * half, half * half
    edge0 = n_hosts
    agg0 = edge0 + n_edge
    core0 = agg0 + n_edge
    names = [f"h{i}" for i in range(n_hosts)]
    names += [f"pod{p}/edge{e}" for p in range(k) for e in range(half)]
    names += [f"pod{p}/agg{a}" for p in range(k) for a in range(half)]
    names += [f"core{c}" for c in range(n_core)]
    tier = np.concatenate([np.zeros(n_hosts), np.ones(n_edge), np.full(n_edge, 2),
                           np.full(n_core, 3)])
    host = np.arange(n_hosts)
    # edge-agg: edge e of pod p <-> agg a of pod p, for all (e, a).
    pe, ea = np.divmod(np.arange(n_edge * half), half)  # pe = pod*half + e, ea = a
    pod = pe // half
    ea_u = edge0 + pe
    ea_v = agg0 + pod * half + ea
    # agg-core: agg a of pod p <-> core a*half + j.
    pa, j = np.divmod(np.arange(n_edge * half), half)  # pa = pod*half + a
    ac_u = agg0 + pa
    ac_v = core0 + (pa % half) * half + j
    cab_u = np.concatenate([host, ea_u, ac_u])
    cab_v = np.concatenate([edge0 + host // half, ea_v, ac_v])
    gb = np.concatenate([np.full(n_hosts, link), np.full(2 * n_edge * half, fabric)])
    return _maybe_servers(_build(
        name=f"fat_tree(k={k})", kind="fat_tree",
        params=dict(k=k, link_gbps=link, fabric_gbps=fabric),
        node_names=names, node_tier=tier, n_hosts=n_hosts, cab_u=cab_u,
        cab_v=cab_v, cab_gbps=gb, latency_us=lat, buffer_kb=buf),
        dict(gpus_per_server=gpus_per_server, nvlink_gbps=nvlink_gbps, pcie_gbps=pcie_gbps,
                  nvlink_latency_us=nvlink_latency_us, pcie_latency_us=pcie_latency_us), nics_per_server)


def rail_optimized(n_servers: int, nics_per_server: int = 8, *,
                   servers_per_leaf: int = 32,
                   n_spines: int | None = None,
                   uplinks_per_leaf: int | None = None,
                   oversubscription: float | None = None,
                   link_gbps: float = DEFAULT_LINK_GBPS,
                   fabric_gbps: float | None = None,
                   latency_us: float = DEFAULT_LATENCY_US,
                   buffer_kb: float = DEFAULT_BUFFER_KB,
                   switch_radix: int | None = None,
                   planes: int = 1,
                   tiers: int = 2,
                   groups_per_pod: int | None = None,
                   uplinks_per_spine: int | None = None,
                   n_super_spines: int | None = None,
                   gpus_per_server: int | None = None,
                   nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
                   pcie_gbps: float = DEFAULT_PCIE_GBPS,
                   nvlink_latency_us: float = DEFAULT_NVLINK_LATENCY_US,
                   pcie_latency_us: float = DEFAULT_PCIE_LATENCY_US) -> Topology:
    """Rail-optimised fabric for GPU servers (DGX SuperPOD style), 2 or 3 tiers.

    Servers form groups of ``servers_per_leaf`` (a scalable unit; the last one may be
    partial).  Each group has ``nics_per_server`` rail leaves: NIC ``i`` of every server
    of the group attaches to rail leaf ``i`` of its group, so same-rail traffic inside a
    group crosses one leaf (NVIDIA DGX SuperPOD reference architecture: rail-optimised
    compute fabric of scalable units of 32 DGX H100).  Every rail leaf has
    ``uplinks_per_leaf`` cables to the ``n_spines`` spines (round robin, as in
    :func:`leaf_spine`).  Each NIC is a host, host index ``server * nics_per_server +
    nic``; ``host_server`` maps hosts to servers (GPUs of one server talk over NVLink,
    modelled with ``gpus_per_server``).

    Defaults give non-blocking leaves at equal speeds: ``n_spines`` = servers in a full
    group (``min(servers_per_leaf, n_servers)``), one uplink per spine.

    ``oversubscription`` (rail-leaf downlink over uplink bandwidth): alone, it removes
    spines -- ``n_spines = uplinks_per_leaf = min(servers_per_leaf, n_servers) /
    oversubscription`` at the fabric speed of the NICs (must be a whole number, e.g.
    2.0 with 32 servers per leaf: 16 spines); with ``n_spines``, ``uplinks_per_leaf`` or
    ``fabric_gbps`` it follows :func:`leaf_spine`'s rules.

    ``planes=P`` splits every NIC over P independent planes (``link_gbps / P`` per
    port; see :func:`leaf_spine` for the sources and the routing consequences); every
    plane is a copy of the rail leaves and spines.  ``tiers=3`` groups
    ``groups_per_pod`` scalable units into a pod with its own ``n_spines`` spines, and
    spine ``j`` of every pod connects to super-spine group ``j`` (the pod/super-spine
    wiring of :func:`leaf_spine` with ``tiers=3``; the DGX SuperPOD reference
    architecture adds a core layer in the same way beyond what one spine layer
    connects).

    Node names: hosts ``srv{s}/nic{i}``, leaves ``g{group}/rail{i}``, ``spine{j}`` (2
    tiers) or ``pod{p}/spine{j}`` and ``super{s}`` (3 tiers), prefixed ``plane{p}/`` with
    planes.  With the defaults the numbering is unchanged: hosts, leaves, spines.

    Args:
      n_servers: number of GPU servers (>= 1).
      nics_per_server: NICs (= rails) per server (>= 1).
      servers_per_leaf: servers per group = down ports per rail leaf.
      n_spines: spine switches (per plane; per pod with ``tiers=3``).
      uplinks_per_leaf: cables from each rail leaf to the spines (>= n_spines).
      oversubscription: rail-leaf downlink / uplink bandwidth, > 0.
      link_gbps: NIC link speed, Gb/s (split over the planes).
      fabric_gbps: switch-to-switch link speed, Gb/s (default ``link_gbps / planes``).
      latency_us: per-link latency, microseconds.
      buffer_kb: egress buffer per link, kB.
      switch_radix: ports per switch (at the per-plane port speed); ValueError if a rail
        leaf needs more than ``servers_per_leaf + uplinks_per_leaf``, a spine more than
        ``ceil(rail leaves * uplinks_per_leaf / n_spines)`` (plus ``uplinks_per_spine``
        with 3 tiers) or a super-spine more than its pods' cables (None: unchecked).
        With 64 ports, 32 servers per leaf and 32 uplinks, one spine layer connects at
        most 64 rail leaves (8 groups of 8 rails, 256 servers); beyond that the message
        names the fixes ``tiers=3`` and ``planes=``.
      planes: independent switch planes (>= 1).
      tiers: 2 or 3.
      groups_per_pod: scalable units (groups of ``servers_per_leaf`` servers) per pod
        (``tiers=3`` only).
      uplinks_per_spine: cables from each pod spine to the super-spines (``tiers=3``).
      n_super_spines: super-spines per plane, a multiple of ``n_spines`` (``tiers=3``).
      gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us, pcie_latency_us:
        the server model (:func:`with_servers`); ``None`` (default) keeps NIC hosts.
    """
    n_servers = _check_int(n_servers, "n_servers", 1)
    nics = _check_int(nics_per_server, "nics_per_server", 1)
    spl = _check_int(servers_per_leaf, "servers_per_leaf", 1)
    planes = _check_tiers_planes(tiers, planes)
    link, fabric, lat, buf = _link_args(link_gbps, fabric_gbps, latency_us, buffer_kb)
    host_gb, fabric = _plane_args(planes, link, fabric, fabric_gbps is not None)
    full = min(spl, n_servers)
    if oversubscription is not None and n_spines is None and uplinks_per_leaf is None \
            and fabric_gbps is None:
        ratio = _check_pos(oversubscription, "oversubscription")
        exact = full / ratio
        n_spines = int(round(exact))
        if abs(exact - n_spines) > 1e-9 * exact or n_spines < 1:
            raise ValueError(
                f"oversubscription={oversubscription} with {full} servers per rail leaf "
                f"needs {exact:g} spines, not a whole number >= 1; give n_spines, "
                f"uplinks_per_leaf or fabric_gbps too")
    n_spines = full if n_spines is None else _check_int(n_spines, "n_spines", 1)
    uplinks, fabric = _uplink_plan(full * host_gb, n_spines, uplinks_per_leaf, fabric,
                                   fabric_gbps is not None, oversubscription)
    n_groups = -(-n_servers // spl)
    n_hosts, n_leaves = n_servers * nics, n_groups * nics
    plan = _plan_tiers(tiers=tiers, n_leaves=n_leaves, uplinks=uplinks, n_spines=n_spines,
                       leaves_per_pod=groups_per_pod, uplinks_per_spine=uplinks_per_spine,
                       n_super_spines=n_super_spines, pod_arg="groups_per_pod",
                       pod_unit=nics)
    _check_clos_radix(switch_radix, plan, full,
                      what=f"rail_optimized fabric ({n_leaves} rail leaves x {uplinks} "
                           f"uplinks, {n_spines} spines{' per pod' if tiers == 3 else ''})")
    host = np.arange(n_hosts)
    server, nic = np.divmod(host, nics)
    names, tier, cab_u, cab_v, gb, _ = _clos_wiring(
        plan, n_hosts=n_hosts, host_leaf=(server // spl) * nics + nic, planes=planes,
        host_gbps=host_gb, fabric_gbps=fabric,
        leaf_names=[f"g{g}/rail{i}" for g in range(n_groups) for i in range(nics)],
        host_names=[f"srv{s}/nic{i}" for s in range(n_servers) for i in range(nics)])
    params = dict(n_servers=n_servers, nics_per_server=nics, servers_per_leaf=spl,
                  n_spines=n_spines, uplinks_per_leaf=uplinks, link_gbps=link,
                  fabric_gbps=fabric, switch_radix=switch_radix,
                  oversubscription=full * host_gb / (uplinks * fabric), planes=planes,
                  tiers=tiers)
    name = f"rail_optimized({n_servers} servers x {nics} NICs"
    if tiers == 3:
        params.update(groups_per_pod=plan.leaves_per_pod // nics, n_pods=plan.n_pods,
                      uplinks_per_spine=plan.uplinks_per_spine,
                      n_super_spines=plan.n_super_spines)
        name += f", 3 tiers, {plan.n_pods} pods"
    if planes > 1:
        name += f", {planes} planes"
    return _maybe_servers(_build(
        name=name + ")", kind="rail_optimized", params=params, node_names=names,
        node_tier=tier, n_hosts=n_hosts, cab_u=cab_u, cab_v=cab_v,
        cab_gbps=gb, latency_us=lat, buffer_kb=buf, host_server=server),
        dict(gpus_per_server=gpus_per_server, nvlink_gbps=nvlink_gbps, pcie_gbps=pcie_gbps,
             nvlink_latency_us=nvlink_latency_us, pcie_latency_us=pcie_latency_us), nics)


_EDGE_ATTRS = ("capacity_gbps", "latency_us", "buffer_kb")


def from_edges(edges, *, capacity_gbps: float = DEFAULT_LINK_GBPS,
               latency_us: float = DEFAULT_LATENCY_US,
               buffer_kb: float = DEFAULT_BUFFER_KB,
               hosts=None, directed: bool = False,
               host_transit: bool | None = None,
               name: str = "graph",
               nics_per_server: int | None = None,
               gpus_per_server: int | None = None,
               nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
               pcie_gbps: float = DEFAULT_PCIE_GBPS,
               nvlink_latency_us: float = DEFAULT_NVLINK_LATENCY_US,
               pcie_latency_us: float = DEFAULT_PCIE_LATENCY_US) -> Topology:
    """Topology of an arbitrary graph.

    Args:
      edges: an iterable of ``(u, v)`` or ``(u, v, attrs)`` with ``attrs`` a dict of
        optional per-edge ``capacity_gbps``, ``latency_us``, ``buffer_kb``; or a
        networkx ``Graph``/``DiGraph``/``MultiGraph`` (same edge attributes; its
        directedness overrides ``directed``; nodes with attribute ``host=True`` are
        the hosts when ``hosts`` is None).  Node labels become names via ``str``.
      capacity_gbps, latency_us, buffer_kb: defaults for edges without the attribute.
      hosts: node labels of the hosts, in host-index order.  None: the networkx
        ``host`` attribute if any node has it, else every node is a host.
      directed: False makes each edge a full-duplex cable (two links); True makes it
        one link ``u -> v``.
      host_transit: may hosts forward traffic for others?  None means True exactly when
        every node is a host (otherwise nothing could route).
      name: topology name.
      nics_per_server: NIC ports per server with the server model (default
        ``gpus_per_server``); consecutive hosts (in ``hosts`` order) form a server.
      gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us, pcie_latency_us:
        the server model (:func:`with_servers`); ``None`` (default) keeps NIC hosts.

    Node tiers: 0 for hosts, 1 for the other nodes; routing is plain min-hop
    (``updown=False``).
    """
    is_nx = hasattr(edges, "is_directed") and hasattr(edges, "nodes") and hasattr(
        edges, "edges")
    node_id: dict[Any, int] = {}
    labels: list[Any] = []

    def nid(label):
        if label not in node_id:
            node_id[label] = len(labels)
            labels.append(label)
        return node_id[label]

    if is_nx:
        directed = bool(edges.is_directed())
        for label in edges.nodes:
            nid(label)
        if hosts is None:
            marked = [n for n, d in edges.nodes(data=True) if d.get("host", False)]
            hosts = marked or None
        items = list(edges.edges(data=True))
    else:
        try:
            items = list(edges)
        except TypeError:
            raise ValueError("edges must be an iterable of (u, v[, attrs]) or a networkx "
                             "graph") from None
    defaults = dict(capacity_gbps=_check_pos(capacity_gbps, "capacity_gbps"),
                    latency_us=_check_pos(latency_us, "latency_us", allow_zero=True),
                    buffer_kb=_check_pos(buffer_kb, "buffer_kb", allow_zero=True))
    src, dst, attr = [], [], {a: [] for a in _EDGE_ATTRS}
    for i, e in enumerate(items):
        if not isinstance(e, (tuple, list)) or len(e) not in (2, 3):
            raise ValueError(f"edges[{i}] must be (u, v) or (u, v, attrs); got {e!r}")
        extra = dict(e[2]) if len(e) == 3 and e[2] is not None else {}
        if not is_nx:
            unknown = set(extra) - set(_EDGE_ATTRS)
            if unknown:
                raise ValueError(f"edges[{i}]: unknown attributes {sorted(unknown)}; "
                                 f"known: {list(_EDGE_ATTRS)}")
        if e[0] == e[1]:
            raise ValueError(f"edges[{i}] is a self-loop at {e[0]!r}; remove it")
        src.append(nid(e[0]))
        dst.append(nid(e[1]))
        for a in _EDGE_ATTRS:
            attr[a].append(_check_pos(extra.get(a, defaults[a]), f"edges[{i}].{a}",
                                      allow_zero=a != "capacity_gbps"))
    if not labels:
        raise ValueError("edges is empty: a topology needs at least one edge")
    n_nodes = len(labels)
    if hosts is None:
        host_nodes = np.arange(n_nodes)
        all_hosts = True
    else:
        host_list = list(hosts)
        missing = [h for h in host_list if h not in node_id]
        if missing:
            raise ValueError(f"hosts: {missing[:5]} are not nodes of the graph")
        host_nodes = np.array([node_id[h] for h in host_list], np.int64)
        if len(np.unique(host_nodes)) != host_nodes.size:
            raise ValueError("hosts lists a node more than once")
        all_hosts = host_nodes.size == n_nodes
    if host_transit is None:
        host_transit = all_hosts
    src, dst = np.array(src, np.int64), np.array(dst, np.int64)
    vals = {a: np.array(v, np.float64) for a, v in attr.items()}
    if directed:
        link_src, link_dst = src, dst
        reverse = _pair_reverse(src, dst)
        per_link = vals
    else:
        link_src = np.stack([src, dst], axis=1).reshape(-1)
        link_dst = np.stack([dst, src], axis=1).reshape(-1)
        reverse = np.arange(link_src.size) ^ 1
        per_link = {a: np.repeat(v, 2) for a, v in vals.items()}
    is_host = np.zeros(n_nodes, bool)
    is_host[host_nodes] = True
    return _maybe_servers(Topology(
        node_names=tuple(str(x) for x in labels), node_is_host=is_host,
        node_tier=np.where(is_host, 0, 1), hosts=host_nodes, link_src=link_src,
        link_dst=link_dst, capacity=units.gbps(per_link["capacity_gbps"]),
        latency=units.us(per_link["latency_us"]), buffer=units.kb(per_link["buffer_kb"]),
        link_up=np.ones(link_src.size, bool), link_reverse=reverse,
        host_server=np.arange(host_nodes.size), name=name, kind="graph",
        params=dict(directed=bool(directed)), updown=False,
        host_transit=bool(host_transit)),
        dict(gpus_per_server=gpus_per_server, nvlink_gbps=nvlink_gbps, pcie_gbps=pcie_gbps,
                  nvlink_latency_us=nvlink_latency_us, pcie_latency_us=pcie_latency_us), nics_per_server)


def _pair_reverse(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Pairs each link u->v with the earliest unpaired link v->u; -1 where none."""
    rev = np.full(src.size, -1, np.int64)
    waiting: dict[tuple[int, int], list[int]] = {}
    # One pass over the edge list (a host-side builder, not a hot path).
    for i, (u, v) in enumerate(zip(src.tolist(), dst.tolist())):
        partners = waiting.get((v, u))
        if partners:
            j = partners.pop(0)
            rev[i], rev[j] = j, i
        else:
            waiting.setdefault((u, v), []).append(i)
    return rev

#: Public name of :func:`_host_indices` (host names or indices -> int64 host indices).
host_indices = _host_indices
