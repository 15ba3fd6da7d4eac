"""What every max-min solver of the package shares: the per-link reductions (over all
shards of a ``shard_map`` when the flows are split), and the options and forms of their
exact loops (a ``lax.while_loop`` that stops when no flow is left open)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..segments import segment_reduce


def link_sum(values, li, n_links, axis_name, table=None):
    """``[links, ...]`` per-link sum of per-entry ``values`` ``[entries, ...]``.

    Args:
      values: per-entry values.
      li: ``[entries]`` link of each entry, in ``[0, links)``.
      n_links: number of links.
      axis_name: ``None``, or the ``shard_map`` axis the flows are split over: the sum
        is then over all shards (``psum``).
      table: optional :class:`fabric_jax.segments.SegmentTable` of ``li`` (a gather on
        accelerators, :func:`fabric_jax.segments.segment_reduce`).
    """
    out = segment_reduce(values, li, n_links, table, in_range=True)
    return out if axis_name is None else jax.lax.psum(out, axis_name)


def link_min(values, li, n_links, axis_name, table=None):
    """``[links]`` per-link minimum of per-entry ``values`` (as :func:`link_sum`)."""
    out = segment_reduce(values, li, n_links, table, "min", in_range=True)
    return out if axis_name is None else jax.lax.pmin(out, axis_name)


def any_shard(x, axis_name):
    """``x`` (a scalar bool) or-ed over shards: keeps loop trip counts uniform."""
    if axis_name is None:
        return x
    return jax.lax.pmax(x.astype(jnp.int32), axis_name) > 0


def on_accelerators(accelerator, cpu, operand):
    """``accelerator(operand)`` in a program compiled for a GPU or TPU, ``cpu(operand)``
    in one compiled for the CPU (chosen when the program is lowered,
    ``jax.lax.platform_dependent``: one branch is compiled).  For forms that cost the
    same work but differ in what the runtime does with them, e.g. a while loop's first
    iteration run before the loop: on XLA:GPU the loop's first test is a host round trip
    (its ``WhileThunk`` reads the predicate back), on the CPU it is free and the
    peeled iteration only adds fusions."""
    return jax.lax.platform_dependent(operand, cpu=cpu, default=accelerator)


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
