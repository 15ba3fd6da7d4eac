"""What a fluid step asks of the GPU runtime, read from a compiled program
(``experiments/_hlo.py``: :func:`launch_model`, :func:`gpu_device`; issue 24).

The oracle of :func:`launch_model` is arithmetic on a hand-written program: kernels of the
step body, plus each inner loop's body (and condition) times its trips, and a host round
trip per evaluation of the condition of a loop whose trip count XLA does not know (XLA's
``WhileThunk`` reads the predicate back each time; with a known trip count it does not).
On the compiled fluid run the model must see the per-step solves as loops of unknown trip
count and ``solver_unroll``'s iterations as loops of known trip count.
"""

import numpy as np
import pytest

from experiments import _hlo as hlo
from experiments import bench_dynamics


def _program(inner_trip_count=None):
    known = ("" if inner_trip_count is None else
             f', backend_config={{"known_trip_count":{{"n":"{inner_trip_count}"}}}}')
    return f"""HloModule m

%cond.in (p: (f32[8], pred[])) -> pred[] {{
  %p = (f32[8]{{0}}, pred[]) parameter(0)
  ROOT %g = pred[] get-tuple-element(%p), index=1
}}

%body.in (p: (f32[8], pred[])) -> (f32[8], pred[]) {{
  %p = (f32[8]{{0}}, pred[]) parameter(0)
  %a = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%c1, metadata={{op_name="allocate/while/body/min"}}
  %b = pred[] fusion(%a), kind=kInput, calls=%c2, metadata={{op_name="allocate/while/body/or"}}
  ROOT %t = (f32[8]{{0}}, pred[]) tuple(%a, %b)
}}

%cond.step (p: (s32[], f32[8])) -> pred[] {{
  %p = (s32[], f32[8]{{0}}) parameter(0)
  ROOT %c = pred[] fusion(%p), kind=kLoop, calls=%c3
}}

%body.step (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %p = (s32[], f32[8]{{0}}) parameter(0)
  %x = f32[8]{{0}} fusion(%p), kind=kLoop, calls=%c4
  %y = f32[8]{{0}} fusion(%x), kind=kLoop, calls=%c5
  %z = f32[8]{{0}} fusion(%y), kind=kLoop, calls=%c6
  %cp = f32[8]{{0}} copy(%z)
  %w = (f32[8]{{0}}, pred[]) while(%t0), condition=%cond.in, body=%body.in{known}
  ROOT %r = (s32[], f32[8]{{0}}) tuple(%i, %cp)
}}

ENTRY %main (a: f32[8]) -> f32[8] {{
  %a = f32[8]{{0}} parameter(0)
  %init = f32[8]{{0}} fusion(%a), kind=kLoop, calls=%c7
  %w = (s32[], f32[8]{{0}}) while(%t), condition=%cond.step, body=%body.step, backend_config={{"known_trip_count":{{"n":"10"}}}}
  ROOT %o = f32[8]{{0}} get-tuple-element(%w), index=1
}}
"""


def test_a_loop_of_unknown_trip_count_costs_a_round_trip_per_test():
    m = hlo.launch_model(_program(), {"allocate": 5})
    assert m["step_kernels"] == 4                     # three fusions and a copy
    assert m["kernels_per_step"] == 4 + 5 * 2         # the inner body five times
    assert m["round_trips_per_step"] == 5 + 1         # its condition six times
    (inner,) = m["inner"]
    assert inner == dict(scope="allocate", trips=5, known_trip_count=False, kernels=2,
                         cond_kernels=0)
    assert m["fusions_in_program"] == 7 and m["kernels"] == 8


def test_a_loop_of_known_trip_count_costs_no_round_trip():
    m = hlo.launch_model(_program(inner_trip_count=3), {"allocate": 5})
    assert m["kernels_per_step"] == 4 + 3 * 2         # its own trip count, not ``trips``
    assert m["round_trips_per_step"] == 0
    assert m["inner"][0]["known_trip_count"] is True


