"""The AI-factory scale study (:mod:`fabric_jax.scale`): builds, host-side builders,
the one-rail reduction against the full run, ECMP against balls into bins, the CLI."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import with_host_devices

from fabric_jax import scale as sc
from fabric_jax.fabrics import get_fabric
from fabric_jax.paths import PathsTruncatedWarning, shortest_paths
from fabric_jax.workloads.model import comm_bytes

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ builds
@pytest.mark.parametrize("gpus,planes,spines,leaves", [
    (16, 1, 1, 16),          # 2 servers: units of 1 server, 8 rails x 2 units
    (1024, 1, 64, 16),       # 128 servers: 2 units of 64 (radix 128 = 64 down + 64 up)
    (8192, 1, 64, 128),      # 16 units x 8 rails = 128 leaves = a spine's 128 ports
    (16384, 2, 64, 256),     # beyond the radix: 2 planes of 256 x 200G ports
    (32768, 4, 64, 512),     # 4 planes of 512 x 100G ports
])
def test_scale_topology_two_tiers_up_to_the_radix_then_planes(gpus, planes, spines, leaves):
    topo = sc.scale_topology(gpus)
    p = topo.params
    assert (p["planes"], p["tiers"], p["n_spines"]) == (planes, 2, spines)
    assert topo.n_hosts == gpus                            # one NIC per GPU
    tab = sc.clos_paths(topo)
    assert (tab.n_planes, tab.n_spines) == (planes, spines)
    assert tab.leaf_up.shape == (leaves * planes, spines)
    # closed-form link count: NIC cables and leaf-spine cables, both directions
    assert topo.n_links == 2 * (gpus * planes + leaves * planes * spines)


def test_scale_topology_tiers_and_bad_input():
    topo = sc.scale_topology(16384, beyond_radix="tiers")
    assert topo.params["tiers"] == 3 and topo.params["planes"] == 1
    assert sc.clos_paths(topo) is None                     # not a two-tier Clos
    with pytest.raises(ValueError, match="n_gpus"):
        sc.scale_topology(100)
    with pytest.raises(ValueError, match="beyond_radix"):
        sc.scale_topology(16384, beyond_radix="wider")
    with pytest.raises(ValueError, match="switch_radix"):
        sc.scale_topology(1024, switch_radix=2)


@pytest.mark.parametrize("gpus,kw", [(256, {}), (128, dict(switch_radix=16))])
def test_clos_paths_equal_shortest_paths(gpus, kw):
    # every equal-cost path, as sets, for every ordered pair of rail 0 and a few more:
    # the closed form against the generic enumeration (128 GPUs at radix 16 has planes)
    topo = sc.scale_topology(gpus, **kw)
    tab = sc.clos_paths(topo)
    g = topo.params["nics_per_server"]
    hosts = np.arange(0, topo.n_hosts, g)
    a, b = np.meshgrid(hosts, hosts, indexing="ij")
    keep = a != b
    src, dst = a[keep], b[keep]
    src, dst = np.concatenate([src, [1, 2]]), np.concatenate([dst, [g + 1, 3 * g + 2]])
    links, mask = sc.rail_symmetric_paths(tab, src, dst, src // g, dst // g, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PathsTruncatedWarning)
        ps = shortest_paths(topo, src, dst)
    ref_l, ref_m = np.asarray(ps.links), np.asarray(ps.path_mask)
    assert np.array_equal(mask.sum(1), ref_m.sum(1))
    for f in range(src.size):
        mine = {tuple(x[x >= 0]) for x in links[f][mask[f]]}
        ref = {tuple(x[x >= 0]) for x in ref_l[f][ref_m[f]]}
        assert mine == ref


def test_rail_symmetric_paths_cap_and_symmetry():
    topo = sc.scale_topology(1024)
    tab = sc.clos_paths(topo)
    src = np.array([0, 1, 0, 8 * 70])
    dst = np.array([8 * 100, 8 * 100 + 1, 8, 8 * 71])
    links, mask = sc.rail_symmetric_paths(tab, src, dst, src // 8, dst // 8, 4)
    assert mask.sum(1).tolist() == [4, 4, 1, 1]            # one leaf: one path
    # rails 0 and 1 between the same two servers cross the same spines
    spine = np.asarray(topo.link_dst)[links[:2, :, 1]]
    assert np.array_equal(spine[0], spine[1])
    assert len(set(spine[0])) == 4                         # spread, distinct


def test_rail_view_owns_links_and_keeps_order():
    topo = sc.scale_topology(256)
    view = sc.rail_view(topo, [3])
    assert view.disjoint and view.topology.n_hosts == 32
    assert np.all(np.diff(view.links) > 0)                 # order kept (ECMP ranks)
    assert np.all(view.link_rail[view.links] == 3)
    # two-tier: rail 3 owns its NIC and leaf links, 1 / 8 of the fabric's links
    assert view.links.size * 8 == topo.n_links
    three = sc.rail_view(sc.scale_topology(16384, beyond_radix="tiers"), [0])
    assert not three.disjoint                              # shared super-spine links
    with pytest.raises(ValueError, match="rails"):
        sc.rail_view(topo, [8])


# ------------------------------------------------------------------ the step
@pytest.mark.parametrize("gpus", [16, 64, 1024])
def test_step_flows_closed_form_counts_and_bytes(gpus):
    mdl, plan = sc.scale_plan(n_gpus=gpus)
    st = sc.step_flows(mdl, plan, slice_time=None)         # one slice: the whole step
    g, n = plan.gpus_per_server, plan.n_gpus
    assert plan.tp == g and plan.n_gpus == gpus
    assert mdl.global_batch == plan.dp * sc.DEFAULT_MICROBATCHES  # weak scaling
    cb = comm_bytes(mdl, plan)
    # tp = 8 = a server: every DP / PP / EP group has one rank per server, so every
    # flow crosses the network and the counts are closed forms
    ep_flows = n // plan.ep * plan.ep * (plan.ep - 1) if plan.ep > 1 else 0
    pp_flows = 2 * (n // plan.pp) * (plan.pp - 1)
    edp = plan.dp // plan.ep
    rings = n // plan.dp * plan.dp + (n // edp * edp if edp > 1 else 0)
    assert np.bincount(st.phase, minlength=4).tolist() == [ep_flows, pp_flows, rings,
                                                           rings]
    # bytes each rank sends in the step equal the model's per-GPU figures (pipeline
    # sends: the stage average, as comm_bytes counts them)
    sent = np.bincount(st.src_rank, weights=st.size, minlength=n)
    assert sent.mean() == pytest.approx(cb["dp_bytes_sent"] + cb["ep_bytes_sent"]
                                        + cb["pp_bytes_sent"], rel=1e-9)
    assert np.all(st.rail == st.src % g) and np.all(st.rail == st.dst % g)
    assert np.all(st.src // g != st.dst // g)              # NVLink pairs left out
    # the all-gather from x waits for the reduce-scatter flow into x
    ag = np.flatnonzero(st.phase == 3)
    d = st.deps[ag]
    dep = d[np.arange(ag.size), (d >= 0).argmax(axis=1)]
    assert np.all(st.phase[dep] == 2) and np.all(st.dst_rank[dep] == st.src_rank[ag])


def test_step_flows_expert_skew_and_slices():
    mdl, plan = sc.scale_plan(n_gpus=1024)
    uniform = sc.step_flows(mdl, plan, skew=0.0)
    skewed = sc.step_flows(mdl, plan, skew=1.0)
    a2a = lambda s: np.bincount(s.dst_rank[s.phase == 0], s.size[s.phase == 0],  # noqa
                                minlength=1024)
    # the same bytes, concentrated on the ranks of the hot experts
    assert a2a(skewed).sum() == pytest.approx(a2a(uniform).sum(), rel=1e-9)
    assert a2a(skewed).max() > 2.0 * a2a(uniform).max()
    assert np.ptp(a2a(uniform)[a2a(uniform) > 0]) < 1e-6 * a2a(uniform).max()
    k = skewed.slices
    t = skewed.info["line_rate_comm_time"]
    assert k == int(np.ceil(t / 250e-6)) and k > 1


def test_subset_and_stripes_keep_dependencies():
    mdl, plan = sc.scale_plan(n_gpus=64)
    st = sc.step_flows(mdl, plan)
    sub = st.subset(st.rail == 2)
    assert sub.n_flows * 8 == st.n_flows and np.all(sub.rail == 2)
    two = sub.stripes(2)
    assert two.n_flows == 2 * sub.n_flows and two.size.sum() == pytest.approx(sub.size.sum())
    f = int(np.flatnonzero((sub.deps >= 0).any(axis=1))[0])
    want = {2 * d + s for d in sub.deps[f][sub.deps[f] >= 0] for s in (0, 1)}
    for s in (0, 1):
        assert set(two.deps[2 * f + s][two.deps[2 * f + s] >= 0]) == want
    with pytest.raises(ValueError, match="keep"):
        st.subset(np.flatnonzero(st.phase == 3))            # all-gather without its deps


# ------------------------------------------------------------------ several jobs
def test_job_servers_placements():
    packed = sc.job_servers(8, 2, "packed")
    spread = sc.job_servers(8, 2, "spread")
    rnd = sc.job_servers(8, 2, "random", seed=3)
    assert packed.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert spread.tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    for a in (packed, spread, rnd):
        assert sorted(a.reshape(-1).tolist()) == list(range(8))
    assert np.array_equal(rnd, sc.job_servers(8, 2, "random", seed=3))
    assert not np.array_equal(rnd, sc.job_servers(8, 2, "random", seed=4))
    for bad in (3, 8, 0):                   # not dividing, 1-server jobs, none
        with pytest.raises(ValueError, match="n_jobs"):
            sc.job_servers(8, bad)
    with pytest.raises(ValueError, match="placement"):
        sc.job_servers(8, 2, "striped")


def _two_jobs(placement, gpus=128):
    mdl, plan = sc.scale_plan(n_gpus=gpus // 2)
    steps = [sc.step_flows(mdl, plan, slice_time=20e-6, seed=j) for j in range(2)]
    srv = sc.job_servers(gpus // 8, 2, placement)
    return steps, srv, sc.place_jobs(steps, srv, placement=placement)


def test_place_jobs_renumbers_servers_ranks_and_dependencies():
    steps, srv, both = _two_jobs("spread")
    assert both.n_flows == sum(st.n_flows for st in steps) and both.n_jobs == 2
    assert both.tokens_per_step == pytest.approx(2 * steps[0].tokens_per_step)
    assert both.info["jobs"] == 2 and both.info["placement"] == "spread"
    off = 0
    for j, st in enumerate(steps):
        rows = slice(off, off + st.n_flows)
        assert np.all(both.job[rows] == j)
        # the same flows, moved to the job's servers, NIC slot (rail) kept
        assert np.array_equal(both.src[rows] // 8, srv[j][st.src // 8])
        assert np.array_equal(both.dst_rank[rows], srv[j][st.dst_rank // 8] * 8
                              + st.dst_rank % 8)
        assert np.array_equal(both.rail[rows], st.rail)
        assert np.array_equal(both.size[rows], st.size)
        d = both.deps[rows][:, :st.deps.shape[1]]
        assert np.array_equal(d, np.where(st.deps >= 0, st.deps + off, -1))
        assert np.all(both.rank_job[both.dst_rank[rows]] == j)
        off += st.n_flows
    # experts: job 1 has other hot experts (its own seed)
    a2a = lambda st: st.size[st.phase == 0]  # noqa: E731
    assert not np.array_equal(a2a(steps[0]), a2a(steps[1]))
    assert sc.place_jobs(steps[:1], np.arange(8)[None]) is steps[0]
    perm = sc.job_servers(8, 1, "random", seed=1)             # one job, scattered
    one = sc.place_jobs(steps[:1], perm)
    assert one.n_jobs == 1 and np.array_equal(one.src // 8, perm[0][steps[0].src // 8])
    with pytest.raises(ValueError, match="servers"):
        sc.place_jobs(steps, np.zeros((2, 8), int))
    # the jobs' flows still stay on one rail each: the rail reduction's premise
    assert sc.rail_reduction(both, sc.scale_topology(128, switch_radix=8), "adaptive",
                              (0,), None)["exact"]


def test_job_servers_of_different_sizes():
    for placement in ("packed", "spread", "random"):
        rows = sc.job_servers(8, None, placement, sizes=[4, 2, 2], seed=1)
        assert [r.size for r in rows] == [4, 2, 2]
        assert sorted(np.concatenate(rows).tolist()) == list(range(8))
    assert [r.tolist() for r in sc.job_servers(8, None, "packed", sizes=[4, 2, 2])] == \
        [[0, 1, 2, 3], [4, 5], [6, 7]]
    # spread: each job evenly interleaved (job j's k-th server near (k + 1/2) / S_j)
    assert [r.tolist() for r in sc.job_servers(8, None, "spread", sizes=[4, 2, 2])] == \
        [[0, 3, 4, 7], [1, 5], [2, 6]]
    # equal sizes: the equal-jobs layouts
    for placement in ("packed", "spread", "random"):
        assert np.array_equal(sc.job_servers(8, None, placement, sizes=[4, 4], seed=2),
                              sc.job_servers(8, 2, placement, seed=2))
    for bad in ([4, 3], [6, 1, 1], [], [8, 0]):
        with pytest.raises(ValueError, match="sizes"):
            sc.job_servers(8, None, sizes=bad)
    with pytest.raises(ValueError, match="sizes"):
        sc.job_servers(8, 3, sizes=[4, 4])


def test_jobs_of_different_sizes_each_keep_their_own_plan():
    # 128 GPUs as jobs of 64 + 32 + 32, each with the plan of its size; on the ideal
    # crossbar jobs never share a NIC, so each job's step (its own slices, compute and
    # per-message latency) equals the step of that job alone
    topo, both, nic = sc.build_point(128, job_gpus=[64, 32, 32], placement="spread")
    assert both.job_steps is not None and both.n_jobs == 3
    pj = both.per_job
    assert pj["gpus"].tolist() == [64, 32, 32]
    m = sc.point_metrics(sc.ideal_rails(both, nic), both, topo, None, nic, n_rails=8)
    for j, size in enumerate((64, 32, 32)):
        mdl, plan = sc.scale_plan(n_gpus=size)
        alone = sc.step_flows(mdl, plan, nic_rate=nic, seed=j)
        assert pj["slices"][j] == alone.slices
        assert pj["compute_time"][j] == alone.compute_time
        t = sc.scale_topology(size)
        m1 = sc.point_metrics(sc.ideal_rails(alone, nic), alone, t, None, nic, n_rails=8)
        assert m["job_step_times"][j] == pytest.approx(m1["step_time"], rel=1e-6)
        assert m["job_latency_times"][j] == pytest.approx(m1["latency_time"], rel=1e-12)
    assert pj["compute_time"][1] != pj["compute_time"][0]        # other plans
    assert m["step_time"] == max(m["job_step_times"])
    G = np.array([64, 32, 32])
    assert m["gpu_utilization"] == pytest.approx(
        np.sum(G * pj["compute_time"] / m["job_step_times"]) / G.sum(), rel=1e-12)
    assert m["tokens_per_second"] == pytest.approx(
        np.sum(pj["tokens_per_step"] / m["job_step_times"]), rel=1e-12)
    # the rail reduction's premise holds: every job's flows stay on their rail
    assert sc.rail_reduction(both, topo, "adaptive", (0,), None)["exact"]
    with pytest.raises(ValueError, match="job_gpus"):
        sc.build_point(128, job_gpus=[64, 60, 4])


def test_jobs_of_different_models_each_keep_their_own_plan():
    # two 64-GPU jobs, an MoE model and a dense one: their own plans, calls (the dense
    # model has no all-to-all) and steps, each equal to the job alone on the ideal crossbar
    models = ["mixtral_8x7b", "llama3_8b"]
    topo, both, nic = sc.build_point(128, jobs=2, job_models=models, placement="spread")
    assert both.job_steps is not None and both.info["job_models"] == models
    calls = [{c["name"] for c in i["collectives"]} for i in both.per_job["info"]]
    assert "ep_all_to_all" in calls[0] and "ep_all_to_all" not in calls[1]
    m = sc.point_metrics(sc.ideal_rails(both, nic), both, topo, None, nic, n_rails=8)
    for j, name in enumerate(models):
        alone = sc.step_flows(*sc.scale_plan(name, n_gpus=64), nic_rate=nic, seed=j)
        m1 = sc.point_metrics(sc.ideal_rails(alone, nic), alone, sc.scale_topology(64),
                              None, nic, n_rails=8)
        assert m["job_step_times"][j] == pytest.approx(m1["step_time"], rel=1e-6)
    with pytest.raises(ValueError, match="job_models"):
        sc.build_point(128, jobs=2, job_models=models[:1])


def test_scale_point_jobs_of_different_sizes():
    # a preset's fluid run of 64 + 32 + 32 GPUs placed at random: every flow finishes,
    # no job is faster than on the ideal fabric, the table names the jobs' sizes
    from fabric_jax.scale.cli import format_table
    out = sc.scale_point(128, ["roce"], job_gpus=[64, 32, 32], placement="random")
    m, ideal = out["fabrics"]["roce"], out["ideal"]
    assert m["unfinished_flows"] == 0 and m["jobs"] == 3 and out["job_gpus"] == [64, 32, 32]
    for a, b in zip(m["job_step_times"], ideal["job_step_times"]):
        assert a >= b * (1 - 1e-3)
    assert sc.worst_vs_ideal(m, ideal) >= -1e-3
    assert "3 jobs of 64/32/32 GPUs, random placement" in format_table(
        dict(points=[out], inputs={}))


def test_packed_jobs_share_no_link_spread_jobs_do():
    topo = sc.scale_topology(128, switch_radix=8)    # 4 units of 4 servers, 2 per job
    for placement, shared in (("packed", False), ("spread", True), ("random", True)):
        _, _, both = _two_jobs(placement)
        for preset in ("roce", "spectrum_x"):
            flows, ps = sc.route_flows(both, topo, get_fabric(preset))
            lk = np.asarray(ps.links)
            use = np.asarray(ps.hop_mask) & (lk >= 0)
            jobs_on = np.zeros((topo.n_links, 2), bool)
            fj = np.broadcast_to(flows.job[:, None, None], lk.shape)
            jobs_on[lk[use], fj[use]] = True
            assert bool(np.any(jobs_on.all(axis=1))) == shared, (placement, preset)


@pytest.mark.parametrize("preset", ["roce", pytest.param("spectrum_x", marks=pytest.mark.slow)])
def test_packed_jobs_run_as_if_alone(preset):
    # two jobs packed on whole scalable units share no link, so job 0's flows finish
    # as they do with job 1 removed (its ECMP hashes kept: same flow ids), and its step
    # time is its own; the metrics give each job's step and their spread
    topo = sc.scale_topology(128, switch_radix=8)
    _, _, both = _two_jobs("packed")
    kw = dict(rails=(0,), dt=0.5e-6, n_steps=1200)
    run = sc.simulate_rails(both, topo, preset, **kw)
    alone = sc.simulate_rails(both.subset(both.job == 0), topo, preset, **kw)
    assert np.all(np.isfinite(run.finish))
    np.testing.assert_allclose(alone.finish, run.finish[run.flows.job == 0], rtol=1e-6)
    m = sc.point_metrics(run, both, topo, preset, 50e9, n_rails=8)
    m0 = sc.point_metrics(alone, both, topo, preset, 50e9, n_rails=8)
    assert m["jobs"] == 2 and m["step_time"] == max(m["job_step_times"])
    assert m["job_step_times"][0] == pytest.approx(m0["job_step_times"][0], rel=1e-6)
    assert m["job_spread"] >= 1.0
    assert m["gpu_utilization"] == pytest.approx(
        np.mean([m["compute_time"] / t for t in m["job_step_times"]]))


def test_scale_jobs_variants_parse_and_match_the_cli_rows(tmp_path):
    # experiments/scale_jobs.py: a variant is a preset with fields changed; its rows
    # are the scale study's for the same flows (the plain preset equals scale_point's)
    import json
    from experiments import scale_jobs
    label, fab, mp = scale_jobs.parse_variant("spectrum_x:cc=none,routing.info_delay_us=0@16")
    assert (fab.cc, fab.routing_options["info_delay_us"], mp) == ("none", 0.0, 16)
    assert scale_jobs.parse_variant("roce")[1:] == (get_fabric("roce"), sc.DEFAULT_MAX_PATHS)
    # cc.<option>: a parameter of the preset's law (HPCC's N: R_AI = C (1 - eta) / N)
    hp = scale_jobs.parse_variant("spectrum_x:cc.expected_flows=10")[1]
    assert hp.cc_options["expected_flows"] == 10.0
    assert float(hp.law_params(50e9).r_ai) == pytest.approx(
        10 * float(get_fabric("spectrum_x").law_params(50e9).r_ai))
    for bad in ("ethernet", "roce:speed=1", "roce:cc", "roce@x", "roce@0"):
        with pytest.raises(ValueError, match="--variants"):
            scale_jobs.parse_variant(bad)
    assert scale_jobs.main(["--variants", "roce:cc"]) == 2
    out = tmp_path / "j.json"
    assert scale_jobs.main(["--gpus", "128", "--jobs", "2", "--variants", "roce",
                            "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    pt = sc.scale_point(128, ["roce"], jobs=2, placement="random", ideal=False)
    assert row["step_time"] == pytest.approx(pt["fabrics"]["roce"]["step_time"], rel=1e-9)
    # with background traffic too (the same flows as fabric-jax scale --background)
    assert scale_jobs.main(["--gpus", "16", "--jobs", "1", "--placement", "packed",
                            "--background", "0.2", "--variants", "uec", "--json",
                            str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    pt = sc.scale_point(16, ["uec"], background=0.2, ideal=False)
    for key in ("step_time", "background_p99_slowdown"):
        assert row[key] == pytest.approx(pt["fabrics"]["uec"][key], rel=1e-9), key


def test_plots_with_several_jobs(tmp_path):
    # --plots adds scale_jobs.png (each job against the ideal fabric) when a point ran
    # several jobs; a one-job packed table keeps its two figures
    from fabric_jax.scale.cli import plot

    def met(jobs):
        return dict(step_time=max(jobs), gpu_utilization=0.6, p99_over_p50=1.5,
                    job_step_times=jobs)
    pt = dict(gpus=1024, jobs=2, placement="random", ideal=met([0.40, 0.40]),
              fabrics=dict(roce=met([0.42, 0.41]), uec=met([0.41, 0.40])))
    res = dict(points=[pt], inputs=dict(dt_us=0.5))
    paths = [Path(p) for p in plot(res, tmp_path)]
    assert [p.name for p in paths] == ["scale_step.png", "scale_tail.png", "scale_jobs.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    unfinished = dict(pt, fabrics=dict(pt["fabrics"], roce=met([np.inf, np.inf])))
    assert len(plot(dict(points=[unfinished], inputs=dict(dt_us=0.5)), tmp_path / "u")) == 3
    one = dict(pt, jobs=1, placement="packed")
    assert len(plot(dict(points=[one], inputs=dict(dt_us=0.5)), tmp_path / "b")) == 2


def test_scale_dt_compares_matching_rows(tmp_path, capsys):
    # experiments/scale_dt.py: rows matched by GPUs, jobs and fabric; the largest
    # relative change per metric and where; zero-in-one-run rows named, not divided
    import json
    from experiments import scale_dt

    def run(dt, step_ib, step_roce, pause, jobs=1):
        met = lambda st, p: dict(step_time=st, pfc_pause_time=p)  # noqa: E731
        return dict(inputs=dict(dt_us=dt), points=[dict(
            gpus=1024, jobs=jobs, fabrics=dict(infiniband=met(step_ib, pause),
                                               roce=met(step_roce, 0.0)),
            ideal=met(0.4, 0.0))])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run(0.5, 0.400, 0.500, 0.0)))
    b.write_text(json.dumps(run(0.25, 0.404, 0.495, 2.0)))
    ch = scale_dt.largest_changes(scale_dt.rows(json.loads(a.read_text())),
                                  scale_dt.rows(json.loads(b.read_text())))
    r, k, zero = ch["step_time"]
    assert r == pytest.approx(0.01) and k == (1024, 1, "infiniband") and zero == []
    assert ch["pfc_pause_time"] == (0.0, None, [(1024, 1, "infiniband")])
    assert scale_dt.main([str(a), str(b)]) == 0
    assert "1.00 %" in capsys.readouterr().out
    b.write_text(json.dumps(run(0.25, 0.404, 0.495, 2.0, jobs=8)))   # no common row
    assert scale_dt.main([str(a), str(b)]) == 2
    assert "no row in common" in capsys.readouterr().err


# ------------------------------------------------------------------ background
def _bg_step(load=0.2, **kw):
    mdl, plan = sc.scale_plan(n_gpus=32, pp=2)
    st = sc.step_flows(mdl, plan, slice_time=30e-6)
    return st, sc.add_background(st, load, 50e9, seed=3, **kw)


def test_add_background_same_on_every_rail_and_at_its_load():
    st, b = _bg_step()
    bg = ~b.is_step
    assert np.array_equal(b.is_step[:st.n_flows], np.ones(st.n_flows, bool))
    assert not np.any(b.is_step[st.n_flows:]) and bg.sum() == b.info["background"]["flows"]
    for f in ("src", "dst", "size", "deps", "phase", "rail"):     # the step's rows kept
        assert np.array_equal(getattr(b, f)[:st.n_flows], getattr(st, f)), f
    assert np.all(b.arrivals[:st.n_flows] == 0) and np.all(b.deps[bg] == -1)
    # every rail: the same server pairs, sizes and arrivals, on that rail's NICs
    g, W = 8, b.info["background"]["window"]
    assert W == pytest.approx(2 * st.info["line_rate_comm_time"] / st.slices)
    per = [np.flatnonzero(bg & (b.rail == r)) for r in range(g)]
    assert len({i.size for i in per}) == 1 and per[0].size > 0
    for r, i in enumerate(per):
        assert np.all(b.src[i] % g == r) and np.all(b.dst[i] % g == r)
        assert np.all(b.src[i] // g != b.dst[i] // g)               # between servers
        for f in ("size", "arrivals"):
            assert np.array_equal(getattr(b, f)[i], getattr(b, f)[per[0]])
        assert np.array_equal(b.src[i] // g, b.src[per[0]] // g)
    assert np.all((b.arrivals[bg] >= 0) & (b.arrivals[bg] <= W))
    # offered bytes per NIC = load x line rate x window (a long window: the mean holds)
    _, big = _bg_step(0.3, window=0.2, size_cdf="hadoop")
    nic = np.bincount(big.src[~big.is_step], big.size[~big.is_step], minlength=32)
    assert nic.mean() == pytest.approx(0.3 * 50e9 * 0.2, rel=0.03)
    assert sc.add_background(st, 0.0, 50e9) is st


@pytest.mark.parametrize("kw,arg", [(dict(load=1.0), "load"), (dict(load=-0.1), "load"),
                                    (dict(load=float("nan")), "load"),
                                    (dict(size_cdf="imagenet"), "size_cdf"),
                                    (dict(window=0.0), "window")])
def test_add_background_bad_input(kw, arg):
    mdl, plan = sc.scale_plan(n_gpus=32, pp=2)
    st = sc.step_flows(mdl, plan, slice_time=30e-6)
    args = dict(load=0.2) | kw
    with pytest.raises(ValueError, match=arg):
        sc.add_background(st, args.pop("load"), 50e9, **args)
    with pytest.raises(ValueError, match="size_cdf"):          # checked at load 0 too
        sc.add_background(st, 0.0, 50e9, size_cdf="imagenet")
    with pytest.raises(ValueError, match="already"):
        sc.add_background(sc.add_background(st, 0.2, 50e9, window=1e-3), 0.2, 50e9)


def test_background_keeps_the_rail_reduction_exact():
    # the rails carry the same background, so one rail is still every rail; a rail
    # whose background differs (one arrival moved) is not
    topo = sc.scale_topology(32, switch_radix=8)
    _, b = _bg_step()
    assert sc.rail_reduction(b, topo, "adaptive", (0,), 4)["exact"]
    i = np.flatnonzero(~b.is_step & (b.rail == 3))[0]
    arr = b.arrivals.copy()
    arr[i] += 1e-6
    moved = dataclasses.replace(b, flows=dataclasses.replace(b.flows, arrival=arr))
    assert not sc.rail_reduction(moved, topo, "adaptive", (0,), 4)["exact"]


def test_background_is_left_out_of_the_step_figures():
    # the ideal fabric (exact max-min): background only takes capacity, so the step is
    # no faster with it; the step's figures do not read the background's finish times;
    # a background flow is never faster than on an idle fabric
    st, b = _bg_step(0.3)
    topo = sc.scale_topology(32, switch_radix=8)
    run0, run = sc.ideal_rails(st, 50e9), sc.ideal_rails(b, 50e9)
    m0 = sc.point_metrics(run0, st, topo, None, 50e9, n_rails=8)
    m = sc.point_metrics(run, b, topo, None, 50e9, n_rails=8)
    assert m["step_time"] >= m0["step_time"] and m["p99_completion"] > m0["p99_completion"]
    assert "background_flows" not in m0
    assert m["background_flows"] == np.sum(~run.flows.is_step)
    assert m["background_unfinished"] == 0
    assert 1.0 - 1e-9 <= m["background_p50_slowdown"] <= m["background_p99_slowdown"]
    late = run.finish.copy()
    late[~run.flows.is_step] += 1.0                  # background a second later
    m2 = sc.point_metrics(dataclasses.replace(run, finish=late), b, topo, None, 50e9,
                          n_rails=8)
    for key in ("step_time", "p50_completion", "p99_completion", "effective_bandwidth",
                "job_step_times"):
        assert m2[key] == m[key], key
    assert m2["background_p50_slowdown"] > m["background_p50_slowdown"] + 100


def test_background_alone_on_an_idle_crossbar_is_slowdown_one():
    # the slowdown's reference (bytes at line rate) is exact: background flows that
    # never share a NIC run at line rate on the ideal fabric
    st, b = _bg_step(0.01, window=1.0)
    bg = b.subset(~b.is_step)
    busy = np.zeros(bg.n_flows, bool)
    for f in range(bg.n_flows):       # keep flows that overlap no kept flow at a NIC
        t0, t1 = bg.arrivals[f], bg.arrivals[f] + bg.size[f] / 50e9
        ends = bg.arrivals + bg.size / 50e9
        clash = busy & (np.isin(bg.src, [bg.src[f], bg.dst[f]]) | np.isin(
            bg.dst, [bg.src[f], bg.dst[f]])) & (bg.arrivals < t1) & (ends > t0)
        busy[f] = not clash.any()
    alone = bg.subset(busy)
    assert alone.n_flows >= 5
    from tests.helpers import enable_x64
    with enable_x64(True):             # float64 times: a 1 s window and microsecond flows
        run = sc.ideal_rails(alone, 50e9, rails=None)
    m = sc.background_metrics(run, alone, 50e9)
    assert m["background_p50_slowdown"] == pytest.approx(1.0, rel=1e-9)
    assert m["background_p99_slowdown"] == pytest.approx(1.0, rel=1e-9)


def test_scale_point_with_background_every_preset_finishes():
    # 16 GPUs, each preset's fluid run with background: everything finishes (the
    # horizon covers the background's drain), the step is no faster than on the ideal
    # fabric, and the table gets the background's columns
    from fabric_jax.scale.cli import format_table
    out = sc.scale_point(16, ["infiniband", "spectrum_x"], background=0.2)
    assert out["background"]["load"] == 0.2 and out["background"]["flows"] > 0
    for name, m in out["fabrics"].items():
        assert m["unfinished_flows"] == 0 and m["background_unfinished"] == 0, name
        assert m["step_time"] >= out["ideal"]["step_time"] * (1 - 1e-3), name
        assert m["background_p50_slowdown"] >= 1.0, name
    table = format_table(dict(points=[out], inputs={}))
    assert "bg p99 x" in table and "background 0.2 of line rate" in table
    assert out["reduction"]["spectrum_x"]["exact"]


# ------------------------------------------------------------------ per-message latency
@pytest.mark.parametrize("gpus", [128, 8192])
def test_collective_calls_counts_and_megatron_buckets(gpus):
    # the calls a rank makes per step: 4 L/pp m all-to-alls, 2 m pipeline sends, and per
    # data-parallel group one reduce-scatter + all-gather per Megatron bucket of
    # max(4e7, 1e6 dp) parameters
    mdl, plan = sc.scale_plan(n_gpus=gpus)
    st = sc.step_flows(mdl, plan)
    calls = {c["name"]: c for c in st.info["collectives"]}
    m = plan.n_microbatches(mdl)
    assert calls["ep_all_to_all"]["count"] == 4 * mdl.n_layers // plan.pp * m
    assert calls["pp_send"]["count"] == 2 * m and calls["pp_send"]["ranks"] == 2
    bucket = max(40e6, 1e6 * plan.dp)
    for key, params, ranks in (("dp", mdl.dense_params / (plan.tp * plan.pp), plan.dp),
                               ("edp", mdl.moe_params / (plan.tp * plan.pp * plan.ep),
                                plan.dp // plan.ep)):
        n_b = int(np.ceil(params / bucket))
        if ranks < 2:                      # 128 GPUs: dp = ep = 4, no expert-DP group
            assert f"{key}_all_gather" not in calls
            continue
        for op in ("reduce_scatter", "all_gather"):
            c = calls[f"{key}_{op}"]
            assert (c["count"], c["ranks"], c["nodes"]) == (n_b, ranks, ranks)  # 1 per server
            assert c["nbytes"] * n_b == pytest.approx(params * plan.grad_bytes, rel=1e-12)
    assert st.info["latency"] == "nccl"
    with pytest.raises(ValueError, match="latency"):
        sc.step_flows(mdl, plan, latency="fast")


def test_collective_overhead_ring_grows_linearly_nccl_picks_the_cheaper():
    # per step, host side: 'none' costs nothing; NCCL's choice never costs more than
    # rings only; the rings' cost grows ~linearly with the data-parallel degree (p - 1
    # steps), NCCL's (PAT for the dense gradients) far less; more path latency, more cost
    tot = {}
    for gpus in (1024, 8192, 32768):
        mdl, plan = sc.scale_plan(n_gpus=gpus)
        info = sc.step_flows(mdl, plan).info
        for mode in sc.LATENCY_MODELS:
            tot[gpus, mode] = sc.collective_overhead(dict(info, latency=mode), 50e9,
                                                     1e-6)["total"]
        assert tot[gpus, "none"] == 0.0
        assert 0 < tot[gpus, "nccl"] <= tot[gpus, "ring"]
        slow = sc.collective_overhead(info, 50e9, 3e-6)["total"]
        assert slow > tot[gpus, "nccl"]
        by_phase = sc.collective_overhead(info, 50e9, {0: 1e-6, 1: 1e-6, 2: 1e-6, 3: 1e-6})
        assert by_phase["total"] == pytest.approx(tot[gpus, "nccl"], rel=1e-12)
    ring = [tot[g, "ring"] for g in (1024, 8192, 32768)]
    nccl = [tot[g, "nccl"] for g in (1024, 8192, 32768)]
    assert ring[2] - ring[1] > 2 * (ring[1] - ring[0]) > 0
    assert nccl[2] - nccl[0] < 0.5 * (ring[2] - ring[0])
    mdl, plan = sc.scale_plan(n_gpus=32768)
    calls = sc.collective_overhead(sc.step_flows(mdl, plan).info, 50e9)["calls"]
    assert calls["dp_all_gather"]["algorithm"] == "pat"          # 1,024 ranks
    with pytest.raises(ValueError, match="latency"):
        sc.collective_overhead(dict(info, latency="slow"), 50e9)


def test_latency_adds_to_the_step_not_to_the_fabric():
    # the ideal crossbar (no path latency): the same flows and finish times; the step,
    # the p50 / p99 over ranks move by exactly the calls' NCCL latency, the effective
    # bandwidth (the fabric's) not at all
    topo, st, nic = sc.build_point(16, latency="none")
    _, st2, _ = sc.build_point(16)
    run = sc.ideal_rails(st, nic)
    m0 = sc.point_metrics(run, st, topo, None, nic, n_rails=8)
    m = sc.point_metrics(run, st2, topo, None, nic, n_rails=8)
    L = sc.collective_overhead(st2.info, nic)["total"]
    assert m0["latency_time"] == 0.0 and m["latency_time"] == pytest.approx(L, rel=1e-12)
    assert L > 0.01                   # 1,024 all-to-alls at 16 GPUs (pp = 1)
    assert m["step_time"] == pytest.approx(m0["step_time"] + L, rel=1e-12)
    assert m["p50_completion"] == pytest.approx(m0["p50_completion"] + L, rel=1e-7)
    assert m["effective_bandwidth"] == m0["effective_bandwidth"]
    assert m["latency_algorithms"]["dp_all_gather"] == "ring"


# ------------------------------------------------------------------ ECMP
@pytest.mark.parametrize("gpus", [8192, 32768])
def test_ecmp_uplink_occupancy_is_balls_into_bins(gpus):
    # a ring shift of one scalable unit on rail 0: each leaf's 64 flows hash onto its 64
    # uplinks; the share in use is 1 - (1 - 1/64)^64 = 0.6350 in expectation.  Pooled
    # over 4 seeds x (16 or 64 leaves x planes): standard error < 0.006.
    topo = sc.scale_topology(gpus)
    tab = sc.clos_paths(topo)
    flows = sc.ring_shift(topo, 1e6)
    used = []
    for seed in range(4):
        for p in range(tab.n_planes):
            links = sc.ecmp_paths(tab, flows.src, flows.dst, np.full(flows.n_flows, p),
                                  sc.source_port(seed, np.arange(flows.n_flows)))
            used.append(sc.uplinks_used(topo, flows, links))
    theory = sc.balls_into_bins(tab.n_spines)
    assert theory == pytest.approx(0.6350, abs=1e-4)
    assert np.mean(used) == pytest.approx(theory, abs=0.02)
    assert sc.balls_into_bins(10 ** 6) == pytest.approx(1 - np.exp(-1), abs=1e-6)


def test_window_efficiency_counts_a_striped_flow_once():
    # 2 planes: hashed routing runs each flow as 2 stripes of half its size.  Every
    # stripe at half the NIC rate is every flow at line rate: efficiency 1, not 1/2
    # (it read 0.319 for ECMP's ring shift at 16,384 GPUs before, half the 1-plane 0.64)
    from types import SimpleNamespace
    topo = sc.scale_topology(32)
    flows = sc.ring_shift(topo, 1e6)
    nic, t = 50e9, np.linspace(0.0, 20e-6, 21)
    for n in (1, 2, 4):
        st = flows.stripes(n)
        run = SimpleNamespace(t=t, flows=st, goodput=np.full(t.size, st.n_flows * nic / n))
        assert sc.window_efficiency(run, nic, 2e-6, 18e-6) == pytest.approx(1.0)
        half = SimpleNamespace(t=t, flows=st, goodput=run.goodput / 2)
        assert sc.window_efficiency(half, nic, 2e-6, 18e-6) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="t0"):
        sc.window_efficiency(run, nic, 30e-6, 40e-6)


# ------------------------------------------------------------------ reduction
def _small_step():
    mdl, plan = sc.scale_plan(n_gpus=32, pp=2)
    return sc.scale_topology(32, switch_radix=8), sc.step_flows(mdl, plan, slice_time=30e-6)


@pytest.mark.parametrize("preset", ["roce", "spectrum_x", "uec"])
def test_rail_reduction_inputs_are_the_full_runs(preset):
    # host side (fast): rail 2's flows, paths (hashed or candidate sets) and deps on its
    # sub-fabric are exactly those rows of the full fabric's, link ids mapped in order;
    # with a hash-free candidate set rail 2's paths are rail 0's moved to rail 2
    topo, st = _small_step()
    fab = get_fabric(preset)
    full_flows, full = sc.route_flows(st, topo, fab)
    ids = np.flatnonzero(st.rail == 2)
    sub_flows, sub = sc.route_flows(st.subset(ids), topo, fab, flow_ids=ids)
    rows = np.flatnonzero(full_flows.rail == 2)
    assert np.array_equal(np.asarray(sub.links), np.asarray(full.links)[rows])
    assert np.array_equal(sub_flows.size, full_flows.size[rows])
    view = sc.rail_view(topo, [2])
    mapped = np.where(sub.links >= 0, view.link_of[np.maximum(sub.links, 0)], -1)
    assert np.all(mapped[np.asarray(sub.hop_mask)] >= 0)    # inside the sub-fabric
    assert sc.rail_reduction(st, topo, fab.routing, (0,), None)["exact"] == (
        preset != "roce")
    if preset != "roce":
        r0 = np.asarray(full.links)[full_flows.rail == 0]
        lr = sc.link_rails(topo, 8)
        assert np.all(lr[np.asarray(full.links)[rows][np.asarray(full.hop_mask)[rows]]] == 2)
        # same spines: the switch each path climbs to is the same for rails 0 and 2
        dst = np.asarray(topo.link_dst)
        top = lambda L: np.where(L[:, :, 2] >= 0, dst[np.maximum(L[:, :, 1], 0)], -1)  # noqa
        assert np.array_equal(top(r0), top(np.asarray(full.links)[rows]))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["infiniband", "roce", "spectrum_x", "uec"])
def test_rail_reduction_equals_full_run_every_preset(preset):
    # 128 GPUs (two units of 8 servers, traffic over the spines), each preset's whole
    # dynamics: rail 0 alone equals rail 0 of the full run (ECMP included: hashes and
    # candidate sets are computed on the full fabric), and for every preset but the
    # hashed one the other rails equal rail 0 too
    mdl, plan = sc.scale_plan(n_gpus=128)
    st = sc.step_flows(mdl, plan, slice_time=20e-6)
    topo = sc.scale_topology(128, switch_radix=16)
    kw = dict(dt=0.5e-6, n_steps=1600)
    full = sc.simulate_rails(st, topo, preset, rails=None, **kw)
    one = sc.simulate_rails(st, topo, preset, rails=(0,), **kw)
    assert np.all(np.isfinite(full.finish))
    per = [full.finish[full.flows.rail == r] for r in range(8)]

    def same_run(a, b):
        # equal to float round-off, which a threshold (a PFC pause, an ECN mark) can turn
        # into one step more or less for a flow now and then: every flow within one step,
        # nearly all to round-off
        np.testing.assert_allclose(a, b, rtol=0, atol=kw["dt"])
        assert np.mean(np.isclose(a, b, rtol=1e-5, atol=0)) >= 0.95
    same_run(one.finish, per[0])
    if get_fabric(preset).routing not in sc.HASHED_ROUTING:
        for r in range(1, 8):
            same_run(per[r], per[0])
        # and the step's metrics from rail 0 alone are the full run's (mapped back over
        # the 8 interchangeable rails)
        m_full = sc.point_metrics(full, st, topo, preset, 50e9, n_rails=8)
        m_one = sc.point_metrics(one, st, topo, preset, 50e9, n_rails=8)
        for key in ("step_time", "p50_completion", "p99_completion",
                    "effective_bandwidth"):
            assert m_one[key] == pytest.approx(m_full[key], rel=1e-3), key


# ------------------------------------------------------------------ CLI
@pytest.mark.parametrize("argv,flag", [
    (["--gpus", "8"], "--gpus"), (["--gpus", "65536"], "--gpus"),
    (["--gpus", "1k"], "--gpus"), (["--system", "dgx_a100x"], "--system"),
    (["--fabrics", "roce,ethernet"], "--fabrics"), (["--model", "gpt5"], "--model"),
    (["--dt-us", "0"], "--dt-us"), (["--rails", "9"], "--rails"),
    (["--rails", "some"], "--rails"), (["--max-paths", "0"], "--max-paths"),
    (["--beyond-radix", "wide"], "--beyond-radix"), (["--overlap", "2"], "--overlap"),
    (["--skew", "-1"], "--skew"), (["--slice-us", "-5"], "--slice-us"),
    (["--gpus", "48", "--jobs", "4"], "--jobs"), (["--jobs", "0"], "--jobs"),
    (["--gpus", "16", "--jobs", "2"], "--jobs"), (["--placement", "striped"], "--placement"),
    (["--background", "1"], "--background"), (["--background", "-0.1"], "--background"),
    (["--background-cdf", "imagenet"], "--background-cdf"),
    (["--latency", "logp"], "--latency"),
    (["--job-gpus", "64"], "--job-gpus"), (["--job-gpus", "64,60"], "--job-gpus"),
    (["--job-gpus", "64,64", "--jobs", "2"], "--job-gpus"),
    (["--job-gpus", "64,64", "--gpus", "256"], "--job-gpus"),
    (["--gpus", "128", "--jobs", "2", "--job-models", "llama3_8b"], "--job-models"),
    (["--gpus", "128", "--jobs", "2", "--job-models", "llama3_8b,gpt5"], "--job-models"),
])
def test_cli_bad_input_exits_2_naming_the_flag(argv, flag, capsys):
    from fabric_jax.cli import main
    assert main(["scale", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


@pytest.mark.slow
def test_cli_scale_json_and_plots(tmp_path):
    import json

    from fabric_jax.cli import main
    out = tmp_path / "s.json"
    assert main(["scale", "--gpus", "16,32", "--fabrics", "uec", "--dt-us", "1",
                 "--slice-us", "20", "--json", str(out), "--plots", str(tmp_path),
                 "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert [p["gpus"] for p in data["points"]] == [16, 32]
    for p in data["points"]:
        for m in list(p["fabrics"].values()) + [p["ideal"]]:
            assert m["unfinished_flows"] == 0
            assert 0 < m["gpu_utilization"] <= 1
            assert m["p99_completion"] >= m["p50_completion"] > 0
            assert m["step_time"] >= m["compute_time"]
    assert (tmp_path / "scale_step.png").is_file() and (tmp_path / "scale_tail.png").is_file()
    assert data["complete"] is True
    # --resume keeps the rows the file holds and runs only the missing ones: a marked
    # row survives, a removed one is run again and comes back equal
    again = json.loads(out.read_text())
    again["points"][0]["fabrics"]["uec"]["step_time"] = 123.0
    del again["points"][1]["fabrics"]["uec"]
    again["complete"] = False
    out.write_text(json.dumps(again))
    assert main(["scale", "--gpus", "16,32", "--fabrics", "uec", "--dt-us", "1",
                 "--slice-us", "20", "--json", str(out), "--resume", "--quiet"]) == 0
    back = json.loads(out.read_text())
    assert back["complete"] is True and back["resumed"] is True
    assert back["points"][0]["fabrics"]["uec"]["step_time"] == 123.0
    def same(a, b):
        return {k: v for k, v in a.items() if k != "wall_s"} == \
            {k: v for k, v in b.items() if k != "wall_s"}
    assert same(back["points"][1]["fabrics"]["uec"], data["points"][1]["fabrics"]["uec"])
    assert same(back["points"][1]["ideal"], data["points"][1]["ideal"])


def test_cli_resume_refuses_other_inputs(tmp_path, capsys):
    """--resume reuses rows only from a run of the same inputs, and needs --json."""
    import json

    from fabric_jax.cli import main
    out = tmp_path / "s.json"
    inputs = dict(system="hgx_h100", model="mixtral_8x7b", dt_us=0.5, rails="1",
                  max_paths=4, switch_radix=128, beyond_radix="planes", slice_us=250.0,
                  pp=4, ep=8, microbatches=8, skew=1.0, overlap=0.0, seed=0,
                  no_ideal=False)
    out.write_text(json.dumps(dict(inputs=inputs, points=[], complete=False)))
    assert main(["scale", "--gpus", "16", "--json", str(out), "--resume", "--seed", "3",
                 "--dt-us", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seed" in err[0] and "--dt-us" in err[0]
    assert "--model" not in err[0]
    assert main(["scale", "--gpus", "16", "--resume"]) == 2
    assert "--json" in capsys.readouterr().err
    out.write_text("not json")
    assert main(["scale", "--gpus", "16", "--json", str(out), "--resume"]) == 2
    assert "not a JSON file" in capsys.readouterr().err


# ------------------------------------------------------------------ devices
_DEVICES = textwrap.dedent("""
    import json, jax, numpy as np
    from fabric_jax import scale as sc
    mdl, plan = sc.scale_plan(n_gpus=32, pp=2)
    st = sc.step_flows(mdl, plan, slice_time=30e-6)
    topo = sc.scale_topology(32, switch_radix=8)
    kw = dict(rails=(0, 1, 2, 3), dt=1e-6, n_steps=400)
    spread = sc.simulate_rails_on_devices(st, topo, "roce", **kw)
    alone = [sc.simulate_rails(st, topo, "roce", rails=(r,), dt=1e-6, n_steps=400)
             for r in range(4)]
    # the rails are different samples: ECMP sends rail 0's and rail 1's flows between
    # the same servers over different spines (host side; at this size the step's time
    # is set by the hot experts' NICs, so their finish times may still agree)
    dst = np.asarray(topo.link_dst)
    spines = []
    for r in (0, 1):
        ids = np.flatnonzero(st.rail == r)
        _, ps = sc.route_flows(st.subset(ids), topo, "roce", flow_ids=ids)
        lk = np.asarray(ps.links)[:, 0, :]
        spines.append(np.where(lk[:, 2] >= 0, dst[lk[:, 1]], -1))
    print(json.dumps({"devices": jax.device_count(),
                      "used": sorted({r.device for r in spread}),
                      "equal": all(np.array_equal(a.finish, b.finish)
                                   for a, b in zip(spread, alone)),
                      "differ": bool(np.any(spines[0] != spines[1]))}))
