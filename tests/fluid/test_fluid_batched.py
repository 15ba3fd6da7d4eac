"""``simulate_fluid_batched``: many fluid scenarios of one shape in one program (issue 24,
"batching").

Oracle: each scenario run alone through :func:`simulate_fluid`, the same arguments.  A
batch is a ``vmap`` of the same run, so every array must agree (to the bit on the CPU,
where the batched reductions keep their order; the assertion allows float32 round-off),
including the per-scenario solver iteration counts; bytes are conserved per scenario;
bad batches are refused with the scenario named.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import simulate_fluid, simulate_fluid_batched
from fabric_jax.cc.dcqcn import dcqcn_params

from experiments import bench_dynamics

FIELDS = ("finish", "sent", "delivered", "dropped", "queued", "in_flight", "link_queue")


@pytest.fixture(scope="module")
def proxy():
    topo, inc, cap, _ = bench_dynamics.workload(8, 16, 0, None)
    kw = dict(dt=1e-6, n_steps=160, law="dcqcn", flow_control="pfc", buffer=1e6,
              link_latency=np.asarray(topo.latency), nic_links=topo, save_every=40)
    return inc, np.asarray(cap), kw


def _close(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape
    fin = np.isfinite(b)
    np.testing.assert_array_equal(np.isfinite(a), fin)
    np.testing.assert_allclose(a[fin], b[fin], rtol=2e-6, atol=1e-3)


def test_each_scenario_is_its_own_run(proxy):
    inc, cap, kw = proxy
    caps = np.stack([cap, 0.5 * cap, 0.8 * cap])
    sizes = np.stack([np.full(inc.n_flows, s) for s in (1e6, 2e6, 5e5)])
    scen = [dict(params=dcqcn_params("paper", k_min=k)) for k in (5e3, 20e3, 50e3)]
    got = simulate_fluid_batched(inc, caps, sizes, scenarios=scen, **kw)
    assert np.shape(got.finish) == (3, inc.n_flows)
    for b in range(3):
        alone = simulate_fluid(inc, caps[b], sizes[b], **kw, **scen[b])
        for f in FIELDS:
            _close(np.asarray(getattr(got, f))[b], getattr(alone, f))
        _close(np.asarray(got.trajectory.queue)[b], alone.trajectory.queue)
        np.testing.assert_array_equal(np.asarray(got.info.solver_iterations)[b],
                                      np.asarray(alone.info.solver_iterations))
        # bytes conserved per scenario: sent = delivered + queued + in flight + dropped
        sent = np.asarray(got.sent)[b]
        rest = sum(np.asarray(getattr(got, f))[b] for f in ("delivered", "queued",
                                                             "in_flight", "dropped"))
        np.testing.assert_allclose(rest, sent, rtol=1e-5, atol=1.0)
    # the scenarios differ (the test would pass trivially otherwise)
    fin = np.asarray(got.finish)
    assert not np.allclose(fin[0], fin[1]) and not np.allclose(fin[0], fin[2])


def test_a_shared_capacity_and_batched_sizes(proxy):
    inc, cap, kw = proxy
    sizes = np.stack([np.full(inc.n_flows, 1e6), np.full(inc.n_flows, 3e5)])
    got = simulate_fluid_batched(inc, cap, sizes, **kw)
    alone = simulate_fluid(inc, cap, sizes[1], **kw)
    _close(np.asarray(got.finish)[1], alone.finish)


def test_bad_batches_are_refused_with_the_scenario_named(proxy):
    inc, cap, kw = proxy
    size = np.full(inc.n_flows, 1e6)
    with pytest.raises(ValueError, match="nothing is batched"):
        simulate_fluid_batched(inc, cap, size, **kw)
    with pytest.raises(ValueError, match="batch sizes differ"):
        simulate_fluid_batched(inc, np.stack([cap] * 2), np.stack([size] * 3), **kw)
    with pytest.raises(ValueError, match="empty"):
        simulate_fluid_batched(inc, cap, size, scenarios=[], **kw)
    with pytest.raises(ValueError, match="list of dicts"):
        simulate_fluid_batched(inc, cap, size, scenarios={"law": "hpcc"}, **kw)
    # a static choice that differs: one compiled program cannot hold both
    kw2 = {k: v for k, v in kw.items() if k != "law"}
    with pytest.raises(ValueError, match=r"scenarios\[1\]: its static choices"):
        simulate_fluid_batched(inc, cap, size, scenarios=[dict(law="dcqcn"),
                                                          dict(law="hpcc")], **kw2)
    with pytest.raises(ValueError, match=r"scenarios\[0\]: \['law'\] also given"):
        simulate_fluid_batched(inc, cap, size, scenarios=[dict(law="hpcc")], **kw)
    with pytest.raises(ValueError, match=r"scenarios\[0\].*arguments of simulate_fluid"):
        simulate_fluid_batched(inc, cap, size, scenarios=[dict(no_such_option=1)], **kw)
    # simulate_fluid's own checks still run per scenario
    with pytest.raises(ValueError):
        simulate_fluid_batched(inc, np.stack([cap, -cap]), size, **kw)


def test_scenarios_whose_arrays_differ_in_shape_are_refused(proxy):
    # two fault schedules of different lengths: each valid, not one shape
    inc, cap, kw = proxy
    size = np.full(inc.n_flows, 1e6)
    one = [(20e-6, [0], 0.5)]
    two = [(20e-6, [0], 0.5), (60e-6, [1], 0.0)]
    with pytest.raises(ValueError, match=r"scenarios\[1\]: (an array of shape|its)"):
        simulate_fluid_batched(inc, cap, size, scenarios=[dict(faults=one), dict(faults=two)],
                               **kw)
    # the same schedule length with other links and times: one batch
    got = simulate_fluid_batched(inc, cap, size, scenarios=[dict(faults=one),
                                                            dict(faults=[(40e-6, [1], 0.0)])],
                                 **kw)
    alone = simulate_fluid(inc, cap, size, faults=[(40e-6, [1], 0.0)], **kw)
    _close(np.asarray(got.finish)[1], alone.finish)


def test_sweep_runs_fluid_scenarios_through_the_batched_run(proxy):
    from fabric_jax import sweep
    inc, cap, kw = proxy
    caps = np.stack([cap, 0.6 * cap])
    sizes = np.stack([np.full(inc.n_flows, 1e6), np.full(inc.n_flows, 4e5)])
    got = sweep(lambda c, s: simulate_fluid_batched(inc, c, s, **kw), caps, sizes,
                batched=True)
    direct = simulate_fluid_batched(inc, caps, sizes, **kw)
    for f in FIELDS:
        _close(getattr(got, f), getattr(direct, f))
