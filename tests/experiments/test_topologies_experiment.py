"""``experiments/topologies.py`` (slow): its quick run's physically stated expectations
(the disjoint union it simulates: ``tests/routing/test_paths.py``)."""

from __future__ import annotations

import json

import pytest

from experiments import topologies


@pytest.mark.slow
def test_topologies_quick_run(tmp_path):
    # 16 hosts, no congestion control (spectrum_x routing, cc none): the cross-leaf ring
    # on the 2:1 build is bounded by half the NIC rate (each leaf's uplinks carry its
    # hosts' ring flows at 1/2); two planes of half-speed ports give the flows the same
    # completion as the 1-plane build (same bisection, NIC rate passed explicitly);
    # every build has full bisection except the 2:1 one (1/2).
    out = tmp_path / "t.json"
    topologies.main(["--quick", "--cc", "none", "--json", str(out)])
    data = json.loads(out.read_text())
    runs = {(r["build"], r["workload"]): r for r in data["runs"]}
    assert data["dt_s"] == pytest.approx(1e-6)
    for (build, _), r in runs.items():
        assert r["unfinished_flows"] == 0
        assert r["bisection_fraction"] == pytest.approx(0.5 if build == "2-tier 2:1" else 1.0)
        assert r["effective_bandwidth"] <= 1.0
    assert runs[("2-tier 2:1", "ring_all_reduce")]["effective_bandwidth"] <= 0.5 + 1e-6
    for w in ("all_to_all", "ring_all_reduce"):
        assert runs[("2-plane", w)]["completion_s"] == pytest.approx(
            runs[("2-tier", w)]["completion_s"], rel=0.02)
        assert runs[("2-tier 2:1", w)]["completion_s"] > 1.3 * runs[("2-tier", w)]["completion_s"]
