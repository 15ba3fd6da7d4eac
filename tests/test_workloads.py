"""Workload builders: closed-form flow counts and bytes, DAG order, placement, traffic,
training steps.

``_contention_free`` is a tiny oracle for the DAG semantics: every flow runs alone at
rate ``B`` (no sharing), starting at ``max(arrival, finish of deps) + delay``.  Under it
the classic alpha-beta step costs (Thakur et al. 2005, with alpha = 0) are exact.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fabric_jax.workloads as wl
from fabric_jax.units import gbps
from fabric_jax.workloads import (
    FlowSizeCDF, Workload, all_to_all, concat, double_binary_tree,
    halving_doubling_all_reduce, incast, megatron_groups, permutation, pipeline_sends,
    place_job, place_jobs, poisson_background, ring_all_gather, ring_all_reduce,
    ring_reduce_scatter, training_step, tree_all_reduce, zipf_expert_load,
)

S = 8e6  # bytes
B = 1e9  # bytes/s for the contention-free oracle


def _contention_free(w: Workload, rate: float = B):
    """Start/finish times with every flow alone at ``rate`` (oracle; Python loop)."""
    order = _topo_order(w)
    start = np.zeros(w.n_flows)
    finish = np.zeros(w.n_flows)
    for f in order:
        ready = w.arrival[f]
        for d in w.deps[f]:
            if d >= 0:
                ready = max(ready, finish[d])
        start[f] = ready + w.delay[f]
        finish[f] = start[f] + w.size[f] / rate
    return start, finish


def _topo_order(w: Workload):
    indeg = (w.deps >= 0).sum(axis=1)
    children = [[] for _ in range(w.n_flows)]
    for f, row in enumerate(w.deps):
        for d in row:
            if d >= 0:
                children[d].append(f)
    stack = [f for f in range(w.n_flows) if indeg[f] == 0]
    order = []
    while stack:
        f = stack.pop()
        order.append(f)
        for c in children[f]:
            indeg[c] -= 1
            if indeg[c] == 0:
                stack.append(c)
    assert len(order) == w.n_flows, "dependency cycle"
    return order


def _levels(w: Workload) -> np.ndarray:
    """Longest dependency chain ending at each flow (0 for flows without deps)."""
    level = np.zeros(w.n_flows, int)
    for f in _topo_order(w):
        for d in w.deps[f]:
            if d >= 0:
                level[f] = max(level[f], level[d] + 1)
    return level


def _sent(w, hosts):
    return np.array([w.size[w.src == h].sum() for h in hosts])


def _recv(w, hosts):
    return np.array([w.size[w.dst == h].sum() for h in hosts])


def _deps_feed_sender(w):
    """Every dependency delivers data to (or was sent by) the dependent flow's sender."""
    for f, row in enumerate(w.deps):
        for d in row[row >= 0]:
            assert w.dst[d] == w.src[f] or w.src[d] == w.src[f], (f, d)
            assert d < f  # builders emit topological order


# ------------------------------------------------------------------ collectives
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_all_reduce_closed_form(n):
    hosts = np.arange(10, 10 + n)
    w = ring_all_reduce(hosts, S).validate(10 + n)
    assert w.n_flows == n * 2 * (n - 1)
    np.testing.assert_allclose(w.size, S / n)
    np.testing.assert_allclose(_sent(w, hosts), 2 * (n - 1) / n * S)
    np.testing.assert_allclose(_recv(w, hosts), 2 * (n - 1) / n * S)
    # Each rank sends only to its ring successor.
    succ = dict(zip(hosts, np.roll(hosts, -1)))
    assert all(succ[s] == d for s, d in zip(w.src, w.dst))
    # Step s+1 from rank i depends on exactly the step-s flow into rank i.
    lv = _levels(w)
    assert lv.max() == 2 * (n - 1) - 1 and np.all(np.bincount(lv) == n)
    for f in np.flatnonzero(lv > 0):
        (d,) = w.deps[f][w.deps[f] >= 0]
        assert w.dst[d] == w.src[f] and lv[d] == lv[f] - 1
    assert w.group_kind == ("all_reduce",) and w.group_ranks[0] == n
    assert w.group_bytes[0] == S
    # alpha-beta cost with alpha = 0: 2 (n-1) steps of S/(n B).
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx(2 * (n - 1) * S / (n * B))


