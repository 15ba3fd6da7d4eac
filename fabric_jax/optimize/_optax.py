"""One optax update, the way every optimiser loop of the package makes it.

optax's transforms mix their int32 step counter with float parameters (Adam's bias
correction ``1 - b ** count``), which JAX's strict dtype promotion refuses; the update
runs under standard promotion, the same values either way.
"""

from __future__ import annotations

import jax

__all__ = ["optax_update"]


def optax_update(optimizer, grads, state, params):
    """``optimizer.update(grads, state, params)`` under standard dtype promotion."""
    with jax.numpy_dtype_promotion("standard"):
        return optimizer.update(grads, state, params)
