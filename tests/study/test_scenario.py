"""fabric_jax.scenario: the one validator (rules, check, the error) and the one
host-side Scenario (network, traffic, fabric, horizon) that compare, tune, locate and
scale read."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from fabric_jax import cli, scenario as sn
from fabric_jax import scale as sc
from fabric_jax.optimize import cli as opt_cli
from fabric_jax.scale import cli as scale_cli
from fabric_jax.serve import cli as serve_cli
from fabric_jax.optimize._locate_scenario import (LOCATE_SCHEMA, build_locate,
                                                  locate_scenario_from_dict)
from fabric_jax.scenario import ScenarioError, check


# ------------------------------------------------------------------ the validator
@pytest.mark.parametrize("rule,value,out", [
    (sn.integer(1), 3, 3),
    (sn.number(0, lo_open=True), 3, 3.0),                 # a number becomes a float
    (sn.number(0, 1, hi_open=True), 0.0, 0.0),
    (sn.number(0, 1), 1, 1.0),                            # closed upper bound
    (sn.one_of(("a", "b")), "b", "b"),
    (sn.boolean(), False, False),
    (sn.integer(1, also=("all",)), "all", "all"),
    (sn.integer(1, many=True), [1, 2], [1, 2]),
])
def test_check_accepts_and_normalises(rule, value, out):
    got = check("k", rule, value)
    assert got == out and type(got) is type(out)


@pytest.mark.parametrize("rule,value", [
    (sn.integer(1), 0), (sn.integer(1), 2.5), (sn.integer(0), True), (sn.integer(0), "3"),
    (sn.number(0, lo_open=True), 0), (sn.number(0), float("nan")),
    (sn.number(0), float("inf")), (sn.number(0, 1, hi_open=True), 1.0),
    (sn.one_of(("a", "b")), "c"), (sn.boolean(), "yes"), (sn.boolean(), 1),
    (sn.integer(1, many=True), []), (sn.integer(1, many=True, min_items=2), [3]),
    (sn.integer(1, many=True), [1, 0]), (sn.integer(1, also=("all",)), "some"),
])
def test_check_refuses_naming_the_key_the_value_and_the_rule(rule, value):
    with pytest.raises(ScenarioError) as err:
        check("topology.k", rule, value)
    e = err.value
    assert e.key == "topology.k" and e.rule is rule and e.value is value
    assert str(e).startswith("scenario key 'topology.k': must be ")
    assert repr(value) in str(e)


def test_a_flag_is_named_and_may_be_text():
    rule = sn.integer(16, 32768, many=True, unit="GPUs")
    assert check("topology.gpus", rule, "16, 32", flag="--gpus") == [16, 32]
    assert check("simulation.dt_us", sn.number(0, lo_open=True), "0.5", flag="--dt-us") == 0.5
    with pytest.raises(ScenarioError) as err:
        check("topology.gpus", rule, "8", flag="--gpus")
    assert str(err.value) == ("--gpus must be comma-separated integers in [16, 32768] "
                              "(GPUs); got '8'")
    assert err.value.flag == "--gpus" and err.value.key == "topology.gpus"
    with pytest.raises(ScenarioError, match="got '16'"):   # text only from a command line
        check("topology.gpus", rule, "16")


def test_the_message_holds_the_unit_and_the_fix():
    rule = sn.number(0, lo_open=True, unit="Gb/s", fix="400 is an NDR port")
    with pytest.raises(ScenarioError) as err:
        check("topology.link_gbps", rule, -1.0)
    assert str(err.value) == ("scenario key 'topology.link_gbps': must be a number > 0 "
                              "(Gb/s); got -1.0; 400 is an NDR port")
    assert err.value.fix == "400 is an NDR port" and err.value.msg.endswith("got -1.0")
    assert sn.describe(sn.number(0, 1, hi_open=True)) == "a number in [0, 1)"
    assert sn.describe(sn.one_of(("x", "y"), many=True), command_line=True) == \
        "comma-separated names among ['x', 'y']"


def test_refuse_names_the_flag_of_a_key_or_a_flag_itself():
    err = sn.refuse("workload.jobs", "does not divide", flags={"workload.jobs": "--jobs"})
    assert str(err) == "--jobs: does not divide" and err.key == "workload.jobs"
    assert str(sn.refuse("--resume", "needs --json")) == "--resume: needs --json"
    assert str(sn.refuse("workload.jobs", "x")) == "scenario key 'workload.jobs': x"
    assert sn.flag_map(["simulation.dt_us", "fabrics.presets"],
                       {"fabrics.presets": "--fabrics"}) == {
        "simulation.dt_us": "--dt-us", "fabrics.presets": "--fabrics"}


def test_check_args_reads_an_argparse_namespace_by_flag():
    import argparse
    table = {"--dt-us": sn.number(0, lo_open=True), "--workers": sn.integer(1)}
    args = argparse.Namespace(dt_us=0.5, workers=None)
    assert sn.check_args(args, table) == {"--dt-us": 0.5}      # None: not given
    with pytest.raises(ScenarioError, match=r"^--dt-us must be a number > 0; got 0\.0"):
        sn.check_args(argparse.Namespace(dt_us=0.0), table)
    assert sn.arg_name("--job-overlap") == "job_overlap"


def test_check_section_refuses_an_unknown_key_with_the_accepted_ones():
    table = {"a": sn.integer(0), "b": sn.boolean()}
    assert sn.check_section("s", table, {"a": 1}) == {"a": 1}
    with pytest.raises(ScenarioError, match=r"'s\.c': unknown key; accepted keys: \['a', "):
        sn.check_section("s", table, {"c": 1})
    with pytest.raises(ScenarioError, match=r"'s': must be a table"):
        sn.check_section("s", table, 3)


# ------------------------------------------------------------------ the Scenario
def test_compare_scenario_parts_and_section_names():
    scn = sn.default_scenario()
    assert scn.study == "compare" and scn.network.family == "rail_optimized"
    assert scn.topology is scn.network.params and scn.workload is scn.traffic.params
    assert scn.simulation is scn.horizon.params and scn.presets is scn.fabric.presets
    assert scn.overrides is scn.fabric.overrides and scn.model is scn.traffic.model is None
    assert scn.horizon.dt == pytest.approx(1e-6) and scn.horizon.n_steps == 1000
    # dataclasses.replace takes the section names and replaces that piece only
    sim = dict(scn.simulation, dt_us=0.5)
    other = dataclasses.replace(scn, simulation=sim, presets=["roce"])
    assert other.simulation is sim and other.presets == ("roce",)
    assert other.topology is scn.topology and other.economics is scn.economics
    assert other != scn and dataclasses.replace(other, simulation=scn.simulation,
                                                presets=scn.presets) == scn
    with pytest.raises(TypeError, match="no network"):
        sn.Scenario(workload={}, presets=(), simulation={})


def test_schema_holds_every_default_and_derived_default():
    scn = sn.default_scenario()
    for sec, table in sn.SCHEMA.items():
        assert {k: r.default for k, r in table.items()} == getattr(scn, sec)
    for key in sn.DERIVED_FROM:
        sec, name = key.split(".")
        assert sn.SCHEMA[sec][name].derived == sn.DERIVED_FROM_TEXT[key] != ""


def test_file_and_flags_take_one_path(tmp_path):
    assert sn.load_scenario() == sn.default_scenario() == sn.scenario_from_dict({})
    path = tmp_path / "s.toml"
    path.write_text('[model]\nname = "llama3_70b"\n[simulation]\ndt_us = 2.0\n')
    scn = sn.load_scenario(path, model="llama3_8b")          # the flag overrides the file
    assert scn.model["model"].name == "llama3_8b" and scn.simulation["dt_us"] == 2.0
    with pytest.raises(ScenarioError, match="--scenario: no such file"):
        sn.load_scenario(tmp_path / "none.toml")


def test_compare_refuses_another_studys_scenario():
    scn = locate_scenario_from_dict(_LOCATE)
    with pytest.raises(ScenarioError, match="a locate scenario"):
        sn.validate_scenario(scn)
    with pytest.raises(ScenarioError, match="a compare scenario"):
        build_locate(sn.default_scenario())


# ------------------------------------------------------------------ locate
_LOCATE = {"topology": {"n_leaves": 4, "n_spines": 2, "hosts_per_leaf": 4},
           "workload": {"shifts": 3}, "locate": {"preset": "uec", "steps": 50}}


def test_locate_file_fills_the_four_parts():
    scn = locate_scenario_from_dict(_LOCATE)
    assert scn.study == "locate" and scn.network.family == "leaf_spine"
    assert scn.network.params["fabric_gbps"] == 400.0            # a default
    assert scn.traffic.params == {"shifts": 3, "size_mb": 1.0}
    assert scn.fabric.presets == ("uec",) and scn.fabric.options == {"routing": "spray"}
    assert scn.horizon.params == {"seed": 0, "dt_us": 1.0, "steps": 50}
    topo, _, prob, preset, routing = build_locate(scn)
    assert (topo.n_hosts, preset, routing) == (16, "uec", "spray") and prob.n_flows > 0


@pytest.mark.parametrize("patch,key", [
    ({"topology": {"n_leaves": 0}}, "topology.n_leaves"),
    ({"topology": {"n_spines": None}}, "topology.n_spines"),
    ({"topology": {"latency_us": -1.0}}, "topology.latency_us"),
    ({"topology": {"kind": "fat_tree"}}, "topology.kind"),
    ({"workload": {"size_mb": 0}}, "workload.size_mb"),
    ({"locate": {"routing": "random"}}, "locate.routing"),
    ({"locate": {"preset": "ethernet"}}, "locate.preset"),
    ({"locate": {"colour": 1}}, "locate.colour"),
    ({"faults": {}}, "faults"),
])
def test_locate_file_refuses_naming_the_key(patch, key):
    data = {sec: dict(body) for sec, body in _LOCATE.items()}
    for sec, body in patch.items():
        data.setdefault(sec, {}).update(body)
        data[sec] = {k: v for k, v in data[sec].items() if v is not None}
    with pytest.raises(ScenarioError) as err:
        locate_scenario_from_dict(data)
    assert err.value.key == key


# ------------------------------------------------------------------ scale
def test_scale_flags_map_onto_one_scenario_per_size():
    scns = sc.scale_scenarios({"topology.gpus": "100,1024", "fabrics.presets": "roce,uec",
                               "fabrics.rails": "all", "workload.pp": 2},
                              flags=sc.SCALE_FLAGS)
    assert [s.network.params["gpus"] for s in scns] == [96, 1024]   # whole servers
    assert [s.network.params["requested_gpus"] for s in scns] == [100, 1024]
    s = scns[1]
    assert s.study == "scale" and s.network.family == "scale_topology"
    assert s.fabric.presets == ("roce", "uec") and s.fabric.options["rails"] == "all"
    assert sc.point_arguments(s) == dict(
        n_gpus=1024, presets=["roce", "uec"], system="hgx_h100", switch_radix=128,
        beyond_radix="planes", model=sc.DEFAULT_MODEL,
        plan_options=dict(pp=2, ep=sc.DEFAULT_EP, microbatches=sc.DEFAULT_MICROBATCHES,
                          global_batch=None),
        step_options=dict(skew=sc.DEFAULT_SKEW, slice_time=250e-6,
                          overlap=sc.DEFAULT_OVERLAP, dp_algorithm="nccl",
                          expert_load="zipf", capacity_factor=sc.DEFAULT_CAPACITY_FACTOR),
        jobs=1,
        placement="packed", background=0.0, background_cdf="web_search",
        latency=sc.DEFAULT_LATENCY, job_gpus=None, job_models=None, job_overlap="always",
        rails="all", max_paths=sc.DEFAULT_MAX_PATHS, qps=1, hash_fields="qp",
        hash_polarization=False, dt=sc.DEFAULT_DT_US * 1e-6, seed=0,
        horizon_factor=sc.HORIZON_FACTOR, fifo_bands=None)
    default, = sc.scale_scenarios({"topology.gpus": [64]})
    assert sc.point_arguments(default)["rails"] == (0,)
    # from Python the error names the key, from the command line the flag
    with pytest.raises(ScenarioError, match=r"^scenario key 'workload\.ep'"):
        sc.scale_scenarios({"workload.ep": 0})
    with pytest.raises(ScenarioError, match=r"^--ep must be an integer >= 1"):
        sc.scale_scenarios({"workload.ep": 0}, flags=sc.SCALE_FLAGS)
    with pytest.raises(ScenarioError, match="unknown key"):
        sc.scale_scenarios({"workload.tp": 2})
    with pytest.raises(ValueError, match="presets"):
        sc.scale_point(s, ["roce"])
    with pytest.raises(ValueError, match="a compare scenario"):
        sc.scale_point(sn.default_scenario())


@pytest.mark.slow
def test_scale_point_of_a_scenario_equals_its_keyword_run():
    scn, = sc.scale_scenarios({"topology.gpus": [16], "fabrics.presets": ["uec"],
                               "simulation.dt_us": 1.0, "workload.slice_us": 20.0})
    a = sc.scale_point(scn, ideal=False)
    b = sc.scale_point(16, ["uec"], dt=1e-6, step_options=dict(slice_time=20e-6),
                       ideal=False)
    drop = lambda d: {k: v for k, v in d.items() if k != "wall_s"}  # noqa: E731
    assert drop(a["fabrics"]["uec"]) == drop(b["fabrics"]["uec"])
    assert {k: v for k, v in a.items() if k not in ("fabrics", "wall_s")} == \
        {k: v for k, v in b.items() if k not in ("fabrics", "wall_s")}


# ------------------------------------------------------------------ every command's flags
def _flags(command: str) -> set:
    sub = cli.build_parser()._subparsers._group_actions[0].choices[command]
    return {s for a in sub._actions for s in a.option_strings if s.startswith("--")}


@pytest.mark.parametrize("command,table", [
    ("compare", cli.COMPARE_FLAGS), ("tune", opt_cli.TUNE_FLAGS),
    ("locate", {**opt_cli.LOCATE_FLAGS, **opt_cli.PLANT_RULES}),
    ("scale", {**{f: None for f in sc.SCALE_FLAGS.values()}, **scale_cli.RUN_FLAGS}),
    ("serve", serve_cli.SERVE_FLAGS),
])
def test_every_rule_table_flag_is_a_flag_of_its_command(command, table):
    assert set(table) <= _flags(command)


def test_every_rule_has_a_default_unless_required():
    for table in [*sn.SCHEMA.values(), *LOCATE_SCHEMA.values(), sc.SCALE_RULES]:
        for key, rule in table.items():
            d = rule.default
            assert d is sn.REQUIRED or d is None or rule.many or rule.also \
                or check(key, rule, d) == d, key
    assert not any(isinstance(r.default, float) and math.isnan(r.default)
                   for r in sc.SCALE_RULES.values())


# ------------------------------------------------------------------ physical ranges


@pytest.mark.parametrize("section, key, slip", [
    ("topology", "link_gbps", 400e9),        # b/s for Gb/s
    ("topology", "latency_us", 1e6),         # ps for us
    ("topology", "buffer_kb", 1e-3),         # MB for KB
    ("simulation", "dt_us", 1e-9),           # s for us
])
def test_a_unit_slip_is_refused_naming_the_key_unit_and_range(section, key, slip):
    from fabric_jax import compare
    from fabric_jax.scenario import physical
    lo, hi = getattr(physical, key.upper())
    with pytest.raises(ValueError, match=re.escape(f"'{section}.{key}': must be a number "
                                                   f"in [{lo:g}, {hi:g}]")):
        compare.scenario_from_dict({section: {key: slip}})
    compare.scenario_from_dict({section: {key: hi}})        # the bounds themselves pass
    # (a port buffer must also hold one bandwidth-delay product: none at zero latency)
    extra = {"latency_us": 0.0} if key == "buffer_kb" else {}
    compare.scenario_from_dict({section: {key: max(lo, 1e-3), **extra}})


def test_scale_refuses_a_dt_slip_before_any_work(capsys):
    from fabric_jax import cli
    assert cli.main(["scale", "--gpus", "16", "--dt-us", "1e-9"]) == 2
    assert "--dt-us must be a number in [0.001, 100] (microseconds)" in capsys.readouterr().err