@pytest.mark.parametrize("builder,kind", [(ring_reduce_scatter, "reduce_scatter"),
                                          (ring_all_gather, "all_gather")])
def test_ring_reduce_scatter_all_gather(builder, kind):
    n = 6
    w = builder(np.arange(n), S).validate(n)
    assert w.n_flows == n * (n - 1)
    np.testing.assert_allclose(w.size, S / n)
    np.testing.assert_allclose(_sent(w, range(n)), (n - 1) / n * S)
    assert _levels(w).max() == n - 2 and w.group_kind == (kind,)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_closed_form(n):
    m = int(np.log2(n))
    w = halving_doubling_all_reduce(np.arange(n), S).validate(n)
    assert w.n_flows == 2 * m * n
    lv = _levels(w)
    # Level k of reduce-scatter: S/2^(k+1) to partner at distance n/2^(k+1); all-gather
    # mirrors it: sizes S/n ... S/2 at distances 1 ... n/2.
    expect_size = [S / 2 ** (k + 1) for k in range(m)] + [S * 2**k / n for k in range(m)]
    expect_dist = [n >> (k + 1) for k in range(m)] + [1 << k for k in range(m)]
    for level in range(2 * m):
        sel = lv == level
        assert sel.sum() == n
        np.testing.assert_allclose(w.size[sel], expect_size[level])
        np.testing.assert_array_equal(w.src[sel] ^ w.dst[sel], expect_dist[level])
    np.testing.assert_allclose(_sent(w, range(n)), 2 * (n - 1) / n * S)
    _deps_feed_sender(w)
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx(2 * (n - 1) / n * S / B)


def test_halving_doubling_needs_power_of_two():
    with pytest.raises(ValueError, match="power-of-two"):
        halving_doubling_all_reduce(np.arange(6), S)


def test_double_binary_tree_matches_nccl_illustrations():
    # Parents read off the drawings in NCCL src/graph/trees.cc.
    p14 = {8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12, 1: 2, 3: 2, 5: 6, 7: 6,
           9: 10, 11: 10}
    trees = double_binary_tree(14)
    assert trees[0, 0] == -1 and all(trees[0, c] == p for c, p in p14.items())
    # n = 12 (even): second tree mirrored, root 11.
    p12 = {3: 11, 1: 3, 7: 3, 0: 1, 2: 1, 5: 7, 9: 7, 4: 5, 6: 5, 8: 9, 10: 9}
    trees = double_binary_tree(12)
    assert trees[1, 11] == -1 and all(trees[1, c] == p for c, p in p12.items())
    # n = 13 (odd): second tree shifted by one, root 1.
    p13 = {9: 1, 5: 9, 0: 9, 3: 5, 7: 5, 11: 0, 2: 3, 4: 3, 6: 7, 8: 7, 10: 11, 12: 11}
    trees = double_binary_tree(13)
    assert trees[1, 1] == -1 and all(trees[1, c] == p for c, p in p13.items())
    # Power of two: each rank is interior (has children) in at most one tree.
    for n in (8, 16):
        t = double_binary_tree(n)
        interior = [set(t[k][t[k] >= 0]) for k in range(2)]
        assert not interior[0] & interior[1]



def test_tree_depth_of_nccl_binary_tree():
    # ncclGetBtree on 8 ranks: 0 <- 4 <- {2, 6}, 2 <- {1, 3}, 6 <- {5, 7}: depth log2(8)
    from fabric_jax.collectives.trees import btree_parent, tree_depth
    parent = btree_parent(8)
    np.testing.assert_array_equal(parent, [-1, 2, 4, 2, 0, 6, 4, 6])
    np.testing.assert_array_equal(tree_depth(parent), [0, 3, 2, 3, 1, 3, 2, 3])
    np.testing.assert_array_equal(tree_depth(np.array([-1])), [0])

