"""The fluid slot table (:func:`fabric_jax.simulate_fluid_windowed`): the same per-flow
results as the plain engine (the oracle) for several laws and flow-control modes,
byte conservation across window boundaries, slots reused, clear errors."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from fabric_jax.fluid import FluidState, simulate_fluid, simulate_fluid_windowed, windowed
from fabric_jax.incidence import Incidence
from fabric_jax.paths import shortest_paths
from fabric_jax.topology import leaf_spine
from tests.helpers import enable_x64

US = 1e-6
N_FLOWS = 32
MAX_ACTIVE = 16      # half the flows: slots must be reused
WINDOW = 16
N_STEPS = 320        # 20 windows
ARRIVAL_SPAN = 200e-6  # arrivals spread over this span
#: x64: the two engines differ only in the order of floating-point sums (fewer terms per
#: link in the slot table); measured 1e-14 relative on these scenarios.
RTOL_X64 = 1e-7
#: float32: same, with float32 round-off amplified by the threshold dynamics (marks,
#: pauses) over hundreds of steps.
RTOL_F32 = 2e-3

CASES = {  # name -> (law, flow control, PFC ingress pool bytes)
    "none-none": ("none", "none", None),
    "dcqcn-pfc": ("dcqcn", "pfc", 6e4),
    "hpcc-pfc": ("hpcc", "pfc", 6e4),
    "hpcc-none": ("hpcc", "none", None),
    "dcqcn-drop": ("dcqcn", "drop", 1.5e5),
}


def _scenario(case):
    """Leaf-spine, 8 hosts (50 GB/s links, 1 us each); 32 flows over 200 us: two
    receivers take two thirds of them (incast-like queues, PFC pauses), the rest are
    spread; sizes 20-400 KB; flows inside one leaf have a shorter path and RTT."""
    topo = leaf_spine(2, 2, 4)
    rng = np.random.default_rng(7)
    dst = np.where(rng.random(N_FLOWS) < 0.67, 6 + (np.arange(N_FLOWS) % 2),
                   rng.integers(0, 8, N_FLOWS))
    src = (dst + rng.integers(1, 8, N_FLOWS)) % 8
    ps = shortest_paths(topo, src, dst)
    inc = Incidence.from_paths(ps, n_links=topo.n_links, seed=0)   # ECMP
    law, fc, buf = CASES[case]
    kw = dict(dt=1 * US, n_steps=N_STEPS, law=law, flow_control=fc, buffer=buf,
              arrival=np.sort(rng.uniform(0, ARRIVAL_SPAN, N_FLOWS)),
              link_latency=topo.latency, nic_links=topo)
    return inc, topo.capacity, rng.uniform(2e4, 4e5, N_FLOWS), kw


@functools.lru_cache(maxsize=None)
def _runs(case, x64=True):
    with enable_x64(x64):
        inc, cap, size, kw = _scenario(case)
        plain = simulate_fluid(inc, cap, size, **kw)
        slots = simulate_fluid_windowed(inc, cap, size, max_active=MAX_ACTIVE, window=WINDOW,
                                        **kw)
        host = jax.device_get
        return size, host(plain), host(slots)


@pytest.mark.parametrize("case", ["dcqcn-pfc",
                                  pytest.param("hpcc-none", marks=pytest.mark.slow),
                                  pytest.param("none-none", marks=pytest.mark.slow),
                                  pytest.param("dcqcn-drop", marks=pytest.mark.slow)])
def test_same_results_as_plain_engine(case):
    # Oracle: the plain engine, which carries all 32 flows in every step.  The slot
    # table runs 16 slots (+ pins), so flows leave and enter slots along the way; the
    # per-flow results and the link diagnostics must agree to round-off (x64).
    size, plain, slots = _runs(case)
    assert slots.peak_active <= MAX_ACTIVE < N_FLOWS
    fin_p, fin_s = np.asarray(plain.finish), np.asarray(slots.finish)
    assert np.all(np.isfinite(fin_p)), "scenario must let every flow finish"
    np.testing.assert_allclose(fin_s, fin_p, rtol=RTOL_X64)
    np.testing.assert_allclose(np.asarray(slots.start), np.asarray(plain.start), rtol=RTOL_X64)
    for name in ("sent", "delivered", "dropped", "discarded", "queued", "in_flight"):
        np.testing.assert_allclose(np.asarray(getattr(slots, name)),
                                   np.asarray(getattr(plain, name)), rtol=RTOL_X64,
                                   atol=1e-6 * size.max(), err_msg=name)
    for name in ("paused_time", "max_queue"):
        np.testing.assert_allclose(np.asarray(getattr(slots.info, name)),
                                   np.asarray(getattr(plain.info, name)), rtol=RTOL_X64,
                                   atol=1e-9, err_msg=name)
    assert bool(slots.info.stalled) == bool(plain.info.stalled)


def test_scenario_exercises_the_fabric():
    # The comparison above means something only if the fabric is congested (PFC pauses
    # links, switch queues build) and flows come and go (slots are reused).
    _, plain, slots = _runs("dcqcn-pfc")
    # (10 us of link pauses in all with FIFO queues, 2026-12-03: several links pause)
    paused = np.asarray(plain.info.paused_time)
    assert float(paused.sum()) >= 5 * US and int(np.sum(paused > 0)) >= 3
    assert float(np.asarray(plain.info.max_queue).max()) > 5e4
    assert slots.n_windows > N_FLOWS // MAX_ACTIVE


@pytest.mark.parametrize("case", ["dcqcn-pfc", pytest.param("dcqcn-drop",
                                                            marks=pytest.mark.slow)])
def test_bytes_are_conserved_across_windows(case):
    # Per flow: sent = delivered + in flight + queued + dropped + discarded, where the
    # flow's columns were gathered and scattered at up to 20 window boundaries; every
    # finished flow delivered its size; the engine's own per-step residual stayed at
    # round-off.
    size, _, slots = _runs(case)
    sent = np.asarray(slots.sent)
    rhs = sum(np.asarray(getattr(slots, n)) for n in ("delivered", "in_flight", "queued",
                                                      "dropped", "discarded"))
    np.testing.assert_allclose(sent, rhs, rtol=1e-9, atol=1e-6)
    done = np.isfinite(np.asarray(slots.finish))
    np.testing.assert_allclose(np.asarray(slots.delivered)[done], size[done], rtol=1e-5)
    assert float(slots.info.max_residual) < 1e-6 * size.sum()


@pytest.mark.slow
def test_float32_matches_plain_engine():
    # Default dtype: the same comparison within a float32 tolerance (summation order
    # differs; completion needs delivered >= size (1 - 3e-5)).
    _, plain, slots = _runs("dcqcn-pfc", x64=False)
    np.testing.assert_allclose(np.asarray(slots.finish), np.asarray(plain.finish),
                               rtol=RTOL_F32)


def test_state_layout_is_documented():
    # Every field of the engine's state declares its flow axis (an int) or that it is
    # carried over whole (None): the declaration the windowed and sharded drivers read
    # is what the state holds.
    _, plain, _ = _runs("dcqcn-pfc")
    axes = FluidState.flow_axes()
    present = plain.state.present()
    # (routing's and lossy links' fields only with a policy / lossy-link faults)
    assert set(axes) - set(present) == {"route", "load", "mark_l", "rate", "corrupted"}
    n = N_FLOWS
    for key, value in present.items():
        axis = axes[key]
        for leaf in jax.tree_util.tree_leaves(value):
            if axis is None:
                assert n not in np.shape(leaf) or key in ("max_queue",), key
            else:
                assert np.shape(leaf)[axis] == n, key


def test_too_few_slots_names_max_active():
    inc, cap, size, kw = _scenario("none-none")
    kw["arrival"] = np.zeros(N_FLOWS)   # all start at once: raised before any window
    with pytest.raises(ValueError, match=rf"max_active=8 is too small.*max_active >= {N_FLOWS}"):
        simulate_fluid_windowed(inc, cap, size, max_active=8, window=WINDOW, **kw)


@pytest.mark.parametrize("bad, match", [
    (dict(max_active=0), "max_active must be a positive integer"),
    (dict(window=0), "window must be a positive integer"),
    (dict(deps=np.full((N_FLOWS, 1), -1)), "deps is not supported"),
    (dict(save_every=16), "save_every is not supported"),
    (dict(routing=object()), "routing is not supported"),
])
def test_bad_arguments(bad, match):
    inc, cap, size, kw = _scenario("none-none")
    args = dict(max_active=MAX_ACTIVE, window=WINDOW)
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        simulate_fluid_windowed(inc, cap, size, **args, **kw)


@pytest.mark.slow
def test_faults_and_traffic_classes_match_plain_engine():
    # A spine uplink fails at 100 us and recovers at 180 us (queued bytes on it are
    # dropped and resent; flows routed over it are stranded meanwhile), with two
    # traffic classes (ETS) and the switches' shared buffer: still the plain engine's
    # per-flow results.
    with enable_x64(True):
        inc, cap, size, kw = _scenario("dcqcn-pfc")
        topo = leaf_spine(2, 2, 4)
        up = topo.link_index("leaf0", "spine0")
        kw.update(faults=[(100 * US, [up], 0.0), (180 * US, [up], 1.0)],
                  traffic_class=np.arange(N_FLOWS) % 2, shared_buffer=topo, buffer=2e5)
        plain = simulate_fluid(inc, cap, size, **kw)
        slots = simulate_fluid_windowed(inc, cap, size, max_active=MAX_ACTIVE,
                                        window=WINDOW, **kw)
    assert float(np.asarray(plain.dropped).sum()) > 0 or float(
        np.asarray(plain.info.stranded_time).sum()) > 0
    np.testing.assert_allclose(np.asarray(slots.finish), np.asarray(plain.finish),
                               rtol=RTOL_X64)
    for name in ("sent", "delivered", "dropped"):
        np.testing.assert_allclose(np.asarray(getattr(slots, name)),
                                   np.asarray(getattr(plain, name)), rtol=RTOL_X64,
                                   atol=1e-6 * size.max(), err_msg=name)
    np.testing.assert_allclose(np.asarray(slots.info.stranded_time),
                               np.asarray(plain.info.stranded_time), atol=1e-12)
    np.testing.assert_allclose(np.asarray(slots.info.paused_time),
                               np.asarray(plain.info.paused_time), rtol=RTOL_X64, atol=1e-12)


@pytest.mark.slow
def test_lookahead_gives_late_flows_the_plain_engines_feedback(monkeypatch):
    # 12-to-1 incast at t = 0 (HPCC, no PFC): the receiver's port is loaded ~12x for an
    # RTT, so the telemetry on the path is U >> eta.  Two more flows to the same host
    # start at 20-21 us, after the first window boundary (16 us): their first steps
    # read HPCC's utilisation of their path from ~8 us back in their feedback ring,
    # written while they waited in their slot (the lookahead).  Same finish times as
    # the plain engine; admitted without the lookahead (their ring entries before the
    # boundary are initial values, U = 0) they run at line rate into the incast and
    # finish tens of us earlier: the scenario can tell.
    topo = leaf_spine(2, 2, 8)
    src = np.r_[np.arange(1, 13), 13, 14]
    ps = shortest_paths(topo, src, np.zeros(14, int))
    inc = Incidence.from_paths(ps, n_links=topo.n_links, seed=0)
    size = np.r_[np.full(12, 5e5), 2e5, 2e5]
    kw = dict(dt=US, n_steps=320, law="hpcc", arrival=np.r_[np.zeros(12), 20 * US, 21 * US],
              link_latency=topo.latency, nic_links=topo)
    with enable_x64(True):
        plain = np.asarray(simulate_fluid(inc, topo.capacity, size, **kw).finish)
        slots = simulate_fluid_windowed(inc, topo.capacity, size, max_active=14, window=16,
                                        **kw)
        np.testing.assert_allclose(np.asarray(slots.finish), plain, rtol=RTOL_X64)
        monkeypatch.setattr(windowed, "lookahead_steps", lambda *args: 0)
        blind = simulate_fluid_windowed(inc, topo.capacity, size, max_active=14, window=16,
                                        **kw)
    assert blind.lookahead == 0
    assert np.all(np.asarray(blind.finish)[-2:] < plain[-2:] - 10 * US)


@pytest.mark.slow
def test_bench_quick_runs_and_engines_agree(tmp_path):
    # experiments/bench_fluid_slots.py --quick: both engines on ~1,000 Poisson flows of
    # the HPCC fat-tree; the JSON has the timings and the two engines' finish times
    # agree within float32 round-off.
    from experiments import bench_fluid_slots
    out = bench_fluid_slots.main(
        ["--quick", "--max-active", "800", "--json", str(tmp_path / "b.json")])
    agree = out["short"]["agreement"]
    assert agree["finished_plain"] == agree["finished_slots"] > 0
    assert agree["max_rel_finish_diff"] < RTOL_F32
    assert [r["engine"] for r in out["short"]["rows"]] == ["plain", "slots"]
    assert (tmp_path / "b.json").is_file()


@pytest.mark.slow
def test_idle_windows_are_skipped_without_changing_results():
    # Two bursts 1 ms apart: between them nothing is in the fabric and PFC is at rest,
    # so the host skips those windows (advancing the step counter only); the second
    # burst still gets the plain engine's results.
    with enable_x64(True):
        inc, cap, size, kw = _scenario("dcqcn-pfc")
        arrival = kw["arrival"] + np.where(np.arange(N_FLOWS) >= N_FLOWS // 2, 1e-3, 0.0)
        kw.update(arrival=arrival, n_steps=1600)
        plain = simulate_fluid(inc, cap, size, **kw)
        slots = simulate_fluid_windowed(inc, cap, size, max_active=MAX_ACTIVE,
                                        window=WINDOW, **kw)
    assert slots.n_windows < 1600 // WINDOW - 20
    assert np.all(np.isfinite(np.asarray(plain.finish)))
    np.testing.assert_allclose(np.asarray(slots.finish), np.asarray(plain.finish),
                               rtol=RTOL_X64)
    np.testing.assert_allclose(np.asarray(slots.info.paused_time),
                               np.asarray(plain.info.paused_time), rtol=RTOL_X64, atol=1e-12)


@pytest.mark.slow
def test_lossy_link_matches_plain_engine():
    # A lossy link (faults.lossy_link) adds the links' drop counter to the engine's
    # state: the slot table carries it over windows and reports it as the plain engine.
    from fabric_jax.faults import lossy_link
    from tests.helpers import incast_leaf_spine
    topo, _, inc = incast_leaf_spine()
    kw = dict(dt=1e-6, n_steps=128, law="dcqcn", flow_control="pfc", buffer=topo.buffer,
              link_latency=topo.latency, nic_links=topo,
              faults=[lossy_link(int(np.asarray(inc.link_idx)[1]), 0.05)])
    size = np.full(6, 1e6)
    with enable_x64(True):
        plain = simulate_fluid(inc, topo.capacity, size, **kw)
        slots = simulate_fluid_windowed(inc, topo.capacity, size, max_active=6, window=32,
                                        **kw)
        corrupted = np.asarray(plain.link_corrupted)
        assert corrupted.sum() > 0
        np.testing.assert_allclose(np.asarray(slots.link_corrupted), corrupted,
                                   rtol=RTOL_X64, atol=1e-9)
        for name in ("sent", "delivered", "dropped"):
            np.testing.assert_allclose(np.asarray(getattr(slots, name)),
                                       np.asarray(getattr(plain, name)), rtol=RTOL_X64,
                                       atol=1e-6, err_msg=name)
