"""Fabrics at AI-factory scale: the build, its rails, and vectorised path tables (host side).

:func:`sweep_topology` builds ``G`` GPUs of a named system on a rail-optimised fabric
within a switch radix, growing tiers or planes beyond it (the all-reduce sweep's
fabrics); :func:`scale_topology` is the build the scale study uses on it.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..paths import mix64
from ..topology import Topology

__all__ = ["DEFAULT_SWITCH_RADIX", "sweep_topology", "scale_topology", "RailView",
           "rail_view", "PathTable",
           "clos_paths", "rail_symmetric_paths", "ecmp_paths", "TierTable", "tier_paths",
           "tiered_ecmp_paths"]

#: Ports per switch at the NIC speed: 128 x 400G, a 51.2 Tb/s ASIC (Quantum-X800 in
#: 400G mode, Spectrum-4).  Half go down, half up: a non-blocking rail leaf serves
#: ``radix / 2`` servers (a scalable unit), and two tiers hold ``radix^2 / 2`` NICs
#: (8,192 GPUs of 8-NIC servers).
DEFAULT_SWITCH_RADIX = 128


def _radix_error(err: ValueError) -> bool:
    return "switch_radix" in str(err)


def sweep_topology(n_gpus: int, *, system="hgx_h100", servers_per_leaf: int = 16,
                   switch_radix: int | None = 128, beyond_radix: str = "tiers",
                   **overrides):
    """``n_gpus`` GPUs of ``system`` on a rail-optimised fabric that respects the radix.

    Servers form scalable units of ``min(servers_per_leaf, servers / 2)`` servers (at
    least two units, so cross-server traffic crosses the spines).  The two-tier build
    (:func:`fabric_jax.systems.build`, ``rail_optimized``) is tried with
    ``switch_radix``; when a switch would need more ports (``ValueError`` from the
    builder), ``beyond_radix`` says what grows:

    * ``"tiers"``: ``tiers=3``, pods of ``groups_per_pod`` scalable units (the largest
      that fits the radix) under a super-spine layer;
    * ``"planes"``: ``planes=P`` for ``P = 2, 4, 8``, the radix multiplied by ``P`` at
      the per-plane port speed (a 51.2 Tb/s switch: 128 x 400G, 256 x 200G ...).

    Args:
      n_gpus: a multiple of ``2 x`` the system's GPUs per server.
      system: a :data:`fabric_jax.systems.SYSTEMS` name.
      servers_per_leaf: servers per scalable unit (rail-leaf down ports).
      switch_radix: ports per switch at the NIC speed (default 128: 128 x 400G, a
        51.2 Tb/s ASIC such as Quantum-X800 in 400G mode or Spectrum-4); ``None``:
        unchecked.
      beyond_radix: ``"tiers"`` or ``"planes"``.
      overrides: more :func:`fabric_jax.systems.build` keywords (``latency_us`` ...).

    Raises:
      ValueError: bad sizes, an unknown ``beyond_radix``, or no build within the radix.

    Used by the all-reduce sweep (:func:`~fabric_jax.scale.scaling_curves`) with the
    server model, and by :func:`scale_topology`.
    """
    from ..systems import build, get_system
    sysm = get_system(system)
    g = sysm.gpus_per_server
    if isinstance(n_gpus, bool) or int(n_gpus) != n_gpus or n_gpus < 2 * g or n_gpus % g:
        raise ValueError(f"n_gpus must be a multiple of {g} GPUs per server and >= "
                         f"{2 * g} (two servers of {sysm.name}); got {n_gpus!r}")
    if beyond_radix not in ("tiers", "planes"):
        raise ValueError(f"beyond_radix must be 'tiers' or 'planes'; got {beyond_radix!r}")
    n_srv = int(n_gpus) // g
    spl = max(1, min(int(servers_per_leaf), n_srv // 2))
    kw = dict(overrides, servers_per_leaf=spl)
    try:
        return build(sysm, n_srv, switch_radix=switch_radix, **kw)
    except ValueError as err:
        if switch_radix is None or not _radix_error(err):
            raise
        first = err
    n_groups = -(-n_srv // spl)
    if beyond_radix == "planes":
        for planes in (2, 4, 8):
            try:
                return build(sysm, n_srv, switch_radix=switch_radix * planes,
                             planes=planes, **kw)
            except ValueError as err:
                if not _radix_error(err):
                    raise
    else:
        for per_pod in range(n_groups - 1, 0, -1):
            try:
                return build(sysm, n_srv, switch_radix=switch_radix, tiers=3,
                             groups_per_pod=per_pod, **kw)
            except ValueError as err:
                if not _radix_error(err):
                    raise
    raise ValueError(f"no {beyond_radix} build of {n_gpus} GPUs fits switch_radix="
                     f"{switch_radix}: {first}")


def scale_topology(n_gpus: int, system="hgx_h100", *,
                   switch_radix: int | None = DEFAULT_SWITCH_RADIX,
                   beyond_radix: str = "planes", servers_per_leaf: int | None = None,
                   latency_us: float | None = None) -> Topology:
    """``n_gpus`` GPUs of ``system`` on the rail-optimised fabric a real build uses.

    The build of :func:`sweep_topology` with scalable units of
    ``servers_per_leaf`` servers (default ``switch_radix / 2``: the rail leaf's down
    ports, its other half going up to as many spines; at least two units), NIC hosts
    only (TP traffic stays on NVLink, which the step's compute time carries, so the
    server model's GPU, NVSwitch and PCIe nodes are not built).  Two tiers while a
    spine's ports (one per rail leaf) fit the radix; beyond it ``beyond_radix``:
    ``"planes"`` (default: 2, 4 or 8 independent planes of ``NIC / P`` ports, the radix
    times ``P`` at that speed: Spectrum-X multiplane, Alibaba HPN, DeepSeek's multi-plane
    fat-tree, sources in :func:`fabric_jax.topology.leaf_spine`) or ``"tiers"`` (pods
    under a super-spine layer, whose spine-to-super-spine links every rail shares).

    Args:
      n_gpus: a multiple of the system's GPUs per server, at least two servers.
      system: a :data:`fabric_jax.systems.SYSTEMS` name.
      switch_radix: ports per switch at the NIC speed (``None``: unchecked, two tiers).
      beyond_radix: ``"planes"`` or ``"tiers"``.
      servers_per_leaf: servers per scalable unit (default ``switch_radix // 2``, or
        64 with no radix).
      latency_us: fabric latency per link (default the system's).

    Raises:
      ValueError: bad sizes or names, naming the argument.
    """
    from ..systems import get_system
    sysm = get_system(system)
    if sysm.nics_per_server != sysm.gpus_per_server:
        raise ValueError(f"system: {sysm.name} has {sysm.nics_per_server} NICs for "
                         f"{sysm.gpus_per_server} GPUs; the scale study needs one NIC per "
                         f"GPU (rails)")
    if switch_radix is not None and (isinstance(switch_radix, bool)
                                     or int(switch_radix) != switch_radix or switch_radix < 4):
        raise ValueError(f"switch_radix must be an integer >= 4 or None; got {switch_radix!r}")
    spl = servers_per_leaf
    if spl is None:
        spl = 64 if switch_radix is None else max(1, int(switch_radix) // 2)
    kw = {} if latency_us is None else {"latency_us": float(latency_us)}
    # gpus_per_server=None: the fabric's hosts stay NICs (no server model)
    return sweep_topology(int(n_gpus), system=sysm, servers_per_leaf=int(spl),
                          switch_radix=switch_radix, beyond_radix=beyond_radix,
                          gpus_per_server=None, **kw)


# ------------------------------------------------------------------ rails
@dataclasses.dataclass(frozen=True)
class RailView:
    """Some rails of a rail-optimised fabric as a fabric of their own.

    Attributes:
      topology: the sub-fabric (:class:`~fabric_jax.Topology`): the rails' NICs, their
        rail leaves, every switch above, and the links among them; links keep their
        order (``links`` is increasing), so any rule that ranks links (ECMP's choice
        of the next hop) ranks them alike.
      links: ``[sub links]`` id of each sub-fabric link in the full fabric.
      hosts: ``[sub hosts]`` id of each sub-fabric host (NIC) in the full fabric.
      link_of: ``[full links]`` sub-fabric id of each full-fabric link, -1 if absent.
      host_of: ``[full hosts]`` sub-fabric host id, -1 if absent.
      rails: the rails kept.
      shared: ``[sub links]`` bool, a link that no rail owns (not attached to a NIC or a
        rail leaf: the spine-to-super-spine links of a three-tier build), so traffic of
        other rails may cross it.
      link_rail: ``[full links]`` rail that owns each link of the full fabric (-1:
        shared).
    """

    topology: Topology
    links: np.ndarray
    hosts: np.ndarray
    link_of: np.ndarray
    host_of: np.ndarray
    rails: tuple
    shared: np.ndarray
    link_rail: np.ndarray

    @property
    def disjoint(self) -> bool:
        """The kept rails own every link they have: no other rail's traffic can cross
        them (two tiers or planes)."""
        return not bool(self.shared.any())


def link_rails(topology: Topology, nics_per_server: int) -> np.ndarray:
    """``[links]`` rail owning each link: a NIC's links belong to its rail (host index
    ``% nics_per_server``), a rail leaf's links to the rail of the NICs below it, any
    other link (between two switches above the leaves) to no rail (-1)."""
    hosts = np.asarray(topology.hosts)
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    node_rail = np.full(topology.n_nodes, -1, np.int64)
    node_rail[hosts] = np.arange(hosts.size) % int(nics_per_server)
    is_host = np.asarray(topology.node_is_host, bool)
    up = is_host[src]                                 # NIC -> rail leaf
    node_rail[dst[up]] = node_rail[src[up]]           # a leaf serves one rail
    return np.maximum(node_rail[src], node_rail[dst])


def rail_view(topology: Topology, rails) -> RailView:
    """The sub-fabric of ``rails`` (:class:`RailView`); host index ``h`` is on rail ``h %
    nics_per_server`` (``topology.params["nics_per_server"]``).

    Raises:
      ValueError: a topology that is not rail-optimised, or a rail out of range.
    """
    if topology.kind != "rail_optimized" or "nics_per_server" not in topology.params:
        raise ValueError("topology: rails exist on rail_optimized fabrics only")
    nics = int(topology.params["nics_per_server"])
    rails = tuple(sorted({int(r) for r in np.atleast_1d(rails)}))
    if not rails or rails[0] < 0 or rails[-1] >= nics:
        raise ValueError(f"rails: expected rail ids in [0, {nics}); got {rails}")
    lr = link_rails(topology, nics)
    keep_rail = np.zeros(nics + 1, bool)
    keep_rail[list(rails)] = True
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    is_host = np.asarray(topology.node_is_host, bool)
    node_keep = np.zeros(topology.n_nodes, bool)
    owned = keep_rail[np.where(lr >= 0, lr, nics)]
    node_keep[src[owned]] = True
    node_keep[dst[owned]] = True
    # switches above the leaves: every one the kept rails' leaves reach, and above
    above = ~is_host & (np.asarray(topology.node_tier) >= 2)
    node_keep |= above
    links = np.flatnonzero(node_keep[src] & node_keep[dst] & ((lr < 0) | owned))
    nodes = np.flatnonzero(node_keep)
    new_node = np.full(topology.n_nodes, -1, np.int64)
    new_node[nodes] = np.arange(nodes.size)
    link_of = np.full(topology.n_links, -1, np.int64)
    link_of[links] = np.arange(links.size)
    rev = np.asarray(topology.link_reverse)[links]
    host_nodes = np.asarray(topology.hosts)
    hosts = np.flatnonzero(node_keep[host_nodes])
    host_of = np.full(host_nodes.size, -1, np.int64)
    host_of[hosts] = np.arange(hosts.size)
    names = topology.node_names
    sub = Topology(
        node_names=tuple(names[i] for i in nodes), node_is_host=is_host[nodes],
        node_tier=np.asarray(topology.node_tier)[nodes], hosts=new_node[host_nodes[hosts]],
        link_src=new_node[src[links]], link_dst=new_node[dst[links]],
        capacity=np.asarray(topology.capacity)[links],
        latency=np.asarray(topology.latency)[links], buffer=np.asarray(topology.buffer)[links],
        link_up=np.asarray(topology.link_up)[links],
        link_reverse=np.where(rev >= 0, link_of[np.maximum(rev, 0)], -1),
        host_server=np.asarray(topology.host_server)[hosts],
        name=f"{topology.name}, rails {list(rails)}", kind=topology.kind,
        params=dict(topology.params, rails=list(rails)), updown=topology.updown,
        host_transit=topology.host_transit)
    return RailView(topology=sub, links=links, hosts=hosts, link_of=link_of,
                    host_of=host_of, rails=rails, shared=lr[links] < 0, link_rail=lr)


def rail_buffer_weight(topology: Topology, view: RailView) -> np.ndarray:
    """``[sub switches]`` occupancy weight of each switch of a rail view's shared buffer
    (:class:`fabric_jax.flowcontrol.SharedBuffer`): the rails whose links reach it in
    the full fabric over those of the view.  A spine that every rail crosses holds, in
    the full run, every rail's bytes; with the rails interchangeable (the premise of
    the rail reduction) that is this weight times the view's, so its dynamic thresholds
    ``alpha (B - Q)`` are those of the full run.  Rail leaves weigh 1."""
    nics = int(topology.params["nics_per_server"])
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    lr = view.link_rail
    is_host = np.asarray(topology.node_is_host, bool)
    ends = np.concatenate([src, dst])
    rail2 = np.concatenate([lr, lr])
    ok = rail2 >= 0
    seen = np.zeros((topology.n_nodes, nics), bool)
    seen[ends[ok], rail2[ok]] = True
    full = seen.sum(axis=1)
    mine = seen[:, list(view.rails)].sum(axis=1)
    index = {n: i for i, n in enumerate(topology.node_names)}
    sub = view.topology
    sub_nodes = np.array([index[n] for n in sub.node_names], np.int64)
    sw = sub_nodes[~np.asarray(sub.node_is_host, bool)]
    return np.maximum(full[sw], 1) / np.maximum(mine[sw], 1)


# ------------------------------------------------------------------ paths
@dataclasses.dataclass(frozen=True)
class PathTable:
    """Closed-form equal-cost paths of a two-tier (optionally multi-plane) Clos.

    A path from NIC ``a`` to NIC ``b`` in plane ``p`` is ``a -> leaf -> b`` when both
    sit on one leaf, else ``a -> leaf(a) -> spine j -> leaf(b) -> b`` for every spine
    ``j`` of the plane (each leaf has one uplink to each spine of its plane).

    Attributes:
      host_up: ``[hosts, planes]`` link NIC -> its leaf, per plane.
      host_down: ``[hosts, planes]`` link leaf -> NIC.
      host_leaf: ``[hosts, planes]`` leaf node of each NIC per plane.
      leaf_up: ``[leaves, spines]`` link from each leaf to spine ``j`` of its plane
        (leaves indexed by ``leaf_index``).
      spine_down: ``[leaves, spines]`` link from spine ``j`` of the leaf's plane down to
        the leaf.
      leaf_index: ``[nodes]`` row of each leaf node in ``leaf_up``, -1 otherwise.
      n_planes, n_spines: sizes (spines per plane).
    """

    host_up: np.ndarray
    host_down: np.ndarray
    host_leaf: np.ndarray
    leaf_up: np.ndarray
    spine_down: np.ndarray
    leaf_index: np.ndarray
    n_planes: int
    n_spines: int


def clos_paths(topology: Topology) -> PathTable | None:
    """The :class:`PathTable` of a two-tier Clos (``tiers == 2``, one cable from each
    leaf to each spine of its plane); ``None`` when the fabric is not of that form
    (three tiers, parallel cables): use :func:`fabric_jax.shortest_paths` then."""
    if int(topology.params.get("tiers", 2)) != 2:
        return None
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    is_host = np.asarray(topology.node_is_host, bool)
    tier = np.asarray(topology.node_tier)
    hosts = np.asarray(topology.hosts)
    n_hosts = hosts.size
    host_row = np.full(topology.n_nodes, -1, np.int64)
    host_row[hosts] = np.arange(n_hosts)
    up = np.flatnonzero(is_host[src])
    order = up[np.lexsort((up, host_row[src[up]]))]          # host-major, cable order
    per = np.bincount(host_row[src[order]], minlength=n_hosts)
    planes = int(topology.params.get("planes", 1))
    if per.size == 0 or per.min() != planes or per.max() != planes:
        return None
    host_up = order.reshape(n_hosts, planes)
    host_leaf = dst[host_up]
    down = np.flatnonzero(is_host[dst])
    order_d = down[np.lexsort((down, host_row[dst[down]]))]
    host_down = order_d.reshape(n_hosts, planes)
    if not np.array_equal(src[host_down], host_leaf):
        return None
    leaves = np.unique(host_leaf)
    leaf_index = np.full(topology.n_nodes, -1, np.int64)
    leaf_index[leaves] = np.arange(leaves.size)
    lu = np.flatnonzero((leaf_index[src] >= 0) & (tier[dst] == 2))
    lu = lu[np.lexsort((dst[lu], leaf_index[src[lu]]))]
    counts = np.bincount(leaf_index[src[lu]], minlength=leaves.size)
    n_spines = int(counts.max(initial=0))
    if n_spines == 0 or counts.min() != n_spines:
        return None
    leaf_up = lu.reshape(leaves.size, n_spines)
    spine = dst[leaf_up]
    if np.any(spine[:, 1:] == spine[:, :-1]):
        return None                                       # parallel cables
    key = src.astype(np.int64) * topology.n_nodes + dst
    srt = np.argsort(key, kind="stable")
    want = spine.astype(np.int64) * topology.n_nodes + leaves[:, None]
    pos = np.searchsorted(key[srt], want)
    spine_down = srt[np.minimum(pos, srt.size - 1)]
    if not np.array_equal(key[spine_down], want):
        return None
    return PathTable(host_up=host_up, host_down=host_down, host_leaf=host_leaf,
                     leaf_up=leaf_up, spine_down=spine_down, leaf_index=leaf_index,
                     n_planes=planes, n_spines=n_spines)


def _path_links(table: PathTable, src, dst, plane, spine) -> np.ndarray:
    """``[..., 4]`` links of the path ``src -> dst`` in ``plane`` via ``spine`` (arrays
    broadcast together); a same-leaf pair gets ``[up, down, -1, -1]``."""
    src, dst, plane, spine = np.broadcast_arrays(src, dst, plane, spine)
    la = table.leaf_index[table.host_leaf[src, plane]]
    lb = table.leaf_index[table.host_leaf[dst, plane]]
    same = la == lb
    up, down = table.host_up[src, plane], table.host_down[dst, plane]
    mid1 = table.leaf_up[la, spine]
    mid2 = table.spine_down[lb, spine]
    return np.stack([up, np.where(same, down, mid1), np.where(same, -1, mid2),
                     np.where(same, -1, down)], axis=-1).astype(np.int32)


def _pair_hash(a, b, seed) -> np.ndarray:
    with np.errstate(over="ignore"):
        k = (np.asarray(a, np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             ^ np.asarray(b, np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
             ^ mix64(np.asarray(seed, np.uint64) + np.uint64(0x632BE59BD9B4E019)))
        return mix64(k)


def rail_symmetric_paths(table: PathTable, src, dst, key_src, key_dst, max_paths: int,
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Candidate paths of each flow, the same spines on every rail.

    ``max_paths`` paths per flow and plane (``None`` or more than the spines: every
    path): spines ``(o + j s) mod S``, ``j < max_paths``, with the offset ``o`` and the
    stride ``s`` (coprime to the ``S`` spines, so the spines are distinct) hashed from
    ``(key_src, key_dst, seed)``: the servers of the two ends, not the NICs, so the
    flows of every rail between the same two servers get the same spines (what keeps
    rails interchangeable under a capped path set).  A hashed stride makes the
    candidate sets of different pairs overlap partly, so adaptive routing can move load
    between them (an evenly spaced set, stride ``S / max_paths``, would split the spines
    into disjoint groups inside which every flow sees the same queues).  The cap is a
    cost of the fluid model (its per-step work grows with paths x hops), not a
    mechanism; a pair on one leaf has one path per plane.

    Returns:
      ``(links [flows, paths, 4], path_mask [flows, paths])``.
    """
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    P, S = table.n_planes, table.n_spines
    per_plane = S if max_paths is None else max(1, min(int(max_paths), S))
    j = np.arange(per_plane)
    h = _pair_hash(key_src, key_dst, seed)
    off = (h % np.uint64(S)).astype(np.int64)
    coprime = np.array([c for c in range(1, max(S, 2)) if np.gcd(c, S) == 1] or [1])
    stride = coprime[((h >> np.uint64(32)) % np.uint64(coprime.size)).astype(np.int64)]
    if per_plane == S:
        stride = np.ones_like(stride)                  # every spine, in order
    spine = (off[:, None] + j[None, :] * stride[:, None]) % S              # [F, per]
    plane = np.broadcast_to(np.arange(P)[:, None], (P, per_plane)).reshape(-1)
    spine = np.tile(spine, (1, P))                                         # [F, P*per]
    links = _path_links(table, src[:, None], dst[:, None], plane[None, :], spine)
    la = table.leaf_index[table.host_leaf[src, 0]]
    lb = table.leaf_index[table.host_leaf[dst, 0]]
    same = la == lb
    first = np.zeros((1, per_plane * P), bool)
    first[0, ::per_plane] = True
    mask = np.where(same[:, None], first, True)
    links = np.where(mask[:, :, None], links, -1).astype(np.int32)
    return links, mask


