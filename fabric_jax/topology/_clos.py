"""The Clos builders: leaf-spine, rail-optimised and the k-ary fat-tree.

:func:`leaf_spine` and :func:`rail_optimized` resolve their arguments into a
:class:`~fabric_jax.topology.ClosSpec` and hand it to :func:`build_clos`, the one
wiring of a folded Clos (2 or 3 tiers, any number of planes); they differ only in the
host side (one host per leaf port, or one NIC per rail leaf) and in the names and
``params`` they give.  :func:`fat_tree` keeps the node numbering and names of
Al-Fares et al.  Every builder applies the server model (:mod:`._servers`) last.
"""

from __future__ import annotations

import numpy as np

from .. import units
from ._core import (CLOS_KINDS, DEFAULT_BUFFER_KB, DEFAULT_LATENCY_US, DEFAULT_LINK_GBPS,
                    Topology, check_int)
from ._servers import (DEFAULT_NVLINK_GBPS, DEFAULT_NVLINK_LATENCY_US, DEFAULT_PCIE_GBPS,
                       DEFAULT_PCIE_LATENCY_US, ServerModel)
from ._spec import ClosSpec, link_args


def from_cables(*, name, kind, params, node_names, node_tier, n_hosts, cab_u, cab_v,
                cab_gbps, latency_us, buffer_kb, host_server=None) -> Topology:
    """Topology whose hosts are nodes ``0..n_hosts-1`` and whose cables are
    ``cab_u[c] <-> cab_v[c]`` (link ``2c`` is u->v, ``2c+1`` is v->u), all alike but
    for their speed ``cab_gbps`` (scalar or per cable)."""
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


def _spread_uplinks(n_leaves: int, uplinks: int, n_spines: int):
    """Leaf ``l``'s uplink ``j`` goes to spine ``j % n_spines`` (round robin)."""
    leaf = np.repeat(np.arange(n_leaves), uplinks)
    spine = np.tile(np.arange(uplinks) % n_spines, n_leaves)
    return leaf, spine


