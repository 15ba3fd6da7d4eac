"""The fluid loop: queues, buffers, byte conservation, lifecycle, gradients, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import smooth as sm
from fabric_jax.cc import dcqcn_params
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.units import US, gbps

from .helpers import enable_x64

C = gbps(40.0)


def dumbbell(n):
    li = np.stack([1 + np.arange(n), np.zeros(n, int)], axis=1).ravel()
    fi = np.repeat(np.arange(n), 2)
    return Incidence.from_coo(li, fi, n_links=n + 1, n_flows=n), np.full(n + 1, C)


def test_none_law_queue_grows_at_excess_rate_and_fct_closed_form():
    # 2 flows at line rate C into one C bottleneck, 1 MB each, infinite buffers.
    # The queue grows at 2C - C = C; both flows are served C/2 (fluid FIFO, equal
    # arrivals), so both finish at 2 MB / C = 400 us (+ 5 us latency); queue peak =
    # C x (time both send) = C x 1 MB / C = 1 MB (each sends 1 MB at line rate in 200 us).
    with enable_x64():
        inc, cap = dumbbell(2)
        res = simulate_fluid(inc, cap, np.full(2, 1e6), dt=1 * US, n_steps=600,
                             law="none", latency=np.full(2, 5 * US), save_every=10)
        np.testing.assert_allclose(np.asarray(res.finish), 400e-6 + 5e-6, rtol=1e-3)
        assert float(res.info.max_queue[0]) == pytest.approx(1e6, rel=1e-3)
        q = np.asarray(res.trajectory.queue)[:, 0]
        # at t = 100 us the queue is C x 100 us = 500 KB
        assert q[9] == pytest.approx(C * 100e-6, rel=1e-6)
        assert not bool(res.info.stalled)


@pytest.mark.parametrize("law,fc", [
    ("dcqcn", "pfc"), ("ibcc", "credit"), ("nscc", "trim"),
    pytest.param("none", "none", marks=pytest.mark.slow),
    pytest.param("hpcc", "drop", marks=pytest.mark.slow),
    pytest.param("swift", "drop", marks=pytest.mark.slow)])
def test_conservation_exact_in_x64(law, fc):
    # 6 flows, 3-link parking lot (flow 0 crosses all), 64 KB buffers: bytes sent =
    # delivered + queued + dropped, per flow, to float64 round-off.
    with enable_x64():
        li = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
        fi = np.array([0, 0, 0, 1, 2, 3, 4, 5, 5])
        inc = Incidence.from_coo(li, fi, n_links=3, n_flows=6)
        size = np.array([3e6, 1e6, 2e6, 5e5, 1e6, 2e6])
        res = simulate_fluid(inc, np.full(3, C), size, dt=1 * US, n_steps=1500, law=law,
                             flow_control=fc, buffer=64e3, base_rtt=np.full(6, 6 * US))
        sent = np.asarray(res.sent)
        np.testing.assert_allclose(sent, np.asarray(res.delivered + res.queued + res.dropped),
                                   rtol=1e-12, atol=1e-6)
        assert float(res.info.max_residual) < 1e-6
        assert np.all(np.asarray(res.delivered) <= size * (1 + 1e-12))


@pytest.mark.slow
def test_long_run_extreme_parameters_no_nan():
    # 10^5 steps, DCQCN with extreme parameters (g = 1, K_max barely above K_min,
    # P_max = 1, R_AI at 1 Gb/s) under PFC with a tiny buffer: no NaN, no negative rate.
    inc, cap = dumbbell(4)
    p = dcqcn_params("paper", g=1.0, k_min=1.0, k_max=2.0, p_max=1.0, r_ai=gbps(1.0))
    res = simulate_fluid(inc, cap, np.full(4, 1e15), dt=1 * US, n_steps=100_000, law="dcqcn",
                         params=p, flow_control="pfc", buffer=30e3, save_every=1000)
    rate = np.asarray(res.trajectory.rate)
    assert np.all(np.isfinite(rate)) and rate.min() >= 0
    assert np.all(np.isfinite(np.asarray(res.delivered)))
    assert float(np.sum(res.delivered)) > 0.5 * C * 0.1   # the link is not starved


def test_dependencies_and_arrivals():
    # Flow 1 depends on flow 0 (1 MB alone at C = 200 us) plus 10 us compute delay:
    # starts at 210 us.  Flow 2 arrives at 50 us on an independent link.
    with enable_x64():
        inc = Incidence.from_coo(np.array([0, 0, 1]), np.array([0, 1, 2]), n_links=2, n_flows=3)
        res = simulate_fluid(inc, np.full(2, C), np.full(3, 1e6), dt=1 * US, n_steps=600,
                             deps=np.array([-1, 0, -1]), delay=np.array([0, 10e-6, 0]),
                             arrival=np.array([0, 0, 50e-6]))
        np.testing.assert_allclose(np.asarray(res.start), [0, 210e-6, 50e-6], atol=1e-9)
        np.testing.assert_allclose(np.asarray(res.finish), [200e-6, 410e-6, 250e-6], rtol=1e-6)


def test_smooth_grad_matches_central_differences():
    # d(mean bottleneck queue over 300 us)/d(K_min) for DCQCN in the smooth mode, x64:
    # jax.grad vs central differences with step 0.5 KB.
    with enable_x64():
        inc, cap = dumbbell(2)

        def metric(k_min):
            p = dcqcn_params("paper", k_min=k_min)
            res = simulate_fluid(inc, cap, np.full(2, 1e15), dt=2 * US, n_steps=150,
                                 law="dcqcn", params=p, base_rtt=np.full(2, 4 * US),
                                 smooth=sm.smooth(0.2), save_every=1,
                                 line_rate=jnp.full((2,), C))
            return jnp.mean(res.trajectory.queue[:, 0]) / 1e3

        k0, h = 20e3, 500.0
        g = float(jax.grad(metric)(jnp.asarray(k0)))
        fd = (float(metric(k0 + h)) - float(metric(k0 - h))) / (2 * h)
        assert np.isfinite(g) and g != 0.0
        assert g == pytest.approx(fd, rel=0.02, abs=1e-9)


def test_validation_errors():
    inc, cap = dumbbell(2)
    with pytest.raises(ValueError, match="dt"):
        simulate_fluid(inc, cap, np.ones(2), dt=0.0, n_steps=10)
    with pytest.raises(ValueError, match="n_steps"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=0)
    with pytest.raises(ValueError, match="save_every"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, save_every=3)
    with pytest.raises(ValueError, match="law"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, law="reno")
    with pytest.raises(ValueError, match="flow_control"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, flow_control="xon")
    with pytest.raises(ValueError, match="size"):
        simulate_fluid(inc, cap, -np.ones(2), dt=1e-6, n_steps=10)
    with pytest.raises(ValueError, match="line_rate"):
        simulate_fluid(inc, cap, np.ones(2), dt=1e-6, n_steps=10, line_rate=np.zeros(2))
