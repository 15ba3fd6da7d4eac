"""``fabric_jax.compiling``: the compiler options of every jitted engine (XLA:GPU's
command buffers extended to while loops, so that the exact solves' and the time loop's
tests stay on the GPU).

What can be checked without a GPU: the option's value and when it is passed (the
environment, the user's own ``XLA_FLAGS``, the jaxlib version); that the CPU program is
the same with and without it, to the character; that every jit of the package goes
through :func:`fabric_jax.compiling.jit`.  What XLA:GPU makes of it is read from its
compiler (``tests/experiments/test_launch_model.py``, ``experiments/bench_gpu.py --parts aot``)."""

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fabric_jax as fj
from fabric_jax import compiling
from fabric_jax.fairness import _api


def test_the_option_is_xlas_default_set_with_while():
    opts = compiling.compiler_options(True)
    kinds = opts["xla_gpu_enable_command_buffer"].split(",")
    assert "WHILE" in kinds and "CONDITIONAL" in kinds and "FUSION" in kinds
    assert len(set(kinds)) == len(kinds)
    assert compiling.compiler_options(False) == {}


@pytest.mark.parametrize("env, on", [
    ({}, True), ({"FABRIC_JAX_DEVICE_LOOPS": "1"}, True),
    ({"FABRIC_JAX_DEVICE_LOOPS": "0"}, False), ({"FABRIC_JAX_DEVICE_LOOPS": "off"}, False),
    # the user's own choice of command buffers wins, e.g. XLA's documented way to turn
    # them off
    ({"XLA_FLAGS": "--xla_gpu_enable_command_buffer="}, False),
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, True),
])
def test_when_device_loops_are_asked_for(env, on):
    assert compiling.device_loops(env, jaxlib_version="0.10.2") is on


def test_an_older_jaxlib_gets_no_option_and_a_bad_setting_an_error():
    assert compiling.device_loops({}, jaxlib_version="0.9.0") is False
    assert compiling.device_loops({}, jaxlib_version="0.11.0.dev20261201") is True
    with pytest.raises(ValueError, match="FABRIC_JAX_DEVICE_LOOPS"):
        compiling.device_loops({"FABRIC_JAX_DEVICE_LOOPS": "yes please"})


def test_jit_passes_the_options_and_jax_jits_arguments():
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, y: y * 2.0, x)
    g = compiling.jit(f, static_argnums=(1,))
    assert float(g(jnp.float32(1.0), 3)) == 8.0
    h = compiling.jit(static_argnums=(1,))(f)            # as a decorator with arguments
    assert float(h(jnp.float32(1.0), 2)) == 4.0
    # the installed XLA knows every command type named (an unknown one is an error on
    # every backend, the CPU's included)
    compiled = jax.jit(f, static_argnums=(1,), compiler_options=compiling.compiler_options(
        True)).lower(jnp.float32(1.0), 3).compile()
    assert compiled is not None
    with pytest.raises(Exception, match="WHILST"):
        jax.jit(f, static_argnums=(1,), compiler_options={
            "xla_gpu_enable_command_buffer": "FUSION,WHILST"}).lower(jnp.float32(1.0), 3).compile()


def _random_pairs(n, seed):
    """``fat_tree(4)`` and one ECMP path for each of ``n`` random host pairs (the
    pairs of a host with itself dropped)."""
    topo = fj.fat_tree(4)
    src, dst = np.random.default_rng(seed).integers(0, topo.n_hosts, (2, n))
    keep = src != dst
    return topo, fj.Incidence.from_paths(
        fj.shortest_paths(topo, src[keep], dst[keep], max_paths=1), n_links=topo.n_links)


@pytest.mark.filterwarnings("ignore::fabric_jax.paths.PathsTruncatedWarning")
def test_the_cpu_program_is_the_same_with_and_without_device_loops():
    topo, inc = _random_pairs(64, 0)
    cap = jnp.asarray(topo.capacity, jnp.float32)
    dem = jnp.full((inc.n_flows,), jnp.inf, jnp.float32)
    args = (inc, cap, dem, None, inc.n_flows + 1, "fine", 1)
    plain = jax.jit(_api._max_min_fair.__wrapped__, static_argnums=(3, 4, 5, 6))
    ours = _api._max_min_fair

    def text(fn):
        return re.sub(r"HloModule \S+", "", fn.lower(*args).compile().as_text())
    assert text(ours) == text(plain)
    np.testing.assert_array_equal(np.asarray(ours(*args).rates), np.asarray(plain(*args).rates))


