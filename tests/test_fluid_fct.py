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
