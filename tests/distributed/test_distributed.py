"""fabric_jax.distributed: batched sweeps and multi-device sharding.

Multi-device runs happen in a subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu`` (the flag must
be set before jax is imported, and this process already imported it); the subprocess
compares every sharded result with the single-device one computed in the same process
and reports the differences as JSON.  In-process tests cover the single-device paths,
the independent NumPy oracle (textbook progressive filling), padding and input errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.helpers import with_host_devices

import fabric_jax as fj
from fabric_jax.distributed import (device_mesh, max_min_fair_sharded, simulate_fluid_sharded,
                                    sweep)
from tests.multihost.instance import fluid_instance
from tests.reference.maxmin_numpy import progressive_filling

ROOT = Path(__file__).resolve().parents[2]


def _instance(seed, n_links=12, n_flows=37, hops=3):
    """Dense ``[links, flows]`` incidence: each flow on ``hops`` random links (weight 1
    or a 0.5 split), random capacities."""
    rng = np.random.default_rng(seed)
    A = np.zeros((n_links, n_flows))
    for h in range(hops):
        A[rng.integers(0, n_links, n_flows), np.arange(n_flows)] = rng.choice([0.5, 1.0], n_flows)
    cap = rng.uniform(1.0, 10.0, n_links)
    return A, cap, rng


# ------------------------------------------------------------ single device
@pytest.mark.parametrize("seed,n_flows", [(0, 37), pytest.param(1, 1500, marks=pytest.mark.slow)])
def test_sharded_solver_matches_oracle_and_max_min_fair(x64, seed, n_flows):
    # 1500 flows x 4-wide rows = 6000 entries > COMPACT_MIN_ENTRIES: compaction runs
    # (the four-device subprocess below covers compaction in the default run).
    A, cap, rng = _instance(seed, n_links=40, n_flows=n_flows, hops=4)
    demand = np.where(rng.random(A.shape[1]) < 0.3, rng.uniform(0.05, 1.0, A.shape[1]), np.inf)
    ref, _ = progressive_filling(A, cap, demand)
    res = max_min_fair_sharded(A, cap, demand, mesh=device_mesh(devices=jax.devices()[:1]))
    np.testing.assert_allclose(np.asarray(res.rates), ref, rtol=1e-9)
    single = fj.max_min_fair(A, cap, demand)
    np.testing.assert_allclose(np.asarray(res.rates), np.asarray(single.rates), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(res.link_load), A @ ref, rtol=1e-9)
    np.testing.assert_array_equal(np.asarray(res.saturated), np.asarray(single.saturated))
    assert bool(res.info.converged)
    assert int(res.info.iterations) == int(single.info.iterations)
    assert float(res.info.max_violation) <= 1e-9 * cap.max()


def test_sweep_max_min_fair_with_failed_link_masks():
    A, cap, rng = _instance(2)
    inc = fj.Incidence.from_dense(A)
    alive = rng.random((6, A.shape[0])) > 0.2          # failed-link sets as capacity masks
    caps = cap * alive
    out = sweep(lambda c: fj.max_min_fair(inc, c), caps)
    assert out.rates.shape == (6, A.shape[1])
    for b in range(6):
        ref, _ = progressive_filling(A, caps[b])
        np.testing.assert_allclose(np.asarray(out.rates[b]), ref, rtol=1e-5, atol=1e-6)
        # a flow crossing a failed link gets nothing
        dead = (A[~alive[b]] > 0).any(axis=0)
        assert np.all(np.asarray(out.rates[b])[dead] == 0)


def test_sweep_shared_argument_and_demand_batch():
    A, cap, rng = _instance(3)
    inc = fj.Incidence.from_dense(A)
    demands = rng.uniform(0.1, 2.0, (4, A.shape[1]))
    out = sweep(lambda c, d: fj.max_min_fair(inc, c, d), cap, demands, in_axes=(None, 0))
    ref = fj.max_min_fair(inc, np.broadcast_to(cap, (4, A.shape[0])), demands)
    np.testing.assert_allclose(np.asarray(out.rates), np.asarray(ref.rates), rtol=1e-5)
    assert np.all(np.asarray(out.rates) <= demands * (1 + 1e-6))


def test_sweep_simulate_flows_batched_matches_loop():
    A, cap, rng = _instance(4, n_flows=9)
    inc = fj.Incidence.from_dense(A)
    caps = cap * rng.uniform(0.5, 1.0, (3, A.shape[0]))
    arrival = rng.uniform(0, 1, (3, A.shape[1]))
    size = rng.uniform(1, 5, (3, A.shape[1]))
    out = sweep(fj.simulate_flows_batched, inc, caps, arrival, size,
                in_axes=(None, 0, 0, 0), batched=True)
    for b in range(3):
        ref = fj.simulate_flows(inc, caps[b], arrival[b], size[b])
        np.testing.assert_allclose(np.asarray(out.finish[b]), np.asarray(ref.finish), rtol=1e-5)


@pytest.mark.slow
def test_sweep_per_scenario_simulate_flows():
    # Per-scenario simulate_flows under sweep (vmap): the slot table cannot grow inside a
    # trace, so it needs max_active = flows, and says so otherwise.
    A, cap, rng = _instance(5, n_flows=6)
    inc = fj.Incidence.from_dense(A)
    caps = cap * rng.uniform(0.5, 1.0, (3, A.shape[0]))
    arrival, size = np.zeros(6), rng.uniform(1, 5, 6)
    out = sweep(lambda c: fj.simulate_flows(inc, c, arrival, size, max_active=6).finish, caps)
    for b in range(3):
        ref = fj.simulate_flows(inc, caps[b], arrival, size)
        np.testing.assert_allclose(np.asarray(out[b]), np.asarray(ref.finish), rtol=1e-5)
    with pytest.raises(ValueError, match="per_device"):
        sweep(lambda c: c, caps, per_device=True)
    with pytest.raises(ValueError, match="max_active"):
        sweep(lambda c: fj.simulate_flows(inc, c, arrival, size, max_active=2).finish, caps)


def test_sweep_is_deterministic_and_mesh_path_agrees():
    A, cap, rng = _instance(5)
    inc = fj.Incidence.from_dense(A)
    caps = cap * rng.uniform(0.5, 1.0, (3, A.shape[0]))
    f = lambda c: fj.max_min_fair(inc, c).rates  # noqa: E731
    first = np.asarray(sweep(f, caps))
    np.testing.assert_array_equal(first, np.asarray(sweep(f, caps)))
    # An explicit (one-device) mesh takes the placed-and-sharded path: same numbers.
    np.testing.assert_array_equal(first, np.asarray(sweep(f, caps, mesh=device_mesh())))


def test_sharded_solver_flow_without_links():
    # Flow 2 crosses no link: it gets its demand (3.0), as in max_min_fair.
    A = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    res = max_min_fair_sharded(A, np.array([10.0, 3.0]), np.array([np.inf, np.inf, 3.0]))
    np.testing.assert_allclose(np.asarray(res.rates), [7.0, 3.0, 3.0])
    np.testing.assert_array_equal(np.asarray(res.saturated), [True, True])


def test_errors_name_the_argument():
    A, cap, _ = _instance(6)
    inc = fj.Incidence.from_dense(A)
    f = lambda c, d: fj.max_min_fair(inc, c, d)  # noqa: E731
    with pytest.raises(ValueError, match="fn"):
        sweep(3, cap)
    with pytest.raises(ValueError, match=r"args\[1\]"):
        sweep(f, np.ones((3, 12)), np.ones((4, 37)))
    with pytest.raises(ValueError, match="in_axes"):
        sweep(f, cap, cap, in_axes=(0,))
    with pytest.raises(ValueError, match="in_axes"):
        sweep(f, cap, cap, in_axes=(None, None))
    with pytest.raises(ValueError, match="empty"):
        sweep(f, np.ones((0, 12)), np.ones((0, 37)))
    with pytest.raises(ValueError, match=r"args\[0\].*scalar"):
        sweep(f, 1.0, np.ones((2, 37)))
    with pytest.raises(ValueError, match="mesh"):
        sweep(f, np.ones((2, 12)), np.ones((2, 37)), mesh="cpu")
    with pytest.raises(ValueError, match="capacity"):
        max_min_fair_sharded(A, np.ones((2, 12)))
    with pytest.raises(ValueError, match="capacity"):
        max_min_fair_sharded(A, -cap)
    with pytest.raises(ValueError, match="demand"):
        max_min_fair_sharded(A, cap, np.ones(5))
    with pytest.raises(ValueError, match="max_iter"):
        max_min_fair_sharded(A, cap, max_iter=0)
    with pytest.raises(ValueError, match="mesh"):
        max_min_fair_sharded(A, cap, mesh=jax.devices())


def test_sharded_fluid_traces_and_refuses_what_it_cannot_split():
    # Nothing is compiled (the equality runs are the slow four-device tests below).
    # Traced on a one-device mesh: shard_map's replication check types every value of
    # the step as varying or not over the flow axis, so a reduction over flows that
    # misses its all-reduce and reaches the link state (declared replicated) fails here
    # (checked by hand: HopTable.pool_sum without its psum makes the PFC state vary).
    from fabric_jax.distributed.sharded_fluid import sharded_fluid_call
    inc, cap, size, options = fluid_instance()
    run, args, _ = sharded_fluid_call(inc, cap, size, mesh=device_mesh(), **options)
    run.lower(args)
    # and with two traffic classes (the links x classes units' sums, both NIC shares
    # and the work-conserving second pass: each must be global)
    run, args, _ = sharded_fluid_call(inc, cap, size, mesh=device_mesh(),
                                      traffic_class=np.arange(30) % 2,
                                      classes=fj.qos.traffic_classes(2, weights=(3, 1)),
                                      **dict(options, buffer=2e5))
    run.lower(args)
    # Host-side checks: each error names the argument.
    with pytest.raises(ValueError, match="mesh"):
        simulate_fluid_sharded(inc, cap, size, mesh=jax.devices(), **options)
    # and with dynamic routing (the policy's per-flow state split, its clocks and link
    # view replicated)
    rinc, _, _, ropts = fluid_instance(routing="ib_ar")
    run, args, _ = sharded_fluid_call(rinc, cap, size, mesh=device_mesh(), **ropts)
    run.lower(args)
    logits = np.zeros(ropts["routing"].split.shape)           # per-flow parameters
    winc, _, _, wopts = fluid_instance(routing="weighted_ecmp",
                                       routing_params=fj.routing.weighted_ecmp_params(logits))
    fj.simulate_fluid(winc, cap, size, **dict(wopts, n_steps=2))   # a valid run unsharded
    with pytest.raises(ValueError, match="array parameters"):
        simulate_fluid_sharded(winc, cap, size, **wopts)
    with pytest.raises(ValueError, match="init_state"):
        simulate_fluid_sharded(inc, cap, size, init_state={}, **options)
    with pytest.raises(ValueError, match="size"):
        simulate_fluid_sharded(inc, cap, size[:-1], **options)
    with pytest.raises(ValueError, match="base_rtt"):
        simulate_fluid_sharded(inc, cap, size, base_rtt=np.ones(31), **options)
    with pytest.raises(ValueError, match="not_an_option"):
        simulate_fluid_sharded(inc, cap, size, not_an_option=1, **options)


# ------------------------------------------------------------ four devices
_SCRIPT = textwrap.dedent("""
    import json, jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import fabric_jax as fj
    from fabric_jax.distributed import device_mesh, max_min_fair_sharded, sweep
    out = {"devices": jax.device_count()}
    rng = np.random.default_rng(0)
    L, F = 64, 2051              # padded to 2052; 513 rows x 8 > 4096 entries: compaction
    A = np.zeros((L, F))
    for h in range(8):
        A[rng.integers(0, L, F), np.arange(F)] = rng.choice([0.5, 1.0], F)
    cap = rng.uniform(1.0, 10.0, L)
    dem = np.where(rng.random(F) < 0.3, rng.uniform(0.05, 1.0, F), np.inf)
    inc = fj.Incidence.from_dense(A)
    one = fj.max_min_fair(inc, cap, dem)
    r4 = max_min_fair_sharded(inc, cap, dem)
    r4b = max_min_fair_sharded(inc, cap, dem)
    rel = lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))
    out["sharded4_vs_single"] = rel(r4.rates, one.rates)
    out["load_vs_single"] = rel(r4.link_load, one.link_load)
    out["saturated_equal"] = bool(np.array_equal(r4.saturated, one.saturated))
    out["iterations"] = [int(r4.info.iterations), int(one.info.iterations)]
    out["deterministic"] = bool(np.array_equal(r4.rates, r4b.rates))
    # Sweeps: a small network (compile time dominates), 103 flows on 16 links.
    L, F = 16, 103
    A = np.zeros((L, F))
    for h in range(3):
        A[rng.integers(0, L, F), np.arange(F)] = rng.choice([0.5, 1.0], F)
    inc, cap = fj.Incidence.from_dense(A), rng.uniform(1.0, 10.0, L)
    caps = cap * (rng.random((6, L)) > 0.15)       # 6 scenarios, failed links: padded to 8
    s4 = sweep(lambda c: fj.max_min_fair(inc, c), caps)
    s4_even = sweep(lambda c: fj.max_min_fair(inc, c), caps[:4])   # no padding to strip
    out["sweep_devices"] = len(s4_even.rates.sharding.device_set)
    out["sweep_shape"] = list(s4.rates.shape)
    out["sweep_vs_single"] = max(rel(s4.rates[b], fj.max_min_fair(inc, caps[b]).rates)
                                 for b in range(6))
    # per_device: each device solves its slice as one block-diagonal problem.
    pd = sweep(lambda i, c: fj.max_min_fair(i, c).rates, inc, caps, in_axes=(None, 0),
               batched=True, per_device=True)
    out["per_device_shape"] = list(pd.shape)
    out["per_device_vs_single"] = max(rel(pd[b], fj.max_min_fair(inc, caps[b]).rates)
                                      for b in range(6))
    print(json.dumps(out))
