"""Gradient descent on routing logits: :func:`optimize_routing` and its vmap-ed batch.

Parametrisation: one logit per (pair, candidate path); the split is the softmax over the
pair's valid paths (:func:`~fabric_jax.optimize.masked_softmax`), exactly zero on
invalid ones, so every iterate is a feasible routing.  Any optax optimiser updates the
logits (default: Adam with a decaying learning rate, :func:`default_optimizer`; the
log-sum-exp temperature anneals alongside, :func:`anneal`).  The loop is a
``lax.scan`` of ``check_every`` steps, compiled once ahead of time (compile time is
reported apart from run time) and driven from the host, which stops early once the
exact metric reaches ``target``.  The best iterate by the exact metric (MLU, or the
unrolled CCT) is returned, so annealing and the zig-zag of descent on a min-max never
make the answer worse than the best point visited."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..compiling import jit
from ._baselines import ecmp_split
from ._objectives import cct_loss, masked_softmax, mlu_loss, tenant_mlu_loss
from ._problem import RoutingProblem, check_flow_level
from ._optax import optax_update

__all__ = ["RoutingResult", "optimize_routing", "optimize_routing_batched",
           "anneal", "default_optimizer", "init_logits", "OBJECTIVES"]

#: Objectives by name; a callable ``f(split, arrays, traffic) -> (loss, metric)`` works too.
OBJECTIVES = ("mlu", "cct", "mean_fct")
#: Default learning rate of the default optimiser (Adam on logits).
DEFAULT_LEARNING_RATE = 0.1
#: Default relative log-sum-exp temperature, annealed geometrically from the first to
#: the second value over the run.
DEFAULT_TEMPERATURE = (0.05, 0.002)


@functools.lru_cache(maxsize=128)
def anneal(start: float, end: float, steps: int) -> Callable:
    """Geometric temperature schedule from ``start`` to ``end`` over ``steps`` steps.

    Cached, so equal arguments give the same schedule object (and reuse compilations).
    """
    if not (start > 0 and end > 0):
        raise ValueError(f"temperature must be > 0; got start={start}, end={end}")
    steps = max(int(steps), 1)
    return optax.exponential_decay(start, transition_steps=steps, decay_rate=end / start,
                                   end_value=min(start, end) if end < start else None)


@dataclasses.dataclass(frozen=True, eq=False)
class RoutingResult:
    """Learned routing (fields get a leading ``batch`` axis from the batched variant).

    Attributes:
      split: ``[pairs, paths]`` best split found (exactly 0 on invalid paths).
      logits: ``[pairs, paths]`` its logits (a warm start for a later run).
      objective: objective name.
      value: exact objective metric of ``split`` (MLU; seconds for ``cct``/``mean_fct``).
      mlu: exact maximum link utilisation of ``split`` (host, float64).
      loss_history: ``[steps]`` smoothed loss at each step.
      metric_history: ``[steps]`` exact metric at each step (before its update).
      best_step: step of the best iterate.
      steps: steps run.
      seconds: optimisation wall time, compilation excluded.
      compile_seconds: ahead-of-time compilation wall time (0 when a compilation for
        the same configuration and shapes was cached).
      target_step: first step whose metric reached ``target`` (-1: not reached).
      target_seconds: wall time at the end of the chunk where it was reached (nan).
      problem: the :class:`RoutingProblem` (for reports).
    """

    split: np.ndarray
    logits: np.ndarray
    objective: str
    value: Any
    mlu: Any
    loss_history: np.ndarray
    metric_history: np.ndarray
    best_step: Any
    steps: int
    seconds: float
    compile_seconds: float
    target_step: Any
    target_seconds: float
    problem: RoutingProblem = dataclasses.field(repr=False, default=None)

    def link_load(self) -> np.ndarray:
        """``[links]`` bytes/s under the learned split."""
        return self.problem.link_load(self.split)

    def report(self, baseline_split=None, **kwargs) -> str:
        """Readable report: per-link load before/after and per-pair splits."""
        from ._report import routing_report

        before = ecmp_split(self.problem) if baseline_split is None else baseline_split
        return routing_report(self.problem, self.split, before=before, **kwargs)


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Static configuration of the compiled loop (hashable)."""

    objective: Any
    temperature: Any
    events: int
    iterations: int
    per_tenant: bool