def test_the_compiled_fluid_run_has_its_solves_as_loops_the_model_reads():
    topo, inc, cap, lat = bench_dynamics.workload(8, 16, 0, None)
    kw = dict(dt=1e-6, n_steps=20, law="dcqcn", flow_control="pfc", buffer=1e6,
              link_latency=np.asarray(topo.latency), nic_links=topo)
    depths = {}
    compiled, res = hlo.compiled_fluid_run(inc, cap, np.full(inc.n_flows, 1e6),
                                           depths=depths, **kw)
    it = np.asarray(res.info.solver_iterations, float) / kw["n_steps"]
    # one record per step and solve, summing to the run's own counts
    for key, total in zip(("allocate", "nic_send"), np.asarray(res.info.solver_iterations)):
        assert len(depths[key]) == kw["n_steps"] and sum(depths[key]) == total
    # every step's solves ran (each has a flow on a link); on the CPU their first
    # iterations stay inside the while loops (on a GPU they run before them, below)
    assert min(depths["allocate"]) >= 1 and min(depths["nic_send"]) >= 1
    assert hlo.first_iterations("cpu") == {"allocate": 0, "nic_send": 0}
    trips = {key: hlo.loop_trips(depths[key]) for key in depths}
    assert trips["allocate"] == pytest.approx(it[0])
    assert trips["nic_send"] == pytest.approx(it[1])
    m = hlo.launch_model(compiled.as_text(), trips)
    assert sorted(lp["scope"] for lp in m["inner"]) == ["allocate", "nic_send"]
    assert not any(lp["known_trip_count"] for lp in m["inner"])
    # each exact loop tests its condition once more than it iterates
    assert m["round_trips_per_step"] == pytest.approx(it[0] + 1 + it[1] + 1)
    # ... and launches its body's kernels once per trip
    plain0 = hlo.launch_model(compiled.as_text(), {key: 0.0 for key in depths})
    (solve_loop,) = [lp for lp in m["inner"] if lp["scope"] == "allocate"]
    assert m["kernels_per_step"] - plain0["kernels_per_step"] == pytest.approx(
        trips["allocate"] * solve_loop["kernels"]
        + trips["nic_send"] * [lp for lp in m["inner"] if lp["scope"] == "nic_send"][0]["kernels"])
    # the program compiled after the record has no callback in it
    assert "callback" not in compiled.as_text().lower()
    unrolled, res4 = hlo.compiled_fluid_run(inc, cap, np.full(inc.n_flows, 1e6),
                                            solver_unroll=4, **kw)
    for field in ("delivered", "finish", "link_queue"):
        np.testing.assert_array_equal(np.asarray(getattr(res4, field)),
                                      np.asarray(getattr(res, field)))
    m4 = hlo.launch_model(unrolled.as_text(), {key: 0.0 for key in trips})
    fixed = [lp for lp in m4["inner"] if lp["known_trip_count"]]
    assert sorted(lp["scope"] for lp in fixed) == ["allocate", "nic_send"]
    assert all(lp["trips"] == 4 for lp in fixed)
    # with no iteration left for the exact loops: one test each, nothing else
    assert m4["round_trips_per_step"] == 2
    # testing every 3 iterations: the solve's loop is a third as many trips (its body
    # three iterations), the same results
    every, res3 = hlo.compiled_fluid_run(inc, cap, np.full(inc.n_flows, 1e6),
                                         solver_check_every=3, **kw)
    np.testing.assert_array_equal(np.asarray(res3.delivered), np.asarray(res.delivered))
    trips3 = {"allocate": hlo.loop_trips(depths["allocate"], every=3),
              "nic_send": trips["nic_send"]}
    m3 = hlo.launch_model(every.as_text(), trips3)
    (solve3,) = [lp for lp in m3["inner"] if lp["scope"] == "allocate"]
    assert solve3["kernels"] > 2 * solve_loop["kernels"]  # three iterations per trip
    assert m3["round_trips_per_step"] == pytest.approx(
        trips3["allocate"] + 1 + trips["nic_send"] + 1)
    assert trips3["allocate"] <= trips["allocate"]


