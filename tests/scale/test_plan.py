"""Fixed-global-batch (strong) scaling and Megatron's communication overlap
(:func:`fabric_jax.scale.scale_plan`, :func:`fabric_jax.scale.megatron_step_time`):
closed forms, a bucket-by-bucket event oracle, bad input, and the rail reduction."""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax import scale as sc
from fabric_jax.fabrics import get_fabric
from fabric_jax.scenario import ScenarioError
from fabric_jax.workloads.model import ParallelPlan, comm_bytes, get_gpu
from fabric_jax.workloads.phases import step_compute


# ------------------------------------------------------------------ the plan
@pytest.mark.parametrize("model,pp,B,counts", [
    ("mixtral_8x7b", 4, 512, (256, 1024, 4096, 8192)),
    ("gpt3_175b", 8, 768, (1024, 2048, 4096, 8192)),
])
def test_fixed_batch_plans_keep_the_global_batch(model, pp, B, counts):
    gpu = get_gpu("h100_sxm")
    seen = []
    for n in counts:
        mdl, plan = sc.scale_plan(model, n_gpus=n, pp=pp, global_batch=B)
        m = B // plan.dp                                   # hand count, micro-batch 1
        assert mdl.global_batch == B and plan.n_microbatches(mdl) == m
        assert plan.dp * plan.micro_batch * m == B and plan.n_gpus == n
        comp = step_compute(mdl, plan, gpu)
        assert comp["bubble"] == pytest.approx((plan.pp - 1) / m, rel=1e-15)
        seen.append((n, plan, mdl, comp, comm_bytes(mdl, plan)))
    # the step's work is fixed: compute per GPU falls as 1/N, the all-to-all and
    # pipeline bytes per GPU follow m, the data-parallel bytes per GPU do not
    n0, p0, _, c0, b0 = seen[0]
    for n, plan, mdl, comp, cb in seen[1:]:
        if plan.pp != p0.pp:
            continue
        assert comp["math_time"] * n == pytest.approx(c0["math_time"] * n0, rel=1e-12)
        ratio = (B // plan.dp) / (B // p0.dp)
        assert cb["pp_bytes_sent"] == pytest.approx(b0["pp_bytes_sent"] * ratio, rel=1e-12)
        assert cb["ep_bytes_sent"] == pytest.approx(b0["ep_bytes_sent"] * ratio, rel=1e-12)
        assert cb["dp_allreduce_bytes"] == b0["dp_allreduce_bytes"]
    # the bubble grows as the replicas get fewer micro-batches
    assert [c["bubble"] for *_, c, _ in seen] == sorted(c["bubble"] for *_, c, _ in seen)


def test_weak_scaling_unchanged_without_a_global_batch():
    for n in (256, 1024, 8192):
        mdl, plan = sc.scale_plan(n_gpus=n)
        assert plan == ParallelPlan(tp=8, pp=4, dp=n // 32, ep=8, micro_batch=1,
                                    gpus_per_server=8)
        assert mdl.global_batch == plan.dp * sc.DEFAULT_MICROBATCHES
        m2, p2 = sc.scale_plan(n_gpus=n, microbatches=sc.DEFAULT_MICROBATCHES)
        assert (m2, p2) == (mdl, plan)
        # the same plan as a fixed batch of that size
        m3, p3 = sc.scale_plan(n_gpus=n, global_batch=mdl.global_batch)
        assert (m3, p3) == (mdl, plan)


def test_step_flows_of_a_fixed_batch_record_it():
    mdl, plan = sc.scale_plan(n_gpus=64, pp=2, global_batch=48)
    st = sc.step_flows(mdl, plan)
    assert st.info["global_batch"] == 48 and st.info["microbatches"] == 48 // plan.dp
    assert st.tokens_per_step == 48 * mdl.seq_len
    assert st.info["overlap"] == "megatron"
    w = st.info["overlap_windows"]
    per_mb = (st.info["math_time"] + st.info["bytes_tp_bytes_sent"]
              / get_gpu("h100_sxm").nvlink_bandwidth) / st.info["microbatches"]
    assert w["backward"] == pytest.approx(2 * w["forward"], rel=1e-12)
    assert w["backward"] + w["forward"] == pytest.approx(per_mb, rel=1e-12)
    assert st.info["dp_buckets"] == [c["count"] for c in st.info["collectives"]
                                     if c["name"] == "dp_reduce_scatter"][0]


def test_bad_global_batch_refused_naming_it():
    with pytest.raises(ValueError, match=r"^global_batch: 100 .* multiple of 32, e\.g\. "
                                         r"96, 128"):
        sc.scale_plan(n_gpus=1024, global_batch=100)              # dp = 32
    with pytest.raises(ValueError, match=r"^global_batch: .* e\.g\. 32$"):
        sc.scale_plan(n_gpus=1024, global_batch=8)                # fewer than one each
    with pytest.raises(ValueError, match="not both"):
        sc.scale_plan(n_gpus=1024, global_batch=256, microbatches=8)
    with pytest.raises(ValueError, match="^overlap"):
        sc.scale_plan(n_gpus=64, overlap=0.5)
    mdl, plan = sc.scale_plan(n_gpus=64)
    for bad in ("fast", 1.5, -0.1, True):
        with pytest.raises(ValueError, match="^overlap"):
            sc.step_flows(mdl, plan, overlap=bad)
    # scenarios: every size checked before any run, the error names the key or flag
    with pytest.raises(ScenarioError, match=r"^--global-batch: .* at 2048 GPUs .* e\.g\. "
                                            r"64, 128"):
        sc.scale_scenarios({"topology.gpus": "1024,2048", "workload.global_batch": "96"},
                           flags=sc.SCALE_FLAGS)
    with pytest.raises(ScenarioError, match=r"^scenario key 'workload\.global_batch'"):
        sc.scale_scenarios({"topology.gpus": [1024], "workload.global_batch": 100})
    with pytest.raises(ScenarioError, match=r"^--global-batch: .* drop --microbatches"):
        sc.scale_scenarios({"workload.global_batch": "4096", "workload.microbatches": "8"},
                           flags=sc.SCALE_FLAGS)
    # each job's own plan: two jobs of 512 GPUs have dp = 16
    with pytest.raises(ScenarioError, match="global-batch"):
        sc.scale_scenarios({"topology.gpus": "1024", "workload.jobs": "2",
                            "workload.global_batch": "40"}, flags=sc.SCALE_FLAGS)
    ok, = sc.scale_scenarios({"topology.gpus": "1024", "workload.jobs": "2",
                              "workload.global_batch": "48"}, flags=sc.SCALE_FLAGS)
    args = sc.point_arguments(ok)
    assert args["plan_options"]["global_batch"] == 48
    assert args["plan_options"]["microbatches"] is None
    assert args["step_options"]["overlap"] == "megatron"


@pytest.mark.parametrize("argv,text", [
    (["--global-batch", "100"], "multiple of 32"),
    (["--global-batch", "0"], ">= 1"),
    (["--global-batch", "many"], "integer"),
    (["--global-batch", "256", "--microbatches", "4"], "drop --microbatches"),
    (["--overlap", "fast"], "'megatron'"),
])
def test_cli_bad_batch_or_overlap_exits_2_naming_the_flag(argv, text, capsys):
    from fabric_jax.cli import main
    assert main(["scale", "--gpus", "1024", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and argv[0] in err[0] and text in err[0]


# ------------------------------------------------------------------ the overlap
def _bucket_events(comm, window, n, *, forward):
    """Exposed time of ``n`` equal buckets run one after another beside ``window`` of
    compute, event by event (the test's own oracle)."""
    c, w = comm / n, window / n
    if not forward:                       # reduce-scatter i starts when its grads exist
        t = 0.0
        for i in range(1, n + 1):
            t = max(t, i * w) + c
        return t - window
    t_comp, t_comm = 0.0, 0.0             # all-gather i must end before forward i
    for _ in range(n):
        t_comm += c
        t_comp = max(t_comp, t_comm) + w
    return t_comp - window


def test_megatron_exposed_against_hand_counts_and_events():
    # comm << compute: one bucket's time; comm >> compute: comm less the hidden part
    assert sc.megatron_exposed(1e-3, 0.1, 4) == pytest.approx(0.25e-3, rel=1e-12)
    assert sc.megatron_exposed(0.1, 0.01, 4) == pytest.approx(0.1 - 0.0075, rel=1e-12)
    assert sc.megatron_exposed(0.0, 0.01, 4) == 0.0
    assert sc.megatron_exposed(0.05, 0.0, 3) == pytest.approx(0.05, rel=1e-12)
    rng = np.random.default_rng(4)
    for _ in range(200):
        comm, window = rng.uniform(0, 1, 2)
        n = int(rng.integers(1, 12))
        got = float(sc.megatron_exposed(comm, window, n))
        for fwd in (False, True):
            assert got == pytest.approx(_bucket_events(comm, window, n, forward=fwd),
                                        rel=1e-9, abs=1e-12)
    # elementwise over jobs
    np.testing.assert_allclose(sc.megatron_exposed([1e-3, 0.1], [0.1, 0.01], [4, 4]),
                               [0.25e-3, 0.0925])


def test_megatron_step_time_is_compute_plus_the_exposed_parts():
    C, k, L = 1.0, 10, 0.02
    ph = np.array([1e-3, 2e-3, 3e-3])                  # slice: a2a+pp, rs, ag
    w = np.array([0.2, 0.1])                           # backward, forward windows
    got = sc.megatron_step_time(C, k, ph, w, 5, L)
    want = C + k * 1e-3 + max(0.02 / 5, 0.02 - 0.2 * 4 / 5) \
        + max(0.03 / 5, 0.03 - 0.1 * 4 / 5) + L
    assert got == pytest.approx(want, rel=1e-12)
    # the flat fraction that gives it back through job_step_time
    f = sc.flat_overlap(C, k, ph.sum(), L, got)
    assert sc.job_step_time(C, f, k, ph.sum(), L) == pytest.approx(got, rel=1e-12)


def _point(overlap, **plan_kw):
    topo, st, nic = sc.build_point(32, plan_options=dict(pp=2, **plan_kw),
                                   step_options=dict(slice_time=30e-6, overlap=overlap))
    return topo, st, nic


def test_point_metrics_megatron_against_the_runs_own_phase_times():
    topo, st, nic = _point("megatron", global_batch=8)
    run = sc.ideal_rails(st, nic)
    m = sc.point_metrics(run, st, topo, None, nic, n_rails=8)
    # the phases' ends by hand from the run's finish times
    fin, phase = run.finish, run.flows.phase
    e_a = fin[phase <= 1].max()
    e_rs = max(e_a, fin[phase == 2].max())
    e_ag = max(e_rs, fin[phase == 3].max())
    t_a, t_rs, t_ag = e_a, e_rs - e_a, e_ag - e_rs
    np.testing.assert_allclose(sc.phase_slice_times(run, st)[0], [t_a, t_rs, t_ag],
                               rtol=1e-12)
    k, C, i = st.slices, st.compute_time, st.info
    assert i["microbatches"] == 8 // i["dp"] and i["global_batch"] == 8
    W = i["overlap_windows"]
    n = i["dp_buckets"]
    x = (max(k * t_rs / n, k * t_rs - W["backward"] * (n - 1) / n)
         + max(k * t_ag / n, k * t_ag - W["forward"] * (n - 1) / n))
    assert m["step_time"] == pytest.approx(C + k * t_a + x + m["latency_time"], rel=1e-12)
    assert m["dp_exposed_time"] == pytest.approx(x, rel=1e-9)
    assert m["gpu_utilization"] == pytest.approx(C / m["step_time"], rel=1e-12)
    peak = get_gpu("h100_sxm").peak_flops
    assert m["model_flops_utilization"] == pytest.approx(
        i["step_flops"] / (32 * peak * m["step_time"]), rel=1e-12)
    assert sum(m["phase_comm_times"].values()) == pytest.approx(k * e_ag, rel=1e-12)
    assert m["overlap"] == "megatron"
    # the flat override keeps the old formula; 0 hides nothing, so it is the slowest
    _, st0, _ = _point(0.0, global_batch=8)
    m0 = sc.point_metrics(run, st0, topo, None, nic, n_rails=8)
    assert m0["step_time"] == pytest.approx(C + k * e_ag + m0["latency_time"], rel=1e-12)
    assert m0["step_time"] >= m["step_time"]
    assert np.isnan(m0["dp_exposed_time"]) and m0["overlap"] == 0.0


@pytest.mark.slow
def test_rail_reduction_stays_exact_with_a_fixed_batch_and_megatron_overlap():
    # the options change only sizes and the step formula: one rail's figures are the
    # full run's (uec sprays over per-server-pair candidate sets: exact)
    topo, st, nic = _point("megatron", global_batch=16)
    topo = sc.scale_topology(32, switch_radix=8)
    kw = dict(dt=0.5e-6, n_steps=1200)
    full = sc.simulate_rails(st, topo, "uec", rails=None, **kw)
    one = sc.simulate_rails(st, topo, "uec", rails=(0,), **kw)
    assert np.all(np.isfinite(full.finish))
    assert sc.rail_reduction(st, topo, get_fabric("uec").routing, (0,), None)["exact"]
    m_full = sc.point_metrics(full, st, topo, "uec", nic, n_rails=8)
    m_one = sc.point_metrics(one, st, topo, "uec", nic, n_rails=8)
    for key in ("step_time", "gpu_utilization", "dp_exposed_time"):
        assert m_one[key] == pytest.approx(m_full[key], rel=1e-3), key
    for ph in m_full["phase_comm_times"]:
        assert m_one["phase_comm_times"][ph] == pytest.approx(
            m_full["phase_comm_times"][ph], rel=1e-3, abs=1e-9), ph


def test_resume_reads_batch_and_overlap_as_the_scenario_does(tmp_path, capsys):
    # an earlier run's inputs as the command recorded them (flags left out: None) match
    # the same values given explicitly; an old file without --global-batch and with the
    # old flat default (overlap 0.0) does not match the new default
    import json
    from argparse import Namespace

    from fabric_jax.scale import cli
    base = dict(system="hgx_h100", model="mixtral_8x7b", dt_us=0.5, rails="1",
                max_paths=4, switch_radix=128, beyond_radix="planes", slice_us=250.0,
                pp=4, ep=8, skew=1.0, seed=0, no_ideal=False, jobs=1, placement="packed",
                background=0.0, background_cdf="web_search", latency="nccl",
                job_gpus=None, job_models=None, job_overlap="always", cluster_gpus=None,
                dp_algorithm="nccl", qps=1, hash="qp", hash_polarization=False,
                expert_load="zipf", capacity_factor=1.25)
    out = tmp_path / "s.json"
    out.write_text(json.dumps(dict(inputs=dict(base, microbatches=None, overlap=None,
                                               global_batch=None),
                                   points=[dict(gpus=16)], complete=False)))
    args = Namespace(**base, microbatches=8, overlap="megatron", global_batch=None,
                     resume=True, json=str(out))
    assert list(cli._earlier(args)) == [16]
    out.write_text(json.dumps(dict(inputs=dict(base, microbatches=8, overlap=0.0),
                                   points=[], complete=False)))
    with pytest.raises(ScenarioError, match="--overlap"):
        cli._earlier(Namespace(**base, microbatches=None, overlap=None, global_batch=None,
                               resume=True, json=str(out)))
    with pytest.raises(ScenarioError, match="--global-batch"):
        cli._earlier(Namespace(**base, microbatches=None, overlap="0", global_batch="64",
                               resume=True, json=str(out)))
