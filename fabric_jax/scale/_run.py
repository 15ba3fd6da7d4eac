"""The scale study's runs: each preset on representative rails, the ideal fabric, metrics.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import economics as econ
from .. import metrics as mx
from ..fabrics import get_fabric
from ..fluid.options import save_schedule
from ..paths import PathSet, PathsTruncatedWarning, mix64, shortest_paths
from ..scenario import Scenario
from ._fabric import clos_paths, ecmp_paths, rail_symmetric_paths, rail_view, scale_topology
from ._overlap import JOB_OVERLAPS, MAX_OVERLAP_JOBS, independent_overlap
from ._jobs import add_background, job_servers, place_jobs
from ._step import (DEFAULT_BACKGROUND_CDF, DEFAULT_LATENCY, DEFAULT_MODEL, StepFlows,
                    collective_overhead, job_step_time, scale_plan, step_flows)

__all__ = ["DEFAULT_DT_US", "DEFAULT_MAX_PATHS", "CONGESTED_DELAY", "HASHED_ROUTING",
           "HORIZON_FACTOR", "RailRun", "route_flows", "simulate_rails", "ideal_rails",
           "point_metrics", "scale_point", "simulate_rails_on_devices", "run_scale", "IDEAL",
           "build_point", "run_fabric", "worst_vs_ideal", "point_arguments"]

#: Default fluid step, microseconds (``docs/scale.md``, "dt": every headline figure
#: moves by <= 3 % when it is halved).
DEFAULT_DT_US = 0.5
#: Candidate paths per flow and plane under adaptive routing and spraying
#: (rail-symmetric subset, :func:`~fabric_jax.scale.rail_symmetric_paths`; a cost of the
#: fluid model, whose per-step work grows with paths x hops); hashed routing picks from
#: every spine.
DEFAULT_MAX_PATHS = 4
#: A switch port is congested while a byte would wait longer than this behind its queue
#: (``q_l / C_l``), s: one microsecond, about the fabric's one-way base latency and the
#: depth at which the presets' ECN / telemetry start reacting (DCQCN's K_min of 100 KB at
#: 400 Gb/s is 2 us): an assumption, named here.
CONGESTED_DELAY = 1e-6
#: Routing policies that pin each flow to the path its hash picks.
HASHED_ROUTING = ("ecmp",)
#: Horizon of a fluid run over the ideal fabric's slice time (doubled once when a run
#: leaves flows unfinished; the run stops early once the fabric is idle).
HORIZON_FACTOR = 2.0
#: Key of the ideal fabric in the results.
IDEAL = "ideal"


def _sport(seed: int, flow_id) -> np.ndarray:
    """RoCEv2 UDP source port of each flow (its ECMP entropy): a hash of the flow's
    global id and the seed, so any subset of flows gets the ports the full set has."""
    with np.errstate(over="ignore"):
        h = mix64(np.asarray(flow_id, np.uint64) * np.uint64(0xD1B54A32D192ED03)
                  + np.uint64(int(seed) & 0xFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15))
    return (49152 + h % np.uint64(16384)).astype(np.int64)


def route_flows(step: StepFlows, topology, fabric, *, max_paths=DEFAULT_MAX_PATHS,
                seed: int = 0, flow_ids=None):
    """``(flows, PathSet)`` of ``step``'s flows on ``topology`` (full-fabric link ids)
    for ``fabric``'s routing.

    Two-tier Clos (:func:`~fabric_jax.scale.clos_paths`): hashed routing
    (:data:`HASHED_ROUTING`) gets, per flow and plane, the one path its per-flow hash
    picks among every spine (:func:`~fabric_jax.scale.ecmp_paths`); on ``P`` planes each
    flow is first split into ``P`` stripes, one per plane (:meth:`StepFlows.stripes`).
    Adaptive routing and spraying get the rail-symmetric candidate set of
    :func:`~fabric_jax.scale.rail_symmetric_paths` (``max_paths``).  Other fabrics
    (three tiers): :func:`fabric_jax.shortest_paths` with ``max_paths`` for every policy
    (ECMP then hashes among that subset).

    Args:
      flow_ids: ``[flows]`` global id of each flow (default ``arange``): the ECMP source
        port is a function of it, so a subset routes as it does in the full set.
    """
    fab = get_fabric(fabric)
    ids = np.arange(step.n_flows) if flow_ids is None else np.asarray(flow_ids)
    table = clos_paths(topology)
    g = step.gpus_per_server
    if table is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PathsTruncatedWarning)
            ps = shortest_paths(topology, step.src, step.dst, max_paths=max_paths, seed=seed)
        return step, ps
    if fab.routing in HASHED_ROUTING:
        P = table.n_planes
        flows = step.stripes(P)
        sid = np.repeat(ids, P) * P + np.tile(np.arange(P), ids.size)
        links = ecmp_paths(table, flows.src, flows.dst, np.tile(np.arange(P), ids.size),
                           _sport(seed, sid))[:, None, :]
        mask = np.ones((flows.n_flows, 1), bool)
    else:
        flows = step
        links, mask = rail_symmetric_paths(table, flows.src, flows.dst, flows.src // g,
                                           flows.dst // g, max_paths, seed)
    return flows, PathSet(src=flows.src.astype(np.int32), dst=flows.dst.astype(np.int32),
                          links=links, path_mask=mask, hop_mask=links >= 0,
                          n_paths=mask.sum(1).astype(np.int32))


@dataclasses.dataclass(frozen=True)
class RailRun:
    """One preset's fluid run of some rails (:func:`simulate_rails`).

    Attributes:
      flows: the flows simulated (stripes of hashed routing included), full-fabric host
        ids.
      start, finish: ``[flows]`` seconds.
      paused_time: link-seconds paused (PFC) or credit-starved over the run.
      congested_bytes: bytes served by switch ports while congested
        (:data:`CONGESTED_DELAY`), sampled every
        :data:`fabric_jax.fluid.options.SAVE_EVERY` steps.
      port_bytes: bytes the flows carry across switch ports (each hop counted).
      n_steps: the horizon simulated.
      wall_s: seconds of the run (compile included).
      rails: the rails simulated (``None``: the whole fabric).
      n_links: links of the simulated (sub-)fabric.
      t: ``[saves]`` snapshot times, s (``None`` for the ideal fabric).
      goodput: ``[saves]`` bytes/s delivered over all flows at each snapshot.
      latency: ``[flows]`` zero-load one-way latency of each flow's first path, s
        (``None``: none, the ideal crossbar).
      problem: the :class:`fabric_jax.fluid.FluidProblem` run (``None`` for the ideal
        fabric): compile it, or run it again, with :func:`fabric_jax.fluid.run`.
      run_s: seconds inside the engine's run (compile included, the device work
        waited for); ``wall_s - run_s`` is the host side.
      attempts: fluid runs made for this result (:func:`run_fabric` doubles the horizon
        once when flows are left unfinished); ``run_s`` sums them.
    """

    flows: StepFlows
    start: np.ndarray
    finish: np.ndarray
    paused_time: float
    congested_bytes: float
    port_bytes: float
    n_steps: int
    wall_s: float
    rails: tuple | None
    n_links: int
    t: np.ndarray | None = None
    goodput: np.ndarray | None = None
    device: str = ""
    latency: np.ndarray | None = None
    problem: object = None
    run_s: float = 0.0
    attempts: int = 1


def simulate_rails(step: StepFlows, topology, fabric, *, rails=(0,), dt: float,
                   n_steps: int, max_paths=DEFAULT_MAX_PATHS, seed: int = 0,
                   fifo_bands: int | None = None, keep=None) -> RailRun:
    """``fabric``'s fluid run of the flows of ``rails`` on their sub-fabric.

    The flows of the rails (``step.rail``) run alone on the rails' own links
    (:func:`~fabric_jax.scale.rail_view`), through the compare study's engine
    (:func:`fabric_jax.study.run.simulate_paths`: the preset's routing, congestion
    control at the NIC rate, flow control, receiver, per-link latency, each flow capped
    at its cut).  ``rails=None`` runs every flow on the whole fabric.  Routing:
    :func:`route_flows` on the full fabric (so hashes and candidate sets are those of
    the full run), links renumbered in order.  ``keep`` (``[flows]`` bool): run only
    these flows (a closed set: a kept flow's dependencies kept), each routed as in the
    run of every flow (its hash keeps its flow number).
    """
    import jax

    from ..fabric_sim import prepare_paths
    from ..fluid import run as run_fluid
    fab = get_fabric(fabric)
    t0 = time.perf_counter()
    keep = np.ones(step.n_flows, bool) if keep is None else np.asarray(keep, bool)
    if keep.shape != (step.n_flows,):
        raise ValueError(f"keep: a [{step.n_flows}] bool mask; got shape {keep.shape}")
    if rails is None:
        ids = np.flatnonzero(keep)
        sub_step, topo, link_of, host_of = (step if keep.all() else step.subset(ids),
                                            topology, None, None)
    else:
        view = rail_view(topology, rails)
        ids = np.flatnonzero(np.isin(step.rail, view.rails) & keep)
        sub_step, topo = step.subset(ids), view.topology
        link_of, host_of = view.link_of, view.host_of
        if view.shared.any():
            warnings.warn("simulate_rails: the rails share links with other rails "
                          "(three tiers); their traffic is left out of this run",
                          stacklevel=2)
    flows, ps = route_flows(sub_step, topology, fab, max_paths=max_paths, seed=seed,
                            flow_ids=ids)
    links = np.asarray(ps.links)
    if link_of is not None:
        links = np.where(links >= 0, link_of[np.maximum(links, 0)], -1).astype(np.int32)
        if np.any(np.asarray(ps.hop_mask) & (links < 0)):
            raise ValueError("rails: a path leaves the rails' sub-fabric")
        ps = dataclasses.replace(ps, links=links,
                                 src=host_of[np.asarray(ps.src)].astype(np.int32),
                                 dst=host_of[np.asarray(ps.dst)].astype(np.int32))
    n_steps, every = save_schedule(n_steps, round_up=True)
    opts = {} if fifo_bands is None else {"fifo_bands": int(fifo_bands)}
    problem = prepare_paths(topo, ps, fab, flows.size, dt=float(dt), n_steps=n_steps,
                            arrival=flows.arrivals, deps=flows.deps, seed=seed,
                            save_every=every, fluid_options=opts)
    t_run = time.perf_counter()
    res = jax.block_until_ready(run_fluid(problem))
    run_s = time.perf_counter() - t_run
    tr = res.trajectory
    cap = np.asarray(topo.capacity, float)
    q = np.asarray(tr.queue, float)
    usable = np.asarray(tr.usable, float)
    switch = ~np.asarray(topo.node_is_host, bool)[np.asarray(topo.link_src)]
    hot = (q > CONGESTED_DELAY * cap[None, :]) & switch[None, :]
    congested = float(np.sum(np.where(hot, usable, 0.0)) * every * float(dt))
    hops = (np.asarray(ps.hop_mask) & (np.asarray(ps.links) >= 0))[:, 0, :]
    switch_hops = np.maximum(hops.sum(axis=1) - 1, 0)      # every hop but the NIC's
    port_bytes = float(np.sum(flows.size * switch_hops))
    return RailRun(flows=flows, start=np.asarray(res.start, float),
                   finish=np.asarray(res.finish, float),
                   paused_time=float(np.sum(np.asarray(res.info.paused_time))),
                   congested_bytes=congested, port_bytes=port_bytes, n_steps=n_steps,
                   wall_s=time.perf_counter() - t0,
                   rails=None if rails is None else tuple(view.rails), n_links=topo.n_links,
                   t=np.asarray(tr.t, float),
                   goodput=np.asarray(tr.throughput, float).sum(axis=1),
                   latency=zero_load_latency(ps, topo, fab), problem=problem, run_s=run_s)


def zero_load_latency(ps, topology, fabric) -> np.ndarray:
    """``[flows]`` zero-load one-way latency of each flow's first path, s: its links'
    latencies under ``fabric``'s switch and NIC latencies
    (:meth:`fabric_jax.Fabric.link_latency`), queues empty."""
    hops = (np.asarray(ps.hop_mask) & (np.asarray(ps.links) >= 0))[:, 0, :]
    lat_l = np.asarray(get_fabric(fabric).link_latency(topology), float)
    return np.sum(np.where(hops, lat_l[np.maximum(np.asarray(ps.links)[:, 0, :], 0)], 0.0),
                  axis=1)


def simulate_rails_on_devices(step: StepFlows, topology, fabric, *, rails, devices=None,
                              **kw) -> list:
    """Each rail of ``rails`` alone (:func:`simulate_rails`), rail ``i`` on device ``i mod
    len(devices)`` (default ``jax.devices()``), the devices' runs at once (threads: XLA
    runs outside Python's lock).

    The rails are independent representatives (under hashed routing, different samples
    of the collisions; :func:`scale_point`), so they shard across devices without any
    communication: the way one host's devices, or with ``jax.distributed`` every
    process's, split a cluster too large for one device rail by rail.  Each run is the
    program :func:`simulate_rails` compiles for one rail, whichever device runs it.

    Returns:
      ``[RailRun]`` in the order of ``rails``; ``RailRun.device`` names the device.
    """
    import jax
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices: expected at least one device")
    rails = [int(r) for r in np.atleast_1d(rails)]

    def one(item):
        i, r = item
        dev = devs[i % len(devs)]
        with jax.default_device(dev):
            run = simulate_rails(step, topology, fabric, rails=(r,), **kw)
        return dataclasses.replace(run, device=str(dev))

    with ThreadPoolExecutor(max_workers=len(devs)) as pool:
        return list(pool.map(one, enumerate(rails)))


def ideal_rails(step: StepFlows, nic_rate: float, *, rails=(0,)) -> RailRun:
    """The ideal fabric for the flows of ``rails``: every NIC of those rails on one
    non-blocking crossbar at its line rate (all planes) with ideal congestion control,
    exact max-min recomputed at every flow start and completion
    (:func:`fabric_jax.fabric_sim.simulate_ideal`, each flow capped at the NIC rate).
    Rails never meet on a crossbar, so one rail's run is exact for it."""
    from ..fabric_sim import ideal_incidence, simulate_ideal
    t0 = time.perf_counter()
    ids = np.arange(step.n_flows) if rails is None else np.flatnonzero(
        np.isin(step.rail, np.asarray(rails)))
    sub = step.subset(ids)
    hosts, inv = np.unique(np.concatenate([sub.src, sub.dst]), return_inverse=True)
    hs, hd = inv[:sub.n_flows], inv[sub.n_flows:]
    inc, cap = ideal_incidence(hs, hd, hosts.size, nic_capacity=float(nic_rate))
    # compilation dominates, as in the compare study's baseline
    res = simulate_ideal(inc, cap, sub.size, arrival=sub.arrivals, deps=sub.deps,
                         demand=np.full(sub.n_flows, float(nic_rate)), one_table=True)
    return RailRun(flows=sub, start=np.asarray(res.start, float),
                   finish=np.asarray(res.finish, float), paused_time=0.0,
                   congested_bytes=0.0, port_bytes=float(np.sum(sub.size)), n_steps=0,
                   wall_s=time.perf_counter() - t0,
                   rails=None if rails is None else tuple(int(r) for r in rails),
                   n_links=2 * hosts.size)


def _rank_completion(run: RailRun, step: StepFlows) -> np.ndarray:
    """``[n_gpus]`` seconds from the slice's start until each rank's last incoming flow
    of the step finished (0 for a rank with no network traffic; background flows left
    out); ranks on rails that were not simulated take the value of the rank on the first
    simulated rail of their server (the rails are interchangeable: :func:`scale_point`)."""
    n, g = step.n_gpus, step.gpus_per_server
    comp = np.zeros(n)
    fin = np.where(np.isfinite(run.finish), run.finish, np.inf)
    mine = run.flows.is_step
    np.maximum.at(comp, run.flows.dst_rank[mine], fin[mine])
    if run.rails is None:
        return comp
    sim = np.zeros(g, bool)
    sim[list(run.rails)] = True
    rank = np.arange(n)
    rep = (rank // g) * g + run.rails[0]
    return np.where(sim[rank % g], comp, comp[rep])


def _job_slice_times(comp: np.ndarray, step: StepFlows) -> np.ndarray:
    """``[jobs]`` each job's slice time: its ranks' latest completion (``comp`` from
    :func:`_rank_completion`; 0 for a job with no flows in the run)."""
    t_job = np.zeros(step.n_jobs)
    np.maximum.at(t_job, step.rank_job, comp)
    return t_job


def _utilization(compute, gpus, step_times) -> float:
    """GPU utilisation of several jobs: the mean of ``C_j / step_j`` over equal jobs,
    the GPU-weighted mean otherwise."""
    C, G, st = (np.asarray(x, float) for x in (compute, gpus, step_times))
    return float(np.mean(C / st) if np.all(G == G[0]) else np.sum(G * C / st) / np.sum(G))


def point_metrics(run: RailRun, step: StepFlows, topology, preset: str | None,
                  nic_rate: float, *, n_rails: int, gpu_price_per_hour=None) -> dict:
    """The headline figures of one run, for the whole step and the whole cluster.

    * ``step_time``: ``max(C, (1 - f) C + k T + L)`` with ``C`` the compute time, ``f``
      the overlap, ``k`` the slices, ``T`` the slice's communication time (the last
      rank's last incoming flow) and ``L`` the per-message latency of the step's
      collective calls (``latency_time``, :func:`~fabric_jax.scale.collective_overhead`
      with the run's mean zero-load path latency per phase, 0 on the ideal crossbar;
      ``latency_algorithms``: the algorithm of each call, NCCL's choice);
      ``gpu_utilization`` = ``C / step_time``; tokens/s.  With
      several jobs (:func:`~fabric_jax.scale.place_jobs`) each job ``j`` has its own
      ``T_j`` (its ranks' last flow) and step time ``step_j`` (``job_step_times``):
      ``step_time`` is the slowest job's, ``gpu_utilization`` the mean over the (equal)
      jobs of ``C / step_j``, tokens/s the sum of the jobs', and ``job_spread`` =
      ``max step_j / min step_j`` (1: the jobs do not disturb each other unequally).
      Jobs of different sizes (``StepFlows.job_steps``) each have their own ``k_j``,
      ``C_j``, ``f_j`` and ``L_j`` (``job_latency_times``): utilisation is then the
      GPU-weighted mean, ``compute_time`` and ``latency_time`` the largest job's, and
      the pause time scales the slice's by the GPU-weighted mean ``k``.
    * ``p50_completion`` / ``p99_completion``: percentiles over every rank of the step's
      communication time at that rank (``k x`` its slice time ``+ L``, NumPy's linear
      interpolation), and their ratio.
    * ``effective_bandwidth``: the busiest NIC's bytes (sent or received) at line rate
      over the slice's communication time ``T``, the fabric's, without ``L``
      (:func:`fabric_jax.metrics.collective_effective_bandwidth`).
    * ``congested_share``: bytes served by congested switch ports over the bytes that
      crossed switch ports (each hop counted; :data:`CONGESTED_DELAY`).
    * ``pfc_pause_time``: port-seconds paused (PFC) or credit-starved per step over the
      whole fabric (the simulated rails' figure times ``n_rails / rails simulated``).
    * ``fabric_cost_share``: the fabric's part of $/token
      (:func:`fabric_jax.economics.token_costs`, preset prices; NaN for the ideal
      fabric, which has none).
    """
    comp = _rank_completion(run, step)
    fl = run.flows
    mine = fl.is_step
    finished = bool(np.all(np.isfinite(run.finish[mine])))
    t_slice = float(np.max(comp)) if comp.size else 0.0
    J = step.n_jobs
    pj = step.per_job
    k, C = pj["slices"], pj["compute_time"]               # [jobs]
    f = np.array([float(i["overlap"]) for i in pj["info"]])
    # the path latency the calls pay per network step (none on the ideal crossbar)
    phase_lat = {} if run.latency is None else phase_latency(fl, run.latency)
    lats = [collective_overhead(i, nic_rate, phase_lat) for i in pj["info"]]
    L = np.array([x["total"] for x in lats])
    t_job = _job_slice_times(comp, step)
    t_comm = float(np.max(k * t_job + L))
    step_job = job_step_time(C, f, k, t_job, L) if finished else np.full(J, np.inf)
    step_time = float(np.max(step_job))
    tokens_s = float(np.sum(pj["tokens_per_step"] / step_job)) if finished else 0.0
    G = pj["gpus"]
    util = _utilization(C, G, step_job)
    rj = step.rank_job
    pct = mx.percentiles(k[rj] * comp + L[rj], (50, 99))
    p50, p99 = float(pct["p50"]), float(pct["p99"])
    sent = np.bincount(fl.src[mine], weights=fl.size[mine], minlength=step.n_gpus)
    recv = np.bincount(fl.dst[mine], weights=fl.size[mine], minlength=step.n_gpus)
    line_time = float(np.max(np.maximum(sent, recv), initial=0.0)) / float(nic_rate)
    eff = float(mx.collective_effective_bandwidth(np.array([t_slice]),
                                                  np.array([line_time]))) \
        if finished and t_slice > 0 else 0.0
    scale_rails = n_rails / (len(run.rails) if run.rails is not None else n_rails)
    k_step = float(np.sum(G * k) / np.sum(G))       # one k for equal jobs
    out = dict(step_time=step_time, compute_time=float(np.max(C)),
               gpu_utilization=float(util) if finished else 0.0,
               tokens_per_second=tokens_s,
               jobs=J, job_step_times=[float(x) for x in step_job],
               job_gpus=[int(x) for x in G], job_latency_times=[float(x) for x in L],
               job_spread=float(np.max(step_job) / np.min(step_job)) if finished
               else float("nan"),
               comm_time=t_comm if finished else float("inf"),
               p50_completion=p50, p99_completion=p99,
               p99_over_p50=float(p99 / p50) if p50 > 0 else float("nan"),
               effective_bandwidth=eff, latency_time=float(np.max(L)),
               latency_algorithms={n: c["algorithm"] for n, c in lats[0]["calls"].items()},
               congested_share=float(run.congested_bytes / run.port_bytes)
               if run.port_bytes > 0 else 0.0,
               pfc_pause_time=float(run.paused_time * k_step * scale_rails),
               unfinished_flows=int(np.sum(~np.isfinite(run.finish[mine]))),
               simulated_flows=int(fl.n_flows), n_steps=int(run.n_steps),
               wall_s=float(run.wall_s), fabric_cost_share=float("nan"),
               cost_per_million_tokens=float("nan"))
    if not np.all(mine):
        out.update(_background_metrics(run, step, nic_rate))
    if preset in econ.FABRIC_PRICES and finished:
        params = econ.EconomicsParams() if gpu_price_per_hour is None else \
            econ.EconomicsParams(gpu_price_per_hour=float(gpu_price_per_hour))
        # the step time that gives the jobs' tokens/s (the step time with one job)
        rep = econ.token_costs(step.tokens_per_step / tokens_s, step.tokens_per_step,
                               step.n_gpus, topology, preset, params=params)
        out.update(fabric_cost_share=float(rep["fabric_cost_share"]),
                   cost_per_million_tokens=float(rep["cost_per_million_tokens"]))
    return out


def phase_latency(flows: StepFlows, latency) -> dict:
    """``{phase: s}``: the mean of ``latency`` ``[flows]`` over the step flows of each
    phase (the path latency :func:`~fabric_jax.scale.collective_overhead` charges per
    network step)."""
    latency = np.asarray(latency, float)
    return {int(ph): float(np.mean(latency[flows.phase == ph]))
            for ph in np.unique(flows.phase[flows.is_step])}


def _background_metrics(run: RailRun, step: StepFlows, nic_rate: float) -> dict:
    """The background flows' completion (:func:`point_metrics`): each flow's slowdown,
    its flow completion time (arrival to last byte delivered) over the time it takes on
    an idle fabric (its bytes at the NIC line rate -- per stripe, at the stripe's share
    of it -- plus its path's zero-load one-way latency), p50 / p99 over the finished
    ones, and how many did not finish."""
    fl = run.flows
    bg = ~fl.is_step
    n_sub = step.n_flows if run.rails is None else int(np.isin(step.rail, run.rails).sum())
    stripes = max(fl.n_flows // max(n_sub, 1), 1)   # hashed routing on planes: stripes
    lat = np.zeros(fl.n_flows) if run.latency is None else run.latency
    idle = fl.size * stripes / float(nic_rate) + lat
    fct = run.finish - fl.arrivals
    ok = bg & np.isfinite(fct)
    slow = fct[ok] / idle[ok]
    pct = mx.percentiles(slow, (50, 99)) if slow.size else {"p50": np.nan, "p99": np.nan}
    return dict(background_flows=int(bg.sum()),
                background_p50_slowdown=float(pct["p50"]),
                background_p99_slowdown=float(pct["p99"]),
                background_unfinished=int(np.sum(bg & ~np.isfinite(fct))),
                background_window=float(step.info["background"]["window"]))


def worst_vs_ideal(metrics: dict, ideal: dict | None, *, independent: bool = False) -> float:
    """The largest slowdown of a job against the same job on the ideal fabric, ``max_j
    step_j / ideal step_j - 1``, from two :func:`point_metrics` results (NaN without the
    ideal one or where a step is missing); ``independent``: the step times of the
    independent-phases estimate (``job_step_times_independent``)."""
    key = "job_step_times_independent" if independent else "job_step_times"
    if not ideal or key not in metrics or key not in ideal:
        return float("nan")
    a, b = metrics[key], ideal[key]
    if any(x is None for x in a + b):
        return float("nan")
    return max(x / y for x, y in zip(a, b)) - 1.0


def _reduction(step: StepFlows, topology, preset_routing: str, rails, max_paths) -> dict:
    """Whether simulating ``rails`` gives the whole cluster exactly (``exact``) and why."""
    g = step.gpus_per_server
    if rails is None:
        return dict(exact=True, reason="every rail simulated (the full run)")
    view_ok = int(topology.params.get("tiers", 2)) == 2
    if not view_ok:
        return dict(exact=False, reason="three tiers: rails share the spine-to-super-spine "
                    "links, whose other-rail traffic the run leaves out")
    # every rail carries the same pattern: rail r's flows are rail 0's with each NIC
    # moved to the same server's rail-r NIC, in the same order, with the same deps
    counts = np.bincount(step.rail, minlength=g)
    same = bool(np.all(counts == counts[0]))
    if same and counts[0]:
        order = np.argsort(step.rail, kind="stable")
        pos = np.empty(step.n_flows, np.int64)
        pos[order] = np.arange(step.n_flows) - np.repeat(np.cumsum(counts) - counts,
                                                         counts)
        srv_s = (step.src // g)[order].reshape(g, -1)
        srv_d = (step.dst // g)[order].reshape(g, -1)
        size = step.size[order].reshape(g, -1)
        arr = step.arrivals[order].reshape(g, -1)
        d = step.deps[order]
        dep_rail = np.where(d >= 0, step.rail[np.maximum(d, 0)], -1)
        dpos = np.where(d >= 0, pos[np.maximum(d, 0)], -1).reshape(g, counts[0], -1)
        same = (np.all(srv_s == srv_s[:1]) and np.all(srv_d == srv_d[:1])
                and np.all(size == size[:1]) and np.all(dpos == dpos[:1])
                and np.all(arr == arr[:1])
                and np.all((dep_rail < 0) | (dep_rail == step.rail[order][:, None])))
    if not same:
        return dict(exact=False, reason="the rails carry different traffic patterns")
    if preset_routing in HASHED_ROUTING and len(rails) < g:
        return dict(exact=False, reason=f"{preset_routing}: each rail's flows hash with "
                    f"their own addresses, so the rails' collisions differ; "
                    f"{len(rails)} of {g} rails simulated (--rails all for every rail)")
    if clos_paths(topology) is None and len(rails) < g:
        return dict(exact=False, reason="candidate paths from shortest_paths differ per "
                    "rail (not a two-tier Clos)")
    return dict(exact=True, reason="rails share no link and carry the same flows, "
                "routed alike: one rail's run is every rail's")


def build_point(n_gpus: int, *, system="hgx_h100", model=None, seed: int = 0,
                switch_radix=128, beyond_radix="planes", plan_options=None,
                step_options=None, jobs: int = 1, placement: str = "packed",
                background: float = 0.0, background_cdf=DEFAULT_BACKGROUND_CDF,
                latency: str = DEFAULT_LATENCY, job_gpus=None, job_models=None):
    """``(topology, step, nic_rate)`` of one scale point (host side): the fabric of
    :func:`~fabric_jax.scale.scale_topology`, and the step's flows of ``jobs`` jobs of
    ``n_gpus / jobs`` GPUs (or of ``job_gpus`` GPUs each, summing to ``n_gpus``), each
    of ``model`` (or of its entry of ``job_models``, one model name per job) placed
    by ``placement``, with background traffic at
    ``background`` of each NIC's line rate (:func:`~fabric_jax.scale.add_background`),
    the collective calls priced by ``latency`` (:data:`~fabric_jax.scale.LATENCY_MODELS`;
    :func:`scale_point` for the arguments), NIC line rate in bytes/s."""
    from ..systems import get_system
    sysm = get_system(system)
    topo = scale_topology(n_gpus, sysm, switch_radix=switch_radix, beyond_radix=beyond_radix)
    g = sysm.gpus_per_server
    if job_gpus is None:
        sizes = [int(n_gpus) // int(jobs)] * int(jobs)
        srv = job_servers(int(n_gpus) // g, int(jobs), placement, seed=seed)
    else:
        sizes = [int(x) for x in job_gpus]
        if any(x % g for x in sizes) or sum(sizes) != int(n_gpus):
            raise ValueError(f"job_gpus: each job must be whole servers of {g} GPUs and "
                             f"the jobs must sum to n_gpus = {n_gpus}; got {list(job_gpus)}")
        srv = job_servers(int(n_gpus) // g, None, placement, seed=seed,
                          sizes=[x // g for x in sizes])
    if job_models is None:
        models = [model or DEFAULT_MODEL] * len(sizes)
    else:
        models = list(job_models)
        if len(models) != len(sizes):
            raise ValueError(f"job_models: one model per job ({len(sizes)}); got "
                             f"{len(models)}")
    nic_rate = sysm.nic_gbps * 1e9 / 8.0
    gpu = "b200" if "b200" in sysm.name else "h100_sxm"
    plans = {}
    for size, mdl in zip(sizes, models):
        if (size, mdl) not in plans:
            plans[size, mdl] = scale_plan(mdl, n_gpus=size, gpus_per_server=g,
                                          **(plan_options or {}))
    steps = [step_flows(*plans[size, mdl], gpu, nic_rate=nic_rate, seed=seed + j,
                        **{"latency": latency, **(step_options or {})})
             for j, (size, mdl) in enumerate(zip(sizes, models))]
    step = place_jobs(steps, srv, placement=placement)          # 1 job packed: as is
    # the background's own stream (seed + a constant: not the expert popularity's)
    step = add_background(step, background, nic_rate, size_cdf=background_cdf,
                          seed=int(seed) + 104729)
    return topo, step, nic_rate


def run_fabric(step: StepFlows, topology, fabric, t_ideal: float, *, rails=(0,),
               dt: float, max_paths=DEFAULT_MAX_PATHS, seed: int = 0, fifo_bands=None,
               horizon_factor=HORIZON_FACTOR, keep=None) -> RailRun:
    """``fabric``'s run of ``step`` (:func:`simulate_rails`, ``keep`` as there) over
    ``horizon_factor`` times the ideal fabric's slice time ``t_ideal`` (40 steps more),
    the horizon doubled once when flows are left unfinished."""
    n_steps = int(np.ceil(horizon_factor * t_ideal / dt)) + 40
    run_s = 0.0
    for attempt in range(1, 3):
        run = simulate_rails(step, topology, fabric, rails=rails, dt=dt, n_steps=n_steps,
                             max_paths=max_paths, seed=seed, fifo_bands=fifo_bands,
                             keep=keep)
        run_s += run.run_s
        if np.all(np.isfinite(run.finish)):
            break
        n_steps *= 2
    return dataclasses.replace(run, run_s=run_s, attempts=attempt)


def point_arguments(scenario: Scenario) -> dict:
    """The arguments of :func:`scale_point` that a scale scenario
    (:func:`~fabric_jax.scale.scale_scenarios`) gives: every one but the run's own."""
    if scenario.study != "scale":
        raise ValueError(f"scenario: a {scenario.study} scenario; scale_point takes a scale "
                         f"scenario (fabric_jax.scale.scale_scenarios)")
    net, job, hor = scenario.network.params, scenario.traffic.params, scenario.horizon.params
    rails = scenario.fabric.options["rails"]
    return dict(
        n_gpus=net["gpus"], presets=list(scenario.fabric.presets), system=net["system"],
        switch_radix=net["switch_radix"], beyond_radix=net["beyond_radix"],
        model=job["model"], plan_options={k: job[k] for k in ("pp", "ep", "microbatches",
                                                              "overlap")},
        step_options=dict(skew=job["skew"], slice_time=job["slice_us"] * 1e-6),
        **{k: job[k] for k in ("jobs", "placement", "background", "background_cdf",
                               "latency", "job_gpus", "job_models", "job_overlap")},
        rails="all" if rails == "all" else tuple(range(rails)),
        max_paths=scenario.fabric.options["max_paths"], dt=hor["dt_us"] * 1e-6,
        seed=hor["seed"], horizon_factor=hor["horizon_factor"], fifo_bands=hor["fifo_bands"])


def scale_point(n_gpus, presets=None, *, system="hgx_h100", model=None, dt: float = 0.5e-6,
                rails=(0,), max_paths=DEFAULT_MAX_PATHS, seed: int = 0,
                switch_radix=128, beyond_radix="planes", plan_options=None,
                step_options=None, horizon_factor=HORIZON_FACTOR, ideal: bool = True,
                workers: int = 1, progress=None, fifo_bands=None, on_row=None,
                done=None, jobs: int = 1, placement: str = "packed",
                background: float = 0.0, background_cdf=DEFAULT_BACKGROUND_CDF,
                latency: str = DEFAULT_LATENCY, job_gpus=None, job_models=None,
                job_overlap: str = "always") -> dict:
    """Every preset (and the ideal fabric) on ``n_gpus`` GPUs: one training step.

    ``n_gpus`` may be a scale :class:`~fabric_jax.scenario.Scenario`
    (:func:`~fabric_jax.scale.scale_scenarios`), which then gives every argument
    (:func:`point_arguments`) but the run's own: ``ideal``, ``workers``, ``progress``,
    ``on_row``, ``done``.

    ``jobs`` > 1 runs that many jobs of ``n_gpus / jobs`` GPUs at once, one plan each
    (:func:`scale_plan` at that size), placed on the servers by ``placement``
    (:func:`~fabric_jax.scale.job_servers`; one job ``"random"``: the job's ranks on a
    random permutation of the servers, the control for several jobs placed at random);
    job ``j``'s expert popularity uses seed ``seed + j`` (the same model on other data:
    other hot experts).  ``job_gpus`` (GPUs per job, summing to ``n_gpus``) runs jobs of
    different sizes instead, each with the plan of its size (:func:`~fabric_jax.scale.
    place_jobs`); ``job_models`` (one model name per job) gives the jobs different
    models.  The metrics add each job's step time and their spread
    (:func:`point_metrics`).

    ``background`` > 0 adds open-loop Poisson traffic at that fraction of each NIC's
    line rate, sizes from ``background_cdf``, the same on every rail
    (:func:`~fabric_jax.scale.add_background`): the step's figures leave those flows
    out (on the ideal fabric too, which carries them as well), and the metrics add
    their completion-time slowdowns.  The runs then go on until the background's flows
    have finished too, so the pause time and congested share include the background's
    own, over its arrival window and drain.

    ``latency`` prices the step's collective calls (all-to-alls, pipeline sends, one
    reduce-scatter and all-gather per gradient bucket) with NCCL's model and adds
    them to the step (:func:`~fabric_jax.scale.collective_overhead`): ``"nccl"``
    (default: ring or PAT as NCCL picks), ``"ring"``, or ``"none"`` (the bandwidth view).

    ``job_overlap`` (several jobs): ``"always"`` (default) reports the runs as they are,
    every job's slices at once (an upper bound on the interference);
    ``"independent"`` also runs every set of the jobs apart (``2^J - 2`` more runs per
    preset, at most :data:`~fabric_jax.scale.MAX_OVERLAP_JOBS` jobs) and adds the
    estimate for jobs whose step phases are independent
    (:func:`~fabric_jax.scale.independent_overlap`): ``job_duty``,
    ``job_step_times_independent``, ``step_time_independent``,
    ``gpu_utilization_independent``, ``tokens_per_second_independent``, and the slice
    times of every set of jobs, ``job_set_slice_times`` (``[2^J][J]``, row = bit mask).

    ``on_row(out)``, when given, is called with the point's partial result after the ideal
    fabric and after each preset (under a lock when ``workers > 1``), so a caller can save
    what has finished; ``done`` (a partial result of the same point, from an earlier run)
    supplies rows that are not run again.

    Returns:
      ``{"gpus", "system", "topology", "plan", "slices", "rails", "fabrics": {preset:
      metrics}, "ideal": metrics, "reduction": {preset: {exact, reason}}, "wall_s"}``.
    """
    if isinstance(n_gpus, Scenario):
        if presets is not None:
            raise ValueError("presets: the scenario's fabric names them; give one or the "
                             "other")
        return scale_point(**point_arguments(n_gpus), ideal=ideal, workers=workers,
                           progress=progress, on_row=on_row, done=done)
    if presets is None:
        raise ValueError("presets: name the presets to run (fabric_jax.fabrics.PRESETS)")
    from ..systems import get_system
    t0 = time.perf_counter()
    sysm = get_system(system)
    g = sysm.gpus_per_server
    jobs = int(jobs) if job_gpus is None else len(job_gpus)
    if job_overlap not in JOB_OVERLAPS:
        raise ValueError(f"job_overlap: must be one of {JOB_OVERLAPS}; got {job_overlap!r}")
    independent = job_overlap == "independent" and jobs > 1
    if independent and jobs > MAX_OVERLAP_JOBS:
        raise ValueError(f"job_overlap='independent' runs every set of the jobs (2^J - 1 "
                         f"runs): at most {MAX_OVERLAP_JOBS} jobs; got {jobs}")
    topo, step, nic_rate = build_point(
        n_gpus, system=system, model=model, seed=seed, switch_radix=switch_radix,
        beyond_radix=beyond_radix, plan_options=plan_options, step_options=step_options,
        jobs=jobs, placement=placement, background=background,
        background_cdf=background_cdf, latency=latency, job_gpus=job_gpus,
        job_models=job_models)
    rails = tuple(range(g)) if rails == "all" else rails
    if rails is not None and int(topo.params.get("tiers", 2)) != 2:
        rails = None                               # three tiers: no exact reduction
    upd = progress or (lambda label: None)
    out = dict(gpus=int(n_gpus), system=sysm.name, topology=topo.name,
               plan=dict(step.info), slices=step.slices, n_flows=step.n_flows,
               jobs=jobs, placement=placement, background=step.info.get("background"),
               latency=latency,
               job_gpus=None if job_gpus is None else [int(x) for x in job_gpus],
               job_models=None if job_models is None else list(job_models),
               job_overlap=job_overlap if jobs > 1 else "always",
               rails=None if rails is None else list(rails), fabrics={}, reduction={})
    done = done or {}
    lock = threading.Lock()

    def elapsed():   # this run's time plus the earlier runs' on this point
        return time.perf_counter() - t0 + float(done.get("wall_s", 0.0))

    def report():
        if on_row is not None:
            with lock:
                out["wall_s"] = elapsed()
                on_row(out)

    todo = []
    for name in presets:
        if name in done.get("fabrics", {}):
            out["fabrics"][name] = done["fabrics"][name]
            out["reduction"][name] = done.get("reduction", {}).get(name)
            upd(f"{n_gpus} GPUs: {name} (from the earlier run)")
        else:
            todo.append(name)
    if todo or (ideal and IDEAL not in done):
        base = ideal_rails(step, nic_rate, rails=rails)
        t_ideal = float(np.max(base.finish))
        if ideal:
            out[IDEAL] = point_metrics(base, step, topo, None, nic_rate, n_rails=g)
            if independent:
                # the ideal crossbar: jobs share no link, every set gives the same times
                full = _job_slice_times(_rank_completion(base, step), step)
                out[IDEAL].update(overlap_metrics(
                    step, np.broadcast_to(full, (2 ** jobs, jobs)), out[IDEAL], runs=0))
    elif ideal:
        out[IDEAL] = done[IDEAL]
    upd(f"{n_gpus} GPUs: ideal fabric")
    report()

    def one(name):
        fab = get_fabric(name)
        run = run_fabric(step, topo, fab, t_ideal, rails=rails, dt=dt, max_paths=max_paths,
                         seed=seed, fifo_bands=fifo_bands, horizon_factor=horizon_factor)
        met = point_metrics(run, step, topo, name, nic_rate, n_rails=g)
        if independent:
            table = job_set_times(step, run, lambda keep: run_fabric(
                step, topo, fab, t_ideal, rails=rails, dt=dt, max_paths=max_paths,
                seed=seed, fifo_bands=fifo_bands, horizon_factor=horizon_factor, keep=keep))
            met.update(overlap_metrics(step, table, met, runs=2 ** jobs - 1))
        red = _reduction(step, topo, fab.routing, rails, max_paths)
        with lock:
            out["fabrics"][name] = met
            out["reduction"][name] = red
        upd(f"{n_gpus} GPUs: {name}")
        report()

    if workers > 1 and len(todo) > 1:
        with ThreadPoolExecutor(max_workers=int(workers)) as pool:
            list(pool.map(one, todo))
    else:
        for name in todo:
            one(name)
    # presets in the order asked, whatever order the threads finished in
    out["fabrics"] = {p: out["fabrics"][p] for p in presets}
    out["reduction"] = {p: out["reduction"][p] for p in presets}
    out["wall_s"] = elapsed()
    return out


def job_set_times(step: StepFlows, full_run: RailRun, runner) -> np.ndarray:
    """``[2^J, J]`` each job's slice time for every set of running jobs (bit mask rows,
    :func:`~fabric_jax.scale.expected_slice_times`): the full set from ``full_run``,
    every other set from ``runner(keep)`` (a run of the flows ``keep``: the set's jobs'
    step flows and any background).  Entries of jobs outside a set are NaN."""
    J = step.n_jobs
    full = 2 ** J - 1
    table = np.full((2 ** J, J), np.nan)
    table[full] = _job_slice_times(_rank_completion(full_run, step), step)
    job, bg = step.job, ~step.is_step
    for m in range(1, full):              # 2^J - 2 sets, J <= MAX_OVERLAP_JOBS
        members = (m >> np.arange(J)) & 1 == 1
        run = runner(bg | (step.is_step & members[job]))
        t = _job_slice_times(_rank_completion(run, step), step)
        table[m] = np.where(members, t, np.nan)
    return table


def overlap_metrics(step: StepFlows, table, met: dict, *, runs: int) -> dict:
    """The independent-phases figures (:func:`~fabric_jax.scale.independent_overlap`) of
    a point's run from its ``[2^J, J]`` slice-time ``table`` (:func:`job_set_times`) and
    its metrics ``met`` (for each job's latency ``L``); NaN when a run did not finish."""
    pj = step.per_job
    C, G = pj["compute_time"], pj["gpus"]
    f = np.array([float(i["overlap"]) for i in pj["info"]])
    L = np.asarray(met["job_latency_times"], float)
    J = step.n_jobs
    rows = np.arange(1, 2 ** J)                        # every non-empty set
    member = (rows[:, None] >> np.arange(J)[None, :]) & 1 == 1
    if not np.all(np.isfinite(np.asarray(table, float)[1:][member])):
        nan = float("nan")
        return dict(job_duty=[nan] * J, job_step_times_independent=[nan] * J,
                    step_time_independent=nan, gpu_utilization_independent=nan,
                    tokens_per_second_independent=nan, overlap_runs=int(runs))
    res = independent_overlap(table, pj["slices"], C, f, L)
    st = res["step_times"]
    util = _utilization(C, G, st)
    return dict(job_duty=[float(x) for x in res["duty"]],
                job_step_times_independent=[float(x) for x in st],
                step_time_independent=float(np.max(st)),
                gpu_utilization_independent=float(util),
                tokens_per_second_independent=float(np.sum(pj["tokens_per_step"] / st)),
                overlap_runs=int(runs), overlap_converged=bool(res["converged"]),
                job_set_slice_times=np.asarray(table, float).tolist())


def run_scale(gpus, presets, *, progress=None, **kw) -> dict:
    """:func:`scale_point` at each GPU count: ``{"points": [...]}`` in order."""
    return {"points": [scale_point(int(g), presets, progress=progress, **kw) for g in gpus]}
