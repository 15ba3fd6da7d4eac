"""Issue 26: packet-scale port waits and reordering (:mod:`fabric_jax.queueing`,
:func:`fabric_jax.receiver.out_of_order_probability` with ``wait=``), window-limited
laws (:attr:`fabric_jax.cc.Law.window`), DCTCP, and the ns-3 side-by-side's figures
transcribed (tests never need ns-3)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import cc, leaf_spine, make_routing, shortest_paths
from fabric_jax import queueing as qm
from fabric_jax import receiver as rx
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.units import gbps

MTU = 4096.0
C100 = gbps(100.0)
S100 = MTU / C100          # one packet's service time at 100 Gb/s, 328 ns


# ------------------------------------------------------------ port waits
def _one_port(rates_by_ingress, cap=C100):
    """One egress link (link 0) fed from ingress links 1.. (one flow per ingress)."""
    n = len(rates_by_ingress)
    link = np.array([[1 + i, 0] for i in range(n)], np.int32)     # hop 0 ingress, hop 1 egress
    prev = np.array([[n + 1, 1 + i] for i in range(n)], np.int32)
    pairs = qm.ingress_pairs(link, prev, n + 1)
    pairs = qm.IngressPairs(jnp.asarray(pairs.pair), jnp.asarray(pairs.pair_link))
    entry = jnp.asarray(np.repeat(np.asarray(rates_by_ingress, float)[:, None], 2, axis=1))
    capacity = jnp.full((n + 1,), cap)
    return qm.port_wait(entry, jnp.asarray(link), pairs, capacity, MTU)


def test_port_wait_closed_forms():
    # one ingress port never queues (its packets come serialised): no wait at any load
    w = _one_port([0.9 * C100])
    assert float(w.busy[0]) == 0.0 and float(w.mean[0]) == 0.0
    # N equal inputs: Karol-Hluchyj-Morgan, mean wait (N-1)/N rho / (2 (1 - rho)) S and
    # busy probability rho (1 - 1/N)
    for n, rho in ((2, 0.5), (4, 0.7)):
        w = _one_port([rho * C100 / n] * n)
        assert float(w.mean[0]) == pytest.approx((n - 1) / n * rho / (2 * (1 - rho)) * S100,
                                                 rel=1e-5)
        assert float(w.busy[0]) == pytest.approx(rho * (1 - 1 / n), rel=1e-5)
    # many inputs: the M/D/1 (Pollaczek-Khinchine) mean rho S / (2 (1 - rho))
    w = _one_port([0.6 * C100 / 200] * 200)
    assert float(w.mean[0]) == pytest.approx(0.6 * S100 / 0.8, rel=6e-3)
    # unequal inputs: (rho^2 - sum p^2) / (2 rho (1 - rho)) S
    p = np.array([0.4, 0.2, 0.1])
    w = _one_port(list(p * C100))
    rho = p.sum()
    assert float(w.mean[0]) == pytest.approx((rho ** 2 - (p ** 2).sum()) / (2 * rho * (1 - rho))
                                             * S100, rel=1e-5)
    # saturated: evaluated at MAX_UTILISATION, finite
    w = _one_port([0.7 * C100, 0.7 * C100])
    cap_rho = qm.MAX_UTILISATION
    assert float(w.mean[0]) == pytest.approx(cap_rho * 0.5 * S100 / (2 * (1 - cap_rho)), rel=1e-5)


def test_burstiness_scales_the_mean_and_bad_values_raise():
    base = float(_one_port([0.3 * C100, 0.3 * C100]).mean[0])
    n = 2
    link = np.array([[1 + i, 0] for i in range(n)], np.int32)
    prev = np.array([[n + 1, 1 + i] for i in range(n)], np.int32)
    pairs = qm.ingress_pairs(link, prev, n + 1)
    w = qm.port_wait(jnp.full((2, 2), 0.3 * C100), jnp.asarray(link), pairs,
                     jnp.full((3,), C100), MTU, burstiness=2.0)
    assert float(w.mean[0]) == pytest.approx(2 * base, rel=1e-6)
    for bad in (-1.0, float("nan"), "1", True):
        with pytest.raises(ValueError, match="burstiness"):
            qm.check_burstiness(bad)


# ------------------------------------------------------------ out of order vs Monte Carlo
def _mc_per_hop(split, delay, busy, mean, rate, n, seed):
    """Packet level: each packet's path drawn from ``split``; at each of its path's hops
    it waits 0 with probability 1 - busy, else an exponential of mean mean/busy
    (i.i.d. per packet and hop); later packets leave as a Poisson stream of rate
    rate/mtu from one packet time on (the model's send process); the tagged packet is
    out of order when a later packet on another path arrives first."""
    rng = np.random.default_rng(seed)
    n_p, n_h = busy.shape
    tau = MTU / rate
    theta = np.where(busy > 0, mean / np.maximum(busy, 1e-30), 0.0)
    horizon = int(np.ceil((theta.sum(1).max() * 30 + np.ptp(delay)) / tau)) + 20

    def wait(paths):
        e = rng.exponential(1.0, paths.shape + (n_h,)) * theta[paths]
        return np.where(rng.random(paths.shape + (n_h,)) < busy[paths], e, 0.0).sum(-1)

    own = rng.choice(n_p, size=n, p=split)
    x = delay[own] + wait(own)
    send = tau + np.cumsum(rng.exponential(tau, (n, horizon)), axis=1)
    later = rng.choice(n_p, size=(n, horizon), p=split)
    y = np.where(later == own[:, None], np.inf, send + delay[later] + wait(later))
    return float(np.mean(y.min(axis=1) < x))


@pytest.mark.slow
def test_out_of_order_probability_matches_monte_carlo_of_per_hop_delays():
    # Stated error: the model keeps each path's exact atom and mean and makes the rest
    # one exponential; against the per-hop sums it is within 10 % + 3 Monte Carlo
    # standard errors (measured: <= 0.012 absolute on these cases).
    cases = []
    for rho in (0.5, 0.9):        # 4 sprayed paths, 2 random hops each (leaf-spine)
        b = rho * 0.75
        cases.append((np.full(4, 0.25), np.zeros(4), np.full((4, 2), b),
                      np.full((4, 2), b * S100 / (2 * (1 - rho))), rho * C100))
    cases.append((np.array([0.5, 0.5]), np.array([0.0, 2e-7]),
                  np.array([[0.6, 0.2], [0.3, 0.5]]),
                  np.array([[4e-7, 1e-7], [2e-7, 3e-7]]), C100))
    n = 20_000
    for i, (split, delay, busy, mean, rate) in enumerate(cases):
        atom, theta = qm.path_wait(jnp.asarray(busy)[None], jnp.asarray(mean)[None],
                                   jnp.ones((1,) + busy.shape, bool))
        got = float(rx.out_of_order_probability(jnp.asarray(split)[None],
                                                jnp.asarray(delay)[None],
                                                jnp.asarray([rate]), MTU,
                                                wait=(atom, theta))[0])
        mc = _mc_per_hop(split, delay, busy, mean, rate, n, seed=i)
        se = np.sqrt(max(mc * (1 - mc), 1e-4) / n)
        assert abs(got - mc) <= 0.1 * got + 3 * se, (i, got, mc)
    # no waits: exactly the mean-delay model of issue 14
    split = jnp.array([[0.5, 0.5]])
    delay = jnp.array([[1e-6, 1.6e-6]])
    plain = rx.out_of_order_probability(split, delay, jnp.array([C100]), MTU)
    waited = rx.out_of_order_probability(split, delay, jnp.array([C100]), MTU,
                                         wait=(jnp.ones((1, 2)), jnp.zeros((1, 2))))
    assert float(waited[0]) == pytest.approx(float(plain[0]), rel=1e-6)
    # equal mean delays: reordering only from the waits, and it grows with them
    eq = jnp.zeros((1, 2))
    p = [float(rx.out_of_order_probability(split, eq, jnp.array([C100]), MTU,
                                           wait=(jnp.full((1, 2), 0.5),
                                                 jnp.full((1, 2), th)))[0])
         for th in (0.0, 1e-7, 3e-7, 1e-6)]
    assert p[0] == 0.0 and p[1] < p[2] < p[3]


# ------------------------------------------------------------ fluid: spraying, plain RoCE NIC
def _spray_goodput(loads, reorder):
    """2 leaves x 2 hosts, 2 spines, 100 Gb/s: every host sends to its peer on the other
    leaf at load x line rate (law none), sprayed; goodput = delivered / arrived."""
    topo = leaf_spine(2, 2, 2, link_gbps=100.0, latency_us=1.0)
    src, dst = np.array([0, 1, 2, 3]), np.array([2, 3, 0, 1])
    ps = shortest_paths(topo, src, dst)
    r = make_routing("spray", ps)
    inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    out = []
    for load in loads:
        res = simulate_fluid(inc, topo.capacity, np.full(4, 1e12), dt=0.5e-6, n_steps=60,
                             law="none", line_rate=np.full(4, load * C100),
                             link_latency=topo.latency, nic_links=topo, routing=r,
                             reorder=reorder, loss_recovery="go_back_n")
        d, x = float(np.sum(res.delivered)), float(np.sum(res.discarded))
        out.append(d / (d + x))
    return out


@pytest.mark.slow
def test_spraying_on_a_symmetric_fabric_loses_goodput_as_load_rises():
    loads = (0.02, 0.4, 0.8)
    plain = _spray_goodput(loads, False)
    assert plain[0] == pytest.approx(1.0, abs=1e-6)          # zero loss as load -> 0
    assert all(a > b for a, b in zip(plain, plain[1:])), plain
    assert plain[-1] < 0.8
    assert _spray_goodput(loads[-1:], True) == [1.0]


# ------------------------------------------------------------ windows
def test_window_cap_and_laws_with_windows():
    assert float(cc.base.window_cap(jnp.asarray(10.0), jnp.asarray(4.0), 2.0)) == 3.0
    assert float(cc.base.window_cap(jnp.asarray(1.0), jnp.asarray(4.0), 2.0)) == 0.0
    assert cc.LAWS["dcqcn"].window is None and cc.LAWS["ibcc"].window is None
    for name in ("hpcc", "swift", "nscc"):
        assert cc.LAWS[name].window is not None
    assert cc.base.get("dctcp").window is not None


@pytest.mark.slow
def test_hpcc_in_flight_never_exceeds_its_window():
    # 4-to-1 incast at 400 Gb/s, HPCC, stepped one dt at a time (resume = one run); the
    # independent bookkeeping: in flight after step k = sent_k - acked_k, acked_k = the
    # bytes that had reached the receiver one base RTT (n steps) earlier.  A step in
    # which a flow sends ends with at most its window in flight (a window cut below what
    # is already in flight only stops the sender: the bytes out there stay out there).
    from experiments import hpcc_incast
    import fabric_jax as fj
    topo = fj.from_ns3_topology(hpcc_incast.star_text(4, 400.0, 0.5))
    ps = fj.shortest_paths(topo, np.arange(4), np.full(4, 4), max_paths=1)
    inc = fj.Incidence.from_paths(ps, n_links=topo.n_links)
    dt, n_lag = 0.25e-6, 8
    base_rtt = np.full(4, n_lag * dt)
    kw = dict(dt=dt, law="hpcc", params=cc.hpcc_params(link_gbps=400.0), base_rtt=base_rtt,
              latency=np.full(4, n_lag * dt / 2), nic_links=topo)
    size = np.full(4, 5e5)
    state, sent, arrived, ratio, sending = None, [], [], [], []
    for k in range(40):
        res = simulate_fluid(inc, topo.capacity, size, n_steps=1, init_state=state, **kw)
        state = res.state
        sent.append(np.asarray(state.sent, float))
        arrived.append(np.asarray(state.passed, float) + np.asarray(state.discarded))
        acked = arrived[k - n_lag] if k >= n_lag else np.zeros(4)
        window = np.asarray(res.law_state.rate, float) * base_rtt
        ratio.append((sent[k] - acked) / window)
        sending.append(sent[k] - (sent[k - 1] if k else 0.0) > 1.0)
    ratio, sending = np.array(ratio), np.array(sending)
    assert sending.sum() > 15
    assert ratio[sending].max() <= 1.0 + 1e-4, ratio[sending].max()
    assert ratio[sending].max() > 0.99             # the window binds (the test can fail)
    assert ratio.max() > 1.5                       # and HPCC's cut lands below in-flight


@pytest.mark.slow   # two experiment runs; the window itself is checked above
def test_hpcc_incast_finish_converges_in_dt():
    from experiments import hpcc_incast as mod
    got = {}
    for dt_us in (1.0, 0.25):
        r = mod.run(["hpcc"], n_senders=4, link_gbps=400.0, latency_us=0.5, duration_us=100.0,
                    dt_us=dt_us, flow_bytes=5e5)["laws"]["hpcc"]
        got[dt_us] = r
        # the window bounds the queue: at most N - 1 windows of C T beyond the pipe
        assert r["max_queue_bytes"] <= 3 * gbps(400.0) * 2e-6 * (1 + 1e-3)
    f1, f4 = got[1.0]["completion_us"], got[0.25]["completion_us"]
    assert abs(f1 - f4) / f4 <= 0.03, (f1, f4)


# ------------------------------------------------------------ DCTCP
def test_dctcp_lone_flow_and_marking():
    p = cc.dctcp_params(k_bytes=8192.0)
    law = cc.base.get("dctcp")
    view = cc.LinkView(queue=jnp.array([0.0, 8192.0, 9000.0]), capacity=jnp.full(3, C100),
                       usable=jnp.full(3, C100), tx_rate=jnp.zeros(3), buffer=jnp.inf,
                       base_rtt=4e-6)
    from fabric_jax import smooth
    assert np.asarray(law.mark(view, p, smooth.EXACT)).tolist() == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="unknown DCTCP"):
        cc.dctcp_params(K=3)
    # a lone flow is never marked and finishes at line rate: size / C + latency
    topo = leaf_spine(1, 1, 2, link_gbps=100.0, latency_us=1.0)
    ps = shortest_paths(topo, np.array([0]), np.array([1]))
    inc = Incidence.from_paths(ps, n_links=topo.n_links)
    res = simulate_fluid(inc, topo.capacity, np.full(1, 1e6), dt=0.5e-6, n_steps=200,
                         law="dctcp", link_latency=topo.latency, nic_links=topo)
    assert float(res.fct[0]) == pytest.approx(1e6 / C100 + 2e-6, rel=2e-3)


# ------------------------------------------------------------ ns-3, transcribed
#: ns-3 3.44 (pip wheel), experiments/packet_reference/fabric_ref.cc, 2 leaves x 4 hosts,
#: 4 spines, 100 Gb/s, 1 us links, constant-rate UDP permutation sprayed per packet:
#: ``./build/fabric_ref --scenario=leafspine --routing=spray --transport=udp --load=L
#: --linkGbps=100 --latencyUs=1 --durationUs=3000`` (the run of
#: ``python experiments/packet_side_by_side.py``, docs/fidelity.md): load ->
#: (fraction of packets overtaken, mean leaf-uplink queue in bytes).
NS3_SPRAY = {0.5: (0.008376, 652.3), 0.7: (0.1236, 2268.0), 0.9: (0.3815, 8017.0)}

#: The same program, 16-to-1 incast through one switch, 1 MB per sender, DCTCP with step
#: ECN marking at K = 2 packets (C T / 7), 100 Gb/s, 1 us links:
#: ``./build/fabric_ref --scenario=incast --senders=16 --linkGbps=100 --latencyUs=1
#: --flowBytes=1000000 --sampleNs=100``: last finish (from the first data byte), us;
#: bottleneck queue p50, p99 while busy, bytes.
NS3_INCAST = dict(finish_us=1304.0, queue_p50=33190.0, queue_p99=866900.0)


@pytest.mark.slow   # eager model evaluations on the 2 x 4 x 4 leaf-spine
def test_spray_model_against_transcribed_ns3():
    from experiments import packet_side_by_side as side
    for load, (ooo, queue) in NS3_SPRAY.items():
        p, q = side.spray_model(load)
        # stated: out-of-order within a factor 1.6 (ns-3 sends at exact spacing, the
        # model assumes Poisson spacing), uplink queue within 40 % below 0.9 load
        assert ooo / 1.6 <= p <= 1.6 * ooo, (load, p, ooo)
        if load < 0.9:
            assert q == pytest.approx(queue, rel=0.4), (load, q, queue)


@pytest.mark.slow
def test_dctcp_incast_against_transcribed_ns3():
    # the fluid DCTCP incast of experiments/packet_side_by_side.py at dt = 0.25 us against
    # the ns-3 run above: finish and queue p99 within 5 %, p50 within 20 %
    from experiments import packet_side_by_side as side
    fl = side.fluid_incast(16, 1e6, 2, 0.25)
    assert fl["finish_us"] == pytest.approx(NS3_INCAST["finish_us"], rel=0.05)
    assert fl["queue_p99_bytes"] == pytest.approx(NS3_INCAST["queue_p99"], rel=0.05)
    assert fl["queue_p50_bytes"] == pytest.approx(NS3_INCAST["queue_p50"], rel=0.2)
