"""Many scenarios of one shape at once: ``vmap`` over a leading scenario axis, the axis
sharded over the devices when there are several."""

from __future__ import annotations

import functools
from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..compiling import jit
from .mesh import BATCH_AXIS, check_mesh, device_mesh, pad_rows, place

__all__ = ["sweep"]

# ------------------------------------------------------------------- sweeps
def sweep(fn: Callable, *args, in_axes=0, mesh: Mesh | None = None, batched: bool = False,
          per_device: bool = False):
    """Runs ``fn`` over a batch of scenarios of the same shape, sharded over devices.

    Args:
      fn: with ``batched=False`` (default) a *per-scenario* function of ``args``
        (traceable: ``jit``/``vmap``-able, e.g. ``lambda c: fj.max_min_fair(inc, c)``);
        it is ``vmap``-ed over the leading axis of the batched arguments.  With
        ``batched=True`` a function that already takes the leading batch axis (e.g.
        :func:`fabric_jax.simulate_flows_batched`,
        :func:`fabric_jax.simulate_fluid_batched`, or ``max_min_fair`` with
        ``[batch, links]`` capacities); it is called once with the batched arguments
        placed sharded along that axis.
      *args: pytrees of arrays.  Batched ones carry the scenario axis first (size
        ``batch``, the same for all); the others are shared by every scenario.
      in_axes: ``0`` (every argument batched), or a tuple with one entry per argument:
        ``0`` (batched), ``None`` (shared), or a pytree prefix of the argument with
        ``0`` / ``None`` leaves (part of it batched, as :func:`jax.vmap` takes; e.g.
        the axes :func:`fabric_jax.fluid.stack` returns for a batch of fluid problems:
        ``sweep(fluid.run_body, batch, in_axes=(axes,))``).
      mesh: a :class:`~jax.sharding.Mesh`; the scenario axis is split over all its
        axes.  Default: one axis over ``jax.devices()`` when there is more than one
        device, no sharding otherwise.
      batched: see ``fn``.
      per_device: with ``batched=True``, run ``fn`` under :func:`jax.shard_map`: each
        device calls it on its own slice of the batch (``fn`` must be traceable, e.g.
        ``max_min_fair`` with ``[batch, links]`` capacities, which then solves one
        block-diagonal problem per device).  Without it the batched inputs are only
        placed sharded and ``fn`` runs once (for functions with host-side logic such as
        :func:`fabric_jax.simulate_flows_batched`; XLA's sharding propagation decides
        how the work is split).

    Returns:
      ``fn``'s output with a leading ``batch`` axis on every leaf (padding stripped).

    Raises:
      ValueError: ``fn`` not callable, ``in_axes`` malformed, no batched argument, an
        empty batch or batched arguments whose leading sizes differ (named ``args[i]``).
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}")
    if not args:
        raise ValueError("sweep needs at least one argument (the batched scenarios)")
    if per_device and not batched:
        raise ValueError("per_device=True needs batched=True (fn taking the batch axis); a "
                         "per-scenario fn is vmapped and sharded already")
    axes = _normalise_in_axes(in_axes, len(args))
    n = _batch_size(args, axes)
    if mesh is None and jax.device_count() > 1:
        mesh = device_mesh(BATCH_AXIS)
    if mesh is not None:
        mesh = check_mesh(mesh)
    n_dev = 1 if mesh is None else mesh.size
    pad = -n % n_dev
    args = tuple(_map_batched(functools.partial(pad_rows, pad=pad), a, ax)
                 for a, ax in zip(args, axes))
    if mesh is not None:
        shard = NamedSharding(mesh, P(mesh.axis_names))
        repl = NamedSharding(mesh, P())
        args = tuple(_map_batched(functools.partial(place, sharding=shard), a, ax,
                                  None if batched else
                                  functools.partial(place, sharding=repl))
                     for a, ax in zip(args, axes))
    key = tuple(_axes_key(ax) for ax in axes)
    if batched and per_device and mesh is not None:
        out = _cached(_per_device, fn, key, mesh)(*args)
    else:
        out = fn(*args) if batched else _cached(_vmapped, fn, key, mesh)(*args)
    if pad:
        out = jax.tree_util.tree_map(lambda x: x[:n], out)
    return out


def _is_axis(x) -> bool:
    return x is None or (isinstance(x, int) and not isinstance(x, bool) and x == 0)


def _axis_leaves(ax) -> list:
    """The ``0`` / ``None`` leaves of one argument's ``in_axes`` entry."""
    return jax.tree_util.tree_leaves(ax, is_leaf=lambda x: x is None)


