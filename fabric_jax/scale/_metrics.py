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
from ._step import (BACKGROUND, PHASES, StepFlows, collective_overhead, flat_overlap,
                    job_step_time, megatron_step_time)

__all__ = ["rank_slice_completion", "job_slice_times", "point_metrics", "phase_latency",
           "phase_slice_times", "job_step_times", "host_leaf", "spine_share", "time_shares",
           "background_metrics", "worst_vs_ideal", "job_set_times", "overlap_metrics",
           "completion_metrics"]


def completion_metrics(run: RailRun, nic_rate: float, reference: RailRun | None = None) -> dict:
    """How close each collective of the step came to line rate, by its slowest flow and
    by its mean flow.

    A *connection* is a flow of the step (its plane stripes and QPs together,
    :attr:`RailRun.split`): it takes from its first row's start to its last row's
    finish.  Its *ideal time* is the phase's bytes of its busier NIC (sent by its sender
    or received by its receiver, every connection of that phase counted) at the line
    rate ``nic_rate``: when it would finish if that NIC ran at line rate throughout.
    Per phase (:data:`~fabric_jax.scale.PHASES`):

    * ``completion_efficiency``: the ideal time of the phase's most loaded NIC over the
      longest connection's time (1: the collective's slowest flow kept pace with line
      rate; for a permutation of equal flows hashed onto ``K`` uplinks, ``1 / max
      load``, :func:`~fabric_jax.scale.expected_max_load`);
    * ``mean_flow_share``: the mean over connections of their time on the reference
      over their time in ``run``; the reference is ``reference`` (the ideal fabric's run
      of the same flows, :func:`~fabric_jax.scale.ideal_rails`: each connection's time
      on a non-blocking crossbar with the same dependencies, so a connection that shares
      its NIC with others is not counted slow for it) or, without one, the connection's
      ideal time above (exact for a permutation: one connection per NIC).  For a
      permutation of equal flows hashed onto ``K`` uplinks it is the mean of ``1 /
      load``: the share of the uplinks in use, :func:`~fabric_jax.scale.balls_into_bins`,
      the figure effective-bisection studies report.

    Overall: ``sum`` of the phases' ideal times over ``sum`` of their slowest
    connections' times (the phases back to back), and the mean share over every
    connection.  Background flows are left out; a phase with an unfinished connection
    gets 0.

    Returns:
      ``{"completion_efficiency", "completion_efficiency_phases": {phase name: x},
      "mean_flow_share", "mean_flow_share_phases": {phase name: x}}``.
    """
    fl = run.flows
    dur, size = _connection_times(run)
    n = max(int(run.split), 1)
    rows = dur.size
    src, dst = fl.src[::n][:rows], fl.dst[::n][:rows]
    phase = fl.phase[::n][:rows]
    ref = None
    if reference is not None:
        ref, _ = _connection_times(reference)
        if ref.size != rows:
            raise ValueError(f"reference: {ref.size} connections; the run has {rows}")
    m_n = max(int(max(src.max(initial=0), dst.max(initial=0))) + 1, 1)
    eff, share, ideal_sum, slow_sum, shares = {}, {}, 0.0, 0.0, []
    for ph in np.unique(phase[phase != BACKGROUND]):
        m = phase == ph
        sent = np.bincount(src[m], weights=size[m], minlength=m_n)
        recv = np.bincount(dst[m], weights=size[m], minlength=m_n)
        ideal_c = np.maximum(sent[src[m]], recv[dst[m]]) / float(nic_rate)
        t_ideal = float(np.max(ideal_c))
        t_slow = float(np.max(dur[m]))
        name = PHASES[int(ph)]
        ok = np.isfinite(t_slow) and t_slow > 0
        eff[name] = t_ideal / t_slow if ok else 0.0
        base = ideal_c if ref is None else ref[m]
        s_c = np.where(dur[m] > 0, base / np.where(dur[m] > 0, dur[m], 1.0), 1.0)
        s_c = np.where(np.isfinite(dur[m]), s_c, 0.0)
        share[name] = float(np.mean(s_c))
        shares.append(s_c)
        ideal_sum += t_ideal
        slow_sum += t_slow
    all_s = np.concatenate(shares) if shares else np.zeros(0)
    return dict(completion_efficiency=float(ideal_sum / slow_sum)
                if slow_sum > 0 and np.isfinite(slow_sum) else 0.0,
                completion_efficiency_phases=eff,
                mean_flow_share=float(np.mean(all_s)) if all_s.size else 0.0,
                mean_flow_share_phases=share)


