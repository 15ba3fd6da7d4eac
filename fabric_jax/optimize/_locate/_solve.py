"""The inverse: :func:`locate` and :func:`locate_batch`, the whole descent as one jitted
``lax.scan`` (Adam on the capacity factors' logits and the losses, annealed soft-min)
followed by the single-link refit (:mod:`fabric_jax.optimize._locate`)."""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ...compiling import jit
from ._forward import exact_rates, forward, path_split, scaled_rates
from ._observation import Observation, load_observation, parse_observation
from ._problem import (COUNTER_SIGMA, DEFAULT_STEPS, DETECT_LOSS, LOSS_MAX, LOSS_SCALE,
                       LOSS_SIGMA, PHI_MIN, PRESET_ROUTING, REFIT_CANDIDATES, REFIT_GRID,
                       TAU_END, TAU_START, LocateProblem, locate_problem)
from ._result import LocateResult, rank_by_score
from .._optax import optax_update


def locate(topology, workload, observed, preset: str = "roce", *, routing: str | None = None,
           steps: int = DEFAULT_STEPS, learning_rate: float = 0.1, sparsity: float = 1.0,
           detect: float | None = None, seed: int = 0, dt: float = 1e-6,
           problem: LocateProblem | None = None, lossy: bool | None = None) -> LocateResult:
    """Ranks links by estimated capacity factor from observed completion times and
    counters, by gradient descent through the flow-level model
    (:mod:`fabric_jax.optimize._locate`).

    Args:
      topology: the :class:`fabric_jax.Topology`.
      workload: the flows that ran (:func:`locate_problem`).
      observed: an :class:`Observation`, a dict in the JSON format of
        :func:`parse_observation`, or the path of such a JSON file.
      preset: decides the routing when ``routing`` is ``None``
        (:data:`PRESET_ROUTING`).
      routing: ``"ecmp"``, ``"spray"`` or ``"adaptive"``.
      steps: Adam steps (each one model evaluation with its gradient).
      learning_rate: Adam's step on the logits of ``phi``.
      sparsity: weight ``lambda`` of the prior ``sum_l (1 - phi_l)`` (chi-square units).
      detect: reporting threshold on ``1 - phi`` (default ``max(0.05, 3 noise)``).
      seed: ECMP hash seed (must be the run's).
      dt: the model's time step, s (counters sampled faster are refused).
      problem: a prebuilt :class:`LocateProblem` (then topology/workload are not used).
      lossy: also fit a loss fraction per link (lossy links); default: when the
        observation holds a drop counter with a non-zero sample.

    Returns:
      :class:`LocateResult`.

    Raises:
      ValueError: before any solve: unknown preset or routing; an observation that does
        not match (unknown flows, ranks or links, NaN, negative or non-monotone values,
        a sampling period below ``dt``).
    """
    t0 = time.perf_counter()
    if preset not in PRESET_ROUTING:
        raise ValueError(f"preset must be one of {sorted(PRESET_ROUTING)}; got {preset!r}")
    routing = PRESET_ROUTING[preset] if routing is None else routing
    if problem is None:
        problem = locate_problem(topology, workload, routing=routing, seed=seed, dt=dt)
    prob = problem
    if isinstance(observed, (str, Path)):
        obs = load_observation(observed, prob)
    elif isinstance(observed, dict):
        obs = parse_observation(observed, prob)
    elif isinstance(observed, Observation):
        obs = observed
    else:
        raise ValueError("observed must be an Observation, a dict or a JSON file path")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1; got {steps!r}")
    return locate_batch(prob, [obs], steps=steps, learning_rate=learning_rate,
                        sparsity=sparsity, detect=detect, lossy=lossy, _t0=t0)[0]


def _obs_arrays(obs: Observation) -> dict:
    drop = obs.dropped if obs.dropped is not None else np.full(obs.bytes.shape, np.nan)
    return dict(
        f_idx=np.asarray(obs.flow_idx, np.int32), f_log=np.log(obs.flow_finish),
        r_log=np.log(obs.rank_finish), l_idx=np.asarray(obs.link_idx, np.int32),
        bytes=np.nan_to_num(obs.bytes), b_ok=np.isfinite(obs.bytes),
        cong=np.nan_to_num(obs.congested), c_ok=np.isfinite(obs.congested),
        drop=np.nan_to_num(drop), d_ok=np.isfinite(drop),
        sig=np.asarray(max(obs.noise, 0.01)))


def _has_drops(obs: Observation) -> bool:
    return obs.dropped is not None and bool(np.any(np.nan_to_num(obs.dropped) > 0))


