"""NCCL's closed-form collective model (fabric_jax.collectives.nccl_latency / nccl_time /
nccl_choice) against NCCL's formulas written out by hand (NVIDIA/nccl
src/graph/tuning.cc, ncclTopoTuneModel: Simple protocol, constants in us)."""

import math

import pytest

from fabric_jax.collectives import nccl_choice, nccl_latency, nccl_time

US = 1e-6


def test_ring_one_rank_per_node_is_linear_in_ranks():
    # baseLat 8.4 + (p - 1) steps over the network at 14 us (ppn = 1: the tree's hwLat)
    for p in (2, 16, 256, 1024):
        assert nccl_latency("reduce_scatter", "ring", p) == pytest.approx(
            (8.4 + (p - 1) * 14.0) * US, rel=1e-12)
        assert nccl_latency("all_gather", "ring", p) == nccl_latency("reduce_scatter", "ring", p)
        assert nccl_latency("all_reduce", "ring", p) == pytest.approx(
            (8.4 + 2 * (p - 1) * 14.0) * US, rel=1e-12)


def test_pat_is_log_plus_a_small_linear_part():
    # 8 + log2i(nodes) * 14 / 3.5 + 2.8 p  (NCCL >= 2.23)
    for p, lg in ((2, 1), (16, 4), (100, 6), (1024, 10)):
        assert nccl_latency("all_gather", "pat", p) == pytest.approx(
            (8.0 + lg * 14.0 / 3.5 + 2.8 * p) * US, rel=1e-12)
    # at scale PAT's latency is a fraction of the ring's (the reason NCCL added it)
    assert nccl_latency("all_gather", "pat", 1024) < 0.25 * nccl_latency(
        "all_gather", "ring", 1024)


def test_hierarchical_ring_and_tree():
    # 2 nodes x 8 ranks: all-reduce ring, 30 steps of which 2 cross the network; an
    # intra-node step costs max(3.4, 3 x 1 us network overhead)
    assert nccl_latency("all_reduce", "ring", 16, 2) == pytest.approx(
        (8.4 + 28 * 3.4 + 2 * 14.0) * US, rel=1e-12)
    # tree: 6.8 + 2 ((ppn - 1) 4.0 + log2(nodes) 14)
    assert nccl_latency("all_reduce", "tree", 512, 64) == pytest.approx(
        (6.8 + 2 * (7 * 4.0 + 6 * 14.0)) * US, rel=1e-12)
    assert nccl_latency("p2p", "p2p", 2) == pytest.approx(22.4 * US)
    assert nccl_latency("p2p", "p2p", 2, 1) == pytest.approx((8.4 + 3.4) * US)
    assert nccl_latency("all_gather", "ring", 1) == 0.0


def test_path_latency_counts_twice_per_network_step():
    # NCCL's latencyInter, added twice for Simple ("plus the flush")
    d = nccl_latency("reduce_scatter", "ring", 256, path_latency=1e-6) - \
        nccl_latency("reduce_scatter", "ring", 256)
    assert d == pytest.approx(255 * 2e-6, rel=1e-9)
    d = nccl_latency("all_gather", "pat", 256, path_latency=1e-6) - \
        nccl_latency("all_gather", "pat", 256)
    assert d == pytest.approx(8 * 2e-6 / 3.5, rel=1e-9)


def test_time_is_latency_plus_bytes_over_algorithm_bandwidth():
    bw, S, p = 47e9, 64e6, 32
    assert nccl_time("reduce_scatter", "ring", S, p, bus_bandwidth=bw) == pytest.approx(
        nccl_latency("reduce_scatter", "ring", p) + S * (p - 1) / p / bw, rel=1e-12)
    assert nccl_time("all_gather", "pat", S, p, bus_bandwidth=bw) == pytest.approx(
        nccl_latency("all_gather", "pat", p) + S / (0.75 * bw), rel=1e-12)
    assert nccl_time("all_reduce", "tree", S, 64, 8, bus_bandwidth=bw) == pytest.approx(
        nccl_latency("all_reduce", "tree", 64, 8) + S / (0.46 * bw), rel=1e-12)


def test_choice_pat_for_small_messages_and_many_ranks_ring_for_large():
    bw = 47e9
    # small: PAT; large: ring (PAT's bandwidth is 0.75 of the ring's)
    assert nccl_choice("all_gather", 1e6, 64, bus_bandwidth=bw)[0] == "pat"
    assert nccl_choice("all_gather", 4e9, 64, bus_bandwidth=bw)[0] == "ring"
    # monotone: once the ring wins as the size grows, it keeps winning
    picks = [nccl_choice("reduce_scatter", s, 128, bus_bandwidth=bw)[0]
             for s in (1e5, 1e6, 1e7, 1e8, 3e8, 1e9, 1e10)]
    first_ring = picks.index("ring")
    assert set(picks[first_ring:]) == {"ring"} and set(picks[:first_ring]) == {"pat"}
    # and as the ranks grow at a fixed size the choice moves to PAT
    picks = [nccl_choice("reduce_scatter", 2e8, p, bus_bandwidth=bw)[0]
             for p in (4, 16, 64, 256, 1024, 4096)]
    assert picks[0] == "ring" and picks[-1] == "pat"
    # the chosen time is the minimum
    alg, t = nccl_choice("all_gather", 5e7, 256, bus_bandwidth=bw)
    assert t == min(nccl_time("all_gather", a, 5e7, 256, bus_bandwidth=bw)
                    for a in ("ring", "pat"))
    # several ranks per node: PAT is not enabled (NCCL: nNodes == nRanks only)
    assert nccl_choice("all_gather", 1e3, 64, 8, bus_bandwidth=bw)[0] == "ring"
    assert nccl_choice("all_gather", 1e3, 64, bus_bandwidth=bw, algorithms=("ring",))[0] \
        == "ring"


@pytest.mark.parametrize("call, match", [
    (lambda: nccl_latency("all_gather", "pat", 16, 2), "algorithm"),
    (lambda: nccl_latency("gather", "ring", 16), "op"),
    (lambda: nccl_latency("all_gather", "tree", 16), "algorithm"),
    (lambda: nccl_latency("all_gather", "ring", 16, 3), "n_nodes"),
    (lambda: nccl_latency("all_gather", "ring", 0), "n_ranks"),
    (lambda: nccl_latency("all_gather", "ring", 4, path_latency=-1e-6), "path_latency"),
    (lambda: nccl_latency("all_gather", "ring", 4, path_latency=math.nan), "path_latency"),
    (lambda: nccl_time("all_gather", "ring", 1e6, 4, bus_bandwidth=0.0), "bus_bandwidth"),
    (lambda: nccl_time("all_gather", "ring", -1.0, 4, bus_bandwidth=1e9), "nbytes"),
    (lambda: nccl_choice("all_gather", 1e6, 16, 2, bus_bandwidth=1e9, algorithms=("pat",)),
     "algorithms"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
