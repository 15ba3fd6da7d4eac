"""The compare study: CLI end to end on a tiny scenario, JSON keys, scenario errors."""

from __future__ import annotations

import copy

import json

import numpy as np

import pytest

from fabric_jax import cli
from fabric_jax.compare import METRICS, scenario_from_dict

from tests.helpers import scenario_toml, tiny_scenario

TINY_DATA = tiny_scenario(
    workload={"all_reduce_mb": 1.0, "moe_mb": 0.5, "compute_us": 100, "tenant_incast_mb": 0.2},
    simulation={"dt_us": 4.0, "n_steps": 100, "max_paths": 4},
    fabrics={"presets": ["roce", "uec"]})


# two presets of different all-reduce algorithms (SHARP, ring): the default run's one
# compare, shared below
IDEAL_DATA = tiny_scenario(workload=TINY_DATA["workload"], simulation=TINY_DATA["simulation"],
                           fabrics={"presets": ["infiniband", "uec"]})


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """``fabric-jax compare --json`` on :data:`IDEAL_DATA`: (printed table, JSON)."""
    tmp = tmp_path_factory.mktemp("compare")
    scn = tmp / "tiny.toml"
    scn.write_text(scenario_toml(IDEAL_DATA))
    out_json = tmp / "r.json"
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["compare", "--scenario", str(scn), "--json", str(out_json), "--quiet",
                       "--plots", str(tmp / "plots")])
    assert rc == 0
    return buf.getvalue(), json.loads(out_json.read_text()), tmp / "plots"


def _check_cli_output(text, data, presets, ideals):
    assert all(p in text for p in presets) and "Effective bandwidth" in text
    # one entry per preset and ideal, and the record of the run that wrote them
    data = dict(data)
    run = data.pop("run")
    assert run["command"].startswith("fabric-jax compare")
    # the resolved scenario the figures came from, every default filled in
    assert run["inputs"]["presets"] == list(presets)
    assert run["inputs"]["simulation"]["n_steps"] >= 1
    assert set(run["inputs"]) >= {"topology", "workload", "simulation", "presets"}
    assert sorted(data) == sorted(ideals + presets)
    assert "ideal" in text.splitlines()[0]          # the baseline is a table column
    for key in ideals:
        assert data[key]["pfc_pause_time"] == 0.0   # a crossbar never pauses
        assert data[key]["description"] in text     # the table says what the ideal is
    for name in data:
        for key, *_ in METRICS:
            assert key in data[name]
        # the effective bandwidth is a fraction in (0, 1] and every flow finished
        assert 0 < data[name]["effective_bandwidth"] <= 1.0 + 1e-6
        assert data[name]["unfinished_flows"] == 0
        assert 0 < data[name]["gpu_utilization"] < 1
        # the keys compare wrote before issue 14 are all still there
        for key in ("effective_bandwidth", "collective_completion_time",
                    "all_to_all_completion_time", "bus_bandwidth", "fct_slowdown_p50",
                    "fct_slowdown_p99", "isolation", "pfc_pause_time", "gpu_utilization",
                    "training_step_time", "cost_per_million_tokens", "unfinished_flows",
                    "paths_dropped"):
            assert key in data[name]
        assert data[name]["mfu"] is None                  # no model: no MFU
        if name not in ideals:
            assert 0 < data[name]["fabric_cost_share"] < 1


def test_cli_end_to_end(cli_run):
    text, data, plots = cli_run
    _check_cli_output(text, data, ["infiniband", "uec"], ["ideal", "ideal_sharp"])
    # --plots draws the compare's figures; the scaling curve only with --scaling-curve
    for name in ("fabric_bars.png", "fct_cdf.png"):
        assert (plots / name).stat().st_size > 0 and name in text
    assert not (plots / "scaling_curve.png").exists()


@pytest.mark.parametrize("args,match", [
    (["--scaling-curve"], "--plots"), (["--plots", "x", "--scaling-curve",
                                        "--scaling-factors", "0,1"], "--scaling-factors"),
    (["--plots", "x", "--scaling-curve", "--scaling-factors", "a"], "--scaling-factors")])
