"""Exact, vectorised weighted max-min fair rate allocation.

Model (units: rates and capacities in bytes/s).  Flow ``f`` has rate ``r_f``; link
``l`` carries ``load_l = sum_f A[l, f] r_f`` where ``A[l, f] in (0, 1]`` is the fraction
of the flow's rate routed over ``l`` (:mod:`fabric_jax.incidence`).  Each flow may have a
demand ``d_f`` (a rate cap, ``+inf`` if absent).  The weighted max-min fair allocation
with fixed split weights is the unique ``r`` with

    (feasibility)   load_l <= c_l  for every link l,   0 <= r_f <= d_f  for every flow f,
    (bottleneck)    every flow f has r_f = d_f, or crosses a link l with A[l, f] > 0,
                    load_l = c_l and r_f >= r_g for every flow g with A[l, g] > 0.

It is what *progressive filling* computes (Bertsekas & Gallager, Data Networks, 2nd
ed., sec. 6.5.2; SimGrid's LMM solver, ``src/kernel/lmm/maxmin.cpp``): all unfrozen flows
grow together at the same speed; a flow freezes when a link it uses saturates or when it
reaches its demand.

Algorithm.  The textbook loop freezes one bottleneck *level* per iteration, which takes
as many iterations as there are distinct rates (thousands on a real fabric).  Here every
iteration computes, for every link, the level at which it would saturate if all its
unfrozen flows kept growing,

    t_l = (c_l - sum_{frozen g} A[l, g] r_g) / sum_{unfrozen f} A[l, f],

and for every unfrozen flow ``m_f = min(d_f, min_{l in f} t_l)``.  A link whose ``t_l``
is the smallest level of *all* the flows it carries (``t_l = min_{f in l} m_f``) is a
bottleneck now: its ``t_l`` can only grow as other flows freeze below it, so its flows
freeze at exactly ``t_l`` -- and all such links, across the whole fabric, are frozen in
the same iteration (likewise every flow whose demand is below all its links' levels).
The global minimum always qualifies, so each iteration freezes at least one flow; the
iteration count follows the depth of the bottleneck structure (Ros-Giralt et al., "On
the bottleneck structure of congestion-controlled networks", SIGMETRICS 2020), not the
number of distinct rates.  Every step is a segment reduction over the COO entries:
O(nnz) work per iteration, no Python loop over flows or links.

Warm start.  :func:`solve_warm` solves a problem in which some flows are known to keep
given rates (the event-driven simulator proves which, see :mod:`fabric_jax.sim`): it
folds their load into a residual capacity and runs the same freezing on the other
flows only, compacted into a buffer sized to them.

Transformations.  ``jit`` and ``vmap`` (over capacities/demands/weights) work.  A
leading batch axis on ``capacity``/``demand`` is also accepted directly: the batch is
then solved as one block-diagonal problem (:func:`block_diagonal`), which is faster
than ``vmap`` on CPU.  The default loop is a ``lax.while_loop``, which
supports forward-mode autodiff (``jvp``/``jacfwd``; the allocation is piecewise linear
in capacities and demands, so these are exact away from ties) but **not** reverse mode.
Pass ``iterations=N`` for a fixed-trip-count loop that supports ``grad`` as well (the
result is exact when ``N`` is at least the bottleneck depth; ``info.converged`` says
whether it was).  Gradients at ties (two links saturating at the same level) are one of
the one-sided derivatives.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .compiling import jit
from .incidence import Incidence, as_incidence, check_entries
from .segments import segment_reduce, segment_table, tables_wanted

__all__ = ["max_min_fair", "MaxMinResult", "MaxMinInfo", "SATURATION_RTOL", "joining_share",
           "water_fill"]

#: A link counts as saturated when its load is within this relative distance of capacity.
SATURATION_RTOL = {np.dtype("float32"): 1e-5, np.dtype("float64"): 1e-10}


@dataclasses.dataclass(frozen=True)
class MaxMinInfo:
    """Solver diagnostics.

    Attributes:
      iterations: loop iterations executed (bottleneck-structure depth when converged).
      max_violation: ``max_l max(load_l - c_l, 0)`` in bytes/s (float round-off only).
      converged: every flow is frozen (always true for the default while-loop).
    """

    iterations: Any
    max_violation: Any
    converged: Any


@dataclasses.dataclass(frozen=True)
class MaxMinResult:
    """Max-min fair allocation.

    Attributes:
      rates: ``[flows]`` bytes/s.
      link_load: ``[links]`` bytes/s.
      saturated: ``[links]`` bool, load equals capacity (and the link carries a flow).
      info: :class:`MaxMinInfo`.
    """

    rates: Any
    link_load: Any
    saturated: Any
    info: MaxMinInfo


jax.tree_util.register_dataclass(MaxMinInfo)
jax.tree_util.register_dataclass(MaxMinResult)


def _is_concrete(x) -> bool:
    return x is not None and not isinstance(x, jax.core.Tracer)


def check_loop_options(iterations=None, unroll=0, check_every=1, *,
                       names=("iterations", "unroll", "check_every"), fixed=None):
    """Host: the options that shape the solver's exact while loop (:func:`solve`'s
    ``unroll`` and ``check_every``), checked against each other and against a fixed
    iteration count.  ``names``: the caller's names for ``iterations``, ``unroll`` and
    ``check_every`` (the errors name them); ``fixed``: what sets a fixed count, in
    words (default: the ``iterations`` name).  Raises ``ValueError``."""
    it_name, un_name, ce_name = names

    def count(x):
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
    if not (count(unroll) and unroll >= 0):
        raise ValueError(f"{un_name} must be a non-negative integer (iterations); "
                         f"got {unroll!r}")
    if not (count(check_every) and check_every >= 1):
        raise ValueError(f"{ce_name} must be a positive integer (iterations per test of the "
                         f"solver's loop); got {check_every!r}")
    if iterations is not None and (unroll or check_every != 1):
        bad = un_name if unroll else ce_name
        raise ValueError(f"{bad}: shapes the exact while loop, so it cannot be combined "
                         f"with {fixed or it_name}; set {un_name}=0 and {ce_name}=1")


def _validate(inc: Incidence, capacity, demand):
    check_entries(inc)
    cap_shape = np.shape(capacity)
    if len(cap_shape) not in (1, 2) or cap_shape[-1] != inc.n_links:
        raise ValueError(
            f"capacity must have shape [links] = [{inc.n_links}] (or [batch, links]); "
            f"got {cap_shape}")
    if _is_concrete(capacity):
        c = np.asarray(capacity)
        if not np.all(np.isfinite(c)):
            raise ValueError("capacity contains NaN or inf; capacities must be finite bytes/s")
        if np.any(c < 0):
            raise ValueError("capacity contains negative values; use 0 for a failed link")
    if demand is not None:
        d_shape = np.shape(demand)
        if len(d_shape) not in (1, 2) or d_shape[-1] != inc.n_flows:
            raise ValueError(
                f"demand must have shape [flows] = [{inc.n_flows}] (or [batch, flows]); "
                f"got {d_shape}")
        if _is_concrete(demand):
            d = np.asarray(demand)
            if np.any(np.isnan(d)) or np.any(d < 0):
                raise ValueError("demand must be non-negative bytes/s (+inf for no cap); "
                                 "got NaN or a negative value")


def max_min_fair(incidence, capacity, demand=None, *, iterations: int | None = None,
                 max_iter: int | None = None, check_every: int = 1) -> MaxMinResult:
    """Weighted max-min fair rates of flows over links (see the module docstring).

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
    _validate(inc, capacity, demand)
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