@pytest.mark.parametrize("n,chunks", [(2, 1), (7, 1), (8, 1), (8, 4), (13, 2)])
def test_tree_all_reduce_closed_form(n, chunks):
    w = tree_all_reduce(np.arange(n), S, n_chunks=chunks).validate(n)
    assert w.n_flows == 4 * (n - 1) * chunks
    np.testing.assert_allclose(w.size, S / (2 * chunks))
    assert w.total_bytes == pytest.approx(2 * (n - 1) * S)
    _deps_feed_sender(w)
    # Each (ordered) tree edge carries S/2 per direction: n-1 edges per tree, two trees.
    pairs = {}
    for s, d, b in zip(w.src, w.dst, w.size):
        pairs[(s, d)] = pairs.get((s, d), 0.0) + b
    assert sum(pairs.values()) == pytest.approx(2 * (n - 1) * S)


def test_tree_unpipelined_time_is_depth_times_hop():
    # Single tree of 8 ranks: 0-4, 4-{2,6}, 2-{1,3}, 6-{5,7}: depth 3 below the root.
    # Store-and-forward: 3 hops up + 3 hops down, each moving all of S.
    w = tree_all_reduce(np.arange(8), S, double=False)
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx(6 * S / B)
    # Pipelined in k chunks: (depth up + depth down + k - 1) chunk times on the
    # critical path (the classic pipeline fill formula, with hop time S/(k B)).
    k = 8
    w = tree_all_reduce(np.arange(8), S, double=False, n_chunks=k)
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx((6 + k - 1) * S / (k * B))


def test_all_to_all_uniform():
    n = 6
    hosts = np.arange(3, 3 + n)
    w = all_to_all(hosts, S).validate(20)
    assert w.n_flows == n * (n - 1) and w.max_deps == 0
    np.testing.assert_allclose(w.size, S / n)
    assert len(set(zip(w.src, w.dst))) == n * (n - 1)
    np.testing.assert_allclose(_recv(w, hosts), (n - 1) / n * S)


def test_all_to_all_skewed_bytes_follow_expert_load():
    n = 4
    load = np.array([1.0, 2.0, 3.0, 4.0])
    w = all_to_all(np.arange(n), S, expert_load=load).validate(n)
    # Rank j receives S * w_j / sum(w) from each of the n-1 others.
    np.testing.assert_allclose(_recv(w, range(n)), (n - 1) * S * load / load.sum())
    # k = 2 experts per rank are summed: experts (0,1) on rank 0, ...
    w2 = all_to_all(np.arange(n), S, expert_load=[0.5, 0.5, 1, 1, 1, 2, 0, 4])
    np.testing.assert_allclose(_recv(w2, range(n)), _recv(w, range(n)))
    # An idle expert gets no flows at all.
    w3 = all_to_all(np.arange(n), S, expert_load=[0, 1, 1, 1])
    assert w3.n_flows == (n - 1) * (n - 1) and not np.any(w3.dst == 0)
    # A per-source matrix: row i is rank i's routing.
    mat = np.ones((n, n)) + np.eye(n)
    w4 = all_to_all(np.arange(n), S, expert_load=mat)
    np.testing.assert_allclose(w4.size, S / (n + 1))
    with pytest.raises(ValueError, match="expert_load"):
        all_to_all(np.arange(n), S, expert_load=[1, 2, 3])


def test_zipf_expert_load():
    flat = zipf_expert_load(8, 0.0, 0)
    np.testing.assert_allclose(flat, 1 / 8)
    z = zipf_expert_load(8, 1.0, 3)
    # Sorted weights are 1/k normalised by the harmonic number H_8.
    h8 = sum(1 / k for k in range(1, 9))
    np.testing.assert_allclose(np.sort(z)[::-1], [1 / (k * h8) for k in range(1, 9)])
    assert not np.array_equal(z, zipf_expert_load(8, 1.0, 4))  # permutation is random
    tok = zipf_expert_load(8, 1.0, 3, n_tokens=100_000)
    assert tok.sum() == pytest.approx(1.0) and np.abs(tok - z).max() < 0.01


