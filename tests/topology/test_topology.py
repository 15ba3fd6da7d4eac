"""Topology builders, failures and bisection bandwidth against closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import units
from fabric_jax.paths import shortest_paths
from fabric_jax.topology import (Topology, fat_tree, from_edges, leaf_spine, rail_optimized,
                                 with_servers)

R400 = units.gbps(400.0)  # 5e10 bytes/s


def out_degree(topo: Topology) -> np.ndarray:
    return np.bincount(topo.link_src, minlength=topo.n_nodes)


# ---------------------------------------------------------------- fat-tree
@pytest.mark.parametrize("k", [2, 4, 8])
def test_fat_tree_counts(k):
    topo = fat_tree(k)
    # Al-Fares 2008: k^3/4 hosts, 5k^2/4 switches; cables host-edge, edge-agg and
    # agg-core are k^3/4 each, so 3k^3/4 cables = 3k^3/2 directed links.
    assert topo.n_hosts == k**3 // 4
    assert topo.n_switches == 5 * k * k // 4
    assert topo.n_links == 3 * k**3 // 2
    tiers = np.bincount(topo.node_tier, minlength=4)
    assert tiers.tolist() == [k**3 // 4, k * k // 2, k * k // 2, k * k // 4]
    # every switch uses exactly its k ports, every host one
    deg = out_degree(topo)
    assert np.all(deg[topo.node_is_host] == 1)
    assert np.all(deg[~topo.node_is_host] == k)
    assert topo.kind == "fat_tree" and topo.params["k"] == k


@pytest.mark.parametrize("k", [4, 8])
def test_fat_tree_full_bisection(k):
    topo = fat_tree(k)
    # Full bisection: half the hosts (k^3/8) each send at the host link rate.
    assert topo.bisection_bandwidth() == pytest.approx(topo.n_hosts / 2 * R400, rel=1e-12)


def test_fat_tree_slow_fabric_bisection():
    # Switch links at 200G: the cut through the edge->agg links of the first half
    # (k^3/8 of them) gives n_hosts/2 * 200G.
    topo = fat_tree(4, fabric_gbps=200.0)
    assert topo.bisection_bandwidth() == pytest.approx(8 * units.gbps(200.0), rel=1e-12)


def test_fat_tree_wiring():
    topo = fat_tree(4)
    # host 5 = pod 1, edge 0, port 1;  agg a of a pod reaches cores 2a, 2a+1.
    assert topo.link_index("h5", "pod1/edge0") >= 0
    assert topo.link_index("pod3/agg1", "core2") >= 0
    assert topo.link_index("core3", "pod0/agg1") >= 0
    with pytest.raises(ValueError, match="no link"):
        topo.link_index("pod3/agg1", "core0")


@pytest.mark.parametrize("k", [3, 0, -2, 4.0, "4"])
def test_fat_tree_bad_k(k):
    with pytest.raises(ValueError, match="k"):
        fat_tree(k)


def test_default_link_parameters():
    topo = fat_tree(2)
    assert np.all(topo.capacity == R400)
    assert np.all(topo.latency == pytest.approx(1e-6))
    assert np.all(topo.buffer == pytest.approx(1e6))
    topo = fat_tree(2, link_gbps=100, latency_us=0.5, buffer_kb=32)
    assert np.all(topo.capacity == 100e9 / 8)
    assert np.all(topo.latency == pytest.approx(0.5e-6))
    assert np.all(topo.buffer == pytest.approx(32e3))


# ---------------------------------------------------------------- leaf-spine
def test_leaf_spine_counts_and_full_bisection():
    topo = leaf_spine(4, 3, 6)
    assert (topo.n_hosts, topo.n_switches) == (24, 7)
    # 24 host cables + 4 leaves x 3 uplinks = 36 cables
    assert topo.n_links == 2 * 36
    assert topo.params["oversubscription"] == pytest.approx(6 / 3)
    # 6 x 400G down vs 3 x 400G up: 2:1, so the cut is the uplinks of 2 leaves
    assert topo.bisection_bandwidth() == pytest.approx(2 * 3 * R400, rel=1e-12)


def test_leaf_spine_oversubscribed_is_one_third():
    # 12 hosts x 400G down per leaf, 4 uplinks: 3:1 means 400G uplinks.
    full = leaf_spine(4, 4, 12, uplinks_per_leaf=12)  # 12 x 400G up: non-blocking
    over = leaf_spine(4, 4, 12, oversubscription=3)
    assert over.params["fabric_gbps"] == pytest.approx(400.0)
    assert full.bisection_bandwidth() == pytest.approx(24 * R400, rel=1e-12)
    assert over.bisection_bandwidth() == pytest.approx(full.bisection_bandwidth() / 3,
                                                       rel=1e-12)


def test_leaf_spine_oversubscription_non_integral_capacity():
    # 4 x 400G down, 4 uplinks at 3:1 -> 133.33G uplinks (not whole bytes/s ratios):
    # the approximate max-flow branch; bisection = 2 leaves x 1600G / 3.
    topo = leaf_spine(4, 4, 4, oversubscription=3)
    assert topo.bisection_bandwidth() == pytest.approx(2 * 4 * R400 / 3, rel=1e-5)


def test_leaf_spine_parallel_uplinks():
    # 10 uplinks over 4 spines: round robin gives 3, 3, 2, 2 cables per spine.
    topo = leaf_spine(2, 4, 2, uplinks_per_leaf=10)
    per_spine = [topo.link_indices("leaf1", f"spine{s}").size for s in range(4)]
    assert per_spine == [3, 3, 2, 2]
    assert topo.n_links == 2 * (4 + 2 * 10)


def test_leaf_spine_derives_uplinks_from_ratio_and_speed():
    # 12 x 400G down at 3:1 = 1600G up; at 100G per uplink that is 16 uplinks.
    topo = leaf_spine(2, 4, 12, oversubscription=3, fabric_gbps=100)
    assert topo.params["uplinks_per_leaf"] == 16
    assert topo.link_indices("leaf0", "spine2").size == 4


@pytest.mark.parametrize("kwargs, match", [
    (dict(oversubscription=3, fabric_gbps=400, uplinks_per_leaf=8), "disagrees"),
    (dict(oversubscription=7, fabric_gbps=400), "whole number"),
    (dict(uplinks_per_leaf=2), "uplinks_per_leaf"),
    (dict(oversubscription=0), "oversubscription"),
    (dict(link_gbps=-1), "link_gbps"),
    (dict(latency_us=float("nan")), "latency_us"),
])
def test_leaf_spine_bad_args(kwargs, match):
    with pytest.raises(ValueError, match=match):
        leaf_spine(2, 4, 12, **kwargs)


def test_leaf_spine_consistent_triple_accepted():
    topo = leaf_spine(2, 4, 12, oversubscription=3, fabric_gbps=400, uplinks_per_leaf=4)
    assert topo.params["oversubscription"] == pytest.approx(3.0)


# ---------------------------------------------------------------- rail-optimised
def test_rail_optimized_counts_and_wiring():
    topo = rail_optimized(8, 4, servers_per_leaf=4)
    # 2 groups x 4 rails = 8 leaves; default spines = servers per group = 4
    assert topo.n_hosts == 32
    assert topo.n_switches == 8 + 4
    assert topo.n_links == 2 * (32 + 8 * 4)
    assert topo.host_server.tolist() == np.repeat(np.arange(8), 4).tolist()
    assert topo.host_index("srv3/nic2") == 3 * 4 + 2
    # NIC i of server s sits on rail leaf i of group s // 4, and nowhere else
    for s, i in [(0, 0), (3, 2), (5, 1), (7, 3)]:
        assert topo.link_index(f"srv{s}/nic{i}", f"g{s // 4}/rail{i}") >= 0
    assert out_degree(topo)[topo.hosts].tolist() == [1] * 32
    # non-blocking leaves at equal speeds: full bisection
    assert topo.bisection_bandwidth() == pytest.approx(16 * R400, rel=1e-12)


def test_rail_optimized_partial_group_and_defaults():
    topo = rail_optimized(5, servers_per_leaf=4)  # 8 NICs by default
    assert topo.n_hosts == 40
    assert topo.n_switches == 2 * 8 + 4  # ceil(5/4) groups x 8 rails + 4 spines
    with pytest.raises(ValueError, match="nics_per_server"):
        rail_optimized(4, 0)
    with pytest.raises(ValueError, match="uplinks_per_leaf"):
        rail_optimized(4, 2, n_spines=4, uplinks_per_leaf=3)


# ---------------------------------------------------------------- from_edges
SQUARE = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("a", "c")]


def test_from_edges_undirected_and_attrs():
    edges = SQUARE[:-1] + [("a", "c", {"capacity_gbps": 100, "latency_us": 5})]
    topo = from_edges(edges, hosts=["b", "d"])
    assert topo.n_nodes == 4 and topo.n_links == 10 and topo.n_hosts == 2
    assert topo.host_names == ("b", "d")
    ac, ca = topo.link_index("a", "c"), topo.link_index("c", "a")
    assert topo.capacity[ac] == topo.capacity[ca] == units.gbps(100)
    assert topo.latency[ac] == pytest.approx(5e-6)
    assert topo.capacity[topo.link_index("a", "b")] == R400
    assert topo.link_reverse[ac] == ca
    assert not topo.host_transit  # switches exist, hosts do not forward
    assert topo.node_tier.tolist() == [1, 0, 1, 0]


def test_from_edges_default_hosts_are_all_nodes():
    topo = from_edges(SQUARE)
    assert topo.n_hosts == 4 and topo.host_transit


def test_from_edges_directed_pairs_reverse():
    topo = from_edges([(0, 1), (1, 2), (1, 0), (0, 1)], directed=True)
    assert topo.n_links == 4
    # link 0 (0->1) pairs with link 2 (1->0); the second 0->1 and 1->2 are one-way
    assert topo.link_reverse.tolist() == [2, -1, 0, -1]
    with pytest.raises(ValueError, match="one-way"):
        topo.with_failed_links([1], bidirectional=True)


def test_from_edges_networkx():
    nx = pytest.importorskip("networkx")
    g = nx.Graph()
    g.add_node("h0", host=True)
    g.add_node("h1", host=True)
    g.add_edge("h0", "s", capacity_gbps=100)
    g.add_edge("s", "h1", latency_us=3)
    topo = from_edges(g)
    assert topo.host_names == ("h0", "h1") and topo.n_links == 4
    assert topo.capacity[topo.link_index("s", "h0")] == units.gbps(100)
    assert topo.latency[topo.link_index("h1", "s")] == pytest.approx(3e-6)
    d = from_edges(nx.DiGraph([(0, 1), (1, 2)]))
    assert d.n_links == 2 and d.link_reverse.tolist() == [-1, -1]


@pytest.mark.parametrize("edges, kwargs, match", [
    ([("a", "a")], {}, "self-loop"),
    ([("a", "b", {"capacity": 1})], {}, "unknown attributes"),
    ([("a", "b", {"capacity_gbps": 0})], {}, "capacity_gbps"),
    ([("a",)], {}, r"edges\[0\]"),
    ([], {}, "empty"),
    ([("a", "b")], {"hosts": ["z"]}, "not nodes"),
    ([("a", "b")], {"hosts": ["a", "a"]}, "more than once"),
    (5, {}, "iterable"),
])
def test_from_edges_bad_input(edges, kwargs, match):
    with pytest.raises(ValueError, match=match):
        from_edges(edges, **kwargs)


# ---------------------------------------------------------------- lookups
def test_lookups_and_errors():
    topo = leaf_spine(2, 2, 2)
    assert topo.node_index("spine1") == 4 + 2 + 1
    assert topo.host_index("h3") == 3
    assert topo.host_index(np.array(["h1", "h0"])).tolist() == [1, 0]
    assert topo.host_index([2, 3]).tolist() == [2, 3]
    with pytest.raises(ValueError, match="'spine9'"):
        topo.node_index("spine9")
    with pytest.raises(ValueError, match="'nope'"):
        topo.link_index("nope", "leaf0")
    with pytest.raises(ValueError, match="unknown host names"):
        topo.host_index("leaf0")  # a switch is not a host
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        topo.host_index(4)


def test_topology_validation():
    base = leaf_spine(1, 1, 2)
    with pytest.raises(ValueError, match="unique"):
        from_edges([("x", "y"), (1, "1")])
    import dataclasses
    with pytest.raises(ValueError, match="capacity"):
        dataclasses.replace(base, capacity=np.zeros(base.n_links))
    with pytest.raises(ValueError, match="hosts"):
        dataclasses.replace(base, hosts=np.array([0, 0]))
    with pytest.raises(ValueError, match="link_dst"):
        dataclasses.replace(base, link_dst=base.link_dst[:-1])
    assert not base.capacity.flags.writeable  # immutable


# ---------------------------------------------------------------- failures
def test_failed_links_by_id_name_mask():
    topo = fat_tree(4)
    lid = topo.link_index("pod0/agg0", "core0")
    rev = topo.link_index("core0", "pod0/agg0")
    one = topo.with_failed_links([lid])
    assert not one.link_up[lid] and one.link_up[rev]
    assert np.count_nonzero(~one.link_up) == 1
    assert topo.link_up.all()  # the original is unchanged
    both = topo.with_failed_links(("pod0/agg0", "core0"), bidirectional=True)
    assert np.flatnonzero(~both.link_up).tolist() == sorted([lid, rev])
    mask = np.zeros(topo.n_links, bool)
    mask[[lid, rev]] = True
    assert np.array_equal(topo.with_failed_links(mask).link_up, both.link_up)
    # One agg->core uplink of pod 0 lost: the first half (pods 0, 1) keeps 7 of its 8
    # 400G core uplinks, so the bisection drops to 7 x 400G.
    assert one.bisection_bandwidth() == pytest.approx(7 * R400, rel=1e-12)


@pytest.mark.parametrize("links, match", [
    ([10_000], "link ids"),
    ([-1], "link ids"),
    ([1.5], "dtype"),
    ([("pod0/agg0", "nowhere")], "'nowhere'"),
    ([("pod0/agg0", "pod1/agg0")], "no link"),
    (np.ones(3, bool), "mask"),
    ([("pod0/agg0",)], "pair"),
])
def test_failed_links_bad_input(links, match):
    with pytest.raises(ValueError, match=match):
        fat_tree(4).with_failed_links(links)


def test_capacity_scaled():
    topo = leaf_spine(2, 2, 2)
    uplinks = [("leaf0", "spine0"), ("leaf0", "spine1")]
    half = topo.with_capacity_scaled(uplinks, 0.5, bidirectional=True)
    ids = np.concatenate([topo.link_indices(*p) for p in uplinks])
    assert np.all(half.capacity[ids] == R400 / 2)
    assert np.count_nonzero(half.capacity != topo.capacity) == 4
    # Leaf 0 (hosts h0, h1 = first half) now has 2 x 200G up: bisection 400G.
    assert half.bisection_bandwidth() == pytest.approx(R400, rel=1e-12)
    per_link = topo.with_capacity_scaled(ids, [0.25, 0.5])
    assert per_link.capacity[ids].tolist() == [R400 / 4, R400 / 2]
    for factor, match in [(0.0, "with_failed_links"), (-1, "> 0"), ([1, 2, 3], "shape")]:
        with pytest.raises(ValueError, match=match):
            topo.with_capacity_scaled(ids, factor)


def test_bisection_after_cutting_a_half_off():
    topo = leaf_spine(2, 2, 2)
    cut = topo.with_failed_links([("leaf0", "spine0"), ("leaf0", "spine1")])
    assert cut.bisection_bandwidth() == 0.0
    with pytest.raises(ValueError, match="2 hosts"):
        from_edges([("a", "b")], hosts=["a"]).bisection_bandwidth()


# ------------------------------------------------------------------ server model


def _path_names(topo, ps, i):
    return [(topo.node_names[topo.link_src[l]], topo.node_names[topo.link_dst[l]])
            for l in ps.links[i, 0] if l >= 0]


@pytest.mark.parametrize("build", [
    lambda: rail_optimized(2, 4, gpus_per_server=4),
    lambda: leaf_spine(2, 2, 4, gpus_per_server=4),
    lambda: fat_tree(4, gpus_per_server=4),
    lambda: from_edges([("n0", "s"), ("n1", "s"), ("n2", "s"), ("n3", "s")],
                       hosts=["n0", "n1", "n2", "n3"], gpus_per_server=2),
])
def test_server_model_routes_nvlink_inside_and_nics_across(build):
    topo = build()
    g = topo.params["gpus_per_server"]
    assert topo.params["server_model"] and np.all(topo.host_server ==
                                                  np.arange(topo.n_hosts) // g)
    ps = shortest_paths(topo, [0, 0], [1, g])
    inside, across = _path_names(topo, ps, 0), _path_names(topo, ps, 1)
    # Same server: GPU -> NVSwitch -> GPU, a single path, NVLink capacity.
    assert inside == [("srv0/gpu0", "srv0/nvswitch"), ("srv0/nvswitch", "srv0/gpu1")]
    assert ps.n_paths[0] == 1
    nv = units.gbps(topo.params["nvlink_gbps"])
    assert all(topo.capacity[l] == nv for l in ps.links[0, 0] if l >= 0)
    # Other server: leaves through PCIe to the GPU's NIC, never through an NVSwitch.
    assert across[0][0] == "srv0/gpu0" and across[-1][1] == "srv1/gpu0"
    assert not any("nvswitch" in a or "nvswitch" in b for a, b in across)
    assert len(across) >= 4


def test_server_model_off_keeps_builders_unchanged():
    a, b = rail_optimized(3, 4), rail_optimized(3, 4, gpus_per_server=None)
    for field in ("link_src", "link_dst", "capacity", "latency", "host_server"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.n_hosts == 12 and "server_model" not in a.params


def test_with_servers_layout_and_units():
    base = leaf_spine(1, 1, 4)
    topo = with_servers(base, 4, nics_per_server=2, nvlink_gbps=7200, pcie_gbps=256,
                        nvlink_latency_us=0.2)
    L0 = base.n_links
    assert topo.n_hosts == 8 and topo.params["n_servers"] == 2
    np.testing.assert_array_equal(topo.link_src[:L0], base.link_src)
    assert topo.capacity[L0] == pytest.approx(7200e9 / 8)        # NVLink, bytes/s
    assert topo.capacity[L0 + 2 * 8] == pytest.approx(256e9 / 8)  # PCIe
    assert topo.latency[L0] == pytest.approx(0.2e-6)
    # GPUs 0,1 share NIC h0; GPUs 2,3 share h1 (2 NICs for 4 GPUs).
    nic = [topo.node_names[topo.link_dst[L0 + 16 + 2 * h]] for h in range(4)]
    assert nic == ["h0", "h0", "h1", "h1"]
    tiers = dict(zip(topo.node_names, topo.node_tier))
    assert tiers["h0"] == 1 and tiers["leaf0"] == 2 and tiers["spine0"] == 3
    assert tiers["srv0/nvswitch"] == 1 and tiers["srv0/gpu0"] == 0


def test_with_servers_rejects_bad_input():
    with pytest.raises(ValueError, match="nics_per_server"):
        with_servers(leaf_spine(1, 1, 5), 8)
    with pytest.raises(ValueError, match="already"):
        with_servers(rail_optimized(1, 2, gpus_per_server=2), 2)
    with pytest.raises(ValueError, match="gpus_per_server"):
        rail_optimized(1, 2, gpus_per_server=0)


# ------------------------------------------------------------------ switch radix
def test_radix_refuses_too_many_leaves():
    # 64-port switches, 32 servers per rail leaf, 32 uplinks: one spine layer connects
    # 64 rail leaves (8 groups of 8 rails = 256 servers); 257 servers need 72 leaves.
    rail_optimized(256, 8, switch_radix=64)
    with pytest.raises(ValueError, match="switch_radix=64.*spine"):
        rail_optimized(257, 8, switch_radix=64)
    with pytest.raises(ValueError, match="switch_radix=64.*leaf"):
        rail_optimized(64, 8, servers_per_leaf=48, switch_radix=64)
    # 128 x 400G: twice as many leaves fit.
    rail_optimized(512, 8, servers_per_leaf=64, switch_radix=128)
    leaf_spine(8, 4, 4, switch_radix=8)
    with pytest.raises(ValueError, match="fat_tree"):
        leaf_spine(9, 4, 4, switch_radix=8)
