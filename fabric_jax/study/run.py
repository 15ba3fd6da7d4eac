"""The simulation driver of the compare study: fluid runs per preset, the ideal-fabric
baseline, and the metrics of each run (every metric computed by :mod:`fabric_jax.metrics`).

Ideal fabric (:func:`simulate_ideal`): the same flows, arrivals, dependencies and path
latencies on a non-blocking crossbar (each NIC has one up and one down link at line rate
into a single switch of unbounded capacity) with ideal congestion control: exact max-min
sharing, recomputed at every flow arrival and completion
(:func:`fabric_jax.fabric_sim.simulate_ideal`).

Per-preset ideal (:func:`run_ideal`, the ``ideal`` columns of ``fabric-jax compare``):
the training job **alone** on that crossbar, with the collective algorithm of the
presets it stands for (SHARP's in-network reduction for a preset with ``sharp``, the
ring otherwise), so it is the best that algorithm can do at NIC line rate: a bound on
each training row of those presets (completion times, effective and bus bandwidth, GPU
utilisation, step time, cost), up to one fluid step.  Its neighbour rows are the bounds
by definition: FCT slowdown 1 (a flow alone at line rate), isolation 1 (a job alone),
no pause.  (The whole workload on the crossbar under max-min sharing is not a bound:
a preset whose queues are FIFO or whose classes favour the training job can finish it
sooner than processor sharing with its neighbours does.)
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import economics as econ
from .. import fabric_sim
from .. import metrics as mx
from ..scale import ep_group_size, scaling_curves
from ..fabric_sim import flow_line_rate, simulate_paths  # noqa: F401 (re-exported)
from ..fabrics import get_fabric
from ..fluid.options import save_schedule
from ..links import DEFAULT_FIFO_BANDS
from .case import JOBS, Case, alone_arrival, build_case, collective_phases
from .progress import Progress
from .scenario import Scenario, default_scenario, validate_scenario

__all__ = ["simulate_case", "simulate_paths", "flow_line_rate", "simulate_ideal",
           "case_metrics", "class_isolation", "fabric_cost_metrics", "full_step_times",
           "run_compare", "run_preset", "run_ideal", "default_workers",
           "scaling_study", "scaling_topologies", "IDEAL", "IDEAL_SHARP", "ideal_key",
           "is_ideal"]

#: Key of the ideal-fabric baseline in :func:`run_compare`'s results.
IDEAL = "ideal"


def simulate_case(case: Case, fabric, scn: Scenario, arrival=None, *, save_every=None):
    """Fluid run of a case under a fabric preset (the engine behind :func:`run_compare`).

    Runs :func:`simulate_paths` (:func:`fabric_jax.fluid.simulate_fluid` with the
    preset's routing policy bound to the case's candidate paths with the scenario's
    seed, congestion-control law and parameters scaled to the case's NIC line rate
    (:func:`fabric_jax.cc.params_for`), per-link latency with the preset's switch and
    NIC latencies (:meth:`fabric_jax.Fabric.link_latency`; transit is a delay line, not
    a queue), host NICs shielded from marking and drops (``nic_links``), flow-control
    mode, the topology's buffers, each flow capped at :func:`flow_line_rate`) with the
    scenario's ``dt_us`` / ``n_steps``.  Under IB CC only switch ports mark FECN
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
    arrival = case.sim_arrival if arrival is None else arrival
    sim = scn.simulation
    w = case.workload
    fabric = get_fabric(fabric)
    return simulate_paths(case.topology, case.paths, fabric, w.size,
                          dt=sim["dt_us"] * 1e-6, n_steps=int(sim["n_steps"]),
                          arrival=arrival, deps=w.deps, delay=w.delay, seed=sim["seed"],
                          nic_rate=case.line_rate, save_every=save_every,
                          fluid_options=dict(fabric.class_options(case.job_of, JOBS,
                                                                  case.topology),
                                             fifo_bands=int(sim.get("fifo_bands",
                                                                    DEFAULT_FIFO_BANDS))))


def simulate_ideal(case: Case, arrival=None):
    """The ideal-fabric baseline of a case (module docstring): exact max-min on a
    non-blocking crossbar at NIC line rate (:func:`fabric_jax.fabric_sim.simulate_ideal`),
    each flow capped at line rate, with the case's arrivals, dependencies, delays and
    path latencies.

    Returns:
      :class:`fabric_jax.FlowSimResult`.
    """
    w = case.workload
    arrival = case.sim_arrival if arrival is None else arrival
    inc, cap = fabric_sim.ideal_incidence(w.src, w.dst, case.topology.n_hosts,
                                          nic_capacity=case.line_rate)
    # ~10^3 flows and ~10^2 events: compilation dominates (one table for every flow,
    # one compilation for all three runs)
    return fabric_sim.simulate_ideal(inc, cap, w.size, arrival=arrival, deps=w.deps,
                                     delay=w.delay, latency=case.latency,
                                     demand=np.full(w.n_flows, case.line_rate),
                                     one_table=True)


def _job_time(start, finish, idx):
    if idx.size == 0:
        return float("nan")
    return float(np.max(finish[idx]) - np.min(start[idx]))


def full_step_times(case: Case, start, finish):
    """``(start, finish)`` with the training flows' simulated slice extrapolated to the
    whole step (identity when ``case.comm_scale`` is 1).

    The step's communication is ``k = case.comm_scale`` back-to-back slices like the
    simulated one (:func:`~fabric_jax.study.scenario.model_slices`): a training flow
    that started at ``s`` and finished at ``f`` after its zero-load path latency
    ``lat`` is taken to start at ``k s`` and finish at ``k (f - lat) + lat`` -- the
    transfer ``k`` times, the latency once (the slices pipeline).
    """
    start = np.asarray(start, float)
    finish = np.asarray(finish, float)
    k = case.comm_scale
    if k == 1:
        return start, finish
    train = case.job_of == 0
    lat = np.minimum(case.latency, np.maximum(finish - start, 0.0))
    return (np.where(train, k * start, start),
            np.where(train, k * start + k * (finish - start - lat) + lat, finish))


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

    With a training model the simulated training flows are one slice of ``k =
    case.comm_scale`` (:func:`~fabric_jax.study.scenario.model_slices`); every
    training metric is taken on the whole step (:func:`full_step_times`).
    """
    w = case.workload
    k = case.comm_scale
    start, finish = full_step_times(case, start, finish)
    size = np.where(case.job_of == 0, k * w.size, w.size)
    phase = collective_phases(case)
    cct = np.asarray(mx.collective_completion_time(start, finish, phase, 2), float)
    ideal = mx.collective_ideal_time(w.src, w.dst, size, phase, 2, case.topology.n_hosts,
                                     case.line_rate)
    eff = float(mx.collective_effective_bandwidth(cct, ideal))
    t_a2a, t_ar = (float(x) for x in cct)
    n_ring, shard = case.allreduce_ranks, k * case.allreduce_bytes
    bus = float(mx.busbw(mx.algbw(shard, t_ar), max(n_ring, 1), "all_reduce")) \
        if np.isfinite(t_ar) and t_ar > 0 and shard > 0 else 0.0
    if alone_finish:
        alone_finish = {job: full_step_times(case, case.sim_arrival, fin)[1]
                        for job, fin in alone_finish.items()}
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
    per_job = {}
    if alone_finish:
        for job, fin_alone in alone_finish.items():
            idx = np.flatnonzero(case.job_of == job)
            alone = _job_time(case.sim_arrival, np.asarray(fin_alone, float), idx)
            shared = _job_time(case.sim_arrival, finish, idx)
            if alone > 0:
                per_job[job] = float(mx.isolation(shared, alone))
        iso = max(per_job.values()) if per_job else float("nan")
    train = case.job_of == 0
    train_fin = np.where(train, finish + case.offset, finish)
    step = float(case.spec.step_times(w, train_fin)[0]) if np.all(np.isfinite(finish[train])) \
        else float("inf")
    compute = float(case.spec.compute_time.sum(axis=0).mean())
    util = float(mx.gpu_utilization(compute, step)) if np.isfinite(step) else 0.0
    cost = float(mx.cost_per_million_tokens(scn.economics["gpu_price_per_hour"],
                                            case.train_hosts.size, step,
                                            case.spec.tokens_per_step))
    nan = float("nan")
    out = dict(effective_bandwidth=eff, collective_completion_time=t_ar,
               all_to_all_completion_time=t_a2a, bus_bandwidth=bus, fct_slowdown_p50=p50,
               fct_slowdown_p99=p99, isolation=iso, pfc_pause_time=float(paused_time),
               gpu_utilization=util, training_step_time=step,
               cost_per_million_tokens=cost,
               unfinished_flows=int(np.sum(~np.isfinite(finish))),
               paths_dropped=int(case.paths_dropped),
               isolation_train=per_job.get(0, nan), isolation_tenant=per_job.get(1, nan),
               compute_time=compute, tokens_per_step=float(case.spec.tokens_per_step),
               tokens_per_second=float(case.spec.tokens_per_step / step)
               if np.isfinite(step) and step > 0 else 0.0, mfu=nan)
    if case.model_info is not None and np.isfinite(step) and step > 0:
        info = case.model_info
        out["mfu"] = float(info["step_flops"] / (info["n_gpus"] * info["gpu"]["peak_flops"]
                                                 * step))
    return out


def fabric_cost_metrics(case: Case, scn: Scenario, preset: str, metrics: dict) -> dict:
    """The fabric's part of the cost per token of one preset's run
    (:func:`fabric_jax.economics.token_costs`): the training job pays its GPUs at
    ``economics.gpu_price_per_hour`` and the share ``train GPUs / NICs`` of the
    fabric's amortised capital and power, from the bill of materials of the case's
    topology built with ``preset``'s parts (:data:`fabric_jax.economics.FABRIC_PRICES`,
    every price an assumption with its source; ``[costs]`` overrides them).

    Returns:
      ``{"fabric_cost_per_million_tokens", "total_cost_per_million_tokens",
      "fabric_cost_share"}`` (dollars, dollars, fraction in [0, 1]); NaN when the step
      did not finish or ``preset`` has no prices.
    """
    nan = float("nan")
    out = dict(fabric_cost_per_million_tokens=nan, total_cost_per_million_tokens=nan,
               fabric_cost_share=nan)
    step = metrics.get("training_step_time", nan)
    if preset not in econ.FABRIC_PRICES or not (np.isfinite(step) and step > 0):
        return out
    costs = scn.costs or {}
    params = dataclasses.replace(costs.get("params") or econ.EconomicsParams(),
                                 gpu_price_per_hour=scn.economics["gpu_price_per_hour"])
    rep = econ.token_costs(step, case.spec.tokens_per_step, case.train_hosts.size,
                           case.topology, preset, params=params,
                           prices=(costs.get("prices") or {}).get(preset))
    return dict(fabric_cost_per_million_tokens=rep["fabric_cost_per_million_tokens"],
                total_cost_per_million_tokens=rep["cost_per_million_tokens"],
                fabric_cost_share=rep["fabric_cost_share"])


def class_isolation(case: Case, fabric, metrics: dict) -> list:
    """Isolation per traffic class of one preset's run
    (:func:`fabric_jax.metrics.isolation_per_class` over the per-job figures
    ``isolation_train`` / ``isolation_tenant`` of :func:`case_metrics`).

    The jobs of the case (:data:`~fabric_jax.study.case.JOBS`) go into classes by the
    fabric's ``class_map`` (:meth:`fabric_jax.Fabric.class_options`: a job it does not
    name is in class 0).  A fabric without a ``class_map`` -- or the ideal baseline
    (``fabric=None``) -- has one class holding every job, whose figure is the
    worst-job ``isolation``.

    Returns:
      ``[{"class": name, "jobs": [job names present in the case], "isolation": ratio
      or NaN}]``, one entry per class, in class-id order.  Background flows have no
      alone run, so a class holding only them reports NaN.
    """
    per_job = {0: metrics.get("isolation_train", float("nan")),
               1: metrics.get("isolation_tenant", float("nan"))}
    present = [int(j) for j in np.unique(case.job_of)]
    if fabric is None or not fabric.class_map:
        n, of, names = 1, {}, ("all",)
    else:
        tc = fabric.traffic_classes()
        n, names = tc.n_classes, tuple(tc.names)
        of = {j: int(fabric.class_map.get(JOBS[j], 0)) for j in JOBS}
    iso = mx.isolation_per_class({j: v for j, v in per_job.items() if j in present}, of, n)
    return [dict({"class": names[c], "isolation": iso[c]},
                 jobs=[JOBS[j] for j in present if of.get(j, 0) == c]) for c in range(n)]


def default_workers(n_tasks: int) -> int:
    """Presets :func:`run_compare` runs at once by default: one per CPU core this
    process may use, at most ``n_tasks``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(int(n_tasks), cores))