""")


_SIM_SCRIPT = textwrap.dedent("""
    import json, jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import fabric_jax as fj
    from fabric_jax.distributed import sweep
    out = {"devices": jax.device_count()}
    rel = lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))
    rng = np.random.default_rng(1)
    L, F = 16, 103
    A = np.zeros((L, F))
    for h in range(3):
        A[rng.integers(0, L, F), np.arange(F)] = rng.choice([0.5, 1.0], F)
    inc, cap = fj.Incidence.from_dense(A), rng.uniform(1.0, 10.0, L)
    arr, size = rng.uniform(0, 1, (5, F)), rng.uniform(1, 5, (5, F))
    scap = cap * rng.uniform(0.5, 1.0, (5, L))      # no failed link: every flow finishes
    sf = sweep(fj.simulate_flows_batched, inc, scap, arr, size, in_axes=(None, 0, 0, 0),
               batched=True)
    ref = fj.simulate_flows_batched(inc, scap, arr, size)
    out["simflows_shape"] = list(sf.finish.shape)
    out["simflows_vs_single"] = rel(sf.finish, ref.finish)
    print(json.dumps(out))
""")


#: The sharded fluid run on four devices against the single-device run, in float64:
#: one case per argv[1] ("pfc": DCQCN + PFC, with one and with two traffic classes
#: (ETS 3:1, classes alternating); "others": HPCC + drop with a trajectory
#: and stop_when_idle, Swift + credits with dependencies across devices and a link
#: failure, DCQCN + PFC in the smooth mode).  30 flows are padded to 32.
_FLUID_SCRIPT = textwrap.dedent("""
    import json, os, sys, jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    if os.environ.get("FABRIC_JAX_TEST_CACHE"):      # share compiled programs across runs
        jax.config.update("jax_compilation_cache_dir", os.environ["FABRIC_JAX_TEST_CACHE"])
    import fabric_jax as fj
    from tests.multihost.instance import fluid_instance
    inc, cap, size, base = fluid_instance()
    if sys.argv[1] == "routed":       # every equal-cost path, a policy steering the flows
        inc, cap, size, base = fluid_instance(routing="ib_ar")
    deps = np.full((30, 1), -1)
    deps[20:, 0] = np.arange(10)                      # flows 20.. wait for flows 0..9
    link = int(np.asarray(inc.link_idx)[np.asarray(inc.flow_idx) == 0][1])
    two = dict(traffic_class=np.arange(30) % 2, buffer=2e5,   # a PFC headroom per class
               classes=fj.qos.traffic_classes(2, weights=(3, 1)))
    flowlet = fluid_instance(routing="flowlet")[3]["routing"]
    cases = dict(pfc=[{}, two], routed=[{}, dict(routing=flowlet, law="hpcc")], others=[
        dict(n_steps=80, law="hpcc", flow_control="drop", buffer=3e4, save_every=8,
             stop_when_idle=True),
        dict(law="swift", flow_control="credit", deps=deps,
             faults=[(1e-5, [link], 0.0), (3e-5, [link], 1.0)]),
        dict(n_steps=40, smooth=fj.smooth.smooth(0.05))])[sys.argv[1]]
    out = []
    for case in cases:
        kw = dict(base, **case)
        one = fj.simulate_fluid(inc, cap, size, **kw)
        four = fj.simulate_fluid_sharded(inc, cap, size, **kw)
        r = dict(shape=list(np.shape(four.finish)), dt=kw["dt"])
        for name in ("finish", "sent", "delivered", "dropped", "queued", "in_flight",
                     "discarded", "link_queue"):
            r[name] = [np.asarray(getattr(four, name)).tolist(),
                       np.asarray(getattr(one, name)).tolist()]
        if one.routing_state is not None:
            r["split"] = [np.asarray(four.routing_state.split).tolist(),
                          np.asarray(one.routing_state.split).tolist()]
        for name in ("paused_time", "max_queue", "solver_iterations"):
            r[name] = [np.asarray(getattr(four.info, name)).tolist(),
                       np.asarray(getattr(one.info, name)).tolist()]
        r["stalled"] = [bool(four.info.stalled), bool(one.info.stalled)]
        r["max_residual"] = float(four.info.max_residual)
        if one.trajectory is not None:
            r["traj_sent"] = [np.asarray(four.trajectory.sent).tolist(),
                              np.asarray(one.trajectory.sent).tolist()]
            r["traj_rate"] = [np.asarray(four.trajectory.rate).tolist(),
                              np.asarray(one.trajectory.rate).tolist()]
        out.append(r)
    print(json.dumps(dict(devices=jax.device_count(), cases=out)))
