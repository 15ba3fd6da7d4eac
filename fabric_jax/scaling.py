"""Scaling study: all-reduce completion time and effective bandwidth versus GPU count.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

Shared by ``experiments/allreduce_sweep.py`` and the scaling curve of ``fabric-jax compare
--plots`` (:func:`fabric_jax.compare.scaling_study`).

**What is simulated.**  ``G`` GPUs in servers of a named system (default ``hgx_h100``:
8 GPUs, NVLink4, 8 x 400 Gb/s NICs, :mod:`fabric_jax.systems`) on a rail-optimised
fabric (:func:`sweep_topology`) run one all-reduce of ``S`` bytes per GPU, built by
:mod:`fabric_jax.collectives` as NCCL runs it: a DAG of chunked transfers with the
protocol's per-step latency, the launch latency, the link efficiencies and, for SHARP,
the switches' aggregation tree (:func:`fabric_jax.collectives.build_plan`).  The
algorithm is chosen per preset the NCCL way (:func:`choose_algorithm`, the cost model of
:func:`fabric_jax.collectives.select_algorithm`) among :data:`SWEEP_ALGORITHMS`:
NVLS inside the servers and NCCL's double binary tree across them (``nvls_tree``, what
NCCL picks on multi-node H100) or, on a fabric with SHARP (``infiniband``), the SHARP
aggregation tree per rail (``sharp``, NCCL's NVLS + CollNet).  ``algorithms=`` overrides
(e.g. ``("ring",)``; a flat ring of ``G`` ranks has ``8 G (G - 1)`` transfers, too many
for the fluid model beyond a few hundred GPUs).

**Engine** (:func:`simulate_plan_fluid`): each preset's real dynamics in the fluid model,
through the compare study's engine :func:`fabric_jax.fabric_sim.simulate_paths` (routing
policy, congestion-control law at the NIC line rate, flow control, receiver options,
``fabric.link_latency``, each transfer capped at the cut of its used paths).  Host-to-host
transfers get their equal-cost candidate paths (:func:`fabric_jax.shortest_paths`, at
most ``max_paths``); in-switch transfers (NVLS, SHARP) keep the links the plan names, as
one path.  The plan's per-step costs map onto the fluid flow lifecycle: fabric links
carry ``fabric.link_latency`` (the wire, which is also the congestion-control feedback
delay); the protocol's per-step latency, the SHARP level latency and the latency of the
server's own links (NVLink, PCIe, as the plan counts them) are charged as the transfer's
``delay`` before it starts (the same critical path as the plan's ``latency`` after it; an
assumption that keeps the feedback delay to the network's round trip).  The server's
links are not part of the congestion-controlled fabric: they, and each NIC's egress port,
are never marked, dropped or trimmed, and the server's links have unbounded buffers
(NVLink and PCIe have their own credit flow control, not the fabric's PFC or trimming;
an assumption).  Under IB CC only switch ports of the fabric mark FECN.  Capacities are
scaled by the plan's link efficiency and protocol fraction (``plan.bw_scale``), as in
:func:`fabric_jax.collectives.simulate_plan`.  Several plans (the sweep's GPU counts) run
side by side in one fluid call (:func:`simulate_plans_fluid`: disjoint links, so each
runs as if alone; one compile per preset for the whole sweep).  Transfers are released
at ``t = 0``; the first ones wait the protocol's launch latency.

**Ideal fabric** (:func:`simulate_plans_ideal`): the compare study's baseline
(:func:`fabric_jax.fabric_sim.simulate_ideal`) for a plan: the same transfers, deps and
latencies (the plan's own, from ``topology.latency``) with every NIC on one
non-blocking crossbar at its full rate (all planes) and ideal congestion control (exact
max-min, :func:`fabric_jax.simulate_flows`); the server's links are kept; switch-to-switch
hops of a SHARP tree cost only their latency.  It is computed per algorithm, so each
preset has the baseline of the plan it runs (``ideal_*`` keys; SHARP moves fewer bytes
than a tree, so the two baselines differ).

**Metrics** (:func:`completion_stats`).  The completion time of rank ``r`` is the arrival
of the last transfer into GPU ``r`` (it then holds the reduced result); the collective's
completion time is the largest (what ``nccl-tests`` times).  ``p50`` and ``p99`` are the
50th and 99th percentiles **over the ranks** of one collective (NumPy's linear
interpolation), so the p99 shows how far the slow ranks trail (servers deep in the tree,
ranks behind a congested link).  Effective bandwidth is
:func:`fabric_jax.metrics.collective_effective_bandwidth` of the collective: its
line-rate time (:func:`fabric_jax.metrics.collective_ideal_time`: the most bytes one NIC
sends or receives over the fabric in the plan, at the NIC line rate) over its completion
time.

Topologies beyond a switch's radix (:func:`sweep_topology`): the two-tier rail-optimised
build is tried with ``switch_radix``; when a spine would need more ports, the sweep
builds the three-tier one (``tiers=3``, pods of scalable units under a super-spine
layer) or a multi-plane one (``planes=2, 4 ...`` with the radix multiplied at the
per-plane port speed), never an impossible two-tier fabric.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np

from . import metrics as mx
from .fabric_sim import simulate_paths
from .fluid.options import save_schedule
from .incidence import Incidence, compact_incidence  # noqa: F401 (re-exported)

__all__ = ["compact_incidence", "ep_group_size", "SWEEP_ALGORITHMS", "DEFAULT_SWEEP_CHUNKS",
           "DEFAULT_SWEEP_PATHS", "sweep_topology", "choose_algorithm", "PlanFlows",
           "plan_flows", "simulate_plan_fluid", "simulate_plans_fluid", "simulate_plan_ideal",
           "simulate_plans_ideal", "rank_completion", "CURVE_KEYS",
           "nic_ideal_time", "completion_stats", "scaling_point", "scaling_curves"]

#: Candidate all-reduce algorithms of the sweep (NCCL's choice on multi-node NVSwitch
#: servers: NVLS + tree, or NVLS + SHARP where the fabric has SHARP).  Servers without
#: NVLS fall back to ``("tree", "sharp")`` (:func:`choose_algorithm`).
SWEEP_ALGORITHMS = ("nvls_tree", "sharp")

#: Pipeline chunks per plan (NCCL pipelines in 512 KiB chunks; 4 keeps the transfer
#: count, and so the fluid model's cost, linear in the servers with small constants --
#: a stated approximation for large messages, whose last chunk drains 1/4 of the
#: message instead of one NCCL chunk).
DEFAULT_SWEEP_CHUNKS = 4

#: Candidate paths per host pair in the fluid runs (a seeded, evenly spread subset of
#: the equal-cost paths, :func:`fabric_jax.shortest_paths`): the per-step cost of the
#: fluid model grows with ``paths x hops`` per flow.
DEFAULT_SWEEP_PATHS = 4


def ep_group_size(n_servers: int, wanted: int, minimum: int = 2) -> int:
    """The largest divisor of ``n_servers`` that is ``<= wanted`` and ``>= minimum``
    (``n_servers`` itself when none is): the expert-parallel group size a training job of
    ``n_servers`` servers can use when ``wanted`` does not divide it."""
    n, wanted = int(n_servers), int(wanted)
    fits = [d for d in range(minimum, min(wanted, n) + 1) if n % d == 0]
    return max(fits) if fits else n


# ------------------------------------------------------------------ topology
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
    """
    from .systems import build, get_system
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


