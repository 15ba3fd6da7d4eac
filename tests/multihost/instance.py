"""The instance both the two-process run and the single-process reference solve."""

from __future__ import annotations

import numpy as np

import fabric_jax as fj


def instance():
    """``(incidence, [6, links] capacities, [links] capacity)``: 96 flows over every
    equal-cost path of a 4-leaf, 4-spine leaf-spine (ECMP split), 6 failure sets."""
    topo = fj.leaf_spine(4, 4, 4, link_gbps=100)
    rng = np.random.default_rng(7)
    src = rng.integers(0, topo.n_hosts, 96)
    dst = (src + rng.integers(1, topo.n_hosts, 96)) % topo.n_hosts
    paths = fj.shortest_paths(topo, src, dst)
    inc = fj.Incidence.from_paths(paths, n_links=topo.n_links, seed=3)
    alive = rng.random((6, topo.n_links)) > 0.05
    cap = np.asarray(topo.capacity, np.float32)
    return inc, cap * alive, cap


def fluid_instance(n_flows: int = 30, routing=None, routing_params=None):
    """``(incidence, capacity, size, options)`` of a small sharded-fluid case: ``n_flows``
    flows on ``fat_tree(4)`` (16 hosts, 80 links), an 8-to-1 incast among them (so PFC
    pauses), DCQCN + PFC, 1 us steps, link latencies; every flow finishes within the
    run.  Shared by ``tests/distributed/test_distributed.py`` (four devices) and the two-process
    run of ``tests/distributed/test_multihost.py``.  ``routing``: a policy name; the flows then keep
    every equal-cost path, the policy (with ``routing_params``, default its own) steering
    them (``options["routing"]``)."""
    topo = fj.fat_tree(4)
    rng = np.random.default_rng(0)
    src = rng.integers(0, topo.n_hosts, n_flows)
    dst = (src + rng.integers(1, topo.n_hosts, n_flows)) % topo.n_hosts
    src[:8], dst[:8] = 1 + np.arange(8), 0          # the incast into host 0
    paths = fj.shortest_paths(topo, src, dst)
    inc = fj.Incidence.from_paths(paths, n_links=topo.n_links, seed=1)
    options = dict(dt=1e-6, n_steps=60, law="dcqcn", flow_control="pfc", buffer=1e5,
                   link_latency=np.asarray(topo.latency), nic_links=topo,
                   arrival=rng.uniform(0, 2e-5, n_flows))
    size = rng.uniform(2e4, 2e5, n_flows)
    if routing is not None:
        r = fj.make_routing(routing, paths, routing_params, seed=1)
        inc = fj.Incidence.from_paths(paths, np.asarray(r.split), n_links=topo.n_links)
        options["routing"] = r
    return inc, np.asarray(topo.capacity), size, options
