"""Tests of the incremental pieces of the warm-started event engine (issue #13):
``fabric_jax.fairness.compact_indices`` (prefix-sum compaction) and
``fabric_jax.fairness.solve_warm(load=...)`` (residual capacity and new link load summed
over the re-solved rows only), against ``jnp.nonzero``, the NumPy progressive-filling
oracle and the from-scratch link load; and the engine that carries the link load from
event to event against the NumPy event-driven oracle on a long coupled run.

Units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest


from tests.helpers import enable_x64
from tests.reference.flowsim_numpy import simulate_flows_reference
from tests.reference.maxmin_numpy import progressive_filling


@pytest.mark.parametrize("n, p, size", [(50, 0.3, 20), (50, 0.3, 5), (64, 0.0, 8),
                                        (64, 1.0, 64), (300, 0.05, 40)])
def test_compact_indices_equals_nonzero(n, p, size):
    from fabric_jax.fairness import compact_indices
    mask = np.random.default_rng(n + size).random(n) < p
    got = np.asarray(compact_indices(jnp.asarray(mask), size))
    want = np.asarray(jnp.nonzero(jnp.asarray(mask), size=size, fill_value=0)[0])
    np.testing.assert_array_equal(got, want)


def _case(rng, n_links=10, n_flows=200, kind="random"):
    """Dense problem large enough for several compaction buffers (64, 100, 200 rows)."""
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        links = rng.choice(n_links, size=rng.integers(1, 4), replace=False)
        A[links, f] = np.where(rng.random(links.size) < 0.2, 0.5, 1.0)
    cap = rng.uniform(1.0, 10.0, n_links)
    demand = np.full(n_flows, np.inf)
    if kind == "demands":
        pick = rng.random(n_flows) < 0.3
        demand[pick] = rng.uniform(0.005, 0.05, pick.sum())
    if kind == "zero_capacity":
        cap[rng.integers(n_links)] = 0.0
    return A, cap, demand


@functools.lru_cache(maxsize=None)
def _jit_solve_warm(solve_warm):  # one compile for every case (same shapes)
    return jax.jit(lambda inc, c, d, r, f, load: solve_warm(inc, c, d, r, f, load=load))


@pytest.mark.parametrize("kind", ["random", "demands", "zero_capacity"])
@pytest.mark.parametrize("open_frac", [0.05, 0.4, 1.0])
def test_solve_warm_with_load_equals_scratch_x64(kind, open_frac):
    """Removal event: flows below theta keep their rates; with the carried load the
    residual and the new load are summed over the open rows only (or recomputed when
    the buffer is the whole problem, ``open_frac=1``)."""
    from fabric_jax import Incidence
    from fabric_jax.fairness import solve_warm
    rng = np.random.default_rng(int(open_frac * 100) + len(kind))
    A, cap, demand = _case(rng, kind=kind)
    before = progressive_filling(A, cap, demand)[0]
    # Remove flows whose rate sits at the chosen quantile: everything above re-solves.
    theta = np.quantile(before, 1 - open_frac) if open_frac < 1 else 0.0
    gone = np.zeros(A.shape[1], bool)
    gone[np.argmin(np.abs(before - theta))] = True
    theta = before[gone].min()
    keep_cols = ~gone
    A2, d2, r2 = A[:, keep_cols], demand[keep_cols], before[keep_cols]
    frozen = r2 < theta * (1 - 1e-9)
    expected = progressive_filling(A2, cap, d2)[0]
    with enable_x64():
        inc = Incidence.from_dense(A2)
        old_load = jnp.asarray(A2 @ np.where(np.isfinite(r2), r2, 0.0))
        res = _jit_solve_warm(solve_warm)(inc, jnp.asarray(cap), jnp.asarray(d2),
                                          jnp.asarray(r2), jnp.asarray(frozen), old_load)
        got, load = np.asarray(res.rates), np.asarray(res.link_load)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * cap.max())
    np.testing.assert_allclose(load, A2 @ expected, rtol=1e-9, atol=1e-9 * cap.max())
    assert bool(res.info.converged)


@pytest.mark.slow
def test_long_coupled_run_with_carried_load_matches_oracle(x64):
    """200 flows on 30 links, all at t = 0: ~200 events, most re-solving a small buffer
    with the incrementally updated load, some the whole table (which refreshes it);
    also merged completions (several flows with equal sizes and routes)."""
    import fabric_jax as fj
    rng = np.random.default_rng(7)
    n_links, n_flows = 30, 200
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        A[rng.choice(n_links, size=3, replace=False), f] = 1.0
    A[:, 1:4] = A[:, [0]]                       # four identical flows: one 4-way event
    cap = rng.uniform(1e9, 1e10, n_links)
    size = rng.uniform(1e6, 1e8, n_flows)
    size[1:4] = size[0]
    arr = np.zeros(n_flows)
    ref = simulate_flows_reference(A, cap, arr, size)
    warm = fj.simulate_flows(A, cap, arr, size, max_active=n_flows)
    cold = fj.simulate_flows(A, cap, arr, size, max_active=n_flows, warm_start=False)
    fin, fct = np.asarray(warm.finish), ref["fct"]
    np.testing.assert_allclose(fin, ref["finish"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fin, np.asarray(cold.finish), rtol=1e-9, atol=1e-12)
    assert int(warm.n_events) == int(cold.n_events) < n_flows
    assert np.all(np.abs(fin - ref["finish"]) / fct < 1e-9)