# ------------------------------------------------------------------ plans
def choose_algorithm(topology, fabric, nbytes: float, *, algorithms=None, protocol=None,
                     n_chunks: int = DEFAULT_SWEEP_CHUNKS, hosts=None):
    """NCCL-like (algorithm, protocol) of an all-reduce on ``fabric``.

    :func:`fabric_jax.collectives.select_algorithm` (critical-path latency plus bytes on
    the busiest link, NCCL's ``ncclTopoGetAlgoTime`` model) over the eligible members of
    ``algorithms`` (default :data:`SWEEP_ALGORITHMS`, or ``("tree", "sharp")`` when the
    servers have no NVLS: one GPU per server or ``params["nvls"]`` False).  SHARP is
    eligible only where ``fabric.sharp``.

    Returns:
      ``(algorithm, protocol)``.
    """
    from . import collectives as col
    from .fabrics import get_fabric
    fab = get_fabric(fabric)
    if algorithms is None:
        nvls = bool(topology.params.get("nvls", True)) and int(
            topology.params.get("gpus_per_server", 1)) > 1
        algorithms = SWEEP_ALGORITHMS if nvls else ("tree", "sharp")
    algorithms = tuple(a for a in algorithms if a != "sharp" or fab.sharp)
    algo, proto, _ = col.select_algorithm(
        topology, "all_reduce", nbytes, hosts=hosts, fabric=fab, algorithms=algorithms,
        protocols=None if protocol is None else (protocol,), n_chunks=n_chunks)
    return algo, proto