def ecmp_paths(table: PathTable, src, dst, plane, sport,
               tier_seed: int = 23, offset=0) -> np.ndarray:
    """``[flows, 4]`` the path a per-flow ECMP hash picks for each flow in ``plane``.

    The rail leaf hashes the flow's 5-tuple (``src``, ``dst`` NIC addresses and the
    RoCEv2 UDP source port ``sport``, with the tier's seed) onto one of its ``spines``
    uplinks (every uplink of a non-blocking two-tier Clos is an equal-cost next hop);
    the spine's way down to the destination leaf is unique.  Balls into bins: with
    ``n`` flows on ``n`` uplinks the expected share of uplinks in use is ``1 - (1 -
    1/n)^n`` (``experiments/ecmp_collisions.py``).  The same hash family as
    :func:`fabric_jax.routing.ecmp_choice`; resolved on the host over every spine, so
    each flow keeps one path (no faults here, so resilient hashing never moves it).

    ``offset`` (``[flows]`` int, default 0) moves each flow's uplink that many places on
    from the one its hash picks (``(h + offset) mod spines``): the QPs of one connection
    sent on successive uplinks (:data:`~fabric_jax.scale.HASH_FIELDS`, ``"qp_spread"``).
    """
    h = _pair_hash(np.asarray(src, np.uint64) * np.uint64(65537) + np.asarray(sport, np.uint64),
                   dst, tier_seed)
    spine = ((h % np.uint64(table.n_spines)).astype(np.int64)
             + np.asarray(offset, np.int64)) % table.n_spines
    return _path_links(table, np.asarray(src, np.int64), np.asarray(dst, np.int64),
                       np.asarray(plane, np.int64), spine)


