"""Wide-EP decode dispatch / combine (fabric_jax.serve._ep): message sizes, conservation,
closed form against the fluid engine and the ideal fabric, monotonicity, hot-expert skew,
bad input, and DeepEP's published low-latency figures side by side."""

import numpy as np
import pytest

from fabric_jax.serve import (DEEPEP_FIXED_US, DEEPEP_LL_US, EPFlows, deepep_fixed_us,
                              ep_closed_form, ep_message_counts, ep_step_flows,
                              ep_step_table, ep_step_time, ep_sweep, message_bytes,
                              route_tokens)
from fabric_jax.workloads.model import GPUS, MODELS

NIC = 50e9          # 400 Gb/s
NVL = 200e9         # H800 NVLink per direction

#: deepseek-ai/DeepEP README ("Low-latency kernels", H800 + ConnectX-7 400 Gb/s IB, 128
#: tokens, hidden 7168, top-8, FP8 dispatch, BF16 combine, NVLink for same-node peers
#: since 2025-06-05), transcribed: {ep: (dispatch_us, combine_us)}.
PUBLISHED = {8: (77.0, 114.0), 16: (118.0, 195.0), 32: (155.0, 273.0)}
#: Tolerance on the published figures: the model is a fixed cost (fitted at EP 256) plus
#: a byte term; its worst error at EP 8-32 is ~+10 % (combine at EP 16: the random
#: routing's busiest NIC) and -9 % (dispatch at EP 8: NVLink only), so 15 %.
PUBLISHED_TOL = 0.15


def _cf(flows, fixed=0.0):
    return ep_closed_form(flows, nic_rate=NIC, nvlink_rate=NVL, fixed_s=fixed)


def test_message_bytes_are_deepep_low_latency_messages():
    # internode_ll.cu: int4 header + FP8 hidden + one float scale per 128 channels
    assert message_bytes(7168, "fp8") == 16 + 7168 + 56 * 4 == 7408
    assert message_bytes(7168, "bf16") == 16 + 2 * 7168
    assert message_bytes(7168, "bf16", op="combine") == 14336
    assert GPUS["h800"].nvlink_bandwidth == 200e9


def test_conservation_of_messages_and_bytes():
    model = MODELS["deepseek_v3"]
    ep, tokens = 16, 40
    counts = ep_message_counts(ep=ep, tokens_per_gpu=tokens, seed=3)
    assert counts.sum() == ep * tokens * model.top_k
    assert np.all(counts.sum(axis=1) == tokens * model.top_k)
    d = ep_step_flows(ep=ep, tokens_per_gpu=tokens, op="dispatch", counts=counts)
    c = ep_step_flows(ep=ep, tokens_per_gpu=tokens, op="combine", counts=counts)
    self_msgs = np.trace(counts)
    assert d.size.sum() == (ep * tokens * model.top_k - self_msgs) * 7408
    assert c.size.sum() == (ep * tokens * model.top_k - self_msgs) * 14336
    # combine is the transpose: what a GPU received in dispatch it sends back
    assert np.array_equal(np.bincount(d.dst, d.n_msgs, ep), np.bincount(c.src, c.n_msgs, ep))
    assert d.src.size == ep * (ep - 1)         # padded to every ordered pair


