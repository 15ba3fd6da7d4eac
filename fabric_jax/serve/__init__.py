"""Serving on the fabric (issue 49).  This branch holds the wide expert-parallel decode
all-to-all (:mod:`fabric_jax.serve._ep`); the serving core (requests, prefill, KV
streaming, decode batching, CLI) joins it on merge."""

from ._ep import (DEEPEP_FIXED_US, DEEPEP_LL_PURE_RDMA_US, DEEPEP_LL_US, DEFAULT_MSG_RATE,
                  GPUS_PER_SERVER, MSG_HEADER_BYTES, MSG_RATE_BAND, EPFlows, deepep_fixed_us,
                  ep_closed_form, ep_message_counts, ep_normal_counts, ep_step_flows, ep_step_table,
                  ep_step_time, ep_sweep, ep_topology, message_bytes, route_tokens)

__all__ = ["DEEPEP_FIXED_US", "DEEPEP_LL_PURE_RDMA_US", "DEEPEP_LL_US", "DEFAULT_MSG_RATE",
           "GPUS_PER_SERVER", "MSG_HEADER_BYTES", "MSG_RATE_BAND", "EPFlows",
           "deepep_fixed_us", "ep_closed_form", "ep_message_counts", "ep_normal_counts",
           "ep_step_flows",
           "ep_step_table", "ep_step_time", "ep_sweep", "ep_topology", "message_bytes",
           "route_tokens"]