@dataclasses.dataclass(frozen=True)
class PlanFlows:
    """A :class:`~fabric_jax.collectives.CollectivePlan` as fluid-model flows.

    Attributes:
      paths: :class:`~fabric_jax.paths.PathSet` ``[flows, paths, hops]``: equal-cost
        candidates of host-to-host transfers, the plan's own links (one path) for
        in-switch ones.
      routed: ``[flows]`` bool, host-to-host transfer.
      delay: ``[flows]`` s before the start (launch, protocol step, SHARP level and
        in-server link latency; module docstring).
      capacity: ``[links]`` bytes/s, topology capacity times ``plan.bw_scale``.
      link_latency: ``[links]`` s: ``fabric.link_latency`` on fabric links, 0 on the
        server's links (their latency is in ``delay``).
      shielded: ``[links]`` bool, links never marked, dropped or trimmed (the server's
        links and the NICs' egress ports).
      nic_rate: NIC line rate (all planes), bytes/s.
    """

    paths: object
    routed: np.ndarray
    delay: np.ndarray
    capacity: np.ndarray
    link_latency: np.ndarray
    shielded: np.ndarray
    nic_rate: float


def _classes(topology):
    from .collectives import link_classes
    return link_classes(topology)


def _nic_nodes(topology) -> np.ndarray:
    """Node ids of the NICs: the fabric's hosts (server model: the PCIe ends)."""
    if not topology.params.get("server_model"):
        return np.asarray(topology.hosts)
    cls = _classes(topology)
    pcie_up = (cls == 2) & np.asarray(topology.node_is_host)[topology.link_src]
    return np.unique(topology.link_dst[pcie_up])