def _loss(spec: _Spec, arrays, traffic, base_load, tenant_weight, logits, k):
    arrays = arrays._replace(base_load=base_load)
    split = masked_softmax(logits, arrays.path_mask)
    temp = spec.temperature(k) if callable(spec.temperature) else spec.temperature
    tw = tenant_weight if spec.per_tenant else None
    if spec.objective == "mlu":
        if tw is None:
            return mlu_loss(arrays, split, temp, demand=traffic)
        return tenant_mlu_loss(arrays, split, temp, tw, demand=traffic)
    if spec.objective in ("cct", "mean_fct"):
        return cct_loss(arrays, split, traffic, events=spec.events,
                        iterations=spec.iterations, tenant_weight=tw,
                        reduce="max" if spec.objective == "cct" else "mean")
    out = spec.objective(split, arrays, traffic)
    return out if isinstance(out, tuple) else (out, out)


@functools.lru_cache(maxsize=64)
def _runner(spec: _Spec, optimizer, n: int, batched: bool):
    def run(arrays, traffic, base_load, tenant_weight, state):
        def body(st, _):
            logits, opt_state, best_logits, best_metric, best_step, k = st
            (loss, metric), g = jax.value_and_grad(
                lambda z: _loss(spec, arrays, traffic, base_load, tenant_weight, z, k),
                has_aux=True)(logits)
            g = jnp.where(arrays.path_mask, g, 0.0)
            better = metric < best_metric
            best_logits = jnp.where(better, logits, best_logits)
            best_metric = jnp.where(better, metric, best_metric)
            best_step = jnp.where(better, k, best_step)
            updates, opt_state = optax_update(optimizer, g, opt_state, logits)
            logits = optax.apply_updates(logits, updates)
            return (logits, opt_state, best_logits, best_metric, best_step, k + 1), (loss, metric)

        return jax.lax.scan(body, state, None, length=n)

    if batched:
        run = jax.vmap(run, in_axes=(None, 0, 0, None, 0))
    return jit(run)


def init_logits(problem: RoutingProblem, init="ecmp", seed: int = 0) -> np.ndarray:
    """Initial ``[pairs, paths]`` logits.

    Args:
      init: ``"ecmp"``: ``log(s_ecmp + 1/n_paths)``, i.e. half-way between the hashed
        ECMP split and an even spray (a pure one-hot start would have vanishing softmax
        gradients); ``"spray"``: all zeros (even split); or an array of logits (e.g. a
        previous result's ``logits``).
      seed: ECMP hash seed.
    """
    mask = problem.path_mask
    if isinstance(init, str):
        if init == "spray":
            z = np.zeros(mask.shape)
        elif init == "ecmp":
            z = np.log(ecmp_split(problem, seed) + 1.0 / problem.n_paths[:, None])
        else:
            raise ValueError(f"init must be 'ecmp', 'spray' or an array of logits; got {init!r}")
    else:
        z = np.asarray(init, np.float64)
        if z.shape[-2:] != mask.shape or not np.all(np.isfinite(np.where(mask, z, 0.0))):
            raise ValueError(f"init logits must be finite with shape [..., pairs, paths] = "
                             f"[..., {mask.shape[0]}, {mask.shape[1]}]; got {z.shape}")
    return np.where(mask, z, 0.0)


