"""``fabric-jax compare --model`` and the [model] / [parallelism] / [costs] sections:
the training job from a transformer model, the fabric's share of $/token, MFU.

Closed forms (written out here, independent of fabric_jax.workloads.model):

* forward FLOPs per token of a SwiGLU GQA transformer: per layer ``2 (2 h^2 + 2 h kv
  + 3 h f) + 4 s h`` plus ``2 h V`` for the logits (Narayanan et al. SC 2021); a
  training step is 3x forward (no recomputation) over ``B s`` tokens;
* compute per GPU = FLOPs / (GPUs x peak x achievable) + TP all-reduces over NVLink;
* a data-parallel ring of ``n`` ranks moves ``2 (n - 1) / n`` of the gradient shard
  ``S = 2 bytes x dense params / tp`` per rank.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from fabric_jax import cli, economics
from fabric_jax.compare import METRICS, ScenarioError, build_case, scenario_from_dict
from fabric_jax.study.scenario import HORIZON_FACTOR

from tests.helpers import scenario_toml

# 4 servers x 2 rails (2 GPUs per server), a 2-server training job and a 2-server
# tenant; llama3_8b cut to 64 sequences of 1024 tokens (32 micro-batches with dp = 2).
BASE = {
    "topology": {"kind": "rail_optimized", "n_servers": 4, "nics_per_server": 2,
                 "servers_per_leaf": 2, "link_gbps": 100.0},
    "workload": {"train_servers": 2, "tenant_servers": 2, "tenant_incast_mb": 0.2,
                 "tenant_fan_in": 1, "background_load": 0.0},
    "simulation": {"dt_us": 4.0, "n_steps": 100, "max_paths": 4, "isolation": False},
    "model": {"name": "llama3_8b", "global_batch": 64, "seq_len": 1024},
    "fabrics": {"presets": ["uec"]},
}

# Llama 3 8B (Dubey et al. 2024, Table 3)
L, H, KV, F, V = 32, 4096, 8 * 128, 14336, 128256
H100_PEAK, NVLINK = 989e12, 450e9          # NVIDIA H100 SXM datasheet: dense BF16, per direction


def _scn(**changes):
    data = copy.deepcopy(BASE)
    for sec, body in changes.items():
        if body is None:
            data.pop(sec, None)
        else:
            data.setdefault(sec, {}).update(body)
    return scenario_from_dict(data)


def _closed_form(batch, seq, tp, n_gpus, achievable=0.5):
    """(compute s per step and GPU, DP shard bytes per GPU) of llama3_8b."""
    per_layer = 2 * (2 * H * H + 2 * H * KV + 3 * H * F) + 4 * seq * H
    flops = 3 * (L * per_layer + 2 * H * V) * batch * seq
    dp = n_gpus // tp
    micro = batch // dp
    act = seq * H * 2                                          # one micro-batch, bf16
    tp_sent = 4 * L * micro * 2 * (tp - 1) / tp * act if tp > 1 else 0.0
    compute = flops / n_gpus / (H100_PEAK * achievable) + tp_sent / NVLINK
    dense = L * (2 * H * H + 2 * H * KV + 3 * H * F) + 2 * V * H
    return compute, dense / tp * 2, flops


def test_model_sets_compute_bytes_and_tokens_as_the_closed_forms_say():
    scn = _scn()
    case = build_case(scn, False)
    compute, shard, _ = _closed_form(64, 1024, tp=2, n_gpus=4)
    assert case.compute == pytest.approx(compute, rel=1e-9)
    assert case.spec.tokens_per_step == 64 * 1024
    # two DP rings (one per rail) of 2 ranks: each rank sends 2 (n-1)/n S = S, as one
    # slice of 1/k; k from the horizon rule
    train = case.job_of == 0
    k = case.comm_scale
    assert k == math.ceil(HORIZON_FACTOR * shard / (100e9 / 8) / (100 * 4e-6))
    assert k * case.workload.size[train].sum() == pytest.approx(4 * shard, rel=1e-6)
    assert case.allreduce_ranks == 2
    # twice the batch: twice the compute, the same bytes
    case2 = build_case(_scn(model={"global_batch": 128}), False)
    assert case2.compute == pytest.approx(2 * compute, rel=1e-9)
    assert case2.comm_scale * case2.workload.size[case2.job_of == 0].sum() == \
        pytest.approx(4 * shard, rel=1e-6)
    # tp = 1 (4-rank rings over 2 servers): a gradient shard twice as large; the ring's
    # hops inside a server stay on NVLink, so the network carries less than 4 x 2 S x 3/4
    case3 = build_case(_scn(parallelism={"tp": 1}), False)
    assert case3.model_info["dp_allreduce_bytes"] == pytest.approx(2 * shard, rel=1e-9)
    assert case3.model_info["plan"]["dp"] == 4


def test_default_scenario_keeps_its_constants():
    from fabric_jax.compare import default_scenario
    scn = _scn(model=None, workload={"ep_servers": 2})
    assert scn.model is None and scn.costs is None
    case = build_case(scn, False)
    assert case.compute == pytest.approx(1e-3) and case.comm_scale == 1
    assert case.spec.tokens_per_step == 8.0 * case.train_hosts.size
    d = default_scenario()
    assert d.model is None and d.workload["compute_us"] == 1000.0
    assert d.economics == dict(gpu_price_per_hour=2.5, tokens_per_gpu_per_step=8.0)


@pytest.mark.slow
def test_cli_model_run_columns(tmp_path, capsys):
    scn_file = tmp_path / "m.toml"
    data = copy.deepcopy(BASE)
    data["simulation"].pop("dt_us")
    data["model"]["name"] = "gpt3_175b"                # replaced by --model
    scn_file.write_text(scenario_toml(data))
    out = tmp_path / "r.json"
    rc = cli.main(["compare", "--scenario", str(scn_file), "--model", "llama3_8b",
                   "--json", str(out), "--quiet"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "model: llama3_8b" in text and "plan: tp=2 pp=1 dp=2" in text
    assert "Fabric share of $/token" in text and "Model FLOPs utilisation" in text
    data = json.loads(out.read_text())
    assert data.pop("run")["command"].startswith("fabric-jax compare")
    compute, shard, flops = _closed_form(64, 1024, tp=2, n_gpus=4)
    scn = _scn()
    case = build_case(scn, False)
    # the fabric's share of $/token: BOM-based fabric $/h x job share over (that + GPU $/h)
    bom = economics.bill_of_materials(case.topology, "uec")
    per_h = economics.fabric_cost_per_hour(bom)["total_per_hour"] * 4 / case.topology.n_hosts
    share = per_h / (per_h + 2.5 * 4)
    for name, m in data.items():
        for key, *_ in METRICS:
            assert key in m
        assert m["unfinished_flows"] == 0
        step = m["training_step_time"]
        # overlap 0: compute then the DP all-reduce, at best S at line rate per NIC
        assert step >= compute + shard / (100e9 / 8) * (1 - 1e-6)
        assert m["compute_time"] == pytest.approx(compute, rel=1e-9)
        assert m["gpu_utilization"] == pytest.approx(compute / step, rel=1e-6)
        assert m["mfu"] == pytest.approx(flops / (4 * H100_PEAK * step), rel=1e-6)
        assert m["tokens_per_second"] == pytest.approx(64 * 1024 / step, rel=1e-9)
        assert m["collective_completion_time"] == pytest.approx(step - compute, rel=1e-3)
    assert data["ideal"]["fabric_cost_share"] is None        # a crossbar has no BOM
    # the ideal crossbar runs each 2-rank ring at line rate: S / line rate (+ latency)
    assert data["ideal"]["training_step_time"] == pytest.approx(
        compute + shard / (100e9 / 8), rel=1e-3)
    assert data["ideal"]["effective_bandwidth"] == pytest.approx(1.0, abs=1e-3)
    uec = data["uec"]
    assert 0 < uec["fabric_cost_share"] < 1
    assert uec["fabric_cost_share"] == pytest.approx(share, rel=1e-9)
    assert uec["total_cost_per_million_tokens"] == pytest.approx(
        uec["cost_per_million_tokens"] + uec["fabric_cost_per_million_tokens"], rel=1e-6)


@pytest.mark.parametrize("changes, key", [
    ({"model": {"name": "nope"}}, "model.name"),
    ({"model": {"hidden": "wide"}}, "model.hidden"),
    ({"model": {"heads": 4}}, "model.heads"),
    ({"parallelism": {"tp": 3}}, "parallelism.tp"),
    ({"parallelism": {"dp": 4}}, "parallelism.dp"),
    ({"parallelism": {"gpus_per_server": 8}}, "parallelism.gpus_per_server"),
    ({"parallelism": {"gpu": "z100"}}, "parallelism.gpu"),
    ({"parallelism": {"overlap": 1.5}}, "parallelism.overlap"),
    # micro_batch (default 1) is not written: the error names the key that was
    ({"model": {"global_batch": 63}}, "model.global_batch"),
    ({"model": {"global_batch": 63}, "parallelism": {"micro_batch": 1}},
     "parallelism.micro_batch"),
    ({"model": None, "parallelism": {"tp": 2}}, "parallelism"),
    ({"workload": {"compute_us": 10.0}}, "workload.compute_us"),
    ({"economics": {"tokens_per_gpu_per_step": 4.0}}, "economics.tokens_per_gpu_per_step"),
    ({"costs": {"gpu_price_per_hour": 3.0}}, "costs.gpu_price_per_hour"),
    ({"costs": {"pue": 0.5}}, "costs.pue"),
    ({"costs": {"prices": {"switch_price": -1.0}}}, "costs.prices.switch_price"),
    ({"costs": {"prices": {"bogus": {"nic_price": 1.0}}}}, "costs.prices.bogus"),
])
def test_bad_model_sections_name_their_key(changes, key):
    with pytest.raises(ScenarioError) as err:
        _scn(**changes)
    assert err.value.key == key


def test_cli_bad_model_exits_2_with_one_line(tmp_path, capsys):
    assert cli.main(["compare", "--model", "gpt5", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "model.name" in err and "llama3_8b" in err
    bad = tmp_path / "b.toml"
    bad.write_text('[model]\nname = "llama3_8b"\n[parallelism]\ntp = 5\n')
    assert cli.main(["compare", "--scenario", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "parallelism.tp" in err


def test_costs_section_overrides_prices_and_keeps_gpu_price():
    from fabric_jax.study.run import fabric_cost_metrics
    scn = _scn(costs={"lifetime_years": 2.5, "prices": {"uec": {"switch_price": 50_000.0}}})
    case = build_case(scn, False)
    m = fabric_cost_metrics(case, scn, "uec", {"training_step_time": 1.0})
    params = economics.EconomicsParams(lifetime_years=2.5)
    rep = economics.token_costs(1.0, case.spec.tokens_per_step, 4, case.topology, "uec",
                                prices={"switch_price": 50_000.0}, params=params)
    assert m["fabric_cost_share"] == pytest.approx(rep["fabric_cost_share"], rel=1e-12)
    base = fabric_cost_metrics(build_case(_scn(), False), _scn(), "uec",
                               {"training_step_time": 1.0})
    assert m["fabric_cost_share"] > base["fabric_cost_share"]     # dearer, shorter-lived
    assert math.isnan(fabric_cost_metrics(case, scn, "uec",
                                          {"training_step_time": float("inf")})
                      ["fabric_cost_share"])


def test_token_costs_parts_add_up_and_share_is_bom_ratio():
    from fabric_jax import leaf_spine
    topo = leaf_spine(2, 2, 4, link_gbps=400)
    rep = economics.token_costs(2.0, 1e6, 4, topo, "roce")
    bom = economics.bill_of_materials(topo, "roce")
    fab_h = economics.fabric_cost_per_hour(bom)["total_per_hour"] * 4 / 8
    gpu_h = 2.5 * 4
    assert rep["fabric_cost_share"] == pytest.approx(fab_h / (fab_h + gpu_h), rel=1e-12)
    assert rep["cost_per_million_tokens"] == pytest.approx(
        rep["gpu_cost_per_million_tokens"] + rep["fabric_cost_per_million_tokens"])
    assert rep["gpu_cost_per_million_tokens"] == pytest.approx(
        gpu_h * 2.0 / 3600 / 1e6 * 1e6, rel=1e-12)
    with pytest.raises(ValueError, match="step_time_s"):
        economics.token_costs(0.0, 1e6, 4, topo, "roce")
    with pytest.raises(ValueError, match="n_gpus"):
        economics.token_costs(1.0, 1e6, 9, topo, "roce")
    assert np.isfinite(rep["fabric_cost_per_hour"])


def test_moe_model_puts_its_expert_all_to_all_on_the_network():
    # Mixtral 8x7B (Jiang et al. 2024): per MoE layer and micro-batch each rank sends
    # its tokens' top-2 expert inputs, mb s h x 2 bytes x top_k / tp, to the EP group,
    # 4 times (dispatch + combine, forward + backward); with ep = 2 ranks on two
    # servers half of it leaves the server.
    scn = _scn(model={"name": "mixtral_8x7b"}, parallelism={"ep": 2})
    case = build_case(scn, False)
    kinds = np.array(case.workload.group_kind)[case.workload.group]
    a2a = (case.job_of == 0) & (kinds == "all_to_all")
    m = 64 // 2
    per_rank = 4 * 32 * m * 0.5 * (1024 * 4096 * 2 * 2 / 2)
    assert case.comm_scale * case.workload.size[a2a].sum() == pytest.approx(4 * per_rank,
                                                                            rel=1e-6)
    from fabric_jax.study.case import collective_phases
    assert set(np.unique(collective_phases(case)[case.job_of == 0])) == {0, 1}
