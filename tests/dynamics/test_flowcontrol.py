"""Link-level flow control: PFC pause spreading and victims, IB credits and IB CC.

Hot-spot fabric (hand built, 100 Gb/s links): three hot senders s0..s2 and a victim
sender v attach to switch A (links 0..3); A -> B is link 4 (U, 200 Gb/s); B -> H
(link 5) is the hot receiver's port, B -> R (link 6) the victim's.  Hot flows:
s_i -> U -> H; victim: v -> U -> R.  Ideal (max-min) rates: hot 100/3 Gb/s each (H is
their bottleneck), victim 100 Gb/s (U has room for 100 + 100).
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax.flowcontrol import FlowControl, flow_control_params, pfc_thresholds
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.units import US, gbps

C = gbps(100.0)
N_HOT = 3
U, H, R = N_HOT + 1, N_HOT + 2, N_HOT + 3
VICTIM = N_HOT


def hotspot():
    routes = [[i, U, H] for i in range(N_HOT)] + [[N_HOT, U, R]]
    li = np.concatenate(routes)
    fi = np.repeat(np.arange(N_HOT + 1), 3)
    inc = Incidence.from_coo(li, fi, n_links=N_HOT + 4, n_flows=N_HOT + 1)
    cap = np.full(N_HOT + 4, C)
    cap[U] = 2 * C
    return inc, cap


def run(law, fc, n_steps=6000, **kw):
    inc, cap = hotspot()
    return simulate_fluid(inc, cap, np.full(N_HOT + 1, 1e12), dt=1e-6, n_steps=n_steps,
                          law=law, flow_control=fc, buffer=200e3,
                          base_rtt=np.full(N_HOT + 1, 8 * US), save_every=100, **kw)


def tail_throughput(res, last=30):
    return np.asarray(res.trajectory.throughput)[-last:].mean(axis=0)


@pytest.fixture(scope="module")
def pfc_none():
    return run("none", "pfc")


def test_pfc_pause_spreads_and_victim_suffers(pfc_none):
    res = pfc_none
    paused = np.asarray(res.info.paused_time)
    # The hot port H is never paused (its receiver sinks at line rate) but the pause
    # spreads two hops upstream: U (into B) and all four access links (into A).
    assert paused[H] == 0.0 and paused[R] == 0.0
    assert paused[U] > 1e-3
    assert np.all(paused[:U] > 1e-3)
    thr = tail_throughput(res)
    # H admits 100 Gb/s of hot traffic -> 100/3 per hot flow.  A pauses its four ingress
    # links together and U's queue is a FIFO, so the victim is served like each hot
    # sender: 100/3 Gb/s instead of its max-min 100 Gb/s (head-of-line blocking).
    np.testing.assert_allclose(thr[:N_HOT], C / 3, rtol=0.03)
    assert thr[VICTIM] == pytest.approx(C / 3, rel=0.1)
    # Lossless: headroom absorbs the reaction, nothing dropped.
    assert float(np.sum(res.dropped)) == 0.0


def test_dcqcn_reduces_pause_time(pfc_none):
    res = run("dcqcn", "pfc")
    base = np.asarray(pfc_none.info.paused_time)
    with_cc = np.asarray(res.info.paused_time)
    # DCQCN marks at K_min = 5 KB, far below the PFC XOFF (~185 KB): pauses only during
    # the start-up burst.  Require a 10x cut in total pause time.
    assert with_cc.sum() < 0.1 * base.sum()


def test_credit_backpressure_is_lossless_and_hol_blocks_victim():
    res = run("none", "credit")
    assert float(np.sum(res.dropped)) == 0.0
    # Same head-of-line argument as PFC: victim ~ 100/3 Gb/s, averaged over the run
    # (its rate at single steps swings between 0.67 and 3x that under credits with FIFO
    # queues, so step snapshots are no measure of it).
    rate = np.asarray(res.delivered) / 6e-3
    assert rate[VICTIM] == pytest.approx(C / 3, rel=0.1)
    np.testing.assert_allclose(rate[:N_HOT], C / 3, rtol=0.03)
    # Pools never exceed the 200 KB buffer by more than one step of traffic (200 Gb/s x
    # 1 us = 25 KB), the credit loop's one-step lag.
    assert float(np.max(res.info.max_queue[U])) > 0


@pytest.mark.slow
def test_ibcc_hotspot_victim_recovers():
    no_cc = tail_throughput(run("none", "credit"))
    with_cc = tail_throughput(run("ibcc", "credit"))
    # IB CC throttles the hot senders (the LLNL CC table goes down to 25 % of line rate,
    # 3 x 25 Gb/s < 100 Gb/s, so it can), their backlog at U disappears and the victim
    # gets most of its 100 Gb/s back.
    assert with_cc[VICTIM] > 2.0 * no_cc[VICTIM]
    assert with_cc[VICTIM] > 0.7 * C
    assert with_cc[:N_HOT].sum() > 0.9 * C     # and the hot port stays busy


@pytest.mark.parametrize("mode", [pytest.param("drop", marks=pytest.mark.slow), "trim"])
def test_lossy_drops_conserve_bytes_and_resend(mode):
    inc, cap = hotspot()
    size = np.full(N_HOT + 1, 2e6)
    res = simulate_fluid(inc, cap, size, dt=1e-6, n_steps=4000, law="nscc",
                         flow_control=FlowControl(mode, rto_steps=20 if mode == "drop" else 0),
                         buffer=50e3, base_rtt=np.full(N_HOT + 1, 8 * US))
    dropped = float(np.sum(res.dropped))
    assert dropped > 0                                  # the 50 KB buffers overflow
    assert float(res.info.max_queue.max()) <= 50e3 * (1 + 1e-5)
    # Goodput is exact: every flow delivers its size; sent = size + resent = size + dropped.
    np.testing.assert_allclose(np.asarray(res.delivered), size, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(res.sent), size + np.asarray(res.dropped), rtol=1e-5)
    assert bool(np.all(np.isfinite(np.asarray(res.finish))))


def test_pfc_thresholds_and_validation():
    # Headroom = C x reaction + 2 MTU = 12.5 GB/s x 1 us + 2 kB = 14.5 kB.
    xoff, xon = pfc_thresholds(np.array([C]), 200e3, reaction_s=1e-6)
    assert xoff[0] == pytest.approx(200e3 - 14.5e3)
    assert xon[0] == pytest.approx(xoff[0] - 3e3)
    with pytest.raises(ValueError, match="buffer too small"):
        pfc_thresholds(np.array([C]), 10e3, reaction_s=1e-6)
    with pytest.raises(ValueError, match="mode"):
        FlowControl("ethernet")
    with pytest.raises(ValueError, match="xon"):
        flow_control_params(2, buffer=1e5, xoff=1e4, xon=2e4)
