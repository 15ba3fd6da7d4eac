"""Routing policies: shared conformance suite, ECMP hashing statistics, fluid behaviour."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax.incidence import Incidence
from fabric_jax.fluid import simulate_fluid
from fabric_jax.paths import shortest_paths
from fabric_jax.routing import (POLICIES, RoutingView, ecmp_choice, ecmp_params, make_routing,
                                weighted_ecmp_params)
from fabric_jax.topology import leaf_spine


def _paths(n=4, seed=0):
    topo = leaf_spine(2, n, n)
    rng = np.random.default_rng(seed)
    src = np.arange(n)
    dst = n + rng.permutation(n)
    return topo, shortest_paths(topo, np.r_[src, dst], np.r_[dst, src])


def _view(topo, n_flows, key):
    k1, k2, k3 = jax.random.split(key, 3)
    L = topo.n_links
    return RoutingView(queue=jax.random.uniform(k1, (L,)) * 1e5,
                       capacity=jnp.asarray(topo.capacity, jnp.float32),
                       load=jax.random.uniform(k2, (L,)) * float(topo.capacity[0]),
                       mark=jax.random.uniform(k3, (L,)) * 0.5,
                       flow_rate=jnp.zeros(n_flows), active=jnp.ones(n_flows, bool),
                       t=jnp.asarray(0.0))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_conformance(name):
    # Every policy: splits are >= 0, zero on padded paths, rows sum to one; step is
    # jit-safe (jit == eager) and vmap-safe (vmap == loop over a batch of views).
    topo, ps = _paths()
    params = None
    if name == "weighted_ecmp":
        params = weighted_ecmp_params(jax.random.normal(jax.random.PRNGKey(1), ps.path_mask.shape))
    r = make_routing(name, ps, params, seed=3)
    pol, prm, st = r.policy, r.params, r.state
    views = [_view(topo, ps.n_pairs, jax.random.PRNGKey(i)) for i in range(3)]
    for split in [st.split] + [pol.step(st, v, 1e-6, prm).split for v in views]:
        s = np.asarray(split)
        assert np.all(s >= 0)
        assert np.all(s[~ps.path_mask] == 0)
        np.testing.assert_allclose(s.sum(axis=1), 1.0, atol=1e-5)
    eager = pol.step(st, views[0], 1e-6, prm).split
    jitted = jax.jit(pol.step)(st, views[0], 1e-6, prm).split
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-5, atol=1e-7)
    batch = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *views)
    vm = jax.vmap(lambda v: pol.step(st, v, 1e-6, prm).split)(batch)
    for i, v in enumerate(views):
        np.testing.assert_allclose(np.asarray(vm[i]), np.asarray(pol.step(st, v, 1e-6, prm).split),
                                   rtol=1e-5, atol=1e-7)


def test_ecmp_collisions_match_balls_into_bins():
    # n flows, each hashed onto one of n uplinks independently (distinct tier seeds,
    # random source ports): expected fraction of uplinks used is 1 - (1 - 1/n)^n.
    # Over 200 seeds the mean must be within 3 percentage points of theory.
    n = 16
    topo = leaf_spine(2, n, n)
    ps = shortest_paths(topo, np.arange(n), n + np.arange(n), max_paths=n)
    used = []
    rng = np.random.default_rng(0)
    for _ in range(200):
        sport = rng.integers(49152, 65536, size=n)
        choice = ecmp_choice(ps, ecmp_params().tier_seeds, sport)
        uplink = ps.links[np.arange(n), choice, 1]
        used.append(np.unique(uplink).size / n)
    theory = 1 - (1 - 1 / n) ** n
    assert abs(np.mean(used) - theory) < 0.03


def test_ecmp_same_seed_polarises_in_fat_tree():
    # 3-tier fat-tree k=8: a flow's edge->agg and agg->core choices are hashed with the
    # same function; with equal tier seeds and equal fan-out (4), the core index is a
    # function of the agg index, so at most 4 of the 16 cores are used; distinct seeds
    # use (almost) all 16 for 256 flows.
    from fabric_jax.topology import fat_tree
    topo = fat_tree(8)
    rng = np.random.default_rng(1)
    n = 256
    src = rng.integers(0, 16, n)              # pod 0
    dst = 112 + rng.integers(0, 16, n)        # pod 7
    ps = shortest_paths(topo, src, dst, max_paths=16)
    sport = rng.integers(49152, 65536, size=n)
    cores = {}
    for label, seeds in (("same", (5, 5, 5, 5, 5, 5)), ("distinct", (1, 2, 3, 4, 5, 6))):
        c = ecmp_choice(ps, seeds, sport)
        cores[label] = np.unique(ps.links[np.arange(n), c, 2]).size
    assert cores["same"] <= 4
    assert cores["distinct"] >= 14


@pytest.mark.slow  # heavy; the slow suite runs it
def test_adaptive_and_spray_reach_line_rate_on_permutation_ecmp_does_not():
    # 8 hosts per leaf, 8 spines, 1 MB permutation both ways, no CC: ideal FCT is
    # 1 MB / 50 GB/s = 20 us.  Spraying and adaptive routing must reach >= 90 % of line
    # rate (ideal / actual); ECMP with collisions must be slower.
    n = 8
    topo = leaf_spine(2, n, n)
    rng = np.random.default_rng(0)
    src, dst = np.arange(n), n + rng.permutation(n)
    ps = shortest_paths(topo, np.r_[src, dst], np.r_[dst, src])
    size = np.full(2 * n, 1e6)
    ideal = 1e6 / topo.capacity[0]
    eff = {}
    for pol in ("ecmp", "spray", "ib_ar", "spectrum_x_ar"):
        r = make_routing(pol, ps, seed=1)
        inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
        res = simulate_fluid(inc, topo.capacity, size, dt=1e-6, n_steps=120, routing=r)
        eff[pol] = ideal / float(np.max(res.finish))
    assert eff["spray"] >= 0.9 and eff["ib_ar"] >= 0.9 and eff["spectrum_x_ar"] >= 0.9
    assert eff["ecmp"] < 0.75