def _connection_times(run: RailRun) -> tuple:
    """``([connections] s from the first row's start to the last row's finish (inf:
    unfinished), [connections] bytes)`` of ``run``'s flows (:attr:`RailRun.split` rows
    each)."""
    n = max(int(getattr(run, "split", 1)), 1)
    rows = run.flows.n_flows // n
    start = np.asarray(run.start, float)[:rows * n].reshape(rows, n).min(axis=1)
    finish = np.asarray(run.finish, float)[:rows * n].reshape(rows, n)
    finish = np.where(np.isfinite(finish), finish, np.inf).max(axis=1)
    size = np.asarray(run.flows.size, float)[:rows * n].reshape(rows, n).sum(axis=1)
    return finish - start, size


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


def phase_slice_times(run: RailRun, step: StepFlows) -> np.ndarray:
    """``[jobs, 3]`` each job's slice time split by phase: until its last all-to-all or
    pipeline flow finished (``t_a``), from then until its last reduce-scatter flow
    finished (``t_rs``), and from then until its last all-gather flow finished
    (``t_ag``), each ``>= 0``; their sum is the job's slice time
    (:func:`job_slice_times`) when its last flow is an all-gather's, as the step's
    dependencies make it.  An attribution: a rank's reduce-scatter may start while
    other ranks' all-to-alls still run.  Background flows left out; the simulated rails
    stand for all (as :func:`rank_slice_completion`)."""
    fl = run.flows
    fin = np.where(np.isfinite(run.finish), run.finish, np.inf)
    mine = fl.is_step
    job = step.rank_job[fl.dst_rank[mine]]
    ph = np.minimum(np.maximum(fl.phase[mine] - 1, 0), 2)   # 0, 1 -> 0; 2 -> 1; 3 -> 2
    end = np.zeros((step.n_jobs, 3))
    np.maximum.at(end, (job, ph), fin[mine])
    end = np.maximum.accumulate(end, axis=1)
    with np.errstate(invalid="ignore"):      # an unfinished run: inf - inf is NaN
        return np.diff(end, axis=1, prepend=0.0)


def job_step_times(info: list, compute, slices, slice_times, phase_times, latency):
    """``[jobs]`` each job's step time by its overlap model (``info[j]["overlap"]``):
    ``"megatron"`` :func:`~fabric_jax.scale.megatron_step_time` (``phase_times [jobs,
    3]``, :func:`phase_slice_times`), a number ``f`` :func:`~fabric_jax.scale.
    job_step_time`."""
    C, k, T, L = (np.asarray(x, float) for x in (compute, slices, slice_times, latency))
    out = np.empty(len(info))
    for j, i in enumerate(info):         # per job (a handful), not per flow
        if i["overlap"] == "megatron":
            w = i["overlap_windows"]
            out[j] = megatron_step_time(C[j], k[j], np.asarray(phase_times)[j],
                                        [w["backward"], w["forward"]], i["dp_buckets"],
                                        L[j])
        else:
            out[j] = job_step_time(C[j], float(i["overlap"]), k[j], T[j], L[j])
    return out


def _utilization(compute, gpus, step_times) -> float:
    """GPU utilisation of several jobs: the mean of ``C_j / step_j`` over equal jobs,
    the GPU-weighted mean otherwise."""
    C, G, st = (np.asarray(x, float) for x in (compute, gpus, step_times))
    return float(np.mean(C / st) if np.all(G == G[0]) else np.sum(G * C / st) / np.sum(G))