#: Below this many entries a one-off solve keeps the CPU's layout on every backend (the
#: host-side table costs more than it saves).
TABLE_MIN_ENTRIES = 1 << 16


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


#: Below this many entries the solver stops compacting (a level's loop is cheap).
COMPACT_MIN_ENTRIES = 4096
#: Each compaction level holds ``1 / COMPACT_FACTOR`` of the previous level's rows...
COMPACT_FACTOR = 2
#: ...except while the buffer is above ``COMPACT_FINE_UNTIL`` of the full size, where the
#: finer ``COMPACT_FACTOR_FINE`` applies: the early levels hold most of the work (on a
#: random-ECMP fat-tree only ~1% of flows freeze per iteration), the late ones are
#: cheap, and every level adds a while loop to compile.  Measured on
#: ``experiments/bench_maxmin.py`` (fat_tree(16), 10^5 flows, 2 CPU cores): 1.3 down
#: to a tenth, then 2, ran ~15% faster than 2 throughout (0.179 vs 0.212 s median),
#: for ~60% more compile time (6.4 vs 4.0 s; 1.3 throughout: 10 s).
COMPACT_FACTOR_FINE = 1.3
COMPACT_FINE_UNTIL = 0.1


#: What :func:`solve`'s ``compaction`` may be.
COMPACTIONS = ("fine", "coarse", "none")


def _levels(n: int, unit: int = 1, fine: bool | str = True) -> list[int]:
    """Buffer sizes (rows of ``unit`` entries) of the compaction levels for ``n`` rows
    (``fine=False`` or ``"coarse"``: factor ``COMPACT_FACTOR`` throughout, fewer loops to
    compile; ``"none"``: one level, no compaction)."""
    if fine not in (True, False) + COMPACTIONS:
        raise ValueError(f"compaction must be one of {COMPACTIONS}; got {fine!r}")
    if fine == "none":
        return [n]
    fine = fine in (True, "fine")
    sizes = [n]
    while sizes[-1] * unit > COMPACT_MIN_ENTRIES:
        f = fine and sizes[-1] > COMPACT_FINE_UNTIL * n
        sizes.append(int(np.ceil(sizes[-1] / (COMPACT_FACTOR_FINE if f else COMPACT_FACTOR))))
    return sizes


def _link_sum(values, li, n_links, axis_name, table=None):
    """Per-link sum of per-entry ``values`` (over all shards when ``axis_name`` is set;
    with ``table``, the :class:`fabric_jax.segments.SegmentTable` of ``li``, a gather on
    accelerators)."""
    out = segment_reduce(values, li, n_links, table, in_range=True)
    return out if axis_name is None else jax.lax.psum(out, axis_name)


def _link_min(values, li, n_links, axis_name, table=None):
    out = segment_reduce(values, li, n_links, table, "min", in_range=True)
    return out if axis_name is None else jax.lax.pmin(out, axis_name)


def on_accelerators(accelerator, cpu, operand):
    """``accelerator(operand)`` in a program compiled for a GPU or TPU, ``cpu(operand)``
    in one compiled for the CPU (chosen when the program is lowered,
    ``jax.lax.platform_dependent``: one branch is compiled).  For forms that cost the
    same work but differ in what the runtime does with them, e.g. a while loop's first
    iteration run before the loop: on XLA:GPU the loop's first test is a host round trip
    (its ``WhileThunk`` reads the predicate back), on the CPU it is free and the
    peeled iteration only adds fusions."""
    return jax.lax.platform_dependent(operand, cpu=cpu, default=accelerator)


def _any_shard(x, axis_name):
    """``x`` (a scalar bool) or-ed over shards: keeps loop trip counts uniform."""
    if axis_name is None:
        return x
    return jax.lax.pmax(x.astype(jnp.int32), axis_name) > 0


