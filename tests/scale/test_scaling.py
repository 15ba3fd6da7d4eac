"""The all-reduce sweep (fabric_jax.scale): collectives through the fluid model, the ideal
fabric, radix.

Closed form (Patarasuk & Yuan, JPDC 2009; NCCL ring): an uncontended ring all-reduce
of ``S`` bytes over ``n`` ranks takes ``base + 2 (n-1) (alpha + S / (n B))`` where
``base`` is the protocol's launch latency, ``alpha`` the per-step latency (protocol
step + the server's PCIe hops + the fabric path's one-way latency) and ``B`` the
effective NIC rate (line rate x NCCL's network efficiency).
"""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import collectives as col
from fabric_jax import scale, systems
from fabric_jax.collectives import LINK_EFFICIENCY, PROTOCOLS
from fabric_jax.fabrics import get_fabric
from fabric_jax.paths import shortest_paths
from fabric_jax.fabric_sim import flow_line_rate, simulate_paths
from fabric_jax.topology import leaf_spine

LINE = 400e9 / 8   # hgx_h100 NIC line rate, bytes/s


def _ring_case():
    # 4 servers on one rail leaf; ranks = GPU 0 of each server: a 4-rank ring on rail 0
    topo = systems.build("hgx_h100", 4, servers_per_leaf=4)
    return topo, np.arange(4) * 8


@pytest.mark.parametrize("preset", ["infiniband", "roce"])
@pytest.mark.slow
def test_uncontended_ring_matches_closed_form(preset):
    topo, hosts = _ring_case()
    fab = get_fabric(preset)
    n, S = 4, 8e6
    plan = col.build_plan(topo, "all_reduce", S, hosts=hosts, algorithm="ring", fabric=fab)
    assert plan.n_flows == 2 * (n - 1) * n            # one channel (one GPU per server)
    res = scale.simulate_plan_fluid(plan, topo, fab, dt=0.25e-6, n_steps=2000)
    pf = scale.plan_flows(plan, topo, fab)
    proto = PROTOCOLS["Simple"]
    # path GPU -> NIC -> rail leaf -> NIC -> GPU: 2 fabric links with the preset's
    # device latencies, 2 PCIe hops of the topology
    path = np.asarray(shortest_paths(topo, [hosts[0]], [hosts[1]]).links)[0, 0]
    path = path[path >= 0]
    one_way = float(np.sum(fab.link_latency(topo)[path] * (col.link_classes(topo)[path] == 0)))
    pcie = float(np.sum(topo.latency[path] * (col.link_classes(topo)[path] == 2)))
    alpha = proto.net_step_us * 1e-6 + pcie + one_way
    B = LINK_EFFICIENCY["net"] * LINE
    closed = proto.base_latency_us * 1e-6 + 2 * (n - 1) * (alpha + S / (n * B))
    t = float(np.max(res.finish))
    assert t == pytest.approx(closed, rel=0.03)
    assert t >= closed * (1 - 1e-3)                  # the fluid never beats the closed form
    # every transfer's delay is its protocol step (+ launch on the first) + PCIe hops
    assert np.allclose(np.sort(np.unique(np.round(pf.delay, 9))),
                       np.round([proto.net_step_us * 1e-6 + pcie,
                                 (proto.net_step_us + proto.base_latency_us) * 1e-6 + pcie],
                                9))
    # the ideal fabric runs the same DAG with the plan's own latencies: the event
    # engine's answer for the plan (collectives.simulate_plan) on a crossbar
    ideal = scale.simulate_plan_ideal(plan, topo)
    assert float(np.max(ideal)) == pytest.approx(col.simulate_plan(plan, topo).time_s,
                                                        rel=1e-6)
    # side by side with another plan (block-diagonal batch, one compile): the same run
    if preset == "roce":
        topo2 = systems.build("hgx_h100", 2, servers_per_leaf=1)
        plan2 = col.build_plan(topo2, "all_reduce", 2e6, algorithm="nvls_tree", fabric=fab)
        both = scale.simulate_plans_fluid(
            [(plan2, topo2, scale.plan_flows(plan2, topo2, fab)), (plan, topo, pf)], fab,
            dt=0.25e-6, n_steps=2000)
        np.testing.assert_allclose(both[1][1], np.asarray(res.finish), rtol=1e-4)
    # per-rank completion: every rank receives its last step at the end
    per_rank = scale.rank_completion(plan, topo, np.asarray(res.finish), hosts)
    assert np.all(per_rank <= t) and np.max(per_rank) == t


