"""Tests of the flow-level simulator ``fabric_jax.simulate_flows`` and its variants.

Closed-form cases run against both the JAX simulator and the NumPy oracle
(``tests/reference/flowsim_numpy.py``), so a wrong hand derivation shows up as an oracle
failure too. Randomised instances check JAX == oracle to 1e-6 relative in x64.

Units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import slow_except

from tests.reference.flowsim_numpy import max_min_rates, simulate_flows_reference

RTOL = 1e-6  # x64 agreement with closed forms and the oracle
ATOL = 1e-12  # seconds; absolute slack for times that are exactly 0

# The `x64` fixture (tests/conftest.py) enables float64 for one test and restores it.


def _fj():
    import fabric_jax

    return fabric_jax


def _as_dict(result):
    return {
        "start": np.asarray(result.start, dtype=np.float64),
        "finish": np.asarray(result.finish, dtype=np.float64),
        "fct": np.asarray(result.fct, dtype=np.float64),
        "n_events": int(np.asarray(result.n_events)),
        "stalled": bool(np.asarray(result.stalled)),
    }


def _jax_simulate(A, capacity, arrival, size, **kwargs):
    return _as_dict(_fj().simulate_flows(np.asarray(A, dtype=np.float64),
                                         np.asarray(capacity, dtype=np.float64),
                                         np.asarray(arrival, dtype=np.float64),
                                         np.asarray(size, dtype=np.float64), **kwargs))


def _oracle_simulate(A, capacity, arrival, size, **kwargs):
    out = simulate_flows_reference(A, capacity, arrival, size, **kwargs)
    out["stalled"] = bool(np.isinf(out["finish"]).any())
    return out


@pytest.fixture(params=["jax", "oracle"])
def simulate(request, x64):
    """Both simulators with one calling convention: dict of start/finish/fct/n_events."""
    return _jax_simulate if request.param == "jax" else _oracle_simulate


def _star_links(n_hosts):
    """Single non-blocking switch: link i = uplink of host i, link n + i = downlink."""
    return n_hosts * 2


def _star_flow_column(n_hosts, src, dst):
    col = np.zeros(_star_links(n_hosts))
    col[src] = 1.0
    col[n_hosts + dst] = 1.0
    return col


# --------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------


def test_single_flow_on_empty_path(simulate):
    # One flow over a 3-hop path with capacities 40, 10, 25 B/s; the bottleneck is
    # 10 B/s, so it transfers 50 B in 5 s; arrival 2 s, latency 0.5 s:
    # finish = 2 + 5 + 0.5 = 7.5, fct = 5.5.
    A = np.ones((3, 1))
    out = simulate(A, [40.0, 10.0, 25.0], [2.0], [50.0], latency=[0.5])
    np.testing.assert_allclose(out["start"], [2.0], rtol=RTOL)
    np.testing.assert_allclose(out["finish"], [7.5], rtol=RTOL)
    np.testing.assert_allclose(out["fct"], [5.5], rtol=RTOL)


def test_two_flows_share_a_link_one_arrives_later(simulate):
    # Link 100 B/s. Flow 0: 1000 B at t=0; flow 1: 500 B at t=4.
    # [0, 4): flow 0 alone at 100 B/s sends 400 B, 600 B left.
    # [4, 14): both at 50 B/s; flow 1 needs 500/50 = 10 s -> finishes at 14,
    #          flow 0 sends 500 B, 100 B left.
    # [14, 15): flow 0 alone at 100 B/s -> finishes at 15 (= 1500 B / 100 B/s).
    A = np.ones((1, 2))
    out = simulate(A, [100.0], [0.0, 4.0], [1000.0, 500.0])
    np.testing.assert_allclose(out["finish"], [15.0, 14.0], rtol=RTOL)
    np.testing.assert_allclose(out["fct"], [15.0, 10.0], rtol=RTOL)


@pytest.mark.parametrize("n_senders", [5])
def test_incast_equal_sizes(simulate, n_senders):
    # N senders, each on its own 2C uplink, all into one receiver downlink of C.
    # The downlink is the only bottleneck; max-min gives each C/N for the whole
    # transfer, so all N finish together at N*S/C.
    C, S = 1e9, 3e6
    A = np.zeros((n_senders + 1, n_senders))
    A[np.arange(n_senders), np.arange(n_senders)] = 1.0
    A[n_senders, :] = 1.0
    cap = np.r_[np.full(n_senders, 2 * C), C]
    out = simulate(A, cap, np.zeros(n_senders), np.full(n_senders, S))
    np.testing.assert_allclose(out["finish"], np.full(n_senders, n_senders * S / C),
                               rtol=RTOL)


def _ring_allreduce(n, S, B, a):
    """Ring all-reduce on a star: 2(n-1) steps, each host i sends S/n to host i+1.

    Step k's send from host i waits for step k-1's receive at host i (from i-1) and
    for host i's own step k-1 send.
    """
    steps = 2 * (n - 1)
    n_flows = steps * n
    A = np.zeros((_star_links(n), n_flows))
    deps = np.full((n_flows, 2), -1)
    for k in range(steps):
        for i in range(n):
            f = k * n + i
            A[:, f] = _star_flow_column(n, i, (i + 1) % n)
            if k > 0:
                deps[f] = [(k - 1) * n + (i - 1) % n, (k - 1) * n + i]
    cap = np.full(_star_links(n), B)
    return A, cap, np.zeros(n_flows), np.full(n_flows, S / n), deps, np.full(n_flows, a)


@pytest.mark.parametrize("n", [4, pytest.param(2, marks=pytest.mark.slow),
                               pytest.param(8, marks=pytest.mark.slow)])
def test_ring_allreduce_on_nonblocking_switch(simulate, n):
    # Each step every uplink and downlink carries exactly one flow -> rate B, so a step
    # takes S/(n B) + a (latency a per step, released at the previous finish).
    # 2(n-1) sequential steps: T = 2(n-1)/n * S/B + 2(n-1) a.
    S, B, a = 8e6, 1e9, 2e-6
    A, cap, arr, size, deps, lat = _ring_allreduce(n, S, B, a)
    out = simulate(A, cap, arr, size, deps=deps, latency=lat)
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * a
    np.testing.assert_allclose(out["finish"].max(), expected, rtol=RTOL)
    # Every step lasts exactly S/(nB) + a.
    np.testing.assert_allclose(out["finish"] - out["start"], S / (n * B) + a, rtol=RTOL)


def _permutation_on_star(n, shift):
    A = np.stack([_star_flow_column(n, i, (i + shift) % n) for i in range(n)], axis=1)
    return A


def test_permutation_reaches_line_rate(simulate):
    # Disjoint routing: host i -> host (i+3) mod 8 uses uplink i and downlink i+3; every
    # link carries one flow, so every flow gets B and fct = S/B.
    n, S, B = 8, 5e6, 5e10
    A = _permutation_on_star(n, 3)
    out = simulate(A, np.full(2 * n, B), np.zeros(n), np.full(n, S))
    np.testing.assert_allclose(out["fct"], np.full(n, S / B), rtol=RTOL)


def test_permutation_rates_are_line_rate(x64):
    # Same case, checked on the recorded rates: at the first event all flows run at B.
    n, S, B = 8, 5e6, 5e10
    A = _permutation_on_star(n, 3)
    res = _fj().simulate_flows(A, np.full(2 * n, B), np.zeros(n), np.full(n, S),
                               record_rates=True)
    np.testing.assert_allclose(np.asarray(res.rate_history)[0], np.full(n, B), rtol=RTOL)


def test_dependency_chain_with_compute_delay(simulate):
    # Link C = 100 B/s, each flow 200 B (2 s alone), latency 0.5 s, compute delay 1 s.
    # f0: arrival 0, no deps:       start 0 + 1 = 1,         finish 1 + 2 + 0.5 = 3.5
    # f1: deps f0, arrival 0:       start 3.5 + 1 = 4.5,     finish 4.5 + 2.5 = 7
    # f2: deps f1, arrival 10 > 7:  start 10 + 1 = 11,       finish 11 + 2.5 = 13.5
    # f3: deps f1 and f2, arr 0:    start 13.5 + 1 = 14.5,   finish 17
    A = np.ones((1, 4))
    deps = np.array([[-1, -1], [0, -1], [1, -1], [1, 2]])
    out = simulate(A, [100.0], [0.0, 0.0, 10.0, 0.0], np.full(4, 200.0), deps=deps,
                   delay=np.ones(4), latency=np.full(4, 0.5))
    np.testing.assert_allclose(out["start"], [1.0, 4.5, 11.0, 14.5], rtol=RTOL)
    np.testing.assert_allclose(out["finish"], [3.5, 7.0, 13.5, 17.0], rtol=RTOL)
    np.testing.assert_allclose(out["fct"], [3.5, 7.0, 3.5, 17.0], rtol=RTOL)


def test_demand_cap_leaves_rest_to_others(simulate):
    # Link 100 B/s; flow 0 capped at 20 B/s, flow 1 uncapped. Max-min: 20 and 80.
    # Flow 1: 100 B / 80 = 1.25 s. Flow 0 stays at its cap: 100 B / 20 = 5 s.
    A = np.ones((1, 2))
    out = simulate(A, [100.0], [0.0, 0.0], [100.0, 100.0], demand=[20.0, np.inf])
    np.testing.assert_allclose(out["finish"], [5.0, 1.25], rtol=RTOL)


def test_zero_size_and_linkless_flows_are_instant(simulate):
    # f0: size 0 on the link -> completes at its start (arrival 1), finish = 1 + 0.25.
    # f1: no links, no demand cap, 1e6 B -> instant: finish = 2 + 0.25.
    # f2: no links but demand 10 B/s, 30 B -> 3 s at its cap: finish = 0 + 3 + 0.25.
    # f3: shares nothing with anyone: 100 B on the 100 B/s link, alone -> 1 s.
    A = np.array([[1.0, 0.0, 0.0, 1.0]])
    out = simulate(A, [100.0], [1.0, 2.0, 0.0, 0.0], [0.0, 1e6, 30.0, 100.0],
                   latency=np.full(4, 0.25), demand=[np.inf, np.inf, 10.0, np.inf])
    np.testing.assert_allclose(out["finish"], [1.25, 2.25, 3.25, 1.25], rtol=RTOL)


def test_multipath_split_weights(simulate):
    # Flow 0 splits half/half over links 0 and 1 (each 100 B/s); flow 1 uses link 1 only.
    # Max-min on flow rates r0, r1 with 0.5 r0 <= 100 and 0.5 r0 + r1 <= 100:
    # equal level r: 1.5 r = 100 -> r = 200/3 for both (link 1 tight).
    # Sizes 200 B each: both finish at 200 / (200/3) = 3 s.
    A = np.array([[0.5, 0.0], [0.5, 1.0]])
    out = simulate(A, [100.0, 100.0], [0.0, 0.0], [200.0, 200.0])
    np.testing.assert_allclose(out["finish"], [3.0, 3.0], rtol=RTOL)


def test_failed_link_stalls_only_its_flows(simulate):
    # Link 0 has failed (capacity 0): flow 0 crosses it and can never finish (inf), and
    # neither can flow 2, which depends on it. Flow 1 on the healthy link is unaffected:
    # 100 B at 50 B/s = 2 s.
    A = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    out = simulate(A, [0.0, 50.0], np.zeros(3), np.full(3, 100.0),
                   deps=np.array([[-1], [-1], [0]]))
    assert np.isinf(out["finish"][0]) and np.isinf(out["finish"][2])
    np.testing.assert_allclose(out["finish"][1], 2.0, rtol=RTOL)
    assert out["stalled"]


def test_incidence_object_equals_dense(x64):
    # The same fabric given as a sparse Incidence or as a dense matrix.
    A = np.array([[1.0, 1.0, 0.0], [0.0, 0.5, 1.0]])
    args = (np.array([10.0, 4.0]), np.array([0.0, 0.5, 1.0]), np.array([30.0, 20.0, 10.0]))
    dense = _jax_simulate(A, *args)
    sparse = _as_dict(_fj().simulate_flows(_fj().Incidence.from_dense(A), *args))
    np.testing.assert_allclose(sparse["finish"], dense["finish"], rtol=RTOL)
    ref = simulate_flows_reference(A, *args)
    np.testing.assert_allclose(dense["finish"], ref["finish"], rtol=RTOL)


@pytest.mark.parametrize("seed", range(4))
def test_ties_match_oracle(x64, seed):
    # Integer capacities, arrivals and sizes make many starts and completions coincide,
    # which stresses the "same event" tolerance. Fixed incidence: compiles once.
    rng = np.random.default_rng(seed)
    A = np.array([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0],
                  [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
                  [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0]])
    cap = rng.choice([10.0, 20.0, 30.0], 3)
    arr = rng.choice([0.0, 1.0, 2.0], 8)
    size = rng.choice([0.0, 10.0, 20.0], 8)
    deps = np.array([[-1], [-1], [-1], [-1], [0], [1], [-1], [2]])
    ref = simulate_flows_reference(A, cap, arr, size, deps=deps)
    out = _jax_simulate(A, cap, arr, size, deps=deps)
    np.testing.assert_allclose(out["finish"], ref["finish"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out["start"], ref["start"], rtol=RTOL, atol=ATOL)


def test_float32_default_two_flows():
    # Same as the two-flow hand case, in the default (float32) mode, to 1e-5.
    A = np.ones((1, 2), dtype=np.float32)
    res = _fj().simulate_flows(A, np.array([100.0], np.float32),
                               np.array([0.0, 4.0], np.float32),
                               np.array([1000.0, 500.0], np.float32))
    np.testing.assert_allclose(np.asarray(res.finish), [15.0, 14.0], rtol=1e-5)


# --------------------------------------------------------------------------------------
# Randomised agreement with the oracle
# --------------------------------------------------------------------------------------


def random_instance(rng, n_links=6, n_flows=12, max_deps=2, n_extra_hops=14):
    """A random fabric/workload with shared links, split weights, deps and demands.

    Shapes, including the number of nonzeros of the incidence (one link per flow plus
    ``n_extra_hops``), are fixed so the JAX simulator compiles once across seeds.
    """
    mask = np.zeros((n_links, n_flows - 1), dtype=bool)
    mask[rng.integers(n_links, size=n_flows - 1), np.arange(n_flows - 1)] = True
    extra = rng.choice(np.flatnonzero(~mask.ravel()), size=n_extra_hops, replace=False)
    mask.ravel()[extra] = True
    # The last flow has no links: it is limited by its demand only.
    mask = np.concatenate([mask, np.zeros((n_links, 1), dtype=bool)], axis=1)
    A = mask * np.where(rng.random((n_links, n_flows)) < 0.2, 0.5, 1.0)
    capacity = rng.uniform(1e9, 1e10, n_links)
    arrival = np.where(rng.random(n_flows) < 0.3, 0.0, rng.uniform(0, 5e-3, n_flows))
    size = rng.lognormal(np.log(2e6), 1.5, n_flows)
    size[rng.random(n_flows) < 0.08] = 0.0
    delay = np.where(rng.random(n_flows) < 0.4, rng.uniform(0, 2e-4, n_flows), 0.0)
    latency = np.where(rng.random(n_flows) < 0.5, rng.uniform(0, 1e-5, n_flows), 0.0)
    demand = np.where(rng.random(n_flows) < 0.25, rng.uniform(5e8, 3e9, n_flows), np.inf)
    demand[-1] = rng.uniform(5e8, 3e9)
    deps = np.full((n_flows, max_deps), -1)
    for f in range(3, n_flows):
        if rng.random() < 0.4:
            k = rng.integers(1, max_deps + 1)
            deps[f, :k] = rng.choice(f, size=k, replace=False)
    return A, capacity, arrival, size, dict(deps=deps, delay=delay, latency=latency,
                                            demand=demand)


@pytest.mark.parametrize("seed", range(12))
def test_random_instances_match_oracle(x64, seed):
    rng = np.random.default_rng(seed)
    A, cap, arr, size, kw = random_instance(rng)
    ref = simulate_flows_reference(A, cap, arr, size, **kw)
    out = _jax_simulate(A, cap, arr, size, **kw)
    np.testing.assert_allclose(out["start"], ref["start"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out["finish"], ref["finish"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out["fct"], ref["fct"], rtol=RTOL, atol=ATOL)
    # Each flow contributes at most a start and a completion event, plus the initial one.
    n_flows = len(size)
    assert 1 <= out["n_events"] <= 2 * n_flows + 1
    assert not out["stalled"]


def test_random_instances_respect_ideal_fct(x64):
    # Invariant: nobody beats being alone on the fabric (size / bottleneck + latency),
    # and nobody starts before arrival + delay.
    rng = np.random.default_rng(123)
    for _ in range(3):
        A, cap, arr, size, kw = random_instance(rng)
        out = _jax_simulate(A, cap, arr, size, **kw)
        with np.errstate(divide="ignore"):
            per_link = np.where(A > 0, cap[:, None] / np.where(A > 0, A, 1.0), np.inf)
        bottleneck = np.minimum(per_link.min(axis=0), kw["demand"])
        transfer = np.where(size > 0, size / bottleneck, 0.0)
        ideal = transfer + kw["latency"]
        assert np.all(out["finish"] - out["start"] >= ideal * (1 - RTOL) - ATOL)
        assert np.all(out["start"] >= (arr + kw["delay"]) * (1 - RTOL) - ATOL)


# --------------------------------------------------------------------------------------
# The oracle itself: max-min certificate and byte conservation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_oracle_max_min_certificate(seed):
    # Feasible, and every flow is at its demand or crosses a saturated link on which no
    # other flow has a larger rate (the bottleneck characterisation of max-min).
    rng = np.random.default_rng(100 + seed)
    A, cap, _, _, kw = random_instance(rng)
    rate = max_min_rates(A, cap, kw["demand"])
    load = A @ rate
    assert np.all(load <= cap * (1 + 1e-9))
    saturated = load >= cap * (1 - 1e-9)
    for f in range(A.shape[1]):
        if rate[f] >= kw["demand"][f] * (1 - 1e-9):
            continue
        links = np.flatnonzero((A[:, f] > 0) & saturated)
        assert any(rate[f] >= rate[A[l] > 0].max() * (1 - 1e-9) for l in links), f


@pytest.mark.parametrize("seed", range(3))
def test_oracle_agrees_with_max_min_fair(x64, seed):
    # Two independent implementations of the same allocation.
    rng = np.random.default_rng(200 + seed)
    A, cap, _, _, kw = random_instance(rng)
    ours = max_min_rates(A, cap, kw["demand"])
    theirs = np.asarray(_fj().max_min_fair(A, cap, kw["demand"]).rates)
    np.testing.assert_allclose(theirs, ours, rtol=1e-9)


def test_oracle_conserves_bytes():
    rng = np.random.default_rng(5)
    A, cap, arr, size, kw = random_instance(rng)
    ref = simulate_flows_reference(A, cap, arr, size, **kw)
    times, rates = ref["event_times"], ref["rate_history"]
    assert len(times) == ref["n_events"] == len(rates)
    delivered = (rates[:-1] * np.diff(times)[:, None]).sum(axis=0)
    np.testing.assert_allclose(delivered, size, rtol=1e-9, atol=1e-6)


# --------------------------------------------------------------------------------------
# Fixed-step variant, batching, recorded rates
# --------------------------------------------------------------------------------------


def _fixed_step_case():
    # Two links, four flows, event times deliberately off any dt grid.
    A = np.array([[1.0, 1.0, 0.0, 1.0],
                  [0.0, 1.0, 1.0, 0.0]])
    cap = np.array([100.0, 70.0])
    arr = np.array([0.0, 0.37, 1.13, 0.0])
    size = np.array([500.0, 300.0, 260.0, 90.0])
    deps = np.array([[-1], [-1], [-1], [0]])
    delay = np.array([0.0, 0.0, 0.0, 0.21])
    return A, cap, arr, size, dict(deps=deps, delay=delay)


def test_fixed_step_converges_to_event_driven(x64):
    A, cap, arr, size, kw = _fixed_step_case()
    ref = simulate_flows_reference(A, cap, arr, size, **kw)["finish"]
    horizon = 1.5 * ref.max()
    errors = []
    dts = [0.25, 0.25 / 4, 0.25 / 16]
    n_steps = math.ceil(horizon / dts[-1])  # one static n_steps: compiles once
    for dt in dts:
        res = _fj().simulate_flows_fixed_step(A, cap, arr, size, dt=dt, n_steps=n_steps,
                                              **kw)
        finish = np.asarray(res.finish, dtype=np.float64)
        assert np.all(np.isfinite(finish)), finish
        errors.append(np.abs(finish - ref).max())
    # Monotone decrease, overall strict decrease, and first-order accuracy: each event
    # is resolved to within a step, so the error is at most a few dt.
    assert errors[1] <= errors[0] + ATOL and errors[2] <= errors[1] + ATOL, errors
    assert errors[2] < errors[0], errors
    for dt, err in zip(dts, errors):
        assert err <= 4 * len(size) * dt, (dt, err)
    assert errors[2] < 0.05, errors


def test_batched_equals_loop(x64):
    rng = np.random.default_rng(7)
    A, cap, arr, size, kw = random_instance(rng, n_links=5, n_flows=8, n_extra_hops=8)
    n_batch = 3
    caps = cap * rng.uniform(0.5, 2.0, (n_batch, 1))
    arrs = arr + rng.uniform(0, 1e-3, (n_batch, len(arr)))
    sizes = size * rng.uniform(0.5, 2.0, (n_batch, len(size)))
    # Per-flow extras are [batch, flows]; deps is shared across the batch.
    per_scenario = {k: kw[k] * rng.uniform(0.5, 2.0, (n_batch, len(size)))
                    for k in ("delay", "latency", "demand")}
    batched = _fj().simulate_flows_batched(A, caps, arrs, sizes, deps=kw["deps"],
                                           **per_scenario)
    finish = np.asarray(batched.finish)
    assert finish.shape == (n_batch, len(size))
    for b in range(n_batch):
        single = _jax_simulate(A, caps[b], arrs[b], sizes[b], deps=kw["deps"],
                               **{k: v[b] for k, v in per_scenario.items()})
        np.testing.assert_allclose(np.asarray(batched.start)[b], single["start"],
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(finish[b], single["finish"], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(np.asarray(batched.fct)[b], single["fct"],
                                   rtol=RTOL, atol=ATOL)
        assert int(np.asarray(batched.n_events)[b]) == single["n_events"]


@pytest.mark.parametrize("seed", [11, 12])
def test_rate_history_conserves_bytes(x64, seed):
    # rate_history[k] holds the rates in force from event_times[k] to the next event;
    # the last interval ends at the last transfer completion, max(finish - latency).
    # Integrating rate over the intervals gives back every flow's size.
    rng = np.random.default_rng(seed)
    A, cap, arr, size, kw = random_instance(rng)
    res = _fj().simulate_flows(A, cap, arr, size, record_rates=True, **kw)
    n = int(res.n_events)
    times = np.asarray(res.event_times, dtype=np.float64)[:n]
    rates = np.asarray(res.rate_history, dtype=np.float64)[:n]
    assert np.all(np.diff(times) >= 0)
    last_completion = (np.asarray(res.finish, dtype=np.float64) - kw["latency"]).max()
    ends = np.append(times[1:], last_completion)
    finite = np.isfinite(kw["demand"]) | (A.sum(axis=0) > 0)  # instant flows excluded
    delivered = (rates * (ends - times)[:, None]).sum(axis=0)
    np.testing.assert_allclose(delivered[finite], size[finite], rtol=1e-6,
                               atol=1e-6 * size.max())
    # Feasibility at every event: no link above capacity.
    load = rates[:, finite] @ A[:, finite].T
    assert np.all(load <= cap * (1 + 1e-9))


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


def _good():
    A = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    return A, np.array([10.0, 10.0]), np.zeros(3), np.ones(3)


@pytest.mark.parametrize("case, argument", [
    ("capacity_shape", "capacity"),
    ("arrival_shape", "arrival"),
    ("size_shape", "size"),
    ("negative_size", "size"),
    ("nan_arrival", "arrival"),
    ("deps_out_of_range", "deps"),
    ("deps_cycle", "deps"),
    ("deps_self", "deps"),
])
def test_bad_input_raises_naming_argument(simulate, case, argument):
    A, cap, arr, size = _good()
    kw = {}
    if case == "capacity_shape":
        cap = np.array([10.0, 10.0, 10.0])
    elif case == "arrival_shape":
        arr = np.zeros(4)
    elif case == "size_shape":
        size = np.ones(2)
    elif case == "negative_size":
        size = np.array([1.0, -1.0, 1.0])
    elif case == "nan_arrival":
        arr = np.array([0.0, np.nan, 0.0])
    elif case == "deps_out_of_range":
        kw["deps"] = np.array([[-1], [3], [-1]])
    elif case == "deps_cycle":
        kw["deps"] = np.array([[2], [0], [1]])
    elif case == "deps_self":
        kw["deps"] = np.array([[-1], [1], [-1]])
    with pytest.raises(ValueError, match=argument):
        simulate(A, cap, arr, size, **kw)


@pytest.mark.parametrize("seed", slow_except([0, 5], keep=[0]))
def test_small_active_table_overflows_and_retries(x64, seed):
    """The active-flow slot table starts at ``max_active`` slots and doubles on
    overflow: a table of one slot must give exactly the same run as the default."""
    fj = _fj()
    rng = np.random.default_rng(seed)
    A, cap, arr, size, kw = random_instance(rng)
    full = fj.simulate_flows(A, cap, arr, size, **kw)
    tiny = fj.simulate_flows(A, cap, arr, size, max_active=1, **kw)
    np.testing.assert_array_equal(np.asarray(tiny.finish), np.asarray(full.finish))
    np.testing.assert_array_equal(np.asarray(tiny.start), np.asarray(full.start))


@pytest.mark.slow
def test_burst_larger_than_active_table(x64):
    """More flows start at one instant than the table has slots (all slots free):
    the overflow must be detected and the table grown, not flows overwritten."""
    fj = _fj()
    n = 12                                  # 4 -> 8 -> 16 slots: two regrowths
    A = np.zeros((n + 1, n))
    A[np.arange(n), np.arange(n)] = 1.0     # own access link each
    A[n, :] = 1.0                           # one shared link of capacity n
    res = fj.simulate_flows(A, np.full(n + 1, float(n)), np.zeros(n), np.ones(n),
                            max_active=4)
    # All n flows share the n B/s link equally (1 B/s each): every 1-byte flow ends at 1 s.
    np.testing.assert_allclose(np.asarray(res.finish), np.ones(n), rtol=1e-12)
    assert not bool(res.stalled)


# --------------------------------------------------------------------------------------
# Warm-started solves and event merging (fabric_jax.sim._events module docstring)
# --------------------------------------------------------------------------------------
#: Merged-event FCT error allowed, in units of ``tolerance`` (measured on these instances;
#: the docstring explains why no a-priori constant exists in general).
MERGE_ERROR_FACTOR = 10.0


def coupled_instance(rng, n_links=10, n_flows=40, hops=3, kind="random"):
    """SimGrid-style coupled instance in miniature: every flow on ``hops`` random
    distinct links, all at t = 0; ``kind`` adds ties (integer capacities and sizes),
    zero-capacity links, or demands."""
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        A[rng.choice(n_links, size=hops, replace=False), f] = 1.0
    if kind == "ties":
        cap = rng.choice([10.0, 20.0], n_links)
        size = rng.choice([10.0, 20.0, 30.0], n_flows)
    else:
        cap = rng.uniform(1e9, 1e10, n_links)
        size = rng.uniform(1e6, 1e8, n_flows)
    kw = {}
    if kind == "zero_capacity":
        cap[rng.choice(n_links, size=1)] = 0.0
    if kind == "demands":
        kw["demand"] = np.where(rng.random(n_flows) < 0.4,
                                rng.uniform(1e8, 1e9, n_flows), np.inf)
    return A, cap, np.zeros(n_flows), size, kw


@pytest.mark.parametrize("kind", ["random", "ties", "zero_capacity", "demands"])
def test_warm_start_equals_from_scratch_and_oracle_coupled(x64, kind):
    rng = np.random.default_rng(["random", "ties", "zero_capacity", "demands"].index(kind))
    A, cap, arr, size, kw = coupled_instance(rng, kind=kind)
    warm = _jax_simulate(A, cap, arr, size, **kw)
    cold = _jax_simulate(A, cap, arr, size, warm_start=False, **kw)
    ref = simulate_flows_reference(A, cap, arr, size, **kw)
    np.testing.assert_allclose(warm["finish"], cold["finish"], rtol=1e-9, atol=ATOL)
    np.testing.assert_allclose(warm["finish"], ref["finish"], rtol=RTOL, atol=ATOL)
    assert warm["n_events"] == cold["n_events"]
    assert warm["stalled"] == (kind == "zero_capacity") == cold["stalled"]


@pytest.mark.parametrize("seed", range(6))
def test_warm_start_equals_from_scratch_random(x64, seed):
    # Arrivals over time, dependencies, split weights, demands, zero-byte and linkless
    # flows: every kind of event the keep rule has to get right.
    rng = np.random.default_rng(seed)
    A, cap, arr, size, kw = random_instance(rng)
    warm = _jax_simulate(A, cap, arr, size, **kw)
    cold = _jax_simulate(A, cap, arr, size, warm_start=False, **kw)
    np.testing.assert_allclose(warm["finish"], cold["finish"], rtol=1e-9, atol=ATOL)
    np.testing.assert_allclose(warm["start"], cold["start"], rtol=1e-9, atol=ATOL)
    assert warm["n_events"] == cold["n_events"]


def test_warm_start_float32_matches_x64_oracle():
    rng = np.random.default_rng(3)
    A, cap, arr, size, _ = coupled_instance(rng)
    res = _fj().simulate_flows(A.astype(np.float32), cap.astype(np.float32),
                               arr.astype(np.float32), size.astype(np.float32))
    ref = simulate_flows_reference(A, cap, arr, size)
    np.testing.assert_allclose(np.asarray(res.finish), ref["finish"], rtol=1e-4)


def test_merged_events_error_vanishes_with_tolerance(x64):
    rng = np.random.default_rng(21)
    A, cap, arr, size, _ = coupled_instance(rng, n_links=12, n_flows=60)
    exact = _jax_simulate(A, cap, arr, size)
    zero = _jax_simulate(A, cap, arr, size, tolerance=0.0)
    np.testing.assert_array_equal(zero["finish"], exact["finish"])
    errors, events = [], []
    for tol in (1e-1, 1e-2, 1e-3):
        merged = _jax_simulate(A, cap, arr, size, tolerance=tol)
        assert not merged["stalled"]
        err = np.max(np.abs(merged["finish"] - exact["finish"]) / exact["fct"])
        assert err <= MERGE_ERROR_FACTOR * tol, (tol, err)
        errors.append(err)
        events.append(merged["n_events"])
    # Merging saves events at the coarse tolerance, none are added at fine ones.
    assert events[0] < exact["n_events"]
    assert all(e <= exact["n_events"] for e in events)
    assert errors[2] <= errors[0]


def test_merged_events_with_arrivals_and_deps(x64):
    rng = np.random.default_rng(4)
    A, cap, arr, size, kw = random_instance(rng)
    exact = _jax_simulate(A, cap, arr, size, **kw)
    merged = _jax_simulate(A, cap, arr, size, tolerance=1e-3, **kw)
    err = np.max(np.abs(merged["finish"] - exact["finish"]) / np.maximum(exact["fct"], 1e-9))
    assert err <= MERGE_ERROR_FACTOR * 1e-3


@pytest.mark.parametrize("tolerance", [-1e-3, float("nan"), float("inf"), "x"])
def test_bad_tolerance_raises(tolerance):
    A = np.ones((1, 2))
    with pytest.raises(ValueError, match="tolerance"):
        _fj().simulate_flows(A, np.ones(1), np.zeros(2), np.ones(2), tolerance=tolerance)


def test_batched_warm_start_equals_loop(x64):
    rng = np.random.default_rng(5)
    A, cap, arr, size, _ = coupled_instance(rng, n_links=6, n_flows=12)
    caps = cap * rng.uniform(0.5, 2.0, (3, 1))
    sizes = size * rng.uniform(0.5, 2.0, (3, len(size)))
    arrs = np.broadcast_to(arr, sizes.shape)
    batched = _fj().simulate_flows_batched(A, caps, arrs, sizes, warm_start=True)
    for b in range(3):
        single = _jax_simulate(A, caps[b], arrs[b], sizes[b], warm_start=False)
        np.testing.assert_allclose(np.asarray(batched.finish)[b], single["finish"],
                                   rtol=1e-9)


# --------------------------------------------------------------------------------------
# The two arrival paths of the event loop (fabric_jax.sim._events, "Cost per event"): without
# dependencies flows enter through a pointer into the sorted start times; with them,
# through the release times.  Same instance both ways: a zero-byte, linkless flow 0 that
# every other flow depends on finishes at t = 0, so the starts are unchanged.
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("max_active", [None, pytest.param(2, marks=pytest.mark.slow)])
def test_start_order_path_equals_dependency_path(x64, seed, max_active):
    rng = np.random.default_rng(100 + seed)
    A, cap, arr, size, kw = random_instance(rng)
    kw.pop("deps")
    # Adversarial starts: ties (several flows at one instant, some at t = 0), a start
    # exactly at another flow's completion, and a zero-capacity link.
    arr[1:4] = arr[0]
    arr[4] = 0.0
    cap[rng.integers(len(cap))] = 0.0
    n = len(size)
    A1 = np.concatenate([np.zeros((A.shape[0], 1)), A], axis=1)
    ext = {k: np.concatenate([[0.0], v]) for k, v in kw.items()}
    ext["demand"][0] = np.inf
    deps = np.concatenate([[-1], np.zeros(n, int)])[:, None]
    plain = _jax_simulate(A1, cap, np.concatenate([[0.0], arr]), np.concatenate([[0.0], size]),
                          max_active=max_active, **ext)
    with_deps = _jax_simulate(A1, cap, np.concatenate([[0.0], arr]),
                              np.concatenate([[0.0], size]), deps=deps,
                              max_active=max_active, **ext)
    ref = simulate_flows_reference(A1, cap, np.concatenate([[0.0], arr]),
                                   np.concatenate([[0.0], size]), **ext)
    for key in ("start", "finish"):
        np.testing.assert_allclose(plain[key], with_deps[key], rtol=1e-12, atol=ATOL)
        np.testing.assert_allclose(plain[key], ref[key], rtol=RTOL, atol=ATOL)
    assert plain["stalled"] == with_deps["stalled"] == bool(np.isinf(ref["finish"]).any())


def test_start_order_with_start_at_a_completion(x64):
    """Flow 1 starts exactly when flow 0 completes (1 s): one event does both, and flow 1
    then has the link alone.  Closed form: flow 0 sends 10 B at 10 B/s, alone, [0, 1];
    flow 1 sends 10 B at 10 B/s from 1 s, finishing at 2 s; flow 2 (t = 0.5 s, other
    link) 5 B at 5 B/s, finishing at 1.5 s."""
    A = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    res = _jax_simulate(A, np.array([10.0, 5.0]), np.array([0.0, 1.0, 0.5]),
                        np.array([10.0, 10.0, 5.0]), max_active=1)
    np.testing.assert_allclose(res["finish"], [1.0, 2.0, 1.5], rtol=1e-12)
    np.testing.assert_allclose(res["start"], [0.0, 1.0, 0.5], rtol=1e-12)
