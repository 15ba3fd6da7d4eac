"""The independent-phases estimate of how concurrent jobs' communication meets
(``fabric_jax.scale._overlap``, ``fabric-jax scale --job-overlap independent``).

Oracles: hand-computed two-job cases; an enumeration of the other jobs' on/off states
with ``itertools.product`` (written apart from the module's bit-mask sums); the
closed-form bounds (duty 0: the job alone; duty 1: every job at once; jobs that share
nothing: the estimate is the alone time whatever the duties); the fixed point
``u = k t / step``.  Units: seconds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fabric_jax.scale import (JOB_OVERLAPS, MAX_OVERLAP_JOBS, expected_slice_times,
                              independent_overlap)


def _table(fn, J):
    """``[2^J, J]`` table with ``fn(members tuple, i)`` for the members, NaN elsewhere."""
    t = np.full((2 ** J, J), np.nan)
    for m in range(1, 2 ** J):
        members = tuple(j for j in range(J) if m >> j & 1)
        for i in members:
            t[m, i] = fn(members, i)
    return t


def test_two_jobs_by_hand():
    # job 0: 1 s alone, 3 s with job 1; job 1: 2 s alone, 5 s with job 0
    t = np.array([[np.nan, np.nan], [1.0, np.nan], [np.nan, 2.0], [3.0, 5.0]])
    got = expected_slice_times(t, np.array([0.2, 0.5]))
    # E[t0] = (1 - u1) 1 + u1 3 = 2;  E[t1] = (1 - u0) 2 + u0 5 = 2.6
    np.testing.assert_allclose(got, [2.0, 2.6])


def test_expected_times_equal_an_enumeration_of_the_others_states():
    rng = np.random.default_rng(0)
    J = 4
    slow = rng.uniform(0.0, 1.0, (J, J))
    t = _table(lambda mem, i: 1.0 + i + sum(slow[i, j] for j in mem if j != i), J)
    duty = rng.uniform(0.05, 0.95, J)
    got = expected_slice_times(t, duty)
    for i in range(J):
        others = [j for j in range(J) if j != i]
        e = 0.0
        for state in itertools.product([0, 1], repeat=J - 1):
            p = np.prod([duty[j] if s else 1 - duty[j] for j, s in zip(others, state)])
            mask = (1 << i) | sum(1 << j for j, s in zip(others, state) if s)
            e += p * t[mask, i]
        assert got[i] == pytest.approx(e, rel=1e-12)


def test_duty_zero_is_alone_and_duty_one_is_every_job_at_once():
    J = 3
    t = _table(lambda mem, i: 1.0 + 0.7 * len(mem) + 0.1 * i, J)
    alone = t[1 << np.arange(J), np.arange(J)]
    np.testing.assert_allclose(expected_slice_times(t, np.zeros(J)), alone)
    np.testing.assert_allclose(expected_slice_times(t, np.ones(J)), t[-1])


def test_jobs_that_share_nothing_keep_their_alone_times():
    J = 3
    t = _table(lambda mem, i: 0.5 + i, J)
    res = independent_overlap(t, [10, 20, 5], [1.0, 2.0, 0.5], 0.0, [0.01, 0.0, 0.02])
    np.testing.assert_allclose(res["slice_times"], [0.5, 1.5, 2.5])
    assert res["converged"]


def test_the_fixed_point_and_its_bounds():
    J = 3
    t = _table(lambda mem, i: 1e-3 * (1.0 + 0.5 * (len(mem) - 1) + 0.2 * i), J)
    k, C, f, L = np.array([40, 80, 20]), np.array([0.3, 0.5, 0.2]), 0.0, np.full(J, 5e-3)
    res = independent_overlap(t, k, C, f, L)
    assert res["converged"] and res["iterations"] >= 2
    u, et, st = res["duty"], res["slice_times"], res["step_times"]
    # a fixed point: the duties are what the expected slice times make them
    np.testing.assert_allclose(u, np.minimum(1.0, k * expected_slice_times(t, u) /
                                             np.maximum(C, C + k * et + L)), rtol=1e-7)
    np.testing.assert_allclose(st, np.maximum(C, (1 - f) * C + k * et + L))
    alone = t[1 << np.arange(J), np.arange(J)]
    assert np.all(alone <= et + 1e-15) and np.all(et <= t[-1] + 1e-15)
    assert np.all((u > 0) & (u < 1))


def test_bad_tables_and_duties_are_refused():
    t = np.ones((4, 2))
    with pytest.raises(ValueError, match="table"):
        expected_slice_times(np.ones((3, 2)), np.zeros(2))
    for bad in ([0.5], [0.2, 1.5], [np.nan, 0.1]):
        with pytest.raises(ValueError, match="duty"):
            expected_slice_times(t, np.array(bad))
    assert JOB_OVERLAPS == ("always", "independent") and MAX_OVERLAP_JOBS >= 4