def _iteration(li, fi, weight, active, capacity, demand, n_links, n_flows, rate, frozen,
               axis_name=None, table=None):
    """One bottleneck-freezing iteration over COO entries (see the module docstring).

    Returns the new ``rate``, ``frozen``, the links' load from flows frozen before this
    iteration (within these entries), and the number of entries of still-open flows.
    With ``axis_name`` the entries are this shard's (every flow's entries on one shard)
    and the per-link reductions run over all shards.
    """
    entry_frozen = frozen[fi]
    entry_open = active & ~entry_frozen
    # One scatter for both per-link sums: open weight and load of frozen flows.
    both = jnp.stack([jnp.where(entry_open, weight, 0.0),
                      jnp.where(active & entry_frozen, weight * rate[fi], 0.0)], axis=1)
    sums = _link_sum(both, li, n_links, axis_name, table)
    open_weight, frozen_load = sums[:, 0], sums[:, 1]
    has_open = open_weight > 0
    safe_w = jnp.where(has_open, open_weight, 1.0)  # double-where: no NaN/inf grads
    level = jnp.where(has_open, jnp.maximum(capacity - frozen_load, 0.0) / safe_w, jnp.inf)
    level_e = jnp.where(entry_open, level[li], jnp.inf)
    link_level = jax.ops.segment_min(level_e, fi, num_segments=n_flows)      # [flows]
    target = jnp.minimum(link_level, demand)
    # A link is a bottleneck now if its level is the smallest of all its flows'.
    link_floor = _link_min(jnp.where(entry_open, target[fi], jnp.inf), li, n_links,
                           axis_name, table)
    bottleneck = has_open & (level <= link_floor)
    on_bottleneck = jax.ops.segment_max((entry_open & bottleneck[li]).astype(jnp.int8), fi,
                                        num_segments=n_flows) > 0
    freeze = ~frozen & (on_bottleneck | (demand <= link_level))
    new_rate = jnp.where(freeze, target, rate)
    new_frozen = frozen | freeze
    open_left = jnp.sum(entry_open & ~freeze[fi])
    return new_rate, new_frozen, frozen_load, open_left


def _iteration_rows(li, weight, active, capacity, demand, n_links, rate, frozen,
                    axis_name=None, table=None):
    """:func:`_iteration` for the flow-major layout: ``li``/``weight``/``active`` are
    ``[flows, width]``, so per-flow gathers are broadcasts and per-flow reductions are
    dense; only the two per-link reductions scatter.  ``li`` must be in range (padding
    entries point at any valid link and have ``active`` false)."""
    entry_open = active & ~frozen[:, None]
    # Both per-link sums in one scatter of complex numbers (open weight + i * load of
    # frozen flows): ~30% cheaper on CPU than a two-column scatter.
    both = jax.lax.complex(jnp.where(entry_open, weight, 0.0),
                           jnp.where(active & frozen[:, None], weight * rate[:, None], 0.0))
    sums = _link_sum(both.reshape(-1), li.reshape(-1), n_links, axis_name, table)
    open_weight, frozen_load = jnp.real(sums), jnp.imag(sums)
    has_open = open_weight > 0
    safe_w = jnp.where(has_open, open_weight, 1.0)  # double-where: no NaN/inf grads
    level = jnp.where(has_open, jnp.maximum(capacity - frozen_load, 0.0) / safe_w, jnp.inf)
    # jnp.take with mode="clip" skips the negative-index fix-up of ``level[li]``.
    level_e = jnp.where(entry_open, jnp.take(level, li, mode="clip"), jnp.inf)
    link_level = jnp.min(level_e, axis=1, initial=jnp.inf)                    # [flows]
    target = jnp.minimum(link_level, demand)
    link_floor = _link_min(jnp.where(entry_open, target[:, None], jnp.inf).reshape(-1),
                           li.reshape(-1), n_links, axis_name, table)
    bottleneck = has_open & (level <= link_floor)
    on_bottleneck = jnp.any(entry_open & jnp.take(bottleneck, li, mode="clip"), axis=1)
    freeze = ~frozen & (on_bottleneck | (demand <= link_level))
    return jnp.where(freeze, target, rate), frozen | freeze


def _solve_rows(inc: Incidence, capacity, demand, rate, frozen, max_iter, axis_name=None,
                fine: bool | str = True, unroll: int = 0, check_every: int = 1):
    """While-loop solve on the flow-major layout, compacting the rows of open flows
    into geometrically shrinking buffers as flows freeze (frozen load folds into a
    residual capacity).  With ``axis_name`` each shard compacts its own rows; a level
    ends when every shard's open rows fit its next buffer.  ``unroll``: iterations run
    in a loop of known trip count before the first level's loop; ``check_every``:
    iterations per trip of the loops (see :func:`solve`)."""
    n_flows, width = inc.n_flows, inc.row_width
    li = inc.link_idx.reshape(n_flows, width)
    w = inc.weight.astype(capacity.dtype).reshape(n_flows, width)
    act = w != 0
    rows = jnp.arange(n_flows)
    sizes = _levels(n_flows, width, fine)
    # one loop: on an accelerator its first iteration runs outside it (solve)
    peel = len(sizes) == 1 and not unroll
    residual = capacity
    it = jnp.asarray(0, jnp.int32)
    r, f, d = rate, frozen, demand
    for level, size in enumerate(sizes):
        if level > 0:
            # Scatter back, then keep only the rows of still-open flows.
            rate = rate.at[rows].set(r, mode="drop")
            frozen = frozen.at[rows].set(f, mode="drop")
            on = act & f[:, None]
            residual = residual - _link_sum(
                jnp.where(on, w * r[:, None], 0.0).reshape(-1), li.reshape(-1),
                inc.n_links, axis_name)
            pick = jnp.nonzero(~f, size=size, fill_value=0)[0]
            keep = jnp.arange(size) < jnp.sum(~f)
            rows = jnp.where(keep, rows[pick], n_flows)
            li, w = li[pick], jnp.where(keep[:, None], w[pick], 0.0)
            act = w != 0
            r, f, d = r[pick], ~keep | f[pick], d[pick]
        stop_at = sizes[level + 1] if level + 1 < len(sizes) else 0

        def going(f, it, stop_at=stop_at):
            return _any_shard(jnp.sum(~f) > stop_at, axis_name) & (it < max_iter)

        # the incidence's segment table holds the entries of the first level only
        table = inc.by_link if level == 0 else None

        def counted(c, li=li, w=w, act=act, residual=residual, d=d, table=table):
            """One iteration, counted if a flow was open (after the last freeze an
            iteration changes nothing)."""
            r, f, it = c
            busy = _any_shard(jnp.any(~f), axis_name).astype(jnp.int32)
            r, f = _iteration_rows(li, w, act, residual, d, inc.n_links, r, f, axis_name,
                                   table)
            return r, f, it + busy

        # The loop's condition is computed at the end of the body, beside the freeze
        # that it tests (one fused reduction there instead of kernels of its own: on a
        # GPU the condition is read back to the host every iteration).  A trip runs
        # ``check_every`` iterations; the loop runs while a flow is open, so its first
        # one always counts.
        def body(c, li=li, w=w, act=act, residual=residual, d=d, table=table,
                 going=going, counted=counted):
            r, f = _iteration_rows(li, w, act, residual, d, inc.n_links, c[0], c[1],
                                   axis_name, table)
            c = (r, f, c[2] + 1)
            for _ in range(check_every - 1):
                c = counted(c)
            return c + (going(c[1], c[2]),)

        def run(c, k, body=body, going=going, counted=counted):
            """``k`` counted iterations in a loop of known trip count, then the loop."""
            if k:
                c = jax.lax.fori_loop(0, k, lambda _, c: counted(c), c)
            r, f, it = c
            return jax.lax.while_loop(lambda c: c[3], body, (r, f, it, going(f, it)))[:3]

        if level == 0 and peel:
            r, f, it = on_accelerators(lambda c: run(c, 1), lambda c: run(c, 0), (r, f, it))
        else:
            r, f, it = run((r, f, it), unroll if level == 0 else 0)
    rate = rate.at[rows].set(r, mode="drop")
    frozen = frozen.at[rows].set(f, mode="drop")
    return rate, frozen, it


