"""Traffic classes (priorities / VLs), per-priority PFC and shared buffers with dynamic
thresholds in the fluid engine (:mod:`fabric_jax.qos`, :mod:`fabric_jax.flowcontrol`).

Canonical fabrics (100 Gb/s = ``C``):

* two-sender bottleneck: senders on access links 0 and 1 (``2C``, host NICs) into
  link 2 (``C``).  Under ETS with weights ``w0 : w1`` both classes saturated get
  ``C w_c / (w0 + w1)``; under strict priority the higher class gets ``C``, the lower
  nothing.
* hot spot (as ``tests/dynamics/test_flowcontrol.py``): three hot senders and a victim share
  link ``U`` (``2C``) into switch B; the hot flows go to port ``H``, the victim to
  ``R``.  Max-min: victim ``C``.
* N-port switch: N senders each overload their own egress port of one switch; the
  ports share the switch memory ``B`` with dynamic thresholds.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import qos
from fabric_jax.flowcontrol import dynamic_limit, flow_control_params, shared_buffer
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.units import US, gbps

import jax.numpy as jnp

from tests.helpers import incast_leaf_spine, slow_except

C = gbps(100.0)
BIG = 1e12


def two_senders():
    inc = Incidence.from_coo(np.array([0, 2, 1, 2]), np.array([0, 0, 1, 1]), n_links=3,
                             n_flows=2)
    return inc, np.array([2 * C, 2 * C, C])


def tail(res, last=5):
    return np.asarray(res.trajectory.throughput)[-last:].mean(axis=0)


# ------------------------------------------------------------------ arbitration kernel
def _fill_oracle(cap, demand, weight):
    """Weighted max-min of one link by bisection on the water level (NumPy)."""
    if demand.sum() <= cap:
        return demand.copy()
    lo, hi = 0.0, cap / weight.min() + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.minimum(demand, weight * mid).sum() > cap:
            hi = mid
        else:
            lo = mid
    return np.minimum(demand, weight * lo)


@pytest.mark.parametrize("levels", [(0, 0, 0, 0), (0, 1, 2, 3), (1, 1, 0, 0)])
def test_arbitrate_matches_water_filling_oracle(levels):
    rng = np.random.default_rng(3)
    n_links, n_cls = 64, 4
    cap = rng.uniform(1.0, 10.0, n_links)
    demand = rng.uniform(0.0, 6.0, (n_links, n_cls)) * (rng.uniform(size=(n_links, n_cls)) > 0.2)
    weight = rng.uniform(0.5, 4.0, n_cls)
    got = np.asarray(qos.arbitrate(jnp.asarray(cap), jnp.asarray(demand), jnp.asarray(weight),
                                   levels))
    want = np.zeros_like(demand)
    for l in range(n_links):
        left = cap[l]
        for lev in sorted(set(levels), reverse=True):
            m = np.asarray(levels) == lev
            g = _fill_oracle(left, demand[l, m], weight[m])
            want[l, m] = g
            left = max(left - g.sum(), 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # invariants: feasible, within demand, work conserving
    assert np.all(got <= demand + 1e-5)
    np.testing.assert_allclose(got.sum(1), np.minimum(cap, demand.sum(1)), rtol=1e-5)


# ------------------------------------------------------------------ single class
def hotspot():
    n_hot = 3
    u, h, r = n_hot + 1, n_hot + 2, n_hot + 3
    routes = [[i, u, h] for i in range(n_hot)] + [[n_hot, u, r]]
    inc = Incidence.from_coo(np.concatenate(routes), np.repeat(np.arange(n_hot + 1), 3),
                             n_links=n_hot + 4, n_flows=n_hot + 1)
    cap = np.full(n_hot + 4, C)
    cap[u] = 2 * C
    return inc, cap, u


def run_hotspot(law="none", n_steps=3000, size=BIG, **kw):
    inc, cap, _ = hotspot()
    return simulate_fluid(inc, cap, np.full(4, size), dt=1e-6, n_steps=n_steps, law=law,
                          base_rtt=np.full(4, 8 * US), save_every=100, **kw)


def test_one_class_is_the_previous_model_bit_for_bit():
    a = run_hotspot("dcqcn", n_steps=1000, size=5e6, flow_control="pfc", buffer=200e3)
    b = run_hotspot("dcqcn", n_steps=1000, size=5e6, flow_control="pfc", buffer=200e3,
                    traffic_class=np.zeros(4, int), classes=qos.traffic_classes(1))
    for f in ("finish", "sent", "delivered", "dropped"):
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))
    np.testing.assert_array_equal(np.asarray(a.trajectory.queue), np.asarray(b.trajectory.queue))


@pytest.mark.slow  # the routed one-active-class test below keeps the mechanism fast
def test_all_flows_in_one_of_two_classes_match_the_single_class_model():
    # Two classes configured, everything in class 0, the same thresholds per class:
    # the class machinery (arbitration, per-class queues, per-priority PFC, marking
    # per class queue) must reproduce the single-class run up to round-off.
    inc, cap, _ = hotspot()
    fcp = flow_control_params(7, buffer=200e3, xoff=150e3, xon=147e3)
    kw = dict(n_steps=2000, size=2e6, flow_control="pfc", fc_params=fcp)
    a = run_hotspot("dcqcn", **kw)
    b = run_hotspot("dcqcn", traffic_class=np.zeros(4, int),
                    classes=qos.traffic_classes(2, weights=[1.0, 3.0]), **kw)
    fa, fb = np.asarray(a.finish), np.asarray(b.finish)
    assert np.all(np.isfinite(fa))
    np.testing.assert_allclose(fb, fa, rtol=2e-3)
    np.testing.assert_allclose(np.asarray(b.info.paused_time)[:, 0],
                               np.asarray(a.info.paused_time), rtol=2e-2, atol=2e-6)
    assert np.all(np.asarray(b.info.paused_time)[:, 1] == 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("law,fc", [("dcqcn", "pfc"), ("hpcc", "drop")])
def test_one_active_class_matches_the_single_class_model_on_a_routed_fabric(law, fc):
    # leaf_spine(2, 2, 4) at 100 Gb/s, ECMP, a 4-to-1 incast plus two flows from the
    # incast senders (multi-hop paths, excess parked at the first overloaded hop):
    # two classes with every flow in class 1 (class 0 idle) reproduce the single-class
    # run when each class gets the thresholds of the single-class port.
    topo, r, inc = incast_leaf_spine()
    fcp = (flow_control_params(topo.n_links, buffer=300e3, xoff=200e3, xon=197e3)
           if fc == "pfc" else flow_control_params(topo.n_links, buffer=300e3))
    kw = dict(dt=1e-6, n_steps=600, law=law, flow_control=fc, fc_params=fcp,
              link_latency=topo.latency, nic_links=topo, routing=r)
    a = simulate_fluid(inc, topo.capacity, np.full(6, 1e6), **kw)
    b = simulate_fluid(inc, topo.capacity, np.full(6, 1e6), traffic_class=np.ones(6, int),
                       classes=qos.traffic_classes(2), **kw)
    fa, fb = np.asarray(a.finish), np.asarray(b.finish)
    assert np.all(np.isfinite(fa))
    np.testing.assert_allclose(fb, fa, rtol=1e-3)
    np.testing.assert_allclose(np.asarray(b.dropped), np.asarray(a.dropped), rtol=1e-3,
                               atol=1.0)


# ------------------------------------------------------------------ arbitration in the loop
@pytest.mark.slow
def test_strict_priority_high_class_takes_the_link_low_class_starves():
    inc, cap = two_senders()
    # class 1 (high) carries 2 MB: alone on the link it needs 2e6 / C = 160 us
    res = simulate_fluid(inc, cap, np.array([BIG, 2e6]), dt=1e-6, n_steps=300,
                         traffic_class=[0, 1], classes=qos.traffic_classes(2, arbitration="strict"),
                         save_every=10)
    thr = np.asarray(res.trajectory.throughput)
    t = np.asarray(res.trajectory.t)
    early = (t > 20e-6) & (t < 150e-6)
    np.testing.assert_allclose(thr[early, 1], C, rtol=1e-4)
    assert np.all(thr[early, 0] < 1e-3 * C)
    np.testing.assert_allclose(float(res.finish[1]), 2e6 / C, rtol=0.05)
    # after it finishes the low class gets the whole link
    np.testing.assert_allclose(thr[t > 200e-6, 0], C, rtol=1e-4)


@pytest.mark.slow
def test_ets_weights_3_to_1_and_redistribution_when_a_class_is_idle():
    inc, cap = two_senders()
    # class 0 (weight 3) carries S = 3 MB: at 0.75 C it finishes at S / (0.75 C) = 320 us;
    # then class 1 alone gets C (work conservation)
    size0 = 3e6
    res = simulate_fluid(inc, cap, np.array([size0, BIG]), dt=1e-6, n_steps=600,
                         traffic_class=[0, 1],
                         classes=qos.traffic_classes(2, weights=[3.0, 1.0]), save_every=10)
    thr = np.asarray(res.trajectory.throughput)
    t = np.asarray(res.trajectory.t)
    both = (t > 20e-6) & (t < 300e-6)
    np.testing.assert_allclose(thr[both, 0], 0.75 * C, rtol=1e-4)
    np.testing.assert_allclose(thr[both, 1], 0.25 * C, rtol=1e-4)
    np.testing.assert_allclose(float(res.finish[0]), size0 / (0.75 * C), rtol=0.03)
    np.testing.assert_allclose(thr[t > 360e-6, 1], C, rtol=1e-4)
    # an idle class from the start: its share goes to the other at once (the run's
    # first 100 us, saves 60-100 us; 600 steps: the program of the run above)
    alone = simulate_fluid(inc, cap, np.array([BIG, BIG]), dt=1e-6, n_steps=600,
                           arrival=np.array([0.0, 1.0]), traffic_class=[0, 1],
                           classes=qos.traffic_classes(2, weights=[1.0, 3.0]), save_every=10)
    np.testing.assert_allclose(np.asarray(alone.trajectory.throughput)[5:10].mean(axis=0)[0],
                               C, rtol=1e-4)


@pytest.mark.slow
def test_unused_share_of_a_class_goes_to_the_other_class():
    # Flow 0 (class 0, weight 3) sends at most 0.2 C (its NIC); flow 1 (class 1,
    # weight 1) is greedy.  ETS guarantees class 0 0.75 C at link 2, but it uses 0.2 C:
    # work conservation gives class 1 the other 0.8 C.
    # (the first 200 us, saves 160-200 us, of a 600-step run: the program of the ETS
    # test above)
    inc, cap = two_senders()
    res = simulate_fluid(inc, cap, np.full(2, BIG), dt=1e-6, n_steps=600, traffic_class=[0, 1],
                         classes=qos.traffic_classes(2, weights=[3.0, 1.0]), save_every=10,
                         line_rate=np.array([0.2 * C, 2 * C]))
    np.testing.assert_allclose(np.asarray(res.trajectory.throughput)[15:20].mean(axis=0),
                               [0.2 * C, 0.8 * C], rtol=1e-4)


@pytest.mark.slow
def test_class_limited_downstream_keeps_its_share_upstream():
    # Flow 0 (class 0) crosses link 2 and then a slow link 3 (0.2 C); flow 1 (class 1)
    # crosses link 2 only; no congestion control, unbounded buffers.  The ETS switch at
    # link 2 has class-0 bytes to send, so it serves them at class 0's share 0.5 C
    # (they queue at link 3); class 1 gets 0.5 C.  Link 3 carries 0.2 C.
    inc = Incidence.from_coo(np.array([0, 2, 3, 1, 2]), np.array([0, 0, 0, 1, 1]), n_links=4,
                             n_flows=2)
    cap = np.array([2 * C, 2 * C, C, 0.2 * C])
    res = simulate_fluid(inc, cap, np.full(2, BIG), dt=1e-6, n_steps=200, traffic_class=[0, 1],
                         classes=qos.traffic_classes(2), save_every=10, line_rate=np.full(2, C))
    np.testing.assert_allclose(tail(res), [0.2 * C, 0.5 * C], rtol=1e-4)
    q = np.asarray(res.trajectory.queue)
    np.testing.assert_allclose(np.diff(q[-5:, 3]) / 10e-6, 0.3 * C, rtol=1e-3)


@pytest.mark.slow  # heavy; the slow suite runs it
def test_gradient_with_respect_to_ets_weights_matches_closed_form():
    # Two saturated classes on link 2: class 0 delivers T C w0 / (w0 + w1), so
    # d/dw0 = T C w1 / (w0 + w1)^2 (weights are traced leaves; fixed solver iterations
    # make the loop reverse-mode differentiable).  Default FIFO bands (8): class 0's
    # grant (9375 bytes a step) equals its standing queue exactly at step 4, a tie the
    # band kernels must differentiate on one side (fabric_jax.links.fifo_take; until
    # 2026-12-03 the gradient was 30.9; the cheap kernel-level guard is
    # tests/dynamics/test_links.py::test_fifo_queue_weight_gradient_through_ties).
    import jax
    inc, cap = two_senders()
    n_steps, dt = 50, 1e-6

    def delivered0(w0):
        res = simulate_fluid(inc, cap, np.full(2, BIG), dt=dt, n_steps=n_steps,
                             traffic_class=[0, 1],
                             classes=qos.traffic_classes(2, weights=jnp.stack([w0, 1.0])),
                             solver_iterations=4)
        return res.delivered[0] / 1e6

    w0 = 3.0
    t = n_steps * dt
    # the value and the gradient from one value_and_grad (no separate forward compile)
    value, g = jax.value_and_grad(delivered0)(jnp.asarray(w0))
    np.testing.assert_allclose(float(value), t * C * 0.75 / 1e6, rtol=1e-4)
    g = float(g)
    np.testing.assert_allclose(g, t * C * 1.0 / (w0 + 1.0) ** 2 / 1e6, rtol=1e-3)


# ------------------------------------------------------------------ per-priority PFC
@pytest.mark.parametrize("mode", slow_except(["pfc", "credit"], keep=["pfc"]))
def test_per_priority_pause_spares_the_other_class(mode):
    # The hot flows (class 0) congest port H; PFC pauses U for them, credits starve
    # them on U.  The victim (class 1, to the idle port R) keeps its max-min rate C with
    # per-class pause/credits, while with one class it is head-of-line blocked.
    _, _, u = hotspot()
    kw = dict(flow_control=mode, buffer=200e3)
    single = run_hotspot(**kw)
    # weights 3:1 give the hot class 1.5 C of U, more than H drains: H's queue fills
    # B's ingress pool of U for class 0
    split = run_hotspot(traffic_class=[0, 0, 0, 1],
                        classes=qos.traffic_classes(2, weights=[3.0, 1.0]), **kw)
    victim = 3
    assert tail(single, 10)[victim] < 0.8 * C
    np.testing.assert_allclose(tail(split, 10)[victim], C, rtol=0.02)
    paused = np.asarray(split.info.paused_time)
    assert paused.shape == (7, 2)
    assert paused[u, 0] > 1e-4 and paused[u, 1] == 0.0
    # the hot flows still share their bottleneck H
    np.testing.assert_allclose(tail(split, 10)[:3].sum(), C, rtol=0.02)


# ------------------------------------------------------------------ shared buffer
def n_port_switch(n):
    """Links 0..n-1: NIC uplinks (2C) of senders; n..2n-1: the switch's ports (C)."""
    li = np.stack([np.arange(n), n + np.arange(n)], axis=1).ravel()
    inc = Incidence.from_coo(li, np.repeat(np.arange(n), 2), n_links=2 * n, n_flows=n)
    cap = np.concatenate([np.full(n, 2 * C), np.full(n, C)])
    return inc, cap


