"""Collectives: completion time, ideal time on a non-blocking fabric at NIC line rate,
effective bandwidth, and nccl-tests' algorithm and bus bandwidth
(:mod:`fabric_jax.metrics`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._common import as_floats, check_nonnegative, concrete_array, safe_ratio
from ._efficiency import effective_bandwidth

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


def collective_completion_time(start, finish, group, n_groups: int):
    """Completion time of each group of flows (a collective, a job step, ...).

    ``cct[g] = max_{f in g} finish[f] - min_{f in g} start[f]``, computed with segment
    reductions (jit-safe; ``n_groups`` is static).  This is the one definition of a
    collective's completion time in the package (:mod:`fabric_jax.metrics`).

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
    start, finish = as_floats(start, finish)
    group = jnp.asarray(group)
    if not (start.shape == finish.shape == group.shape) or start.ndim != 1:
        raise ValueError(f"start, finish and group must all be [flows], got "
                         f"{start.shape}, {finish.shape}, {group.shape}")
    if not jnp.issubdtype(group.dtype, jnp.integer):
        raise ValueError(f"group must hold integer group ids, got dtype {group.dtype}")
    concrete = concrete_array(group)
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
    check_nonnegative("size", size)
    rate = concrete_array(line_rate)
    if rate is not None and not (np.all(np.isfinite(rate)) and np.all(rate > 0)):
        raise ValueError(f"line_rate must be > 0 bytes/s, got {line_rate!r}")
    src, dst, group = jnp.asarray(src), jnp.asarray(dst), jnp.asarray(group)
    (size,) = as_floats(size)
    if not (src.shape == dst.shape == size.shape == group.shape) or src.ndim != 1:
        raise ValueError(f"src, dst, size and group must all be [flows], got {src.shape}, "
                         f"{dst.shape}, {size.shape}, {group.shape}")
    for name, arr, hi in (("src", src, n_hosts), ("dst", dst, n_hosts),
                          ("group", group, n_groups)):
        c = concrete_array(arr)
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
    completion_time, ideal_time = as_floats(completion_time, ideal_time)
    keep = ~jnp.isnan(completion_time)
    total = jnp.sum(jnp.where(keep, completion_time, 0.0))
    ideal = jnp.sum(jnp.where(keep, ideal_time, 0.0))
    return jnp.where(jnp.any(keep), effective_bandwidth(ideal, total, 1.0), jnp.nan)


def algbw(payload_bytes, time):
    """Algorithm bandwidth ``S / t`` (nccl-tests), bytes/s.

    Args:
      payload_bytes: message size S in bytes, as nccl-tests counts it
        (:mod:`fabric_jax.metrics`).
      time: collective completion time in seconds; ``time = 0`` gives ``inf`` (0 for an
        empty payload).
    """
    check_nonnegative("payload_bytes", payload_bytes)
    check_nonnegative("time", time)
    payload_bytes, time = as_floats(payload_bytes, time)
    return safe_ratio(payload_bytes, time)


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
    (algbw,) = as_floats(algbw)
    return algbw * factor
