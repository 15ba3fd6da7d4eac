"""The forward model of parameter tuning: a compare scenario, one preset, knobs in.

:class:`TuningModel` builds a scenario's case once on the host (topology, workload,
candidate paths, the preset's routing, latencies, line rates; :mod:`fabric_jax.study`)
and evaluates it under knob values (:mod:`._tunables`) with
:func:`fabric_jax.fluid.simulate_fluid`: the preset's law parameters and PFC thresholds
are pytree leaves built from the knobs, so ``jax.grad`` and ``jax.vmap`` pass through
the fluid run.  The run is the one :func:`fabric_jax.study.run.simulate_case` makes
(the preset bound to the case's paths by :func:`fabric_jax.fabric_sim.preset_options`:
routing, line rates, NIC links, IB CC switch-port mask, receiver options) with two
differences, both needed for reverse-mode gradients and stated here:

* the smooth mode (:mod:`fabric_jax.smooth`) at temperature :data:`TUNE_TEMPERATURE`
  and a fixed max-min iteration count :data:`TUNE_SOLVER_ITERATIONS` (every tuning
  evaluation, gradient or derivative-free, uses this same model, so the methods
  optimise one objective; :attr:`TuneResult.exact` re-evaluates the end points in the
  exact mode);
* no ``stop_when_idle`` (its ``lax.cond`` would cut the gradient of nothing, but it
  needs a trajectory); the horizon is the scenario's ``n_steps``.

Objectives (seconds or ratios; lower is better):

``step_time``
    The training job's communication time: first release to last finish of the
    training flows (the step's compute is a constant added to it, so it does not move
    the optimum; regrets are ratios of this time).
``p99_fct``
    99th percentile of the FCT slowdown of the non-training flows (tenant incast and
    background), ``fct / (size / line_rate + latency)`` (as
    :func:`fabric_jax.metrics.slowdown`).
``mix``
    ``sqrt(step_time / step_time_0 x p99_fct / p99_fct_0)``, each term over its value
    at the shipped defaults (the geometric mean of the two relative changes).

A flow unfinished at the horizon counts as finishing at ``horizon + (size -
delivered) / line_rate`` (what it would need at line rate), so the objective is
finite and continuous when a setting pushes a flow past the horizon.

Workloads (:data:`WORKLOADS`, for the transfer regret), all the scenario's flows with
the same shapes (one compilation serves them all):
``train`` the scenario as written; ``incast`` the tenant's incast flows x4 bytes;
``moe_skew`` the all-to-all with ``expert_skew`` + 1 (sizes from the rebuilt case);
``background`` the background flows x4 bytes (load x4 at the same arrivals);
``degraded_link`` the fabric uplink that carries the most training flows at half
capacity for the whole run (:mod:`fabric_jax.faults`).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from .. import flowcontrol as fcm
from .. import smooth as sm
from ..fabrics import get_fabric
from ..faults import FaultSchedule
from ..fabric_sim import preset_options
from ..fluid import simulate_fluid
from ..study.case import JOBS, build_case
from ..study.scenario import Scenario, default_scenario, load_scenario, validate_scenario
from . import _tunables as tn

__all__ = ["TuningModel", "tuning_scenario", "load_tuning_scenario", "OBJECTIVES",
           "WORKLOADS", "TUNE_TEMPERATURE", "TUNE_SOLVER_ITERATIONS"]

OBJECTIVES = ("step_time", "p99_fct", "mix")
WORKLOADS = ("train", "incast", "moe_skew", "background", "degraded_link")
#: Smooth-mode temperature of every tuning evaluation (sharp: at 0.02 the default
#: scenario's finish times equal the exact mode's to float round-off; at 0.1 flows
#: stall).
TUNE_TEMPERATURE = 0.02
#: Fixed max-min iterations per fluid step (reverse mode needs a fixed trip count).
TUNE_SOLVER_ITERATIONS = 16
#: Workload multipliers of the transfer variants.
VARIANT_FACTOR = 4.0
DEGRADED_FACTOR = 0.5


def tuning_scenario() -> Scenario:
    """The default tuning scenario: small enough for a tune in minutes on 2 cores.

    16 servers with one 400 Gb/s NIC on a leaf-spine of 4 leaves and 2 spines (2:1
    oversubscribed at the leaves), 1 MB port buffers, 1 us links; the training job on
    8 servers (MoE all-to-all of 2 MB in expert-parallel groups of 4 with Zipf skew 1,
    then a 4 MB ring all-reduce), a tenant on the other 8 (a 7-to-1 incast of 1 MB per
    sender), 5 % web-search background for 100 us; dt 1 us, 500 steps (500 us).  The
    same as ``docs/scenarios/tune_small.toml``.
    """
    base = default_scenario()
    return validate_scenario(dataclasses.replace(
        base,
        topology=dict(kind="leaf_spine", n_servers=16, nics_per_server=1, servers_per_leaf=4,
                      n_spines=2, link_gbps=400.0, latency_us=1.0, buffer_kb=1024.0),
        workload=dict(base.workload, train_servers=8, tenant_servers=8, ep_servers=4,
                      all_reduce_mb=4.0, moe_mb=2.0, expert_skew=1.0, compute_us=1000.0,
                      tenant_incast_mb=1.0, tenant_fan_in=7, background_load=0.05,
                      background_us=100.0),
        simulation=dict(base.simulation, dt_us=1.0, n_steps=500, isolation=False),
        presets=("roce",)))


def load_tuning_scenario(scenario) -> Scenario:
    """``None`` -> :func:`tuning_scenario`; a path -> the TOML file; a Scenario as is.

    Raises:
      ValueError: (a :class:`fabric_jax.study.scenario.ScenarioError`) a bad value.
    """
    if scenario is None:
        return tuning_scenario()
    if isinstance(scenario, Scenario):
        return validate_scenario(scenario)
    return load_scenario(scenario)


@dataclasses.dataclass(eq=False)
class TuningModel:
    """A scenario and preset, built on the host, evaluated under knob values.

    Attributes:
      scenario: the :class:`~fabric_jax.study.scenario.Scenario`.
      fabric: the :class:`fabric_jax.Fabric` (the preset with the scenario's overrides).
      case: the :class:`~fabric_jax.study.case.Case`.
      tunables: every knob of the preset (:func:`._tunables.preset_tunables`).
      dt, n_steps: the fluid step (s) and horizon (steps).
    """

    scenario: Scenario
    fabric: object
    case: object
    tunables: list
    dt: float
    n_steps: int
    _kw: dict
    _law0: object
    _fc0: object
    _lr: np.ndarray
    _variants: dict
    _norm: dict | None = None

    @classmethod
    def build(cls, scenario, preset: str, *, dt: float | None = None) -> "TuningModel":
        """Host side: the case, routing, latencies, default parameters and variants.

        Args:
          scenario: a Scenario, a TOML path or ``None`` (:func:`tuning_scenario`).
          preset: a preset name (its ``[fabrics.<name>]`` overrides apply).
          dt: override the scenario's step, s (for dt checks; ``n_steps`` scales so
            the horizon stays).

        Raises:
          ValueError: unknown preset, a bad scenario value.
        """
        scn = load_tuning_scenario(scenario)
        from ..fabrics import PRESETS
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}; got {preset!r}")
        fab = get_fabric(preset, **scn.overrides.get(preset, {}))
        sim = scn.simulation
        step = sim["dt_us"] * 1e-6 if dt is None else float(dt)
        n_steps = int(round(sim["n_steps"] * sim["dt_us"] * 1e-6 / step))
        case = build_case(scn, fab.sharp)
        topo, w = case.topology, case.workload
        # the compare run's binding of the preset (simulate_case), computed once
        kw = preset_options(topo, case.paths, fab, seed=sim["seed"], nic_rate=case.line_rate)
        law0 = kw.pop("params")
        inc, lr, lat, cap = (kw[k] for k in ("incidence", "line_rate", "link_latency",
                                              "capacity"))
        buf = np.asarray(topo.buffer, float)
        if fab.flow_control == "pfc":
            xoff, xon = fcm.pfc_thresholds(cap, buf, reaction_s=step)
            fc0 = fcm.flow_control_params(topo.n_links, buffer=buf, xoff=xoff, xon=xon)
        else:
            fc0 = fcm.flow_control_params(topo.n_links, buffer=buf)
        kw.update(dt=step, n_steps=n_steps, deps=w.deps, delay=w.delay,
                  fifo_bands=int(sim.get("fifo_bands", 8)),
                  **fab.class_options(case.job_of, JOBS, topo))
        tunables = tn.preset_tunables(fab.cc, law0, line_rate=case.line_rate,
                                      flow_control=fab.flow_control, capacity=cap,
                                      buffer=buf, link_latency=lat, dt=step)
        variants = _variants(scn, case, fab, inc)
        return cls(scn, fab, case, tunables, step, n_steps, kw, law0, fc0, lr, variants)

    # ------------------------------------------------------------------ queries
    @property
    def horizon(self) -> float:
        return self.dt * self.n_steps

    def workloads(self) -> tuple:
        """The workload variants this scenario can produce (see the module docstring)."""
        return tuple(self._variants)

    def has_other_flows(self) -> bool:
        """Whether the scenario has non-training flows (needed by ``p99_fct``)."""
        return bool(np.any(self.case.job_of != 0))

    def defaults(self) -> dict:
        return {t.name: t.default for t in self.tunables}

    # ------------------------------------------------------------------ evaluation
    def simulate(self, knobs: dict, *, workload: str = "train", smooth=None,
                 iterations: int | None = None):
        """The fluid run under ``knobs`` (name -> value; others at their defaults).

        ``smooth``: a :class:`fabric_jax.smooth.Smoothing` (default
        ``smooth(TUNE_TEMPERATURE)``; :data:`fabric_jax.smooth.EXACT` for the exact
        model, with ``iterations=None`` for the exact while-loop solve).
        """
        smooth = sm.smooth(TUNE_TEMPERATURE) if smooth is None else smooth
        if iterations is None and smooth.enabled:
            iterations = TUNE_SOLVER_ITERATIONS
        law, fcp = tn.apply_knobs(self._law0, self._fc0, knobs, self.tunables,
                                  self.case.topology.buffer)
        v = self._variants[workload]
        return simulate_fluid(size=v["size"], arrival=v["arrival"], params=law, fc_params=fcp,
                              smooth=smooth, solver_iterations=iterations,
                              faults=v["faults"], **self._kw)

    def terms(self, res, workload: str = "train") -> dict:
        """``{"step_time", "p99_fct"}`` of a run (traceable; see the module docstring)."""
        v = self._variants[workload]
        size = jnp.asarray(v["size"], res.finish.dtype)
        arrival = jnp.asarray(v["arrival"], res.finish.dtype)
        lr = jnp.asarray(self._lr, res.finish.dtype)
        lat = jnp.asarray(self.case.latency, res.finish.dtype)
        left = jnp.maximum(size - res.delivered, 0.0)
        est = self.horizon + left / lr + lat
        fin = jnp.where(jnp.isfinite(res.finish), res.finish, est)
        train = jnp.asarray(self.case.job_of == 0)
        t0 = float(np.min(np.asarray(v["arrival"])[self.case.job_of == 0]))
        step = jnp.max(jnp.where(train, fin, -jnp.inf)) - t0
        other = np.flatnonzero(self.case.job_of != 0)
        if other.size:
            ideal = size[other] / lr[other] + lat[other]
            slow = (fin[other] - arrival[other]) / ideal
            p99 = jnp.percentile(slow, 99.0)
        else:
            p99 = jnp.asarray(jnp.nan, res.finish.dtype)
        return dict(step_time=step, p99_fct=p99)

    def normalisers(self) -> dict:
        """Both terms at the shipped defaults (the ``mix`` objective's scale)."""
        if self._norm is None:
            t = self.terms(self.simulate({}))
            self._norm = {k: float(v) for k, v in t.items()}
        return self._norm

    def objective(self, knobs: dict, objective: str, *, workload: str = "train",
                  smooth=None, iterations=None):
        """The scalar objective under ``knobs`` (traceable in the knob values)."""
        t = self.terms(self.simulate(knobs, workload=workload, smooth=smooth,
                                     iterations=iterations), workload)
        if objective == "mix":
            n = self.normalisers()
            return jnp.sqrt(t["step_time"] / n["step_time"] * t["p99_fct"] / n["p99_fct"])
        return t[objective]


def _variants(scn, case, fab, inc) -> dict:
    """Per workload: ``size``, ``arrival``, ``faults`` (same shapes for all)."""
    w = case.workload
    n_links = case.topology.n_links
    ones = FaultSchedule(step=jnp.zeros((1,), jnp.int32),
                         factor=jnp.ones((1, n_links), jnp.result_type(float)))
    base = dict(size=np.asarray(w.size, float), arrival=np.asarray(case.sim_arrival, float),
                faults=ones)
    out = {"train": base}
    job = case.job_of
    if np.any(job == 1):
        out["incast"] = dict(base, size=np.where(job == 1, VARIANT_FACTOR, 1.0) * base["size"])
    skewed = dataclasses.replace(scn, workload=dict(scn.workload,
                                                    expert_skew=scn.workload["expert_skew"] + 1))
    if scn.workload["moe_mb"] > 0:
        c2 = build_case(skewed, fab.sharp)
        same = (c2.workload.n_flows == w.n_flows and np.array_equal(c2.workload.src, w.src)
                and np.array_equal(c2.workload.dst, w.dst))
        if same:
            out["moe_skew"] = dict(base, size=np.asarray(c2.workload.size, float))
    if np.any(job == 2):
        out["background"] = dict(base, size=np.where(job == 2, VARIANT_FACTOR, 1.0)
                                 * base["size"])
    # the switch-to-switch link carrying the most training flows on their initial path
    topo = case.topology
    is_host = np.asarray(topo.node_is_host, bool)
    fabric_link = ~is_host[np.asarray(topo.link_src)] & ~is_host[np.asarray(topo.link_dst)]
    li, fi = np.asarray(inc.link_idx), np.asarray(inc.flow_idx)
    ok = (np.asarray(inc.weight) > 0) & fabric_link[li] & (job[fi] == 0)
    if np.any(ok):
        count = np.bincount(li[ok], minlength=n_links)
        link = int(np.argmax(count))
        factor = np.ones((1, n_links))
        factor[0, link] = DEGRADED_FACTOR
        out["degraded_link"] = dict(base, faults=FaultSchedule(
            step=jnp.zeros((1,), jnp.int32), factor=jnp.asarray(factor, jnp.result_type(float))),
            link=link)
    return out