def plan_flows(plan, topology, fabric, *, max_paths: int | None = DEFAULT_SWEEP_PATHS,
               seed: int = 0) -> PlanFlows:
    """The fluid-model inputs of a plan (module docstring, "Engine").

    A transfer is host-to-host when its links leave exactly one host and enter exactly
    one (NVLS rows touch every GPU of a server, SHARP rows at most one end); its
    candidate paths come from :func:`fabric_jax.shortest_paths` with ``max_paths`` and
    ``seed``, and must cover the links the plan routed it over.
    """
    from .fabrics import get_fabric
    from .paths import PathSet, PathsTruncatedWarning, shortest_paths
    fab = get_fabric(fabric)
    links = np.asarray(plan.links)
    weight = np.where(links >= 0, np.asarray(plan.weight, float), 0.0)
    real = links >= 0
    lk = np.maximum(links, 0)
    is_host = np.asarray(topology.node_is_host, bool)
    leaves = real & is_host[topology.link_src[lk]]
    enters = real & is_host[topology.link_dst[lk]]
    routed = (leaves.sum(1) == 1) & (enters.sum(1) == 1)
    host_of_node = np.full(topology.n_nodes, -1)
    host_of_node[topology.hosts] = np.arange(topology.n_hosts)
    src = host_of_node[topology.link_src[np.where(leaves, lk, 0)[np.arange(len(lk)),
                                                                   leaves.argmax(1)]]]
    dst = host_of_node[topology.link_dst[np.where(enters, lk, 0)[np.arange(len(lk)),
                                                                   enters.argmax(1)]]]
    n = plan.n_flows
    idx = np.flatnonzero(routed)
    key = src[idx] * topology.n_hosts + dst[idx]
    uniq, inv = np.unique(key, return_inverse=True)
    us, ud = np.divmod(uniq, topology.n_hosts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PathsTruncatedWarning)
        ps = shortest_paths(topology, us, ud, max_paths=max_paths, seed=seed)
    P = max(ps.max_paths, 1)
    H = max(ps.max_hops, int(real.sum(1).max(initial=1)))
    plinks = np.full((n, P, H), -1, np.int32)
    hop = np.zeros((n, P, H), bool)
    pmask = np.zeros((n, P), bool)
    rl = np.asarray(ps.links)[inv]
    plinks[idx, :rl.shape[1], :rl.shape[2]] = rl
    hop[idx, :rl.shape[1], :rl.shape[2]] = np.asarray(ps.hop_mask)[inv]
    pmask[idx, :rl.shape[1]] = np.asarray(ps.path_mask)[inv]
    ex = np.flatnonzero(~routed)
    order = np.argsort(~real[ex], axis=1, kind="stable")   # real links first, in order
    ex_links = np.take_along_axis(links[ex], order, axis=1)
    plinks[ex, 0, :ex_links.shape[1]] = ex_links[:, :H]
    hop[ex, 0, :ex_links.shape[1]] = ex_links[:, :H] >= 0
    pmask[ex, 0] = True
    # every link the plan routed a host transfer over is on a candidate path
    if max_paths is None and idx.size:
        cand = np.zeros((idx.size, topology.n_links), bool)
        rows = np.broadcast_to(np.arange(idx.size)[:, None, None], rl.shape)
        ok = np.asarray(ps.hop_mask)[inv] & (rl >= 0)
        cand[rows[ok], rl[ok]] = True
        used = real[idx] & (weight[idx] > 0)
        r, c = np.nonzero(used)
        if not cand[r, links[idx][r, c]].all():
            raise AssertionError("plan routed a transfer off its candidate paths")
    s_ex = np.where(routed, src, np.maximum(src, 0))
    d_ex = np.where(routed, dst, np.maximum(dst, 0))
    paths = PathSet(src=s_ex.astype(np.int32), dst=d_ex.astype(np.int32), links=plinks,
                    path_mask=pmask, hop_mask=hop,
                    n_paths=pmask.sum(1).astype(np.int32))
    cls = _classes(topology)
    net = cls == 0
    topo_lat = np.asarray(topology.latency, float)
    net_lat = np.where(real & net[lk], weight * topo_lat[lk], 0.0).sum(1)
    delay = np.asarray(plan.delay, float) + np.maximum(np.asarray(plan.latency) - net_lat, 0)
    cap = np.where(topology.link_up, topology.capacity, 0.0) * np.asarray(plan.bw_scale)
    link_lat = np.where(net, fab.link_latency(topology), 0.0)
    nic_nodes = _nic_nodes(topology)
    is_nic = np.zeros(topology.n_nodes, bool)
    is_nic[nic_nodes] = True
    shielded = (~net) | is_nic[topology.link_src] | is_host[topology.link_src]
    nic_up = net & is_nic[topology.link_src]
    first = nic_nodes[0]
    nic_rate = float(np.asarray(topology.capacity)[nic_up & (topology.link_src == first)].sum())
    return PlanFlows(paths=paths, routed=routed, delay=delay, capacity=cap,
                     link_latency=link_lat, shielded=shielded, nic_rate=nic_rate)


def _combined(items):
    """One block-diagonal network of several ``(plan, topology, PlanFlows)``
    (:func:`fabric_jax.topology.disjoint_union`): links, nodes, hosts and transfers of
    item ``i`` offset past those of items ``< i``."""
    from .paths import concat_padded, concat_paths
    from .topology import disjoint_union
    net, off = disjoint_union([t for _, t, _ in items])
    flow_off = np.cumsum([0] + [p.n_flows for p, _, _ in items])
    paths = concat_paths([f.paths for _, _, f in items], off.links, off.hosts)
    cat = lambda xs: np.concatenate([np.asarray(x) for x in xs])  # noqa: E731
    return dict(net=net, paths=paths, flow_off=flow_off,
                deps=concat_padded([p.deps for p, _, _ in items], offsets=flow_off),
                capacity=cat([f.capacity for _, _, f in items]),
                buffer=cat([np.where(_classes(t) == 0, t.buffer, np.inf) for _, t, _ in items]),
                size=cat([np.asarray(p.size, float) for p, _, _ in items]),
                delay=cat([f.delay for _, _, f in items]),
                link_latency=cat([f.link_latency for _, _, f in items]),
                shielded=cat([f.shielded for _, _, f in items]),
                nic_rate=max(f.nic_rate for _, _, f in items))


