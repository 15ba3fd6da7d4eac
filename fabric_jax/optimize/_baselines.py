"""Reference routings: ECMP hashing, packet spraying, an adaptive-routing approximation.

ECMP hashing has one home, :mod:`fabric_jax.routing`; these functions apply it to a
:class:`RoutingProblem` (pairs with demand-weighted flows).

* **ECMP**: each input flow hashes onto one candidate path of its pair, hop by hop, with
  the ``ecmp`` routing policy's hash (:func:`fabric_jax.routing.ecmp_choice`: the
  5-tuple with a random source port, as a real switch).  On an
  aggregated problem the pair's split is the demand-weighted mix of its flows' choices.
* **Spray**: an even split over the valid candidate paths (per-packet spraying in the
  fluid limit, and the expectation of ECMP over many flows).
* **Adaptive** (an approximation, host side): demand arrives in ``rounds * batches``
  increments (flowlets); each increment of every pair, pairs taken in a random order per
  batch, goes on the candidate path whose most utilised link would be least utilised
  after adding it, given the load placed so far.  This is congestion-aware greedy
  placement with global knowledge of path load (CONGA-like leaf-to-leaf feedback);
  switch-local adaptive routing sees only its next hop and reacts with a delay, so this
  is, if anything, optimistic for adaptive routing.
"""

from __future__ import annotations

import numpy as np

from ..paths import PathSet
from ..routing import ecmp_choice, ecmp_params
from ._problem import RoutingProblem

__all__ = []


def spray_split(problem: RoutingProblem) -> np.ndarray:
    """``[pairs, paths]`` even split over valid paths."""
    m = problem.path_mask.astype(np.float64)
    return m / m.sum(axis=1, keepdims=True)


def ecmp_split(problem: RoutingProblem, seed: int = 0) -> np.ndarray:
    """``[pairs, paths]`` per-flow hashed path choice, demand-weighted per pair.

    Each input flow hashes hop by hop exactly as the ``ecmp`` routing policy does
    (:func:`fabric_jax.routing.ecmp_choice`: per-tier seeds of
    :func:`~fabric_jax.routing.ecmp_params`, a random RoCEv2 source port per flow drawn
    from ``seed``), on its pair's candidate paths; a pair's split is the demand-weighted
    mix of its flows' choices.
    """
    n_pairs, n_paths = problem.path_mask.shape
    fp = problem.flow_pair
    routed = np.flatnonzero(fp >= 0)
    pair = fp[routed]
    split = np.zeros((n_pairs, n_paths))
    if routed.size:
        # Flows are identified by (src, dst, source port); a pair's representative
        # hosts stand in for the flow's own when aggregated, the port keeps flows apart.
        per_flow = PathSet(src=problem.pair_src[pair].astype(np.int32),
                           dst=problem.pair_dst[pair].astype(np.int32),
                           links=problem.links[pair], path_mask=problem.path_mask[pair],
                           hop_mask=problem.hop_mask[pair], n_paths=problem.n_paths[pair])
        sport = np.random.default_rng(seed).integers(49152, 65536, size=routed.size)
        choice = ecmp_choice(per_flow, ecmp_params().tier_seeds, sport)
        np.add.at(split, (pair, choice), problem.flow_demand[routed])
    total = split.sum(axis=1, keepdims=True)
    # Pairs without demand: the first flow's choice (or the first path), weight 1.
    empty = total[:, 0] <= 0
    if empty.any():
        first = np.full(n_pairs, -1, np.int64)
        first[pair[::-1]] = np.arange(pair.size)[::-1]
        rows = np.flatnonzero(empty)
        has = first[rows] >= 0
        split[rows] = 0.0
        split[rows[has], choice[first[rows[has]]]] = 1.0
        split[rows[~has], 0] = 1.0
        total = split.sum(axis=1, keepdims=True)
    return split / total


def adaptive_split(problem: RoutingProblem, *, rounds: int = 8, batches: int = 8,
                   seed: int = 0) -> np.ndarray:
    """``[pairs, paths]`` congestion-aware greedy placement (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n_pairs, n_paths = problem.path_mask.shape
    cap = problem.capacity
    inv = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), 0.0)
    links = np.where(problem.hop_mask, problem.links, 0)
    hop = problem.hop_mask
    load = problem.base_load.copy()
    split = np.zeros((n_pairs, n_paths))
    inc = problem.demand / rounds
    for _ in range(rounds):
        order = rng.permutation(n_pairs)
        for part in np.array_split(order, batches):
            if part.size == 0:
                continue
            lk = links[part]                                        # [b, K, H]
            after = (load[lk] + inc[part][:, None, None]) * inv[lk]
            cost = np.where(hop[part], after, 0.0).max(axis=-1)     # [b, K]
            cost = np.where(problem.path_mask[part], cost, np.inf)
            cost += 1e-9 * rng.random(cost.shape)                   # random tie-break
            best = np.argmin(cost, axis=1)
            split[part, best] += 1.0 / rounds
            w = np.where(hop[part, best], inc[part][:, None], 0.0)
            np.add.at(load, lk[np.arange(part.size), best].ravel(), w.ravel())
    return split
