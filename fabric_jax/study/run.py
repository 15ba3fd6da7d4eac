"""The simulation driver of the compare study: fluid runs per preset, the ideal-fabric
baseline, and the metrics of each run (every metric computed by :mod:`fabric_jax.metrics`).

Ideal-fabric baseline (:func:`simulate_ideal`): the same flows, arrivals, dependencies
and path latencies on a non-blocking crossbar (each NIC has one up and one down link at
line rate into a single switch of unbounded capacity) with ideal congestion control:
exact max-min sharing, recomputed at every flow arrival and completion
(:func:`fabric_jax.simulate_flows`).  What it loses against line rate is the workload's
own skew (incast fan-in, all-to-all expert imbalance, ring dependencies); what a preset
loses against it is the fabric's (routing collisions, congestion control, flow control).
The baseline runs the host-based collectives (ring all-reduce); a SHARP preset moves
fewer bytes (the switches reduce), so its all-reduce can beat it.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from .. import metrics as mx
from .. import scaling
from ..cc import ibcc
from ..fabrics import get_fabric
from ..fluid import simulate_fluid
from ..incidence import Incidence
from ..routing import make_routing
from ..sim import simulate_flows
from .case import Case, alone_arrival, build_case, collective_phases
from .progress import Progress
from .scenario import Scenario, default_scenario, validate_scenario

__all__ = ["simulate_case", "simulate_ideal", "crossbar_incidence", "case_metrics",
           "run_compare", "scaling_study", "IDEAL"]

#: Key of the ideal-fabric baseline in :func:`run_compare`'s results.
IDEAL = "ideal"


def simulate_case(case: Case, fabric, scn: Scenario, arrival=None, *, save_every=None):
    """Fluid run of a case under a fabric preset (the engine behind :func:`run_compare`).

    Runs :func:`fabric_jax.fluid.simulate_fluid` with the preset's routing policy
    (bound to the case's candidate paths with the scenario's seed), congestion-control
    law and parameters scaled to the case's NIC line rate (:func:`fabric_jax.cc.params_for`),
    per-link latency with the preset's switch and NIC latencies
    (:meth:`fabric_jax.Fabric.link_latency`; transit is a delay line, not a queue),
    host NICs shielded from marking and drops (``nic_links``), flow-control mode, the topology's buffers, and the scenario's
    ``dt_us`` / ``n_steps``.  Under IB CC only switch ports mark FECN
    (:func:`fabric_jax.cc.ibcc.switch_port_mask`, unless ``cc_options`` sets
    ``switch_port``).

    Args:
      case: from :func:`~fabric_jax.study.case.build_case` (built with ``fabric.sharp``).
      fabric: a :class:`fabric_jax.Fabric` or preset name.
      scn: the scenario the case was built from.
      arrival: ``[flows]`` arrival times, s (default ``case.sim_arrival``; see
        :func:`~fabric_jax.study.case.alone_arrival` to run one job alone).
      save_every: trajectory snapshot period in steps (must divide ``n_steps``).

    Returns:
      :class:`fabric_jax.fluid.FluidResult`.
    """
    fabric = get_fabric(fabric)
    arrival = case.sim_arrival if arrival is None else arrival
    sim = scn.simulation
    params = fabric.law_params(line_rate=case.line_rate)
    if fabric.cc == "ibcc" and "switch_port" not in fabric.cc_options:
        # FECN is a switch function: the HCA's own uplink (the NIC backlog) never marks
        params = dataclasses.replace(params, switch_port=np.asarray(
            ibcc.switch_port_mask(case.topology), np.asarray(params.threshold).dtype))
    routing = make_routing(fabric.routing, case.paths, fabric.routing_params(),
                           seed=sim["seed"])
    inc = Incidence.from_paths(case.paths, np.asarray(routing.split),
                               n_links=case.topology.n_links)
    w = case.workload
    return simulate_fluid(inc, case.topology.capacity, w.size, dt=sim["dt_us"] * 1e-6,
                          n_steps=int(sim["n_steps"]), law=fabric.law(),
                          params=params, arrival=arrival, deps=w.deps,
                          delay=w.delay, link_latency=fabric.link_latency(case.topology),
                          nic_links=case.topology, flow_control=fabric.flow_control,
                          buffer=case.topology.buffer, routing=routing, save_every=save_every,
                          **fabric.receiver_options())


def crossbar_incidence(src, dst, n_hosts: int) -> Incidence:
    """Incidence of flows on a non-blocking crossbar: flow ``f`` crosses the uplink of
    host ``src[f]`` (link ``src[f]``) and the downlink of ``dst[f]`` (link
    ``n_hosts + dst[f]``); ``2 * n_hosts`` links."""
    src, dst = np.asarray(src, np.int32), np.asarray(dst, np.int32)
    n = src.size
    links = np.stack([src, n_hosts + dst], axis=1).ravel()
    return Incidence(jnp.asarray(links), jnp.asarray(np.repeat(np.arange(n, dtype=np.int32), 2)),
                     jnp.ones(2 * n, jnp.result_type(float)), 2 * int(n_hosts), n, 2)


def simulate_ideal(case: Case, arrival=None):
    """The ideal-fabric baseline of a case (module docstring): exact max-min on a
    non-blocking crossbar at NIC line rate, with the case's arrivals, dependencies,
    delays and path latencies.

    Returns:
      :class:`fabric_jax.FlowSimResult`.
    """
    w = case.workload
    arrival = case.sim_arrival if arrival is None else arrival
    n_hosts = case.topology.n_hosts
    inc = crossbar_incidence(w.src, w.dst, n_hosts)
    return simulate_flows(inc, np.full(2 * n_hosts, case.line_rate), arrival, w.size,
                          deps=w.deps, delay=w.delay, latency=case.latency,
                          demand=np.full(w.n_flows, case.line_rate))


def _job_time(start, finish, idx):
    if idx.size == 0:
        return float("nan")
    return float(np.max(finish[idx]) - np.min(start[idx]))


def case_metrics(case: Case, scn: Scenario, start, finish, *, paused_time: float = 0.0,
                 alone_finish: dict | None = None) -> dict:
    """The compare metrics of one run (keys: :data:`~fabric_jax.study.report.METRICS`).

    Every figure comes from :mod:`fabric_jax.metrics`: completion times from
    :func:`~fabric_jax.metrics.collective_completion_time` (first start to last finish),
    effective bandwidth from :func:`~fabric_jax.metrics.collective_effective_bandwidth`
    over the step's two collectives, bus bandwidth from
    :func:`~fabric_jax.metrics.busbw`, FCT slowdown from
    :func:`~fabric_jax.metrics.slowdown`, isolation from
    :func:`~fabric_jax.metrics.isolation`, utilisation and cost from
    :func:`~fabric_jax.metrics.gpu_utilization` and
    :func:`~fabric_jax.metrics.cost_per_million_tokens`.

    Args:
      case: the case that was run.
      scn: its scenario.
      start, finish: ``[flows]`` seconds (a simulator result's ``start`` / ``finish``).
      paused_time: link-seconds paused or credit-starved (0 for the ideal fabric).
      alone_finish: ``{job: [flows] finish}`` of runs with only that job switched on.
    """
    w = case.workload
    start = np.asarray(start, float)
    finish = np.asarray(finish, float)
    phase = collective_phases(case)
    cct = np.asarray(mx.collective_completion_time(start, finish, phase, 2), float)
    ideal = mx.collective_ideal_time(w.src, w.dst, w.size, phase, 2, case.topology.n_hosts,
                                     case.line_rate)
    eff = float(mx.collective_effective_bandwidth(cct, ideal))
    t_a2a, t_ar = (float(x) for x in cct)
    nics = scn.topology["nics_per_server"] if scn.topology["kind"] == "rail_optimized" else 1
    n_ring = case.train_hosts.size // nics
    shard = scn.workload["all_reduce_mb"] * 1e6 / nics
    bus = float(mx.busbw(mx.algbw(shard, t_ar), max(n_ring, 1), "all_reduce")) \
        if np.isfinite(t_ar) and t_ar > 0 else 0.0
    other = np.flatnonzero(case.job_of != 0)
    if other.size:
        sd = np.asarray(mx.slowdown(np.maximum(finish[other] - case.sim_arrival[other], 0.0),
                                    w.size[other], case.line_rate, case.latency[other]),
                        float)
        pct = mx.percentiles(sd, (50, 99))
        p50, p99 = float(pct["p50"]), float(pct["p99"])
    else:
        p50 = p99 = float("nan")
    iso = float("nan")
    if alone_finish:
        ratios = []
        for job, fin_alone in alone_finish.items():
            idx = np.flatnonzero(case.job_of == job)
            alone = _job_time(case.sim_arrival, np.asarray(fin_alone, float), idx)
            shared = _job_time(case.sim_arrival, finish, idx)
            if alone > 0:
                ratios.append(float(mx.isolation(shared, alone)))
        iso = max(ratios) if ratios else float("nan")
    train = case.job_of == 0
    train_fin = np.where(train, finish + case.compute, finish)
    step = float(case.spec.step_times(w, train_fin)[0]) if np.all(np.isfinite(finish[train])) \
        else float("inf")
    compute = float(case.spec.compute_time.sum(axis=0).mean())
    util = float(mx.gpu_utilization(compute, step)) if np.isfinite(step) else 0.0
    cost = float(mx.cost_per_million_tokens(scn.economics["gpu_price_per_hour"],
                                            case.train_hosts.size, step,
                                            case.spec.tokens_per_step))
    return dict(effective_bandwidth=eff, collective_completion_time=t_ar,
                all_to_all_completion_time=t_a2a, bus_bandwidth=bus, fct_slowdown_p50=p50,
                fct_slowdown_p99=p99, isolation=iso, pfc_pause_time=float(paused_time),
                gpu_utilization=util, training_step_time=step,
                cost_per_million_tokens=cost,
                unfinished_flows=int(np.sum(~np.isfinite(finish))),
                paths_dropped=int(case.paths_dropped))


def _save_every(n_steps: int) -> int:
    return next((d for d in (20, 10, 8, 5, 4, 2, 1) if n_steps % d == 0), 1)


def run_compare(scn: Scenario | None = None, *, progress: bool = True, keep=False,
                ideal: bool = False) -> dict:
    """Runs every preset of the scenario; returns ``{preset: {metric: value}}`` and, with
    ``ideal=True`` (as ``fabric-jax compare`` does), the ideal-fabric baseline under the
    key ``"ideal"`` (same metric keys, :func:`simulate_ideal`).

    The scenario is validated (:func:`~fabric_jax.study.scenario.validate_scenario`,
    including every preset's options) before the first run.

    With ``keep=True`` returns ``(results, details)`` where ``details[preset]`` holds
    the case and the full run's :class:`~fabric_jax.fluid.FluidResult` (for plots).
    """
    scn = default_scenario() if scn is None else validate_scenario(scn)
    fabs = {name: get_fabric(name, **scn.overrides.get(name, {})) for name in scn.presets}
    runs_per = 3 if scn.simulation["isolation"] else 1
    bar = Progress(len(fabs) * runs_per + int(ideal), enabled=progress)
    cases, results, details = {}, {}, {}
    save = _save_every(int(scn.simulation["n_steps"]))
    for name, fab in fabs.items():
        if fab.sharp not in cases:
            cases[fab.sharp] = build_case(scn, fab.sharp)
        case = cases[fab.sharp]
        res = simulate_case(case, fab, scn, case.sim_arrival, save_every=save)
        bar.update(f"{name}: all jobs")
        alone = {}
        if scn.simulation["isolation"]:
            for job, label in ((0, "training alone"), (1, "tenant alone")):
                if np.any(case.job_of == job):
                    alone[job] = simulate_case(case, fab, scn, alone_arrival(case, job)).finish
                bar.update(f"{name}: {label}")
        results[name] = case_metrics(case, scn, res.start, res.finish,
                                     paused_time=float(np.sum(np.asarray(
                                         res.info.paused_time))), alone_finish=alone)
        details[name] = dict(case=case, result=res)
    if ideal:
        case = cases.get(False) or build_case(scn, False)
        res = simulate_ideal(case)
        alone = {}
        if scn.simulation["isolation"]:
            alone = {job: simulate_ideal(case, alone_arrival(case, job)).finish
                     for job in (0, 1) if np.any(case.job_of == job)}
        results[IDEAL] = case_metrics(case, scn, res.start, res.finish, alone_finish=alone)
        bar.update("ideal fabric")
    return (results, details) if keep else results


def scaling_study(scn: Scenario | None = None, *, factors=(0.5, 1.0, 2.0, 4.0),
                  progress: bool = False) -> dict:
    """The scaling curve of ``fabric-jax compare --plots``: the scenario's training job
    alone at ``train_servers`` scaled by each factor, on every preset.

    Engine: :func:`fabric_jax.scaling.scaling_curves` (exact event-driven max-min, ideal
    congestion control, rails as independent components, every size padded to one
    shape so one compile serves the study).  The topology keeps the scenario's
    parameters with ``n_servers = train_servers``.

    Returns:
      ``{"gpus": [...], "fabrics": {preset: {metric: [...]}}}`` (metrics of
      :func:`fabric_jax.scaling.collective_stats`).
    """
    scn = default_scenario() if scn is None else validate_scenario(scn)
    scns = scaling.scaled_scenarios(scn, factors)
    bar = Progress(len(scns) * len(scn.presets), enabled=progress)
    return scaling.scaling_curves(scns, scn.presets, seed=scn.simulation["seed"],
                                  shared_shape=True, progress=bar.update)