def simulate_plans_fluid(items, fabric, *, dt: float, n_steps: int, seed: int = 0) -> list:
    """Several plans under one preset's dynamics in one fluid run (module docstring,
    "Engine"): ``items`` is a list of ``(plan, topology, PlanFlows)``; their networks are
    laid side by side (disjoint links), so each runs as if alone and one compile serves
    them all.

    The run takes a snapshot every :data:`fabric_jax.fluid.options.SAVE_EVERY` steps
    (``n_steps`` rounded up to a multiple, :func:`~fabric_jax.fluid.options.save_schedule`)
    and stops once the fabric is idle for good (``stop_when_idle``: every start and
    finish is the full run's), since the horizon is a multiple of the slowest ideal
    completion.

    Returns:
      ``[(start [flows], finish [flows])]`` per item, seconds.
    """
    c = _combined(items)
    n_steps, every = save_schedule(n_steps, round_up=True)
    res = simulate_paths(c["net"], c["paths"], fabric, c["size"], dt=dt, n_steps=n_steps,
                         arrival=np.zeros(c["size"].size), deps=c["deps"], delay=c["delay"],
                         seed=seed, capacity=c["capacity"],
                         link_latency=c["link_latency"], nic_links=c["shielded"],
                         nic_rate=c["nic_rate"], buffer=c["buffer"],
                         save_every=every)
    start, finish = np.asarray(res.start, float), np.asarray(res.finish, float)
    off = c["flow_off"]
    return [(start[off[i]:off[i + 1]], finish[off[i]:off[i + 1]]) for i in range(len(items))]


def simulate_plan_fluid(plan, topology, fabric, *, dt: float, n_steps: int,
                        max_paths: int | None = DEFAULT_SWEEP_PATHS, seed: int = 0,
                        flows: PlanFlows | None = None):
    """One plan under one preset's dynamics (module docstring, "Engine").

    Returns:
      :class:`fabric_jax.fluid.FluidResult` (``start`` / ``finish`` per transfer, s).
    """
    pf = plan_flows(plan, topology, fabric, max_paths=max_paths, seed=seed) \
        if flows is None else flows
    return simulate_paths(topology, pf.paths, fabric, np.asarray(plan.size, float),
                          dt=dt, n_steps=int(n_steps), arrival=np.zeros(plan.n_flows),
                          deps=np.asarray(plan.deps), delay=pf.delay, seed=seed,
                          capacity=pf.capacity, link_latency=pf.link_latency,
                          nic_links=pf.shielded, nic_rate=pf.nic_rate,
                          buffer=np.where(_classes(topology) == 0, topology.buffer, np.inf))


def _crossbar_rows(plan, topology):
    """:func:`fabric_jax.fabric_sim.ideal_rows` of a plan: each fabric link leaving a NIC
    maps to its up-link, each one entering a NIC to its down-link (at the rate of all
    the NIC's planes), the server's links are kept, switch-to-switch links dropped."""
    from .fabric_sim import ideal_rows
    cls = _classes(topology)
    nic_nodes = _nic_nodes(topology)
    nic_of = np.full(topology.n_nodes, -1)
    nic_of[nic_nodes] = np.arange(nic_nodes.size)
    src_nic, dst_nic = nic_of[topology.link_src], nic_of[topology.link_dst]
    net = cls == 0
    cap = np.where(topology.link_up, topology.capacity, 0.0) * np.asarray(plan.bw_scale)
    nic_cap = np.zeros((2, nic_nodes.size))
    np.add.at(nic_cap[0], src_nic[net & (src_nic >= 0)], cap[net & (src_nic >= 0)])
    np.add.at(nic_cap[1], dst_nic[net & (dst_nic >= 0)], cap[net & (dst_nic >= 0)])
    links = np.asarray(plan.links)
    lk = np.maximum(links, 0)
    on_net = (links >= 0) & net[lk]
    return ideal_rows(np.where(on_net, src_nic[lk], -1), np.where(on_net, dst_nic[lk], -1),
                      nic_nodes.size, nic_capacity=nic_cap,
                      weight=np.where(links >= 0, np.asarray(plan.weight, float), 0.0),
                      keep_links=np.where((links >= 0) & ~net[lk], links, -1),
                      keep_capacity=np.where(net, 0.0, cap))