""")


def _check_fluid_case(r, iteration_slack=0):
    """A sharded fluid run equals the single-device one: bytes and link state to
    float64 round-off; finish times to round-off or, where a round-off difference
    flips which FIFO part of a port's service a flow's last byte left in (the
    within-step instant of fluid.stages.complete.finish_in_step is discontinuous there: a tie between
    a port's grant and its standing queue), within one step.  ``iteration_slack``: the
    step solves' largest iteration counts may differ by that much (with multipath
    flows, summation order can freeze two levels a few ulps apart in one iteration or
    in two)."""
    assert r["shape"] == [30]                            # padding (30 -> 32) stripped
    assert r["stalled"] == [False, False]
    for name in ("sent", "delivered", "dropped", "queued", "in_flight", "discarded",
                 "link_queue", "paused_time", "max_queue", "traj_sent", "traj_rate", "split"):
        if name in r:
            got, want = (np.asarray(v, float) for v in r[name])
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6, err_msg=name)
    got, want = (np.asarray(v) for v in r["finish"])
    assert np.all(np.isfinite(want))
    assert np.all(np.abs(got - want) <= r["dt"] * (1 + 1e-9))
    assert np.mean(np.abs(got - want) <= 1e-9 * want) >= 0.9
    its = np.asarray(r["solver_iterations"])
    assert np.all(np.abs(its[0] - its[1]) <= iteration_slack), its
    # bytes conserved, per flow and step
    sent = np.asarray(r["sent"][0])
    rest = sum(np.asarray(r[k][0]) for k in ("delivered", "in_flight", "queued", "dropped",
                                              "discarded"))
    np.testing.assert_allclose(rest, sent, rtol=1e-9, atol=1e-6)
    assert r["max_residual"] < 1e-6


@pytest.mark.slow
def test_four_devices_sharded_fluid_dcqcn_pfc_equals_single_device():
    r = _run_four_devices(_FLUID_SCRIPT, "pfc")
    assert r["devices"] == 4
    one_class, two_classes = r["cases"]
    for case in r["cases"]:
        assert np.sum(case["paused_time"][1]) > 0        # PFC paused: links interact
        _check_fluid_case(case)
    # paused per link and class
    n_links = len(one_class["paused_time"][1])
    assert np.shape(two_classes["paused_time"][1]) == (n_links, 2)


@pytest.mark.slow
def test_four_devices_sharded_fluid_dynamic_routing_equals_single_device():
    # IB adaptive routing (DCQCN + PFC) and flowlet switching (HPCC + PFC) over every
    # equal-cost path of fat_tree(4): the final splits equal too
    r = _run_four_devices(_FLUID_SCRIPT, "routed")
    assert r["devices"] == 4 and len(r["cases"]) == 2
    ar, flowlet = (np.asarray(case["split"][1]) for case in r["cases"])
    assert ar.shape == (30, 4) and np.sum(ar > 0.01) > 30        # AR: multipath in use
    assert np.all(np.sort(flowlet, axis=1)[:, :-1] == 0)         # flowlets: one path each
    for case in r["cases"]:
        _check_fluid_case(case, iteration_slack=1)


@pytest.mark.slow
def test_four_devices_sharded_fluid_other_laws_and_modes_equal_single_device():
    r = _run_four_devices(_FLUID_SCRIPT, "others")
    assert r["devices"] == 4 and len(r["cases"]) == 3
    hpcc_drop, swift_credit, smooth = r["cases"]
    assert np.sum(hpcc_drop["dropped"][1]) > 0           # drops happened
    assert np.sum(swift_credit["paused_time"][1]) > 0    # credits ran out
    for case in r["cases"]:
        _check_fluid_case(case)


def _run_four_devices(script, *argv):
    env = dict(os.environ, XLA_FLAGS=with_host_devices(4),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", script, *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def four_devices():
    return _run_four_devices(_SCRIPT)


@pytest.mark.slow
def test_four_devices_sharded_solver_equals_single_device(four_devices):
    r = four_devices
    assert r["devices"] == 4
    assert r["sharded4_vs_single"] < 1e-12      # float64: only summation order differs
    assert r["load_vs_single"] < 1e-12
    assert r["saturated_equal"]
    assert r["iterations"][0] == r["iterations"][1]
    assert r["deterministic"]


def test_four_devices_sweeps_pad_and_equal_single_device(four_devices):
    r = four_devices
    assert r["sweep_devices"] == 4               # the scenario axis really is split
    assert r["sweep_shape"] == [6, 103]          # padding (6 -> 8) stripped
    assert r["sweep_vs_single"] < 1e-12
    assert r["per_device_shape"] == [6, 103]
    assert r["per_device_vs_single"] < 1e-12


@pytest.mark.slow
def test_four_devices_simulate_flows_sweep_equals_single_device():
    r = _run_four_devices(_SIM_SCRIPT)
    assert r["devices"] == 4
    assert r["simflows_shape"] == [5, 103]       # padding (5 -> 8) stripped
    assert r["simflows_vs_single"] < 1e-12
