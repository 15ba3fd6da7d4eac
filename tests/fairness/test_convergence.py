"""Convergence in dt: the share a flow takes in its last step (:func:`fabric_jax.fairness.joining_share`).

Why this matters (``experiments/convergence.py``, issue 11 "Convergence"): in the built-in
scenario's MoE all-to-all, a 667 KB flow shares its NIC with a ring all-reduce flow
(8 MB, greedy) that its own rank starts.  In the flow's last step it offers only
``remaining / dt`` and max-min allocates exactly that, the all-reduce flow taking the rest
of the NIC; read as "the flow sent at that rate over the whole step", its last byte
leaves at the step's end, up to one ``dt`` late (0.7 us of the 1 us at dt = 1 us: the
all-to-all completion then moved by 3.7 % when dt was quartered).  The flow really sends
at its fair share of the NIC (half of it) and finishes early in the step; the share is
:func:`~fabric_jax.fairness.joining_share`.

Oracle: the exact max-min rate of the flow with its demand raised to ``+inf``, others'
demands unchanged (``progressive_filling`` with the one demand changed), and closed
forms stated with each case.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fabric_jax import Incidence, max_min_fair, simulate_fluid
from fabric_jax.fairness import joining_share
from fabric_jax.reference.maxmin_numpy import progressive_filling
from tests.helpers import enable_x64

GBS = 1e9   # 1 GB/s in bytes/s


def _share(A, capacity, demand):
    """Max-min rates with ``demand`` and the joining share, float64."""
    inc = Incidence.from_dense(np.asarray(A, float))
    rates = np.asarray(max_min_fair(inc, capacity, demand).rates)
    return rates, np.asarray(joining_share(inc, np.asarray(capacity, float), rates))


def _raised(A, capacity, demand, f):
    """Oracle: f's max-min rate with its demand raised to +inf."""
    d = np.array(demand, float)
    d[f] = np.inf
    return progressive_filling(np.asarray(A, float), np.asarray(capacity, float), d)[0][f]


def test_nic_shared_with_a_greedy_flow_gives_half():
    # The all-to-all case: a 50 GB/s NIC, the all-to-all flow's last step needs 8.84 KB
    # per 1 us step (demand 8.84 GB/s), the all-reduce flow is greedy.  Max-min: 8.84
    # and 41.16; if the first flow wanted more both would get 25 GB/s (C / 2).
    with enable_x64():
        rates, share = _share([[1.0, 1.0]], np.array([50 * GBS]), np.array([8.84 * GBS, np.inf]))
        np.testing.assert_allclose(rates, [8.84 * GBS, 41.16 * GBS], rtol=1e-12)
        np.testing.assert_allclose(share, [25 * GBS, 41.16 * GBS], rtol=1e-12)


def test_single_link_matches_raised_demand_oracle():
    # One link, k greedy flows and m flows capped below C / (k + m + 1): raising any
    # capped flow's demand makes it join the greedy ones at (C - others) / (k + 1),
    # which stays above every other capped flow -- the exact case of joining_share.
    rng = np.random.default_rng(0)
    with enable_x64():
        for k, m in ((1, 1), (2, 3)) * 5:
            cap = float(rng.uniform(10, 100)) * GBS
            demand = np.concatenate([np.full(k, np.inf),
                                     rng.uniform(0.01, 0.99, m) * cap / (k + m + 1)])
            w = rng.uniform(0.3, 1.0, k + m)          # split fractions on this link
            A = w[None, :]
            rates, share = _share(A, np.array([cap]), demand)
            for f in range(k + m):
                np.testing.assert_allclose(share[f], _raised(A, [cap], demand, f), rtol=1e-9)