def test_pipeline_sends_fill_formula():
    stages, mb = 4, 5
    w = pipeline_sends(np.arange(stages), S, mb).validate(stages)
    assert w.n_flows == (stages - 1) * mb and w.group_kind == ("sendrecv",)
    assert all(d == s + 1 for s, d in zip(w.src, w.dst))
    # No compute: the last microbatch reaches the last stage after (stages-1 + mb-1)
    # hop times (pipeline fill then drain).
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx((stages - 1 + mb - 1) * S / B)
    wb = pipeline_sends(np.arange(stages), S, mb, backward=True).validate(stages)
    assert wb.n_flows == 2 * (stages - 1) * mb
    back = np.arange(wb.n_flows) >= w.n_flows
    assert np.all(wb.dst[back] == wb.src[back] - 1)
    # Backward starts after the forward flush and takes as long again.
    _, finish = _contention_free(wb)
    assert finish.max() == pytest.approx(2 * (stages - 1 + mb - 1) * S / B)
    # Lanes: [stages, width] sends lane to lane.
    w2 = pipeline_sends(np.arange(8).reshape(4, 2), S, 2)
    assert w2.n_flows == 3 * 2 * 2 and np.all((w2.dst - w2.src) == 2)


def test_incast_and_permutation():
    w = incast([1, 2, 3, 4], 0, S).validate(5)
    assert w.n_flows == 4 and np.all(w.dst == 0) and w.group_bytes[0] == 4 * S
    with pytest.raises(ValueError, match="receiver"):
        incast([0, 1], 1, S)
    hosts = np.arange(50, 70)
    p = permutation(hosts, S, seed=5).validate(70)
    assert np.all(p.src != p.dst)
    np.testing.assert_array_equal(np.sort(p.dst), hosts)  # everyone receives once
    np.testing.assert_array_equal(p.dst, permutation(hosts, S, seed=5).dst)
    assert not np.array_equal(p.dst, permutation(hosts, S, seed=6).dst)


def test_builders_reject_bad_hosts():
    with pytest.raises(ValueError, match="distinct"):
        ring_all_reduce([0, 1, 1], S)
    with pytest.raises(ValueError, match="at least 2"):
        ring_all_reduce([0], S)
    with pytest.raises(ValueError, match="size"):
        all_to_all([0, 1], -1.0)


# ------------------------------------------------------------------ Workload record
def _tiny(deps, src=(0, 1, 2), dst=(1, 2, 0), size=(1.0, 1.0, 1.0)):
    n = len(src)
    return Workload(src=src, dst=dst, size=size, arrival=np.zeros(n), deps=deps,
                    delay=np.zeros(n), job=np.zeros(n), group=np.zeros(n),
                    group_names=("g",), job_names=("j",), group_bytes=[1.0],
                    group_kind=("x",), group_ranks=[3])


def test_validate_catches_bad_workloads():
    _tiny([[-1], [0], [1]]).validate(3)
    _tiny([[1], [2], [-1]]).validate(3)  # forward deps, but acyclic: fine
    with pytest.raises(ValueError, match="cycle"):
        _tiny([[2], [0], [1]]).validate(3)
    with pytest.raises(ValueError, match="itself"):
        _tiny([[0], [-1], [-1]]).validate(3)
    with pytest.raises(ValueError, match="deps"):
        _tiny([[-1], [7], [-1]]).validate(3)
    with pytest.raises(ValueError, match="itself"):
        _tiny([[-1]] * 3, dst=(1, 1, 0)).validate(3)
    with pytest.raises(ValueError, match="size"):
        _tiny([[-1]] * 3, size=(1.0, -2.0, 1.0)).validate(3)
    with pytest.raises(ValueError, match="outside"):
        _tiny([[-1]] * 3).validate(2)
    with pytest.raises(ValueError, match="shape"):
        _tiny([[-1]] * 2).validate(3)


def test_concat_offsets_and_merges_jobs_by_name():
    a = ring_all_reduce([0, 1, 2], S, job="A")
    b = all_to_all([3, 4], S, job="B")
    c = ring_all_reduce([5, 6], S, job="A")
    w = concat(a, b, c).validate(7)
    assert w.n_flows == a.n_flows + b.n_flows + c.n_flows
    assert w.job_names == ("A", "B") and w.n_groups == 3
    np.testing.assert_array_equal(w.job, [0] * 12 + [1] * 2 + [0] * 4)
    np.testing.assert_array_equal(w.group, [0] * 12 + [1] * 2 + [2] * 4)
    # c's deps moved by the 14 flows before it, and still point into c.
    tail = w.deps[14:]
    np.testing.assert_array_equal(tail[tail >= 0], c.deps[c.deps >= 0] + 14)
    assert Workload.concat(a).n_flows == a.n_flows
    assert concat().n_flows == 0
    shifted = w.with_arrival_offset(2.5)
    np.testing.assert_allclose(shifted.arrival, w.arrival + 2.5)


