"""To append to tests/test_convergence.py once h-hpcc (NIC round robin, _finish_in_step)
and pending/fluid_last_step_share.patch are in: the fluid-level regression test of
fairness.joining_share.  Fails without the patch (finish 16.0 us at dt = 1 us, 15.5 us
at dt = 0.25 us on h-hpcc 89e57ba / cc7a37a); passes with it (15.30 us at both)."""

import numpy as np
import pytest

from fabric_jax import Incidence, simulate_fluid

C = 100e9 / 8
US = 1e-6


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
    size = np.array([C * 10 * US + C / 2 * 3.3 * US, 100e6])
    res = simulate_fluid(inc, np.full(3, C), size, dt=dt_us * US, n_steps=int(40 / dt_us),
                         arrival=np.array([0.0, 10 * US]), link_latency=np.full(3, 1 * US))
    assert float(res.finish[0]) == pytest.approx(15.3 * US, abs=0.02 * US)
