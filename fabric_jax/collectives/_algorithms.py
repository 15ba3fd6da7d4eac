"""Collective algorithms as DAGs of chunked transfers (NCCL's ring, tree, NVLS, SHARP).

Every builder appends transfers to a :class:`_Dag` and returns, per rank, the id of
the transfer after whose arrival that rank's output is complete (``done``), so that
algorithms compose: the hierarchical all-reduce is an intra-server reduce-scatter whose
``done`` feeds an inter-server all-reduce whose ``done`` feeds an intra-server
all-gather, chunk by chunk (pipelined).  Host-to-host transfers are routed at the end
(:func:`fabric_jax.shortest_paths` and the fabric's routing split); in-switch
transfers (NVLS, SHARP) name their links.

Ring (Patarasuk & Yuan, JPDC 2009; NCCL ``ncclPatternRingTwice``): ``2 (n-1)`` steps
of ``S / (n C)`` per channel for all-reduce, ``n-1`` for all-gather and
reduce-scatter.  Step ``s`` from rank ``i`` waits for step ``s-1`` into rank ``i``
(store and forward), so uncontended one-channel time is ``2 (n-1) (alpha + S/(n B))``.
Across servers the ``C`` channels are rail-aligned "snakes" (:func:`ring_orders`):
channel ``j`` enters even servers at local GPU ``j`` going up and odd servers at
``j-1`` going down, so every server boundary is crossed on one rail and each NIC
direction carries one channel (NCCL's rings use each NIC once per direction the same
way; PXN is not modelled).

Tree (NCCL ``ncclPatternTreeUpDown``; double binary tree of Sanders, Speck & Traeff,
Parallel Computing 35(12), 2009, as ``ncclGetDtree``): inside a server the ranks form
a chain; across servers the chain heads form NCCL's two complementary binary trees,
each carrying half the data.  Reduce up, broadcast down, pipelined in chunks.

NVLS (NVLink SHARP, NVSwitch multimem; NCCL ``ncclPatternNvls``): rank ``i`` owns a
shard ``S/g``; one *reduction* transfer per shard crosses every GPU's NVLink up-link
and the owner's down-link (the switch reads and adds the shard from all GPUs), then a
*multicast* transfer crosses the owner's up-link and every down-link.  Per GPU and
direction that is ``S (g+1)/g`` bytes.

SHARP (Graham et al., COMHPC 2016; NCCL CollNet): per rail, an aggregation tree of
the fabric's switches: each NIC sends its shard up once, each switch forwards one
reduced copy to its parent, the root's result comes down once per link.  Every level
adds :data:`~._tuning.SHARP_LEVEL_LATENCY_US`.  ``sharp_max_trees`` limits how many
rails aggregate at once (the switch's concurrent-tree limit): rail ``r`` waits for rail
``r - sharp_max_trees``.

Units: bytes, seconds.
"""

from __future__ import annotations

import numpy as np

from ..topology import Topology
from ..workloads.trees import double_binary_tree, tree_depth

__all__ = ["ring_orders"]


class _Dag:
    """Transfers appended in topological order; host pairs routed at the end."""

    def __init__(self):
        self.src, self.dst, self.size, self.deps = [], [], [], []
        self.rows, self.hop_latency = [], []   # explicit links (None for host pairs)
        self.n = 0

    def _append(self, src, dst, size, deps, rows, hop_latency):
        m = int(np.size(src))
        ids = self.n + np.arange(m)
        self.src.append(np.asarray(src, np.int64).ravel())
        self.dst.append(np.asarray(dst, np.int64).ravel())
        self.size.append(np.broadcast_to(np.asarray(size, float), np.shape(src)).ravel())
        cols = [np.broadcast_to(np.asarray(d, np.int64), np.shape(src)).ravel()
                for d in deps if d is not None]
        self.deps.append(np.stack(cols, 1) if cols else np.full((m, 1), -1))
        self.rows.append(rows)
        self.hop_latency.append(hop_latency)
        self.n += m
        return ids.reshape(np.shape(src))

    def add(self, src, dst, size, *deps):
        """Host-to-host transfers (arrays of one shape); returns their ids."""
        src = np.asarray(src)
        return self._append(src, np.asarray(dst), size, deps, None, None)

    def add_links(self, rows, size, hop_latency, *deps):
        """Transfers over explicit links ``rows [m, w]`` (-1 pad); ``hop_latency
        [m]`` seconds of path latency each."""
        rows = np.asarray(rows, np.int64)
        m = rows.shape[0]
        return self._append(np.full(m, -1), np.full(m, -1), size, deps, rows,
                            np.broadcast_to(np.asarray(hop_latency, float), (m,)))


