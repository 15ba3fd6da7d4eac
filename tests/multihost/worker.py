"""One process of the two-process test in ``tests/distributed/test_multihost.py``.

Usage: ``python -m tests.multihost.worker PROCESS_ID N_PROCESSES PORT OUT.npz [fluid]``.
Every process runs the same program on the same inputs (as the multi-host section of
:mod:`fabric_jax.distributed` prescribes): ``jax.distributed.initialize`` with a
localhost coordinator and gloo CPU collectives, then :func:`fabric_jax.sweep` and
:func:`fabric_jax.max_min_fair_sharded` over the global mesh (one CPU device per
process), or with ``fluid`` :func:`fabric_jax.distributed.simulate_fluid_sharded` of
:func:`tests.multihost.instance.fluid_instance` in float64; process 0 writes the
gathered results.
"""

from __future__ import annotations

import sys


def main(argv):
    pid, n_proc, port, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    fluid = argv[4:] == ["fluid"]
    import jax
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", fluid)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}",
                               num_processes=n_proc, process_id=pid,
                               local_device_ids=[0])
    import numpy as np
    from jax.experimental import multihost_utils

    import fabric_jax as fj
    from tests.multihost.instance import instance

    assert jax.process_count() == n_proc and len(jax.devices()) == n_proc
    if fluid:   # the result comes back whole on every process
        from tests.multihost.instance import fluid_instance
        inc, cap, size, options = fluid_instance()
        res = fj.distributed.simulate_fluid_sharded(inc, cap, size, **options)
        if pid == 0:
            np.savez(out, finish=res.finish, sent=res.sent, delivered=res.delivered,
                     link_queue=res.link_queue, paused=res.info.paused_time,
                     max_residual=res.info.max_residual, devices=len(jax.devices()))
        jax.distributed.shutdown()
        return
    inc, caps, cap = instance()
    swept = fj.sweep(lambda c: fj.max_min_fair(inc, c).rates, caps)
    sharded = fj.max_min_fair_sharded(inc, cap)
    swept = np.asarray(multihost_utils.process_allgather(swept, tiled=True))
    rates = np.asarray(multihost_utils.process_allgather(sharded.rates, tiled=True))
    if pid == 0:
        np.savez(out, sweep=swept, sharded=rates, devices=len(jax.devices()))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