def test_gpu_device_names_its_targets_and_how_to_get_the_plugin():
    with pytest.raises(ValueError, match="h200"):
        hlo.gpu_device("a100")
    has_plugin = hlo.cuda_plugin() is not None
    if has_plugin:   # an environment set up for it: a compile-only XLA:GPU device
        assert hlo.gpu_device("h100").platform in ("gpu", "cuda")
    else:            # the test environment: the error says what to install
        with pytest.raises(RuntimeError, match=r"jax\[cuda12\]"):
            hlo.gpu_device("h200")


def test_solve_launches_counts_a_one_off_loop():
    # the step loop has a known trip count (not a solver loop); the inner one does not
    m = hlo.solve_launches(_program(), trips=5)
    assert m["loops"] == 1 and m["body_kernels"] == 2 and m["cond_kernels"] == 0
    assert m["kernels"] == 8
    assert m["kernels_per_call"] == (8 - 2) + 5 * 2      # the rest once, the body 5 times
    assert m["round_trips_per_call"] == 5 + 1
    known = hlo.solve_launches(_program(inner_trip_count=3), trips=5)
    assert known["loops"] == 0 and known["round_trips_per_call"] == 0


def _chunked_program():
    """An outer time loop of 4 chunks (known trip count); each chunk's body has one
    kernel of its own and a conditional: skip (1 kernel) or simulate (a scan of 2 steps
    of ``_program``'s step body, 4 kernels and an inner while loop of 2 kernels)."""
    return """HloModule m

%cond.in (p: (f32[8], pred[])) -> pred[] {
  %p = (f32[8]{0}, pred[]) parameter(0)
  ROOT %g = pred[] get-tuple-element(%p), index=1
}

%body.in (p: (f32[8], pred[])) -> (f32[8], pred[]) {
  %p = (f32[8]{0}, pred[]) parameter(0)
  %a = f32[8]{0} fusion(%p), kind=kLoop, calls=%c1, metadata={op_name="allocate/while/body/min"}
  %b = pred[] fusion(%a), kind=kInput, calls=%c2
  ROOT %t = (f32[8]{0}, pred[]) tuple(%a, %b)
}

%cond.step (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]{0}) parameter(0)
  ROOT %c = pred[] compare(%p), direction=LT
}

%body.step (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %x = f32[8]{0} fusion(%p), kind=kLoop, calls=%c4
  %y = f32[8]{0} fusion(%x), kind=kLoop, calls=%c5
  %z = f32[8]{0} fusion(%y), kind=kLoop, calls=%c6
  %cp = f32[8]{0} copy(%z)
  %w = (f32[8]{0}, pred[]) while(%t0), condition=%cond.in, body=%body.in
  ROOT %r = (s32[], f32[8]{0}) tuple(%i, %cp)
}

%simulate (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %w = (s32[], f32[8]{0}) while(%t), condition=%cond.step, body=%body.step, backend_config={"known_trip_count":{"n":"2"}}
  ROOT %o = f32[8]{0} get-tuple-element(%w), index=1
}

%skip (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %s = f32[8]{0} fusion(%p), kind=kLoop, calls=%c8
}

%cond.chunk (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]{0}) parameter(0)
  ROOT %c = pred[] compare(%p), direction=LT
}

%body.chunk (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %idle = pred[] fusion(%p), kind=kInput, calls=%c9
  %c = f32[8]{0} conditional(%idle, %v, %v), true_computation=%skip, false_computation=%simulate
  ROOT %r = (s32[], f32[8]{0}) tuple(%i, %c)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %init = f32[8]{0} fusion(%a), kind=kLoop, calls=%c7
  %w = (s32[], f32[8]{0}) while(%t), condition=%cond.chunk, body=%body.chunk, backend_config={"known_trip_count":{"n":"4"}}
  ROOT %o = f32[8]{0} get-tuple-element(%w), index=1
}
"""


