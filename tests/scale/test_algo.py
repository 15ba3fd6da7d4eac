"""The bytes of the algorithm NCCL runs (:mod:`fabric_jax.scale`): the share of the step's
bytes that crossed a spine, the shares of its communication time per phase, against
hand counts and closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import scale as sc
from fabric_jax.workloads.model import comm_bytes

NIC = 50e9


def test_spine_share_zero_for_leaf_local_jobs():
    # 128 GPUs, units of 8 servers: two packed jobs of 64 GPUs each fill one leaf per
    # rail, so none of their bytes leave it
    topo, st, nic = sc.build_point(128, jobs=2)
    assert sc.scale_topology(128).params["servers_per_leaf"] == 8
    m = sc.point_metrics(sc.ideal_rails(st, nic), st, topo, None, nic, n_rails=8)
    assert m["spine_share"] == 0.0


def test_spine_share_hand_count_two_leaves():
    # 128 GPUs = 16 servers on 2 leaves per rail; pp = 2: stage 0 on servers 0-7 (leaf
    # 0), stage 1 on 8-15 (leaf 1); DP rings and EP groups stay inside a stage, so the
    # only bytes crossing a spine are the pipeline sends: 64 lanes x 2 directions
    mdl, plan = sc.scale_plan(n_gpus=128, pp=2)
    assert (plan.pp, plan.dp, plan.ep) == (2, 8, 8)
    st = sc.step_flows(mdl, plan, skew=0.0, slice_time=None)
    cb = comm_bytes(mdl, plan)
    pp = 64 * 2 * cb["pp_send_bytes"] * cb["pp_send_count"] / 2
    ep = 128 * 7 / 8 * cb["ep_alltoall_bytes"] * cb["ep_alltoall_count"]
    dp = 2 * 128 * 7 / 8 * cb["dp_allreduce_bytes"]
    want = pp / (pp + ep + dp)
    topo = sc.scale_topology(128)
    ideal = sc.ideal_rails(st, NIC)
    assert sc.spine_share(ideal, topo) == pytest.approx(want, rel=1e-9)
    assert 0.001 < want < 0.5
    # the simulated run's paths give the same count (rail 0 alone: every rail alike)
    run = sc.simulate_rails(st, topo, "roce", rails=(0,), dt=0.5e-6, n_steps=40)
    assert run.hops is not None and set(np.unique(run.hops)) == {2, 4}
    assert sc.spine_share(run, topo) == pytest.approx(want, rel=1e-9)


def test_time_shares_closed_form_on_the_ideal_crossbar():
    # 64 GPUs, pp = 1: a uniform all-to-all (each NIC 7 flows out, 7 in, at 1/7 of the
    # line rate), then the reduce-scatter and all-gather ring flows at line rate:
    # T_a = 7 s_a / C, T = T_a + 2 s_dp / C; no pipeline; no latency
    mdl, plan = sc.scale_plan(n_gpus=64, pp=1)
    assert (plan.pp, plan.dp, plan.ep) == (1, 8, 8)
    st = sc.step_flows(mdl, plan, skew=0.0, slice_time=None, latency="none")
    cb = comm_bytes(mdl, plan)
    s_a = cb["ep_alltoall_bytes"] * cb["ep_alltoall_count"] / 8
    s_dp = 7 / 8 * cb["dp_allreduce_bytes"]
    t_a, T = 7 * s_a / NIC, 7 * s_a / NIC + 2 * s_dp / NIC
    m = sc.point_metrics(sc.ideal_rails(st, NIC), st, sc.scale_topology(64), None, NIC,
                         n_rails=8)
    sh = m["time_shares"]
    assert set(sh) == set(sc.TIME_SHARE_KEYS)
    assert sh["all_to_all"] == pytest.approx(t_a / T, rel=1e-6)
    assert sh["all_to_all_pipeline"] == pytest.approx(t_a / T, rel=1e-6)
    assert sh["dp"] == pytest.approx(1 - t_a / T, rel=1e-6)
    assert sh["pipeline"] == 0.0


def test_time_shares_count_the_calls_latency_in_their_phase():
    # with NCCL's per-message latency, each phase's share takes its calls' latency:
    # the shares still sum to one, and the all-to-all's rises with its 1,024 calls
    topo, st, nic = sc.build_point(16)
    _, st0, _ = sc.build_point(16, latency="none")
    run = sc.ideal_rails(st, nic)
    a = sc.point_metrics(run, st, topo, None, nic, n_rails=8)["time_shares"]
    b = sc.point_metrics(run, st0, topo, None, nic, n_rails=8)["time_shares"]
    assert a["all_to_all_pipeline"] + a["dp"] == pytest.approx(1.0, rel=1e-12)
    assert b["all_to_all_pipeline"] + b["dp"] == pytest.approx(1.0, rel=1e-12)
    assert a["all_to_all"] > b["all_to_all"]
    lat = sc.collective_overhead(st.info, nic)
    L = lat["total"]
    t_comm = sc.point_metrics(run, st, topo, None, nic, n_rails=8)["comm_time"]
    l_ap = sum(c["per_call"] * c["count"] for c in lat["calls"].values() if c["phase"] < 2)
    t_ap = max(run.finish[run.flows.phase <= 1]) * st.slices
    assert a["all_to_all_pipeline"] == pytest.approx((t_ap + l_ap) / t_comm, rel=1e-9)
    assert L > l_ap > 0