def prepare_flows(problem, objective, size, demand, tenant_weight, temperature, steps, events,
             maxmin_iterations, optimizer, learning_rate, batched):
    if not isinstance(problem, RoutingProblem):
        raise ValueError(f"problem must be a RoutingProblem (see routing_problem); got "
                         f"{type(problem).__name__}")
    if isinstance(objective, str) and objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES} or a callable; got "
                         f"{objective!r}")
    if not callable(objective) and not isinstance(objective, str):
        raise ValueError(f"objective must be a name or a callable; got {objective!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0; got {steps!r}")
    n_pairs = problem.n_pairs
    if objective in ("cct", "mean_fct"):
        if size is None:
            raise ValueError(f"objective={objective!r} needs size: [pairs] bytes per flow")
        traffic = np.asarray(size, np.float64)
        name = "size"
        check_flow_level(problem)
    elif callable(objective) and size is not None:
        traffic, name = np.asarray(size, np.float64), "size"
    else:
        traffic = problem.demand if demand is None else np.asarray(demand, np.float64)
        name = "demand"
    ok_shape = (traffic.ndim == 2 and traffic.shape[1] == n_pairs) if batched else \
        traffic.shape == (n_pairs,)
    if not ok_shape or not np.all(np.isfinite(traffic)) or np.any(traffic < 0):
        raise ValueError(f"{name} must be finite, >= 0, with shape "
                         f"{'[batch, pairs]' if batched else '[pairs]'} (pairs = {n_pairs}); "
                         f"got shape {traffic.shape}")
    per_tenant = tenant_weight is not None
    if per_tenant:
        tw = np.asarray(tenant_weight, np.float64)
        if tw.shape != (problem.n_tenants,) or np.any(tw < 0) or not np.all(np.isfinite(tw)):
            raise ValueError(f"tenant_weight must be [tenants] = ({problem.n_tenants},) "
                             f"finite weights >= 0 for {problem.tenant_names}")
    else:
        tw = np.ones(problem.n_tenants)
    if isinstance(temperature, tuple):
        if len(temperature) != 2:
            raise ValueError("temperature must be a float, a (start, end) pair or a schedule")
        temperature = anneal(float(temperature[0]), float(temperature[1]), int(steps))
    elif not callable(temperature):
        temperature = float(temperature)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0; got {temperature}")
    if events is None:
        events = n_pairs
    if isinstance(events, bool) or not isinstance(events, (int, np.integer)) or events < 1:
        raise ValueError(f"events must be a positive integer; got {events!r}")
    if not isinstance(maxmin_iterations, (int, np.integer)) or maxmin_iterations < 1:
        raise ValueError(f"maxmin_iterations must be a positive integer; got "
                         f"{maxmin_iterations!r}")
    if optimizer is None:
        optimizer = default_optimizer(check_learning_rate(learning_rate), int(steps))
    spec = _Spec(objective=objective, temperature=temperature, events=int(events),
                 iterations=int(maxmin_iterations), per_tenant=per_tenant)
    return spec, optimizer, traffic, tw


def check_learning_rate(learning_rate) -> float:
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float,
                                                                         np.floating)) \
            or not math.isfinite(learning_rate) or learning_rate <= 0:
        raise ValueError(f"learning_rate must be a finite number > 0; got {learning_rate!r}")
    return float(learning_rate)


def _check_every(check_every) -> int:
    if isinstance(check_every, bool) or not isinstance(check_every, (int, np.integer)) \
            or check_every < 1:
        raise ValueError(f"check_every must be an integer >= 1 (steps per compiled chunk); "
                         f"got {check_every!r}")
    return int(check_every)


@functools.lru_cache(maxsize=32)
def default_optimizer(learning_rate: float = 0.1, steps: int = 500):
    """Adam whose learning rate decays geometrically to a tenth over ``steps``.

    The decay matters on a min-max: at a constant rate, the iterates near the optimum
    keep jumping between near-critical links once the temperature is low (excursions of
    tens of percent on a 1,024-host fat-tree); decayed, they settle within 1%.
    Cached, so equal arguments give the same object (and reuse compilations).
    """
    learning_rate = check_learning_rate(learning_rate)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0; got {steps!r}")
    schedule = optax.exponential_decay(learning_rate, transition_steps=max(int(steps), 1),
                                       decay_rate=0.1)
    return optax.adam(schedule)


