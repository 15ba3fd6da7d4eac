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
  expert parallel in groups of 8, weak-scaled (fixed micro-batches per replica) or at a
  fixed global batch (``--global-batch``: the micro-batches per replica and the 1F1B
  bubble follow the data-parallel degree); the
  network part is the MoE all-to-all with Zipf-skewed experts (``expert_load=
  "capacity"``: bounded at a capacity factor) and the pipeline sends,
  then the DP reduce-scatter and all-gather by the algorithm NCCL picks for their
  calls (rings, or PAT's log-distance steps: ``--dp-algorithm``), as flows with their
  dependencies (built vectorised: 999,424 flows at 32,768 GPUs, 409,600 as rings, in
  under a second); DeepSeek-V3
  (``--model deepseek_v3``: its published plan's TP 1, ``--pp 16 --ep 64``) has wide
  expert parallelism across servers with node-limited routing, one copy of a token
  per destination server (DeepEP);
* **each preset's fluid run and the ideal fabric** (:func:`scale_point`), and the
  step's figures (:func:`point_metrics`): step time (the data-parallel reduce-scatter
  and all-gather overlapped with compute the way Megatron-Core does it,
  :func:`megatron_step_time`, or a flat ``--overlap`` fraction), GPU utilisation, p50 / p99 of the
  communication time over ranks, effective bandwidth, share of port-bytes that met a
  congested port, PFC pause time, the fabric's share of $/token, the share of the
  step's bytes that crossed a spine (:func:`spine_share`) and of its communication time
  in the all-to-all and pipeline phase and in the DP collectives (:func:`time_shares`).

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

Shared switch memory (the Ethernet presets' ASIC buffers,
:meth:`fabric_jax.Fabric.buffer_options`) couples the rails at the spines, which every
rail's leaves reach: a spine's dynamic thresholds ``alpha (B - Q)`` see every rail's
bytes.  The rail view counts a switch's occupancy ``rail_buffer_weight`` times (rails
reaching it over rails simulated; :class:`fabric_jax.flowcontrol.SharedBuffer`
``weight``), which is the full run's occupancy when the rails' runs are identical (the
``exact`` case); under per-flow ECMP it is one more approximation of the sample.

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

**One job on a busy cluster** (``--placement fragmented|topology_aware``,
``--cluster-gpus``, :func:`cluster_servers`): the fabric is built for a cluster larger
than the job (default 1.5 x, Llama 3's 16K of 24K GPUs); other jobs came and went
(seeded churn, :func:`cluster_churn`), some servers are drained or spare, and the job
gets the first free servers in hostname order (``fragmented``) or the fewest scalable
units (``topology_aware``).  Whole servers, flows on one rail each: the rail
reduction holds as above (tested against the full run).  The other tenants' traffic
is not simulated.

**Background traffic** (``--background``, :func:`add_background`): open-loop Poisson
flows between servers at a fraction of each NIC's line rate, the same on every rail (an
assumption that keeps the reduction exact), left out of the step's figures and reported
apart (their completion-time slowdowns).
**Per-message latency** (``--latency nccl|ring|none``, :func:`collective_overhead`): the
step's collective calls (all-to-alls, pipeline sends, one reduce-scatter and all-gather
per Megatron gradient bucket) priced by NCCL's own cost model, ring or PAT as NCCL
picks, and added to the step: what the flows' bandwidth view leaves out, and what
grows with the data-parallel degree.

**Flow entropy** (``--qps``, ``--hash``, ``--hash-polarization``,
:func:`route_flows`): under hashed routing each connection runs as ``N`` QPs of its
bytes / ``N``, each hashed on its own UDP source port (``qp``), on the connection's
(``connection``: no added entropy) or spread over successive uplinks (``qp_spread``);
on a three-tier build the hash is taken tier by tier over every uplink
(:func:`tiered_ecmp_paths`), independently seeded or, opt-in, the same at every tier
(polarisation: a spine reaches ``S2 / gcd(S1, S2)`` of its uplinks,
:func:`polarized_uplinks`); the multi-plane build hashes once and has none.  Every row
reports the **completion efficiency** of each collective -- the line-rate time of its
most loaded NIC over its slowest connection's time -- beside the mean flow share
(:func:`completion_metrics`), with the balls-into-bins closed forms
(:func:`expected_max_load`, :func:`balls_into_bins`) for a permutation.

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
from ._fabric import (DEFAULT_SWITCH_RADIX, PathTable, RailView, TierTable, clos_paths,
                      ecmp_paths, link_rails, rail_buffer_weight, rail_symmetric_paths,
                      rail_view, scale_topology, sweep_topology, tier_paths,
                      tiered_ecmp_paths)
from ._step import (BACKGROUND, BUCKET_PARAMS, DEFAULT_BACKGROUND_CDF, DEFAULT_EP,
                    DEFAULT_LATENCY, DEFAULT_MICROBATCHES, DEFAULT_MODEL, DEFAULT_PP,
                    DEFAULT_OVERLAP, DEFAULT_SKEW, LATENCY_MODELS, OVERLAP_MODELS, PHASES,
                    PLACEMENTS, JOB_PLACEMENTS, CLUSTER_PLACEMENTS, StepFlows,
                    collective_overhead, ep_group_size, fixed_batch_microbatches,
                    flat_overlap, job_step_time, megatron_exposed, megatron_step_time,
                    scale_plan, step_flows)
