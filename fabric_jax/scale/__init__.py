"""AI-factory scale: one training step at 1,024 to 32,768 GPUs, every preset, in minutes.

``fabric-jax scale`` (:mod:`fabric_jax.scale.cli`) answers the project's question --
why adding GPUs does not make training proportionally faster -- at the sizes AI
factories are built at.  Per GPU count it builds:

* **the fabric a real build uses** (:func:`scale_topology`): servers of a named system
  (:mod:`fabric_jax.systems`, one NIC per GPU) on a rail-optimised Clos of 128-port
  switches, scalable units of 64 servers, two tiers while a spine's ports hold every
  rail leaf (8,192 GPUs of 8-GPU servers), then planes (16,384 GPUs: 2, 32,768: 4) or,
  on request, three tiers;
* **one training step** (:func:`scale_plan`, :func:`step_flows`): a model (default
  Mixtral 8x7B) with TP inside the server, PP across, data parallel over the rest and
  expert parallel in groups of 8, weak-scaled (fixed micro-batches per replica); the
  network part is the MoE all-to-all with Zipf-skewed experts (``expert_load=
  "capacity"``: bounded at a capacity factor) and the pipeline sends,
  then the DP reduce-scatter and all-gather, as flows with their dependencies (built
  vectorised: 409,600 flows at 32,768 GPUs in under a second); DeepSeek-V3
  (``--model deepseek_v3``: its published plan's TP 1, ``--pp 16 --ep 64``) has wide
  expert parallelism across servers with node-limited routing, one copy of a token
  per destination server (DeepEP);
* **each preset's fluid run and the ideal fabric** (:func:`scale_point`), and the
  step's figures (:func:`point_metrics`): step time, GPU utilisation, p50 / p99 of the
  communication time over ranks, effective bandwidth, share of port-bytes that met a
  congested port, PFC pause time, the fabric's share of $/token.

A point's inputs are one :class:`~fabric_jax.scenario.Scenario` (network, traffic,
fabric, horizon): :func:`scale_scenarios` checks the command's flags (or a mapping of
the same keys) against :data:`SCALE_RULES` and gives one per GPU count, and
:func:`scale_point` runs it (or takes the same inputs as keyword arguments).

**The rail reduction, and when it is exact.**  With TP = 8 inside an 8-GPU server,
every DP, EP and PP group has one rank per server and every network flow stays on one
rail (NCCL's PXN moves the data to the NIC on the receiver's rail over NVLink first).
On a two-tier or multi-plane rail-optimised fabric each link belongs to one rail (a
NIC's links to its rail, a rail leaf's uplinks and the spines' downlinks to it to the
leaf's rail): the rails are disjoint networks, and the fluid model's coupling is only
through shared links (the max-min solve, queues, PFC, credits, marking and routing
signals are all per link or per flow).  So a rail's flows run alone on the rail's
sub-fabric (:func:`rail_view`, links kept in order) exactly as they run inside the full
fabric -- same paths, hashes and candidate sets, computed on the full fabric
(:func:`route_flows`) -- which ``tests/scale/test_scale.py`` checks against the full run.
Every rail then carries the same flows between the same servers; whether the rails'
*runs* are identical depends on routing:

* spraying and adaptive routing over candidate sets chosen per *server pair*
  (:func:`rail_symmetric_paths`): every rail is routed alike, so one rail's run is
  every rail's and the cluster's figures follow from rail 0 exactly (``exact``);
* per-flow ECMP: a flow's hash includes its NIC addresses, so each rail draws its own
  collisions; one rail is one sample of eight (``exact = False``, ``--rails all``
  simulates every rail; the rails are independent, so they spread over devices,
  :func:`simulate_rails_on_devices`);
* three tiers: the rails share the spine-to-super-spine links, so no rail runs alone;
  the whole fabric is simulated.

Pods are not reduced: one job fills the cluster, and its pipeline sends and DP rings
cross every pod (or scalable unit), so no pod runs alone.

**Several jobs** (``--jobs``, :func:`job_servers`, :func:`place_jobs`): equal jobs, each
with its own plan and hot experts, placed on whole servers (packed blocks, round robin,
or at random).  Their flows still stay on one rail each, so the rail reduction holds as
above; jobs packed on whole scalable units share no leaf, and on a two-tier Clos no
link either (a leaf's uplinks and the spines' downlinks to it carry only its own
servers' flows), so they run as if alone -- tested; spread or random placement makes
them share leaf uplinks and spine ports, where hashed routing lets one job's flows
collide with another's.  Jobs of different sizes (``--job-gpus``) each keep the plan of
their size (slices, compute time, collective calls): one slice of each job runs at
once, every slice being the same line-rate time (an assumption, named in
:func:`place_jobs`).

How often the jobs' communication meets (``--job-overlap``, :mod:`._overlap`): the
runs put every job's slices on the fabric at once (``always``, an upper bound);
``independent`` also runs every set of the jobs and weights each job's slice time by
the chance that the others are communicating, for jobs whose step phases are
independent (:func:`independent_overlap`).

**Background traffic** (``--background``, :func:`add_background`): open-loop Poisson
flows between servers at a fraction of each NIC's line rate, the same on every rail (an
assumption that keeps the reduction exact), left out of the step's figures and reported
apart (their completion-time slowdowns).
**Per-message latency** (``--latency nccl|ring|none``, :func:`collective_overhead`): the
step's collective calls (all-to-alls, pipeline sends, one reduce-scatter and all-gather
per Megatron gradient bucket) priced by NCCL's own cost model, ring or PAT as NCCL
picks, and added to the step: what the flows' bandwidth view leaves out, and what
grows with the data-parallel degree.

**The all-reduce sweep** (:mod:`._allreduce`, ``experiments/allreduce_sweep.py`` and
``fabric-jax compare --scaling-curve``): one all-reduce per GPU count as NCCL runs it
(:func:`choose_algorithm`, :func:`fabric_jax.collectives.build_plan`) on
:func:`sweep_topology`'s fabrics with the server model, every preset's fluid run and the
ideal fabric of each plan (:mod:`._plans`: :func:`plan_flows`,
:func:`simulate_plans_fluid`, :func:`simulate_plans_ideal`), and the completion times
over ranks and effective bandwidth of each (:func:`scaling_curves`,
:func:`scaling_point`).

Units: bytes, seconds, bytes/s.
"""
from ._fabric import (DEFAULT_SWITCH_RADIX, PathTable, RailView, clos_paths, ecmp_paths,
                      link_rails, rail_symmetric_paths, rail_view, scale_topology,
                      sweep_topology)