def test_cli_scaling_curve_options_are_checked_first(args, match, capsys):
    assert cli.main(["compare", "--quiet"] + args) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_each_preset_is_no_better_than_its_own_ideal(cli_run):
    """The per-preset ideal runs the preset's own all-reduce (SHARP for infiniband, the
    ring for uec) with the training job alone on the crossbar: no preset beats it on a
    training row, up to one fluid step (dt = 4 us); FCT slowdowns are >= 1.  (Isolation
    >= 1 is checked where isolation runs: test_compare_classes_reports_isolation_per_class.)"""
    _, data, _ = cli_run
    dt = IDEAL_DATA["simulation"]["dt_us"] * 1e-6
    assert data["infiniband"]["ideal_column"] == "ideal_sharp"
    assert data["uec"]["ideal_column"] == "ideal"
    assert data["ideal_sharp"]["algorithm"] == "sharp" and data["ideal"]["algorithm"] == "ring"
    for name in ("infiniband", "uec"):
        p, best = data[name], data[data[name]["ideal_column"]]
        assert best["presets"] == [name]
        for key in ("collective_completion_time", "all_to_all_completion_time",
                    "training_step_time"):
            assert best[key] <= p[key] + dt, (name, key)
        t_ar, step = p["collective_completion_time"], p["training_step_time"]
        t_both = t_ar + p["all_to_all_completion_time"]
        # rates and shares: one step of slack on the time they divide by
        assert best["effective_bandwidth"] * (1 + 2 * dt / t_both) >= p["effective_bandwidth"]
        assert best["bus_bandwidth"] * (1 + dt / t_ar) >= p["bus_bandwidth"]
        assert best["gpu_utilization"] * (1 + dt / step) >= p["gpu_utilization"]
        assert best["cost_per_million_tokens"] <= p["cost_per_million_tokens"] * (1 + dt / step)
        for key in ("fct_slowdown_p50", "fct_slowdown_p99"):
            assert best[key] == 1.0 and p[key] >= 1.0 - 1e-3, (name, key)
        assert best["pfc_pause_time"] <= p["pfc_pause_time"]


@pytest.mark.slow
def test_cli_end_to_end_with_scaling_curve(tmp_path, capsys):
    # with --plots --scaling-curve the command also runs the scaling study (one preset:
    # the curve runs every preset at 2, 4 and 8 servers; the table's presets are checked
    # by test_cli_end_to_end, RoCE's PFC columns by tests/experiments/test_experiments.py isolation)
    presets = ["uec"]
    scn = tmp_path / "tiny.toml"
    scn.write_text(scenario_toml({**TINY_DATA, "fabrics": {"presets": presets}}))
    out_json = tmp_path / "r.json"
    rc = cli.main(["compare", "--scenario", str(scn), "--json", str(out_json), "--quiet",
                   "--plots", str(tmp_path / "plots"), "--scaling-curve"])
    assert rc == 0
    text = capsys.readouterr().out
    _check_cli_output(text, json.loads(out_json.read_text()), presets, ["ideal"])
    assert (tmp_path / "plots" / "fabric_bars.png").stat().st_size > 0
    # the scaling curve: the training job alone at 0.5x..4x its servers (2 -> 2, 4, 8)
    assert (tmp_path / "plots" / "scaling_curve.png").stat().st_size > 0
    assert "scaling_curve.png" in text


