"""Smooth-mode primitives: one switch between exact and differentiable dynamics.

The fluid dynamics (:mod:`fabric_jax.fluid`), the congestion-control laws
(:mod:`fabric_jax.cc`) and the link-level flow control (:mod:`fabric_jax.flowcontrol`)
contain steps (RED marking above ``K_max``, a PFC XOFF threshold, ``q > 0``) and kinks
(``max(x, 0)``, clipping).  In the **exact** mode (the default) they are evaluated as
written.  In the **smooth** mode each step becomes a logistic ramp and each kink a
softplus, with a common dimensionless *temperature* ``T``:

    step(x)  = sigmoid(x / T)          (exact: 1[x > 0])
    relu(x)  = T * softplus(x / T)     (exact: max(x, 0))

Callers normalise ``x`` by the natural scale of the quantity (for example
``(q - K_max) / (K_max - K_min)`` for the RED edge), so one temperature means the same
relative sharpness everywhere.  ``T -> 0`` recovers the exact mode; gradients of
end-of-run metrics are finite for ``T > 0`` and are checked against central finite
differences in the tests.

:class:`Smoothing` is a pytree: ``temperature`` is a traced leaf (it may itself be
scheduled or differentiated), ``enabled`` is static (it selects the code path).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["Smoothing", "EXACT", "smooth", "step", "relu", "clip01", "minimum", "maximum"]


@dataclasses.dataclass(frozen=True)
class Smoothing:
    """Exact or smooth evaluation of steps and kinks.

    Attributes:
      temperature: dimensionless sharpness of the smooth ramps (leaf).
      enabled: ``False`` = exact mode (static).
    """

    temperature: Any = 0.05
    enabled: bool = dataclasses.field(default=False, metadata=dict(static=True))


jax.tree_util.register_dataclass(Smoothing)

#: The default: exact (non-smooth) dynamics.
EXACT = Smoothing(0.05, False)


def smooth(temperature: float = 0.05) -> Smoothing:
    """Smooth mode with the given temperature (> 0)."""
    if not isinstance(temperature, jax.core.Tracer) and not temperature > 0:
        raise ValueError(f"temperature must be > 0; got {temperature!r}")
    return Smoothing(temperature, True)


def step(x, s: Smoothing):
    """``1[x > 0]`` (exact) or ``sigmoid(x / T)`` (smooth), as a float array."""
    x = jnp.asarray(x)
    if not s.enabled:
        return (x > 0).astype(jnp.result_type(x, float))
    return jax.nn.sigmoid(x / s.temperature)


def relu(x, s: Smoothing):
    """``max(x, 0)`` (exact) or ``T * softplus(x / T)`` (smooth)."""
    if not s.enabled:
        return jnp.maximum(x, 0.0)
    return s.temperature * jax.nn.softplus(x / s.temperature)


def clip01(x, s: Smoothing):
    """``clip(x, 0, 1)`` (exact) or ``relu(x) - relu(x - 1)`` with smooth relus."""
    if not s.enabled:
        return jnp.clip(x, 0.0, 1.0)
    return relu(x, s) - relu(x - 1.0, s)


def minimum(a, b, scale, s: Smoothing):
    """``min(a, b)``; smooth: ``a - scale * relu((a - b) / scale)``."""
    if not s.enabled:
        return jnp.minimum(a, b)
    return a - scale * relu((a - b) / scale, s)


def maximum(a, b, scale, s: Smoothing):
    """``max(a, b)``; smooth: ``b + scale * relu((a - b) / scale)``."""
    if not s.enabled:
        return jnp.maximum(a, b)
    return b + scale * relu((a - b) / scale, s)
