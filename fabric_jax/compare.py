"""The ``compare`` study: one scenario, every fabric preset, one table.

Units: results are SI (bytes, seconds, bytes/s, fractions); the printed table converts
(us, ms, Gb/s, %) and says so in each row.

Scenario (:class:`Scenario`, loadable from TOML with :func:`load_scenario`):

* ``[topology]``: a rail-optimised leaf-spine (default: 32 servers x 8 NICs = 256 GPUs,
  16 servers per rail leaf, 400 Gb/s) or a plain leaf-spine.
* ``[workload]``: a training job (MoE all-to-all in expert-parallel groups of
  ``ep_servers`` servers, then a data-parallel all-reduce, then ``compute_us`` of
  compute), a second tenant (cross-rail incasts) and Poisson background traffic.  The
  collectives are hierarchical: inside a server they run over NVLink (not simulated),
  across servers one ring / all-to-all per rail (NIC ``i`` of every server), so each
  NIC carries ``1/nics_per_server`` of the data.
* ``[simulation]``: fluid step ``dt_us``, ``n_steps``, ``max_paths``, ``seed``,
  ``isolation`` (also run each job alone, for the isolation metric).
* ``[economics]``: ``gpu_price_per_hour``, ``tokens_per_gpu_per_step``.
* ``[fabrics]``: ``presets = [...]`` and per-preset overrides in ``[fabrics.<name>]``
  (``routing``, ``cc``, ``flow_control``, ``sharp``, ``routing_options``,
  ``cc_options``).

Every number comes from :func:`fabric_jax.fluid.simulate_fluid` runs with the preset's
routing policy, congestion control and flow control (:mod:`fabric_jax.fabrics`).
Metrics (JSON keys of :func:`run_compare`'s result, one entry per preset):

=============================  =====================================================
``effective_bandwidth``        training collectives: ideal time (max NIC bytes / line
                               rate, per collective) over actual time, summed; fraction
``collective_completion_time`` all-reduce completion time, s
``all_to_all_completion_time`` MoE all-to-all completion time, s
``bus_bandwidth``              all-reduce bus bandwidth (nccl-tests), bytes/s per NIC
``fct_slowdown_p50/_p99``      FCT / ideal FCT of tenant + background flows
``isolation``                  worst job's completion time with neighbours / alone
``pfc_pause_time``             link-seconds paused (PFC) or credit-starved, summed
``gpu_utilization``            compute / step time of the training job, fraction
``training_step_time``         s
``cost_per_million_tokens``    dollars
``unfinished_flows``           flows not done within ``n_steps`` (0 expected)
=============================  =====================================================
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as mx
from .cc import ibcc
from .fabrics import PRESETS, all_reduce_flows, get_fabric
from .fluid import simulate_fluid
from .incidence import Incidence
from .paths import shortest_paths
from .routing import make_routing
from .topology import leaf_spine, rail_optimized
from .units import gbps
from .workloads import FlowSizeCDF, all_to_all, concat, incast, poisson_background, zipf_expert_load
from .workloads.training import training_step

__all__ = ["Scenario", "Case", "default_scenario", "load_scenario", "scenario_from_dict",
           "build_case", "simulate_case", "alone_arrival", "run_compare", "scaling_study",
           "format_table", "write_json", "METRICS", "NEVER"]

#: Arrival time (s) given to flows switched off in "alone" runs (:func:`alone_arrival`):
#: far beyond any scenario's horizon, so they never start.
NEVER = 1e3

# (key, label, unit, scale) rows of the table
METRICS = (
    ("effective_bandwidth", "Effective bandwidth", "% line rate", 100.0),
    ("collective_completion_time", "All-reduce completion", "us", 1e6),
    ("all_to_all_completion_time", "All-to-all completion", "us", 1e6),
    ("bus_bandwidth", "All-reduce bus bandwidth", "Gb/s", 8e-9),
    ("fct_slowdown_p50", "FCT slowdown p50", "x", 1.0),
    ("fct_slowdown_p99", "FCT slowdown p99", "x", 1.0),
    ("isolation", "Worst-job isolation", "x alone", 1.0),
    ("pfc_pause_time", "PFC pause / credit stall", "link-us", 1e6),
    ("gpu_utilization", "GPU utilisation", "%", 100.0),
    ("training_step_time", "Training step time", "ms", 1e3),
    ("cost_per_million_tokens", "Cost per million tokens", "$", 1.0),
)

_SCHEMA = {
    "topology": {"kind": ("rail_optimized", "leaf_spine"), "n_servers": int,
                 "nics_per_server": int, "servers_per_leaf": int, "n_spines": int,
                 "link_gbps": float, "latency_us": float, "buffer_kb": float},
    "workload": {"train_servers": int, "tenant_servers": int, "ep_servers": int,
                 "all_reduce_mb": float, "moe_mb": float, "expert_skew": float,
                 "compute_us": float, "tenant_incast_mb": float, "tenant_fan_in": int,
                 "background_load": float, "background_cdf": tuple(FlowSizeCDF.builtin_names()),
                 "background_us": float},
    "simulation": {"dt_us": float, "n_steps": int, "max_paths": int, "seed": int,
                   "isolation": bool},
    "economics": {"gpu_price_per_hour": float, "tokens_per_gpu_per_step": float},
}
_FABRIC_KEYS = ("routing", "cc", "flow_control", "sharp", "routing_options", "cc_options")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A compare scenario (see the module docstring); sections are dicts."""

    topology: dict
    workload: dict
    simulation: dict
    economics: dict
    presets: tuple
    overrides: dict