# ------------------------------------------------------------------ placement
def test_packed_random_and_exclusions():
    np.testing.assert_array_equal(place_job(4, 16), [0, 1, 2, 3])
    np.testing.assert_array_equal(place_job(3, 16, exclude=[0, 2]), [1, 3, 4])
    r = place_job(10, 16, "random", seed=1, exclude=[5])
    assert len(set(r)) == 10 and 5 not in r
    np.testing.assert_array_equal(r, place_job(10, 16, "random", seed=1, exclude=[5]))
    with pytest.raises(ValueError, match="do not fit"):
        place_job(17, 16)
    with pytest.raises(ValueError, match="policy"):
        place_job(2, 16, "scattered")


def test_place_jobs_no_overlap():
    jobs = place_jobs([8, {"n_ranks": 16, "policy": "rail_aligned"}, (6, "random")], 64,
                      nics_per_server=8, seed=0)
    all_hosts = np.concatenate(jobs)
    assert [len(j) for j in jobs] == [8, 16, 6]
    np.testing.assert_array_equal(jobs[1], np.arange(8, 24))  # servers 1 and 2
    assert len(set(all_hosts)) == all_hosts.size
    with pytest.raises(ValueError, match="jobs\\[1\\]"):
        place_jobs([60, 10], 64)