def test_every_jit_of_the_package_goes_through_compiling_jit():
    """One home for how programs are compiled: no ``jax.jit`` elsewhere in the package."""
    root = Path(fj.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "compiling.py" and re.search(r"\bjax\.jit\b", p.read_text())]
    assert offenders == []


def test_the_engines_run_inside_other_transformations():
    """JAX takes compiler options on top-level jits only: inside a user's jit, vmap or
    grad the package's jitted functions run without them (the same results)."""
    import jax.numpy as jnp
    calls = []

    def f(x):
        calls.append(1)
        return jnp.sin(x) * 2.0
    g = compiling.jit(f)
    x = jnp.arange(3.0)
    top = g(x)
    np.testing.assert_array_equal(np.asarray(jax.jit(g)(x)), np.asarray(top))
    np.testing.assert_array_equal(np.asarray(jax.vmap(g)(x)), np.asarray(top))
    assert float(jax.grad(lambda y: g(y).sum())(jnp.float32(0.0))) == 2.0
    g.clear_cache()
    assert g.__wrapped__ is f and hasattr(g, "lower") and hasattr(g, "trace")


@pytest.mark.filterwarnings("ignore::fabric_jax.paths.PathsTruncatedWarning")
def test_each_public_engine_is_a_program_of_its_own(monkeypatch):
    """The options reach XLA only through a jitted call made at the top level; a
    ``vmap`` (or ``jit``) of a jitted engine called from the host is a transformation
    around it, compiled without them.  Each public engine, single or batched, must
    therefore reach a :class:`fabric_jax.compiling.Jitted` from the host (until
    ``sim._batched._simulate_events_batched``, ``simulate_flows_batched`` ran
    ``jax.vmap`` of the event engine from the host: on a GPU every loop test of every
    event was a host round trip)."""
    calls, depth = [], [0]
    orig = compiling.Jitted.__call__

    def spy(self, *a, **k):   # (name, at the top level, inside another package jit)
        calls.append((self.__wrapped__.__name__, compiling._top_level(), depth[0] > 0))
        depth[0] += 1
        try:
            return orig(self, *a, **k)
        finally:
            depth[0] -= 1
    monkeypatch.setattr(compiling.Jitted, "__call__", spy)
    topo, inc = _random_pairs(40, 1)
    n, cap = inc.n_flows, np.asarray(topo.capacity, np.float32)
    sizes = np.stack([np.full(n, 1e4, np.float32), np.full(n, 3e4, np.float32)])
    kw = dict(dt=1e-6, n_steps=4, buffer=1e6, nic_links=topo)
    engines = {
        "max_min_fair": lambda: fj.max_min_fair(inc, cap),
        "max_min_fair, batched": lambda: fj.max_min_fair(inc, np.stack([cap, cap / 2])),
        "simulate_flows": lambda: fj.simulate_flows(inc, cap, np.zeros(n), sizes[0]),
        "simulate_flows_batched": lambda: fj.simulate_flows_batched(
            inc, np.stack([cap, cap]), np.zeros((2, n)), sizes),
        "simulate_fluid": lambda: fj.simulate_fluid(inc, cap, sizes[0], **kw),
        "simulate_fluid_batched": lambda: fj.simulate_fluid_batched(inc, cap, sizes, **kw),
        "simulate_fluid_windowed": lambda: fj.simulate_fluid_windowed(
            inc, cap, sizes[0], max_active=n, window=2, **kw),
        "max_min_fair_sharded": lambda: fj.max_min_fair_sharded(inc, cap),
        "simulate_fluid_sharded": lambda: fj.simulate_fluid_sharded(inc, cap, sizes[0], **kw),
        "sweep": lambda: fj.sweep(lambda c: fj.max_min_fair(inc, c).rates,
                                  np.stack([cap, cap / 2])),
    }
    for name, call in engines.items():
        calls.clear()
        call()
        assert len(calls) >= 2, f"{name}: no jitted engine called ({calls})"
        # each call is a program of its own, or part of one the package compiles
        stray = [c for c in calls if not c[1] and not c[2]]
        assert stray == [], f"{name}: jitted inside a transformation from the host: {stray}"
