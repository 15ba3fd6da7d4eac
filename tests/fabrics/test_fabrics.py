"""Fabric presets: contents, overrides, SHARP traffic, PFC victims."""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax.fabrics import PRESETS, get_fabric, roce
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.workloads import steady_state_all_reduce


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_build_params_and_document_themselves(name):
    fab = get_fabric(name)
    assert fab.name == name
    fab.law_params()
    fab.routing_params()
    assert "Leaves out" in PRESETS[name].__doc__ or "leaves out" in PRESETS[name].__doc__.lower()


def test_preset_contents_and_overrides():
    assert (get_fabric("infiniband").flow_control, get_fabric("infiniband").sharp) == ("credit", True)
    assert (roce().routing, roce().cc, roce().flow_control) == ("ecmp", "dcqcn", "pfc")
    assert get_fabric("uec").flow_control == "trim"
    assert roce(routing="spray").routing == "spray"
    with pytest.raises(ValueError, match="routing policy"):
        roce(routing="bogus")
    with pytest.raises(ValueError, match="unknown Fabric field"):
        roce(colour="red")


def test_sharp_halves_all_reduce_traffic():
    # Ring: each of n ranks sends 2 (n-1)/n S; SHARP: S.  Ratio n / (2 (n-1)) -> 1/2;
    # for n = 16 it is 16/30.
    hosts = np.arange(16)
    ring = steady_state_all_reduce(hosts, 1e6).size.sum()
    sharp = steady_state_all_reduce(hosts, 1e6, sharp=True).size.sum()
    assert sharp / ring == pytest.approx(16 / 30)


def _victim_case():
    # Links: 0,1,5 = sender uplinks into switch A; 2 = A->B (shared, 3C); 3 = B->hot
    # receiver; 4 = B->cold receiver.  Flows 0,1 (incast) go 0/1 -> 2 -> 3; flow 2
    # (victim) goes 5 -> 2 -> 4.  Link 3 is the bottleneck (C), so the incast's queue
    # sits at B's egress 3, fills B's ingress pool from link 2, and PFC pauses link 2 --
    # which also stops the victim, whose own path (4) is idle.
    C = 12.5e9
    li = np.array([0, 2, 3, 1, 2, 3, 5, 2, 4])
    fi = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    inc = Incidence.from_coo(li, fi, n_links=6, n_flows=3)
    cap = np.array([C, C, 3 * C, C, C, C])
    return inc, cap, np.array([2e6, 2e6, 2e5])


def test_pfc_victims_in_roce_not_without_pfc():
    inc, cap, size = _victim_case()
    out = {}
    for fc in ("pfc", "none"):
        res = simulate_fluid(inc, cap, size, dt=1e-6, n_steps=600, law="none",
                             flow_control=fc, buffer=100e3)
        out[fc] = (float(res.fct[2]), float(np.sum(res.info.paused_time)))
    ideal = 2e5 / 12.5e9
    assert out["none"][0] == pytest.approx(ideal, rel=0.15)   # no HoL blocking
    assert out["pfc"][0] > 1.5 * ideal                          # victim slowed by pause
    assert out["pfc"][1] > 0 and out["none"][1] == 0


def test_infiniband_uncongested_sharp_all_reduce_runs_at_line_rate():
    # The infiniband preset (IB CC + credits + local AR + SHARP) on a training job whose
    # all-to-all is negligible (1 byte per GPU): 4 servers x 2 rails, 100 Gb/s; SHARP
    # sends S/2 = 0.5 MB once per NIC, 40 us at line rate, plus path latency (4 links x
    # 1 us).  Nothing congests, so IB CC never marks (CCTI stays 0), credits never
    # starve, and the all-reduce ends within two 2-us steps of the line-rate time --
    # the slower all-reduce of the compare study comes from congestion before it (see
    # the preset docstring), not from IB CC or credits throttling clean traffic.
    from fabric_jax import compare
    scn = compare.scenario_from_dict({
        "topology": dict(kind="rail_optimized", n_servers=4, nics_per_server=2,
                         servers_per_leaf=2, link_gbps=100.0),
        "workload": dict(train_servers=4, tenant_servers=0, ep_servers=2, all_reduce_mb=1.0,
                         moe_mb=1e-6, background_load=0.0),
        "simulation": dict(dt_us=2.0, n_steps=60, max_paths=4, isolation=False),
        "fabrics": {"presets": ["infiniband"]}})
    fab = get_fabric("infiniband")
    case = compare.build_case(scn, fab.sharp)
    res = compare.simulate_case(case, fab, scn, save_every=10)
    kinds = np.array(case.workload.group_kind)[np.maximum(case.workload.group, 0)]
    ar = (case.job_of == 0) & (kinds == "all_reduce")
    start, finish = np.asarray(res.start), np.asarray(res.finish)
    t_ar = float(finish[ar].max() - start[ar].min())
    ideal = 0.5e6 / 12.5e9 + float(case.latency[ar].max())
    assert ideal - 1e-9 <= t_ar <= ideal + 2 * 2e-6
    assert float(np.max(np.asarray(res.trajectory.law_state.ccti))) == 0.0
    assert float(np.sum(np.asarray(res.info.paused_time))) == 0.0


