"""Stragglers (``fabric_jax.workloads.stragglers``): closed forms on a ring all-reduce,
isolation of independent jobs, equivalences between the ways of slowing a rank, and the
``experiments/stragglers.py`` sweep.

Setting of the closed forms: ``n`` ranks on one leaf of a leaf-spine, every access link
``B`` bytes/s, a ring all-reduce of ``S`` bytes with in-order sends per channel.  Each
ring step every rank sends ``S/n`` to its successor over its own uplink and the
successor's downlink: one flow per link, so without stragglers a step takes
``S/(n B)`` and the collective ``T0 = 2 (n-1)/n * S/B``.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import fabric_jax as fj
from fabric_jax.workloads import (
    all_to_all, concat, in_order_sends, nic_capacity, poisson_background, ring_all_reduce,
    scale_compute, slow_compute, slow_compute_spec, slow_nics, straggler_impact,
    training_step,
)
from fabric_jax.workloads.stragglers import host_links

from experiments import stragglers

N = 6                      # ranks
S = 6e6                    # bytes
GBPS = 80.0                # 10 GB/s access links
RTOL = 1e-9


def _setup(n_leaves=2, n=N):
    topo = fj.leaf_spine(n_leaves, 2, n, link_gbps=GBPS)
    return topo, float(topo.capacity[0])


def _run(topo, w, capacity=None):
    paths = fj.shortest_paths(topo, w.src, w.dst)
    inc = fj.Incidence.from_paths(paths, n_links=topo.n_links)
    cap = topo.capacity if capacity is None else capacity
    r = fj.simulate_flows(inc, cap, w.arrival, w.size, deps=w.deps, delay=w.delay)
    assert not bool(r.stalled)
    return np.asarray(r.finish, np.float64)


# ------------------------------------------------------------------ send order
def test_in_order_sends_ring_and_all_to_all():
    w = ring_all_reduce(np.arange(N), S)
    o = in_order_sends(w)
    assert o.n_flows == w.n_flows and o.max_deps == w.max_deps + 1
    np.testing.assert_array_equal(o.deps[:, :-1], w.deps)
    # Flow s*n + i (step s, rank i) now also waits for flow (s-1)*n + i.
    f = np.arange(w.n_flows)
    expect = np.where(f >= N, f - N, -1)
    np.testing.assert_array_equal(o.deps[:, -1], expect)
    # All-to-all: one flow per channel, nothing to order; background: untouched.
    a = concat(all_to_all(np.arange(4), 4e6), poisson_background(8, 0.5, 1e9, "web_search",
                                                                  1e-3, seed=1))
    assert np.all(in_order_sends(a).deps[:, -1] == -1)


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("factor", [2.0, 3.0])
def test_slow_nic_slows_every_ring_step(x64, factor):
    # A NIC at B/f: every ring step pushes S/n through the straggler's uplink and
    # downlink, one step after another (in order), so the whole collective runs at the
    # straggler's speed: T = 2 (n-1)/n * S / (B/f) = f * T0.
    topo, B = _setup()
    w = in_order_sends(ring_all_reduce(np.arange(N), S))
    f0 = _run(topo, w)
    T0 = 2 * (N - 1) / N * S / B
    assert f0.max() == pytest.approx(T0, rel=RTOL)
    f1 = _run(slow_nics(topo, [2], factor), w)
    assert f1.max() == pytest.approx(2 * (N - 1) / N * S / (B / factor), rel=RTOL)
    imp = straggler_impact(w, f1, f0)
    assert imp.slowdown == pytest.approx(factor, rel=RTOL)
    assert imp.ranks_delayed == N and imp.blast_radius == 1.0
    assert imp.gpu_seconds_lost == pytest.approx(N * (factor - 1) * T0, rel=RTOL)
    np.testing.assert_array_equal(imp.hosts, np.arange(N))


def test_slow_nic_lower_bound_without_send_order(x64):
    # Without in-order sends the DAG differs but the slow NIC must still carry
    # 2 (n-1)/n * S bytes at B/2: T >= 2 T0 (byte-count bound, any schedule).
    topo, B = _setup()
    w = ring_all_reduce(np.arange(N), S)
    f1 = _run(slow_nics(topo, [2], 2.0), w)
    assert f1.max() >= 2 * (2 * (N - 1) / N * S / B) * (1 - RTOL)


@pytest.mark.parametrize("d_chunks", [0.3, 1.0, 5.0])
def test_late_first_send_delays_the_whole_ring_by_d(x64, d_chunks):
    # Rank 2 enters the collective d late: its step-0 send starts at d, and the
    # dependency chain through it (step s on rank 2+s) ends the collective d late.
    # Every rank's last flow moves by exactly d: blast radius 1, n*d GPU-seconds lost.
    topo, B = _setup()
    d = d_chunks * S / (N * B)
    w = in_order_sends(ring_all_reduce(np.arange(N), S))
    f0 = _run(topo, w)
    ws = slow_compute(w, [2], extra=d)
    np.testing.assert_array_equal(ws.arrival[w.src == 2], d)
    np.testing.assert_array_equal(ws.arrival[w.src != 2], 0.0)
    f1 = _run(topo, ws)
    assert f1.max() - f0.max() == pytest.approx(d, rel=1e-7)
    imp = straggler_impact(ws, f1, f0, baseline_workload=w)
    np.testing.assert_allclose(imp.rank_delay, d, rtol=1e-7)
    assert imp.blast_radius == 1.0
    assert imp.gpu_seconds_lost == pytest.approx(N * d, rel=1e-7)


@pytest.mark.parametrize("kind", ["nic", "compute"])
def test_straggler_in_one_job_does_not_slow_an_independent_job(x64, kind):
    # Job a on leaf 0, job b on leaf 1: their rings share no link, so b's finish times
    # are the same with or without a straggler in a (up to round-off: a's events split
    # the event engine's time steps differently).
    topo, B = _setup()
    wa = in_order_sends(ring_all_reduce(np.arange(N), S, job="a"))
    wb = in_order_sends(ring_all_reduce(np.arange(N, 2 * N), S, job="b"))
    w = concat(wa, wb)
    f0 = _run(topo, w)
    if kind == "nic":
        ws, f1 = w, _run(topo, w, capacity=nic_capacity(topo, [1], 2.0))
    else:
        ws = slow_compute(w, [1], extra=S / (N * B))
        f1 = _run(topo, ws)
    b = w.job == w.job_names.index("b")
    np.testing.assert_allclose(f1[b], f0[b], rtol=1e-12)
    ib = straggler_impact(ws, f1, f0, baseline_workload=w, job="b")
    assert ib.slowdown == pytest.approx(1.0, rel=1e-12) and ib.ranks_delayed == 0
    assert abs(ib.gpu_seconds_lost) < 1e-12 * N * ib.baseline_step_time
    ia = straggler_impact(ws, f1, f0, baseline_workload=w, job="a")
    assert ia.slowdown > 1.0 and ia.ranks_delayed == N


# ------------------------------------------------------------------ training steps
def test_slow_compute_equals_rebuilt_training_step():
    hosts = np.arange(10, 10 + N)
    ar = in_order_sends(ring_all_reduce(hosts, S))
    comp = np.linspace(1e-3, 2e-3, N)
    for overlap in (0.0, 0.4):
        w, spec = training_step(hosts, comp, [ar], n_steps=3, overlap=overlap, arrival=0.5)
        w2, spec2 = training_step(hosts, scale_compute(comp, [3], 1.7), [ar], n_steps=3,
                                  overlap=overlap, arrival=0.5)
        ws = slow_compute(w, hosts[3], 1.7, start=spec.start)
        np.testing.assert_allclose(ws.arrival, w2.arrival, rtol=1e-15)
        np.testing.assert_allclose(ws.delay, w2.delay, rtol=1e-15)
        np.testing.assert_array_equal(ws.deps, w2.deps)
        np.testing.assert_array_equal(slow_compute_spec(spec, hosts[3], 1.7).compute_time,
                                      spec2.compute_time)


def test_compute_straggler_step_time_closed_form(x64):
    # One step, no overlap, compute C on every rank but C*f on rank 2: the others are
    # ready at C, rank 2 at f C; the ring then finishes (f - 1) C after its no-straggler
    # end C + T0 (as in the late-first-send case): step = f C + T0.
    topo, B = _setup()
    hosts = np.arange(N)
    C, f = 1e-3, 1.5
    ar = in_order_sends(ring_all_reduce(hosts, S))
    w, spec = training_step(hosts, C, [ar])
    ws, specs = slow_compute(w, [2], f), slow_compute_spec(spec, [2], f)
    f0, f1 = _run(topo, w), _run(topo, ws)
    T0 = 2 * (N - 1) / N * S / B
    imp = straggler_impact(ws, f1, f0, baseline_workload=w, spec=specs, baseline_spec=spec)
    assert imp.baseline_step_time == pytest.approx(C + T0, rel=1e-9)
    assert imp.step_time == pytest.approx(f * C + T0, rel=1e-9)
    assert imp.gpu_seconds_lost == pytest.approx(N * (f - 1) * C, rel=1e-7)


# ------------------------------------------------------------------ helpers & errors
def test_nic_helpers_agree():
    topo, B = _setup()
    links = host_links(topo, [0, 3])
    assert links.size == 4  # uplink and downlink of each host
    assert set(topo.link_src[links]) | set(topo.link_dst[links]) >= set(topo.hosts[[0, 3]])
    cap = nic_capacity(topo, [0, 3], 4.0)
    np.testing.assert_array_equal(cap, slow_nics(topo, [0, 3], 4.0).capacity)
    np.testing.assert_allclose(cap[links], B / 4)
    other = np.setdiff1d(np.arange(topo.n_links), links)
    np.testing.assert_array_equal(cap[other], topo.capacity[other])


def test_scale_compute_shapes():
    c = scale_compute(2.0, [1], 3.0, n_ranks=4)
    np.testing.assert_array_equal(c, [2.0, 6.0, 2.0, 2.0])
    c = scale_compute([1.0, 2.0], 1, 2.0, n_steps=3)
    assert c.shape == (3, 2) and np.all(c[:, 1] == 4.0) and np.all(c[:, 0] == 1.0)


@pytest.mark.parametrize("call,match", [
    (lambda w, t: slow_compute(w, [1], 0.0), "factor"),
    (lambda w, t: slow_compute(w, [1], float("nan")), "factor"),
    (lambda w, t: slow_compute(w, [1], 2.0, extra=-1.0), "extra"),
    (lambda w, t: slow_compute(w, [-1], 2.0), "hosts"),
    (lambda w, t: slow_compute(w, [1], 2.0, job="nope"), "job"),
    (lambda w, t: slow_compute(w.with_arrival_offset(1.0), [1], 2.0, start=2.0), "start"),
    (lambda w, t: slow_nics(t, [1], -2.0), "factor"),
    (lambda w, t: scale_compute(1.0, [0], 2.0), "n_ranks"),
    (lambda w, t: scale_compute([1.0, 1.0], [5], 2.0), "ranks"),
    (lambda w, t: straggler_impact(w, np.zeros(3), np.zeros(w.n_flows)), "finish"),
    (lambda w, t: straggler_impact(w, np.full(w.n_flows, np.inf), np.zeros(w.n_flows)),
     "never finished"),
    (lambda w, t: straggler_impact(w, np.ones(w.n_flows), np.ones(w.n_flows),
                                   hosts=[0, 1, 40]), "hosts"),
    (lambda w, t: straggler_impact(w, np.ones(w.n_flows), np.ones(w.n_flows),
                                   baseline_workload=ring_all_reduce([0, 2, 1, 3, 4, 5], S)),
     "baseline_workload"),
])
def test_bad_input_raises(call, match):
    w = ring_all_reduce(np.arange(N), S)
    topo, _ = _setup()
    with pytest.raises(ValueError, match=match):
        call(w, topo)


# ------------------------------------------------------------------ experiment
@pytest.mark.slow  # experiment smoke test; the kernel tests above stay in the default run
def test_stragglers_experiment_quick(tmp_path):
    # The data-parallel job of the script, one step, no overlap (see its docstring):
    #   compute straggler: step = f C + T_comm,    NIC straggler: step = C + f T_comm
    # with T_comm the simulated baseline communication (float32 run: rtol 1e-4).
    # GPU-hours lost are 0 at f = 1 and grow with f; every rank waits.
    out = tmp_path / "s.json"
    res = stragglers.main(["--quick", "--json", str(out), "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    assert data["factors"] == pytest.approx(res["factors"])
    C, T = data["compute_time"], data["baseline_comm_time"]
    assert T > 0 and C > 0
    for kind, model in (("compute", lambda f: f * C + T), ("nic", lambda f: C + f * T)):
        rows = data[kind]
        steps = np.array([r["step_time"] for r in rows])
        lost = np.array([r["gpu_hours_lost"] for r in rows])
        np.testing.assert_allclose(steps, [model(f) for f in data["factors"]], rtol=1e-4)
        assert lost[0] == pytest.approx(0.0, abs=1e-9)
        assert np.all(np.diff(steps) > 0) and np.all(np.diff(lost) > 0)
        assert all(r["blast_radius"] == 1.0 for r in rows[1:])
    assert (tmp_path / "stragglers.png").is_file()
