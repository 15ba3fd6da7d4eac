"""Metrics: turning simulated times into the numbers operators compare fabrics by.

Units: sizes in bytes, times in seconds, rates in bytes per second, prices in dollars.
Every function is pure ``jax.numpy`` and accepts NumPy or JAX arrays (they broadcast),
so it composes with ``jit``/``vmap``/``grad``; the exceptions are :func:`by_size_bucket`
and :func:`size_buckets` (host-side NumPy, variable-size output) and the host-side
argument checks, which run only on concrete (non-traced) inputs.

Flow completion
    A flow alone on an empty fabric completes in
    ``ideal_fct = size / bottleneck_rate + base_latency``; its *slowdown* is
    ``fct / ideal_fct`` (>= 1 for a correct simulator, 1 = no interference). This is
    the FCT slowdown of pFabric (Alizadeh et al., SIGCOMM 2013) and HPCC (Li et al.,
    SIGCOMM 2019). Tails are reported as percentiles (:func:`percentiles`), usually per
    size bucket, since short and long flows suffer differently: fixed byte edges
    (:func:`by_size_bucket`) or, as the HPCC paper's Fig. 11 x-axis, equal-count
    buckets of the flows sorted by size (:func:`size_buckets`).

Collectives
    A collective's completion time is the last finish minus the first *start* of its
    flows (:func:`collective_completion_time`), where a flow starts when it is released:
    its arrival, or, for a flow that waits on others (a ring step, the next phase of a
    training step), when those completed plus its delay (the ``start`` of
    :class:`~fabric_jax.fluid.FluidResult` and :class:`~fabric_jax.FlowSimResult`).  For
    independent flows start and arrival coincide. Bandwidths follow nccl-tests
    (``doc/PERFORMANCE.md``): ``algbw = S / t`` with ``S`` the message size as
    nccl-tests counts it (all_reduce: the buffer; all_gather: the gathered output;
    reduce_scatter: the input; all_to_all: the per-rank send buffer), and
    ``busbw = algbw * factor(n)`` with factor ``2(n-1)/n`` for all_reduce, ``(n-1)/n``
    for all_gather, reduce_scatter and all_to_all, and 1 for broadcast, reduce and
    sendrecv. busbw is comparable to the link rate: a perfect ring reaches it.

Efficiency and fairness
    :func:`effective_bandwidth` is delivered bytes per second as a fraction of the
    nominal rate of the traffic's bottleneck ("ECMP delivers ~60 %"); for collectives
    (:func:`collective_effective_bandwidth`, the one definition ``compare``, the scaling
    study and the experiments report) the bytes are each collective's bottleneck bytes
    (the most one NIC sends or receives in it, :func:`collective_ideal_time`) and the
    duration its completion time, so the figure is ideal time on a non-blocking fabric at
    NIC line rate over actual time, summed over collectives,
    :func:`link_utilization` is a link's carried bytes over what it could carry,
    :func:`isolation` is a job's completion time with neighbours over alone (1 = perfect
    isolation), and :func:`jain_index` is Jain's fairness index (Jain, Chiu & Hawe, DEC
    TR-301, 1984), ``(sum x)^2 / (n sum x^2)`` in ``[1/n, 1]``.

Economics
    :func:`gpu_utilization` is the fraction of a training step spent computing;
    :func:`cost_per_token` divides the GPU-hours a step costs by the tokens it processes.

Division by zero follows one documented rule (:func:`_ratio`): ``x / 0 = inf`` for
``x > 0`` and ``0 / 0 = 0`` (nothing delivered in no time), with NaN-free gradients.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .units import KB, MB

__all__ = [
    "DEFAULT_QUANTILES",
    "DEFAULT_SIZE_EDGES",
    "BUSBW_KINDS",
    "ideal_fct",
    "slowdown",
    "percentiles",
    "by_size_bucket",
    "size_buckets",
    "collective_completion_time",
    "collective_ideal_time",
    "collective_effective_bandwidth",
    "algbw",
    "busbw",
    "busbw_factor",
    "effective_bandwidth",
    "link_utilization",
    "isolation",
    "isolation_per_class",
    "jain_index",
    "gpu_utilization",
    "cost_per_token",
    "cost_per_million_tokens",
]

#: Percentiles reported by default (tail latency: median, p95, p99, p99.9).
DEFAULT_QUANTILES = (50.0, 95.0, 99.0, 99.9)

#: Flow-size bucket edges in bytes: <10 KB (mice), 10-100 KB, 100 KB-1 MB, 1-10 MB, >=10 MB.
DEFAULT_SIZE_EDGES = (10 * KB, 100 * KB, 1 * MB, 10 * MB)

#: nccl-tests bus-bandwidth factors as functions of the rank count n.
_BUSBW_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}

#: Collective kinds accepted by :func:`busbw` (also written without ``_``, or with ``-``).
BUSBW_KINDS = tuple(_BUSBW_FACTORS)

_SECONDS_PER_HOUR = 3600.0


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _floats(*values):
    """Cast inputs to one floating dtype (works under strict dtype promotion)."""
    arrays = [jnp.asarray(v) for v in values]
    try:
        dtype = np.result_type(*[np.dtype(a.dtype) for a in arrays])
    except TypeError:  # e.g. bfloat16 mixed with float32: use the default float
        dtype = np.dtype(np.float64)
    if not np.issubdtype(dtype, np.floating):
        dtype = np.dtype(np.float64)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    return [a.astype(dtype) for a in arrays]


def _concrete(value):
    """NumPy view of a concrete input, or None when it is being traced."""
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check_nonnegative(name, value, fix="pass values >= 0"):
    array = _concrete(value)
    if array is None:
        return
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN; {fix}")
    if (array < 0).any():
        raise ValueError(f"{name} must be >= 0 (min {array.min()}); {fix}")


def _ratio(numerator, denominator):
    """``numerator / denominator`` with ``x / 0 = inf`` (x > 0) and ``0 / 0 = 0``.

    Double-``where`` so neither the value nor its gradient is NaN at a zero denominator.
    """
    zero = denominator == 0
    safe = jnp.where(zero, jnp.ones_like(denominator), denominator)
    on_zero = jnp.where(numerator == 0, jnp.zeros_like(numerator),
                        jnp.full_like(numerator, jnp.inf))
    return jnp.where(zero, on_zero, numerator / safe)


def _quantile_key(q):
    """50 -> 'p50', 99.9 -> 'p99_9'."""
    return "p" + f"{float(q):g}".replace(".", "_")


def _format_bytes(x):
    if math.isinf(x):
        return "inf"
    for unit, scale in (("GB", 1e9), ("MB", MB), ("KB", KB)):
        if x >= scale:
            return f"{x / scale:g}{unit}"
    return f"{x:g}B"


# --------------------------------------------------------------------------------------
# Flow completion
# --------------------------------------------------------------------------------------


def ideal_fct(size, bottleneck_rate, base_latency=0.0):
    """Completion time of a flow alone on an empty fabric.

    Args:
      size: [...] bytes.
      bottleneck_rate: [...] bytes/s, the smallest capacity (or rate cap) on the path.
      base_latency: [...] seconds of propagation and switching (the zero-load RTT part
        the simulator adds as ``latency``).

    Returns:
      ``size / bottleneck_rate + base_latency`` in seconds (``inf`` where the rate is 0
      and the size is not).

    Raises:
      ValueError: negative size, rate or latency (concrete inputs only).
    """
    _check_nonnegative("size", size)
    _check_nonnegative("bottleneck_rate", bottleneck_rate)
    _check_nonnegative("base_latency", base_latency)
    size, bottleneck_rate, base_latency = _floats(size, bottleneck_rate, base_latency)
    return _ratio(size, bottleneck_rate) + base_latency


def slowdown(fct, size, bottleneck_rate, base_latency=0.0):
    """FCT slowdown: ``fct / ideal_fct(size, bottleneck_rate, base_latency)``.

    1 means the flow completed as if alone; a correct simulator never gives < 1.
    A flow whose ideal time is 0 (size 0, no latency) has slowdown 1 if it also took
    no time, ``inf`` otherwise.

    Args:
      fct: [...] measured flow completion time (finish - arrival), seconds.
      size, bottleneck_rate, base_latency: as in :func:`ideal_fct`.

    Returns:
      [...] dimensionless slowdown.
    """
    _check_nonnegative("fct", fct)
    ideal = ideal_fct(size, bottleneck_rate, base_latency)
    fct, ideal = _floats(fct, ideal)
    zero = ideal == 0
    safe = jnp.where(zero, jnp.ones_like(ideal), ideal)
    on_zero = jnp.where(fct == 0, jnp.ones_like(fct), jnp.full_like(fct, jnp.inf))
    return jnp.where(zero, on_zero, fct / safe)


def percentiles(x, qs: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, Any]:
    """Percentiles of ``x`` (all elements pooled), linearly interpolated as NumPy's default.

    Args:
      x: [...] values (e.g. FCTs in seconds or slowdowns). NaN propagates.
      qs: percentiles in [0, 100].

    Returns:
      dict ``{"p50": ..., "p95": ..., "p99": ..., "p99_9": ...}`` (keys from ``qs``:
      ``p`` + the number with ``.`` written ``_``) of scalar arrays.

    Raises:
      ValueError: ``x`` is empty, or a percentile is outside [0, 100].
    """
    (x,) = _floats(x)
    if x.size == 0:
        raise ValueError("x is empty; percentiles need at least one value")
    qs = tuple(float(q) for q in qs)
    if any(not 0.0 <= q <= 100.0 for q in qs):
        raise ValueError(f"qs must lie in [0, 100], got {qs}")
    values = jnp.percentile(x.ravel(), jnp.asarray(qs, dtype=x.dtype))
    # monotone in q, as percentiles are: the interpolation between two equal or adjacent
    # values can round one ulp past the next percentile (seen with float32 and without
    # FMA contraction); a running maximum in q order removes only that rounding
    order = np.argsort(qs, kind="stable")
    mono = jax.lax.cummax(values[order])
    values = mono[np.argsort(order)]
    return {_quantile_key(q): values[i] for i, q in enumerate(qs)}


def by_size_bucket(values, size, edges: Sequence[float] = DEFAULT_SIZE_EDGES,
                   qs: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, dict[str, Any]]:
    """Percentiles of ``values`` per flow-size bucket (host-side NumPy).

    Bucket ``i`` holds the flows with ``lo_i <= size < hi_i``, where the boundaries are
    ``[0, *edges, inf]``.

    Args:
      values: [flows] per-flow values (FCT in seconds, slowdown, ...).
      size: [flows] flow sizes in bytes.
      edges: strictly increasing positive bucket boundaries in bytes
        (default 10 KB, 100 KB, 1 MB, 10 MB; decimal units).
      qs: percentiles, as in :func:`percentiles`.

    Returns:
      ``{label: {"lo": bytes, "hi": bytes, "count": int, "p50": float, ...}}`` in
      increasing size order, labels like ``"[10KB, 100KB)"``. An empty bucket has count 0
      and NaN percentiles.

    Raises:
      ValueError: mismatched shapes, negative sizes, or bad edges.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    size = np.asarray(size, dtype=np.float64).ravel()
    if values.shape != size.shape:
        raise ValueError(f"values and size must have the same number of flows, got "
                         f"{values.shape} and {size.shape}")
    _check_nonnegative("size", size)
    edges = np.asarray(edges, dtype=np.float64).ravel()
    if edges.size == 0 or (edges <= 0).any() or (np.diff(edges) <= 0).any():
        raise ValueError(f"edges must be strictly increasing positive byte counts, got "
                         f"{edges.tolist()}")
    bounds = np.concatenate([[0.0], edges, [np.inf]])
    bucket = np.searchsorted(edges, size, side="right")
    qs = tuple(float(q) for q in qs)
    out = {}
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        members = values[bucket == i]
        entry: dict[str, Any] = {"lo": float(lo), "hi": float(hi), "count": int(members.size)}
        pct = (np.percentile(members, qs) if members.size else np.full(len(qs), np.nan))
        entry.update({_quantile_key(q): float(p) for q, p in zip(qs, pct)})
        out[f"[{_format_bytes(lo)}, {_format_bytes(hi)})"] = entry
    return out