@pytest.mark.parametrize("n,alpha", slow_except([(4, 1.0), (2, 2.0), (8, 0.5)], keep=[(2, 2.0)]))
def test_dynamic_threshold_n_equal_queues_settle_at_closed_form(n, alpha):
    # Choudhury & Hahne (1998): N queues loaded alike settle at T = alpha B / (1 + N alpha)
    mem = 1e6
    inc, cap = n_port_switch(n)
    sb = shared_buffer(egress_switch=np.r_[np.full(n, -1), np.zeros(n, int)], size=mem,
                       alpha=alpha)
    res = simulate_fluid(inc, cap, np.full(n, BIG), dt=1e-6, n_steps=200, flow_control="drop",
                         shared_buffer=sb, line_rate=np.full(n, 2 * C))
    q = np.asarray(res.link_queue)[n:]
    np.testing.assert_allclose(q, alpha * mem / (1 + n * alpha), rtol=1e-4)
    assert float(np.sum(res.dropped)) > 0


def test_dynamic_limit_kernel_against_bisection_oracle():
    rng = np.random.default_rng(0)
    n_units, n_sw = 40, 3
    sw = rng.integers(0, n_sw + 1, n_units)      # n_sw = not a switch queue
    level = rng.uniform(0, 4e5, n_units)
    floor = level * rng.uniform(0, 0.3, n_units)
    alpha = rng.choice([0.5, 1.0, 2.0], n_units)
    size = np.array([1e6, 2e6, 5e5])
    got = np.asarray(dynamic_limit(jnp.asarray(level), jnp.asarray(floor), jnp.asarray(sw),
                                   jnp.asarray(alpha), jnp.asarray(size)))
    for s in range(n_sw):
        m = sw == s
        lo, hi = 0.0, size[s]
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            occ = np.maximum(np.minimum(level[m], alpha[m] * mid), floor[m]).sum()
            lo, hi = (lo, mid) if mid - size[s] + occ > 0 else (mid, hi)
        np.testing.assert_allclose(got[m], alpha[m] * lo, rtol=1e-5, atol=0.5)
    assert np.all(np.isinf(got[sw == n_sw]))