""")


@pytest.mark.slow
def test_rails_on_four_devices_equal_one_device():
    env = dict(os.environ, XLA_FLAGS=with_host_devices(4),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _DEVICES], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["devices"] == 4 and len(r["used"]) == 4
    assert r["equal"]            # each rail's run is the same program wherever it runs
    assert r["differ"]           # ECMP: the rails are different samples of the hash


@pytest.mark.slow
def test_fluid_ecmp_throughput_is_the_uplinks_in_use_and_spray_is_line_rate():
    # ring shift on rail 0 of 1,024 GPUs (2 leaves x 64 NICs, 64 spines), routing alone
    # (no CC, infinite buffers): under ECMP each spine carries the flows that hashed onto
    # it, so the aggregate throughput is the share of uplinks in use, counted on the host;
    # spraying over every spine reaches line rate
    topo = sc.scale_topology(1024)
    size, nic, dt = 2.5e6, 50e9, 0.5e-6
    flows = sc.ring_shift(topo, size)
    t = size / nic
    eff = {}
    for preset in ("roce", "uec"):
        fab = get_fabric(preset, cc="none", flow_control="none")
        run = sc.simulate_rails(flows, topo, fab, rails=(0,), dt=dt,
                                n_steps=int(t / dt) + 20, max_paths=None)
        eff[preset] = sc.window_efficiency(run, nic, 0.1 * t, 0.9 * t)
    tab = sc.clos_paths(topo)
    links = sc.ecmp_paths(tab, flows.src, flows.dst, np.zeros(flows.n_flows, int),
                          sc.source_port(0, np.arange(flows.n_flows)))
    assert eff["roce"] == pytest.approx(sc.uplinks_used(topo, flows, links), abs=0.01)
    assert eff["uec"] == pytest.approx(1.0, abs=0.01)


def test_scale_latency_script_rings_against_nccl(tmp_path):
    # experiments/scale_latency.py (host only): NCCL's choice never costs more than rings
    # only; the ideal fabric has no path latency and the least; the rings' share of the
    # compute grows with the data-parallel degree
    import json

    from experiments import scale_latency
    out = tmp_path / "lat.json"
    assert scale_latency.main(["--gpus", "128,8192", "--json", str(out),
                               "--plots", str(tmp_path)]) == 0
    assert (tmp_path / "scale_latency.png").is_file()
    rows = json.loads(out.read_text())["rows"]
    assert {r["fabric"] for r in rows} == {"ideal", "infiniband", "roce", "spectrum_x", "uec"}
    for r in rows:
        assert 0 < r["nccl"] <= r["ring"] * (1 + 1e-12), r
        ideal = next(x for x in rows if x["gpus"] == r["gpus"] and x["fabric"] == "ideal")
        assert r["path_latency"] == {} if r["fabric"] == "ideal" else r["ring"] > ideal["ring"]
    ring = {r["gpus"]: r["ring"] / r["compute_time"] for r in rows if r["fabric"] == "roce"}
    assert ring[8192] > 2 * ring[128]
    big = next(r for r in rows if r["gpus"] == 8192 and r["fabric"] == "roce")
    assert big["nccl_calls"]["dp_all_gather"]["algorithm"] == "pat"
    assert scale_latency.main(["--gpus", "8"]) == 2


def test_independent_job_overlap_lies_between_alone_and_always():
    # two jobs at random share leaf uplinks: each job's estimated step lies between its
    # step alone and its step with the other job always there (the runs' bound), the
    # duties are fractions, and the ideal crossbar (nothing shared) gives the bound
    # (no overlap, so the step is the hand formula C + k t)
    out = sc.scale_point(128, ["roce"], jobs=2, placement="random", latency="none",
                         job_overlap="independent", seed=1,
                         step_options=dict(overlap=0.0))
    m, ideal = out["fabrics"]["roce"], out["ideal"]
    assert out["job_overlap"] == "independent" and m["overlap_runs"] == 3
    t = np.asarray(m["job_set_slice_times"], float)
    assert t.shape == (4, 2) and np.all(np.isnan(t[0]))
    k = out["slices"]
    C = m["compute_time"]
    for j in range(2):
        alone = max(C, C + k * t[1 << j, j])
        both = m["job_step_times"][j]
        assert both == pytest.approx(max(C, C + k * t[3, j]), rel=1e-9)
        est = m["job_step_times_independent"][j]
        assert alone * (1 - 1e-12) <= est <= both * (1 + 1e-12)
        assert 0.0 < m["job_duty"][j] < 1.0
    assert m["gpu_utilization_independent"] >= m["gpu_utilization"] - 1e-12
    np.testing.assert_allclose(ideal["job_step_times_independent"], ideal["job_step_times"])
    assert ideal["overlap_runs"] == 0
    with pytest.raises(ValueError, match="job_overlap"):
        sc.scale_point(128, ["roce"], jobs=2, job_overlap="sometimes")
    with pytest.raises(ValueError, match="at most"):
        sc.scale_point(1024, ["roce"], jobs=8, job_overlap="independent")


def test_cli_job_overlap_independent_adds_its_columns(tmp_path, capsys):
    from fabric_jax.cli import main
    out = tmp_path / "s.json"
    rc = main(["scale", "--gpus", "128", "--fabrics", "roce", "--jobs", "2", "--placement",
               "random", "--latency", "none", "--job-overlap", "independent", "--quiet",
               "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "ind util %" in text and "ind vs ideal +%" in text and "not synchronised" in text
    import json
    pt = json.loads(out.read_text())["points"][0]
    m = pt["fabrics"]["roce"]
    assert pt["job_overlap"] == "independent" and len(m["job_duty"]) == 2
    # errors: one job, or more jobs than the sets allow
    assert main(["scale", "--gpus", "128", "--job-overlap", "independent"]) == 2
    assert "needs 2 to" in capsys.readouterr().err
    assert main(["scale", "--gpus", "1024", "--jobs", "8", "--job-overlap",
                 "independent"]) == 2


def test_overlap_metrics_of_an_unfinished_run_are_nan():
    # a set whose run left flows unfinished has no slice time: the estimate is NaN,
    # not a number built on an infinite time
    _, step, _ = sc.build_point(128, jobs=2, placement="random")
    table = np.array([[np.nan, np.nan], [1e-3, np.nan], [np.nan, np.inf], [2e-3, 2e-3]])
    # (the run's own step times: Megatron's overlap enters as the flat fraction of them)
    met = dict(job_latency_times=[0.0, 0.0],
               job_step_times=list(1.5 * step.per_job["compute_time"]))
    out = sc.overlap_metrics(step, table, met, runs=3)
    assert np.isnan(out["step_time_independent"]) and all(np.isnan(out["job_duty"]))
    ok = sc.overlap_metrics(step, np.where(np.isinf(table), 1.5e-3, table), met, runs=3)
    assert np.isfinite(ok["step_time_independent"]) and ok["overlap_converged"]
