"""Tests of fabric_jax.metrics: closed-form values by hand, edge cases, transformations."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import metrics
from fabric_jax.units import KB, MB


@pytest.fixture(autouse=True)
def strict_promotion():
    """Metrics must work under strict dtype promotion (mixed int/float inputs)."""
    with jax.numpy_dtype_promotion("strict"):
        yield


def _close(actual, expected, rtol=1e-6):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=rtol)


# --- flow completion ------------------------------------------------------------------


def test_ideal_fct_and_slowdown():
    # 1 MB over a 1 GB/s bottleneck = 1 ms, plus 2 us base latency = 1.002 ms.
    _close(metrics.ideal_fct(1e6, 1e9, 2e-6), 1.002e-3)
    # Taking 2.004 ms is a slowdown of exactly 2.
    _close(metrics.slowdown(2.004e-3, 1e6, 1e9, 2e-6), 2.0)
    # Vectorised, integer sizes: 500 B and 3000 B at 100 B/s = 5 s and 30 s.
    _close(metrics.ideal_fct(np.array([500, 3000]), 100.0), [5.0, 30.0])
    _close(metrics.slowdown(np.array([5.0, 60.0]), np.array([500, 3000]), 100.0),
           [1.0, 2.0])


def test_slowdown_of_zero_ideal_time():
    # A zero-byte flow without latency: ideal time 0. It is "on time" (1) if it took 0,
    # infinitely slowed if it took anything.
    out = np.asarray(metrics.slowdown(np.array([0.0, 1e-6]), 0.0, 1e9))
    assert out[0] == 1.0 and math.isinf(out[1])


def test_ideal_fct_rejects_negative_size():
    with pytest.raises(ValueError, match="size"):
        metrics.ideal_fct(-1.0, 1e9)


def test_percentiles_by_hand():
    # x = 1..100, linear interpolation at position q/100 * 99 (0-based):
    # p50 -> 49.5 -> 50.5; p95 -> 94.05 -> 95.05; p99 -> 98.01 -> 99.01;
    # p99.9 -> 98.901 -> 99.901.
    x = np.arange(1, 101)
    out = metrics.percentiles(x)
    assert set(out) == {"p50", "p95", "p99", "p99_9"}
    _close(out["p50"], 50.5)
    _close(out["p95"], 95.05)
    _close(out["p99"], 99.01)
    _close(out["p99_9"], 99.901)
    jitted = jax.jit(metrics.percentiles)(jnp.asarray(x, dtype=jnp.float32))
    _close(jitted["p99"], 99.01)


def test_percentiles_custom_and_empty():
    assert set(metrics.percentiles(np.ones(3), qs=(0, 100))) == {"p0", "p100"}
    with pytest.raises(ValueError, match="empty"):
        metrics.percentiles(np.array([]))
    with pytest.raises(ValueError, match="qs"):
        metrics.percentiles(np.ones(3), qs=(101,))


def test_by_size_bucket():
    # Buckets [0,10K) [10K,100K) [100K,1M) [1M,10M) [10M,inf); 10 KB exactly goes up.
    size = np.array([5 * KB, 10 * KB, 50 * KB, 5 * MB, 5 * MB, 50 * MB])
    values = np.array([1.0, 2.0, 4.0, 10.0, 30.0, 7.0])
    out = metrics.by_size_bucket(values, size)
    assert list(out) == ["[0B, 10KB)", "[10KB, 100KB)", "[100KB, 1MB)", "[1MB, 10MB)",
                         "[10MB, inf)"]
    assert [b["count"] for b in out.values()] == [1, 2, 0, 2, 1]
    # Two values 2 and 4 -> median 3; 10 and 30 -> median 20, p95 = 10 + 0.95*20 = 29.
    assert out["[10KB, 100KB)"]["p50"] == pytest.approx(3.0)
    assert out["[1MB, 10MB)"]["p50"] == pytest.approx(20.0)
    assert out["[1MB, 10MB)"]["p95"] == pytest.approx(29.0)
    assert math.isnan(out["[100KB, 1MB)"]["p50"])
    assert out["[0B, 10KB)"]["hi"] == 10 * KB


def test_by_size_bucket_bad_input():
    with pytest.raises(ValueError, match="size"):
        metrics.by_size_bucket(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="edges"):
        metrics.by_size_bucket(np.ones(2), np.ones(2), edges=(10.0, 5.0))


# --- collectives -----------------------------------------------------------------------


def test_collective_completion_time():
    # Group 0: flows 0,1 arrive at 1 and 2, finish at 4 and 3 -> 4 - 1 = 3.
    # Group 1: flows 2,3,4 arrive 0, 5, 5 and finish 6, 9, 7 -> 9 - 0 = 9.
    # Group 2: no flows -> NaN. Flow 5 (group -1) is excluded despite finishing at 100.
    arrival = np.array([1.0, 2.0, 0.0, 5.0, 5.0, 0.0])
    finish = np.array([4.0, 3.0, 6.0, 9.0, 7.0, 100.0])
    group = np.array([0, 0, 1, 1, 1, -1])
    out = np.asarray(metrics.collective_completion_time(arrival, finish, group, 3))
    np.testing.assert_allclose(out[:2], [3.0, 9.0])
    assert np.isnan(out[2])
    jitted = jax.jit(metrics.collective_completion_time, static_argnums=3)
    np.testing.assert_allclose(np.asarray(jitted(arrival, finish, group, 3))[:2], [3.0, 9.0])


def test_collective_completion_time_bad_group():
    with pytest.raises(ValueError, match="group"):
        metrics.collective_completion_time(np.zeros(2), np.ones(2), np.array([0, 2]), 2)
    with pytest.raises(ValueError, match="group"):
        metrics.collective_completion_time(np.zeros(2), np.ones(2), np.array([0]), 2)


@pytest.mark.parametrize("kind, n, factor", [
    ("all_reduce", 8, 2 * 7 / 8),
    ("all_gather", 8, 7 / 8),
    ("reduce_scatter", 4, 3 / 4),
    ("all_to_all", 16, 15 / 16),
    ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0),
    ("sendrecv", 2, 1.0),
    ("allreduce", 2, 1.0),  # alias: 2 * 1/2
    ("All-Gather", 2, 0.5),  # alias
    ("all_reduce", 1, 0.0),  # one rank moves nothing over the bus
])
def test_busbw_factors(kind, n, factor):
    assert metrics.busbw_factor(n, kind) == pytest.approx(factor)
    _close(metrics.busbw(1e10, n, kind), 1e10 * factor)


def test_algbw_and_ring_busbw_equals_link_rate():
    # Ideal ring all-reduce of S bytes on n ranks with link rate B takes
    # T = 2(n-1)/n * S/B, so algbw = S/T and busbw = algbw * 2(n-1)/n = B exactly.
    S, B, n = 1e9, 5e10, 8
    T = 2 * (n - 1) / n * S / B
    bw = metrics.algbw(S, T)
    _close(bw, S / T)
    _close(metrics.busbw(bw, n, "all_reduce"), B)


def test_busbw_bad_kind_and_ranks():
    with pytest.raises(ValueError, match="all_reduce.*all_gather"):
        metrics.busbw(1.0, 4, "allreduce_tree")
    with pytest.raises(ValueError, match="n_ranks"):
        metrics.busbw(1.0, 0, "all_reduce")
    with pytest.raises(ValueError, match="n_ranks"):
        metrics.busbw(1.0, 2.5, "all_reduce")


def test_algbw_zero_time_is_inf_and_gradient_safe():
    assert math.isinf(float(metrics.algbw(1e6, 0.0)))
    assert float(metrics.algbw(0.0, 0.0)) == 0.0
    grad = jax.grad(lambda t: metrics.algbw(0.0, t))(0.0)
    assert np.isfinite(grad)
    # d(S/t)/dt = -S/t^2 = -1e6 / 4 at t = 2.
    _close(jax.grad(lambda t: metrics.algbw(1e6, t))(2.0), -2.5e5, rtol=1e-5)


# --- efficiency, isolation, fairness --------------------------------------------------


def test_effective_bandwidth_and_link_utilization():
    # 6e9 B in 1 s on a 1e10 B/s NIC is 60 % effective bandwidth.
    _close(metrics.effective_bandwidth(6e9, 1.0, 1e10), 0.6)
    # Links of 10 B/s over 2 s: 5 B -> 25 %, 20 B -> 100 %; a failed (0 B/s) idle link -> 0.
    out = metrics.link_utilization(np.array([5.0, 20.0, 0.0]), np.array([10.0, 10.0, 0.0]),
                                   2.0)
    _close(out, [0.25, 1.0, 0.0])
    assert math.isinf(float(metrics.effective_bandwidth(1.0, 0.0, 1e9)))


def test_isolation():
    # The job takes 1.3 s next to neighbours, 1.0 s alone: 30 % slower.
    _close(metrics.isolation(1.3, 1.0), 1.3)
    _close(metrics.isolation(np.array([2.0, 2.0]), np.array([2.0, 1.0])), [1.0, 2.0])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_jain_index_equal_and_one_hot(n):
    _close(metrics.jain_index(np.full(n, 3.5)), 1.0)
    _close(metrics.jain_index(np.eye(n)[0]), 1.0 / n)


def test_jain_index_by_hand_and_axis():
    # [1, 2, 3]: (6)^2 / (3 * 14) = 36 / 42 = 6/7.
    _close(metrics.jain_index(np.array([1.0, 2.0, 3.0])), 6 / 7)
    rows = np.array([[1.0, 1.0], [1.0, 0.0]])
    _close(metrics.jain_index(rows, axis=-1), [1.0, 0.5])
    _close(metrics.jain_index(rows, axis=0), [1.0, 0.5])
    # All-zero allocation counts as equal, and its gradient is finite.
    _close(metrics.jain_index(np.zeros(4)), 1.0)
    assert np.all(np.isfinite(jax.grad(metrics.jain_index)(jnp.zeros(4))))


def test_jain_index_bad_input():
    with pytest.raises(ValueError, match="x"):
        metrics.jain_index(np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="empty"):
        metrics.jain_index(np.zeros(0))


# --- economics ------------------------------------------------------------------------


def test_gpu_utilization():
    # 0.8 s of compute in a 1 s step (0.2 s exposed communication) -> 80 %.
    _close(metrics.gpu_utilization(0.8, 1.0), 0.8)


def test_cost_per_token():
    # $2 per GPU-hour, 1024 GPUs, 3.6 s per step: 2/3600 * 1024 * 3.6 = $2.048 per step;
    # 4e6 tokens per step -> $5.12e-7 per token, $0.512 per million tokens.
    _close(metrics.cost_per_token(2.0, 1024, 3.6, 4_000_000), 5.12e-7)
    _close(metrics.cost_per_million_tokens(2.0, 1024, 3.6, 4_000_000), 0.512)
    with pytest.raises(ValueError, match="step_time"):
        metrics.cost_per_token(2.0, 8, -1.0, 1000)


def test_jit_equals_eager_and_dtype_follows_input():
    fct = jnp.asarray([2e-3, 5e-3], dtype=jnp.float32)
    size = jnp.asarray([1e6, 1e6], dtype=jnp.float32)
    eager = metrics.slowdown(fct, size, 1e9)
    jitted = jax.jit(metrics.slowdown)(fct, size, 1e9)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6)
    _close(eager, [2.0, 5.0], rtol=1e-6)
    assert eager.dtype == jnp.float32
