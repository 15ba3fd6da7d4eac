"""ns-3 RDMA-simulator topology import (``fabric_jax.ns3``).

The HPCC fat-tree numbers below are transcribed from [HPCC-NS3]
``simulation/mix/fat.txt`` (alibaba-edu/High-Precision-Congestion-Control, commit
9950bbbf33d33324491949ff8baa9e270f4ff50b), the topology of Li et al., SIGCOMM 2019,
Sec. 5.1: header ``376 56 480``; switch ids 320..375; 320 host lines ``h 320+h//16
100Gbps 1000ns 0.000000``; ToR t -> aggs ``340 + 4 (t//4) + j``; agg a -> cores
``360 + 4 (a % 4) + j`` (j = 0..3), all ``400Gbps 1000ns``.  The first, a middle and the
last lines of the file are, verbatim: ``0 320 100Gbps 1000ns 0.000000``, ``320 340
400Gbps 1000ns 0.000000``, ``359 375 400Gbps 1000ns 0.000000``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fabric_jax as fj
from fabric_jax.ns3 import parse_rate, parse_time

# A 2-leaf, 1-spine network with 4 hosts, in the file format; deliberately odd spacing
# and the switch ids not last, to check that the parser reads a token stream.
SMALL = """7 3 6
4 5 6
0 4 25Gbps 1us 0
1 4 25Gbps 1000ns 0.000000
2 5   25000Mbps   0.001ms 0
3 5 25Gbps 1e-6 0
4 6 100Gbps 500ns 0
5   6 12.5GBps 2us 0
"""


def test_small_text_parses_with_units_and_tiers():
    topo = fj.from_ns3_topology(SMALL)
    assert (topo.n_hosts, topo.n_switches, topo.n_links) == (4, 3, 12)
    assert topo.host_names == ("h0", "h1", "h2", "h3")
    # link 2i is a -> b of the i-th line, 2i+1 the reverse
    assert topo.link_index("h2", "s5") == 4 and topo.link_index("s5", "h2") == 5
    cap = topo.capacity[::2]
    np.testing.assert_allclose(cap, [25e9 / 8] * 4 + [100e9 / 8, 12.5e9])
    np.testing.assert_allclose(topo.latency[::2], [1e-6] * 4 + [0.5e-6, 2e-6])
    np.testing.assert_array_equal(topo.capacity[0::2], topo.capacity[1::2])
    tiers = dict(zip(topo.node_names, topo.node_tier.tolist()))
    assert tiers == {"h0": 0, "h1": 0, "h2": 0, "h3": 0, "s4": 1, "s5": 1, "s6": 2}
    assert topo.updown  # every cable joins adjacent tiers
    # the 32 MB switch buffer split over each switch's ports (leaf 3 ports, spine 2)
    assert topo.buffer[topo.link_index("s4", "s6")] == pytest.approx(32e6 / 3)
    assert topo.buffer[topo.link_index("s6", "s4")] == pytest.approx(32e6 / 2)
    assert topo.buffer[topo.link_index("h0", "s4")] == pytest.approx(32e6 / 3)
    ps = fj.shortest_paths(topo, [0, 0], [1, 3])
    np.testing.assert_array_equal(ps.n_paths, [1, 1])
    np.testing.assert_allclose(ps.latency(topo)[:, 0], [2e-6, 1e-6 + 0.5e-6 + 2e-6 + 1e-6])


def test_round_trip_through_text():
    topo = fj.from_ns3_topology(SMALL, buffer_kb=100)
    np.testing.assert_allclose(topo.buffer, 1e5)
    back = fj.from_ns3_topology(fj.to_ns3_topology(topo), buffer_kb=100)
    for field in ("node_names", "link_src", "link_dst", "node_tier", "hosts"):
        assert np.array_equal(np.asarray(getattr(back, field)),
                              np.asarray(getattr(topo, field))), field
    np.testing.assert_allclose(back.capacity, topo.capacity)
    np.testing.assert_allclose(back.latency, topo.latency)


def test_reads_a_file_path(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text(SMALL)
    topo = fj.from_ns3_topology(path)
    assert topo.name == "small.txt" and topo.n_links == 12
    assert fj.from_ns3_topology(str(path)).n_hosts == 4


@pytest.mark.parametrize("text,word", [
    ("3 1 2\n2\n0 2 10Gbps 1us 0\n", "tokens"),               # one link missing
    ("3 1 1\n2\n0 2 10Gbps 1us 0\n1 2 10Gbps 1us 0\n", "after"),  # one link too many
    ("3 1 2\n5\n0 2 10Gbps 1us 0\n1 2 10Gbps 1us 0\n", "switch ids"),
    ("3 1 2\n2\n0 2 10Gbps 1us 0\n1 7 10Gbps 1us 0\n", "link ends"),
    ("3 1 2\n2\n0 2 10Gbps 1us 0\n1 1 10Gbps 1us 0\n", "self-loop"),
    ("3 1 2\n2\n0 2 10Gbit 1us 0\n1 2 10Gbps 1us 0\n", "DataRate"),
    ("3 1 2\n2\n0 2 10Gbps 1 us 0\n1 2 10Gbps 1us 0\n", "after"),  # "1 us": 2 tokens
    ("3 1 2\n2\n0 2 10Gbps 1fortnight 0\n1 2 10Gbps 1us 0\n", "Time"),
    ("3 1 2\n2\n0 2 10Gbps 1us 0.01\n1 2 10Gbps 1us 0\n", "error_rate"),
    ("4 2 2\n2 3\n0 2 10Gbps 1us 0\n1 2 10Gbps 1us 0\n", "not connected"),
    ("x 1 2\n2\n0 2 10Gbps 1us 0\n1 2 10Gbps 1us 0\n", "integer"),
])
def test_malformed_text_is_rejected_with_the_reason(text, word):
    with pytest.raises(ValueError, match=word):
        fj.from_ns3_topology(text)


def test_bad_arguments():
    with pytest.raises(ValueError, match="neither an existing file"):
        fj.from_ns3_topology("/no/such/file.txt")
    with pytest.raises(ValueError, match="path_or_text"):
        fj.from_ns3_topology(42)
    with pytest.raises(ValueError, match="switch_buffer_mb"):
        fj.from_ns3_topology(SMALL, switch_buffer_mb=0)
    with pytest.raises(ValueError, match="buffer_kb"):
        fj.from_ns3_topology(SMALL, buffer_kb=-1)
    with pytest.raises(ValueError, match="host_gbps"):
        fj.hpcc_fat_tree(host_gbps=0)


@pytest.mark.parametrize("text,value", [("100Gbps", 12.5e9), ("400000Mbps", 50e9),
                                        ("1.25GBps", 1.25e9), ("8bps", 1.0),
                                        ("10Kbps", 1250.0)])
def test_parse_rate(text, value):
    assert parse_rate(text) == pytest.approx(value)


@pytest.mark.parametrize("text,value", [("1000ns", 1e-6), ("1us", 1e-6), ("0.001ms", 1e-6),
                                        ("2", 2.0), ("1500ps", 1.5e-9)])
def test_parse_time(text, value):
    assert parse_time(text) == pytest.approx(value)


def test_hpcc_fat_tree_matches_the_published_file():
    topo = fj.hpcc_fat_tree()
    # header "376 56 480": 376 nodes, 56 switches, 480 cables (= 960 links)
    assert (topo.n_nodes, topo.n_switches, topo.n_links) == (376, 56, 960)
    assert topo.n_hosts == 320
    # 320 host cables at 100 Gb/s, 160 fabric cables at 400 Gb/s, all 1000 ns
    gbps = np.round(topo.capacity[::2] * 8 / 1e9)
    assert np.count_nonzero(gbps == 100) == 320 and np.count_nonzero(gbps == 400) == 160
    np.testing.assert_allclose(topo.latency, 1e-6)
    assert np.bincount(topo.node_tier).tolist() == [320, 20, 20, 16]
    # cable lines as in the file (ns-3 ids; hosts 0..319 keep theirs)
    ids = np.asarray(topo.params["ns3_id"])
    src, dst = ids[topo.link_src[::2]], ids[topo.link_dst[::2]]
    cables = set(zip(src.tolist(), dst.tolist()))
    for line in [(0, 320), (15, 320), (16, 321), (319, 339), (320, 340), (321, 343),
                 (339, 359), (340, 360), (341, 367), (344, 361), (359, 375)]:
        assert line in cables, line
    assert (320, 344) not in cables  # ToR 320 (pod 0) has no uplink into pod 1
    # every switch has as much capacity up as down: no oversubscription
    up = np.bincount(topo.link_src, weights=topo.capacity * (
        topo.node_tier[topo.link_dst] > topo.node_tier[topo.link_src]), minlength=376)
    down = np.bincount(topo.link_src, weights=topo.capacity * (
        topo.node_tier[topo.link_dst] < topo.node_tier[topo.link_src]), minlength=376)
    tor_agg = (topo.node_tier == 1) | (topo.node_tier == 2)
    np.testing.assert_allclose(up[tor_agg], down[tor_agg])
    np.testing.assert_allclose(topo.bisection_bandwidth(), 160 * 100e9 / 8)
    # equal-cost paths: same ToR 1, same pod 4, other pod 16 (4 aggs x 4 cores)
    ps = fj.shortest_paths(topo, [0, 0, 0], [1, 20, 100], max_paths=32)
    np.testing.assert_array_equal(ps.n_paths, [1, 4, 16])
    np.testing.assert_allclose(ps.latency(topo)[:, 0], [2e-6, 4e-6, 6e-6])


def test_hpcc_fat_tree_speeds_are_parameters():
    topo = fj.hpcc_fat_tree(host_gbps=25, fabric_gbps=100, latency_us=2)
    gbps = sorted(set(np.round(topo.capacity * 8 / 1e9).tolist()))
    assert gbps == [25, 100]
    np.testing.assert_allclose(topo.latency, 2e-6)
