"""Reference routings: ECMP hashing, packet spraying, an adaptive-routing approximation.

Small and private on purpose: a routing module (issue 5) may replace them.

* **ECMP**: each input flow hashes (SplitMix64 of seed, source, destination and flow
  index: the 5-tuple of a real switch) onto one candidate path of its pair.  On an
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

from ..paths import _mix64
from ._problem import RoutingProblem

__all__ = []


def _hash_index(seed: int, src, dst, idx, n) -> np.ndarray:
    # uint64 arrays wrap silently (scalars would warn).
    key = (np.full(np.shape(src), seed & 0xFFFFFFFFFFFFFFFF, np.uint64)
           * np.uint64(0x9E3779B97F4A7C15)
           + np.asarray(src).astype(np.uint64) * np.uint64(0xD1B54A32D192ED03)
           + np.asarray(dst).astype(np.uint64) * np.uint64(0x8CB92BA72F3D8DD7)
           + np.asarray(idx).astype(np.uint64) * np.uint64(0xA24BAED4963EE407))
    return (_mix64(key) % np.asarray(n).astype(np.uint64)).astype(np.int64)


def spray_split(problem: RoutingProblem) -> np.ndarray:
    """``[pairs, paths]`` even split over valid paths."""
    m = problem.path_mask.astype(np.float64)
    return m / m.sum(axis=1, keepdims=True)


def ecmp_split(problem: RoutingProblem, seed: int = 0) -> np.ndarray:
    """``[pairs, paths]`` per-flow hashed path choice, demand-weighted per pair."""
    n_pairs, n_paths = problem.path_mask.shape
    fp = problem.flow_pair
    routed = np.flatnonzero(fp >= 0)
    pair = fp[routed]
    # Flows are identified by (src, dst, index); a pair's representative hosts stand in
    # for the flow's own when aggregated, the flow index keeps flows distinct.
    choice = _hash_index(seed, problem.pair_src[pair], problem.pair_dst[pair], routed,
                         problem.n_paths[pair])
    w = problem.flow_demand[routed]
    split = np.zeros((n_pairs, n_paths))
    np.add.at(split, (pair, choice), w)
    total = split.sum(axis=1, keepdims=True)
    # Pairs without demand: the first flow's choice, weight 1.
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
