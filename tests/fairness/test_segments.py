"""Segment reductions as gather tables (fabric_jax.segments) and the receiver wire's
history (fabric_jax.links.wire_step): oracles and properties."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabric_jax import links as lk
from fabric_jax import segments as sg


def _oracle(ids, values, n, op):
    fill = {"sum": 0.0, "min": np.inf, "max": -np.inf}[op]
    out = np.full((n,) + values.shape[1:], fill)
    on = (ids >= 0) & (ids < n)
    ufunc = {"sum": np.add, "min": np.minimum, "max": np.maximum}[op]
    ufunc.at(out, ids[on], values[on])
    return out


def _ids(rng, n_seg, n, skew):
    ids = rng.integers(-1, n_seg + 1, n)          # -1 and n_seg: padding
    if skew and n:
        ids[: n // 2] = 3                           # an incast link
        ids[n // 2: n // 2 + n // 5] = n_seg - 1
    return ids


@pytest.mark.parametrize("n_seg,n,skew,width", [(10, 100, False, None), (50, 5000, True, None),
                                               (7, 0, False, None), (300, 4000, True, 4),
                                               (300, 4000, True, 1), (40, 600, False, 8)])
def test_table_reductions_equal_numpy(n_seg, n, skew, width):
    rng = np.random.default_rng(n + n_seg)
    ids = _ids(rng, n_seg, n, skew)
    vals = rng.normal(size=(n, 3))
    tab = sg.segment_table(ids, n_seg, width=width)
    for op in ("sum", "min", "max"):
        got = np.asarray(getattr(tab, op)(jnp.asarray(vals, jnp.float32)))
        ref = _oracle(ids, vals, n_seg, op)
        if op == "sum":
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
        else:   # minima and maxima are exact
            np.testing.assert_array_equal(got, ref.astype(np.float32))


def test_skewed_segments_keep_the_tables_small():
    # 200,000 entries, half of them on one of 10,000 segments: the chunked tables hold
    # about the entries (plus a small table's free slots), not segments x largest
    # segment (10^9)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10_000, 200_000)
    ids[:100_000] = 3
    tab = sg.segment_table(ids, 10_000)
    assert tab.first_row is not None and tab.size < 2 * 200_000 + sg.ONE_LEVEL_FREE
    # balanced segments: one row per segment
    bal = sg.segment_table(rng.integers(0, 1000, 20_000), 1000)
    assert bal.first_row is None and bal.rows.shape[0] == 1000


def test_segment_reduce_forms_agree_under_jit_vmap_and_grad():
    rng = np.random.default_rng(1)
    ids = _ids(rng, 30, 900, True)
    tab = sg.segment_table(ids, 30)
    vals = jnp.asarray(rng.normal(size=(4, 900)), jnp.float32)

    def f(v, form):
        with sg.forced(form):
            return sg.segment_reduce(v, ids, 30, tab)

    outs = {}
    for form in ("gather", "scatter"):
        jitted = jax.jit(lambda v, form=form: f(v, form))
        outs[form] = np.asarray(jax.vmap(jitted)(vals))
        # d(sum_s w_s r_s) / d v_e = w_{segment of e} (0 on padding)
        w = jnp.arange(30, dtype=jnp.float32)
        g = np.asarray(jax.grad(lambda v, form=form: jnp.sum(w * f(v, form)))(vals[0]))
        ref = np.where((ids >= 0) & (ids < 30), np.arange(30.0)[np.clip(ids, 0, 29)], 0.0)
        np.testing.assert_allclose(g, ref)
    np.testing.assert_allclose(outs["gather"], outs["scatter"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs["scatter"],
                               np.stack([_oracle(ids, np.asarray(v), 30, "sum") for v in vals]),
                               rtol=1e-5, atol=1e-4)


def test_hop_table_sums_are_the_same_in_both_forms():
    rng = np.random.default_rng(2)
    link = rng.integers(0, 12, (40, 5))
    link[rng.random((40, 5)) < 0.2] = 12            # padding hops
    with sg.forced("gather"):
        hops = lk.hop_table(link, np.ones(link.shape), 5, 12)
    assert hops.by_link is not None and hops.by_prev is not None
    x = jnp.asarray(rng.random((40, 5, 3)), jnp.float32)
    for form in ("gather", "scatter"):
        with sg.forced(form):
            got = [np.asarray(jax.jit(f)(x)) for f in (hops.link_sum, hops.pool_sum)]
        np.testing.assert_allclose(got[0], _oracle(np.asarray(hops.link).ravel(),
                                                   np.asarray(x).reshape(200, 3), 12, "sum"),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], _oracle(np.asarray(hops.prev).ravel(),
                                                   np.asarray(x).reshape(200, 3), 12, "sum"),
                                   rtol=1e-5, atol=1e-5)


def test_wire_history_delivers_after_the_delay_and_counts_what_is_in_flight():
    # flows with delays 0, 0.4, 1, 2.5 and 3 steps: bytes that enter at step j leave
    # (1 - phi) at j + n and phi at j + n + 1; in flight = entered - delivered
    delay = np.array([0.0, 0.4, 1.0, 2.5, 3.0])
    n, phi, depth = lk.wire_taps(delay, 1.0)
    rng = np.random.default_rng(3)
    pushes = rng.random((12, 5)) * np.array([[1.0], [1.0], [0.0], [1.0], [1.0], [1.0],
                                             [0.0], [1.0], [0.0], [0.0], [0.0], [0.0]])
    wire = jnp.zeros((depth, 5), jnp.float32)
    delivered = []
    for k in range(12):
        wire, d = lk.wire_step(wire, k, jnp.asarray(n), jnp.asarray(phi, jnp.float32),
                               jnp.asarray(pushes[k], jnp.float32))
        delivered.append(np.asarray(d))
        left = lk.wire_in_flight(wire, k, jnp.asarray(n), jnp.asarray(phi, jnp.float32))
        np.testing.assert_allclose(np.asarray(left),
                                   pushes[:k + 1].sum(0) - np.sum(delivered, axis=0),
                                   atol=1e-6)
    ref = np.zeros((16, 5))
    for j in range(12):
        ref[j + n, np.arange(5)] += pushes[j] * (1 - phi)
        ref[j + n + 1, np.arange(5)] += pushes[j] * phi
    np.testing.assert_allclose(np.array(delivered), ref[:12], atol=1e-6)


def test_one_off_solve_in_the_accelerator_layout_matches_the_cpu_layout(monkeypatch):
    # max_min_fair on an accelerator attaches a segment table and skips compaction;
    # forced here on the CPU (a fresh shape, so the program is traced again)
    import fabric_jax as fj
    from fabric_jax.fairness import _api
    monkeypatch.setattr(_api, "TABLE_MIN_ENTRIES", 1000)
    rng = np.random.default_rng(4)
    n_flows, n_links, hops = 2_003, 300, 4
    links = np.argsort(rng.random((n_flows, n_links)), axis=1)[:, :hops]
    links[:500, 0] = 7                                    # a hot link
    inc = fj.Incidence.from_coo(links.reshape(-1), np.repeat(np.arange(n_flows), hops),
                                None, n_links=n_links, n_flows=n_flows)
    cap = rng.uniform(1e9, 1e10, n_links).astype(np.float32)
    ref = fj.max_min_fair(inc, cap)
    with sg.forced("gather"):
        inc_t, compaction = _api._for_backend(inc)
        assert inc_t.by_link is not None and compaction == "none"
        got = fj.max_min_fair(inc, cap)
    np.testing.assert_allclose(np.asarray(got.rates), np.asarray(ref.rates), rtol=2e-5)
    assert int(got.info.iterations) == int(ref.info.iterations)


def test_tables_follow_the_device_a_computation_runs_on(monkeypatch):
    # on a GPU machine, a run inside jax.default_device(cpu) is a CPU run: no segment
    # tables, the one-off solve keeps its compaction levels (the host's choices follow
    # the device, not the machine's default backend)
    import fabric_jax as fj
    from fabric_jax.fairness import _api
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")      # a GPU machine
    monkeypatch.setattr(_api, "TABLE_MIN_ENTRIES", 10)
    assert sg.default_platform() == "gpu" and sg.tables_wanted()
    cpu = jax.devices("cpu")[0]
    inc = fj.Incidence.from_coo(np.array([0, 1, 1, 2] * 4), np.repeat(np.arange(4), 4),
                                None, n_links=3, n_flows=4)
    assert _api._for_backend(inc)[1] == "none"                   # accelerator form
    for dev in (cpu, "cpu"):
        with jax.default_device(dev):
            assert sg.default_platform() == "cpu" and not sg.tables_wanted()
            tabled, compaction = _api._for_backend(inc)
            assert tabled.by_link is None and compaction == "fine"
    with sg.forced("gather"), jax.default_device(cpu):               # FORCE still wins
        assert sg.tables_wanted()
    # and a real CPU-only machine
    monkeypatch.undo()
    assert sg.default_platform() == jax.default_backend() == "cpu"
