"""Robustness sweep: random scenarios at the extremes, for the rate solver and both
simulators.

A hypothesis strategy draws a topology (small leaf-spine, ``fat_tree(4)``, a random
connected graph from ``from_edges``), flows between random hosts (single or multi-path
routing, some flows crossing no link at all), capacities with zero-capacity links and
link capacities from 0.1 B/s to 50 TB/s, flow sizes from 0 B to 1 TB, random dependency DAGs,
arrivals, delays, latencies and rate caps; for the fluid model also the step ``dt``
(1 ns .. 100 us, from far below to far above the stability edge ``C dt ~ buffer``),
buffers from 0 B to infinite, the law (``none``, ``dcqcn``) and the flow control
(``none``, ``pfc``, ``credit``).  A fraction of the scenarios is corrupted (NaN, inf,
negative values, wrong shapes) on purpose.

Every run must either raise a ``ValueError`` before running (corrupted input, or a
combination the API rejects), or complete with

* no NaN anywhere, non-negative and finite rates/queues/bytes;
* feasibility (link loads within capacity) and the max-min bottleneck property;
* the exact simulator equal to the NumPy oracle (``tests/reference``) in x64 and its
  recorded rates integrating to each completed flow's size (bytes conserved);
* in the fluid model ``sent = delivered + queued + dropped`` per flow, ``delivered <=
  size``, every finished flow fully delivered, finish after start after arrival;
* unfinished flows (finish ``+inf``) exactly when ``stalled`` is flagged.

Shapes are padded (128 links, 10 flows, 24 entries per flow) so that each engine
compiles once per configuration; the default run keeps a few examples per test, the
``slow`` variants many more (``pytest -m slow tests/test_robustness.py``).

Cases this sweep found are pinned by explicit tests below (all fixed): zero flows in
``simulate_flows`` and ``simulate_fluid``, unchecked ``Incidence`` entries in
``simulate_flows`` and ``max_min_fair``, and a zero-byte flow finishing before it starts.
"""

from __future__ import annotations

import functools
import os

import jax.numpy as jnp
import numpy as np
import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fabric_jax as fj
from fabric_jax.fluid import COMPLETION_RTOL
from fabric_jax.incidence import Incidence
from tests.reference.flowsim_numpy import max_min_rates, simulate_flows_reference

L_PAD = 128      # links after padding (real links <= L_PAD - R_PAD)
R_PAD = 24       # incidence entries per flow (fat_tree(4): 6 hops x 4 paths)
N_FLOWS = 10
PAD_CAP = 1e12   # capacity of the padding links (unused by real flows)

FAST = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
FLUID_FAST = settings(FAST, max_examples=5)
# The slow variants explore new examples on every local run; under CI they are
# derandomized like everything else (tests/conftest.py).
CI_DERANDOMIZE = bool(os.environ.get("CI"))
SLOW = settings(FAST, max_examples=150, derandomize=CI_DERANDOMIZE)
# Three examples per law x flow control (with latencies: each example's delay lines are
# DELAY_STEPS long, so the examples share programs; the topology still sets a few
# static choices).  Local runs draw new examples each time (not derandomized).
FLUID_SLOW = settings(FAST, max_examples=3, derandomize=CI_DERANDOMIZE)


# ------------------------------------------------------------------ generator
@functools.lru_cache(maxsize=None)
def _topology(kind, gbps, params):
    if kind == "leaf_spine":
        return fj.leaf_spine(*params, link_gbps=gbps)
    if kind == "fat_tree":
        return fj.fat_tree(4, link_gbps=gbps)
    return fj.from_edges(list(params), capacity_gbps=gbps)


