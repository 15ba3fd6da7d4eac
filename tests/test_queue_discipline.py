"""experiments/queue_discipline.py: a short flow behind a standing queue, fluid vs FIFO."""

from __future__ import annotations

import json

import pytest

from .helpers import load_experiment


def test_queue_discipline_experiment(tmp_path):
    exp = load_experiment("queue_discipline")
    out = tmp_path / "q.json"
    res = exp.main(["--json", str(out), "--gbps", "100", "--size-kb", "50"])
    data = json.loads(out.read_text())
    assert data["fifo_finish"] == pytest.approx(res["fifo_finish"])
    # alone, the fluid model gives the closed form t_s + 2 L + s / C (within one step)
    assert res["fluid_alone"] == pytest.approx(res["alone_closed_form"], abs=1e-6)
    # the FIFO finish is the lone finish plus the queue of s bytes drained at C
    assert res["fifo_finish"] - res["alone_closed_form"] == pytest.approx(50e3 / 12.5e9)
    # with the greedy neighbour S can only finish later than alone
    assert all(f > res["fluid_alone"] for f in res["fluid"].values())
