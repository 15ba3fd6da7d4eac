"""Tuning congestion- and flow-control parameters by gradient descent, with baselines.

:func:`tune` runs optax's Adam on the unbounded coordinates ``z = logit(u)`` of the
preset's knobs (:mod:`._tunables`: ``u`` in ``[0, 1]`` maps to the knob's physical
range in log or linear space), with gradients of the objective through
:func:`fabric_jax.fluid.simulate_fluid` in its smooth mode (:mod:`._tuning_model`).
It starts at the shipped defaults and returns the best setting it evaluated, the
defaults included, so the tuned objective is never worse than the defaults' on the
tuned workload.

Derivative-free baselines on the same model and objective, counted in the same
simulator evaluations (:func:`random_search`: settings drawn uniformly in ``u``, i.e.
log-uniformly within the ranges, evaluated in ``vmap`` batches; :func:`nelder_mead`:
SciPy's Nelder-Mead on ``u`` with the bounds ``[0, 1]``, from the defaults).  One
evaluation of the gradient method is one forward run plus its adjoint (about 3-5x the
wall time of a forward run; :attr:`TuneResult.wall_time` says what it cost).

:func:`ease_of_tuning` measures per preset (a) the default regret, the objective at the
shipped defaults over the tuned optimum; (b) the configuration risk, the p10-p90 spread
of the objective over settings drawn log-uniformly within the documented ranges, over
the tuned optimum; (c) the transfer regret, the setting tuned on the training step
evaluated on the other workloads of :data:`._tuning_model.WORKLOADS` against each
workload's own optimum (the best of its own tune, the defaults and the transferred
setting).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from . import _tunables as tn
from ._tuning_model import OBJECTIVES, TuningModel
from ._optax import optax_update

__all__ = ["TuneResult", "tune", "random_search", "nelder_mead", "ease_of_tuning",
           "check_objective", "evaluations_to_reach", "DEFAULT_ITERATIONS",
           "DEFAULT_LEARNING_RATE"]

DEFAULT_ITERATIONS = 30
DEFAULT_LEARNING_RATE = 0.25
#: Start coordinates are kept in ``[U_MARGIN, 1 - U_MARGIN]`` (finite logits).
U_MARGIN = 0.01


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` (or a baseline) found.

    Attributes:
      preset, objective, workload, method: what was tuned, how.
      tuned: knob name -> tuned value (SI units).
      defaults: knob name -> shipped value.
      before, after: the objective at the defaults and at ``tuned`` (the tuning
        model: smooth mode, fixed solver iterations).
      evaluations: simulator evaluations used (a gradient step counts one).
      best_evaluation: the evaluation that gave ``after`` (0: the defaults).
      wall_time: seconds (compilation included).
      trajectory: per evaluation ``{"evaluation", "objective", "best", "wall_time",
        "values"}``.
      exact: ``{"before", "after"}`` re-evaluated in the exact mode (empty if skipped).
      tunables: the :class:`._tunables.Tunable` specs tuned.
    """

    preset: str
    objective: str
    workload: str
    method: str
    tuned: dict
    defaults: dict
    before: float
    after: float
    evaluations: int
    best_evaluation: int
    wall_time: float
    trajectory: list
    exact: dict
    tunables: list

    @property
    def regret(self) -> float:
        """``before / after`` (>= 1: what tuning gained)."""
        return float(self.before / self.after) if self.after > 0 else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["tunables"] = [dataclasses.asdict(t) for t in self.tunables]
        d["regret"] = self.regret
        return d

    def report(self) -> str:
        """A table of the knobs and the objective before/after."""
        lines = [f"tune {self.preset} ({self.method}), objective {self.objective} on "
                 f"{self.workload}: {self.before:.6g} -> {self.after:.6g} "
                 f"(x{self.regret:.3f}) in {self.evaluations} evaluations, "
                 f"{self.wall_time:.1f} s",
                 f"  {'knob':18s} {'default':>12s} {'tuned':>12s} {'range':>25s} unit"]
        for t in self.tunables:
            lines.append(f"  {t.name:18s} {self.defaults[t.name]:12.4g} "
                         f"{self.tuned[t.name]:12.4g} {f'[{t.lo:.3g}, {t.hi:.3g}]':>25s} "
                         f"{t.unit}")
        if self.exact:
            lines.append(f"  exact mode: {self.exact['before']:.6g} -> "
                         f"{self.exact['after']:.6g}")
            if self.exact["after"] > self.exact["before"]:
                lines.append("  note: the tuned setting is worse than the defaults in the "
                             "exact mode (the smooth model's optimum does not carry over "
                             "here; docs/tuning.md): keep the defaults")
        return "\n".join(lines)


