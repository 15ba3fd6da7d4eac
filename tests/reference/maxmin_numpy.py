"""Re-export of :mod:`fabric_jax.reference.maxmin_numpy` (the max-min oracle moved there
so that benchmarks can use it as a baseline without importing test code)."""

from fabric_jax.reference.maxmin_numpy import (  # noqa: F401
    TIE_RTOL,
    bottleneck_certificate,
    progressive_filling,
)
