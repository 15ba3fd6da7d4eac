"""Host-level collective flow builders (``fabric_jax.workloads.ring_all_reduce`` ...,
one flow per transfer of :mod:`fabric_jax.collectives.schedules`): closed-form flow
counts and bytes, DAG order, NCCL's binary trees.

:func:`tests.helpers.contention_free` is a tiny oracle for the DAG semantics: every
flow runs alone at rate ``B`` (no sharing), starting at ``max(arrival, finish of deps)
+ delay``.  Under it the classic alpha-beta step costs (Thakur et al. 2005, with alpha
= 0) are exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax.collectives.schedules import TransferDag, ring, tree_reduce_bcast
from fabric_jax.collectives.trees import btree_parent, double_binary_tree, tree_depth
from fabric_jax.workloads import (
    Workload, all_to_all, halving_doubling_all_reduce, pipeline_sends, ring_all_gather,
    ring_all_reduce, ring_reduce_scatter, tree_all_reduce, zipf_expert_load,
)
from tests.helpers import contention_free, topo_order

S = 8e6  # bytes
B = 1e9  # bytes/s for the contention-free oracle


def _levels(w: Workload) -> np.ndarray:
    """Longest dependency chain ending at each flow (0 for flows without deps)."""
    level = np.zeros(w.n_flows, int)
    for f in topo_order(w):
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
    _, finish = contention_free(w, B)
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
    _, finish = contention_free(w, B)
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
    _, finish = contention_free(w, B)
    assert finish.max() == pytest.approx(6 * S / B)
    # Pipelined in k chunks: (depth up + depth down + k - 1) chunk times on the
    # critical path (the classic pipeline fill formula, with hop time S/(k B)).
    k = 8
    w = tree_all_reduce(np.arange(8), S, double=False, n_chunks=k)
    _, finish = contention_free(w, B)
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
    _, finish = contention_free(w, B)
    assert finish.max() == pytest.approx((stages - 1 + mb - 1) * S / B)
    wb = pipeline_sends(np.arange(stages), S, mb, backward=True).validate(stages)
    assert wb.n_flows == 2 * (stages - 1) * mb
    back = np.arange(wb.n_flows) >= w.n_flows
    assert np.all(wb.dst[back] == wb.src[back] - 1)
    # Backward starts after the forward flush and takes as long again.
    _, finish = contention_free(wb, B)
    assert finish.max() == pytest.approx(2 * (stages - 1 + mb - 1) * S / B)
    # Lanes: [stages, width] sends lane to lane.
    w2 = pipeline_sends(np.arange(8).reshape(4, 2), S, 2)
    assert w2.n_flows == 3 * 2 * 2 and np.all((w2.dst - w2.src) == 2)


def test_builders_reject_bad_hosts():
    with pytest.raises(ValueError, match="distinct"):
        ring_all_reduce([0, 1, 1], S)
    with pytest.raises(ValueError, match="at least 2"):
        ring_all_reduce([0], S)
    with pytest.raises(ValueError, match="size"):
        all_to_all([0, 1], -1.0)


def test_builders_are_the_nccl_schedules():
    # One definition: the flows of the host-level builders are the transfers of the
    # schedules NCCL's model uses, in the same order, with the same dependencies.
    import fabric_jax.workloads as wl
    hosts = np.array([5, 3, 9, 0, 7, 2])
    n = hosts.size
    dag = TransferDag()
    ring(dag, hosts[None], 2 * (n - 1), S / n)
    src, dst, size, deps = dag.arrays()
    w = ring_all_reduce(hosts, S)
    np.testing.assert_array_equal(w.src, src)
    np.testing.assert_array_equal(w.dst, dst)
    np.testing.assert_array_equal(w.size, size)
    np.testing.assert_array_equal(w.deps, deps)
    dag = TransferDag()
    for parent in double_binary_tree(n):
        tree_reduce_bcast(dag, hosts, parent, S / 2)
    src, dst, size, deps = dag.arrays()
    w = tree_all_reduce(hosts, S)
    np.testing.assert_array_equal(w.src, src)
    np.testing.assert_array_equal(w.dst, dst)
    np.testing.assert_array_equal(w.size, size)
    assert [set(r[r >= 0]) for r in w.deps] == [set(r[r >= 0]) for r in deps]
    assert wl.double_binary_tree is double_binary_tree
