"""Workloads: what the fabric has to carry.

Everything here runs on the host (NumPy; ``jax.random`` for sampled sizes) and produces
a :class:`Workload` — per-flow arrays plus a dependency DAG — for the simulator:

* collectives as flow DAGs (:mod:`.collectives`): ring / tree / halving-doubling
  all-reduce, ring all-gather and reduce-scatter, uniform and MoE-skewed all-to-all,
  pipeline sends, the steady-state (merged) all-reduce of the fabric presets; NCCL's
  algorithms with NVLink, protocols and per-step latency are in
  :mod:`fabric_jax.collectives`;
* traffic patterns (:mod:`.traffic`): Poisson background at a target load, incast,
  random permutations;
* empirical flow sizes (:mod:`.cdf`): :class:`FlowSizeCDF` with published tables;
* placement of tenants on hosts (:mod:`.placement`);
* training steps: compute + collectives, with overlap (:mod:`.training`); the
  collective flows of a parallel plan's step, the one builder behind both the model step
  and the scale study's step (:func:`step_collectives`, :mod:`.phases`);
* transformer models and parallelism plans -> step compute time and flows
  (:mod:`.model`); disaggregated prefill/decode serving with KV-cache transfers
  (:mod:`.inference`);
* stragglers: slow GPUs and NICs and their blast radius (:mod:`.stragglers`).

Compose with :func:`concat`.  Units: bytes, seconds, bytes per second.
"""

from fabric_jax.workloads.cdf import FlowSizeCDF
from fabric_jax.workloads.collectives import (
    all_to_all,
    double_binary_tree,
    halving_doubling_all_reduce,
    pipeline_sends,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    steady_state_all_reduce,
    tree_all_reduce,
    zipf_expert_load,
)
from fabric_jax.workloads.flows import Workload, concat
from fabric_jax.workloads.placement import place_job, place_jobs, server_rails
from fabric_jax.workloads.traffic import incast, permutation, poisson_background
from fabric_jax.workloads.stragglers import (
    StragglerImpact,
    host_links,
    in_order_sends,
    nic_capacity,
    scale_compute,
    slow_compute,
    slow_compute_spec,
    slow_nics,
    straggler_impact,
)
from fabric_jax.workloads.training import (
    ModelStep,
    StepSpec,
    megatron_groups,
    model_training_step,
    training_step,
)
from fabric_jax.workloads.phases import step_collectives
from fabric_jax.workloads.model import (
    GPU,
    GPUS,
    MODELS,
    ModelConfig,
    ParallelPlan,
    comm_bytes,
    get_gpu,
    get_model,
    kv_cache_bytes,
    step_flops,
    training_flops,
)
from fabric_jax.workloads.inference import (
    DisaggregatedServing,
    decode_step_time,
    disaggregated_serving,
    prefill_time,
)

__all__ = [
    "Workload", "concat",
    "ring_all_reduce", "ring_reduce_scatter", "ring_all_gather",
    "halving_doubling_all_reduce", "tree_all_reduce", "double_binary_tree",
    "all_to_all", "zipf_expert_load", "pipeline_sends", "steady_state_all_reduce",
    "incast", "permutation", "poisson_background",
    "FlowSizeCDF",
    "place_job", "place_jobs", "server_rails",
    "StepSpec", "training_step", "megatron_groups", "step_collectives",
    "GPU", "GPUS", "get_gpu", "ModelConfig", "MODELS", "get_model", "ParallelPlan",
    "ModelStep", "model_training_step", "training_flops", "step_flops", "comm_bytes",
    "kv_cache_bytes",
    "DisaggregatedServing", "disaggregated_serving", "prefill_time", "decode_step_time",
    "in_order_sends", "slow_compute", "scale_compute", "slow_compute_spec",
    "host_links", "nic_capacity", "slow_nics", "StragglerImpact", "straggler_impact",
]
