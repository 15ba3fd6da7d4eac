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

Where each piece lives:

* ``_api``: :func:`max_min_fair` (checks, layout for the device, batches) and
  :func:`validate_inputs`;
* ``_result``: :class:`MaxMinResult`, :class:`MaxMinInfo`;
* ``_progressive``: the exact progressive solve, :func:`solve` (compaction levels) and
  :func:`solve_flat` (one loop);
* ``_warm``: the warm-started solve, :func:`solve_warm`, and :func:`compact_indices`;
* ``_water_fill``: one link per flow, :func:`water_fill`, and :func:`joining_share`;
* ``_common``: per-link reductions over shards (:func:`link_sum`) and the exact loops'
  options (:func:`check_loop_options`, :func:`on_accelerators`);
* ``_precision``: the tolerances (:data:`SATURATION_RTOL`).
"""

from ._api import TABLE_MIN_ENTRIES, block_diagonal, max_min_fair, validate_inputs
from ._common import check_loop_options, link_sum, on_accelerators
from ._precision import SATURATION_RTOL, saturation_rtol
from ._progressive import (COMPACT_FACTOR, COMPACT_FACTOR_FINE, COMPACT_FINE_UNTIL,
                           COMPACT_MIN_ENTRIES, COMPACTIONS, solve, solve_flat)
from ._result import MaxMinInfo, MaxMinResult
from ._warm import WARM_BUCKET_FACTOR, WARM_MIN_BUCKET, compact_indices, solve_warm
from ._water_fill import joining_share, water_fill

__all__ = ["max_min_fair", "MaxMinResult", "MaxMinInfo", "SATURATION_RTOL", "joining_share",
           "water_fill"]
