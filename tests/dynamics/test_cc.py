"""Conformance suite every congestion-control law must pass, plus law-specific checks.

Scenario for the conformance runs: 4 flows, each on its own 40 Gb/s NIC link, share
one 40 Gb/s bottleneck (hop order: NIC link, bottleneck); 8 us base RTT, dt = 1 us.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import smooth as sm
from fabric_jax.cc import LAWS, FlowSignals, dcqcn, dcqcn_params, hpcc_params, swift_params
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.units import US, gbps

C40 = gbps(40.0)
N = 4
RTT = 8 * US


def dumbbell(n=N, cap=C40):
    li = np.stack([1 + np.arange(n), np.zeros(n, int)], axis=1).ravel()
    fi = np.repeat(np.arange(n), 2)
    return Incidence.from_coo(li, fi, n_links=n + 1, n_flows=n), np.full(n + 1, cap)


@pytest.fixture(scope="module")
def runs():
    """One 20 ms run per law on the 4-flow dumbbell (shared by the conformance tests).

    20 ms because DCQCN with the paper defaults cuts deeply after the line-rate start
    and then refills the link at R_AI per timer period (~0.7 Gb/s per ms per flow).
    """
    inc, cap = dumbbell()
    out = {}
    for name, law in LAWS.items():
        out[name] = simulate_fluid(inc, cap, np.full(N, 1e12), dt=4e-6, n_steps=5000, law=law,
                                   base_rtt=np.full(N, RTT), save_every=50)
    return out


def signals(n, mark=0.0, rtt=RTT, util=0.5, rate=C40 / 2, loss=0.0, line=C40):
    f = lambda v: jnp.full((n,), v)  # noqa: E731
    return FlowSignals(mark=f(mark), rtt=f(rtt), base_rtt=f(RTT), util=f(util), rate=f(rate),
                       loss=f(loss), rx_share=f(line), line_rate=f(line), hops=f(2.0))


# ------------------------------------------------------------------ conformance
@pytest.mark.parametrize("name", sorted(LAWS))
def test_rates_finite_nonnegative_below_line_rate(runs, name):
    tr = runs[name].trajectory
    rate = np.asarray(tr.rate)
    assert np.all(np.isfinite(rate))
    assert rate.min() >= 0.0
    assert rate.max() <= C40 * (1 + 1e-6)


@pytest.mark.parametrize("name", sorted(LAWS))
def test_conservation_every_step(runs, name):
    r = runs[name]
    # Per step, sent = delivered + d(queued) + dropped.  Float32 sums of queues that
    # reach ~100 MB for "none" (4 x 40 Gb/s into 40 Gb/s for 20 ms) carry ~8 B of ulp;
    # 64 B bounds the round-off (the step itself moves up to 40 kB).
    assert float(r.info.max_residual) < 64.0
    tot = r.trajectory
    np.testing.assert_allclose(np.asarray(tot.sent),
                               np.asarray(tot.delivered + tot.queued + tot.dropped), rtol=2e-4)
    # (the cumulative counters are float32 sums of 5000 terms: relative drift ~ 1e-4;
    # tests/fluid/test_fluid.py checks the totals exactly in float64)


@pytest.mark.parametrize("name", sorted(LAWS))
def test_bottleneck_fully_used(runs, name):
    # Every law must keep a single bottleneck busy in steady state: delivered rate over
    # the last 4 ms >= 90 % of C (ideal = C, since the flows together offer more).
    tr = runs[name].trajectory
    thr = np.asarray(tr.throughput)[-20:].sum(axis=1).mean()
    assert thr >= 0.9 * C40


@pytest.mark.parametrize("name", sorted(LAWS))
def test_reacts_to_congestion(name):
    # Same state, two feedbacks: congestion (all packets marked, RTT 10x the base,
    # utilisation 5x, losses) vs none.  After 200 us the congested sender must not send
    # faster than the uncongested one, and strictly slower for every reactive law.
    law = LAWS[name]
    params = law.default_params()
    state = law.init(jnp.full((2,), C40), params)
    calm = signals(2, mark=0.0, rtt=RTT, util=0.5)
    busy = signals(2, mark=1.0, rtt=10 * RTT, util=5.0, loss=C40 / 10)

    def run(sig):
        def body(s, _):
            return law.step(s, sig, 1e-6, params, sm.EXACT), None
        return jax.lax.scan(body, state, None, length=200)[0].rate

    r_calm, r_busy = np.asarray(run(calm)), np.asarray(run(busy))
    assert np.all(np.isfinite(r_busy)) and np.all(r_busy >= 0)
    if name == "none":
        np.testing.assert_array_equal(r_busy, r_calm)
    else:
        assert np.all(r_busy < 0.9 * r_calm)


# DCQCN, HPCC and NSCC (the roce, spectrum_x and uec presets' laws) have their smooth-mode
# gradients checked against finite differences in tests/optimize/test_tuning.py, a stronger test;
# with no law ("none") the smooth mode's gradient runs through flow control and sharing
# alone, which every one of those runs too.
GRAD_FD_CHECKED = {"dcqcn", "hpcc", "nscc"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(LAWS) - GRAD_FD_CHECKED - {"none"}))
def test_smooth_mode_grad_finite(name):
    # d(delivered bytes)/d(capacity) through 100 steps in the smooth mode is finite.
    inc, cap = dumbbell(2)
    law = LAWS[name]

    def f(c):
        r = simulate_fluid(inc, c, jnp.full((2,), 1e12), dt=1e-6, n_steps=100, law=law,
                           base_rtt=np.full(2, RTT), smooth=sm.smooth(0.1), line_rate=jnp.full((2,), C40))
        return jnp.sum(r.delivered) / 1e6

    g = jax.grad(f)(jnp.asarray(cap))
    assert np.all(np.isfinite(np.asarray(g)))


# -------------------------------------------------------------------------- DCQCN
def test_dcqcn_fixed_point_two_flows():
    # [ZHU16] fixed point for N = 2 at 40 Gb/s with the paper defaults (solved by
    # brentq from the paper's equation, independent of the simulator): the fluid run
    # (tau* = 4 us, 0.15 s, last quarter averaged) must match q*, alpha* within 2 %.
    inc, cap = dumbbell(2)
    p = dcqcn_params("paper")
    r = simulate_fluid(inc, cap, np.full(2, 1e15), dt=2e-6, n_steps=75000, law="dcqcn",
                       params=p, base_rtt=np.full(2, 4e-6), save_every=250)
    tr = r.trajectory
    tail = slice(3 * tr.queue.shape[0] // 4, None)
    fp = dcqcn.fixed_point(2, C40, p)
    q = float(np.asarray(tr.queue)[tail, 0].mean())
    alpha = float(np.asarray(tr.law_state.alpha)[tail].mean())
    assert abs(q - fp["queue"]) / fp["queue"] < 0.02
    assert abs(alpha - fp["alpha"]) / fp["alpha"] < 0.02
    # Sanity of the fixed point itself: small-p approximation of [ZHU16],
    # p* ~ cbrt(R_AI N^2 / (tau' C^2) (1/B + N/(T C))^2) in packet units.
    S = 1000.0
    c_pk, rai = C40 / S, float(p.r_ai) / S
    p_approx = (rai * 4 / (55e-6 * c_pk**2) * (S / 10e6 + 2 / (55e-6 * c_pk)) ** 2) ** (1 / 3)
    assert abs(fp["p"] - p_approx) / p_approx < 0.2


@pytest.mark.slow
def test_dcqcn_two_flows_converge_to_equal_share():
    # Flow 1 starts 2 ms after flow 0 (which has the link to itself); after 40 ms both
    # must carry C/2 within 5 % (the fixed point is symmetric, [ZHU16] sec. 5).
    inc, cap = dumbbell(2)
    r = simulate_fluid(inc, cap, np.full(2, 1e15), arrival=np.array([0.0, 2e-3]), dt=2e-6,
                       n_steps=25000, law="dcqcn", params=dcqcn_params("paper"),
                       base_rtt=np.full(2, 4e-6), save_every=250)
    thr = np.asarray(r.trajectory.throughput)[-20:].mean(axis=0)
    np.testing.assert_allclose(thr, C40 / 2, rtol=0.05)


def test_dcqcn_repeated_cuts_exact():
    # With every packet marked (p = 1), g = 0 and alpha = 1, the fluid model reduces to
    # dR_C/dt = -R_C alpha a/(2 tau) with a = 1 and no increase term (rb = rd = 0 at
    # p = 1): explicit Euler gives R_C(n) = R_0 (1 - dt/(2 tau))^n exactly; R_T follows
    # dR_T/dt = -(R_T - R_C)/tau.
    p = dcqcn_params("paper", g=0.0, min_rate=0.0)
    with_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        p = dcqcn_params("paper", g=0.0, min_rate=0.0)
        law = LAWS["dcqcn"]
        s = law.init(jnp.full((1,), C40), p)
        sig = signals(1, mark=1.0, rate=C40)
        dt, n = 1e-6, 100
        for _ in range(n):
            s = law.step(s, sig, dt, p, sm.EXACT)
        expect = C40 * (1 - dt / (2 * 50e-6)) ** n
        np.testing.assert_allclose(float(s.rate[0]), expect, rtol=1e-12)
        assert float(s.alpha[0]) == 1.0
    finally:
        jax.config.update("jax_enable_x64", with_x64)


@pytest.mark.slow
def test_dcqcn_incast_queue_in_red_band():
    # 8-to-1 incast: the [ZHU16] fixed point has K_min < q* < K_max (p* < P_max), so
    # after the start-up transient the bottleneck queue stays in the RED band.
    inc, cap = dumbbell(8)
    p = dcqcn_params("paper")
    fp = dcqcn.fixed_point(8, C40, p)
    assert 5e3 < fp["queue"] < 200e3
    r = simulate_fluid(inc, cap, np.full(8, 1e15), dt=2e-6, n_steps=25000, law="dcqcn",
                       params=p, base_rtt=np.full(8, 4e-6), save_every=250)
    q = np.asarray(r.trajectory.queue)[-40:, 0]
    assert q.min() > 5e3 and q.max() < 200e3


def test_dcqcn_named_parameter_sets():
    hp = dcqcn_params("hpcc_ns3", link_gbps=100)
    # [HPCC-NS3] run.py: K_min = 100 bw/25 KB = 400 KB, R_AI = 5 bw/25 Mb/s = 20 Mb/s.
    assert float(hp.k_min) == pytest.approx(400e3)
    assert float(hp.r_ai) == pytest.approx(20e6 / 8)
    nv = dcqcn_params("nvidia")
    assert float(nv.g) == pytest.approx(5 / 1024)  # DCE_TCP_G 1019 -> 1 - 1019/1024
    with pytest.raises(ValueError, match="variant"):
        dcqcn_params("bogus")
    with pytest.raises(ValueError, match="unknown DCQCN"):
        dcqcn_params("paper", kmin=1.0)


# --------------------------------------------------------------------------- HPCC
def test_hpcc_equilibrium_utilisation():
    # N flows, one link, no standing queue: U = N R / C and dR/dt = 0 with
    # R = R eta / U + R_AI give U = eta + N R_AI / C (see fabric_jax.cc.hpcc).
    inc, cap = dumbbell(N)
    p = hpcc_params(link_gbps=40)
    r = simulate_fluid(inc, cap, np.full(N, 1e12), dt=1e-6, n_steps=3000, law="hpcc",
                       params=p, base_rtt=np.full(N, RTT), save_every=100)
    util = np.asarray(r.trajectory.throughput)[-10:].sum(axis=1).mean() / C40
    expect = 0.95 + N * float(p.r_ai) / C40
    assert util == pytest.approx(expect, rel=2e-3)


# -------------------------------------------------------------------------- Swift
def test_swift_queue_at_delay_target(runs):
    # Fluid Swift settles on d = target = base_target + hops * per_hop
    # = 20 + 2 * 20/6.55 us; the queueing delay is target - base RTT (8 us), so the
    # bottleneck queue is C * (target - 8 us).
    p = swift_params()
    target = float(p.base_target) + 2 * float(p.per_hop)
    expect = C40 * (target - RTT)
    q = np.asarray(runs["swift"].trajectory.queue)[-10:, 0].mean()
    assert q == pytest.approx(expect, rel=0.05)


# ------------------------------------------------------------------ IB CC (issue 5)
C400 = gbps(400.0)


def test_ibcc_ccti_rises_fast_and_decays_one_index_per_timer():
    # Closed forms of the fluid CCTI (congestion-control.md sec. 2.3).  Marked: 1/4 of
    # the packets (marking_rate 3) at 50 GB/s in 2 kB packets -> 50e9/2000/4 = 6.25
    # BECNs per us, each +1 (minus 1/30 per us of timer).  Unmarked from CCTI 100: one
    # index per ccti_timer = 30 us, so 300 us later it is 90 -- the hangover that keeps
    # a flow throttled long after a hot spot has drained.
    from fabric_jax.cc import ibcc
    law, params = ibcc.IBCC, ibcc.ibcc_params()
    state = law.init(jnp.full((1,), C400), params)
    hot = signals(1, mark=0.25, rate=C400, line=C400)
    s1 = law.step(state, hot, 1e-6, params, sm.EXACT)
    assert float(s1.ccti[0]) == pytest.approx(C400 / 2000 * 0.25 * 1e-6,
                                             rel=1e-4)
    s = dataclasses.replace(state, ccti=jnp.full((1,), 100.0))
    calm = signals(1, mark=0.0, rate=C400, line=C400)
    for _ in range(300):
        s = law.step(s, calm, 1e-6, params, sm.EXACT)
    assert float(s.ccti[0]) == pytest.approx(90.0, abs=1e-3)
    # the LLNL table inserts no delay below index 26 and 3 packet times at 127
    table = ibcc.llnl_cct()
    assert table[25] == 0 and table[26] > 0 and table[127] == 3.0


def _ib_run(n_flows, switch_port, n_steps=300, dt=1e-6, nic_links=None):
    # Links: 0 = the sender's NIC uplink (HCA egress), 1 = a switch-to-switch hop,
    # 2 + i = switch port to receiver i.  Flow i: 0 -> 1 -> 2 + i.  400 Gb/s, 1 MB
    # buffers, IB credits, 4 us base RTT.
    from fabric_jax.cc import ibcc
    li = np.stack([np.zeros(n_flows, int), np.ones(n_flows, int), 2 + np.arange(n_flows)],
                  axis=1).ravel()
    inc = Incidence.from_coo(li, np.repeat(np.arange(n_flows), 3), n_links=n_flows + 2,
                             n_flows=n_flows)
    cap = np.full(n_flows + 2, C400)
    params = ibcc.ibcc_params(switch_port=switch_port)
    return simulate_fluid(inc, cap, np.full(n_flows, 1e12), dt=dt, n_steps=n_steps,
                          law="ibcc", params=params, flow_control="credit", buffer=1e6,
                          base_rtt=np.full(n_flows, 4e-6), save_every=10, nic_links=nic_links)


@pytest.mark.slow
def test_ibcc_with_credits_lone_flow_reaches_line_rate():
    # Nothing is congested: no queue beyond the threshold, no mark, CCTI stays at 0 and
    # the flow runs at >= 95 % of line rate in steady state (credits never starve: the
    # 1 MB pool holds 20 us of traffic, far more than the one-step credit loop).
    res = _ib_run(1, np.array([0.0, 1.0, 1.0]))
    tr = res.trajectory
    thr = np.asarray(tr.throughput)[5:, 0]
    assert thr.min() >= 0.95 * C400
    assert float(np.max(np.asarray(tr.law_state.ccti))) == 0.0
    assert float(np.sum(np.asarray(res.info.paused_time))) < 1e-9


@pytest.mark.slow
def test_ibcc_nic_backlog_is_not_a_congested_switch_port():
    # Three flows from one HCA offer 3x its line rate: the HCA shares its link among
    # them and the excess stays unsent.  Switches set FECN, HCAs do not: with the switch-port mask,
    # and also without it (the fluid loop derives the host-NIC egress from the flows'
    # first hops and never marks it), the CCTI stays 0 and the NIC link stays full
    # (the three flows share it max-min).  Bytes drained from the NIC backlog are in
    # flight to the next (switch) hop, not queued there, so at dt = 1 us no transit
    # reads as a queue.  Declaring no NIC link (every port a switch port) the NIC
    # backlog throttles them.
    # (no mask: every port a switch port, spelled per link so that the three runs share
    # one compiled program; a scalar switch_port is the laws' default, run elsewhere)
    mask = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
    no_mask = np.ones(5)
    for sp in (mask, no_mask):
        run = _ib_run(3, sp, dt=1e-6)
        assert float(np.max(np.asarray(run.trajectory.law_state.ccti))) == 0.0
        tot = np.asarray(run.trajectory.throughput)[5:].sum(axis=1)
        assert tot.min() >= 0.95 * C400
    unmasked = _ib_run(3, no_mask, dt=1e-6, nic_links=np.zeros(5, bool))
    assert float(np.max(np.asarray(unmasked.trajectory.law_state.ccti))) > 10.0


# ------------------------------------------------------- parameters per line rate
# The line-rate rules of docs/cc_parameters.md, transcribed: exponent e of
# value(B) = value(B_ref) (B / B_ref) ** e for every parameter of every law.
DOCUMENTED_SCALING = {
    "none": {},
    "dcqcn": dict(k_min=1, k_max=1, p_max=0, g=0, tau=0, tau_prime=0, timer=0, byte_counter=0,
                  fast_recovery=0, ai_stages=0, r_ai=1, r_hai=1, clamp_target=0, min_rate=0,
                  packet=0),
    "ibcc": dict(threshold=0, marking_rate=0, victim_mask=0, ccti_increase=0, ccti_timer=-1,
                 ccti_min=0, ccti_limit=0, cct=0, packet=0, switch_port=0),
    "hpcc": dict(eta=0, r_ai=1, min_rate=0),
    "swift": dict(ai=0, beta=0, max_mdf=0, base_target=0, per_hop=0, mss=0, min_cwnd=0),
    "nscc": dict(mss=0, target_fraction=0, gamma=0, ewma=0, maxwnd_bdp=0, k_min_bdp=0,
                 k_max_bdp=0, rccc=0),
}


def test_scaling_table_in_code_matches_documentation():
    from fabric_jax.cc import LINE_RATE_SCALING, params_for
    assert LINE_RATE_SCALING == DOCUMENTED_SCALING
    for name, rules in DOCUMENTED_SCALING.items():
        fields = {f.name for f in dataclasses.fields(params_for(name, gbps(100.0)))}
        assert fields == set(rules), name


@pytest.mark.parametrize("name", sorted(DOCUMENTED_SCALING))
def test_params_for_400_vs_100_differ_exactly_by_the_rules(name):
    # Every leaf at 400 Gb/s = leaf at 100 Gb/s * 4 ** e (the documented exponent).
    from fabric_jax.cc import params_for
    lo, hi = params_for(name, gbps(100.0)), params_for(name, gbps(400.0))
    for field, e in DOCUMENTED_SCALING[name].items():
        a = np.asarray(getattr(lo, field), float)
        b = np.asarray(getattr(hi, field), float)
        np.testing.assert_allclose(b, a * 4.0 ** e, rtol=1e-6, err_msg=f"{name}.{field}")


def test_line_rate_defaults_closed_form():
    from fabric_jax.cc import params_for
    # [HPCC-NS3] run.py / mix/config.txt at 100 Gb/s: K_min/K_max 400/1600 KB,
    # R_AI 5*100/25 = 20 Mb/s, R_HAI 50*100/25 = 200 Mb/s; timers 4/1/300 us; g 1/256.
    d = params_for("dcqcn", gbps(100.0))
    assert (float(d.k_min), float(d.k_max)) == pytest.approx((400e3, 1600e3))
    assert (float(d.r_ai), float(d.r_hai)) == pytest.approx((20e6 / 8, 200e6 / 8))
    assert (float(d.tau), float(d.tau_prime), float(d.timer)) == pytest.approx((4e-6, 1e-6, 300e-6))
    assert float(d.g) == pytest.approx(1 / 256) and float(d.p_max) == pytest.approx(0.2)
    # HPCC paper rule R_AI = C (1 - eta) / N with N = 100: 100 Gb/s * 0.05 / 100 = 50 Mb/s.
    h = params_for("hpcc", gbps(100.0))
    assert float(h.r_ai) == pytest.approx(50e6 / 8) and float(h.eta) == pytest.approx(0.95)
    # IB CC: 30 us at 40 Gb/s, inverse to the rate: 3 us at 400 Gb/s; vendor marking rate 10.
    ib = params_for("ibcc", gbps(400.0))
    assert float(ib.ccti_timer) == pytest.approx(3e-6) and float(ib.marking_rate) == 10.0
    # NSCC's derived gains (htsim initNsccParams) grow with the BDP: x4 from 100 to 400.
    from fabric_jax.cc import nscc
    p = params_for("nscc", gbps(100.0))
    g100 = nscc.derived_gains(gbps(100.0), 12e-6, p)
    g400 = nscc.derived_gains(gbps(400.0), 12e-6, p)
    for x, y in zip(g100[:3], g400[:3]):
        assert float(y) == pytest.approx(4 * float(x), rel=1e-6)
    # at the htsim reference (100 Gb/s, 12 us): fi = 5 MSS, eta = 0.15 MSS
    assert float(g100[1]) == pytest.approx(5 * 4096, rel=1e-5)


def test_line_rate_arguments_are_checked():
    from fabric_jax.cc import params_for
    with pytest.raises(ValueError, match="line_rate"):
        params_for("dcqcn", -1.0)
    with pytest.raises(ValueError, match="not both"):
        dcqcn_params("hpcc_ns3", line_rate=gbps(100.0), link_gbps=100.0)
    with pytest.raises(ValueError, match="40 Gb/s"):
        dcqcn_params("paper", link_gbps=400.0)
    with pytest.raises(ValueError, match="law"):
        params_for("bogus", gbps(100.0))
    with pytest.raises(ValueError, match="unknown"):
        params_for("hpcc", gbps(100.0), colour=1.0)
    # old call sites: no line rate -> the paper set; a line rate -> the scaled set
    assert float(dcqcn_params().k_min) == pytest.approx(5e3)
    assert float(LAWS["dcqcn"].default_params(line_rate=gbps(25.0)).k_min) == pytest.approx(100e3)


# ------------------------------------------------------------ DCQCN hyper increase
def test_dcqcn_hyper_increase_accelerates_after_f_plus_ai_stages():
    # [HPCC-NS3] RateIncEventMlx: after a cut, timer stage < F fast recovery, = F
    # additive (+R_AI), > F hyper (+R_HAI).  Fluid form with no marks (p = 0): every
    # timer period T adds R_AI to R_T until the age since the cut reaches (F + 1) T =
    # 600 us, then R_HAI = 10 R_AI.  Start just after a cut: R_C = 20, R_T = 40 Gb/s.
    # (float64: an increment of 8.3 kB/s per 1 us step is below float32's resolution
    # of a 5 GB/s rate.)
    with_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        p = dcqcn_params("hpcc_ns3", link_gbps=100.0)
        law = LAWS["dcqcn"]
        line = gbps(100.0)
        s = law.init(jnp.full((1,), line), p)
        s = dataclasses.replace(s, rate=jnp.full((1,), gbps(20.0)),
                                target=jnp.full((1,), gbps(40.0)), age=jnp.zeros((1,)))
        sig = signals(1, mark=0.0, rate=gbps(20.0), line=line)

        def body(st, _):
            st = law.step(st, sig, 1e-6, p, sm.EXACT)
            return st, st.target[0]

        s, rt = jax.lax.scan(body, s, None, length=1200)
        rt = np.asarray(rt)
        age = float(s.age[0])
    finally:
        jax.config.update("jax_enable_x64", with_x64)
    slow = (rt[499] - rt[99]) / 400e-6            # age 100..500 us: additive stage
    fast = (rt[1099] - rt[699]) / 400e-6          # age 700..1100 us: hyper stage
    T = 300e-6
    assert slow == pytest.approx(float(p.r_ai) / T, rel=1e-3)
    assert fast == pytest.approx(float(p.r_hai) / T, rel=1e-3)
    assert fast / slow == pytest.approx(10.0, rel=2e-3)
    # the age is the time since the cut while no cut happens (exact renewal update)
    assert age == pytest.approx(1200e-6, rel=1e-9)


def test_dcqcn_paper_set_has_no_hyper_increase_and_fixed_point_holds():
    # The "paper" set keeps [ZHU16]'s model: R_HAI = R_AI and a clamped target, so the
    # fixed point of fixed_point() is the paper's (20.15 KB for N = 2 at 40 Gb/s, the
    # value the simulated run of test_dcqcn_fixed_point_two_flows matches).
    p = dcqcn_params("paper")
    assert float(p.r_hai) == float(p.r_ai) and float(p.clamp_target) == 1.0
    fp = dcqcn.fixed_point(2, C40, p)
    assert fp["queue"] == pytest.approx(20.15e3, rel=1e-3)
    # the scaled set has a fixed point in its RED band (K_min = 400 KB at 100 Gb/s)
    fp = dcqcn.fixed_point(4, gbps(100.0), dcqcn_params("hpcc_ns3", link_gbps=100.0))
    assert 400e3 < fp["queue"] < 1600e3 and fp["rate"] == pytest.approx(gbps(25.0))


# ------------------------------------------- steady state with line-rate defaults
@pytest.fixture(scope="module")
def steady_runs():
    """4 flows into one bottleneck at 100 and 400 Gb/s, each law at params_for(law, C).

    20 ms (5000 steps of 4 us, the shapes and step of ``runs``, so the compiled loop
    is shared), 8 us base RTT; the last 5 ms are averaged.
    """
    from fabric_jax.cc import params_for
    out = {}
    for g in (100.0, 400.0):
        cap_rate = gbps(g)
        inc, cap = dumbbell(N, cap_rate)
        for name in LAWS:
            out[name, g] = simulate_fluid(inc, cap, np.full(N, 1e13), dt=4e-6, n_steps=5000,
                                          law=name, params=params_for(name, cap_rate),
                                          base_rtt=np.full(N, RTT), save_every=50)
    return out


@pytest.mark.parametrize("gb", [100.0, 400.0])
@pytest.mark.parametrize("name", sorted(LAWS))
def test_steady_state_sane_with_line_rate_defaults(steady_runs, name, gb):
    # Sane = bottleneck busy (>= 90 % of C; HPCC by design at eta + N R_AI / C), flows
    # fair (each within 5 % of C/N), rates within [0, line], and for every reactive law
    # the queue bounded and not growing (the 'none' law lets it grow by 3C).
    C = gbps(gb)
    r = steady_runs[name, gb]
    thr = np.asarray(r.trajectory.throughput)[-25:]
    rate = np.asarray(r.trajectory.rate)
    assert np.all(np.isfinite(rate)) and rate.min() >= 0 and rate.max() <= C * (1 + 1e-6)
    util = thr.sum(axis=1).mean() / C
    if name == "hpcc":
        from fabric_jax.cc import params_for
        assert util == pytest.approx(0.95 + N * float(params_for("hpcc", C).r_ai) / C, rel=3e-3)
    else:
        assert util >= 0.9
    np.testing.assert_allclose(thr.mean(axis=0), thr.mean(axis=0).mean(), rtol=0.05)
    q = np.asarray(r.trajectory.queue)[:, 0]
    if name != "none":
        # not growing: the last 5 ms hold no more than the 5 ms before them + 10 %
        assert q[-25:].mean() <= 1.1 * q[-50:-25].mean() + 1.0
        assert q[-25:].max() < C * 1e-3     # below 1 ms of drain time


def test_ibcc_switch_port_mask_uses_host_mask_not_node_order():
    # Issue 15: in a from_edges graph the switch "sw" is named first, so it is node 0
    # and the hosts are nodes 1, 2 -- "link_src >= n_hosts" would call the link
    # h1 -> sw a switch port and sw -> h0 a host port.  Cables: sw-h0, sw-h1 (two links
    # each); links leaving sw must be 1, links leaving a host 0.
    from fabric_jax.cc import ibcc
    from fabric_jax.topology import from_edges
    topo = from_edges([("sw", "h0"), ("sw", "h1")], hosts=["h0", "h1"])
    mask = ibcc.switch_port_mask(topo)
    names = np.array(topo.node_names)[np.asarray(topo.link_src)]
    np.testing.assert_array_equal(mask, (names == "sw").astype(float))
    assert mask.sum() == 2 and topo.n_hosts == 2
    # and on a builder topology (hosts first) it agrees with the old rule
    from fabric_jax.topology import leaf_spine
    t = leaf_spine(2, 2, 2)
    np.testing.assert_array_equal(ibcc.switch_port_mask(t),
                                  (np.asarray(t.link_src) >= t.n_hosts).astype(float))


def test_docs_table_lists_every_parameter_with_its_exponent():
    # docs/cc_parameters.md has one row "| `law` | `field` | value | unit | e | ..." per
    # parameter; its exponent column must be the transcribed rule above.
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cc_parameters.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0].startswith("`") and cells[1].startswith("`"):
            rows[cells[0].strip("`"), cells[1].strip("`")] = int(cells[4])
    documented = {(law, f): e for law, rules in DOCUMENTED_SCALING.items()
                  for f, e in rules.items()}
    assert rows == documented
