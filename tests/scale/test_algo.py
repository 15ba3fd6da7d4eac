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


@pytest.mark.slow
def test_spine_share_of_the_runs_paths_is_the_hand_count():
    # the simulated run's paths (rail 0 alone: every rail alike) give the same count
    mdl, plan = sc.scale_plan(n_gpus=128, pp=2)
    st = sc.step_flows(mdl, plan, skew=0.0, slice_time=None)
    topo = sc.scale_topology(128)
    want = sc.spine_share(sc.ideal_rails(st, NIC), topo)
    assert want > 0
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


# ------------------------------------------------------------------ PAT
@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 16, 1000])
def test_pat_steps_a_binomial_tree_per_rank(n):
    # oracle by enumeration: rank 0's chunk reaches offset o over the binary digits of o,
    # high bit first; the edge of distance 2^j carries one chunk per distinct prefix
    # o >> j (odd: the hop is taken) -- and the holders after every step are every rank
    from fabric_jax.collectives.schedules import pat_steps
    dist, chunks = pat_steps(n, "all_gather")
    L = int(np.ceil(np.log2(n)))
    assert dist.size == L and list(dist) == [2 ** j for j in range(L)][::-1]
    for d, c in zip(dist, chunks):
        j = int(d).bit_length() - 1
        assert c == len({o >> j for o in range(1, n) if (o >> j) & 1})
    assert chunks.sum() == n - 1                      # (n-1)/n of the buffer, as a ring
    held = {0}
    for d in dist:
        held |= {(h + int(d)) % n for h in held}
    assert held == set(range(n))
    rd, rc = pat_steps(n, "reduce_scatter")
    assert list(rd) == list(dist[::-1]) and list(rc) == list(chunks[::-1])
    with pytest.raises(ValueError, match="op"):
        pat_steps(n, "all_reduce")


def test_pat_flows_bytes_steps_and_dependencies():
    # 128 GPUs, pp = 1: dp = 16 ranks on 16 servers; PAT: 4 steps each way, every rank
    # sending the ring's (n-1)/n of the buffer in all; a step waits for the step into
    # its sender, the first all-gather step for the last reduce-scatter step into it
    mdl, plan = sc.scale_plan(n_gpus=128, pp=1)
    ring = sc.step_flows(mdl, plan, dp_algorithm="ring", slice_time=None)
    pat = sc.step_flows(mdl, plan, dp_algorithm="pat", slice_time=None)
    for ph in (2, 3):
        for st in (ring, pat):
            sent = np.bincount(st.src_rank[st.phase == ph], st.size[st.phase == ph], 128)
            np.testing.assert_allclose(sent, np.bincount(
                ring.src_rank[ring.phase == ph], ring.size[ring.phase == ph], 128),
                rtol=1e-12)
    names = np.array(pat.flows.group_names)[pat.flows.group]
    dp = np.char.startswith(names, "dp_") & (pat.phase >= 2)
    assert dp.sum() == 2 * 4 * 8 * 16                # 2 ops x 4 steps x 8 rings x 16
    cb = comm_bytes(mdl, plan)
    S = cb["dp_allreduce_bytes"]
    rs = dp & (pat.phase == 2)
    assert sorted(np.unique(np.round(pat.size[rs] / (S / 16), 9))) == [1, 2, 4, 8]
    f = np.flatnonzero(rs & np.isclose(pat.size, 4 * S / 16))   # step 1: distance 2
    d = pat.deps[f]
    prev = d[d >= 0]
    assert np.all(np.isclose(pat.size[prev], 8 * S / 16))      # step 0 into the sender
    assert np.all(pat.dst_rank[prev] == pat.src_rank[f])
    ag0 = np.flatnonzero(dp & (pat.phase == 3) & np.isclose(pat.size, S / 16))
    into = pat.deps[ag0, 0]
    assert np.all(pat.phase[into] == 2) and np.all(np.isclose(pat.size[into], S / 16))
    assert np.all(pat.dst_rank[into] == pat.src_rank[ag0])
    with pytest.raises(ValueError, match="dp_algorithm"):
        sc.step_flows(mdl, plan, dp_algorithm="tree")
    with pytest.raises(ValueError, match="dp_algorithm"):
        sc.step_flows(mdl, plan, dp_algorithm="pat", latency="ring")


def test_pat_spine_share_hand_count():
    # the 16-rank DP groups span 2 leaves of 8 servers: a ring crosses 2 hops of 16
    # (2/16 of its bytes); PAT's reduce-scatter sends 8, 4, 2, 1 chunks of S/16 at
    # distances 1, 2, 4, 8, of which 2, 4, 8, 16 of the 16 ranks' sends cross:
    # (16 + 16 + 16 + 16) / 16 S = 4 S of 15 S
    mdl, plan = sc.scale_plan(n_gpus=128, pp=1)
    topo = sc.scale_topology(128)
    leaf = sc.host_leaf(topo)
    for alg, want in (("ring", 2 / 16), ("pat", 4 / 15)):
        st = sc.step_flows(mdl, plan, dp_algorithm=alg, slice_time=None)
        names = np.array(st.flows.group_names)[st.flows.group]
        dp = np.char.startswith(names, "dp_") & (st.phase >= 2)
        up = leaf[st.src] != leaf[st.dst]
        assert st.size[dp & up].sum() / st.size[dp].sum() == pytest.approx(want, rel=1e-12)


