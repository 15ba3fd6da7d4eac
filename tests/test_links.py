"""FIFO bands of the fluid egress queues (fabric_jax.links): NumPy oracle and properties."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import links as lk

from .helpers import enable_x64


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
