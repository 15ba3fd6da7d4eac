"""Topologies of arbitrary graphs: :func:`from_edges`, :func:`disjoint_union`.

An edge list or a networkx graph becomes a :class:`~fabric_jax.topology.Topology` with
plain min-hop routing (``updown=False``): hosts at tier 0, every other node at tier 1.
Undirected edges are full-duplex cables (two links); directed ones are single links,
paired with an opposite link where the graph has one.

Several topologies side by side, sharing no link, are one topology
(:func:`disjoint_union`): a block-diagonal network in which each part runs as if
alone, so many small cases share one simulation (one compile, static shapes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import units
from ._core import (DEFAULT_BUFFER_KB, DEFAULT_LATENCY_US, DEFAULT_LINK_GBPS, Topology,
                    check_pos)
from ._servers import (DEFAULT_NVLINK_GBPS, DEFAULT_NVLINK_LATENCY_US, DEFAULT_PCIE_GBPS,
                       DEFAULT_PCIE_LATENCY_US, ServerModel)


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
    node_id, items, directed, hosts, is_nx = _graph_items(edges, directed, hosts)
    defaults = dict(capacity_gbps=check_pos(capacity_gbps, "capacity_gbps"),
                    latency_us=check_pos(latency_us, "latency_us", allow_zero=True),
                    buffer_kb=check_pos(buffer_kb, "buffer_kb", allow_zero=True))
    src, dst, vals = _edge_arrays(items, node_id, defaults, known_only=not is_nx)
    if not node_id:
        raise ValueError("edges is empty: a topology needs at least one edge")
    labels = list(node_id)
    n_nodes = len(labels)
    host_nodes = _host_nodes(hosts, node_id)
    if host_transit is None:
        host_transit = host_nodes.size == n_nodes
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
    topo = Topology(
        node_names=tuple(str(x) for x in labels), node_is_host=is_host,
        node_tier=np.where(is_host, 0, 1), hosts=host_nodes, link_src=link_src,
        link_dst=link_dst, capacity=units.gbps(per_link["capacity_gbps"]),
        latency=units.us(per_link["latency_us"]), buffer=units.kb(per_link["buffer_kb"]),
        link_up=np.ones(link_src.size, bool), link_reverse=reverse,
        host_server=np.arange(host_nodes.size), name=name, kind="graph",
        params=dict(directed=bool(directed)), updown=False,
        host_transit=bool(host_transit))
    return ServerModel(gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us,
                       pcie_latency_us).apply(topo, nics_per_server)


def _graph_items(edges, directed: bool, hosts):
    """``(node_id, items, directed, hosts, is_nx)`` of an edge list or a networkx graph.

    ``node_id`` maps node labels to ids in order of appearance (a networkx graph's
    nodes first); a networkx graph sets ``directed`` and, when ``hosts`` is None, the
    hosts from its nodes' ``host`` attribute.
    """
    is_nx = hasattr(edges, "is_directed") and hasattr(edges, "nodes") and hasattr(
        edges, "edges")
    node_id: dict[Any, int] = {}
    if is_nx:
        directed = bool(edges.is_directed())
        for label in edges.nodes:
            node_id.setdefault(label, len(node_id))
        if hosts is None:
            marked = [n for n, d in edges.nodes(data=True) if d.get("host", False)]
            hosts = marked or None
        return node_id, list(edges.edges(data=True)), directed, hosts, is_nx
    try:
        items = list(edges)
    except TypeError:
        raise ValueError("edges must be an iterable of (u, v[, attrs]) or a networkx "
                         "graph") from None
    return node_id, items, directed, hosts, is_nx


def _edge_arrays(items, node_id: dict, defaults: dict, known_only: bool):
    """``(src, dst, attrs)``: node ids (new labels added to ``node_id``) and checked
    per-edge ``capacity_gbps``, ``latency_us``, ``buffer_kb`` (``defaults`` where an
    edge has none); ``known_only`` refuses other attribute names."""
    src, dst, attr = [], [], {a: [] for a in _EDGE_ATTRS}
    for i, e in enumerate(items):
        if not isinstance(e, (tuple, list)) or len(e) not in (2, 3):
            raise ValueError(f"edges[{i}] must be (u, v) or (u, v, attrs); got {e!r}")
        extra = dict(e[2]) if len(e) == 3 and e[2] is not None else {}
        if known_only:
            unknown = set(extra) - set(_EDGE_ATTRS)
            if unknown:
                raise ValueError(f"edges[{i}]: unknown attributes {sorted(unknown)}; "
                                 f"known: {list(_EDGE_ATTRS)}")
        if e[0] == e[1]:
            raise ValueError(f"edges[{i}] is a self-loop at {e[0]!r}; remove it")
        src.append(node_id.setdefault(e[0], len(node_id)))
        dst.append(node_id.setdefault(e[1], len(node_id)))
        for a in _EDGE_ATTRS:
            attr[a].append(check_pos(extra.get(a, defaults[a]), f"edges[{i}].{a}",
                                     allow_zero=a != "capacity_gbps"))
    return (np.array(src, np.int64), np.array(dst, np.int64),
            {a: np.array(v, np.float64) for a, v in attr.items()})


def _host_nodes(hosts, node_id: dict) -> np.ndarray:
    """Node ids of ``hosts`` (labels, host-index order); every node when None."""
    if hosts is None:
        return np.arange(len(node_id))
    host_list = list(hosts)
    missing = [h for h in host_list if h not in node_id]
    if missing:
        raise ValueError(f"hosts: {missing[:5]} are not nodes of the graph")
    host_nodes = np.array([node_id[h] for h in host_list], np.int64)
    if len(np.unique(host_nodes)) != host_nodes.size:
        raise ValueError("hosts lists a node more than once")
    return host_nodes


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


class UnionOffsets(NamedTuple):
    """Where each part of a :func:`disjoint_union` starts: ``[parts + 1]`` int64
    cumulative counts of ``nodes``, ``links`` and ``hosts`` (the last entry the total)."""

    nodes: np.ndarray
    links: np.ndarray
    hosts: np.ndarray


def disjoint_union(topologies) -> tuple[Topology, UnionOffsets]:
    """Topologies side by side as one, sharing no node or link.

    Part ``i``'s nodes, links, hosts and servers follow those of parts ``< i`` in order
    (node ``n`` of part ``i`` is named ``b{i}/<name>``); every array keeps its values
    (capacities, latencies, buffers, failed links).  The union routes valley-free only
    when every part does (``updown``), and lets hosts forward when any part does.

    Args:
      topologies: a sequence of :class:`~fabric_jax.topology.Topology`.

    Returns:
      ``(topology, offsets)``: the union (``kind="graph"``, ``name="union"``) and the
      :class:`UnionOffsets` that map a part's node, link and host ids into it
      (``id + offsets.links[i]``).

    Raises:
      ValueError: no topology given.
    """
    parts = list(topologies)
    if not parts:
        raise ValueError("disjoint_union needs at least one topology")
    off = UnionOffsets(*(np.cumsum([0] + [getattr(t, n) for t in parts])
                         for n in ("n_nodes", "n_links", "n_hosts")))

    def cat(field, shift=None):
        return np.concatenate([np.asarray(getattr(t, field)) + (0 if shift is None else shift[i])
                               for i, t in enumerate(parts)])

    reverse = np.concatenate([np.where(t.link_reverse >= 0, t.link_reverse + off.links[i], -1)
                              for i, t in enumerate(parts)])
    topo = Topology(
        node_names=tuple(f"b{i}/{n}" for i, t in enumerate(parts) for n in t.node_names),
        node_is_host=cat("node_is_host"), node_tier=cat("node_tier"),
        hosts=cat("hosts", off.nodes), link_src=cat("link_src", off.nodes),
        link_dst=cat("link_dst", off.nodes), capacity=cat("capacity"),
        latency=cat("latency"), buffer=cat("buffer"), link_up=cat("link_up"),
        link_reverse=reverse, host_server=cat("host_server", off.hosts), name="union",
        kind="graph", updown=all(t.updown for t in parts),
        host_transit=any(t.host_transit for t in parts))
    return topo, off
