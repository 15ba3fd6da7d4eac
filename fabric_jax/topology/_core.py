"""The :class:`Topology` record: nodes and directed links held as flat NumPy arrays.

A full-duplex cable is two links, one per direction, paired by ``link_reverse``; each
link has its own capacity (bytes/s), latency (seconds, charged once per hop), egress
buffer (bytes) and ``link_up`` flag.  Hosts are addressed by their host index
``0 .. n_hosts-1`` (``hosts[h]`` is the node id of host ``h``); :func:`host_indices`
turns host names or indices into host indices.  The builders live beside this module
(``_clos``, ``_servers``, ``_graph``); this one also holds the default link parameters
and the argument checks they share.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Kinds whose ``node_tier`` is a strict Clos layering: routing there is up/down.
CLOS_KINDS = ("leaf_spine", "fat_tree", "rail_optimized")

#: Default link parameters (sources in the docstring of :mod:`fabric_jax.topology`).
DEFAULT_LINK_GBPS = 400.0
DEFAULT_LATENCY_US = 1.0
DEFAULT_BUFFER_KB = 1000.0

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
        idx = host_indices(self, name_or_index, "name_or_index")
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


def host_indices(topology: Topology, x, arg: str) -> np.ndarray:
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


# ====================================================================== checks
def check_int(value, arg: str, minimum: int) -> int:
    """``value`` as an int; ValueError naming ``arg`` unless an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{arg} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{arg} must be >= {minimum}; got {value}")
    return int(value)


def check_pos(value, arg: str, allow_zero: bool = False) -> float:
    """``value`` as a float; ValueError naming ``arg`` unless finite and > 0 (or >= 0)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{arg} must be a number; got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{arg} must be finite and {'>=' if allow_zero else '>'} 0; "
                         f"got {value!r}")
    return v