def test_nccl_choice_builds_the_flows_and_prices_only_their_latency():
    # the algorithm NCCL's model picks for a call is the one its flows run; a PAT call
    # then costs its latency alone (the flows carry its bytes); dp_algorithm="ring"
    # keeps rings in the flows and prices the calls by NCCL's choice as before
    from fabric_jax.collectives import nccl_latency
    mdl, plan = sc.scale_plan(n_gpus=8192)
    st = sc.step_flows(mdl, plan)
    calls = {c["name"]: c for c in st.info["collectives"]}
    assert calls["dp_reduce_scatter"]["algorithm"] == "pat"       # 256 ranks
    assert calls["edp_reduce_scatter"]["algorithm"] == "ring"     # 32 ranks
    names = np.array(st.flows.group_names)[st.flows.group]
    dp_rs = np.char.startswith(names, "dp_rs")
    assert np.unique(st.size[dp_rs]).size == 8                   # log2(256) steps
    lat = sc.collective_overhead(st.info, 50e9, 1e-6)["calls"]
    c = calls["dp_all_gather"]
    assert lat["dp_all_gather"]["algorithm"] == "pat"
    assert lat["dp_all_gather"]["per_call"] == pytest.approx(
        nccl_latency("all_gather", "pat", c["ranks"], c["nodes"], path_latency=1e-6),
        rel=1e-12)
    old = sc.step_flows(mdl, plan, dp_algorithm="ring")
    assert "algorithm" not in {k for c in old.info["collectives"] for k in c}
    lat_old = sc.collective_overhead(old.info, 50e9, 1e-6)["calls"]
    assert lat_old["dp_all_gather"]["algorithm"] == "pat"
    assert lat_old["dp_all_gather"]["per_call"] > lat["dp_all_gather"]["per_call"]
    # a job of 1,024 GPUs: NCCL picks rings, so the flows are the rings of before
    mdl, plan = sc.scale_plan(n_gpus=1024)
    a, b = sc.step_flows(mdl, plan), sc.step_flows(mdl, plan, dp_algorithm="ring")
    np.testing.assert_array_equal(a.size, b.size)
    np.testing.assert_array_equal(a.deps, b.deps)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["spectrum_x", "roce"])
def test_pat_rail_reduction_equals_full_run(preset):
    # PAT's peers are servers of the same rail (PXN), so rail 0 alone runs as rail 0 of
    # the full fabric, and under adaptive routing every rail as rail 0
    from fabric_jax.fabrics import get_fabric
    mdl, plan = sc.scale_plan(n_gpus=128, pp=1)
    st = sc.step_flows(mdl, plan, dp_algorithm="pat", slice_time=20e-6)
    assert np.all(st.rail == st.dst_rank % 8)
    topo = sc.scale_topology(128, switch_radix=16)
    kw = dict(dt=0.5e-6, n_steps=1600)
    full = sc.simulate_rails(st, topo, preset, rails=None, **kw)
    one = sc.simulate_rails(st, topo, preset, rails=(0,), **kw)
    assert np.all(np.isfinite(full.finish))
    np.testing.assert_allclose(one.finish, full.finish[full.flows.rail == 0], rtol=0,
                               atol=kw["dt"])
    m_full = sc.point_metrics(full, st, topo, preset, 50e9, n_rails=8)
    m_one = sc.point_metrics(one, st, topo, preset, 50e9, n_rails=8)
    assert m_one["spine_share"] == pytest.approx(m_full["spine_share"], rel=1e-12)
    assert m_full["spine_share"] == pytest.approx(                  # paths = leaves
        sc.spine_share(sc.ideal_rails(st, 50e9, rails=None), topo), rel=1e-12)
    assert m_full["spine_share"] > 0
    if get_fabric(preset).routing not in sc.HASHED_ROUTING:
        for r in range(1, 8):
            np.testing.assert_allclose(full.finish[full.flows.rail == r],
                                       full.finish[full.flows.rail == 0], rtol=0,
                                       atol=kw["dt"])
        for key in ("step_time", "p99_completion", "effective_bandwidth"):
            assert m_one[key] == pytest.approx(m_full[key], rel=1e-3), key
        for key in sc.TIME_SHARE_KEYS:
            assert m_one["time_shares"][key] == pytest.approx(
                m_full["time_shares"][key], rel=1e-3), key


def test_cli_dp_algorithm_bad_input_exits_2_naming_the_flag(capsys):
    from fabric_jax.cli import main
    assert main(["scale", "--dp-algorithm", "tree"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dp-algorithm" in err[0]


def test_scale_scenario_carries_dp_algorithm_to_the_step():
    sc_ = sc.scale_scenarios({"topology.gpus": [64], "workload.dp_algorithm": "pat"})[0]
    args = sc.point_arguments(sc_)
    assert args["step_options"]["dp_algorithm"] == "pat"
    assert sc.scale_scenarios({"topology.gpus": [64]})[0].traffic.params[
        "dp_algorithm"] == "nccl"


def test_cli_note_names_the_dp_flows_and_the_spine_share():
    from fabric_jax.scale.cli import _latency_note
    pt = dict(latency="nccl", plan=dict(dp_algorithm="nccl"),
              fabrics={"roce": dict(latency_algorithms={"dp_all_gather": "pat"},
                                    spine_share=0.0524)})
    assert _latency_note(pt) == ("; latency nccl (dp: pat); DP flows nccl; "
                                 "spine 5.24 % of bytes")


def test_time_shares_of_an_unfinished_run_are_nan():
    import dataclasses
    topo, st, nic = sc.build_point(16, latency="none")
    run = sc.ideal_rails(st, nic)
    finish = run.finish.copy()
    finish[0] = np.inf
    sh = sc.time_shares(dataclasses.replace(run, finish=finish), st, st.slices, {})
    assert all(np.isnan(v) for v in sh.values()) and set(sh) == set(sc.TIME_SHARE_KEYS)
    ok = sc.time_shares(run, st, st.slices, {})
    assert ok["all_to_all_pipeline"] + ok["dp"] == pytest.approx(1.0, rel=1e-12)
