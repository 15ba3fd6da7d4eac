"""ECMP (per-flow hashing hop by hop, resilient rehash among live paths) and weighted
ECMP (a softmax of learnable logits) (:mod:`fabric_jax.routing`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..paths import PathSet, mix64
from ._base import Policy, base_state, check_paths, live_mask, masked_softmax, path_alive

_BIG = np.iinfo(np.int64).max


def _tuple_hash(src, dst, sport, seed):
    with np.errstate(over="ignore"):
        k = (np.asarray(src, np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             ^ np.asarray(dst, np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
             ^ np.asarray(sport, np.uint64) * np.uint64(0x165667B19E3779F9)
             ^ np.uint64(4791 * 17))
        return mix64(k ^ mix64(np.uint64(seed) + np.uint64(0x632BE59BD9B4E019)))


@dataclasses.dataclass(frozen=True)
class ECMPParams:
    """Attributes: tier_seeds ``[tiers]`` int hash seed of each hop tier (hop ``h`` uses
    ``tier_seeds[h % tiers]``); equal seeds reproduce hash polarisation."""

    tier_seeds: Any


jax.tree_util.register_dataclass(ECMPParams)


def ecmp_params(tier_seeds=(11, 23, 37, 41, 53, 67)) -> ECMPParams:
    """ECMP parameters (host-side integers)."""
    s = np.asarray(tier_seeds, np.int64).reshape(-1)
    if s.size == 0:
        raise ValueError("tier_seeds must hold at least one integer seed")
    return ECMPParams(tier_seeds=s)


def ecmp_choice(paths: PathSet, tier_seeds, sport) -> np.ndarray:
    """``[flows]`` index of the path each flow's hash picks, hop by hop (NumPy).

    Args:
      paths: candidate paths, one pair per flow.
      tier_seeds: ``[tiers]`` ints.
      sport: ``[flows]`` UDP source port (entropy) of each flow.
    """
    links = np.asarray(paths.links, np.int64)
    n_flows, n_paths, n_hops = links.shape
    cand = np.asarray(paths.path_mask, bool).copy()
    seeds = np.asarray(tier_seeds, np.int64).reshape(-1)
    for h in range(n_hops):
        hv = _tuple_hash(paths.src, paths.dst, sport, int(seeds[h % seeds.size]))
        nl = np.where(cand & paths.hop_mask[:, :, h], links[:, :, h], _BIG)
        srt = np.sort(nl, axis=1)
        distinct = (srt < _BIG) & np.concatenate(
            [np.ones((n_flows, 1), bool), srt[:, 1:] != srt[:, :-1]], axis=1)
        n_distinct = distinct.sum(axis=1)
        # rank of each candidate's next link among the distinct next links
        rank = np.sum(distinct[:, None, :] & (srt[:, None, :] < nl[:, :, None]), axis=2)
        pick = (hv % np.maximum(n_distinct, 1).astype(np.uint64)).astype(np.int64)
        keep = cand & ((rank == pick[:, None]) | (n_distinct[:, None] <= 1))
        cand = np.where(keep.any(axis=1)[:, None], keep, cand)
    return np.argmax(cand, axis=1)


#: Seed of the second hash that picks a live path for a flow whose path failed.
_FAILOVER_SEED = 0x5EED_FA11


def ecmp_init(paths, params, seed=0):
    paths = check_paths(paths)
    rng = np.random.default_rng(seed)
    sport = rng.integers(49152, 65536, size=paths.n_pairs)
    choice = ecmp_choice(paths, params.tier_seeds, sport)
    split = np.zeros(paths.path_mask.shape, np.float32)
    split[np.arange(paths.n_pairs), choice] = 1.0
    h = _tuple_hash(paths.src, paths.dst, sport, _FAILOVER_SEED)
    u = (h >> np.uint64(40)).astype(np.float64) / float(1 << 24)  # uniform in [0, 1)
    return base_state(paths, split, aux={"home": jnp.asarray(split, jnp.zeros(()).dtype),
                                          "u": jnp.asarray(u, jnp.zeros(()).dtype)})


def _ecmp_step(state, view, dt, params):
    # resilient hashing: keep the hashed ("home") path while it is live; otherwise the
    # failover hash u picks the floor(u * n_live)-th live candidate.
    alive = path_alive(state, view.capacity)
    home = state.aux["home"]
    home_ok = jnp.any((home > 0) & alive, axis=1, keepdims=True)
    n_live = jnp.sum(alive, axis=1, keepdims=True)
    u = state.aux["u"][:, None]
    pick = jnp.minimum(jnp.floor(u * n_live.astype(u.dtype)), (n_live - 1).astype(u.dtype))
    rank = jnp.cumsum(alive, axis=1) - 1
    alt = (alive & (rank.astype(u.dtype) == pick)).astype(home.dtype)
    split = jnp.where(home_ok | (n_live == 0), home, alt)
    return dataclasses.replace(state, split=split)


ECMP = Policy("ecmp", ecmp_init, _ecmp_step, ecmp_params)


@dataclasses.dataclass(frozen=True)
class WeightedECMPParams:
    """Attributes: logits ``[flows, paths]`` (``None`` until bound: zeros = even split)."""

    logits: Any


jax.tree_util.register_dataclass(WeightedECMPParams)


def weighted_ecmp_params(logits=None) -> WeightedECMPParams:
    return WeightedECMPParams(logits=None if logits is None else jnp.asarray(logits))


def _wecmp_init(paths, params, seed=0):
    paths = check_paths(paths)
    logits = (jnp.zeros(paths.path_mask.shape) if params.logits is None
              else jnp.asarray(params.logits))
    if logits.shape != paths.path_mask.shape:
        raise ValueError(f"logits must have shape [flows, paths] = "
                         f"{paths.path_mask.shape}; got {logits.shape}")
    return base_state(paths, masked_softmax(logits, jnp.asarray(paths.path_mask)))


def _wecmp_step(state, view, dt, params):
    logits = jnp.zeros(state.split.shape) if params.logits is None else params.logits
    return dataclasses.replace(state,
                               split=masked_softmax(logits, live_mask(state, view.capacity)))


WEIGHTED_ECMP = Policy("weighted_ecmp", _wecmp_init, _wecmp_step, weighted_ecmp_params)

