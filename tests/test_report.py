"""``experiments/report.py``: the marked blocks of the README and docs pages are
regenerated from results, every marker has a block, and the README stays a README."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _report():
    from experiments import report as mod
    mod.load_blocks()
    return mod


def test_every_marker_of_the_pages_has_a_block_and_every_experiment_a_script():
    rep = _report()
    for page in rep.PAGES:
        path = ROOT / page
        if not path.is_file():
            continue
        for m in rep.MARK.finditer(path.read_text()):
            assert m.group("name") in rep.BLOCKS, (page, m.group("name"))
    for name, e in rep.EXPERIMENTS.items():
        script = e["script"]
        assert script.startswith("-m ") or (ROOT / "experiments" / script).is_file(), name


def test_a_block_is_rewritten_from_its_result(tmp_path, monkeypatch):
    rep = _report()
    monkeypatch.setattr(rep, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(rep, "ROOT", tmp_path)
    (tmp_path / "results").mkdir()
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- report:stragglers -->\nold figure 1.23\n"
                    "<!-- /report:stragglers -->\nend\n")
    # no result yet: the block says how to make it
    rep.render(["page.md"])
    assert "Not run yet" in page.read_text() and "1.23" not in page.read_text()
    meta = dict(name="stragglers", command="python experiments/stragglers.py --quick",
                quick=True, wall_s=12.0, returncode=0, commit="abc1234",
                stdout="kind factor step\ncompute 2 8.48\nwrote x.json\n")
    (tmp_path / "results" / "stragglers.json").write_text(json.dumps({}))
    (tmp_path / "results" / "stragglers.meta.json").write_text(json.dumps(meta))
    rep.render(["page.md"])
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("end\n")
    assert "compute 2 8.48" in text and "wrote x.json" not in text   # the table, no noise
    assert "`python experiments/stragglers.py --quick`" in text and "abc1234" in text
    assert text.count("<!-- report:stragglers -->") == 1
    # --only another experiment: this block is left alone, even with its result gone
    (tmp_path / "results" / "stragglers.meta.json").unlink()
    rep.render(["page.md"], only=["isolation"])
    assert page.read_text() == text
    # --only this experiment without its result: left alone too
    rep.render(["page.md"], only=["stragglers"])
    assert page.read_text() == text


def test_command_lines_are_what_a_user_types():
    rep = _report()
    assert rep.command("compare", False) == "fabric-jax compare --quiet"
    assert rep.command("isolation", True) == "python experiments/isolation.py --quick"
    assert rep.command("isolation", False) == "python experiments/isolation.py"


def test_readme_is_short_and_keeps_its_test_command():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    # ci/test.sh reads the command inside the test-command block: the same awk program
    awk = r"/<!-- test-command -->/{f=1; next} f && /^```/{if (s) exit; s=1; next} f && s {print; exit}"
    cmd = subprocess.run(["awk", awk, str(ROOT / "README.md")], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert cmd == 'python -m pip install -e ".[test]" && python -m pytest -q -n auto --dist loadfile'
    # no dated history in the README: figures live in generated blocks
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)
    for page in ("docs/validation.md", "docs/performance.md", "docs/models.md"):
        assert page in text


def test_progress_bar_estimates_the_time_left():
    import io

    from fabric_jax.study.progress import Progress, format_seconds
    out = io.StringIO()
    bar = Progress(4, stream=out, label="demo", estimate_s=120)
    assert bar.remaining_s() == pytest.approx(120, abs=2)   # the a-priori guess
    bar.t0 -= 10.0                                    # 10 s in, one unit of four done
    bar.update("first", 1)
    assert bar.remaining_s() == pytest.approx(30, rel=0.05)
    assert "demo [######" in out.getvalue() and "1/4 first" in out.getvalue()
    assert "left" in out.getvalue()
    bar.update("rest", 3)
    assert out.getvalue().endswith("\n") and "done" in out.getvalue()
    assert format_seconds(42) == "42 s" and format_seconds(185) == "3 min 05 s"
    assert format_seconds(3720) == "1 h 02 min"
    quiet = io.StringIO()
    Progress(2, stream=quiet, enabled=False).update("x")
    assert quiet.getvalue() == ""