@pytest.mark.parametrize("mode", ["pfc", pytest.param("drop", marks=pytest.mark.slow)])
def test_conservation_with_classes_and_shared_buffer(mode):
    inc, cap, _ = hotspot()
    sb = shared_buffer(egress_switch=np.array([-1, -1, -1, -1, 0, 1, 1]),
                       ingress_switch=np.array([0, 0, 0, 0, 1, -1, -1]), size=300e3,
                       alpha=[1.0, 2.0])
    res = run_hotspot("none", n_steps=1500, size=2e6, flow_control=mode,
                      traffic_class=[0, 0, 1, 1], classes=qos.traffic_classes(2, weights=[1, 2]),
                      shared_buffer=sb, buffer=200e3)
    sent = np.asarray(res.sent, float)
    rest = sum(np.asarray(getattr(res, f), float) for f in
               ("delivered", "in_flight", "queued", "dropped", "discarded"))
    np.testing.assert_allclose(rest, sent, rtol=1e-5)
    assert float(res.info.max_residual) <= 1e-5 * sent.sum()
    assert np.all(np.isfinite(np.asarray(res.finish)))


# ------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("kw,match", [
    (dict(traffic_class=[0, 2], classes=qos.traffic_classes(2)), "traffic_class"),
    (dict(traffic_class=[0, -1]), "traffic_class"),
    (dict(traffic_class=[0, 1, 1]), "traffic_class"),
    (dict(traffic_class=[0.5, 1]), "traffic_class"),
    (dict(traffic_class=[0, 1], classes=2), "classes"),
    (dict(shared_buffer="x"), "shared_buffer"),
])
def test_bad_class_inputs_raise(kw, match):
    inc, cap = two_senders()
    with pytest.raises(ValueError, match=match):
        simulate_fluid(inc, cap, np.full(2, 1e6), dt=1e-6, n_steps=10, **kw)