def simulate_plans_ideal(items) -> list:
    """The ideal-fabric baseline (module docstring) of several ``(plan, topology)``
    pairs in one event simulation (their links and transfers are disjoint, so the
    block-diagonal problem gives each its own answer; one compile for all).

    Each fabric link leaving a NIC maps to that NIC's crossbar up-link, each one entering
    a NIC to its down-link (one per NIC at the rate of all its planes); other fabric
    links (switch to switch) are dropped; the server's links stay.  Exact max-min
    (:func:`fabric_jax.fabric_sim.simulate_ideal`) with the plans' deps, delays and
    latencies.

    Returns:
      ``[finish [flows]]`` per pair, seconds.
    """
    from .fabric_sim import simulate_ideal
    from .paths import concat_padded
    parts = [_crossbar_rows(p, t) for p, t in items]
    link_off = np.cumsum([0] + [x[2].size for x in parts])
    flow_off = np.cumsum([0] + [p.n_flows for p, _ in items])
    xcap = np.concatenate([x[2] for x in parts])
    inc = Incidence.from_rows(concat_padded([x[0] for x in parts], offsets=link_off),
                              concat_padded([x[1] for x in parts], fill=0.0),
                              n_links=xcap.size)
    cat = lambda f: np.concatenate([np.asarray(getattr(p, f), float) for p, _ in items])  # noqa
    # links of zero capacity carry nothing here (the fabric links the crossbar replaces)
    res = simulate_ideal(inc, np.where(xcap > 0, xcap, 1.0), cat("size"),
                         deps=concat_padded([p.deps for p, _ in items], offsets=flow_off),
                         delay=cat("delay"), latency=cat("latency"))
    fin = np.asarray(res.finish, float)
    return [fin[flow_off[i]:flow_off[i + 1]] for i in range(len(items))]


def simulate_plan_ideal(plan, topology) -> np.ndarray:
    """:func:`simulate_plans_ideal` of one plan: ``[flows]`` finish times, s."""
    return simulate_plans_ideal([(plan, topology)])[0]


# ------------------------------------------------------------------ metrics
def rank_completion(plan, topology, finish, hosts=None) -> np.ndarray:
    """``[ranks]`` completion time of each rank: the last arrival into its GPU, s.

    Args:
      plan: the plan that ran.
      topology: its topology.
      finish: ``[flows]`` finish times of its transfers, s.
      hosts: ``[ranks]`` host of each rank (default every host).
    """
    hosts = np.arange(topology.n_hosts) if hosts is None else np.asarray(hosts)
    links = np.asarray(plan.links)
    real = links >= 0
    node = topology.link_dst[np.maximum(links, 0)]
    host_of_node = np.full(topology.n_nodes, -1)
    host_of_node[topology.hosts] = np.arange(topology.n_hosts)
    into = np.where(real, host_of_node[node], -1)
    out = np.full(topology.n_hosts, -np.inf)
    f = np.broadcast_to(np.asarray(finish, float)[:, None], links.shape)
    np.maximum.at(out, into[into >= 0], f[into >= 0])
    return out[hosts]


def nic_ideal_time(plan, topology) -> float:
    """Line-rate time of a plan: :func:`fabric_jax.metrics.collective_ideal_time` of the
    bytes each NIC sends and receives over the fabric (``max(sent, received)`` per NIC,
    at the NIC line rate of all its planes), seconds."""
    from .collectives import link_bytes
    cls = _classes(topology)
    nic_nodes = _nic_nodes(topology)
    nic_of = np.full(topology.n_nodes, -1)
    nic_of[nic_nodes] = np.arange(nic_nodes.size)
    lb = link_bytes(plan)
    net = cls == 0
    up, down = np.zeros(nic_nodes.size), np.zeros(nic_nodes.size)
    s, d = nic_of[topology.link_src], nic_of[topology.link_dst]
    np.add.at(up, s[net & (s >= 0)], lb[net & (s >= 0)])
    np.add.at(down, d[net & (d >= 0)], lb[net & (d >= 0)])
    rate = float(np.asarray(topology.capacity)[net & (topology.link_src == nic_nodes[0])].sum())
    ids = np.arange(nic_nodes.size)
    return float(mx.collective_ideal_time(ids, ids, np.maximum(up, down),
                                          np.zeros(ids.size, np.int32), 1, ids.size,
                                          rate)[0])


