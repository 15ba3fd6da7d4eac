"""Multi-host for real: two processes on this machine, ``jax.distributed.initialize``
with a localhost coordinator and gloo CPU collectives, one CPU device each.
:func:`fabric_jax.sweep`, :func:`fabric_jax.max_min_fair_sharded` and
:func:`fabric_jax.simulate_fluid_sharded` over the two-process mesh must give the
single-process results."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import with_host_devices

import fabric_jax as fj
from tests.multihost.instance import instance

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _two_workers(out, *mode):
    """Runs ``tests.multihost.worker`` as processes 0 and 1 of a two-process run; process 0
    writes ``out`` (an ``.npz``), loaded and returned."""
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS="cpu", XLA_FLAGS=with_host_devices(1))
    procs = [subprocess.Popen([sys.executable, "-m", "tests.multihost.worker", str(i), "2",
                               str(port), str(out), *mode], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for i in range(2)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=240)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("multi-host workers timed out")
    assert all(p.returncode == 0 for p in procs), "\n".join(l[-3000:] for l in logs)
    return np.load(out)


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    got = _two_workers(tmp_path / "mh.npz")
    assert int(got["devices"]) == 2
    inc, caps, cap = instance()
    ref_sweep = np.stack([np.asarray(fj.max_min_fair(inc, c).rates) for c in caps])
    ref = np.asarray(fj.max_min_fair(inc, cap).rates)
    np.testing.assert_allclose(got["sweep"], ref_sweep, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(got["sharded"], ref, rtol=1e-5, atol=1e-3)
    assert ref.min() > 0   # a non-trivial instance: every flow gets a rate


@pytest.mark.slow
def test_two_processes_fluid_matches_one(tmp_path, x64):
    # The fluid loop with its flows split over the two processes (DCQCN + PFC, an
    # incast: pauses, queues, marks) equals the single-process run; float64, so only
    # summation order differs.
    from tests.multihost.instance import fluid_instance
    got = _two_workers(tmp_path / "fluid.npz", "fluid")
    assert int(got["devices"]) == 2
    inc, cap, size, options = fluid_instance()
    ref = fj.simulate_fluid(inc, cap, size, **options)
    assert np.all(np.isfinite(np.asarray(ref.finish)))       # every flow finished
    assert float(np.sum(np.asarray(ref.info.paused_time))) > 0   # PFC paused
    for name, want in (("sent", ref.sent), ("delivered", ref.delivered),
                       ("link_queue", ref.link_queue), ("paused", ref.info.paused_time)):
        np.testing.assert_allclose(got[name], np.asarray(want), rtol=1e-9, atol=1e-6,
                                   err_msg=name)
    # finish times: to round-off, or within one step where a round-off tie flips the
    # within-step instant (tests/distributed/test_distributed.py, _check_fluid_case; here flow 3)
    diff = np.abs(got["finish"] - np.asarray(ref.finish))
    assert np.all(diff <= options["dt"] * (1 + 1e-9))
    assert np.mean(diff <= 1e-9 * np.asarray(ref.finish)) >= 0.9
    assert float(got["max_residual"]) < 1e-6        # bytes conserved
