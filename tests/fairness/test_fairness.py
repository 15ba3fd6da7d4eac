"""Tests for the exact weighted max-min solver ``fabric_jax.max_min_fair`` and ``Incidence``.

Kinds of test (see docs/style.md, "Tests"):

* oracle equality against textbook progressive filling
  (``tests/reference/maxmin_numpy.py``): hypothesis instances at 1e-9 relative in x64 and
  1e-4 relative in float32, with the incidence built on the host or inside jit, plus a
  few thousand-entry instances (the size at which a solver may change strategy);
* closed-form textbook cases (parking lot, dumbbell, multipath split, demand limits,
  flows on no link, zero-capacity links, a near-tie), each with the derivation in a
  comment, run on both the oracle and the solver;
* invariants: feasibility, bottleneck certificate, reported load/saturation/info, the
  smallest rate (closed form, and monotone in any capacity; per-flow rates are *not*
  monotone in capacity, so that is not tested);
* ``Incidence`` constructors, pytree behaviour, validation of every argument;
* transformations: jit == eager, vmap == loop, forward-mode derivative == closed form
  == central finite difference, reverse mode with a fixed iteration count, no retrace.

Units: bytes/s everywhere.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

from tests.helpers import slow_except
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_jax import Incidence, max_min_fair
from tests import helpers
from tests.helpers import LINK_100G, enable_x64
from tests.reference.maxmin_numpy import bottleneck_certificate, progressive_filling

C = LINK_100G  # one link speed for the hand cases, bytes/s

# Relative tolerances against the float64 oracle. Absolute slack is the relative one
# times the largest capacity of the instance (a zero rate cannot be matched relatively).
RTOL_X64 = 1e-9
RTOL_F32 = 1e-4
ATOL_F32 = 1e-6  # times the largest capacity: ~16 float32 ulps of the biggest rate

EXAMPLES = 80
FAST_EXAMPLES = 30

# Random instances are padded to a few fixed shapes without changing the problem
# (unused links; flows on no link up to the next of FLOW_BUCKETS; entries split in
# halves), so the solver compiles once per shape rather than once per example.
# Host-built incidences are laid out per flow, so their shape follows the busiest flow's
# entry count (ROW_WIDTH); incidences built inside jit keep the raw entries (NNZ).
MAX_LINKS, MAX_FLOWS, MAX_HOPS = 6, 8, 3
FLOW_BUCKETS = (1, 2, 4, 8)
ROW_WIDTH = MAX_HOPS + 2  # + the generator's up to 2 duplicate entries
NNZ = MAX_FLOWS * MAX_HOPS + 2
_RAW_INSTANCES = helpers.instances(max_links=MAX_LINKS, max_flows=MAX_FLOWS, max_hops=MAX_HOPS)
RANDOM_INSTANCES = _RAW_INSTANCES.map(
    lambda inst: helpers.pad(inst, n_links=MAX_LINKS, row_width=ROW_WIDTH, flow_buckets=FLOW_BUCKETS)
)
RANDOM_COO_INSTANCES = _RAW_INSTANCES.map(
    lambda inst: helpers.pad(inst, n_links=MAX_LINKS, nnz=NNZ, flow_buckets=FLOW_BUCKETS)
)


# ---------------------------------------------------------------------------------------
# Small adapters
# ---------------------------------------------------------------------------------------


def incidence_of(inst: helpers.Instance, dtype) -> Incidence:
    """Device-side incidence of a host instance, weights in ``dtype``."""
    return Incidence.from_coo(
        inst.link_idx,
        inst.flow_idx,
        inst.weight.astype(dtype),
        n_links=inst.n_links,
        n_flows=inst.n_flows,
    )


def solve(inst: helpers.Instance, dtype=np.float32, **kwargs):
    """Run the solver on ``inst`` with all float inputs in ``dtype``."""
    demand = None if inst.demand is None else jnp.asarray(inst.demand.astype(dtype))
    return max_min_fair(
        incidence_of(inst, dtype), jnp.asarray(inst.capacity.astype(dtype)), demand, **kwargs
    )


def solve_x64(inst: helpers.Instance, **kwargs):
    """Solver in float64; returns host copies so they outlive the x64 context."""
    with enable_x64():
        result = solve(inst, np.float64, **kwargs)
        return jax.tree_util.tree_map(np.asarray, result)


def oracle(inst: helpers.Instance) -> np.ndarray:
    return progressive_filling(inst.dense, inst.capacity, inst.demand)[0]


def scale_of(inst: helpers.Instance) -> float:
    return float(max(inst.capacity.max(initial=0.0), 1.0))


def rounded_to(inst: helpers.Instance, dtype) -> helpers.Instance:
    """The same instance with every float value rounded to ``dtype`` (kept in float64)."""
    def rnd(x):
        return None if x is None else np.asarray(x).astype(dtype).astype(np.float64)

    return inst.replace(weight=rnd(inst.weight), capacity=rnd(inst.capacity), demand=rnd(inst.demand))


SOLVERS = {
    "oracle": oracle,
    "jax_x64": lambda inst: solve_x64(inst).rates,
}


@pytest.fixture(params=sorted(SOLVERS))
def rates_of(request):
    """Each hand case runs on the oracle (validating it) and on the JAX solver."""
    return SOLVERS[request.param]


# ---------------------------------------------------------------------------------------
# Oracle equality on random instances
# ---------------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(inst=RANDOM_INSTANCES)
def test_matches_oracle_x64(inst):
    expected = oracle(inst)
    result = solve_x64(inst)
    assert result.rates.dtype == np.float64
    np.testing.assert_allclose(result.rates, expected, rtol=RTOL_X64, atol=RTOL_X64 * scale_of(inst))


@settings(max_examples=EXAMPLES, deadline=None)
@given(inst=RANDOM_INSTANCES)
def test_matches_oracle_float32(inst):
    # Compare against the oracle run on the float32-rounded inputs, so only the
    # solver's arithmetic error is measured.
    expected = oracle(rounded_to(inst, np.float32))
    result = solve(inst, np.float32)
    assert result.rates.dtype == jnp.float32
    np.testing.assert_allclose(
        np.asarray(result.rates, np.float64), expected, rtol=RTOL_F32, atol=ATOL_F32 * scale_of(inst)
    )


@functools.lru_cache(maxsize=None)
def _solve_traced_coo(n_links, n_flows):
    """Jitted solve whose Incidence is built from traced COO arrays (no host layout)."""

    @jax.jit
    def run(link_idx, flow_idx, weight, capacity, demand):
        inc = Incidence.from_coo(link_idx, flow_idx, weight, n_links=n_links, n_flows=n_flows)
        return max_min_fair(inc, capacity, demand)

    return run


@settings(max_examples=FAST_EXAMPLES, deadline=None)
@given(inst=RANDOM_COO_INSTANCES)
def test_matches_oracle_x64_incidence_built_under_jit(inst):
    # Same check as above, but the Incidence is constructed inside jit from traced COO
    # arrays, in the caller's arbitrary entry order (no host-side validation or layout).
    expected = oracle(inst)
    demand = np.full(inst.n_flows, np.inf) if inst.demand is None else inst.demand
    with enable_x64():
        run = _solve_traced_coo(inst.n_links, inst.n_flows)
        result = run(
            jnp.asarray(inst.link_idx),
            jnp.asarray(inst.flow_idx),
            jnp.asarray(inst.weight, jnp.float64),
            jnp.asarray(inst.capacity, jnp.float64),
            jnp.asarray(demand, jnp.float64),
        )
        rates = np.asarray(result.rates)
        converged = bool(result.info.converged)
    assert converged
    np.testing.assert_allclose(rates, expected, rtol=RTOL_X64, atol=RTOL_X64 * scale_of(inst))


@functools.lru_cache(maxsize=None)
def _large_case(seed):
    # 2500 flows over 300 links, ~5000 entries: above the size at which a solver may
    # switch strategy for big inputs (e.g. compacting the entries of open flows), which
    # the small random instances never reach.
    inst = helpers.random_instance(np.random.default_rng(seed), n_links=300, n_flows=2500)
    return inst, oracle(inst)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("built", slow_except(["host", "under_jit"], keep=["under_jit"]))
def test_large_instance_matches_oracle_x64(seed, built):
    inst, expected = _large_case(seed)
    assert len(inst.weight) > 4096
    demand = inst.demand
    with enable_x64():
        if built == "host":
            result = solve(inst, np.float64)
        else:
            result = _solve_traced_coo(inst.n_links, inst.n_flows)(
                jnp.asarray(inst.link_idx),
                jnp.asarray(inst.flow_idx),
                jnp.asarray(inst.weight, jnp.float64),
                jnp.asarray(inst.capacity, jnp.float64),
                jnp.asarray(demand, jnp.float64),
            )
        rates = np.asarray(result.rates)
        assert bool(result.info.converged)
    np.testing.assert_allclose(rates, expected, rtol=RTOL_X64, atol=RTOL_X64 * scale_of(inst))


def test_large_instance_matches_oracle_float32():
    # Rounding the inputs to float32 moves the exact rates by ~1e-7 relative, far inside
    # the tolerance, so the float64 oracle of the unrounded instance serves.
    inst, expected = _large_case(0)
    rates = np.asarray(solve(inst, np.float32).rates, np.float64)
    np.testing.assert_allclose(rates, expected, rtol=RTOL_F32, atol=ATOL_F32 * scale_of(inst))


@pytest.mark.parametrize("compaction,layout", slow_except(
    [("none", "rows"), ("coarse", "rows"), ("none", "coo"), ("coarse", "coo")],
    keep=[("coarse", "rows"), ("none", "coo")]))
def test_compaction_levels_do_not_change_the_rates_x64(compaction, layout):
    # Compaction only moves the entries of still-open flows into smaller buffers: with
    # one loop over all entries ("none", the fluid step's) or halving levels the
    # iteration and its answer are the oracle's (the large case spans several levels).
    from fabric_jax.fairness import solve as core_solve
    inst, expected = _large_case(0)
    with enable_x64():
        inc = incidence_of(inst, np.float64)
        if layout == "coo":
            inc = Incidence(inc.link_idx, inc.flow_idx, inc.weight, inc.n_links, inc.n_flows)
        cap = jnp.asarray(inst.capacity, jnp.float64)
        dem = jnp.full(inst.n_flows, jnp.inf) if inst.demand is None else jnp.asarray(
            inst.demand, jnp.float64)
        res = core_solve(inc, cap, dem, compaction=compaction)
        rates = np.asarray(res.rates)
        assert bool(res.info.converged)
    np.testing.assert_allclose(rates, expected, rtol=RTOL_X64, atol=RTOL_X64 * scale_of(inst))


def test_unknown_compaction_is_rejected():
    from fabric_jax.fairness import solve as core_solve
    inst, _ = _large_case(0)
    with pytest.raises(ValueError, match="compaction"):
        core_solve(incidence_of(inst, np.float32), jnp.asarray(inst.capacity, jnp.float32),
                   jnp.full(inst.n_flows, jnp.inf, jnp.float32), compaction="medium")


@settings(max_examples=EXAMPLES, deadline=None)
@given(inst=RANDOM_INSTANCES)
def test_oracle_satisfies_certificate(inst):
    # Validates the oracle itself: feasible and certified max-min fair.
    rates = oracle(inst)
    A = inst.dense
    load = A @ np.where(A.any(axis=0), rates, 0.0)
    assert np.all(load <= inst.capacity * (1 + 1e-12) + 1e-12)
    assert bottleneck_certificate(A, inst.capacity, inst.demand, rates, rtol=1e-12).all()


# ---------------------------------------------------------------------------------------
# Invariants of the solver's output
# ---------------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(inst=RANDOM_INSTANCES)
def test_feasible_certified_and_consistent_x64(inst):
    result = solve_x64(inst)
    A = inst.dense
    scale = scale_of(inst)
    tol = 1e-9 * scale
    rates = result.rates
    uses_links = A.any(axis=0)

    # feasibility
    assert np.all(rates >= 0)
    assert np.all(np.isfinite(rates[uses_links]))
    if inst.demand is not None:
        assert np.all(rates <= inst.demand + tol)
    expected_load = A @ np.where(uses_links, rates, 0.0)
    assert np.all(expected_load <= inst.capacity + tol)

    # reported link load, saturation and diagnostics agree with the rates
    np.testing.assert_allclose(result.link_load, expected_load, rtol=1e-9, atol=tol)
    assert np.all(np.isfinite(result.link_load))
    sat = np.asarray(result.saturated, bool)
    assert sat.shape == (inst.n_links,)
    assert np.all(expected_load[sat] >= inst.capacity[sat] - tol)
    assert 0.0 <= float(result.info.max_violation) <= tol
    assert bool(result.info.converged)

    # bottleneck certificate; and each flow below its demand crosses a link marked saturated
    assert bottleneck_certificate(A, inst.capacity, inst.demand, rates, rtol=1e-9).all()
    demand = np.full(inst.n_flows, np.inf) if inst.demand is None else inst.demand
    below_demand = rates < demand - tol
    crosses_saturated = ((A > 0) & sat[:, None]).any(axis=0)
    assert np.all(crosses_saturated[below_demand])


@settings(max_examples=FAST_EXAMPLES, deadline=None)
@given(inst=RANDOM_INSTANCES)
def test_feasible_and_certified_float32(inst):
    result = solve(inst, np.float32)
    rounded = rounded_to(inst, np.float32)
    rates = np.asarray(result.rates, np.float64)
    A = rounded.dense
    tol = 1e-5 * scale_of(inst)
    load = A @ np.where(A.any(axis=0), rates, 0.0)
    assert np.all(load <= rounded.capacity + tol)
    assert bottleneck_certificate(A, rounded.capacity, rounded.demand, rates, rtol=1e-5).all()
    assert bool(result.info.converged)


def smallest_rate_closed_form(inst: helpers.Instance) -> float:
    """First filling level: all flows rise together until a link fills or a demand is met.

    Link ``l`` fills at ``c_l / sum_f w_lf``; flow ``f`` meets its demand at ``d_f`` (a flow
    on no link gets exactly its demand). Every flow ends at or above that first level and
    the flows frozen there end exactly on it, so it is the smallest rate.
    """
    A = inst.dense
    per_link = A.sum(axis=1)
    used = per_link > 0
    candidates = list(inst.capacity[used] / per_link[used])
    if inst.demand is not None:
        candidates += list(inst.demand)
    return min(candidates, default=math.inf)


@settings(max_examples=EXAMPLES, deadline=None)
@given(inst=RANDOM_INSTANCES, data=st.data())
def test_smallest_rate_closed_form_and_monotone_in_capacity(inst, data):
    scale = scale_of(inst)
    rates = solve_x64(inst).rates
    lowest = smallest_rate_closed_form(inst)
    if math.isinf(lowest):
        assert np.all(np.isinf(rates))
    else:
        assert rates.min() == pytest.approx(lowest, rel=1e-9, abs=1e-9 * scale)

    # Raising one capacity never lowers the smallest rate (individual rates may drop).
    link = data.draw(st.integers(0, inst.n_links - 1), label="link")
    extra = data.draw(st.floats(0.0, 5.0), label="extra") * scale
    bigger = inst.replace(capacity=inst.capacity + extra * (np.arange(inst.n_links) == link))
    raised = solve_x64(bigger).rates
    assert raised.min() >= rates.min() - 1e-9 * max(scale, scale_of(bigger))


# ---------------------------------------------------------------------------------------
# Textbook cases (run on the oracle and on the solver)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_links", [1, 2, 5])
def test_parking_lot_equal_capacities(rates_of, n_links):
    # Every link carries exactly two flows (the long one and its short one). All four
    # rise together; every link fills at 2r = C at the same time, so all rates are C/2.
    rates = rates_of(helpers.parking_lot(n_links, C))
    np.testing.assert_allclose(rates, np.full(n_links + 1, C / 2), rtol=1e-9)


def test_parking_lot_two_levels(rates_of):
    # Link 0 has capacity C, links 1..3 have 2C. Level 1: link 0 fills first at 2r = C
    # (others need 2r = 2C), freezing the long flow 0 and short flow 1 at C/2.
    # Level 2: short flows 2..4 each share their link with the frozen long flow and rise
    # until r + C/2 = 2C, i.e. r = 3C/2.
    rates = rates_of(helpers.parking_lot(4, [C, 2 * C, 2 * C, 2 * C]))
    np.testing.assert_allclose(rates, [C / 2, C / 2, 1.5 * C, 1.5 * C, 1.5 * C], rtol=1e-9)


@pytest.mark.parametrize("n_flows", [1, 3, 8])
def test_dumbbell_equal_share(rates_of, n_flows):
    # n flows share the bottleneck C; access links (2C each) are never binding since
    # C/n <= 2C. Everybody gets C/n.
    rates = rates_of(helpers.dumbbell(n_flows, C))
    np.testing.assert_allclose(rates, np.full(n_flows, C / n_flows), rtol=1e-9)


def test_dumbbell_slow_access_link(rates_of):
    # 4 flows, bottleneck C; flow 0's access link is C/8. Level 1: flow 0's access link
    # fills at r = C/8 (bottleneck would need 4r = C, r = C/4). Level 2: flows 1..3 share
    # the rest: 3r + C/8 = C  ->  r = 7C/24.
    inst = helpers.dumbbell(4, C, access_capacity=np.array([C / 8, 2 * C, 2 * C, 2 * C]))
    rates = rates_of(inst)
    np.testing.assert_allclose(rates, [C / 8, 7 * C / 24, 7 * C / 24, 7 * C / 24], rtol=1e-9)


def test_multipath_split_alone(rates_of):
    # Flow 0 sends half its rate on each of two links of capacity C: each link carries
    # r/2 <= C, so r = 2C -- more than any single link, the point of multipath.
    rates = rates_of(helpers.multipath_split(C, with_competitor=False))
    np.testing.assert_allclose(rates, [2 * C], rtol=1e-9)


def test_multipath_split_with_competitor(rates_of):
    # Flow 0 split 0.5/0.5 over links 0 and 1, flow 1 on link 0 only. With both at r,
    # link 0 carries 0.5r + r = 1.5r and fills at r = 2C/3; link 1 carries 0.5r and would
    # fill at r = 2C. Both flows cross link 0, so both freeze at 2C/3. Link 1 then
    # carries C/3 and is not saturated.
    inst = helpers.multipath_split(C, with_competitor=True)
    rates = rates_of(inst)
    np.testing.assert_allclose(rates, [2 * C / 3, 2 * C / 3], rtol=1e-9)


def test_multipath_split_solver_load_and_saturation():
    # Same system as above: loads are (0.5 * 2C/3 + 2C/3, 0.5 * 2C/3) = (C, C/3).
    result = solve_x64(helpers.multipath_split(C, with_competitor=True))
    np.testing.assert_allclose(result.link_load, [C, C / 3], rtol=1e-9)
    assert result.saturated.tolist() == [True, False]


def test_demand_limited_flow_frees_capacity(rates_of):
    # Two flows on one link C; flow 0 wants only C/4. Level 1: flow 0 meets its demand at
    # C/4 (link would fill at C/2). Level 2: flow 1 takes the rest, C - C/4 = 3C/4.
    inst = helpers.from_routes([[0], [0]], [C], demand=[C / 4, np.inf])
    np.testing.assert_allclose(rates_of(inst), [C / 4, 3 * C / 4], rtol=1e-9)


def test_demand_below_fair_share_everywhere(rates_of):
    # Three flows on a link of 3C with demands C/2, C, 4C: fair share would be C.
    # Flow 0 stops at C/2; flows 1, 2 rise to C where flow 1 meets its demand; flow 2 takes
    # the rest: 3C - C/2 - C = 3C/2 (< 4C, so the link binds).
    inst = helpers.from_routes([[0], [0], [0]], [3 * C], demand=[C / 2, C, 4 * C])
    np.testing.assert_allclose(rates_of(inst), [C / 2, C, 1.5 * C], rtol=1e-9)


def test_flow_on_no_link(rates_of):
    # Flow 1 crosses no link: no constraint but its demand (2C); flow 2 has no demand
    # (inf) and gets inf. Flow 0 alone on the link of capacity C gets C.
    inst = helpers.from_routes([[0], [], []], [C], demand=[np.inf, 2 * C, np.inf])
    rates = rates_of(inst)
    np.testing.assert_allclose(rates, [C, 2 * C, np.inf], rtol=1e-9)


def test_flow_on_no_link_without_demand_gets_inf_and_loads_stay_finite():
    # Flow 1 on no link and no demand array at all: its rate is +inf, yet it adds nothing
    # to any link load (no 0 * inf = NaN), so the load is flow 0's C.
    inst = helpers.from_routes([[0], []], [C])
    result = solve_x64(inst)
    assert result.rates[0] == pytest.approx(C, rel=1e-9)
    assert np.isinf(result.rates[1])
    np.testing.assert_allclose(result.link_load, [C], rtol=1e-9)
    assert bool(result.info.converged)


def test_zero_capacity_link(rates_of):
    # Link 0 has capacity 0: it is full from the start, so flow 0 (links 0 and 1) freezes
    # at 0. Flow 1 alone on link 1 (capacity C) gets all of it.
    inst = helpers.from_routes([[0, 1], [1]], [0.0, C])
    np.testing.assert_allclose(rates_of(inst), [0.0, C], rtol=1e-9, atol=1e-9 * C)


def test_zero_demand(rates_of):
    # A flow wanting nothing gets 0 and leaves the link to the other: [0, C].
    inst = helpers.from_routes([[0], [0]], [C], demand=[0.0, np.inf])
    np.testing.assert_allclose(rates_of(inst), [0.0, C], rtol=1e-9, atol=1e-9 * C)


def test_duplicate_entries_add_up(rates_of):
    # Flow 0 crosses link 0 twice (two entries of weight 1: w = 2), flow 1 once. Both at r:
    # load 2r + r = 3r = C  ->  r = C/3 for both.
    inst = helpers.from_routes([[0, 0], [0]], [C])
    np.testing.assert_allclose(rates_of(inst), [C / 3, C / 3], rtol=1e-9)


def test_near_tie_link_is_not_a_bottleneck_yet(rates_of):
    # Link 0 (capacity 2C(1 + d)) carries flows 0, 1; link 1 (capacity 2C) carries flows
    # 0, 2; flow 2 wants only C/2. Level 1: flow 2 meets its demand at C/2 (links would
    # fill at C(1 + d) and C). Level 2: link 1 now leaves 2C - C/2 = 3C/2 to flow 0, so
    # link 0 binds first at C(1 + d): flows 0, 1 end there. A solver that froze link 0's
    # flows at the first level because C(1 + d) is "close enough" to C would give flow 0
    # only C.
    d = 1e-4
    inst = helpers.from_routes([[0, 1], [0], [1]], [2 * C * (1 + d), 2 * C], demand=[np.inf, np.inf, C / 2])
    np.testing.assert_allclose(rates_of(inst), [C * (1 + d), C * (1 + d), C / 2], rtol=1e-9)


def test_oracle_takes_one_iteration_per_rate_level():
    # Textbook progressive filling settles one bottleneck level per step: the equal
    # parking lot has one level (C/2), the two-level one two (C/2, then 3C/2), and the
    # demand case of test_demand_below_fair_share_everywhere three (C/2, C, 3C/2).
    assert progressive_filling(helpers.parking_lot(5, C).dense, np.full(5, C))[1] == 1
    two = helpers.parking_lot(4, [C, 2 * C, 2 * C, 2 * C])
    assert progressive_filling(two.dense, two.capacity)[1] == 2
    three = helpers.from_routes([[0], [0], [0]], [3 * C], demand=[C / 2, C, 4 * C])
    assert progressive_filling(three.dense, three.capacity, three.demand)[1] == 3


def test_parking_lot_iterations_and_convergence():
    result = solve_x64(helpers.parking_lot(6, C))
    assert int(result.info.iterations) >= 1
    assert bool(result.info.converged)
    assert result.saturated.all()  # every link carries C/2 + C/2 = C
    assert float(result.info.max_violation) <= 1e-9 * C


def test_default_dtype_is_float32():
    dense = helpers.parking_lot(3, C).dense.astype(np.float32)
    result = max_min_fair(jnp.asarray(dense), jnp.full(3, C, jnp.float32))
    assert result.rates.dtype == jnp.float32
    assert result.link_load.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(result.rates), np.full(4, C / 2), rtol=1e-6)


def test_dense_and_incidence_inputs_agree():
    inst = helpers.dumbbell(3, C, access_capacity=np.array([C / 8, 2 * C, 2 * C]))
    cap = jnp.asarray(inst.capacity, jnp.float32)
    from_dense = max_min_fair(jnp.asarray(inst.dense, jnp.float32), cap).rates
    from_inc = max_min_fair(incidence_of(inst, np.float32), cap).rates
    np.testing.assert_allclose(np.asarray(from_dense), np.asarray(from_inc), rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Incidence
# ---------------------------------------------------------------------------------------


def _coo_example():
    # 3 links x 4 flows; entry (1, 2) appears twice (0.25 + 0.5 = 0.75); flow 3 on no link.
    link_idx = np.array([0, 1, 2, 1, 0, 1], np.int32)
    flow_idx = np.array([0, 0, 1, 2, 2, 2], np.int32)
    weight = np.array([1.0, 0.5, 1.0, 0.25, 0.5, 0.5])
    dense = np.array(
        [
            [1.0, 0.0, 0.5, 0.0],
            [0.5, 0.0, 0.75, 0.0],
            [0.0, 1.0, 0.0, 0.0],
        ]
    )
    return link_idx, flow_idx, weight, dense


def test_incidence_from_coo_to_dense_and_scipy():
    link_idx, flow_idx, weight, dense = _coo_example()
    inc = Incidence.from_coo(link_idx, flow_idx, weight.astype(np.float32), n_links=3, n_flows=4)
    assert (inc.n_links, inc.n_flows) == (3, 4)
    assert inc.link_idx.dtype == jnp.int32 and inc.flow_idx.dtype == jnp.int32
    # one entry per COO entry, possibly plus inactive (weight 0) layout padding
    assert inc.link_idx.shape == inc.flow_idx.shape == inc.weight.shape
    assert inc.weight.ndim == 1 and inc.weight.shape[0] >= 6
    np.testing.assert_allclose(np.asarray(inc.to_dense()), dense)
    sp = inc.to_scipy()
    assert sp.shape == (3, 4)
    np.testing.assert_allclose(sp.toarray(), dense)


def test_incidence_weight_defaults_to_one():
    inc = Incidence.from_coo(np.array([0, 1]), np.array([1, 0]), n_links=2, n_flows=2)
    np.testing.assert_array_equal(np.asarray(inc.to_dense()), [[0.0, 1.0], [1.0, 0.0]])


def test_incidence_from_dense_round_trip():
    dense = np.array([[1.0, 0.0, 0.5], [0.25, 1.0, 0.0]], np.float32)
    inc = Incidence.from_dense(dense)
    assert (inc.n_links, inc.n_flows) == (2, 3)
    assert np.count_nonzero(np.asarray(inc.weight)) == 4  # the matrix's non-zeros, + padding
    np.testing.assert_array_equal(np.asarray(inc.to_dense()), dense)
    np.testing.assert_array_equal(inc.to_scipy().toarray(), dense)
    # and back through COO (dropping inactive weight-0 layout padding, if any)
    keep = np.asarray(inc.weight) != 0
    again = Incidence.from_coo(
        np.asarray(inc.link_idx)[keep], np.asarray(inc.flow_idx)[keep], np.asarray(inc.weight)[keep],
        n_links=2, n_flows=3,
    )
    np.testing.assert_array_equal(np.asarray(again.to_dense()), dense)


def test_incidence_is_a_pytree():
    link_idx, flow_idx, weight, dense = _coo_example()
    inc = Incidence.from_coo(link_idx, flow_idx, weight.astype(np.float32), n_links=3, n_flows=4)
    leaves, treedef = jax.tree_util.tree_flatten(inc)
    assert len(leaves) == 3  # link_idx, flow_idx, weight; n_links/n_flows are static
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(rebuilt, Incidence)
    assert (rebuilt.n_links, rebuilt.n_flows) == (3, 4)
    np.testing.assert_allclose(np.asarray(rebuilt.to_dense()), dense)
    doubled = jax.tree_util.tree_map(lambda x: x, inc)
    np.testing.assert_allclose(np.asarray(doubled.to_dense()), dense)
    # static fields live in the treedef: different sizes give different treedefs
    other = Incidence.from_coo(link_idx, flow_idx, weight.astype(np.float32), n_links=4, n_flows=4)
    assert jax.tree_util.tree_structure(other) != treedef


def test_incidence_as_jit_argument_without_retrace():
    traces = []

    @jax.jit
    def rates(inc, capacity):
        traces.append(1)
        return max_min_fair(inc, capacity).rates

    cap = jnp.full(3, C, jnp.float32)
    # Same shapes, different weights: one trace, two different answers.
    # Instance a: flows 0, 1 on link 0 (1 each), flow 1 also on link 1 (0.5): C/2 each.
    a = Incidence.from_coo(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([1.0, 1.0, 0.5], np.float32),
                           n_links=3, n_flows=2)
    # Instance b: flow 0 crosses link 0 with weight 0.5 and flow 1 with weight 1; link 2
    # carries 0.5 of flow 1. Link 0: 0.5r + r = C -> r = 2C/3 for both.
    b = Incidence.from_coo(np.array([0, 0, 2]), np.array([0, 1, 1]), np.array([0.5, 1.0, 0.5], np.float32),
                           n_links=3, n_flows=2)
    np.testing.assert_allclose(np.asarray(rates(a, cap)), [C / 2, C / 2], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(rates(b, cap)), [2 * C / 3, 2 * C / 3], rtol=1e-6)
    assert len(traces) == 1


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "link_idx, flow_idx, weight, match",
    [
        ([0, 2], [0, 1], [1.0, 1.0], "link_idx"),  # link 2 of 2
        ([0, -1], [0, 1], [1.0, 1.0], "link_idx"),
        ([0, 1], [0, 3], [1.0, 1.0], "flow_idx"),  # flow 3 of 2
        ([0, 1], [-1, 1], [1.0, 1.0], "flow_idx"),
        ([0, 1], [0, 1], [0.0, 1.0], "weight"),
        ([0, 1], [0, 1], [1.5, 1.0], "weight"),
        ([0, 1], [0, 1], [-0.5, 1.0], "weight"),
        ([0, 1], [0, 1], [np.nan, 1.0], "weight"),
    ],
)
def test_from_coo_rejects_bad_entries(link_idx, flow_idx, weight, match):
    with pytest.raises(ValueError, match=match):
        Incidence.from_coo(
            np.array(link_idx), np.array(flow_idx), np.array(weight, np.float32), n_links=2, n_flows=2
        )


def test_from_dense_rejects_negative_entries():
    with pytest.raises(ValueError, match="matrix|weight"):
        Incidence.from_dense(np.array([[1.0, -0.5]], np.float32))


def _bad_call_cases():
    cap = np.full(2, C, np.float32)
    dem = np.full(3, C, np.float32)
    return [
        ("capacity", np.full(3, C, np.float32), None),  # 3 links given for 2
        ("capacity", np.full((2, 1), C, np.float32), None),
        ("capacity", np.array([C, -1.0], np.float32), None),
        ("capacity", np.array([C, np.nan], np.float32), None),
        ("demand", cap, np.full(2, C, np.float32)),  # 2 flows given for 3
        ("demand", cap, np.array([C, -1.0, C], np.float32)),
        ("demand", cap, np.array([C, np.nan, C], np.float32)),
        (None, cap, dem),  # control: valid call must not raise
    ]


@pytest.mark.parametrize("as_dense", [False, True], ids=["incidence", "dense"])
@pytest.mark.parametrize("name, capacity, demand", _bad_call_cases())
def test_max_min_fair_rejects_bad_input(as_dense, name, capacity, demand):
    inst = helpers.from_routes([[0], [0, 1], [1]], [C, C])
    incidence = jnp.asarray(inst.dense, jnp.float32) if as_dense else incidence_of(inst, np.float32)
    if name is None:
        # Hand check of the control: link 0 and 1 each carry two flows: all C/2.
        rates = max_min_fair(incidence, jnp.asarray(capacity), jnp.asarray(demand)).rates
        np.testing.assert_allclose(np.asarray(rates), [C / 2] * 3, rtol=1e-6)
        return
    with pytest.raises(ValueError, match=name):
        max_min_fair(incidence, jnp.asarray(capacity), None if demand is None else jnp.asarray(demand))


# ---------------------------------------------------------------------------------------
# Transformations
# ---------------------------------------------------------------------------------------


def _three_flow_instance():
    # Two links: link 0 capacity C with flows 0 (weight 1) and 1 (weight 1); link 1
    # capacity 3C with flow 1 (weight 0.5) and flow 2 (weight 1).
    # Level 1: link 0 fills at 2r = C (link 1 would need 1.5r = 3C) -> r0 = r1 = C/2.
    # Level 2: link 1: 0.5 * C/2 + r2 = 3C -> r2 = 11C/4.
    # Away from ties, so rates are locally linear in capacity:
    #   d r / d c0 = (1/2, 1/2, -1/4)   (r2 = c1 - c0/4)
    #   d r / d c1 = (0, 0, 1)
    return helpers.from_routes([[0], [0, (1, 0.5)], [1]], [C, 3 * C])


def test_three_flow_instance_values(rates_of):
    np.testing.assert_allclose(rates_of(_three_flow_instance()), [C / 2, C / 2, 11 * C / 4], rtol=1e-9)


def test_jit_equals_eager():
    inst = _three_flow_instance().replace(demand=np.array([np.inf, C, C]))
    inc = incidence_of(inst, np.float32)
    cap = jnp.asarray(inst.capacity, jnp.float32)
    dem = jnp.asarray(inst.demand, jnp.float32)
    eager = max_min_fair(inc, cap, dem)
    jitted = jax.jit(lambda c, d: max_min_fair(inc, c, d))(cap, dem)
    for field in ("rates", "link_load", "saturated"):
        np.testing.assert_allclose(
            np.asarray(getattr(jitted, field), np.float64), np.asarray(getattr(eager, field), np.float64), rtol=1e-6
        )
    # demand C caps flow 2 at C; flows 0, 1 still C/2 (link 0).
    np.testing.assert_allclose(np.asarray(jitted.rates), [C / 2, C / 2, C], rtol=1e-6)


@pytest.mark.parametrize("with_demand", [False, True])
def test_vmap_over_capacity_and_demand_equals_loop(with_demand):
    rng = np.random.default_rng(0)
    inst = helpers.parking_lot(4, C)
    inc = incidence_of(inst, np.float32)
    batch = 6
    caps = jnp.asarray(inst.capacity * rng.uniform(0.2, 3.0, size=(batch, inst.n_links)), jnp.float32)
    dems = jnp.asarray(rng.uniform(0.05, 2.0, size=(batch, inst.n_flows)) * C, jnp.float32)
    dems = dems if with_demand else None

    def rates(c, d):
        return max_min_fair(inc, c, d).rates

    batched = jax.vmap(rates, in_axes=(0, 0 if with_demand else None))(caps, dems)
    assert batched.shape == (batch, inst.n_flows)
    for b in range(batch):
        single = rates(caps[b], None if dems is None else dems[b])
        np.testing.assert_allclose(np.asarray(batched[b]), np.asarray(single), rtol=1e-5)
    # the batch must actually differ between rows (the test would be vacuous otherwise)
    assert not np.allclose(np.asarray(batched[0]), np.asarray(batched[1]))


def test_jvp_matches_closed_form_and_central_differences_x64():
    inst = _three_flow_instance()
    expected = {0: np.array([0.5, 0.5, -0.25]), 1: np.array([0.0, 0.0, 1.0])}  # see instance
    with enable_x64():
        inc = incidence_of(inst, np.float64)
        cap = jnp.asarray(inst.capacity, jnp.float64)

        def rates(c):
            return max_min_fair(inc, c).rates

        h = 1e-4 * C  # far smaller than the gap to the next tie (link 1 binds at c0 = 4C)
        for link, slope in expected.items():
            tangent = jnp.zeros(2, jnp.float64).at[link].set(1.0)
            primal, deriv = jax.jvp(rates, (cap,), (tangent,))
            central = (np.asarray(rates(cap + h * tangent)) - np.asarray(rates(cap - h * tangent))) / (2 * h)
            assert np.all(np.isfinite(np.asarray(deriv)))
            np.testing.assert_allclose(np.asarray(primal), [C / 2, C / 2, 11 * C / 4], rtol=1e-9)
            np.testing.assert_allclose(np.asarray(deriv), central, rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(np.asarray(deriv), slope, rtol=1e-9, atol=1e-12)


def test_jvp_finite_in_float32_with_zero_capacity_and_idle_flows():
    # Zero-capacity link, a flow on no link (finite demand) and an unused link: the
    # tangent must still be finite everywhere (no NaN from 0/0 in masked branches).
    inst = helpers.from_routes([[0, 1], [1], [], [1, (2, 0.5)]], [0.0, C, 2 * C, 5 * C], demand=[C, C, C, np.inf])
    inc = incidence_of(inst, np.float32)
    cap = jnp.asarray(inst.capacity, jnp.float32)
    dem = jnp.asarray(inst.demand, jnp.float32)
    # Tangent: +1 on every link but the zero-capacity one (at c0 = 0 the rates have a
    # one-sided kink: r0 = c0 for small c0 >= 0).
    tangent = jnp.asarray([0.0, 1.0, 1.0, 1.0], jnp.float32)
    primal, deriv = jax.jvp(lambda c: max_min_fair(inc, c, dem).rates, (cap,), (tangent,))
    # rates: flow 0 on the zero link -> 0; flows 1, 3 share link 1 (C) -> C/2 each
    # (link 2 carries only C/4 of 2C); flow 2 on no link -> its demand C.
    np.testing.assert_allclose(np.asarray(primal), [0.0, C / 2, C, C / 2], rtol=1e-6, atol=1e-6 * C)
    assert np.all(np.isfinite(np.asarray(deriv)))
    # Flow 0 stays at 0 (its zero link is unchanged); flows 1, 3 split link 1's extra
    # capacity: 1/2 each; flow 2 is fixed at its demand.
    np.testing.assert_allclose(np.asarray(deriv), [0.0, 0.5, 0.0, 0.5], atol=1e-5)


def test_batched_capacity_argument_equals_loop():
    # A leading batch axis on capacity is accepted directly and matches per-row solves.
    inst = _three_flow_instance()
    inc = incidence_of(inst, np.float32)
    caps = jnp.asarray(inst.capacity[None, :] * np.array([[1.0], [2.0], [0.5]]) * [[1.0, 0.1]], jnp.float32)
    batched = max_min_fair(inc, caps).rates
    assert batched.shape == (3, 3)
    for b in range(3):
        np.testing.assert_allclose(np.asarray(batched[b]), np.asarray(max_min_fair(inc, caps[b]).rates), rtol=1e-6)


def test_max_iter_too_small_is_reported_as_not_converged():
    # Two-level parking lot (see test_parking_lot_two_levels): the flows of links 1..3 can
    # only be settled after link 0's flows are frozen, so one iteration cannot finish.
    inst = helpers.parking_lot(4, [C, 2 * C, 2 * C, 2 * C])
    one = solve_x64(inst, max_iter=1)
    assert int(one.info.iterations) == 1
    assert not bool(one.info.converged)
    full = solve_x64(inst)
    assert bool(full.info.converged) and int(full.info.iterations) >= 2
    np.testing.assert_allclose(full.rates, [C / 2, C / 2, 1.5 * C, 1.5 * C, 1.5 * C], rtol=1e-9)


def test_fixed_iterations_is_exact_and_reverse_differentiable_x64():
    # ``iterations=N`` (fixed trip count) gives the same allocation once N covers the
    # bottleneck depth, and supports reverse mode. Closed form for _three_flow_instance:
    # d(r0 + r1 + r2)/dc0 = 1/2 + 1/2 - 1/4 = 3/4,  d(r0 + r1 + r2)/dc1 = 1.
    inst = _three_flow_instance()
    with enable_x64():
        inc = incidence_of(inst, np.float64)
        cap = jnp.asarray(inst.capacity, jnp.float64)
        result = max_min_fair(inc, cap, iterations=inst.n_flows + 1)
        np.testing.assert_allclose(np.asarray(result.rates), [C / 2, C / 2, 11 * C / 4], rtol=1e-9)
        assert bool(result.info.converged)

        @jax.jit
        def total(c):
            return jnp.sum(max_min_fair(inc, c, iterations=inst.n_flows + 1).rates)

        np.testing.assert_allclose(np.asarray(jax.grad(total)(cap)), [0.75, 1.0], rtol=1e-9)


@pytest.mark.slow
def test_fixed_iterations_check_grads_x64():
    inst = _three_flow_instance()
    with enable_x64():
        inc = incidence_of(inst, np.float64)
        cap = jnp.asarray(inst.capacity, jnp.float64)

        @jax.jit
        def total(c):
            return jnp.sum(max_min_fair(inc, c, iterations=inst.n_flows + 1).rates)

        # eps is absolute: a step of 1e-4 C stays within the linear piece (next tie at c0 = 4C)
        jax.test_util.check_grads(total, (cap,), order=1, modes=("fwd", "rev"), eps=1e-4 * C)


def test_no_retrace_for_same_shapes():
    traces = []
    inst = helpers.parking_lot(3, C)
    inc = incidence_of(inst, np.float32)

    @jax.jit
    def rates(capacity, demand):
        traces.append(1)  # runs only while tracing
        return max_min_fair(inc, capacity, demand).rates

    for k in range(4):
        cap = jnp.full(inst.n_links, (1.0 + k) * C, jnp.float32)
        dem = jnp.full(inst.n_flows, (2.0 + k) * C, jnp.float32)
        out = rates(cap, dem)
        # each link has two flows: (1 + k) C / 2 each, below the demand (2 + k) C
        np.testing.assert_allclose(np.asarray(out), np.full(4, (1.0 + k) * C / 2), rtol=1e-6)
    assert len(traces) == 1


# --------------------------------------------------------------------------------------
# Warm-started solves (fabric_jax.fairness.solve_warm; proof in the module docstring of
# fabric_jax.sim._events): after removing flows C, every flow below
# theta_C = min_{c in C} r_c keeps its rate; after adding flows A, every old flow below a
# proven lower bound on the new flows' rates keeps its rate.  Freezing those and solving the rest must give the
# from-scratch allocation (NumPy progressive filling) to round-off.
# --------------------------------------------------------------------------------------
WARM_RTOL = 1e-9  # the engine's x64 keep margin (fabric_jax.sim.WARM_START_RTOL)


def _warm_case(rng, kind, n_links=8, n_flows=24):
    """Dense ``[links, flows]`` problem: random routes of 1-4 links, split weights,
    and, by ``kind``, integer capacities (ties), zero-capacity links, or demands."""
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        links = rng.choice(n_links, size=rng.integers(1, 5), replace=False)
        A[links, f] = np.where(rng.random(links.size) < 0.2, 0.5, 1.0)
    if kind == "ties":
        cap = rng.choice([4.0, 8.0, 12.0], n_links)
    else:
        cap = rng.uniform(1.0, 10.0, n_links)
    if kind == "zero_capacity":
        cap[rng.choice(n_links, size=2, replace=False)] = 0.0
    demand = np.full(n_flows, np.inf)
    if kind == "demands":
        pick = rng.random(n_flows) < 0.4
        demand[pick] = rng.uniform(0.05, 2.0, pick.sum())
    return A, cap, demand


def _solve_warm_x64(A, cap, demand, rate, frozen):
    from fabric_jax.fairness import solve_warm
    with enable_x64():
        inc = Incidence.from_dense(A)
        res = solve_warm(inc, jnp.asarray(cap), jnp.asarray(demand), jnp.asarray(rate),
                         jnp.asarray(frozen))
        return np.asarray(res.rates), bool(res.info.converged)


@pytest.mark.parametrize("kind", ["random", "ties", "zero_capacity", "demands"])
@pytest.mark.parametrize("seed", slow_except([0, 1], keep=[0]))
def test_warm_start_after_removal_equals_scratch_x64(kind, seed):
    rng = np.random.default_rng(seed)
    A, cap, demand = _warm_case(rng, kind)
    before = progressive_filling(A, cap, demand)[0]
    gone = rng.random(A.shape[1]) < 0.2
    gone[rng.integers(A.shape[1])] = True
    theta = before[gone].min()
    A2, d2, r2 = A[:, ~gone], demand[~gone], before[~gone]
    frozen = r2 < theta * (1 - WARM_RTOL)
    expected = progressive_filling(A2, cap, d2)[0]
    # The lemma itself, on the oracle: the frozen flows' rates did not change.
    np.testing.assert_allclose(expected[frozen], r2[frozen], rtol=1e-12, atol=1e-12)
    got, converged = _solve_warm_x64(A2, cap, d2, r2, frozen)
    assert converged
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * cap.max())


@pytest.mark.parametrize("kind", ["random", "ties", "zero_capacity", "demands"])
@pytest.mark.parametrize("seed", slow_except([0, 1], keep=[1]))
def test_warm_start_after_arrival_equals_scratch_x64(kind, seed):
    rng = np.random.default_rng(100 + seed)
    A, cap, demand = _warm_case(rng, kind)
    new = np.zeros(A.shape[1], bool)
    new[rng.choice(A.shape[1], size=3, replace=False)] = True
    before = progressive_filling(A[:, ~new], cap, demand[~new])[0]
    total = A.sum(axis=1)                        # W_l over the flows after the arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, cap / total, np.inf)
    bound = np.min(np.where(A[:, new] > 0, share[:, None], np.inf), axis=0)
    lam = np.minimum(bound, demand[new]).min()
    rate = np.zeros(A.shape[1])
    rate[~new] = before
    frozen = ~new & (rate < lam * (1 - WARM_RTOL))
    expected = progressive_filling(A, cap, demand)[0]
    assert np.all(expected[new] >= lam * (1 - 1e-12))     # the bound is a lower bound
    np.testing.assert_allclose(expected[frozen], rate[frozen], rtol=1e-12, atol=1e-12)
    got, _ = _solve_warm_x64(A, cap, demand, rate, frozen)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * cap.max())


def test_warm_start_nothing_frozen_and_all_frozen_x64():
    rng = np.random.default_rng(9)
    A, cap, demand = _warm_case(rng, "random")
    expected = progressive_filling(A, cap, demand)[0]
    n = A.shape[1]
    got, _ = _solve_warm_x64(A, cap, demand, np.zeros(n), np.zeros(n, bool))
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    got, _ = _solve_warm_x64(A, cap, demand, expected, np.ones(n, bool))
    np.testing.assert_array_equal(got, expected)


def test_solve_warm_rejects_coo_layout():
    from fabric_jax.fairness import solve_warm
    inc = Incidence(jnp.array([0, 0]), jnp.array([0, 1]), jnp.ones(2), 1, 2, None)
    with pytest.raises(ValueError, match="row_width"):
        solve_warm(inc, jnp.ones(1), jnp.full(2, jnp.inf), jnp.zeros(2), jnp.zeros(2, bool))
