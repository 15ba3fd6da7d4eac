"""The rail reduction with shared switch buffers: a spine every rail crosses counts every
rail's occupancy (SharedBuffer.weight), so its dynamic thresholds are the full run's."""

import jax.numpy as jnp
import numpy as np

import fabric_jax.scale as sc
from fabric_jax import flowcontrol as fcm


def test_rail_buffer_weight_counts_the_rails_of_each_switch():
    # 128 GPUs, radix 16: per rail 2 leaves (one rail each), every spine reached by all
    # 8 rails (hand count from the build: 16 rail leaves, 8 spines)
    topo = sc.scale_topology(128, switch_radix=16)
    w = sc.rail_buffer_weight(topo, sc.rail_view(topo, (0,)))
    view = sc.rail_view(topo, (0,)).topology
    tier = np.asarray(view.node_tier)[~np.asarray(view.node_is_host)]
    assert np.all(w[tier == 1] == 1.0) and np.all(w[tier >= 2] == 8.0)
    assert int(np.sum(tier == 1)) == 2
    w2 = sc.rail_buffer_weight(topo, sc.rail_view(topo, (0, 3)))
    assert set(np.unique(w2)) == {1.0, 4.0}


def test_weighted_switch_is_g_identical_copies():
    # oracle: a switch holding g identical copies of its queues (the full run) against one
    # copy with weight g (the rail view): same free memory, same drop thresholds
    rng = np.random.default_rng(0)
    g, n = 8, 5
    level = rng.uniform(0, 5e4, n)   # g copies fill about half the memory
    floor = level * rng.uniform(0, 1, n)
    size = jnp.asarray([3e6])
    alpha = jnp.ones(n)
    full_lim = fcm.dynamic_limit(jnp.tile(level, g), jnp.tile(floor, g),
                                 jnp.zeros(g * n, jnp.int32), jnp.ones(g * n), size)
    one_lim = fcm.dynamic_limit(jnp.asarray(level), jnp.asarray(floor),
                                jnp.zeros(n, jnp.int32), alpha, size,
                                weight=jnp.asarray([float(g)]))
    np.testing.assert_allclose(np.asarray(one_lim), np.asarray(full_lim)[:n], rtol=1e-6)
    free_full = fcm.free_buffer(jnp.tile(level, g), jnp.zeros(g * n, jnp.int32), size)
    free_one = fcm.free_buffer(jnp.asarray(level), jnp.zeros(n, jnp.int32), size,
                               jnp.asarray([float(g)]))
    np.testing.assert_allclose(np.asarray(free_one), [3e6 - g * level.sum()], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(free_one), np.asarray(free_full), rtol=1e-6)
    # and the unweighted view would see the wrong (larger) free memory
    assert float(fcm.free_buffer(jnp.asarray(level), jnp.zeros(n, jnp.int32), size)[0]) > \
        float(free_one[0]) + 5e5


def test_scale_fabrics_flag_accepts_the_named_variants_not_by_default():
    scn = sc.scale_scenarios({"topology.gpus": "64", "fabrics.presets": "roce,roce_pfc_only"},
                             flags=sc.SCALE_FLAGS)[0]
    assert tuple(scn.fabric.presets) == ("roce", "roce_pfc_only")
    assert "roce_pfc_only" not in sc.SCALE_RULES["fabrics.presets"].default