@pytest.mark.parametrize("kw,match", [
    (dict(weights=[1.0, -1.0]), "weights"),
    (dict(weights=[1.0, np.nan]), "weights"),
    (dict(weights=[1.0]), "weights"),
    (dict(arbitration="wrr"), "arbitration"),
    (dict(levels=[0]), "levels"),
])
def test_bad_class_config_raises(kw, match):
    with pytest.raises(ValueError, match=match):
        qos.traffic_classes(2, **kw)


def test_bad_shared_buffer_raises():
    with pytest.raises(ValueError, match="n_classes"):
        qos.traffic_classes(0)
    with pytest.raises(ValueError, match="alpha"):
        shared_buffer(egress_switch=[0, 0], size=1e6, alpha=-1.0)
    with pytest.raises(ValueError, match="size"):
        shared_buffer(egress_switch=[0, 0], size=[1e6, 2e6])
    with pytest.raises(ValueError, match="egress_switch"):
        shared_buffer(egress_switch=[0, -2], size=1e6)
    inc, cap = two_senders()
    sb = shared_buffer(egress_switch=[-1, -1, 0], size=1e6, alpha=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="alpha"):
        simulate_fluid(inc, cap, np.full(2, 1e6), dt=1e-6, n_steps=10, traffic_class=[0, 1],
                       shared_buffer=sb)
    sb = shared_buffer(egress_switch=[-1, 0], size=1e6)
    with pytest.raises(ValueError, match="egress_switch"):
        simulate_fluid(inc, cap, np.full(2, 1e6), dt=1e-6, n_steps=10, shared_buffer=sb)


