"""``simulate_fluid(delay_steps=...)``: delay lines longer than a run needs change no
result, and runs that differ only in latency (or ``dt``) share one compiled program.

The feedback ring and the receiver wires are read at per-flow offsets modulo their
length (:func:`fabric_jax.links.wire_step`, ``fabric_jax.fluid.stages.offer``), so a longer line only
holds more rows that are never read before they are written."""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax.fluid import loop as fluid_loop
from fabric_jax.fluid import simulate_fluid

from tests.helpers import incast_leaf_spine

TOPO, ROUTING, INC = incast_leaf_spine()
SIZE = np.array([3e5, 3e5, 3e5, 3e5, 2e5, 2e5])
KW = dict(dt=1e-6, n_steps=120, law="dcqcn", flow_control="pfc", buffer=TOPO.buffer,
          link_latency=TOPO.latency, nic_links=TOPO, routing=ROUTING, save_every=40)


def _run(latency, **kw):
    return simulate_fluid(INC, TOPO.capacity, SIZE, latency=latency, **KW, **kw)


def test_longer_delay_lines_change_no_result_and_latencies_share_a_program():
    lat_a = np.array([0.0, 1e-6, 2e-6, 0.5e-6, 3e-6, 0.0])   # one-way, outside the links
    lat_b = np.array([4e-6, 0.0, 1e-6, 2.5e-6, 0.0, 6e-6])
    own = _run(lat_a)
    need = int(own.state.ring.shape[0]) - 2          # no RTO steps without drops
    ref_b = _run(lat_b)
    shared = 40
    assert shared > max(need, int(ref_b.state.ring.shape[0]) - 2)
    before = fluid_loop.run_jit._cache_size()
    got_a = _run(lat_a, delay_steps=shared)
    got_b = _run(lat_b, delay_steps=shared)
    # the two latencies compiled one program (the first call of this shape compiled it)
    assert fluid_loop.run_jit._cache_size() == before + 1
    assert got_a.state.ring.shape[0] == shared + 2
    assert got_a.state.wire.shape[0] == shared + 2
    for ref, got in ((own, got_a), (ref_b, got_b)):
        assert np.all(np.isfinite(np.asarray(ref.finish)))
        for name in ("start", "finish", "sent", "delivered", "dropped", "queued"):
            np.testing.assert_array_equal(np.asarray(getattr(got, name)),
                                          np.asarray(getattr(ref, name)), err_msg=name)
        np.testing.assert_array_equal(np.asarray(got.trajectory.rate),
                                      np.asarray(ref.trajectory.rate))
        np.testing.assert_array_equal(np.asarray(got.info.paused_time),
                                      np.asarray(ref.info.paused_time))
        # in flight is a sum over the wire's rows: more (zero) rows, another order
        np.testing.assert_allclose(np.asarray(got.in_flight), np.asarray(ref.in_flight),
                                   rtol=1e-6, atol=1e-3)
    # the latency matters (else the test above shows nothing)
    assert not np.array_equal(np.asarray(own.finish), np.asarray(ref_b.finish))


@pytest.mark.parametrize("bad", [3, 2.5, True, -1])
def test_delay_steps_below_the_need_or_not_an_integer_is_refused(bad):
    lat = np.full(6, 4e-6)          # base RTT >= 2 x (4 us + the links' latency) > 8 steps
    with pytest.raises(ValueError, match=r"delay_steps must be an integer >= \d+"):
        _run(lat, delay_steps=bad)


def test_sharded_run_takes_delay_steps():
    from fabric_jax.distributed import simulate_fluid_sharded
    kw = dict(KW, routing=None)
    inc1 = INC   # ECMP: one path per flow already
    lat = np.full(6, 1e-6)
    ref = simulate_fluid(inc1, TOPO.capacity, SIZE, latency=lat, **kw)
    got = simulate_fluid_sharded(inc1, TOPO.capacity, SIZE, latency=lat, mesh=None,
                                 delay_steps=30, **kw)
    np.testing.assert_array_equal(np.asarray(got.finish), np.asarray(ref.finish))