def _cols(ready, ndim: int) -> list:
    """Dependency columns of ``ready``: one array of ``ndim`` dims per trailing entry
    when ``ready`` has an extra trailing axis (several transfers to wait for)."""
    if ready is None:
        return []
    ready = np.asarray(ready)
    if ready.ndim == ndim + 1:
        return [ready[..., c] for c in range(ready.shape[-1])]
    return [ready]


# ------------------------------------------------------------------ rank layouts
def server_groups(topology: Topology, hosts: np.ndarray):
    """Ranks grouped by server: ``int [servers, g]`` rank positions, or ``None`` when the
    servers hold different numbers of ranks."""
    srv = topology.host_server[hosts]
    uniq, first = np.unique(srv, return_index=True)
    order = uniq[np.argsort(first)]
    groups = [np.flatnonzero(srv == s) for s in order]
    if len({g.size for g in groups}) != 1:
        return None
    return np.stack(groups)


def ring_orders(topology: Topology, hosts, n_channels: int) -> np.ndarray:
    """Rank order of each ring channel, ``int [channels, n]`` host indices.

    One server (or uneven servers): a single ring in the given order (channels over a
    non-blocking NVSwitch load the same links, so they are merged).  Several servers
    with ``g`` ranks each: ``min(n_channels, g)`` rail-aligned snakes (module
    docstring).
    """
    hosts = np.asarray(hosts, np.int64)
    groups = server_groups(topology, hosts)
    if groups is None or groups.shape[0] == 1 or groups.shape[1] == 1:
        return hosts[None]
    n_srv, g = groups.shape
    chans = []
    for j in range(min(int(n_channels), g)):
        t = np.arange(g)
        parts = [groups[m][(j + t) % g] if m % 2 == 0 else groups[m][(j - 1 - t) % g]
                 for m in range(n_srv)]
        chans.append(hosts[np.concatenate(parts)])
    return np.stack(chans)


# ------------------------------------------------------------------ ring
def ring(dag: _Dag, order: np.ndarray, n_steps: int, flow_bytes: float,
         ready=None, prev=None):
    """``n_steps`` ring steps on each row of ``order [rows, n]`` (hosts).

    Args:
      ready: ``[rows, n]`` transfer after which each position may start (-1 none), or
        ``[rows, n, k]`` several.
      prev: ids ``[n_steps, rows, n]`` of the same ring for the previous chunk (the
        same edge and step waits for it: chunks pipeline instead of sharing).

    Returns:
      ``(ids [n_steps, rows, n], done [rows, n])``: ``done`` is the last transfer into
      each position.
    """
    rows, n = order.shape
    ready_cols = _cols(ready, 2)
    dst = np.roll(order, -1, axis=1)
    ids = np.zeros((n_steps, rows, n), np.int64)
    for s in range(n_steps):  # a Python loop over steps, vectorised over ranks
        into = np.roll(ids[s - 1], 1, axis=1) if s > 0 else -1
        ids[s] = dag.add(order, dst, flow_bytes, into,
                         None if prev is None else prev[s], *ready_cols)
    return ids, np.roll(ids[-1], 1, axis=1)


def chain(dag: _Dag, order: np.ndarray, n_chunks: int, flow_bytes: float):
    """Pipelined chain ``order[:, 0] -> ... -> order[:, -1]`` (ring broadcast)."""
    rows, n = order.shape
    prev = None
    for _c in range(n_chunks):
        ids = np.zeros((n - 1, rows), np.int64)
        for t in range(n - 1):
            ids[t] = dag.add(order[:, t], order[:, t + 1], flow_bytes,
                             ids[t - 1] if t > 0 else -1,
                             None if prev is None else prev[t])
        prev = ids
    return prev


