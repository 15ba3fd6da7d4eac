"""Efficiency, isolation and fairness: effective bandwidth, link utilisation, a job's
isolation (alone against with neighbours, also per traffic class), Jain's index
(:mod:`fabric_jax.metrics`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._common import as_floats, check_nonnegative, safe_ratio


def effective_bandwidth(delivered_bytes, duration, nominal_rate):
    """Delivered throughput as a fraction of the nominal rate of the bottleneck.

    ``delivered_bytes / duration / nominal_rate``: 1 means the traffic ran at line rate
    for the whole duration (Spectrum-X's "95 %" vs ECMP's "60 %" are this number).

    Args:
      delivered_bytes: bytes delivered (per flow, per host, or in total).
      duration: seconds over which they were delivered.
      nominal_rate: bytes/s the traffic could get at best (e.g. the NIC rate, or the
        bisection for all-to-all).

    Returns:
      dimensionless fraction; ``inf`` for positive bytes in zero time or at zero rate.
    """
    for name, value in (("delivered_bytes", delivered_bytes), ("duration", duration),
                        ("nominal_rate", nominal_rate)):
        check_nonnegative(name, value)
    delivered_bytes, duration, nominal_rate = as_floats(delivered_bytes, duration,
                                                      nominal_rate)
    return safe_ratio(delivered_bytes, duration * nominal_rate)


def link_utilization(link_bytes, capacity, duration):
    """Fraction of a link's capacity used: ``link_bytes / (capacity * duration)``.

    Args:
      link_bytes: [links] bytes carried over ``duration``.
      capacity: [links] bytes/s.
      duration: seconds (scalar or [links]).

    Returns:
      [links] in [0, 1] for feasible traffic; 0 for an idle zero-capacity (failed) link.
    """
    for name, value in (("link_bytes", link_bytes), ("capacity", capacity),
                        ("duration", duration)):
        check_nonnegative(name, value)
    link_bytes, capacity, duration = as_floats(link_bytes, capacity, duration)
    return safe_ratio(link_bytes, capacity * duration)


def isolation(fct_with_neighbours, fct_alone):
    """A job's slowdown caused by its neighbours: ``time with neighbours / time alone``.

    Use the same completion measure for both runs (a collective's completion time from
    :func:`collective_completion_time`, a training step time, or a p99 FCT). 1 means
    perfect isolation; 1.3 means the neighbours made the job 30 % slower.

    Args:
      fct_with_neighbours: seconds, the job sharing the fabric.
      fct_alone: seconds, the same job alone on the fabric.

    Returns:
      dimensionless ratio (>= 1 for work-conserving fair sharing).
    """
    check_nonnegative("fct_with_neighbours", fct_with_neighbours)
    check_nonnegative("fct_alone", fct_alone)
    fct_with_neighbours, fct_alone = as_floats(fct_with_neighbours, fct_alone)
    return safe_ratio(fct_with_neighbours, fct_alone)


def isolation_per_class(job_isolation: dict, job_class: dict, n_classes: int) -> list:
    """Per traffic class, the worst :func:`isolation` of the jobs mapped into it.

    A class protects its jobs only as well as its most-disturbed member, so the class's
    figure is the maximum over its jobs (the same rule as compare's worst-job
    ``isolation``, restricted to one class).  Jobs without a measured isolation (no
    alone run, or a NaN) do not count.

    Args:
      job_isolation: job -> isolation ratio (:func:`isolation`).
      job_class: job -> class id in ``[0, n_classes)``; a job missing here is in class 0
        (the default class of :meth:`fabric_jax.Fabric.class_options`).
      n_classes: number of classes of the port.

    Returns:
      ``[n_classes]`` list of floats; NaN for a class holding no measured job.

    Raises:
      ValueError: ``n_classes`` < 1 or a class id outside ``[0, n_classes)``.
    """
    if not isinstance(n_classes, (int, np.integer)) or isinstance(n_classes, bool) \
            or n_classes < 1:
        raise ValueError(f"n_classes must be an integer >= 1; got {n_classes!r}")
    out = [float("nan")] * int(n_classes)
    for job, iso in job_isolation.items():
        c = job_class.get(job, 0)
        if not isinstance(c, (int, np.integer)) or not 0 <= c < n_classes:
            raise ValueError(f"job_class[{job!r}] must be a class id in [0, {n_classes}); "
                             f"got {c!r}")
        iso = float(iso)
        if np.isnan(iso):
            continue
        out[c] = iso if np.isnan(out[c]) else max(out[c], iso)
    return out


def jain_index(x, axis: int = -1):
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)`` along ``axis``.

    It is 1 when all ``n`` values are equal and ``1/n`` when one value takes everything
    (Jain, Chiu & Hawe, DEC-TR-301, 1984). An all-zero vector counts as equal: 1.

    Args:
      x: [..., n] nonnegative allocations (rates, throughputs).
      axis: the axis holding the ``n`` users.

    Returns:
      [...] index in ``[1/n, 1]``.

    Raises:
      ValueError: empty axis or negative values (concrete inputs).
    """
    check_nonnegative("x", x)
    (x,) = as_floats(x)
    n = x.shape[axis] if x.ndim else 1
    if x.ndim == 0:
        x = x[None]
        axis = -1
    if n == 0:
        raise ValueError("x is empty along axis; Jain's index needs at least one value")
    total = jnp.sum(x, axis=axis)
    squares = jnp.sum(x * x, axis=axis)
    zero = squares == 0
    safe = jnp.where(zero, jnp.ones_like(squares), squares)
    return jnp.where(zero, jnp.ones_like(total), total * total / (n * safe))
