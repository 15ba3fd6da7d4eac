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