def point_metrics(run: RailRun, step: StepFlows, topology, preset: str | None,
                  nic_rate: float, *, n_rails: int, gpu_price_per_hour=None,
                  reference: RailRun | None = None) -> dict:
    """The headline figures of one run, for the whole step and the whole cluster.

    * ``step_time``: with Megatron's overlap (the default,
      :func:`~fabric_jax.scale.megatron_step_time`) ``C + k t_a + X_rs + X_ag + L``,
      with a flat overlap ``f`` ``max(C, (1 - f) C + k T + L)``: ``C`` the compute
      time, ``k`` the slices, ``T`` the slice's communication time (the last rank's
      last incoming flow), ``t_a`` its part until the all-to-all and pipeline sends
      ended, ``X_rs``, ``X_ag`` the exposed reduce-scatter and all-gather
      (``dp_exposed_time``, their sum; ``phase_comm_times``: ``k x`` each phase's part,
      :func:`phase_slice_times`) and ``L`` the per-message latency of the step's
      collective calls (``latency_time``, :func:`~fabric_jax.scale.collective_overhead`
      with the run's mean zero-load path latency per phase, 0 on the ideal crossbar;
      ``latency_algorithms``: the algorithm of each call, NCCL's choice);
      ``gpu_utilization`` = ``C / step_time``; ``model_flops_utilization``: the
      step's model FLOPs (:func:`fabric_jax.workloads.model.step_flops`) over the
      GPUs' peak times the step time (MFU, the figure training reports publish; the
      1F1B bubble and the kernels' shortfall from peak count against it, as they do
      not in ``gpu_utilization``); tokens/s.  With
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
    * ``spine_share``: share of the step's network bytes whose path crossed a spine
      (:func:`spine_share`; the ideal row: the same flows on the real fabric's paths).
    * ``time_shares``: shares of the communication time ``k T + L`` in the all-to-all
      and pipeline phase, each alone, and in the data-parallel collectives
      (:func:`time_shares`; several jobs: the slowest job's ``k`` and ``L``).
    * ``completion_efficiency`` and ``mean_flow_share`` (overall and per phase):
      :func:`completion_metrics` (``reference``: the ideal fabric's run of the same
      flows, the mean share's reference).
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
    # the path latency the calls pay per network step (none on the ideal crossbar)
    phase_lat = {} if run.latency is None else phase_latency(fl, run.latency)
    lats = [collective_overhead(i, nic_rate, phase_lat) for i in pj["info"]]
    L = np.array([x["total"] for x in lats])
    t_job = job_slice_times(comp, step)
    t_comm = float(np.max(k * t_job + L))
    ph = phase_slice_times(run, step)
    step_job = job_step_times(pj["info"], C, k, t_job, ph, L) if finished \
        else np.full(J, np.inf)
    # exposed data-parallel time: the step less compute, latency and the exposed
    # all-to-all / pipeline part (a flat overlap hides a share of every phase alike)
    meg = np.array([i["overlap"] == "megatron" for i in pj["info"]])
    dp_exp = np.where(meg, step_job - C - k * ph[:, 0] - L, np.nan)
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
               model_flops_utilization=float(
                   sum(i["step_flops"] / st for i, st in zip(pj["info"], step_job))
                   / sum(g * i["peak_flops"] for i, g in zip(pj["info"], pj["gpus"])))
               if finished else 0.0,
               jobs=J, job_step_times=[float(x) for x in step_job],
               job_gpus=[int(x) for x in G], job_latency_times=[float(x) for x in L],
               job_spread=float(np.max(step_job) / np.min(step_job)) if finished
               else float("nan"),
               comm_time=t_comm if finished else float("inf"),
               p50_completion=p50, p99_completion=p99,
               p99_over_p50=float(p99 / p50) if p50 > 0 else float("nan"),
               effective_bandwidth=eff, latency_time=float(np.max(L)),
               phase_comm_times=dict(zip(("ep_pp", "dp_reduce_scatter", "dp_all_gather"),
                                         (float(x) for x in np.max(k[:, None] * ph,
                                                                   axis=0)))),
               dp_exposed_time=float(np.max(dp_exp)) if finished and meg.all()
               else float("nan"),
               overlap=pj["info"][0]["overlap"],
               latency_algorithms={n: c["algorithm"] for n, c in lats[0]["calls"].items()},
               congested_share=float(run.congested_bytes / run.port_bytes)
               if run.port_bytes > 0 else 0.0,
               pfc_pause_time=float(run.paused_time * k_step * scale_rails),
               ecn_marked_share=float(getattr(run, "marked_share", 0.0)),
               unfinished_flows=int(np.sum(~np.isfinite(run.finish[mine]))),
               simulated_flows=int(fl.n_flows), n_steps=int(run.n_steps),
               wall_s=float(run.wall_s), fabric_cost_share=float("nan"),
               cost_per_million_tokens=float("nan"))
    j_slow = int(np.argmax(k * t_job + L))
    out.update(spine_share=spine_share(run, topology),
               time_shares=time_shares(run, step, k[j_slow], lats[j_slow]))
    out.update(completion_metrics(run, nic_rate, reference))
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


def host_leaf(topology) -> np.ndarray:
    """``[hosts]`` the switch each host (NIC, in ``topology.hosts`` order) is cabled to
    (its first uplink's; on several planes the plane-0 leaf: a server's NICs share their
    leaves' grouping in every plane)."""
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    hosts = np.asarray(topology.hosts)
    row = np.full(topology.n_nodes, -1, np.int64)
    row[hosts] = np.arange(hosts.size)
    up = np.flatnonzero(row[src] >= 0)
    leaf = np.full(hosts.size, np.iinfo(np.int64).max)
    np.minimum.at(leaf, row[src[up]], dst[up].astype(np.int64))
    return leaf


def spine_share(run: RailRun, topology) -> float:
    """Share of the step's network bytes that crossed a spine in ``run``: the bytes of
    the step flows whose path leaves their leaf (a leaf-to-spine link; on a rail-optimised
    Clos every path between two leaves does, and only those) over every step flow's
    bytes.  Flows split into per-plane stripes count each byte once (a stripe carries its
    share).  Counted from the run's paths (:attr:`RailRun.hops`: more than two links,
    NIC -> leaf -> NIC, means a spine); on the ideal crossbar (no paths) from the hosts'
    leaves on ``topology`` (:func:`host_leaf`: the same flows on the real fabric's
    paths), which is the same count.  On a rail-reduced run the simulated rails' flows
    (every rail carries the same flows between the same servers: the share is the
    cluster's).  0 when the step has no network bytes."""
    fl = run.flows
    mine = fl.is_step
    if run.hops is not None:
        up = np.asarray(run.hops) > 2
    else:
        leaf = host_leaf(topology)
        up = leaf[fl.src] != leaf[fl.dst]
    total = float(np.sum(fl.size[mine]))
    return float(np.sum(fl.size[mine & up]) / total) if total > 0 else 0.0


#: :func:`time_shares` keys: the concurrent all-to-all and pipeline phase, each of them
#: alone, and the data-parallel collectives.
TIME_SHARE_KEYS = ("all_to_all_pipeline", "all_to_all", "pipeline", "dp")


def time_shares(run: RailRun, step: StepFlows, slices, latency: dict) -> dict:
    """Shares of a step's communication time, ``k T + L`` (``k`` slices of ``T``
    seconds, ``L`` the calls' per-message latency, :func:`~fabric_jax.scale.
    collective_overhead` ``latency``), in its phases.

    Within a slice the all-to-all and the pipeline sends run together and each rank's
    data-parallel reduce-scatter starts once they have delivered into it
    (:func:`~fabric_jax.scale.step_flows`), so the slice splits at ``T_ap``, the moment
    the last all-to-all or pipeline byte is delivered: ``all_to_all_pipeline`` =
    ``(k T_ap + L_ap) / (k T + L)``, ``dp`` = ``(k (T - T_ap) + L_dp) / (k T + L)`` --
    the data-parallel time not hidden behind the all-to-all, the two summing to 1
    (``L_ap``, ``L_dp``: the latency of the calls of those phases).  ``all_to_all`` and
    ``pipeline`` alone: ``(k T_x + L_x) / (k T + L)`` with ``T_x`` the last delivery of
    that phase; they overlap, so they sum to ``all_to_all_pipeline`` or more.  With
    several jobs, every job's flows and ``slices`` / ``latency`` of the job given.  NaN
    when the step did not finish or has no communication."""
    fl = run.flows
    ph = np.asarray(fl.phase)
    fin = np.asarray(run.finish, float)
    mine = fl.is_step
    nan = {key: float("nan") for key in TIME_SHARE_KEYS}
    if not np.all(np.isfinite(fin[mine])):
        return nan

    def last(sel):
        return float(np.max(fin[sel], initial=0.0))
    T = last(mine)
    t_a, t_p = last(mine & (ph == 0)), last(mine & (ph == 1))
    t_ap = max(t_a, t_p)
    lat = {p_: 0.0 for p_ in range(6)}
    for c in latency.get("calls", {}).values():
        lat[int(c.get("phase", 0))] += c["per_call"] * c["count"]
    k = float(slices)
    total = k * T + sum(lat.values())
    if total <= 0:
        return nan
    l_dp = lat[2] + lat[3] + lat[5]
    return dict(all_to_all_pipeline=(k * t_ap + lat[0] + lat[1]) / total,
                all_to_all=(k * t_a + lat[0]) / total, pipeline=(k * t_p + lat[1]) / total,
                dp=(k * (T - t_ap) + l_dp) / total)


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
    its metrics ``met`` (each job's latency ``L``, ``job_latency_times``, and with
    Megatron's overlap its step time, ``job_step_times``: the overlap enters the
    estimate as the flat fraction that gives that step, :func:`~fabric_jax.scale.
    flat_overlap`); NaN when a run did not finish."""
    pj = step.per_job
    C, G = pj["compute_time"], pj["gpus"]
    L = np.asarray(met["job_latency_times"], float)
    J = step.n_jobs
    rows = np.arange(1, 2 ** J)                        # every non-empty set
    member = (rows[:, None] >> np.arange(J)[None, :]) & 1 == 1
    if not np.all(np.isfinite(np.asarray(table, float)[1:][member])):
        nan = float("nan")
        return dict(job_duty=[nan] * J, job_step_times_independent=[nan] * J,
                    step_time_independent=nan, gpu_utilization_independent=nan,
                    tokens_per_second_independent=nan, overlap_runs=int(runs))
    # Megatron's overlap as the flat fraction that gives the run's own step times (the
    # hidden time held fixed as the slices slow: an assumption of the estimate)
    f = np.array([float(i["overlap"]) if i["overlap"] != "megatron" else np.nan
                  for i in pj["info"]])
    f = np.where(np.isnan(f), flat_overlap(C, pj["slices"], np.asarray(table, float)[-1],
                                           L, met["job_step_times"]), f)
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