# ------------------------------------------------ parameters per NIC line rate
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_400_vs_100_differ_exactly_as_documented(name):
    # docs/cc_parameters.md: each leaf scales as (B / B_ref) ** e; from 100 to 400 Gb/s
    # it is multiplied by 4 ** e (the exponents transcribed in tests/dynamics/test_cc.py).
    from tests.dynamics.test_cc import DOCUMENTED_SCALING
    hi = get_fabric(name, nic_gbps=400.0)
    lo = get_fabric(name, nic_gbps=100.0)
    p_hi, p_lo = hi.law_params(), lo.law_params()
    # a field the preset sets in cc_options is absolute (roce's ECN thresholds in bytes)
    rules = {f: e for f, e in DOCUMENTED_SCALING[hi.cc].items() if f not in hi.cc_options}
    for field, e in rules.items():
        np.testing.assert_allclose(np.asarray(getattr(p_hi, field), float),
                                   np.asarray(getattr(p_lo, field), float) * 4.0 ** e,
                                   rtol=1e-6, err_msg=f"{name}: {field}")
    # a case builder's line rate overrides the preset's nic_gbps
    from fabric_jax.units import gbps
    p_case = hi.law_params(line_rate=gbps(100.0))
    for field in rules:
        np.testing.assert_array_equal(np.asarray(getattr(p_case, field)),
                                      np.asarray(getattr(p_lo, field)))


def test_roce_at_400g_no_longer_runs_the_40g_paper_values():
    # Issue 11: RoCE at 400 Gb/s ran K_min/K_max 5/200 KB and R_AI 40 Mb/s.  Now the
    # [HPCC-NS3] rule: 100/400 KB and 5 Mb/s per 25 Gb/s, i.e. 1.6/6.4 MB and 80 Mb/s
    # (roce_pfc_only); roce marks at NVIDIA's 150/1500 KB (issue 48)
    p = get_fabric("roce_pfc_only").law_params()
    assert (float(p.k_min), float(p.k_max), float(p.r_ai)) == pytest.approx(
        (1.6e6, 6.4e6, 80e6 / 8))
    p = roce().law_params()
    assert (float(p.k_min), float(p.k_max), float(p.r_ai)) == pytest.approx(
        (150e3, 1.5e6, 80e6 / 8))
    # cc_options still override the scaled value
    assert float(roce(cc_options={"k_min": 1e5}).law_params().k_min) == pytest.approx(1e5)
    with pytest.raises(ValueError, match="cc_options"):
        roce(cc_options={"kmin": 1.0}).law_params()
    with pytest.raises(ValueError, match="nic_gbps"):
        roce(nic_gbps=0.0)
    with pytest.raises(ValueError, match="switch_latency"):
        roce(switch_latency=-1e-9)


# ------------------------------------------------------- device latency per preset
def test_link_latency_adds_switch_and_nic_latency_per_hop():
    # leaf_spine(2 leaves, 2 spines, 2 hosts per leaf), 1 us propagation per link.  A
    # host -> leaf -> spine -> leaf -> host path (4 links, 3 switches) gains
    # 3 switch_latency + 2 nic_latency over its propagation (4 us).
    from fabric_jax.paths import shortest_paths
    from fabric_jax.topology import leaf_spine
    topo = leaf_spine(2, 2, 2)
    for name in PRESETS:
        fab = get_fabric(name)
        assert 0 < fab.switch_latency < 1e-6 and 0 < fab.nic_latency < 1e-6
        lat = fab.link_latency(topo)
        ps = shortest_paths(fab.with_latency(topo), np.array([0]), np.array([3]), max_paths=1)
        path_lat = float(ps.latency(fab.with_latency(topo))[0, 0])
        assert path_lat == pytest.approx(4e-6 + 3 * fab.switch_latency + 2 * fab.nic_latency,
                                         rel=1e-9)
        assert lat.shape == (topo.n_links,) and np.all(lat >= topo.latency)
    # InfiniBand's cut-through switch is faster than the Ethernet presets' switches
    assert get_fabric("infiniband").switch_latency < get_fabric("spectrum_x").switch_latency \
        < get_fabric("roce").switch_latency
    # propagation may be given explicitly (cables only)
    fab = get_fabric("infiniband")
    zero = fab.link_latency(topo, propagation=np.zeros(topo.n_links))
    assert zero.max() == pytest.approx(fab.switch_latency + fab.nic_latency)
    with pytest.raises(ValueError, match="propagation"):
        fab.link_latency(topo, propagation=np.zeros(3))
