"""One job on a busy cluster (:mod:`fabric_jax.scale._cluster`): the churn of other
jobs, drained and spare servers, first fit against the fewest scalable units, the
host-side cross-leaf share, the flags' refusals, and the rail reduction against the
full run on a fragmented placement."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fabric_jax import scale as sc
from fabric_jax.fabrics import get_fabric
from fabric_jax.scenario import ScenarioError


# ------------------------------------------------------------------ the churn
def test_churn_occupancy_drained_spares_and_no_double_allocation():
    N, need = 400, 200
    occ = []
    for seed in range(6):
        c = sc.cluster_churn(N, need, occupancy=0.8, warmup=30.0, seed=seed)
        st = c["state"]
        # drained and spare counts: round(2 % of 400) = 8 each, exactly
        assert int(np.sum(st == 1)) == 8 and int(np.sum(st == 2)) == 8
        assert c["serviceable"] == N - 16 == sc.serviceable_servers(N)
        # the running jobs' servers: pairwise disjoint, exactly the busy ones, never a
        # drained or spare server
        held = np.concatenate(c["held"]) if c["held"] else np.zeros(0, int)
        assert held.size == np.unique(held).size
        assert np.array_equal(np.sort(held), np.flatnonzero(st == 3))
        # the job found its servers free
        assert int(np.sum(st == 0)) >= need
        occ.append(c["occupancy"])
    # the time-averaged occupancy near the offered load (blocking only lowers it); the
    # standard error of the mean over 6 seeds x 15 holding times is ~ 0.02
    assert 0.7 <= np.mean(occ) <= 0.85, occ
    # an idle cluster stays idle
    idle = sc.cluster_churn(N, need, occupancy=0.0, seed=0)
    assert idle["other_jobs"] == 0 and not np.any(idle["state"] == 3)


def test_churn_is_seeded():
    a = sc.cluster_churn(256, 128, seed=5)
    b = sc.cluster_churn(256, 128, seed=5)
    c = sc.cluster_churn(256, 128, seed=6)
    assert np.array_equal(a["state"], b["state"]) and a["occupancy"] == b["occupancy"]
    assert not np.array_equal(a["state"], c["state"])
    f1, _ = sc.cluster_servers(64, 96, "fragmented", servers_per_leaf=16, seed=3)
    f2, _ = sc.cluster_servers(64, 96, "fragmented", servers_per_leaf=16, seed=3)
    assert np.array_equal(f1, f2)


def test_churn_bad_input():
    with pytest.raises(ValueError, match="cluster_gpus"):
        sc.cluster_churn(100, 97)                  # 96 serviceable
    with pytest.raises(ValueError, match="occupancy"):
        sc.cluster_churn(100, 10, occupancy=1.2)


# ------------------------------------------------------------------ placements
def test_fewest_units_hand_example_is_the_minimum():
    # 4 units of 4 servers; free: unit 0 two, unit 1 four, unit 2 three, unit 3 one
    free = np.zeros(16, bool)
    free[[1, 3, 4, 5, 6, 7, 8, 10, 11, 13]] = True
    got = sc.fewest_units(free, 4, 6)
    # unit 1 whole, then the unit that fits the last 2 best: unit 0 (2 free), not 2 (3)
    assert got.tolist() == [1, 3, 4, 5, 6, 7]
    # brute force: no single unit holds 6 free servers, so 2 units is the least
    cnt = np.bincount(np.flatnonzero(free) // 4, minlength=4)
    least = min(m for m in range(1, 5) for comb in itertools.combinations(range(4), m)
                if cnt[list(comb)].sum() >= 6)
    assert np.unique(got // 4).size == least == 2
    with pytest.raises(ValueError, match="need"):
        sc.fewest_units(free, 4, 11)


def test_fragmented_first_fit_and_topology_aware_spans_no_more_units():
    for seed in range(5):
        frag, ff = sc.cluster_servers(96, 144, "fragmented", servers_per_leaf=16, seed=seed)
        topo, ft = sc.cluster_servers(96, 144, "topology_aware", servers_per_leaf=16,
                                      seed=seed)
        c = sc.cluster_churn(144, 96, seed=np.random.default_rng(seed))
        free = np.flatnonzero(c["state"] == 0)
        # first fit = the lowest free servers, in order
        assert frag.tolist() == free[:96].tolist()
        assert ff["other_job_servers"] == int(np.sum(c["state"] == 3))
        # topology aware: the same churn, waiting (departures only) for fewer units
        ca = sc.cluster_churn(144, 96, seed=np.random.default_rng(seed),
                              servers_per_unit=16, max_wait=1.0)
        assert np.array_equal(ca["state"] == 1, c["state"] == 1)      # same drains
        assert ca["wait"] >= c["wait"] and ft["wait"] == ca["wait"]
        held_a = set(np.flatnonzero(ca["state"] == 3).tolist())
        assert held_a <= set(np.flatnonzero(c["state"] == 3).tolist())  # only departures
        free_a = np.flatnonzero(ca["state"] == 0)
        assert set(topo.tolist()) <= set(free_a.tolist()) and np.all(np.diff(topo) > 0)
        # the fewest units its free servers allow (fullest units first), never more
        # than first fit's
        cnt = np.sort(np.bincount(free_a // 16, minlength=9))[::-1]
        least = int(np.searchsorted(np.cumsum(cnt), 96)) + 1
        assert ft["sus_spanned"] == least <= ff["sus_spanned"]
        assert ft["min_sus"] == 6
    # with no time to wait, the same cluster as first fit's
    _, f0 = sc.cluster_servers(96, 144, "topology_aware", servers_per_leaf=16, seed=0,
                               max_wait=0.0)
    assert f0["other_job_servers"] == sc.cluster_servers(
        96, 144, "fragmented", servers_per_leaf=16, seed=0)[1]["other_job_servers"]


def test_job_placements_on_a_larger_cluster():
    packed, f = sc.cluster_servers(4, 12, "packed", servers_per_leaf=4)
    assert packed.tolist() == [0, 1, 2, 3] and f["sus_spanned"] == 1
    spread, f = sc.cluster_servers(4, 12, "spread", servers_per_leaf=4)
    assert spread.tolist() == [1, 4, 7, 10] and f["sus_spanned"] == 3
    rnd, _ = sc.cluster_servers(4, 12, "random", servers_per_leaf=4, seed=1)
    assert np.unique(rnd).size == 4 and rnd.max() < 12
    with pytest.raises(ValueError, match="placement"):
        sc.cluster_servers(4, 12, "striped", servers_per_leaf=4)
    with pytest.raises(ValueError, match="cluster_gpus"):
        sc.cluster_servers(13, 12, "packed", servers_per_leaf=4)
    with pytest.raises(ValueError, match="placement"):       # several jobs: refused
        sc.job_servers(8, 2, "fragmented")
    assert sc.default_cluster_gpus(16384, 8) == 24576      # Llama 3's 16K of 24K
    assert sc.default_cluster_gpus(1024, 8) == 1536


def test_on_cluster_and_cross_leaf_share_against_a_loop():
    mdl, plan = sc.scale_plan(n_gpus=64)
    st = sc.step_flows(mdl, plan, slice_time=20e-6)
    srv = np.array([9, 2, 5, 11, 0, 7, 3, 6])
    moved = sc.on_cluster(st, srv)
    # NICs moved to the same rail of the cluster servers; ranks and sizes kept
    assert np.array_equal(moved.src, srv[st.src // 8] * 8 + st.src % 8)
    assert np.array_equal(moved.src_rank, st.src_rank)
    assert moved.n_gpus == 64 and np.array_equal(moved.size, st.size)
    # the share of bytes between different units of 4 servers, by a loop over flows
    tot = cross = 0.0
    for s, d, b in zip(moved.src, moved.dst, moved.size):
        tot += b
        cross += b if (s // 8) // 4 != (d // 8) // 4 else 0.0
    assert sc.cross_leaf_share(moved, 4) == pytest.approx(cross / tot, rel=1e-12)
    assert 0.0 < cross / tot < 1.0
    assert sc.cross_leaf_share(st, 8) == 0.0               # 8 servers under one leaf
    with pytest.raises(ValueError, match="servers"):
        sc.on_cluster(st, srv[:7])


# ------------------------------------------------------------------ flags
@pytest.mark.parametrize("argv,flag", [
    (["--placement", "fragmnted"], "--placement"),
    (["--placement", "fragmented", "--jobs", "2"], "--placement"),
    (["--placement", "topology_aware", "--job-gpus", "32,32"], "--placement"),
    (["--cluster-gpus", "128", "--jobs", "2"], "--cluster-gpus"),
    (["--cluster-gpus", "100"], "--cluster-gpus"),          # not whole servers
    (["--cluster-gpus", "32"], "--cluster-gpus"),           # smaller than the job
    (["--cluster-gpus", "1k"], "--cluster-gpus"),
    (["--placement", "fragmented", "--gpus", "32768"], "--cluster-gpus"),  # 1.5x > cap
    (["--placement", "fragmented", "--gpus", "2048", "--cluster-gpus", "2048"],
     "--cluster-gpus"),                                     # no room for drained/spares
])
def test_bad_placement_flags_exit_2_naming_the_flag(argv, flag, capsys):
    from fabric_jax.cli import main
    if "--gpus" not in argv:
        argv = ["--gpus", "64"] + argv
    assert main(["scale", "--fabrics", "roce"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err


def test_scenario_resolves_the_default_cluster():
    scn = sc.scale_scenarios({"topology.gpus": [1024, 4096],
                              "workload.placement": "fragmented"})
    assert [s.network.params["cluster_gpus"] for s in scn] == [1536, 6144]
    assert sc.scale_scenarios({"topology.gpus": [64]})[0].network.params[
        "cluster_gpus"] is None
    with pytest.raises(ScenarioError, match="cluster_gpus"):
        sc.scale_scenarios({"topology.gpus": [64], "topology.cluster_gpus": 32})


# ------------------------------------------------------------------ the runs
def _fragmented_point():
    # 64 GPUs on a 208-GPU cluster (26 servers: 1 drained, 1 spare, other jobs), units
    # of 8 servers
    return sc.build_point(64, placement="fragmented", cluster_gpus=208, switch_radix=16,
                          step_options=dict(slice_time=20e-6), latency="none")


def test_build_point_on_a_busy_cluster():
    topo, st, nic = _fragmented_point()
    cl = st.info["cluster"]
    assert topo.n_hosts == 208 and cl["drained_servers"] == 1 and cl["spare_servers"] == 1
    assert cl["sus_spanned"] >= 2 > cl["min_sus"] == 1      # the job is spread out
    used = np.unique(np.concatenate([st.src, st.dst]) // 8)
    assert used.size == 8 and used.max() < 26 and st.n_gpus == 64
    # the same flows on every rail: the reduction is exact where routing is alike
    assert sc.rail_reduction(st, topo, get_fabric("spectrum_x").routing, (0,), 4)["exact"]
    assert not sc.rail_reduction(st, topo, "ecmp", (0,), 4)["exact"]   # hashed: a sample
    # the job's flows move; the packed job on the same cluster spans one unit
    _, pk, _ = sc.build_point(64, placement="packed", cluster_gpus=208, switch_radix=16,
                              step_options=dict(slice_time=20e-6), latency="none")
    assert pk.info["cluster"]["sus_spanned"] == 1 and sc.cross_leaf_share(pk, 8) == 0.0
    assert np.array_equal(pk.size, st.size) and np.array_equal(pk.src_rank, st.src_rank)


@pytest.mark.slow
def test_rail_reduction_equals_full_run_fragmented():
    # rail 0 alone equals rail 0 of the full run on a fragmented job, and every rail
    # equals rail 0 (spraying over per-server-pair candidate sets)
    topo, st, nic = _fragmented_point()
    preset = "spectrum_x"
    assert get_fabric(preset).routing not in sc.HASHED_ROUTING
    kw = dict(dt=0.5e-6, n_steps=1600)
    full = sc.simulate_rails(st, topo, preset, rails=None, **kw)
    one = sc.simulate_rails(st, topo, preset, rails=(0,), **kw)
    assert np.all(np.isfinite(full.finish))
    per = [full.finish[full.flows.rail == r] for r in range(8)]
    for r in range(8):
        np.testing.assert_allclose(per[r], per[0], rtol=0, atol=kw["dt"])
    np.testing.assert_allclose(one.finish, per[0], rtol=0, atol=kw["dt"])
    assert np.mean(np.isclose(one.finish, per[0], rtol=1e-5, atol=0)) >= 0.95
    m_full = sc.point_metrics(full, st, topo, preset, nic, n_rails=8)
    m_one = sc.point_metrics(one, st, topo, preset, nic, n_rails=8)
    for key in ("step_time", "p50_completion", "p99_completion", "effective_bandwidth"):
        assert m_one[key] == pytest.approx(m_full[key], rel=1e-3), key
    red = sc.rail_reduction(st, topo, get_fabric(preset).routing, (0,), 4)
    assert red["exact"], red


@pytest.mark.slow
def test_scale_point_reports_the_placement():
    out = sc.scale_point(32, ["spectrum_x"], placement="topology_aware", switch_radix=8,
                         latency="none", ideal=False)
    assert out["cluster_gpus"] == 48 and out["placement"] == "topology_aware"
    assert out["cluster"]["job_servers"] == 4 and out["cluster"]["cluster_servers"] == 6
    assert out["sus_spanned"] >= out["min_sus"] == 2          # units of 3 servers
    assert 0.0 <= out["cross_leaf_share"] <= 1.0
    assert "cluster" not in out["plan"]
    assert out["reduction"]["spectrum_x"]["exact"]
    m = out["fabrics"]["spectrum_x"]
    assert np.isfinite(m["step_time"]) and m["unfinished_flows"] == 0