from ._step import (BACKGROUND, BUCKET_PARAMS, DEFAULT_BACKGROUND_CDF, DEFAULT_EP,
                    DEFAULT_LATENCY, DEFAULT_MICROBATCHES, DEFAULT_MODEL, DEFAULT_PP,
                    DEFAULT_SKEW, LATENCY_MODELS, PHASES, PLACEMENTS, StepFlows,
                    collective_overhead, ep_group_size, job_step_time, scale_plan,
                    step_flows)
from ._step import DEFAULT_CAPACITY_FACTOR
from ._jobs import add_background, job_servers, place_jobs
from ._route import DEFAULT_MAX_PATHS, HASHED_ROUTING, route_flows, source_port
from ._rails import (CONGESTED_DELAY, DEFAULT_DT_US, HORIZON_FACTOR, RailRun, ideal_rails,
                     run_fabric, simulate_rails, simulate_rails_on_devices,
                     zero_load_latency)
from ._metrics import (background_metrics, job_set_times, overlap_metrics, phase_latency,
                       point_metrics, worst_vs_ideal)
from ._point import (IDEAL, build_point, point_arguments, rail_reduction, run_scale,
                     scale_point)
from ._overlap import (JOB_OVERLAPS, MAX_OVERLAP_JOBS, expected_slice_times,
                       independent_overlap)
from ._validate import (balls_into_bins, random_bisection, ring_shift, uplinks_used,
                        window_efficiency)
from ._plans import (DEFAULT_SWEEP_PATHS, PlanFlows, plan_flows, simulate_plan_fluid,
                     simulate_plan_ideal, simulate_plans_fluid, simulate_plans_ideal)
from ._allreduce import (CURVE_KEYS, DEFAULT_SWEEP_CHUNKS, SWEEP_ALGORITHMS, choose_algorithm,
                         completion_stats, nic_ideal_time, rank_completion, scaling_curves,
                         scaling_point)
from ._scenario import RAIL_SYSTEMS, SCALE_FLAGS, SCALE_RULES, scale_scenarios

__all__ = ["DEFAULT_SWITCH_RADIX", "PathTable", "RailView", "clos_paths", "ecmp_paths",
           "link_rails", "rail_symmetric_paths", "rail_view", "scale_topology",
           "BACKGROUND", "DEFAULT_BACKGROUND_CDF", "add_background",
           "DEFAULT_EP", "DEFAULT_MICROBATCHES", "DEFAULT_MODEL", "DEFAULT_PP",
           "DEFAULT_SKEW", "DEFAULT_CAPACITY_FACTOR", "PHASES", "PLACEMENTS", "StepFlows",
           "job_servers",
           "place_jobs", "scale_plan", "step_flows", "BUCKET_PARAMS", "DEFAULT_LATENCY",
           "LATENCY_MODELS", "collective_overhead", "job_step_time",
           "CONGESTED_DELAY", "DEFAULT_DT_US", "DEFAULT_MAX_PATHS", "HASHED_ROUTING",
           "HORIZON_FACTOR", "IDEAL", "RailRun", "ideal_rails", "point_metrics",
           "route_flows", "run_scale", "scale_point", "simulate_rails", "build_point",
           "run_fabric", "worst_vs_ideal", "phase_latency", "zero_load_latency",
           "simulate_rails_on_devices", "job_set_times", "overlap_metrics",
           "source_port", "background_metrics", "rail_reduction",
           "JOB_OVERLAPS", "MAX_OVERLAP_JOBS", "expected_slice_times", "independent_overlap",
           "balls_into_bins", "random_bisection", "ring_shift",
           "uplinks_used", "window_efficiency",
           "sweep_topology", "ep_group_size", "DEFAULT_SWEEP_PATHS", "PlanFlows", "plan_flows",
           "simulate_plan_fluid", "simulate_plans_fluid", "simulate_plan_ideal",
           "simulate_plans_ideal", "SWEEP_ALGORITHMS", "DEFAULT_SWEEP_CHUNKS",
           "choose_algorithm", "rank_completion", "nic_ideal_time", "completion_stats",
           "CURVE_KEYS", "scaling_curves", "scaling_point",
           "SCALE_RULES", "SCALE_FLAGS", "RAIL_SYSTEMS", "scale_scenarios", "point_arguments"]
