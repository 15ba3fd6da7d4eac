"""``none``: no congestion control; every flow offers its NIC line rate.

With the fluid fabric this is the ideal baseline on a lossless fabric with infinite
buffers (every flow gets its max-min share, excess waits in queues), and the worst
case on a fabric with PFC or credits (queues fill, pauses spread).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ._linerate import resolve_gbps
from .base import Law, register

__all__ = ["NoneParams", "NoneState", "NONE", "none_params", "LINE_RATE_SCALING"]

#: No parameters, nothing to scale.
LINE_RATE_SCALING: dict = {}


@dataclasses.dataclass(frozen=True)
class NoneParams:
    """No parameters (an empty pytree)."""


@dataclasses.dataclass(frozen=True)
class NoneState:
    """Attributes: rate ``[flows]`` bytes/s (= line rate)."""

    rate: Any


jax.tree_util.register_dataclass(NoneParams)
jax.tree_util.register_dataclass(NoneState)


def _init(line_rate, params):
    return NoneState(rate=jnp.asarray(line_rate))


def _step(state, signals, dt, params, smooth):
    return NoneState(rate=signals.line_rate)


def _mark(links, params, smooth):
    return jnp.zeros_like(links.queue)


def none_params(*, line_rate=None, link_gbps=None) -> NoneParams:
    """The empty parameter pytree (the line rate is checked, then unused)."""
    resolve_gbps(line_rate, link_gbps, 100.0, "none_params")
    return NoneParams()


NONE = register(Law("none", _init, _step, _mark, none_params))
