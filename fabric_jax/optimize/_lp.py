"""Exact baseline: minimum maximum link utilisation as a linear program (HiGHS).

Over the same candidate paths as the learned routing, with ``x_pk`` the fraction of
pair ``p``'s demand ``d_p`` on its path ``k``::

    minimise    t
    subject to  (b_l + sum_{p,k} d_p n_{lpk} x_pk) / c_l <= t   for every link with c_l > 0
                sum_k x_pk = 1,  x_pk >= 0                        for every pair
                x_pk = 0                                         on invalid paths

where ``n_{lpk}`` counts link ``l`` on path ``k`` of ``p`` and ``b_l`` is the fixed
``base_load``.  Pairs with one valid path or no demand are constants, not variables.
Solved with ``scipy.optimize.linprog(method="highs")`` on sparse matrices (HiGHS:
Huangfu & Hall, Math. Prog. Comp. 2018).  This is the multi-commodity-flow optimum
restricted to the candidate paths (path formulation; Fortz & Thorup's "MLU" objective).

:func:`solve_max_min_lp` gives the max-min fair optimum over routings (elastic flows,
one LP per bottleneck level), for small instances.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import scipy.optimize
import scipy.sparse as sp

from ._problem import RoutingProblem
from ._baselines import spray_split

__all__ = ["LPResult", "MaxMinLPResult", "solve_max_min_lp", "solve_mlu_lp"]


@dataclasses.dataclass(frozen=True, eq=False)
class LPResult:
    """Optimal min-MLU routing over the candidate paths.

    Attributes:
      mlu: optimal maximum link utilisation.
      split: ``[pairs, paths]`` an optimal split.
      link_load: ``[links]`` bytes/s under that split.
      seconds: wall time of building the sparse matrices and solving.
      solve_seconds: wall time of ``linprog`` alone.
      n_variables: LP columns.
      n_constraints: LP rows.
      status: ``linprog`` status (0 = optimal).
      message: ``linprog`` message.
    """

    mlu: float
    split: np.ndarray
    link_load: np.ndarray
    seconds: float
    solve_seconds: float
    n_variables: int
    n_constraints: int
    status: int
    message: str


#: HiGHS methods accepted by :func:`solve_mlu_lp` (scipy names).
LP_METHODS = ("highs", "highs-ds", "highs-ipm")


def solve_mlu_lp(problem: RoutingProblem, demand=None, *, method: str = "highs",
                 time_limit: float | None = None) -> LPResult:
    """Minimum-MLU routing over ``problem``'s candidate paths (exact, HiGHS).

    Args:
      problem: the routing problem.
      demand: optional ``[pairs]`` bytes/s replacing ``problem.demand``.
      method: ``"highs"`` (scipy lets HiGHS choose; dual simplex in practice),
        ``"highs-ds"`` or ``"highs-ipm"`` (interior point with crossover: much faster on
        large instances, e.g. 37 s instead of over 20 min on a 1,024-host fat-tree).
      time_limit: optional HiGHS time limit, seconds.

    Returns:
      :class:`LPResult`.

    Raises:
      ValueError: bad demand; RuntimeError if HiGHS fails (status != 0).
    """
    if method not in LP_METHODS:
        raise ValueError(f"method must be one of {LP_METHODS}; got {method!r}")
    t0 = time.perf_counter()
    if demand is not None:
        problem = problem.with_demand(demand)
    d = problem.demand
    cap = problem.capacity
    L = problem.n_links
    inv = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), 0.0)
    mask = problem.path_mask
    free_pair = (problem.n_paths > 1) & (d > 0)
    # Constants: base load plus the pairs that have no choice (spray = their only path).
    spray = spray_split(problem)
    const = problem.link_load(spray, np.where(free_pair, 0.0, d))
    if np.any((const > 0) & (cap <= 0)):
        raise ValueError("load on a zero-capacity link that no routing can avoid; check "
                         "capacity and base_load")
    const_u = const * inv

    pair_v, path_v = np.nonzero(mask & free_pair[:, None])
    n_var = pair_v.size
    var_of = np.full(mask.shape, -1, np.int64)
    var_of[pair_v, path_v] = np.arange(n_var)
    hop = problem.hop_mask[pair_v, path_v]                      # [V, H]
    lk = problem.links[pair_v, path_v]                          # [V, H]
    rows_l = lk[hop]
    cols = np.broadcast_to(np.arange(n_var)[:, None], hop.shape)[hop]
    vals = (d[pair_v][:, None] * np.ones(hop.shape))[hop] * inv[rows_l]
    used = np.zeros(L, bool)
    used[rows_l] = True
    used &= cap > 0
    row_of = np.full(L, -1, np.int64)
    link_rows = np.flatnonzero(used)
    row_of[link_rows] = np.arange(link_rows.size)
    keep = row_of[rows_l] >= 0
    n_rows = link_rows.size
    # Utilisation rows plus the -t column; duplicate (link, path) entries add up.
    a_ub = sp.coo_array(
        (np.concatenate([vals[keep], -np.ones(n_rows)]),
         (np.concatenate([row_of[rows_l[keep]], np.arange(n_rows)]),
          np.concatenate([cols[keep], np.full(n_rows, n_var)]))),
        shape=(n_rows, n_var + 1)).tocsr()
    b_ub = -const_u[link_rows]
    free_idx = np.flatnonzero(free_pair)
    eq_row = np.full(problem.n_pairs, -1, np.int64)
    eq_row[free_idx] = np.arange(free_idx.size)
    a_eq = sp.csr_array((np.ones(n_var), (eq_row[pair_v], np.arange(n_var))),
                        shape=(free_idx.size, n_var + 1))
    b_eq = np.ones(free_idx.size)
    c = np.zeros(n_var + 1)
    c[-1] = 1.0
    # t is at least the utilisation of links no variable touches.
    t_low = float(np.max(np.where(used, 0.0, const_u), initial=0.0))
    bounds = np.zeros((n_var + 1, 2))
    bounds[:, 1] = np.inf
    bounds[-1] = (t_low, np.inf)
    options = {} if time_limit is None else {"time_limit": float(time_limit)}
    t1 = time.perf_counter()
    if n_var:
        res = scipy.optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq,
                                     bounds=bounds, method=method, options=options)
        solve_s = time.perf_counter() - t1
        if res.status != 0:
            raise RuntimeError(f"HiGHS did not solve the MLU LP: {res.message}")
        x = np.maximum(res.x[:n_var], 0.0)
        status, message = int(res.status), str(res.message)
    else:
        x, solve_s, status, message = np.zeros(0), 0.0, 0, "no free pair"
    split = spray * (~free_pair)[:, None]
    split[pair_v, path_v] = x
    rows = split.sum(axis=1, keepdims=True)
    split = np.where(rows > 0, split / np.where(rows > 0, rows, 1.0), spray)
    load = problem.link_load(split)
    mlu = problem.mlu(split)
    return LPResult(mlu=mlu, split=split, link_load=load,
                    seconds=time.perf_counter() - t0, solve_seconds=solve_s,
                    n_variables=n_var + 1, n_constraints=n_rows + free_idx.size,
                    status=status, message=message)


@dataclasses.dataclass(frozen=True, eq=False)
class MaxMinLPResult:
    """Max-min fair rates with the routing free over the candidate paths.

    Attributes:
      rates: ``[pairs]`` bytes/s, the lexicographically max-min fair rate vector.
      split: ``[pairs, paths]`` a routing that achieves it (rate shares per path).
      rounds: LPs solved (bottleneck levels).
      seconds: wall time.
    """

    rates: np.ndarray
    split: np.ndarray
    rounds: int
    seconds: float


def solve_max_min_lp(problem: RoutingProblem, *, capped: bool = False,
                     method: str = "highs") -> MaxMinLPResult:
    """Max-min fair optimum over routings: progressive filling with one LP per level.

    Every pair is an elastic flow whose rate ``r_p = sum_k x_pk`` may use any mix of its
    candidate paths (``x_pk`` bytes/s on path ``k``).  Round ``i`` maximises the common
    level ``t`` of the pairs not yet frozen, subject to link capacities (minus
    ``base_load``) and the frozen pairs keeping their rates (their paths may still
    change).  The duals of the constraints ``r_p >= t`` sum to one, so at least one is
    positive; a pair with a positive dual cannot exceed ``t`` in any optimum
    (complementary slackness) and is frozen at ``t``.  The result is the unique
    lexicographically max-min fair rate vector (Bertsekas & Gallager, Data Networks,
    sec. 6.5.2, with routing as part of the decision; Ros-Giralt et al. compare it to
    fixed-path max-min).  One LP per bottleneck level: meant for small instances.

    Args:
      problem: routing problem (``demand`` caps each pair's rate when ``capped``).
      capped: cap each pair's rate at its ``demand``.
      method: HiGHS method (see :func:`solve_mlu_lp`).

    Returns:
      :class:`MaxMinLPResult`.

    Raises:
      RuntimeError: if an LP fails.
    """
    if method not in LP_METHODS:
        raise ValueError(f"method must be one of {LP_METHODS}; got {method!r}")
    t0 = time.perf_counter()
    mask = problem.path_mask
    n_pairs = problem.n_pairs
    pair_v, path_v = np.nonzero(mask)
    n_var = pair_v.size
    hop = problem.hop_mask[pair_v, path_v]
    rows_l = problem.links[pair_v, path_v][hop]
    cols = np.broadcast_to(np.arange(n_var)[:, None], hop.shape)[hop]
    link_rows = np.unique(rows_l)
    row_of = np.full(problem.n_links, -1, np.int64)
    row_of[link_rows] = np.arange(link_rows.size)
    a_cap = sp.csr_array((np.ones(rows_l.size), (row_of[rows_l], cols)),
                         shape=(link_rows.size, n_var + 1))
    b_cap = np.maximum(problem.capacity[link_rows] - problem.base_load[link_rows], 0.0)
    sum_rows = sp.csr_array((np.ones(n_var), (pair_v, np.arange(n_var))),
                            shape=(n_pairs, n_var + 1))           # r_p
    t_col = sp.csr_array((np.ones(n_pairs), (np.arange(n_pairs), np.full(n_pairs, n_var))),
                         shape=(n_pairs, n_var + 1))
    cap = np.where(capped, problem.demand, np.inf) * np.ones(n_pairs)
    frozen = np.zeros(n_pairs, bool)
    rates = np.zeros(n_pairs)
    c = np.zeros(n_var + 1)
    c[-1] = -1.0
    rounds, x = 0, np.zeros(n_var)
    while not frozen.all():
        free = np.flatnonzero(~frozen)
        fz = np.flatnonzero(frozen)
        a_ub = sp.vstack([a_cap, (t_col - sum_rows)[free]], format="csr")
        b_ub = np.concatenate([b_cap, np.zeros(free.size)])
        a_eq = sum_rows[fz] if fz.size else None
        b_eq = rates[fz] if fz.size else None
        finite = np.isfinite(cap[free])
        if finite.any():
            a_ub = sp.vstack([a_ub, sum_rows[free[finite]]], format="csr")
            b_ub = np.concatenate([b_ub, cap[free[finite]]])
        res = scipy.optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq,
                                     bounds=(0, None), method=method)
        rounds += 1
        if res.status != 0:
            raise RuntimeError(f"HiGHS failed on max-min round {rounds}: {res.message}")
        level, x = res.x[-1], res.x[:n_var]
        duals = -res.ineqlin.marginals[link_rows.size:link_rows.size + free.size]
        hit_cap = cap[free] <= level * (1 + 1e-9)
        stop = (duals > 1e-9) | hit_cap
        if not stop.any():  # numerically flat duals: freeze the most constrained
            stop = duals >= duals.max()
        rates[free[stop]] = np.minimum(level, cap[free[stop]])
        frozen[free[stop]] = True
    split = np.zeros(mask.shape)
    split[pair_v, path_v] = x
    tot = split.sum(axis=1, keepdims=True)
    split = np.where(tot > 0, split / np.where(tot > 0, tot, 1.0), spray_split(problem))
    return MaxMinLPResult(rates=rates, split=split, rounds=rounds,
                          seconds=time.perf_counter() - t0)