def test_rank_completion_and_stats_definitions():
    topo, hosts = _ring_case()
    plan = col.build_plan(topo, "all_reduce", 1e6, hosts=hosts, algorithm="ring")
    rng = np.random.default_rng(0)
    finish = rng.uniform(0, 1e-3, plan.n_flows)
    per_rank = scale.rank_completion(plan, topo, finish)
    # NumPy oracle: last finish of a transfer whose destination is each GPU
    links = np.asarray(plan.links)
    for h in hosts:
        into = (links >= 0) & (topo.link_dst[np.maximum(links, 0)] == topo.hosts[h])
        assert per_rank[h] == pytest.approx(finish[into.any(1)].max())
    # hosts not in the collective receive nothing
    assert np.all(np.isneginf(np.delete(per_rank, hosts)))
    st = scale.completion_stats(plan, topo, finish)
    ranks = per_rank[np.isfinite(per_rank)]
    assert st["p99_completion_time"] == pytest.approx(np.percentile(ranks, 99))
    assert st["p50_completion_time"] == pytest.approx(np.percentile(ranks, 50))
    assert st["completion_time"] == ranks.max()
    # the ring moves 2 (n-1)/n S through each NIC each way: line-rate time
    assert scale.nic_ideal_time(plan, topo) == pytest.approx(2 * 3 / 4 * 1e6 / LINE)


def test_multi_plane_line_rate_is_the_whole_nic():
    """A flow sprayed over two planes runs at the NIC's full rate, not one plane's share
    (fluid's default line rate, the smallest capacity on any candidate link, capped it at
    half); an ECMP flow pinned to one plane gets that plane's port."""
    topo = leaf_spine(2, 2, 1, planes=2, link_gbps=100)    # 2 x 50G ports per host
    paths = shortest_paths(topo, [0], [1])
    assert paths.max_paths == 4                             # 2 spines x 2 planes
    S = 2e6
    spray = get_fabric("uec", cc="none", flow_control="none")
    res = simulate_paths(topo, paths, spray, np.array([S]), dt=1e-6, n_steps=600)
    lat = float(np.mean(spray.link_latency(topo)[np.asarray(paths.links)[0, 0]]) * 3)
    assert float(res.finish[0]) == pytest.approx(S / 12.5e9 + lat, rel=0.03)
    even = np.full((1, 4), 0.25)
    assert flow_line_rate(paths, even, topo.capacity)[0] == pytest.approx(12.5e9)
    one = np.array([[1.0, 0, 0, 0]])
    assert flow_line_rate(paths, one, topo.capacity)[0] == pytest.approx(6.25e9)
    ecmp = get_fabric("roce", cc="none", flow_control="none", reorder=True)
    res = simulate_paths(topo, paths, ecmp, np.array([S]), dt=1e-6, n_steps=600)
    assert float(res.finish[0]) == pytest.approx(S / 6.25e9 + lat, rel=0.03)


def test_flow_line_rate_single_plane_is_the_port():
    topo = leaf_spine(2, 4, 2, link_gbps=100, oversubscription=2.0)   # 4 x 25G uplinks
    paths = shortest_paths(topo, [0, 0], [1, 2])
    pm = np.asarray(paths.path_mask, float)
    rate = flow_line_rate(paths, pm / pm.sum(1, keepdims=True), topo.capacity)
    # same leaf: the NIC port; across: 4 uplinks of 12.5e9 / 2 = 6.25 GB/s each = 25 GB/s
    # cut at the spine hop, above the 12.5 GB/s port
    assert rate == pytest.approx([12.5e9, 12.5e9])
    one = np.zeros_like(pm)
    one[:, 0] = 1
    assert flow_line_rate(paths, one, topo.capacity)[1] == pytest.approx(
        float(np.min(topo.capacity[np.asarray(paths.links)[1, 0][:3]])))