def run_preset(case: Case, fab, scn: Scenario, name: str, update=None) -> tuple[dict, dict]:
    """One preset's part of :func:`run_compare`: the run with every job, the runs with
    one job alone (``simulation.isolation``: same shapes and static arguments, so one
    compilation serves all three), and the metrics.

    Returns:
      ``(metrics, {"case", "result"})``; ``update(label)`` is called after each run.
    """
    update = update or (lambda label: None)
    # the runs stop simulating once the fabric is idle for good, one period at a time
    _, save = save_schedule(scn.simulation["n_steps"], round_up=False)
    res = simulate_case(case, fab, scn, case.sim_arrival, save_every=save)
    update(f"{name}: all jobs")
    alone = {}
    if scn.simulation["isolation"]:
        for job, label in ((0, "training alone"), (1, "tenant alone")):
            if np.any(case.job_of == job):
                alone[job] = simulate_case(case, fab, scn, alone_arrival(case, job),
                                           save_every=save).finish
            update(f"{name}: {label}")
    metrics = case_metrics(case, scn, res.start, res.finish,
                           paused_time=float(np.sum(np.asarray(res.info.paused_time))),
                           alone_finish=alone)
    metrics.update(fabric_cost_metrics(case, scn, name, metrics))
    metrics["isolation_per_class"] = class_isolation(case, fab, metrics)
    return metrics, dict(case=case, result=res)


