"""``experiments/bench_gpu.py --small``: the GPU benchmark's CPU smoke run (issue 24).

The benchmark's timings are not asserted (speed is measured in benchmarks, not tests);
what is checked is that every part runs end to end on CPU-sized instances and reports
figures that are consistent with each other: the exact solve's iteration count and its
time per iteration, events counted, batched runs timed against a loop, fusion counts
read from the compiled HLO, and the JSON and the printed tables agree.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "experiments" /
                                                  "bench_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_bench_gpu_small_runs_every_cpu_part(tmp_path, capsys):
    bench = _load()
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
    bench = _load()
    with pytest.raises(SystemExit):
        bench.main(["--parts", "solve,warp"])


@pytest.mark.slow
def test_bench_gpu_variants_compute_the_same_thing(tmp_path):
    # each variant in its own process, XLA flags set before the backend starts (on a
    # CPU the GPU flags are accepted and do nothing); every variant's results equal
    # the default's to the bit, and the ratio is the one of the two measured times
    bench = _load()
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
    bench = _load()
    row = bench.variant_row(8, 10, 1, "bogus", {"FABRIC_JAX_DEVICE_LOOPS": "maybe"}, 0)
    assert "FABRIC_JAX_DEVICE_LOOPS" in row["error"]
    assert row["variant"] == "bogus" and "error" in row and "step_s" not in row


@pytest.mark.slow
def test_bench_gpu_fluid_batched_and_unroll_parts(tmp_path):
    # the fluid batch against a loop, and solver_unroll 0 / 4 / 8 interleaved: rows as
    # documented, ratios that are the ratios of the times reported
    bench = _load()
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
    runs (its rows are checked in ``tests/test_launch_model.py``'s terms); without it,
    as in the test environment, it stops with the install command, not a traceback from
    deep inside JAX."""
    bench = _load()
    try:
        import jax_plugins.xla_cuda12  # noqa: F401
        has_plugin = True
    except ImportError:
        has_plugin = False
    args = ["--small", "--parts", "aot", "--max-flows", "1", "--json", str(tmp_path / "a.json")]
    if not has_plugin:
        with pytest.raises(RuntimeError, match=r"pip install 'jax\[cuda12\]'"):
            bench.main(args)
        return
    # a process of its own: XLA:GPU's compiler logs its command buffers only if asked
    # before JAX's backend starts (bench_gpu.main does so first)
    root = Path(__file__).resolve().parents[1]
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