def size_buckets(values, size, n_buckets: int = 20,
                 qs: Sequence[float] = (50.0, 95.0, 99.0)) -> list[dict[str, Any]]:
    """Flows sorted by size into ``n_buckets`` equal-count buckets; percentiles of each
    (host-side NumPy).

    The x-axis of the HPCC paper's FCT figures (Li et al., SIGCOMM 2019, Fig. 11: each
    tick a bucket of 5 % of the flows, labelled by its largest size).  Bucket sizes
    differ by at most one flow (``numpy.array_split`` of the size order; ties in size
    are ordered by index).

    Args:
      values: ``[flows]`` per-flow values (e.g. FCT slowdown), finite.
      size: ``[flows]`` flow sizes, bytes.
      n_buckets: number of buckets (an integer >= 1, at most the number of flows).
      qs: percentiles in [0, 100] (keys as in :func:`percentiles`).

    Returns:
      ``[{"size_max_bytes", "n_flows", "p50", "p95", "p99"}, ...]`` in increasing size.

    Raises:
      ValueError: shapes differ, ``n_buckets`` not a positive integer, fewer flows than
        buckets, or non-finite values.
    """
    sd = np.asarray(values, float).ravel()
    sz = np.asarray(size, float).ravel()
    if sd.shape != sz.shape:
        raise ValueError(f"values and size must have the same [flows] shape; got "
                         f"{sd.shape} and {sz.shape}")
    if isinstance(n_buckets, bool) or not isinstance(n_buckets, (int, np.integer)) \
            or n_buckets < 1:
        raise ValueError(f"n_buckets must be an integer >= 1; got {n_buckets!r}")
    if sd.size < n_buckets:
        raise ValueError(f"{sd.size} flows cannot fill {n_buckets} buckets; simulate a "
                         "longer window or use fewer buckets")
    if not np.all(np.isfinite(sd)):
        raise ValueError("values must be finite (leave unfinished flows out or bound them)")
    qs = tuple(float(q) for q in qs)
    order = np.argsort(sz, kind="stable")
    out = []
    for idx in np.array_split(order, n_buckets):
        entry: dict[str, Any] = {"size_max_bytes": float(sz[idx].max()),
                                 "n_flows": int(idx.size)}
        entry.update({_quantile_key(q): float(p)
                      for q, p in zip(qs, np.percentile(sd[idx], qs))})
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------
# Collectives
# --------------------------------------------------------------------------------------


