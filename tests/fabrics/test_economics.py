"""Fabric bill of materials, amortised cost and cost per token (fabric_jax.economics).

Oracles: hand counts of switches, cables and transceivers of small topologies, the
straight-line amortisation formula, and :func:`fabric_jax.metrics.cost_per_token` for
the GPU-only part.
"""

from __future__ import annotations

import json

import pytest

import fabric_jax as fj
from fabric_jax import economics as econ
from fabric_jax import metrics
from fabric_jax.workloads.model import MODELS, ParallelPlan

from experiments import gpu_value


# ------------------------------------------------------------------------ BOM
@pytest.mark.parametrize("preset", sorted(econ.FABRIC_PRICES))
def test_bom_small_leaf_spine_hand_count(preset):
    # 2 leaves x 4 hosts, 2 spines: 4 switches (largest uses 4 + 2 = 6 ports, within any
    # radix), 8 NICs, 8 host cables + 2 x 2 leaf-spine cables = 12 cables, 24
    # transceivers (one per cable end).
    topo = fj.leaf_spine(2, 2, 4)
    bom = econ.bill_of_materials(topo, preset)
    p = econ.FABRIC_PRICES[preset]
    assert (bom["switches"], bom["nics"], bom["cables"]) == (4, 8, 12)
    assert (bom["host_cables"], bom["fabric_cables"], bom["transceivers"]) == (8, 4, 24)
    assert bom["max_ports_used"] == 6 and not bom["radix_exceeded"]
    assert bom["capex"]["total"] == pytest.approx(
        4 * p.switch_price + 8 * p.nic_price + 24 * p.transceiver_price + 12 * p.fibre_price)
    assert bom["power_w"]["total"] == pytest.approx(
        4 * p.switch_power_w + 8 * p.nic_power_w + 24 * p.transceiver_power_w)


def test_bom_rail_optimized_hand_count():
    # 4 servers x 8 NICs, 2 servers per rail leaf: 2 groups x 8 rails = 16 leaves and
    # min(2, 4) = 2 spines; 32 host cables + 16 leaves x 2 uplinks = 64 cables.
    bom = econ.bill_of_materials(fj.rail_optimized(4, 8, servers_per_leaf=2), "roce")
    assert (bom["switches"], bom["nics"], bom["cables"], bom["transceivers"]) == (18, 32, 64, 128)


def test_bom_splits_switches_beyond_the_radix():
    # One leaf with 100 hosts + 1 uplink = 101 ports: ceil(101 / 64) = 2 QM9700 boxes
    # (InfiniBand radix 64), 1 box for the spine; Ethernet radix 128 needs 1.
    topo = fj.leaf_spine(1, 1, 100)
    ib = econ.bill_of_materials(topo, "infiniband")
    assert ib["switches"] == 3 and ib["radix_exceeded"]
    assert econ.bill_of_materials(topo, "roce")["switches"] == 2


def test_price_overrides_and_validation():
    topo = fj.leaf_spine(2, 2, 4)
    base = econ.bill_of_materials(topo, "uec")
    free = econ.bill_of_materials(topo, "uec", prices={"switch_price": 0.0})
    assert base["capex"]["total"] - free["capex"]["total"] == pytest.approx(
        4 * econ.FABRIC_PRICES["uec"].switch_price)
    with pytest.raises(ValueError, match="switch_cost"):
        econ.bill_of_materials(topo, "uec", prices={"switch_cost": 1.0})
    with pytest.raises(ValueError, match="nic_price"):
        econ.bill_of_materials(topo, "uec", prices={"nic_price": -1.0})
    with pytest.raises(ValueError, match="fabric_name"):
        econ.bill_of_materials(topo, "myrinet")


def test_fabric_cost_per_hour_formula():
    bom = econ.bill_of_materials(fj.leaf_spine(2, 2, 4), "infiniband")
    par = econ.EconomicsParams(lifetime_years=4.0, power_price_per_kwh=0.1, pue=1.5)
    c = econ.fabric_cost_per_hour(bom, par)
    assert c["capex_per_hour"] == pytest.approx(bom["capex"]["total"] / (4 * 8760))
    assert c["power_per_hour"] == pytest.approx(bom["power_w"]["total"] / 1e3 * 1.5 * 0.1)
    with pytest.raises(ValueError, match="pue"):
        econ.EconomicsParams(pue=0.9)
    with pytest.raises(ValueError, match="lifetime_years"):
        econ.EconomicsParams(lifetime_years=0.0)


# ------------------------------------------------------------- cost per token
def _report(step, **kw):
    topo = fj.rail_optimized(4, 8, servers_per_leaf=2)
    m = MODELS["llama3_70b"].replace(global_batch=16)
    return econ.cost_per_token_report(step, m, ParallelPlan(tp=8, dp=4), topo, "roce", **kw)


def test_cost_per_token_monotone_and_linear_in_step_time():
    steps = [0.5, 1.0, 2.0, 4.0, 8.0]
    costs = [_report(s)["cost_per_token"] for s in steps]
    assert all(a < b for a, b in zip(costs, costs[1:]))
    assert costs[2] == pytest.approx(2 * costs[1])
    shares = [_report(s)["fabric_cost_share"] for s in steps]
    assert max(shares) == pytest.approx(min(shares))      # share independent of time
    assert 0 < shares[0] < 1


