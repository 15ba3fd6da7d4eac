"""Equal-cost shortest paths: structure, closed-form counts, brute-force oracle, errors."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pytest

from fabric_jax import units
from fabric_jax.paths import PathSet, concat_padded, concat_paths, shortest_paths
from fabric_jax.topology import (disjoint_union, fat_tree, from_edges, leaf_spine,
                                 rail_optimized)


# ---------------------------------------------------------------- oracle
def oracle_paths(topo, src, dst):
    """All min-hop paths src -> dst as tuples of link ids, by plain Python search.

    BFS over the links that are up, with hosts never forwarding unless
    ``topo.host_transit``; no up/down rule (for Clos without failures the min-hop paths
    are exactly the up/down ones).
    """
    s, d = int(topo.hosts[src]), int(topo.hosts[dst])
    out = {}
    for lid in np.flatnonzero(topo.link_up):
        out.setdefault(int(topo.link_src[lid]), []).append(int(lid))

    def may_forward(node):
        return topo.host_transit or not topo.node_is_host[node]

    # distance to d over reversed links
    into = {}
    for lid in np.flatnonzero(topo.link_up):
        into.setdefault(int(topo.link_dst[lid]), []).append(int(lid))
    dist = {d: 0}
    queue = deque([d])
    while queue:
        v = queue.popleft()
        if v != d and not may_forward(v):
            continue
        for lid in into.get(v, []):
            u = int(topo.link_src[lid])
            if u not in dist:
                dist[u] = dist[v] + 1
                queue.append(u)
    if s not in dist:
        return set()
    paths = set()

    def walk(v, acc):
        if v == d:
            paths.add(tuple(acc))
            return
        if acc and not may_forward(v):
            return
        for lid in out.get(v, []):
            w = int(topo.link_dst[lid])
            if dist.get(w, -1) == dist[v] - 1:
                walk(w, acc + [lid])

    walk(s, [])
    return paths


def brute_force_paths(topo, src, dst, max_hops=8):
    """All min-hop paths by exhaustive search over simple paths of <= max_hops links.

    Independent of BFS: walks every simple path, keeps those that reach dst, obey the
    host-transit rule and, for Clos kinds (``topo.updown``), never go down then up.
    """
    s, d = int(topo.hosts[src]), int(topo.hosts[dst])
    out = {}
    for lid in np.flatnonzero(topo.link_up):
        out.setdefault(int(topo.link_src[lid]), []).append(int(lid))
    tier = topo.node_tier
    found = []

    def walk(v, acc, visited, descending):
        if v == d:
            found.append(tuple(acc))
            return
        if len(acc) == max_hops or (acc and topo.node_is_host[v] and not topo.host_transit):
            return
        for lid in out.get(v, []):
            w = int(topo.link_dst[lid])
            if w in visited:
                continue
            going_up = tier[w] > tier[v]
            if topo.updown and descending and going_up:
                continue  # a valley
            walk(w, acc + [lid], visited | {w},
                 descending or (topo.updown and tier[w] < tier[v]))

    walk(s, [], {s}, False)
    if not found:
        return set()
    best = min(len(p) for p in found)
    return {p for p in found if len(p) == best}


def path_tuples(ps, p):
    return {tuple(int(x) for x in ps.links[p, q][ps.hop_mask[p, q]])
            for q in range(ps.n_paths[p])}


def check_structure(topo, ps):
    """Every path is contiguous, host to host, over up links, min-hop, distinct, packed."""
    P, M, H = ps.links.shape
    assert ps.links.dtype == np.int32 and ps.n_paths.dtype == np.int32
    assert np.array_equal(ps.path_mask, np.arange(M)[None, :] < ps.n_paths[:, None])
    assert np.array_equal(ps.hop_mask, ps.links >= 0)
    assert np.all(ps.n_paths >= 1)
    assert not ps.hop_mask[~ps.path_mask].any()
    links = np.maximum(ps.links, 0)
    hops = ps.hop_mask.sum(-1)
    # hops are packed first along the hop axis
    assert np.array_equal(ps.hop_mask, np.arange(H)[None, None, :] < hops[..., None])
    src_node = topo.hosts[ps.src][:, None]
    dst_node = topo.hosts[ps.dst][:, None]
    real = ps.path_mask
    assert np.all(topo.link_src[links[:, :, 0]][real] == np.broadcast_to(src_node, real.shape)[real])
    last = np.take_along_axis(links, np.maximum(hops - 1, 0)[..., None], axis=2)[..., 0]
    assert np.all(topo.link_dst[last][real] == np.broadcast_to(dst_node, real.shape)[real])
    both = ps.hop_mask[:, :, 1:]
    assert np.all((topo.link_dst[links[:, :, :-1]] == topo.link_src[links[:, :, 1:]])[both])
    assert np.all(topo.link_up[links][ps.hop_mask])
    # equal cost: all paths of a pair have the same hop count
    h0 = hops[:, :1]
    assert np.all((hops == h0)[real])
    for p in range(P):
        assert len(path_tuples(ps, p)) == ps.n_paths[p]  # distinct


# ---------------------------------------------------------------- closed forms
@pytest.mark.parametrize("k", [4, 8])
def test_fat_tree_counts_closed_form(k):
    topo = fat_tree(k)
    half = k // 2
    # host 0 is on pod 0 / edge 0; host 1 shares its edge; host `half` is on edge 1 of
    # pod 0; host half*half is in pod 1.
    dst = np.array([1, half, half * half, topo.n_hosts - 1])
    ps = shortest_paths(topo, np.zeros(4, int), dst, max_paths=1000)
    # Al-Fares: same edge 1 path; same pod one per aggregation switch (k/2); other pod
    # one per core switch ((k/2)^2).
    assert ps.n_paths.tolist() == [1, half, half * half, half * half]
    hops = ps.hop_mask[:, 0].sum(-1)
    assert hops.tolist() == [2, 4, 6, 6]
    assert ps.max_paths == half * half and ps.max_hops == 6
    check_structure(topo, ps)
    assert np.array_equal(ps.n_candidates(topo), ps.n_paths)


def test_fat_tree_all_pairs_match_oracle():
    topo = fat_tree(4)
    src, dst = np.array([(a, b) for a in range(16) for b in range(16) if a != b]).T
    ps = shortest_paths(topo, src, dst)
    check_structure(topo, ps)
    for p in range(ps.n_pairs):
        assert path_tuples(ps, p) == oracle_paths(topo, src[p], dst[p])


@pytest.mark.parametrize("uplinks, expected", [(None, 3), (6, 3 * 2 * 2), (4, 2 * 2 + 1 + 1)])
def test_leaf_spine_counts(uplinks, expected):
    # 3 spines.  A path leaf A -> spine s -> leaf B can use any of the m_s parallel
    # cables on each side: sum_s m_s^2 paths.  6 uplinks: m = 2, 2, 2 -> 12;
    # 4 uplinks: m = 2, 1, 1 -> 6.
    topo = leaf_spine(3, 3, 2, uplinks_per_leaf=uplinks)
    ps = shortest_paths(topo, [0, 0, 5], [1, 2, 0], max_paths=100)
    assert ps.n_paths.tolist() == [1, expected, expected]
    check_structure(topo, ps)
    for p in range(3):
        assert path_tuples(ps, p) == oracle_paths(topo, ps.src[p], ps.dst[p])


def test_rail_optimized_counts():
    topo = rail_optimized(8, 4, servers_per_leaf=4, n_spines=3)
    names = np.array(["srv0/nic1", "srv0/nic1", "srv0/nic1", "srv2/nic0"])
    dsts = np.array(["srv3/nic1", "srv3/nic2", "srv5/nic1", "srv2/nic3"])
    ps = shortest_paths(topo, names, dsts)
    # same rail and group: one rail leaf; any other pair: leaf -> any of 3 spines -> leaf
    assert ps.n_paths.tolist() == [1, 3, 3, 3]
    assert ps.hop_mask[:, 0].sum(-1).tolist() == [2, 4, 4, 4]
    check_structure(topo, ps)


# ---------------------------------------------------------------- capping
def test_capped_subset_is_spread_and_deterministic():
    topo = fat_tree(8)
    other_pod = np.arange(16, 64)
    ps = shortest_paths(topo, np.zeros(48, int), other_pod, max_paths=4)
    assert ps.n_paths.tolist() == [4] * 48
    assert np.all(ps.n_candidates(topo) == 16)  # (k/2)^2 exist
    check_structure(topo, ps)
    for p in range(48):
        assert path_tuples(ps, p) <= oracle_paths(topo, 0, other_pod[p])
    # Evenly spaced ranks (0, 4, 8, 12 + offset) of 16 = 4 aggs x 4 cores: each kept
    # path leaves through a different aggregation switch.
    agg = topo.link_dst[ps.links[:, :, 1]]
    assert all(len(set(row)) == 4 for row in agg)
    # Different pairs take different subsets: the kept paths reach every core.
    core = topo.link_dst[ps.links[:, :, 2]]
    assert len(np.unique(core)) == 16
    assert len({frozenset(path_tuples(ps, p)) for p in range(48)}) > 1
    # deterministic, a function of (seed, src, dst) only -- not of batch position
    again = shortest_paths(topo, [0, 0], [other_pod[7], other_pod[3]], max_paths=4)
    assert path_tuples(again, 0) == path_tuples(ps, 7)
    assert path_tuples(again, 1) == path_tuples(ps, 3)
    other_seed = shortest_paths(topo, np.zeros(48, int), other_pod, max_paths=4, seed=1)
    assert any(path_tuples(other_seed, p) != path_tuples(ps, p) for p in range(48))


def test_max_paths_one():
    topo = fat_tree(4)
    ps = shortest_paths(topo, [0, 0], [1, 8], max_paths=1)
    assert ps.links.shape == (2, 1, 6) and ps.n_paths.tolist() == [1, 1]
    check_structure(topo, ps)


# ---------------------------------------------------------------- failures
def test_failed_links_are_avoided():
    topo = fat_tree(4).with_failed_links([("pod0/agg0", "core0")], bidirectional=True)
    ps = shortest_paths(topo, [0, 8], [8, 0])
    # 4 cores minus core0 (reached from pod 0 only via agg0): 3 paths each way
    assert ps.n_paths.tolist() == [3, 3]
    check_structure(topo, ps)
    dead = np.flatnonzero(~topo.link_up)
    assert not np.isin(ps.links, dead).any()
    for p in range(2):
        assert path_tuples(ps, p) == oracle_paths(topo, ps.src[p], ps.dst[p])


def test_cut_off_pair_raises():
    topo = fat_tree(4).with_failed_links([("h0", "pod0/edge0")])
    with pytest.raises(ValueError, match="unreachable.*h0->h1"):
        shortest_paths(topo, [2, 0], [3, 1])
    # the reverse direction still works (only h0's uplink failed)
    assert shortest_paths(topo, [1], [0]).n_paths.tolist() == [1]


def test_clos_routing_is_valley_free():
    # leaf0 -> spine0 down, spine1 -> leaf1 down: leaf0 -> spine1 -> leaf2 -> spine0 ->
    # leaf1 exists, but is a valley; up/down routing has no path.
    topo = leaf_spine(3, 2, 1).with_failed_links([("leaf0", "spine0"), ("spine1", "leaf1")])
    with pytest.raises(ValueError, match="unreachable"):
        shortest_paths(topo, [0], [1])
    assert len(oracle_paths(topo, 0, 1)) == 1  # the valley path the oracle allows


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("make", [lambda: fat_tree(4),
                                  lambda: leaf_spine(3, 3, 2, uplinks_per_leaf=5)],
                         ids=["fat_tree4", "leaf_spine_parallel"])
def test_random_failures_match_brute_force(make, seed):
    topo = make()
    rng = np.random.default_rng(seed)
    switch_links = np.flatnonzero(~topo.node_is_host[topo.link_src]
                                  & ~topo.node_is_host[topo.link_dst])
    topo = topo.with_failed_links(rng.choice(switch_links, size=len(switch_links) // 4,
                                             replace=False))
    src, dst = np.array([(a, b) for a in range(topo.n_hosts)
                         for b in range(topo.n_hosts) if a != b]).T
    expected = [brute_force_paths(topo, a, b) for a, b in zip(src, dst)]
    reachable = np.array([len(e) > 0 for e in expected])
    assert reachable.any()
    ps = shortest_paths(topo, src[reachable], dst[reachable], max_paths=100)
    check_structure(topo, ps)
    for p, e in enumerate(e for e, r in zip(expected, reachable) if r):
        assert path_tuples(ps, p) == e
    if not reachable.all():
        with pytest.raises(ValueError, match="unreachable"):
            shortest_paths(topo, src, dst)


# ---------------------------------------------------------------- arbitrary graphs
SQUARE = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("a", "c")]


def named(topo, ps, p):
    return {tuple(topo.node_names[topo.link_dst[lid]] for lid in path)
            for path in path_tuples(ps, p)}


def test_square_with_diagonal():
    topo = from_edges(SQUARE)  # every node a host that forwards
    ps = shortest_paths(topo, ["b", "a", "a", "d"], ["d", "c", "b", "b"])
    # b-d: two 2-hop paths round the square; a-c: the diagonal; d-b via a or c.
    assert named(topo, ps, 0) == {("a", "d"), ("c", "d")}
    assert named(topo, ps, 1) == {("c",)}
    assert named(topo, ps, 2) == {("b",)}
    assert named(topo, ps, 3) == {("a", "b"), ("c", "b")}
    check_structure(topo, ps)


def test_hosts_do_not_forward_unless_allowed():
    blocked = from_edges(SQUARE, hosts=["a", "b", "c", "d"], host_transit=False)
    with pytest.raises(ValueError, match="unreachable"):
        shortest_paths(blocked, ["b"], ["d"])
    # switches a, c: b -> d through either
    topo = from_edges(SQUARE, hosts=["b", "d"])
    ps = shortest_paths(topo, ["b"], ["d"])
    assert named(topo, ps, 0) == {("a", "d"), ("c", "d")}


def test_multi_homed_host():
    # H is dual-homed to s1 and s2, both reach s3 where G sits; X on s1, Y on s2.
    edges = [("H", "s1"), ("H", "s2"), ("s1", "s3"), ("s2", "s3"), ("G", "s3"),
             ("X", "s1"), ("Y", "s2")]
    topo = from_edges(edges, hosts=["H", "G", "X", "Y"])
    ps = shortest_paths(topo, ["H", "G", "X"], ["G", "H", "Y"])
    assert named(topo, ps, 0) == {("s1", "s3", "G"), ("s2", "s3", "G")}
    assert named(topo, ps, 1) == {("s3", "s1", "H"), ("s3", "s2", "H")}
    # X -> Y: via s3 only (4 hops); H does not forward although X-s1-H-s2-Y is as short
    assert named(topo, ps, 2) == {("s1", "s3", "s2", "Y")}
    check_structure(topo, ps)
    transit = from_edges(edges, hosts=["H", "G", "X", "Y"], host_transit=True)
    ps = shortest_paths(transit, ["X"], ["Y"])
    assert named(transit, ps, 0) == {("s1", "s3", "s2", "Y"), ("s1", "H", "s2", "Y")}


def test_directed_graph_bfs_dag():
    # a->b->d, a->c->d, d->a only: paths a->d are 2, d->a is 1 hop, b->c goes round.
    topo = from_edges([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d"), ("d", "a")],
                      directed=True)
    ps = shortest_paths(topo, ["a", "d", "b"], ["d", "a", "c"])
    assert named(topo, ps, 0) == {("b", "d"), ("c", "d")}
    assert named(topo, ps, 1) == {("a",)}
    assert named(topo, ps, 2) == {("d", "a", "c")}
    check_structure(topo, ps)


def test_parallel_links_are_distinct_paths():
    topo = from_edges([("x", "s"), ("s", "y"), ("s", "y")], hosts=["x", "y"])
    ps = shortest_paths(topo, ["x"], ["y"])
    assert ps.n_paths.tolist() == [2]
    assert path_tuples(ps, 0) == oracle_paths(topo, 0, 1)


@pytest.mark.parametrize("seed", range(4))
def test_random_graphs_match_oracle(seed):
    rng = np.random.default_rng(seed)
    n = 9
    edges = {tuple(sorted(e)) for e in rng.integers(0, n, (16, 2)) if e[0] != e[1]}
    edges |= {(i, i + 1) for i in range(n - 1)}  # connected
    topo = from_edges(sorted(edges))
    pairs = np.array([(a, b) for a in range(n) for b in range(n) if a != b]).T
    ps = shortest_paths(topo, pairs[0], pairs[1], max_paths=64)
    check_structure(topo, ps)
    for p in range(ps.n_pairs):
        assert path_tuples(ps, p) == oracle_paths(topo, pairs[0, p], pairs[1, p])


# ---------------------------------------------------------------- PathSet methods
def test_latency_bottleneck_select():
    topo = fat_tree(4, fabric_gbps=100.0, latency_us=2.0)
    ps = shortest_paths(topo, [0, 0], [1, 8])
    lat = ps.latency(topo)
    # 2 hops and 6 hops at 2 us each; padded paths report 0
    assert lat[0, 0] == pytest.approx(4e-6) and lat[0, 1:].tolist() == [0, 0, 0]
    assert np.allclose(lat[1], 12e-6)
    bott = ps.bottleneck(topo)
    assert bott[0, 0] == units.gbps(400.0)   # same edge: host links only
    assert np.all(bott[1] == units.gbps(100.0))  # crosses the 100G fabric
    assert bott[0, 1] == 0.0
    one = ps.select(np.array([0, 3]))
    assert one.links.shape == (2, 1, 6) and one.n_paths.tolist() == [1, 1]
    assert np.array_equal(one.links[1, 0], ps.links[1, 3])
    with pytest.raises(ValueError, match=r"path_index\[0\]"):
        ps.select(np.array([1, 0]))  # pair 0 has a single path
    with pytest.raises(ValueError, match="path_index"):
        ps.select(np.array([0]))
    # a link failed after the paths were built counts as zero capacity
    failed = topo.with_failed_links([int(ps.links[1, 0, 2])])
    assert ps.bottleneck(failed)[1, 0] == 0.0
    assert ps.n_candidates(failed)[1] == 3
    with pytest.raises(ValueError, match="topology"):
        ps.latency(fat_tree(2))


def test_names_and_indices_agree():
    topo = fat_tree(4)
    a = shortest_paths(topo, ["h0", "h3"], ["h9", "h12"])
    b = shortest_paths(topo, np.array([0, 3]), np.array([9, 12]))
    assert np.array_equal(a.links, b.links) and a.src.tolist() == [0, 3]
    scalar = shortest_paths(topo, 0, 9)
    assert scalar.n_pairs == 1 and np.array_equal(scalar.links[0], b.links[0])
    empty = shortest_paths(topo, np.zeros(0, int), np.zeros(0, int))
    assert empty.n_pairs == 0


@pytest.mark.parametrize("src, dst, kwargs, match", [
    ([0, 1], [2], {}, "same shape"),
    (["h0"], ["nope"], {}, "dst: unknown host names"),
    (["pod0/edge0"], ["h1"], {}, "src: unknown host names"),
    ([0], [16], {}, r"dst: host indices must lie in \[0, 16\)"),
    ([-1], [3], {}, "src"),
    ([0.0], [1.0], {}, "src"),
    ([0, 2], [1, 2], {}, r"src == dst for pairs \[1\]"),
    ([0], [1], {"max_paths": 0}, "max_paths"),
    ([0], [1], {"max_paths": 2.5}, "max_paths"),
    ([0], [1], {"seed": 1.5}, "seed"),
])
def test_bad_input(src, dst, kwargs, match):
    with pytest.raises(ValueError, match=match):
        shortest_paths(fat_tree(4), src, dst, **kwargs)


def test_pathset_validates_shapes():
    with pytest.raises(ValueError, match="path_mask"):
        PathSet(src=np.zeros(2, np.int32), dst=np.ones(2, np.int32),
                links=np.zeros((2, 3, 4), np.int32), path_mask=np.ones((2, 2), bool),
                hop_mask=np.ones((2, 3, 4), bool), n_paths=np.ones(2, np.int32))


# ---------------------------------------------------------------- scale
def test_many_pairs_vectorised():
    topo = fat_tree(8)
    rng = np.random.default_rng(0)
    src = rng.integers(0, topo.n_hosts, 20_000)
    dst = (src + rng.integers(1, topo.n_hosts, src.size)) % topo.n_hosts
    ps = shortest_paths(topo, src, dst, max_paths=8)
    # closed form per pair from the fat-tree coordinates (4 hosts per edge, 16 per pod)
    same_edge = src // 4 == dst // 4
    same_pod = src // 16 == dst // 16
    expected = np.where(same_edge, 1, np.where(same_pod, 4, np.minimum(16, 8)))
    assert np.array_equal(ps.n_paths, expected)
    assert np.array_equal(ps.hop_mask[:, 0].sum(-1), np.where(same_edge, 2, np.where(same_pod, 4, 6)))
    links = np.maximum(ps.links, 0)
    ok = topo.link_dst[links[:, :, :-1]] == topo.link_src[links[:, :, 1:]]
    assert np.all(ok[ps.hop_mask[:, :, 1:]])


@pytest.mark.slow
def test_million_pairs_in_seconds():
    topo = fat_tree(16)
    rng = np.random.default_rng(0)
    src = rng.integers(0, topo.n_hosts, 1_000_000)
    dst = (src + rng.integers(1, topo.n_hosts, src.size)) % topo.n_hosts
    start = time.perf_counter()
    ps = shortest_paths(topo, src, dst)
    elapsed = time.perf_counter() - start
    # every equal-cost path by default: (k/2)^2 = 64 between pods of fat_tree(16)
    assert ps.links.shape == (1_000_000, 64, 6)
    assert elapsed < 60.0, f"1e6 pairs took {elapsed:.1f} s"


def test_chunked_dag_scan_gives_same_paths(monkeypatch):
    import fabric_jax.paths as paths_module

    topo = fat_tree(4)
    src, dst = np.array([(a, b) for a in range(16) for b in range(16) if a != b]).T
    ref = shortest_paths(topo, src, dst, max_paths=3, seed=5)
    monkeypatch.setattr(paths_module, "_DAG_CHUNK", 7)  # one column per chunk
    got = shortest_paths(topo, src, dst, max_paths=3, seed=5)
    assert np.array_equal(ref.links, got.links)


# ---------------------------------------------------------------- independent parts
def test_disjoint_union_keeps_parts_apart_and_paths_map_back():
    parts = [leaf_spine(2, 2, 2), leaf_spine(2, 2, 2, planes=2),
             leaf_spine(4, 2, 2, tiers=3, leaves_per_pod=2)]
    topo, off = disjoint_union(parts)
    assert topo.n_links == sum(t.n_links for t in parts) == off.links[-1]
    assert topo.n_hosts == sum(t.n_hosts for t in parts) == off.hosts[-1]
    assert topo.n_nodes == off.nodes[-1]
    # no link joins two parts
    part_of_node = np.repeat(np.arange(3), [t.n_nodes for t in parts])
    assert np.all(part_of_node[topo.link_src] == part_of_node[topo.link_dst])
    psets = [shortest_paths(t, [0, 1], [t.n_hosts - 1, 0]) for t in parts]
    ps = concat_paths(psets, off.links, off.hosts)
    assert ps.max_paths == max(p.max_paths for p in psets)
    for i, p in enumerate(psets):
        rows = slice(2 * i, 2 * i + 2)
        got = ps.links[rows, :p.max_paths, :p.max_hops]
        want = np.where(p.hop_mask, p.links + off.links[i], -1)
        np.testing.assert_array_equal(got, want)
        assert np.all(ps.links[rows, p.max_paths:] == -1)
        np.testing.assert_array_equal(ps.n_paths[rows], p.n_paths)
        np.testing.assert_array_equal(ps.src[rows], p.src + off.hosts[i])
        # capacities, latencies and link ends follow the links
        np.testing.assert_array_equal(topo.capacity[want[p.hop_mask]],
                                      parts[i].capacity[p.links[p.hop_mask]])
        np.testing.assert_array_equal(topo.link_src[want[p.hop_mask]],
                                      parts[i].link_src[p.links[p.hop_mask]] + off.nodes[i])
    # the paths the union's own search finds are the parts' paths, offset
    np.testing.assert_array_equal(shortest_paths(topo, ps.src, ps.dst).n_paths, ps.n_paths)


def test_concat_padded_offsets_ids_and_pads():
    # two parts' deps: [2, 1] and [1, 2]; the second part's flow ids start at 2
    deps = concat_padded([np.array([[-1], [0]]), np.array([[0, -1]])], offsets=[0, 2])
    np.testing.assert_array_equal(deps, [[-1, -1], [0, -1], [2, -1]])
    w = concat_padded([np.ones((1, 1)), np.ones((1, 3))], fill=0.0)
    np.testing.assert_array_equal(w, [[1, 0, 0], [1, 1, 1]])