#: Key of the per-preset ideal of the presets with SHARP (in-network reduction) in
#: :func:`run_compare`'s results; :data:`IDEAL` is the ideal of the others (ring).
IDEAL_SHARP = "ideal_sharp"


def ideal_key(sharp: bool) -> str:
    """The results key of the per-preset ideal of a preset with (or without) SHARP."""
    return IDEAL_SHARP if sharp else IDEAL


def is_ideal(key: str) -> bool:
    """Whether a key of :func:`run_compare`'s results is an ideal column."""
    return key in (IDEAL, IDEAL_SHARP)


def run_ideal(case: Case, scn: Scenario, presets=(), *, sharp: bool = False) -> dict:
    """A per-preset ideal column of :func:`run_compare` (module docstring): the training
    job alone on the non-blocking crossbar (:func:`simulate_ideal`) with the case's
    collective algorithm; the neighbour rows at their bounds by definition.

    Args:
      case: built with the algorithm of the presets it stands for (``build_case(scn,
        sharp)``).
      scn: its scenario.
      presets: the names of those presets (for the column's description).
      sharp: whether ``case`` was built with SHARP (names the algorithm).

    Returns:
      ``{metric: value}`` plus ``"algorithm"`` (``"sharp"`` or ``"ring"``),
      ``"presets"`` and ``"description"`` (what the column is, one line).
    """
    res = simulate_ideal(case, alone_arrival(case, 0))
    out = case_metrics(case, scn, res.start, res.finish)
    train = case.job_of == 0
    nan = float("nan")
    others = bool(np.any(~train))
    iso = scn.simulation["isolation"]
    out.update(fct_slowdown_p50=1.0 if others else nan, fct_slowdown_p99=1.0 if others else nan,
               isolation=1.0 if iso else nan, isolation_train=1.0 if iso else nan,
               isolation_tenant=1.0 if iso and np.any(case.job_of == 1) else nan,
               pfc_pause_time=0.0,
               unfinished_flows=int(np.sum(~np.isfinite(np.asarray(res.finish)[train]))))
    out.update(fabric_cost_metrics(case, scn, IDEAL, out))
    out["isolation_per_class"] = class_isolation(case, None, out)
    algo = "sharp" if sharp else "ring"
    out.update(algorithm=algo, presets=list(presets), description=(
        f"the training job alone on a non-blocking crossbar at NIC line rate, exact "
        f"max-min, {'SHARP in-network reduction' if sharp else 'ring all-reduce'}"
        + (f" as {', '.join(presets)}" if presets else "") + ": a bound on the training "
        "rows; FCT slowdown and isolation 1, no pause, by definition"))
    return out


