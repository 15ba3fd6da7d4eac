"""Multi-plane, oversubscribed and three-tier Clos builds against closed forms."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from fabric_jax import units
from fabric_jax.paths import shortest_paths
from fabric_jax.topology import ClosSpec, fat_tree, leaf_spine, rail_optimized

R400 = units.gbps(400.0)  # 5e10 bytes/s


def plane_of(topo, node: int) -> int:
    """Plane of a switch from its ``plane{p}/`` prefix (0 without planes); -1 for hosts."""
    if topo.node_is_host[node]:
        return -1
    name = topo.node_names[node]
    return int(name.split("/")[0][5:]) if name.startswith("plane") else 0


def path_nodes(topo, ps, pair: int, path: int) -> list[int]:
    links = ps.links[pair, path][ps.hop_mask[pair, path]]
    return [int(topo.link_src[links[0]])] + [int(topo.link_dst[x]) for x in links]


# ---------------------------------------------------------------- planes
@pytest.mark.parametrize("planes", [1, 2, 4])
def test_planes_counts_and_capacities(planes):
    n_leaves, n_spines, hpl = 3, 5, 4
    topo = leaf_spine(n_leaves, n_spines, hpl, planes=planes)
    # P copies of (leaves + spines); every host has one cable into each plane.
    assert topo.n_hosts == n_leaves * hpl
    assert topo.n_switches == planes * (n_leaves + n_spines)
    assert topo.n_links == 2 * planes * (n_leaves * hpl + n_leaves * n_spines)
    host_out = np.isin(topo.link_src, topo.hosts)
    assert np.bincount(topo.link_src[host_out]).max() == planes
    # A NIC's bandwidth is split over the planes: link_gbps / P per port, and the
    # fabric links default to the same port speed.
    np.testing.assert_allclose(topo.capacity, R400 / planes)
    per_host = np.bincount(topo.link_src[host_out], weights=topo.capacity[host_out])
    np.testing.assert_allclose(per_host[topo.hosts], R400)
    assert topo.params["planes"] == planes
    # Splitting the NIC does not change the bisection: still non-blocking.
    assert topo.bisection_bandwidth() == pytest.approx(topo.n_hosts // 2 * R400, rel=1e-9)


def test_planes_share_no_links_and_paths_stay_in_a_plane():
    planes, n_spines = 3, 4
    topo = leaf_spine(4, n_spines, 2, planes=planes)
    # no switch-to-switch link crosses planes
    sw = ~topo.node_is_host[topo.link_src] & ~topo.node_is_host[topo.link_dst]
    src_plane = [plane_of(topo, s) for s in topo.link_src[sw]]
    dst_plane = [plane_of(topo, d) for d in topo.link_dst[sw]]
    assert src_plane == dst_plane
    # a host's cables go to P distinct planes
    first = topo.link_dst[topo.link_src == 0]
    assert sorted(plane_of(topo, n) for n in first) == list(range(planes))
    pairs = np.array([(0, 1), (0, 2), (1, 7), (6, 3)])
    ps = shortest_paths(topo, pairs[:, 0], pairs[:, 1])
    # same leaf: one path per plane; other leaf: P x n_spines (equal cost, all planes)
    np.testing.assert_array_equal(ps.n_paths, [planes, planes * n_spines,
                                               planes * n_spines, planes * n_spines])
    for i in range(ps.n_pairs):
        seen = set()
        for j in range(ps.n_paths[i]):
            nodes = path_nodes(topo, ps, i, j)
            sw_planes = {plane_of(topo, n) for n in nodes[1:-1]}
            assert len(sw_planes) == 1          # the path stays inside one plane
            seen |= sw_planes
        assert seen == set(range(planes))       # and every plane is offered


def test_truncated_paths_fan_out_over_planes():
    topo = leaf_spine(2, 4, 2, planes=2)
    with pytest.warns(UserWarning, match="max_paths"):
        ps = shortest_paths(topo, [0], [3], max_paths=2)
    # the two kept paths are evenly spread ranks: the first hop differs -> both planes
    used = {plane_of(topo, path_nodes(topo, ps, 0, j)[1]) for j in range(2)}
    assert used == {0, 1}


def test_rail_optimized_planes_with_servers():
    n_servers, nics, gps, planes = 4, 8, 8, 2
    topo = rail_optimized(n_servers, nics, servers_per_leaf=2, planes=planes,
                          gpus_per_server=gps)
    base = rail_optimized(n_servers, nics, servers_per_leaf=2, planes=planes)
    assert topo.n_hosts == n_servers * gps == base.n_hosts
    assert topo.params["n_servers"] == n_servers and topo.params["planes"] == planes
    # fabric links keep their ids under the server model
    L0 = topo.params["fabric_links"]
    assert L0 == base.n_links
    np.testing.assert_array_equal(topo.link_src[:L0], base.link_src)
    # GPU 0 -> GPU 8 + 1 (other server and group, other rail): crosses a spine in
    # either plane, n_spines (= 2 servers per full group) spines each.
    ps = shortest_paths(topo, [0, 0], [1, 8 * 3 + 1])
    assert ps.n_paths[0] == 1                               # NVLink inside the server
    assert ps.n_paths[1] == planes * 2


# ---------------------------------------------------------------- oversubscription
@pytest.mark.parametrize("ratio", [1.0, 2.0, 4.0])
@pytest.mark.parametrize("mode", ["speed", "spines"])
def test_leaf_spine_bisection_is_one_over_oversubscription(ratio, mode):
    n_leaves, hpl, n_spines = 4, 8, 8
    if mode == "speed":      # same spines, uplinks 1/ratio as fast
        topo = leaf_spine(n_leaves, n_spines, hpl, oversubscription=ratio)
    else:                    # same speed, 1/ratio as many uplinks and spines
        topo = leaf_spine(n_leaves, int(n_spines / ratio), hpl, oversubscription=ratio,
                          fabric_gbps=400.0)
    leaf0 = topo.node_index("leaf0")
    down = topo.capacity[(topo.link_src == leaf0) & topo.node_is_host[topo.link_dst]].sum()
    up = topo.capacity[(topo.link_src == leaf0) & ~topo.node_is_host[topo.link_dst]].sum()
    assert down / up == pytest.approx(ratio, rel=1e-12)
    assert topo.params["oversubscription"] == pytest.approx(ratio, rel=1e-12)
    # Half the leaves send to the other half: their uplinks are the cut (ratio >= 1).
    full = topo.n_hosts // 2 * R400
    assert topo.bisection_bandwidth() / full == pytest.approx(1 / ratio, rel=1e-9)


@pytest.mark.parametrize("ratio", [2.0, 4.0])
def test_rail_optimized_oversubscription_removes_spines(ratio):
    n_servers, nics, spl = 16, 2, 4
    topo = rail_optimized(n_servers, nics, servers_per_leaf=spl, oversubscription=ratio)
    base = rail_optimized(n_servers, nics, servers_per_leaf=spl)
    # 2.0 -> half the spines (and uplinks) at the NIC speed
    assert topo.params["n_spines"] == spl / ratio
    assert topo.params["fabric_gbps"] == pytest.approx(400.0)
    assert topo.n_switches == base.n_switches - spl + spl / ratio
    assert topo.params["oversubscription"] == pytest.approx(ratio)
    full = topo.n_hosts // 2 * R400
    assert base.bisection_bandwidth() == pytest.approx(full, rel=1e-9)
    assert topo.bisection_bandwidth() / full == pytest.approx(1 / ratio, rel=1e-9)
    # with planes the ratio is per plane and holds the same way
    two = rail_optimized(n_servers, nics, servers_per_leaf=spl, oversubscription=ratio,
                         planes=2)
    assert two.bisection_bandwidth() / full == pytest.approx(1 / ratio, rel=1e-9)


def test_oversubscription_validated():
    with pytest.raises(ValueError, match="oversubscription"):
        rail_optimized(8, 2, servers_per_leaf=4, oversubscription=3.0)   # 4/3 spines
    with pytest.raises(ValueError, match="oversubscription"):
        rail_optimized(8, 2, servers_per_leaf=4, oversubscription=-1.0)
    with pytest.raises(ValueError, match="oversubscription"):
        leaf_spine(2, 2, 4, oversubscription=0.0)
    # explicit speed: uplinks derived, the ratio stays exact
    topo = rail_optimized(8, 2, servers_per_leaf=4, n_spines=2, oversubscription=2.0,
                          fabric_gbps=400.0)
    assert topo.params["uplinks_per_leaf"] == 2


# ---------------------------------------------------------------- three tiers
@pytest.mark.parametrize("k", [4, 6])
def test_three_tier_leaf_spine_is_a_k_ary_fat_tree(k):
    half = k // 2
    topo = leaf_spine(k * half, half, half, tiers=3, leaves_per_pod=half)
    ref = fat_tree(k)
    # Al-Fares et al. 2008: k pods of k/2 edge + k/2 aggregation switches, (k/2)^2 cores
    assert (topo.n_hosts, topo.n_switches, topo.n_links) == (ref.n_hosts, ref.n_switches,
                                                             ref.n_links)
    np.testing.assert_array_equal(np.bincount(topo.node_tier), np.bincount(ref.node_tier))
    deg = np.bincount(topo.link_src, minlength=topo.n_nodes)
    assert np.all(deg[~topo.node_is_host] == k)                 # every port used once
    assert topo.bisection_bandwidth() == pytest.approx(ref.bisection_bandwidth(), rel=1e-12)
    dst = [1, half, half * half, topo.n_hosts - 1]              # edge, pod, other pods
    np.testing.assert_array_equal(shortest_paths(topo, [0] * 4, dst).n_paths,
                                  shortest_paths(ref, [0] * 4, dst).n_paths)


@pytest.mark.parametrize("n_leaves,n_spines,hpl,lpp,uplinks,planes", [
    (8, 2, 2, 4, 2, 1),      # 2 pods, one cable per spine
    (6, 2, 2, 4, 4, 1),      # partial last pod, two cables per leaf-spine pair
    (8, 4, 2, 2, 4, 2),      # 4 pods, 2 planes
])
def test_three_tier_counts_and_paths(n_leaves, n_spines, hpl, lpp, uplinks, planes):
    topo = leaf_spine(n_leaves, n_spines, hpl, uplinks_per_leaf=uplinks, tiers=3,
                      leaves_per_pod=lpp, planes=planes)
    pods = -(-n_leaves // lpp)
    ups = -(-min(lpp, n_leaves) * uplinks // n_spines)     # spine down ports = up ports
    n_super = n_spines * ups
    assert topo.params["n_pods"] == pods and topo.params["n_super_spines"] == n_super
    assert topo.n_hosts == n_leaves * hpl
    assert topo.n_switches == planes * (n_leaves + pods * n_spines + n_super)
    cables = n_leaves * hpl + n_leaves * uplinks + pods * n_spines * ups
    assert topo.n_links == 2 * planes * cables
    np.testing.assert_array_equal(np.bincount(topo.node_tier),
                                  [n_leaves * hpl, planes * n_leaves,
                                   planes * pods * n_spines, planes * n_super])
    # non-blocking by default
    np.testing.assert_allclose(topo.capacity, R400 / planes)
    # Equal-cost paths, closed forms (c = uplinks / n_spines cables per leaf-spine pair,
    # one cable from each spine to each of the ups super-spines of its group):
    #   same leaf P; same pod P * n_spines * c^2; across pods P * n_spines * c^2 * ups.
    c = uplinks // n_spines
    other_pod = (lpp * hpl) % topo.n_hosts
    ps = shortest_paths(topo, [0, 0, 0], [1, hpl, other_pod])
    np.testing.assert_array_equal(
        ps.n_paths, [planes, planes * n_spines * c * c, planes * n_spines * c * c * ups])
    hops = ps.hop_mask.sum(axis=2)
    assert hops[2, 0] == 6 and hops[1, 0] == 4 and hops[0, 0] == 2
    # A full cross-pod permutation is served at line rate: full bisection.
    assert topo.bisection_bandwidth() == pytest.approx(
        min(topo.n_hosts // 2, topo.n_hosts - topo.n_hosts // 2) * R400, rel=1e-9)


@pytest.mark.parametrize("build", [
    lambda: leaf_spine(6, 2, 2, tiers=3, leaves_per_pod=2, planes=2),
    lambda: rail_optimized(6, 2, servers_per_leaf=2, tiers=3, groups_per_pod=2),
    lambda: rail_optimized(3, 2, servers_per_leaf=1, tiers=3, groups_per_pod=2,
                           gpus_per_server=2, planes=2),
])
def test_every_host_pair_reachable(build):
    topo = build()
    pairs = np.array([p for p in itertools.permutations(range(topo.n_hosts), 2)])
    ps = shortest_paths(topo, pairs[:, 0], pairs[:, 1])
    assert np.all(ps.n_paths >= 1)
    last = ps.links[np.arange(ps.n_pairs), 0, ps.hop_mask[:, 0].sum(axis=1) - 1]
    np.testing.assert_array_equal(topo.link_dst[last], topo.hosts[pairs[:, 1]])
    first = ps.links[:, 0, 0]
    np.testing.assert_array_equal(topo.link_src[first], topo.hosts[pairs[:, 0]])


def test_rail_optimized_three_tier_counts_and_servers():
    n_servers, nics, spl, gpp = 12, 4, 2, 2          # 6 groups, 3 pods of 2 groups
    topo = rail_optimized(n_servers, nics, servers_per_leaf=spl, tiers=3,
                          groups_per_pod=gpp)
    n_leaves = (n_servers // spl) * nics              # 24 rail leaves
    per_pod = gpp * nics                              # 8 leaves per pod
    pods, n_spines = n_leaves // per_pod, spl         # default n_spines = 2
    ups = per_pod * n_spines // n_spines              # uplinks = n_spines: 8 down ports
    assert topo.params["n_pods"] == pods
    assert topo.n_switches == n_leaves + pods * n_spines + n_spines * ups
    assert topo.n_links == 2 * (n_servers * nics + n_leaves * n_spines + pods * n_spines * ups)
    tiers = dict(zip(topo.node_names, topo.node_tier))
    assert tiers["g0/rail0"] == 1 and tiers["pod2/spine1"] == 2 and tiers["super0"] == 3
    # server model on top: GPUs are the hosts, counts follow gpus_per_server
    gpu = rail_optimized(n_servers, nics, servers_per_leaf=spl, tiers=3,
                         groups_per_pod=gpp, gpus_per_server=8)
    assert gpu.n_hosts == n_servers * 8 and gpu.params["fabric_links"] == topo.n_links
    assert gpu.params["tiers"] == 3
    # across pods: n_spines spines x ups super-spines
    ps = shortest_paths(topo, [0], [topo.n_hosts - 1])
    assert ps.n_paths[0] == n_spines * ups


# ---------------------------------------------------------------- radix
def test_two_tier_radix_error_names_the_fixes():
    # 64 x 800G: one spine layer connects 64 rail leaves (256 servers of 8 rails).
    with pytest.raises(ValueError, match=r"switch_radix=64.*spine.*tiers=3.*planes="):
        rail_optimized(257, 8, switch_radix=64)
    with pytest.raises(ValueError, match=r"tiers=3.*planes="):
        leaf_spine(9, 4, 4, switch_radix=8)


def test_three_tier_fits_where_two_tiers_do_not():
    # 512 servers x 8 rails with 64-port switches: 16 groups of 32; pods of 4 groups
    # (32 rail leaves, 32 spines: 32 down + 32 up ports), 1024 super-spines with 4 ports.
    topo = rail_optimized(512, 8, switch_radix=64, tiers=3, groups_per_pod=4)
    assert topo.params["n_pods"] == 4 and topo.params["n_super_spines"] == 32 * 32
    deg = np.bincount(topo.link_src, minlength=topo.n_nodes)
    assert deg[~topo.node_is_host].max() <= 64
    # Two planes of 2 x 400G ports -> radix 128 at 400G: 512 servers fit in two tiers.
    rail_optimized(512, 8, servers_per_leaf=64, switch_radix=128, planes=2)


def test_three_tier_radix_violations():
    # spine: 8 leaves x 4 uplinks / 4 spines = 8 down + 8 up > 12
    with pytest.raises(ValueError, match=r"switch_radix=12.*spine"):
        leaf_spine(16, 4, 4, tiers=3, leaves_per_pod=8, switch_radix=12)
    # super-spine: 8 pods, one cable each = 8 ports > 6
    with pytest.raises(ValueError, match=r"switch_radix=6.*super-spine"):
        leaf_spine(16, 2, 2, tiers=3, leaves_per_pod=2, switch_radix=6)
    leaf_spine(16, 2, 2, tiers=3, leaves_per_pod=2, switch_radix=8)


@pytest.mark.parametrize("kwargs,match", [
    (dict(tiers=4), "tiers"),
    (dict(tiers=True), "tiers"),
    (dict(tiers=3.0), "tiers"),
    (dict(planes=0), "planes"),
    (dict(planes=1.5), "planes"),
    (dict(leaves_per_pod=2), "tiers=3"),
    (dict(n_super_spines=4), "tiers=3"),
    (dict(tiers=3), "leaves_per_pod"),
    (dict(tiers=3, leaves_per_pod=0), "leaves_per_pod"),
    (dict(tiers=3, leaves_per_pod=2, n_super_spines=5), "n_super_spines"),
    (dict(tiers=3, leaves_per_pod=2, uplinks_per_spine=0), "uplinks_per_spine"),
])
def test_tier_and_plane_arguments_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        leaf_spine(4, 2, 2, **kwargs)


def test_rail_optimized_tier_arguments_validated():
    with pytest.raises(ValueError, match="groups_per_pod"):
        rail_optimized(8, 2, servers_per_leaf=2, tiers=3)
    with pytest.raises(ValueError, match="tiers=3"):
        rail_optimized(8, 2, servers_per_leaf=2, groups_per_pod=2)


# ---------------------------------------------------------------- the spec
ARRAYS = ("node_is_host", "node_tier", "hosts", "link_src", "link_dst", "capacity",
          "latency", "buffer", "link_up", "link_reverse", "host_server")


@pytest.mark.parametrize("kwargs", [
    {}, dict(planes=2), dict(oversubscription=2.0), dict(uplinks_per_leaf=4),
    dict(tiers=3, groups_per_pod=2), dict(tiers=3, groups_per_pod=1, planes=2),
])
def test_leaf_spine_is_rail_optimized_with_one_nic_per_server(kwargs):
    # Both builders wire one ClosSpec: a leaf-spine of 4 leaves x 3 hosts is a rail
    # fabric of 12 one-NIC servers, 3 per (rail) leaf.  Same arrays, other names.
    leaf_kw = {("leaves_per_pod" if k == "groups_per_pod" else k): v
               for k, v in kwargs.items()}
    ls = leaf_spine(4, 2, 3, **leaf_kw)
    ro = rail_optimized(12, 1, servers_per_leaf=3, n_spines=2, **kwargs)
    for field in ARRAYS:
        assert np.array_equal(getattr(ls, field), getattr(ro, field)), field
    assert ls.node_names != ro.node_names
    assert ls.params["oversubscription"] == ro.params["oversubscription"]


def test_clos_spec_resolved_frozen_and_checked():
    spec = ClosSpec.resolve("leaf_spine", n_servers=8, rails=1, servers_per_leaf=4,
                            n_spines=2, uplinks_per_leaf=None, oversubscription=2.0,
                            link_gbps=400.0, fabric_gbps=None, latency_us=1.0,
                            buffer_kb=1000.0, switch_radix=None, planes=1, tiers=2,
                            pod_size=None, uplinks_per_spine=None, n_super_spines=None)
    # 4 hosts x 400G down, 2 uplinks at 1/2: 4 * 400 / (2 * 2) = 400 Gb/s each.
    assert (spec.n_leaves, spec.uplinks_per_leaf, spec.fabric_gbps) == (2, 2, 400.0)
    assert spec.oversubscription == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_spines = 3
    for bad, match in [(dict(uplinks_per_leaf=1), "uplinks_per_leaf"),
                       (dict(kind="torus"), "kind"),
                       (dict(leaves_per_pod=1), "tiers=3"),
                       (dict(tiers=3, leaves_per_pod=1, uplinks_per_spine=2,
                             n_super_spines=3), "multiple"),
                       (dict(switch_radix=5), "switch_radix=5: each leaf")]:
        with pytest.raises(ValueError, match=match):
            dataclasses.replace(spec, **bad)