def solve(inc: Incidence, capacity, demand, *, iterations=None, max_iter=None,
          axis_name=None, compaction: str = "fine", unroll: int = 0,
          check_every: int = 1) -> MaxMinResult:
    """Unvalidated, traceable core of :func:`max_min_fair` (for use inside jitted loops).

    ``capacity`` ``[links]`` and ``demand`` ``[flows]`` must be arrays of the same float
    dtype; ``demand`` may hold ``+inf``.

    ``axis_name``: call inside ``shard_map`` with the flows split over that mesh axis
    (``inc`` holds this shard's flows, each with all of its entries, and global link
    indices; ``capacity`` is replicated).  Per-link sums and minima are then
    ``psum``/``pmin`` over the axis and every shard runs the same number of iterations,
    so the result equals the unsharded solve.  ``rates`` are this shard's; ``link_load``,
    ``saturated`` and ``info`` are global.

    With ``iterations=None`` the entries of still-open flows are compacted into buffers
    of geometrically shrinking size (:func:`_levels`) as flows freeze, folding the
    load of frozen flows into a residual capacity: most flows freeze in the first few
    iterations, so the long tail of a deep bottleneck structure runs on small arrays.
    ``compaction`` (static): ``"fine"`` (default) the levels of :func:`_levels`,
    ``"coarse"`` halving levels only, ``"none"`` one loop over all the entries.  Each
    level is one more while loop to compile (about 1.3 s on a 2-core CPU for the
    57,000 entries of the default ``compare`` scenario); a solve inside a time-stepped
    loop whose every step settles in a few iterations (the fluid engine's) gains
    nothing from them at run time and takes ``"none"``.  The answer does not depend
    on it (the same iteration on the same entries).

    ``unroll`` (static int, default 0; with ``iterations=None`` only): run that many
    iterations as a loop of known trip count (no test) before the while loop, which
    then finishes what is left (its condition, "is any flow still open", is the
    exactness check: it runs zero iterations when the unrolled ones froze every flow).  An iteration
    after the last freeze changes nothing, so the result is bit-identical to the plain
    loop's with ``compaction="none"`` (the fluid step's; with compaction levels the
    same up to the order of float sums), and ``info.iterations`` counts only the
    iterations that had an open flow (the bottleneck depth, whatever ``unroll``).  For
    accelerators: a time-stepped solve that settles in a few iterations then runs them
    with no data-dependent stop -- they are a loop whose trip count XLA knows, which
    XLA:GPU runs without reading a predicate back to the host per iteration (its
    ``WhileThunk``; ``experiments/_hlo.py``, :func:`launch_model`); on a CPU the
    iterations beyond the depth are wasted work.  With ``compaction="none"``, in a
    program compiled for an accelerator, the first iteration always runs this way
    (``unroll=0`` is ``unroll=1`` there, :func:`on_accelerators`): it is needed
    whenever a flow crosses a link, so the while loop's first test, a host round trip
    on a GPU, would ask what is known.

    ``check_every`` (static int >= 1, default 1; with ``iterations=None`` only): the
    while loop runs that many iterations per trip and tests "is any flow still open"
    once per trip, so a GPU reads its predicate back ``check_every`` times less often,
    for at most ``check_every - 1`` iterations past the last freeze (which change
    nothing: the same bits, the same ``info.iterations``, as ``unroll``).
    """
    check_loop_options(iterations, unroll, check_every)
    check_every = int(check_every)
    dtype = capacity.dtype
    n_links, n_flows = inc.n_links, inc.n_flows
    if max_iter is None:
        max_iter = n_flows + 1
    weight = inc.weight.astype(dtype)
    active = inc.active
    has_links = inc.flow_has_links()
    # Flows that cross no link are limited by their demand only.
    rate = jnp.where(has_links, jnp.zeros_like(demand), demand)
    frozen = ~has_links
    it = jnp.asarray(0, jnp.int32)

    if iterations is not None:
        def body(i, c):
            rate, frozen, it = c

            def step(c):
                r, f, _, _ = _iteration(inc.link_idx, inc.flow_idx, weight, active, capacity,
                                        demand, n_links, n_flows, c[0], c[1], axis_name,
                                        inc.by_link)
                return r, f, c[2] + 1
            done = jnp.all(frozen)
            if axis_name is not None:  # collectives inside: skip only when every shard is done
                done = ~_any_shard(~done, axis_name)
            return jax.lax.cond(done, lambda x: x, step, (rate, frozen, it))
        rate, frozen, it = jax.lax.fori_loop(0, iterations, body, (rate, frozen, it))
    elif inc.row_width is not None and inc.nnz == n_flows * inc.row_width:
        rate, frozen, it = _solve_rows(inc, capacity, demand, rate, frozen, max_iter,
                                       axis_name, compaction, unroll, check_every)
    else:
        li, fi, w, act = inc.link_idx, inc.flow_idx, weight, active
        residual = capacity
        sizes = _levels(int(np.shape(li)[0]), 1, compaction)
        for level, size in enumerate(sizes):
            if level > 0:
                # Keep only the entries of still-open flows; fold the rest into capacity.
                open_e = act & ~frozen[fi]
                idx = jnp.nonzero(open_e, size=size, fill_value=0)[0]
                keep = jnp.arange(size) < jnp.sum(open_e)
                li, fi, w = li[idx], fi[idx], jnp.where(keep, w[idx], 0.0)
                act = keep & act[idx]
            stop_at = sizes[level + 1] if level + 1 < len(sizes) else 0

            def cond(c, stop_at=stop_at):
                return (_any_shard((c[3] > stop_at) & jnp.any(~c[1]), axis_name)
                        & (c[2] < max_iter))

            table = inc.by_link if level == 0 else None

            def counted(c, li=li, fi=fi, w=w, act=act, residual=residual, table=table):
                """One iteration, counted if an entry was open (``c[3]``, the open
                entries before it), as in :func:`_solve_rows`."""
                r, f, it, n_open = c
                busy = _any_shard(n_open > 0, axis_name).astype(jnp.int32)
                r, f, _, n_open = _iteration(li, fi, w, act, residual, demand, n_links,
                                             n_flows, r, f, axis_name, table)
                return r, f, it + busy, n_open

            def body(c, counted=counted):   # the loop runs while an entry is open
                c = counted(c)
                for _ in range(check_every - 1):
                    c = counted(c)
                return c

            c = (rate, frozen, it, jnp.sum(act & ~frozen[fi]))
            if level == 0 and unroll:
                c = jax.lax.fori_loop(0, unroll, lambda _, c: counted(c), c)
            rate, frozen, it, _ = jax.lax.while_loop(cond, body, c)
            # Load of the flows frozen at this level, over this level's entries (exact:
            # recomputed from the final rates rather than carried from the last step).
            on = act & frozen[fi]
            residual = residual - _link_sum(jnp.where(on, w * rate[fi], 0.0), li, n_links,
                                            axis_name)
    load = inc.link_load(jnp.where(has_links, rate, 0.0))
    rtol = SATURATION_RTOL.get(np.dtype(dtype), 1e-5)
    carries = inc.link_sum(jnp.where(active, 1.0, 0.0).astype(dtype))
    converged = jnp.all(frozen)
    if axis_name is not None:
        load, carries = jax.lax.psum((load, carries), axis_name)
        converged = ~_any_shard(~converged, axis_name)
    saturated = (carries > 0) & (load >= capacity * (1 - rtol))
    info = MaxMinInfo(iterations=it,
                      max_violation=jnp.max(jnp.maximum(load - capacity, 0.0), initial=0.0),
                      converged=converged)
    return MaxMinResult(rates=rate, link_load=load, saturated=saturated, info=info)


