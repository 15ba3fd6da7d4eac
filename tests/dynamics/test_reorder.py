"""Receiver model (issue 14): out-of-order delivery without a reordering NIC, go-back-N
after loss (:mod:`fabric_jax.receiver`, ``simulate_fluid(reorder=, loss_recovery=)``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import leaf_spine, make_routing, shortest_paths
from fabric_jax import receiver as rx
from fabric_jax.fabrics import PRESETS, get_fabric, roce
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.study.scenario import ScenarioError, scenario_from_dict
from fabric_jax.units import US

from tests.helpers import enable_x64

MTU = 4096.0
C100 = 100e9 / 8          # 100 Gb/s in bytes/s


# ------------------------------------------------------------ NumPy oracles
def _p_ooo_numpy(split, delay, rate, mtu, tol=0.0):
    """Independent loops over paths: P(packet overtaken), later packets a Poisson
    stream of rate r / mtu starting one packet time tau = mtu / r after the tagged one."""
    n_f, n_p = split.shape
    out = np.zeros(n_f)
    for f in range(n_f):
        tau = mtu / rate[f]
        for p in range(n_p):
            m = sum(split[f, q] * max(delay[f, p] - delay[f, q] - tol - tau, 0.0) / tau
                    for q in range(n_p))
            out[f] += split[f, p] * (1.0 - np.exp(-m))
    return out


def _p_ooo_monte_carlo(split, delay, rate, mtu, n_packets, seed):
    """Packet level, per tagged packet: its path drawn from ``split``; the later packets
    leave at tau + (Poisson arrivals of rate 1/tau), each on a path drawn from
    ``split``; the tagged packet is out of order when one of them arrives first."""
    rng = np.random.default_rng(seed)
    tau = mtu / rate
    delay = np.asarray(delay)
    horizon = int(np.ceil((delay.max() - delay.min()) / tau)) * 4 + 20
    own = rng.choice(len(split), size=n_packets, p=split)
    send = tau + np.cumsum(rng.exponential(tau, (n_packets, horizon)), axis=1)
    later = rng.choice(len(split), size=(n_packets, horizon), p=split)
    first = (send + delay[later]).min(axis=1)
    return float(np.mean(first < delay[own]))


def _discard_fixed_point_numpy(events, dt, recovery):
    """Iterates phi' = 1 - (1 - phi) e^-n, phi <- phi' e^-dt/T to its fixed point."""
    phi = 0.0
    for _ in range(20000):
        step = 1.0 - (1.0 - phi) * np.exp(-events)
        phi = step * np.exp(-dt / recovery)
    return step


def test_out_of_order_probability_matches_loops_and_packet_level_monte_carlo():
    split = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    delay = np.array([[2e-6, 3.1e-6, 9e-6], [1e-6, 1.4e-6, 1.15e-6], [1e-6, 5e-6, 0.0]])
    rate = np.array([C100, 4 * C100, C100])
    got = np.asarray(rx.out_of_order_probability(jnp.asarray(split), jnp.asarray(delay),
                                                  jnp.asarray(rate), MTU))
    np.testing.assert_allclose(got, _p_ooo_numpy(split, delay, rate, MTU), rtol=1e-5)
    assert got[2] == 0.0                       # a single path never reorders
    assert 0.05 < got[0] < 0.5 and 0.05 < got[1] < 0.5
    for f in (0, 1):                           # the closed form is exact for that stream
        mc = _p_ooo_monte_carlo(split[f], delay[f], rate[f], MTU, 40_000, seed=f)
        assert mc == pytest.approx(got[f], abs=8e-3)
    # a spread below one packet time (328 ns at 100 Gb/s) never reorders
    tau = MTU / C100
    assert float(rx.out_of_order_probability(jnp.asarray(split[:1]), jnp.asarray(
        [[1e-6, 1e-6 + 0.99 * tau, 0.0]]), jnp.asarray(rate[:1]), MTU)[0]) == 0.0
    # tolerance: a NIC absorbing 1 us of skew sees nothing out of order on flow 0
    tol = rx.out_of_order_probability(jnp.asarray(split), jnp.asarray(delay),
                                      jnp.asarray(rate), MTU, 1e-6)
    assert float(tol[0]) == 0.0 and float(tol[1]) < float(got[1])


def test_discard_step_fixed_point_and_one_window_per_isolated_event():
    dt, T = 1e-6, 8e-6
    for n in (0.01, 0.3, 3.0):
        closed = float(rx.discard_fixed_point(n, dt, T))
        assert closed == pytest.approx(_discard_fixed_point_numpy(n, dt, T), rel=1e-6)
    # dt -> 0: the go-back-N efficiency, discarded fraction lambda T / (1 + lambda T)
    lam, small = 2e5, 1e-9
    assert float(rx.discard_fixed_point(lam * small, small, T)) == pytest.approx(
        lam * T / (1 + lam * T), rel=1e-3)
    # one expected event then none: the discarded time adds up to (1 - e^-n) T as dt -> 0
    phi, total, small = jnp.zeros(()), 0.0, 1e-8
    for k in range(6000):
        step, phi = rx.discard_step(phi, 1.0 if k == 0 else 0.0, small, T)
        total += float(step) * small
    assert total == pytest.approx((1 - np.exp(-1.0)) * T, rel=2e-3)


def test_out_of_order_probability_has_finite_gradients():
    split = jnp.array([[0.5, 0.5]])
    g = jax.grad(lambda d: rx.out_of_order_probability(split, d, jnp.array([C100]), MTU)[0])(
        jnp.array([[1e-6, 1.5e-6]]))
    assert np.all(np.isfinite(np.asarray(g))) and float(g[0, 1]) > 0


# ------------------------------------------------------------ fluid runs
def _two_path(extra_s, policy="spray"):
    """One 1 MB flow, host 0 (leaf 0) -> host 1 (leaf 1), over 2 spines at 100 Gb/s, 1 us
    links; the path through spine 1 is ``extra_s`` longer (its spine downlink)."""
    topo = leaf_spine(2, 2, 1, link_gbps=100.0, latency_us=1.0)
    ps = shortest_paths(topo, np.array([0]), np.array([1]))
    r = make_routing(policy, ps)
    inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    lat = np.asarray(topo.latency, float).copy()
    lat[ps.links[0, 1, 2]] += extra_s
    return topo, inc, r, lat


@functools.lru_cache(maxsize=None)   # the tests below share runs (same arguments)
def _run_two_path(extra_s, reorder, policy="spray", n_steps=400):
    topo, inc, r, lat = _two_path(extra_s, policy)
    # delay_steps: one delay-line length for every skew, so that the skews share one
    # compiled program (results unchanged, tests/dynamics/test_delay_lines.py)
    return simulate_fluid(inc, topo.capacity, np.full(1, 1e6), dt=1 * US, n_steps=n_steps,
                          law="none", link_latency=lat, nic_links=topo, routing=r,
                          reorder=reorder, delay_steps=16)


@pytest.mark.slow
def test_spraying_without_reordering_loses_goodput_beyond_a_packet_time():
    # 100 Gb/s: one 4 KB packet time is 328 ns; below it nothing is overtaken, above it
    # a receiver without a reorder buffer discards; with one it loses nothing (the
    # sweep over more skews is the slow test below)
    fct_plain, fct_reorder = [], []
    for extra in (0.0, 400e-9):
        plain, good = _run_two_path(extra, False), _run_two_path(extra, True)
        fct_plain.append(float(plain.fct[0]))
        fct_reorder.append(float(good.fct[0]))
        assert float(good.discarded[0]) == 0.0
    assert float(_run_two_path(0.0, False).discarded[0]) == 0.0
    assert max(fct_reorder) - min(fct_reorder) <= 0.6e-6
    assert fct_plain[0] == pytest.approx(fct_reorder[0], rel=1e-6)
    assert fct_plain[1] > 1.1 * fct_plain[0]


@pytest.mark.slow
def test_spraying_without_reordering_loses_goodput_as_delay_spread_grows():
    # 100 Gb/s: one 4 KB packet time is 328 ns; below it nothing is overtaken
    fct_plain, fct_reorder = [], []
    extras = (0.0, 200e-9, 350e-9, 400e-9, 1e-6)
    for extra in extras:
        plain, good = _run_two_path(extra, False), _run_two_path(extra, True)
        fct_plain.append(float(plain.fct[0]))
        fct_reorder.append(float(good.fct[0]))
        assert float(good.discarded[0]) == 0.0
        if extra < MTU / C100:
            assert float(plain.discarded[0]) == 0.0
    # with reordering only the mean path latency moves (by extra / 2)
    assert max(fct_reorder) - min(fct_reorder) <= 0.6e-6
    np.testing.assert_allclose(fct_plain[:2], fct_reorder[:2], rtol=1e-6)
    assert fct_plain[2] > 1.1 * fct_plain[0]
    assert fct_plain[3] > fct_plain[2]
    assert not np.isfinite(fct_plain[4]) or fct_plain[4] > fct_plain[3]


@pytest.mark.parametrize("extra", [350e-9, 400e-9])
def test_goodput_loss_matches_closed_form(extra):
    # Lone flow at line rate C (no CC), split 1/2-1/2, static skew `extra`, packet time
    # tau = mtu / C: per packet P_ooo = 1/2 (1 - exp(-(extra - tau) / (2 tau))),
    # n = P_ooo C dt / mtu events per step,
    # recovery T = base RTT = 2 x mean one-way latency; the receiver discards the fixed
    # point phi of arrivals, so goodput is (1 - phi) C and FCT ~ size / ((1 - phi) C)
    # + one-way latency (the discard state builds up within ~T, a small transient).
    dt = 1e-6
    res = _run_two_path(extra, False)
    one_way = 4e-6 + extra / 2
    tau = MTU / C100
    p = 0.5 * (1 - np.exp(-(extra - tau) / (2 * tau)))
    phi = _discard_fixed_point_numpy(p * C100 * dt / MTU, dt, 2 * one_way)
    expect = 1e6 / ((1 - phi) * C100) + one_way
    assert 0.1 < phi < 0.7
    assert float(res.fct[0]) == pytest.approx(expect, rel=0.03)
    sent = float(res.sent[0])
    assert float(res.discarded[0]) == pytest.approx(sent - 1e6, rel=1e-3)


@pytest.mark.slow
def test_single_path_never_affected():
    # ECMP puts the flow on one path: a 1 us skew between the candidates costs nothing
    ecmp = _run_two_path(1e-6, False, policy="ecmp")
    assert float(ecmp.discarded[0]) == 0.0
    assert float(ecmp.fct[0]) == pytest.approx(1e6 / C100 + 4.5e-6, rel=2e-3)
    # routing=None (one static path per flow) with reorder=False
    topo, inc, _, lat = _two_path(1e-6, "ecmp")
    res = simulate_fluid(inc, topo.capacity, np.full(1, 1e6), dt=1 * US, n_steps=200,
                         law="none", link_latency=lat, nic_links=topo, reorder=False)
    assert float(res.discarded[0]) == 0.0


@functools.lru_cache(maxsize=None)   # the go-back-N run serves two tests
def _incast(loss_recovery, rto_steps=0):
    """2-to-1 incast over a lossy 64 KB-buffer leaf-spine (tail drop, DCQCN), on a
    reordering NIC: only losses trigger go-back-N (since issue 26 two senders sprayed
    over equal paths also reorder at the spine ports, :mod:`fabric_jax.queueing`)."""
    from fabric_jax.flowcontrol import FlowControl
    topo = leaf_spine(2, 2, 2, link_gbps=100.0, latency_us=1.0)
    ps = shortest_paths(topo, np.array([0, 1]), np.array([2, 2]))
    r = make_routing("spray", ps)
    inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    return simulate_fluid(inc, topo.capacity, np.full(2, 5e5), dt=1 * US, n_steps=400,
                          law="dcqcn", flow_control=FlowControl("drop", rto_steps=rto_steps),
                          buffer=64e3,
                          link_latency=topo.latency, nic_links=topo, routing=r,
                          loss_recovery=loss_recovery, reorder=True)


@pytest.mark.slow
def test_go_back_n_wastes_more_than_selective_under_the_same_loss():
    sel, gbn = _incast("selective"), _incast("go_back_n")
    assert float(np.sum(sel.dropped)) > 0 and float(np.sum(gbn.dropped)) > 0
    assert float(np.sum(sel.discarded)) == 0.0          # reordering NIC: nothing discarded
    assert float(np.sum(gbn.discarded)) > float(np.sum(gbn.dropped))
    assert float(np.sum(gbn.sent)) > float(np.sum(sel.sent))
    assert np.all(np.isfinite(np.asarray(gbn.fct)))
    assert float(np.max(gbn.fct)) > 1.5 * float(np.max(sel.fct))


@pytest.mark.slow
def test_retransmission_timeout_lengthens_each_go_back_n_window():
    # a retransmission timeout (20 us) before the go-back lengthens each wasted window
    gbn = _incast("go_back_n")
    slow = _incast("go_back_n", rto_steps=20)
    assert float(np.sum(slow.discarded)) > float(np.sum(gbn.discarded))


@pytest.mark.slow
def test_conservation_with_discards_in_x64():
    # sent = delivered + in flight + queued + dropped + discarded, per flow, to round-off,
    # with go-back-N discards after drops and out-of-order discards on skewed paths.
    with enable_x64():
        topo = leaf_spine(2, 2, 2, link_gbps=100.0, latency_us=1.0)
        ps = shortest_paths(topo, np.array([0, 1]), np.array([2, 2]))
        r = make_routing("spray", ps)
        inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
        lat = np.asarray(topo.latency, float).copy()
        lat[ps.links[0, 1, 2]] += 500e-9
        res = simulate_fluid(inc, topo.capacity, np.full(2, 5e5), dt=1 * US, n_steps=150,
                             law="dcqcn", flow_control="drop", buffer=64e3, link_latency=lat,
                             nic_links=topo, routing=r, loss_recovery="go_back_n",
                             reorder=False)
        parts = res.delivered + res.in_flight + res.queued + res.dropped + res.discarded
        np.testing.assert_allclose(np.asarray(res.sent), np.asarray(parts), rtol=1e-12,
                                   atol=1e-6)
        assert float(np.sum(res.discarded)) > 0 and float(np.sum(res.dropped)) > 0
        assert float(res.info.max_residual) < 1e-6


def test_bad_options_raise_value_error():
    topo, inc, r, lat = _two_path(0.0)
    kw = dict(dt=1e-6, n_steps=4, routing=r)
    for bad, match in ((dict(reorder="no"), "reorder"), (dict(reorder=1), "reorder"),
                       (dict(loss_recovery="gbn"), "loss_recovery"),
                       (dict(mtu=0.0), "mtu"), (dict(reorder_tolerance=-1e-9),
                                                "reorder_tolerance")):
        with pytest.raises(ValueError, match=match):
            simulate_fluid(inc, topo.capacity, np.ones(1), **kw, **bad)
    with pytest.raises(ValueError, match="reorder"):
        roce(reorder="false")
    with pytest.raises(ValueError, match="loss_recovery"):
        roce(loss_recovery="go-back-n")
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({"fabrics": {"roce": {"reorder": "no"}}})
    assert err.value.key == "fabrics.roce.reorder"
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({"fabrics": {"uec": {"loss_recovery": "gbn"}}})
    assert err.value.key == "fabrics.uec.loss_recovery"


def test_presets_receiver_options_and_the_roce_spray_configuration():
    want = {"infiniband": (True, "go_back_n"), "roce": (False, "go_back_n"),
            "spectrum_x": (True, "selective"), "uec": (True, "selective")}
    assert set(want) == set(PRESETS)
    for name, (reorder, lr) in want.items():
        fab = get_fabric(name)
        assert (fab.reorder, fab.loss_recovery) == (reorder, lr)
        assert fab.receiver_options() == dict(reorder=reorder, loss_recovery=lr)
    spray = roce(routing="spray")
    assert (spray.routing, spray.reorder) == ("spray", False)
    scn = scenario_from_dict({"fabrics": {"presets": ["roce"], "roce": {
        "routing": "spray", "reorder": False, "loss_recovery": "selective"}}})
    fab = get_fabric("roce", **scn.overrides["roce"])
    assert (fab.routing, fab.reorder, fab.loss_recovery) == ("spray", False, "selective")


@pytest.mark.slow
def test_reordering_experiment_quick(tmp_path):
    # experiments/reordering.py --quick: roce(routing="spray") without reordering loses
    # goodput once the spread exceeds one packet time (82 ns at 400 Gb/s) and follows
    # the closed form; with reordering the spread costs nothing; go-back-N wastes bytes
    # that selective resend does not.
    import json
    from experiments import reordering as mod
    out = tmp_path / "r.json"
    # (study 1 for roce only, the preset checked here: --quick adds spectrum_x)
    mod.main(["--quick", "--presets", "roce", "--json", str(out), "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    rows = {(r["preset"], r["reorder"], r["spread_ns"]): r for r in data["spread"]}
    assert rows[("roce", False, 0.0)]["goodput"] == pytest.approx(1.0, abs=0.01)
    assert rows[("roce", False, 200.0)]["goodput"] < rows[("roce", False, 100.0)]["goodput"] \
        < 0.9
    assert rows[("roce", False, 200.0)]["goodput"] == pytest.approx(
        rows[("roce", False, 200.0)]["theory"], rel=0.05)
    assert rows[("roce", True, 200.0)]["goodput"] == pytest.approx(1.0, abs=0.01)
    lossy = {(r["loss_recovery"], r["buffer_kb"]): r for r in data["lossy"]}
    for kb in mod.BUFFERS_KB[:2]:
        assert lossy[("selective", kb)]["discarded_frac"] == 0.0
        assert lossy[("go_back_n", kb)]["discarded_frac"] > 0.0
        assert lossy[("go_back_n", kb)]["last_fct_us"] > lossy[("selective", kb)]["last_fct_us"]
    assert (tmp_path / "reordering.png").is_file()


@pytest.mark.slow  # heavy; the slow suite runs it
def test_reverse_mode_gradient_through_the_receiver_is_finite():
    # jit + grad through the whole loop with out-of-order discards active
    topo, inc, r, lat = _two_path(400e-9)

    def delivered(cap):
        res = simulate_fluid(inc, cap, jnp.full(1, 1e6), dt=1 * US, n_steps=40, law="none",
                             link_latency=lat, nic_links=topo, routing=r, reorder=False,
                             solver_iterations=4, line_rate=np.full(1, C100))
        return jnp.sum(res.delivered), jnp.sum(res.discarded)

    (value, discarded), grad = jax.value_and_grad(delivered, has_aux=True)(
        jnp.asarray(topo.capacity, jnp.float32))
    assert float(discarded) > 0 and float(value) > 0
    assert np.all(np.isfinite(np.asarray(grad)))
