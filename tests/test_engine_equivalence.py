"""One engine, five drivers: every driver of the fluid contract gives the plain run's results.

The drivers (:mod:`fabric_jax.fluid`): ``batched`` (:func:`fabric_jax.fluid.stack` and one
``vmap`` through :func:`fabric_jax.sweep`), ``windowed`` (flow slots, window by window:
:func:`fabric_jax.simulate_fluid_windowed`), ``sharded`` (the flows split over a device
mesh: :func:`fabric_jax.simulate_fluid_sharded`) and ``resumed`` (``run(problem, state)``
continuing a shorter run) are each compared with the plain run
(:func:`fabric_jax.fluid.run` of the same problem), for a pair of congestion-control law
and flow-control mode that covers every law and every mode once.

Oracle: the plain run.  Tolerance: float64; the windowed and sharded drivers sum over
fewer or differently ordered flows, so results agree to ``RTOL`` (1e-9), the others are
the same program on the same values.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import fabric_jax as fj
from fabric_jax import fluid
from tests.helpers import enable_x64, slow_except

RTOL = 1e-9
FIELDS = ("start", "finish", "sent", "delivered", "dropped", "queued", "in_flight",
          "discarded", "link_queue")
#: (law, flow control): every law and every mode at least once.
PAIRS = [("none", "none"), ("dcqcn", "pfc"), ("ibcc", "credit"), ("hpcc", "pfc"),
         ("swift", "drop"), ("nscc", "trim")]
DRIVERS = ("batched", "windowed", "sharded", "resumed")
CASES = [(d, law, fc) for d in DRIVERS for law, fc in PAIRS]
DEFAULT = [("batched", "dcqcn", "pfc"), ("windowed", "hpcc", "pfc"),
           ("sharded", "ibcc", "credit"), ("resumed", "nscc", "trim")]
N_STEPS = 240
SPLIT = 90      # the resumed driver's first run


def _inputs(law, fc):
    """Six single-path flows on a leaf-spine with one spine: an incast of three into host
    4 (queues, marks and pauses at its port) and a flow to host 5, then two late flows
    (120 and 150 us) that take the slots the first ones leave."""
    topo = fj.leaf_spine(2, 1, 4, link_gbps=100.0, latency_us=1.0)
    ps = fj.shortest_paths(topo, np.array([0, 1, 2, 3, 5, 6]), np.array([4, 4, 4, 5, 7, 4]))
    inc = fj.Incidence.from_paths(ps, np.ones((6, 1)), n_links=topo.n_links)
    kw = dict(dt=1e-6, law=law, flow_control=fc, buffer=np.full(topo.n_links, 120e3),
              link_latency=topo.latency, nic_links=topo,
              arrival=np.array([0, 3e-6, 10e-6, 0, 120e-6, 150e-6]))
    return inc, topo.capacity, np.full(6, 0.3e6), kw


@functools.lru_cache(maxsize=None)
def _plain(law, fc, n_steps=N_STEPS):
    with enable_x64(True):
        inc, cap, size, kw = _inputs(law, fc)
        return jax.device_get(fluid.run(fluid.simulate.prepare_kwargs(
            inc, cap, size, n_steps=n_steps, **kw)))


def _driver(driver, law, fc):
    inc, cap, size, kw = _inputs(law, fc)
    if driver == "batched":
        problems = [fluid.simulate.prepare_kwargs(inc, cap, s, n_steps=N_STEPS, **kw)
                    for s in (size, 1.5 * size)]
        batch, axes = fluid.stack(problems)
        out = fj.sweep(fluid.loop.run_body, batch, in_axes=(axes,))
        return jax.tree_util.tree_map(lambda x: x[0], out)
    if driver == "windowed":
        return fj.simulate_fluid_windowed(inc, cap, size, n_steps=N_STEPS, max_active=5,
                                          window=20, **kw)
    if driver == "sharded":
        return fj.simulate_fluid_sharded(inc, cap, size, n_steps=N_STEPS, **kw)
    first = fluid.simulate.prepare_kwargs(inc, cap, size, n_steps=SPLIT, **kw)
    rest = fluid.simulate.prepare_kwargs(inc, cap, size, n_steps=N_STEPS - SPLIT, **kw)
    return fluid.run(rest, fluid.run(first).state)


@pytest.mark.parametrize("driver, law, fc", slow_except(CASES, DEFAULT))
def test_driver_equals_plain_run(driver, law, fc):
    want = _plain(law, fc)
    with enable_x64(True):
        got = jax.device_get(_driver(driver, law, fc))
    assert np.all(np.isfinite(np.asarray(want.finish))), "every flow finishes in the oracle"
    for name in FIELDS:
        a, b = np.asarray(getattr(got, name), float), np.asarray(getattr(want, name), float)
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * max(np.max(np.abs(b)), 1.0),
                                   err_msg=f"{driver} {law}/{fc}: {name}")
    np.testing.assert_allclose(np.asarray(got.info.paused_time, float),
                               np.asarray(want.info.paused_time, float), rtol=RTOL, atol=1e-15)
    if driver == "resumed":     # the same program on the same values: the same solves
        np.testing.assert_array_equal(np.asarray(got.info.solver_iterations),
                                      np.asarray(want.info.solver_iterations))
    if driver == "batched":
        # a vmapped while loop runs until every scenario's solve has converged; a
        # scenario's own count may then read one iteration more over the run
        np.testing.assert_allclose(np.asarray(got.info.solver_iterations),
                                   np.asarray(want.info.solver_iterations), atol=2)


def test_scenario_exercises_queues_and_flow_control():
    # the equivalence would be weak on an idle fabric: queues build at the incast ports
    # and PFC pauses (the dcqcn / pfc oracle)
    want = _plain("dcqcn", "pfc")
    assert float(np.max(np.asarray(want.info.max_queue))) > 50e3
    assert float(np.sum(np.asarray(want.info.paused_time))) > 0
