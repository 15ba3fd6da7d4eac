"""Flow completion in the fluid loop: short flows on busy NICs and next to HPCC flows.

Hand-derived cases (100 Gb/s links, 1 us each, dt = 1 us):

* a NIC arbitrates among its flows ([HPCC-NS3] ``RdmaEgressQueue::GetNextQindex``,
  round-robin over queue pairs): a short flow starting on a NIC that two long flows
  already saturate gets a third of the NIC at once, so it completes in about
  ``3 S / C + L``; a NIC that kept the long flows' unsent bytes as a shared FIFO would
  make it wait behind that backlog (hundreds of KB after 50 us);
* a single short flow on an idle path completes in exactly ``S / C + L`` wherever in
  a step it arrives (it sends only after its release, its last bytes at line rate);
* HPCC (eta = 0.95) keeps no standing queue, so a short flow joining two HPCC flows in
  steady state waits at most the burst it makes itself: its last byte leaves behind at
  most ``eta S`` of the long flows' bytes (``eta S / C``), plus one step.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import Incidence, simulate_fluid

C = 100e9 / 8
US = 1e-6


def _paths(paths, n_links):
    li = np.concatenate(paths)
    fi = np.repeat(np.arange(len(paths)), [len(p) for p in paths])
    return Incidence.from_coo(li, fi, n_links=n_links, n_flows=len(paths))


def test_short_flow_on_a_busy_nic_gets_its_share_at_once():
    # Link 0 is the host NIC; links 1..3 switch ports to three receivers.  Flows 0 and
    # 1 (10 MB, law "none": line rate) saturate the NIC from t = 0; flow 2 (10 KB)
    # starts at 50 us.  One-way latency L = 2 us.
    inc = _paths([[0, 1], [0, 2], [0, 3]], 4)
    size = np.array([10e6, 10e6, 10e3])
    arrival = np.array([0.0, 0.0, 50 * US])
    res = simulate_fluid(inc, np.full(4, C), size, dt=1 * US, n_steps=200, arrival=arrival,
                         link_latency=np.full(4, 1 * US), save_every=1)
    fct = float(res.fct[2])
    assert fct <= 3 * 10e3 / C + 2 * US + 2 * US          # ~4.4 us: a third of the NIC
    thr = np.asarray(res.trajectory.throughput)
    np.testing.assert_allclose(thr[10:50, :2].sum(axis=1), C, rtol=1e-4)   # NIC full
    np.testing.assert_allclose(thr[10:50, 0], thr[10:50, 1], rtol=1e-4)    # shared fairly
    assert float(np.max(np.asarray(res.trajectory.queue))) == 0.0          # no backlog
    # what the NIC could not send is still the senders': sent = delivered + in flight
    np.testing.assert_allclose(np.asarray(res.sent),
                               np.asarray(res.delivered + res.in_flight), rtol=1e-5)
    assert float(res.sent[0]) < 0.6 * C * 200 * US


@pytest.mark.parametrize("size", [5e3, 20e3])
@pytest.mark.parametrize("offset", [0.0, 0.3, 0.9])
def test_single_short_flow_idle_path_is_exact_inside_a_step(size, offset):
    # 5 KB (0.4 us, shorter than dt) and 20 KB (1.6 us) at 100 Gb/s over NIC -> switch
    # port (1 us each): alone they take S / C + 2 us.  Arriving anywhere inside a step,
    # the flow sends only after its release and its last bytes leave at line rate, so
    # the fluid FCT is exact (float32 round-off), not merely within one dt (a flow
    # spread over whole steps is off by up to 0.6 us / 0.9 us here).
    inc = _paths([[0, 1]], 2)
    res = simulate_fluid(inc, np.full(2, C), np.array([size]), dt=1 * US, n_steps=20,
                         arrival=np.array([(3 + offset) * US]),
                         link_latency=np.full(2, 1 * US))
    assert float(res.fct[0]) == pytest.approx(size / C + 2 * US, abs=1e-3 * US)


def test_short_flow_next_to_hpcc_flows_waits_at_most_its_own_burst():
    # Three NICs (links 0..2) into one switch port (link 3).  Flows 0 and 1 (HPCC,
    # 1 GB) converge to eta C together with no standing queue; flow 2 (5 KB, HPCC,
    # starting at line rate) arrives at 400 us.  Its FCT exceeds the idle one
    # (S/C + L) by at most eta S / C (the long flows' bytes interleaved with its burst
    # in the FIFO) plus one step.
    inc = _paths([[0, 3], [1, 3], [2, 3]], 4)
    size = np.array([1e9, 1e9, 5e3])
    arrival = np.array([0.0, 0.0, 400 * US])
    res = simulate_fluid(inc, np.full(4, C), size, dt=1 * US, n_steps=420, law="hpcc",
                         arrival=arrival, link_latency=np.full(4, 1 * US), save_every=1)
    q = np.asarray(res.trajectory.queue)[:, 3]
    assert q[300:400].max() < 1e3                         # HPCC: no standing queue
    thr = np.asarray(res.trajectory.throughput)[300:400, :2].sum(axis=1)
    assert 0.9 * C < thr.mean() < C                       # ... at about eta C
    extra = float(res.fct[2]) - (5e3 / C + 2 * US)
    assert -1 * US <= extra <= 0.95 * 5e3 / C + 1 * US


def _joining_run(dt):
    """The scenario of the two tests below at step ``dt``: (delivered by 60 us, FCTs),
    after the per-run checks."""
    from fabric_jax import flowcontrol as fcm
    inc = _paths([[0, 4], [0, 3], [1, 3], [2, 3]], 5)
    size = np.array([2e6, 200e3, 1e6, 1e6])
    arrival = np.array([10.3 * US, 0.0, 0.0, 0.0])
    fcp = fcm.flow_control_params(5, buffer=np.full(5, 300e3), xoff=np.full(5, 200e3),
                                  xon=np.full(5, 197e3))
    res = simulate_fluid(inc, np.full(5, C), size, dt=dt, n_steps=int(round(250 * US / dt)),
                         arrival=arrival, link_latency=np.full(5, 1 * US),
                         nic_links=np.array([1, 1, 1, 0, 0], bool), flow_control="pfc",
                         fc_params=fcp, save_every=1)
    tr = res.trajectory
    t = np.asarray(tr.t)
    offer = np.asarray(tr.rate)[:, 1]
    t_sent = float(t[np.argmax(offer == 0)] - dt)     # end of the last step it offered
    assert t_sent <= 21.7 * US + 2 * dt
    assert float(np.max(np.asarray(tr.queue)[:, 3])) > 150e3    # ... into a standing queue
    deliv60 = float(np.sum(np.asarray(tr.throughput)[t <= 60 * US + 1e-12, 1]) * dt)
    assert deliv60 > 50e3
    fct = np.asarray(res.fct, float)
    assert np.all(np.isfinite(fct))
    return deliv60, fct


def test_flow_joining_a_saturated_port_keeps_its_nic_share():
    # The scenario of the dt test below at dt = 1 us only (the NIC's round robin gives
    # flow 1 half of the NIC at once, into port 3's standing queue); the dt comparison
    # is the slow test.
    _joining_run(1 * US)


@pytest.mark.slow
def test_flow_joining_a_saturated_port_keeps_its_nic_share_in_dt():
    # Regression (issue 11, dt convergence of compare under RoCE): links 0..2 are host
    # NICs, 3 and 4 switch ports, PFC on, law "none", 100 Gb/s, 1 us links.  Flows 2
    # and 3 (1 MB, NICs 1 and 2) build a standing queue at port 3 from t = 0; flow 1
    # (200 KB, NIC 0) sends into it at line rate; flow 0 (2 MB, NIC 0 -> port 4) joins
    # its NIC at 10.3 us.  The NIC then gives flow 1 half of its capacity at once
    # (round-robin among its QPs), whatever lies downstream: flow 1 has sent all its
    # bytes by 10.3 us + (200 KB - 10.3 us C) / (C/2) = 21.7 us, and they take their
    # place in port 3's FIFO.  A NIC that only let through what could cross the whole
    # path cut-through starved flow 1 (port 3's standing queue leaves no capacity to
    # fresh offers) until flows 2 and 3 finished, ~170 us, and whether a flow had
    # finished sending before such a starvation began depended on dt (RoCE effective
    # bandwidth 0.57 at dt = 1 us, 0.31 at 0.25 us).  Flow 1's bytes delivered by 60 us
    # and every FCT move by at most 3 % when dt is quartered.
    out = [_joining_run(dt) for dt in (1 * US, 0.25 * US)]
    (d0, f0), (d1, f1) = out
    assert abs(d0 / d1 - 1) <= 0.03
    np.testing.assert_allclose(f0, f1, rtol=0.03)
