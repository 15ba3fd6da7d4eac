"""Scenario defaults that follow the user's values (``study.scenario.derive_defaults``).

A default never contradicts what the user wrote: it adapts, and a scenario is refused
only for a value the user wrote, named in the error.  One test per dependent default,
then a grid over combinations of written keys.
"""

from __future__ import annotations

import itertools

import pytest

from fabric_jax.compare import ScenarioError, default_scenario, scenario_from_dict
from fabric_jax.study.scenario import DERIVED_FROM, with_model_name


def _w(scn):
    return scn.workload


def test_nothing_written_is_the_builtin_scenario():
    assert scenario_from_dict({}) == default_scenario()


def test_tenant_fan_in_follows_tenant_servers():
    # the case: tenant_servers = 2 was refused for the default fan-in of 4
    assert _w(scenario_from_dict({"workload": {"tenant_servers": 2}}))["tenant_fan_in"] == 1
    assert _w(scenario_from_dict({"workload": {"tenant_servers": 3}}))["tenant_fan_in"] == 2
    assert _w(scenario_from_dict({"workload": {"tenant_servers": 9}}))["tenant_fan_in"] == 4
    # a fan-in the user wrote is kept, or refused naming it
    assert _w(scenario_from_dict({"workload": {"tenant_servers": 9,
                                               "tenant_fan_in": 6}}))["tenant_fan_in"] == 6
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({"workload": {"tenant_servers": 2, "tenant_fan_in": 4}})
    assert err.value.key == "workload.tenant_fan_in"


def test_tenant_servers_follow_n_servers_and_the_training_job():
    assert _w(scenario_from_dict({"topology": {"n_servers": 16}}))["tenant_servers"] == 4
    # a quarter of 5 is 1 server, no incast: no tenant
    assert _w(scenario_from_dict({"topology": {"n_servers": 5}}))["tenant_servers"] == 0
    # at most what the written training job leaves
    scn = scenario_from_dict({"topology": {"n_servers": 16}, "workload": {"train_servers": 14}})
    assert _w(scn)["tenant_servers"] == 2


def test_train_servers_fill_the_servers_the_tenant_leaves():
    assert _w(scenario_from_dict({"workload": {"tenant_servers": 2}}))["train_servers"] == 30
    assert _w(scenario_from_dict({"topology": {"n_servers": 16}}))["train_servers"] == 12


def test_n_servers_grows_to_hold_the_written_jobs():
    scn = scenario_from_dict({"workload": {"train_servers": 40}})
    assert scn.topology["n_servers"] == 48 and _w(scn)["tenant_servers"] == 8
    assert scenario_from_dict({"workload": {"train_servers": 7}}).topology["n_servers"] == 32
    # whole leaves on a leaf_spine whose leaf size is written
    scn = scenario_from_dict({"topology": {"kind": "leaf_spine", "servers_per_leaf": 12}})
    assert scn.topology["n_servers"] == 36


def test_servers_per_leaf_follows_n_servers():
    assert scenario_from_dict({"topology": {"n_servers": 8}}).topology["servers_per_leaf"] == 4
    # a leaf_spine needs whole leaves and two of them: the largest divisor <= n / 2
    for n, spl in ((24, 12), (20, 10), (12, 6), (2, 1)):
        scn = scenario_from_dict({"topology": {"kind": "leaf_spine", "n_servers": n}})
        assert scn.topology["servers_per_leaf"] == spl


def test_ep_servers_divide_the_training_job():
    assert _w(scenario_from_dict({"workload": {"train_servers": 6}}))["ep_servers"] == 3
    assert _w(scenario_from_dict({"workload": {"train_servers": 10}}))["ep_servers"] == 2
    # a prime job has no divisor up to 4: one group of every server
    assert _w(scenario_from_dict({"workload": {"train_servers": 7}}))["ep_servers"] == 7
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({"workload": {"train_servers": 7, "ep_servers": 4}})
    assert err.value.key == "workload.ep_servers"


def test_n_steps_keep_the_one_ms_horizon_when_dt_is_written():
    sim = scenario_from_dict({"simulation": {"dt_us": 0.25}}).simulation
    assert sim["n_steps"] == 4000 and sim["n_steps"] * sim["dt_us"] == 1000.0
    assert scenario_from_dict({"simulation": {"dt_us": 3.0}}).simulation["n_steps"] == 333
    sim = scenario_from_dict({"simulation": {"dt_us": 0.25, "n_steps": 10}}).simulation
    assert sim["n_steps"] == 10


def test_training_job_adapts_to_the_models_batch():
    # llama3_8b's global batch (512) is not divisible by dp = 24: the job takes the
    # largest size whose dp divides it (16 servers), unless the user wrote the size
    scn = scenario_from_dict(with_model_name({}, "llama3_8b"))
    plan = scn.model["plan"]
    assert _w(scn)["train_servers"] == 16 and plan.dp == 16
    assert scn.model["model"].global_batch % (plan.dp * plan.micro_batch) == 0
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(with_model_name({"workload": {"train_servers": 24}}, "llama3_8b"))
    assert err.value.key == "workload.train_servers"
    # gpt3_175b's 1,536 divides by 24: nothing moves
    assert _w(scenario_from_dict(with_model_name({}, "gpt3_175b")))["train_servers"] == 24


def test_a_refusal_of_a_derived_default_names_the_written_key():
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({"topology": {"n_servers": 1}})
    assert err.value.key == "topology.n_servers"
    assert "workload.train_servers" in str(err.value)        # which default, and why


GRID = dict(kind=(None, "leaf_spine"), n_servers=(None, 1, 2, 3, 5, 16),
            train_servers=(None, 2, 7, 30), tenant_servers=(None, 0, 2, 3),
            tenant_fan_in=(None, 1, 3))
SECTION = dict(kind="topology", n_servers="topology", train_servers="workload",
               tenant_servers="workload", tenant_fan_in="workload")


def test_every_refusal_names_a_key_the_user_wrote():
    refused = accepted = 0
    for values in itertools.product(*GRID.values()):
        data, written = {}, set()
        for key, val in zip(GRID, values):
            if val is not None:
                data.setdefault(SECTION[key], {})[key] = val
                written.add(f"{SECTION[key]}.{key}")
        try:
            scn = scenario_from_dict(data)
        except ScenarioError as err:
            refused += 1
            assert err.key in written, (data, str(err))
            continue
        accepted += 1
        # an accepted scenario kept every written value
        for full in written:
            sec, key = full.split(".")
            assert getattr(scn, sec)[key] == data[sec][key]
    assert refused and accepted                  # the grid exercises both outcomes


def test_every_derived_key_is_documented():
    from fabric_jax.study import scenario as sc
    for key in DERIVED_FROM:
        assert key in sc.DERIVED_FROM_TEXT and key.split(".")[1] in sc.derive_defaults.__doc__
