"""Fabric presets: contents, overrides, SHARP traffic, PFC victims."""

from __future__ import annotations

import numpy as np
import pytest

from fabric_jax.fabrics import PRESETS, all_reduce_flows, get_fabric, roce
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence


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
    ring = all_reduce_flows(hosts, 1e6).size.sum()
    sharp = all_reduce_flows(hosts, 1e6, sharp=True).size.sum()
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