#: Public name of the host-side input checks of :func:`max_min_fair` (shared with
#: :func:`fabric_jax.distributed.max_min_fair_sharded`).
validate_inputs = _validate


#: Smallest compaction bucket (rows) of :func:`solve_warm`; below it a bucket is cheap.
WARM_MIN_BUCKET = 64
#: Bucket sizes of :func:`solve_warm` shrink by this factor (one solve compiled per size).
WARM_BUCKET_FACTOR = 2


def _warm_buckets(n_flows: int) -> list[int]:
    sizes = [n_flows]
    while sizes[-1] > WARM_MIN_BUCKET:
        sizes.append(int(np.ceil(sizes[-1] / WARM_BUCKET_FACTOR)))
    return sizes


def compact_indices(mask, size: int):
    """Indices of the first ``size`` true entries of the 1-D ``mask``, padded with 0.

    Equal to ``jnp.nonzero(mask, size=size, fill_value=0)[0]`` (int32), computed with a
    parallel prefix sum (``lax.associative_scan``) and one scatter: about 4x cheaper
    than ``jnp.nonzero`` on CPU, where the solver's per-event compaction was a
    measurable part of the event-driven simulator's cost.
    """
    n = mask.shape[0]
    pos = jax.lax.associative_scan(jnp.add, mask.astype(jnp.int32)) - 1
    return jnp.zeros((size,), jnp.int32).at[jnp.where(mask, pos, size)].set(
        jnp.arange(n, dtype=jnp.int32), mode="drop")