def _normalise_in_axes(in_axes, n_args):
    if _is_axis(in_axes):
        axes = (in_axes,) * n_args
    elif isinstance(in_axes, (tuple, list)):
        axes = tuple(in_axes)
    else:
        raise ValueError(f"in_axes must be 0, None or a tuple of 0/None per argument; "
                         f"got {in_axes!r}")
    if len(axes) != n_args or any(not all(_is_axis(x) for x in _axis_leaves(a))
                                  for a in axes):
        raise ValueError(f"in_axes must have one entry (0 or None, or a pytree of them) per "
                         f"argument ({n_args}); got {in_axes!r}")
    if all(x is None for a in axes for x in _axis_leaves(a)):
        raise ValueError("in_axes marks no argument as batched (0); nothing to sweep over")
    return axes


def _map_batched(fn, arg, ax, other=None):
    """``arg`` with ``fn`` applied to its batched leaves (and ``other``, if given, to
    the shared ones), ``ax`` its ``in_axes`` entry."""
    def one(a, sub):
        f = fn if a == 0 else other
        return sub if f is None else jax.tree_util.tree_map(f, sub)
    return jax.tree_util.tree_map(one, ax, arg, is_leaf=lambda x: x is None)


def _batched_leaves(arg, ax) -> list:
    out = []
    _map_batched(lambda leaf: out.append(leaf) or leaf, arg, ax)
    return out


def _axes_key(ax):
    """A hashable form of one argument's ``in_axes`` entry (for the compiled cache)."""
    if _is_axis(ax):
        return ax
    leaves, treedef = jax.tree_util.tree_flatten(ax, is_leaf=lambda x: x is None)
    return treedef, tuple(leaves)


def _axes_of(key):
    return key if _is_axis(key) or not isinstance(key, tuple) else \
        jax.tree_util.tree_unflatten(key[0], key[1])


def _batch_size(args, axes) -> int:
    n = None
    for i, (a, ax) in enumerate(zip(args, axes)):
        for leaf in _batched_leaves(a, ax):
            shape = np.shape(leaf)
            if len(shape) == 0:
                raise ValueError(f"args[{i}] is batched (in_axes 0) but holds a scalar; give "
                                 f"it a leading scenario axis or mark it None in in_axes")
            if n is None:
                n = shape[0]
            elif shape[0] != n:
                raise ValueError(f"args[{i}] has {shape[0]} scenarios on its leading axis, "
                                 f"but an earlier batched argument has {n}; they must agree")
    if n is None:
        raise ValueError("the batched arguments hold no arrays")
    if n == 0:
        raise ValueError("the batch is empty (leading axis of size 0); give >= 1 scenario")
    return int(n)


def _cached(build, fn, axes, mesh):
    """``build(fn, axes, mesh)`` from its cache (so repeated sweeps do not retrace), or
    built afresh when ``fn`` is unhashable."""
    try:
        return build(fn, axes, mesh)
    except TypeError:  # unhashable fn
        return build.__wrapped__(fn, axes, mesh)


@functools.lru_cache(maxsize=64)
def _vmapped(fn, key, mesh):
    """``jit(vmap(fn))``; the output keeps the scenario axis sharded like the inputs."""
    out_sh = None if mesh is None else NamedSharding(mesh, P(mesh.axis_names))
    axes = tuple(_axes_of(k) for k in key)
    return jit(jax.vmap(fn, in_axes=axes), out_shardings=out_sh)


@functools.lru_cache(maxsize=64)
def _per_device(fn, key, mesh):
    """``jit(shard_map(fn))`` with the batched arguments split over the mesh."""
    row, rep = P(mesh.axis_names), P()
    specs = tuple(jax.tree_util.tree_map(lambda a: row if a == 0 else rep, _axes_of(k),
                                         is_leaf=lambda x: x is None) for k in key)
    return jit(jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=row, check_vma=False))
