"""One huge max-min solve with its flows split over devices (``shard_map``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..compiling import jit
from ..fairness import MaxMinInfo, MaxMinResult, solve, validate_inputs
from ..incidence import Incidence, as_incidence
from ..sim import flow_rows
from .mesh import FLOW_AXIS, check_mesh, device_mesh, place

__all__ = ["max_min_fair_sharded"]

# ----------------------------------------------------- one scenario, sharded flows
def max_min_fair_sharded(incidence, capacity, demand=None, *, mesh: Mesh | None = None,
                         max_iter: int | None = None) -> MaxMinResult:
    """:func:`fabric_jax.max_min_fair` with the flows split across devices.

    Same model, algorithm and result as :func:`fabric_jax.max_min_fair` (see
    :mod:`fabric_jax.fairness`: one iteration freezes every flow whose bottleneck link
    is at the lowest level of all its flows); the flows, their incidence rows and
    demands are sharded over the mesh with :func:`jax.shard_map`, and the per-link sums
    and minima of an iteration are ``psum``/``pmin`` all-reduces over the mesh axes.
    Like the single-device solver, each device compacts the rows of its still-open
    flows into geometrically shrinking buffers as flows freeze.  Differences: no
    fixed-``iterations`` mode (so not reverse-mode differentiable), and one scenario at
    a time (use :func:`sweep` for batches).

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]`` array,
        concrete (it is laid out flow-major and split on the host).
      capacity: ``[links]`` bytes/s, finite and non-negative.
      demand: optional ``[flows]`` rate caps, bytes/s (``+inf`` = uncapped).
      mesh: :class:`~jax.sharding.Mesh`; flows are split over all its axes.  Default:
        one axis over ``jax.devices()`` (all hosts' devices after
        ``jax.distributed.initialize()``).  Flows are padded with inactive rows to a
        multiple of the device count.
      max_iter: safety cap on iterations (default ``flows + 1``, always enough).

    Returns:
      :class:`~fabric_jax.MaxMinResult`: ``rates`` ``[flows]`` (sharded over the mesh),
      ``link_load`` and ``saturated`` ``[links]`` (replicated), ``info``.

    Raises:
      ValueError: as :func:`fabric_jax.max_min_fair`, a batched capacity, a traced
        incidence, or a ``mesh`` that is not a Mesh.
    """
    inc = as_incidence(incidence)
    validate_inputs(inc, capacity, demand)
    if np.ndim(capacity) != 1:
        raise ValueError(f"capacity must be [links] = [{inc.n_links}] for the sharded solver; "
                         f"got shape {np.shape(capacity)} (sweep batches with "
                         f"fabric_jax.distributed.sweep)")
    if demand is not None and np.ndim(demand) != 1:
        raise ValueError(f"demand must be [flows] = [{inc.n_flows}] for the sharded solver; "
                         f"got shape {np.shape(demand)}")
    if any(isinstance(x, jax.core.Tracer) for x in (inc.link_idx, inc.flow_idx, inc.weight)):
        raise ValueError("incidence must be concrete for max_min_fair_sharded (it is split "
                         "across devices on the host); build it outside jit")
    if max_iter is not None and not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer or None; got {max_iter!r}")
    mesh = device_mesh(FLOW_AXIS) if mesh is None else check_mesh(mesh)
    dtype = jnp.result_type(float)
    n_flows, n_links = inc.n_flows, inc.n_links
    links, weight = flow_rows(inc)
    dem = (jnp.full((n_flows,), jnp.inf, dtype) if demand is None
           else jnp.asarray(demand, dtype))
    pad = -n_flows % mesh.size
    if pad:  # inactive rows (weight 0) with demand 0: frozen at rate 0 from the start
        links = jnp.concatenate([links, jnp.zeros((pad, links.shape[1]), links.dtype)])
        weight = jnp.concatenate([weight, jnp.zeros((pad, weight.shape[1]), weight.dtype)])
        dem = jnp.concatenate([dem, jnp.zeros((pad,), dtype)])
    rows = NamedSharding(mesh, P(mesh.axis_names))
    repl = NamedSharding(mesh, P())
    args = (place(links, rows), place(jnp.asarray(weight, dtype), rows),
            place(jnp.asarray(capacity, dtype), repl), place(dem, rows))
    res = _sharded_solver(mesh, n_links, int(n_flows + 1 if max_iter is None else max_iter))(
        *args)
    if pad:
        res = MaxMinResult(rates=res.rates[:n_flows], link_load=res.link_load,
                           saturated=res.saturated, info=res.info)
    return res


@functools.lru_cache(maxsize=32)
def _sharded_solver(mesh: Mesh, n_links: int, max_iter: int):
    axes = tuple(mesh.axis_names)
    row, rep = P(axes), P()
    out_specs = MaxMinResult(rates=row, link_load=rep, saturated=rep,
                             info=MaxMinInfo(iterations=rep, max_violation=rep, converged=rep))

    def local(li, w, capacity, demand):
        # This device's rows as a flow-major incidence; fairness.solve does the rest,
        # with its per-link reductions made global over ``axes``.
        n_local, width = li.shape
        inc = Incidence(li.reshape(-1), jnp.repeat(jnp.arange(n_local, dtype=jnp.int32), width),
                        w.reshape(-1), n_links, n_local, width)
        return solve(inc, capacity, demand, max_iter=max_iter, axis_name=axes)

    return jit(jax.shard_map(local, mesh=mesh, in_specs=(row, row, rep, row),
                             out_specs=out_specs))