# ------------------------------------------------------------------ three tiers
@dataclasses.dataclass(frozen=True)
class TierTable:
    """Equal-cost paths of a three-tier Clos (leaves, pod spines, super-spines; one
    plane), for hashing tier by tier on the host (:func:`tiered_ecmp_paths`).

    A path from NIC ``a`` to NIC ``b`` is ``a -> leaf -> b`` on one leaf; ``a -> leaf(a)
    -> spine i -> leaf(b) -> b`` within a pod (``i`` among the pod's spines, every
    leaf cabled to each); across pods ``a -> leaf(a) -> spine i -> super-spine j ->
    spine of pod(b) -> leaf(b) -> b`` (``j`` among spine ``i``'s uplinks; the way down
    from a super-spine is unique).

    Attributes:
      host_up, host_down, host_leaf: ``[hosts]`` NIC -> leaf link, leaf -> NIC link, leaf.
      leaf_up: ``[nodes, S1]`` each leaf's uplinks to its pod's spines, in link order.
      spine_up: ``[nodes, S2]`` each spine's uplinks to super-spines, in link order.
      pod: ``[nodes]`` pod of each leaf and spine (-1 otherwise).
      down_key, down_link: sorted ``node x n_nodes + (leaf or pod)`` keys and their
        links: a spine's link down to a leaf, a super-spine's down to a pod's spine.
      link_dst: ``[links]`` node each link enters.
      n_nodes: nodes of the fabric.
    """

    host_up: np.ndarray
    host_down: np.ndarray
    host_leaf: np.ndarray
    leaf_up: np.ndarray
    spine_up: np.ndarray
    pod: np.ndarray
    down_key: np.ndarray
    down_link: np.ndarray
    link_dst: np.ndarray
    n_nodes: int

    @property
    def n_leaf_up(self) -> int:
        return int(self.leaf_up.shape[1])

    @property
    def n_spine_up(self) -> int:
        return int(self.spine_up.shape[1])


