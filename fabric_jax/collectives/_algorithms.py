"""NCCL's algorithms on a topology: rank layouts, ring channels, NVLS and SHARP.

The schedules themselves (ring, tree, chain; who sends to whom after which transfer)
are :mod:`.schedules`; this module lays them out on servers and rails and adds the
in-switch transfers.  Every builder appends to a :class:`~.schedules.TransferDag` and
returns, per rank, the id of the transfer after whose arrival that rank's output is
complete (``done``), so that algorithms compose: the hierarchical all-reduce is an
intra-server reduce-scatter whose ``done`` feeds an inter-server all-reduce whose
``done`` feeds an intra-server all-gather, chunk by chunk (pipelined).  Host-to-host
transfers are routed at the end (:func:`fabric_jax.shortest_paths` and the fabric's
routing split); in-switch transfers (NVLS, SHARP) name their links.

Ring channels (NCCL ``ncclPatternRingTwice``, :func:`.schedules.ring`): ``S / (n C)``
per step and channel, so uncontended one-channel time is ``2 (n-1) (alpha + S/(n B))``
for all-reduce.  Across servers the ``C`` channels are rail-aligned "snakes"
(:func:`ring_orders`): channel ``j`` enters even servers at local GPU ``j`` going up
and odd servers at ``j-1`` going down, so every server boundary is crossed on one rail
and each NIC direction carries one channel (NCCL's rings use each NIC once per
direction the same way; PXN is not modelled).

Tree (NCCL ``ncclPatternTreeUpDown``, :func:`.schedules.tree_parents`): inside a
server the ranks form a chain; across servers the chain heads form NCCL's two
complementary binary trees, each carrying half the data.  Reduce up, broadcast down,
pipelined in chunks.

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
from .schedules import dep_columns

__all__ = ["ring_orders"]


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
                         *dep_columns(ready, 1))


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