def collective_completion_time(start, finish, group, n_groups: int):
    """Completion time of each group of flows (a collective, a job step, ...).

    ``cct[g] = max_{f in g} finish[f] - min_{f in g} start[f]``, computed with segment
    reductions (jit-safe; ``n_groups`` is static).  This is the one definition of a
    collective's completion time in the package (module docstring).

    Args:
      start: [flows] seconds, when each flow was released (its arrival for a flow
        without dependencies; a simulator result's ``start``).
      finish: [flows] seconds.
      group: [flows] int group id in ``[0, n_groups)``; ``-1`` excludes a flow
        (padding).
      n_groups: number of groups (static).

    Returns:
      [n_groups] seconds; NaN for a group with no flows.

    Raises:
      ValueError: mismatched shapes or a group id outside ``[-1, n_groups)``.
    """
    n_groups = int(n_groups)
    if n_groups < 0:
        raise ValueError(f"n_groups must be >= 0, got {n_groups}")
    start, finish = _floats(start, finish)
    group = jnp.asarray(group)
    if not (start.shape == finish.shape == group.shape) or start.ndim != 1:
        raise ValueError(f"start, finish and group must all be [flows], got "
                         f"{start.shape}, {finish.shape}, {group.shape}")
    if not jnp.issubdtype(group.dtype, jnp.integer):
        raise ValueError(f"group must hold integer group ids, got dtype {group.dtype}")
    concrete = _concrete(group)
    if concrete is not None and concrete.size and (
            (concrete < -1).any() or (concrete >= n_groups).any()):
        raise ValueError(f"group ids must lie in [-1, n_groups={n_groups}), got "
                         f"[{concrete.min()}, {concrete.max()}]")
    # Excluded flows (-1) go to an extra segment that is dropped.
    segment = jnp.where(group < 0, n_groups, group)
    last = jax.ops.segment_max(finish, segment, n_groups + 1)[:n_groups]
    first = jax.ops.segment_min(start, segment, n_groups + 1)[:n_groups]
    count = jax.ops.segment_sum(jnp.ones_like(start), segment, n_groups + 1)[:n_groups]
    nonempty = count > 0
    return jnp.where(nonempty, jnp.where(nonempty, last, 0.0) - jnp.where(nonempty, first, 0.0),
                     jnp.nan)


