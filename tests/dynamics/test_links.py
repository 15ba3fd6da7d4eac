"""FIFO bands of the fluid egress queues (fabric_jax.links): NumPy oracle and properties."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import links as lk

from tests.helpers import enable_x64, slow_except


def _table(rng, n_flows=6, n_hops=3, n_links=4):
    link = rng.integers(0, n_links, size=(n_flows, n_hops))
    link[0, -1] = n_links                       # a padding hop
    valid = link < n_links
    return lk.hop_table(link, jnp.asarray(valid, float), n_hops, n_links), link, valid


def _take_oracle(link, bands, amount, n_links):
    """Sequential drain: each link's bands oldest first, an entry of a band in
    proportion to its bytes (loops, no vector tricks)."""
    out = np.zeros_like(bands)
    n_f, n_h, n_b = bands.shape
    for l in range(n_links):
        budget = amount[l]
        for k in range(n_b):
            ents = [(f, h) for f in range(n_f) for h in range(n_h) if link[f, h] == l]
            tot = sum(bands[f, h, k] for f, h in ents)
            take = min(budget, tot)
            for f, h in ents:
                out[f, h, k] = bands[f, h, k] * (take / tot if tot > 0 else 0.0)
            budget -= take
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fifo_take_matches_sequential_oracle_and_conserves(seed):
    with enable_x64():
        rng = np.random.default_rng(seed)
        hops, link, valid = _table(rng)
        bands = rng.uniform(0, 10, size=link.shape + (4,)) * valid[..., None]
        bands[1, 0, 1] = 0.0                     # some empty band entries
        amount = rng.uniform(0, 80, size=4)
        got = np.asarray(lk.fifo_take(hops, jnp.asarray(bands), jnp.asarray(amount)))
        np.testing.assert_allclose(got, _take_oracle(link, bands, amount, 4), rtol=1e-12,
                                   atol=1e-12)
        q_l = np.asarray(lk.band_sums(hops, jnp.asarray(bands))).sum(axis=1)
        took_l = np.asarray(hops.link_sum(jnp.asarray(got.sum(-1))))
        np.testing.assert_allclose(took_l, np.minimum(amount, q_l), rtol=1e-12)
        assert np.all(got <= bands + 1e-12) and np.all(got >= 0)
        # monotone in the amount; an older band is emptied before a newer one is touched
        more = np.asarray(lk.fifo_take(hops, jnp.asarray(bands), jnp.asarray(amount * 1.5)))
        assert np.all(more >= got - 1e-12)


def test_fifo_take_order_within_a_link():
    # one link, two flows: band 0 all flow A, band 1 all flow B; 30 of 50 bytes taken
    hops = lk.hop_table(np.array([[0], [0]]), jnp.ones((2, 1)), 1, 1)
    bands = jnp.array([[[20.0, 0.0]], [[0.0, 30.0]]])
    got = np.asarray(lk.fifo_take(hops, bands, jnp.array([30.0])))
    np.testing.assert_allclose(got[:, 0, :], [[20.0, 0.0], [0.0, 10.0]])


def test_serve_standing_first_then_arrivals():
    hops = lk.hop_table(np.array([[0], [0]]), jnp.ones((2, 1)), 1, 1)
    bands = jnp.array([[[40.0]], [[0.0]]])       # A stands, B arrives this step
    transit = jnp.array([[0.0], [60.0]])
    sent, left_b, left_a, sent_l, head, sent_a = lk.serve(hops, bands, transit,
                                                          jnp.array([50.0]), 1.0)
    np.testing.assert_allclose(np.asarray(sent)[:, 0], [40.0, 10.0])
    np.testing.assert_allclose(np.asarray(left_a)[:, 0], [0.0, 50.0])
    assert float(jnp.sum(left_b)) == 0.0 and float(sent_l[0]) == 50.0
    np.testing.assert_allclose(np.asarray(head.sum(-1) + sent_a), np.asarray(sent))
    # FIFO positions in the step's 50 bytes: A's 40 first, then B's 10
    p0, p1, lb_left = lk.service_span(hops, bands, head, sent_a, sent_l)
    np.testing.assert_allclose(np.asarray(p0)[:, 0], [0.0, 40.0])
    np.testing.assert_allclose(np.asarray(p1)[:, 0], [40.0, 50.0])
    np.testing.assert_allclose(np.asarray(lb_left), np.asarray(lk.band_sums(hops, left_b)))


@pytest.mark.parametrize("seed", [0, 3])
def test_merge_bands_keeps_bytes_frees_the_tail_and_is_lossless_with_an_empty_band(seed):
    with enable_x64():
        rng = np.random.default_rng(seed)
        hops, link, valid = _table(rng)
        bands = rng.uniform(1, 10, size=link.shape + (5,)) * valid[..., None]
        merged = np.asarray(lk.merge_bands(hops, jnp.asarray(bands)))
        np.testing.assert_allclose(merged.sum(-1), bands.sum(-1), rtol=1e-12)
        assert np.all(merged[..., -1] == 0)
        # with an empty band at the head of every link, the merge moves no byte out
        # of order: any amount drains exactly the same bytes as before
        head_empty = bands.copy()
        head_empty[..., 0] = 0.0
        m2 = np.asarray(lk.merge_bands(hops, jnp.asarray(head_empty)))
        for amount in (0.0, 7.0, 25.0, 1e3):
            a = jnp.full(4, amount)
            np.testing.assert_allclose(np.asarray(lk.fifo_take(hops, jnp.asarray(m2), a)).sum(-1),
                                       np.asarray(lk.fifo_take(hops, jnp.asarray(head_empty),
                                                               a)).sum(-1), atol=1e-9)


def test_merge_bands_prefers_bands_of_the_same_make_up():
    # one link, two flows; bands: [A only, A+B, A+B (same mix), B only]: the two mixed
    # bands merge (cost 0), the pure bands keep their place at the ends
    hops = lk.hop_table(np.array([[0], [0]]), jnp.ones((2, 1)), 1, 1)
    a = [10.0, 5.0, 10.0, 0.0]
    b = [0.0, 5.0, 10.0, 10.0]
    bands = jnp.array([[a], [b]])
    got = np.asarray(lk.merge_bands(hops, bands))[:, 0, :]
    np.testing.assert_allclose(got, [[10.0, 15.0, 0.0, 0.0], [0.0, 15.0, 10.0, 0.0]])
    # one band: nothing to merge
    one = jnp.ones((2, 1, 1))
    np.testing.assert_array_equal(np.asarray(lk.merge_bands(hops, one)), np.asarray(one))


def test_reconcile_bands_sums_to_the_queue():
    bands = jnp.array([[[2.0, 3.0, 5.0]], [[1.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]]])
    queue = jnp.array([[5.0], [4.0], [2.0]])
    got = np.asarray(lk.reconcile_bands(bands, queue))
    np.testing.assert_allclose(got.sum(-1), np.asarray(queue))
    np.testing.assert_allclose(got[0, 0], [1.0, 1.5, 2.5])     # removal: in proportion
    np.testing.assert_allclose(got[1, 0], [1.0, 0.0, 3.0])     # addition: at the tail
    np.testing.assert_allclose(got[2, 0], [0.0, 0.0, 2.0])


def test_fifo_kernels_jit_and_grad():
    hops = lk.hop_table(np.array([[0], [0]]), jnp.ones((2, 1)), 1, 1)
    bands = jnp.array([[[20.0, 5.0]], [[0.0, 30.0]]])

    def f(amount):
        return jnp.sum(jax.jit(lk.fifo_take)(hops, bands, amount)[1])

    g = jax.grad(f)(jnp.array([30.0]))
    # the 30th byte is in band 1 (band 0 holds 20), where flow B has 30 of 35 bytes
    np.testing.assert_allclose(np.asarray(g), [30.0 / 35.0], rtol=1e-6)


def test_simulate_fluid_rejects_bad_fifo_bands():
    from fabric_jax import Incidence, simulate_fluid
    inc = Incidence.from_coo(np.array([0]), np.array([0]), n_links=1, n_flows=1)
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="fifo_bands"):
            simulate_fluid(inc, np.ones(1), np.ones(1), dt=1e-6, n_steps=2, fifo_bands=bad)


# ------------------------------------------------------------------ derivatives
# The band kernels are piecewise smooth in the bands and amounts.  Off the kinks their
# jvp / vjp must match finite differences; at a tie (a service ending exactly at a band
# boundary, an exactly empty band) they differentiate the piece just below the tie
# (``fifo_take``'s docstring), which a forward difference taken just below it checks.

def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(a, float)) for a in jax.tree_util.tree_leaves(tree)])


def _check_derivatives(f, x, v, eps, rtol, fd="central"):
    """jvp of ``f`` at ``x`` along ``v`` against a finite difference (``central`` or
    ``forward``), and the vjp against the jvp (``<w, J v> = <J^T w, v>``)."""
    out, tan = jax.jvp(f, x, v)
    shift = lambda s: tuple(a + s * b for a, b in zip(x, v))  # noqa: E731
    if fd == "central":
        diff = (_flat(f(*shift(eps))) - _flat(f(*shift(-eps)))) / (2 * eps)
    else:
        diff = (_flat(f(*shift(eps))) - _flat(out)) / eps
    scale = np.max(np.abs(diff)) + 1.0
    np.testing.assert_allclose(_flat(tan), diff, rtol=rtol, atol=rtol * scale)
    w = jax.tree_util.tree_map(lambda a: jnp.asarray(np.random.default_rng(1).normal(
        size=np.shape(a))), out)
    _, pull = jax.vjp(f, *x)
    lhs = float(np.dot(_flat(w), _flat(tan)))
    rhs = float(sum(np.dot(_flat(g), _flat(b)) for g, b in zip(pull(w), v)))
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-9 * scale)


def _generic(rng, n_bands=4):
    """A table whose bands are all non-empty and amounts off every band boundary."""
    hops, link, valid = _table(rng)
    bands = rng.uniform(1, 10, size=link.shape + (n_bands,)) * valid[..., None]
    q_l = np.asarray(lk.band_sums(hops, jnp.asarray(bands))).sum(axis=1)
    amount = q_l * rng.uniform(0.1, 0.9, size=q_l.shape)
    return hops, link, valid, bands, amount


@pytest.mark.parametrize("kernel", slow_except(
    ["fifo_take", "serve", "merge_bands", "reconcile_bands", "service_span"],
    keep=["serve", "reconcile_bands"]))
def test_band_kernel_derivatives_match_finite_differences(kernel):
    with enable_x64():
        rng = np.random.default_rng(7)
        hops, link, valid, bands, amount = _generic(rng)
        transit = rng.uniform(1, 20, size=link.shape) * valid
        db = rng.normal(size=bands.shape) * valid[..., None]
        da, dt_ = rng.normal(size=amount.shape), rng.normal(size=transit.shape) * valid
        j = jnp.asarray
        if kernel == "fifo_take":
            f, x, v = (lambda b, a: lk.fifo_take(hops, b, a)), (bands, amount), (db, da)
        elif kernel == "serve":
            f = lambda b, tr, u: lk.serve(hops, b, tr, u, 1.0)[:4]  # noqa: E731
            x, v = (bands, transit, amount + 15.0), (db, dt_, da)
        elif kernel == "merge_bands":
            f, x, v = (lambda b: lk.merge_bands(hops, b)), (bands,), (db,)
        elif kernel == "reconcile_bands":
            queue = bands.sum(-1) * rng.choice([0.5, 1.5], size=transit.shape)  # off the kink
            f, x, v = lk.reconcile_bands, (bands, queue), (db, dt_)
        else:
            def f(b, a, tr):
                _, _, _, sent_l, head, sent_a = lk.serve(hops, b, tr, a, 1.0)
                return lk.service_span(hops, b, head, sent_a, sent_l)
            x, v = (bands, amount + 15.0, transit), (db, da, dt_)
        _check_derivatives(f, tuple(map(j, x)), tuple(map(j, v)), 1e-6, 1e-6)


def test_fifo_take_derivative_at_ties_is_the_piece_below():
    # amounts exactly at band boundaries (the end of a band, of the whole queue, an
    # empty band's place) and exactly empty bands with a derivative (drained exactly at
    # an earlier step): the jvp is the forward difference just below the tie, and the
    # link's total moves with min(amount - 0, q) (with jnp.clip and where(L > 0, ., 0)
    # a tie got half of each side and an empty band's derivative was never taken).
    with enable_x64():
        rng = np.random.default_rng(3)
        hops, link, valid = _table(rng)
        # whole bytes: the band boundaries below are exact ties in float
        bands = rng.integers(1, 10, size=link.shape + (5,)) * valid[..., None] * 1.0
        bands[..., 1] = 0.0                      # an empty band inside every queue
        bands[..., 3] = 0.0
        lb = np.asarray(lk.band_sums(hops, jnp.asarray(bands)))
        ends = np.cumsum(lb, axis=1)
        db = rng.uniform(0.5, 1.0, size=bands.shape) * valid[..., None]   # >= 0: a
        j = jnp.asarray                                                  # real direction
        f = lambda b, a: lk.fifo_take(hops, b, a)  # noqa: E731
        for col in range(5):                     # band 1 ends where band 0 does, etc.
            amount = ends[:, col]
            for da in (np.ones(4), -np.ones(4), rng.normal(size=4)):
                _, tan = jax.jvp(f, (j(bands), j(amount)), (j(db), j(da)))
                # the piece below: a forward difference at amount - delta
                below = (j(bands), j(amount - 1e-5))
                _check_derivatives(f, below, (j(db), j(da)), 1e-8, 1e-6, fd="forward")
                _, tan_below = jax.jvp(f, below, (j(db), j(da)))
                np.testing.assert_allclose(np.asarray(tan), np.asarray(tan_below), atol=1e-4)
                # the link total: d min(amount - 0, q)
                dq = np.asarray(lk.band_sums(hops, j(db))).sum(axis=1)
                want = np.where(amount < ends[:, -1] + 1e-9, da, dq) if col < 4 else da
                took = np.asarray(hops.link_sum(jnp.sum(tan, axis=-1)))
                np.testing.assert_allclose(took, want, atol=1e-9)


def test_serve_derivative_when_the_budget_ends_the_standing_queue():
    # the budget equals the standing bytes (a grant that drains a queue exactly, as in
    # the two-class ETS case at step 4): everything sent moves with the budget, the
    # arrivals' share not at all; with clip / maximum ties it moved with
    # 0.75 d(budget) + 0.25 d(queue)
    with enable_x64():
        hops = lk.hop_table(np.array([[0], [0]]), jnp.ones((2, 1)), 1, 1)
        bands = jnp.array([[[30.0, 0.0, 10.0]], [[20.0, 0.0, 15.0]]])   # q = 75
        transit = jnp.array([[40.0], [60.0]])
        db = jnp.array([[[1.0, 0.5, -2.0]], [[0.25, 0.0, 3.0]]])
        dtr = jnp.array([[1.0], [-1.0]])

        def f(b, tr, u):
            return lk.serve(hops, b, tr, u, 1.0)

        for du in (1.0, -1.0, 0.0):
            out, tan = jax.jvp(f, (bands, transit, jnp.array([75.0])),
                               (db, dtr, jnp.array([du])))
            assert float(out[3][0]) == 75.0
            np.testing.assert_allclose(float(tan[3][0]), du, atol=1e-12)        # s_l
            np.testing.assert_allclose(np.asarray(tan[5]), 0.0, atol=1e-12)     # sent_a
            np.testing.assert_allclose(float(jnp.sum(tan[0])), du, atol=1e-12)  # per entry
        # no byte arriving but room: an arrival's derivative is sent with it
        out, tan = jax.jvp(f, (bands, jnp.zeros((2, 1)), jnp.array([100.0])),
                           (jnp.zeros_like(bands), dtr * jnp.array([[1.0], [2.0]]),
                            jnp.zeros(1)))
        np.testing.assert_allclose(np.asarray(tan[5])[:, 0], [1.0, -2.0])
        np.testing.assert_allclose(np.asarray(tan[2]), 0.0, atol=1e-12)


def test_reconcile_bands_derivative_sums_to_the_queue_at_equality():
    with enable_x64():
        bands = jnp.array([[[2.0, 3.0, 5.0]], [[0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0]]])
        queue = jnp.sum(bands, axis=-1)                      # equal: the usual case
        db = jnp.array([[[1.0, -1.0, 0.5]], [[0.0, 2.0, 0.0]], [[-1.0, 0.0, 0.0]]])
        dq = jnp.array([[3.0], [-1.0], [2.0]])
        _, tan = jax.jvp(lk.reconcile_bands, (bands, queue), (db, dq))
        np.testing.assert_allclose(np.asarray(jnp.sum(tan, axis=-1)), np.asarray(dq))


def _fifo_queue_run(w, n_steps=12, n_bands=8):
    """A FIFO egress queue of one link in the band kernels alone: two entries arrive
    at 2500 and 10000 bytes a step (fixed make-up), the link serves a budget
    ``12500 w / (w + 1)`` bytes a step (an ETS grant), its bands then merged and
    reconciled as in the fluid step.  Returns the bytes each entry sent."""
    hops = lk.hop_table(np.array([[0], [0]]), jnp.ones((2, 1)), 1, 1)
    arrivals = jnp.array([[2500.0], [10000.0]])
    budget = jnp.reshape(12500.0 * w / (w + 1.0), (1,))

    def step(bands, _):
        sent_e, left_b, left_a, *_ = lk.serve(hops, bands, arrivals, budget, 1.0)
        return lk.reconcile_bands(lk.merge_bands(hops, left_b),
                                  jnp.sum(left_b, axis=-1) + left_a), sent_e[:, 0]

    _, sent = jax.lax.scan(step, jnp.zeros((2, 1, n_bands), arrivals.dtype), None,
                           length=n_steps)
    return jnp.sum(sent, axis=0)


@pytest.mark.parametrize("n_bands", slow_except([1, 8], keep=[8]))
def test_fifo_queue_weight_gradient_through_ties(n_bands):
    # The default-suite guard of the ETS-weight gradient (test_traffic_classes.py, slow):
    # with w = 3 the queue grows by 3125 a step and equals the budget 9375 exactly at
    # step 4 (and its band boundaries meet the budget again later).  The arrivals' make-up
    # is fixed, so each entry's share of what the FIFO sends is exactly its share of the
    # arrivals (1/5, 4/5): d sent / dw = n 12500 / (w + 1)^2 x share = (1875, 7500).
    # Until 2026-12-03 the kernels gave (4687.5, 18750) with 8 bands and
    # (1718.75, 6875) with one.
    with enable_x64():
        n, w = 12, 3.0
        want = n * 12500.0 / (w + 1.0) ** 2 * np.array([0.2, 0.8])
        f = jax.jit(lambda x: _fifo_queue_run(x, n, n_bands))
        np.testing.assert_allclose(np.asarray(f(jnp.asarray(w))), n * 9375.0 * np.array([0.2, 0.8]))
        for jac in (jax.jacfwd, jax.jacrev):
            np.testing.assert_allclose(np.asarray(jax.jit(jac(f))(jnp.asarray(w))), want,
                                       rtol=1e-12)
        fd = (np.asarray(f(jnp.asarray(w + 1e-6))) - np.asarray(f(jnp.asarray(w - 1e-6)))) / 2e-6
        np.testing.assert_allclose(fd, want, rtol=1e-6)


@pytest.mark.parametrize("rows", [1, 2, 5, 16, 17, 40, 300])
def test_sum_rows_matches_the_reduction(rows):
    """sum_rows (adds of row slices, a tree of blocks) is the sum over the leading axis."""
    a = np.random.default_rng(rows).random((rows, 9)).astype(np.float32)
    got = np.asarray(jax.jit(lk.sum_rows)(jnp.asarray(a)))
    np.testing.assert_allclose(got, a.astype(np.float64).sum(axis=0), rtol=1e-5)


def test_wire_in_flight_by_rows():
    """The per-step accounting's form of the wire's bytes equals the reduction's."""
    rng = np.random.default_rng(3)
    wire = jnp.asarray(rng.random((7, 50)).astype(np.float32))
    n = jnp.asarray(rng.integers(0, 5, 50), jnp.int32)
    phi = jnp.asarray(rng.random(50).astype(np.float32))
    k = jnp.asarray(12, jnp.int32)
    np.testing.assert_allclose(lk.wire_in_flight(wire, k, n, phi, by_rows=True),
                               lk.wire_in_flight(wire, k, n, phi), rtol=1e-6)