def locate_batch(problem: LocateProblem, observations: list, *, steps: int = DEFAULT_STEPS,
                 learning_rate: float = 0.1, sparsity: float = 1.0,
                 detect: float | None = None, lossy: bool | None = None, _t0=None) -> list:
    """:func:`locate` for many observations of one problem at once (``vmap`` over the
    observations; they must share their layout: the same observed flows, ranks, links
    and sampling instants).  Returns one :class:`LocateResult` per observation (each
    ``wall_time`` is the batch's over its size).  ``lossy`` (default: when any
    observation holds a non-zero drop counter) fits a loss per link too."""
    t0 = time.perf_counter() if _t0 is None else _t0
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1; got {steps!r}")
    first = observations[0]
    has = (bool(first.flow_idx.size), bool(first.rank_idx.size), bool(first.link_idx.size))
    for o in observations[1:]:
        if not (np.array_equal(o.flow_idx, first.flow_idx)
                and np.array_equal(o.rank_idx, first.rank_idx)
                and np.array_equal(o.link_idx, first.link_idx)
                and np.array_equal(o.times, first.times)):
            raise ValueError("locate_batch: observations must share their layout (flows, "
                             "ranks, links, sampling instants)")
    if lossy is None:
        lossy = any(_has_drops(o) for o in observations)
    drops = bool(lossy) and all(o.dropped is not None for o in observations)
    run = _solver(problem, has + (bool(lossy), drops), tuple(np.round(first.times, 15)),
                  tuple(first.rank_idx.tolist()), int(steps), float(learning_rate))
    dtype = jnp.result_type(float)
    stacked = {k: np.stack([_obs_arrays(o)[k] for o in observations])
               for k in _obs_arrays(first)}
    stacked = {k: jnp.asarray(v, dtype if v.dtype.kind == "f" else v.dtype)
               for k, v in stacked.items()}
    (theta, u), value, refits = jax.vmap(run, in_axes=(0, None))(
        stacked, jnp.asarray(sparsity, dtype))
    phis = np.asarray(PHI_MIN + (1 - PHI_MIN) * jax.nn.sigmoid(theta), float)
    refits = ([None] * len(phis) if refits is None
              else list(zip(*(np.asarray(a) for a in refits))))
    losses = np.asarray(LOSS_SCALE * u, float) if lossy else [None] * len(phis)
    wall = (time.perf_counter() - t0) / len(observations)
    out = []
    for phi, loss, v, o, rf in zip(phis, losses, np.asarray(value), observations, refits):
        thr = max(0.05, 3 * o.noise) if detect is None else float(detect)
        if loss is None:
            order, fault, conf = rank_by_score(1.0 - phi, thr)
            thr_loss = float("nan")
            if rf is not None:
                # the refitted candidates first, best single-link fit first (ties:
                # the descent's order), each at its refitted factor
                cand, sc, g = rf
                by = np.argsort(sc, kind="stable")
                cand, g = cand[by], g[by]
                order = np.concatenate([cand, order[~np.isin(order, cand)]])
                phi = phi.copy()
                phi[cand] = g
        else:
            thr_loss = DETECT_LOSS if drops else thr
            order, fault, conf = rank_by_score(np.maximum((1.0 - phi) / thr, loss / thr_loss),
                                             1.0)
        n_eval = int(steps) + (0 if rf is None else 2 * REFIT_GRID * len(rf[0]))
        out.append(LocateResult(order, phi, bool(fault), float(conf), thr, n_eval, wall,
                                "gradient", float(v), loss, thr_loss))
    return out


_SOLVERS: dict = {}


def _solver(prob: LocateProblem, has, times, ranks, steps, learning_rate):
    """The whole descent as one jitted ``lax.scan`` (cached per problem and observation
    layout, so many observations of one problem share a compilation)."""
    import optax

    key = (id(prob), has, times, ranks, steps, learning_rate)
    hit = _SOLVERS.get(key)
    if hit is not None and hit[0] is prob:
        return hit[1]
    lossy = has[3]
    misfit, cap0 = _misfit_model(prob, has, times, ranks)

    def loss(params, tau, obs, sparsity):
        theta, u = params
        phi = PHI_MIN + (1 - PHI_MIN) * jax.nn.sigmoid(theta)
        p_loss = LOSS_SCALE * u if lossy else None
        prior = jnp.sum(1.0 - phi) + (jnp.sum(p_loss) if lossy else 0.0)
        return misfit(phi, p_loss, tau, obs) + sparsity * prior

    opt = optax.adam(learning_rate)
    grad = jax.value_and_grad(loss)

    def run(obs, sparsity):
        theta = jnp.full((prob.n_links,), 4.0, cap0.dtype)
        theta = (theta, jnp.zeros((prob.n_links,) if lossy else (0,), cap0.dtype))

        def step(carry, i):
            theta, state = carry
            frac = i.astype(cap0.dtype) / max(steps - 1, 1)
            tau = TAU_START * (TAU_END / TAU_START) ** frac
            value, g = grad(theta, tau, obs, sparsity)
            g = jax.tree_util.tree_map(lambda a: jnp.where(jnp.isfinite(a), a, 0.0), g)
            upd, state = optax_update(opt, g, state, theta)
            th, u = optax.apply_updates(theta, upd)
            return ((th, jnp.clip(u, 0.0, LOSS_MAX / LOSS_SCALE)), state), value

        (theta, _), values = jax.lax.scan(step, (theta, opt.init(theta)),
                                          jnp.arange(steps))
        if lossy:
            return theta, values[-1], None
        return theta, values[-1], _refit(prob, misfit, theta[0], obs, sparsity)

    run = jit(run)
    _SOLVERS.clear()          # one problem at a time (bounded memory)
    _SOLVERS[key] = (prob, run)
    return run