def default_scenario() -> Scenario:
    """The built-in scenario: 256 GPUs (32 servers x 8 rails), 2 tenants, background."""
    return Scenario(
        topology=dict(kind="rail_optimized", n_servers=32, nics_per_server=8,
                      servers_per_leaf=16, n_spines=0, link_gbps=400.0, latency_us=1.0,
                      buffer_kb=1024.0),
        workload=dict(train_servers=24, tenant_servers=8, ep_servers=4, all_reduce_mb=32.0,
                      moe_mb=4.0, expert_skew=1.0, compute_us=1000.0, tenant_incast_mb=1.0,
                      tenant_fan_in=4, background_load=0.05, background_cdf="web_search",
                      background_us=200.0),
        simulation=dict(dt_us=4.0, n_steps=250, max_paths=8, seed=0, isolation=True),
        economics=dict(gpu_price_per_hour=2.5, tokens_per_gpu_per_step=8.0),
        presets=tuple(PRESETS), overrides={})


def _err(key, msg):
    return ValueError(f"scenario key '{key}': {msg}")


def scenario_from_dict(data: dict) -> Scenario:
    """Validates a parsed TOML mapping over the defaults.

    Raises:
      ValueError: naming the offending key and the accepted keys / values.
    """
    base = default_scenario()
    sections = {name: dict(getattr(base, name)) for name in _SCHEMA}
    accepted = sorted(list(_SCHEMA) + ["fabrics"])
    presets, overrides = list(base.presets), {}
    for sec, body in data.items():
        if sec not in accepted:
            raise _err(sec, f"unknown section; accepted sections: {accepted}")
        if not isinstance(body, dict):
            raise _err(sec, "must be a table ([section])")
        if sec == "fabrics":
            for key, val in body.items():
                if key == "presets":
                    if not (isinstance(val, list) and val and all(v in PRESETS for v in val)):
                        raise _err("fabrics.presets", f"must be a non-empty list of "
                                   f"{sorted(PRESETS)}; got {val!r}")
                    presets = list(val)
                elif key in PRESETS and isinstance(val, dict):
                    bad = set(val) - set(_FABRIC_KEYS)
                    if bad:
                        raise _err(f"fabrics.{key}.{sorted(bad)[0]}",
                                   f"unknown; accepted keys: {list(_FABRIC_KEYS)}")
                    try:
                        get_fabric(key, **val)
                    except ValueError as e:
                        raise _err(f"fabrics.{key}", str(e)) from None
                    overrides[key] = dict(val)
                else:
                    raise _err(f"fabrics.{key}", f"unknown; accepted: 'presets' or a "
                               f"preset table [fabrics.<name>] with name in {sorted(PRESETS)}")
            continue
        schema = _SCHEMA[sec]
        for key, val in body.items():
            full = f"{sec}.{key}"
            if key not in schema:
                raise _err(full, f"unknown key; accepted keys: {sorted(schema)}")
            kind = schema[key]
            if isinstance(kind, tuple):
                if val not in kind:
                    raise _err(full, f"accepted values: {list(kind)}; got {val!r}")
            elif kind is bool:
                if not isinstance(val, bool):
                    raise _err(full, f"must be true or false; got {val!r}")
            elif kind is int:
                if isinstance(val, bool) or not isinstance(val, int) or val < 0:
                    raise _err(full, f"must be an integer >= 0; got {val!r}")
            else:
                if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0 \
                        or not math.isfinite(val):
                    raise _err(full, f"must be a number >= 0; got {val!r}")
                val = float(val)
            sections[sec][key] = val
    return Scenario(presets=tuple(presets), overrides=overrides, **sections)


