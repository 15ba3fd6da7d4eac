"""Wide expert parallelism: DeepSeek-V3 (node-limited routing, DeepEP's per-server
dispatch), capacity-bounded expert loads, published MoE plans, and the ``--ep`` checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabric_jax import scale as sc
from fabric_jax.workloads.model import (MODELS, PUBLISHED_PLANS, ParallelPlan, comm_bytes,
                                        kv_cache_bytes)
from fabric_jax.workloads.phases import (capacity_bound, expert_loads,
                                         node_limited_routing)

DS = MODELS["deepseek_v3"]


# ------------------------------------------------------------------ the model
def test_deepseek_v3_parameters_match_the_report():
    # arXiv 2412.19437: 671B total, 37B activated per token (Sec. 4.2, abstract)
    assert DS.n_params == pytest.approx(671e9, rel=0.005)
    assert DS.active_params == pytest.approx(37e9, rel=0.02)
    # MLA weights by hand from Sec. 4.2's dimensions (h 7168, 128 heads, d_h 128,
    # d_h^R 64, d_c 512, d_c' 1536)
    h, n = 7168, 128
    mla = (h * 1536 + 1536 * n * (128 + 64) + h * (512 + 64) + 512 * n * (128 + 128)
           + n * 128 * h)
    assert DS.attention_params == mla == 187_105_280
    # routed experts: 58 MoE layers x 256 x 3 x 7168 x 2048
    assert DS.moe_params == 58 * 256 * 3 * 7168 * 2048
    # MLA caches the latent and the rotary key: (512 + 64) elements per layer and token
    assert kv_cache_bytes(DS, 1000) == 61 * 576 * 2 * 1000
    # the other models keep their counts (Mixtral: 46.7B / 12.9B)
    assert MODELS["mixtral_8x7b"].n_params == pytest.approx(46.7e9, rel=0.005)
    assert MODELS["mixtral_8x7b"].active_params == pytest.approx(12.9e9, rel=0.005)


def test_uneven_pipeline_and_busiest_stage_counts():
    m = DS.replace(global_batch=64 * 8)
    with pytest.raises(ValueError, match="pp"):
        ParallelPlan(tp=1, pp=16, dp=64, ep=64).check(m)
    plan = ParallelPlan(tp=1, pp=16, dp=64, ep=64, uneven_pp=True).check(m)
    c = comm_bytes(m, plan)
    # 58 MoE layers over 16 stages: the busiest holds 4; 8 micro-batches
    assert c["ep_alltoall_count"] == 4 * 4 * 8
    assert c["ep_alltoall_bytes"] == 4096 * 7168 * 2 * 8
    assert c["pp_send_bytes"] == 4096 * 7168 * 2
    # compute: the busiest stage's 4 layers of the mean 61/16 set the pace
    from fabric_jax.workloads.model import get_gpu, step_flops
    from fabric_jax.workloads.phases import step_compute
    comp = step_compute(m, plan, get_gpu("h100_sxm"))
    even = step_flops(m) / 1024 / (989e12 * 0.5)
    assert comp["math_time"] == pytest.approx(even * 64 / 61, rel=1e-12)
    assert comp["bubble"] == 15 / 8


def test_published_plan_is_what_scale_plan_builds_at_its_size():
    pub = PUBLISHED_PLANS["deepseek_v3"]
    m, plan = sc.scale_plan("deepseek_v3", pub.gpus, pp=pub.pp, ep=pub.ep)
    assert (plan.tp, plan.pp, plan.ep, plan.dp) == (pub.tp, pub.pp, pub.ep, 128)
    # EP64 spans 8 servers (the report's "64-way EP spanning 8 nodes")
    g = plan.gpus_per_server
    servers = np.unique(plan.groups()["ep"] // g, axis=None)
    assert all(np.unique(row // g).size == pub.ep * pub.tp // g
               for row in plan.groups()["ep"])
    assert servers.size == pub.gpus // g
    assert PUBLISHED_PLANS["mixtral_8x7b"].tp is None        # not published


# ------------------------------------------------------------------ expert loads
def _clip_oracle(w, C):
    """Clip at C/E and spread the excess over the uncapped experts in proportion to
    their load, until nothing is over (a loop: the independent oracle)."""
    w = np.array(w, float)
    cap = C / w.size
    capped = np.zeros(w.size, bool)
    for _ in range(w.size):
        over = w > cap * (1 + 1e-12)
        if not over.any():
            break
        capped |= over
        w[capped] = cap
        free = ~capped
        w[free] *= (1.0 - cap * capped.sum()) / w[free].sum()
    return w


@pytest.mark.parametrize("E,skew,C", [(8, 1.0, 1.25), (256, 1.0, 1.25), (256, 1.5, 2.0),
                                       (64, 0.3, 1.0)])
def test_capacity_bound_respects_the_capacity_and_matches_the_loop(E, skew, C):
    load = expert_loads(E, 3, skew, seed=4, expert_load="capacity", capacity_factor=C)
    assert np.allclose(load.sum(axis=1), 1.0)
    assert load.max() <= C / E * (1 + 1e-9)                 # max <= C x mean
    raw = expert_loads(E, 3, skew, seed=4)
    for r in range(3):
        np.testing.assert_allclose(load[r], _clip_oracle(raw[r], C), rtol=1e-9)
    # order kept: a more popular expert never ends below a less popular one
    for r in range(3):
        o = np.argsort(raw[r])
        assert np.all(np.diff(load[r][o]) >= -1e-15)
    # a bound above the largest load changes nothing
    np.testing.assert_allclose(capacity_bound(raw, E * raw.max() + 1), raw)


# ------------------------------------------------------------------ routing
def test_node_limited_routing_reaches_at_most_m_servers_per_token():
    load = expert_loads(256, 2, 1.0, seed=1, expert_load="capacity")
    rt = node_limited_routing(load, 8, 8, 4, tokens=2000, seed=3, keep_tokens=True)
    per_token = rt["token_nodes"].sum(axis=2)
    assert per_token.max() <= 4 and per_token.min() >= 1
    # each token's 8 experts are distinct and lie on its servers
    ex = rt["token_experts"]
    assert np.all(np.diff(ex, axis=2) > 0)
    on = np.take_along_axis(rt["token_nodes"], ex // 32, axis=2)
    assert on.all()
    np.testing.assert_allclose(rt["node_share"], rt["token_nodes"].mean(axis=1))
    np.testing.assert_allclose(rt["expert_share"].sum(axis=1), 1.0)


def test_unlimited_uniform_routing_is_the_hypergeometric_count():
    # no node limit, uniform loads: 8 distinct experts of 256 drawn uniformly; a server
    # of 32 experts is missed with probability C(224, 8) / C(256, 8)
    rt = node_limited_routing(np.full(256, 1 / 256), 8, 8, 0, tokens=8000, seed=0)
    want = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert rt["nodes_per_token"][0] == pytest.approx(want, rel=0.01)
    assert rt["expert_share"].max() < 1.5 / 256
    # a node limit of 4 caps the mean at 4 (and it binds)
    lim = node_limited_routing(np.full(256, 1 / 256), 8, 8, 4, tokens=4000, seed=0)
    assert 3.0 < lim["nodes_per_token"][0] <= 4.0


# ------------------------------------------------------------------ the step's flows
def _ds_step(gpus=128, pp=2, ep=64, **kw):
    m, plan = sc.scale_plan("deepseek_v3", gpus, pp=pp, ep=ep)
    return m, plan, sc.step_flows(m, plan, slice_time=None, **kw)


@pytest.mark.parametrize("gpus,tp,servers", [(128, None, 8), (256, 2, 16)])
def test_deepseek_all_to_all_is_rail_local_per_server_and_carries_the_closed_form(
        gpus, tp, servers):
    # TP 1 (the report's plan) and TP 2 (Megatron Bridge's: 4 members of a group per
    # server, on the same TP lane)
    m, plan = sc.scale_plan("deepseek_v3", gpus, tp=tp, pp=2, ep=64)
    st = sc.step_flows(m, plan, slice_time=None, expert_load="capacity")
    g = plan.gpus_per_server
    assert (plan.pp, plan.dp, plan.ep, plan.uneven_pp) == (2, 64, 64, True)
    N = servers
    ep = st.phase == 0
    assert ep.any()
    src_srv, dst_srv = st.src_rank[ep] // g, st.dst_rank[ep] // g
    # DeepEP: to the GPU of the same in-node index on another server: one rail
    assert np.all(st.src_rank[ep] % g == st.dst_rank[ep] % g)
    assert np.all(src_srv != dst_srv)
    assert np.all(st.src % g == st.dst % g)                # every flow on one rail
    assert np.all(st.rail == st.dst % g)
    # the group of 64 spans 64 tp / 8 servers: each source server reaches the others
    assert st.info["ep_nodes"] == N == plan.ep * plan.tp // g
    pairs = np.unique(np.stack([src_srv, dst_srv]), axis=1)
    assert np.all(np.bincount(pairs[0]) == N - 1)
    # per GPU: total / top_k x E[servers per token] x (N - 1) / N (module docstring)
    cb = comm_bytes(m, plan)
    total = cb["ep_alltoall_bytes"] * cb["ep_alltoall_count"]
    want = total / 8 * st.info["ep_nodes_per_token"] * (N - 1) / N
    assert st.size[ep].sum() / plan.n_gpus == pytest.approx(want, rel=1e-9)
    assert st.info["ep_network_bytes_per_gpu"] == pytest.approx(want, rel=1e-9)
    # fewer bytes than the plain all-to-all's top_k copies to every other rank
    assert want < cb["ep_bytes_sent"]
    assert st.info["ep_nodes_per_token"] <= 4.0
    assert st.info["ep_max_load"] == pytest.approx(1.25)


def test_ep_group_that_splits_a_server_is_refused():
    # 6 GPUs per server, EP groups of 4 ranks: the second group straddles two servers
    from fabric_jax.workloads.phases import step_collectives
    m = DS.replace(global_batch=12 * 8)
    plan = ParallelPlan(tp=1, pp=1, dp=12, ep=4, gpus_per_server=6)
    with pytest.raises(ValueError, match="ep"):
        step_collectives(m, plan, expert_skew=1.0)


def test_deepseek_flow_bytes_by_hand_from_the_routing_shares():
    m, plan = sc.scale_plan("deepseek_v3", 128, pp=2, ep=64)
    load = expert_loads(256, plan.pp, 1.0, seed=0)
    rt = node_limited_routing(load, 8, 8, 4, seed=0 + 7919)
    st = sc.step_flows(m, plan, slice_time=None)
    cb = comm_bytes(m, plan)
    U = cb["ep_alltoall_bytes"] * cb["ep_alltoall_count"] / (4 * 8)
    ep = np.flatnonzero(st.phase == 0)
    # stage of a rank: rank // (tp dp); server within the group: (rank % 64) // 8
    for f in ep[:: max(1, ep.size // 40)]:
        a, b = st.src_rank[f], st.dst_rank[f]
        stage = a // 64
        i, d = (a % 64) // 8, (b % 64) // 8
        want = 2 * U * (rt["node_share"][stage, d] + rt["node_share"][stage, i])
        assert st.size[f] == pytest.approx(want, rel=1e-12)


def test_deepseek_step_keeps_the_rail_reduction_exact():
    m, plan, st = _ds_step()
    st = sc.step_flows(m, plan, slice_time=20e-6)
    topo = sc.scale_topology(128, switch_radix=16)
    from fabric_jax.fabrics import get_fabric
    for preset in ("infiniband", "spectrum_x"):
        r = sc.rail_reduction(st, topo, get_fabric(preset).routing, (0,), None)
        assert r["exact"], r


@pytest.mark.slow
def test_deepseek_rail_reduction_equals_full_run():
    m, plan = sc.scale_plan("deepseek_v3", 128, pp=2, ep=64)
    st = sc.step_flows(m, plan, slice_time=20e-6, expert_load="capacity")
    topo = sc.scale_topology(128, switch_radix=16)
    kw = dict(dt=0.5e-6, n_steps=1600)
    full = sc.simulate_rails(st, topo, "infiniband", rails=None, **kw)
    one = sc.simulate_rails(st, topo, "infiniband", rails=(0,), **kw)
    assert np.all(np.isfinite(full.finish))
    for r in range(8):
        np.testing.assert_allclose(full.finish[full.flows.rail == r], one.finish,
                                   rtol=0, atol=kw["dt"])


def test_mixtral_capacity_without_a_binding_bound_is_the_zipf_step():
    m, plan = sc.scale_plan(n_gpus=128)
    a = sc.step_flows(m, plan, slice_time=None)
    b = sc.step_flows(m, plan, slice_time=None, expert_load="capacity",
                      capacity_factor=8.0)         # 8 experts: bound = every expert's all
    assert np.array_equal(a.size, b.size) and np.array_equal(a.src, b.src)
    c = sc.step_flows(m, plan, slice_time=None, expert_load="capacity")
    ep = c.phase == 0
    # with the 1.25 bound the hottest rank's bytes fall toward the mean
    assert c.size[ep].max() < a.size[a.phase == 0].max()
    assert c.size[ep].sum() == pytest.approx(a.size[a.phase == 0].sum(), rel=1e-9)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("argv", [
    ["--model", "deepseek_v3", "--ep", "512"],
    ["--model", "deepseek_v3", "--ep", "48"],
    ["--model", "deepseek_v3", "--pp", "16", "--gpus", "512", "--ep", "128"],
    ["--model", "mixtral_8x7b", "--ep", "16"],
    ["--gpus", "64", "--jobs", "2", "--job-models", "mixtral_8x7b,deepseek_v3",
     "--ep", "32"],
])
def test_cli_bad_ep_exits_2_naming_the_flag_and_the_fix(argv, capsys):
    from fabric_jax.cli import main
    assert main(["scale", "--fabrics", "roce", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ep" in err[0] and "use one of" in err[0]


@pytest.mark.parametrize("argv,flag", [
    (["--expert-load", "lognormal"], "--expert-load"),
    (["--capacity-factor", "0.9"], "--capacity-factor"),
])
def test_cli_bad_expert_load_exits_2(argv, flag, capsys):
    from fabric_jax.cli import main
    assert main(["scale", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