def solve_warm(inc: Incidence, capacity, demand, rate, frozen, *, max_iter=None,
               residual=None, load=None) -> MaxMinResult:
    """Max-min rates when the flows in ``frozen`` are known to keep ``rate`` exactly.

    The residual problem -- the open flows on the capacity left by the frozen ones,
    ``c_l - sum_{g frozen} A[l, g] r_g`` -- is solved by the same parallel bottleneck
    freezing as :func:`solve`, after compacting the open flows' rows into the smallest
    buffer of :func:`_warm_buckets` that holds them (one branch of a ``lax.switch`` per
    buffer size), so an iteration costs in proportion to the open entries, not all.

    Why this is the full solution.  Let ``r*`` be the max-min allocation of the whole
    problem and suppose ``r*_g = rate_g`` for every frozen ``g`` (the caller proves
    it: :func:`fabric_jax.sim.simulate_flows` uses the threshold argument in
    ``fabric_jax.sim``).  Restricted to the open set ``U``, ``r*_U`` is feasible for
    the residual capacities, and every open ``f`` still has ``r*_f = d_f`` or a link
    ``l`` that is saturated (residual load = residual capacity, since the frozen load
    was subtracted from both sides) on which ``r*_f`` is the largest rate among the
    open flows (it was the largest among all flows).  That is the bottleneck
    characterisation of the residual problem, whose max-min allocation is unique, so
    the residual solve returns exactly ``r*_U``.

    Incremental link load (``load`` given).  With ``L_l = sum_f A[l, f] rate_f`` over
    *all* flows (the open ones at their previous rates), the residual capacity is
    ``c_l - L_l + sum_{f open} A[l, f] rate_f`` and the new load is
    ``L_l + sum_{f open} A[l, f] (r*_f - rate_f)``: both are sums over the open rows
    only, so nothing in the solve costs in proportion to the frozen flows except the
    compaction's prefix sum.  When the buffer is the whole problem, both are
    recomputed from scratch instead, which also bounds the round-off that the
    incremental updates accumulate over many calls.

    Args:
      inc: flow-major incidence (``row_width`` set, ``nnz == n_flows * row_width``).
      capacity: ``[links]`` bytes/s; ``demand``: ``[flows]`` bytes/s (``+inf``: none).
      rate: ``[flows]`` rates of the frozen flows (with ``load``: the previous rates of
        all flows, the ones ``load`` was summed from; otherwise open entries are
        ignored).
      frozen: ``[flows]`` bool.
      max_iter: iteration cap of the residual solve (default ``n_flows + 1``).
      residual: optional precomputed ``[links]`` residual capacity (skips one
        scatter over the frozen entries; ignored when ``load`` is given).
      load: optional ``[links]`` link load ``sum_f A[l, f] rate_f`` of all flows at
        ``rate`` (see above); the result's ``link_load`` is then updated from it.

    Returns:
      :class:`MaxMinResult`; ``info.iterations`` counts the residual solve only.
    """
    n_flows, width, n_links = inc.n_flows, inc.row_width, inc.n_links
    if width is None or inc.nnz != n_flows * width:
        raise ValueError("solve_warm needs a flow-major incidence (row_width set); build it "
                         "with Incidence.from_coo / from_paths on the host")
    dtype = capacity.dtype
    if max_iter is None:
        max_iter = n_flows + 1
    li = inc.link_idx.reshape(n_flows, width)
    w = inc.weight.astype(dtype).reshape(n_flows, width)
    act = w != 0
    rate = jnp.asarray(rate, dtype)
    open_ = ~frozen
    count = jnp.sum(open_)
    sizes = _warm_buckets(n_flows)
    which = jnp.sum(jnp.asarray(sizes) >= count) - 1

    def row_load(mask, r):  # [links] load of the rows in ``mask`` at rates ``r``
        on = act & mask[:, None]
        return _link_sum(jnp.where(on, w * jnp.where(mask, r, 0.0)[:, None], 0.0).reshape(-1),
                         li.reshape(-1), n_links, None)

    def branch(size):
        def run(_):
            full = size == n_flows
            idx = compact_indices(open_, size)
            keep = jnp.arange(size) < count
            w_s = jnp.where(keep[:, None], w[idx], 0.0)
            li_s = li[idx]
            d_s = demand[idx]
            has = jnp.any(w_s != 0, axis=1)
            on_s = w_s != 0
            old_s = jnp.where(has, rate[idx], 0.0)

            def buffer_load(r):
                return _link_sum(jnp.where(on_s, w_s * r[:, None], 0.0).reshape(-1),
                                 li_s.reshape(-1), n_links, None)

            if load is not None and not full:
                res_cap = capacity - load + buffer_load(old_s)
            elif residual is not None and load is None:
                res_cap = residual
            else:
                res_cap = capacity - row_load(frozen, rate)
            sub = Incidence(li_s.reshape(-1), jnp.repeat(jnp.arange(size), width),
                            w_s.reshape(-1), n_links, size, width)
            r, f, it = _solve_rows(sub, res_cap, d_s, jnp.where(has, 0.0, d_s).astype(dtype),
                                   ~has, max_iter, fine=False)
            target = jnp.where(keep, idx, n_flows)
            new_rate = jnp.where(frozen, rate, 0.0).at[target].set(r, mode="drop")
            if load is None:
                new_load = jnp.zeros((n_links,), dtype)  # computed below, from scratch
            elif full:
                new_load = row_load(jnp.ones((n_flows,), bool), new_rate)
            else:
                new_load = load + buffer_load(jnp.where(has, r, 0.0) - old_s)
            return new_rate, jnp.all(f | ~keep), it, new_load
        return run

    rate, converged, it, new_load = jax.lax.switch(which, [branch(s) for s in sizes], None)
    if load is None:
        new_load = inc.link_load(jnp.where(jnp.isfinite(rate), rate, 0.0))
    rtol = SATURATION_RTOL.get(np.dtype(dtype), 1e-5)
    carries = inc.link_sum(jnp.where(inc.active, 1.0, 0.0).astype(dtype))
    saturated = (carries > 0) & (new_load >= capacity * (1 - rtol))
    info = MaxMinInfo(iterations=it,
                      max_violation=jnp.max(jnp.maximum(new_load - capacity, 0.0), initial=0.0),
                      converged=converged)
    return MaxMinResult(rates=rate, link_load=new_load, saturated=saturated, info=info)


