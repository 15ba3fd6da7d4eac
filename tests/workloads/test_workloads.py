"""Workload builders: the Workload record, placement, traffic, training steps.

The collective flow builders' tests are in ``tests/collectives/test_collectives_flows.py``, next to
NCCL's model whose schedules they use.  :func:`tests.helpers.contention_free` is a tiny
oracle for the DAG semantics: every flow runs alone at rate ``B`` (no sharing),
starting at ``max(arrival, finish of deps) + delay``.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fabric_jax.workloads as wl
from fabric_jax.units import gbps
from fabric_jax.workloads import (
    FlowSizeCDF, Workload, all_to_all, concat, incast, megatron_groups, permutation,
    place_job, place_jobs, poisson_background, ring_all_reduce, training_step,
)
from tests.helpers import contention_free

S = 8e6  # bytes
B = 1e9  # bytes/s for the contention-free oracle


# ------------------------------------------------------------------ traffic
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



def test_columns_follow_concat_subset_and_stripes():
    a = ring_all_reduce([0, 1, 2], S, job="A")
    n = a.n_flows
    a = a.with_columns(phase=np.arange(n, dtype=np.int32))
    b = all_to_all([3, 4], S, job="B")
    w = concat(a, b).validate(5)
    # a part without a column gets -1 there, in the column's dtype
    np.testing.assert_array_equal(w.columns["phase"], list(range(n)) + [-1, -1])
    assert w.columns["phase"].dtype == np.int32
    with pytest.raises(ValueError, match="columns"):
        a.with_columns(rail=np.zeros(2)).validate()
    # subset: deps renumbered, a dependency left out raises (or is dropped on request)
    keep = np.arange(n - 3, n)                               # the last ring step
    with pytest.raises(ValueError, match="left out"):
        a.subset(keep)
    sub = a.subset(keep, drop_deps=True).validate()
    np.testing.assert_array_equal(sub.columns["phase"], keep)
    np.testing.assert_array_equal(sub.src, a.src[keep])
    closed = w.subset(np.arange(n)).validate()
    np.testing.assert_array_equal(closed.deps, a.deps)
    # stripes: n rows per flow, size / n, each stripe waits for every stripe of a dep
    st = a.stripes(2).validate()
    assert st.n_flows == 2 * n and st.total_bytes == pytest.approx(a.total_bytes)
    np.testing.assert_array_equal(st.columns["phase"], np.repeat(np.arange(n), 2))
    f = n - 1
    d = a.deps[f][a.deps[f] >= 0][0]                        # flow f waits for flow d
    assert {2 * d, 2 * d + 1} <= set(st.deps[2 * f][st.deps[2 * f] >= 0].tolist())
    assert a.stripes(1) is a


def test_one_step_builder_for_the_model_step_and_the_scale_step():
    # both steps are step_collectives: same all-to-all pairs, pipeline sends and
    # data-parallel bytes on the wire; they differ only in the options named
    from fabric_jax.workloads import ParallelPlan, model_training_step, step_collectives
    plan = ParallelPlan(tp=8, pp=2, dp=4, ep=4)       # one rank of a DP group per server
    ar = step_collectives("mixtral_8x7b", plan, dp="all_reduce")
    rs = step_collectives("mixtral_8x7b", plan, dp="reduce_scatter_all_gather",
                          pp_order="direction", expert_skew=0.0)
    for w in (ar, rs):
        w.validate(plan.n_gpus)
    ph_ar, ph_rs = ar.columns["phase"], rs.columns["phase"]
    for ph in (0, 1):
        pairs = lambda w, p: sorted(zip(w.src[p].tolist(), w.dst[p].tolist()))  # noqa
        assert pairs(ar, ph_ar == ph) == pairs(rs, ph_rs == ph)
        assert ar.size[ph_ar == ph].sum() == pytest.approx(rs.size[ph_rs == ph].sum())
    # reduce-scatter + all-gather carry what the ring all-reduce does (flat rings: one
    # member of each group per server; with several, the rings are per rail instead)
    assert ar.size[ph_ar == 5].sum() == pytest.approx(rs.size[ph_rs >= 2].sum())
    ms = model_training_step("mixtral_8x7b", plan)
    server = np.arange(plan.n_gpus) // plan.gpus_per_server
    cross = server[ar.src] != server[ar.dst]
    assert ms.info["network_bytes_per_step"] == pytest.approx(ar.size[cross].sum())
    with pytest.raises(ValueError, match="dp"):
        step_collectives("mixtral_8x7b", plan, dp="tree")


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
        _, finish = contention_free(w, B)
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
    _, finish = contention_free(w, B)
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
    _, finish = contention_free(w, B)
    assert finish.max() == pytest.approx(2 * (C + t_a2a + t_ar))
    w, _ = training_step(hosts, C, phases, serialize=False, n_steps=2)
    _, finish = contention_free(w, B)
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
