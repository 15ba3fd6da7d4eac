"""Models, parallelism plans and their training steps (fabric_jax.workloads.model).

Oracles: published parameter counts and training FLOPs, Narayanan et al.'s closed-form
FLOP count, hand-computed collective payloads and KV-cache sizes, and a two-server
step whose time is computed by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fabric_jax as fj
from fabric_jax.incidence import Incidence
from fabric_jax.workloads.model import (GPUS, MODELS, ModelConfig, ParallelPlan, comm_bytes,
                                        kv_cache_bytes, step_flops, training_flops)
from fabric_jax.workloads.training import model_training_step


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("name, published, active, tol", [
    ("gpt3_175b", 175.0e9, 175.0e9, 0.005),     # Brown et al. 2020, Table 2.1
    ("llama3_8b", 8.03e9, 8.03e9, 0.005),       # Meta model card: 8.03B
    ("llama3_70b", 70.6e9, 70.6e9, 0.005),      # Meta model card: 70.6B
    ("llama3_405b", 405e9, 405e9, 0.005),       # Dubey et al. 2024, 405B
    ("mixtral_8x7b", 46.7e9, 12.9e9, 0.005),    # Jiang et al. 2024: 46.7B / 12.9B active
])
def test_parameter_counts_match_publications(name, published, active, tol):
    m = MODELS[name]
    assert m.n_params == pytest.approx(published, rel=tol)
    assert m.active_params == pytest.approx(active, rel=tol)


def test_gpt3_training_flops_match_brown_table_d1():
    # Brown et al. 2020, Table D.1: GPT-3 175B, 300B tokens, 3.14e23 training FLOPs,
    # computed as 6 N D (attention left out).  6 N D with our N is within 1 %; the full
    # count adds attention scores (4 s h per layer and token, ~3 %) and stays within 5 %.
    m = MODELS["gpt3_175b"]
    assert 6 * m.n_params * 300e9 == pytest.approx(3.14e23, rel=0.01)
    full = training_flops(m, 300e9)
    assert 3.14e23 < full < 1.05 * 3.14e23


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("dims", [(96, 12288, 96, 2048, 50257, 1536),
                                  (24, 1024, 16, 1024, 51200, 64)])
def test_step_flops_equal_narayanan_closed_form(recompute, dims):
    # Narayanan et al. SC 2021, Appendix: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
    # with activation recomputation; without it 3/4 of the transformer term and the
    # logits unchanged: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    layers, h, heads, s, vocab, batch = dims
    m = ModelConfig("gpt", layers, h, heads, heads, 4 * h, vocab, s, batch)
    lead, den = (96, 16) if recompute else (72, 12)
    want = lead * batch * s * layers * h**2 * (1 + s / (6 * h) + vocab / (den * layers * h))
    assert step_flops(m, recompute=recompute) == pytest.approx(want, rel=1e-12)


def test_flops_grow_with_tokens_and_recompute():
    m = MODELS["llama3_70b"]
    assert training_flops(m, 2e6) == pytest.approx(2 * training_flops(m, 1e6))
    # recomputation adds one forward pass of the layers (not of the logits, 2 h V)
    extra = training_flops(m, 1e6, recompute=True) - training_flops(m, 1e6)
    logits = 2 * m.hidden * m.vocab * 1e6
    assert extra == pytest.approx((training_flops(m, 1e6) - 3 * logits) / 3)


# ------------------------------------------------------------------ KV cache
def test_kv_cache_bytes_hand_calculation():
    # Llama-3 70B: 80 layers x 8 KV heads x head_dim 128 (8192/64), K and V, BF16:
    # 2 * 80 * 8 * 128 * 2 = 327,680 bytes per token; 4096 tokens -> 1,342,177,280.
    assert kv_cache_bytes("llama3_70b", 1) == 327_680
    assert kv_cache_bytes("llama3_70b", 4096) == 1_342_177_280
    # GPT-3 has full multi-head attention: 2 * 96 * 96 * 128 * 2 = 4,718,592 per token,
    # 12x more than the 8 KV heads of Llama-3 70B would give at the same width ratio.
    assert kv_cache_bytes("gpt3_175b", 1) == 4_718_592
    assert kv_cache_bytes("llama3_70b", 10, bytes_per_element=1) == 1_638_400


# --------------------------------------------------------------- communication
def test_comm_bytes_closed_forms_gpt3():
    # GPT-3 175B, mb 1: the TP all-reduce payload is s h bytes = 2048 * 12288 * 2 =
    # 50,331,648 B, the size in Alibaba AICB's GPT-175B Megatron workload
    # (aliyun/aicb workload/simAI/model_workload, "attention_norm ALLREDUCE 50331648").
    m = MODELS["gpt3_175b"].replace(global_batch=64)
    plan = ParallelPlan(tp=8, pp=8, dp=4, micro_batch=1)
    c = comm_bytes(m, plan)
    mbs = 64 // 4
    assert c["tp_allreduce_bytes"] == 50_331_648
    assert c["tp_allreduce_count"] == 4 * (96 // 8) * mbs
    assert c["pp_send_bytes"] == 50_331_648 / 8
    assert c["pp_send_count"] == 2 * mbs
    assert c["dp_allreduce_bytes"] == pytest.approx(m.n_params / 64 * 2)
    assert c["dp_bytes_sent"] == pytest.approx(2 * 3 / 4 * c["dp_allreduce_bytes"])
    assert c["ep_alltoall_count"] == 0 and c["edp_allreduce_bytes"] == 0
    assert comm_bytes(m, plan.replace(recompute=True))["tp_allreduce_count"] == 6 * 12 * mbs


def test_comm_bytes_moe_closed_forms():
    # Mixtral, tp 2, dp 8, ep 4, mb 2: each rank's all-to-all buffer is mb s k h b / tp
    # = 2 * 4096 * 2 * 4096 * 2 / 2; 4 per MoE layer and micro-batch; expert gradients
    # sharded over tp*pp*ep = 8, reduced over dp/ep = 2 ranks.
    m = MODELS["mixtral_8x7b"].replace(global_batch=64)
    plan = ParallelPlan(tp=2, dp=8, ep=4, micro_batch=2)
    c = comm_bytes(m, plan)
    assert c["ep_alltoall_bytes"] == 2 * 4096 * 2 * 4096 * 2 / 2
    assert c["ep_alltoall_count"] == 4 * 32 * (64 // 16)
    assert c["edp_allreduce_bytes"] == pytest.approx(m.moe_params / 8 * 2)
    assert c["dp_allreduce_bytes"] == pytest.approx(m.dense_params / 2 * 2)
    assert c["ep_bytes_sent"] == pytest.approx(c["ep_alltoall_count"] * 3 / 4
                                               * c["ep_alltoall_bytes"])


def test_groups_follow_megatron_rank_order():
    g = ParallelPlan(tp=2, pp=2, dp=4, ep=2, gpus_per_server=8).groups()
    # rank = (p * dp + d) * tp + t
    assert g["tp"][0].tolist() == [0, 1]
    assert g["dp"][0].tolist() == [0, 2, 4, 6]
    assert g["pp"][0].tolist() == [0, 8]
    assert g["ep"][0].tolist() == [0, 2] and g["ep"][1].tolist() == [4, 6]
    assert g["edp"][0].tolist() == [0, 4]
    for key in g:  # every group partitions the 16 ranks
        assert sorted(g[key].ravel().tolist()) == list(range(16))


def _bytes_by_prefix(w, prefix):
    names = np.array(w.group_names)
    keep = np.char.find(names[w.group].astype(str), prefix) >= 0
    return float(w.size[keep].sum())


def test_training_step_flows_carry_the_closed_form_bytes():
    # tp = 8 = GPUs per server: every DP / PP peer is on another server, so no flow is
    # dropped.  DP: pp*tp rings, each dp ranks sending 2 (dp-1)/dp S (pipelined ring);
    # PP: dp*tp lanes x (pp-1) boundaries x 2 directions x m sends of mb s h b / tp.
    m = MODELS["llama3_70b"].replace(global_batch=16, seq_len=2048)
    plan = ParallelPlan(tp=8, pp=2, dp=4)
    c = comm_bytes(m, plan)
    ms = model_training_step(m, plan, n_steps=1)
    w = ms.workload
    assert _bytes_by_prefix(w, "/dp_g") == pytest.approx(
        2 * 8 * 4 * 2 * 3 / 4 * c["dp_allreduce_bytes"])
    mb = 16 // 4
    assert _bytes_by_prefix(w, "/pp_g") == pytest.approx(
        4 * 8 * 1 * 2 * mb * 2048 * 8192 * 2 / 8)
    sharp = model_training_step(m, plan, sharp=True).workload
    assert _bytes_by_prefix(sharp, "/dp_g") == pytest.approx(2 * 8 * 4 * c["dp_allreduce_bytes"])
    assert ms.info["compute_time"] == pytest.approx(
        step_flops(m) / 64 / (GPUS["h100_sxm"].peak_flops * 0.5) * (1 + 1 / mb)
        + c["tp_bytes_sent"] / GPUS["h100_sxm"].nvlink_bandwidth)


def test_intra_server_traffic_stays_off_the_network():
    m = MODELS["llama3_70b"].replace(global_batch=8, seq_len=1024)
    # tp 2 x dp 4 = 8 GPUs: one server, nothing crosses the fabric.
    one = model_training_step(m, ParallelPlan(tp=2, dp=4))
    assert one.workload is None and one.step_times(None).tolist() == [one.compute_time]
    # tp 2 x dp 8 on 2 servers: each of the 2 DP rings (0,2,..,14 and 1,3,..,15) leaves
    # server 0 once and server 1 once -> 4 network flows.
    two = model_training_step(m, ParallelPlan(tp=2, dp=8))
    w = two.workload
    assert w.n_flows == 4
    assert np.all(w.src // 8 != w.dst // 8)


def test_moe_all_to_all_bytes_across_servers():
    # Mixtral, tp 8 (one EP rank per server), dp = ep = 4: the all-to-all carries each
    # rank's step total S = count * a2a bytes, (ep-1)/ep of it leaves the server.
    m = MODELS["mixtral_8x7b"].replace(global_batch=8, seq_len=1024)
    plan = ParallelPlan(tp=8, dp=4, ep=4)
    c = comm_bytes(m, plan)
    w = model_training_step(m, plan).workload
    total = c["ep_alltoall_bytes"] * c["ep_alltoall_count"]
    assert _bytes_by_prefix(w, "/ep_g") == pytest.approx(8 * 4 * 3 / 4 * total)


def _simulate(topo, w):
    paths = fj.shortest_paths(topo, w.src, w.dst, max_paths=1)
    inc = Incidence.from_paths(paths, None, n_links=topo.n_links)
    res = fj.simulate_flows(inc, topo.capacity, w.arrival, w.size, deps=w.deps,
                            delay=w.delay)
    return np.asarray(res.finish, np.float64)


def test_simulated_step_time_two_servers_by_hand(x64):
    # Two servers, tp 8, dp 2: per rail one pipelined-ring pair, each NIC sends
    # 2 (2-1)/2 S = S to its peer on the rail leaf (both directions at line rate C,
    # no latency set): step = compute + S / C (overlap 0), and max(compute, S/C + (1-f)
    # compute) with overlap f (comm starts after (1 - f) of the compute).
    m = MODELS["llama3_70b"].replace(global_batch=2, seq_len=512)
    topo = fj.rail_optimized(2, 8, servers_per_leaf=2, latency_us=0.0)
    for f in (0.0, 0.5, 1.0):
        plan = ParallelPlan(tp=8, dp=2, overlap=f)
        ms = model_training_step(m, plan, host_server=topo.host_server, n_steps=1)
        s_bytes = ms.info["dp_allreduce_bytes"]
        comm = s_bytes / topo.capacity[0]
        step = ms.step_times(_simulate(topo, ms.workload))[0]
        want = max(ms.compute_time, (1 - f) * ms.compute_time + comm)
        assert step == pytest.approx(want, rel=1e-9)
        util = ms.spec.gpu_utilization(ms.workload, _simulate(topo, ms.workload))
        assert util == pytest.approx(ms.compute_time / want, rel=1e-9)


@pytest.mark.parametrize("kwargs, key", [
    (dict(dp=4, ep=3), "ep"), (dict(tp=16), "tp"), (dict(tp=3), "tp"),
    (dict(overlap=1.5), "overlap"), (dict(achievable_fraction=0.0), "achievable_fraction"),
    (dict(dp=0), "dp"),
])
def test_plan_validation_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        ParallelPlan(**kwargs)


def test_plan_check_against_model_names_the_key():
    m = MODELS["gpt3_175b"]
    with pytest.raises(ValueError, match="pp"):
        ParallelPlan(pp=5).check(m)
    with pytest.raises(ValueError, match="micro_batch"):
        ParallelPlan(dp=7).check(m)
    with pytest.raises(ValueError, match="ep"):
        ParallelPlan(dp=2, ep=2).check(m)
    with pytest.raises(ValueError, match="hidden"):
        m.replace(n_heads=7)
    with pytest.raises(ValueError, match="gpu"):
        model_training_step(m, ParallelPlan(dp=1536 // 8), gpu="tpu")


# ------------------------------------------------------------------ inference
def test_prefill_and_decode_times_by_hand():
    from fabric_jax.workloads.inference import decode_step_time, prefill_time
    m = MODELS["llama3_70b"]
    gpu = GPUS["h100_sxm"]
    # prefill of P tokens: P L (2 P_layer + 4 P d_attn) + 2 h V, on tp GPUs at 50 % peak
    p = 1000
    layer = 2 * (m.attention_params + m.expert_params) + 4 * p * 64 * 128
    want = (p * 80 * layer + 2 * 8192 * 128256) / (8 * gpu.peak_flops * 0.5)
    assert float(prefill_time(m, p, gpu, tp=8)) == pytest.approx(want, rel=1e-12)
    # decode step: (weights + KV of 1000 tokens) / (8 x 3.35 TB/s x 0.7)
    want = (m.active_params * 2 + 327_680 * 1000) / (8 * 3.35e12 * 0.7)
    assert float(decode_step_time(m, 1000, gpu, tp=8)) == pytest.approx(want, rel=1e-12)


def test_single_request_ttft_by_hand(x64):
    # One request, one prefill and one decode server on 2 servers x 8 NICs, 1 rail leaf
    # per rail, no link latency: TTFT = arrival-to-prefill-end + KV/8 / C (8 flows in
    # parallel, one per rail) + one decode step over P cached tokens; every later token
    # latency is one decode step with one more cached token.
    from fabric_jax.workloads.inference import decode_step_time, disaggregated_serving
    m = MODELS["llama3_70b"]
    topo = fj.rail_optimized(2, 8, servers_per_leaf=2, latency_us=0.0)
    run = disaggregated_serving(m, n_requests=1, rate=1.0, prompt_len=2048, output_len=4,
                                n_prefill=1, n_decode=1)
    w = run.workload
    assert w.n_flows == 8 and np.all(w.src // 8 == 0) and np.all(w.dst // 8 == 1)
    assert w.size.sum() == pytest.approx(kv_cache_bytes(m, 2048))
    res = run.serve(_simulate(topo, w))
    kv = kv_cache_bytes(m, 2048) / 8 / topo.capacity[0]
    step = float(decode_step_time(m, 2048))
    want = run.prefill_end[0] - run.arrival[0] + kv + step
    assert res["ttft"][0] == pytest.approx(want, rel=1e-9)
    assert res["kv_transfer_time"][0] == pytest.approx(kv, rel=1e-9)
    gaps = [float(decode_step_time(m, 2048 + k)) for k in (1, 2, 3)]
    np.testing.assert_allclose(res["token_latency"], gaps, rtol=1e-9)
    pre = run.serve(_simulate(topo, w), first_token="prefill")
    assert pre["ttft"][0] == pytest.approx(run.prefill_end[0] - run.arrival[0])
    assert pre["token_latency"].size == 3     # 1 token from prefill + 3 decode steps
    assert pre["token_latency"][0] == pytest.approx(kv + step, rel=1e-9)


def test_serving_queues_and_batches():
    # Requests faster than one prefill server can serve queue FIFO: prefill ends are
    # increasing and spaced by at least one prefill time; decode batches > 1 form.
    from fabric_jax.workloads.inference import disaggregated_serving, prefill_time
    run = disaggregated_serving("llama3_70b", n_requests=20, rate=100.0, prompt_len=512,
                                output_len=8, n_prefill=1, n_decode=1, seed=3)
    pt = float(prefill_time("llama3_70b", 512))
    assert np.all(np.diff(run.prefill_end) >= pt * (1 - 1e-12))
    res = run.serve(run.prefill_end.repeat(8) + 1e-3)
    assert res["decode_batch"].max() > 1
    assert res["token_latency"].size == 20 * 7
    assert np.all(res["ttft"] > 0)
    with pytest.raises(ValueError, match="rate"):
        disaggregated_serving("llama3_70b", n_requests=2, rate=0.0, prompt_len=8,
                              output_len=2, n_prefill=1, n_decode=1)
    with pytest.raises(ValueError, match="first_token"):
        run.serve(run.prefill_end.repeat(8), first_token="never")


@pytest.mark.slow
def test_inference_experiment_quick(tmp_path):
    # 12 requests (a thin caller of fabric_jax.serve): the exposed KV transfer can only
    # be slower than line rate, and requests are conserved.
    import json
    from experiments import inference as mod
    out = tmp_path / "inf.json"
    mod.main(["--quick", "--n-requests", "12", "--rate", "40", "--fabrics", "roce", "uec",
              "--json", str(out)])
    data = json.loads(out.read_text())
    fab = data["fabrics"]
    for v in fab.values():
        assert v["kv_slowdown"]["p50"] >= 1 - 1e-3
        assert v["ttft"]["p50"] <= v["ttft"]["p99"]
        r = v["requests"]
        assert r["arrived"] == r["served"] + r["queued"] + r["dropped"] == 12
    assert data["inputs"]["model"] == "llama3_70b"


def test_plan_for_gpus():
    plan = ParallelPlan(tp=8, pp=2, ep=1).for_gpus(256)
    assert plan.dp == 16 and plan.n_gpus == 256
    with pytest.raises(ValueError, match="n_gpus"):
        ParallelPlan(tp=8, pp=2).for_gpus(24)
    with pytest.raises(ValueError, match="ep"):
        ParallelPlan(tp=8, ep=4).for_gpus(24)


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]),
       dp=st.integers(1, 8), sharp=st.booleans())
def test_network_bytes_never_exceed_closed_form(tp, pp, dp, sharp):
    # Property: the flows carry the closed-form DP + PP bytes of the ranks that leave
    # their server, so their total is at most the closed form, with equality when every
    # DP / PP peer is on another server (tp = GPUs per server).
    m = MODELS["gpt3_175b"].replace(global_batch=8 * dp, seq_len=256)
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp)
    c = comm_bytes(m, plan)
    ms = model_training_step(m, plan, sharp=sharp)
    dp_factor = 1.0 if sharp else 2 * (dp - 1) / dp
    dp_total = pp * tp * dp * dp_factor * c["dp_allreduce_bytes"] if dp > 1 else 0.0
    pp_total = dp * tp * (pp - 1) * c["pp_send_count"] * c["pp_send_bytes"]
    got = 0.0 if ms.workload is None else ms.workload.total_bytes
    assert got <= (dp_total + pp_total) * (1 + 1e-9)
    if tp == 8:
        assert got == pytest.approx(dp_total + pp_total, rel=1e-9)
