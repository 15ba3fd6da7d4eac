"""Tests for the NIC-share kernels: ``fabric_jax.fairness.water_fill`` (max-min when every
flow crosses at most one link: a water-fill per link), ``fabric_jax.fairness.solve_flat`` (the
bottleneck-freezing loop without compaction) and their use in ``fabric_jax.fluid.stages.transmit.nic_send``.

Oracle: textbook progressive filling (``tests/reference/maxmin_numpy.py``, float64) on
the same problem written as a ``[links, flows]`` matrix; hand cases with the
derivation in a comment; invariants (feasibility, bottleneck certificate);
transformations (jit, vmap, reverse-mode gradients against central differences).

Units: bytes/s everywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_jax import Incidence
from fabric_jax.fluid.stages.transmit import nic_send
from fabric_jax.fairness import solve, solve_flat, water_fill
from tests import helpers
from tests.helpers import LINK_100G, enable_x64
from tests.reference.maxmin_numpy import bottleneck_certificate, progressive_filling

C = LINK_100G
RTOL_X64 = 1e-9
RTOL_F32 = 1e-5
MAX_LINKS, MAX_FLOWS = 4, 10


@st.composite
def one_link_instances(draw):
    """Flows on at most one link each: ``(link [flows], weight [flows], capacity,
    demand)``; link ``-1`` or weight 0 means no link.  Capacities include 0 and round
    values (ties), demands include 0, ``inf`` and values equal to each other."""
    n_links = draw(st.integers(1, MAX_LINKS))
    n_flows = draw(st.integers(1, MAX_FLOWS))
    link = np.asarray(draw(st.lists(st.integers(-1, n_links - 1), min_size=n_flows,
                                    max_size=n_flows)), np.int32)
    weight = np.asarray(draw(st.lists(st.sampled_from([1.0, 0.5, 0.25, 0.3, 0.0]),
                                      min_size=n_flows, max_size=n_flows)))
    value = st.one_of(st.floats(0.05, 4.0), st.sampled_from([0.5, 1.0, 2.0]))
    capacity = np.asarray(draw(st.lists(st.one_of(value, st.just(0.0)), min_size=n_links,
                                        max_size=n_links))) * C
    demand = np.asarray(draw(st.lists(st.one_of(value, st.just(0.0), st.just(np.inf)),
                                      min_size=n_flows, max_size=n_flows))) * C
    return link, weight, capacity, demand


def as_matrix(link, weight, n_links):
    """The ``[links, flows]`` matrix of a one-link-per-flow problem."""
    A = np.zeros((n_links, link.size))
    on = (link >= 0) & (weight > 0)
    A[link[on], np.flatnonzero(on)] = weight[on]
    return A


_water_fill = jax.jit(water_fill)


def padded_water_fill(link, weight, capacity, demand, dtype):
    """:func:`water_fill` on the instance padded to ``MAX_LINKS`` links and ``MAX_FLOWS``
    flows (extra flows on no link, extra links unused): one compilation for every
    example.  Returns the instance's own flows' rates."""
    n = link.size
    pad = MAX_FLOWS - n
    out = _water_fill(jnp.asarray(np.concatenate([link, np.full(pad, -1)]), jnp.int32),
                      jnp.asarray(np.concatenate([weight, np.zeros(pad)]), dtype),
                      jnp.asarray(np.concatenate([capacity,
                                                  np.zeros(MAX_LINKS - capacity.size)]), dtype),
                      jnp.asarray(np.concatenate([demand, np.zeros(pad)]), dtype))
    return np.asarray(out, float)[:n]


def scale_of(capacity, demand):
    return max(np.max(capacity, initial=0.0), np.max(demand[np.isfinite(demand)], initial=0.0),
               1.0)


@settings(max_examples=80, deadline=None)
@given(inst=one_link_instances())
def test_water_fill_matches_progressive_filling_x64(inst):
    link, weight, capacity, demand = inst
    expected = progressive_filling(as_matrix(link, weight, capacity.size), capacity, demand)[0]
    with enable_x64():
        got = padded_water_fill(link, weight, capacity, demand, jnp.float64)
    np.testing.assert_allclose(got, expected, rtol=RTOL_X64,
                               atol=RTOL_X64 * scale_of(capacity, demand))


@settings(max_examples=40, deadline=None)
@given(inst=one_link_instances())
def test_water_fill_float32_is_feasible_and_certified(inst):
    link, weight, capacity, demand = inst
    cap32 = capacity.astype(np.float32).astype(float)
    dem32 = demand.astype(np.float32).astype(float)
    got = padded_water_fill(link, weight, cap32, dem32, jnp.float32)
    A = as_matrix(link, weight, capacity.size)
    scale = scale_of(cap32, dem32)
    assert np.all(A @ np.where(np.isfinite(got), got, 0.0) <= cap32 + RTOL_F32 * scale)
    assert np.all(got <= dem32 * (1 + RTOL_F32))
    assert bottleneck_certificate(A, cap32, dem32, got, RTOL_F32).all()
    expected = progressive_filling(A, cap32, dem32)[0]
    np.testing.assert_allclose(got, expected, rtol=RTOL_F32, atol=RTOL_F32 * scale)


def test_water_fill_hand_cases():
    # One link of 10 C, four flows of weight 1 wanting 1, 2, 10, 10 C: filling to 2 C
    # costs 1 + 2 + 2 + 2 = 7 <= 10, so the first two get their demand and the last two
    # share the remaining 7 C: 3.5 C each.
    r = np.asarray(water_fill([0, 0, 0, 0], [1.0] * 4, jnp.asarray([10 * C]),
                              jnp.asarray([1.0, 2.0, 10.0, 10.0]) * C)) / C
    np.testing.assert_allclose(r, [1, 2, 3.5, 3.5], rtol=1e-6)
    # Same link, weights 0.5 (each flow loads half its rate): filling to 10 C would load
    # 0.5 (1 + 2 + 10 + 10) = 11.5 C > 10 C, so the first two get their demand and the
    # others the level lam with 0.5 (1 + 2) + 2 x 0.5 lam = 10, lam = 8.5 C.
    r = np.asarray(water_fill([0, 0, 0, 0], [0.5] * 4, jnp.asarray([10 * C]),
                              jnp.asarray([1.0, 2.0, 10.0, 10.0]) * C)) / C
    np.testing.assert_allclose(r, [1, 2, 8.5, 8.5], rtol=1e-6)
    # Two links decouple; a flow on no link (-1) and one of weight 0 get their demand;
    # a zero-capacity link gives 0; the whole demand fits on link 1 (1 + 1 <= 5).
    r = np.asarray(water_fill([0, 0, 1, 1, -1, 0, 2], [1, 1, 1, 1, 1, 0, 1],
                              jnp.asarray([2.0, 5.0, 0.0]) * C,
                              jnp.asarray([np.inf, 4, 1, 1, 3, 7, 1]) * C)) / C
    np.testing.assert_allclose(r, [1, 1, 1, 1, 3, 7, 0], rtol=1e-6)


def test_water_fill_jit_vmap_and_no_flows():
    link = jnp.asarray([0, 1, 1, 0, 2], jnp.int32)
    w = jnp.asarray([1.0, 0.5, 1.0, 1.0, 1.0])
    d = jnp.asarray([1.0, 3.0, 3.0, 0.2, 9.0]) * C
    caps = jnp.asarray([[1.0, 2.0, 4.0], [0.5, 3.0, 0.0], [2.0, 2.0, 2.0]]) * C
    eager = [np.asarray(water_fill(link, w, c, d)) for c in caps]
    jitted = jax.jit(water_fill)
    np.testing.assert_array_equal(np.asarray(jitted(link, w, caps[0], d)), eager[0])
    batched = np.asarray(jax.vmap(water_fill, in_axes=(None, None, 0, None))(link, w, caps, d))
    np.testing.assert_allclose(batched, np.stack(eager), rtol=1e-6)
    assert water_fill(jnp.zeros(0, jnp.int32), jnp.zeros(0), caps[0], jnp.zeros(0)).shape == (0,)


def test_water_fill_rounds_grow_the_limited_set():
    # Demands 1, 2, 3, 10 C on one link of 10 C: level 2.5 (round 1: flows 0, 1 join),
    # then (10 - 3) / 2 = 3.5 (round 2: flow 2 joins), then 10 - 6 = 4 (round 3: no
    # flow joins).  One fixed round stops short: flow 3 gets the level 3.5 of round 2
    # (feasible, not max-min); two rounds are exact; the while loop stops by itself.
    d = jnp.asarray([1.0, 2.0, 3.0, 10.0]) * C
    args = (jnp.zeros(4, jnp.int32), jnp.ones(4), jnp.asarray([10 * C]), d)
    np.testing.assert_allclose(np.asarray(water_fill(*args)) / C, [1, 2, 3, 4], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(water_fill(*args, iterations=2)) / C, [1, 2, 3, 4],
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(water_fill(*args, iterations=1)) / C,
                               [1, 2, 3, 3.5], rtol=1e-6)


def test_water_fill_reverse_mode_gradients_x64():
    # Away from ties the allocation is linear in capacity and demand: reverse mode
    # (a fixed number of rounds) must match central differences.
    with enable_x64():
        link = jnp.asarray([0, 0, 0, 1, 1], jnp.int32)
        w = jnp.asarray([1.0, 1.0, 0.5, 1.0, 1.0])
        cap = jnp.asarray([3.0, 1.0])
        dem = jnp.asarray([0.4, 5.0, 5.0, 0.3, 2.0])

        def f(c, d):
            return jnp.sum(water_fill(link, w, c, d, iterations=3) * jnp.arange(1.0, 6.0))
        jax.test_util.check_grads(f, (cap, dem), order=1, modes=("rev",), eps=1e-4)
        g_cap = jax.grad(f)(cap, dem)
        # link 0: flow 0 at demand, flows 1 and 2 at lam = (3 - 0.4) / 1.5:
        # d(2 lam + 3 lam)/dc0 = 5 / 1.5; link 1: flow 3 at demand, flow 4 at c1 - 0.3.
        np.testing.assert_allclose(np.asarray(g_cap), [5 / 1.5, 5.0], rtol=1e-9)


# general instances (several links per flow), padded to one shape: one compilation
GENERAL = helpers.instances(max_links=5, max_flows=8, max_hops=3, with_demand=True).map(
    lambda inst: helpers.pad(inst, n_links=5, nnz=8 * 3 + 2, flow_buckets=(8,)))
_solve_flat = jax.jit(solve_flat)


@settings(max_examples=40, deadline=None)
@given(inst=GENERAL)
def test_solve_flat_matches_progressive_filling_x64(inst):
    expected = progressive_filling(inst.dense, inst.capacity, inst.demand)[0]
    with enable_x64():
        inc = Incidence(jnp.asarray(inst.link_idx), jnp.asarray(inst.flow_idx),
                        jnp.asarray(inst.weight), inst.n_links, inst.n_flows)
        got = np.asarray(_solve_flat(inc, jnp.asarray(inst.capacity),
                                     jnp.asarray(inst.demand)))
    scale = scale_of(inst.capacity, inst.demand)
    np.testing.assert_allclose(got, expected, rtol=RTOL_X64, atol=RTOL_X64 * scale)


class _Static:
    """The fields of ``fabric_jax.fluid.problem.Static`` that ``nic_send`` reads."""
    solver_iterations = None
    solver_unroll = 0


def _nic_problem(several_ports: bool):
    """First-hop entries of 6 flows with 2 paths each over 4 links; links 0-2 are NIC
    ports (switch 0), link 3 a switch port.  With ``several_ports`` flow 5's two
    paths leave through NIC ports 1 and 2 (a two-plane NIC), else both through 2."""
    link = np.array([[0, 0], [0, 0], [1, 1], [1, 1], [3, 3], [2, 1 if several_ports else 2]])
    weight = np.array([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5], [0.25, 0.75], [0.5, 0.5],
                       [0.5, 0.5]])
    flow = np.repeat(np.arange(6), 2)
    switch = np.array([0.0, 0.0, 0.0, 1.0])
    cap = np.array([1.0, 2.0, 0.7, 1.0]) * C
    offered = np.array([0.3, 2.0, 1.5, 1.5, 4.0, 1.0]) * C
    return link.ravel(), flow, weight.ravel(), switch, cap, offered


@pytest.mark.parametrize("several_ports", [False, True])
def test_nic_send_equals_max_min_over_the_nic_ports(several_ports):
    li, fi, w, switch, cap, offered = _nic_problem(several_ports)
    inc = Incidence(jnp.asarray(li, jnp.int32), jnp.asarray(fi, jnp.int32),
                    jnp.asarray(w, jnp.float32), 4, 6)
    got, rounds = jax.jit(nic_send, static_argnums=0)(
        _Static(), jnp.asarray(switch, jnp.float32), inc, jnp.asarray(cap, jnp.float32),
        jnp.asarray(offered, jnp.float32))
    got = np.asarray(got, float)
    assert int(rounds) >= 1   # the rounds the water-fill ran (FluidInfo.solver_iterations)
    A = np.zeros((4, 6))
    np.add.at(A, (li, fi), np.where(switch[li] == 0, w, 0.0))
    expected = np.minimum(progressive_filling(A, cap, offered)[0], offered)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * C)
    # flow 4 starts at a switch port: it sends its whole offer
    assert got[4] == pytest.approx(offered[4], rel=1e-6)
    # and the general solver of the previous implementation agrees
    nic = Incidence(inc.link_idx, inc.flow_idx, jnp.where(jnp.asarray(switch)[inc.link_idx] == 0,
                                                          inc.weight, 0.0), 4, 6)
    ref = np.asarray(jnp.minimum(solve(nic, jnp.asarray(cap, jnp.float32),
                                       jnp.asarray(offered, jnp.float32)).rates,
                                 jnp.asarray(offered, jnp.float32)), float)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * C)
