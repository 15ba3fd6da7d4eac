"""Results do not change: fingerprints of a fixed set of runs, recorded before a refactor.

Every case below is a run of the public API on a small, fixed input: each congestion
control law, flow-control mode and routing policy, the four presets, faults (a failed
and a lossy link), traffic classes, the receiver options, the shared buffer, every
fluid driver (plain, batched, windowed, sharded, resumed), the event engine, the
flow sets the workload builders make (collectives, training steps, the scale step), a
scale point, the all-reduce scaling sweep and compare's default results.
Each output array is reduced to a fingerprint (shape, count of non-finite values, sum,
a position-weighted sum, min and max of the finite values) and compared with the record
in ``tests/data/regression.json``.

Tolerances.  Fluid runs are in float64: their fingerprints must agree to
``RTOL_X64`` (1e-12; in practice bit for bit, the slack being for XLA reassociating a
sum).  Float32 runs agree to ``RTOL_F32`` (1e-6, summation order).  Host-built flow
sets (NumPy) must agree exactly up to ``RTOL_X64``.

Recording.  ``FABRIC_JAX_RECORD_REGRESSION=1 python -m pytest tests/test_regression.py
-m "slow or not slow" -p no:xdist`` rewrites the record from the code as it is (only
for a change that is meant to move results, stated in its commit); a run without it
only compares.  A case missing from the record fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import jax
import numpy as np
import pytest

import fabric_jax as fj
from tests.helpers import enable_x64, incast_leaf_spine, slow_except

RECORD = pathlib.Path(__file__).resolve().parent / "data" / "regression.json"
RECORDING = os.environ.get("FABRIC_JAX_RECORD_REGRESSION") == "1"
RTOL_X64 = 1e-12
RTOL_F32 = 1e-6


# ------------------------------------------------------------------ fingerprints
def _leaves(tree, prefix=""):
    """``[(name, array)]`` of every numeric leaf of a result (dataclasses, dicts, lists,
    tuples, arrays), named by its path."""
    out = []
    if tree is None or isinstance(tree, (str, bytes)):
        return out
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for f in dataclasses.fields(tree):
            if f.name == "state":   # the loop's carry: its layout is not a result
                continue
            out += _leaves(getattr(tree, f.name), f"{prefix}.{f.name}")
        return out
    if isinstance(tree, dict):
        for k in sorted(tree, key=str):
            if "wall" in str(k):   # wall-clock times of the machine, not results
                continue
            out += _leaves(tree[k], f"{prefix}.{k}")
        return out
    if isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out += _leaves(v, f"{prefix}[{i}]")
        return out
    if isinstance(tree, (bool, np.bool_)):
        return [(prefix, np.asarray(tree, np.float64))]
    if isinstance(tree, (int, float, np.integer, np.floating)):
        return [(prefix, np.asarray(tree, np.float64))]
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        a = np.asarray(tree)
        if a.dtype.kind in "biuf":
            return [(prefix, a.astype(np.float64))]
        return out
    # other objects (a Law, a Policy): their own dataclass fields when they have them
    return out


def fingerprint(tree) -> dict:
    """``{name: [shape, nonfinite, sum, weighted sum, min, max]}`` of every leaf."""
    fp = {}
    for name, a in _leaves(tree):
        flat = a.ravel()
        fin = np.isfinite(flat)
        v = np.where(fin, flat, 0.0)
        w = 1.0 + (np.arange(flat.size) % 7) / 7.0
        fp[name] = [list(a.shape), int((~fin).sum()), float(v.sum()), float((w * v).sum()),
                    float(v[fin].min()) if fin.any() else 0.0,
                    float(v[fin].max()) if fin.any() else 0.0]
    return fp


def _close(a, b, rtol, scale):
    return abs(a - b) <= rtol * max(abs(a), abs(b), scale)


def compare(name, got: dict, want: dict, rtol: float):
    """Asserts two fingerprints agree (same leaves, shapes, non-finite counts; sums and
    extremes to ``rtol`` relative, of the leaf's own magnitude)."""
    assert sorted(got) == sorted(want), (
        f"{name}: outputs differ: new {sorted(set(got) - set(want))}, "
        f"missing {sorted(set(want) - set(got))}")
    for leaf in got:
        g, w = got[leaf], want[leaf]
        assert g[0] == w[0], f"{name}{leaf}: shape {g[0]} != recorded {w[0]}"
        assert g[1] == w[1], f"{name}{leaf}: {g[1]} non-finite values, recorded {w[1]}"
        scale = max(abs(w[4]), abs(w[5])) * max(np.prod(w[0], dtype=float), 1.0) * 1e-3
        for i, what in ((2, "sum"), (3, "weighted sum"), (4, "min"), (5, "max")):
            assert _close(g[i], w[i], rtol, scale), (
                f"{name}{leaf}: {what} {g[i]!r} != recorded {w[i]!r} (rtol {rtol})")


# ------------------------------------------------------------------ the cases
MB = 1e6


def _incast(**kw):
    """The DCQCN + PFC routed incast of :func:`tests.helpers.incast_leaf_spine`, with
    options, float64."""
    topo, r, inc = incast_leaf_spine()
    base = dict(dt=1e-6, n_steps=240, law="dcqcn", flow_control="pfc", buffer=topo.buffer,
                link_latency=topo.latency, nic_links=topo, routing=r, save_every=20)
    base.update(kw)
    return fj.simulate_fluid(inc, topo.capacity, np.full(6, 0.5 * MB), **base)


def _law_fc(law, fc):
    topo, r, inc = incast_leaf_spine()
    return fj.simulate_fluid(inc, topo.capacity, np.full(6, 0.5 * MB), dt=1e-6, n_steps=240,
                             law=law, flow_control=fc, buffer=np.full(topo.n_links, 200e3),
                             link_latency=topo.latency, nic_links=topo, routing=r,
                             save_every=20)


def _policy(name):
    topo = fj.leaf_spine(2, 4, 4, link_gbps=100.0, latency_us=1.0)
    src = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    dst = np.array([4, 5, 6, 7, 5, 6, 7, 4])
    ps = fj.shortest_paths(topo, src, dst)
    r = fj.make_routing(name, ps, seed=3)
    inc = fj.Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    return fj.simulate_fluid(inc, topo.capacity, np.full(8, 0.4 * MB), dt=1e-6, n_steps=200,
                             law="dcqcn", flow_control="pfc", buffer=topo.buffer,
                             link_latency=topo.latency, nic_links=topo, routing=r,
                             save_every=20, reorder=name != "spray")


def _preset(name):
    topo = fj.leaf_spine(2, 2, 4, link_gbps=100.0, latency_us=1.0)
    src = np.array([0, 1, 2, 3, 0, 1])
    dst = np.array([4, 4, 4, 4, 5, 6])
    ps = fj.shortest_paths(topo, src, dst)
    return fj.fabric_sim.simulate_paths(topo, ps, name, np.full(6, 0.5 * MB), dt=1e-6,
                                        n_steps=240, save_every=20)


def _faults():
    topo, r, inc = incast_leaf_spine()
    spine_link = int(np.flatnonzero(np.asarray(r.links)[0, :, 1] >= 0)[0])
    up = int(np.asarray(r.links)[0, spine_link, 1])
    events = [fj.faults.link_event(20e-6, [up], 0.0), fj.faults.link_event(80e-6, [up], 1.0),
              fj.faults.lossy_link([int(np.asarray(r.links)[4, 0, 2])], 0.01)]
    return _incast(faults=events, law="dcqcn", flow_control="pfc")


def _classes(arbitration):
    from fabric_jax import qos
    return _incast(traffic_class=np.array([0, 0, 1, 1, 0, 1]),
                   classes=qos.traffic_classes(2, arbitration=arbitration,
                                               weights=(3.0, 1.0)))


def _receiver():
    return _incast(reorder=False, loss_recovery="go_back_n", law="dcqcn", flow_control="drop",
                   buffer=60e3)


def _shared_buffer():
    topo, _, _ = incast_leaf_spine()
    return _incast(shared_buffer=topo)


def _fifo_one_band():
    return _incast(fifo_bands=1, stop_when_idle=True)


def _deps():
    topo, r, inc = incast_leaf_spine()
    deps = np.array([[-1], [0], [-1], [2], [1], [3]])
    return fj.simulate_fluid(inc, topo.capacity, np.full(6, 0.2 * MB), dt=1e-6, n_steps=240,
                             law="hpcc", flow_control="none", routing=r,
                             link_latency=topo.latency, nic_links=topo,
                             deps=deps, delay=np.full(6, 2e-6),
                             arrival=np.array([0, 0, 5e-6, 0, 0, 1e-5]))


def _smooth():
    topo, r, inc = incast_leaf_spine()
    return fj.simulate_fluid(inc, topo.capacity, np.full(6, 0.3 * MB), dt=1e-6, n_steps=120,
                             law="dcqcn", flow_control="pfc", buffer=topo.buffer,
                             link_latency=topo.latency, nic_links=topo, routing=r,
                             smooth=fj.smooth.smooth(0.05))


def _single_path(law):
    """Single-path (``routing=None``) incast on a dumbbell-like leaf-spine."""
    topo = fj.leaf_spine(2, 1, 4, link_gbps=100.0, latency_us=1.0)
    ps = fj.shortest_paths(topo, np.array([0, 1, 2, 3]), np.array([4, 4, 4, 5]))
    inc = fj.Incidence.from_paths(ps, np.ones((4, 1)), n_links=topo.n_links)
    return fj.simulate_fluid(inc, topo.capacity, np.full(4, 0.5 * MB), dt=1e-6, n_steps=200,
                             law=law, flow_control="pfc", buffer=topo.buffer,
                             link_latency=topo.latency, nic_links=topo, save_every=20)


def _single_path_args():
    topo = fj.leaf_spine(2, 1, 4, link_gbps=100.0, latency_us=1.0)
    ps = fj.shortest_paths(topo, np.array([0, 1, 2, 3, 5, 6]), np.array([4, 4, 4, 5, 7, 4]))
    inc = fj.Incidence.from_paths(ps, np.ones((6, 1)), n_links=topo.n_links)
    kw = dict(dt=1e-6, law="dcqcn", flow_control="pfc", buffer=topo.buffer,
              link_latency=topo.latency, nic_links=topo,
              arrival=np.array([0, 3e-6, 10e-6, 0, 30e-6, 60e-6]))
    return topo, inc, np.full(6, 0.3 * MB), kw


def _windowed():
    topo, inc, size, kw = _single_path_args()
    return fj.simulate_fluid_windowed(inc, topo.capacity, size, n_steps=240, max_active=6,
                                      window=40, **kw)


def _batched():
    topo, inc, size, kw = _single_path_args()
    sizes = np.stack([size, 2 * size, 0.5 * size])
    return fj.simulate_fluid_batched(inc, topo.capacity, sizes, n_steps=240, save_every=40,
                                     **kw)


def _sharded():
    topo, inc, size, kw = _single_path_args()
    return fj.simulate_fluid_sharded(inc, topo.capacity, size, n_steps=240, save_every=40,
                                     **kw)


def _resumed():
    topo, inc, size, kw = _single_path_args()
    first = fj.simulate_fluid(inc, topo.capacity, size, n_steps=100, **kw)
    return fj.simulate_fluid(inc, topo.capacity, size, n_steps=140, init_state=first.state,
                             save_every=20, **kw)


def _events():
    rng = np.random.default_rng(0)
    a = (rng.random((30, 50)) < 0.12) * rng.uniform(0.25, 1.0, (30, 50))
    cap = rng.uniform(1e9, 1e11, 30)
    res = fj.simulate_flows(a, cap, rng.uniform(0, 1e-5, 50), rng.uniform(1e3, 1e7, 50))
    fair = fj.max_min_fair(a, cap)
    return dict(events=res, fair=fair.rates)


# Flow sets (host NumPy: no simulation): what the scenario builders make.
def _workload_of(w):
    return {k: getattr(w, k) for k in ("src", "dst", "size", "arrival", "deps", "delay",
                                       "job", "group", "group_bytes", "group_ranks")}


def _collective_plans():
    topo = fj.rail_optimized(4, 8, servers_per_leaf=2, link_gbps=400.0, gpus_per_server=8)
    out = {}
    for op, algo in (("all_reduce", "ring"), ("all_reduce", "tree"), ("all_gather", "ring"),
                     ("reduce_scatter", "ring"), ("all_to_all", "direct"),
                     ("all_reduce", "nvls_tree")):
        p = fj.collectives.build_plan(topo, op, 64 * MB, algorithm=algo)
        out[f"{op}_{algo}"] = {k: getattr(p, k) for k in ("links", "weight", "size", "deps",
                                                          "latency", "delay", "bw_scale")}
    return out


def _workload_collectives():
    from fabric_jax.workloads import collectives as wc
    hosts = np.arange(8)
    return dict(ring=_workload_of(wc.ring_all_reduce(hosts, 8 * MB)),
                hd=_workload_of(wc.halving_doubling_all_reduce(hosts, 8 * MB)),
                tree=_workload_of(wc.tree_all_reduce(hosts, 8 * MB, n_chunks=2)),
                a2a=_workload_of(wc.all_to_all(hosts, 8 * MB)))


def _training_step():
    from fabric_jax.workloads import model as wm
    from fabric_jax.workloads import training as wt
    plan = wm.ParallelPlan(tp=2, pp=2, dp=4, gpus_per_server=2)
    step = wt.model_training_step("llama3_8b", plan, hosts=np.arange(16))
    return dict(workload=_workload_of(step.workload),
                **{k: v for k, v in dataclasses.asdict(step).items()
                   if k != "workload" and not isinstance(v, (str, dict))})


def _scale_step():
    from fabric_jax import scale
    model, plan = scale.scale_plan(n_gpus=256)
    step = scale.step_flows(model, plan)
    return {k: getattr(step, k) for k in ("src", "dst", "src_rank", "dst_rank", "size",
                                          "deps", "phase", "rail", "slices", "compute_time",
                                          "tokens_per_step")}


def _scale_point():
    from fabric_jax import scale
    return scale.run_scale([64], ["roce", "infiniband"])


def _scaling_curves():
    # the all-reduce sweep: two GPU counts side by side (block-diagonal ideal and fluid
    # runs), SHARP (infiniband) and NVLS + tree (roce)
    from fabric_jax import scale
    topos = [scale.sweep_topology(g, servers_per_leaf=2) for g in (16, 32)]
    return scale.scaling_curves(topos, ["infiniband", "roce"], 4 * MB)


def _compare():
    return fj.run_compare(progress=False)


# name -> (builder, float64?, default suite?)
CASES = {
    "law_none_fc_none": (lambda: _law_fc("none", "none"), True),
    "law_dcqcn_fc_pfc": (lambda: _law_fc("dcqcn", "pfc"), True),
    "law_ibcc_fc_credit": (lambda: _law_fc("ibcc", "credit"), True),
    "law_hpcc_fc_pfc": (lambda: _law_fc("hpcc", "pfc"), True),
    "law_swift_fc_drop": (lambda: _law_fc("swift", "drop"), True),
    "law_nscc_fc_trim": (lambda: _law_fc("nscc", "trim"), True),
    "law_dcqcn_fc_drop": (lambda: _law_fc("dcqcn", "drop"), True),
    "law_hpcc_fc_credit": (lambda: _law_fc("hpcc", "credit"), True),
    **{f"policy_{p}": ((lambda p=p: _policy(p)), True) for p in sorted(fj.POLICIES)},
    **{f"preset_{p}": ((lambda p=p: _preset(p)), True) for p in ("infiniband", "roce",
                                                                 "spectrum_x", "uec")},
    "faults": (_faults, True),
    "classes_ets": (lambda: _classes("ets"), True),
    "classes_strict": (lambda: _classes("strict"), True),
    "receiver_go_back_n": (_receiver, True),
    "shared_buffer": (_shared_buffer, True),
    "fifo_one_band_idle_stop": (_fifo_one_band, True),
    "deps_hpcc": (_deps, True),
    "smooth": (_smooth, True),
    "single_path_dcqcn": (lambda: _single_path("dcqcn"), True),
    "single_path_f32": (lambda: _single_path("ibcc"), False),
    "driver_windowed": (_windowed, True),
    "driver_batched": (_batched, True),
    "driver_sharded": (_sharded, True),
    "driver_resumed": (_resumed, True),
    "events_and_solve": (_events, True),
    "flows_collective_plans": (_collective_plans, True),
    "flows_workload_collectives": (_workload_collectives, True),
    "flows_training_step": (_training_step, True),
    "flows_scale_step": (_scale_step, True),
    "scale_point_64": (_scale_point, False),
    "scaling_curves_16_32": (_scaling_curves, False),
    "compare_default": (_compare, False),
}

DEFAULT = ("law_dcqcn_fc_pfc", "law_ibcc_fc_credit", "law_nscc_fc_trim", "policy_adaptive",
           "preset_spectrum_x", "faults", "classes_ets", "driver_windowed", "driver_resumed",
           "single_path_f32", "flows_collective_plans", "flows_training_step",
           "flows_scale_step")
HEAVY = ("compare_default",)


def _load():
    if RECORD.exists():
        return json.loads(RECORD.read_text())
    return {}


def _save(name, fp, rtol):
    data = _load()
    data[name] = dict(rtol=rtol, fingerprint=fp)
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", slow_except(sorted(set(CASES) - set(HEAVY)), DEFAULT))
def test_results_unchanged(name):
    """The case's outputs have the fingerprint recorded before the refactor."""
    build, x64 = CASES[name]
    _check(name, build, x64)


def _check(name, build, x64):
    with enable_x64(x64):
        out = jax.device_get(build())
    fp = fingerprint(out)
    assert fp, f"{name}: no numeric output"
    rtol = RTOL_X64 if x64 else RTOL_F32
    if RECORDING:
        _save(name, fp, rtol)
        return
    want = _load().get(name)
    assert want is not None, (f"{name}: no record in {RECORD.name}; record it with "
                              "FABRIC_JAX_RECORD_REGRESSION=1")
    compare(name, fp, want["fingerprint"], want["rtol"])


@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY)
def test_heavy_results_unchanged(name):
    """``fabric-jax compare``'s default results, unchanged."""
    build, x64 = CASES[name]
    _check(name, build, x64)


def test_fingerprint_notices_a_change():
    """The fingerprint is not blind: moving one value, or two values between positions,
    changes it beyond the tolerance."""
    a = dict(x=np.arange(12.0).reshape(3, 4), y=np.array([1.0, np.inf]))
    fp = fingerprint(a)
    compare("same", fingerprint(a), fp, RTOL_X64)
    b = dict(x=a["x"].copy(), y=a["y"])
    b["x"][1, 2] += 1e-9
    with pytest.raises(AssertionError):
        compare("moved", fingerprint(b), fp, RTOL_X64)
    c = dict(x=a["x"].copy(), y=a["y"])
    c["x"][0, 0], c["x"][0, 1] = c["x"][0, 1], c["x"][0, 0]
    with pytest.raises(AssertionError):
        compare("swapped", fingerprint(c), fp, RTOL_X64)


def test_every_default_case_is_recorded():
    """The record holds every case (a new case must be recorded with the code it
    protects, before the change it protects against)."""
    if RECORDING:
        return
    assert set(CASES) <= set(_load()), sorted(set(CASES) - set(_load()))