def test_run_launches_counts_the_chunks_and_the_branch_each_takes():
    text = _chunked_program()
    step = hlo.launch_model(text, {"allocate": 3})
    assert step["kernels_per_step"] == 4 + 3 * 2 and step["round_trips_per_step"] == 3 + 1
    for busy in (1.0, 0.5, 0.0):
        m = hlo.run_launches(text, {"allocate": 3}, busy=busy)
        # the entry's kernel; per chunk its own kernel, a round trip for the
        # conditional, and the branch taken: 2 steps, or the skip's kernel
        assert m["kernels_per_run"] == pytest.approx(
            1 + 4 * (1 + busy * 2 * step["kernels_per_step"] + (1 - busy) * 1))
        assert m["round_trips_per_run"] == pytest.approx(
            4 * (1 + busy * 2 * step["round_trips_per_step"]))
        assert m["conditionals"] == 4
    with pytest.raises(ValueError, match="busy"):
        hlo.run_launches(text, {}, busy=1.5)


def test_run_launches_on_the_compiled_fluid_run_is_its_steps_and_chunks():
    topo, inc, cap, lat = bench_dynamics.workload(8, 16, 0, None)
    kw = dict(dt=1e-6, n_steps=40, law="dcqcn", flow_control="pfc", buffer=1e6,
              link_latency=np.asarray(topo.latency), nic_links=topo, save_every=10,
              stop_when_idle=True)
    compiled, res = hlo.compiled_fluid_run(inc, cap, np.full(inc.n_flows, 1e6), **kw)
    text = compiled.as_text()
    it = np.asarray(res.info.solver_iterations, float) / kw["n_steps"]
    trips = {"allocate": it[0], "nic_send": it[1]}
    step = hlo.launch_model(text, trips)
    whole = hlo.run_launches(text, trips, busy=1.0)
    assert whole["conditionals"] == 4                 # one per chunk of 10 steps
    assert whole["round_trips_per_run"] == pytest.approx(
        40 * step["round_trips_per_step"] + 4)
    assert whole["kernels_per_run"] > 40 * step["kernels_per_step"]
    idle = hlo.run_launches(text, trips, busy=0.0)
    assert idle["round_trips_per_run"] == 4
    assert idle["kernels_per_run"] < 0.1 * whole["kernels_per_run"]


def test_loop_trips_is_each_steps_ceil_of_what_the_fixed_iterations_leave():
    d = [0, 1, 2, 5, 9]
    assert hlo.loop_trips(d) == pytest.approx(17 / 5)
    # 4 fixed iterations leave 0, 0, 0, 1, 5; 2 per trip: 0, 0, 0, 1, 3
    assert hlo.loop_trips(d, fixed=4, every=2) == pytest.approx(4 / 5)
    assert hlo.loop_trips(d, every=4) == pytest.approx((0 + 1 + 1 + 2 + 3) / 5)
    assert hlo.loop_trips([]) == 0.0


def test_solve_depths_leaves_no_callback_behind():
    topo, inc, cap, lat = bench_dynamics.workload(8, 16, 0, None)
    kw = dict(dt=1e-6, n_steps=5, buffer=1e6, link_latency=np.asarray(topo.latency),
              nic_links=topo)
    from fabric_jax import simulate_fluid
    with hlo.solve_depths() as rec:
        inside = simulate_fluid(inc, cap, np.full(inc.n_flows, 1e6), **kw)
    assert len(rec["allocate"]) == 5 and len(rec["nic_send"]) == 5
    after = simulate_fluid(inc, cap, np.full(inc.n_flows, 1e6), **kw)
    assert len(rec["allocate"]) == 5                   # the later run records nothing
    np.testing.assert_array_equal(np.asarray(after.delivered), np.asarray(inside.delivered))


def test_the_solves_first_iterations_leave_their_loops_on_a_gpu_only():
    """``fairness.on_accelerators``: a program lowered for a GPU runs each exact solve's
    first iteration before its while loop (no host round trip for a test whose answer
    is known), one lowered for the CPU keeps the plain loop (the peeled iteration
    would only add fusions there).  Lowering for a GPU needs no GPU."""
    assert hlo.first_iterations("cuda") == {"allocate": 1, "nic_send": 1}
    assert hlo.first_iterations("cpu") == {"allocate": 0, "nic_send": 0}