@pytest.mark.parametrize("beyond", ["tiers", "planes"])
def test_sweep_topology_grows_beyond_the_radix(beyond):
    # 8 servers in 4 scalable units of 2: rail leaves have 2 down + 2 up ports, a spine
    # 8 rails x 4 units = 32 leaf cables; radix 16 refuses the two-tier build
    with pytest.raises(ValueError, match="switch_radix"):
        systems.build("hgx_h100", 8, servers_per_leaf=2, switch_radix=16)
    topo = scale.sweep_topology(64, servers_per_leaf=2, switch_radix=16,
                                  beyond_radix=beyond)
    assert topo.n_hosts == 64
    if beyond == "tiers":
        assert topo.params["tiers"] == 3 and topo.params["planes"] == 1
    else:
        assert topo.params["planes"] >= 2 and topo.params["tiers"] == 2
    # within the radix the two-tier build is kept
    small = scale.sweep_topology(64, servers_per_leaf=2, switch_radix=128)
    assert small.params["tiers"] == 2 and small.params["planes"] == 1
    with pytest.raises(ValueError, match="beyond_radix"):
        scale.sweep_topology(64, beyond_radix="bigger")
    with pytest.raises(ValueError, match="n_gpus"):
        scale.sweep_topology(12)


def test_choose_algorithm_per_preset():
    topo = systems.build("hgx_h100", 4, servers_per_leaf=2)
    ib = scale.choose_algorithm(topo, "infiniband", 64e6)
    roce = scale.choose_algorithm(topo, "roce", 64e6)
    assert roce[0] == "nvls_tree"                       # no SHARP on Ethernet
    assert ib[0] in ("sharp", "nvls_tree")
    assert scale.choose_algorithm(topo, "infiniband", 64e6, algorithms=("sharp",))[0] \
        == "sharp"
    assert scale.choose_algorithm(topo, "roce", 1e6, algorithms=("ring",),
                                    protocol="LL128") == ("ring", "LL128")


@pytest.fixture(scope="module")
def point():
    # 16 GPUs (2 servers per leaf: two leaves per rail, so the collective crosses spines),
    # one fabric; two fabrics over 16 and 32 GPUs are the slow test_scaling_curves_...
    topo = scale.sweep_topology(16, servers_per_leaf=2)
    return topo, scale.scaling_point(topo, ["infiniband"], 4e6,
                                       algorithms=("nvls_tree", "sharp"), dt=1e-6)


@pytest.mark.slow
def test_scaling_point_p99_ideal_and_bandwidth(point):
    topo, pt = point
    assert pt["fabrics"]["infiniband"]["algorithm"] in ("sharp", "nvls_tree")
    for name, st in pt["fabrics"].items():
        assert st["unfinished_transfers"] == 0
        assert st["p99_completion_time"] >= st["p50_completion_time"] > 0
        assert st["completion_time"] >= st["p99_completion_time"]
        # the ideal fabric (crossbar, ideal CC, the plan's own latencies) is a lower bound
        assert st["ideal_completion_time"] <= st["completion_time"] * (1 + 1e-3)
        assert st["ideal_p50_completion_time"] <= st["p50_completion_time"] * (1 + 1e-3)
        assert 0 < st["effective_bandwidth"] < 1
        # effective bandwidth = line-rate time / completion time (metrics' definition)
        base = pt["ideal"][name]
        assert base["algorithm"] == st["algorithm"]
        assert base["completion_time"] == st["ideal_completion_time"]
        assert st["effective_bandwidth"] <= base["effective_bandwidth"] * (1 + 1e-3)
        assert st["effective_bandwidth"] == pytest.approx(
            base["completion_time"] * base["effective_bandwidth"] / st["completion_time"],
            rel=1e-6)
        assert st["ranks"] == topo.n_hosts


@pytest.mark.slow
def test_scaling_curves_keys_and_ideal_bound():
    topos = [scale.sweep_topology(g, servers_per_leaf=2) for g in (16, 32)]
    out = scale.scaling_curves(topos, ["infiniband", "uec"], 8e6,
                                 algorithms=("nvls_tree", "sharp"))
    assert out["gpus"] == [16, 32]
    for name, v in out["fabrics"].items():
        for k in scale.CURVE_KEYS + ("all_reduce_completion_time",
                                      "p99_collective_completion_time"):
            assert len(v[k]) == 2, k
        assert v["all_reduce_completion_time"] == v["completion_time"]
        # a lower bound up to the fluid model's O(dt) finish error (one step, dt = 1 us)
        assert all(i <= t * (1 + 1e-3) + 1e-6
                   for i, t in zip(out["ideal"][name]["completion_time"],
                                   v["completion_time"]))
