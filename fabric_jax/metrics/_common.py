"""What every metric shares: one floating dtype, checks on concrete inputs, the one
division rule (``x / 0 = inf`` for ``x > 0``, ``0 / 0 = 0``, NaN-free gradients), and the
labels of percentiles and byte counts."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..units import KB, MB


def as_floats(*values):
    """Cast inputs to one floating dtype (works under strict dtype promotion)."""
    arrays = [jnp.asarray(v) for v in values]
    try:
        dtype = np.result_type(*[np.dtype(a.dtype) for a in arrays])
    except TypeError:  # e.g. bfloat16 mixed with float32: use the default float
        dtype = np.dtype(np.float64)
    if not np.issubdtype(dtype, np.floating):
        dtype = np.dtype(np.float64)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    return [a.astype(dtype) for a in arrays]


def concrete_array(value):
    """NumPy view of a concrete input, or None when it is being traced."""
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def check_nonnegative(name, value, fix="pass values >= 0"):
    array = concrete_array(value)
    if array is None:
        return
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN; {fix}")
    if (array < 0).any():
        raise ValueError(f"{name} must be >= 0 (min {array.min()}); {fix}")


def safe_ratio(numerator, denominator):
    """``numerator / denominator`` with ``x / 0 = inf`` (x > 0) and ``0 / 0 = 0``.

    Double-``where`` so neither the value nor its gradient is NaN at a zero denominator.
    """
    zero = denominator == 0
    safe = jnp.where(zero, jnp.ones_like(denominator), denominator)
    on_zero = jnp.where(numerator == 0, jnp.zeros_like(numerator),
                        jnp.full_like(numerator, jnp.inf))
    return jnp.where(zero, on_zero, numerator / safe)


def quantile_key(q):
    """50 -> 'p50', 99.9 -> 'p99_9'."""
    return "p" + f"{float(q):g}".replace(".", "_")


def format_bytes(x):
    if math.isinf(x):
        return "inf"
    for unit, scale in (("GB", 1e9), ("MB", MB), ("KB", KB)):
        if x >= scale:
            return f"{x / scale:g}{unit}"
    return f"{x:g}B"
