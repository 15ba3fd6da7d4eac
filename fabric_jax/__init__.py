"""fabric_jax: a differentiable, flow-level emulator of AI-cluster network fabrics on JAX.

Architecture (one module per layer): topology -> paths/incidence -> rate solver
(:func:`max_min_fair`) -> dynamics -> simulation (:func:`simulate_flows`) -> metrics ->
optimisation, with a thin CLI on top.

Units everywhere: bytes, seconds, bytes per second (see :mod:`fabric_jax.units`).
"""

from . import metrics, units, workloads
from .fairness import MaxMinInfo, MaxMinResult, max_min_fair
from .incidence import Incidence
from .paths import PathSet, shortest_paths
from .topology import Topology, fat_tree, from_edges, leaf_spine, rail_optimized
from .sim import (FlowSimResult, simulate_flows, simulate_flows_batched,
                  simulate_flows_fixed_step)

__version__ = "0.1.0"

__all__ = [
    "FlowSimResult",
    "Incidence",
    "MaxMinInfo",
    "MaxMinResult",
    "max_min_fair",
    "simulate_flows",
    "simulate_flows_batched",
    "simulate_flows_fixed_step",
    "metrics",
    "units",
    "workloads",
    "PathSet",
    "Topology",
    "fat_tree",
    "from_edges",
    "leaf_spine",
    "rail_optimized",
    "shortest_paths",
    "__version__",
]