def tier_paths(topology: Topology) -> TierTable | None:
    """The :class:`TierTable` of a three-tier Clos of one plane (``tiers == 3``,
    :func:`sweep_topology` with ``beyond_radix="tiers"``); ``None`` when the fabric is
    not of that form."""
    p = topology.params
    if int(p.get("tiers", 2)) != 3 or int(p.get("planes", 1)) != 1:
        return None
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    tier = np.asarray(topology.node_tier)
    n = int(topology.n_nodes)
    hosts = np.asarray(topology.hosts)
    host_row = np.full(n, -1, np.int64)
    host_row[hosts] = np.arange(hosts.size)
    up = np.flatnonzero(host_row[src] >= 0)
    down = np.flatnonzero(host_row[dst] >= 0)
    if up.size != hosts.size or down.size != hosts.size:
        return None
    host_up = np.empty(hosts.size, np.int64)
    host_up[host_row[src[up]]] = up
    host_down = np.empty(hosts.size, np.int64)
    host_down[host_row[dst[down]]] = down
    host_leaf = dst[host_up]

    def uplinks(t_from):
        ls = np.flatnonzero((tier[src] == t_from) & (tier[dst] == t_from + 1))
        ls = ls[np.lexsort((ls, src[ls]))]
        cnt = np.bincount(src[ls], minlength=n)
        k = int(cnt.max(initial=0))
        if k == 0 or np.any(cnt[np.unique(src[ls])] != k):
            return None
        table = np.full((n, k), -1, np.int64)
        table[np.unique(src[ls])] = ls.reshape(-1, k)
        return table

    leaf_up, spine_up = uplinks(1), uplinks(2)
    if leaf_up is None or spine_up is None:
        return None
    # pod of a spine: the smallest spine id of the spines cabled to its leaves; of a
    # leaf: its spines' pod
    pod = np.full(n, -1, np.int64)
    leaves = np.unique(host_leaf)
    first = dst[leaf_up[leaves, 0]]
    spines = np.unique(dst[leaf_up[leaves]])
    pod_of = np.full(n, n, np.int64)
    np.minimum.at(pod_of, dst[leaf_up[leaves]].ravel(),
                  np.repeat(dst[leaf_up[leaves]].min(axis=1), leaf_up.shape[1]))
    pod[spines] = pod_of[spines]
    pod[leaves] = pod[first]
    sd = np.flatnonzero((tier[src] == 2) & (tier[dst] == 1))        # spine -> leaf
    xd = np.flatnonzero((tier[src] == 3) & (tier[dst] == 2))        # super -> spine
    key = np.concatenate([src[sd] * n + dst[sd], src[xd] * n + pod[dst[xd]]])
    links = np.concatenate([sd, xd])
    order = np.argsort(key, kind="stable")
    key, links = key[order], links[order]
    if np.any(key[1:] == key[:-1]):
        return None                                       # parallel cables
    return TierTable(host_up=host_up, host_down=host_down, host_leaf=host_leaf,
                     leaf_up=leaf_up, spine_up=spine_up, pod=pod, down_key=key,
                     down_link=links, link_dst=dst.astype(np.int64), n_nodes=n)


