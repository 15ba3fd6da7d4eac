"""``experiments/bench_gpu.py --small``: the GPU benchmark's CPU smoke run (issue 24).

The benchmark's timings are not asserted (speed is measured in benchmarks, not tests);
what is checked is that every part runs end to end on CPU-sized instances and reports
figures that are consistent with each other: the exact solve's iteration count and its
time per iteration, events counted, batched runs timed against a loop, fusion counts
read from the compiled HLO, and the JSON and the printed tables agree.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import bench_gpu as bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_gpu_small_runs_every_cpu_part(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    res = bench.main(["--small", "--parts", "solve,events,batched", "--max-flows", "2000",
                      "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["small"] is True and set(data["parts"]) == {"solve", "events", "batched"}
    (solve,) = data["parts"]["solve"]          # --max-flows 2000 keeps the 2,000-flow row
    assert solve["flows"] == 2000 and solve["iterations"] >= 1
    assert solve["default_per_iteration_s"] == pytest.approx(
        solve["default_steady_s"] / solve["iterations"])
    assert solve["bytes_per_flow"] > 0 and solve["fusions"] > 0
    events = data["parts"]["events"]
    assert [r["flows"] for r in events] == [300]
    assert all(r["events"] >= 1 for r in events)
    (ev,) = data["parts"]["batched"]
    assert ev["kind"] == "events" and ev["batch"] == 4
    assert ev["loop_over_batched"] == pytest.approx(
        ev["loop_per_scenario_s"] / ev["per_scenario_s"])
    printed = capsys.readouterr().out
    for part in ("[solve]", "[events]", "[batched]", "loop_over_batched"):
        assert part in printed
    assert res["parts"].keys() == data["parts"].keys()


def test_bench_gpu_rejects_unknown_parts():
    with pytest.raises(SystemExit):
        bench.main(["--parts", "solve,warp"])


@pytest.mark.slow
def test_bench_gpu_variants_compute_the_same_thing(tmp_path):
    # each variant in its own process, XLA flags set before the backend starts (on a
    # CPU the GPU flags are accepted and do nothing); every variant's results equal
    # the default's to the bit, and the ratio is the one of the two measured times
    out = tmp_path / "gpu.json"
    bench.main(["--small", "--parts", "variants", "--json", str(out)])
    rows = json.loads(out.read_text())["parts"]["variants"]
    assert [r["variant"] for r in rows] == [v[0] for v in bench.XLA_VARIANTS]
    assert all("error" not in r for r in rows), rows
    assert [r["solver_unroll"] for r in rows] == [v[2] for v in bench.XLA_VARIANTS]
    for r in rows[1:]:
        assert r["same_result"] is True
        assert r["default_over_variant"] == pytest.approx(rows[0]["step_s"] / r["step_s"])
        assert r["solve_iterations_per_step"] == rows[0]["solve_iterations_per_step"]


def test_bench_gpu_variant_reports_a_failing_process():
    # a setting fabric_jax refuses aborts the process: the row says so, no crash
    row = bench.variant_row(8, 10, 1, "bogus", {"FABRIC_JAX_DEVICE_LOOPS": "maybe"}, 0)
    assert "FABRIC_JAX_DEVICE_LOOPS" in row["error"]
    assert row["variant"] == "bogus" and "error" in row and "step_s" not in row


@pytest.mark.slow
def test_bench_gpu_fluid_batched_and_unroll_parts(tmp_path):
    # the fluid batch against a loop, and solver_unroll 0 / 4 / 8 interleaved: rows as
    # documented, ratios that are the ratios of the times reported
    out = tmp_path / "gpu.json"
    bench.main(["--small", "--parts", "fluid_batched,unroll", "--json", str(out)])
    parts = json.loads(out.read_text())["parts"]
    (fl,) = parts["fluid_batched"]
    assert fl["kind"] == "fluid" and fl["batch"] == 4 and fl["flows"] == 2000
    assert fl["loop_over_batched"] == pytest.approx(
        fl["loop_per_scenario_s"] / fl["per_scenario_s"])
    rows = parts["unroll"]
    assert [r["solver_unroll"] for r in rows] == [0, 4, 8]
    assert rows[0]["over_unroll0"] == 1.0 and all(r["step_s"] > 0 for r in rows)
    for r in rows[1:]:
        assert r["over_unroll0"] == pytest.approx(r["step_s"] / rows[0]["step_s"])


def test_bench_gpu_aot_part_compiles_for_the_gpu_or_says_what_it_needs(tmp_path):
    """``--parts aot`` compiles XLA:GPU's program on this host: with JAX's CUDA plugin it
    runs (its rows are checked in ``tests/experiments/test_launch_model.py``'s terms); without it,
    as in the test environment, it stops with the install command, not a traceback from
    deep inside JAX."""
    has_plugin = bench._hlo.cuda_plugin() is not None
    args = ["--small", "--parts", "aot", "--max-flows", "1", "--json", str(tmp_path / "a.json")]
    if not has_plugin:
        with pytest.raises(RuntimeError, match=r"pip install 'jax\[cuda12\]'"):
            bench.main(args)
        return
    # a process of its own: XLA:GPU's compiler logs its command buffers only if asked
    # before JAX's backend starts (bench_gpu.main does so first)
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(root / "experiments" / "bench_gpu.py"), *args],
                   check=True, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)))
    rows = json.loads((tmp_path / "a.json").read_text())["parts"]["aot"]
    assert [r["instance"] for r in rows] == ["proxy"] * 3
    plain, _, unrolled = rows
    # every loop on the host: each solve's first iteration runs outside its loop, so
    # the loop tests depth times
    assert plain["host_loops_round_trips_per_step"] == pytest.approx(
        plain["solve_iterations_per_step"] + plain["nic_rounds_per_step"])
    assert unrolled["host_loops_round_trips_per_step"] == 2
    # as fabric_jax compiles it: the loops are conditional nodes of a CUDA graph
    for r in rows:
        assert r["round_trips_per_step"] == 0 and r["command_buffers"] >= 1
        d, n = map(int, r["loops_on_device"].split("/"))
        assert d == n >= 3


def test_bench_gpu_budget_spent_skips_every_part(tmp_path):
    # --budget-s 0: nothing is started, and the JSON says which parts were left out
    out = tmp_path / "gpu.json"
    res = bench.main(["--small", "--parts", "solve,events", "--budget-s", "0",
                      "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["skipped"] == ["solve", "events"] and data["parts"] == {}
    assert data["budget_s"] == 0 and res["skipped"] == data["skipped"]
    assert data["device"]["platform_version"] == "cpu"      # the runtime's version string
    assert data["env"]["cpu"]["XLA_PYTHON_CLIENT_PREALLOCATE"] is not None


def test_bench_gpu_rejects_a_negative_budget_and_knows_its_session():
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit):
            bench.main(["--budget-s", bad, "--parts", "solve"])
    # the session's parts are parts, preflight first (it decides how the others run)
    assert set(bench.SESSION_PARTS) <= set(bench.PARTS)
    assert bench.SESSION_PARTS[0] == "preflight" and "aot" not in bench.SESSION_PARTS
    assert 0 < bench.SESSION_BUDGET_S < 600
    # a child's time: the smaller of the time left and its cap, either may be absent
    assert bench._capped(None, None) is None and bench._capped(30.0, None) == 30.0
    assert bench._capped(None, 180.0) == 180.0 and bench._capped(500.0, 180.0) == 180.0
    assert bench._capped(20.0, 180.0) == 20.0


def test_preflight_fingerprints_and_their_difference():
    a = bench._fingerprint([1.0, 2.0, float("inf"), float("nan")])
    assert a == dict(n=4, nan=1, inf=1, sum=3.0, abs_sum=3.0, min=1.0, max=2.0)
    assert bench._largest_difference({"x": a}, {"x": dict(a)}) == 0.0
    b = dict(a, sum=3.003)
    assert bench._largest_difference({"x": a}, {"x": b}) == pytest.approx(0.003 / 3.003)
    assert bench._largest_difference({"x": a}, {"x": dict(a, max=2.5)}) == 0.0  # not summed
    assert bench._largest_difference(a, dict(a, nan=0)) == float("inf")   # a NaN more
    assert bench._largest_difference({"x": a}, {"y": a}) == float("inf")  # another engine


@pytest.mark.slow
def test_bench_gpu_preflight_scale_and_compare_parts(tmp_path):
    # the session's own parts on CPU-sized inputs: each engine runs and repeats itself
    # with the loops on the device and on the host (the same program on a CPU: the same
    # bits); the scale point and compare run as a user runs them, in their own process
    out = tmp_path / "gpu.json"
    bench.main(["--small", "--parts", "preflight,scale,compare", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["preflight"]["device_loops_ok"] is True
    dev, host = data["parts"]["preflight"]
    assert (dev["mode"], host["mode"]) == ("device_loops", "host_loops")
    assert dev["device_loops"] is True and host["device_loops"] is False
    assert dev["engines"] == host["engines"] == 5 and dev["nan"] == host["nan"] == 0
    assert dev["max_rel_diff_vs_host_loops"] == 0.0 and dev["repeat_max_rel_diff"] == 0.0
    assert dev["detail"]["simulate_flows"]["fingerprint"]["finish"]["n"] == 100
    (sc,) = data["parts"]["scale"]
    assert sc["gpus"] == 16 and sc["rc"] == 0 and sc["complete"] is True
    assert Path(sc["json"]).parent == tmp_path and Path(sc["json"]).exists()
    # the ideal fabric bounds the preset from below; the process's wall holds the sweep's
    assert sc["ideal_step_time"] <= sc["roce_step_time"]
    assert 0 < sc["roce_gpu_utilization"] <= sc["ideal_gpu_utilization"] <= 1
    assert sc["wall_s"] >= sc["sweep_wall_s"] > 0
    cold, warm = data["parts"]["compare"]
    assert (cold["cache"], warm["cache"]) == ("cold", "warm")
    assert cold["rc"] == warm["rc"] == 0
    # the programs the cold run cached give the same figures, to the bit
    assert warm["figures"] > 10 and warm["max_rel_diff_vs_first"] == 0.0
    assert warm["figures_over_1pct"] == 0


@pytest.mark.slow
def test_bench_gpu_preflight_failure_runs_the_rest_with_host_loops(tmp_path, monkeypatch):
    # a device-loops process that fails (here on purpose) turns the device loops off
    # for the parts after the preflight, which run in a child process; the JSON says so
    monkeypatch.setenv("BENCH_GPU_FAULT", "device_loops")
    out = tmp_path / "gpu.json"
    res = bench.main(["--small", "--session", "--parts", "preflight,events", "--json",
                      str(out)])
    data = json.loads(out.read_text())
    assert data == res
    assert data["budget_s"] == bench.SESSION_BUDGET_S and not data.get("skipped")
    assert data["preflight"]["device_loops_ok"] is False
    dev, host = data["parts"]["preflight"]
    assert "BENCH_GPU_FAULT" in dev["error"] and "error" not in host
    assert "BENCH_GPU_FAULT" in data["device_loops_turned_off"]
    assert data["env"]["continued"]["FABRIC_JAX_DEVICE_LOOPS"] == "0"
    assert data["device_loops"] is False
    assert [r["flows"] for r in data["parts"]["events"]] == [300]


def test_bench_gpu_markdown_takes_every_figure_from_the_json(tmp_path, capsys):
    # issue 24's table and issue 25's targets, filled from a run's JSON (a GPU run's
    # layout, figures made up here): each figure where it belongs, the rest "not run"
    run = {"device": {"platform": "gpu", "device": "NVIDIA H200", "jax": "0.10.2",
                      "cpu_count": 16, "platform_version": "cuda 12090"},
           "date": "D", "device_loops": True, "small": False, "truncated": ["variants"],
           "parts": {
               "solve": [{"k": 16, "flows": 100_000, "default_steady_s": 0.0021,
                          "cpu_steady_s": 0.31}],
               "fluid": [{"k": 16, "flows": 100_000, "case": "dcqcn_pfc", "step_s": 4e-4,
                          "flow_steps_per_s": 2.5e8, "cpu_step_s": 0.11},
                         {"k": 16, "flows": 100_000, "case": "hpcc", "step_s": 9.0}],
               "events": [{"flows": 3_000, "steady_s": 0.2, "cpu_steady_s": 0.4}],
               "compare": [{"backend": "gpu", "cache": "cold", "wall_s": 31.0},
                           {"backend": "gpu", "cache": "warm", "wall_s": 4.5},
                           {"backend": "cpu", "cache": "cold", "wall_s": 25.0}],
               "scale": [{"gpus": 8192, "wall_s": 42.0, "target_s": 60.0,
                          "within_target": True}],
               "scale_32k": [{"gpus": 32768, "wall_s": 300.0, "target_s": 300.0,
                              "timed_out": True, "within_target": False}]}}
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(run))
    text = bench.main(["--markdown", str(path)])
    assert text == capsys.readouterr().out.rstrip("\n")
    rows = {line.split(" | ")[1]: line for line in text.splitlines()
            if line.startswith("| `") or line.startswith("| 8") or line.startswith("| 3")}
    assert "| 2.1 ms | 310 ms | <= 1 ms |" in rows["`fat_tree(16)`, 100k random pairs"]
    assert "0.4 ms per step (2.5e+08 flow-steps/s) | 110 ms per step" in \
        rows["`fat_tree(16)`, 100k flows"]                   # DCQCN + PFC, not HPCC
    assert "| not run | - |" in rows["`fat_tree(16)`, 1M flows"]
    assert "| 200 ms | 400 ms |" in rows["3k coupled flows"]
    assert "| 31 s wall cold, 4.5 s warm | 25 s wall cold | <= 5 s |" in rows["default scenario"]
    assert "| 8,192 | 42 s | 60 s | True |" in text
    assert "| 32,768 | stopped at 300 s | 300 s | False |" in text
    assert "NVIDIA H200 (gpu, cuda 12090)" in text
    assert "| before: H200 | before: its CPU | now: NVIDIA H200 |" in text   # the header
    assert "cut short (--budget-s): variants" in text
