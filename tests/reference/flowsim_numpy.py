"""Re-export of :mod:`fabric_jax.reference.flowsim_numpy` (the flow-simulator oracle moved
there so that benchmarks can use it as a baseline without importing test code)."""

from fabric_jax.reference.flowsim_numpy import (  # noqa: F401
    max_min_rates,
    simulate_flows_reference,
)