def load_scenario(path) -> Scenario:
    """Reads a TOML scenario file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--scenario: no such file {str(path)!r}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"--scenario {str(path)!r} is not valid TOML: {e}") from None
    return scenario_from_dict(data)


# ------------------------------------------------------------------ the case
@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """Host-side arrays of one scenario for one fabric (SHARP changes the flows)."""

    topology: Any
    workload: Any
    spec: Any
    paths: Any
    latency: np.ndarray
    line_rate: float
    train_hosts: np.ndarray
    job_of: np.ndarray   # [flows] 0 training, 1 tenant, 2 background
    groups: dict
    sim_arrival: np.ndarray  # [flows] arrival simulated (the step's compute is added back)
    compute: float


def _round_robin_servers(n_servers, per_group):
    s = np.arange(n_servers)
    return s[np.lexsort((s // per_group, s % per_group))]


def build_case(scn: Scenario, sharp: bool) -> Case:
    """Topology, workload and candidate paths of a scenario (host side)."""
    t, w, sim = scn.topology, scn.workload, scn.simulation
    nics = t["nics_per_server"] if t["kind"] == "rail_optimized" else 1
    if t["kind"] == "rail_optimized":
        kw = dict(servers_per_leaf=t["servers_per_leaf"], link_gbps=t["link_gbps"],
                  latency_us=t["latency_us"], buffer_kb=t["buffer_kb"])
        if t["n_spines"]:
            kw["n_spines"] = t["n_spines"]
        topo = rail_optimized(t["n_servers"], nics, **kw)
        per_group = t["servers_per_leaf"]
    else:
        n_leaves = max(math.ceil(t["n_servers"] / t["servers_per_leaf"]), 2)
        topo = leaf_spine(n_leaves, t["n_spines"] or t["servers_per_leaf"],
                          t["servers_per_leaf"], link_gbps=t["link_gbps"],
                          latency_us=t["latency_us"], buffer_kb=t["buffer_kb"])
        per_group = t["servers_per_leaf"]
    n_servers = topo.n_hosts // nics
    if w["train_servers"] + w["tenant_servers"] > n_servers or w["train_servers"] < 2:
        raise _err("workload.train_servers", f"train_servers (>= 2) + tenant_servers must be "
                   f"<= {n_servers} servers")
    order = _round_robin_servers(n_servers, per_group)
    train_srv = np.sort(order[:w["train_servers"]])
    tenant_srv = order[w["train_servers"]:w["train_servers"] + w["tenant_servers"]]
    line = gbps(t["link_gbps"])
    rng_seed = sim["seed"]
    mb = 1e6
    # training: per rail, MoE all-to-all in EP groups then a ring/SHARP all-reduce
    ep = max(min(w["ep_servers"], train_srv.size), 2)
    ep_order = _round_robin_servers(n_servers, per_group)
    ep_order = ep_order[np.isin(ep_order, train_srv)]
    a2a, ar = [], []
    for rail in range(nics):
        for g in range(0, ep_order.size - ep + 1, ep):
            hosts = ep_order[g:g + ep] * nics + rail
            load = zipf_expert_load(ep, w["expert_skew"], rng_seed + 7 * rail + g) \
                if w["expert_skew"] > 0 else None
            a2a.append(all_to_all(hosts, w["moe_mb"] * mb / nics, expert_load=load,
                                  job="train", name=f"a2a_r{rail}_g{g // ep}"))
        ar.append(all_reduce_flows(train_srv * nics + rail, w["all_reduce_mb"] * mb / nics,
                                   sharp=sharp, job="train", name=f"allreduce_r{rail}"))
    train_hosts = (train_srv[:, None] * nics + np.arange(nics)[None, :]).ravel()
    phases = [concat(*a2a), concat(*ar)]
    work, spec = training_step(train_hosts, w["compute_us"] * 1e-6, phases, job="train",
                               tokens_per_step=scn.economics["tokens_per_gpu_per_step"]
                               * train_hosts.size)
    parts = [work]
    # tenant: cross-rail incasts
    if tenant_srv.size >= 2 and w["tenant_fan_in"] >= 1:
        fan = min(w["tenant_fan_in"], tenant_srv.size - 1)
        inc = []
        for rail in range(nics):
            rx_srv = tenant_srv[rail % tenant_srv.size]
            others = tenant_srv[tenant_srv != rx_srv][:fan]
            rx = rx_srv * nics + (rail + 1) % nics
            inc.append(incast(others * nics + rail, int(rx), w["tenant_incast_mb"] * mb,
                              job="tenant", name=f"incast_r{rail}"))
        parts.append(concat(*inc))
    if w["background_load"] > 0:
        bg = poisson_background(topo.n_hosts, w["background_load"], line,
                                w["background_cdf"], w["background_us"] * 1e-6,
                                seed=rng_seed)
        parts.append(bg)
    work = concat(*parts)
    names = np.array(work.job_names)
    job_of = np.select([names[work.job] == "train", names[work.job] == "tenant"], [0, 1], 2)
    paths = shortest_paths(topo, work.src, work.dst, max_paths=sim["max_paths"],
                           seed=rng_seed)
    lat = paths.latency(topo)[:, 0]
    groups = {name: np.flatnonzero(work.group == gi)
              for gi, name in enumerate(work.group_names)}
    # The step starts with compute_us of compute, then communication (overlap 0):
    # simulate the communication from t = 0 and add the compute back for step times.
    compute = w["compute_us"] * 1e-6
    sim_arrival = np.where(job_of == 0, np.maximum(work.arrival - compute, 0.0), work.arrival)
    return Case(topo, work, spec, paths, lat, line, train_hosts, job_of, groups, sim_arrival,
                compute)


# --------------------------------------------------------------- simulation
def alone_arrival(case: Case, job: int):
    """``[flows]`` arrivals with only job ``job`` (0 training, 1 tenant, 2 background)
    switched on: every other flow arrives at :data:`NEVER` (same arrays, same compile)."""
    return np.where(case.job_of == job, case.sim_arrival, NEVER)


def simulate_case(case: Case, fabric, scn: Scenario, arrival=None, *, save_every=None):
    """Fluid run of a case under a fabric preset (the engine behind :func:`run_compare`).

    Runs :func:`fabric_jax.fluid.simulate_fluid` with the preset's routing policy
    (bound to the case's candidate paths with the scenario's seed), congestion-control
    law and parameters, flow-control mode, the topology's buffers, and the scenario's
    ``dt_us`` / ``n_steps``.  Under IB CC only switch ports mark FECN
    (:func:`fabric_jax.cc.ibcc.switch_port_mask`, unless ``cc_options`` sets
    ``switch_port``).

    Args:
      case: from :func:`build_case` (built with ``fabric.sharp``).
      fabric: a :class:`fabric_jax.Fabric` or preset name.
      scn: the scenario the case was built from.
      arrival: ``[flows]`` arrival times, s (default ``case.sim_arrival``; see
        :func:`alone_arrival` to run one job alone).
      save_every: trajectory snapshot period in steps (must divide ``n_steps``).

    Returns:
      :class:`fabric_jax.fluid.FluidResult`.
    """
    fabric = get_fabric(fabric)
    arrival = case.sim_arrival if arrival is None else arrival
    sim = scn.simulation
    params = fabric.law_params()
    if fabric.cc == "ibcc" and "switch_port" not in fabric.cc_options:
        # FECN is a switch function: the HCA's own uplink (the NIC backlog) never marks
        params = dataclasses.replace(params, switch_port=np.asarray(
            ibcc.switch_port_mask(case.topology), np.asarray(params.threshold).dtype))
    routing = make_routing(fabric.routing, case.paths, fabric.routing_params(),
                           seed=sim["seed"])
    inc = Incidence.from_paths(case.paths, np.asarray(routing.split), n_links=case.topology.n_links)
    w = case.workload
    return simulate_fluid(inc, case.topology.capacity, w.size, dt=sim["dt_us"] * 1e-6,
                          n_steps=int(sim["n_steps"]), law=fabric.law(),
                          params=params, arrival=arrival, deps=w.deps,
                          delay=w.delay, latency=case.latency, flow_control=fabric.flow_control,
                          buffer=case.topology.buffer, routing=routing, save_every=save_every)


def _job_time(arrival, finish, idx):
    if idx.size == 0:
        return float("nan")
    return float(np.max(finish[idx]) - np.min(arrival[idx]))


def _per_nic_ideal(case: Case, idx):
    w = case.workload
    sent = np.bincount(w.src[idx], weights=w.size[idx], minlength=case.topology.n_hosts)
    recv = np.bincount(w.dst[idx], weights=w.size[idx], minlength=case.topology.n_hosts)
    return max(sent.max(), recv.max()) / case.line_rate


def _metrics(case: Case, scn: Scenario, res, alone) -> dict:
    w = case.workload
    start = np.asarray(res.start, float)
    finish = np.asarray(res.finish, float)
    arrival = case.sim_arrival
    train = np.flatnonzero(case.job_of == 0)
    kinds = np.array(w.group_kind)
    gk = np.where(w.group >= 0, kinds[np.maximum(w.group, 0)] if kinds.size else "", "")
    ar_idx = train[gk[train] == "all_reduce"]
    a2a_idx = train[gk[train] == "all_to_all"]
    t_ar = float(np.max(finish[ar_idx]) - np.min(start[ar_idx])) if ar_idx.size else float("nan")
    t_a2a = float(np.max(finish[a2a_idx]) - np.min(start[a2a_idx])) if a2a_idx.size else float("nan")
    ideal = sum(_per_nic_ideal(case, i) for i in (ar_idx, a2a_idx) if i.size)
    actual = sum(t for t, i in ((t_ar, ar_idx), (t_a2a, a2a_idx)) if i.size)
    eff = ideal / actual if actual > 0 else float("nan")
    n_ring = case.train_hosts.size // max(1, len([g for g in case.groups if "allreduce" in g]))
    shard = scn.workload["all_reduce_mb"] * 1e6 / (scn.topology["nics_per_server"]
                                                   if scn.topology["kind"] == "rail_optimized" else 1)
    bus = float(mx.busbw(mx.algbw(shard, t_ar), max(n_ring, 1), "all_reduce")) \
        if np.isfinite(t_ar) and t_ar > 0 else 0.0
    other = np.flatnonzero(case.job_of != 0)
    if other.size:
        sd = np.asarray(mx.slowdown(finish[other] - arrival[other], w.size[other],
                                    case.line_rate, case.latency[other]), float)
        p50, p99 = float(np.percentile(sd, 50)), float(np.percentile(sd, 99))
    else:
        p50 = p99 = float("nan")
    iso = float("nan")
    if alone:
        ratios = []
        for job, r in alone.items():
            idx = np.flatnonzero(case.job_of == job)
            a = _job_time(arrival, np.asarray(r.finish, float), idx)
            b = _job_time(arrival, finish, idx)
            if a > 0:
                ratios.append(b / a)
        iso = max(ratios) if ratios else float("nan")
    train_fin = np.where(case.job_of == 0, finish + case.compute, finish)
    step = float(case.spec.step_times(w, train_fin)[0]) if np.all(np.isfinite(finish[train])) \
        else float("inf")
    util = float(case.spec.compute_time.sum(axis=0).mean() / step) if np.isfinite(step) else 0.0
    n_gpus = case.train_hosts.size
    cost = float(mx.cost_per_million_tokens(scn.economics["gpu_price_per_hour"], n_gpus, step,
                                            case.spec.tokens_per_step))
    return dict(effective_bandwidth=eff, collective_completion_time=t_ar,
                all_to_all_completion_time=t_a2a, bus_bandwidth=bus, fct_slowdown_p50=p50,
                fct_slowdown_p99=p99, isolation=iso,
                pfc_pause_time=float(np.sum(np.asarray(res.info.paused_time))),
                gpu_utilization=util, training_step_time=step,
                cost_per_million_tokens=cost,
                unfinished_flows=int(np.sum(~np.isfinite(finish))))


class _Progress:
    """A small text progress bar on stderr."""

    def __init__(self, total, stream=None, enabled=True):
        self.total, self.done, self.t0 = total, 0, time.time()
        self.stream = stream or sys.stderr
        self.enabled = enabled

    def update(self, label):
        self.done += 1
        if not self.enabled:
            return
        n = 24
        fill = int(n * self.done / self.total)
        self.stream.write(f"\r[{'#' * fill}{'.' * (n - fill)}] {self.done}/{self.total} "
                          f"{label:<28} {time.time() - self.t0:6.1f}s")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def run_compare(scn: Scenario | None = None, *, progress: bool = True, keep=False) -> dict:
    """Runs every preset of the scenario; returns ``{preset: {metric: value}}``.

    With ``keep=True`` returns ``(results, details)`` where ``details[preset]`` holds
    the case and the full run's :class:`~fabric_jax.fluid.FluidResult` (for plots).
    """
    scn = default_scenario() if scn is None else scn
    runs_per = 3 if scn.simulation["isolation"] else 1
    bar = _Progress(len(scn.presets) * runs_per, enabled=progress)
    cases, results, details = {}, {}, {}
    n_steps = int(scn.simulation["n_steps"])
    save = next((d for d in (20, 10, 8, 5, 4, 2, 1) if n_steps % d == 0), 1)
    for name in scn.presets:
        fab = get_fabric(name, **scn.overrides.get(name, {}))
        if fab.sharp not in cases:
            cases[fab.sharp] = build_case(scn, fab.sharp)
        case = cases[fab.sharp]
        arrival = case.sim_arrival
        res = simulate_case(case, fab, scn, arrival, save_every=save)
        bar.update(f"{name}: all jobs")
        alone = {}
        if scn.simulation["isolation"]:
            for job, label in ((0, "training alone"), (1, "tenant alone")):
                if not np.any(case.job_of == job):
                    bar.update(f"{name}: {label}")
                    continue
                alone[job] = simulate_case(case, fab, scn, alone_arrival(case, job))
                bar.update(f"{name}: {label}")
        results[name] = _metrics(case, scn, res, alone)
        details[name] = dict(case=case, result=res)
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
    from . import scaling
    scn = default_scenario() if scn is None else scn
    scns = scaling.scaled_scenarios(scn, factors)
    bar = _Progress(len(scns) * len(scn.presets), enabled=progress)
    return scaling.scaling_curves(scns, scn.presets, seed=scn.simulation["seed"],
                                  shared_shape=True, progress=bar.update)


def _fmt(v, scale):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    x = v * scale
    return f"{x:,.0f}" if abs(x) >= 1000 else (f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}")


def format_table(results: dict) -> str:
    """The metrics table: rows = metrics (with units), columns = presets."""
    names = list(results)
    rows = [(f"{label} ({unit})", [_fmt(results[n][key], scale) for n in names])
            for key, label, unit, scale in METRICS]
    unfinished = [results[n].get("unfinished_flows", 0) for n in names]
    if any(unfinished):
        rows.append(("Unfinished flows (count)", [str(u) for u in unfinished]))
    w0 = max(len(r[0]) for r in rows)
    wc = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    lines = [" " * w0 + "  " + "  ".join(n.rjust(wc[i]) for i, n in enumerate(names))]
    lines.append("-" * len(lines[0]))
    for label, vals in rows:
        lines.append(label.ljust(w0) + "  " + "  ".join(v.rjust(wc[i]) for i, v in enumerate(vals)))
    return "\n".join(lines)


def write_json(results: dict, path) -> None:
    """Writes ``{preset: {metric: value}}`` (non-finite values as null)."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v
    out = {n: {k: clean(v) for k, v in m.items()} for n, m in results.items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
