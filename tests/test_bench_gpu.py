"""``experiments/bench_gpu.py --small``: the GPU benchmark's CPU smoke run (issue 24).

The benchmark's timings are not asserted (speed is measured in benchmarks, not tests);
what is checked is that every part runs end to end on CPU-sized instances and reports
figures that are consistent with each other: the exact solve's iteration count and its
time per iteration, events counted, batched runs timed against a loop, fusion counts
read from the compiled HLO, and the JSON and the printed tables agree.
"""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    import sys
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