@st.composite
def topologies(draw):
    kind = draw(st.sampled_from(["leaf_spine", "fat_tree", "graph"]))
    gbps = draw(st.sampled_from([1.0, 100.0, 400.0]))
    if kind == "leaf_spine":
        params = (draw(st.integers(2, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    elif kind == "fat_tree":
        params = ()
    else:
        m = draw(st.integers(2, 6))
        edges = [(i, i + 1) for i in range(m - 1)]  # a spanning path: connected
        extra = draw(st.lists(st.tuples(st.integers(0, m - 1), st.integers(0, m - 1)),
                              max_size=4))
        edges += [(u, v) for u, v in extra if u != v and (u, v) not in edges
                  and (v, u) not in edges]
        params = tuple(edges)
    return _topology(kind, gbps, params)


def _pad_incidence(paths, split, n_real_links, n_flows):
    """Fixed-shape flow-major incidence [L_PAD, n_flows] with R_PAD entries per flow."""
    inc = Incidence.from_paths(paths, split, n_links=n_real_links)
    li = np.asarray(inc.link_idx)
    fi = np.asarray(inc.flow_idx)
    w = np.asarray(inc.weight, np.float64)
    link = np.zeros((n_flows, R_PAD), np.int32)
    weight = np.zeros((n_flows, R_PAD))
    for f in range(paths.n_pairs):
        sel = np.flatnonzero((fi == f) & (w > 0))
        link[f, :sel.size] = li[sel]
        weight[f, :sel.size] = w[sel]
    return link, weight


def _incidence(link, weight):
    n_flows = link.shape[0]
    return Incidence(link.reshape(-1), np.repeat(np.arange(n_flows, dtype=np.int32), R_PAD),
                     weight.reshape(-1).astype(jnp.result_type(float)), L_PAD, n_flows, R_PAD)


def _dense(link, weight):
    A = np.zeros((L_PAD, link.shape[0]))
    for f in range(link.shape[0]):
        np.add.at(A[:, f], link[f], weight[f])
    return A


@st.composite
def scenarios(draw):
    """A padded scenario: dict of host arrays (float64) and the incidence tables."""
    topo = draw(topologies())
    n_real = topo.n_links
    assert n_real <= L_PAD - R_PAD
    routed = np.array(draw(st.lists(st.booleans(), min_size=N_FLOWS, max_size=N_FLOWS)))
    routed |= np.arange(N_FLOWS) == 0  # at least one routed flow
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    idx = np.flatnonzero(routed)
    src = rng.integers(0, topo.n_hosts, idx.size)
    dst = (src + rng.integers(1, topo.n_hosts, idx.size)) % topo.n_hosts
    paths = fj.shortest_paths(topo, src, dst, max_paths=draw(st.integers(1, 4)),
                              seed=draw(st.integers(0, 100)))
    pm = np.asarray(paths.path_mask)
    if draw(st.booleans()):
        split = pm / pm.sum(axis=1, keepdims=True)          # even split (spraying)
    else:
        split = (np.cumsum(pm, axis=1) == 1) & pm            # first path only
    link = np.zeros((N_FLOWS, R_PAD), np.int32)
    weight = np.zeros((N_FLOWS, R_PAD))
    link[idx], weight[idx] = _pad_incidence(paths, split.astype(np.float64), n_real, idx.size)

    cap = np.full(L_PAD, PAD_CAP)
    cap[:n_real] = topo.capacity * draw(st.sampled_from([1e-9, 1e-3, 1.0, 1e3]))
    zero_frac = draw(st.sampled_from([0.0, 0.0, 0.1, 0.5]))
    cap[:n_real][rng.random(n_real) < zero_frac] = 0.0
    size_choices = np.array([0.0, 1e-6, 1.0, 1e3, 1e6, 1e9, 1e12])
    size = size_choices[rng.integers(0, size_choices.size, N_FLOWS)]
    size = size * rng.uniform(0.5, 1.5, N_FLOWS)
    arrival = np.where(rng.random(N_FLOWS) < 0.5, 0.0, rng.uniform(0, 1e-4, N_FLOWS))
    deps = np.full((N_FLOWS, 2), -1)
    for f in range(1, N_FLOWS):
        for k in range(2):
            if rng.random() < 0.25:
                deps[f, k] = rng.integers(0, f)
    delay = np.where(rng.random(N_FLOWS) < 0.3, rng.uniform(0, 1e-5, N_FLOWS), 0.0)
    latency = np.where(rng.random(N_FLOWS) < 0.3, rng.uniform(0, 1e-5, N_FLOWS), 0.0)
    demand = None
    if draw(st.booleans()):
        demand = np.array([0.0, 1e3, 1e9, np.inf])[rng.integers(0, 4, N_FLOWS)]
    return dict(topo=topo, link=link, weight=weight, capacity=cap, size=size,
                arrival=arrival, deps=deps, delay=delay, latency=latency, demand=demand,
                routed=routed)


CORRUPTIONS = [
    ("capacity", np.nan), ("capacity", -1.0), ("capacity", np.inf),
    ("size", np.nan), ("size", -5.0), ("size", np.inf),
    ("arrival", np.nan), ("arrival", -1.0), ("arrival", np.inf),
    ("delay", -1.0), ("latency", np.nan), ("demand", -3.0), ("demand", np.nan),
    ("deps", N_FLOWS + 3), ("deps", "self"), ("deps", "cycle"),
    ("size", "shape"), ("capacity", "shape"),
]


def _corrupt(sc, which, rng):
    name, value = which
    sc = dict(sc)
    if name == "deps":
        d = sc["deps"].copy()
        if value == "self":
            d[3, 0] = 3
        elif value == "cycle":
            d[2, 0], d[5, 1] = 5, 2
        else:
            d[4, 0] = value
        sc["deps"] = d
        return sc
    if value == "shape":
        sc[name] = sc[name][:-1]
        return sc
    arr = np.array(sc[name] if sc.get(name) is not None else np.full(N_FLOWS, np.inf),
                   np.float64)
    arr[rng.integers(0, arr.size)] = value
    sc[name] = arr
    return sc


def _finite_ok(x, name):
    x = np.asarray(x, np.float64)
    assert not np.any(np.isnan(x)), f"{name} has NaN"
    return x


# ------------------------------------------------------------------ max_min_fair
def _check_max_min(sc, rates, rtol):
    A = _dense(sc["link"], sc["weight"])
    cap = sc["capacity"]
    demand = np.full(N_FLOWS, np.inf) if sc["demand"] is None else sc["demand"]
    r = _finite_ok(rates, "rates")
    assert np.all(r >= 0)
    linked = A.sum(axis=0) > 0
    # Infinite only for linkless flows without a cap.
    assert np.all(np.isfinite(r) | (~linked & np.isinf(demand)))
    rf = np.where(np.isfinite(r), r, 0.0)
    load = A @ rf
    assert np.all(load <= cap * (1 + rtol) + 1e-30), "link over capacity"
    assert np.all(r <= demand * (1 + rtol))
    # Bottleneck: at its demand, or on a saturated link where it has the largest rate.
    for f in np.flatnonzero(linked & np.isfinite(r)):
        if r[f] >= demand[f] * (1 - rtol):
            continue
        links = np.flatnonzero(A[:, f] > 0)
        ok = False
        for lk in links:
            on = A[lk] > 0
            if load[lk] >= cap[lk] * (1 - rtol) and r[f] >= rf[on].max() * (1 - rtol):
                ok = True
                break
        assert ok, f"flow {f} has no bottleneck (rate {r[f]})"
    return r


def _max_min_case(sc, x64):
    inc = _incidence(sc["link"], sc["weight"])
    res = fj.max_min_fair(inc, sc["capacity"], sc["demand"])
    r = _check_max_min(sc, res.rates, rtol=1e-9 if x64 else 2e-5)
    if x64:
        oracle = max_min_rates(_dense(sc["link"], sc["weight"]), sc["capacity"],
                               np.full(N_FLOWS, np.inf) if sc["demand"] is None
                               else sc["demand"])
        np.testing.assert_allclose(r, oracle, rtol=1e-9, atol=0)


@FAST
@given(sc=scenarios())
def test_max_min_fair_random(sc):
    _max_min_case(sc, x64=False)


@FAST
@given(sc=scenarios())
def test_max_min_fair_random_x64_oracle(x64, sc):
    _max_min_case(sc, x64=True)


@given(sc=scenarios(), which=st.sampled_from(
    [c for c in CORRUPTIONS if c[0] in ("capacity", "demand")]), seed=st.integers(0, 99))
@FAST
def test_max_min_fair_rejects_bad_input(sc, which, seed):
    bad = _corrupt(sc, which, np.random.default_rng(seed))
    with pytest.raises(ValueError):
        fj.max_min_fair(_incidence(bad["link"], bad["weight"]), bad["capacity"],
                        bad["demand"])


# ------------------------------------------------------------------ simulate_flows
def _sim_kwargs(sc):
    return dict(deps=sc["deps"], delay=sc["delay"], latency=sc["latency"],
                demand=sc["demand"])


def _flows_case(sc, x64):
    inc = _incidence(sc["link"], sc["weight"])
    res = fj.simulate_flows(inc, sc["capacity"], sc["arrival"], sc["size"],
                            record_rates=x64, **_sim_kwargs(sc))
    start = _finite_ok(res.start, "start")
    finish = _finite_ok(res.finish, "finish")
    done = np.isfinite(finish)
    assert bool(res.stalled) == (not done.all()), "stalled flag disagrees with finish"
    rel = 1e-9 if x64 else 1e-5
    assert np.all(start[done] >= sc["arrival"][done] * (1 - rel))
    assert np.all(finish[done] >= start[done] * (1 - rel))
    assert np.all(np.isfinite(start) | ~done)
    # A flow stalls only for a reason: it has bytes and crosses a dead link / zero cap,
    # or one of its dependencies stalled.
    A = _dense(sc["link"], sc["weight"])
    dead = ((A > 0) & (sc["capacity"][:, None] <= 0)).any(axis=0)
    if sc["demand"] is not None:
        dead |= sc["demand"] <= 0
    blocked = dead & (sc["size"] > 0)
    for f in range(N_FLOWS):  # deps point backwards: one pass propagates
        blocked[f] |= any(blocked[d] for d in sc["deps"][f] if d >= 0)
    if x64:
        np.testing.assert_array_equal(~done, blocked)
        oracle = simulate_flows_reference(A, sc["capacity"], sc["arrival"], sc["size"],
                                          **_sim_kwargs(sc))
        np.testing.assert_array_equal(np.isinf(oracle["finish"]), ~done)
        np.testing.assert_allclose(finish[done], oracle["finish"][done], rtol=1e-7)
        # Bytes conserved: the recorded rates integrate to each completed flow's size.
        n = int(res.n_events)
        t = np.asarray(res.event_times)[:n]
        rates = np.asarray(res.rate_history)[:n]
        assert np.all(np.isfinite(t)) and np.all(rates >= 0)
        if done.any() and n:
            end = np.max((finish - sc["latency"])[done])
            span = np.diff(np.append(t, max(end, t[-1])))
            sent = (np.where(np.isfinite(rates), rates, 0.0) * span[:, None]).sum(axis=0)
            inst = np.isinf(rates).any(axis=0)  # linkless uncapped: instantaneous
            chk = done & ~inst
            # The event times resolve a span only to the float64 spacing of the clock:
            # a flow that starts late (after 1e12 bytes at 1 kB/s, t ~ 1e9 s) and lasts
            # less than that spacing integrates to 0 or a few spacings' worth of bytes.
            clock = 4.0 * np.spacing(max(end, t[-1]))
            peak = np.where(np.isfinite(rates), rates, 0.0).max(axis=0)
            err = np.abs(sent - sc["size"])
            tol = 1e-6 * sc["size"] + 1e-9 * sc["size"].max() + clock * peak
            assert np.all(err[chk] <= tol[chk]), (sent[chk], sc["size"][chk], tol[chk])
    else:
        # float32: a flow the x64 analysis calls blocked must not finish.
        assert not np.any(done & blocked)


@FAST
@given(sc=scenarios())
def test_simulate_flows_random(sc):
    _flows_case(sc, x64=False)


@FAST
@given(sc=scenarios())
def test_simulate_flows_random_x64_oracle(x64, sc):
    _flows_case(sc, x64=True)


@FAST
@given(sc=scenarios(), dt=st.sampled_from([1e-9, 1e-6, 1e-3, 1.0, 1e3]))
def test_simulate_flows_fixed_step_random(sc, dt):
    res = fj.simulate_flows_fixed_step(_incidence(sc["link"], sc["weight"]), sc["capacity"],
                                       sc["arrival"], sc["size"], dt=dt, n_steps=32,
                                       **_sim_kwargs(sc))
    start = _finite_ok(res.start, "start")
    finish = _finite_ok(res.finish, "finish")
    done = np.isfinite(finish)
    assert bool(res.stalled) == (not done.all())
    assert np.all(finish[done] >= sc["arrival"][done] * (1 - 1e-5))
    assert np.all(finish[done] >= start[done] * (1 - 1e-5) - 1e-30)
    assert np.all(finish[done] <= 32 * dt * (1 + 1e-5) + sc["latency"][done])
    A = _dense(sc["link"], sc["weight"])
    dead = ((A > 0) & (sc["capacity"][:, None] <= 0)).any(axis=0) & (sc["size"] > 0)
    if sc["demand"] is not None:
        dead |= (sc["demand"] <= 0) & (sc["size"] > 0)
    assert not np.any(done & dead)


@FAST
@given(sc=scenarios(), which=st.sampled_from(CORRUPTIONS), seed=st.integers(0, 99))
def test_simulate_flows_rejects_bad_input(sc, which, seed):
    bad = _corrupt(sc, which, np.random.default_rng(seed))
    with pytest.raises(ValueError):
        fj.simulate_flows(_incidence(bad["link"], bad["weight"]), bad["capacity"],
                          bad["arrival"], bad["size"], **_sim_kwargs(bad))


def _raw_incidence(link, flow, weight, n_links=2, n_flows=1):
    return Incidence(np.asarray(link, np.int32), np.asarray(flow, np.int32),
                     np.asarray(weight, np.float32), n_links, n_flows, None)


BAD_INCIDENCES = [
    ("weight", _raw_incidence([0, 1], [0, 0], [np.nan, 1.0])),
    ("weight", _raw_incidence([0, 1], [0, 0], [-1.0, 1.0])),
    ("weight", _raw_incidence([0, 1], [0, 0], [np.inf, 1.0])),
    ("link_idx", _raw_incidence([0, 5], [0, 0], [1.0, 1.0])),
    ("link_idx", _raw_incidence([0, -1], [0, 0], [1.0, 1.0])),
    ("flow_idx", _raw_incidence([0, 1], [0, 3], [1.0, 1.0])),
]


@pytest.mark.parametrize("field,inc", BAD_INCIDENCES)
def test_simulators_reject_bad_incidence_entries(field, inc):
    # Found by this sweep: an Incidence built by hand was used unchecked (NaN weights
    # and out-of-range links silently ignored); now a ValueError naming the field.
    with pytest.raises(ValueError, match=field):
        fj.simulate_flows(inc, np.ones(2), np.zeros(1), np.ones(1))
    with pytest.raises(ValueError, match=field):
        fj.simulate_fluid(inc, np.ones(2), np.ones(1), dt=1e-6, n_steps=2)


@pytest.mark.parametrize("field,inc", BAD_INCIDENCES[:4])
def test_max_min_fair_rejects_bad_incidence_entries(field, inc):
    with pytest.raises(ValueError, match=field):
        fj.max_min_fair(inc, np.ones(2))


@pytest.mark.parametrize("kw,match", [
    (dict(max_events=0), "max_events"), (dict(max_events=-3), "max_events"),
    (dict(max_events=2.5), "max_events"), (dict(max_active=0), "max_active"),
])
def test_simulate_flows_rejects_bad_budgets(kw, match):
    with pytest.raises(ValueError, match=match):
        fj.simulate_flows(np.ones((2, 1)), np.ones(2), np.zeros(1), np.ones(1), **kw)


def test_simulate_flows_names_unconvertible_argument():
    with pytest.raises(ValueError, match="size"):
        fj.simulate_flows(np.ones((2, 2)), np.ones(2), np.zeros(2), np.array(["a", "b"]))


def test_simulate_flows_no_flows():
    inc = Incidence(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32),
                    4, 0, 1)
    # Found by this sweep: used to crash inside the jitted loop (gather on an empty
    # flow table); now an empty result.
    r = fj.simulate_flows(inc, np.ones(4), np.zeros(0), np.zeros(0), record_rates=True)
    assert np.asarray(r.finish).shape == (0,) and not bool(r.stalled)
    assert int(r.n_events) == 0 and np.asarray(r.rate_history).shape[1] == 0
    rb = fj.simulate_flows_batched(inc, np.ones((3, 4)), np.zeros((3, 0)), np.zeros((3, 0)))
    assert np.asarray(rb.finish).shape == (3, 0) and not np.any(np.asarray(rb.stalled))


def test_simulate_fluid_no_flows():
    inc = Incidence(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32),
                    4, 0, 1)
    r = fj.simulate_fluid(inc, np.ones(4), np.zeros(0), dt=1e-6, n_steps=4)
    assert np.asarray(r.finish).shape == (0,) and not bool(r.info.stalled)


# ------------------------------------------------------------------ simulate_fluid
N_STEPS = 64
#: Delay-line length (steps) of the slow sweep's runs: the longest feedback delay its
#: draws can make, base RTT 2 x 10 us (``latency`` <= 1e-5 s, no link latency) at the
#: smallest dt, 1 ns.
DELAY_STEPS = 20_016


@st.composite
def fluid_params(draw):
    return dict(dt=draw(st.sampled_from([1e-9, 1e-7, 1e-6, 1e-5, 1e-4])),
                buffer=draw(st.sampled_from([0.0, 1.0, 1e3, 1e5, 1e9, np.inf])))


def _fluid_inputs(sc):
    """Adds a zero-byte flow over R_PAD padding links: every scenario then has the same
    hop-table width (one compile per law / flow control)."""
    link = np.concatenate([sc["link"], np.arange(L_PAD - R_PAD, L_PAD)[None]], axis=0)
    weight = np.concatenate([sc["weight"], np.ones((1, R_PAD))], axis=0)
    pad = lambda a, v: np.append(a, v)  # noqa: E731
    deps = np.concatenate([sc["deps"], np.full((1, 2), -1)], axis=0)
    return (_incidence(link, weight), pad(sc["size"], 0.0), pad(sc["arrival"], 0.0), deps,
            pad(sc["delay"], 0.0))


def _fluid_case(sc, fp, law, fc, with_latency=False):
    inc, size, arrival, deps, delay = _fluid_inputs(sc)
    # Latency sets the feedback delay line's length (a static shape): slow variant only,
    # with every example's lines DELAY_STEPS long (no result changes,
    # tests/dynamics/test_delay_lines.py), so that the examples share compiled programs.
    latency = np.append(sc["latency"], 0.0) if with_latency else None
    try:
        res = fj.simulate_fluid(inc, sc["capacity"], size, dt=fp["dt"], n_steps=N_STEPS,
                                law=law, flow_control=fc, buffer=fp["buffer"],
                                arrival=arrival, deps=deps, delay=delay, latency=latency,
                                save_every=16,
                                delay_steps=DELAY_STEPS if with_latency else None)
    except ValueError as e:  # a clear, argument-naming rejection is an accepted outcome
        # (a sprayed incidence without routing= is refused: one path per flow)
        assert "buffer" in str(e) or "dt" in str(e) or "routing=None" in str(e), str(e)
        return
    finish = _finite_ok(res.finish, "finish")
    start = _finite_ok(res.start, "start")
    sent, delivered, dropped, queued, flying = (
        _finite_ok(getattr(res, k), k) for k in
        ("sent", "delivered", "dropped", "queued", "in_flight"))
    for name, x in (("sent", sent), ("delivered", delivered), ("dropped", dropped),
                    ("queued", queued), ("in_flight", flying)):
        assert np.all(np.isfinite(x)), f"{name} not finite"
        assert np.all(x >= -1e-6 * np.maximum(size, 1.0)), f"{name} negative"
    lq = _finite_ok(res.link_queue, "link_queue")
    assert np.all(np.isfinite(lq)) and np.all(lq >= -1e-3)
    scale = np.maximum(sent, size) * 1e-4 + 1e-3
    np.testing.assert_array_less(np.abs(sent - delivered - flying - queued - dropped), scale)
    assert np.all(delivered <= size * (1 + 1e-4) + 1e-3)
    done = np.isfinite(finish)
    assert bool(res.info.stalled) == (not done.all())
    # a finished flow's last bytes may still be on the wire (they arrive at ``finish``)
    assert np.all(delivered[done] + flying[done] >= size[done] * (1 - 10 * COMPLETION_RTOL[delivered.dtype])
                  - 1e-3)
    # Found by this sweep: a zero-byte flow released inside a step used to finish at the
    # step's start, before its own start.
    assert np.all(finish[done] >= start[done] * (1 - 1e-6) - 1e-12)
    assert np.all(start[np.isfinite(start)] >= arrival[np.isfinite(start)] - 1e-9)
    tr = res.trajectory
    for name in ("rate", "throughput", "queue", "usable", "mark"):
        x = _finite_ok(getattr(tr, name), f"trajectory.{name}")
        assert np.all(np.isfinite(x)), f"trajectory.{name} not finite"
        assert np.all(x >= -1e-3), f"trajectory.{name} negative"
    import jax
    for leaf in jax.tree_util.tree_leaves(res.law_state):
        assert not np.any(np.isnan(np.asarray(leaf, np.float64))), "law state has NaN"
    assert np.isfinite(float(res.info.max_residual))


LAWS_FC = [(law, fc) for law in ("none", "dcqcn") for fc in ("none", "pfc", "credit")]


# Default run: one combination (a fluid compile costs ~5 s on 2 cores); the slow variant
# below runs all six, with latencies.
@pytest.mark.parametrize("law,fc", [("dcqcn", "credit")])
@FLUID_FAST
@given(sc=scenarios(), fp=fluid_params())
def test_simulate_fluid_random(law, fc, sc, fp):
    _fluid_case(sc, fp, law, fc)


@FAST
@given(sc=scenarios(), which=st.sampled_from(
    [c for c in CORRUPTIONS if c[0] not in ("demand", "latency")]), seed=st.integers(0, 99))
def test_simulate_fluid_rejects_bad_input(sc, which, seed):
    bad = _corrupt(sc, which, np.random.default_rng(seed))
    with pytest.raises(ValueError):
        fj.simulate_fluid(_incidence(bad["link"], bad["weight"]), bad["capacity"],
                          bad["size"], dt=1e-6, n_steps=N_STEPS, arrival=bad["arrival"],
                          deps=bad["deps"], delay=bad["delay"])


@pytest.mark.parametrize("dt", [0.0, -1e-6, np.nan, np.inf])
def test_simulate_fluid_rejects_bad_dt(dt):
    inc = _incidence(np.zeros((1, R_PAD), np.int32), np.r_[1.0, np.zeros(R_PAD - 1)][None])
    with pytest.raises(ValueError, match="dt"):
        fj.simulate_fluid(inc, np.ones(L_PAD), np.ones(1), dt=dt, n_steps=4)


# ------------------------------------------------------------------ slow variants
@pytest.mark.slow
@SLOW
@given(sc=scenarios())
def test_max_min_fair_random_slow(x64, sc):
    _max_min_case(sc, x64=True)


@pytest.mark.slow
@SLOW
@given(sc=scenarios())
def test_simulate_flows_random_slow(x64, sc):
    _flows_case(sc, x64=True)


@pytest.mark.slow
@pytest.mark.parametrize("law,fc", LAWS_FC)
@FLUID_SLOW
@given(sc=scenarios(), fp=fluid_params())
def test_simulate_fluid_random_slow(law, fc, sc, fp):
    _fluid_case(sc, fp, law, fc, with_latency=True)
