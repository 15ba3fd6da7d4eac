"""The baselines: network tomography (non-negative least squares over the path-link
incidence) and vote counting over the paths of slow flows
(:mod:`fabric_jax.optimize._locate`)."""

from __future__ import annotations

import time

import numpy as np

from ._forward import truth
from ._observation import Observation
from ._problem import LocateProblem
from ._result import LocateResult, rank_by_score


def _nominal_log_slowdown(prob: LocateProblem, obs: Observation):
    """Per observed flow: ``log(T_obs / T_nominal)`` and its flows' link rows."""
    fin0 = np.asarray(truth(prob, np.ones(prob.n_links))[0], float)
    return np.log(obs.flow_finish / fin0[obs.flow_idx])


def _flow_link_matrix(prob: LocateProblem, flows):
    import scipy.sparse as sp
    w = prob.split0[prob.e_flow, prob.e_path]
    a = sp.csr_matrix((w, (prob.e_flow, prob.e_link)), shape=(prob.n_flows, prob.n_links))
    a.sum_duplicates()
    a.data = np.minimum(a.data, 1.0)
    return a[flows]


def tomography(problem: LocateProblem, observed: Observation, *,
               detect: float | None = None) -> LocateResult:
    """Baseline: network tomography by non-negative least squares.

    Each observed flow's log slowdown against the nominal model, ``y_f = log(T_f /
    T_f^0)``, is written as ``sum_l A_lf x_l`` with ``x_l >= 0`` a per-link slowdown
    (``A`` the path-link incidence with split weights, the routing at nominal
    capacities); ``scipy.optimize.lsq_linear`` with bounds ``[0, inf)``.  Links ranked
    by ``x``; a fault is reported when ``1 - exp(-x_max) > detect``.  Per-flow
    observations only (ranks and counters are not used).
    """
    from scipy.optimize import lsq_linear

    t0 = time.perf_counter()
    if observed.flow_idx.size == 0:
        raise ValueError("tomography needs per-flow completion times (observed.flows)")
    y = _nominal_log_slowdown(problem, observed)
    a = _flow_link_matrix(problem, observed.flow_idx)
    sol = lsq_linear(a, y, bounds=(0.0, np.inf), lsmr_tol="auto", max_iter=100, tol=1e-6)
    x = np.maximum(sol.x, 0.0)
    deg = 1.0 - np.exp(-x)
    detect = max(0.05, 3 * observed.noise) if detect is None else float(detect)
    order, fault, conf = rank_by_score(deg, detect)
    return LocateResult(order, 1.0 - deg, bool(fault), float(conf), detect, 1,
                        time.perf_counter() - t0, "tomography", float(sol.cost))


def vote_count(problem: LocateProblem, observed: Observation, *,
               threshold: float | None = None, detect: float = 0.5) -> LocateResult:
    """Baseline: vote counting over the paths of slow flows.

    A flow is slow when ``log(T_f / T_f^0) > threshold`` (default ``max(0.05, 3
    noise)``); each slow flow votes for every link on its paths (split-weighted); a
    link's score is its votes over the flows through it (the fraction of its flows that
    are slow), ties broken by the raw votes.  ``factor`` holds ``1 - score``; a fault is
    reported when the top score exceeds ``detect``.
    """
    t0 = time.perf_counter()
    if observed.flow_idx.size == 0:
        raise ValueError("vote counting needs per-flow completion times (observed.flows)")
    thr = max(0.05, 3 * observed.noise) if threshold is None else float(threshold)
    y = _nominal_log_slowdown(problem, observed)
    a = _flow_link_matrix(problem, observed.flow_idx)
    slow = (y > thr).astype(float)
    votes = np.asarray(a.T @ slow).ravel()
    through = np.asarray(a.sum(axis=0)).ravel()
    score = np.where(through > 0, votes / np.maximum(through, 1e-12), 0.0)
    key = score + 1e-6 * votes / max(votes.max(), 1.0)
    order, fault, conf = rank_by_score(key, detect)
    return LocateResult(order, 1.0 - score, bool(fault), float(conf), detect, 1,
                        time.perf_counter() - t0, "vote", float("nan"))
