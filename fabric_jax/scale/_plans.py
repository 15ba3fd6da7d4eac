"""An all-reduce plan through the fluid model and on the ideal fabric.

Units: bytes, seconds, bytes/s.

The engine of the all-reduce sweep (:mod:`fabric_jax.scale._allreduce`): a
:class:`~fabric_jax.collectives.CollectivePlan` (NCCL's algorithm as a DAG of chunked
transfers, :func:`fabric_jax.collectives.build_plan`) as fluid-model flows
(:func:`plan_flows`, :class:`PlanFlows`), run under a preset's dynamics and on the
ideal fabric, several plans side by side in one run.

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
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ..collectives import link_classes
from ..fabric_sim import ideal_rows, simulate_ideal, simulate_paths
from ..fabrics import get_fabric
from ..fluid.options import save_schedule
from ..incidence import Incidence
from ..paths import (PathSet, PathsTruncatedWarning, concat_padded, concat_paths,
                     shortest_paths)
from ..topology import disjoint_union

__all__ = ["DEFAULT_SWEEP_PATHS", "PlanFlows", "plan_flows", "nic_nodes",
           "simulate_plan_fluid", "simulate_plans_fluid", "simulate_plan_ideal",
           "simulate_plans_ideal"]

#: Candidate paths per host pair in the fluid runs (a seeded, evenly spread subset of
#: the equal-cost paths, :func:`fabric_jax.shortest_paths`): the per-step cost of the
#: fluid model grows with ``paths x hops`` per flow.
DEFAULT_SWEEP_PATHS = 4


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


def nic_nodes(topology) -> np.ndarray:
    """``[nics]`` node ids of the NICs: the fabric's hosts (server model: the PCIe ends)."""
    if not topology.params.get("server_model"):
        return np.asarray(topology.hosts)
    cls = link_classes(topology)
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
    cls = link_classes(topology)
    net = cls == 0
    topo_lat = np.asarray(topology.latency, float)
    net_lat = np.where(real & net[lk], weight * topo_lat[lk], 0.0).sum(1)
    delay = np.asarray(plan.delay, float) + np.maximum(np.asarray(plan.latency) - net_lat, 0)
    cap = np.where(topology.link_up, topology.capacity, 0.0) * np.asarray(plan.bw_scale)
    link_lat = np.where(net, fab.link_latency(topology), 0.0)
    nics = nic_nodes(topology)
    is_nic = np.zeros(topology.n_nodes, bool)
    is_nic[nics] = True
    shielded = (~net) | is_nic[topology.link_src] | is_host[topology.link_src]
    nic_up = net & is_nic[topology.link_src]
    first = nics[0]
    nic_rate = float(np.asarray(topology.capacity)[nic_up & (topology.link_src == first)].sum())
    return PlanFlows(paths=paths, routed=routed, delay=delay, capacity=cap,
                     link_latency=link_lat, shielded=shielded, nic_rate=nic_rate)


def _combined(items):
    """One block-diagonal network of several ``(plan, topology, PlanFlows)``
    (:func:`fabric_jax.topology.disjoint_union`): links, nodes, hosts and transfers of
    item ``i`` offset past those of items ``< i``."""
    net, off = disjoint_union([t for _, t, _ in items])
    flow_off = np.cumsum([0] + [p.n_flows for p, _, _ in items])
    paths = concat_paths([f.paths for _, _, f in items], off.links, off.hosts)
    cat = lambda xs: np.concatenate([np.asarray(x) for x in xs])  # noqa: E731
    return dict(net=net, paths=paths, flow_off=flow_off,
                deps=concat_padded([p.deps for p, _, _ in items], offsets=flow_off),
                capacity=cat([f.capacity for _, _, f in items]),
                buffer=cat([np.where(link_classes(t) == 0, t.buffer, np.inf)
                            for _, t, _ in items]),
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
                          buffer=np.where(link_classes(topology) == 0, topology.buffer, np.inf))


def _crossbar_rows(plan, topology):
    """:func:`fabric_jax.fabric_sim.ideal_rows` of a plan: each fabric link leaving a NIC
    maps to its up-link, each one entering a NIC to its down-link (at the rate of all
    the NIC's planes), the server's links are kept, switch-to-switch links dropped."""
    cls = link_classes(topology)
    nics = nic_nodes(topology)
    nic_of = np.full(topology.n_nodes, -1)
    nic_of[nics] = np.arange(nics.size)
    src_nic, dst_nic = nic_of[topology.link_src], nic_of[topology.link_dst]
    net = cls == 0
    cap = np.where(topology.link_up, topology.capacity, 0.0) * np.asarray(plan.bw_scale)
    nic_cap = np.zeros((2, nics.size))
    np.add.at(nic_cap[0], src_nic[net & (src_nic >= 0)], cap[net & (src_nic >= 0)])
    np.add.at(nic_cap[1], dst_nic[net & (dst_nic >= 0)], cap[net & (dst_nic >= 0)])
    links = np.asarray(plan.links)
    lk = np.maximum(links, 0)
    on_net = (links >= 0) & net[lk]
    return ideal_rows(np.where(on_net, src_nic[lk], -1), np.where(on_net, dst_nic[lk], -1),
                      nics.size, nic_capacity=nic_cap,
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