def joining_share(inc: Incidence, capacity, rates, load=None, *, axis_name=None):
    """``[flows]`` the rate each flow would get if it alone raised its demand, link by link.

    Given a max-min allocation ``rates`` (e.g. :func:`solve`'s, with some flows held
    below their share by their demand), the share a flow ``f`` could take at once if it
    wanted more: on every link ``l`` it crosses (``w = A[l, f] > 0``, load ``L_l``,
    spare ``S_l = c_l - L_l``, top rate ``lam_l = max_{g on l} r_g`` carried with weight
    ``W_l = sum_{g on l, r_g = lam_l} A[l, g]``)

    * a link with spare capacity gives it ``r_f + S_l / w``;
    * a saturated link on which ``f`` is below the top shares with the flows at the
      top (those bottlenecked there): progressive filling from the current loads
      (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2) brings ``f`` and
      them to the common level ``(S_l + lam_l W_l + w r_f) / (W_l + w)``;
    * a saturated link on which ``f`` is at the top gives it ``r_f`` (it is already
      bottlenecked there);

    and the share is the smallest of these over its links (at least ``r_f``; ``+inf``
    for a flow that crosses no link).  It is the exact max-min rate of ``f`` with its
    demand raised to ``+inf`` when that rate is set by one link on which the other
    flows keep their rates or drop to the common level (e.g. any single link whose
    flows below the top stay below the new level); otherwise a one-link estimate (the
    others' rates elsewhere are held).

    Use: the fluid loop's last step of a flow (:mod:`fabric_jax.fluid`), where the
    flow offers only ``remaining / dt``, is allocated that, and would otherwise be
    taken to send it over the whole step; it sends at this share and finishes early in
    the step (the other flows take the rest of the step's capacity, so the step's
    bytes per flow are unchanged).

    Args:
      inc: :class:`~fabric_jax.Incidence` ``[links, flows]``.
      capacity: ``[links]`` capacity the allocation ``rates`` was computed for, bytes/s.
      rates: ``[flows]`` the allocation, bytes/s.
      load: optional ``[links]`` ``link_load(rates)`` when the caller has it (over
        all shards with ``axis_name``).
      axis_name: as :func:`solve`: inside ``shard_map`` with the flows split over that
        mesh axis, the per-link maxima and sums are ``pmax`` / ``psum`` over it.

    Returns:
      ``[flows]`` bytes/s, ``>= rates``.
    """
    dtype = jnp.result_type(rates)
    rtol = SATURATION_RTOL.get(np.dtype(dtype), 1e-5)
    on = inc.active
    w = jnp.where(on, inc.weight.astype(dtype), 1.0)
    r_e = rates[inc.flow_idx]
    lam = inc.link_max(jnp.where(on, r_e, 0.0))
    if axis_name is not None:
        lam = jax.lax.pmax(lam, axis_name)
    lam_e = lam[inc.link_idx]
    top = on & (r_e >= lam_e * (1.0 - rtol))
    top_w = inc.link_sum(jnp.where(top, w, 0.0))
    if load is None:
        load = inc.link_load(rates)
        if axis_name is not None:
            top_w, load = jax.lax.psum((top_w, load), axis_name)
    elif axis_name is not None:
        top_w = jax.lax.psum(top_w, axis_name)
    top_w = top_w[inc.link_idx]
    spare = jnp.maximum(capacity - load, 0.0)
    spare_e = spare[inc.link_idx]
    saturated = (spare <= rtol * jnp.abs(capacity))[inc.link_idx]
    level = (spare_e + lam_e * top_w + w * r_e) / (top_w + w)
    per_entry = jnp.where(saturated, jnp.where(top, r_e, jnp.maximum(level, r_e)),
                          r_e + spare_e / w)
    return jnp.maximum(inc.flow_min(per_entry, on), rates)


