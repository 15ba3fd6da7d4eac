"""``experiments/bench_scale_step.py --aot``: XLA:GPU's program for the scale study's
runs (issue 25 on paper).  Without JAX's CUDA plugin (the test environment) it stops
with the install command before any work; with it, a small point's rows obey the launch
model's arithmetic.  :func:`paper_time` is checked against hand sums."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import _hlo
from experiments import bench_scale_step as bench


def _has_plugin() -> bool:
    return _hlo.cuda_plugin() is not None


def test_aot_compiles_for_the_gpu_or_says_what_it_needs(tmp_path):
    args = ["--aot", "h200", "--gpus", "16", "--presets", "roce", "--json",
            str(tmp_path / "a.json")]
    if not _has_plugin():
        with pytest.raises(RuntimeError, match=r"pip install 'jax\[cuda12\]'"):
            bench.main(args)
        return
    # a process of its own: XLA:GPU's compiler logs its command buffers only if asked
    # before JAX's backend starts (_hlo.log_command_buffers, which main calls first)
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(root / "experiments" / "bench_scale_step.py"), *args],
                   check=True, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)))
    out = json.loads((tmp_path / "a.json").read_text())
    (row,) = out["aot"]
    assert row["flows"] > 0 and 0 < row["busy_steps"] <= row["n_steps"]
    assert row["busy_steps"] % 20 == 0                 # whole chunks of save_every steps
    # every loop on the host: a round trip for each chunk's conditional, and every
    # simulated step its own; as fabric_jax compiles it, the loops and the chunks'
    # conditionals are conditional nodes of CUDA graphs: none (the chunk loop, which
    # writes the trajectory at a row of its counter, is not recorded, but its trip
    # count is known: it has no test to read back)
    assert row["host_loops_round_trips_per_run"] == pytest.approx(
        row["busy_steps"] * row["host_loops_round_trips_per_step"] + row["chunks"])
    assert row["round_trips_per_step"] == 0 and row["round_trips_per_run"] == 0
    assert row["command_buffers"] >= 1
    assert row["kernels_per_run"] > row["busy_steps"] * row["kernels_per_step"]
    assert row["bytes_per_flow"] > row["state_bytes_per_flow"] > 0
    (p,) = out["paper"]
    assert p["total_s"] == pytest.approx(p["host_s"] + p["compile_s"] + p["launch_s"])
    assert p["launch_s"] == pytest.approx(row["kernels_per_run"] * 5e-6
                                          + row["round_trips_per_run"] * 12e-6)
    assert p["host_loops_launch_s"] == pytest.approx(
        row["host_loops_kernels_per_run"] * 5e-6 + row["host_loops_round_trips_per_run"] * 12e-6)


@pytest.mark.parametrize("flag", ["--kernel-us", "--round-trip-us", "--dt-us"])
def test_aot_refuses_non_positive_costs(flag):
    with pytest.raises(SystemExit, match=flag):
        bench.main(["--aot", "h200", "--gpus", "16", flag, "0"])


def test_paper_time_adds_the_host_the_compiles_and_the_launches():
    rows = [dict(gpus=8, build_s=1.0, ideal_s=0.5, prepare_s=p, compile_s=c, launch_s=x)
            for p, c, x in ((0.25, 2.0, 3.0), (0.75, 3.0, 5.0))]
    rows.append(dict(gpus=16, build_s=2.0, ideal_s=0.0, prepare_s=1.0, compile_s=1.0,
                     launch_s=1.0))
    small, big = bench.paper_time(rows)
    # the point is built once per GPU count; each preset prepares, compiles and runs
    assert small == dict(gpus=8, presets=2, host_s=1.0 + 0.5 + 0.25 + 0.75, compile_s=5.0,
                         launch_s=8.0, total_s=2.5 + 5.0 + 8.0, host_loops_launch_s=8.0,
                         host_loops_total_s=2.5 + 5.0 + 8.0)
    rows[0]["host_loops_launch_s"] = 4.0        # the loops' round trips, where measured
    assert bench.paper_time(rows)[0]["host_loops_total_s"] == 2.5 + 5.0 + 4.0 + 5.0
    assert big["total_s"] == 3.0 + 1.0 + 1.0 and big["presets"] == 1