@pytest.mark.slow
def test_scaling_study_and_public_simulate_case():
    import numpy as np

    import fabric_jax
    from fabric_jax import compare
    scn = compare.scenario_from_dict({**_tiny_dict(), "fabrics": {"presets": ["roce"]}})
    # one point (2 training servers x 2 NICs) keeps the default run short; the curve over
    # 0.5x..4x runs in the slow suite (test_cli_end_to_end with --plots)
    curve = compare.scaling_study(scn, factors=(1.0,))
    assert curve["gpus"] == [4]
    v = curve["fabrics"]["roce"]
    # ring of n servers per rail, 1 MB / 2 rails per GPU at 100 Gb/s: the line-rate
    # time 2 (n-1)/n * 0.5 MB / 12.5 GB/s bounds the all-reduce from below
    for n, t in zip((2,), v["all_reduce_completion_time"]):
        assert t >= 2 * (n - 1) / n * 0.5e6 / 12.5e9
    assert all(0 < e <= 1 + 1e-6 for e in v["effective_bandwidth"])
    # public fluid entry point, and the "alone" arrivals
    assert fabric_jax.simulate_case is compare.simulate_case
    case = compare.build_case(scn, False)
    arr = compare.alone_arrival(case, 1)
    assert np.all(arr[case.job_of != 1] == compare.NEVER)
    assert np.array_equal(arr[case.job_of == 1], case.sim_arrival[case.job_of == 1])


def _tiny_dict():
    return copy.deepcopy(TINY_DATA)


def test_no_subcommand_prints_help(capsys):
    assert cli.main([]) == 0
    assert "compare" in capsys.readouterr().out


@pytest.mark.parametrize("data,match", [
    ({"topology": {"kind": "torus"}}, r"topology\.kind.*rail_optimized"),
    ({"topology": {"colour": 1}}, r"topology\.colour.*accepted keys"),
    ({"simulation": {"n_steps": "many"}}, r"simulation\.n_steps"),
    ({"fabrics": {"presets": ["ethernet"]}}, r"fabrics\.presets.*infiniband"),
    ({"fabrics": {"roce": {"routing": "magic"}}}, r"fabrics\.roce.*routing policy"),
    ({"nonsense": {}}, r"nonsense.*accepted sections"),
])
def test_bad_scenarios_name_key_and_accepted_values(data, match):
    with pytest.raises(ValueError, match=match):
        scenario_from_dict(data)


