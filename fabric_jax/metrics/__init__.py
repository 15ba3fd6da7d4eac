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

Division by zero follows one documented rule (:func:`._common.safe_ratio`):
``x / 0 = inf`` for ``x > 0`` and ``0 / 0 = 0`` (nothing delivered in no time), with
NaN-free gradients.

The package holds one module per family: ``_fct`` (flow completion), ``_collectives``,
``_efficiency`` (efficiency, isolation, fairness), ``_cost`` (GPU utilisation and cost),
over ``_common`` (dtype, checks, the division rule).
"""

from __future__ import annotations

from ._collectives import (BUSBW_KINDS, algbw, busbw, busbw_factor, collective_completion_time,
                           collective_effective_bandwidth, collective_ideal_time)
from ._cost import cost_per_million_tokens, cost_per_token, gpu_utilization
from ._efficiency import (effective_bandwidth, isolation, isolation_per_class, jain_index,
                          link_utilization)
from ._fct import (DEFAULT_QUANTILES, DEFAULT_SIZE_EDGES, by_size_bucket, ideal_fct,
                   percentiles, size_buckets, slowdown)


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
