"""The result and diagnostics records of every exact max-min solve."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ._common import any_shard
from ._precision import saturation_rtol


@dataclasses.dataclass(frozen=True)
class MaxMinInfo:
    """Solver diagnostics.

    Attributes:
      iterations: loop iterations executed (bottleneck-structure depth when converged).
      max_violation: ``max_l max(load_l - c_l, 0)`` in bytes/s (float round-off only).
      converged: every flow is frozen (always true for the default while-loop).
    """

    iterations: Any
    max_violation: Any
    converged: Any


@dataclasses.dataclass(frozen=True)
class MaxMinResult:
    """Max-min fair allocation.

    Attributes:
      rates: ``[flows]`` bytes/s.
      link_load: ``[links]`` bytes/s.
      saturated: ``[links]`` bool, load equals capacity (and the link carries a flow).
      info: :class:`MaxMinInfo`.
    """

    rates: Any
    link_load: Any
    saturated: Any
    info: MaxMinInfo


jax.tree_util.register_dataclass(MaxMinInfo)
jax.tree_util.register_dataclass(MaxMinResult)


def max_min_result(inc, capacity, rates, load, iterations, converged,
                   axis_name=None) -> MaxMinResult:
    """The :class:`MaxMinResult` of a solve that ended at ``rates`` with link ``load``.

    A link is ``saturated`` when it carries an entry and its load is within
    :data:`~fabric_jax.fairness.SATURATION_RTOL` of its capacity.  With ``axis_name``
    (flows split over that ``shard_map`` axis) ``load`` is this shard's and is summed
    over the shards, ``converged`` is or-ed over them (every shard's flows frozen).
    """
    carries = inc.link_sum(jnp.where(inc.active, 1.0, 0.0).astype(capacity.dtype))
    if axis_name is not None:
        load, carries = jax.lax.psum((load, carries), axis_name)
        converged = ~any_shard(~converged, axis_name)
    saturated = (carries > 0) & (load >= capacity * (1 - saturation_rtol(capacity.dtype)))
    info = MaxMinInfo(iterations=iterations,
                      max_violation=jnp.max(jnp.maximum(load - capacity, 0.0), initial=0.0),
                      converged=converged)
    return MaxMinResult(rates=rates, link_load=load, saturated=saturated, info=info)
