"""The fluid loop: queues, buffers, byte conservation, lifecycle, gradients, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import cc
from fabric_jax import smooth as sm
from fabric_jax.cc import dcqcn_params
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.units import US, gbps

from tests.helpers import enable_x64, incast_leaf_spine, slow_except

C = gbps(40.0)


def dumbbell(n):
    li = np.stack([1 + np.arange(n), np.zeros(n, int)], axis=1).ravel()
    fi = np.repeat(np.arange(n), 2)
    return Incidence.from_coo(li, fi, n_links=n + 1, n_flows=n), np.full(n + 1, C)


def test_none_law_queue_grows_at_excess_rate_and_fct_closed_form():
    # 2 flows at line rate C into one C bottleneck, 1 MB each, infinite buffers.
    # The queue grows at 2C - C = C; both flows are served C/2 (fluid FIFO, equal
    # arrivals), so both finish at 2 MB / C = 400 us (+ 5 us latency); queue peak =
    # C x (time both send) = C x 1 MB / C = 1 MB (each sends 1 MB at line rate in 200 us).
    with enable_x64():
        inc, cap = dumbbell(2)
        res = simulate_fluid(inc, cap, np.full(2, 1e6), dt=1 * US, n_steps=600,
                             law="none", latency=np.full(2, 5 * US), save_every=10)
        np.testing.assert_allclose(np.asarray(res.finish), 400e-6 + 5e-6, rtol=1e-3)
        assert float(res.info.max_queue[0]) == pytest.approx(1e6, rel=1e-3)
        q = np.asarray(res.trajectory.queue)[:, 0]
        # at t = 100 us the queue is C x 100 us = 500 KB
        assert q[9] == pytest.approx(C * 100e-6, rel=1e-6)
        assert not bool(res.info.stalled)


# One case here (NSCC with trimming): the other laws' and modes' conservation, per step
# and in x64, is test_conservation_every_step_every_law_and_mode's (below).
@pytest.mark.parametrize("law,fc", [("nscc", "trim")])
def test_conservation_exact_in_x64(law, fc):
    # 6 flows, 3-link parking lot (flow 0 crosses all), 64 KB buffers: bytes sent =
    # delivered + queued + in flight + dropped, per flow, to float64 round-off.
    with enable_x64():
        li = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
        fi = np.array([0, 0, 0, 1, 2, 3, 4, 5, 5])
        inc = Incidence.from_coo(li, fi, n_links=3, n_flows=6)
        size = np.array([3e6, 1e6, 2e6, 5e5, 1e6, 2e6])
        res = simulate_fluid(inc, np.full(3, C), size, dt=1 * US, n_steps=1500, law=law,
                             flow_control=fc, buffer=64e3, base_rtt=np.full(6, 6 * US))
        sent = np.asarray(res.sent)
        np.testing.assert_allclose(sent, np.asarray(res.delivered + res.queued + res.in_flight + res.dropped),
                                   rtol=1e-12, atol=1e-6)
        assert float(res.info.max_residual) < 1e-6
        assert np.all(np.asarray(res.delivered) <= size * (1 + 1e-12))


@pytest.mark.slow
def test_long_run_extreme_parameters_no_nan():
    # 10^5 steps, DCQCN with extreme parameters (g = 1, K_max barely above K_min,
    # P_max = 1, R_AI at 1 Gb/s) under PFC with a tiny buffer: no NaN, no negative rate.
    inc, cap = dumbbell(4)
    p = dcqcn_params("paper", g=1.0, k_min=1.0, k_max=2.0, p_max=1.0, r_ai=gbps(1.0))
    res = simulate_fluid(inc, cap, np.full(4, 1e15), dt=1 * US, n_steps=100_000, law="dcqcn",
                         params=p, flow_control="pfc", buffer=30e3, save_every=1000)
    rate = np.asarray(res.trajectory.rate)
    assert np.all(np.isfinite(rate)) and rate.min() >= 0
    assert np.all(np.isfinite(np.asarray(res.delivered)))
    assert float(np.sum(res.delivered)) > 0.5 * C * 0.1   # the link is not starved


def test_dependencies_and_arrivals():
    # Flow 1 depends on flow 0 (1 MB alone at C = 200 us) plus 10 us compute delay:
    # starts at 210 us.  Flow 2 arrives at 50 us on an independent link.
    with enable_x64():
        inc = Incidence.from_coo(np.array([0, 0, 1]), np.array([0, 1, 2]), n_links=2, n_flows=3)
        res = simulate_fluid(inc, np.full(2, C), np.full(3, 1e6), dt=1 * US, n_steps=600,
                             deps=np.array([-1, 0, -1]), delay=np.array([0, 10e-6, 0]),
                             arrival=np.array([0, 0, 50e-6]))
        np.testing.assert_allclose(np.asarray(res.start), [0, 210e-6, 50e-6], atol=1e-9)
        np.testing.assert_allclose(np.asarray(res.finish), [200e-6, 410e-6, 250e-6], rtol=1e-6)


@pytest.mark.slow
def test_smooth_grad_matches_central_differences():
    # d(mean bottleneck queue over 300 us)/d(K_min) for DCQCN in the smooth mode, x64:
    # jax.grad vs central differences with step 0.5 KB.
    with enable_x64():
        inc, cap = dumbbell(2)

        def metric(k_min):
            p = dcqcn_params("paper", k_min=k_min)
            res = simulate_fluid(inc, cap, np.full(2, 1e15), dt=2 * US, n_steps=150,
                                 law="dcqcn", params=p, base_rtt=np.full(2, 4 * US),
                                 smooth=sm.smooth(0.2), save_every=1,
                                 line_rate=jnp.full((2,), C))
            return jnp.mean(res.trajectory.queue[:, 0]) / 1e3

        # one value_and_grad serves the three evaluations (no separate forward compile)
        value_and_grad = jax.value_and_grad(metric)
        k0, h = 20e3, 500.0
        g = float(value_and_grad(jnp.asarray(k0))[1])
        fd = (float(value_and_grad(jnp.asarray(k0 + h))[0])
              - float(value_and_grad(jnp.asarray(k0 - h))[0])) / (2 * h)
        assert np.isfinite(g) and g != 0.0
        assert g == pytest.approx(fd, rel=0.02, abs=1e-9)


def test_validation_errors():
    inc, cap = dumbbell(2)
    with pytest.raises(ValueError, match="dt"):
        simulate_fluid(inc, cap, np.ones(2), dt=0.0, n_steps=10)
    with pytest.raises(ValueError, match="n_steps"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=0)
    with pytest.raises(ValueError, match="save_every"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, save_every=3)
    with pytest.raises(ValueError, match="law"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, law="reno")
    with pytest.raises(ValueError, match="flow_control"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, flow_control="xon")
    with pytest.raises(ValueError, match="size"):
        simulate_fluid(inc, cap, -np.ones(2), dt=1e-6, n_steps=10)
    with pytest.raises(ValueError, match="line_rate"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, line_rate=np.zeros(2))


# ------------------------------------------------------------ wires, NICs, oracle
from fabric_jax import flowcontrol as fcm  # noqa: E402
from fabric_jax.cc import LAWS  # noqa: E402
from fabric_jax.flowcontrol import MODES  # noqa: E402

from tests.reference import fluid_numpy  # noqa: E402


def _access_dumbbell(n, access=2.0):
    """Flow i: its access link 1 + i (a host NIC, ``access`` x C) then bottleneck 0."""
    li = np.stack([1 + np.arange(n), np.zeros(n, int)], axis=1).ravel()
    fi = np.repeat(np.arange(n), 2)
    cap = np.concatenate([[C], np.full(n, access * C)])
    return Incidence.from_coo(li, fi, n_links=n + 1, n_flows=n), cap


# Every flow-control mode with no law (its own accounting alone), then each law with two
# modes: the lossless one it ships with and a lossy one where its window or rate meets
# drops or trims (the in-flight accounting that conservation tests).  15 of the 30
# pairs: each is a compile (~4 s on 2 cores); the pairs left out combine a law and a
# mode that are each tested here with others.
CONSERVATION_CASES = ([("none", fc) for fc in MODES]
                      + [("dcqcn", "pfc"), ("dcqcn", "drop"), ("ibcc", "credit"),
                         ("ibcc", "trim"), ("hpcc", "drop"), ("hpcc", "trim"),
                         ("nscc", "trim"), ("nscc", "pfc"), ("swift", "drop"),
                         ("swift", "credit")])


@pytest.mark.parametrize("law,fc", slow_except(
    CONSERVATION_CASES, keep=[("dcqcn", "pfc"), ("ibcc", "credit")]))
def test_conservation_every_step_every_law_and_mode(law, fc):
    # 4 flows (2-link paths, NIC at 2C) into one C bottleneck with 1 us links, 40 KB
    # buffers: at every step sent = delivered + in flight + queued + dropped (x64).
    with enable_x64():
        inc, cap = _access_dumbbell(4)
        size = np.array([3e5, 2e5, 4e5, 1e5])
        res = simulate_fluid(inc, cap, size, dt=1 * US, n_steps=240, law=law, flow_control=fc,
                             buffer=40e3, link_latency=np.full(5, 1 * US), save_every=1)
        tr = res.trajectory
        lhs = np.asarray(tr.sent)
        rhs = np.asarray(tr.delivered + tr.in_flight + tr.queued + tr.dropped)
        np.testing.assert_allclose(lhs, rhs, rtol=1e-12, atol=1e-6)
        assert float(res.info.max_residual) < 1e-6
        np.testing.assert_allclose(
            np.asarray(res.sent),
            np.asarray(res.delivered + res.in_flight + res.queued + res.dropped),
            rtol=1e-12, atol=1e-6)
        assert float(np.max(tr.in_flight)) > 0          # the wires did carry bytes


def _leaf_spine_path(topo, src, dst):
    from fabric_jax import shortest_paths
    ps = shortest_paths(topo, np.array([src]), np.array([dst]))
    return [int(v) for v in np.asarray(ps.links)[0, 0] if v >= 0]


@pytest.mark.parametrize("gbps_", slow_except([25.0, 100.0, 400.0, 800.0], keep=[800.0]))
def test_single_flow_idle_path_completes_in_size_over_rate_plus_half_base_rtt(gbps_):
    # One 1 MB flow over host -> leaf -> spine -> leaf -> host (4 links of 1 us):
    # base RTT = 2 x 4 us; FCT = size / line rate + base_RTT / 2, within one dt.
    from fabric_jax import leaf_spine
    topo = leaf_spine(2, 2, 2, link_gbps=gbps_, latency_us=1.0)
    path = _leaf_spine_path(topo, 0, 3)
    assert len(path) == 4
    inc = Incidence.from_coo(np.array(path), np.zeros(4, int), n_links=topo.n_links, n_flows=1)
    dt = 0.5 * US
    rate = float(topo.capacity[path[0]])
    expect = 1e6 / rate + 4 * 1e-6
    # one n_steps for every speed (one compile): 700 steps cover 25 Gb/s (664 needed)
    res = simulate_fluid(inc, topo.capacity, np.array([1e6]), dt=dt,
                         n_steps=700, link_latency=topo.latency,
                         nic_links=topo, save_every=1)
    assert abs(float(res.fct[0]) - expect) <= dt
    assert float(np.max(res.trajectory.queue)) == 0.0


@pytest.mark.parametrize("law", slow_except(sorted(LAWS), keep=["swift"]))
def test_fair_share_on_nonblocking_fabric_no_marks_pauses_or_queue(law):
    # 4 flows host i -> host 4 + i on leaf_spine(2 leaves, 4 spines, 4 hosts), flow i
    # pinned to spine i: non-blocking, every flow's fair share is its line rate.  After
    # convergence: no mark, no pause (PFC), no standing queue on any port.
    from fabric_jax import leaf_spine, shortest_paths
    topo = leaf_spine(2, 4, 4, link_gbps=100.0, latency_us=1.0)
    ps = shortest_paths(topo, np.arange(4), 4 + np.arange(4))
    links = np.asarray(ps.links)
    # one path per flow, each through a different spine
    pick = []
    for f in range(4):
        spines = [p for p in range(links.shape[1]) if ps.path_mask[f, p]]
        pick.append(spines[f % len(spines)])
    routes = [[int(v) for v in links[f, pick[f]] if v >= 0] for f in range(4)]
    assert len({r[1] for r in routes}) == 4                # distinct uplinks
    li = np.concatenate(routes)
    fi = np.repeat(np.arange(4), [len(r) for r in routes])
    inc = Incidence.from_coo(li, fi, n_links=topo.n_links, n_flows=4)
    res = simulate_fluid(inc, topo.capacity, np.full(4, 1e12), dt=1 * US, n_steps=600,
                         law=law, flow_control="pfc", buffer=topo.buffer,
                         link_latency=topo.latency, nic_links=topo, save_every=10)
    tail = slice(20, None)
    assert float(np.max(np.asarray(res.trajectory.mark)[tail])) == 0.0
    assert float(np.max(np.asarray(res.trajectory.queue)[tail])) == 0.0
    assert float(np.sum(res.info.paused_time)) == 0.0
    assert float(np.min(np.asarray(res.trajectory.throughput)[tail])) > 0.5 * topo.capacity[0]


@pytest.mark.parametrize("law", slow_except(["dcqcn", "nscc", "ibcc", "swift", "hpcc"],
                                            keep=["dcqcn"]))
def test_nic_backlog_is_never_marked_nor_a_phantom_queue_downstream(law):
    # Two flows from one host (one 40 Gb/s NIC, link 0) to two receivers over 2-hop
    # paths (links 1 and 2 at 40 Gb/s).  Both offer line rate: the NIC is the
    # bottleneck and shares itself between them; what it cannot send stays with the
    # senders (no NIC queue).  No mark, no queueing delay, no drop (drop mode, tiny
    # buffer); the NIC stays full and the switch ports downstream carry C/2 each and
    # never hold a standing queue.
    inc = Incidence.from_coo(np.array([0, 1, 0, 2]), np.array([0, 0, 1, 1]), n_links=3,
                             n_flows=2)
    cap = np.full(3, C)
    res = simulate_fluid(inc, cap, np.full(2, 2e6), dt=1 * US, n_steps=150, law=law,
                         flow_control="drop", buffer=5e3, save_every=1,
                         link_latency=np.full(3, 1 * US), line_rate=np.full(2, C))
    q = np.asarray(res.trajectory.queue)
    tr = res.trajectory
    assert float(np.max(np.asarray(tr.rate)[5:].sum(axis=1))) > 1.5 * C   # NIC oversubscribed
    thr = np.asarray(tr.throughput)[20:100]
    np.testing.assert_allclose(thr.sum(axis=1), C, rtol=1e-3)            # ... and kept full
    np.testing.assert_allclose(thr[:, 0], thr[:, 1], rtol=1e-3)          # shared fairly
    assert float(np.max(q[:, 0])) == 0.0                                 # no NIC backlog
    np.testing.assert_allclose(np.asarray(res.sent), np.asarray(res.delivered + res.in_flight),
                               rtol=1e-5)                               # unsent stays home
    assert float(np.max(np.asarray(res.trajectory.mark))) == 0.0
    assert float(np.max(q[:, 1:])) == 0.0
    assert float(np.sum(res.dropped)) == 0.0


def test_nic_links_derivation_and_explicit_mask():
    from fabric_jax.links import nic_links
    n = 4
    # flow 0: 0 -> 1 -> 2; flow 1: 3 -> 1; flow 2: link 2 alone (one hop: not a NIC)
    tab = np.array([[0, 1, 2], [3, 1, n], [2, n, n]])
    np.testing.assert_array_equal(nic_links(tab, 3, n), [True, False, False, True])
    np.testing.assert_array_equal(nic_links(tab, 3, n, np.array([0, 0, 1, 0], bool)),
                                  [False, False, True, False])
    with pytest.raises(ValueError, match="nic_links"):
        nic_links(tab, 3, n, np.ones(3, bool))


@pytest.mark.parametrize("mode", slow_except(["none", "pfc", "drop"], keep=["pfc", "drop"]))
def test_matches_numpy_oracle(mode):
    # Tiny fabrics, law "none", x64: queues, wires, PFC pauses / tail drops, finish
    # times and the byte balance equal the plain-NumPy oracle step by step (an exact
    # FIFO of per-step cohorts: with a band per step the band merge is lossless).
    with enable_x64():
        paths = [[1, 0, 4], [2, 0, 4], [3, 0], [3, 5]]
        cap = np.array([C, 2 * C, 2 * C, 2 * C, 1.5 * C, C])
        n_links = cap.size
        size = np.array([2e5, 1.5e5, 1e5, 2.5e5])
        lat = np.array([1e-6, 0.3e-6, 0.3e-6, 0.3e-6, 2.2e-6, 0.5e-6])
        nic = np.array([False, True, True, True, False, False])
        one_way = np.array([sum(lat[p]) for p in paths])
        arrival = np.array([0.0, 3.4e-6, 0.0, 10.7e-6])   # released inside steps
        dt, n_steps = 1e-6, 60
        kw = {}
        okw = dict(mode=mode)
        if mode == "pfc":
            buf = np.full(n_links, 60e3)
            # thresholds off the 5 KB grid of the queues: no tie for round-off to break
            xoff, xon = np.full(n_links, 42e3), np.full(n_links, 31e3)
            kw["fc_params"] = fcm.flow_control_params(n_links, buffer=buf, xoff=xoff, xon=xon)
            okw.update(buffer=buf, xoff=xoff, xon=xon)
        elif mode == "drop":
            kw["buffer"] = 20e3
            okw.update(buffer=np.full(n_links, 20e3))
        li = np.concatenate(paths)
        fi = np.repeat(np.arange(4), [len(p) for p in paths])
        inc = Incidence.from_coo(li, fi, n_links=n_links, n_flows=4)
        line = np.full(4, 2 * C)
        res = simulate_fluid(inc, cap, size, dt=dt, n_steps=n_steps, arrival=arrival,
                             flow_control=mode, link_latency=lat, nic_links=nic,
                             line_rate=line, save_every=1, fifo_bands=n_steps + 1, **kw)
        ref = fluid_numpy.simulate(paths, cap, size, dt=dt, n_steps=n_steps, line_rate=line,
                                   one_way=one_way, nic=nic, arrival=arrival, **okw)
        np.testing.assert_allclose(np.asarray(res.trajectory.queue), ref["queue"],
                                   rtol=1e-9, atol=1e-6)
        for key in ("delivered", "dropped", "sent", "queued", "in_flight"):
            np.testing.assert_allclose(np.asarray(getattr(res, key)), ref[key], rtol=1e-9,
                                       atol=1e-6, err_msg=key)
        np.testing.assert_allclose(np.asarray(res.finish), ref["finish"], rtol=1e-9)
        if mode == "pfc":
            assert ref["paused"].max() == 1.0                # the case does pause
            np.testing.assert_allclose(np.asarray(res.trajectory.usable),
                                       cap * (1 - ref["paused"][np.r_[0, :n_steps - 1]] *
                                              (np.arange(n_steps) > 0)[:, None]), rtol=1e-12)
        if mode == "drop":
            assert ref["dropped"].sum() > 0


def test_input_checks_params_fc_params_routing():
    from fabric_jax import leaf_spine, make_routing, shortest_paths
    inc, cap = dumbbell(2)
    kw = dict(dt=1e-6, n_steps=4)
    with pytest.raises(ValueError, match="params"):
        simulate_fluid(inc, cap, np.ones(2), law="dcqcn", params=LAWS["hpcc"].default_params(),
                       **kw)
    with pytest.raises(ValueError, match="fc_params"):
        simulate_fluid(inc, cap, np.ones(2), fc_params={"buffer": 1.0}, **kw)
    with pytest.raises(ValueError, match="fc_params"):
        simulate_fluid(inc, cap, np.ones(2), flow_control="credit",
                       fc_params=fcm.flow_control_params(3, buffer=1e5, xoff=5e4, xon=4e4), **kw)
    with pytest.raises(ValueError, match="link_latency"):
        simulate_fluid(inc, cap, np.ones(2), link_latency=np.ones(2), **kw)
    topo = leaf_spine(2, 2, 2)
    ps = shortest_paths(topo, np.array([0, 1]), np.array([2, 3]))
    half = np.asarray(ps.path_mask, float) / 2
    multi = Incidence.from_paths(ps, half, n_links=topo.n_links)
    with pytest.raises(ValueError, match="routing=None"):
        simulate_fluid(multi, topo.capacity, np.ones(2), **kw)
    ps_other = shortest_paths(topo, np.array([0, 1]), np.array([3, 2]))
    wrong = make_routing("ecmp", ps_other)
    with pytest.raises(ValueError, match="routing does not agree with incidence"):
        simulate_fluid(multi, topo.capacity, np.ones(2), routing=wrong, **kw)
    ok = make_routing("ecmp", ps)
    simulate_fluid(multi, topo.capacity, np.ones(2), routing=ok, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("law,fc", [("dcqcn", "pfc"), ("ibcc", "credit")])
def test_fct_converges_in_dt(law, fc):
    # leaf_spine(2 leaves, 2 spines, 4 hosts) at 100 Gb/s, 1 us links, ECMP: a 4-to-1
    # incast plus two flows sharing the incast senders' NICs, 1 MB each.  The last and
    # the mean FCT move by at most 3 % when dt is quartered (2 us -> 0.5 us), the
    # issue-11 convergence criterion (experiments/convergence.py does it for compare).
    topo, r, inc = incast_leaf_spine()
    out = []
    for dt in (2 * US, 0.5 * US):
        res = simulate_fluid(inc, topo.capacity, np.full(6, 1e6), dt=dt,
                             n_steps=int(round(800 * US / dt)), law=law, flow_control=fc,
                             buffer=topo.buffer, link_latency=topo.latency, nic_links=topo,
                             routing=r)
        fct = np.asarray(res.fct, float)
        assert np.all(np.isfinite(fct))
        out.append((fct.max(), fct.mean()))
    (m0, a0), (m1, a1) = out
    assert abs(m0 / m1 - 1) <= 0.03 and abs(a0 / a1 - 1) <= 0.03


@pytest.mark.parametrize("late", [False, True])
def test_stop_when_idle_keeps_every_flow_result(late):
    # Two 250 KB DCQCN flows share one bottleneck (40 Gb/s), done at ~110 us of 400 us;
    # with stop_when_idle the chunks after that are skipped.  Every flow result is the
    # full run's; the law's state stops where the last simulated chunk left it (DCQCN
    # would go on recovering its rate with no traffic).  A flow arriving late keeps the
    # fabric busy: nothing is skipped before it finishes.
    inc = Incidence.from_coo(np.array([0, 2, 1, 2]), np.array([0, 0, 1, 1]), n_links=3,
                             n_flows=2)
    cap = np.array([C, C, C])
    arrival = np.array([0.0, 300e-6 if late else 0.0])
    kw = dict(dt=1 * US, n_steps=400, law="dcqcn", save_every=20, arrival=arrival,
              link_latency=np.full(3, 1 * US), line_rate=np.full(2, C),
              params=cc.params_for("dcqcn", C))
    full = simulate_fluid(inc, cap, np.full(2, 2.5e5), **kw)
    fast = simulate_fluid(inc, cap, np.full(2, 2.5e5), stop_when_idle=True, **kw)
    assert np.all(np.isfinite(np.asarray(full.finish)))
    for key in ("finish", "start", "sent", "delivered", "dropped", "in_flight"):
        np.testing.assert_array_equal(np.asarray(getattr(fast, key)),
                                      np.asarray(getattr(full, key)), err_msg=key)
    assert int(fast.state.k) == int(full.state.k) == 400
    np.testing.assert_array_equal(np.asarray(fast.trajectory.t), np.asarray(full.trajectory.t))
    np.testing.assert_array_equal(np.asarray(fast.trajectory.delivered),
                                  np.asarray(full.trajectory.delivered))
    same_law = np.array_equal(np.asarray(fast.law_state.rate), np.asarray(full.law_state.rate))
    assert same_law == late          # skipped (the law stopped adapting) only when idle early


def test_save_schedule_divides_or_rounds_up():
    # compare keeps the user's horizon and saves every largest divisor of 40 up to 20
    # dividing it; scale rounds the horizon up to whole chunks of SAVE_EVERY
    from fabric_jax.fluid.options import SAVE_EVERY, save_schedule
    assert SAVE_EVERY == 20
    for n, every in ((400, 20), (410, 10), (408, 8), (405, 5), (404, 4), (402, 2), (401, 1),
                     (18, 2)):
        assert save_schedule(n, round_up=False) == (n, every)
    assert save_schedule(401, round_up=True) == (420, 20)
    assert save_schedule(400, round_up=True) == (400, 20)
    with pytest.raises(ValueError, match="n_steps"):
        save_schedule(0, round_up=True)

def test_flow_on_no_link_is_delivered_and_bytes_are_conserved():
    # Found by tests/test_robustness.py (derandomized CI run): with the per-path
    # allocation of 2026-12-03 a flow crossing no link got no cut-through rate, so its
    # sent bytes vanished.  It is limited by its send rate only, as in the flow-level
    # max-min; flow 0 shares nothing with it.
    inc = Incidence.from_coo(np.array([0]), np.array([0]), np.array([1.0]), n_links=1,
                             n_flows=2)
    cap = np.array([gbps(100)])
    size = np.array([50e3, 3e3])
    res = simulate_fluid(inc, cap, size, dt=1e-6, n_steps=40, law="dcqcn",
                         line_rate=np.full(2, gbps(100)))
    np.testing.assert_allclose(np.asarray(res.delivered), size, rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(res.finish)))
    assert float(res.info.max_residual) < 1e-3 * size.sum()


@pytest.mark.slow
def test_flow_whose_counted_bytes_drift_short_still_finishes():
    # Found by experiments/hpcc_fct.py at dt = 0.25 us: float32 keeps two running
    # totals of a flow, ``remaining`` (counted down from its size) and ``passed``
    # (counted up), and over ~10^4 steps of queueing they round apart: 47 flows of
    # 3-30 MB had sent everything (``remaining`` 0, nothing queued) with ``passed``
    # ~1e-4 of their size short of the completion threshold, and never finished.
    # Reproduced by resuming a run whose ``passed`` is set 2e-4 of the size short: the
    # flow must finish when its last byte passes, at the unperturbed run's time.
    C, size, dt = gbps(100), np.array([4e6, 2e6]), 1e-6
    dense = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # 2-to-1 incast
    cap = np.full(3, C)
    kw = dict(dt=dt, flow_control="pfc", latency=np.full(2, 1e-6))
    half = simulate_fluid(dense, cap, size, n_steps=200, **kw)
    # the unperturbed run: the same 200 steps resumed for 400 more (bit-identical to
    # 600 steps in one call on CPU, tests/fluid/test_checkpoint.py); the perturbed resume
    # below reuses its compiled program
    ref = simulate_fluid(dense, cap, size, n_steps=400, init_state=half.state, **kw)
    assert np.all(np.isfinite(np.asarray(ref.finish)))
    state = half.state
    assert np.all(np.asarray(state.x).sum(axis=1) > 0)    # both flows queue
    state = state.replace(passed=state.passed - 2e-4 * size.astype(np.float32))
    rest = simulate_fluid(dense, cap, size, n_steps=400, init_state=state, **kw)
    fin, fin_ref = np.asarray(rest.finish), np.asarray(ref.finish)
    assert np.all(np.isfinite(fin))
    np.testing.assert_allclose(fin, fin_ref, atol=dt)