def _misfit_model(prob: LocateProblem, has, times, ranks):
    """``(misfit, cap0)``: ``misfit(phi, p_loss, tau, obs)`` the chi-square of the log
    completion times plus the counters' robust residuals under the fair-share model at
    capacity factors ``phi`` and losses ``p_loss``; ``cap0`` the nominal capacities."""
    has_f, has_r, has_c, lossy, has_d = has
    times = np.asarray(times, float)
    cap0 = jnp.asarray(prob.capacity, jnp.result_type(float))
    r_idx = np.asarray(ranks, np.int64)
    rank_of = jnp.asarray(np.searchsorted(r_idx, prob.src)) if has_r else None
    rank_valid = jnp.asarray(np.isin(prob.src, r_idx)) if has_r else None
    n_ranks = max(int(r_idx.size), 1)
    # nominal rates: exact max-min at nominal capacities (the model is exact there)
    rate0 = exact_rates(prob, np.ones(prob.n_links))[0]
    t_row = jnp.asarray(times, cap0.dtype)[None, :]

    def predict(phi, p_loss, tau):
        cap = cap0 * phi
        split = path_split(prob, cap, tau)
        rates = scaled_rates(prob, cap, split, rate0, tau)
        return forward(prob, rates, split, cap, times, loss=p_loss)

    def misfit(phi, p_loss, tau, obs):
        sig = obs["sig"]
        fin, by, cg, dr = predict(phi, p_loss, tau)
        chi = 0.0
        if has_f:
            chi = chi + jnp.sum((jnp.log(fin[obs["f_idx"]]) - obs["f_log"]) ** 2)
        if has_r:
            rf = jax.ops.segment_max(jnp.where(rank_valid, fin, 0.0), rank_of,
                                     num_segments=n_ranks)
            chi = chi + jnp.sum((jnp.log(rf) - obs["r_log"]) ** 2)
        rob = 0.0
        if has_c:
            li = obs["l_idx"]
            rb = (by[li] - obs["bytes"]) / (cap0[li][:, None] * t_row)
            rc = (cg[li] - obs["cong"]) / t_row
            # robust (Cauchy) terms: where the fair-share model cannot follow max-min's
            # redistribution the residual is large, and must not outvote the rest
            sc = jnp.maximum(sig, COUNTER_SIGMA)
            rob = (jnp.sum(jnp.where(obs["b_ok"], jnp.log1p((rb / sc) ** 2), 0.0))
                   + jnp.sum(jnp.where(obs["c_ok"], jnp.log1p((rc / sc) ** 2), 0.0)))
            if has_d:
                # a port's drops over the bytes it carried (observed where given, else
                # the model's) estimate its loss directly, whatever the rates; the
                # residual is pseudo-Huber, not Cauchy: a lossy link starts 15 sigma away
                # (1.5 % at p = 0), where a Cauchy gradient has faded and the flow times'
                # terms of the anneal's first steps hold p at 0 (tried at 1,024 hosts)
                seen = jnp.where(obs["b_ok"], obs["bytes"], by[li])
                carried = jnp.maximum(seen, 1e-3 * cap0[li][:, None] * t_row)
                rd = (p_loss[li][:, None] * seen - obs["drop"]) / carried / LOSS_SIGMA
                rob = rob + jnp.sum(jnp.where(obs["d_ok"],
                                              2.0 * (jnp.sqrt(1.0 + rd ** 2) - 1.0), 0.0))
        return chi / sig ** 2 + rob

    return misfit, cap0


def _refit(prob: LocateProblem, misfit, theta, obs, sparsity):
    """Single-link hypotheses for the REFIT_CANDIDATES most degraded links: each
    alone at its best factor (every other link healthy), scored by the misfit plus
    the prior at the hard min; returns ``(candidates, scores, factors)``."""
    ones = jnp.ones_like(theta)
    cand = jax.lax.top_k(-theta, min(REFIT_CANDIDATES, prob.n_links))[1]

    def score(link, g):
        return misfit(ones.at[link].set(g), None, TAU_END, obs) + sparsity * (1.0 - g)

    def fit(link):
        def best(log_g):          # (score, log factor) of the best on a grid
            sc = jax.lax.map(lambda x: score(link, jnp.exp(x)), log_g)
            return jnp.min(sc), log_g[jnp.argmin(sc)]
        # log-spaced factors in [PHI_MIN, 1], then a finer grid around the best
        coarse = jnp.linspace(jnp.log(PHI_MIN), 0.0, REFIT_GRID)
        step = coarse[1] - coarse[0]
        _, centre = best(coarse)
        sc, lg = best(jnp.minimum(centre + jnp.linspace(-step, step, REFIT_GRID), 0.0))
        return sc, jnp.exp(lg)

    scores, factors = jax.lax.map(fit, cand)
    return cand, scores, factors
