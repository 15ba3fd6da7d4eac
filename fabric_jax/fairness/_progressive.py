"""The exact progressive solve: parallel bottleneck freezing over the incidence entries.

Every iteration computes, for every link, the level at which it would saturate if all
its unfrozen flows kept growing,

    t_l = (c_l - sum_{frozen g} A[l, g] r_g) / sum_{unfrozen f} A[l, f],

and for every unfrozen flow ``m_f = min(d_f, min_{l in f} t_l)``; every link whose
``t_l`` is the smallest level of all the flows it carries is a bottleneck, and its flows
freeze at ``t_l`` (:mod:`fabric_jax.fairness` explains why this is exact).  One
iteration is :func:`_iteration` on COO entries or :func:`_iteration_rows` on the
flow-major layout (``[flows, row_width]``, per-flow work dense).

:func:`solve` runs the iterations in a ``lax.while_loop`` until every flow is frozen,
compacting the still-open entries into geometrically shrinking buffers
(:func:`_levels`) as flows freeze, or in a ``lax.fori_loop`` of a fixed count
(``iterations=N``, reverse-mode differentiable).  :func:`solve_flat` is the same
iteration in one while loop without compaction, for small problems inside a larger
jitted program.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..incidence import Incidence
from ._common import any_shard, check_loop_options, link_min, link_sum, on_accelerators
from ._result import MaxMinResult, max_min_result

#: Below this many entries the solver stops compacting (a level's loop is cheap).
COMPACT_MIN_ENTRIES = 4096
#: Each compaction level holds ``1 / COMPACT_FACTOR`` of the previous level's rows...
COMPACT_FACTOR = 2
#: ...except while the buffer is above ``COMPACT_FINE_UNTIL`` of the full size, where the
#: finer ``COMPACT_FACTOR_FINE`` applies: the early levels hold most of the work (on a
#: random-ECMP fat-tree only ~1% of flows freeze per iteration), the late ones are
#: cheap, and every level adds a while loop to compile (the trade-off measured:
#: docs/performance.md, "Max-min solver").
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
    sums = link_sum(both, li, n_links, axis_name, table)
    open_weight, frozen_load = sums[:, 0], sums[:, 1]
    has_open = open_weight > 0
    safe_w = jnp.where(has_open, open_weight, 1.0)  # double-where: no NaN/inf grads
    level = jnp.where(has_open, jnp.maximum(capacity - frozen_load, 0.0) / safe_w, jnp.inf)
    level_e = jnp.where(entry_open, level[li], jnp.inf)
    link_level = jax.ops.segment_min(level_e, fi, num_segments=n_flows)      # [flows]
    target = jnp.minimum(link_level, demand)
    # A link is a bottleneck now if its level is the smallest of all its flows'.
    link_floor = link_min(jnp.where(entry_open, target[fi], jnp.inf), li, n_links,
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
    # frozen flows): cheaper on CPU than a two-column scatter.
    both = jax.lax.complex(jnp.where(entry_open, weight, 0.0),
                           jnp.where(active & frozen[:, None], weight * rate[:, None], 0.0))
    sums = link_sum(both.reshape(-1), li.reshape(-1), n_links, axis_name, table)
    open_weight, frozen_load = jnp.real(sums), jnp.imag(sums)
    has_open = open_weight > 0
    safe_w = jnp.where(has_open, open_weight, 1.0)  # double-where: no NaN/inf grads
    level = jnp.where(has_open, jnp.maximum(capacity - frozen_load, 0.0) / safe_w, jnp.inf)
    # jnp.take with mode="clip" skips the negative-index fix-up of ``level[li]``.
    level_e = jnp.where(entry_open, jnp.take(level, li, mode="clip"), jnp.inf)
    link_level = jnp.min(level_e, axis=1, initial=jnp.inf)                    # [flows]
    target = jnp.minimum(link_level, demand)
    link_floor = link_min(jnp.where(entry_open, target[:, None], jnp.inf).reshape(-1),
                          li.reshape(-1), n_links, axis_name, table)
    bottleneck = has_open & (level <= link_floor)
    on_bottleneck = jnp.any(entry_open & jnp.take(bottleneck, li, mode="clip"), axis=1)
    freeze = ~frozen & (on_bottleneck | (demand <= link_level))
    return jnp.where(freeze, target, rate), frozen | freeze


def solve_rows(inc: Incidence, capacity, demand, rate, frozen, max_iter, axis_name=None,
               fine: bool | str = True, unroll: int = 0, check_every: int = 1):
    """While-loop solve on the flow-major layout, compacting the rows of open flows
    into geometrically shrinking buffers as flows freeze (frozen load folds into a
    residual capacity).  With ``axis_name`` each shard compacts its own rows; a level
    ends when every shard's open rows fit its next buffer.  ``unroll``: iterations run
    in a loop of known trip count before the first level's loop; ``check_every``:
    iterations per trip of the loops (see :func:`solve`).

    Returns ``(rate, frozen, iterations)``: ``[flows]`` rates and frozen flags, and the
    iterations that had an open flow."""
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
            residual = residual - link_sum(
                jnp.where(on, w * r[:, None], 0.0).reshape(-1), li.reshape(-1),
                inc.n_links, axis_name)
            pick = jnp.nonzero(~f, size=size, fill_value=0)[0]
            keep = jnp.arange(size) < jnp.sum(~f)
            rows = jnp.where(keep, rows[pick], n_flows)
            li, w = li[pick], jnp.where(keep[:, None], w[pick], 0.0)
            act = w != 0
            r, f, d = r[pick], ~keep | f[pick], d[pick]
        stop_at = sizes[level + 1] if level + 1 < len(sizes) else 0
        # the incidence's segment table holds the entries of the first level only
        table = inc.by_link if level == 0 else None
        run = _rows_loop(li, w, act, residual, d, inc.n_links, stop_at, max_iter, axis_name,
                         table, check_every)
        if level == 0 and peel:
            r, f, it = on_accelerators(lambda c: run(c, 1), lambda c: run(c, 0), (r, f, it))
        else:
            r, f, it = run((r, f, it), unroll if level == 0 else 0)
    rate = rate.at[rows].set(r, mode="drop")
    frozen = frozen.at[rows].set(f, mode="drop")
    return rate, frozen, it


def _rows_loop(li, w, act, residual, d, n_links, stop_at, max_iter, axis_name, table,
               check_every):
    """The loop of one compaction level of :func:`solve_rows`: ``run(c, k)`` runs ``k``
    counted iterations in a loop of known trip count, then the while loop, from the
    carry ``c = (rate, frozen, iterations)`` of the level's rows, until at most
    ``stop_at`` rows are open (or ``max_iter`` iterations)."""
    def going(f, it):
        return any_shard(jnp.sum(~f) > stop_at, axis_name) & (it < max_iter)

    def counted(c):
        """One iteration, counted if a flow was open (after the last freeze an
        iteration changes nothing)."""
        r, f, it = c
        busy = any_shard(jnp.any(~f), axis_name).astype(jnp.int32)
        r, f = _iteration_rows(li, w, act, residual, d, n_links, r, f, axis_name, table)
        return r, f, it + busy

    # The loop's condition is computed at the end of the body, beside the freeze
    # that it tests (one fused reduction there instead of kernels of its own: on a
    # GPU the condition is read back to the host every iteration).  A trip runs
    # ``check_every`` iterations; the loop runs while a flow is open, so its first
    # one always counts.
    def body(c):
        r, f = _iteration_rows(li, w, act, residual, d, n_links, c[0], c[1], axis_name,
                               table)
        c = (r, f, c[2] + 1)
        for _ in range(check_every - 1):
            c = counted(c)
        return c + (going(c[1], c[2]),)

    def run(c, k):
        """``k`` counted iterations in a loop of known trip count, then the loop."""
        if k:
            c = jax.lax.fori_loop(0, k, lambda _, c: counted(c), c)
        r, f, it = c
        return jax.lax.while_loop(lambda c: c[3], body, (r, f, it, going(f, it)))[:3]
    return run


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
    level is one more while loop to compile; a solve inside a time-stepped
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
    n_flows = inc.n_flows
    if max_iter is None:
        max_iter = n_flows + 1
    weight = inc.weight.astype(capacity.dtype)
    has_links = inc.flow_has_links()
    # Flows that cross no link are limited by their demand only.
    rate = jnp.where(has_links, jnp.zeros_like(demand), demand)
    frozen = ~has_links
    it = jnp.asarray(0, jnp.int32)
    if iterations is not None:
        rate, frozen, it = _solve_fixed(inc, weight, capacity, demand, rate, frozen, it,
                                        iterations, axis_name)
    elif inc.row_width is not None and inc.nnz == n_flows * inc.row_width:
        rate, frozen, it = solve_rows(inc, capacity, demand, rate, frozen, max_iter,
                                      axis_name, compaction, unroll, check_every)
    else:
        rate, frozen, it = _solve_entries(inc, weight, capacity, demand, rate, frozen, it,
                                          max_iter, axis_name, compaction, unroll,
                                          check_every)
    load = inc.link_load(jnp.where(has_links, rate, 0.0))
    return max_min_result(inc, capacity, rate, load, it, jnp.all(frozen), axis_name)


def _solve_fixed(inc: Incidence, weight, capacity, demand, rate, frozen, it, iterations,
                 axis_name):
    """:func:`solve` with ``iterations`` fixed: that many trips of a ``lax.fori_loop``,
    each one iteration over the COO entries until every flow is frozen (reverse-mode
    differentiable).  Returns ``(rate, frozen, iterations run)``."""
    active = inc.active

    def body(i, c):
        rate, frozen, it = c

        def step(c):
            r, f, _, _ = _iteration(inc.link_idx, inc.flow_idx, weight, active, capacity,
                                    demand, inc.n_links, inc.n_flows, c[0], c[1], axis_name,
                                    inc.by_link)
            return r, f, c[2] + 1
        done = jnp.all(frozen)
        if axis_name is not None:  # collectives inside: skip only when every shard is done
            done = ~any_shard(~done, axis_name)
        return jax.lax.cond(done, lambda x: x, step, (rate, frozen, it))
    return jax.lax.fori_loop(0, iterations, body, (rate, frozen, it))


def _solve_entries(inc: Incidence, weight, capacity, demand, rate, frozen, it, max_iter,
                   axis_name, compaction, unroll, check_every):
    """:func:`solve`'s while loops on COO entries in arbitrary order: at each compaction
    level (:func:`_levels`) the entries of still-open flows are kept and the load of the
    frozen ones folds into a residual capacity.  Returns ``(rate, frozen, iterations)``."""
    n_links, n_flows = inc.n_links, inc.n_flows
    li, fi, w, act = inc.link_idx, inc.flow_idx, weight, inc.active
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
            return (any_shard((c[3] > stop_at) & jnp.any(~c[1]), axis_name)
                    & (c[2] < max_iter))

        table = inc.by_link if level == 0 else None

        def counted(c, li=li, fi=fi, w=w, act=act, residual=residual, table=table):
            """One iteration, counted if an entry was open (``c[3]``, the open
            entries before it), as in :func:`solve_rows`."""
            r, f, it, n_open = c
            busy = any_shard(n_open > 0, axis_name).astype(jnp.int32)
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
        residual = residual - link_sum(jnp.where(on, w * rate[fi], 0.0), li, n_links,
                                       axis_name)
    return rate, frozen, it


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
        return any_shard(jnp.any(~c[1]), axis_name) & (c[2] < max_iter)

    def body(c):
        r, f, _, _ = _iteration(inc.link_idx, inc.flow_idx, weight, active, capacity, demand,
                                n_links, n_flows, c[0], c[1], axis_name)
        return r, f, c[2] + 1

    rate, _, it = jax.lax.while_loop(cond, body, (rate, ~has_links, jnp.asarray(0, jnp.int32)))
    return (rate, it) if with_rounds else rate
