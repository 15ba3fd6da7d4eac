"""Serving beside training on one fabric (``fabric-jax serve --with-training``).

A training job and the serving deployment share one rail-optimised fabric.  Isolation is
measured both ways: the training step against the training job alone, and the serving
metrics (TTFT / TPOT percentiles, SLO attainment) against serving alone *on the same
fabric and placement*; each with one traffic class for everything and with the training
job in its own class (the preset's port arbitration: ETS weights or strict levels,
:mod:`fabric_jax.qos`; :data:`fabric_jax.fabrics.TENANT_CLASSES` puts ``train`` in
class 1, as ``fabric-jax compare --classes`` does).

Training job: the compare study's (:func:`fabric_jax.study.case.build_case`, its
``_constant_job``): per rail, a ring all-reduce of ``training.all_reduce_mb`` per GPU
over the training servers (:func:`fabric_jax.workloads.steady_state_all_reduce`), after
``training.compute_us`` of compute, steps chained (:func:`fabric_jax.workloads.training_step`).

Placement (``training.placement``): ``interleaved`` (default) spreads the serving servers
evenly among the training servers, slot by slot, so every rail leaf holds both jobs and
their cross-leaf traffic shares the leaf up-links and the spines (what a shared cluster's
scheduler gives); ``separate``: the serving servers first, then the training servers.

Time.  The KV flows come in busy periods (:func:`fabric_jax.serve.busy_periods`) tens of
milliseconds apart while the training job sends continuously, so each busy period runs
in a **window** of the training job: the window starts at the start of the training step
in progress when the period begins -- the training job alone is periodic with its step
time ``T`` (measured per preset, training alone, same engine), so that step began at
``s - (s mod T)`` -- and holds ``ceil(H / T) + 2`` training steps, ``H`` the periods'
horizon.  Every window runs through the fluid engine with the preset's dynamics, all
windows of a run padded to one shape and batched (one compilation per preset and
variant).  Serving alone is the KV flows' own busy periods on the same fabric and
placement (:func:`fabric_jax.serve.simulate_preset`); one window with the KV flows held
back (they never send) gives training alone, step by step.  Departures: windows are independent (two periods closer than a window interact
only through their own window: ``window_overlaps`` counts them); the training steps
outside every window are taken as the alone step; the decode pool's own traffic (the
wide-EP dispatch / combine all-to-all) is not in the windows: its per-step latency stays
that of an idle fabric.

Requests: the first ``training.requests`` (default 16) of the scenario's stream, for
serving alone and beside training alike (every window costs the training job's flows
over the window's steps: the run is a sample of the stream, its p99 a p99 of that
sample).

Training metrics: ``step_time_alone`` (mean over the window's steps alone),
``step_time_mean`` over the whole run (``T (1 + E / R)``: ``E`` the summed extra time of
the windows' steps, ``R`` the run time), ``step_time_p99`` over every step of the run
(the windows' steps as simulated, the rest at the alone step time), ``slowdown`` (mean /
alone) and ``hit_steps`` (steps that shared a window with KV traffic).

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .. import fabric_sim
from ..fabrics import PRESETS, TENANT_CLASSES, get_fabric
from ..paths import shortest_paths
from ..scenario import refuse
from ..workloads import concat, steady_state_all_reduce, training_step
from ._core import build_run, decode_comm_tables, metrics
from ._fabric import plan_periods, run_problems, simulate_preset, take_paths
from ._scenario import load_scenario

__all__ = ["beside_training", "server_layout", "training_workload", "simulate_windows"]

GPUS_PER_SERVER = 8
#: Job ids of the flows in a window (``class_options`` matches them by name).
JOB_NAMES = {0: "serve", 1: "train"}


def server_layout(n_serve: int, n_train: int, placement: str = "interleaved"):
    """Physical servers of the two jobs.

    Returns:
      ``(serve [n_serve], train [n_train])`` server indices in ``0 .. n_serve + n_train``;
      ``interleaved``: serving server ``i`` at the slot where the running share of
      serving slots first reaches ``i + 1`` (evenly spread), ``separate``: serving first.
    """
    n = n_serve + n_train
    if placement == "separate":
        return np.arange(n_serve), np.arange(n_serve, n)
    if placement != "interleaved":
        raise ValueError(f"placement: expected 'interleaved' or 'separate'; got "
                         f"{placement!r}")
    slot = np.arange(n)
    is_serve = (slot + 1) * n_serve // n > slot * n_serve // n
    return slot[is_serve], slot[~is_serve]


def training_workload(train_servers, *, all_reduce_mb: float, compute_us: float,
                      n_steps: int):
    """``n_steps`` chained steps of the compare study's training job on
    ``train_servers`` (module docstring): ``(Workload, flows per step)``."""
    train_servers = np.asarray(train_servers, np.int64)
    ar = [steady_state_all_reduce(train_servers * GPUS_PER_SERVER + r,
                                  all_reduce_mb * 1e6 / GPUS_PER_SERVER, job="train",
                                  name=f"allreduce_r{r}")
          for r in range(GPUS_PER_SERVER)]
    hosts = (train_servers[:, None] * GPUS_PER_SERVER
             + np.arange(GPUS_PER_SERVER)[None, :]).ravel()
    w, _ = training_step(hosts, compute_us * 1e-6, [concat(*ar)], job="train",
                         n_steps=n_steps)
    return w, w.n_flows // n_steps


def simulate_windows(topology, windows, fabric, *, dt: float, n_steps: int, seed: int,
                     line_rate: float, max_paths: int, batch: int, paths,
                     fluid_options: dict | None = None, progress=None):
    """Fluid runs of same-shaped windows, ``batch`` per compiled program.

    Args:
      windows: list of dicts with ``idx`` ([width] rows of ``paths``), ``size``,
        ``arrival`` ([width], s from the window's start), ``deps`` ([width, d]),
        ``delay`` ([width]); every window the same width.
      paths: :class:`~fabric_jax.paths.PathSet` the rows index.

    Returns:
      ``(finish [windows, width], accounted [windows, width])`` (s from the window's
      start, ``inf``: not finished within ``n_steps``; bytes delivered, on the wire or
      queued at the end: :func:`fabric_jax.serve.run_problems`).
    """
    fin, dlv = [], []
    for b in range(-(-len(windows) // batch)):
        ws = windows[b * batch:(b + 1) * batch]
        full = ws + [ws[-1]] * (batch - len(ws))        # pad the batch: one shape
        probs = [fabric_sim.prepare_paths(
            topology, take_paths(paths, w["idx"]), fabric, w["size"], dt=dt,
            n_steps=n_steps, arrival=w["arrival"], deps=w["deps"], delay=w["delay"],
            seed=seed, nic_rate=line_rate, fluid_options=fluid_options) for w in full]
        f, d = run_problems(probs)
        fin.append(f[:len(ws)])
        dlv.append(d[:len(ws)])
        if progress is not None:
            progress(len(ws))
    return np.concatenate(fin), np.concatenate(dlv)


def _step_times(finish, per_step: int, m: int):
    """Per step of a window: duration (s) of each training step (chained: a step starts
    when the previous ends), ``nan`` when not finished."""
    ends = finish[:m * per_step].reshape(m, per_step).max(axis=1)
    starts = np.concatenate([[0.0], ends[:-1]])
    return np.where(np.isfinite(ends), ends - starts, np.nan)


def _window(plan, kv, tw, g: int, phase: float, *, kv_on: bool, tr_on: bool,
            never: float) -> dict:
    """One window's rows (:func:`simulate_windows`): busy period ``g``'s KV flows,
    released ``phase`` after the window's start and padded to the periods' width, then
    the training steps (``tw``, rows after the KV flows' in the path table); a part
    switched off is released at ``never`` (after the horizon: it never sends)."""
    wk = plan.width
    mem = plan.members[g]
    pad = wk - mem.size
    first = int(mem[0])
    idx = np.concatenate([mem, np.full(pad, first), kv.size.size + np.arange(tw.n_flows)])
    karr = kv.release[mem] - plan.start[g] + phase if kv_on else np.full(mem.size, never)
    arr = np.concatenate([karr, np.full(pad, never),
                          tw.arrival if tr_on else np.full(tw.n_flows, never)])
    size = np.concatenate([kv.size[mem], np.full(pad, kv.size[first]), tw.size])
    deps = np.concatenate([np.full((wk, tw.deps.shape[1]), -1),
                           np.where(tw.deps >= 0, tw.deps + wk, -1)])
    delay = np.concatenate([np.zeros(wk), tw.delay])
    return dict(idx=idx, size=size, arrival=arr, deps=deps, delay=delay)


def _check_training(scn: dict) -> None:
    t, net = scn["training"], scn["network"]
    n = scn["prefill"]["servers"] + scn["decode"]["servers"] + t["servers"]
    if n % net["servers_per_leaf"]:
        raise refuse("training.servers", f"{t['servers']} training servers make "
                     f"{n} servers, not a multiple of network.servers_per_leaf = "
                     f"{net['servers_per_leaf']}", fix="servers that fill whole rail-leaf "
                     "groups")


def beside_training(scenario=None, *, fabrics=tuple(PRESETS), classes=(False, True),
                    progress: bool = True, comm_time=None,
                    overrides: dict | None = None) -> dict:
    """Serving beside a training job on one fabric, each preset, with one shared traffic
    class and with the training job in its own class (module docstring).

    Args:
      scenario, overrides: the serving scenario (:func:`fabric_jax.serve.load_scenario`)
        with its ``[training]`` section.
      fabrics: preset names.
      classes: the variants to run: ``False`` one class, ``True`` separate classes.
      progress: a progress bar on stderr.
      comm_time: the decode step's communication (as :func:`fabric_jax.serve.serve`;
        default :func:`fabric_jax.serve.decode_comm_tables`, on an idle decode instance).

    Returns:
      JSON-ready dict: ``training`` (the job), ``layout``, ``fabrics`` ``{preset:
      {"alone": serving metrics alone on this fabric, "training_alone": {...},
      "shared" / "classes": {"serving": metrics, "training": {...}, "isolation":
      {...}}}}``, ``windows``, ``wall_s``.
    """
    from ..study.progress import Progress
    import fabric_jax as fj
    started = time.time()
    scn = load_scenario(scenario, overrides=overrides)
    _check_training(scn)
    for f in fabrics:
        if f not in PRESETS:
            raise refuse("--fabrics", f"unknown preset {f!r}", fix=f"among {list(PRESETS)}")
    t_cfg, net, sim_cfg = scn["training"], scn["network"], scn["simulation"]
    scn["requests"]["n"] = min(scn["requests"]["n"], t_cfg["requests"])
    run = build_run(scn)
    dep, kv = run["dep"], run["flows"]
    if comm_time is None:             # the decode all-to-all per preset, as serve() pays it
        comm_time = decode_comm_tables(scn, dep, list(fabrics))
    n_serve = dep.n_prefill + dep.n_decode
    serve_srv, train_srv = server_layout(n_serve, t_cfg["servers"], t_cfg["placement"])
    topo = fj.rail_optimized(n_serve + t_cfg["servers"], GPUS_PER_SERVER,
                             servers_per_leaf=net["servers_per_leaf"],
                             link_gbps=net["link_gbps"])
    remap = (serve_srv[:, None] * GPUS_PER_SERVER
             + np.arange(GPUS_PER_SERVER)[None, :]).ravel()
    ksrc, kdst = remap[kv.src], remap[kv.dst]
    kv_here = dataclasses.replace(kv, src=ksrc, dst=kdst)
    line = run["line_rate"]
    dt = sim_cfg["dt_us"] * 1e-6
    margin = sim_cfg["margin_us"] * 1e-6
    plan = plan_periods(kv, line, dt, margin)
    # the training step on the ideal crossbar: compute + a rank's ring bytes at line rate
    n_tr = t_cfg["servers"]
    t_ideal = (t_cfg["compute_us"] * 1e-6 + 2.0 * (n_tr - 1) / n_tr
               * t_cfg["all_reduce_mb"] * 1e6 / GPUS_PER_SERVER / line)
    horizon_kv = plan.n_steps * dt
    # a window: the step in progress (< T), the periods' horizon, one step to finish
    m = int(math.ceil(horizon_kv / t_ideal)) + 3
    tw, per_step = training_workload(train_srv, all_reduce_mb=t_cfg["all_reduce_mb"],
                                     compute_us=t_cfg["compute_us"], n_steps=m)
    n_win = plan.start.size
    wk = plan.width
    paths = shortest_paths(topo, np.concatenate([ksrc, tw.src]),
                           np.concatenate([kdst, tw.dst]),
                           max_paths=net["max_paths"], seed=sim_cfg["seed"])
    width = wk + tw.n_flows
    n_steps_win = int(math.ceil((m * t_ideal + horizon_kv) / dt))
    never = 2.0 * n_steps_win * dt
    job_of = np.concatenate([np.zeros(wk, np.int32), np.ones(tw.n_flows, np.int32)])
    variants = [bool(c) for c in classes]
    runs_per = 1 + n_win * (1 + len(variants))
    bar = Progress(len(fabrics) * runs_per, enabled=progress, label="serve+train",
                   estimate_s=30.0 * len(fabrics) * len(variants))

    def window(g, phase, kv_on: bool, tr_on: bool):
        return _window(plan, kv, tw, g, phase, kv_on=kv_on, tr_on=tr_on, never=never)

    out = {}
    for name in fabrics:
        res = {}
        common = dict(dt=dt, n_steps=n_steps_win, seed=sim_cfg["seed"], line_rate=line,
                      max_paths=net["max_paths"], paths=paths)
        base_fab = get_fabric(name)
        base_opts = base_fab.class_options(job_of, JOB_NAMES, topo)
        # training alone: one window, the KV flows held back
        fin, _ = simulate_windows(topo, [window(0, 0.0, False, True)], base_fab, batch=1,
                                  fluid_options=base_opts,
                                  progress=lambda k: bar.update(name, k), **common)
        alone_steps = _step_times(fin[0, wk:], per_step, m)
        t_alone = float(np.nanmean(alone_steps))
        phase = np.mod(plan.start, t_alone)
        w_start = plan.start - phase
        overl = int(np.sum(w_start[1:] < plan.start[:-1] + plan.span[:-1] + m * t_alone)) \
            if n_win > 1 else 0
        res["training_alone"] = dict(step_time=t_alone, steps=alone_steps.tolist())

        def serving(fin_all):
            finish = np.full(kv.size.size, np.inf)
            for g in range(n_win):
                mem = plan.members[g]
                finish[mem] = w_start[g] + fin_all[g, :mem.size]
            run_b = dict(run, topology=topo)
            ct = comm_time.get(name) if isinstance(comm_time, dict) else comm_time
            met = metrics(run_b, dict(finish=finish, unfinished=int(
                (~np.isfinite(finish)).sum())), scn, name, comm_time=ct)
            met.pop("_ttft"), met.pop("_tpot")
            return met

        # serving alone on this fabric and placement: the KV flows' own busy periods
        alone = simulate_preset(topo, kv_here, name, line_rate=line, dt=dt, margin=margin,
                                seed=sim_cfg["seed"], max_paths=net["max_paths"],
                                batch=min(sim_cfg["batch"], n_win), plan=plan,
                                progress=lambda k: bar.update(name, k))
        ct = comm_time.get(name) if isinstance(comm_time, dict) else comm_time
        res["alone"] = metrics(dict(run, topology=topo), alone, scn, name, comm_time=ct)
        res["alone"].pop("_ttft"), res["alone"].pop("_tpot")
        for sep in variants:
            fab = get_fabric(name, class_map=dict(TENANT_CLASSES)) if sep else base_fab
            opts = fab.class_options(job_of, JOB_NAMES, topo)
            fin, dlv = simulate_windows(
                topo, [window(g, phase[g], True, True) for g in range(n_win)], fab,
                batch=min(sim_cfg["batch"], n_win), fluid_options=opts,
                progress=lambda k: bar.update(name, k), **common)
            steps = np.stack([_step_times(fin[g, wk:], per_step, m) for g in range(n_win)])
            train = training_metrics(steps, alone_steps, res["alone"]["run_time_s"])
            srv = serving(fin)
            res["classes" if sep else "shared"] = dict(
                serving=srv, training=train,
                isolation=isolation(train, srv, res["alone"]))
        res["window_overlaps"] = overl
        out[name] = res
    bar.close()
    return dict(
        training=dict(t_cfg, job="compare's: per rail a ring all-reduce after compute",
                      requests_used=int(run["arrival"].size),
                      step_time_ideal=t_ideal, steps_per_window=m,
                      flows_per_step=per_step),
        layout=dict(serve_servers=serve_srv.tolist(), train_servers=train_srv.tolist(),
                    servers=int(n_serve + t_cfg["servers"]),
                    servers_per_leaf=net["servers_per_leaf"]),
        windows=dict(count=int(n_win), width=int(width), n_steps=n_steps_win, dt=dt),
        fabrics=out, wall_s=time.time() - started)


def training_metrics(steps, alone_steps, run_s: float) -> dict:
    """The training job over a run of ``run_s`` seconds (module docstring): ``steps``
    ``[windows, m]`` the windows' step durations (``nan``: unfinished), ``alone_steps``
    ``[m]`` the same steps alone."""
    t_alone = float(np.nanmean(alone_steps))
    extra = float(np.nansum(steps - alone_steps[None, :]))
    done = np.isfinite(steps)
    n_run = max(int(round(run_s / t_alone)), steps.size)
    every = np.concatenate([steps[done], np.full(n_run - int(done.sum()), t_alone)])
    return dict(step_time_alone=t_alone, step_time_mean=t_alone * (1.0 + extra / run_s),
                step_time_p99=float(np.quantile(every, 0.99)),
                step_time_max=float(np.nanmax(steps)), slowdown=1.0 + extra / run_s,
                hit_steps=int(done.sum()), unfinished_steps=int((~done).sum()),
                steps_in_run=n_run)


def isolation(train: dict, serving: dict, alone: dict) -> dict:
    """Isolation both ways: the training slowdowns, and the serving tails beside
    training over serving alone (ratios; SLO attainment side by side)."""
    return dict(
        training_slowdown=train["slowdown"],
        training_p99_slowdown=train["step_time_p99"] / train["step_time_alone"],
        ttft_p99_ratio=_ratio(serving["ttft"]["p99"], alone["ttft"]["p99"]),
        tpot_p99_ratio=_ratio(serving["tpot"]["p99"], alone["tpot"]["p99"]),
        kv_exposed_p99_ratio=_ratio(serving["kv"]["exposed"]["p99"],
                                    alone["kv"]["exposed"]["p99"]),
        slo_attainment_alone=alone["slo_attainment"],
        slo_attainment=serving["slo_attainment"])


def _ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return float(a) / float(b)