_COMPILED: dict = {}


def _compiled(spec, optimizer, n, batched, args):
    """Ahead-of-time compiled chunk, cached by configuration and argument shapes.

    Returns ``(executable, compile_seconds)`` (0 on a cache hit).
    """
    leaves, tree = jax.tree_util.tree_flatten(args)
    key = (spec, optimizer, n, batched, tree,
           tuple((np.shape(a), jnp.result_type(a)) for a in leaves))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit, 0.0
    t0 = time.perf_counter()
    exe = _runner(spec, optimizer, n, batched).lower(*args).compile()
    if len(_COMPILED) > 64:
        _COMPILED.clear()
    _COMPILED[key] = exe
    return exe, time.perf_counter() - t0


def _block(x):
    return jax.tree_util.tree_map(lambda a: a.block_until_ready(), x)


def _check_plateau(plateau):
    """``None`` or a ``(window, rel_tol)`` pair: window >= 1 steps, rel_tol >= 0."""
    if plateau is None:
        return None
    ok = isinstance(plateau, tuple) and len(plateau) == 2
    if ok:
        window, tol = plateau
        ok = (isinstance(window, (int, np.integer)) and not isinstance(window, bool)
              and window >= 1 and isinstance(tol, (int, float)) and math.isfinite(tol)
              and tol >= 0)
    if not ok:
        raise ValueError(f"plateau must be None or (window >= 1 steps, rel_tol >= 0); got "
                         f"{plateau!r}")
    return int(plateau[0]), float(plateau[1])


def _plateaued(hist, window: int, tol: float) -> bool:
    """The best metric so far improved by at most ``tol`` (relative) over the last
    ``window`` steps, for every row."""
    if hist.shape[-1] <= window:
        return False
    best = np.minimum.accumulate(hist, axis=-1)
    old, new = best[..., -window - 1], best[..., -1]
    gain = (old - new) / np.where(np.abs(new) > 0, np.abs(new), 1.0)
    return bool(np.all(gain <= tol))


