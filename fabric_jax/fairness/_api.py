"""The public entry point :func:`max_min_fair`: host-side checks, the layout for the
device the solve runs on, batches as one block-diagonal problem, then the progressive
solve (:func:`~fabric_jax.fairness.solve`) in a program of its own."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import jit
from ..incidence import Incidence, as_incidence, check_entries
from ..segments import segment_table, tables_wanted
from ._common import check_loop_options
from ._progressive import solve
from ._result import MaxMinInfo, MaxMinResult

#: Below this many entries a one-off solve keeps the CPU's layout on every backend (the
#: host-side table costs more than it saves).
TABLE_MIN_ENTRIES = 1 << 16


def _is_concrete(x) -> bool:
    return x is not None and not isinstance(x, jax.core.Tracer)


def _check_shape(name, x, axis, n):
    """Raises unless ``x`` is ``[axis]`` (``n`` long) or ``[batch, axis]``."""
    shape = np.shape(x)
    if len(shape) not in (1, 2) or shape[-1] != n:
        raise ValueError(f"{name} must have shape [{axis}] = [{n}] (or [batch, {axis}]); "
                         f"got {shape}")


def validate_inputs(inc: Incidence, capacity, demand):
    """Host-side input checks of :func:`max_min_fair` (shared with
    :func:`fabric_jax.distributed.max_min_fair_sharded`): the incidence's entries, the
    shapes of ``capacity`` (``[links]`` or ``[batch, links]``) and ``demand``, and, where
    they are concrete, their values.

    Raises:
      ValueError: wrong shapes, NaN/inf/negative capacities, NaN/negative demands.
    """
    check_entries(inc)
    _check_shape("capacity", capacity, "links", inc.n_links)
    if _is_concrete(capacity):
        c = np.asarray(capacity)
        if not np.all(np.isfinite(c)):
            raise ValueError("capacity contains NaN or inf; capacities must be finite bytes/s")
        if np.any(c < 0):
            raise ValueError("capacity contains negative values; use 0 for a failed link")
    if demand is not None:
        _check_shape("demand", demand, "flows", inc.n_flows)
        if _is_concrete(demand):
            d = np.asarray(demand)
            if np.any(np.isnan(d)) or np.any(d < 0):
                raise ValueError("demand must be non-negative bytes/s (+inf for no cap); "
                                 "got NaN or a negative value")


def max_min_fair(incidence, capacity, demand=None, *, iterations: int | None = None,
                 max_iter: int | None = None, check_every: int = 1) -> MaxMinResult:
    """Weighted max-min fair rates of flows over links (see :mod:`fabric_jax.fairness`).

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]`` array of
        weights in ``[0, 1]``.
      capacity: ``[links]`` (or ``[batch, links]``) link capacities, bytes/s, finite and
        non-negative.
      demand: optional ``[flows]`` (or ``[batch, flows]``) per-flow rate caps, bytes/s;
        ``+inf`` means uncapped.  A flow that crosses no link gets its demand (``+inf``
        without one).
      iterations: run exactly this many iterations (``fori_loop``; reverse-mode
        differentiable).  Default: iterate until every flow is frozen (``while_loop``).
      max_iter: safety cap for the while loop (default ``n_flows + 1``, which always
        suffices since each iteration freezes at least one flow).
      check_every: iterations of the while loop between its tests "is any flow still
        open" (default 1).  The rates and ``info.iterations`` do not depend on it (an
        iteration after the last freeze changes nothing); on a GPU each test is a
        predicate read back to the host, so a deep solve (hundreds of iterations at
        10^6 flows) reads it ``check_every`` times less often, at the cost of at most
        ``check_every - 1`` idle iterations (see :func:`solve`).

    Returns:
      :class:`MaxMinResult` (``rates`` ``[flows]``, ``link_load`` ``[links]``,
      ``saturated`` ``[links]``, ``info``), with a leading batch axis when the inputs
      had one.

    Raises:
      ValueError: wrong shapes, NaN/inf/negative capacities, negative demands.

    Example:
      >>> import numpy as np, fabric_jax as fj
      >>> A = np.array([[1.0, 1.0], [0.0, 1.0]])   # flow 1 crosses both links
      >>> fj.max_min_fair(A, np.array([10.0, 3.0])).rates   # flow 1 capped by link 1
      Array([7., 3.], dtype=float32)
    """
    inc = as_incidence(incidence)
    validate_inputs(inc, capacity, demand)
    if iterations is not None and (not isinstance(iterations, (int, np.integer)) or iterations < 1):
        raise ValueError(f"iterations must be a positive integer or None; got {iterations!r}")
    check_loop_options(iterations, check_every=check_every)
    check_every = int(check_every)
    dtype = jnp.result_type(float)
    capacity = jnp.asarray(capacity, dtype)
    demand = (jnp.full(capacity.shape[:-1] + (inc.n_flows,), jnp.inf, dtype)
              if demand is None else jnp.asarray(demand, dtype))
    if max_iter is None:
        max_iter = inc.n_flows + 1
    elif isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer or None; got {max_iter!r}")
    batched = capacity.ndim == 2 or demand.ndim == 2
    if batched:
        b = capacity.shape[0] if capacity.ndim == 2 else demand.shape[0]
        capacity = jnp.broadcast_to(capacity, (b, inc.n_links))
        demand = jnp.broadcast_to(demand, (b, inc.n_flows))
        if iterations is not None:
            return jax.vmap(lambda c, d: _max_min_fair(inc, c, d, iterations, max_iter))(
                capacity, demand)
        return _max_min_fair_blocks(inc, capacity, demand, max_iter * b, check_every)
    inc, compaction = _for_backend(inc)
    return _max_min_fair(inc, capacity, demand, iterations, max_iter, compaction,
                         check_every)


def _for_backend(inc: Incidence):
    """Host: ``(incidence, compaction)`` for a one-off solve on the device it runs on
    (:func:`fabric_jax.segments.default_platform`).

    On the CPU: the incidence as it is and ``"fine"`` compaction (scatters into a small
    output stay in cache; shrinking buffers cut the work of the long tail).  On an
    accelerator, for a large concrete incidence: its segment table attached
    (:func:`fabric_jax.segments.segment_table`, the link-side sums become gathers, no
    atomic adds contending on hot links) and no compaction, since the table indexes the
    full entry set and every compaction level is one more loop (a kernel launch and a
    host synchronisation per iteration)."""
    if (not tables_wanted() or inc.by_link is not None or inc.nnz < TABLE_MIN_ENTRIES
            or isinstance(inc.link_idx, jax.core.Tracer)
            or isinstance(inc.weight, jax.core.Tracer)):
        return inc, ("none" if inc.by_link is not None else "fine")
    li = np.asarray(inc.link_idx)
    active = np.asarray(inc.weight) != 0
    table = segment_table(np.where(active, li, inc.n_links), inc.n_links)
    return dataclasses.replace(inc, by_link=table), "none"


def block_diagonal(inc: Incidence, batch: int) -> Incidence:
    """``batch`` independent copies of ``inc`` as one block-diagonal incidence.

    Copy ``b`` owns links ``[b * n_links, (b + 1) * n_links)`` and likewise flows; the
    flow-major layout is kept.  Solving it is solving every copy at once, with one
    set of segment reductions per iteration instead of batched scatters (which is what
    ``vmap`` would produce, and is slow on CPU).
    """
    off = jnp.arange(batch, dtype=jnp.int32)[:, None]
    return Incidence((inc.link_idx[None, :] + off * inc.n_links).reshape(-1),
                     (inc.flow_idx[None, :] + off * inc.n_flows).reshape(-1),
                     jnp.broadcast_to(inc.weight, (batch,) + inc.weight.shape).reshape(-1),
                     inc.n_links * batch, inc.n_flows * batch, inc.row_width)


@functools.partial(jit, static_argnums=(3, 4))
def _max_min_fair_blocks(inc: Incidence, capacity, demand, max_iter,
                         check_every=1) -> MaxMinResult:
    b = capacity.shape[0]
    res = solve(block_diagonal(inc, b), capacity.reshape(-1), demand.reshape(-1),
                max_iter=max_iter, check_every=check_every)
    info = MaxMinInfo(iterations=jnp.broadcast_to(res.info.iterations, (b,)),
                      max_violation=jnp.max(jnp.maximum(
                          res.link_load.reshape(b, -1) - capacity, 0.0), axis=1, initial=0.0),
                      converged=jnp.broadcast_to(res.info.converged, (b,)))
    return MaxMinResult(rates=res.rates.reshape(b, -1), link_load=res.link_load.reshape(b, -1),
                        saturated=res.saturated.reshape(b, -1), info=info)


@functools.partial(jit, static_argnums=(3, 4, 5, 6))
def _max_min_fair(inc: Incidence, capacity, demand, iterations, max_iter,
                  compaction="fine", check_every=1) -> MaxMinResult:
    return solve(inc, capacity, demand, iterations=iterations, max_iter=max_iter,
                 compaction=compaction, check_every=check_every)
