"""``experiments/bench_compare.py`` on its tiny setting, and ``run_compare(workers=...)``.

The benchmark times one preset of the quick scenario twice (the current fluid step, and
the baseline variant: the step's max-min solve with compaction levels), the ideal
baseline, and the
whole ``run_compare`` with the presets one after another against concurrent presets.
Checked here: the table's structure, that both variants give the same
flows' finish times (the same model: float32 round-off only), and that concurrent
presets give exactly the results of sequential ones.  No timing is asserted (speed is
measured by the benchmark, never by tests).
"""

from __future__ import annotations

import json

import pytest

from fabric_jax import cli, compare

from experiments import bench_compare

from tests.helpers import tiny_scenario

RTOL_F32 = 1e-5


@pytest.mark.slow  # a benchmark: compiles the preset twice and the baseline once
def test_bench_compare_quick(tmp_path):
    out_path = tmp_path / "bench.json"
    out = bench_compare.main(
        ["--quick", "--presets", "roce", "--json", str(out_path)])
    rows = out["rows"]
    assert [(r["preset"], r["variant"]) for r in rows] == [
        ("roce", "current"), ("roce", "fine"), ("ideal", "")]
    for r in rows:
        assert r["compile_s"] > 0 and r["first_s"] > 0 and r["compile_cpu_s"] >= 0
        assert r["steady_s"] > 0 and r["runs"] == 3      # all jobs + training + tenant alone
    ratio, = out["baseline"]["ratios"]
    assert ratio["same_finished"]
    assert ratio["max_rel_finish_diff"] < RTOL_F32
    assert ratio["compile_ratio"] > 0 and ratio["steady_ratio"] > 0
    assert out["total"]["total_s"] > 0 and "end_to_end" not in out
    assert json.loads(out_path.read_text())["presets"] == ["roce"]


@pytest.mark.slow
def test_bench_compare_end_to_end_threads_change_no_result():
    out = bench_compare.main(
        ["--quick", "--presets", "roce,uec", "--baseline", "none", "--end-to-end"])
    e2e = out["end_to_end"]
    assert [r["workers"] for r in e2e["runs"]] == [1, "default"]
    assert e2e["max_rel_diff"] == 0.0


def test_bench_compare_rejects_unknown_preset():
    with pytest.raises(SystemExit):
        bench_compare.main(["--quick", "--presets", "nope"])


def test_workers_must_be_a_positive_integer(capsys):
    scn = compare.scenario_from_dict(tiny_scenario())
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            compare.run_compare(scn, progress=False, workers=bad)
    assert cli.main(["compare", "--workers", "0", "--quiet"]) == 2
    assert "--workers" in capsys.readouterr().err