def test_routing_distinct_experts_and_node_limit():
    topk = route_tokens(500, 256, 8, seed=1)
    assert all(np.unique(row).size == 8 for row in topk)
    # node-limited: 32 experts per GPU x 8 GPUs = 256 per node at EP 8 (1 node): no-op;
    # at EP 64, 32 experts per node (4 per GPU): each token on <= 4 nodes
    lim = route_tokens(500, 256, 8, node_limit=4, experts_per_node=32, seed=1)
    assert (np.array([np.unique(r // 32).size for r in lim]) <= 4).all()
    assert (np.array([np.unique(r // 32).size for r in topk]) > 4).any()


def test_balanced_closed_form_by_hand():
    # EP 16, 128 tokens, balanced routing: every GPU sends 1024 messages of 7408 B,
    # 64 to each GPU (itself included); 8 remote GPUs x 64 x 7408 B over 50 GB/s
    f = ep_step_flows(ep=16, tokens_per_gpu=128, routing="balanced")
    assert np.all(f.n_msgs == 64)
    cf = _cf(f)
    assert cf["nic_s"] == pytest.approx(8 * 64 * 7408 / NIC)
    assert cf["nvlink_s"] == pytest.approx(7 * 64 * 7408 / NVL)
    assert cf["time_s"] == pytest.approx(8 * 64 * 7408 / NIC)
    assert cf["remote_bytes_share"] == pytest.approx(0.5)


@pytest.mark.parametrize("fabric", ["ideal", "infiniband"])
def test_fluid_and_ideal_equal_closed_form_on_idle_fabric(fabric):
    # The idle-fabric uniform case: the last flow's finish = closed form (bytes over the
    # busiest NIC) + the bottleneck path's latency, within one fluid step (0.5 us of
    # ~80 us) and the 2 % a max-min sharing can lose to the makespan bound
    r = ep_step_time(fabric, ep=16, tokens_per_gpu=128, routing="balanced", dt=0.5e-6)
    for op in ("dispatch", "combine"):
        closed = r["closed_form"][op]["time_s"]
        assert r[f"{op}_s"] >= closed * 0.995 - 0.5e-6
        assert r[f"{op}_s"] <= closed * 1.02 + 0.5e-6
    # dispatch: 8 x 64 x 7408 B over 50 GB/s + fixed cost
    assert r["transfer_s"]["dispatch"] == pytest.approx(8 * 64 * 7408 / NIC, rel=0.1)


def test_monotone_in_ep_and_tokens():
    prev = 0.0
    for ep in (8, 16, 32, 64):
        t = _cf(ep_step_flows(ep=ep, tokens_per_gpu=128))["time_s"]
        assert t > prev
        prev = t
    prev = 0.0
    for tokens in (8, 32, 64, 128, 256):
        t = _cf(ep_step_flows(ep=32, tokens_per_gpu=tokens))["time_s"]
        assert t > prev
        prev = t
    # the ideal fabric grows with tokens too
    a = ep_step_time("ideal", ep=16, tokens_per_gpu=32)
    b = ep_step_time("ideal", ep=16, tokens_per_gpu=128)
    assert b["dispatch_s"] > a["dispatch_s"] and b["combine_s"] > a["combine_s"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hot_experts_never_faster_than_uniform(seed):
    for zipf_s in (0.5, 1.0, 1.5):
        hot = _cf(ep_step_flows(ep=32, tokens_per_gpu=128, routing="hot", zipf_s=zipf_s,
                                seed=seed))
        uni = _cf(ep_step_flows(ep=32, tokens_per_gpu=128, seed=seed))
        assert hot["time_s"] >= uni["time_s"]
    # the busiest receiver's incast grows with the skew
    counts = ep_message_counts(ep=32, tokens_per_gpu=128, routing="hot", zipf_s=1.0,
                               seed=seed)
    assert counts.sum(axis=0).max() > 2 * counts.sum(axis=0).mean()


def test_hot_experts_slower_on_the_ideal_fabric():
    hot = ep_step_time("ideal", ep=16, routing="hot", zipf_s=1.0)
    uni = ep_step_time("ideal", ep=16)
    assert hot["dispatch_s"] > uni["dispatch_s"] and hot["combine_s"] > uni["combine_s"]


@pytest.mark.parametrize("kwargs, field", [
    (dict(ep=24), "ep"),                       # does not divide 256 experts
    (dict(ep=12), "ep"),                       # not a multiple of 8 GPUs per server
    (dict(ep=0), "ep"),
    (dict(ep=32, n_gpus=16), "ep"),            # larger than the fabric
    (dict(ep=16, tokens_per_gpu=0), "tokens_per_gpu"),
    (dict(ep=16, tokens_per_gpu=-3), "tokens_per_gpu"),
    (dict(ep=16, dispatch_dtype="int4"), "dispatch_dtype"),
    (dict(ep=16, combine_dtype="fp8"), "combine_dtype"),
    (dict(ep=16, routing="zipfian"), "routing"),
    (dict(ep=16, link_gbps=0.0), "link_gbps"),
])
def test_bad_input_names_the_argument(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ep_step_time("infiniband", **kwargs)


def test_bad_fabric_and_sweep_input():
    with pytest.raises(ValueError, match="fabric"):
        ep_step_time("ethernet", ep=16)
    with pytest.raises(ValueError, match="ep"):
        ep_sweep("infiniband", [8, 24])
    with pytest.raises(ValueError, match="tokens_per_gpu"):
        ep_step_table("ideal", 16, [0, 64])


def test_fixed_cost_is_the_ep256_fit():
    # the stated derivation: DeepEP's EP 256 row less the closed-form transfer
    for op in ("dispatch", "combine"):
        assert deepep_fixed_us(op) == pytest.approx(DEEPEP_FIXED_US[op], abs=0.5)


def test_closed_form_beside_deepep_published():
    # the model's closed form at DeepEP's configuration (the fluid run on an idle
    # infiniband fabric adds its path latency, ~5 us: test_deepep_validation_fluid)
    got = {}
    for ep, (pub_d, pub_c) in PUBLISHED.items():
        counts = ep_message_counts(ep=ep, tokens_per_gpu=128)
        for op, pub in (("dispatch", pub_d), ("combine", pub_c)):
            f = ep_step_flows(ep=ep, tokens_per_gpu=128, op=op, counts=counts)
            t = _cf(f, DEEPEP_FIXED_US[op] * 1e-6)["time_s"] * 1e6
            assert abs(t / pub - 1) <= PUBLISHED_TOL, (ep, op, t, pub)
            got[ep, op] = t
    for op in ("dispatch", "combine"):
        assert got[8, op] < got[16, op] < got[32, op]
    assert DEEPEP_LL_US[8] == PUBLISHED[8]


def test_step_table_layers_and_overlap():
    table = ep_step_table("ideal", 8, [32, 128], dt=0.5e-6)
    n = MODELS["deepseek_v3"].moe_layers
    assert n == 58
    assert table(128) == pytest.approx(n * table.layer_s[-1])
    assert table(32) < table(80) < table(128)
    with pytest.raises(ValueError, match="tokens_per_gpu"):
        table(256)
    ov = ep_step_table("ideal", 8, [32, 128], overlap=True, dt=0.5e-6)
    # without compute to hide under, two micro-batches of 64 pay the fixed cost twice
    assert ov(128, compute_s=0.0) > table(128)
    assert ov(128, compute_s=0.0) == pytest.approx(2 * n * np.interp(64, ov.grid, ov.layer_s))
    # enough compute hides the communication entirely
    assert ov(128, compute_s=10.0) == 0.0
    assert ov(128, compute_s=0.01) < ov(128, compute_s=0.0)


@pytest.mark.slow
def test_deepep_validation_fluid():
    # infiniband preset, DeepEP's configuration, EP 8 / 16 / 32 (~1 min on 2 cores)
    res = ep_sweep("infiniband", [8, 16, 32], dt=0.5e-6)
    for ep, (pub_d, pub_c) in PUBLISHED.items():
        assert abs(res[ep]["dispatch_us"] / pub_d - 1) <= PUBLISHED_TOL
        assert abs(res[ep]["combine_us"] / pub_c - 1) <= PUBLISHED_TOL
    for op in ("dispatch_us", "combine_us"):
        assert res[8][op] < res[16][op] < res[32][op]


@pytest.mark.slow
@pytest.mark.parametrize("fabric", ["infiniband", "roce", "spectrum_x", "uec"])
def test_dt_halved_converges(fabric):
    a = ep_step_time(fabric, ep=16, dt=0.5e-6)
    b = ep_step_time(fabric, ep=16, dt=0.25e-6)
    for op in ("dispatch_s", "combine_s"):
        assert abs(b[op] / a[op] - 1) <= 0.03


def test_epflows_shape_independent_of_tokens():
    a = ep_step_flows(ep=16, tokens_per_gpu=1)
    b = ep_step_flows(ep=16, tokens_per_gpu=256)
    assert isinstance(a, EPFlows) and a.src.shape == b.src.shape
    assert (a.n_msgs == 0).any()               # padded pairs of 0 bytes


def test_prefill_normal_kernel_pattern():
    # DeepSeek-V3 Sec. 3.2.2: RDMA once per (token, other server) to the same in-server
    # index, then NVLink forwarding; inter-server messages only between same-rail GPUs
    from fabric_jax.serve import ep_normal_counts
    ep, tokens = 32, 64
    c = ep_normal_counts(ep=ep, tokens_per_gpu=tokens, seed=4)
    node = np.arange(ep) // 8
    inter = node[:, None] != node[None, :]
    same_rail = (np.arange(ep)[:, None] % 8) == (np.arange(ep)[None, :] % 8)
    assert np.all(c[inter & ~same_rail] == 0)
    # RDMA total = sum over tokens of their distinct target servers other than their own
    topk = route_tokens(ep * tokens, 256, 8, node_limit=4, experts_per_node=64, seed=4)
    servers = topk // 64
    own = np.repeat(np.arange(ep) // 8, tokens)
    n_rdma = sum(len(set(row.tolist()) - {o}) for row, o in zip(servers, own))
    assert c[inter].sum() == n_rdma
    # every server is reached at most once per token: <= 4 servers (node limit)
    assert c[inter].sum() <= ep * tokens * 4
    # the ideal fabric equals its closed form on this pattern too
    r = ep_step_time("ideal", ep=16, tokens_per_gpu=256, kernel="normal")
    for op in ("dispatch", "combine"):
        assert r[f"{op}_s"] == pytest.approx(r["closed_form"][op]["time_s"], rel=0.02)
    with pytest.raises(ValueError, match="kernel"):
        ep_step_time("ideal", ep=16, kernel="fast")


def test_experiment_script_json_and_bad_input(tmp_path, capsys):
    import json

    from experiments import serve_ep
    path = tmp_path / "ep.json"
    serve_ep.main(["--ep", "8", "--fabrics", "ideal", "--json", str(path)])
    out = json.loads(path.read_text())
    row = out["fabrics"]["ideal"]["8"]
    assert row["dispatch_us"] > 0 and row["combine_us"] > row["dispatch_us"]
    assert row["published_dispatch_us"] == 77.0
    assert "DeepEP" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        serve_ep.main(["--ep", "12", "--fabrics", "ideal"])
    assert exc.value.code == 2
