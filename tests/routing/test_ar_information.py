"""What adaptive routing knows and when: local-only InfiniBand AR, Spectrum-X telemetry
with an information delay, flowlet switching that moves only at gaps (issue 14)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax.paths import shortest_paths
from fabric_jax.routing import (PACKET_DECISION_US, RoutingView, TELEMETRY_SLOTS, adaptive_params,
                                decision_hops, delayed, flowlet_params, get_policy, ib_ar_params,
                                make_routing, spectrum_x_ar_params)
from fabric_jax.topology import fat_tree, leaf_spine

from tests.helpers import slow_except

C = 50e9  # 400 Gb/s in bytes/s


def _two_leaves(spines=4):
    """Host i of leaf 0 -> host i of leaf 1, one flow per host, ``spines`` paths each."""
    topo = leaf_spine(2, spines, spines)
    src = np.arange(spines)
    ps = shortest_paths(topo, src, spines + src, max_paths=spines)
    return topo, ps


def _view(topo, *, load=None, queue=None, flow_rate=None, n_flows, t=0.0):
    L = topo.n_links
    return RoutingView(queue=jnp.asarray(np.zeros(L) if queue is None else queue, jnp.float32),
                       capacity=jnp.asarray(topo.capacity, jnp.float32),
                       load=jnp.asarray(np.zeros(L) if load is None else load, jnp.float32),
                       mark=jnp.zeros(L, jnp.float32),
                       flow_rate=jnp.asarray(np.zeros(n_flows) if flow_rate is None
                                             else flow_rate, jnp.float32),
                       active=jnp.ones(n_flows, bool), t=jnp.asarray(t, jnp.float32))


def _run(policy, params, ps, view_at, dt, n_steps):
    """Steps a policy with a view that depends on time; returns splits [steps+1, ...]."""
    r = make_routing(policy, ps, params, seed=0)
    step = jax.jit(r.policy.step)
    st, out = r.state, [np.asarray(r.state.split)]
    for k in range(n_steps):
        st = step(st, view_at(k * dt), jnp.asarray(dt, jnp.float32), r.params)
        out.append(np.asarray(st.split))
    return np.stack(out)


def _remote_hot(topo, spines):
    """Spine 0 -> leaf 1 saturated (load 2 C, 200 KB queued); every other link idle."""
    hot = topo.link_index("spine0", "leaf1")
    load, queue = np.zeros(topo.n_links), np.zeros(topo.n_links)
    load[hot], queue[hot] = 2 * C, 2e5
    return hot, load, queue


def test_decision_hops_leaf_spine_and_fat_tree():
    # Leaf-spine: only the leaf uplink (hop 1) is chosen by a switch; the NIC link, the
    # spine downlink and the last hop follow.  Fat-tree k=4 between pods: the edge
    # uplink (hop 1) and the aggregation uplink (hop 2) are chosen; the core and
    # aggregation downlinks (hops 3, 4) and the last hop are not.
    _, ps = _two_leaves(4)
    d = decision_hops(ps)
    assert d[:, :, 1].all() and not d[:, :, [0, 2, 3]].any()
    topo = fat_tree(4)
    ps = shortest_paths(topo, np.array([0, 1]), np.array([15, 12]), max_paths=4)
    d = decision_hops(ps)
    assert ps.links.shape[2] == 6
    assert d[:, :, 1].all() and d[:, :, 2].all()
    assert not d[:, :, [0, 3, 4, 5]].any()


def test_local_ar_cannot_see_congestion_two_hops_away():
    # Only spine0 -> leaf1 is congested.  ib_ar's leaf sees its own (idle, equal)
    # uplinks: the split stays exactly even for the whole run.  spectrum_x_ar keeps
    # the even split until the telemetry is info_delay old, then leaves spine 0.
    spines, dt = 4, 0.5e-6
    topo, ps = _two_leaves(spines)
    hot, load, queue = _remote_hot(topo, spines)
    view = lambda t: _view(topo, load=load, queue=queue, n_flows=ps.n_pairs, t=t)  # noqa: E731
    on_hot = ps.links[:, :, 2] == hot                       # [flows, paths]
    n = 40
    ib = _run("ib_ar", None, ps, view, dt, n)
    np.testing.assert_allclose(ib, 1.0 / spines, atol=1e-6)
    delay = spectrum_x_ar_params().info_delay
    sx = _run("spectrum_x_ar", None, ps, view, dt, n)
    hot_share = np.sum(np.where(on_hot[None], sx, 0.0), axis=2)[:, 0]   # flow 0
    t_after = np.arange(n + 1) * dt                         # time after each step
    before = t_after < float(delay)                         # info not yet old enough
    np.testing.assert_allclose(hot_share[before], 1.0 / spines, atol=1e-6)
    assert hot_share[-1] < 0.02
    # a *local* hot spot (leaf0 -> spine0 uplink) is seen by both, at once
    up = topo.link_index("leaf0", "spine0")
    lload = np.zeros(topo.n_links)
    lload[up] = 2 * C
    lview = _view(topo, load=lload, n_flows=ps.n_pairs)
    on_up = ps.links[:, :, 1] == up
    for pol in ("ib_ar", "spectrum_x_ar"):
        s = _run(pol, None, ps, lambda t: lview, dt, 4)
        assert np.sum(np.where(on_up, s[1], 0.0), axis=1).max() < 1.0 / spines - 0.05


@pytest.mark.parametrize("delay_us", [0.0, 3.0, 12.0])
def test_information_delay_sets_the_reaction_time(delay_us):
    # Remote hot spot present from t = 0.  The split first moves at the first step
    # whose telemetry is at least info_delay old: reaction time in
    # [D, D (1 + 1/(slots - 2)) + dt] (sampling period D/(slots - 2), one step of
    # granularity).  With D = 0 it moves in the first step.
    spines, dt = 4, 0.5e-6
    topo, ps = _two_leaves(spines)
    hot, load, queue = _remote_hot(topo, spines)
    view_at = lambda t: _view(topo, load=load, queue=queue, n_flows=ps.n_pairs, t=t)  # noqa: E731
    params = spectrum_x_ar_params(info_delay_us=delay_us)
    n = int((delay_us * 1.2 + 4) * 1e-6 / dt)
    s = _run("spectrum_x_ar", params, ps, view_at, dt, n)
    moved = np.abs(s[1:] - 0.25).max(axis=(1, 2)) > 1e-4
    k = int(np.argmax(moved))                               # step index whose view moved it
    assert moved.any()
    t_react = k * dt                                        # view time of that step
    D = delay_us * 1e-6
    assert D - 1e-12 <= t_react <= D * (1 + 1 / (TELEMETRY_SLOTS - 2)) + dt + 1e-12


def test_adaptive_split_matches_closed_form_relaxation():
    # No delay, constant view: every step moves the split a fraction
    # g = 1 - (1 - gain)^(dt / decision_interval) towards softmax(-cost / T), so
    # s_n = target + (s_0 - target) (1 - g)^n (NumPy oracle on the cost).
    spines, dt, n = 4, 1e-6, 6
    topo, ps = _two_leaves(spines)
    hot, load, queue = _remote_hot(topo, spines)
    p = adaptive_params(visibility="global")
    view = _view(topo, load=load, queue=queue, n_flows=ps.n_pairs)
    s = _run("adaptive", p, ps, lambda t: view, dt, n)
    tau, T = float(p.queue_tau), float(p.temperature)
    per_link = queue / (topo.capacity * tau) + load / topo.capacity
    cost = per_link[ps.links[0]].sum(axis=1)                # flow 0, every hop
    target = np.exp(-(cost - cost.min()) / T)
    target /= target.sum()
    g = 1 - (1 - float(p.gain)) ** (dt / float(p.decision_interval))
    expect = target + (0.25 - target) * (1 - g) ** np.arange(n + 1)[:, None]
    np.testing.assert_allclose(s[:, 0, :], expect, rtol=2e-4, atol=1e-6)


def test_delay_line_returns_the_observation_info_delay_old():
    # Observed value = its own time stamp; what is known at t must have been observed
    # in [t - D (1 + 1/(slots - 2)) - dt, t - D]; before t = D nothing is known (0).
    dt, D = 0.3e-6, 5e-6
    aux = {"hist": jnp.zeros((TELEMETRY_SLOTS, 1)), "hist_t": jnp.full((TELEMETRY_SLOTS,), -1e30),
           "slot": jnp.asarray(0, jnp.int32)}
    f = jax.jit(delayed)
    for k in range(120):
        t = k * dt
        aux, known = f(aux, jnp.asarray([t + 1e-9], jnp.float32), jnp.asarray(t, jnp.float32),
                       jnp.asarray(dt, jnp.float32), jnp.asarray(D, jnp.float32))
        kv = float(known[0])
        if t < D - 1e-12:
            assert kv == 0.0
        else:
            assert t - D * (1 + 1 / (TELEMETRY_SLOTS - 2)) - dt - 1e-8 <= kv <= t - D + 1e-8


def test_flowlet_does_not_move_a_flow_without_gaps():
    # A flow that always sends at line rate never ends a flowlet: its hashed path is
    # kept however congested it is (only a gap >= the timeout lets it move).  After a
    # gap longer than the timeout it moves to the least loaded path.
    spines, dt = 4, 1e-6
    topo, ps = _two_leaves(spines)
    params = flowlet_params(gap_us=20.0, info_delay_us=0.0)
    r = make_routing("flowlet", ps, params, seed=0)
    home = np.asarray(r.split).argmax(axis=1)
    load = np.zeros(topo.n_links)
    load[ps.links[np.arange(ps.n_pairs), home, 1]] = 5 * C   # every flow's own uplink hot
    busy = _view(topo, load=load, flow_rate=np.full(ps.n_pairs, C), n_flows=ps.n_pairs)
    s = _run("flowlet", params, ps, lambda t: busy, dt, 60)
    np.testing.assert_array_equal(s, np.broadcast_to(s[0], s.shape))
    # gap: idle for 25 us (> 20 us timeout), then sending again -> moves off `home`
    idle = _view(topo, load=load, flow_rate=np.zeros(ps.n_pairs), n_flows=ps.n_pairs)
    s2 = _run("flowlet", params, ps, lambda t: idle if t < 25e-6 else busy, dt, 30)
    assert np.all(s2[25].argmax(axis=1) == home)              # not while idle
    assert np.all(s2[-1].argmax(axis=1) != home)
    # a short gap (10 us < timeout) does not move it
    s3 = _run("flowlet", params, ps, lambda t: idle if t < 10e-6 else busy, dt, 30)
    assert np.all(s3[-1].argmax(axis=1) == home)


@pytest.mark.parametrize("name", slow_except(["ib_ar", "spectrum_x_ar", "flowlet", "adaptive"],
                                            keep=["spectrum_x_ar", "flowlet"]))
def test_splits_stay_distributions_and_scan_jit_equals_eager(name):
    # 30 steps of random views (load, queue, flow rates, one link failing mid-way) in a
    # jitted lax.scan: every split is >= 0, 0 on padding, rows sum to 1, no NaN, and
    # the scan equals a Python loop over the jitted step (float32 round-off through a
    # softmin at temperature 0.05 amplifies differences of fusion order: atol 1e-4).
    topo = fat_tree(4)
    rng = np.random.default_rng(0)
    src = rng.integers(0, 16, 12)
    dst = (src + rng.integers(1, 16, 12)) % 16               # never src itself
    ps = shortest_paths(topo, src, dst, max_paths=4)
    r = make_routing(name, ps, seed=1)
    L, F = topo.n_links, ps.n_pairs
    keys = jax.random.split(jax.random.PRNGKey(0), 30)

    def view(k, i):
        k1, k2, k3 = jax.random.split(k, 3)
        cap = jnp.asarray(topo.capacity, jnp.float32)
        cap = jnp.where((jnp.arange(L) == 20) & (i >= 15), 0.0, cap)
        return RoutingView(queue=jax.random.uniform(k1, (L,)) * 3e5, capacity=cap,
                           load=jax.random.uniform(k2, (L,)) * 2 * C,
                           mark=jnp.zeros(L), flow_rate=jax.random.uniform(k3, (F,)) * C,
                           active=jnp.ones(F, bool), t=jnp.asarray(i, jnp.float32) * 1e-6)

    def body(st, ki):
        k, i = ki
        st = r.policy.step(st, view(k, i), jnp.asarray(1e-6, jnp.float32), r.params)
        return st, st.split

    _, splits = jax.jit(lambda st: jax.lax.scan(body, st, (keys, jnp.arange(30))))(r.state)
    splits = np.asarray(splits)
    assert np.all(np.isfinite(splits)) and np.all(splits >= 0)
    assert np.all(splits[:, ~ps.path_mask] == 0)
    np.testing.assert_allclose(splits.sum(axis=2), 1.0, atol=1e-5)
    st, loop = r.state, []
    step = jax.jit(r.policy.step)
    for i in range(30):
        st = step(st, view(keys[i], i), jnp.asarray(1e-6, jnp.float32), r.params)
        loop.append(np.asarray(st.split))
    np.testing.assert_allclose(splits, np.stack(loop), rtol=1e-4, atol=1e-4)


def test_defaults_state_granularity_and_delay_in_seconds():
    # The presets' parameters carry their decision granularity and information delay
    # (seconds): per-packet decisions for both AR policies (4 KiB at 400 Gb/s =
    # 81.92 ns), no delay and no remote information for InfiniBand, about one RTT for
    # Spectrum-X's telemetry, the CONGA flowlet timeout (500 us) for flowlets.
    ib, sx = get_policy("ib_ar").default_params(), get_policy("spectrum_x_ar").default_params()
    assert float(ib.decision_interval) == pytest.approx(4096 * 8 / 400e9, rel=1e-6)
    assert float(sx.decision_interval) == pytest.approx(PACKET_DECISION_US * 1e-6, rel=1e-6)
    assert float(ib.info_delay) == 0.0 and float(ib.remote_weight) == 0.0
    assert 1e-6 <= float(sx.info_delay) <= 10e-6 and float(sx.remote_weight) == 1.0
    fl = get_policy("flowlet").default_params()
    assert float(fl.gap) == pytest.approx(500e-6) and float(fl.info_delay) > 0
    assert float(ib_ar_params(info_delay_us=2.0).info_delay) == pytest.approx(2e-6)


@pytest.mark.parametrize("fn, kw, needle", [
    (adaptive_params, {"info_delay_us": -1.0}, "info_delay_us"),
    (adaptive_params, {"decision_interval_us": 0.0}, "decision_interval_us"),
    (adaptive_params, {"visibility": "remote"}, "visibility"),
    (flowlet_params, {"info_delay_us": float("nan")}, "info_delay_us"),
    (flowlet_params, {"gap_us": -5.0}, "gap_us"),
])
def test_bad_parameters_raise(fn, kw, needle):
    with pytest.raises(ValueError, match=needle):
        fn(**kw)


# ------------------------------------------------------------ fluid, end to end
def _experiment():
    from experiments import adaptive_routing as mod
    return mod


@functools.lru_cache(maxsize=None)   # the dt = 0.5 us runs serve two tests
def _remote_congestion(dt, policies=("ib_ar", "spectrum_x_ar")):
    """experiments/adaptive_routing.py "remote_congestion", 4 spines, 1 MB flows."""
    exp = _experiment()
    from fabric_jax.units import MB
    topo, base = exp.build(4, 0, 400.0)
    paths, arrival, sizes, rate, faults = exp.scenario(
        "remote_congestion", topo, base, 4, size=1 * MB, line=C, bg_load=0.75, fail_s=5e-6,
        move_s=10e-6)
    # the experiment's horizon (4 spines, --quick's 10 us move): at dt = 0.5 us the
    # programs of test_adaptive_routing_experiment_quick
    n_steps = exp.horizon_steps(4, 1 * MB / C, 10.0 * 1e-6, dt)
    kw = dict(dt=dt, n_steps=n_steps, seed=0, spines=4, line=C, slow_delay_us=40.0)
    out = {p: exp.run_one(p, topo, paths, arrival, sizes, rate, faults, **kw)[0]
           for p in policies}
    return out, sizes


@pytest.mark.slow
def test_fluid_remote_congestion_telemetry_beats_local_only():
    # experiments/adaptive_routing.py "remote_congestion" (4 spines, 1 MB flows, dt =
    # 0.5 us, the experiment's default).  The background holds 0.75 of spine0 -> leaf1.
    # Local-only AR keeps a quarter of each foreground flow on that path (the
    # routing-level test above shows the split stays even): closed form with FIFO
    # queues, ideal T = 20 us: the hot queue grows at 0.75 C for T, the last foreground
    # byte leaves it at T + 0.75 T, the foreground's share of its service is 1 / 1.75,
    # so the last 1 % (40 KB) take 40 KB / (C / 1.75) = 1.4 us; plus the 4 us path
    # latency: t99 = 37.6 us = 1.88 x ideal (measured: 37.600 us at dt = 1, 0.5, 0.25,
    # 0.125 us).  Telemetry moves the foreground to spines 1-3 one RTT later:
    # 1.349 x ideal (1.354 x at dt = 0.25, 1.358 x at 0.125; 1.58 x at dt = 1 us, not
    # converged, see the experiment's docstring).  Best possible: 4 MB over 3.25 links
    # = 1.23 x ideal.  Before 2026-12-03 (FIFO queues, one rate per multipath flow)
    # these were 2.0 x and 1.7 x at dt = 1 us, 1.91 x and 1.375 x at 0.25 us.
    res, sizes = _remote_congestion(0.5e-6)
    ib, sx = res["ib_ar"], res["spectrum_x_ar"]
    ideal = 1e6 / C
    assert ib["unfinished"] == 0 and sx["unfinished"] == 0
    t99_ib = ideal * 1.75 - 0.01 * 4e6 / (C / 1.75) + 4e-6
    assert ib["t99_s"] == pytest.approx(t99_ib, rel=2e-3)
    assert 1.25 * ideal <= sx["t99_s"] <= 1.45 * ideal      # the best case is 1.23 x
    assert sx["t99_s"] <= 0.8 * ib["t99_s"]
    assert max(ib["max_residual"], sx["max_residual"]) < 1e-3 * float(np.sum(sizes))


@pytest.mark.slow
def test_fluid_remote_congestion_converged_in_dt():
    # The project rule: a figure moves by at most ~3 % when dt is quartered.  At the
    # experiment's default dt = 0.5 us vs 0.125 us (measured: ib_ar t99 37.600 vs
    # 37.600 us, spectrum_x_ar 26.98 vs 27.17 us; completion 38.57 vs 38.89 and 29.51
    # vs 29.01 us).
    a, _ = _remote_congestion(0.5e-6)
    b, _ = _remote_congestion(0.125e-6)
    for p in a:
        assert b[p]["t99_s"] == pytest.approx(a[p]["t99_s"], rel=0.03), p
        assert b[p]["completion_s"] == pytest.approx(a[p]["completion_s"], rel=0.03), p


@pytest.mark.parametrize("dt", [1e-6, pytest.param(0.25e-6, marks=pytest.mark.slow)])
def test_fluid_multipath_congested_path_does_not_hold_back_the_others(dt):
    # Leaf-spine 3 x 2: a foreground flow sprayed evenly over spines 0 and 1, a pinned
    # background flow at line rate through spine 0 to another host of the same leaf.
    # Per-packet: the half on spine 1 crosses at C / 2; spine0 -> leaf1 receives 1.5 C
    # and serves C (FIFO: a third of it foreground), so the foreground gets 5/6 C from
    # the first step, the hot queue grows by C dt / 2 per step, and the bytes
    # delivered by 10 us do not depend on dt: at each dt they equal the closed form.
    # (With one rate per flow the hot path held the spine-1 half back and moved it into
    # the hot queue: 0.67 C dt in the first step, 389 KB at dt = 1 us vs 410 KB at
    # 0.25 us.)  The dt = 0.25 us case runs in the slow suite.
    from fabric_jax.fluid import simulate_fluid
    from fabric_jax.incidence import Incidence
    exp = _experiment()
    topo = leaf_spine(3, 2, 2)
    ps = shortest_paths(topo, np.array([0, 4]), np.array([2, 3]), max_paths=2)
    ps = exp._pin(ps, [1], {1: topo.link_index("leaf2", "spine0")})
    hot = topo.link_index("spine0", "leaf1")
    r = make_routing("spray", ps, seed=0)
    inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    res = simulate_fluid(inc, topo.capacity, np.array([1e6, 1e6]), dt=dt,
                         n_steps=int(round(10e-6 / dt)), routing=r,
                         line_rate=np.array([C, C]), nic_links=topo, save_every=1)
    tr = res.trajectory
    assert float(tr.queue[0, hot]) == pytest.approx(0.5 * C * dt, rel=1e-4)
    np.testing.assert_allclose(np.asarray(tr.throughput[:, 0]), 5 / 6 * C, rtol=1e-4)
    got = float(np.sum(tr.throughput[:, 0])) * dt
    assert got == pytest.approx(5 / 6 * C * 10e-6, rel=1e-4)


@pytest.mark.slow
def test_adaptive_routing_experiment_quick(tmp_path):
    import json
    out = tmp_path / "ar.json"
    res = _experiment().main(["--quick", "--json", str(out), "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    rc = data["scenarios"]["remote_congestion"]
    assert rc["spectrum_x_ar"]["t99_s"] < rc["ib_ar"]["t99_s"]
    assert rc["flowlet"]["completion_s"] == pytest.approx(rc["ecmp"]["completion_s"])
    assert (tmp_path / "adaptive_routing.png").is_file()
    assert res["dt_s"] == pytest.approx(0.5e-6)