def _clos_wiring(spec: ClosSpec, *, host_leaf: np.ndarray, leaf_names, host_names):
    """Nodes and cables of a folded Clos with ``spec.planes`` independent switch planes.

    Node order: hosts, then per plane its leaves, spines and super-spines.  Cable order:
    the host cables of plane 0, 1, ..., then the fabric cables of plane 0, 1, ...;
    within a plane leaf-spine cables (round robin, :func:`_spread_uplinks`) before
    spine-super-spine cables.  ``host_leaf[h]`` is the leaf of host ``h`` in a plane.

    Returns ``(names, tiers, cab_u, cab_v, cab_gbps)``.
    """
    three = spec.leaves_per_pod is not None
    n_pods, n_hosts, planes = spec.n_pods, spec.n_hosts, spec.planes
    n_spine_all = spec.n_spines * n_pods if three else spec.n_spines
    n_sup = spec.n_super_spines if three else 0
    per_plane = spec.n_leaves + n_spine_all + n_sup
    if three:
        spine_names = [f"pod{p}/spine{j}" for p in range(n_pods)
                       for j in range(spec.n_spines)]
        super_names = [f"super{s}" for s in range(n_sup)]
    else:
        spine_names, super_names = [f"spine{j}" for j in range(spec.n_spines)], []
    # one plane's fabric cables, in plane-local node ids (leaf 0 = 0)
    up_leaf, up_spine = _spread_uplinks(spec.n_leaves, spec.uplinks_per_leaf, spec.n_spines)
    if three:
        up_spine = (up_leaf // spec.leaves_per_pod) * spec.n_spines + up_spine
    fab_u = [up_leaf]
    fab_v = [spec.n_leaves + up_spine]
    if three:
        group = n_sup // spec.n_spines
        sp_, u = np.divmod(np.arange(n_spine_all * spec.uplinks_per_spine),
                           spec.uplinks_per_spine)
        fab_u.append(spec.n_leaves + sp_)
        fab_v.append(spec.n_leaves + n_spine_all + (sp_ % spec.n_spines) * group
                     + u % group)
    fab_u, fab_v = np.concatenate(fab_u), np.concatenate(fab_v)
    names = list(host_names)
    tiers = [np.zeros(n_hosts)]
    host_u, host_v, fabric_u, fabric_v = [], [], [], []
    for p in range(planes):
        base = n_hosts + p * per_plane
        pre = f"plane{p}/" if planes > 1 else ""
        names += [pre + n for n in list(leaf_names) + spine_names + super_names]
        tiers += [np.ones(spec.n_leaves), np.full(n_spine_all, 2), np.full(n_sup, 3)]
        host_u.append(np.arange(n_hosts))
        host_v.append(base + host_leaf)
        fabric_u.append(base + fab_u)
        fabric_v.append(base + fab_v)
    cab_u = np.concatenate(host_u + fabric_u)
    cab_v = np.concatenate(host_v + fabric_v)
    gb = np.concatenate([np.full(n_hosts * planes, spec.host_gbps),
                         np.full(fab_u.size * planes, spec.fabric_gbps)])
    return names, np.concatenate(tiers), cab_u, cab_v, gb


def _describe(spec: ClosSpec):
    """``(host_names, leaf_names, params, name)`` of a spec, as its builder gives them."""
    three, nics = spec.tiers == 3, spec.rails
    if spec.kind == "leaf_spine":
        hosts = [f"h{i}" for i in range(spec.n_hosts)]
        leaves = [f"leaf{i}" for i in range(spec.n_leaves)]
        params = dict(n_leaves=spec.n_leaves, n_spines=spec.n_spines,
                      hosts_per_leaf=spec.servers_per_leaf,
                      uplinks_per_leaf=spec.uplinks_per_leaf,
                      oversubscription=spec.oversubscription, link_gbps=spec.link_gbps,
                      fabric_gbps=spec.fabric_gbps, switch_radix=spec.switch_radix,
                      planes=spec.planes, tiers=spec.tiers)
        name = (f"leaf_spine({spec.n_leaves}x{spec.n_spines}, {spec.servers_per_leaf} "
                f"hosts/leaf, {spec.oversubscription:g}:1")
        pods = (f", 3 tiers, {spec.n_pods} pods, {spec.n_super_spines} super-spines"
                if three else "")
    else:
        hosts = [f"srv{s}/nic{i}" for s in range(spec.n_servers) for i in range(nics)]
        leaves = [f"g{g}/rail{i}" for g in range(spec.n_groups) for i in range(nics)]
        params = dict(n_servers=spec.n_servers, nics_per_server=nics,
                      servers_per_leaf=spec.servers_per_leaf, n_spines=spec.n_spines,
                      uplinks_per_leaf=spec.uplinks_per_leaf, link_gbps=spec.link_gbps,
                      fabric_gbps=spec.fabric_gbps, switch_radix=spec.switch_radix,
                      oversubscription=spec.oversubscription, planes=spec.planes,
                      tiers=spec.tiers)
        name = f"rail_optimized({spec.n_servers} servers x {nics} NICs"
        pods = f", 3 tiers, {spec.n_pods} pods" if three else ""
    if three:
        pod_arg = "leaves_per_pod" if spec.kind == "leaf_spine" else "groups_per_pod"
        params.update({pod_arg: spec.leaves_per_pod // nics}, n_pods=spec.n_pods,
                      uplinks_per_spine=spec.uplinks_per_spine,
                      n_super_spines=spec.n_super_spines)
    planes = f", {spec.planes} planes" if spec.planes > 1 else ""
    return hosts, leaves, params, name + pods + planes + ")"


def build_clos(spec: ClosSpec) -> Topology:
    """The folded Clos of ``spec`` (NIC hosts; the server model is applied after)."""
    server, nic = np.divmod(np.arange(spec.n_hosts), spec.rails)
    host_names, leaf_names, params, name = _describe(spec)
    names, tier, cab_u, cab_v, gb = _clos_wiring(
        spec, host_leaf=(server // spec.servers_per_leaf) * spec.rails + nic,
        leaf_names=leaf_names, host_names=host_names)
    return from_cables(
        name=name, kind=spec.kind, params=params, node_names=names, node_tier=tier,
        n_hosts=spec.n_hosts, cab_u=cab_u, cab_v=cab_v, cab_gbps=gb,
        latency_us=spec.latency_us, buffer_kb=spec.buffer_kb, host_server=server)


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

    **Planes** (``planes=P``): P independent copies of the switch layers, each host with
    one port per plane at ``link_gbps / P``; no path leaves its plane.  Give
    ``switch_radix`` at the per-plane port speed.  **Three tiers** (``tiers=3``): the
    leaves form pods of ``leaves_per_pod`` with their own ``n_spines`` spines, and spine
    ``j`` of every pod has ``uplinks_per_spine`` cables to super-spine group ``j``
    (``n_super_spines / n_spines`` super-spines, round robin); the defaults are
    non-blocking.  The sources of both are in :mod:`fabric_jax.topology`.
    ``leaf_spine(k * k // 2, k // 2, k // 2, tiers=3, leaves_per_pod=k // 2)`` has the
    node and link counts and the bisection of ``fat_tree(k)``.

    Node names: hosts ``h{i}`` (host index ``i = leaf * hosts_per_leaf + j``),
    ``leaf{l}``, ``spine{s}`` (2 tiers) or ``pod{p}/spine{s}`` and ``super{s}`` (3
    tiers); with planes every switch name gets the prefix ``plane{p}/``.  Node tiers:
    hosts 0, leaves 1, spines 2, super-spines 3.  Node order: hosts, then per plane its
    leaves, spines and super-spines; cable order: the host cables of every plane, then
    the fabric cables (leaf-spine before spine-super-spine) of every plane.

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
    n_leaves = check_int(n_leaves, "n_leaves", 1)
    n_spines = check_int(n_spines, "n_spines", 1)
    hosts_per_leaf = check_int(hosts_per_leaf, "hosts_per_leaf", 1)
    spec = ClosSpec.resolve(
        "leaf_spine", n_servers=n_leaves * hosts_per_leaf, rails=1,
        servers_per_leaf=hosts_per_leaf, n_spines=n_spines, pod_size=leaves_per_pod,
        uplinks_per_leaf=uplinks_per_leaf, oversubscription=oversubscription,
        link_gbps=link_gbps, fabric_gbps=fabric_gbps, latency_us=latency_us,
        buffer_kb=buffer_kb, switch_radix=switch_radix, planes=planes, tiers=tiers,
        uplinks_per_spine=uplinks_per_spine, n_super_spines=n_super_spines)
    return ServerModel(gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us,
                       pcie_latency_us).apply(build_clos(spec), nics_per_server)


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
    k = check_int(k, "k", 2)
    if k % 2:
        raise ValueError(f"k must be even (k/2 down and k/2 up ports); got {k}")
    link, fabric, lat, buf = link_args(link_gbps, fabric_gbps, latency_us, buffer_kb)
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
    topo = from_cables(
        name=f"fat_tree(k={k})", kind="fat_tree",
        params=dict(k=k, link_gbps=link, fabric_gbps=fabric),
        node_names=names, node_tier=tier, n_hosts=n_hosts, cab_u=cab_u,
        cab_v=cab_v, cab_gbps=gb, latency_us=lat, buffer_kb=buf)
    return ServerModel(gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us,
                       pcie_latency_us).apply(topo, nics_per_server)


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

    ``planes=P`` and ``tiers=3`` are :func:`leaf_spine`'s: every plane is a copy of the
    rail leaves and spines, and a pod is ``groups_per_pod`` scalable units with their
    own ``n_spines`` spines under the super-spines (the DGX SuperPOD reference
    architecture adds a core layer in the same way beyond what one spine layer
    connects).

    Node names: hosts ``srv{s}/nic{i}``, leaves ``g{group}/rail{i}``, ``spine{j}`` (2
    tiers) or ``pod{p}/spine{j}`` and ``super{s}`` (3 tiers), prefixed ``plane{p}/`` with
    planes.  Node and cable order are :func:`leaf_spine`'s.

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
    n_servers = check_int(n_servers, "n_servers", 1)
    nics = check_int(nics_per_server, "nics_per_server", 1)
    spl = check_int(servers_per_leaf, "servers_per_leaf", 1)
    spec = ClosSpec.resolve(
        "rail_optimized", n_servers=n_servers, rails=nics, servers_per_leaf=spl,
        n_spines=n_spines, pod_size=groups_per_pod, uplinks_per_leaf=uplinks_per_leaf,
        oversubscription=oversubscription, link_gbps=link_gbps, fabric_gbps=fabric_gbps,
        latency_us=latency_us, buffer_kb=buffer_kb, switch_radix=switch_radix,
        planes=planes, tiers=tiers, uplinks_per_spine=uplinks_per_spine,
        n_super_spines=n_super_spines)
    return ServerModel(gpus_per_server, nvlink_gbps, pcie_gbps, nvlink_latency_us,
                       pcie_latency_us).apply(build_clos(spec), nics)
