"""Device meshes and placement shared by the sharded drivers (one axis by default)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

__all__ = ["device_mesh", "check_mesh", "place", "pad_rows", "BATCH_AXIS", "FLOW_AXIS"]

#: Default mesh axis name for the scenario axis of :func:`sweep`.
BATCH_AXIS = "batch"


#: Default mesh axis name for the flow axis of :func:`max_min_fair_sharded`.
FLOW_AXIS = "flows"


def device_mesh(axis_name: str = BATCH_AXIS, devices=None) -> Mesh:
    """A 1-D :class:`~jax.sharding.Mesh` over ``devices`` (default: ``jax.devices()``,
    every process's devices after ``jax.distributed.initialize()``)."""
    devs = np.asarray(jax.devices() if devices is None else list(devices), dtype=object)
    if devs.size == 0:
        raise ValueError("devices must name at least one device")
    return Mesh(devs.reshape(-1), (axis_name,))


def check_mesh(mesh) -> Mesh:
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh (e.g. fabric_jax.distributed."
                         f"device_mesh()); got {type(mesh).__name__}")
    return mesh


def place(x, sharding: NamedSharding):
    """Puts a host or device array on ``sharding``; multi-host safe (each process
    supplies its addressable shards from its own copy of ``x``)."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    a = np.asarray(x)
    return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])


def pad_rows(x, pad: int):
    """Repeats the last entry of axis 0 ``pad`` times (a valid scenario, stripped later)."""
    if pad == 0:
        return x
    tail = jnp.repeat(jnp.asarray(x)[-1:], pad, axis=0)
    return jnp.concatenate([jnp.asarray(x), tail], axis=0)