def test_rail_aligned_keeps_dp_groups_on_one_rail():
    nics = 8
    # A tenant already holds server 0 and rails 0-3 of server 1.  The rail window must
    # be the same on every server: rails 4-7 are free on servers 1..7, rails 0-3 only
    # on servers 2..7, so 6 servers x 4 ranks fit in either, 8 servers in neither.
    taken = np.r_[0:8, 8:12]
    hosts = place_job(24, 64, "rail_aligned", nics_per_server=nics, ranks_per_server=4,
                      exclude=taken)
    assert not set(hosts) & set(taken)
    groups = megatron_groups(hosts, tp=4)
    for dp in groups["dp"]:
        rails = dp % nics
        assert np.all(rails == rails[0])          # one rail per DP group
        assert len(set(dp // nics)) == dp.size    # one rank per server
    # Window 4-7 (servers 1..6) packs tighter than 0-3 (servers 2..7).
    np.testing.assert_array_equal(hosts[:4], [12, 13, 14, 15])
    assert set(hosts % nics) == {4, 5, 6, 7}
    with pytest.raises(ValueError, match="rail window"):
        place_job(32, 64, "rail_aligned", nics_per_server=nics, ranks_per_server=4,
                  exclude=taken)
    # With host_server from a topology (here: uneven numbering) the same holds.
    host_server = np.repeat(np.arange(4), 4)[np.random.default_rng(0).permutation(16)]
    hosts = place_job(8, 16, "rail_aligned", host_server=host_server, ranks_per_server=2)
    assert len(set(host_server[hosts])) == 4
    with pytest.raises(ValueError, match="server"):
        place_job(8, 16, "rail_aligned")


def test_megatron_groups_shapes():
    g = megatron_groups(np.arange(16), tp=2, pp=2)
    assert g["tp"].shape == (8, 2) and g["dp"].shape == (4, 4) and g["pp"].shape == (8, 2)
    # rank = (p * dp + d) * tp + t: dp group of (p=0, t=1) is ranks 1, 3, 5, 7.
    np.testing.assert_array_equal(g["dp"][1], [1, 3, 5, 7])
    np.testing.assert_array_equal(g["pp"][0], [0, 8])


# ------------------------------------------------------------------ traffic
def test_poisson_background_hits_target_load():
    n, load, rate = 32, 0.5, gbps(100)
    cdf = FlowSizeCDF.builtin("web_search")
    duration = 2.0
    w = poisson_background(n, load, rate, cdf, duration, seed=11).validate(n)
    # lambda = load * rate / E[size] per host: ~3650 flows/s/host, ~234k flows in all.
    expected_flows = n * load * rate / cdf.mean() * duration
    assert abs(w.n_flows / expected_flows - 1) < 0.01
    offered = w.total_bytes / (n * rate * duration)
    assert abs(offered / load - 1) < 0.02
    assert np.all(w.src != w.dst) and np.all(np.diff(w.arrival) >= 0)
    assert w.arrival.min() >= 0 and w.arrival.max() < duration
    assert np.all(w.group == -1) and w.job_names == ("background",)
    # Destinations uniform over the other hosts: each host receives ~1/n of the flows.
    counts = np.bincount(w.dst, minlength=n) / w.n_flows
    assert np.abs(counts - 1 / n).max() < 0.002


def test_poisson_background_on_a_host_subset():
    hosts = np.array([3, 9, 12, 40])
    w = poisson_background(hosts, 0.2, gbps(25), "hadoop", 0.05, seed=0, start=1.0)
    assert set(w.src) <= set(hosts) and set(w.dst) <= set(hosts)
    assert w.arrival.min() >= 1.0
    with pytest.raises(ValueError, match="load"):
        poisson_background(4, -0.1, gbps(25), "hadoop", 1.0)


# ------------------------------------------------------------------ training
def test_training_step_serial_and_overlap_times():
    n, C = 4, 0.01
    hosts = np.arange(n)
    ar = ring_all_reduce(hosts, S)
    t_ar = 2 * (n - 1) * S / (n * B)   # contention-free ring time, 12 ms
    for f in (0.0, 0.5):
        w, spec = training_step(hosts, C, [ar], overlap=f, n_steps=3, tokens_per_step=1e5)
        w.validate(n)
        assert w.n_flows == 3 * ar.n_flows and w.n_groups == 3
        _, finish = _contention_free(w)
        # Communication may start after (1 - f) C; the next step starts once the ring
        # ends (t_ar > f C here), so each step lasts (1 - f) C + t_ar.
        step = (1 - f) * C + t_ar
        assert finish.max() == pytest.approx(3 * step)
        np.testing.assert_allclose(spec.step_times(w, finish), step)
        assert spec.gpu_utilization(w, finish) == pytest.approx(C / step)
        assert spec.tokens_per_second(w, finish) == pytest.approx(1e5 / step)
        assert spec.flow_steps(w).tolist() == sorted(spec.flow_steps(w).tolist())


def test_training_step_straggler_delays_everyone():
    n, C = 4, 0.01
    hosts = np.arange(n)
    w, spec = training_step(hosts, [C, C, C, 2 * C], [ring_all_reduce(hosts, S)])
    _, finish = _contention_free(w)
    # The chunk that starts at the straggler leaves at 2C and then needs all
    # 2(n-1) ring steps.
    assert finish.max() == pytest.approx(2 * C + 2 * (n - 1) * S / (n * B))
    np.testing.assert_allclose(spec.ideal_step_time, 2 * C)


def test_training_step_phases_serialize_or_not():
    n, C = 4, 0.01
    hosts = np.arange(n)
    phases = [all_to_all(hosts, S), ring_all_reduce(hosts, S)]
    t_a2a = S / (n * B)
    t_ar = 2 * (n - 1) * S / (n * B)
    w, spec = training_step(hosts, C, phases, serialize=True, n_steps=2)
    w.validate(n)
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx(2 * (C + t_a2a + t_ar))
    w, _ = training_step(hosts, C, phases, serialize=False, n_steps=2)
    _, finish = _contention_free(w)
    assert finish.max() == pytest.approx(2 * (C + t_ar))
    # Group names identify each step's collectives; a concat keeps them findable.
    both = concat(poisson_background(n, 0.1, B, "hadoop", 0.001, seed=0), w)
    steps = spec.flow_steps(both)
    assert np.all(steps[:both.n_flows - w.n_flows] == -1)
    assert np.bincount(steps[steps >= 0]).tolist() == [w.n_flows // 2] * 2


def test_training_step_rejects_foreign_hosts():
    with pytest.raises(ValueError, match="outside"):
        training_step(np.arange(4), 0.1, [ring_all_reduce([0, 1, 2, 9], S)])
    with pytest.raises(ValueError, match="overlap"):
        training_step(np.arange(4), 0.1, [ring_all_reduce(np.arange(4), S)], overlap=2)


def test_docstring_examples():
    for mod in (wl.flows, wl.collectives, wl.cdf, wl.training):
        result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0 and result.attempted > 0, mod.__name__
