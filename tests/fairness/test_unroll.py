"""Iterations of known trip count before the exact loops (issue 24: "a fixed iteration
count with an exactness check"): ``fairness.solve(unroll=K)``,
``fairness.water_fill(unroll=K)`` and ``simulate_fluid(solver_unroll=K)``; and the exact
loops testing their condition once every ``M`` iterations (``solve(check_every=M)``,
``max_min_fair(check_every=M)``, ``simulate_fluid(solver_check_every=M)``).

The oracle is the plain while loop itself: an iteration after the last freeze changes
nothing, so the unrolled solve must give the same rates to the bit (with the fluid
step's ``compaction="none"``) and the same iteration count (the bottleneck depth), for
``K`` below, at and above the depth; the float64 progressive-filling oracle
(``tests/reference/maxmin_numpy.py``) checks that the common answer is the max-min one.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import Incidence, simulate_fluid, smooth
from fabric_jax.fairness import solve, water_fill
from tests import helpers
from tests.helpers import LINK_100G
from tests.reference.maxmin_numpy import progressive_filling

from experiments import bench_dynamics


def _instance(seed, layout):
    inst = helpers.random_instance(np.random.default_rng(seed), n_links=60, n_flows=400)
    inc = Incidence.from_coo(inst.link_idx, inst.flow_idx, inst.weight,
                             n_links=inst.n_links, n_flows=inst.n_flows)
    if layout == "coo":
        inc = Incidence(inc.link_idx, inc.flow_idx, inc.weight, inc.n_links, inc.n_flows)
    cap = jnp.asarray(inst.capacity, jnp.float32)
    dem = (jnp.full(inst.n_flows, jnp.inf, jnp.float32) if inst.demand is None
           else jnp.asarray(inst.demand, jnp.float32))
    return inst, inc, cap, dem


@pytest.mark.parametrize("layout", ["rows", "coo"])
@pytest.mark.parametrize("seed", [0, 1])
def test_unrolled_solve_is_the_loop_to_the_bit(seed, layout):
    inst, inc, cap, dem = _instance(seed, layout)
    if layout == "rows":
        assert inc.row_width is not None     # the flow-major path of the solver
    ref = solve(inc, cap, dem, compaction="none")
    depth = int(ref.info.iterations)
    assert depth >= 3                        # deep enough that K < depth is exercised
    for k in (1, depth - 1, depth, depth + 4):
        got = solve(inc, cap, dem, compaction="none", unroll=k)
        np.testing.assert_array_equal(np.asarray(got.rates), np.asarray(ref.rates))
        np.testing.assert_array_equal(np.asarray(got.link_load), np.asarray(ref.link_load))
        assert int(got.info.iterations) == depth and bool(got.info.converged)
    expected = progressive_filling(inst.dense, inst.capacity, inst.demand)[0]
    scale = float(np.max(inst.capacity))
    np.testing.assert_allclose(np.asarray(ref.rates, float), expected, rtol=1e-4,
                               atol=1e-5 * scale)


@pytest.mark.parametrize("layout", ["rows", "coo"])
def test_solve_checking_every_m_iterations_is_the_loop_to_the_bit(layout):
    inst, inc, cap, dem = _instance(2, layout)
    ref = solve(inc, cap, dem, compaction="none")
    depth = int(ref.info.iterations)
    for m in (2, 3, depth, depth + 5):
        for k in (0, 2):
            got = solve(inc, cap, dem, compaction="none", check_every=m, unroll=k)
            np.testing.assert_array_equal(np.asarray(got.rates), np.asarray(ref.rates))
            assert int(got.info.iterations) == depth and bool(got.info.converged)


def test_max_min_fair_check_every_gives_the_same_answer_and_refuses_bad_values():
    from fabric_jax import max_min_fair
    inst, inc, cap, dem = _instance(1, "rows")
    ref = max_min_fair(inc, cap, dem)
    got = max_min_fair(inc, cap, dem, check_every=4)
    np.testing.assert_array_equal(np.asarray(got.rates), np.asarray(ref.rates))
    assert int(got.info.iterations) == int(ref.info.iterations)
    batch = max_min_fair(inc, jnp.stack([cap, 0.5 * cap]), check_every=3)
    np.testing.assert_array_equal(np.asarray(batch.rates[0]),
                                  np.asarray(max_min_fair(inc, cap).rates))
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="check_every"):
            max_min_fair(inc, cap, dem, check_every=bad)
    with pytest.raises(ValueError, match="check_every"):
        max_min_fair(inc, cap, dem, check_every=2, iterations=10)


def test_unrolled_solve_with_compaction_levels_gives_the_same_rates():
    inst, inc, cap, dem = _instance(0, "rows")
    ref = solve(inc, cap, dem, compaction="fine")
    got = solve(inc, cap, dem, compaction="fine", unroll=3)
    np.testing.assert_allclose(np.asarray(got.rates), np.asarray(ref.rates), rtol=1e-6)
    assert int(got.info.iterations) == int(ref.info.iterations)


def test_unroll_with_a_fixed_iteration_count_is_rejected():
    _, inc, cap, dem = _instance(0, "rows")
    with pytest.raises(ValueError, match="unroll"):
        solve(inc, cap, dem, iterations=5, unroll=2)
    with pytest.raises(ValueError, match="unroll"):
        water_fill(np.zeros(3, np.int32), np.ones(3), np.ones(1), np.ones(3), iterations=2,
                   unroll=2)


def test_unrolled_water_fill_gives_the_same_rates_and_rounds():
    rng = np.random.default_rng(3)
    n_links, n_flows = 8, 300
    link = rng.integers(-1, n_links, n_flows).astype(np.int32)
    weight = rng.choice([1.0, 0.5, 0.25], n_flows)
    cap = jnp.asarray(rng.uniform(0.5, 2.0, n_links) * LINK_100G, jnp.float32)
    # many distinct demand levels below the water lines: several rounds
    dem = jnp.asarray(rng.uniform(0.0, 0.05, n_flows) * LINK_100G, jnp.float32)
    ref, rounds = water_fill(link, weight, cap, dem, with_rounds=True)
    assert int(rounds) >= 3
    # the reference without a while loop: a fixed number of rounds (fori_loop), the
    # same rates to the bit once it covers the rounds that changed something (all but
    # the last, which found no flow to join)
    fixed = lambda n: np.asarray(water_fill(link, weight, cap, dem, iterations=n))  # noqa: E731
    np.testing.assert_array_equal(fixed(int(rounds) - 1), np.asarray(ref))
    np.testing.assert_array_equal(fixed(int(rounds) + 5), np.asarray(ref))
    for k in (0, 1, int(rounds) - 1, int(rounds), int(rounds) + 3):
        got, got_rounds = water_fill(link, weight, cap, dem, with_rounds=True, unroll=k)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
        assert int(got_rounds) == int(rounds)


def _proxy(**kw):
    topo, inc, cap, _ = bench_dynamics.workload(8, 16, 0, None)
    return simulate_fluid(inc, cap, np.full(inc.n_flows, 1e6), dt=1e-6, n_steps=120,
                          buffer=1e6, link_latency=np.asarray(topo.latency), nic_links=topo,
                          save_every=40, **kw)


def _same(a, b):
    for f in ("finish", "sent", "delivered", "dropped", "queued", "link_queue"):
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))
    np.testing.assert_array_equal(np.asarray(a.trajectory.queue), np.asarray(b.trajectory.queue))
    np.testing.assert_array_equal(np.asarray(a.info.solver_iterations),
                                  np.asarray(b.info.solver_iterations))


@pytest.mark.parametrize("law,fc", [("dcqcn", "pfc"), ("hpcc", "none")])
def test_fluid_solver_unroll_is_bit_identical(law, fc):
    ref = _proxy(law=law, flow_control=fc)
    for k in (1, 4):
        _same(_proxy(law=law, flow_control=fc, solver_unroll=k), ref)


@pytest.mark.parametrize("law,fc", [("dcqcn", "pfc"), ("hpcc", "none")])
def test_fluid_solver_check_every_is_bit_identical(law, fc):
    ref = _proxy(law=law, flow_control=fc)
    _same(_proxy(law=law, flow_control=fc, solver_check_every=3), ref)
    _same(_proxy(law=law, flow_control=fc, solver_check_every=2, solver_unroll=1), ref)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_fluid_solver_check_every_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="solver_check_every"):
        _proxy(law="dcqcn", flow_control="pfc", solver_check_every=bad)
    if bad == 0:
        with pytest.raises(ValueError, match="solver_check_every"):
            _proxy(law="dcqcn", flow_control="pfc", solver_check_every=2,
                   solver_iterations=10)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_fluid_solver_unroll_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="solver_unroll"):
        _proxy(law="dcqcn", flow_control="pfc", solver_unroll=bad)


def test_fluid_solver_unroll_is_not_combined_with_a_fixed_count():
    with pytest.raises(ValueError, match="solver_unroll"):
        _proxy(law="dcqcn", flow_control="pfc", solver_unroll=2, solver_iterations=10)
    with pytest.raises(ValueError, match="solver_unroll"):
        _proxy(law="dcqcn", flow_control="pfc", solver_unroll=2, smooth=smooth.smooth(0.05))
