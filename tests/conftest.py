"""Shared pytest configuration: markers, matplotlib backend, x64 fixture."""

import os

import pytest
from hypothesis import settings

from tests.helpers import enable_x64

os.environ.setdefault("MPLBACKEND", "Agg")

# CI runs hypothesis with fixed seeds (a landing must not depend on luck); local runs
# keep exploring new examples.  Tests with their own ``settings`` that set
# ``derandomize`` follow ``CI_DERANDOMIZE``.
CI_DERANDOMIZE = bool(os.environ.get("CI"))
settings.register_profile("ci", derandomize=True, deadline=None)
if CI_DERANDOMIZE:
    settings.load_profile("ci")


@pytest.fixture
def x64():
    """Enables float64 for one test and restores the previous setting afterwards
    (:func:`tests.helpers.enable_x64`, the one x64 switch)."""
    with enable_x64(True):
        yield


@pytest.fixture(autouse=True, scope="module")
def _fresh_jax_caches():
    """Drops JAX's compiled-executable caches after each test module.  A full default
    run compiles thousands of programs in one process; with the caches kept, XLA's CPU
    compiler crashed once (SIGSEGV inside ``backend_compile_and_load``, in
    ``tests/test_sim.py`` after ~900 earlier tests) although every module passes on its
    own.  Modules share almost no programs, so this costs little."""
    yield
    import jax
    jax.clear_caches()
