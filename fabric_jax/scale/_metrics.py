"""The figures of a scale point's run: step time, utilisation, completion percentiles,
effective bandwidth, congestion, pauses, cost, background slowdowns, and the jobs'
independent-phases estimate.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import numpy as np

from .. import economics as econ
from .. import metrics as mx
from ._overlap import independent_overlap
from ._rails import RailRun
from ._step import StepFlows, collective_overhead, job_step_time

__all__ = ["rank_slice_completion", "job_slice_times", "point_metrics", "phase_latency",
           "background_metrics", "worst_vs_ideal", "job_set_times", "overlap_metrics"]


def rank_slice_completion(run: RailRun, step: StepFlows) -> np.ndarray:
    """``[n_gpus]`` seconds from the slice's start until each rank's last incoming flow
    of the step finished (0 for a rank with no network traffic; background flows left
    out); ranks on rails that were not simulated take the value of the rank on the first
    simulated rail of their server (the rails are interchangeable:
    :func:`~fabric_jax.scale.scale_point`)."""
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


def job_slice_times(comp: np.ndarray, step: StepFlows) -> np.ndarray:
    """``[jobs]`` each job's slice time: its ranks' latest completion (``comp`` from
    :func:`rank_slice_completion`; 0 for a job with no flows in the run)."""
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
      crossed switch ports (each hop counted;
      :data:`~fabric_jax.scale.CONGESTED_DELAY`).
    * ``ecn_marked_share``: share of the delivered bytes that were marked
      (:attr:`~fabric_jax.scale.RailRun.marked_share`: DCQCN's ECN, IB CC's FECN; 0 for
      a law that does not mark).
    * ``pfc_pause_time``: port-seconds paused (PFC) or credit-starved per step over the
      whole fabric (the simulated rails' figure times ``n_rails / rails simulated``).
    * ``fabric_cost_share``: the fabric's part of $/token
      (:func:`fabric_jax.economics.token_costs`, preset prices; NaN for the ideal
      fabric, which has none).
    """
    comp = rank_slice_completion(run, step)
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
    t_job = job_slice_times(comp, step)
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
               ecn_marked_share=float(getattr(run, "marked_share", 0.0)),
               unfinished_flows=int(np.sum(~np.isfinite(run.finish[mine]))),
               simulated_flows=int(fl.n_flows), n_steps=int(run.n_steps),
               wall_s=float(run.wall_s), fabric_cost_share=float("nan"),
               cost_per_million_tokens=float("nan"))
    if not np.all(mine):
        out.update(background_metrics(run, step, nic_rate))
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


def background_metrics(run: RailRun, step: StepFlows, nic_rate: float) -> dict:
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


def job_set_times(step: StepFlows, full_run: RailRun, runner) -> np.ndarray:
    """``[2^J, J]`` each job's slice time for every set of running jobs (bit mask rows,
    :func:`~fabric_jax.scale.expected_slice_times`): the full set from ``full_run``,
    every other set from ``runner(keep)`` (a run of the flows ``keep``: the set's jobs'
    step flows and any background).  Entries of jobs outside a set are NaN."""
    J = step.n_jobs
    full = 2 ** J - 1
    table = np.full((2 ** J, J), np.nan)
    table[full] = job_slice_times(rank_slice_completion(full_run, step), step)
    job, bg = step.job, ~step.is_step
    for m in range(1, full):              # 2^J - 2 sets, J <= MAX_OVERLAP_JOBS
        members = (m >> np.arange(J)) & 1 == 1
        run = runner(bg | (step.is_step & members[job]))
        t = job_slice_times(rank_slice_completion(run, step), step)
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