def run_compare(scn: Scenario | None = None, *, progress: bool = True, keep=False,
                ideal: bool = False, workers: int | None = None) -> dict:
    """Runs every preset of the scenario; returns ``{preset: {metric: value}}`` and, with
    ``ideal=True`` (as ``fabric-jax compare`` does), the per-preset ideals
    (:func:`run_ideal`, same metric keys): under :data:`IDEAL` (``"ideal"``) the ideal
    of the presets without SHARP (ring), under :data:`IDEAL_SHARP` that of the presets
    with SHARP, each present when a preset needs it; each preset's entry names its own
    under ``"ideal_column"``.

    The scenario is validated (:func:`~fabric_jax.study.scenario.validate_scenario`,
    including every preset's options) before the first run.

    The presets (and the baseline) are independent: ``workers`` of them run at once,
    in threads (default :func:`default_workers`: one per CPU core).  A preset's time
    is mostly the XLA compilation of its fluid program (measured by
    ``experiments/bench_compare.py``), which runs outside Python's lock, so on a
    multi-core CPU one preset compiles while another simulates.  The results do not
    depend on ``workers`` (each run is the same deterministic program); ``workers=1``
    runs them one after another.

    With ``keep=True`` returns ``(results, details)`` where ``details[preset]`` holds
    the case and the full run's :class:`~fabric_jax.fluid.FluidResult` (for plots).

    Raises:
      ValueError: ``workers`` not a positive integer.
    """
    scn = default_scenario() if scn is None else validate_scenario(scn)
    if workers is not None and (isinstance(workers, bool)
                                or not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers must be a positive integer (presets run at once); "
                         f"got {workers!r}")
    fabs = {name: get_fabric(name, **scn.overrides.get(name, {})) for name in scn.presets}
    runs_per = 3 if scn.simulation["isolation"] else 1
    sharps = sorted({fab.sharp for fab in fabs.values()}) if ideal else []
    bar = Progress(len(fabs) * runs_per + len(sharps), enabled=progress,
                   label="compare")
    cases = {}   # host side, before the threads (path enumeration, warnings capture)
    for fab in fabs.values():
        if fab.sharp not in cases:
            cases[fab.sharp] = build_case(scn, fab.sharp)

    def task(name):
        if isinstance(name, bool):                       # the ideal of that algorithm
            out = run_ideal(cases[name], scn, [n for n, f in fabs.items() if f.sharp == name],
                            sharp=name)
            bar.update(f"ideal ({out['algorithm']})")
            return out, None
        fab = fabs[name]
        return run_preset(cases[fab.sharp], fab, scn, name, bar.update)

    names = list(fabs) + sharps
    n_workers = default_workers(len(names)) if workers is None else int(workers)
    if n_workers == 1:
        outs = [task(name) for name in names]
    else:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            outs = list(pool.map(task, names))
    results, details = {}, {}
    for name, (metrics, detail) in zip(names, outs):
        results[ideal_key(name) if isinstance(name, bool) else name] = metrics
        if detail is not None:
            details[name] = detail
    if ideal:
        for name, fab in fabs.items():
            results[name]["ideal_column"] = ideal_key(fab.sharp)
    return (results, details) if keep else results