def _drive(spec, optimizer, problem, traffic, base, tw, logits0, steps, check_every,
           target, batched, plateau=None):
    """Compiles the chunk once, runs it until ``steps``, ``target`` or a ``plateau``
    of the best metric; host loop."""
    arrays = problem.arrays()
    dtype = arrays.capacity.dtype
    traffic = jnp.asarray(traffic, dtype)
    base = jnp.asarray(base, dtype)
    tw = jnp.asarray(tw, dtype)
    logits = jnp.asarray(logits0, dtype)
    if batched and logits.ndim == 2:
        logits = jnp.broadcast_to(logits, (traffic.shape[0],) + logits.shape)
    lead = logits.shape[:-2]
    init_opt = jax.vmap(optimizer.init) if batched else optimizer.init
    state = (logits, init_opt(logits), logits, jnp.full(lead, jnp.inf, dtype),
             jnp.zeros(lead, jnp.int32), jnp.zeros(lead, jnp.int32))
    if steps == 0:
        return state, np.zeros(lead + (0,)), np.zeros(lead + (0,)), 0.0, 0.0, -1, math.nan, 0
    n = steps if target is None and plateau is None else min(check_every, steps)
    n_chunks = -(-steps // n)
    compiled, compile_s = _compiled(spec, optimizer, n, batched,
                                    (arrays, traffic, base, tw, state))
    losses, metrics = [], []
    run_s, target_step, target_s = 0.0, -1, math.nan
    for _ in range(n_chunks):
        t0 = time.perf_counter()
        state, (loss, metric) = compiled(arrays, traffic, base, tw, state)
        _block((state, loss, metric))
        run_s += time.perf_counter() - t0
        losses.append(np.asarray(loss))
        metrics.append(np.asarray(metric))
        if target is not None:
            hist = np.concatenate(metrics, axis=-1)
            hit = hist <= target
            if np.all(hit.any(axis=-1)):
                first = np.argmax(hit, axis=-1)
                target_step = first if batched else int(first)
                target_s = run_s
                break
        if plateau is not None and _plateaued(np.concatenate(metrics, axis=-1), *plateau):
            break
    loss_h = np.concatenate(losses, axis=-1)
    metric_h = np.concatenate(metrics, axis=-1)
    return state, loss_h, metric_h, run_s, compile_s, target_step, target_s, loss_h.shape[-1]


def _finish(problem, spec, state, loss_h, metric_h, run_s, compile_s, target_step,
            target_s, steps_run, traffic, base, by_size, batched):
    logits, _, best_logits, best_metric, best_step, _ = state
    mask = problem.path_mask
    if steps_run == 0:
        best_logits = logits
    split = np.asarray(masked_softmax(jnp.asarray(best_logits), jnp.asarray(mask)), np.float64)
    split = np.where(mask, split, 0.0)
    split /= split.sum(axis=-1, keepdims=True)
    by_demand = spec.objective == "mlu" or (callable(spec.objective) and not by_size)
    if batched:
        mlu = np.array([problem.mlu(s, t if by_demand else None, b if by_demand else None)
                        for s, t, b in zip(split, traffic, base)])
    else:
        mlu = problem.mlu(split, traffic if by_demand else None)
    if steps_run == 0:
        value = mlu if spec.objective == "mlu" else np.nan
    else:
        value = np.asarray(best_metric, np.float64) if batched else float(best_metric)
    name = spec.objective if isinstance(spec.objective, str) else getattr(
        spec.objective, "__name__", "custom")
    return RoutingResult(
        split=split, logits=np.asarray(best_logits, np.float64), objective=name,
        value=value, mlu=mlu, loss_history=loss_h, metric_history=metric_h,
        best_step=np.asarray(best_step) if batched else int(best_step), steps=int(steps_run),
        seconds=run_s, compile_seconds=compile_s, target_step=target_step,
        target_seconds=target_s, problem=problem)


def optimize_routing(problem: RoutingProblem, *, objective="mlu", size=None, demand=None,
                     optimizer=None, learning_rate: float = DEFAULT_LEARNING_RATE,
                     steps: int = 500, init="ecmp", temperature=DEFAULT_TEMPERATURE,
                     tenant_weight=None, events: int | None = None,
                     maxmin_iterations: int = 32, target: float | None = None,
                     check_every: int = 25, plateau: tuple | None = None,
                     seed: int = 0) -> RoutingResult:
    """Learns per-(pair, path) routing weights by gradient descent with optax.

    Args:
      problem: a :class:`RoutingProblem` (:func:`routing_problem`).
      objective: ``"mlu"`` (smooth maximum link utilisation), ``"cct"`` (collective
        completion time under max-min sharing, seconds), ``"mean_fct"`` (mean flow
        completion time under max-min sharing), or a callable
        ``f(split, arrays, traffic) -> loss`` or ``-> (loss, metric)``.
      size: ``[pairs]`` bytes per flow (``cct``/``mean_fct``, and a callable objective
        such as :func:`fluid_objective` receives it as ``traffic``; flows start at 0).
      demand: ``[pairs]`` bytes/s replacing ``problem.demand`` (``mlu``).
      optimizer: an optax GradientTransformation (default :func:`default_optimizer`:
        Adam, learning rate decayed from ``learning_rate`` to a tenth over ``steps``).
      learning_rate: learning rate of the default optimiser.
      steps: maximum number of optimisation steps.
      init: ``"ecmp"`` (warm start from hashed ECMP), ``"spray"`` or logits
        (see :func:`init_logits`).
      temperature: relative log-sum-exp temperature for ``mlu``: a float, a
        ``(start, end)`` pair annealed geometrically over ``steps``, or a schedule.
      tenant_weight: ``[tenants]`` weights: the loss becomes ``sum_t w_t obj_t`` with the
        per-tenant MLU or completion time (see :mod:`._objectives`).
      events: completion events unrolled for ``cct``/``mean_fct`` (default: one per
        pair, exact).
      maxmin_iterations: max-min solver iterations per event (>= bottleneck depth for
        exactness).
      target: stop once the exact metric is ``<= target`` (checked every
        ``check_every`` steps).
      check_every: steps per compiled chunk when ``target`` or ``plateau`` is set
        (``steps`` is then rounded up to a multiple of it).
      plateau: ``(window, rel_tol)``: stop once the best exact metric improved by at
        most ``rel_tol`` (relative) over the last ``window`` steps, checked every
        ``check_every`` steps.  A stopping rule that needs no knowledge of the optimum
        (``result.steps`` and ``result.seconds`` say when it fired).
      seed: ECMP hash seed for ``init="ecmp"``.

    Returns:
      :class:`RoutingResult` (the best iterate by the exact metric).

    Raises:
      ValueError: on bad arguments (before any compilation).
    """
    _check_every(check_every)
    plateau = _check_plateau(plateau)
    spec, optimizer, traffic, tw = prepare_flows(
        problem, objective, size, demand, tenant_weight, temperature, steps, events,
        maxmin_iterations, optimizer, learning_rate, batched=False)
    logits0 = init_logits(problem, init, seed)
    out = _drive(spec, optimizer, problem, traffic, problem.base_load, tw, logits0,
                 int(steps), int(check_every), target, batched=False, plateau=plateau)
    return _finish(problem, spec, *out, traffic=traffic, base=problem.base_load,
                   by_size=size is not None, batched=False)


def optimize_routing_batched(problem: RoutingProblem, demands, *, base_loads=None,
                             objective="mlu", optimizer=None,
                             learning_rate: float = DEFAULT_LEARNING_RATE,
                             steps: int = 500, init="ecmp",
                             temperature=DEFAULT_TEMPERATURE, tenant_weight=None,
                             events: int | None = None, maxmin_iterations: int = 32,
                             target=None, check_every: int = 25,
                             seed: int = 0) -> RoutingResult:
    """:func:`optimize_routing` for many traffic matrices at once (``vmap``).

    Args:
      demands: ``[batch, pairs]`` bytes/s (``mlu``) or bytes (``cct``/``mean_fct``),
        one traffic matrix per row, over ``problem``'s candidate paths.
      base_loads: optional ``[batch, links]`` fixed load of each row (bytes/s; from
        :meth:`RoutingProblem.flow_traffic` for aggregated problems, whose access-link
        loads depend on the matrix); default ``problem.base_load`` for every row.
      target: scalar or ``[batch]``; the run stops when every row has reached it.
      Others: as :func:`optimize_routing`.

    Returns:
      :class:`RoutingResult` whose arrays have a leading ``batch`` axis.
    """
    is_cct = objective in ("cct", "mean_fct")
    _check_every(check_every)
    spec, optimizer, traffic, tw = prepare_flows(
        problem, objective, demands if is_cct else None, None if is_cct else demands,
        tenant_weight, temperature, steps, events, maxmin_iterations, optimizer,
        learning_rate, batched=True)
    n_batch = traffic.shape[0]
    if base_loads is None:
        base = np.broadcast_to(problem.base_load, (n_batch, problem.n_links))
    else:
        base = np.asarray(base_loads, np.float64)
        if base.shape != (n_batch, problem.n_links) or np.any(base < 0) or \
                not np.all(np.isfinite(base)):
            raise ValueError(f"base_loads must be finite, >= 0, [batch, links] = "
                             f"({n_batch}, {problem.n_links}); got {base.shape}")
    logits0 = init_logits(problem, init, seed)
    out = _drive(spec, optimizer, problem, traffic, base, tw, logits0, int(steps),
                 int(check_every), None if target is None else np.asarray(target)[..., None],
                 batched=True)
    return _finish(problem, spec, *out, traffic=traffic, base=base, by_size=is_cct,
                   batched=True)
