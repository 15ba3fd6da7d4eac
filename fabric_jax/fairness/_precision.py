"""Precision of the max-min solvers: the one home of their tolerances.

The solvers compute in the dtype of the capacities (float32 by default, float64 under
``jax_enable_x64``).  A link whose load reaches its capacity to within round-off counts
as saturated; how close is close enough depends on the dtype's precision.
"""

from __future__ import annotations

import numpy as np

#: A link counts as saturated when its load is within this relative distance of capacity.
SATURATION_RTOL = {np.dtype("float32"): 1e-5, np.dtype("float64"): 1e-10}


def saturation_rtol(dtype) -> float:
    """:data:`SATURATION_RTOL` of ``dtype`` (the float32 value for any other dtype)."""
    return SATURATION_RTOL.get(np.dtype(dtype), 1e-5)