def scaling_topologies(scn: Scenario, factors=(0.5, 1.0, 2.0, 4.0)) -> list:
    """The scenario's fabric at ``train_servers`` scaled by each factor (rounded, >= 2,
    duplicates dropped), with the server model: one GPU per NIC
    (``gpus_per_server = nics_per_server``, NVLink4 and PCIe Gen5 defaults of
    :func:`fabric_jax.topology.with_servers`) on ``rail_optimized``; one GPU per server on
    ``leaf_spine`` (the case builder's one NIC per server).  Scalable units / leaves hold
    at most half the servers (>= 2 units, whole leaves for ``leaf_spine``)."""
    from ..topology import leaf_spine, rail_optimized
    t = scn.topology
    base = int(scn.workload["train_servers"])
    sizes = sorted({max(2, int(round(base * f))) for f in factors})
    out = []
    for n in sizes:
        kw = dict(link_gbps=t["link_gbps"], latency_us=t["latency_us"],
                  buffer_kb=t["buffer_kb"])
        if t["kind"] == "rail_optimized":
            nics = t["nics_per_server"]
            out.append(rail_optimized(n, nics, servers_per_leaf=max(1, min(
                t["servers_per_leaf"], n // 2)), gpus_per_server=nics, **kw))
        else:
            per = ep_group_size(n, min(t["servers_per_leaf"], n // 2), minimum=1)
            out.append(leaf_spine(n // per, t["n_spines"] or per, per, gpus_per_server=1,
                                  nics_per_server=1, **kw))
    return out


def scaling_study(scn: Scenario | None = None, *, factors=(0.5, 1.0, 2.0, 4.0),
                  progress: bool = False) -> dict:
    """The scaling curve of ``fabric-jax compare --plots DIR --scaling-curve``: one
    all-reduce of the scenario's ``all_reduce_mb`` per GPU on the scenario's fabric at
    ``train_servers`` scaled by each factor (:func:`scaling_topologies`), every preset.

    Engine: :func:`fabric_jax.scale.scaling_curves` -- the all-reduce as
    :mod:`fabric_jax.collectives` builds it (chunked transfers, per-step latency, the
    NCCL-like algorithm per preset) through each preset's dynamics in the fluid model
    (:func:`simulate_paths`, the engine of :func:`run_compare`) at the scenario's
    ``dt_us``, next to the ideal fabric.  The rest of the workload (all-to-all,
    tenant, background) is not in the curve.

    Cost: a scale study.  Each preset's fluid run carries every transfer of every size
    (thousands per size at the default scenario's 96-768 GPUs) for about three times
    the slowest ideal all-reduce; on a 2-core CPU one preset at 96 GPUs alone takes
    minutes.  The progress bar counts one unit per preset (and one for the ideal
    fabric) and estimates the time left from the units done.

    Returns:
      :func:`fabric_jax.scale.scaling_curves`' dict (``gpus``, ``fabrics``, ``ideal``).
    """
    scn = default_scenario() if scn is None else validate_scenario(scn)
    topos = scaling_topologies(scn, factors)
    with Progress(1 + len(scn.presets), enabled=progress, label="scaling curve") as bar:
        return scaling_curves(
            topos, scn.presets, scn.workload["all_reduce_mb"] * 1e6,
            dt=scn.simulation["dt_us"] * 1e-6, seed=scn.simulation["seed"],
            overrides=scn.overrides, progress=bar.update)
