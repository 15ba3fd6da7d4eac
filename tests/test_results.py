"""``fabric_jax.results``: the one JSON writer of the command line and the experiments.

Checked: values become valid JSON (NumPy and JAX scalars and arrays, NaN and
infinities as null, keys as strings); a failed write leaves the previous file as it was
and no temporary file behind; the ``"run"`` record holds every field, with the wall time
since ``started`` and the checkout's commit (none outside a git checkout); a
command-line JSON carries it, and a results file read back keeps working.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fabric_jax
from fabric_jax import results as R

ROOT = Path(__file__).resolve().parents[1]
RUN_FIELDS = {"fabric_jax", "commit", "dirty", "jax", "backend", "device_kind", "command",
              "wall_s", "date"}


def _strict_load(path):
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` (not JSON, Python's extension)."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(Path(path).read_text(), parse_constant=refuse)


class _Unprintable:
    def __str__(self):
        raise RuntimeError("cannot be written")


def test_numpy_jax_and_non_finite_values_become_json():
    data = {
        "f32": np.float32(0.5), "f64": np.float64(2.0), "i64": np.int64(7),
        "b": np.bool_(True), "arr": np.arange(3, dtype=np.int32),
        "mat": np.array([[1.0, np.nan], [np.inf, -np.inf]]),
        "jax_scalar": jnp.float32(1.5), "jax_arr": jnp.array([1, 2]),
        "nan": float("nan"), "inf": math.inf, "tuple": (1, np.float32(np.nan)),
        3: "int key", "path": Path("a/b.json"), "none": None, "text": "x",
    }
    out = R.to_json(data)
    assert out == {
        "f32": 0.5, "f64": 2.0, "i64": 7, "b": True, "arr": [0, 1, 2],
        "mat": [[1.0, None], [None, None]], "jax_scalar": 1.5, "jax_arr": [1, 2],
        "nan": None, "inf": None, "tuple": [1, None], "3": "int key",
        "path": str(Path("a/b.json")), "none": None, "text": "x",
    }
    # plain Python types: nothing NumPy left
    assert type(out["f32"]) is float and type(out["i64"]) is int and type(out["b"]) is bool
    assert list(out) == [str(k) for k in data]            # the order is kept
    json.dumps(out, allow_nan=False)


def test_write_results_is_valid_json_with_the_results_and_a_run_record(tmp_path):
    path = tmp_path / "deep" / "r.json"                    # parents are created
    started = time.time() - 2.0
    got = R.write_results(path, {"rows": [{"x": np.float32(1.0), "y": np.nan}], "n": 3},
                          command=["python", "exp.py", "--json", "r b.json"],
                          inputs={"seed": np.int64(4)}, started=started)
    assert got == path
    data = _strict_load(path)
    assert data["rows"] == [{"x": 1.0, "y": None}] and data["n"] == 3
    assert list(data) == ["rows", "n", "run"]
    run = data["run"]
    assert set(run) == RUN_FIELDS | {"inputs"} and run["inputs"] == {"seed": 4}
    assert run["fabric_jax"] == fabric_jax.__version__ and run["jax"] == jax.__version__
    assert run["backend"] == jax.default_backend()
    assert run["device_kind"] == jax.devices()[0].device_kind
    assert run["command"] == "python exp.py --json 'r b.json'"
    assert 2.0 <= run["wall_s"] < 60.0
    date = datetime.datetime.fromisoformat(run["date"])
    assert date.utcoffset() == datetime.timedelta(0)
    assert abs(date.timestamp() - time.time()) < 60


def test_run_record_defaults_and_replacement(tmp_path):
    run = R.run_record()
    assert set(run) == RUN_FIELDS and run["wall_s"] is None
    assert run["command"] == shlex.join(sys.orig_argv)        # the interpreter's own
    # a results file read back and written again gets the new record, once
    path = tmp_path / "r.json"
    R.write_results(path, {"a": 1}, command="first")
    again = json.loads(path.read_text())
    R.write_results(path, again, command="second")
    data = json.loads(path.read_text())
    assert data["run"]["command"] == "second" and R.strip_run(data) == {"a": 1}


def test_commit_is_the_checkouts_and_none_outside_a_checkout(monkeypatch):
    git = shutil.which("git")
    head = None if git is None else subprocess.run(
        [git, "rev-parse", "--short", "HEAD"], cwd=ROOT / "fabric_jax", capture_output=True,
        text=True).stdout.strip()
    run = R.run_record()
    if head:
        assert run["commit"] == head and isinstance(run["dirty"], bool)
    monkeypatch.setenv("PATH", "")                          # no git to ask
    run = R.run_record()
    assert run["commit"] is None and run["dirty"] is None


def test_a_failed_serialisation_leaves_the_old_file(tmp_path):
    path = tmp_path / "r.json"
    R.write_results(path, {"old": True})
    before = path.read_text()
    with pytest.raises(RuntimeError, match="cannot be written"):
        R.write_results(path, {"new": [1.0, _Unprintable()]})
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]     # no temporary file


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    R.write_results(path, {"old": True})
    before = path.read_text()

    def killed(src, dst):
        raise KeyboardInterrupt                               # stopped between write and rename
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        R.write_results(path, {"new": True})
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_cli_json_carries_the_run_record_and_is_read_back(tmp_path, capsys):
    from fabric_jax.cli import main
    scn = tmp_path / "loc.toml"
    scn.write_text("[topology]\nn_leaves = 4\nn_spines = 2\nhosts_per_leaf = 4\n"
                   "[workload]\nshifts = 3\n[locate]\nsteps = 50\n")
    out, obs = tmp_path / "loc.json", tmp_path / "obs.json"
    argv = ["locate", "--scenario", str(scn), "--plant", "34=0.3", "--no-counters",
            "--json", str(out), "--write-observed", str(obs)]
    assert main(argv) == 0
    for path in (out, obs):
        run = _strict_load(path)["run"]
        assert set(run) == RUN_FIELDS
        assert run["command"] == "fabric-jax " + " ".join(argv) and run["wall_s"] > 0
    assert {"gradient", "tomography", "vote"} <= set(_strict_load(out))
    # the observation it wrote, run record included, is an input locate reads
    assert main(["locate", "--scenario", str(scn), "--observed", str(obs)]) == 0
    capsys.readouterr()


# ------------------------------------------------------------------ output paths


@pytest.mark.parametrize("path, why", [
    ("/proc/fabric_jax_x.json", "cannot write into /proc"),     # a pseudo file system
    ("{tmp}", "is a folder"),
    ("{tmp}/file.txt/r.json", "is not a folder"),                # a file where a folder is
])
def test_a_results_path_that_cannot_be_written_is_refused(tmp_path, path, why):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match=why) as err:
        R.check_output_file(path.format(tmp=tmp_path), "--json")
    assert str(err.value).startswith("--json:")


def test_a_results_path_in_new_folders_is_accepted_and_nothing_is_left(tmp_path):
    target = tmp_path / "a" / "b" / "r.json"
    assert R.check_output_file(target) == target
    assert list(tmp_path.iterdir()) == []          # no folder made, no probe left
    assert R.check_output_dir(tmp_path / "plots") == tmp_path / "plots"
    assert list(tmp_path.iterdir()) == []


def test_a_figures_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    for path in ("/dev/null", tmp_path / "f"):
        with pytest.raises(ValueError, match="--plots: .* not a folder"):
            R.check_output_dir(path, "--plots")


@pytest.mark.parametrize("argv", [
    ["compare", "--json", "/proc/fabric_jax_x.json"],
    ["compare", "--plots", "/dev/null"],
    ["scale", "--gpus", "16", "--json", "/proc/fabric_jax_x.json"],
    ["tune", "--plots", "/dev/null"],
])
def test_the_cli_refuses_an_unwritable_output_before_any_work(argv, capsys, monkeypatch):
    from fabric_jax import cli, compare
    # nothing may run: a study started would call these
    monkeypatch.setattr(compare, "load_scenario", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setattr(cli, "compilation_cache", lambda: pytest.fail("ran"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"fabric-jax {argv[0]}: error: {argv[-2]}:" in err


def test_the_cli_says_its_version(capsys):
    from fabric_jax import cli
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"fabric-jax {fabric_jax.__version__}"
