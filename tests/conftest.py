"""Shared pytest configuration: markers, matplotlib backend, x64 fixture, XLA settings."""

import atexit
import os
import shutil
import tempfile

# Compilation, not execution, is most of the suite's time: thousands of small XLA
# programs, each run briefly.  The suite runs on every core (pytest-xdist, the README's
# test command), shares compiled programs through a disk cache (below), and compiles with
# XLA's classic CPU fusion emitter (``--xla_cpu_use_fusion_emitters=false``, set here
# before JAX starts its backend): the HLO and its optimisation passes are the users',
# only the CPU code generation of each fusion differs.  Measured on the DCQCN + PFC incast
# program of tests/helpers.py: its compile takes ~40 % less time; its results differ from
# XLA's defaults only where exp / log / pow round differently in the last bits (DCQCN's
# law state 1.3e-6 relative apart, every flow's bytes and times identical).
# tests/test_determinism.py::test_test_suite_emitter_agrees_with_xla_defaults checks
# that against a process with XLA's defaults on every CI run.  (The classic emitter runs
# a long fluid loop ~1.3-1.6x slower, so it is not the users' default; a cheaper LLVM
# level, -O0, also changes every FMA and is not used.)  FABRIC_JAX_TEST_XLA_DEFAULTS=1
# runs the suite with XLA's defaults, and so does an XLA without the flag (jaxlib 0.11
# removed it, and XLA aborts the process on a flag it does not know): the first pytest
# process asks a child whether the flag is known, once, and its answer travels to the
# xdist workers in FABRIC_JAX_TEST_XLA_FLAG.
TEST_XLA_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _flag_known(flag: str) -> bool:
    """Whether the installed XLA starts with ``flag`` in ``XLA_FLAGS`` (asked of a child
    process: an unknown flag aborts the process that reads it)."""
    import subprocess
    import sys
    env = dict(os.environ, XLA_FLAGS=flag, JAX_PLATFORMS="cpu")
    try:
        out = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                             capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


def _test_xla_flags():
    if os.environ.get("FABRIC_JAX_TEST_XLA_DEFAULTS") == "1":
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" in flags:
        return
    known = os.environ.get("FABRIC_JAX_TEST_XLA_FLAG")
    if known is None:
        known = "1" if _flag_known(TEST_XLA_FLAG) else "0"
        os.environ["FABRIC_JAX_TEST_XLA_FLAG"] = known
    if known == "1":
        os.environ["XLA_FLAGS"] = (flags + " " + TEST_XLA_FLAG).strip()


_test_xla_flags()

import pytest  # noqa: E402
from hypothesis import settings

from tests.helpers import enable_x64  # noqa: E402

os.environ.setdefault("MPLBACKEND", "Agg")


def _persistent_compilation_cache():
    """A compilation cache on disk shared by every worker of the run
    (``FABRIC_JAX_TEST_CACHE`` names a lasting one; ``.ci/run`` sets one for its two
    runs): a program compiled in one test module, or by the other xdist worker, is
    loaded, not recompiled, although :func:`_fresh_jax_caches` drops the in-memory caches
    between modules.  The pytest process that starts first (the xdist controller, or the
    only process) makes the folder, exports it to the workers it spawns and removes it at
    exit.  Every program is kept, however quick its compile: the small ones (eager
    ``jnp`` operations, ~0.02 s each) recur in most modules, and loading beats
    recompiling them (measured on 8 default-suite modules in one process: 114 s -> 108 s,
    785 more entries, 3.3 MB more on disk)."""
    import jax
    path = os.environ.get("FABRIC_JAX_TEST_CACHE")
    if not path:
        path = tempfile.mkdtemp(prefix="fabric_jax_xla_cache_")
        os.environ["FABRIC_JAX_TEST_CACHE"] = path
        atexit.register(shutil.rmtree, path, True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # a `fabric-jax` started by a test in a subprocess uses the same folder, not the
    # user's cache (fabric_jax.cli.compilation_cache)
    os.environ.setdefault("FABRIC_JAX_CACHE", path)


_persistent_compilation_cache()

# CI runs hypothesis with fixed seeds (a landing must not depend on luck); local runs
# keep exploring new examples.  Tests with their own ``settings`` that set
# ``derandomize`` follow ``CI_DERANDOMIZE``.
CI_DERANDOMIZE = bool(os.environ.get("CI"))
settings.register_profile("ci", derandomize=True, deadline=None)
if CI_DERANDOMIZE:
    settings.load_profile("ci")


# JAX's strict dtype promotion in every test: an implicit int -> float or int32 -> int64
# promotion in the package is an error here (users keep JAX's default).  A subprocess
# (a CLI test) runs with the default unless it sets its own.
import jax  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")


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
    ``tests/sim/test_sim.py`` after ~900 earlier tests) although every module passes on its
    own.  Modules share almost no programs, so this costs little."""
    yield
    import jax
    jax.clear_caches()
