"""fabric_jax: a differentiable, flow-level emulator of AI-cluster network fabrics on JAX.

Architecture (one module per layer): topology -> paths/incidence -> rate solver
(:func:`max_min_fair`) -> dynamics -> simulation (:func:`simulate_flows`) -> metrics ->
optimisation, with a thin CLI on top.

Units everywhere: bytes, seconds, bytes per second (see :mod:`fabric_jax.units`).
"""

from . import (cc, fabrics, flowcontrol, metrics, optimize, routing, smooth, units,
               workloads)
from . import checkpoint, compare, faults, scale, study
from . import collectives, economics, qos, receiver, systems
from .compare import Scenario, default_scenario, load_scenario, run_compare, simulate_case
from .fabrics import PRESETS, Fabric, get_fabric, infiniband, roce, spectrum_x, uec
from .fairness import MaxMinInfo, MaxMinResult, max_min_fair
from .flowcontrol import FlowControl
from . import fluid
from .fluid import (FluidInfo, FluidProblem, FluidResult, FluidState, FluidTrajectory,
                    SlotResult, simulate_fluid, simulate_fluid_batched, simulate_fluid_windowed)
from .incidence import Incidence
from .ns3 import from_ns3_topology, hpcc_fat_tree, to_ns3_topology
from .paths import PathSet, shortest_paths
from .routing import POLICIES, Routing, make_routing
from .smooth import Smoothing
from .topology import (Topology, fat_tree, from_edges, leaf_spine, rail_optimized,
                       with_servers)
from .sim import (FlowSimResult, simulate_flows, simulate_flows_batched,
                  simulate_flows_fixed_step)
from . import distributed
from .distributed import max_min_fair_sharded, simulate_fluid_sharded, sweep

__version__ = "0.1.0"

__all__ = [
    "Fabric",
    "PRESETS",
    "POLICIES",
    "Routing",
    "Scenario",
    "checkpoint",
    "collectives",
    "economics",
    "receiver",
    "systems",
    "with_servers",
    "compare",
    "faults",
    "study",
    "default_scenario",
    "fabrics",
    "get_fabric",
    "infiniband",
    "load_scenario",
    "make_routing",
    "roce",
    "routing",
    "run_compare",
    "simulate_case",
    "spectrum_x",
    "uec",
    "FlowControl",
    "FlowSimResult",
    "FluidInfo",
    "FluidProblem",
    "FluidResult",
    "FluidState",
    "FluidTrajectory",
    "Smoothing",
    "cc",
    "flowcontrol",
    "fluid",
    "simulate_fluid",
    "simulate_fluid_batched",
    "simulate_fluid_windowed",
    "SlotResult",
    "smooth",
    "Incidence",
    "MaxMinInfo",
    "MaxMinResult",
    "max_min_fair",
    "max_min_fair_sharded",
    "simulate_fluid_sharded",
    "sweep",
    "distributed",
    "simulate_flows",
    "simulate_flows_batched",
    "simulate_flows_fixed_step",
    "metrics",
    "optimize",
    "units",
    "workloads",
    "PathSet",
    "Topology",
    "fat_tree",
    "from_edges",
    "from_ns3_topology",
    "hpcc_fat_tree",
    "to_ns3_topology",
    "leaf_spine",
    "rail_optimized",
    "shortest_paths",
    "__version__",
]
