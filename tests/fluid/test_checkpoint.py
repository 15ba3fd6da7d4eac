"""Checkpoint and resume of fluid runs: bit-identical continuation on CPU, determinism,
file validation."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.helpers import slow_except

from fabric_jax.checkpoint import Checkpoint, flatten_state, load_checkpoint, save_checkpoint
from fabric_jax.fluid import simulate_fluid
from fabric_jax.incidence import Incidence
from fabric_jax.paths import shortest_paths
from fabric_jax.routing import make_routing
from fabric_jax.topology import leaf_spine

US = 1e-6
N = 60  # steps per half


def _scenario(case):
    """4 flows leaf 0 -> leaf 1 over 2 spines (queues build: 4 C offered on 2 C)."""
    topo = leaf_spine(2, 2, 4)
    ps = shortest_paths(topo, np.arange(4), 4 + np.arange(4))
    up0 = topo.link_index("leaf0", "spine0")
    r = make_routing("spectrum_x_ar" if case == "routing" else "ecmp", ps, seed=0)
    inc = Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)
    kw = dict(dt=1 * US, base_rtt=np.full(4, 5 * US), arrival=np.array([0, 0, 10, 20]) * US)
    if case in ("dcqcn", "routing"):
        kw.update(law="dcqcn", flow_control="pfc", buffer=1e6)
    if case in ("routing", "faults"):  # up0 is down across the cut at step N = 60
        kw.update(routing=r, faults=[(50 * US, [up0], 0.0), (70 * US, [up0], 1.0)])
    return inc, topo.capacity, np.full(4, 4e6), kw


def _assert_identical(a, b):
    fa, fb = flatten_state(a), flatten_state(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        assert np.array_equal(np.asarray(fa[k]), np.asarray(fb[k]), equal_nan=True), k


@pytest.mark.parametrize("case", slow_except(["none", "dcqcn", "routing", "faults"],
                                             keep=["none"]))
def test_resume_is_bit_identical(case, tmp_path):
    # 2N steps in one call vs N steps, save, load, N more steps (in memory for the
    # "faults" case: ECMP, no CC): every array of the final state, and the results, are
    # equal bit for bit (float32, CPU).  "routing" is DCQCN + PFC + Spectrum-X adaptive
    # routing with a link failure spanning the cut.
    inc, cap, size, kw = _scenario(case)
    full = simulate_fluid(inc, cap, size, n_steps=2 * N, save_every=10, **kw)
    half = simulate_fluid(inc, cap, size, n_steps=N, save_every=10, **kw)
    if case == "faults":
        ck = half.state
    else:
        path = tmp_path / "ck.npz"
        save_checkpoint(path, half.state, meta={"case": case})
        ck = load_checkpoint(path)
        assert isinstance(ck, Checkpoint) and ck.meta == {"case": case}
        st = load_checkpoint(path, like=half.state)
        assert jax.tree_util.tree_structure(st) == jax.tree_util.tree_structure(half.state)
        _assert_identical(st, half.state)
    rest = simulate_fluid(inc, cap, size, n_steps=N, save_every=10, init_state=ck, **kw)
    for f in ("delivered", "finish", "queued", "link_queue", "sent", "dropped", "start"):
        assert np.array_equal(np.asarray(getattr(full, f)), np.asarray(getattr(rest, f))), f
    _assert_identical(full.state, rest.state)
    _assert_identical(full.law_state, rest.law_state)
    assert int(rest.state.k) == 2 * N
    # the trajectory continues in absolute time and matches the second half
    np.testing.assert_array_equal(np.asarray(rest.trajectory.t),
                                  np.asarray(full.trajectory.t)[N // 10:])
    np.testing.assert_array_equal(np.asarray(rest.trajectory.queue),
                                  np.asarray(full.trajectory.queue)[N // 10:])
    assert float(np.sum(full.delivered)) > 0 and float(np.max(full.link_queue)) > 0


def test_deterministic_same_inputs_same_results():
    # (shapes and static arguments as in the resume test: the compiled loop is reused)
    inc, cap, size, kw = _scenario("routing")
    r1 = simulate_fluid(inc, cap, size, n_steps=N, save_every=10, **kw)
    r2 = simulate_fluid(inc, cap, size, n_steps=N, save_every=10, **kw)
    _assert_identical(r1.state, r2.state)
    # different seeds differ: another ECMP seed hashes the flows onto other paths
    topo = leaf_spine(2, 2, 4)
    paths = shortest_paths(topo, np.arange(4), 4 + np.arange(4))
    splits = [np.asarray(make_routing("ecmp", paths, seed=s).split) for s in (0, 1)]
    assert not np.array_equal(*splits)


def test_checkpoint_validation(tmp_path):
    inc1 = Incidence.from_coo(np.array([0, 0]), np.array([0, 1]), n_links=1, n_flows=2)
    res = simulate_fluid(inc1, np.full(1, 1e9), np.full(2, 1e6), dt=1 * US, n_steps=3)
    with pytest.raises(ValueError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a readable .npz"):
        load_checkpoint(junk)
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(ValueError, match="not a fabric_jax checkpoint"):
        load_checkpoint(other)
    good = tmp_path / "good.npz"
    save_checkpoint(good, res.state)
    with np.load(good) as z:
        entries = {k: z[k] for k in z.files if k != "leaf_00003"}
    trunc = tmp_path / "trunc.npz"
    np.savez(trunc, **entries)
    with pytest.raises(ValueError, match="truncated"):
        load_checkpoint(trunc)
    # a state of another scenario (routing adds leaves; 4 flows changes shapes)
    inc, cap, size, kw = _scenario("routing")
    with pytest.raises(ValueError, match="init_state"):
        simulate_fluid(inc, cap, size, n_steps=5, init_state=load_checkpoint(good), **kw)
    small = res
    inc2 = Incidence.from_coo(np.array([0, 0, 0]), np.array([0, 1, 2]), n_links=1, n_flows=3)
    with pytest.raises(ValueError, match="init_state.*shape"):
        simulate_fluid(inc2, np.full(1, 1e9), np.full(3, 1e6), dt=1 * US, n_steps=3,
                       init_state=small.state)
    with pytest.raises(ValueError, match="numeric or boolean"):
        save_checkpoint(tmp_path / "obj.npz", {"a": np.array(["x"], dtype=object)})
