"""Shared pieces of the economics experiments (gpu_value, inference).

:func:`simulate_workload` runs a :class:`~fabric_jax.workloads.Workload` on a topology
under a fabric preset with the exact event-driven max-min engine
(:func:`fabric_jax.simulate_flows`): candidate paths from
:func:`fabric_jax.shortest_paths`, the preset's routing policy's split
(:func:`fabric_jax.make_routing`; per-flow ECMP hashing for ``roce``, an even split
over the candidates for spraying and for the adaptive policies, whose initial split is
used: the event engine has no queue state to adapt to), per-path latency, NIC line
rate as the demand cap.  Congestion control and flow control are not part of this
engine (max-min is ideal congestion control); SHARP enters through the workload.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import numpy as np

import fabric_jax as fj
from fabric_jax.incidence import Incidence


def simulate_workload(topology, workload, fabric, *, max_paths: int = 8, seed: int = 0):
    """Finish time of every flow of ``workload`` (float64 [flows], seconds).

    Raises:
      RuntimeError: if some flow could never finish (the engine stalled).
    """
    fabric = fj.get_fabric(fabric)
    workload.validate(topology.n_hosts)
    paths = fj.shortest_paths(topology, workload.src, workload.dst, max_paths=max_paths,
                              seed=seed)
    routing = fj.make_routing(fabric.routing, paths, fabric.routing_params(), seed=seed)
    inc = Incidence.from_paths(paths, np.asarray(routing.split), n_links=topology.n_links)
    latency = np.asarray(paths.latency(topology))[:, 0]
    line = float(np.min(topology.capacity))
    res = fj.simulate_flows(inc, topology.capacity, workload.arrival, workload.size,
                            deps=workload.deps, delay=workload.delay, latency=latency,
                            demand=np.full(workload.n_flows, line))
    if bool(res.stalled):
        raise RuntimeError("simulate_flows stalled: some flow has no usable path")
    return np.asarray(res.finish, np.float64)
