"""experiments/queue_discipline.py: a short flow behind a standing queue, fluid vs FIFO."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_queue_discipline_experiment(tmp_path):
    from experiments import queue_discipline as exp
    out = tmp_path / "q.json"
    res = exp.main(["--json", str(out), "--gbps", "100", "--size-kb", "50",
                    "--refine", "1,4"])
    data = json.loads(out.read_text())
    assert data["fifo_finish"] == pytest.approx(res["fifo_finish"])
    # alone, the fluid model gives the closed form t_s + 2 L + s / C (within one step)
    assert res["fluid_alone"] == pytest.approx(res["alone_closed_form"], abs=1e-6)
    # the FIFO finish is the lone finish plus the queue of s bytes drained at C
    assert res["fifo_finish"] - res["alone_closed_form"] == pytest.approx(50e3 / 12.5e9)
    # with the greedy neighbour S can only finish later than alone
    assert all(f > res["fluid_alone"] for f in res["fluid"].values())
    # the FIFO bands give the closed form at every dt (S's bytes keep their place
    # behind G's); one band (a well-mixed standing queue) stretches S's last bytes
    for f in res["fluid"].values():
        assert f == pytest.approx(res["fifo_finish"], abs=1e-8)
    fifo_fct = res["fifo_finish"] - 20e-6
    assert all(f - 20e-6 > 2 * fifo_fct for f in res["fluid_one_band"].values())