def test_cli_bad_file_is_an_error_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[topology]\nkind = "torus"\n')
    assert cli.main(["compare", "--scenario", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "topology.kind" in err and "rail_optimized" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_preset_options_fail_before_any_preset_runs(tmp_path, capsys, monkeypatch):
    """A bad ``cc_options`` of the last preset is refused before the first preset runs."""
    from fabric_jax import fabric_sim
    calls = []
    monkeypatch.setattr(fabric_sim, "run", lambda *a, **k: calls.append(1))
    bad = tmp_path / "bad.toml"
    data = _tiny_dict()
    data["fabrics"]["uec"] = {"cc_options": {"no_such_gain": 1.0}}
    bad.write_text(scenario_toml(data))
    assert cli.main(["compare", "--scenario", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "fabrics.uec.cc_options" in err and "Traceback" not in err
    assert calls == []


def test_ideal_baseline_is_line_rate_for_one_flow():
    """A single flow on the crossbar runs at line rate: its FCT is size / rate + latency
    (closed form), and the crossbar has one up and one down link per host."""
    import numpy as np

    from fabric_jax import compare
    from fabric_jax.fabric_sim import ideal_incidence
    inc, cap = ideal_incidence(np.array([0, 1]), np.array([1, 0]), 2, nic_capacity=5.0)
    assert np.asarray(inc.link_idx).tolist() == [0, 3, 1, 2]
    assert cap.tolist() == [5.0] * 4 and inc.row_width == 2
    scn = compare.scenario_from_dict(_tiny_dict())
    case = compare.build_case(scn, False)
    res = compare.simulate_ideal(case)
    fin = np.asarray(res.finish, float)
    assert np.all(np.isfinite(fin))
    # no flow beats its own line-rate time on an idle crossbar
    lower = case.sim_arrival + case.workload.size / case.line_rate + case.latency
    assert np.all(fin >= lower * (1 - 1e-5) - 1e-9)


def test_ideal_rows_keep_links_and_merge_a_flows_entries():
    """One kept link (id 0, 7 B/s), then the up-links (1, 2) and down-links (3, 4) of 2
    hosts.  Flow 0 hop by hop: up-link of host 0 over two planes (0.5 + 0.5 merge to 1),
    the kept link, the down-link of host 1; flow 1: 0.75 + 0.75 on one link clips to 1."""
    import numpy as np

    from fabric_jax.fabric_sim import ideal_incidence
    none = [-1, -1, -1, -1]
    src = np.array([[0, 0, -1, -1], [0, 0, -1, -1]])
    dst = np.array([[-1, -1, -1, 1], none])
    keep = np.array([[-1, -1, 0, -1], none])
    w = np.array([[0.5, 0.5, 1.0, 1.0], [0.75, 0.75, 0.0, 0.0]])
    inc, cap = ideal_incidence(src, dst, 2, nic_capacity=[[1.0, 2.0], [3.0, 4.0]], weight=w,
                               keep_links=keep, keep_capacity=[7.0])
    assert cap.tolist() == [7.0, 1.0, 2.0, 3.0, 4.0]
    dense = np.zeros((5, 2))
    np.add.at(dense, (np.asarray(inc.link_idx), np.asarray(inc.flow_idx)),
              np.asarray(inc.weight))
    np.testing.assert_allclose(dense.T, [[1, 1, 0, 0, 1], [0, 1, 0, 0, 0]])
    assert inc.row_width == 3

def test_prepare_paths_overrides_and_fluid_options_last():
    """On two planes of 50 Gb/s ports: ECMP pins a flow to one plane (its line rate one
    port, 6.25 GB/s), spraying spreads it over both (the whole NIC, 12.5 GB/s).  A
    caller's routing and line rate replace the preset's; ``fluid_options`` apply last
    (``line_rate=None``: the engine's default, the smallest capacity on the paths)."""
    import numpy as np

    from fabric_jax.fabric_sim import prepare_paths
    from fabric_jax.paths import shortest_paths
    from fabric_jax.topology import leaf_spine
    topo = leaf_spine(2, 2, 2, link_gbps=100.0, planes=2)
    ps = shortest_paths(topo, [0, 1], [2, 3])
    kw = dict(dt=1e-6, n_steps=10)
    size = np.full(2, 1e6)

    def line_rate(**options):
        problem = prepare_paths(topo, ps, "roce", size, **kw, **options)
        rate = np.asarray(problem.net.line_rate, float)     # float32 on the device
        return problem.static.policy.name, (rate / 1e9).round(3).tolist()

    assert line_rate() == ("ecmp", [6.25] * 2)
    assert line_rate(routing="spray") == ("spray", [12.5] * 2)
    assert line_rate(routing="spray", line_rate=np.full(2, 5e9)) == ("spray", [5.0] * 2)
    assert line_rate(line_rate=np.full(2, 5e9),
                     fluid_options=dict(line_rate=np.full(2, 7e9))) == ("ecmp", [7.0] * 2)
    assert line_rate(routing="spray", fluid_options=dict(line_rate=None)) == (
        "spray", [6.25] * 2)


def test_every_equal_cost_path_by_default_and_caps_are_reported():
    import warnings

    from fabric_jax import compare
    from fabric_jax.paths import PathsTruncatedWarning
    d = _tiny_dict()
    d["simulation"].pop("max_paths")
    case = compare.build_case(compare.scenario_from_dict(d), False)
    assert case.paths_dropped == 0
    n_all = case.paths.n_candidates(case.topology)
    assert np.array_equal(case.paths.n_paths, n_all)
    d["simulation"]["max_paths"] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", PathsTruncatedWarning)
        capped = compare.build_case(compare.scenario_from_dict(d), False)
    assert capped.paths_dropped == int(np.sum(n_all - 1)) > 0
    table = compare.format_table({"x": {"paths_dropped": capped.paths_dropped}})
    assert f"dropped {capped.paths_dropped} equal-cost paths" in table


def test_scenario_values_are_never_changed_silently():
    from fabric_jax import compare
    scn = compare.scenario_from_dict(_tiny_dict())
    for sec in ("topology", "workload", "simulation", "economics"):
        for key, val in _tiny_dict().get(sec, {}).items():
            assert getattr(scn, sec)[key] == val
    for bad in ({"workload": {"ep_servers": 1}}, {"workload": {"ep_servers": 3}},
                {"topology": {"kind": "leaf_spine", "n_servers": 5, "servers_per_leaf": 2}}):
        with pytest.raises(ValueError):
            compare.scenario_from_dict(_merge(_tiny_dict(), bad))


def _merge(base, extra):
    out = {k: dict(v) for k, v in base.items()}
    for sec, body in extra.items():
        out.setdefault(sec, {}).update(body)
    return out


def test_study_layers_import_one_way_and_compare_is_the_public_face():
    """scenario -> case -> run -> report: no layer imports a later one; fabric_jax.compare
    re-exports the documented names."""
    import ast
    from pathlib import Path

    import fabric_jax
    from fabric_jax import compare
    order = ["scenario", "case", "run", "report"]
    root = Path(fabric_jax.__file__).parent / "study"
    for i, name in enumerate(order):
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in order:
                assert order.index(node.module) < i, (name, node.module)
    for attr in ("default_scenario", "run_compare", "simulate_case", "build_case", "Case",
                 "load_scenario", "format_table", "write_json"):
        assert hasattr(compare, attr)
    assert fabric_jax.faults.__name__ == "fabric_jax.faults"
    assert fabric_jax.checkpoint.__name__ == "fabric_jax.checkpoint"


def test_isolation_per_class_is_the_worst_job_of_each_class():
    from fabric_jax.metrics import isolation_per_class
    got = isolation_per_class({0: 1.2, 1: 3.0, 2: float("nan")}, {0: 1, 1: 0, 2: 0}, 3)
    assert got[:2] == [3.0, 1.2] and np.isnan(got[2])          # class 2 holds no job
    assert isolation_per_class({0: 1.2, 1: 3.0}, {}, 1) == [3.0]  # unmapped: class 0
    with pytest.raises(ValueError, match="job_class"):
        isolation_per_class({0: 1.0}, {0: 2}, 2)
    with pytest.raises(ValueError, match="n_classes"):
        isolation_per_class({0: 1.0}, {}, 0)


@pytest.mark.slow
def test_compare_classes_reports_isolation_per_class(tmp_path, capsys):
    """``--classes`` puts the training job alone in class 1 of every preset: class 1's
    isolation is the training job's, class 0's the tenant's (the background has no alone
    run), and the ideal crossbar keeps one class holding every job."""
    scn = tmp_path / "tiny.toml"
    data = tiny_scenario(workload=TINY_DATA["workload"],
                         simulation={**TINY_DATA["simulation"], "isolation": True},
                         fabrics={"presets": ["roce"]})
    scn.write_text(scenario_toml(data))
    out_json = tmp_path / "r.json"
    assert cli.main(["compare", "--scenario", str(scn), "--json", str(out_json), "--quiet",
                     "--classes"]) == 0
    text = capsys.readouterr().out
    assert "Isolation, class 1" in text and "roce 0=TC0 (tenant), 1=TC3 (train)" in text
    res = json.loads(out_json.read_text())
    roce = res["roce"]["isolation_per_class"]
    assert [c["jobs"] for c in roce] == [["tenant"], ["train"]]
    assert all(c["isolation"] >= 1.0 - 1e-6 for c in roce)
    assert roce[1]["isolation"] == pytest.approx(res["roce"]["isolation_train"])
    assert roce[0]["isolation"] == pytest.approx(res["roce"]["isolation_tenant"])
    assert max(c["isolation"] for c in roce) == pytest.approx(res["roce"]["isolation"])
    ideal = res["ideal"]["isolation_per_class"]
    assert len(ideal) == 1 and ideal[0]["class"] == "all"
    assert ideal[0]["isolation"] == pytest.approx(res["ideal"]["isolation"])
