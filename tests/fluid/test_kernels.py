"""Kernel budget of the compiled fluid step (issue 24): the CPU proxy of GPU launches.

A GPU step costs about one kernel launch per XLA fusion, so the number of fusions in the
step's compiled loop body is what keeps the engine launch-bound or not.  The counts are
those of the CPU backend (``experiments/_hlo.py``; a GPU fuses more), on the issue's
instance, the scenario of ``experiments/bench_dynamics.py`` (``fat_tree(8)``, a
permutation of its 128 hosts and a 16-to-1 incast, DCQCN + PFC).  Before issue 24 the
step held 190 fusions (333 in the whole program); the budget below is the issue's.  (The
CPU backend's count grows with the instance -- it splits large reductions for its
threads -- so the budget is checked on the issue's instance.)
"""

import numpy as np

from experiments import _hlo as hlo
from experiments import bench_dynamics

#: Issue 24: the fused step holds at most this many fusions.
STEP_BUDGET = 150


def _compiled_text(law, fc):
    topo, inc, cap, lat = bench_dynamics.workload(8, 16, 0, None)
    compiled, _ = hlo.compiled_fluid_run(
        inc, cap, np.full(inc.n_flows, 1e6), dt=1e-6, n_steps=4, law=law, flow_control=fc,
        buffer=1e6, link_latency=np.asarray(topo.latency), nic_links=topo)
    return compiled.as_text()


def test_dcqcn_pfc_step_holds_at_most_the_issues_budget_of_fusions():
    counts = hlo.kernel_counts(_compiled_text("dcqcn", "pfc"))
    per_step = hlo.launches_per_step(counts)
    assert 0 < per_step["step_fusions"] <= STEP_BUDGET, per_step
    # inside the step: the cut-through max-min and the NIC water-fill, each a loop
    assert len(per_step["inner"]) == 2, per_step["inner"]
    # the NIC share is a water-fill per port (a static host decision), not a cond over
    # two solvers: no conditional left in the step
    step = max(counts["loops"], key=lambda lp: lp["fusions"])
    assert " conditional(" not in step["text"]
