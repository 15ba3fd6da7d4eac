"""Switch memory as built (shared buffers of the ASICs' sizes) and ECN below PFC XOFF."""

import dataclasses

import numpy as np
import pytest

import fabric_jax as fj
from fabric_jax.fabric_sim import route, simulate_paths
from fabric_jax.fabrics import (PRESETS, SWITCH_ASICS, VARIANTS, check_ecn_below_xoff,
                                get_fabric, xoff_at_operating_point)
from fabric_jax.flowcontrol import pfc_thresholds


def _bottleneck(name, **overrides):
    """One 4 MB flow host 2 -> host 0 over the spine of a 2-leaf, 1-spine fabric whose last
    link runs at half rate: the congested port (leaf 0 -> host 0) is fed by one ingress
    pool, so its egress queue never exceeds that pool."""
    topo = fj.leaf_spine(2, 1, 2)
    paths, _, _ = route(topo, np.array([2]), np.array([0]), "ecmp")
    cap = np.asarray(topo.capacity, float).copy()
    cap[np.asarray(topo.link_dst) == np.asarray(topo.hosts)[0]] /= 2
    fab = get_fabric(name, **overrides)
    res = simulate_paths(topo, paths, fab, np.array([4e6]), dt=1e-6, n_steps=400,
                         capacity=cap, line_rate=np.array([50e9]), save_every=1,
                         fluid_options=fab.buffer_options(topo))
    tr = res.trajectory
    marked = float(np.sum(np.asarray(tr.throughput) * np.asarray(tr.mark)) * 1e-6)
    return res, marked


def test_dcqcn_marks_with_the_new_roce_never_in_pfc_only():
    res, marked = _bottleneck("roce")
    assert marked > 0                                   # ECN marks: DCQCN reacts
    assert float(np.sum(np.asarray(res.info.paused_time))) == 0.0   # before any PAUSE
    old, old_marked = _bottleneck("roce_pfc_only")
    assert old_marked == 0.0                            # K_min 1.6 MB > the pool's XOFF
    assert float(np.sum(np.asarray(old.info.paused_time))) > 0      # PFC does the work


def test_roce_pfc_only_reproduces_the_previous_roce():
    # the previous roce preset (static 1 MB pools, "hpcc_ns3" thresholds), run on this
    # case by the code before the change: finish 166.4000010350719 us, 49 us paused
    res, marked = _bottleneck("roce_pfc_only")
    np.testing.assert_allclose(np.asarray(res.finish), [0.0001664000010350719], rtol=1e-9)
    assert float(np.sum(np.asarray(res.info.paused_time))) == pytest.approx(
        4.9000009312294424e-05, rel=1e-9)
    assert "roce_pfc_only" in VARIANTS and "roce_pfc_only" not in PRESETS
    f = get_fabric("roce_pfc_only")
    assert f.shared_buffer_alpha is None and f.switch_buffer_mb is None
    assert f.ecn_thresholds() == (1.6e6, 6.4e6)         # 100/400 KB per 25 Gb/s at 400G


@pytest.mark.parametrize("name,asic", [("roce", "tomahawk5"), ("spectrum_x", "spectrum4"),
                                       ("uec", "tomahawk5")])
def test_shared_buffer_size_equals_the_asic_table(name, asic):
    topo = fj.leaf_spine(2, 2, 2)
    sb = get_fabric(name).buffer_options(topo)["shared_buffer"]
    n_sw = int(np.sum(~np.asarray(topo.node_is_host)))
    np.testing.assert_array_equal(np.asarray(sb.size), np.full(n_sw, SWITCH_ASICS[asic].buffer))
    assert float(sb.alpha) == 1.0                       # SONiC default_dynamic_th 0
    assert get_fabric("infiniband").buffer_options(topo) == {}
    assert {"tomahawk5": 165e6, "spectrum4": 160e6}[asic] == SWITCH_ASICS[asic].buffer


