"""Seeds and keys (internal): one place that turns user seeds into generators.

Host-side structure (placements, permutations, Poisson counts) uses NumPy's
``Generator``; values that may later be drawn on the device (flow sizes, expert loads) use
``jax.random`` keys.  Both accept a plain ``int`` seed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def as_rng(seed, name: str = "seed") -> np.random.Generator:
    """An ``int`` seed or a NumPy ``Generator`` -> ``Generator``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if seed < 0:
            raise ValueError(f"{name}: must be a non-negative int, got {seed}")
        return np.random.default_rng(int(seed))
    raise ValueError(f"{name}: expected an int seed or numpy.random.Generator, "
                     f"got {type(seed).__name__}")


def as_key(key_or_seed, name: str = "key"):
    """An ``int`` seed or a ``jax.random`` key (typed or raw uint32[2]) -> key."""
    if isinstance(key_or_seed, (int, np.integer)) and not isinstance(key_or_seed, bool):
        if key_or_seed < 0:
            raise ValueError(f"{name}: an int seed must be >= 0, got {key_or_seed}")
        return jax.random.key(int(key_or_seed))
    if isinstance(key_or_seed, jax.Array):
        if jnp.issubdtype(key_or_seed.dtype, jax.dtypes.prng_key):
            return key_or_seed
        if key_or_seed.dtype == jnp.uint32 and key_or_seed.shape == (2,):
            return key_or_seed
    raise ValueError(f"{name}: expected a jax.random key or an int seed, "
                     f"got {type(key_or_seed).__name__}")


def uniform53(key, n: int) -> np.ndarray:
    """``n`` uniforms in [0, 1) with 53 random bits each, float64 on the host.

    Built from two 32-bit draws of ``jax.random.bits`` so the result does not depend on
    whether ``jax_enable_x64`` is set (a float32 uniform has only 23 bits, which would
    truncate the far tail of heavy-tailed size distributions).
    """
    bits = np.asarray(jax.random.bits(key, (int(n), 2), dtype=jnp.uint32)).astype(np.uint64)
    hi = bits[:, 0] >> np.uint64(5)  # 27 bits
    lo = bits[:, 1] >> np.uint64(6)  # 26 bits
    return (hi * np.float64(2.0**26) + lo) / np.float64(2.0**53)
