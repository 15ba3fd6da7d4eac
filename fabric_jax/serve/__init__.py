"""Disaggregated LLM serving on the fabric: ``fabric-jax serve`` (issue 49).

Requests -> prefill pool -> KV cache streamed layer by layer over the fabric (each
preset's dynamics through the fluid engine, busy period by busy period; the ideal fabric
through the exact event engine) -> decode pool with continuous batching, every step
paying the wide expert-parallel dispatch / combine all-to-all of each MoE layer (each
preset's dynamics) -> TTFT, TPOT, SLO attainment, goodput per GPU, $ per million tokens;
and the deployment beside a training job on one fabric.  See :mod:`._core` for the
metrics, :mod:`._pools` for the pools, :mod:`._fabric` for the busy-period split,
:mod:`._ep` for the decode all-to-all, :mod:`._beside` for serving beside training and
:mod:`._scenario` for the scenario file.
"""

from ._beside import beside_training, server_layout, training_workload
from ._core import IDEAL, build_run, decode_comm_tables, metrics, rate_sweep, serve
from ._ep import (DEEPEP_FIXED_US, DEEPEP_LL_PURE_RDMA_US, DEEPEP_LL_US, DEFAULT_MSG_RATE,
                  GPUS_PER_SERVER, MSG_HEADER_BYTES, MSG_RATE_BAND, EPFlows, deepep_fixed_us,
                  ep_closed_form, ep_message_counts, ep_normal_counts, ep_step_flows,
                  ep_step_table, ep_step_time, ep_sweep, ep_topology, message_bytes,
                  route_tokens)
from ._fabric import busy_periods, run_problems, simulate_ideal_flows, simulate_preset, take_paths
from ._pools import chunk_layers, decode_step_time, deployment, kv_flows, run_decode
from ._requests import make_requests, read_trace
from ._scenario import DEFAULTS, RULES, check_scenario, default_scenario, load_scenario
from ._validate import MOONCAKE, mooncake_transfer

__all__ = ["serve", "rate_sweep", "beside_training", "server_layout", "training_workload",
           "metrics", "build_run", "decode_comm_tables", "IDEAL", "busy_periods",
           "simulate_preset", "simulate_ideal_flows", "run_problems", "take_paths",
           "chunk_layers", "decode_step_time",
           "deployment", "kv_flows", "run_decode", "make_requests", "read_trace",
           "DEFAULTS", "RULES", "check_scenario", "default_scenario", "load_scenario",
           "MOONCAKE", "mooncake_transfer",
           "DEEPEP_FIXED_US", "DEEPEP_LL_PURE_RDMA_US", "DEEPEP_LL_US", "DEFAULT_MSG_RATE",
           "GPUS_PER_SERVER", "MSG_HEADER_BYTES", "MSG_RATE_BAND", "EPFlows",
           "deepep_fixed_us", "ep_closed_form", "ep_message_counts", "ep_normal_counts",
           "ep_step_flows", "ep_step_table", "ep_step_time", "ep_sweep", "ep_topology",
           "message_bytes", "route_tokens"]
