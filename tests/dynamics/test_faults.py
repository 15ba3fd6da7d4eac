"""Link faults during a fluid run: schedule compilation, routing reactions, stranded
flows, degraded capacity (closed forms) and byte conservation through fail/recover."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from fabric_jax.faults import (FaultSchedule, capacity_factor, fault_schedule, link_event,
                               loss_fraction, lossy_link)
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.paths import shortest_paths
from fabric_jax.routing import POLICIES, RoutingView, make_routing, path_alive
from fabric_jax.topology import leaf_spine

from tests.helpers import enable_x64, slow_except

US = 1e-6


def _two_path(hosts=4):
    """leaf_spine(2 leaves, 2 spines): host i on leaf 0 -> host hosts + i on leaf 1; every
    flow has 2 candidate paths (via spine 0 / spine 1); all links C = 50 GB/s."""
    topo = leaf_spine(2, 2, hosts)
    ps = shortest_paths(topo, np.arange(hosts), hosts + np.arange(hosts))
    up0 = topo.link_index("leaf0", "spine0")
    uses = np.any(ps.links == up0, axis=2)          # [flows, paths]: path crosses up0
    return topo, ps, up0, uses


def _throughput(res):
    return np.asarray(res.trajectory.throughput).sum(axis=1)


def test_schedule_matches_numpy_oracle():
    # Oracle: for each step k apply, in order, every event with ceil(T / dt) <= k.
    dt = 1e-6
    events = [(5e-6, [1], 0.0), (2e-6, [0, 2], 0.5), (5e-6, [1], 0.25), (9e-6, [1, 2], 1.0),
              (100e-6 / 1e2 * 3, [3], 0.0)]  # 3e-6 with binary round-off
    sched = fault_schedule(events, 4, dt)
    for k in range(12):
        want = np.ones(4)
        for t, links, f in events:
            if math.ceil(round(t / dt, 6)) <= k:
                want[links] = f
        np.testing.assert_array_equal(np.asarray(capacity_factor(sched, k)), want)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_puts_zero_weight_on_dead_paths(name):
    # Policy level (no fluid loop): with up0 dead in the view, every policy's split is
    # a distribution over live paths only; with every link of a flow's paths dead
    # (its NIC link) the split stays a distribution (the loop reports it stranded).
    topo, ps, up0, uses = _two_path(4)
    r = make_routing(name, ps, seed=0)
    cap = np.asarray(topo.capacity, np.float32).copy()
    cap[up0] = 0.0
    nic = ps.links[3, 0, 0]                      # flow 3's first hop: all its paths die
    cap[nic] = 0.0
    n = ps.n_pairs
    view = RoutingView(queue=jnp.zeros(topo.n_links), capacity=jnp.asarray(cap),
                       load=jnp.full(topo.n_links, 1e9), mark=jnp.zeros(topo.n_links),
                       flow_rate=jnp.full(n, 1e9), active=jnp.ones(n, bool),
                       t=jnp.asarray(0.0))
    st = r.state
    for _ in range(3):
        st = r.policy.step(st, view, 1e-6, r.params)
    split = np.asarray(st.split)
    alive = np.asarray(path_alive(st, jnp.asarray(cap)))
    assert not alive[3].any() and alive[:3].any(axis=1).all()
    np.testing.assert_allclose(split.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(split >= 0)
    assert np.all(split[:3][~alive[:3]] == 0)


def test_vmap_over_fault_tables_matches_closed_form():
    # A batch of failed/degraded-link scenarios in one vmapped run (FaultSchedule is a
    # pytree): 1 flow of 4 MB at C = 50 GB/s, its 2nd link at factor f from 20 us:
    # finish = 20 us + (S - C 20 us) / (f C); f = 0.25 does not finish in 200 us.
    C, S = 50e9, 4e6
    inc = Incidence.from_coo(np.array([0, 1]), np.array([0, 0]), n_links=2, n_flows=1)
    base = fault_schedule([(20 * US, [1], 0.5)], 2, 1 * US)
    fs = np.array([0.5, 0.25, 1.0])
    tables = jnp.stack([base.factor.at[1, 1].set(f) for f in fs])

    def run(table):
        return simulate_fluid(inc, jnp.full(2, C), jnp.array([S]), dt=1 * US, n_steps=200,
                              faults=FaultSchedule(step=base.step, factor=table),
                              latency=jnp.zeros(1)).finish[0]

    got = np.asarray(jax.vmap(run)(tables))
    want = 20 * US + (S - C * 20 * US) / (fs * C)
    want[want > 200 * US] = np.inf
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_validation_errors():
    topo, ps, up0, _ = _two_path(2)
    one = np.zeros(np.shape(ps.path_mask))
    one[:, 0] = 1.0                                   # one path per flow (routing=None)
    inc = Incidence.from_paths(ps, one, n_links=topo.n_links)
    kw = dict(dt=1e-6, n_steps=4)
    for bad, match in [([(-1e-6, [0], 0.0)], r"faults\[0\]\.time"),
                       ([(float("nan"), [0], 0.0)], r"faults\[0\]\.time"),
                       ([(float("inf"), [0], 0.0)], r"faults\[0\]\.time"),
                       ([(0.0, [0], 0.0), (1e-6, [topo.n_links], 0.0)], r"faults\[1\]\.links"),
                       ([(0.0, [-1], 0.0)], r"faults\[0\]\.links"),
                       ([(0.0, [], 0.0)], r"faults\[0\]\.links"),
                       ([(0.0, [0], 1.5)], r"faults\[0\]\.factor"),
                       ([(0.0, [0], -0.1)], r"faults\[0\]\.factor"),
                       ([(0.0,)], r"faults\[0\]"),
                       ([(0.0, [0], 0.5), lossy_link(0, 1.0)], r"faults\[1\]\.loss"),
                       ([lossy_link(0, -0.01)], r"faults\[0\]\.loss"),
                       ([lossy_link(0, float("nan"))], r"faults\[0\]\.loss"),
                       ([dict(time=0.0, links=[0], loss="a")], r"faults\[0\]: time and loss"),
                       ([dict(time=0.0, links=[0], factor=0.5, loss=0.01)],
                        r"faults\[0\] gives both 'factor' and 'loss'"),
                       ([dict(time=0.0, links=[0], los=0.01)], r"faults\[0\]: unknown key"),
                       (3, "faults")]:
        with pytest.raises(ValueError, match=match):
            simulate_fluid(inc, topo.capacity, np.ones(2), faults=bad, **kw)


def test_ecmp_rehashes_only_flows_on_the_dead_path_and_returns_after_recovery():
    # Seed 0 hashes 2 flows on each spine.  up0 (leaf0 -> spine0) fails at 100 us and
    # recovers at 200 us.  During the failure the flows hashed onto spine 0 move to
    # spine 1, the others keep their path; all 4 then share spine 1's uplink: total
    # throughput = C (one uplink), against 2 C before.  After recovery every flow is
    # back on its hashed path (2 C again).
    topo, ps, up0, uses = _two_path(4)
    C = float(topo.capacity[up0])
    r = make_routing("ecmp", ps, seed=0)
    home = np.asarray(r.split)
    on_dead = np.sum(home * uses, axis=1) > 0
    assert 0 < on_dead.sum() < 4                      # both cases present
    inc = Incidence.from_paths(ps, home, n_links=topo.n_links)
    faults = [link_event(100 * US, up0, 0.0), link_event(200 * US, up0, 1.0)]
    kw = dict(dt=1 * US, routing=r, faults=faults, save_every=1)
    size = np.full(4, 1e12)
    mid = simulate_fluid(inc, topo.capacity, size, n_steps=150, **kw)
    split = np.asarray(mid.routing_state.split)
    np.testing.assert_array_equal(split[~on_dead], home[~on_dead])      # not moved
    assert np.all(np.sum(split[on_dead] * uses[on_dead], axis=1) == 0)   # moved off
    np.testing.assert_array_equal(split.sum(axis=1), 1.0)
    tp = _throughput(mid)
    assert tp[50:100].mean() == pytest.approx(2 * C, rel=1e-4)
    assert tp[120:150].mean() == pytest.approx(C, rel=1e-4)
    assert not np.any(np.asarray(mid.info.stranded_time))
    end = simulate_fluid(inc, topo.capacity, size, n_steps=150, init_state=mid.state, **kw)
    np.testing.assert_array_equal(np.asarray(end.routing_state.split), home)
    assert _throughput(end)[-20:].mean() == pytest.approx(2 * C, rel=1e-4)


@pytest.mark.parametrize("policy", slow_except(["spray", "ib_ar", "spectrum_x_ar"],
                                                keep=["spray"]))
def test_spray_and_adaptive_rebalance_to_the_surviving_capacity(policy):
    # Even/adaptive splits over both spines: 2 C total before the failure, exactly the
    # surviving uplink's C during it (closed form), dead paths carry weight 0.
    topo, ps, up0, uses = _two_path(4)
    C = float(topo.capacity[up0])
    r = make_routing(policy, ps, seed=0)
    inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    res = simulate_fluid(inc, topo.capacity, np.full(4, 1e12), dt=1 * US, n_steps=160,
                         routing=r, faults=[(100e-6, [up0], 0.0)], save_every=1)
    tp = _throughput(res)
    assert tp[50:100].mean() == pytest.approx(2 * C, rel=1e-3)
    assert tp[130:160].mean() == pytest.approx(C, rel=1e-4)
    split = np.asarray(res.routing_state.split)
    assert np.all(split[uses] == 0)
    np.testing.assert_allclose(split.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.slow
def test_static_route_strands_the_flow_reports_it_and_resumes():
    # Static routing (no routing=): flow 0 via spine 0, flow 1 via spine 1, 5 MB each at
    # C = 50 GB/s (100 us alone).  up0 fails during [30, 80) us: flow 0 is stranded for
    # 50 us (reported), sends nothing, and finishes 50 us late at 150 us; flow 1 is
    # unaffected (100 us).
    with enable_x64():
        topo, ps, up0, uses = _two_path(2)
        C = float(topo.capacity[up0])
        split = np.where(uses, 1.0, 0.0)               # flow 0 on its path via spine 0,
        split[1] = 1.0 - split[0]                       # flow 1 on the other spine
        inc = Incidence.from_paths(ps, split, n_links=topo.n_links)
        kw = dict(dt=1 * US, latency=np.zeros(2), n_steps=200, save_every=1)
        size = np.full(2, 5e6)
        # never recovers (within the run): flow 0 is still stranded at the end
        never = simulate_fluid(inc, topo.capacity, size, **kw,
                               faults=[(30 * US, [up0], 0.0), (1.0, [up0], 1.0)])
        np.testing.assert_array_equal(np.asarray(never.info.stranded), [True, False])
        np.testing.assert_allclose(np.asarray(never.info.stranded_time), [170 * US, 0.0],
                                   atol=1e-12)
        assert bool(never.info.stalled)
        res = simulate_fluid(inc, topo.capacity, size, **kw,
                             faults=[(30 * US, [up0], 0.0), (80 * US, [up0], 1.0)])
        np.testing.assert_allclose(np.asarray(res.info.stranded_time), [50 * US, 0.0],
                                   atol=1e-12)
        assert not np.any(np.asarray(res.info.stranded))
        tp = np.asarray(res.trajectory.throughput)
        assert np.all(tp[32:80, 0] == 0)
        np.testing.assert_allclose(np.asarray(res.finish), [size[0] / C + 50 * US, size[1] / C],
                                   rtol=1e-9)
        np.testing.assert_allclose(np.asarray(res.delivered), size, rtol=1e-12)


def test_degrade_by_half_halves_the_throughput_closed_form():
    # One flow, 2 links at C, 10 MB; its second link degrades to 0.5 at t0 = 60 us:
    # delivered at C until t0, then C / 2: finish = t0 + (S - C t0) / (C / 2).
    with enable_x64():
        C = 50e9
        inc = Incidence.from_coo(np.array([0, 1]), np.array([0, 0]), n_links=2, n_flows=1)
        S, t0 = 10e6, 60 * US
        res = simulate_fluid(inc, np.full(2, C), np.array([S]), dt=1 * US, n_steps=400,
                             faults=[(t0, [1], 0.5)], latency=np.zeros(1), save_every=1)
        want = t0 + (S - C * t0) / (0.5 * C)
        assert float(res.finish[0]) == pytest.approx(want, rel=1e-9)
        tp = np.asarray(res.trajectory.throughput)[:, 0]
        np.testing.assert_allclose(tp[10:60], C, rtol=1e-12)
        np.testing.assert_allclose(tp[61:int(want / US) - 1], 0.5 * C, rtol=1e-12)


def test_lossy_link_goodput_closed_form_and_drop_counter():
    # One flow alone on 2 links at C = 50 GB/s, 10 MB; link 1 drops p = 1.5 % of what
    # it carries (selective retransmission): the link carries C, the receiver gets
    # C (1 - p) every step, so finish = S / (C (1 - p)) (+ < 1 dt: the last lost bytes
    # are resent in the next step); the sender puts S / (1 - p) on the wire, link 1's
    # error counter holds p of that, and sent = delivered + dropped.
    sched = fault_schedule([lossy_link(1, 0.5, time=3 * US), (0.0, [0], 0.5),
                            lossy_link(1, 0.015, time=3 * US)], 2, 1 * US)
    np.testing.assert_array_equal(np.asarray(loss_fraction(sched, 2)), [0.0, 0.0])
    np.testing.assert_allclose(np.asarray(loss_fraction(sched, 3)), [0.0, 0.015], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(capacity_factor(sched, 3)), [0.5, 1.0])
    assert fault_schedule([(0.0, [0], 0.5)], 2, 1 * US).loss is None
    with enable_x64():
        C, S, p = 50e9, 10e6, 0.015
        inc = Incidence.from_coo(np.array([0, 1]), np.array([0, 0]), n_links=2, n_flows=1)
        res = simulate_fluid(inc, np.full(2, C), np.array([S]), dt=1 * US, n_steps=400,
                             faults=[lossy_link(1, p)], latency=np.zeros(1), save_every=1)
        want = S / (C * (1 - p))
        assert want <= float(res.finish[0]) <= want + 1 * US
        tp = np.asarray(res.trajectory.throughput)[:, 0]
        np.testing.assert_allclose(tp[1:int(want / US) - 1], C * (1 - p), rtol=1e-12)
        sent = float(res.sent[0])
        assert sent == pytest.approx(S / (1 - p), rel=1e-6)
        np.testing.assert_allclose(np.asarray(res.link_corrupted), [0.0, p * sent], rtol=1e-9)
        assert float(res.dropped[0]) == pytest.approx(p * sent, rel=1e-9)
        assert sent == pytest.approx(float(res.delivered[0] + res.dropped[0]), rel=1e-12)
        assert float(res.info.max_residual) < 1e-6 and not bool(res.info.stalled)


@pytest.mark.slow
@pytest.mark.parametrize("recovery", ["selective", "go_back_n"])
def test_lossy_link_conserves_bytes_under_spraying_x64(recovery):
    # 4 flows sprayed over 2 spines under DCQCN + PFC; uplink up0 drops 1 % from 10 us.
    # Bytes are conserved per flow (sent = delivered + queued + dropped + discarded),
    # only up0's error counter moves, and it equals the flows' drops; every flow
    # completes with its size delivered.  Go-back-N also discards what follows a loss,
    # so it resends more than selective retransmission.
    with enable_x64():
        topo, ps, up0, uses = _two_path(4)
        r = make_routing("spray", ps, seed=0)
        inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
        size = np.full(4, 2e6)
        res = simulate_fluid(inc, topo.capacity, size, dt=1 * US, n_steps=500,
                             base_rtt=np.full(4, 4 * US), routing=r, law="dcqcn",
                             flow_control="pfc", buffer=2e6, loss_recovery=recovery,
                             faults=[lossy_link(up0, 0.01, time=10 * US)])
        sent, dropped = np.asarray(res.sent), np.asarray(res.dropped)
        np.testing.assert_allclose(sent, np.asarray(res.delivered + res.queued + res.discarded)
                                   + dropped, rtol=1e-12, atol=1e-6)
        corrupted = np.asarray(res.link_corrupted)
        assert corrupted[up0] > 0 and np.all(np.delete(corrupted, up0) == 0)
        assert corrupted[up0] == pytest.approx(dropped.sum(), rel=1e-9)
        assert float(res.info.max_residual) < 1e-6 and not bool(res.info.stalled)
        np.testing.assert_allclose(np.asarray(res.delivered), size, rtol=1e-6)  # COMPLETION_RTOL
        if recovery == "go_back_n":
            assert np.asarray(res.discarded).sum() > corrupted[up0]
        else:
            assert np.asarray(res.discarded).sum() == 0


@pytest.mark.parametrize("case", slow_except(["static_dcqcn_pfc", "spray_drop", "ecmp_none"],
                                             keep=["static_dcqcn_pfc"]))
def test_bytes_conserved_through_fail_and_recover_x64(case):
    # Queues are full when a link fails: those bytes are dropped, returned to the
    # sender and resent.  sent = delivered + queued + dropped per flow (float64
    # round-off), every flow completes with exactly its size delivered.
    with enable_x64():
        topo, ps, up0, uses = _two_path(4)
        C = float(topo.capacity[up0])
        kw = dict(dt=1 * US, n_steps=600, base_rtt=np.full(4, 4 * US))
        if case == "static_dcqcn_pfc":
            r = make_routing("ecmp", ps, seed=2)      # seed 2: every flow via spine 0
            kw.update(law="dcqcn", flow_control="pfc", buffer=2e6)
        else:
            r = make_routing(case.split("_")[0], ps, seed=0)
            kw.update(routing=r, flow_control="drop" if case == "spray_drop" else "none",
                      buffer=1e6 if case == "spray_drop" else None)
        inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
        size = np.full(4, 3e6)
        faults = [(40 * US, [up0], 0.0), (90 * US, [up0], 0.5), (130 * US, [up0], 1.0)]
        res = simulate_fluid(inc, topo.capacity, size, faults=faults, **kw)
        sent, dropped = np.asarray(res.sent), np.asarray(res.dropped)
        np.testing.assert_allclose(sent, np.asarray(res.delivered + res.queued) + dropped,
                                   rtol=1e-12, atol=1e-6)
        assert float(res.info.max_residual) < 1e-6
        assert dropped.sum() > 0.1 * C * US          # bytes were queued at the failure
        assert not bool(res.info.stalled)
        np.testing.assert_allclose(np.asarray(res.delivered), size, rtol=1e-9)


@pytest.mark.slow
def test_link_failure_experiment_quick(tmp_path):
    # experiments/link_failure.py --quick (2 permutations, 4 spines): spraying and
    # adaptive routing deliver (spines - 1) / spines = 3/4 of the offered rate
    # while the cable is down; static routing strands flows, the others do not; every
    # flow completes; bytes are conserved to float32 round-off.
    import json
    from experiments import link_failure as mod
    out = tmp_path / "lf.json"
    mod.main(["--quick", "--json", str(out), "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    pol = data["policies"]
    assert set(pol) == {"ecmp", "adaptive", "spray", "static"}
    # spraying re-splits at once; adaptive routing (the experiment's default Spectrum-X
    # AR, acting on 4 us-old telemetry with a finite per-decision gain) loses the
    # transient after the failure: within 2 % of the surviving capacity, never above it
    assert pol["spray"]["throughput_during_failure"] == pytest.approx(0.75, rel=1e-3)
    assert 0.75 * 0.98 <= pol["adaptive"]["throughput_during_failure"] <= 0.75 * (1 + 1e-3)
    assert pol["static"]["stranded_flow_s"] > 0
    assert all(pol[p]["stranded_flow_s"] == 0 for p in ("ecmp", "adaptive", "spray"))
    for p in pol.values():
        assert p["unfinished_flows"] == 0
        assert p["slowdown"] >= 1.0 - 1e-6
        assert p["max_residual"] < 1e-3 * data["size_bytes"]
    assert (tmp_path / "link_failure.png").exists()
