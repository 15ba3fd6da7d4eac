"""One scale point: its fabric and step (host side), every preset's run and the ideal
fabric's, their metrics, and whether the rail reduction is exact.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..fabrics import get_fabric
from ..scenario import Scenario
from ._cluster import (cluster_servers, cross_leaf_share, default_cluster_gpus,
                       on_cluster)
from ._fabric import clos_paths, scale_topology
from ._jobs import add_background, job_servers, place_jobs
from ._metrics import (job_set_times, job_slice_times, overlap_metrics, point_metrics,
                       rank_slice_completion)
from ._overlap import JOB_OVERLAPS, MAX_OVERLAP_JOBS
from ._rails import HORIZON_FACTOR, ideal_rails, run_fabric
from ._route import DEFAULT_HASH, DEFAULT_MAX_PATHS, DEFAULT_QPS, HASHED_ROUTING
from ._step import (CLUSTER_PLACEMENTS, DEFAULT_BACKGROUND_CDF, DEFAULT_LATENCY,
                    DEFAULT_MODEL, StepFlows, scale_plan, step_flows)

__all__ = ["IDEAL", "rail_reduction", "build_point", "point_arguments", "scale_point",
           "run_scale"]

#: Key of the ideal fabric in the results.
IDEAL = "ideal"


def rail_reduction(step: StepFlows, topology, preset_routing: str, rails, max_paths) -> dict:
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
                latency: str = DEFAULT_LATENCY, job_gpus=None, job_models=None,
                cluster_gpus=None):
    """``(topology, step, nic_rate)`` of one scale point (host side): the fabric of
    :func:`~fabric_jax.scale.scale_topology`, and the step's flows of ``jobs`` jobs of
    ``n_gpus / jobs`` GPUs (or of ``job_gpus`` GPUs each, summing to ``n_gpus``), each
    of ``model`` (or of its entry of ``job_models``, one model name per job) placed
    by ``placement``, with background traffic at
    ``background`` of each NIC's line rate (:func:`~fabric_jax.scale.add_background`),
    the collective calls priced by ``latency`` (:data:`~fabric_jax.scale.LATENCY_MODELS`;
    :func:`scale_point` for the arguments), NIC line rate in bytes/s.

    ``cluster_gpus``: one job on a cluster of that many GPUs (default ``n_gpus``, or
    :func:`~fabric_jax.scale.default_cluster_gpus` for the
    :data:`~fabric_jax.scale.CLUSTER_PLACEMENTS`): the fabric is the cluster's, the job
    on the servers :func:`~fabric_jax.scale.cluster_servers` gives it
    (:func:`~fabric_jax.scale.on_cluster`), the placement's facts in
    ``step.info["cluster"]``."""
    from ..systems import get_system
    sysm = get_system(system)
    g = sysm.gpus_per_server
    if cluster_gpus is None and placement in CLUSTER_PLACEMENTS:
        cluster_gpus = default_cluster_gpus(n_gpus, g)
    if cluster_gpus is not None and (int(cluster_gpus) != int(n_gpus)
                                     or placement in CLUSTER_PLACEMENTS):
        if int(jobs) != 1 or job_gpus is not None:
            raise ValueError(f"placement: {placement!r} on a cluster of {cluster_gpus} GPUs "
                             f"places one job; several jobs fill the cluster (jobs=1, no "
                             f"job_gpus, or cluster_gpus = n_gpus with "
                             f"packed/spread/random)")
        return _job_on_cluster(n_gpus, int(cluster_gpus), sysm, model=model, seed=seed,
                               switch_radix=switch_radix, beyond_radix=beyond_radix,
                               plan_options=plan_options, step_options=step_options,
                               placement=placement, background=background,
                               background_cdf=background_cdf, latency=latency)
    topo = scale_topology(n_gpus, sysm, switch_radix=switch_radix, beyond_radix=beyond_radix)
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


def _job_on_cluster(n_gpus, cluster_gpus, sysm, *, model, seed, switch_radix, beyond_radix,
                    plan_options, step_options, placement, background, background_cdf,
                    latency):
    """:func:`build_point` for one job on a cluster of ``cluster_gpus`` GPUs."""
    g = sysm.gpus_per_server
    if cluster_gpus % g or cluster_gpus < int(n_gpus):
        raise ValueError(f"cluster_gpus: whole servers of {g} GPUs, at least the job's "
                         f"{n_gpus}; got {cluster_gpus}")
    topo = scale_topology(cluster_gpus, sysm, switch_radix=switch_radix,
                          beyond_radix=beyond_radix)
    nic_rate = sysm.nic_gbps * 1e9 / 8.0
    gpu = "b200" if "b200" in sysm.name else "h100_sxm"
    mdl, plan = scale_plan(model or DEFAULT_MODEL, n_gpus=int(n_gpus), gpus_per_server=g,
                           **(plan_options or {}))
    step = step_flows(mdl, plan, gpu, nic_rate=nic_rate, seed=seed,
                      **{"latency": latency, **(step_options or {})})
    step = add_background(step, background, nic_rate, size_cdf=background_cdf,
                          seed=int(seed) + 104729)       # between the job's servers
    # the churn's own stream (seed + a constant: not the experts' or the background's)
    srv, facts = cluster_servers(int(n_gpus) // g, cluster_gpus // g, placement,
                                 servers_per_leaf=int(topo.params["servers_per_leaf"]),
                                 seed=int(seed) + 7919)
    step = on_cluster(step, srv)
    info = dict(step.info, placement=placement, cluster=dict(facts, cluster_gpus=cluster_gpus))
    return topo, dataclasses.replace(step, info=info), nic_rate


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
                                                              "global_batch")},
        step_options=dict(skew=job["skew"], slice_time=job["slice_us"] * 1e-6,
                          overlap=job["overlap"], dp_algorithm=job["dp_algorithm"],
                          expert_load=job["expert_load"],
                          capacity_factor=job["capacity_factor"]),
        **{k: job[k] for k in ("jobs", "placement", "background", "background_cdf",
                               "latency", "job_gpus", "job_models", "job_overlap")},
        # one job on a larger cluster only (the jobs-fill-the-cluster runs unchanged)
        **({} if net.get("cluster_gpus") is None else dict(cluster_gpus=net["cluster_gpus"])),
        rails="all" if rails == "all" else tuple(range(rails)),
        max_paths=scenario.fabric.options["max_paths"],
        qps=scenario.fabric.options["qps"], hash_fields=scenario.fabric.options["hash"],
        hash_polarization=scenario.fabric.options["hash_polarization"],
        dt=hor["dt_us"] * 1e-6,
        seed=hor["seed"], horizon_factor=hor["horizon_factor"], fifo_bands=hor["fifo_bands"])


def scale_point(n_gpus, presets=None, *, system="hgx_h100", model=None, dt: float = 0.5e-6,
                rails=(0,), max_paths=DEFAULT_MAX_PATHS, seed: int = 0,
                switch_radix=128, beyond_radix="planes", plan_options=None,
                step_options=None, horizon_factor=HORIZON_FACTOR, ideal: bool = True,
                workers: int = 1, progress=None, fifo_bands=None, on_row=None,
                done=None, jobs: int = 1, placement: str = "packed",
                background: float = 0.0, background_cdf=DEFAULT_BACKGROUND_CDF,
                latency: str = DEFAULT_LATENCY, job_gpus=None, job_models=None,
                job_overlap: str = "always", cluster_gpus=None, qps: int = DEFAULT_QPS,
                hash_fields: str = DEFAULT_HASH, hash_polarization: bool = False) -> dict:
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

    ``placement`` ``"fragmented"`` or ``"topology_aware"`` (one job) puts the job on a
    busy cluster of ``cluster_gpus`` GPUs (default ``1.5 x n_gpus``,
    :func:`~fabric_jax.scale.default_cluster_gpus`): the fabric is the cluster's, the
    job on the servers a scheduler gives it after other jobs came and went
    (:func:`~fabric_jax.scale.cluster_servers`); ``cluster_gpus`` above ``n_gpus``
    does the same for ``"packed"``, ``"spread"`` and ``"random"``.  The other tenants'
    traffic is not simulated.  The point reports ``cluster_gpus``, ``cluster`` (the
    placement's facts, ``None`` when the jobs fill the cluster), ``sus_spanned``
    (scalable units, i.e. leaves per rail, that the step's servers span), ``min_sus``
    (the fewest that hold them) and ``cross_leaf_share`` (share of
    the step's bytes between servers under different leaves,
    :func:`~fabric_jax.scale.cross_leaf_share`).

    ``job_overlap`` (several jobs): ``"always"`` (default) reports the runs as they are,
    every job's slices at once (an upper bound on the interference);
    ``"independent"`` also runs every set of the jobs apart (``2^J - 2`` more runs per
    preset, at most :data:`~fabric_jax.scale.MAX_OVERLAP_JOBS` jobs) and adds the
    estimate for jobs whose step phases are independent
    (:func:`~fabric_jax.scale.independent_overlap`): ``job_duty``,
    ``job_step_times_independent``, ``step_time_independent``,
    ``gpu_utilization_independent``, ``tokens_per_second_independent``, and the slice
    times of every set of jobs, ``job_set_slice_times`` (``[2^J][J]``, row = bit mask).

    ``qps`` (QPs per connection), ``hash_fields`` (what the ECMP hash sees of them,
    :data:`~fabric_jax.scale.HASH_FIELDS`) and ``hash_polarization`` (the same hash at
    every tier of a three-tier build) route hashed presets' flows
    (:func:`~fabric_jax.scale.route_flows`); the ideal fabric runs the connections.

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
    jobs, independent = _job_count(jobs, job_gpus, job_overlap)
    topo, step, nic_rate = build_point(
        n_gpus, system=system, model=model, seed=seed, switch_radix=switch_radix,
        beyond_radix=beyond_radix, plan_options=plan_options, step_options=step_options,
        jobs=jobs, placement=placement, background=background,
        background_cdf=background_cdf, latency=latency, job_gpus=job_gpus,
        job_models=job_models, cluster_gpus=cluster_gpus)
    rails = _point_rails(rails, g, topo)
    out = _point_header(n_gpus, sysm, topo, step, jobs=jobs, placement=placement,
                        latency=latency, job_gpus=job_gpus, job_models=job_models,
                        job_overlap=job_overlap, rails=rails)
    run_kw = dict(rails=rails, dt=dt, max_paths=max_paths, seed=seed, fifo_bands=fifo_bands,
                  horizon_factor=horizon_factor, qps=int(qps), hash_fields=hash_fields,
                  polarized=bool(hash_polarization))
    out.update(qps=int(qps), hash=hash_fields, hash_polarization=bool(hash_polarization))
    return _run_point(out, presets, step, topo, nic_rate, run_kw, label=f"{n_gpus} GPUs",
                      g=g, jobs=jobs, independent=independent, ideal=ideal,
                      workers=workers, progress=progress, on_row=on_row, done=done, t0=t0)


def _job_count(jobs, job_gpus, job_overlap: str) -> tuple:
    """``(jobs, independent)``: the point's job count (``len(job_gpus)`` when given) and
    whether the independent-phases runs are made (:func:`scale_point`'s
    ``job_overlap``), the arguments checked."""
    jobs = int(jobs) if job_gpus is None else len(job_gpus)
    if job_overlap not in JOB_OVERLAPS:
        raise ValueError(f"job_overlap: must be one of {JOB_OVERLAPS}; got {job_overlap!r}")
    independent = job_overlap == "independent" and jobs > 1
    if independent and jobs > MAX_OVERLAP_JOBS:
        raise ValueError(f"job_overlap='independent' runs every set of the jobs (2^J - 1 "
                         f"runs): at most {MAX_OVERLAP_JOBS} jobs; got {jobs}")
    return jobs, independent


def _point_rails(rails, g: int, topology):
    """The rails simulated: ``"all"`` every one of the ``g`` rails; ``None`` (the whole
    fabric) on three tiers, where no rail runs alone."""
    rails = tuple(range(g)) if rails == "all" else rails
    if rails is not None and int(topology.params.get("tiers", 2)) != 2:
        rails = None                               # three tiers: no exact reduction
    return rails


def _point_header(n_gpus, sysm, topo, step: StepFlows, *, jobs, placement, latency,
                  job_gpus, job_models, job_overlap, rails) -> dict:
    """A point's result before its runs: its inputs, ``fabrics`` and ``reduction``
    empty."""
    cl = step.info.get("cluster")
    spl = int(topo.params.get("servers_per_leaf", topo.n_hosts // sysm.gpus_per_server))
    mine = step.is_step            # the servers the step's flows run on
    srv = np.unique(np.concatenate([step.src[mine], step.dst[mine]]) // step.gpus_per_server)
    return dict(gpus=int(n_gpus), system=sysm.name, topology=topo.name,
                plan={k: x for k, x in step.info.items() if k != "cluster"},
                slices=step.slices, n_flows=step.n_flows,
                jobs=jobs, placement=placement, cluster_gpus=int(topo.n_hosts),
                sus_spanned=int(np.unique(srv // spl).size),
                min_sus=-(-int(srv.size) // spl), cluster=cl,
                cross_leaf_share=cross_leaf_share(step, spl),
                background=step.info.get("background"),
                latency=latency,
                job_gpus=None if job_gpus is None else [int(x) for x in job_gpus],
                job_models=None if job_models is None else list(job_models),
                job_overlap=job_overlap if jobs > 1 else "always",
                rails=None if rails is None else list(rails), fabrics={}, reduction={})


def _run_point(out: dict, presets, step: StepFlows, topo, nic_rate: float, run_kw: dict, *,
               label: str, g: int, jobs: int, independent: bool, ideal: bool, workers: int,
               progress, on_row, done, t0: float) -> dict:
    """The runs of one point (:func:`scale_point`) into ``out``: the ideal fabric, then
    each preset not in ``done`` (:func:`~fabric_jax.scale.run_fabric` with ``run_kw``),
    in ``workers`` threads; ``t0``: the point's start (``time.perf_counter``)."""
    rails, max_paths = run_kw["rails"], run_kw["max_paths"]
    upd = progress or (lambda text: None)
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
            upd(f"{label}: {name} (from the earlier run)")
        else:
            todo.append(name)
    if todo or (ideal and IDEAL not in done):
        base = ideal_rails(step, nic_rate, rails=rails)
        t_ideal = float(np.max(base.finish))
        if ideal:
            out[IDEAL] = point_metrics(base, step, topo, None, nic_rate, n_rails=g,
                                       reference=base)
            if independent:
                # the ideal crossbar: jobs share no link, every set gives the same times
                full = job_slice_times(rank_slice_completion(base, step), step)
                out[IDEAL].update(overlap_metrics(
                    step, np.broadcast_to(full, (2 ** jobs, jobs)), out[IDEAL], runs=0))
    elif ideal:
        out[IDEAL] = done[IDEAL]
    upd(f"{label}: ideal fabric")
    report()

    def one(name):
        fab = get_fabric(name)
        run = run_fabric(step, topo, fab, t_ideal, **run_kw)
        met = point_metrics(run, step, topo, name, nic_rate, n_rails=g,
                            reference=base if base.rails == run.rails else None)
        if independent:
            table = job_set_times(step, run, lambda keep: run_fabric(
                step, topo, fab, t_ideal, **run_kw, keep=keep))
            met.update(overlap_metrics(step, table, met, runs=2 ** jobs - 1))
        red = rail_reduction(step, topo, fab.routing, rails, max_paths)
        with lock:
            out["fabrics"][name] = met
            out["reduction"][name] = red
        upd(f"{label}: {name}")
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


def run_scale(gpus, presets, *, progress=None, **kw) -> dict:
    """:func:`scale_point` at each GPU count: ``{"points": [...]}`` in order."""
    return {"points": [scale_point(int(g), presets, progress=progress, **kw) for g in gpus]}