def test_gpu_part_matches_metrics_cost_per_token():
    # With a free fabric the total is the GPUs' cost, metrics.cost_per_token's formula.
    zero = {k: 0.0 for k in ("switch_price", "switch_power_w", "nic_price", "nic_power_w",
                             "transceiver_price", "transceiver_power_w", "fibre_price")}
    r = _report(3.0, prices=zero, params=econ.EconomicsParams(gpu_price_per_hour=3.0))
    want = float(metrics.cost_per_token(3.0, 32, 3.0, 16 * 8192))
    assert r["cost_per_token"] == pytest.approx(want, rel=1e-6)
    assert r["fabric_cost_share"] == 0.0
    assert r["tokens_per_second"] == pytest.approx(16 * 8192 / 3.0)


def test_report_validates_inputs():
    with pytest.raises(ValueError, match="step_time_s"):
        _report(0.0)
    with pytest.raises(ValueError, match="n_gpus"):
        _report(1.0, n_gpus=64)


# ------------------------------------------------------------ scenario sections
def test_parse_model_sections_builds_objects():
    out = econ.parse_model_sections({
        "model": {"name": "mixtral_8x7b", "global_batch": 64},
        "parallelism": {"tp": 2, "dp": 8, "ep": 4, "overlap": 0.5, "gpu": "b200"},
        "costs": {"pue": 1.2, "prices": {"switch_price": 1.0, "roce": {"nic_price": 5.0}}},
        "topology": {"ignored": True}})
    assert out["model"].global_batch == 64 and out["model"].n_experts == 8
    assert out["plan"].ep == 4 and out["plan"].overlap == 0.5
    assert out["gpu"].name == "b200" and out["params"].pue == 1.2
    assert out["prices"]["roce"] == {"switch_price": 1.0, "nic_price": 5.0}
    assert out["prices"]["uec"] == {"switch_price": 1.0}


@pytest.mark.parametrize("data, key", [
    ({"model": {"name": "gpt5"}}, "model.name"),
    ({"model": {"name": "gpt3_175b", "depth": 3}}, "model.depth"),
    ({"model": {"name": "gpt3_175b", "hidden": "big"}}, "model.hidden"),
    ({"model": {"name": "gpt3_175b", "n_heads": 7}}, "model.n_heads"),
    ({"model": {"hidden": 64}}, "model.n_layers"),
    ({"parallelism": {"tp": 2.5}}, "parallelism.tp"),
    ({"parallelism": {"zero": 1}}, "parallelism.zero"),
    ({"parallelism": {"gpu": "tpu"}}, "parallelism.gpu"),
    ({"model": {"name": "gpt3_175b"}, "parallelism": {"pp": 5}}, "parallelism.pp"),
    ({"parallelism": {"dp": 4, "ep": 3}}, "parallelism.ep"),
    ({"costs": {"pue": 0.5}}, "costs.pue"),
    ({"costs": {"capex": 1}}, "costs.capex"),
    ({"costs": {"prices": {"switch_cost": 1}}}, "costs.prices.switch_cost"),
    ({"costs": {"prices": {"myrinet": {"nic_price": 1}}}}, "costs.prices.myrinet"),
])
def test_parse_model_sections_names_the_bad_key(data, key):
    with pytest.raises(ValueError, match=f"'{key}'"):
        econ.parse_model_sections(data)


# -------------------------------------------------------------- gpu_value
def test_gpu_value_rejects_bad_flags():
    with pytest.raises(SystemExit):
        gpu_value.main(["--gpu-price-per-hour", "-1"])
    with pytest.raises(SystemExit):
        gpu_value.main(["--dp", "4", "--ep", "3"])


@pytest.mark.slow
def test_gpu_value_quick_from_model_and_simulation(tmp_path):
    # 32 GPUs (4 servers), llama3_70b tp 8 dp 4: the step is at least its compute time
    # (communication can only add), utilisation < 1, MFU below the achievable fraction
    # (0.5), and SHARP halves the bytes each NIC sends in the 4-rank all-reduce
    # (S vs 2 (n-1)/n S = 1.5 S), so infiniband loses the least.
    out = tmp_path / "gv.json"
    gpu_value.main(["--quick", "--json", str(out), "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    fab = data["fabrics"]
    assert set(fab) == {"infiniband", "roce", "spectrum_x", "uec"}
    for v in fab.values():
        assert v["step_time"] >= v["compute_time"] > 0
        assert 0 < v["gpu_utilization"] < 1
        assert 0 < v["mfu"] < 0.5
        assert v["cost_per_million_tokens"] == pytest.approx(
            v["gpu_cost_per_million_tokens"] + v["fabric_capex_per_million_tokens"]
            + v["fabric_power_per_million_tokens"])
    assert min(fab, key=lambda n: fab[n]["dollars_lost_to_communication"]) == "infiniband"
    assert data["inputs"]["model"]["name"] == "llama3_70b"
    assert (tmp_path / "gpu_value.png").is_file()


def test_bom_fat_tree_matches_al_fares_counts():
    # k-ary fat-tree (Al-Fares et al. 2008): 5k^2/4 switches, k^3/4 hosts, 3k^3/4 cables.
    bom = econ.bill_of_materials(fj.fat_tree(4), "spectrum_x")
    assert (bom["switches"], bom["nics"], bom["cables"]) == (20, 16, 48)
    assert bom["transceivers"] == 96 and bom["max_ports_used"] == 4


def test_parse_model_sections_from_toml_text():
    import tomllib
    text = """
    [model]
    name = "llama3_405b"
    global_batch = 512
    [parallelism]
    tp = 8
    pp = 9
    dp = 8
    """
    with pytest.raises(ValueError, match="'parallelism.pp'"):   # 126 layers / 9 = 14 ok
        econ.parse_model_sections(tomllib.loads(text.replace("pp = 9", "pp = 5")))
    out = econ.parse_model_sections(tomllib.loads(text))
    assert out["model"].n_layers == 126 and out["plan"].n_gpus == 576