def collective_ideal_time(src, dst, size, group, n_groups: int, n_hosts: int, line_rate):
    """Ideal completion time of each collective on a non-blocking fabric at line rate.

    ``ideal[g] = max_h max(sent_g[h], received_g[h]) / line_rate``: the most bytes one
    NIC sends or receives in the collective, at the NIC line rate.  No fabric can do
    better when every NIC is limited to ``line_rate`` (the collective's NIC bottleneck);
    a non-blocking crossbar with ideal congestion control reaches it for a single
    phase without dependencies (a ring's steps and all-to-all skew can make the actual
    optimum longer, which is what the ideal-fabric baseline of ``compare`` shows).

    Args:
      src, dst: [flows] int host ids in ``[0, n_hosts)``.
      size: [flows] bytes.
      group: [flows] collective id in ``[0, n_groups)``, ``-1`` excluded.
      n_groups, n_hosts: static counts.
      line_rate: NIC line rate, bytes/s (> 0).

    Returns:
      [n_groups] seconds (0 for a group with no flows).
    """
    n_groups, n_hosts = int(n_groups), int(n_hosts)
    if n_hosts < 1:
        raise ValueError(f"n_hosts must be >= 1, got {n_hosts}")
    _check_nonnegative("size", size)
    rate = _concrete(line_rate)
    if rate is not None and not (np.all(np.isfinite(rate)) and np.all(rate > 0)):
        raise ValueError(f"line_rate must be > 0 bytes/s, got {line_rate!r}")
    src, dst, group = jnp.asarray(src), jnp.asarray(dst), jnp.asarray(group)
    (size,) = _floats(size)
    if not (src.shape == dst.shape == size.shape == group.shape) or src.ndim != 1:
        raise ValueError(f"src, dst, size and group must all be [flows], got {src.shape}, "
                         f"{dst.shape}, {size.shape}, {group.shape}")
    for name, arr, hi in (("src", src, n_hosts), ("dst", dst, n_hosts),
                          ("group", group, n_groups)):
        c = _concrete(arr)
        lo = -1 if name == "group" else 0
        if c is not None and c.size and ((c < lo).any() or (c >= hi).any()):
            raise ValueError(f"{name} ids must lie in [{lo}, {hi}), got "
                             f"[{c.min()}, {c.max()}]")
    seg = n_groups * n_hosts
    keep = group >= 0
    g = jnp.where(keep, group, 0)
    w = jnp.where(keep, size, 0.0)
    sent = jax.ops.segment_sum(w, g * n_hosts + src, seg).reshape(n_groups, n_hosts)
    recv = jax.ops.segment_sum(w, g * n_hosts + dst, seg).reshape(n_groups, n_hosts)
    bottleneck = jnp.maximum(sent.max(axis=1, initial=0.0), recv.max(axis=1, initial=0.0))
    return bottleneck / jnp.asarray(line_rate, bottleneck.dtype)