def completion_stats(plan, topology, finish, ideal_time: float | None = None) -> dict:
    """p50 / p99 over ranks, completion time and effective bandwidth of one run.

    Returns:
      ``{"p50_completion_time", "p99_completion_time", "completion_time"`` (s),
      ``"effective_bandwidth"`` (fraction), ``"unfinished_transfers"``, ``"ranks"``
      (ranks in the percentiles: every rank that receives data)}``.
    """
    finish = np.asarray(finish, float)
    per_rank = rank_completion(plan, topology, finish)
    per_rank = per_rank[per_rank > -np.inf]          # hosts outside the collective
    t = float(np.max(per_rank))
    ideal = nic_ideal_time(plan, topology) if ideal_time is None else ideal_time
    pct = mx.percentiles(per_rank, (50, 99))
    return dict(p50_completion_time=float(pct["p50"]), p99_completion_time=float(pct["p99"]),
                completion_time=t,
                effective_bandwidth=float(mx.collective_effective_bandwidth(
                    np.array([t]), np.array([ideal]))),
                unfinished_transfers=int(np.sum(~np.isfinite(finish))),
                ranks=int(per_rank.size))


# ------------------------------------------------------------------ the sweep
def _plan(topology, fab, nbytes, algorithm, protocol, n_chunks, seed):
    from . import collectives as col
    return col.build_plan(topology, "all_reduce", nbytes, algorithm=algorithm,
                          protocol=protocol, fabric=fab, n_chunks=n_chunks, seed=seed)


#: Keys of each preset's lists in :func:`scaling_curves`.
CURVE_KEYS = ("p50_completion_time", "p99_completion_time", "completion_time",
              "effective_bandwidth", "unfinished_transfers", "ranks",
              "ideal_p50_completion_time", "ideal_p99_completion_time",
              "ideal_completion_time", "algorithm", "protocol", "transfers", "n_steps",
              "wall_s")


