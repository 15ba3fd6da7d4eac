"""Disaggregated LLM serving on the fabric: ``fabric-jax serve`` (issue 49).

Requests -> prefill pool -> KV cache streamed layer by layer over the fabric (each
preset's dynamics through the fluid engine, busy period by busy period; the ideal fabric
through the exact event engine) -> decode pool with continuous batching -> TTFT, TPOT,
SLO attainment, goodput per GPU, $ per million tokens.  See :mod:`._core` for the
metrics, :mod:`._pools` for the pools, :mod:`._fabric` for the busy-period split and
:mod:`._scenario` for the scenario file.
"""

from ._core import IDEAL, build_run, metrics, rate_sweep, serve
from ._beside import beside_training, server_layout, training_workload
from ._fabric import busy_periods, simulate_ideal_flows, simulate_preset
from ._pools import chunk_layers, decode_step_time, deployment, kv_flows, run_decode
from ._requests import make_requests, read_trace
from ._validate import MOONCAKE, mooncake_transfer
from ._scenario import DEFAULTS, RULES, check_scenario, default_scenario, load_scenario

__all__ = ["serve", "rate_sweep", "beside_training", "server_layout", "training_workload", "metrics", "build_run", "IDEAL", "busy_periods",
           "simulate_preset", "simulate_ideal_flows", "chunk_layers", "decode_step_time",
           "deployment", "kv_flows", "run_decode", "make_requests", "read_trace",
           "DEFAULTS", "RULES", "check_scenario", "default_scenario", "load_scenario",
           "MOONCAKE", "mooncake_transfer"]