# ------------------------------------------------------------------ presets and topology maps
@pytest.mark.parametrize("name", ["infiniband", "roce", "spectrum_x", "uec"])
def test_presets_are_single_class_by_default_and_map_tenants_to_classes(name):
    from fabric_jax.fabrics import TENANT_CLASSES, get_fabric
    from fabric_jax.topology import leaf_spine
    jobs = {0: "train", 1: "tenant", 2: "background"}
    job_of = np.array([0, 1, 2, 0, 1])
    fab = get_fabric(name)
    topo = leaf_spine(2, 2, 2)
    assert fab.class_map == {}
    opts = fab.class_options(job_of, jobs, topo)        # today's single-class model
    assert "traffic_class" not in opts and "classes" not in opts
    # the Ethernet presets' switches share their ASIC's memory (issue 48), IB's do not
    assert ("shared_buffer" in opts) == (name != "infiniband")
    tc = fab.traffic_classes()
    assert tc.n_classes == 2 and len(tc.names) == 2
    opts = get_fabric(name, class_map=TENANT_CLASSES, shared_buffer_alpha=1.0).class_options(
        job_of, jobs, leaf_spine(2, 2, 2))
    np.testing.assert_array_equal(opts["traffic_class"], [1, 0, 0, 1, 0])
    assert opts["classes"].n_classes == 2 and opts["shared_buffer"].n_switches == 4
    with pytest.raises(ValueError, match="class_map"):
        get_fabric(name, class_map={"train": 2})
    with pytest.raises(ValueError, match="shared_buffer_alpha"):
        get_fabric(name, shared_buffer_alpha=0.0)
    with pytest.raises(ValueError, match="weights"):
        get_fabric(name, class_weights=(1.0, -1.0))


def test_shared_buffer_from_topology_pools_each_switch_s_port_buffers():
    from fabric_jax.topology import leaf_spine
    topo = leaf_spine(2, 2, 2, buffer_kb=100.0)
    sb = shared_buffer(topo, alpha=2.0)
    src, dst = np.asarray(topo.link_src), np.asarray(topo.link_dst)
    host = np.asarray(topo.node_is_host)
    eg, ig = np.asarray(sb.egress_switch), np.asarray(sb.ingress_switch)
    assert np.all((eg == sb.n_switches) == host[src])
    assert np.all((ig == sb.n_switches) == host[dst])
    # each switch's memory: the buffers of the ports it sends on
    for s in range(sb.n_switches):
        np.testing.assert_allclose(float(sb.size[s]), np.asarray(topo.buffer)[eg == s].sum())