def _down(table: TierTable, node, target) -> np.ndarray:
    """Link from ``node`` down to ``target`` (a leaf, or for a super-spine a pod)."""
    k = np.asarray(node, np.int64) * table.n_nodes + np.asarray(target, np.int64)
    pos = np.minimum(np.searchsorted(table.down_key, k), table.down_key.size - 1)
    if np.any(table.down_key[pos] != k):
        raise ValueError("topology: a path leaves the three-tier table (not a full Clos)")
    return table.down_link[pos]


def tiered_ecmp_paths(table: TierTable, src, dst, sport, *, offset=0,
                      polarized: bool = False, tier_seed: int = 23) -> np.ndarray:
    """``[flows, 6]`` the path ECMP hashing picks tier by tier on a three-tier Clos
    (-1 padded).

    The leaf hashes the flow's 5-tuple (``src``, ``dst`` addresses, UDP source port
    ``sport``) to one of its ``S1`` spines, ``(h1 + offset) mod S1``; across pods the
    spine hashes it again to one of its ``S2`` super-spines, ``h2 mod S2``.  Independent
    hashing (default) seeds each tier's hash apart (``h2`` another function of the same
    fields).  ``polarized``: every tier uses the same function and seed, ``h2 = h1``
    (hash polarisation: Cisco, "Hash polarization" in its CEF load-sharing notes;
    Alibaba HPN, Qian et al., SIGCOMM 2024, which reports it in production
    RoCE fabrics), so the flows that reach spine ``i`` all have ``h1 = i (mod S1)`` and
    their ``h2 mod S2`` takes only ``S2 / gcd(S1, S2)`` values: each spine can use only
    that many of its uplinks (:func:`~fabric_jax.scale.polarized_uplinks`).
    """
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    fields = src.astype(np.uint64) * np.uint64(65537) + np.asarray(sport, np.uint64)
    h1 = _pair_hash(fields, dst, tier_seed)
    h2 = h1 if polarized else _pair_hash(fields, dst, tier_seed + 7919)
    off = np.asarray(offset, np.int64)
    la, lb = table.host_leaf[src], table.host_leaf[dst]
    same_leaf = la == lb
    same_pod = table.pod[la] == table.pod[lb]
    s1 = (((h1 % np.uint64(table.n_leaf_up)).astype(np.int64) + off) % table.n_leaf_up)
    l1 = table.leaf_up[la, s1]
    spine_a = np.asarray(table.link_dst[l1])
    s2 = (h2 % np.uint64(table.n_spine_up)).astype(np.int64)
    if polarized:
        s2 = (s2 + off) % table.n_spine_up
    l2 = table.spine_up[spine_a, s2]
    sup = table.link_dst[l2]
    l3 = _down(table, sup, table.pod[lb])
    spine_b = table.link_dst[l3]
    cross = ~same_pod
    l4 = _down(table, np.where(cross, spine_b, spine_a), lb)
    pad = np.full(src.shape, -1, np.int64)
    up, dn = table.host_up[src], table.host_down[dst]
    out = np.stack([up, np.where(same_leaf, dn, l1),
                    np.where(same_leaf, pad, np.where(cross, l2, l4)),
                    np.where(same_leaf, pad, np.where(cross, l3, dn)),
                    np.where(cross & ~same_leaf, l4, pad),
                    np.where(cross & ~same_leaf, dn, pad)], axis=-1)
    return out.astype(np.int32)