# ------------------------------------------------------------------ trees
def tree_reduce_bcast(dag: _Dag, host_of: np.ndarray, parent: np.ndarray,
                      flow_bytes: float, ready=None, prev=None):
    """Reduce up and broadcast down one tree (one chunk).

    Args:
      host_of: ``[n]`` host of each tree position.
      parent: ``[n]`` parent position, -1 at the root.
      ready: ``[n]`` transfer after which each position's input is ready.
      prev: ``(up_ids, down_ids)`` of the previous chunk on this tree.

    Returns:
      ``((up_ids [n], down_ids [n]), done [n, k])``: ``up_ids``/``down_ids`` are -1 for
      the root; ``done`` lists the transfers after which each position holds the
      result (its broadcast in; at the root every reduction in), -1 padded.
    """
    n = parent.size
    ready = np.full(n, -1) if ready is None else np.asarray(ready)
    depth = tree_depth(parent)
    nonroot = np.flatnonzero(parent >= 0)
    root = int(np.flatnonzero(parent < 0)[0])
    up = np.full(n, -1, np.int64)
    # Reduction: deepest first, so a child's transfer precedes its parent's.
    for d in sorted(set(depth[nonroot].tolist()), reverse=True):
        v = nonroot[depth[nonroot] == d]
        kids = [up[(parent == x)] for x in v]
        width = max((k.size for k in kids), default=0)
        kid_dep = np.full((v.size, max(width, 1)), -1, np.int64)
        for r, k in enumerate(kids):
            kid_dep[r, :k.size] = k
        cols = [kid_dep[:, c] for c in range(kid_dep.shape[1])]
        up[v] = dag.add(host_of[v], host_of[parent[v]], flow_bytes, ready[v],
                        None if prev is None else prev[0][v], *cols)
    root_in = up[parent == root]
    down = np.full(n, -1, np.int64)
    for d in sorted(set(depth[nonroot].tolist())):
        v = nonroot[depth[nonroot] == d]
        p = parent[v]
        if d == 1:
            cols = [np.full(v.size, x) for x in root_in] + [np.full(v.size, ready[root])]
        else:
            cols = [down[p]]
        down[v] = dag.add(host_of[p], host_of[v], flow_bytes,
                          None if prev is None else prev[1][v], *cols)
    done = np.full((n, max(root_in.size, 1)), -1, np.int64)
    done[:, 0] = down
    done[root, :] = -1
    done[root, :root_in.size] = root_in
    if root_in.size == 0:
        done[root, 0] = ready[root]
    return (up, down), done


def tree_parents(n_servers: int, g: int, head: int = 0) -> np.ndarray:
    """NCCL's tree over ``n_servers x g`` positions (position ``m g + t`` is the
    ``t``-th GPU of server ``m``'s chain starting at local GPU ``head``): ``[2, n]``
    parents, chains inside servers, the double binary tree across chain heads."""
    node_par = double_binary_tree(n_servers) if n_servers > 1 else np.full((2, 1), -1)
    out = np.full((node_par.shape[0], n_servers * g), -1, np.int64)
    for k, par in enumerate(node_par):
        for m in range(n_servers):
            base = m * g
            out[k, base + 1:base + g] = base + np.arange(g - 1)
            out[k, base] = -1 if par[m] < 0 else par[m] * g
    return out


# ------------------------------------------------------------------ NVLS
def nvls_links(topology: Topology, hosts: np.ndarray):
    """``(up, down)`` NVLink link ids of each host (GPU -> NVSwitch and back)."""
    if not topology.params.get("server_model"):
        raise ValueError("algorithm='nvls' needs a topology with the server model "
                         "(gpus_per_server=...)")
    L0 = int(topology.params["fabric_links"])
    return L0 + 2 * hosts, L0 + 2 * hosts + 1


def nvls_reduce(dag, topology, group_hosts, flow_bytes, latency, ready=None, prev=None):
    """Reduction transfers of one server group ``[g]``: owner ``i``'s shard read from
    every GPU's up-link and delivered on ``i``'s down-link.  Returns ids ``[g]``."""
    up, down = nvls_links(topology, group_hosts)
    g = group_hosts.size
    rows = np.concatenate([np.broadcast_to(up, (g, g)), down[:, None]], axis=1)
    ready = np.full(g, -1) if ready is None else ready
    cols = [np.full(g, r) for r in ready] if np.any(ready >= 0) else []
    return dag.add_links(rows, flow_bytes, latency, None if prev is None else prev, *cols)


def nvls_multicast(dag, topology, group_hosts, flow_bytes, latency, ready, prev=None):
    """Multicast of owner ``i``'s shard: ``i``'s up-link and every down-link."""
    up, down = nvls_links(topology, group_hosts)
    g = group_hosts.size
    rows = np.concatenate([up[:, None], np.broadcast_to(down, (g, g))], axis=1)
    return dag.add_links(rows, flow_bytes, latency, None if prev is None else prev,
                         *_cols(ready, 1))


