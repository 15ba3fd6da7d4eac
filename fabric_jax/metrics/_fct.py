"""Flow completion: ideal FCT, slowdown, percentiles, and percentiles per size bucket
(fixed byte edges, or the HPCC paper's equal-count buckets) (:mod:`fabric_jax.metrics`)."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..units import KB, MB
from ._common import as_floats, check_nonnegative, format_bytes, quantile_key, safe_ratio

#: Percentiles reported by default (tail latency: median, p95, p99, p99.9).
DEFAULT_QUANTILES = (50.0, 95.0, 99.0, 99.9)

#: Flow-size bucket edges in bytes: <10 KB (mice), 10-100 KB, 100 KB-1 MB, 1-10 MB, >=10 MB.
DEFAULT_SIZE_EDGES = (10 * KB, 100 * KB, 1 * MB, 10 * MB)


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
    check_nonnegative("size", size)
    check_nonnegative("bottleneck_rate", bottleneck_rate)
    check_nonnegative("base_latency", base_latency)
    size, bottleneck_rate, base_latency = as_floats(size, bottleneck_rate, base_latency)
    return safe_ratio(size, bottleneck_rate) + base_latency


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
    check_nonnegative("fct", fct)
    ideal = ideal_fct(size, bottleneck_rate, base_latency)
    fct, ideal = as_floats(fct, ideal)
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
    (x,) = as_floats(x)
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
    return {quantile_key(q): values[i] for i, q in enumerate(qs)}


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
    check_nonnegative("size", size)
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
        entry.update({quantile_key(q): float(p) for q, p in zip(qs, pct)})
        out[f"[{format_bytes(lo)}, {format_bytes(hi)})"] = entry
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
        entry.update({quantile_key(q): float(p)
                      for q, p in zip(qs, np.percentile(sd[idx], qs))})
        out.append(entry)
    return out