def check_objective(model: TuningModel, objective: str, workload: str = "train"):
    """Host-side check that the scenario can produce ``objective`` on ``workload``.

    Raises:
      ValueError: an unknown objective (listing the valid ones), ``p99_fct`` / ``mix``
        on a scenario without non-training flows, an unknown workload.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}; got {objective!r}")
    if objective in ("p99_fct", "mix") and not model.has_other_flows():
        raise ValueError(f"objective {objective!r} needs flows outside the training job "
                         f"(the FCT slowdown of tenant / background flows), and this "
                         f"scenario has none: set workload.tenant_servers >= 2 or "
                         f"workload.background_load > 0, or use objective='step_time'")
    if workload not in model.workloads():
        raise ValueError(f"workload must be one of {list(model.workloads())} for this "
                         f"scenario; got {workload!r}")


def _logit(u):
    u = np.clip(np.asarray(u, float), U_MARGIN, 1 - U_MARGIN)
    return np.log(u / (1 - u))


def _values(tunables, u, fixed) -> dict:
    return {k: float(v) for k, v in tn.from_unit(tunables, jnp.asarray(u), fixed).items()}


def _setup(scenario, preset, objective, params, workload, model):
    model = TuningModel.build(scenario, preset) if model is None else model
    check_objective(model, objective, workload)
    tunables = tn.resolve_params(model.tunables, params)
    chosen = {t.name for t in tunables}
    fixed = {k: v for k, v in model.defaults().items() if k not in chosen}
    return model, tunables, fixed


def _exact(model, objective, workload, knobs_before, knobs_after):
    from .. import smooth as sm
    f = lambda k: float(model.objective(k, objective, workload=workload,  # noqa: E731
                                        smooth=sm.EXACT, iterations=None))
    return dict(before=f(knobs_before), after=f(knobs_after))


def tune(scenario=None, preset: str = "roce", objective: str = "step_time", params=None, *,
         iterations: int = DEFAULT_ITERATIONS, learning_rate: float = DEFAULT_LEARNING_RATE,
         workload: str = "train", start=None, model: TuningModel | None = None,
         exact_check: bool = True, progress=None) -> TuneResult:
    """Tunes a preset's knobs on a scenario by gradient descent through the fluid model.

    Args:
      scenario: a :class:`~fabric_jax.study.scenario.Scenario`, a TOML path, or
        ``None`` for the default tuning scenario
        (:func:`fabric_jax.optimize.tuning_scenario`).
      preset: a preset name (``"roce"``, ``"infiniband"``, ``"spectrum_x"``, ``"uec"``).
      objective: ``"step_time"``, ``"p99_fct"`` or ``"mix"``
        (:mod:`fabric_jax.optimize._tuning_model`).
      params: ``None`` (every knob of the preset), a list of knob names, or a dict
        name -> ``(lo, hi)`` narrowing a range (SI units; inside the physical range).
      iterations: gradient steps (each one simulator evaluation with its adjoint).
      learning_rate: Adam's step in logit units.
      workload: the workload variant to tune on (``"train"`` by default).
      start: unit coordinates ``[knobs]`` to start from (default: the shipped values).
      model: a prebuilt :class:`TuningModel` (reuses its host-side work).
      exact_check: re-evaluate the defaults and the result in the exact mode.
      progress: ``callable(i, objective)`` after each evaluation, or ``None``.

    Returns:
      :class:`TuneResult`.

    Raises:
      ValueError: before any simulation: an unknown preset, parameter (listing the
        valid ones) or objective; a bound outside the physical range; an objective the
        scenario cannot produce; ``iterations`` < 1 or ``learning_rate`` <= 0.
    """
    import optax

    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) \
            or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1; got {iterations!r}")
    if not (isinstance(learning_rate, (int, float)) and np.isfinite(learning_rate)
            and learning_rate > 0):
        raise ValueError(f"learning_rate must be a number > 0; got {learning_rate!r}")
    t0 = time.perf_counter()
    model, tunables, fixed = _setup(scenario, preset, objective, params, workload, model)
    defaults = {t.name: t.default for t in tunables}
    u_def = tn.to_unit(tunables, defaults, fixed)
    u0 = u_def if start is None else np.asarray(start, float)
    if u0.shape != (len(tunables),):
        raise ValueError(f"start must be [knobs] = [{len(tunables)}] unit coordinates; "
                         f"got shape {u0.shape}")

    def loss(z):
        knobs = tn.from_unit(tunables, jax.nn.sigmoid(z), fixed)
        return model.objective(knobs, objective, workload=workload)

    traj = []
    before = float(model.objective({}, objective, workload=workload))
    best, best_u, best_i = before, u_def, 0
    traj.append(dict(evaluation=0, objective=before, best=best,
                     wall_time=time.perf_counter() - t0, values=defaults))
    if progress:
        progress(0, before)
    z = jnp.asarray(_logit(u0), jnp.result_type(float))
    opt = optax.adam(learning_rate, eps=1e-30)   # tiny eps: scale-free (sign-like) steps
    state = opt.init(z)
    grad_fn = jax.value_and_grad(loss)
    for i in range(1, iterations + 1):
        value, g = grad_fn(z)
        value = float(value)
        g = jnp.where(jnp.isfinite(g), g, 0.0)
        u = np.asarray(jax.nn.sigmoid(z), float)
        if np.isfinite(value) and value < best:
            best, best_u, best_i = value, u, i
        traj.append(dict(evaluation=i, objective=value, best=best,
                         wall_time=time.perf_counter() - t0,
                         values=_values(tunables, u, fixed)))
        if progress:
            progress(i, value)
        updates, state = optax_update(opt, g, state, z)
        z = optax.apply_updates(z, updates)
    tuned = _values(tunables, best_u, fixed) if best_i else dict(defaults)
    exact = _exact(model, objective, workload, {}, tuned) if exact_check else {}
    return TuneResult(preset=preset, objective=objective, workload=workload,
                      method="gradient", tuned=tuned, defaults=defaults, before=before,
                      after=best, evaluations=iterations + 1, best_evaluation=best_i,
                      wall_time=time.perf_counter() - t0, trajectory=traj, exact=exact,
                      tunables=tunables)


def _batched(model, tunables, fixed, objective, workload):
    def one(u):
        return model.objective(tn.from_unit(tunables, u, fixed), objective, workload=workload)
    return lambda U: np.asarray(jax.vmap(one)(jnp.asarray(U, jnp.result_type(float))), float)


def random_search(scenario=None, preset: str = "roce", objective: str = "step_time",
                  params=None, *, budget: int = 64, batch: int = 32, seed: int = 0,
                  workload: str = "train", model: TuningModel | None = None) -> TuneResult:
    """Derivative-free baseline: ``budget`` settings drawn uniformly in the unit
    coordinates (log-uniformly within each knob's range), evaluated ``batch`` at a time
    under ``vmap``; evaluation 0 is the defaults.  Arguments as :func:`tune`."""
    t0 = time.perf_counter()
    model, tunables, fixed = _setup(scenario, preset, objective, params, workload, model)
    defaults = {t.name: t.default for t in tunables}
    rng = np.random.default_rng(seed)
    U = rng.uniform(size=(int(budget), len(tunables)))
    before = float(model.objective({}, objective, workload=workload))
    f = _batched(model, tunables, fixed, objective, workload)
    vals = []
    for i in range(0, len(U), batch):
        chunk = U[i:i + batch]
        pad = batch - len(chunk)
        out = f(np.concatenate([chunk, np.repeat(chunk[-1:], pad, axis=0)]) if pad else chunk)
        vals.extend(out[:len(chunk)].tolist())
    wall = time.perf_counter() - t0
    return _from_evaluations("random", model, tunables, fixed, objective, workload, preset,
                             defaults, before, U, vals, wall)


def nelder_mead(scenario=None, preset: str = "roce", objective: str = "step_time",
                params=None, *, budget: int = 64, workload: str = "train",
                model: TuningModel | None = None, start=None) -> TuneResult:
    """Derivative-free baseline: SciPy's Nelder-Mead on the unit coordinates (bounds
    ``[0, 1]``), from the defaults, stopped after ``budget`` evaluations.  Arguments
    as :func:`tune`."""
    from scipy.optimize import minimize

    t0 = time.perf_counter()
    model, tunables, fixed = _setup(scenario, preset, objective, params, workload, model)
    defaults = {t.name: t.default for t in tunables}
    before = float(model.objective({}, objective, workload=workload))
    U, vals = [], []

    def fun(u):
        if len(vals) >= budget:      # SciPy may overshoot maxfev within an iteration
            return 1e30
        u = np.clip(u, 0.0, 1.0)
        v = float(model.objective(tn.from_unit(tunables, jnp.asarray(u), fixed), objective,
                                  workload=workload))
        U.append(u.copy())
        vals.append(v if np.isfinite(v) else 1e30)
        return vals[-1]

    x0 = tn.to_unit(tunables, defaults, fixed) if start is None else np.asarray(start, float)
    x0 = np.clip(x0, U_MARGIN, 1 - U_MARGIN)
    n = len(tunables)
    simplex = np.vstack([x0] + [np.clip(x0 + 0.25 * np.eye(n)[i] * np.where(x0[i] > 0.5, -1, 1),
                                        0, 1) for i in range(n)])
    minimize(fun, x0, method="Nelder-Mead", bounds=[(0.0, 1.0)] * n,
             options=dict(maxfev=int(budget), initial_simplex=simplex, xatol=1e-4,
                          fatol=0.0))
    wall = time.perf_counter() - t0
    return _from_evaluations("nelder_mead", model, tunables, fixed, objective, workload,
                             preset, defaults, before, np.array(U), vals, wall)


def _from_evaluations(method, model, tunables, fixed, objective, workload, preset, defaults,
                      before, U, vals, wall) -> TuneResult:
    best, best_i, best_u = before, 0, None
    traj = [dict(evaluation=0, objective=before, best=before, wall_time=0.0, values=defaults)]
    for i, v in enumerate(vals, start=1):
        if np.isfinite(v) and v < best:
            best, best_i, best_u = float(v), i, U[i - 1]
        traj.append(dict(evaluation=i, objective=float(v), best=best,
                         wall_time=wall * i / max(len(vals), 1),
                         values=_values(tunables, U[i - 1], fixed)))
    tuned = dict(defaults) if best_u is None else _values(tunables, best_u, fixed)
    return TuneResult(preset=preset, objective=objective, workload=workload, method=method,
                      tuned=tuned, defaults=defaults, before=before, after=best,
                      evaluations=len(vals) + 1, best_evaluation=best_i, wall_time=wall,
                      trajectory=traj, exact={}, tunables=tunables)


def evaluations_to_reach(result: TuneResult, target: float, rtol: float = 1e-4):
    """The first evaluation whose best-so-far is within ``rtol`` of ``target`` (or
    below it); ``None`` if never."""
    for row in result.trajectory:
        if row["best"] <= target * (1 + rtol):
            return int(row["evaluation"])
    return None


def ease_of_tuning(scenario=None, presets=("infiniband", "roce", "spectrum_x", "uec"),
                   objective: str = "step_time", *, n_settings: int = 64,
                   iterations: int = 20, learning_rate: float = DEFAULT_LEARNING_RATE,
                   seed: int = 0, transfer: bool = True, progress=None) -> dict:
    """The ease-of-tuning table (module docstring): per preset the default regret, the
    configuration risk over ``n_settings`` log-uniform settings, and the transfer
    regret of the training-step setting on each other workload.

    Returns:
      ``{preset: {"default_regret", "risk_p10", "risk_p50", "risk_p90", "risk_spread",
      "knobs", "tuned", "before", "after", "transfer": {workload: {...}}, "wall_time"}}``
      (risk figures are objective / tuned optimum).
    """
    out = {}
    say = progress or (lambda msg: None)
    for preset in presets:
        t0 = time.perf_counter()
        model = TuningModel.build(scenario, preset)
        check_objective(model, objective)
        res = tune(None, preset, objective, model=model, iterations=iterations,
                   learning_rate=learning_rate, exact_check=False)
        say(f"{preset}: tuned {res.before:.4g} -> {res.after:.4g}")
        rnd = random_search(None, preset, objective, model=model, budget=n_settings,
                            seed=seed)
        vals = np.array([r["objective"] for r in rnd.trajectory[1:]])
        opt = min(res.after, rnd.after)
        q10, q50, q90 = np.percentile(vals / opt, [10, 50, 90])
        row = dict(default_regret=res.before / opt, risk_p10=float(q10),
                   risk_p50=float(q50), risk_p90=float(q90), risk_spread=float(q90 - q10),
                   knobs=len(res.tunables), before=res.before, after=opt,
                   tuned=res.tuned if res.after <= rnd.after else rnd.tuned,
                   grad_after=res.after, random_best=rnd.after, transfer={})
        say(f"{preset}: risk p10-p90 {q10:.3f}-{q90:.3f}")
        if transfer:
            tuned_knobs = row["tuned"]
            for w in model.workloads():
                if w == "train":
                    continue
                own = tune(None, preset, objective, model=model, iterations=iterations,
                           learning_rate=learning_rate, workload=w, exact_check=False)
                moved = float(model.objective(tuned_knobs, objective, workload=w))
                best_w = min(own.after, moved, own.before)
                row["transfer"][w] = dict(transferred=moved, own_optimum=best_w,
                                          defaults=own.before,
                                          regret=moved / best_w if best_w > 0 else np.nan,
                                          default_regret=own.before / best_w)
                say(f"{preset}: transfer to {w}: x{moved / best_w:.3f}")
        row["wall_time"] = time.perf_counter() - t0
        out[preset] = row
    return out