def test_loops_in_a_command_buffer_cost_a_kernel_per_test_and_no_round_trip():
    """A ``while`` that XLA:GPU recorded into a command buffer is a conditional node of
    a CUDA graph: its condition's kernels and one kernel that sets the node's handle run
    on the device at each test, and the host waits for none of them; a loop inside it is
    on the device too, whether or not the log names it."""
    text = _program().replace("%w = (s32[]", "%outer = (s32[]")   # the step loop's name
    host = hlo.launch_model(text, {"allocate": 5})
    dev = hlo.launch_model(text, {"allocate": 5}, on_device={"outer"})
    assert host["round_trips_per_step"] == 5 + 1 and dev["round_trips_per_step"] == 0
    # the inner loop's six tests: no kernel of their own (the predicate is a tuple
    # element) plus the handle's kernel each
    assert dev["kernels_per_step"] == host["kernels_per_step"] + 6
    # named directly, the inner loop alone
    inner = hlo.launch_model(text, {"allocate": 5}, on_device={"w"})
    assert inner["round_trips_per_step"] == 0
    # a name the program does not hold changes nothing
    assert hlo.launch_model(text, {"allocate": 5}, on_device={"nope"}) == host


def test_a_conditional_in_a_command_buffer_costs_a_kernel_and_no_round_trip():
    text = _chunked_program().replace("%w = (s32[], f32[8]{0}) while(%t), "
                                      "condition=%cond.chunk",
                                      "%chunks = (s32[], f32[8]{0}) while(%t), "
                                      "condition=%cond.chunk")
    assert "%chunks" in text
    host = hlo.run_launches(text, {"allocate": 3}, busy=0.5)
    dev = hlo.run_launches(text, {"allocate": 3}, busy=0.5, on_device={"chunks"})
    assert dev["round_trips_per_run"] == 0 and host["round_trips_per_run"] > 4
    # per chunk: its conditional's kernel; per simulated step, the inner loop's 4 tests
    assert dev["kernels_per_run"] == pytest.approx(
        host["kernels_per_run"] + 4 * 1 + 4 * 0.5 * 2 * 4)
    assert dev["conditionals"] == host["conditionals"] == 4


def test_solve_launches_on_the_device():
    host = hlo.solve_launches(_program(), trips=5)
    dev = hlo.solve_launches(_program(), trips=5, on_device={"w"})
    assert dev["round_trips_per_call"] == 0
    assert dev["kernels_per_call"] == host["kernels_per_call"] + 6


def test_compile_for_reads_the_command_buffers_from_the_compilers_log():
    """The log lines transcribed from XLA:GPU's compiler (jaxlib 0.10.2, the proxy's
    fluid run for an H200) are parsed into the thunks of each command buffer; a compile
    that logs nothing (here: the CPU's, which has no command buffers) is refused with
    the fix, not read as "no loop on the device"."""
    log = ("I1206 17:16:08.1 8590 command_buffer_conversion_pass.cc:602] Module jit__run "
           "CommandBufferConfig: enabled_commands: [FUSION, WHILE]\n"
           "I1206 17:16:08.2 8590 command_buffer_conversion_pass.cc:531] Creating command "
           "buffer thunk with the following thunks: copy.131, while.183, loop_add_fusion.5\n")
    assert [m.group(1).split(", ") for m in hlo._CB_LINE.finditer(log)] == [
        ["copy.131", "while.183", "loop_add_fusion.5"]]
    import jax
    import jax.numpy as jnp
    with pytest.raises(RuntimeError, match="log_command_buffers"):
        hlo.compile_for(jax.jit(lambda x: x + 1), (), (jnp.ones(3),), jax.devices("cpu")[0],
                        buffers=[])


def test_gpu_device_describes_a_driver_only_when_asked(monkeypatch):
    seen = {}

    class Topo:
        devices = ["dev"]

    def fake(platform, topology, target_config):
        seen["spec"] = target_config
        return Topo()
    from jax.experimental import topologies
    monkeypatch.setattr(topologies, "get_topology_desc", fake)
    assert hlo.gpu_device("h200") == "dev"
    assert f'driver_version: "{hlo.DRIVER}"' in seen["spec"]
    assert seen["spec"].index("driver_version") < seen["spec"].index("cuda_compute_capability")
    hlo.gpu_device("h200", driver=None)
    assert "driver_version" not in seen["spec"]


