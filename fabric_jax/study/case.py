"""Case assembly: a validated :class:`~fabric_jax.study.scenario.Scenario` turned into
host-side arrays (topology, workload flows, candidate paths, job labels).

The workload of the built-in study: a training job (MoE all-to-all in expert-parallel
groups of ``ep_servers`` servers, then a data-parallel all-reduce, then ``compute_us``
of compute), a second tenant (cross-rail incasts) and Poisson background traffic.  The
collectives are hierarchical: inside a server they run over NVLink (not simulated),
across servers one ring / all-to-all per rail (NIC ``i`` of every server), so each NIC
carries ``1/nics_per_server`` of the data.

With a training model (``scn.model``: ``--model`` or ``[model]``) the training job is
instead :func:`fabric_jax.workloads.training.model_training_step` of the model and its
plan on the same servers (rank ``r`` on the ``r``-th NIC of the job, server-major):
its compute time, its DP / EP / PP collectives (TP stays on NVLink, inside the
compute time) and its tokens per step follow from the model.  Its flows carry one
slice, ``1 / comm_scale``, of the step's bytes
(:func:`~fabric_jax.study.scenario.model_slices`); the metrics extrapolate the
slice to the whole step (:func:`fabric_jax.study.run.full_step_times`).

Candidate paths: every equal-cost path of each pair (:func:`fabric_jax.shortest_paths`
with ``max_paths=None``) unless the scenario's ``max_paths`` caps them; a cap that drops
paths is counted in :attr:`Case.paths_dropped` and reported by the study.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from ..paths import PathsTruncatedWarning, shortest_paths
from ..topology import leaf_spine, rail_optimized
from ..units import gbps
from ..workloads import (all_to_all, concat, incast, poisson_background,
                         steady_state_all_reduce, zipf_expert_load)
from ..workloads.training import model_training_step, training_step
from .scenario import Scenario, ScenarioError, validate_scenario

__all__ = ["Case", "build_case", "alone_arrival", "collective_phases", "NEVER", "JOBS"]

#: Arrival time (s) given to flows switched off in "alone" runs (:func:`alone_arrival`):
#: far beyond any scenario's horizon, so they never start.
NEVER = 1e3

#: Job labels of :attr:`Case.job_of`.
JOBS = {0: "train", 1: "tenant", 2: "background"}


@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """Host-side arrays of one scenario for one fabric (SHARP changes the flows).

    Attributes:
      topology: the :class:`~fabric_jax.Topology`.
      workload: the :class:`~fabric_jax.workloads.Workload` (all jobs concatenated).
      spec: the training job's step spec (:func:`fabric_jax.workloads.training.training_step`).
      paths: :class:`~fabric_jax.PathSet`, one pair per flow.
      latency: ``[flows]`` seconds, zero-load path latency.
      line_rate: NIC line rate, bytes/s.
      train_hosts: hosts (NICs) of the training job.
      job_of: ``[flows]`` 0 training, 1 tenant, 2 background (:data:`JOBS`).
      groups: ``{collective name: flow indices}``.
      sim_arrival: ``[flows]`` simulated arrival, s (the step's compute is added back).
      compute: the training step's compute time, s.
      paths_dropped: equal-cost paths left out by the scenario's ``max_paths`` cap
        (summed over flows; 0 with the default, every path).
      comm_offset: seconds from the step's start to its first communication, where the
        simulation starts (``(1 - overlap) x compute``; ``None``: ``compute``).
      allreduce_bytes: payload of one data-parallel all-reduce per NIC as simulated
        (one slice with a model), bytes (for the bus bandwidth).
      allreduce_ranks: ranks of one data-parallel all-reduce ring.
      model_info: with a training model, :attr:`fabric_jax.workloads.training.ModelStep.info`
        (every input and derived quantity, and ``slices``); ``None`` otherwise.
      comm_scale: ``k``: the training flows carry ``1/k`` of the step's bytes (one slice,
        :func:`~fabric_jax.study.scenario.model_slices`) and their simulated times
        count ``k`` times in the step (1 without a model).
    """

    topology: Any
    workload: Any
    spec: Any
    paths: Any
    latency: np.ndarray
    line_rate: float
    train_hosts: np.ndarray
    job_of: np.ndarray
    groups: dict
    sim_arrival: np.ndarray
    compute: float
    paths_dropped: int = 0
    comm_offset: float | None = None
    allreduce_bytes: float = 0.0
    allreduce_ranks: int = 0
    model_info: dict | None = None
    comm_scale: int = 1

    @property
    def offset(self) -> float:
        """:attr:`comm_offset`, or :attr:`compute` when it is ``None``."""
        return self.compute if self.comm_offset is None else float(self.comm_offset)


def _round_robin_servers(n_servers, per_group):
    """Servers ordered round robin over the leaf groups (spreads jobs over leaves)."""
    s = np.arange(n_servers)
    return s[np.lexsort((s // per_group, s % per_group))]


def build_case(scn: Scenario, sharp: bool) -> Case:
    """Topology, workload and candidate paths of a scenario (host side).

    Args:
      scn: the scenario (validated again here: :func:`~fabric_jax.study.scenario.validate_scenario`).
      sharp: build the all-reduce as SHARP in-network reductions.

    Raises:
      ScenarioError: a scenario value the study refuses.
    """
    validate_scenario(scn)
    t, w, sim = scn.topology, scn.workload, scn.simulation
    rail = t["kind"] == "rail_optimized"
    nics = t["nics_per_server"] if rail else 1
    per_group = t["servers_per_leaf"]
    if rail:
        kw = dict(servers_per_leaf=per_group, link_gbps=t["link_gbps"],
                  latency_us=t["latency_us"], buffer_kb=t["buffer_kb"])
        if t["n_spines"]:
            kw["n_spines"] = t["n_spines"]
        topo = rail_optimized(t["n_servers"], nics, **kw)
    else:
        topo = leaf_spine(t["n_servers"] // per_group, t["n_spines"] or per_group, per_group,
                          link_gbps=t["link_gbps"], latency_us=t["latency_us"],
                          buffer_kb=t["buffer_kb"])
    n_servers = topo.n_hosts // nics
    order = _round_robin_servers(n_servers, per_group)
    train_srv = np.sort(order[:w["train_servers"]])
    tenant_srv = order[w["train_servers"]:w["train_servers"] + w["tenant_servers"]]
    line = gbps(t["link_gbps"])
    rng_seed = sim["seed"]
    mb = 1e6
    train_hosts = (train_srv[:, None] * nics + np.arange(nics)[None, :]).ravel()
    if scn.model is not None:
        work, spec, compute, offset, ar_bytes, ar_ranks, info, scale = _model_job(
            scn, train_hosts, topo.n_hosts, nics, sharp)
    else:
        work, spec = _constant_job(scn, order, train_srv, nics, sharp)
        compute = offset = w["compute_us"] * 1e-6
        ar_bytes, ar_ranks, info = w["all_reduce_mb"] * mb / nics, int(train_srv.size), None
        scale = 1
    parts = [work]
    # tenant: cross-rail incasts (validated: tenant_servers >= 2, 1 <= fan_in < tenant)
    if tenant_srv.size >= 2:
        fan = w["tenant_fan_in"]
        inc = []
        for r in range(nics):
            rx_srv = tenant_srv[r % tenant_srv.size]
            others = tenant_srv[tenant_srv != rx_srv][:fan]
            rx = rx_srv * nics + (r + 1) % nics
            inc.append(incast(others * nics + r, int(rx), w["tenant_incast_mb"] * mb,
                              job="tenant", name=f"incast_r{r}"))
        parts.append(concat(*inc))
    if w["background_load"] > 0:
        parts.append(poisson_background(topo.n_hosts, w["background_load"], line,
                                        w["background_cdf"], w["background_us"] * 1e-6,
                                        seed=rng_seed))
    work = concat(*parts)
    names = np.array(work.job_names)
    job_of = np.select([names[work.job] == "train", names[work.job] == "tenant"], [0, 1], 2)
    cap = sim["max_paths"] or None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PathsTruncatedWarning)
        paths = shortest_paths(topo, work.src, work.dst, max_paths=cap, seed=rng_seed)
    dropped = sum(getattr(c.message, "n_dropped", 0) for c in caught
                  if issubclass(c.category, PathsTruncatedWarning))
    for c in caught:
        if not issubclass(c.category, PathsTruncatedWarning):
            warnings.warn_explicit(c.message, c.category, c.filename, c.lineno)
    lat = paths.latency(topo)[:, 0]
    groups = {name: np.flatnonzero(work.group == gi)
              for gi, name in enumerate(work.group_names)}
    # The step starts with compute, then communication (from (1 - overlap) of the
    # compute on): simulate the communication from t = 0 and add the offset back for
    # step times.
    sim_arrival = np.where(job_of == 0, np.maximum(work.arrival - offset, 0.0), work.arrival)
    return Case(topo, work, spec, paths, lat, line, train_hosts, job_of, groups, sim_arrival,
                compute, int(dropped), comm_offset=offset, allreduce_bytes=float(ar_bytes),
                allreduce_ranks=int(ar_ranks), model_info=info, comm_scale=int(scale))


def _constant_job(scn: Scenario, order, train_srv, nics: int, sharp: bool):
    """The training job of the workload keys: per rail, a MoE all-to-all in EP groups of
    ``ep_servers`` then a ring (or SHARP) all-reduce, after ``compute_us`` of compute,
    ``tokens_per_gpu_per_step`` tokens per GPU."""
    w, mb, rng_seed = scn.workload, 1e6, scn.simulation["seed"]
    ep = w["ep_servers"]
    ep_order = order[np.isin(order, train_srv)]
    a2a, ar = [], []
    for r in range(nics):
        for g in range(0, ep_order.size if w["moe_mb"] > 0 else 0, ep):
            hosts = ep_order[g:g + ep] * nics + r
            load = zipf_expert_load(ep, w["expert_skew"], rng_seed + 7 * r + g) \
                if w["expert_skew"] > 0 else None
            a2a.append(all_to_all(hosts, w["moe_mb"] * mb / nics, expert_load=load,
                                  job="train", name=f"a2a_r{r}_g{g // ep}"))
        ar.append(steady_state_all_reduce(train_srv * nics + r,
                                          w["all_reduce_mb"] * mb / nics, sharp=sharp,
                                          job="train", name=f"allreduce_r{r}"))
    train_hosts = (train_srv[:, None] * nics + np.arange(nics)[None, :]).ravel()
    # moe_mb = 0: a dense model, no all-to-all phase
    phases = ([concat(*a2a)] if w["moe_mb"] > 0 else []) + [concat(*ar)]
    return training_step(train_hosts, w["compute_us"] * 1e-6, phases, job="train",
                         tokens_per_step=scn.economics["tokens_per_gpu_per_step"]
                         * train_hosts.size)


def _model_job(scn: Scenario, train_hosts, n_hosts: int, nics: int, sharp: bool):
    """The training job of the scenario's model and plan
    (:func:`fabric_jax.workloads.training.model_training_step`): rank ``r`` on NIC
    ``train_hosts[r]`` (server-major, so a tensor-parallel group of ``tp <= GPUs per
    server`` ranks shares a server and its traffic stays on NVLink).

    Returns:
      ``(workload, spec, compute, offset, allreduce_bytes, allreduce_ranks, info)``.

    Raises:
      ScenarioError: the plan puts no traffic on the network.
    """
    m = scn.model
    step = model_training_step(m["model"], m["plan"], m["gpu"], hosts=train_hosts,
                               host_server=np.arange(n_hosts) // nics, n_steps=1,
                               sharp=sharp, job="train")
    if step.workload is None:
        raise ScenarioError("parallelism", "the plan keeps every collective inside a "
                            "server (NVLink): nothing to simulate on the fabric")
    plan, k = m["plan"], int(m["slices"])
    offset = (1.0 - plan.overlap) * step.compute_time
    # one slice of 1/k of the step's bytes (scenario.model_slices); times scale back by k
    work = dataclasses.replace(step.workload, size=step.workload.size / k,
                               group_bytes=np.asarray(step.workload.group_bytes) / k)
    info = dict(step.info, slices=k)
    return (work, step.spec, step.compute_time, offset,
            step.info["dp_allreduce_bytes"] / k, plan.dp, info, k)


def alone_arrival(case: Case, job: int):
    """``[flows]`` arrivals with only job ``job`` (0 training, 1 tenant, 2 background)
    switched on: every other flow arrives at :data:`NEVER` (same arrays, same compile)."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {sorted(JOBS)} ({JOBS}); got {job!r}")
    return np.where(case.job_of == job, case.sim_arrival, NEVER)


def collective_phases(case: Case):
    """``[flows]`` phase id of the training job's flows (0 all-to-all, 1 all-reduce, -1
    any other flow): the two collectives of a training step, each spanning every rail."""
    w = case.workload
    kinds = np.array(w.group_kind + ("",))
    kind = kinds[np.where(w.group >= 0, w.group, len(w.group_kind))]
    phase = np.select([kind == "all_to_all", kind == "all_reduce"], [0, 1], -1)
    return np.where(case.job_of == 0, phase, -1)
