"""The routing types (the link state a policy sees, its state, the policy, a policy bound
to its parameters) and the path helpers every policy shares (:mod:`fabric_jax.routing`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..paths import PathSet


@dataclasses.dataclass(frozen=True)
class RoutingView:
    """Link state seen by routing (each field ``[links]`` unless noted).

    Attributes:
      queue: egress queue, bytes.
      capacity: link capacity, bytes/s.
      load: offered load in the previous step, bytes/s.
      mark: marking probability in the previous step (ECN/FECN).
      flow_rate: ``[flows]`` offered rate in the previous step, bytes/s.
      active: ``[flows]`` bool, flow started and not finished.
      t: time, seconds (scalar).
    """

    queue: Any
    capacity: Any
    load: Any
    mark: Any
    flow_rate: Any
    active: Any
    t: Any


@dataclasses.dataclass(frozen=True)
class RoutingState:
    """State of a routing policy.

    Attributes:
      split: ``[flows, paths]`` fraction of each flow's rate on each path.
      links: ``[flows, paths, hops]`` int32 link ids (-1 padding).
      hop_mask: ``[flows, paths, hops]`` bool.
      path_mask: ``[flows, paths]`` bool.
      aux: policy-specific arrays (dict).
    """

    split: Any
    links: Any
    hop_mask: Any
    path_mask: Any
    aux: Any


jax.tree_util.register_dataclass(RoutingView)
jax.tree_util.register_dataclass(RoutingState)


@dataclasses.dataclass(frozen=True, eq=False)
class Policy:
    """A routing policy (hashable by identity: a static argument under jit).

    Attributes:
      name: short name.
      init: ``(paths, params, seed) -> RoutingState`` (host side).
      step: ``(state, view, dt, params) -> RoutingState`` (jit/vmap safe).
      default_params: ``(**overrides) -> params`` pytree.
    """

    name: str
    init: Callable
    step: Callable
    default_params: Callable

    @staticmethod
    def view(**fields) -> RoutingView:
        return RoutingView(**fields)

    def __repr__(self) -> str:
        return f"Policy({self.name!r})"


@dataclasses.dataclass(frozen=True)
class Routing:
    """A policy bound to its parameters and initial state (``simulate_fluid(routing=)``).

    Attributes:
      policy: the :class:`Policy` (static).
      params: its parameter pytree.
      state: initial :class:`RoutingState`.
    """

    policy: Policy
    params: Any
    state: RoutingState

    @property
    def links(self):
        return self.state.links

    @property
    def hop_mask(self):
        return self.state.hop_mask

    @property
    def split(self):
        return self.state.split


def check_paths(paths) -> PathSet:
    if not isinstance(paths, PathSet):
        raise ValueError(f"paths must be a fabric_jax.paths.PathSet (one pair per flow); "
                         f"got {type(paths).__name__}")
    return paths


def base_state(paths: PathSet, split, aux=None) -> RoutingState:
    return RoutingState(split=jnp.asarray(split, jnp.zeros(()).dtype),
                        links=jnp.asarray(paths.links, jnp.int32),
                        hop_mask=jnp.asarray(paths.hop_mask, bool),
                        path_mask=jnp.asarray(paths.path_mask, bool), aux=aux or {})


def masked_softmax(logits, mask):
    """Softmax over the last axis restricted to ``mask``: exactly 0 where ``mask`` is
    False, all 0 on a row with no valid entry, and NaN-free values and gradients (the
    max is taken over valid entries only and held constant for the gradient).

    The one masked softmax of the package (routing policies' splits and the learned
    splits of :mod:`fabric_jax.optimize`).

    Args:
      logits: ``[..., paths]``.
      mask: bool, broadcastable to ``logits``.
    """
    z = jnp.where(mask, logits, -1e30)
    m = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    e = jnp.where(mask, jnp.exp(jnp.where(mask, logits - m, 0.0)), 0.0)
    return e / jnp.maximum(jnp.sum(e, axis=-1, keepdims=True), 1e-30)


def path_link_cost(state: RoutingState, per_link, hops_mask=None):
    """``[flows, paths]`` sum of a ``[links]`` quantity over each path's (selected) hops."""
    n_links = per_link.shape[0]
    ext = jnp.concatenate([per_link, jnp.zeros((1,), per_link.dtype)])
    mask = state.hop_mask if hops_mask is None else hops_mask
    idx = jnp.where(mask, state.links, n_links)
    return jnp.sum(jnp.where(mask, ext[idx], 0.0), axis=-1)


def path_alive(state: RoutingState, capacity):
    """``[flows, paths]`` bool: a candidate path whose every hop has ``capacity > 0``."""
    n_links = capacity.shape[0]
    up = jnp.concatenate([capacity > 0, jnp.ones((1,), bool)])
    idx = jnp.where(state.hop_mask, state.links, n_links)
    return state.path_mask & jnp.all(up[idx], axis=-1)


def live_mask(state: RoutingState, capacity):
    """Live candidate paths; all candidates for a flow with none live (it is stranded)."""
    alive = path_alive(state, capacity)
    return jnp.where(jnp.any(alive, axis=1, keepdims=True), alive, state.path_mask)


