"""Routing optimisation: hand-solved instances, gradients vs finite differences, LP
optimality, invariants (valid paths only, determinism, batch = loop).

Hand-derived references are explained where they are used.  Units: bytes/s, bytes,
seconds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

from tests.helpers import LINK_100G, enable_x64

from fabric_jax import Incidence, simulate_flows
from fabric_jax import optimize as fo
from fabric_jax.optimize import _objectives as obj
from fabric_jax.paths import PathSet
from fabric_jax.topology import fat_tree

C = LINK_100G  # 12.5e9 bytes/s


def pathset(routes) -> PathSet:
    """PathSet from ``routes[pair] = [path, ...]``, each path a list of link ids."""
    n_pairs = len(routes)
    n_paths = max(len(r) for r in routes)
    n_hops = max(len(p) for r in routes for p in r)
    links = np.full((n_pairs, n_paths, n_hops), -1, np.int32)
    for i, r in enumerate(routes):
        for k, p in enumerate(r):
            links[i, k, :len(p)] = p
    mask = (links >= 0).any(-1)
    return PathSet(src=np.arange(n_pairs, dtype=np.int32),
                   dst=np.arange(n_pairs, dtype=np.int32) + 100, links=links,
                   path_mask=mask, hop_mask=links >= 0, n_paths=mask.sum(1).astype(np.int32))


def two_path_degraded(demand=C):
    """One pair, two paths behind a shared access link 2 (capacity 2C): path 0 over
    link 0 (capacity C), path 1 over link 1 degraded to C/4."""
    ps = pathset([[[2, 0], [2, 1]]])
    return fo.problem_from_paths(ps, np.array([C, C / 4, 2 * C]), np.array([demand]))


def small_fat_tree_flows():
    topo = fat_tree(4, link_gbps=100)
    src = np.array([0, 1, 2, 4, 5, 8])
    dst = np.array([8, 12, 13, 9, 14, 0])
    size = np.array([1.0e6, 3.5e6, 2.2e6, 1.6e6, 3.0e6, 2.7e6])
    return topo, src, dst, size


# ---------------------------------------------------------------- hand-solved
def test_two_paths_one_degraded_optimum_found_by_lp_and_descent():
    # Split x on the full-speed path: utilisations x D / C and (1 - x) D / (C / 4).
    # Equal at x = 4 (1 - x), i.e. x = 0.8, MLU = 0.8 D / C = 0.8 for D = C.  The shared
    # access link carries D / 2C = 0.5 whatever the split.
    prob = two_path_degraded()
    lp = fo.solve_mlu_lp(prob)
    assert lp.status == 0
    np.testing.assert_allclose(lp.mlu, 0.8, rtol=1e-9)
    np.testing.assert_allclose(lp.split[0], [0.8, 0.2], atol=1e-9)
    res = fo.optimize_routing(prob, steps=400, learning_rate=0.1)
    assert res.mlu == pytest.approx(0.8, rel=5e-3)
    assert res.split[0, 0] == pytest.approx(0.8, abs=5e-3)
    # ECMP (a hash: all on one path) and spray (0.5 each) are worse: 1.0 or 4.0, and 2.0.
    assert fo.spray_split(prob)[0].tolist() == [0.5, 0.5]
    assert prob.mlu(fo.spray_split(prob)) == pytest.approx(2.0)
    assert prob.mlu(fo.ecmp_split(prob)) in (pytest.approx(1.0), pytest.approx(4.0))


def test_per_tenant_weights_change_the_optimum_as_derived():
    # Links 0 (capacity C/2) and 1 (capacity C).  Tenant "a" may use link 0 or link 1;
    # tenant "b" has link 1 only; both demand D = C/2.  With a's fraction x on link 0:
    # u0 = x D / (C/2) = x and u1 = ((1 - x) D + D) / C = (2 - x) / 2.  Global min-MLU:
    # u0 = u1 -> x = 2/3, MLU = 2/3.  Weighting tenant b alone (weights (0, 1))
    # minimises u1 -> x -> 1, u1 -> 1/2, while a's own MLU rises to u0 = 1.
    ps = pathset([[[0], [1]], [[1]]])
    prob = fo.problem_from_paths(ps, np.array([C / 2, C]), np.array([C / 2, C / 2]),
                                 tenant=np.array(["a", "b"]))
    assert fo.solve_mlu_lp(prob).mlu == pytest.approx(2 / 3, rel=1e-9)
    glob = fo.optimize_routing(prob, steps=300)
    assert glob.mlu == pytest.approx(2 / 3, rel=5e-3)
    res = fo.optimize_routing(prob, steps=300, tenant_weight=np.array([0.0, 1.0]))
    per = np.asarray(fo.tenant_mlu(prob.arrays(), jnp.asarray(res.split), 2))
    assert per[1] == pytest.approx(0.5, abs=5e-3)
    assert per[0] == pytest.approx(1.0, abs=5e-3)


@pytest.mark.slow
def test_cct_objective_separates_colliding_flows():
    # Two flows of S bytes, two parallel links of capacity C, both flows started on
    # link 0 (a hash collision): CCT 2S/C.  Total capacity 2C for 2S bytes bounds the
    # CCT below by S/C, reached with one flow per link (or both split 50/50).
    ps = pathset([[[0], [1]], [[0], [1]]])
    size = np.array([4e6, 4e6])
    prob = fo.problem_from_paths(ps, np.array([C, C]), np.ones(2))
    res = fo.optimize_routing(prob, objective="cct", size=size, steps=60,
                              init=np.array([[4.0, 0.0], [4.0, 0.0]]), learning_rate=0.1,
                              maxmin_iterations=4)
    assert res.metric_history[0] > 1.9 * size[0] / C
    assert res.value == pytest.approx(size[0] / C, rel=1e-2)
    inc = Incidence.from_paths(ps, res.split.astype(np.float32), n_links=2)
    exact = simulate_flows(inc, jnp.full(2, C, jnp.float32), np.zeros(2), size)
    assert float(jnp.max(exact.finish)) == pytest.approx(res.value, rel=1e-4)


def test_max_min_fair_optimum_over_routings_by_hand():
    # Pair a over link 0 (C/2) or link 1 (C); pair b over link 1 only.  With routing
    # free, a takes C/2 on link 0 plus s on link 1 and b gets C - s: the min is largest
    # at C/2 + s = C - s, s = C/4, both 3C/4 (a splits 2/3 : 1/3).  With a's split fixed
    # at 50/50 (spray), link 1 saturates at 0.5 r + r = C: both 2C/3.
    from fabric_jax import max_min_fair

    ps = pathset([[[0], [1]], [[1]]])
    prob = fo.problem_from_paths(ps, np.array([C / 2, C]), np.array([C / 2, C / 2]))
    opt = fo.solve_max_min_lp(prob)
    np.testing.assert_allclose(opt.rates, [0.75 * C, 0.75 * C], rtol=1e-9)
    np.testing.assert_allclose(opt.split[0], [2 / 3, 1 / 3], rtol=1e-9)
    inc = Incidence.from_paths(ps, fo.spray_split(prob), n_links=2)
    fixed = np.asarray(max_min_fair(inc, jnp.asarray(prob.capacity)).rates)
    np.testing.assert_allclose(fixed, [2 * C / 3, 2 * C / 3], rtol=1e-5)
    # Capped at the demand C/2 each: both frozen at C/2 in one round.
    capped = fo.solve_max_min_lp(prob, capped=True)
    np.testing.assert_allclose(capped.rates, [C / 2, C / 2], rtol=1e-9)


# ---------------------------------------------------------------- invariants
def test_never_weight_on_invalid_paths():
    # Pairs with 1, 2 and 3 valid paths; the initial logits favour the padding.
    ps = pathset([[[0]], [[0], [1]], [[0], [1], [2]]])
    prob = fo.problem_from_paths(ps, np.full(3, C), np.full(3, C / 2))
    init = np.where(prob.path_mask, 0.0, 30.0)
    res = fo.optimize_routing(prob, steps=30, init=init)
    assert np.all(res.split[~prob.path_mask] == 0.0)
    np.testing.assert_allclose(res.split.sum(axis=1), 1.0, rtol=1e-12)
    assert res.split[0, 0] == 1.0
    grad = jax.grad(lambda z: jnp.sum(obj.masked_softmax(z, prob.path_mask) ** 2
                                      * jnp.arange(3.0)))(jnp.asarray(init))
    assert np.all(np.isfinite(grad)) and np.all(np.asarray(grad)[~prob.path_mask] == 0.0)


def test_deterministic_for_a_seed():
    topo, src, dst, _ = small_fat_tree_flows()
    prob = fo.routing_problem(topo, src, dst, np.full(src.size, 5e9))
    a = fo.optimize_routing(prob, steps=40, seed=3)
    b = fo.optimize_routing(prob, steps=40, seed=3)
    np.testing.assert_array_equal(a.split, b.split)
    np.testing.assert_array_equal(a.metric_history, b.metric_history)
    np.testing.assert_array_equal(fo.ecmp_split(prob, 3), fo.ecmp_split(prob, 3))
    np.testing.assert_array_equal(fo.adaptive_split(prob, seed=3),
                                  fo.adaptive_split(prob, seed=3))
    # ECMP is one path per flow (one flow per pair here); the hash depends on the seed.
    e = fo.ecmp_split(prob, 0)
    assert np.all(np.sort(e, axis=1)[:, -1] == 1.0)
    assert any(not np.array_equal(e, fo.ecmp_split(prob, s)) for s in range(1, 5))


def test_lp_is_optimal_and_aggregation_is_exact():
    # All-to-all on fat_tree(4) with 4:1 oversubscription and one degraded cable.
    topo = fat_tree(4, link_gbps=100, fabric_gbps=25)
    topo = topo.with_capacity_scaled([("pod0/agg0", "core0")], 0.5, bidirectional=True)
    src, dst = np.nonzero(~np.eye(16, dtype=bool))
    rng = np.random.default_rng(0)
    demand = rng.uniform(0.1, 1.0, src.size) * 1e9
    host = fo.routing_problem(topo, src, dst, demand)
    agg = fo.routing_problem(topo, src, dst, demand, aggregate=True)
    assert agg.n_pairs == 8 * 7  # ordered pairs of the 8 edge switches
    # Spray loads coincide link by link (same candidate sets, access links fixed).
    np.testing.assert_allclose(agg.link_load(fo.spray_split(agg)),
                               host.link_load(fo.spray_split(host)), rtol=1e-12)
    lp_host, lp_agg = fo.solve_mlu_lp(host), fo.solve_mlu_lp(agg)
    assert lp_agg.mlu == pytest.approx(lp_host.mlu, rel=1e-7)
    assert lp_agg.mlu == pytest.approx(agg.mlu(lp_agg.split), rel=1e-9)
    for split in [fo.spray_split(agg), fo.ecmp_split(agg), fo.adaptive_split(agg)]:
        assert agg.mlu(split) >= lp_agg.mlu * (1 - 1e-9)
    for _ in range(20):
        z = rng.normal(size=agg.path_mask.shape) * 3
        s = np.asarray(obj.masked_softmax(jnp.asarray(z), agg.path_mask), np.float64)
        assert agg.mlu(s / s.sum(1, keepdims=True)) >= lp_agg.mlu * (1 - 1e-7)
    # A new traffic matrix over the same flows rebuilds pair demand and access loads.
    d2, b2 = agg.flow_traffic(2 * demand)
    np.testing.assert_allclose(d2, 2 * agg.demand, rtol=1e-12)
    np.testing.assert_allclose(b2, 2 * agg.base_load, rtol=1e-12)


def test_batched_matches_one_at_a_time():
    prob = two_path_degraded()
    demands = np.array([[C], [0.5 * C]])
    batch = fo.optimize_routing_batched(prob, demands, steps=60, init="spray")
    assert batch.split.shape == (2, 1, 2)
    for i, d in enumerate(demands):
        one = fo.optimize_routing(prob, demand=d, steps=60, init="spray")
        np.testing.assert_allclose(batch.split[i], one.split, rtol=1e-5, atol=1e-6)
        assert batch.mlu[i] == pytest.approx(one.mlu, rel=1e-5)
    # MLU is linear in the demand: 0.8 D / C at the optimum split.
    np.testing.assert_allclose(batch.mlu, 0.8 * demands[:, 0] / C, rtol=2e-2)


def test_target_stops_early_and_times_are_reported():
    prob = two_path_degraded()
    res = fo.optimize_routing(prob, steps=1000, target=0.8 * 1.02, check_every=10)
    assert 0 <= res.target_step < res.steps < 1000
    assert res.mlu <= 0.8 * 1.02
    assert res.seconds > 0 and res.compile_seconds >= 0 and res.target_seconds > 0


def test_plateau_stops_without_knowing_the_optimum():
    """The plateau rule stops once the best MLU improved by <= rel_tol over the window;
    on the two-path instance (optimum 0.8, closed form above) it stops early, near the
    optimum, and the stopping point obeys the rule exactly (checked on the history)."""
    prob = two_path_degraded()
    window, tol = 50, 1e-3
    res = fo.optimize_routing(prob, steps=2000, plateau=(window, tol), check_every=10)
    assert res.steps < 2000 and res.steps % 10 == 0
    best = np.minimum.accumulate(res.metric_history)
    assert (best[-window - 1] - best[-1]) / best[-1] <= tol
    assert res.mlu == pytest.approx(0.8, rel=2e-2)
    with pytest.raises(ValueError, match="plateau"):
        fo.optimize_routing(prob, steps=10, plateau=(0, 1e-3))


# ---------------------------------------------------------------- gradients
def _fd(f, z, h):
    """Central differences of ``f`` (scalar or vector valued) at ``z``: ``[..., *z.shape]``."""
    cols = []
    for idx in np.ndindex(z.shape):
        zp, zm = z.copy(), z.copy()
        zp[idx] += h
        zm[idx] -= h
        cols.append((np.asarray(f(zp)) - np.asarray(f(zm))) / (2 * h))
    return np.moveaxis(np.array(cols), 0, -1).reshape(np.shape(cols[0]) + z.shape)


def test_mlu_gradients_match_finite_differences_x64():
    topo, src, dst, _ = small_fat_tree_flows()
    with enable_x64():
        prob = fo.routing_problem(topo, src, dst, np.linspace(2e9, 6e9, src.size))
        arr = prob.arrays()
        z0 = np.random.default_rng(1).normal(size=prob.path_mask.shape)
        z0 = np.where(prob.path_mask, z0, 0.0)
        tw = jnp.asarray([1.0])

        @jax.jit
        def losses(z):
            s = obj.masked_softmax(z, arr.path_mask)
            return jnp.stack([obj.mlu_loss(arr, s, 0.05)[0],            # smooth MLU
                              obj.tenant_mlu_loss(arr, s, 0.05, tw)[0],  # per tenant
                              obj.mlu_loss(arr, s, 1e-9)[0]])            # ~ exact MLU

        jac = np.asarray(jax.jit(jax.jacrev(losses))(jnp.asarray(z0)))
        fd = _fd(lambda z: np.asarray(losses(jnp.asarray(z)))[:2], z0, 1e-6)
        assert np.all(np.isfinite(jac)) and np.all(np.abs(fd).max(axis=(1, 2)) > 0)
        np.testing.assert_allclose(jac[:2], fd, rtol=1e-5, atol=1e-8)
        # At a point with a unique most-utilised link, the low-temperature gradient is
        # the gradient of the exact (host, float64) MLU.

        def exact(z):
            s = np.asarray(obj.masked_softmax(jnp.asarray(z), arr.path_mask))
            return prob.mlu(s)

        np.testing.assert_allclose(jac[2], _fd(exact, z0, 1e-6), rtol=1e-5, atol=1e-9)


@pytest.mark.slow
def test_cct_gradients_match_exact_solver_finite_differences_x64():
    # d CCT / d logits and d mean-FCT / d logits by the unrolled max-min event loop vs
    # central differences of the exact event-driven simulator (while_loop) at a
    # generic point (no ties).
    topo, src, dst, size = small_fat_tree_flows()
    src, dst, size = src[:4], dst[:4], size[:4]
    with enable_x64():
        prob = fo.routing_problem(topo, src, dst, np.ones(src.size))
        arr = prob.arrays()
        ps = PathSet(src=prob.pair_src, dst=prob.pair_dst, links=prob.links,
                     path_mask=prob.path_mask, hop_mask=prob.hop_mask, n_paths=prob.n_paths)
        z0 = np.random.default_rng(1).normal(size=prob.path_mask.shape)
        z0 = np.where(prob.path_mask, z0, 0.0)
        cap = jnp.asarray(prob.capacity)

        def unrolled(z):
            fin, _ = obj.completion_times(arr, obj.masked_softmax(z, arr.path_mask),
                                          jnp.asarray(size), events=prob.n_pairs,
                                          iterations=8)
            return jnp.stack([jnp.max(fin), jnp.mean(fin)])

        def exact(z):
            s = np.asarray(obj.masked_softmax(jnp.asarray(z), arr.path_mask))
            inc = Incidence.from_paths(ps, s, n_links=topo.n_links)
            fin = np.asarray(simulate_flows(inc, cap, np.zeros(src.size), size).finish)
            return np.array([fin.max(), fin.mean()])

        np.testing.assert_allclose(np.asarray(unrolled(jnp.asarray(z0))), exact(z0),
                                   rtol=1e-12)
        jac = np.asarray(jax.jit(jax.jacrev(unrolled))(jnp.asarray(z0)))
        fd = _fd(exact, z0, 1e-6)
        assert np.all(np.isfinite(jac)) and np.all(np.abs(fd).max(axis=(1, 2)) > 0)
        for i in range(2):
            np.testing.assert_allclose(jac[i], fd[i], rtol=1e-5,
                                       atol=1e-7 * np.abs(fd[i]).max())


@pytest.mark.slow  # ~15 s: compiling the gradient of the fluid scan in x64
def test_fluid_objective_gradient_matches_finite_differences_x64():
    # Two pairs over two parallel 2-hop paths sharing the first link pairwise; the
    # proxy 2 * integral of the undelivered fraction is smooth in the split.
    ps = pathset([[[0, 2], [0, 3]], [[1, 2], [1, 3]]])
    size = np.array([2e5, 1.5e5])
    with enable_x64():
        prob = fo.problem_from_paths(ps, np.array([C, C, C / 2, C]), np.ones(2))
        arr = prob.arrays()
        f_obj = fo.fluid_objective(prob, metric="mean_fct", dt=1e-6, n_steps=40)
        z0 = np.array([[0.3, -0.2], [-0.4, 0.1]])

        def f(z):
            return f_obj(obj.masked_softmax(jnp.asarray(z), arr.path_mask), arr,
                         jnp.asarray(size))[0]

        # one value_and_grad serves the gradient and the 8 evaluations of the central
        # differences (no separate forward compile)
        value_and_grad = jax.value_and_grad(f)
        g = np.asarray(value_and_grad(jnp.asarray(z0))[1])
        fd = _fd(lambda z: float(value_and_grad(jnp.asarray(z))[0]), z0, 1e-5)
        assert np.all(np.isfinite(g)) and np.abs(fd).max() > 0
        np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-6 * np.abs(fd).max())


# ---------------------------------------------------------------- policy (DOTE)
@pytest.mark.slow
def test_policies_generalise_to_held_out_matrices():
    # Tenant instance of the per-tenant test: pair a over link 0 (C/2) or 1 (C), pair b
    # over link 1.  Optimum: x = min(1, (d_a + d_b) / (3 d_a)) on link 0 -- it depends on
    # the matrix, so one shared split cannot be optimal for all; a policy that reads the
    # matrix can.
    ps = pathset([[[0], [1]], [[1]]])
    prob = fo.problem_from_paths(ps, np.array([C / 2, C]), np.array([C / 2, C / 2]))
    rng = np.random.default_rng(0)
    train = C * np.exp(rng.normal(0, 0.5, (256, 2)))
    test = C * np.exp(rng.normal(0, 0.5, (32, 2)))
    x = np.minimum(1.0, test.sum(1) / (3 * test[:, 0]))
    best = np.maximum(2 * x * test[:, 0], (1 - x) * test[:, 0] + test[:, 1]) / C
    lp = np.array([fo.solve_mlu_lp(prob, demand=d).mlu for d in test])
    np.testing.assert_allclose(lp, best, rtol=1e-9)
    mlp = fo.train_routing_policy(prob, train, kind="mlp", hidden=16, steps=800,
                                  learning_rate=1e-2)
    gap = mlp.mlu(test) / best - 1
    assert gap.mean() < 0.02 and gap.max() < 0.1
    shared = fo.train_routing_policy(prob, train, kind="shared", steps=400,
                                     learning_rate=1e-2)
    assert shared.mlu(test).mean() > mlp.mlu(test).mean()
    assert np.all(shared.split(test)[:, 1, 1] == 0.0)  # pair b's padded path


# ---------------------------------------------------------------- API edges
def test_bad_arguments_raise_value_errors():
    prob = two_path_degraded()
    with pytest.raises(ValueError, match="objective"):
        fo.optimize_routing(prob, objective="latency")
    with pytest.raises(ValueError, match="size"):
        fo.optimize_routing(prob, objective="cct")
    with pytest.raises(ValueError, match="demand"):
        fo.optimize_routing(prob, demand=np.ones(3))
    with pytest.raises(ValueError, match="tenant_weight"):
        fo.optimize_routing(prob, tenant_weight=np.ones(2))
    with pytest.raises(ValueError, match="init"):
        fo.optimize_routing(prob, init="random")
    with pytest.raises(ValueError, match="split"):
        prob.mlu(np.array([[0.5, 0.6]]))
    with pytest.raises(ValueError, match="demands"):
        fo.train_routing_policy(prob, np.ones((4, 3)))
    with pytest.raises(ValueError, match="aggregate=False"):
        topo, src, dst, size = small_fat_tree_flows()
        agg = fo.routing_problem(topo, src, dst, size, aggregate=True)
        fo.optimize_routing(agg, objective="cct", size=np.ones(agg.n_pairs))


def test_report_lists_links_and_splits():
    prob = two_path_degraded()
    topo, src, dst, _ = small_fat_tree_flows()
    res = fo.optimize_routing(prob, steps=100)
    text = res.report(baseline_split=np.array([[0.5, 0.5]]))
    assert "MLU before 2.0000" in text and "after 0.8" in text
    assert "50.0% ->  80." in text
    named = fo.routing_problem(topo, src[:1], dst[:1], np.array([1e9]))
    text = fo.routing_report(named, fo.spray_split(named))
    assert "h0->pod0/edge0" in text and "pod0/edge0 > pod0/agg" in text
