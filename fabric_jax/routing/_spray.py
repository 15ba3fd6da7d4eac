"""UEC packet spraying, and its REPS-like variant steered by each path's ECN marking
(:mod:`fabric_jax.routing`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._base import Policy, base_state, check_paths, live_mask, masked_softmax


@dataclasses.dataclass(frozen=True)
class SprayParams:
    """Attributes: reps (0 plain spraying, 1 REPS-like), beta (steering strength per
    unit of marking score), ewma (gain per second of the marking score)."""

    reps: Any
    beta: Any
    ewma: Any


jax.tree_util.register_dataclass(SprayParams)


def spray_params(*, reps: bool = False, beta: float = 8.0, ewma_per_us: float = 0.2) -> SprayParams:
    if beta < 0 or ewma_per_us <= 0:
        raise ValueError("beta must be >= 0 and ewma_per_us > 0")
    return SprayParams(reps=jnp.asarray(float(reps)), beta=jnp.asarray(float(beta)),
                       ewma=jnp.asarray(float(ewma_per_us) * 1e6))


def _spray_init(paths, params, seed=0):
    paths = check_paths(paths)
    m = np.asarray(paths.path_mask, np.float32)
    return base_state(paths, m / m.sum(axis=1, keepdims=True),
                       aux={"score": jnp.zeros(m.shape)})


def _spray_step(state, view, dt, params):
    n_links = view.mark.shape[0]
    p = jnp.clip(view.mark, 0.0, 1.0 - 1e-7)
    ext = jnp.concatenate([jnp.log1p(-p), jnp.zeros((1,), p.dtype)])
    idx = jnp.where(state.hop_mask, state.links, n_links)
    pm = -jnp.expm1(jnp.sum(jnp.where(state.hop_mask, ext[idx], 0.0), axis=-1))
    g = jnp.clip(params.ewma * dt, 0.0, 1.0)
    score = (1.0 - g) * state.aux["score"] + g * pm
    split = masked_softmax(-params.reps * params.beta * score, live_mask(state, view.capacity))
    return dataclasses.replace(state, split=split, aux={"score": score})


SPRAY = Policy("spray", _spray_init, _spray_step, spray_params)

