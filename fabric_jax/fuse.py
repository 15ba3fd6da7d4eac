"""Kernel-count helpers: compute many same-shaped outputs in one fused kernel.

XLA fuses element-wise work into one kernel per *output*; a stage of the fluid step that
returns a dozen ``[flows]`` arrays sharing expensive intermediates (divisions, logs,
exponentials) is compiled into about as many kernels, each a launch on a GPU (about 5 us
whatever its size).  :func:`pack` stacks such outputs into one array, so the stage is one
kernel writing one buffer, and the consumers read slices of it (fused into them, free).
The values are bit-identical: the same operations on the same operands, only the kernel
boundaries move.

Leaves are grouped by shape; within a group they are stacked along a new leading axis in
float form (booleans as 0/1, 32-bit integers bit-cast), so one group is one kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["pack"]


def _to_float(a, fdt):
    if a.dtype == fdt:
        return a
    if a.dtype == jnp.bool_:
        return a.astype(fdt)
    if jnp.dtype(a.dtype).itemsize == jnp.dtype(fdt).itemsize:
        return jax.lax.bitcast_convert_type(a, fdt)
    return None


def _from_float(a, dtype, fdt):
    if dtype == fdt:
        return a
    if dtype == jnp.bool_:
        return a != 0
    return jax.lax.bitcast_convert_type(a, dtype)


def pack(tree, dtype=None):
    """``tree`` with every group of same-shaped array leaves computed in one kernel.

    Args:
      tree: a pytree of arrays.
      dtype: the float dtype of the stacks (default: that of the first float leaf).

    Returns:
      A pytree of the same structure and values.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if dtype is None:
        fl = [a for a in leaves if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating)]
        if not fl:
            return tree
        dtype = jnp.asarray(fl[0]).dtype
    groups: dict = {}
    for i, a in enumerate(leaves):
        a = jnp.asarray(a)
        if a.ndim == 0:
            continue
        f = _to_float(a, dtype)
        if f is None:
            continue
        groups.setdefault(a.shape, []).append((i, f))
    out = list(leaves)
    for shape, items in groups.items():
        if len(items) < 2:
            continue
        stack = jax.lax.optimization_barrier(jnp.stack([f for _, f in items]))
        for j, (i, _) in enumerate(items):
            out[i] = _from_float(stack[j], jnp.asarray(leaves[i]).dtype, dtype)
    return jax.tree_util.tree_unflatten(treedef, out)
