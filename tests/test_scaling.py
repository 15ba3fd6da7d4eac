"""fabric_jax.scaling: the decomposed max-min engine agrees with the full simulation.

Scenario: the training job alone on a rail-optimised fabric of 8 servers x 4 NICs
(2 scalable units of 4 servers, so rings and all-to-alls cross the spines): 4 rails,
each a link-disjoint component of 32 flows (2 EP groups x 12 all-to-all flows, then an
8-flow ring or SHARP all-reduce).
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import compare, scaling
from fabric_jax.fabrics import get_fabric
from fabric_jax.incidence import Incidence
from fabric_jax.routing import make_routing


def _scn(n_servers=8, nics=4):
    return compare.scenario_from_dict({
        "topology": dict(kind="rail_optimized", n_servers=n_servers, nics_per_server=nics,
                         servers_per_leaf=4, link_gbps=100.0),
        "workload": dict(train_servers=n_servers, tenant_servers=0, ep_servers=4,
                         all_reduce_mb=2.0, moe_mb=1.0, background_load=0.0),
        "simulation": dict(max_paths=4, isolation=False),
        "fabrics": {"presets": ["infiniband", "roce", "spectrum_x"]}})


@pytest.fixture(scope="module")
def cases():
    scn = _scn()
    return scn, {sharp: compare.build_case(scn, sharp) for sharp in (False, True)}


def test_compact_incidence_is_the_same_matrix(cases):
    _, cs = cases
    case = cs[False]
    for name in ("ecmp", "spray"):
        split = np.asarray(make_routing(name, case.paths, seed=3).split)
        ref = Incidence.from_paths(case.paths, split, n_links=case.topology.n_links)
        comp = scaling.compact_incidence(case.paths, split, case.topology.n_links)
        np.testing.assert_allclose(np.asarray(comp.to_dense()), np.asarray(ref.to_dense()),
                                   atol=1e-6)
        # spraying over 4 two-tier paths: 2 host links + 4 up + 4 down at most
        assert comp.row_width <= 10 < ref.row_width


def test_components_are_the_rails_and_share_no_link(cases):
    _, cs = cases
    case = cs[False]
    lay = scaling.decompose(case)
    lab = lay["label"]
    assert np.unique(lab).size == 4                      # one per rail (NIC index)
    rail = case.workload.src % 4
    for r in np.unique(lab):
        assert np.unique(rail[lab == r]).size == 1
    # no link is used by two components (with every candidate path counted)
    pm = np.asarray(case.paths.path_mask, float)
    inc = scaling.compact_incidence(case.paths, pm / pm.sum(1, keepdims=True),
                                    case.topology.n_links)
    li = np.asarray(inc.link_idx).reshape(case.workload.n_flows, -1)
    nz = np.asarray(inc.weight).reshape(li.shape) > 0
    owners = {}
    for f, row in enumerate(li):
        for link in row[nz[f]]:
            owners.setdefault(int(link), set()).add(int(lab[f]))
    assert all(len(o) == 1 for o in owners.values())


@pytest.mark.parametrize("preset", ["roce", "infiniband", "spectrum_x"])
def test_decomposed_equals_full_simulation(cases, preset):
    _, cs = cases
    fab = get_fabric(preset)
    case = cs[fab.sharp]
    full = scaling.run_maxmin(case, fab, full=True)
    dec = scaling.run_maxmin(case, fab)
    assert dec["components"] == 4 and not dec["stalled"] and not full["stalled"]
    assert np.all(np.isfinite(dec["finish"]))
    np.testing.assert_allclose(dec["finish"], full["finish"], rtol=2e-5)
    np.testing.assert_allclose(dec["start"], full["start"], rtol=2e-5, atol=1e-9)
    a = scaling.collective_stats(case, dec["start"], dec["finish"])
    b = scaling.collective_stats(case, full["start"], full["finish"])
    for k in ("p99_collective_completion_time", "all_reduce_completion_time",
              "effective_bandwidth"):
        assert a[k] == pytest.approx(b[k], rel=1e-4)
    assert a["n_collectives"] == b["n_collectives"] == 4 * (2 + 1)


def test_sampled_components_are_exact_per_flow(cases):
    _, cs = cases
    fab = get_fabric("roce")
    case = cs[False]
    dec = scaling.run_maxmin(case, fab)
    one = scaling.run_maxmin(case, fab, sample_components=1)
    sim = np.isfinite(one["start"])
    assert 0 < sim.sum() < case.workload.n_flows
    np.testing.assert_array_equal(one["finish"][sim], dec["finish"][sim])
    st = scaling.collective_stats(case, one["start"], one["finish"])
    assert st["n_collectives"] == 3                      # one rail: 2 all-to-alls + 1 ring


def test_scaling_curves_shapes_and_physics(cases):
    scn, _ = cases
    scns = scaling.scaled_scenarios(scn, factors=(0.5, 1.0))
    out = scaling.scaling_curves(scns, shared_shape=True)
    same = scaling.scaling_curves(scns[:1])
    assert out["gpus"] == [16, 32]
    for name, v in out["fabrics"].items():
        assert len(v["all_reduce_completion_time"]) == 2
        assert all(0 < e <= 1 + 1e-6 for e in v["effective_bandwidth"])
        assert all(u == 0 for u in v["unfinished_flows"])
        # padding to a shared shape does not change the answer
        assert v["all_reduce_completion_time"][0] == pytest.approx(
            same["fabrics"][name]["all_reduce_completion_time"][0], rel=1e-5)
    # SHARP: each NIC sends S/4 once instead of 2 (n-1)/n S/4 -> faster all-reduce
    ib, roce = out["fabrics"]["infiniband"], out["fabrics"]["roce"]
    assert all(a < b for a, b in zip(ib["all_reduce_completion_time"],
                                     roce["all_reduce_completion_time"]))
    # ring all-reduce at line rate: 2 (n-1)/n S/4 / (100 Gb/s) is a lower bound
    n = 8
    assert roce["all_reduce_completion_time"][1] >= 2 * (n - 1) / n * 0.5e6 / 12.5e9


def test_training_only_states_every_value_it_uses():
    """A scaled training job keeps ep_servers when it divides the server count and
    otherwise takes the largest divisor below it (stated in the returned scenario, which
    passes validation); a leaf-spine keeps >= 2 whole leaves."""
    assert scaling.ep_group_size(24, 4) == 4
    assert scaling.ep_group_size(6, 4) == 3
    assert scaling.ep_group_size(7, 4) == 7          # prime: one group of all servers
    s = compare.scenario_from_dict({"topology": dict(kind="leaf_spine", n_servers=8,
                                                     servers_per_leaf=4),
                                    "workload": dict(train_servers=4, tenant_servers=2,
                                                     tenant_fan_in=1, ep_servers=4)})
    for n in (2, 3, 6, 12):
        t = scaling.training_only(s, n)
        assert t.workload["train_servers"] == n and n % t.workload["ep_servers"] == 0
        assert n % t.topology["servers_per_leaf"] == 0
        assert n // t.topology["servers_per_leaf"] >= 2
        compare.validate_scenario(t)