def test_ecn_below_xoff_at_the_operating_point():
    # roce: K_max 1.5 MB below the shared-buffer XOFF with half the 128 ports' pools at
    # their limit: 165 MB / (1 + 64) = 2.538 MB (Choudhury-Hahne, alpha 1)
    fab = get_fabric("roce")
    k_min, k_max = fab.ecn_thresholds(50e9)
    assert (k_min, k_max) == (150e3, 1.5e6)
    xoff = xoff_at_operating_point(165e6, 1.0, 64)
    assert xoff == pytest.approx(165e6 / 65)
    assert k_min < k_max < xoff
    check_ecn_below_xoff(fab, line_rate=50e9)           # passes
    # the previous preset: K_min above the static pool's XOFF = 1 MB - (50 GB/s x 1 us
    # + 2 x 1000 B) = 948 KB
    xoff_static, _ = pfc_thresholds(np.array([50e9]), 1e6, reaction_s=1e-6)
    assert float(xoff_static[0]) == pytest.approx(948e3)
    assert get_fabric("roce_pfc_only").ecn_thresholds(50e9)[0] > float(xoff_static[0])
    with pytest.raises(ValueError, match="k_max"):
        check_ecn_below_xoff(get_fabric("roce_pfc_only"), port_buffer=1e6, capacity=50e9,
                             reaction_s=1e-6, line_rate=50e9)


def test_roce_keeps_its_ecn_thresholds_under_other_cc_options():
    assert get_fabric("roce", cc_options={"p_max": 0.1}).ecn_thresholds() == (150e3, 1.5e6)
    assert get_fabric("roce", cc_options={"k_max": 1e6}).ecn_thresholds() == (150e3, 1e6)


@pytest.mark.parametrize("kw,arg", [
    (dict(switch_buffer_mb=-1.0), "switch_buffer_mb"),
    (dict(switch_buffer_mb=float("nan")), "switch_buffer_mb"),
    (dict(switch_buffer_mb=10.0, shared_buffer_alpha=None), "switch_buffer_mb"),
    (dict(switch_asic="tomahawk9"), "switch_asic"),
])
def test_bad_buffer_fields_name_the_argument(kw, arg):
    with pytest.raises(ValueError, match=arg):
        get_fabric("roce", **kw)


def test_switch_memory_below_one_bdp_refused():
    topo = fj.leaf_spine(2, 2, 2)       # 400 Gb/s, 1 us per link: BDP 50 GB/s x 8 us = 400 KB
    with pytest.raises(ValueError, match="switch_buffer_mb.*0.4 MB"):
        get_fabric("roce", switch_buffer_mb=0.3).buffer_options(topo)
    get_fabric("roce", switch_buffer_mb=0.5).buffer_options(topo)      # accepted


def test_ecn_above_a_written_xoff_refused():
    with pytest.raises(ValueError, match="k_max"):
        check_ecn_below_xoff(get_fabric("roce", switch_buffer_mb=2.0), line_rate=50e9)
    # PFC-free or ECN-free fabrics have nothing to check
    check_ecn_below_xoff(get_fabric("uec"), line_rate=50e9)
    check_ecn_below_xoff(dataclasses.replace(get_fabric("roce"), flow_control="none"))


@pytest.mark.parametrize("toml,key", [
    ("[topology]\nbuffer_kb = 100\n", "topology.buffer_kb"),
    ("[fabrics.roce]\nswitch_buffer_mb = 0.1\n", "fabrics.roce.switch_buffer_mb"),
    ("[topology]\nbuffer_kb = 1024\n[fabrics]\npresets = [\"roce_pfc_only\"]\n"
     "[fabrics.roce_pfc_only]\ncc_options = {k_min = 1.6e6, k_max = 6.4e6}\n",
     "fabrics.roce_pfc_only.cc_options"),
    ("[fabrics.roce]\nswitch_buffer_mb = 2\ncc_options = {k_min = 150e3, k_max = 1.5e6}\n",
     "fabrics.roce.cc_options"),
])
def test_compare_cli_refuses_buffers_below_bdp_and_ecn_above_xoff(tmp_path, capsys, toml,
                                                                   key):
    from fabric_jax import cli
    path = tmp_path / "s.toml"
    path.write_text(toml)
    assert cli.main(["compare", "--scenario", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0]


def test_compare_scenario_accepts_the_buffers_it_can_build():
    from fabric_jax.scenario import scenario_from_dict
    scn = scenario_from_dict({"fabrics": {"presets": ["roce", "roce_pfc_only"], "roce": {
        "switch_buffer_mb": 64.0, "cc_options": {"k_min": 150e3, "k_max": 400e3}}}})
    assert scn.presets == ("roce", "roce_pfc_only")


def test_roce_with_another_law_carries_no_ecn_thresholds():
    assert get_fabric("roce", cc="none").cc_options == {}
    get_fabric("roce", cc="hpcc").law_params()           # builds