def scaling_curves(topologies, presets, nbytes: float, *, dt: float = 1e-6,
                   algorithms=None, protocol=None, n_chunks: int = DEFAULT_SWEEP_CHUNKS,
                   max_paths: int | None = DEFAULT_SWEEP_PATHS, seed: int = 0,
                   horizon: float = 3.0, overrides: dict | None = None,
                   progress=None) -> dict:
    """Every preset's all-reduce of ``nbytes`` per GPU on each topology (one per GPU
    count).

    Per topology and preset the algorithm is chosen (:func:`choose_algorithm`) and its
    plan built; each distinct plan runs once on the ideal fabric
    (:func:`simulate_plans_ideal`, every plan of the sweep in one event simulation).
    Then each preset runs the plans of every topology side by side in one fluid run
    (:func:`simulate_plans_fluid`: one compile per preset for the whole sweep).  The
    horizon is ``horizon`` times the slowest ideal time (at least 20 steps more); a run
    that leaves transfers unfinished is repeated once with twice the horizon.

    Args:
      topologies: GPUs with the server model (:func:`sweep_topology`).
      presets: preset names.
      nbytes: all-reduce buffer per GPU, bytes.
      dt: fluid step, s.
      algorithms, protocol: restrict the NCCL-like choice (:func:`choose_algorithm`).
      n_chunks: pipeline chunks.
      max_paths: candidate paths per host pair.
      seed: routing hash seed.
      horizon: fluid horizon over the slowest ideal time.
      overrides: ``{preset: {field: value}}`` Fabric overrides.
      progress: optional callable taking a label.

    Returns:
      ``{"gpus": [...], "topologies": [name, ...], "fabrics": {preset: {key: [...]}},
      "ideal": {preset: {key: [...]}}}``: per preset the lists of :data:`CURVE_KEYS`
      (:func:`completion_stats`' keys plus the algorithm and protocol chosen, transfers,
      fluid steps, the ideal-fabric times of its plan, ``wall_s`` = the preset's fluid
      run, shared by its points) aligned with ``gpus``; under ``"ideal"`` the ideal
      baseline of the plan each preset ran (:func:`completion_stats`' keys, algorithm,
      protocol).  ``all_reduce_completion_time`` (= ``completion_time``) and
      ``p99_collective_completion_time`` (= ``p99_completion_time``) are added for
      :func:`fabric_jax.plots.scaling_figure`.
    """
    from .fabrics import get_fabric
    overrides = overrides or {}
    fabs = {n: get_fabric(n, **overrides.get(n, {})) for n in presets}
    chosen, plans = [], []
    for topo in topologies:
        ch, pl = {}, {}
        for name, fab in fabs.items():
            key = choose_algorithm(topo, fab, nbytes, algorithms=algorithms,
                                   protocol=protocol, n_chunks=n_chunks)
            ch[name] = key
            if key not in pl:
                pl[key] = _plan(topo, fab, nbytes, key[0], key[1], n_chunks, seed)
        chosen.append(ch)
        plans.append(pl)
    t0 = time.perf_counter()
    items = [(plan, topo) for topo, pl in zip(topologies, plans) for plan in pl.values()]
    fins = iter(simulate_plans_ideal(items))
    ideal = [{key: completion_stats(plan, topo, next(fins)) for key, plan in pl.items()}
             for topo, pl in zip(topologies, plans)]
    if progress is not None:
        progress(f"ideal fabric, {len(items)} plans ({time.perf_counter() - t0:.0f} s)")
    slowest = max(st["completion_time"] for pt in ideal for st in pt.values())
    n_steps = int(np.ceil(horizon * slowest / dt)) + 20
    out = {"gpus": [int(t.n_hosts) for t in topologies],
           "topologies": [t.name for t in topologies], "fabrics": {}, "ideal": {}}
    for name, fab in fabs.items():
        t0 = time.perf_counter()
        items = []
        for topo, ch, pl in zip(topologies, chosen, plans):
            plan = pl[ch[name]]
            items.append((plan, topo, plan_flows(plan, topo, fab, max_paths=max_paths,
                                                 seed=seed)))
        steps = n_steps
        for _ in range(2):
            runs = simulate_plans_fluid(items, fab, dt=dt, n_steps=steps, seed=seed)
            if all(np.all(np.isfinite(f)) for _, f in runs):
                break
            steps *= 2
        wall = time.perf_counter() - t0
        d = out["fabrics"].setdefault(name, {})
        base_d = out["ideal"].setdefault(name, {})
        for (plan, topo, _), (_, fin), ch, base in zip(items, runs, chosen, ideal):
            key = ch[name]
            st = completion_stats(plan, topo, fin)
            st.update(algorithm=key[0], protocol=key[1], transfers=plan.n_flows,
                      n_steps=steps, wall_s=wall,
                      **{f"ideal_{k}": base[key][k] for k in
                         ("p50_completion_time", "p99_completion_time", "completion_time")})
            for k in CURVE_KEYS:
                d.setdefault(k, []).append(st[k])
            d.setdefault("all_reduce_completion_time", []).append(st["completion_time"])
            d.setdefault("p99_collective_completion_time", []).append(
                st["p99_completion_time"])
            b = dict(base[key], algorithm=key[0], protocol=key[1])
            for k in ("p50_completion_time", "p99_completion_time", "completion_time",
                      "effective_bandwidth", "algorithm", "protocol"):
                base_d.setdefault(k, []).append(b[k])
        if progress is not None:
            progress(f"{name}: {len(items)} points, {sum(p.n_flows for p, _, _ in items)} "
                     f"transfers, {steps} steps ({wall:.0f} s)")
    return out


def scaling_point(topology, presets, nbytes: float, **kw) -> dict:
    """:func:`scaling_curves` at one topology, as ``{preset: stats}`` (each list's
    single entry), plus ``"ideal"``: ``{preset: ideal stats}``."""
    cur = scaling_curves([topology], presets, nbytes, **kw)
    one = lambda d: {k: v[0] for k, v in d.items()}  # noqa: E731
    return dict(fabrics={n: one(v) for n, v in cur["fabrics"].items()},
                ideal={n: one(v) for n, v in cur["ideal"].items()})
