"""``experiments/topologies.py``: the disjoint union it simulates, and (slow) its
quick run's physically stated expectations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fabric_jax.paths import shortest_paths
from fabric_jax.topology import leaf_spine

from experiments import topologies


def test_union_keeps_parts_apart_and_paths_map_back():
    parts = [leaf_spine(2, 2, 2), leaf_spine(2, 2, 2, planes=2),
             leaf_spine(4, 2, 2, tiers=3, leaves_per_pod=2)]
    topo, link_off, host_off = topologies.union(parts)
    assert topo.n_links == sum(t.n_links for t in parts)
    assert topo.n_hosts == sum(t.n_hosts for t in parts)
    # no link joins two parts
    part_of_node = np.repeat(np.arange(3), [t.n_nodes for t in parts])
    assert np.all(part_of_node[topo.link_src] == part_of_node[topo.link_dst])
    psets = [shortest_paths(t, [0, 1], [t.n_hosts - 1, 0]) for t in parts]
    ps = topologies.pad_concat(psets, link_off, host_off)
    assert ps.max_paths == max(p.max_paths for p in psets)
    for i, p in enumerate(psets):
        rows = slice(2 * i, 2 * i + 2)
        got = ps.links[rows, :p.max_paths, :p.max_hops]
        want = np.where(p.hop_mask, p.links + link_off[i], -1)
        np.testing.assert_array_equal(got, want)
        assert np.all(ps.links[rows, p.max_paths:] == -1)
        np.testing.assert_array_equal(ps.n_paths[rows], p.n_paths)
        # capacities and latencies follow the links
        np.testing.assert_array_equal(topo.capacity[want[p.hop_mask]],
                                      parts[i].capacity[p.links[p.hop_mask]])


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