from ._step import DEFAULT_CAPACITY_FACTOR
from ._jobs import add_background, job_servers, place_jobs
from ._cluster import (DEFAULT_DRAINED, DEFAULT_JOB_SHARE, DEFAULT_OCCUPANCY, DEFAULT_SPARES,
                       cluster_churn, cluster_servers, cross_leaf_share,
                       default_cluster_gpus, fewest_units, on_cluster, serviceable_servers)
from ._route import (DEFAULT_HASH, DEFAULT_MAX_PATHS, DEFAULT_QPS, HASH_FIELDS,
                     HASHED_ROUTING, qp_split, route_flows, source_port)
from ._rails import (CONGESTED_DELAY, DEFAULT_DT_US, HORIZON_FACTOR, RailRun, ideal_rails,
                     run_fabric, simulate_rails, simulate_rails_on_devices,
                     zero_load_latency)
from ._metrics import (TIME_SHARE_KEYS, background_metrics, completion_metrics, host_leaf,
                       job_set_times, job_step_times, overlap_metrics, phase_latency,
                       phase_slice_times, point_metrics, spine_share, time_shares,
                       worst_vs_ideal)
from ._point import (IDEAL, build_point, point_arguments, rail_reduction, run_scale,
                     scale_point)
from ._overlap import (JOB_OVERLAPS, MAX_OVERLAP_JOBS, expected_slice_times,
                       independent_overlap)
from ._validate import (balls_into_bins, expected_distinct, expected_max_load,
                        max_load_distribution, polarized_uplinks, random_bisection,
                        ring_shift, uplinks_used, window_efficiency)
from ._plans import (DEFAULT_SWEEP_PATHS, PlanFlows, plan_flows, simulate_plan_fluid,
                     simulate_plan_ideal, simulate_plans_fluid, simulate_plans_ideal)
from ._allreduce import (CURVE_KEYS, DEFAULT_SWEEP_CHUNKS, SWEEP_ALGORITHMS, choose_algorithm,
                         completion_stats, nic_ideal_time, rank_completion, scaling_curves,
                         scaling_point)
from ._scenario import RAIL_SYSTEMS, SCALE_FLAGS, SCALE_RULES, scale_scenarios

__all__ = ["DEFAULT_SWITCH_RADIX", "PathTable", "RailView", "clos_paths", "ecmp_paths",
           "link_rails", "rail_buffer_weight", "rail_symmetric_paths", "rail_view",
           "scale_topology", "BACKGROUND", "DEFAULT_BACKGROUND_CDF", "add_background",
           "DEFAULT_EP", "DEFAULT_MICROBATCHES", "DEFAULT_MODEL", "DEFAULT_PP",
           "DEFAULT_SKEW", "DEFAULT_CAPACITY_FACTOR", "PHASES", "PLACEMENTS", "StepFlows", "job_servers",
           "JOB_PLACEMENTS", "CLUSTER_PLACEMENTS", "DEFAULT_DRAINED", "DEFAULT_JOB_SHARE",
           "DEFAULT_OCCUPANCY", "DEFAULT_SPARES", "cluster_churn", "cluster_servers",
           "cross_leaf_share", "default_cluster_gpus", "fewest_units", "on_cluster",
           "serviceable_servers",
           "place_jobs", "scale_plan", "step_flows", "BUCKET_PARAMS", "DEFAULT_LATENCY",
           "LATENCY_MODELS", "collective_overhead", "job_step_time",
           "CONGESTED_DELAY", "DEFAULT_DT_US", "DEFAULT_MAX_PATHS", "HASHED_ROUTING",
           "HORIZON_FACTOR", "IDEAL", "RailRun", "ideal_rails", "point_metrics",
           "route_flows", "run_scale", "scale_point", "simulate_rails", "build_point",
           "run_fabric", "worst_vs_ideal", "phase_latency", "zero_load_latency",
           "simulate_rails_on_devices", "job_set_times", "overlap_metrics",
           "source_port", "background_metrics", "rail_reduction",
           "TIME_SHARE_KEYS", "host_leaf", "spine_share", "time_shares",
           "JOB_OVERLAPS", "MAX_OVERLAP_JOBS", "expected_slice_times", "independent_overlap",
           "balls_into_bins", "random_bisection", "ring_shift",
           "uplinks_used", "window_efficiency",
           "sweep_topology", "ep_group_size", "DEFAULT_SWEEP_PATHS", "PlanFlows", "plan_flows",
           "simulate_plan_fluid", "simulate_plans_fluid", "simulate_plan_ideal",
           "simulate_plans_ideal", "SWEEP_ALGORITHMS", "DEFAULT_SWEEP_CHUNKS",
           "choose_algorithm", "rank_completion", "nic_ideal_time", "completion_stats",
           "CURVE_KEYS", "scaling_curves", "scaling_point",
           "SCALE_RULES", "SCALE_FLAGS", "RAIL_SYSTEMS", "scale_scenarios", "point_arguments",
           "DEFAULT_OVERLAP", "OVERLAP_MODELS", "fixed_batch_microbatches", "flat_overlap",
           "megatron_exposed", "megatron_step_time", "phase_slice_times", "job_step_times",
           "TierTable", "tier_paths", "tiered_ecmp_paths", "DEFAULT_QPS", "DEFAULT_HASH",
           "HASH_FIELDS", "qp_split", "completion_metrics", "max_load_distribution",
           "expected_max_load", "expected_distinct", "polarized_uplinks"]