def water_fill(link, weight, capacity, demand, *, iterations=None, with_rounds: bool = False,
               axis_name=None, unroll: int = 0):
    """Weighted max-min fair rates when every flow crosses at most one link: a water-fill
    per link.

    Model: flow ``f`` puts ``weight[f] * r_f`` on link ``link[f]`` and is capped by
    ``demand[f]``.  With one link per flow the links decouple, and progressive filling
    (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2) on link ``l`` raises a
    common water level ``lam_l`` until ``sum_f weight_f min(d_f, lam_l) = c_l``; each
    flow gets ``r_f = min(d_f, lam_l)`` (``lam_l = +inf`` when the link's total demand
    fits).  It is :func:`max_min_fair` on that incidence.

    Given the set ``D_l`` of the link's demand-limited flows the level is closed form,

        lam_l = (c_l - sum_{f in D_l} w_f d_f) / sum_{f not in D_l} w_f,

    and ``D_l`` is found by elimination: start from the level of an empty ``D_l``, add
    every flow whose demand is at most the level, recompute, until no flow joins.  The
    level never decreases (the flows that join were below it), so the set only grows
    and the last level is exact; every link is done at once, the number of rounds is
    the largest number of distinct demand levels below a link's water line (a few in a
    fluid step: most offers sit at the line rate or at one law's rate).  Each round is
    two segment sums over the flows.  (A sort of the flows by link and demand finds
    ``D_l`` in one pass, but XLA's CPU sort is slow: measured on the 893 flows of the
    default ``compare`` scenario on 2 loaded cores, ``jnp.lexsort`` alone took 0.81 ms
    against 0.13 ms for the whole NIC share with these rounds, and the segmented prefix
    sums the sort needs took 1.3 s each to compile against 0.5 s for this function.)

    Args:
      link: ``[flows]`` int link of each flow; a value outside ``[0, links)`` means the
        flow crosses no link (it gets its demand).
      weight: ``[flows]`` fraction of the flow's rate on its link (``A[l, f]``, > 0; a
        flow with weight <= 0 crosses no link).
      capacity: ``[links]`` bytes/s, >= 0 (may be ``+inf``).
      demand: ``[flows]`` bytes/s, >= 0 (may be ``+inf``).
      iterations: ``None`` (default): rounds until no flow joins (a
        ``lax.while_loop``: ``jit``, ``vmap`` and forward-mode autodiff).  An int: that
        many rounds in a ``lax.fori_loop`` (reverse mode too; exact when it is at least
        the number of rounds needed, which is at most ``flows + 1``).
      with_rounds: also return the number of rounds run (int32 scalar).
      axis_name: as :func:`solve`: inside ``shard_map`` with the flows split over that
        mesh axis, a link's sums are ``psum`` over it and every shard runs the rounds
        until no flow joins on any shard (the same levels and rounds as unsharded).
      unroll: (static, with ``iterations=None``) rounds run as a loop of known trip
        count before the while loop, which finishes the rest (none when one of those
        rounds already changed nothing): the same rates and round count as without.
        The first round always runs, so in a program compiled for an accelerator it
        always runs this way (``unroll=0`` is ``unroll=1`` there,
        :func:`on_accelerators`): on a GPU the while loop's first test would be a host
        round trip whose answer is known.

    Returns:
      ``[flows]`` rates, bytes/s, in the dtype of ``capacity`` (and the rounds with
      ``with_rounds``).
    """
    capacity = jnp.asarray(capacity)
    dtype = capacity.dtype
    n_links = capacity.shape[0]
    demand = jnp.asarray(demand, dtype)
    link = jnp.asarray(link, jnp.int32)
    weight = jnp.asarray(weight, dtype)
    on = (link >= 0) & (link < n_links) & (weight > 0)
    seg = jnp.where(on, link, n_links)            # flows on no link: one extra segment
    w = jnp.where(on, weight, 0.0)
    cap = jnp.concatenate([capacity, jnp.full((1,), jnp.inf, dtype)])

    def level(limited):
        """``[links + 1]`` the water level of each link given its limited flows."""
        sums = jax.ops.segment_sum(
            jnp.stack([jnp.where(limited, w * jnp.where(limited, demand, 0.0), 0.0),
                       jnp.where(limited, 0.0, w)], axis=1), seg, num_segments=n_links + 1)
        if axis_name is not None:
            sums = jax.lax.psum(sums, axis_name)
        open_w = sums[:, 1]
        has_open = open_w > 0
        safe_w = jnp.where(has_open, open_w, 1.0)   # double-where: no NaN/inf gradients
        return jnp.where(has_open, jnp.maximum(cap - sums[:, 0], 0.0) / safe_w, jnp.inf)

    def join(limited):
        return limited | (demand <= level(limited)[seg])

    limited = ~on          # a flow on no link takes its demand
    check_loop_options(iterations, unroll)
    if iterations is None:
        def body(c):
            new = join(c[0])
            return new, _any_shard(jnp.any(new != c[0]), axis_name), c[2] + 1

        def fixed(_, c):   # the rounds the loop would run, while it would run
            new = join(c[0])
            return (new, c[1] & _any_shard(jnp.any(new != c[0]), axis_name),
                    c[2] + c[1].astype(jnp.int32))

        def run(c, k):
            """``k`` rounds in a loop of known trip count, then the loop."""
            if k:
                c = jax.lax.fori_loop(0, k, fixed, c)
            return jax.lax.while_loop(lambda c: c[1], body, c)

        c = (limited, jnp.asarray(True), jnp.asarray(0, jnp.int32))
        if unroll:
            limited, _, rounds = run(c, int(unroll))
        else:   # the first round always runs: on an accelerator, outside the loop
            limited, _, rounds = on_accelerators(lambda c: run(c, 1), lambda c: run(c, 0), c)
    else:
        limited = jax.lax.fori_loop(0, int(iterations), lambda i, lim: join(lim), limited)
        rounds = jnp.asarray(int(iterations), jnp.int32)
    lam = level(limited)[seg]
    rates = jnp.where(limited, demand, jnp.minimum(lam, demand))
    return (rates, rounds) if with_rounds else rates


def solve_flat(inc: Incidence, capacity, demand, *, max_iter=None,
               with_rounds: bool = False, axis_name=None) -> Any:
    """``[flows]`` exact weighted max-min rates by the bottleneck-freezing iteration of
    :func:`solve` (module docstring) in one ``lax.while_loop`` over all the entries,
    without :func:`solve`'s compaction levels.

    For small problems of shallow bottleneck structure solved inside a larger jitted
    program (e.g. the NIC share of :func:`fabric_jax.fluid_step._nic_send` when a flow
    leaves through several NIC ports): one loop to compile instead of one per
    compaction level, and a handful of iterations at run time.  Same answer as
    :func:`solve` up to round-off (the frozen load is summed over the entries, not
    folded into a residual).  Forward-mode autodiff only, as :func:`solve`'s
    while-loop.

    Args:
      inc: :class:`~fabric_jax.Incidence` ``[links, flows]``.
      capacity: ``[links]`` bytes/s.
      demand: ``[flows]`` bytes/s (``+inf`` allowed), in the dtype of ``capacity``.
      max_iter: iteration cap (default ``flows + 1``, never reached: every iteration
        freezes at least one flow).
      with_rounds: also return the iterations run (int32 scalar).
      axis_name: as :func:`solve` (flows split over that mesh axis inside
        ``shard_map``; ``max_iter`` should then be the global cap).

    Returns:
      ``[flows]`` rates, bytes/s (``demand`` for a flow on no link), and the iterations
      with ``with_rounds``.
    """
    dtype = capacity.dtype
    n_links, n_flows = inc.n_links, inc.n_flows
    max_iter = n_flows + 1 if max_iter is None else max_iter
    weight = inc.weight.astype(dtype)
    active = inc.active
    has_links = inc.flow_has_links()
    rate = jnp.where(has_links, jnp.zeros_like(demand), demand)

    def cond(c):
        return _any_shard(jnp.any(~c[1]), axis_name) & (c[2] < max_iter)

    def body(c):
        r, f, _, _ = _iteration(inc.link_idx, inc.flow_idx, weight, active, capacity, demand,
                                n_links, n_flows, c[0], c[1], axis_name)
        return r, f, c[2] + 1

    rate, _, it = jax.lax.while_loop(cond, body, (rate, ~has_links, jnp.asarray(0, jnp.int32)))
    return (rate, it) if with_rounds else rate