def collective_effective_bandwidth(completion_time, ideal_time):
    """Effective bandwidth of a set of collectives: ``sum(ideal) / sum(completion)``.

    The one definition used by ``compare``, the scaling study and the experiments:
    :func:`effective_bandwidth` with each collective's bottleneck bytes
    (``ideal_time * line_rate``, :func:`collective_ideal_time`) delivered over its
    completion time (:func:`collective_completion_time`), pooled over the collectives.
    1 means every collective ran as fast as its busiest NIC allows.  Groups whose
    completion time is NaN (no flows) are left out.

    Args:
      completion_time: [groups] seconds.
      ideal_time: [groups] seconds.

    Returns:
      scalar fraction (NaN when no group is left).
    """
    completion_time, ideal_time = _floats(completion_time, ideal_time)
    keep = ~jnp.isnan(completion_time)
    total = jnp.sum(jnp.where(keep, completion_time, 0.0))
    ideal = jnp.sum(jnp.where(keep, ideal_time, 0.0))
    return jnp.where(jnp.any(keep), effective_bandwidth(ideal, total, 1.0), jnp.nan)


def algbw(payload_bytes, time):
    """Algorithm bandwidth ``S / t`` (nccl-tests), bytes/s.

    Args:
      payload_bytes: message size S in bytes, as nccl-tests counts it (module docstring).
      time: collective completion time in seconds; ``time = 0`` gives ``inf`` (0 for an
        empty payload).
    """
    _check_nonnegative("payload_bytes", payload_bytes)
    _check_nonnegative("time", time)
    payload_bytes, time = _floats(payload_bytes, time)
    return _ratio(payload_bytes, time)