def test_parking_lot_closed_form():
    # Link 0 (10 GB/s) carries flows a, b; link 1 (4 GB/s) carries b, c.
    # Demand a = 1: rates (1, 2, 2); a's share is 1 + the 7 GB/s spare on link 0 = 8
    # (raised: a = 8).  Demand c = 1: rates (7, 3, 1); c's share on the saturated
    # link 1 is (0 + 3 * 1 + 1 * 1) / 2 = 2 (raised: b = c = 2, a = 8).
    A = [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
    cap = np.array([10.0, 4.0]) * GBS
    with enable_x64():
        for demand, f, want in (([1, np.inf, np.inf], 0, 8.0), ([np.inf, np.inf, 1], 2, 2.0)):
            d = np.array(demand, float) * GBS
            rates, share = _share(A, cap, d)
            assert share[f] == pytest.approx(want * GBS, rel=1e-12)
            assert share[f] == pytest.approx(_raised(A, cap, d, f), rel=1e-12)


def test_properties_random_networks():
    # Any network: the share is >= the allocation; a flow at the top rate of a
    # saturated link keeps its rate; a flow whose every link has spare capacity gets
    # rate + the smallest spare / weight; jit gives the same numbers.
    rng = np.random.default_rng(1)
    jitted_share = jax.jit(joining_share)
    for _ in range(5):
        n_links, n_flows = 6, 9
        A = (rng.random((n_links, n_flows)) < 0.35) * rng.uniform(0.2, 1.0, (n_links, n_flows))
        A[rng.integers(0, n_links, n_flows), np.arange(n_flows)] = 1.0
        cap = rng.uniform(5, 20, n_links) * GBS
        demand = np.where(rng.random(n_flows) < 0.5, np.inf, rng.uniform(0.5, 5, n_flows) * GBS)
        inc = Incidence.from_dense(A)
        res = max_min_fair(inc, cap, demand)
        rates = np.asarray(res.rates)
        share = np.asarray(joining_share(inc, np.asarray(cap, np.float32), res.rates))
        assert np.all(share >= rates * (1 - 1e-6))
        jitted = np.asarray(jitted_share(inc, np.asarray(cap, np.float32), res.rates))
        np.testing.assert_allclose(jitted, share, rtol=1e-6)
        sat = np.asarray(res.saturated)
        for f in range(n_flows):
            links = np.flatnonzero(A[:, f] > 0)
            top_here = [l for l in links
                        if sat[l] and rates[f] >= np.max(rates[A[l] > 0]) * (1 - 1e-5)]
            if top_here:
                assert share[f] == pytest.approx(rates[f], rel=1e-5)
            elif not sat[links].any():
                spare = cap[links] - A[links] @ rates
                assert share[f] == pytest.approx(rates[f] + np.min(spare / A[links, f]), rel=1e-4)

_C100 = 100e9 / 8
_US = 1e-6


@pytest.mark.parametrize("dt_us", [1.0, 0.25])
def test_last_step_on_a_shared_nic_ends_at_the_fair_share(dt_us):
    # Link 0 is a host NIC, links 1 and 2 switch ports (1 us each: L = 2 us).  Flow 0
    # (145.625 KB) starts at 0; flow 1 (greedy, 100 MB) at 10 us.  Flow 0 sends at C
    # for 10 us (125 KB), then at C / 2 (the NIC's round robin) for 20.625 KB: 3.3 us.
    # Its last byte leaves at 13.3 us and arrives at 15.3 us, inside the step
    # [13, 14] at dt = 1 us, where it offers only its last 8.125 KB (remaining / dt)
    # and the greedy flow takes the rest of the NIC; read as sent over the whole step
    # it would finish at 16 us.
    inc = Incidence.from_coo(np.array([0, 1, 0, 2]), np.array([0, 0, 1, 1]), n_links=3,
                             n_flows=2)
    size = np.array([_C100 * 10 * _US + _C100 / 2 * 3.3 * _US, 100e6])
    res = simulate_fluid(inc, np.full(3, _C100), size, dt=dt_us * _US, n_steps=int(40 / dt_us),
                         arrival=np.array([0.0, 10 * _US]), link_latency=np.full(3, 1 * _US))
    assert float(res.finish[0]) == pytest.approx(15.3 * _US, abs=0.02 * _US)


@pytest.mark.slow
def test_convergence_experiment_runs_and_writes_every_scalar_metric(tmp_path):
    # experiments/convergence.py on one preset over a short horizon: every scalar compare
    # metric gets its dt and dt/2 change (non-scalar entries such as
    # isolation_per_class are skipped, not a crash).
    import json

    from experiments import convergence
    out = tmp_path / "c.json"
    convergence.main(["--dt-us", "2", "--horizon-us", "40",
                      "--presets", "uec", "--json", str(out)])
    change = json.loads(out.read_text())["relative_change"]["uec"]
    assert "effective_bandwidth" in change and "isolation_per_class" not in change
    assert set(change["effective_bandwidth"]) == {"dt", "dt_half"}


@pytest.mark.slow
def test_fifo_bands_experiment_compares_every_band_count_with_the_largest(tmp_path):
    # experiments/fifo_bands.py on one preset over a short horizon: each smaller band
    # count gets its relative change against the largest; the largest is its own
    # reference; the default's verdict is reported.
    import json

    from experiments import fifo_bands as exp
    out = tmp_path / "b.json"
    exp.main(["--bands", "8,2", "--dt-us", "2", "--horizon-us", "40", "--presets", "roce",
              "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["bands"] == [2, 8] and set(data["relative_change"]) == {"2"}
    assert set(data["results"]["8"]["roce"]) == set(data["results"]["2"]["roce"])
    assert "effective_bandwidth" in data["relative_change"]["2"]["roce"]
    assert data["simulation"]["fifo_bands"] == 2 and data["simulation"]["n_steps"] == 20
    with pytest.raises(SystemExit):
        exp.main(["--bands", "0,4"])