def test_batch_trips_are_each_steps_deepest_scenario():
    # a vmapped while loop runs until every scenario's has stopped: step by step the
    # deepest scenario's trips, not the mean of the scenarios' trips
    a = {"allocate": [1, 4, 2], "nic_send": [1, 1, 3]}
    b = {"allocate": [3, 1, 2], "nic_send": [2, 1, 1]}
    trips = hlo.batch_trips([a, b], {"allocate": 1, "nic_send": 0})
    assert trips["allocate"] == pytest.approx(hlo.loop_trips([3, 4, 2], 1))   # (2+3+1)/3
    assert trips["nic_send"] == pytest.approx((2 + 1 + 3) / 3)
    assert trips["allocate"] > np.mean([hlo.loop_trips(d["allocate"], 1) for d in (a, b)])
    assert hlo.batch_trips([a], {"allocate": 0, "nic_send": 0}, every=2)["allocate"] == \
        pytest.approx(hlo.loop_trips(a["allocate"], 0, 2))
    with pytest.raises(ValueError, match="step counts"):
        hlo.batch_trips([a, {"allocate": [1], "nic_send": [1]}], {"allocate": 0, "nic_send": 0})
    # one run's trips: every=M applies to the solve's loop only (the water-fill tests
    # every round), and a batch of one is that run
    one = hlo.run_trips(a, {"allocate": 1, "nic_send": 1}, every=2)
    assert one == {"allocate": pytest.approx(hlo.loop_trips([1, 4, 2], 1, 2)),
                   "nic_send": pytest.approx(hlo.loop_trips([1, 1, 3], 1))}
    assert one["nic_send"] == pytest.approx(2 / 3)
    assert hlo.batch_trips([a], {"allocate": 1, "nic_send": 1}, every=2) == one


def test_a_batchs_scenarios_solve_as_deep_as_alone_step_by_step():
    # batch_trips' premise: in simulate_fluid_batched the scenarios' solves are as deep
    # as in their own runs, step by step (so the vmapped loop's trips are the deepest's)
    from fabric_jax import simulate_fluid, simulate_fluid_batched
    topo, inc, cap, lat = bench_dynamics.workload(8, 16, 0, None)
    kw = dict(dt=1e-6, n_steps=12, buffer=1e6, link_latency=np.asarray(topo.latency),
              nic_links=topo, law="dcqcn", flow_control="pfc")
    sizes = np.stack([np.full(inc.n_flows, s) for s in (2e3, 3e4, 1e6)])
    alone = []
    for s in sizes:
        with hlo.solve_depths() as rec:
            simulate_fluid(inc, cap, s, **kw)
        alone.append(dict(rec))
    with hlo.solve_depths() as rec:
        simulate_fluid_batched(inc, cap, sizes, **kw)
    for key in ("allocate", "nic_send"):
        # a step's callbacks come one per scenario, in an order the runtime picks (not
        # always the scenarios'): compare each step's depths as a set of three
        together = np.sort(np.asarray(rec[key]).reshape(12, 3), axis=1)   # [step, 3]
        np.testing.assert_array_equal(together, np.sort([d[key] for d in alone], axis=0).T)
    assert len({tuple(d["allocate"]) for d in alone}) > 1      # the scenarios differ


def test_caught_returns_the_last_calls_arguments_and_named_keywords():
    import types
    mod = types.SimpleNamespace(core=lambda x, y, *, warm=True: (x + y) * (2 if warm else 1))
    orig = mod.core

    def public():
        mod.core(1, 2, warm=False)
        return mod.core(3, 4, warm=True)
    args, res = hlo.caught(mod, "core", public, ("warm",))
    assert args == (3, 4, True) and res == 14 and mod.core is orig     # restored
    assert hlo.caught(mod, "core", public)[0] == (3, 4)