# ------------------------------------------------------------------ SHARP
def sharp_tree(topology: Topology, nic_nodes: np.ndarray, pick: int):
    """Aggregation tree above ``nic_nodes``: ``[(child_nodes, parent_nodes), ...]`` per
    level, bottom up, plus the root node.

    Each NIC's parent is its (first) upper neighbour; at each level the nodes take a
    common upper neighbour when one exists (the ``pick``-th, so rails use different
    spines), else each its ``pick``-th upper neighbour.
    """
    tier = topology.node_tier
    up_ok = topology.link_up & (tier[topology.link_dst] > tier[topology.link_src])
    ups: dict[int, list[int]] = {}
    for s, d in zip(topology.link_src[up_ok].tolist(), topology.link_dst[up_ok].tolist()):
        ups.setdefault(s, []).append(d)
    for k in ups:
        ups[k] = sorted(set(ups[k]))
    levels = []
    cur = np.asarray(nic_nodes, np.int64)
    for _ in range(8):
        nodes = np.unique(cur)
        if nodes.size == 1 and levels:
            return levels, int(nodes[0])
        sets = [set(ups.get(int(x), [])) for x in nodes]
        if any(not s for s in sets):
            raise ValueError("sharp: the NICs have no common aggregation switch; use a "
                             "Clos fabric")
        common = sorted(set.intersection(*sets))
        if common:
            par = np.full(nodes.size, common[pick % len(common)])
        else:
            par = np.array([sorted(s)[pick % len(s)] for s in sets])
        levels.append((nodes, par))
        cur = par
        if np.unique(par).size == 1:
            return levels, int(par[0])
    raise ValueError("sharp: no aggregation root within 8 levels")


def _link_between(topology, a, b):
    ids = np.flatnonzero((topology.link_src == a) & (topology.link_dst == b)
                         & topology.link_up)
    return int(ids[0])


def sharp_all_reduce(dag, topology, gpu_hosts, flow_bytes, level_latency, ready,
                     pick, prev=None, wait=None):
    """In-network all-reduce of one shard over the GPUs ``gpu_hosts [N]`` (one per
    server, same rail): up through the PCIe link and the NIC, reduced once per switch,
    down once per link.  Returns ``(ids, done [N])``; ``wait`` delays the leaves'
    sends until that transfer (concurrent-tree limit)."""
    L0 = int(topology.params["fabric_links"])
    G = topology.n_hosts
    pcie_up = L0 + 2 * G + 2 * gpu_hosts
    nic = topology.link_dst[pcie_up]
    levels, root = sharp_tree(topology, nic, pick)
    lat = topology.latency
    # leaves: GPU -> NIC -> first switch
    first_nodes, first_par = levels[0]
    par_of_nic = dict(zip(first_nodes.tolist(), first_par.tolist()))
    sw = np.array([par_of_nic[int(x)] for x in nic])
    nic_up = np.array([_link_between(topology, a, b) for a, b in zip(nic, sw)])
    rows = np.stack([pcie_up, nic_up], 1)
    leaf = dag.add_links(rows, flow_bytes, lat[rows].sum(1) + level_latency,
                         ready, None if prev is None else prev[0],
                         None if wait is None else np.full(gpu_hosts.size, wait))
    into = {}  # switch node -> ids of transfers into it (going up)
    for s, i in zip(sw.tolist(), leaf.tolist()):
        into.setdefault(s, []).append(i)
    up_ids = []
    for nodes, par in levels[1:]:
        width = max(len(into[int(x)]) for x in nodes)
        dep = np.full((nodes.size, width), -1, np.int64)
        for r, x in enumerate(nodes.tolist()):
            dep[r, :len(into[x])] = into[x]
        links = np.array([_link_between(topology, a, b) for a, b in zip(nodes, par)])
        ids = dag.add_links(links[:, None], flow_bytes, lat[links] + level_latency,
                            *[dep[:, c] for c in range(width)])
        up_ids.append(ids)
        for p, i in zip(par.tolist(), ids.tolist()):
            into.setdefault(p, []).append(i)
    # down: from the root, each switch sends the result once per child link
    arrived = {root: into[root]}
    down_ids = []
    for nodes, par in reversed(levels[1:]):
        links = np.array([_link_between(topology, b, a) for a, b in zip(nodes, par)])
        width = max(len(arrived[int(p)]) for p in par)
        dep = np.full((nodes.size, width), -1, np.int64)
        for r, p in enumerate(par.tolist()):
            dep[r, :len(arrived[p])] = arrived[p]
        ids = dag.add_links(links[:, None], flow_bytes, lat[links] + level_latency,
                            *[dep[:, c] for c in range(width)])
        down_ids.append(ids)
        for x, i in zip(nodes.tolist(), ids.tolist()):
            arrived[x] = [i]
    nic_down = np.array([_link_between(topology, b, a) for a, b in zip(nic, sw)])
    rows = np.stack([nic_down, pcie_up + 1], 1)
    width = max(len(arrived[int(s)]) for s in sw)
    dep = np.full((sw.size, width), -1, np.int64)
    for r, s in enumerate(sw.tolist()):
        dep[r, :len(arrived[s])] = arrived[s]
    last = dag.add_links(rows, flow_bytes, lat[rows].sum(1),
                         None if prev is None else prev[1],
                         *[dep[:, c] for c in range(width)])
    return (leaf, last), last