def busbw_factor(n_ranks: int, kind: str) -> float:
    """nccl-tests' bus-bandwidth factor for ``kind`` on ``n_ranks`` ranks (host float)."""
    key = str(kind).lower().replace("-", "_")
    aliases = {k.replace("_", ""): k for k in _BUSBW_FACTORS}
    key = aliases.get(key.replace("_", ""), key)
    if key not in _BUSBW_FACTORS:
        raise ValueError(f"kind {kind!r} is not a known collective; use one of "
                         f"{', '.join(BUSBW_KINDS)}")
    if isinstance(n_ranks, bool) or int(n_ranks) != n_ranks or n_ranks < 1:
        raise ValueError(f"n_ranks must be an integer >= 1, got {n_ranks!r}")
    return float(_BUSBW_FACTORS[key](int(n_ranks)))


def busbw(algbw, n_ranks: int, kind: str):
    """Bus bandwidth ``algbw * factor(n_ranks, kind)`` (nccl-tests ``doc/PERFORMANCE.md``).

    Args:
      algbw: algorithm bandwidth in bytes/s (:func:`algbw`).
      n_ranks: number of ranks n (static integer >= 1).
      kind: one of :data:`BUSBW_KINDS` (``"allreduce"`` and ``"all-reduce"`` also work).
        Factors: all_reduce ``2(n-1)/n``; all_gather, reduce_scatter, all_to_all
        ``(n-1)/n``; broadcast, reduce, sendrecv 1.

    Returns:
      bytes/s, comparable with the per-rank link rate.

    Raises:
      ValueError: unknown ``kind`` (the message lists the accepted ones) or bad ``n_ranks``.
    """
    factor = busbw_factor(n_ranks, kind)
    (algbw,) = _floats(algbw)
    return algbw * factor


# --------------------------------------------------------------------------------------
# Efficiency, isolation, fairness
# --------------------------------------------------------------------------------------


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
        _check_nonnegative(name, value)
    delivered_bytes, duration, nominal_rate = _floats(delivered_bytes, duration,
                                                      nominal_rate)
    return _ratio(delivered_bytes, duration * nominal_rate)


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
        _check_nonnegative(name, value)
    link_bytes, capacity, duration = _floats(link_bytes, capacity, duration)
    return _ratio(link_bytes, capacity * duration)


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
    _check_nonnegative("fct_with_neighbours", fct_with_neighbours)
    _check_nonnegative("fct_alone", fct_alone)
    fct_with_neighbours, fct_alone = _floats(fct_with_neighbours, fct_alone)
    return _ratio(fct_with_neighbours, fct_alone)


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
    _check_nonnegative("x", x)
    (x,) = _floats(x)
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


# --------------------------------------------------------------------------------------
# Economics
# --------------------------------------------------------------------------------------


def gpu_utilization(compute_time, step_time):
    """Fraction of a training step the GPUs spend computing: ``compute_time / step_time``.

    ``step_time`` is the wall time of the step including exposed (non-overlapped)
    communication, so communication stalls show up as utilisation below 1.

    Args:
      compute_time: seconds of computation per step.
      step_time: seconds per step (``inf`` result if 0 with nonzero compute).
    """
    _check_nonnegative("compute_time", compute_time)
    _check_nonnegative("step_time", step_time)
    compute_time, step_time = _floats(compute_time, step_time)
    return _ratio(compute_time, step_time)


def cost_per_token(gpu_price_per_hour, n_gpus, step_time, tokens_per_step):
    """Dollars per token: ``price/3600 * n_gpus * step_time / tokens_per_step``.

    Args:
      gpu_price_per_hour: dollars per GPU-hour.
      n_gpus: GPUs the job occupies.
      step_time: seconds per training step.
      tokens_per_step: tokens processed per step (global batch x sequence length).

    Returns:
      dollars per token (``inf`` if ``tokens_per_step`` is 0 and the step costs money).
    """
    for name, value in (("gpu_price_per_hour", gpu_price_per_hour), ("n_gpus", n_gpus),
                        ("step_time", step_time), ("tokens_per_step", tokens_per_step)):
        _check_nonnegative(name, value)
    price, n_gpus, step_time, tokens = _floats(gpu_price_per_hour, n_gpus, step_time,
                                               tokens_per_step)
    dollars_per_step = price / _SECONDS_PER_HOUR * n_gpus * step_time
    return _ratio(dollars_per_step, tokens)


def cost_per_million_tokens(gpu_price_per_hour, n_gpus, step_time, tokens_per_step):
    """Dollars per million tokens: ``1e6 * cost_per_token(...)`` (same arguments)."""
    return 1e6 * cost_per_token(gpu_price_per_hour, n_gpus, step_time, tokens_per_step)
