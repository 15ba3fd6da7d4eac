"""Flow entropy at scale (:mod:`fabric_jax.scale`): QPs per connection and what the
ECMP hash sees of them, tiered hashing and its polarisation on three tiers, and the
completion efficiency of a collective against the balls-into-bins closed forms."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fabric_jax import scale as sc
from fabric_jax.fabrics import get_fabric
from fabric_jax.scenario import ScenarioError
from fabric_jax.systems import build, get_system

NIC = 50e9                     # 400 Gb/s, bytes/s


def _spines_of(topo, links):
    """``[flows]`` the switch each two-tier path climbs to (-1: same leaf)."""
    dst = np.asarray(topo.link_dst)
    return np.where(links[:, 2] >= 0, dst[np.maximum(links[:, 1], 0)], -1)


def _three_tier():
    # 8 servers x 8 rails, units of 2 servers, pods of 2 units: each leaf has S1 = 2
    # uplinks (its pod's spines), each spine S2 = 16 (super-spines)
    return build(get_system("hgx_h100"), 8, switch_radix=None, servers_per_leaf=2,
                 tiers=3, groups_per_pod=2, gpus_per_server=None)


def _cross_pod(topo, size):
    """Every NIC of pod 0 to the same-rail NIC four servers on, and back: every
    connection crosses the super-spines."""
    g = 8
    srv = np.arange(8)
    src = (srv[:, None] * g + np.arange(g)).ravel()
    dst = (((srv + 4) % 8)[:, None] * g + np.arange(g)).ravel()
    return sc._validate._flows(src, dst, size, topo.n_hosts, g)


# ------------------------------------------------------------------ QPs
@pytest.mark.parametrize("qps", [1, 2, 3, 8, 11])
def test_distinct_paths_per_connection(qps):
    # ring shift of one unit on rail 0 of 1,024 GPUs: 64 spines.  qp_spread: the
    # connection's QPs take min(N, K) distinct spines (hand count); connection: one;
    # qp: each QP hashed alone, K (1 - (1 - 1/K)^N) distinct on average (128
    # connections: standard error < 0.2)
    topo = sc.scale_topology(1024)
    K = sc.clos_paths(topo).n_spines
    assert K == 64
    flows = sc.ring_shift(topo, 1e6)
    distinct = {}
    for mode in sc.HASH_FIELDS:
        split, ps = sc.route_flows(flows, topo, "roce", qps=qps, hash_fields=mode)
        assert split.n_flows == qps * flows.n_flows
        sp = _spines_of(topo, np.asarray(ps.links)[:, 0, :]).reshape(flows.n_flows, qps)
        distinct[mode] = np.array([np.unique(r).size for r in sp])
    assert np.all(distinct["qp_spread"] == min(qps, K))
    assert np.all(distinct["connection"] == 1)
    assert np.all(distinct["qp"] <= min(qps, K))
    assert distinct["qp"].mean() == pytest.approx(sc.expected_distinct(qps, K), abs=0.6)
    # one QP is the connection: every mode routes it as without QPs
    if qps == 1:
        _, base = sc.route_flows(flows, topo, "roce")
        for mode in sc.HASH_FIELDS:
            _, ps = sc.route_flows(flows, topo, "roce", hash_fields=mode)
            assert np.array_equal(np.asarray(ps.links), np.asarray(base.links))


def test_qps_conserve_bytes_and_keep_dependencies():
    # the step of 32 GPUs on 2 planes (16 GPUs per unit, radix 8): each flow becomes
    # P x Q rows of size / (P Q); a row that waited for a flow waits for every row of it
    mdl, plan = sc.scale_plan(n_gpus=32, pp=2)
    st = sc.step_flows(mdl, plan, slice_time=30e-6)
    topo = sc.scale_topology(32, switch_radix=8)
    P = sc.clos_paths(topo).n_planes
    Q = 3
    rows, ps = sc.route_flows(st, topo, "roce", qps=Q)
    n = P * Q
    assert rows.n_flows == n * st.n_flows
    np.testing.assert_allclose(rows.size.reshape(-1, n).sum(axis=1), st.size)
    assert np.all(rows.src.reshape(-1, n) == st.src[:, None])
    assert np.all(rows.phase.reshape(-1, n) == st.phase[:, None])
    for f in np.flatnonzero((st.deps >= 0).any(axis=1))[:50]:
        want = sorted(int(d) * n + j for d in st.deps[f] if d >= 0 for j in range(n))
        for r in range(f * n, f * n + n):
            assert sorted(int(d) for d in rows.deps[r] if d >= 0) == want
    # adaptive routing / spraying: the QPs share the candidate set; one flow per
    # connection, routed as without QPs
    for preset in ("spectrum_x", "uec"):
        a, pa = sc.route_flows(st, topo, preset, qps=Q)
        b, pb = sc.route_flows(st, topo, preset)
        assert a.n_flows == st.n_flows
        assert np.array_equal(np.asarray(pa.links), np.asarray(pb.links))


def test_completion_metrics_read_the_last_qp():
    # two connections of 1 MB of one phase, 2 QPs each, on four NICs: each NIC's 1 MB
    # at 50 GB/s is 20 us; connection 0's QPs end at 30 and 50 us, connection 1's both
    # at 20 us: efficiency 20 / 50 = 0.4 (the last QP), shares 0.4 and 1
    flows = sc._validate._flows([0, 1], [2, 3], 1e6, 4, 4).stripes(2)
    run = SimpleNamespace(flows=flows, split=2, start=np.zeros(4),
                          finish=np.array([30e-6, 50e-6, 20e-6, 20e-6]))
    m = sc.completion_metrics(run, NIC)
    assert m["completion_efficiency_phases"]["ep_all_to_all"] == pytest.approx(0.4)
    assert m["completion_efficiency"] == pytest.approx(0.4)
    assert m["mean_flow_share"] == pytest.approx((0.4 + 1.0) / 2)
    # an unfinished QP makes its phase 0
    run.finish = np.array([30e-6, np.inf, 20e-6, 20e-6])
    assert sc.completion_metrics(run, NIC)["completion_efficiency"] == 0.0


def test_expected_max_load_closed_form_against_the_hash():
    # the leaves' hashes of a ring shift (8 flows of each of 2 leaves onto 8 spines, 128
    # GPUs at radix 16) over 300 seeds: the mean of the fullest uplink's load is the
    # exact expectation (2.597; 600 samples, standard error ~0.03)
    topo = sc.scale_topology(128, switch_radix=16)
    K = sc.clos_paths(topo).n_spines
    flows = sc.ring_shift(topo, 1e6)
    loads = []
    for seed in range(300):
        _, ps = sc.route_flows(flows, topo, "roce", seed=seed)
        up = np.asarray(ps.links)[:, 0, 1]
        leaf = flows.src // (8 * 8)
        for lf in np.unique(leaf):
            loads.append(np.bincount(up[leaf == lf]).max())
    assert sc.expected_max_load(K, K) == pytest.approx(2.5972, abs=1e-3)
    assert np.mean(loads) == pytest.approx(sc.expected_max_load(K, K), abs=0.1)
    cdf = sc.max_load_distribution(K, K)
    assert cdf[0] == 0.0 and cdf[-1] == pytest.approx(1.0)
    assert cdf[1] == pytest.approx(np.prod(1 - np.arange(K) / K))    # all distinct
    assert sc.expected_max_load(5, 1) == 5.0
    # the fullest of two leaves' uplinks: P(max <= k)^2 (hand: 2 balls, 2 bins per
    # leaf, max 2 with probability 1/2 each, so 1 - 1/4 of the pairs have a 2)
    assert sc.expected_max_load(2, 2) == pytest.approx(1.5)
    assert sc.expected_max_load(2, 2, groups=2) == pytest.approx(1 + 0.75)
    with pytest.raises(ValueError, match="balls, bins"):
        sc.max_load_distribution(4, 0)


@pytest.mark.slow
def test_completion_efficiency_is_one_over_the_max_load():
    # the ring shift above under routing alone (no CC, no flow control): a flow on an
    # uplink with L flows runs at C / L, so it takes L s / C plus its path's zero-load
    # latency; the collective's completion efficiency is (s / C) over the longest of
    # those and its mean share the mean of (s / C) over each (hand counts of the loads
    # from the paths; 1 / max load and the mean of 1 / load but for the latency).
    # Spreading K QPs over the K uplinks reaches line rate; one port per connection adds
    # nothing.  Tolerance 2 %: dt against the flows' 40 to 160 us.
    topo = sc.scale_topology(128, switch_radix=16)
    K = sc.clos_paths(topo).n_spines
    size, dt = 2e6, 0.5e-6
    flows = sc.ring_shift(topo, size)
    fab = get_fabric("roce", cc="none", flow_control="none")
    _, ps = sc.route_flows(flows, topo, fab)
    up = np.asarray(ps.links)[:, 0, 1]
    load = np.bincount(up)[up]
    got, lat = {}, None
    for qps, mode in ((1, "qp"), (K, "qp_spread"), (4, "connection")):
        run = sc.simulate_rails(flows, topo, fab, rails=(0,), dt=dt,
                                n_steps=int(5 * size / NIC / dt), qps=qps,
                                hash_fields=mode)
        assert np.all(np.isfinite(run.finish))
        got[mode] = sc.completion_metrics(run, NIC)
        lat = run.latency if mode == "qp" else lat
    t_ideal = size / NIC
    took = load * t_ideal + lat
    assert got["qp"]["completion_efficiency"] == pytest.approx(t_ideal / took.max(),
                                                               rel=0.02)
    assert got["qp"]["mean_flow_share"] == pytest.approx(np.mean(t_ideal / took), rel=0.02)
    assert t_ideal / took.max() == pytest.approx(1 / load.max(), rel=0.05)
    assert got["qp_spread"]["completion_efficiency"] == pytest.approx(
        t_ideal / (t_ideal + lat.max()), rel=0.02)
    assert got["connection"]["completion_efficiency"] == pytest.approx(
        got["qp"]["completion_efficiency"], rel=0.01)


# ------------------------------------------------------------------ polarisation
def test_tiered_hash_paths_and_polarised_uplinks_closed_form():
    # three tiers, S1 = 2, S2 = 16: independent hashing reaches every spine uplink;
    # the same hash at both tiers reaches S2 / gcd(S1, S2) = 8 of each spine's 16
    topo = _three_tier()
    tab = sc.tier_paths(topo)
    S1, S2 = tab.n_leaf_up, tab.n_spine_up
    assert (S1, S2) == (2, 16)
    assert sc.polarized_uplinks(S1, S2) == 8 and sc.polarized_uplinks(64, 64) == 1
    flows = _cross_pod(topo, 1e6)
    src, dst = np.asarray(topo.link_src), np.asarray(topo.link_dst)
    tier = np.asarray(topo.node_tier)
    for polarized in (False, True):
        rows, ps = sc.route_flows(flows, topo, "roce", qps=64, polarized=polarized)
        L = np.asarray(ps.links)[:, 0, :]
        # every path is connected and ends at the flow's NIC
        for i in range(5):
            m = L[:, i + 1] >= 0
            assert np.all(dst[L[m, i]] == src[L[m, i + 1]])
        assert np.all(dst[L[:, 5]] == np.asarray(topo.hosts)[rows.dst])
        up2 = L[:, 2]
        assert np.all(tier[src[up2]] == 2) and np.all(tier[dst[up2]] == 3)
        per_spine = np.array([np.unique(up2[src[up2] == s]).size
                              for s in np.unique(src[up2])])
        assert np.all(per_spine == (sc.polarized_uplinks(S1, S2) if polarized else S2))
    # a two-tier (dual-plane) build hashes once: polarisation changes nothing
    two = build(get_system("hgx_h100"), 8, switch_radix=None, servers_per_leaf=2,
                planes=2, gpus_per_server=None)
    _, a = sc.route_flows(flows, two, "roce", qps=4)
    _, b = sc.route_flows(flows, two, "roce", qps=4, polarized=True)
    assert np.array_equal(np.asarray(a.links), np.asarray(b.links))


@pytest.mark.slow
def test_polarisation_loses_throughput_the_dual_plane_build_recovers():
    # every NIC of one pod sends 2 MB across pods (64 connections, 16 QPs each) under
    # routing alone: the pod's 32 spine uplinks carry it at line rate; polarised, each
    # spine reaches 8 of its 16, so the cross-pod throughput is at most 1 / gcd(2, 16) =
    # 0.5 of line rate; the dual-plane two-tier build of the same servers hashes once
    # and carries it near line rate (the QPs' balls-into-bins imbalance is the gap;
    # independent hashing on three tiers: 0.85)
    size = 2e6
    fab = get_fabric("roce", cc="none", flow_control="none")
    t = size / NIC
    eff = {}
    for name, topo, pol in (("independent", _three_tier(), False),
                            ("polarized", _three_tier(), True),
                            ("dual_plane", build(get_system("hgx_h100"), 8,
                                                 switch_radix=None, servers_per_leaf=2,
                                                 planes=2, gpus_per_server=None), True)):
        flows = _cross_pod(topo, size)
        run = sc.simulate_rails(flows, topo, fab, rails=None, dt=0.25e-6,
                                n_steps=int(4 * t / 0.25e-6), qps=16, polarized=pol)
        eff[name] = sc.window_efficiency(run, NIC, 0.2 * t, 0.4 * t)
    # (window: after the paths' latency, before the first QP finishes; the 8 reachable
    # uplinks of each spine carry 22 to 46 QPs, all saturated: the bound is met)
    bound = 1 / np.gcd(2, 16)
    assert eff["polarized"] == pytest.approx(bound, abs=0.02)
    assert eff["independent"] >= 0.8 and eff["dual_plane"] >= 0.8


# ------------------------------------------------------------------ inputs
def test_rail_reduction_with_qps_inputs_are_the_full_runs():
    # rail 2 routed alone with its global flow ids gets the rows of the full routing
    # (QPs hashed by global id); spraying keeps the reduction exact with QPs
    mdl, plan = sc.scale_plan(n_gpus=32, pp=2)
    st = sc.step_flows(mdl, plan, slice_time=30e-6)
    topo = sc.scale_topology(32, switch_radix=8)
    for preset in ("roce", "spectrum_x"):
        full_rows, full = sc.route_flows(st, topo, preset, qps=4)
        ids = np.flatnonzero(st.rail == 2)
        sub_rows, sub = sc.route_flows(st.subset(ids), topo, preset, flow_ids=ids, qps=4)
        keep = np.flatnonzero(full_rows.rail == 2)
        assert np.array_equal(np.asarray(sub.links), np.asarray(full.links)[keep])
        assert np.array_equal(sub_rows.size, full_rows.size[keep])


@pytest.mark.slow
def test_rail_reduction_with_qps_equals_the_full_run():
    # 64 GPUs at radix 8 (traffic over the spines): spectrum_x with 4 QPs, rail 0 alone
    # equals rail 0 of the full run and every rail is alike (exact); roce with 2 QPs,
    # every rail simulated alone equals the full run rail by rail
    mdl, plan = sc.scale_plan(n_gpus=64, pp=2)
    st = sc.step_flows(mdl, plan, slice_time=20e-6)
    topo = sc.scale_topology(64, switch_radix=8)
    kw = dict(dt=0.5e-6, n_steps=1600)
    full = sc.simulate_rails(st, topo, "spectrum_x", rails=None, qps=4, **kw)
    one = sc.simulate_rails(st, topo, "spectrum_x", rails=(0,), qps=4, **kw)
    assert np.all(np.isfinite(full.finish))
    np.testing.assert_allclose(one.finish, full.finish[full.flows.rail == 0], atol=kw["dt"])
    for r in range(1, 8):
        np.testing.assert_allclose(full.finish[full.flows.rail == r],
                                   full.finish[full.flows.rail == 0], atol=kw["dt"])
    assert sc.rail_reduction(st, topo, "adaptive", (0,), 4)["exact"]
    full = sc.simulate_rails(st, topo, "roce", rails=None, qps=2, **kw)
    for r in (0, 5):
        alone = sc.simulate_rails(st, topo, "roce", rails=(r,), qps=2, **kw)
        np.testing.assert_allclose(alone.finish, full.finish[full.flows.rail == r],
                                   atol=kw["dt"])


def test_bad_qps_and_hash_are_refused():
    with pytest.raises(ScenarioError, match="--qps"):
        sc.scale_scenarios({"topology.gpus": [64], "fabrics.qps": 0}, flags=sc.SCALE_FLAGS)
    with pytest.raises(ScenarioError, match="--hash"):
        sc.scale_scenarios({"topology.gpus": [64], "fabrics.hash": "ip"},
                           flags=sc.SCALE_FLAGS)
    topo = sc.scale_topology(32, switch_radix=8)
    flows = sc.ring_shift(topo, 1e6)
    with pytest.raises(ValueError, match="qps"):
        sc.route_flows(flows, topo, "roce", qps=0)
    with pytest.raises(ValueError, match="hash_fields"):
        sc.route_flows(flows, topo, "roce", hash_fields="ip")


@pytest.mark.parametrize("argv,flag", [(["--qps", "0"], "--qps"), (["--qps", "-2"], "--qps"),
                                       (["--hash", "ip"], "--hash")])
def test_cli_bad_qps_exits_2_naming_the_flag(argv, flag, capsys):
    from fabric_jax.cli import main
    assert main(["scale", "--gpus", "16", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def test_scenario_carries_qps_hash_and_polarisation_to_the_point():
    scn, = sc.scale_scenarios({"topology.gpus": [64], "fabrics.qps": "4",
                               "fabrics.hash": "qp_spread",
                               "fabrics.hash_polarization": True}, flags=sc.SCALE_FLAGS)
    args = sc.point_arguments(scn)
    assert (args["qps"], args["hash_fields"], args["hash_polarization"]) == (
        4, "qp_spread", True)
    default, = sc.scale_scenarios({"topology.gpus": [64]})
    args = sc.point_arguments(default)
    assert (args["qps"], args["hash_fields"], args["hash_polarization"]) == (
        sc.DEFAULT_QPS, sc.DEFAULT_HASH, False) == (1, "qp", False)


@pytest.mark.slow
def test_polarisation_slows_the_three_tier_step_and_not_the_planes():
    # 1,024 GPUs of 16-port switches: three tiers with S1 = S2 = 8, so polarised hashing
    # leaves each spine one uplink (8 / gcd(8, 8)); the step's cross-pod flows (pipeline
    # sends, DP rings) then finish far slower (measured: 418 -> 463 ms, completion
    # efficiency 0.68 -> 0.36).  The multi-plane build of the same radix hashes once:
    # the flag changes nothing there.
    kw = dict(switch_radix=16, ideal=False, latency="none")
    tiers = sc.scale_topology(1024, switch_radix=16, beyond_radix="tiers")
    tab = sc.tier_paths(tiers)
    assert sc.polarized_uplinks(tab.n_leaf_up, tab.n_spine_up) == 1
    ind = sc.scale_point(1024, ["roce"], beyond_radix="tiers", **kw)["fabrics"]["roce"]
    pol = sc.scale_point(1024, ["roce"], beyond_radix="tiers", hash_polarization=True,
                         **kw)["fabrics"]["roce"]
    assert pol["step_time"] > 1.05 * ind["step_time"]
    assert pol["completion_efficiency"] < 0.75 * ind["completion_efficiency"]
    planes = [sc.scale_point(1024, ["roce"], beyond_radix="planes", hash_polarization=p,
                             **kw)["fabrics"]["roce"] for p in (False, True)]
    assert planes[0]["step_time"] == planes[1]["step_time"]
    assert planes[0]["completion_efficiency"] == planes[1]["completion_efficiency"]
