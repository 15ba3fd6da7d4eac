"""One training step of a model filling the cluster, as network flows (host side, vectorised).

Units: bytes, seconds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..collectives import LINK_EFFICIENCY, nccl_choice, nccl_latency
from ..workloads.flows import Workload
from ..workloads.model import PUBLISHED_PLANS, ParallelPlan, comm_bytes, get_gpu, get_model
from ..workloads.phases import PHASES as STEP_PHASES
from ..workloads.phases import step_collectives, step_compute

__all__ = ["DEFAULT_MODEL", "DEFAULT_PP", "DEFAULT_EP", "DEFAULT_MICROBATCHES",
           "DEFAULT_SKEW", "DEFAULT_CAPACITY_FACTOR", "StepFlows", "scale_plan", "step_flows",
           "PHASES", "PLACEMENTS", "JOB_PLACEMENTS", "CLUSTER_PLACEMENTS",
           "BACKGROUND", "DEFAULT_BACKGROUND_CDF", "LATENCY_MODELS", "DEFAULT_LATENCY",
           "BUCKET_PARAMS", "collective_overhead", "ep_group_size", "job_step_time",
           "OVERLAP_MODELS", "DEFAULT_OVERLAP", "megatron_exposed", "megatron_step_time",
           "flat_overlap", "DP_ALGORITHMS", "DEFAULT_DP_ALGORITHM"]

#: Default model: Mixtral 8x7B (Jiang et al. 2024; :data:`fabric_jax.workloads.model.MODELS`),
#: a mixture-of-experts model, so the step has the expert-parallel all-to-all.
DEFAULT_MODEL = "mixtral_8x7b"
#: Pipeline stages wanted (fewer when the GPU count or the layers do not allow them).
DEFAULT_PP = 4
#: Expert-parallel group wanted (Mixtral's 8 experts, one per rank).
DEFAULT_EP = 8
#: Micro-batches per data-parallel replica and step (weak scaling: the global batch
#: grows with the data-parallel degree, ``B = dp x micro_batch x m``; 2 x pp keeps the
#: 1F1B bubble ``(pp - 1) / m`` under one half).
DEFAULT_MICROBATCHES = 8
#: Zipf exponent of the expert load (``s ~ 1`` is the skew commonly reported for
#: token-to-expert routing: :func:`fabric_jax.workloads.zipf_expert_load`).
DEFAULT_SKEW = 1.0
#: Capacity factor of ``expert_load="capacity"``
#: (:func:`fabric_jax.workloads.phases.expert_loads`): Switch Transformer's 1.25 (Fedus
#: et al., JMLR 2022, Sec. 2.2 and Table 1, which trains at 1.0 and 1.25).
DEFAULT_CAPACITY_FACTOR = 1.25

#: Phase ids of :attr:`StepFlows.phase` (:data:`BACKGROUND`: flows of other traffic
#: sharing the fabric, :func:`add_background`).
PHASES = {k: STEP_PHASES[k] for k in range(5)}
#: Phase id of background flows (:func:`add_background`): not part of the step, left out
#: of its figures.
BACKGROUND = 4
#: Default flow-size distribution of the background traffic
#: (:meth:`fabric_jax.workloads.FlowSizeCDF.builtin`).
DEFAULT_BACKGROUND_CDF = "web_search"
#: How jobs that fill the cluster share its servers (:func:`job_servers`).
JOB_PLACEMENTS = ("packed", "spread", "random")
#: How a scheduler places one job on a busy cluster larger than it
#: (:func:`~fabric_jax.scale.cluster_servers`: other tenants, drained and spare servers).
CLUSTER_PLACEMENTS = ("fragmented", "topology_aware")
#: Every placement the study accepts.
PLACEMENTS = JOB_PLACEMENTS + CLUSTER_PLACEMENTS
#: Per-message latency of the step's collectives (:func:`collective_overhead`):
#: ``"nccl"`` NCCL's own choice per call (ring or, for one rank per node, PAT: NCCL >=
#: 2.23), ``"ring"`` rings only (NCCL before 2.23, or ``NCCL_ALGO=ring``), ``"none"``
#: the bandwidth view (no per-message latency).
LATENCY_MODELS = ("nccl", "ring", "none")
DEFAULT_LATENCY = "nccl"
#: The algorithm of the data-parallel reduce-scatter / all-gather flows
#: (:func:`step_flows`): ``"nccl"`` the one NCCL's cost model picks for each family's
#: calls (:func:`fabric_jax.collectives.nccl_choice`: ring, or PAT with one rank per
#: node), the same choice that prices their latency (:func:`collective_overhead`);
#: ``"ring"`` rings whatever NCCL runs, the calls priced by ``latency`` alone (the
#: bandwidth view of rings with NCCL's latency on top; with ``latency="ring"``, NCCL
#: restricted to rings, ``NCCL_ALGO=Ring``); ``"pat"`` PAT wherever NCCL can run it (one
#: rank per node), rings elsewhere.
DP_ALGORITHMS = ("nccl", "ring", "pat")
DEFAULT_DP_ALGORITHM = "nccl"
#: Megatron-Core's default gradient bucket, ``max(40,000,000, 1,000,000 x dp)``
#: parameters (``DistributedDataParallelConfig.bucket_size``: "larger DP sizes need
#: larger buckets to ensure collectives do not become latency-bound"): ``(floor, per
#: data-parallel rank)``.  Each bucket is one reduce-scatter and one all-gather.
BUCKET_PARAMS = (40_000_000, 1_000_000)
#: How the step's communication overlaps its compute (:func:`megatron_step_time`):
#: ``"megatron"``, Megatron-Core's ``overlap_grad_reduce`` and ``overlap_param_gather``
#: (the data-parallel reduce-scatter hidden behind the last micro-batch's backward, the
#: all-gather behind the first micro-batch's forward, bucket by bucket); a number ``f``
#: in [0, 1] instead is a flat fraction of the compute (:func:`job_step_time`).
OVERLAP_MODELS = ("megatron",)
DEFAULT_OVERLAP = "megatron"


def ep_group_size(n_servers: int, wanted: int, minimum: int = 2) -> int:
    """The largest divisor of ``n_servers`` that is ``<= wanted`` and ``>= minimum``
    (``n_servers`` itself when none is): the expert-parallel group size a training job of
    ``n_servers`` servers can use when ``wanted`` does not divide it."""
    n, wanted = int(n_servers), int(wanted)
    fits = [d for d in range(minimum, min(wanted, n) + 1) if n % d == 0]
    return max(fits) if fits else n


def scale_plan(model=DEFAULT_MODEL, n_gpus: int = 1024, gpus_per_server: int = 8, *,
               tp: int | None = None, pp: int = DEFAULT_PP, ep: int = DEFAULT_EP,
               micro_batch: int = 1, microbatches: int | None = None,
               global_batch: int | None = None, **plan_fields):
    """``(model, plan)`` of one job filling ``n_gpus`` GPUs, weak- or strong-scaled.

    Tensor parallel inside the server (``tp``, default the model's published plan's,
    :data:`~fabric_jax.workloads.model.PUBLISHED_PLANS`, else ``min(gpus_per_server,
    heads)`` dividing it); pipeline parallel ``pp'``, the largest divisor of the layers with
    ``pp' <= pp`` that leaves at least two data-parallel ranks (for layers with no such
    divisor above 1, DeepSeek-V3's 61, the largest ``pp' <= pp`` dividing the lanes,
    the layers split unevenly: ``ParallelPlan.uneven_pp``); data parallel over the
    rest; expert parallel ``ep'``, the largest divisor of both ``dp`` and the experts
    with ``ep' <= ep`` (1 for a dense model).

    * **Weak scaling** (``global_batch=None``, the default): the global batch grows with
      ``dp`` (``dp x micro_batch x microbatches`` sequences, ``microbatches`` default
      :data:`DEFAULT_MICROBATCHES`: each replica's work per step is fixed, the way a
      cluster is scaled out), so the compute per GPU and step is the same at every size
      and what changes with size is the network's part.
    * **Fixed global batch** (strong scaling, ``global_batch = B`` sequences per step at
      every size, the way a published training run is scaled: Narayanan et al., SC 2021,
      Sec. 5.4; Jiang et al., NSDI 2024, Table 2): each replica runs ``m = B / (dp x
      micro_batch)`` micro-batches, which must be a whole number >= 1.  The 1F1B bubble
      ``(pp - 1) / m`` then grows with ``dp``, the compute per GPU shrinks as ``1 / N``,
      the all-to-all and pipeline bytes per GPU follow ``m``, and the data-parallel
      gradient bytes per GPU do not (:func:`fabric_jax.workloads.model.comm_bytes`).
      ``microbatches`` cannot be given with it (it follows from ``B``).

    The step's overlap of communication and compute is not part of the plan: it is
    :func:`step_flows`' ``overlap``.

    Returns:
      ``(ModelConfig, ParallelPlan)``, checked (:meth:`ParallelPlan.check`).

    Raises:
      ValueError: sizes that do not fit, naming the argument (``global_batch`` that
      leaves no whole number of micro-batches per replica: with the nearest valid
      values).
    """
    mdl = get_model(model)
    n, g = int(n_gpus), int(gpus_per_server)
    if n < 1 or n % g:
        raise ValueError(f"n_gpus: {n_gpus!r} is not a multiple of {g} GPUs per server")
    if tp is None:
        pub = PUBLISHED_PLANS.get(mdl.name)
        tp = pub.tp if pub is not None and pub.tp is not None and g % pub.tp == 0 else \
            max(d for d in range(1, g + 1) if g % d == 0 and mdl.n_heads % d == 0)
    tp = int(tp)
    if n % tp:
        raise ValueError(f"tp: {tp} does not divide n_gpus={n}")
    lanes = n // tp
    fits = [d for d in range(1, min(int(pp), lanes, mdl.n_layers) + 1)
            if lanes % d == 0 and lanes // d >= 2]
    even = [d for d in fits if mdl.n_layers % d == 0]
    uneven = max(even or [1]) == 1 and max(fits or [1]) > 1
    pp = max(fits) if uneven else max(even or [1])
    if uneven:
        plan_fields = {**plan_fields, "uneven_pp": True}
    dp = lanes // pp
    ep_ = 1
    if mdl.n_experts > 1:
        ep_ = max(d for d in range(1, min(int(ep), dp) + 1)
                  if dp % d == 0 and mdl.n_experts % d == 0)
    if "overlap" in plan_fields:
        raise ValueError("overlap: the scale step's overlap is step_flows(overlap=...) "
                         "(OVERLAP_MODELS or a fraction), not a plan field")
    mb = int(micro_batch)
    if global_batch is not None and microbatches is not None:
        raise ValueError("global_batch: give global_batch (fixed batch, micro-batches "
                         "per replica follow) or microbatches (weak scaling), not both")
    if global_batch is None:
        m = DEFAULT_MICROBATCHES if microbatches is None else int(microbatches)
    else:
        m = fixed_batch_microbatches(int(global_batch), dp, mb, n_gpus=n)
    if mb < 1 or m < 1:
        raise ValueError(f"micro_batch, microbatches: must be >= 1; got {mb}, {m}")
    mdl = mdl.replace(global_batch=dp * mb * m)
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp, ep=ep_, micro_batch=mb, gpus_per_server=g,
                        **plan_fields)
    plan.check(mdl)
    return mdl, plan


def fixed_batch_microbatches(global_batch: int, dp: int, micro_batch: int = 1, *,
                             n_gpus=None) -> int:
    """Micro-batches per data-parallel replica of a fixed global batch, ``m = B / (dp x
    micro_batch)`` (:func:`scale_plan`).

    Raises:
      ValueError: naming ``global_batch`` when ``m`` is not a whole number >= 1, with
      the nearest valid values (multiples of ``dp x micro_batch``).
    """
    B, per = int(global_batch), int(dp) * int(micro_batch)
    if B >= per and B % per == 0:
        return B // per
    lo, hi = (B // per) * per, (B // per + 1) * per
    near = ", ".join(str(x) for x in (lo, hi) if x >= per)
    at = f" at {n_gpus} GPUs" if n_gpus is not None else ""
    raise ValueError(f"global_batch: {B} sequences is not a whole number of micro-batches "
                     f"per replica{at} (dp {dp} x micro-batch {micro_batch} = {per}); "
                     f"use a multiple of {per}, e.g. {near}")


@dataclasses.dataclass(frozen=True)
class StepFlows:
    """The network flows of one slice of a training step (:func:`step_flows`): a
    :class:`~fabric_jax.workloads.Workload` and the step around it.

    The step's network bytes run as ``slices`` equal back-to-back slices (gradient
    buckets, micro-batches' all-to-alls); the flows carry one slice.  The flow columns
    (``src``, ``dst``, ``size``, ``deps``, ``arrival``, ``job`` and the extra columns
    ``src_rank``, ``dst_rank``, ``phase``, ``rail``) are read from :attr:`flows`.

    Attributes:
      flows: the ``Workload``: ``src``, ``dst`` NIC (host index) sending / receiving;
        ``size`` bytes (one slice); ``deps`` flows that must finish first; ``arrival``
        seconds after the slice's start at which each flow may start (0 for the step's
        flows, which wait only for their ``deps``; background flows arrive over time,
        :func:`add_background`); ``job`` the job of each flow (its receiver's server's);
        one group per collective instance; columns ``src_rank``, ``dst_rank`` (GPU ranks
        whose data the flow carries), ``phase`` (:data:`PHASES` id) and ``rail`` (NIC
        index in the server the flow runs on).
      n_gpus, gpus_per_server: sizes.
      slices: ``k``: the step's network bytes are ``k`` times the flows'.
      compute_time: seconds of compute per step and GPU (math at the achievable
        fraction of peak, the 1F1B bubble, TP over NVLink).
      tokens_per_step: tokens of the global batch (of every job).
      info: the model, plan and derived quantities (JSON-friendly; one job's when
        there are several, with ``jobs`` and ``placement``).
      server_job: ``[servers]`` job running on each server (``None``: one job).
      job_steps: jobs of different plans (:func:`place_jobs` with jobs of different
        sizes): one dict per job, ``{"gpus", "slices", "compute_time",
        "tokens_per_step", "info"}``, its own; ``None``: every job has the scalar
        fields above (one plan on equal shares; :attr:`per_job`).
    """

    flows: Workload
    n_gpus: int
    gpus_per_server: int
    slices: int
    compute_time: float
    tokens_per_step: float
    info: dict
    server_job: np.ndarray | None = None
    job_steps: tuple | None = None

    src = property(lambda self: self.flows.src, doc="``[flows]`` sending NIC.")
    dst = property(lambda self: self.flows.dst, doc="``[flows]`` receiving NIC.")
    size = property(lambda self: self.flows.size, doc="``[flows]`` bytes (one slice).")
    deps = property(lambda self: self.flows.deps, doc="``[flows, width]`` deps, -1 padded.")
    arrival = property(lambda self: self.flows.arrival, doc="``[flows]`` arrival, s.")
    arrivals = arrival
    job = property(lambda self: self.flows.job, doc="``[flows]`` job of each flow.")
    src_rank = property(lambda self: self.flows.columns["src_rank"],
                        doc="``[flows]`` GPU rank whose data the flow sends.")
    dst_rank = property(lambda self: self.flows.columns["dst_rank"],
                        doc="``[flows]`` GPU rank that receives the flow's data.")
    phase = property(lambda self: self.flows.columns["phase"], doc="``[flows]`` phase id.")
    rail = property(lambda self: self.flows.columns["rail"], doc="``[flows]`` rail.")

    @property
    def n_flows(self) -> int:
        return self.flows.n_flows

    @property
    def is_step(self) -> np.ndarray:
        """``[flows]`` bool: the flow belongs to the training step (not background)."""
        return self.phase != BACKGROUND

    @property
    def n_jobs(self) -> int:
        return 1 if self.server_job is None else int(self.server_job.max()) + 1

    @property
    def per_job(self) -> dict:
        """Each job's ``gpus``, ``slices``, ``compute_time``, ``tokens_per_step`` (arrays
        ``[jobs]``) and ``info`` (list): from :attr:`job_steps`, or the scalar fields
        split evenly over equal jobs."""
        J = self.n_jobs
        if self.job_steps is None:
            return dict(gpus=np.full(J, self.n_gpus // J), slices=np.full(J, self.slices),
                        compute_time=np.full(J, float(self.compute_time)),
                        tokens_per_step=np.full(J, self.tokens_per_step / J),
                        info=[self.info] * J)
        js = self.job_steps
        return dict(gpus=np.array([j["gpus"] for j in js]),
                    slices=np.array([j["slices"] for j in js]),
                    compute_time=np.array([float(j["compute_time"]) for j in js]),
                    tokens_per_step=np.array([float(j["tokens_per_step"]) for j in js]),
                    info=[j["info"] for j in js])

    @property
    def rank_job(self) -> np.ndarray:
        """``[n_gpus]`` job of each GPU (its server's)."""
        if self.server_job is None:
            return np.zeros(self.n_gpus, np.int32)
        return np.repeat(self.server_job, self.gpus_per_server).astype(np.int32)

    def subset(self, keep) -> "StepFlows":
        """The flows of ``keep`` (:meth:`Workload.subset`: closed, deps renumbered)."""
        return dataclasses.replace(self, flows=self.flows.subset(keep))

    def stripes(self, n: int) -> "StepFlows":
        """Each flow split into ``n`` stripes (:meth:`Workload.stripes`): NCCL opens one
        connection per port of a multi-port (multi-plane) NIC and stripes its channels
        over them; a hashed (ECMP) flow then stays in its stripe's plane."""
        return self if int(n) == 1 else dataclasses.replace(self, flows=self.flows.stripes(n))


def step_flows(model, plan: ParallelPlan, gpu="h100_sxm", *, skew: float = DEFAULT_SKEW,
               seed: int = 0, slice_time: float | None = 250e-6,
               nic_rate: float = 50e9, latency: str = DEFAULT_LATENCY,
               overlap=DEFAULT_OVERLAP,
               dp_algorithm: str = DEFAULT_DP_ALGORITHM, expert_load: str = "zipf",
               capacity_factor: float = DEFAULT_CAPACITY_FACTOR) -> StepFlows:
    """The network traffic of one training step (one slice of it), vectorised.

    Ranks in Megatron order (``rank = (p dp + d) tp + t``, :meth:`ParallelPlan.groups`)
    on server ``rank // gpus_per_server``, NIC ``rank % gpus_per_server`` of it (one NIC
    per GPU: the rails).  The collectives are those of the one step builder,
    :func:`fabric_jax.workloads.step_collectives` (bytes per GPU and step from
    :func:`fabric_jax.workloads.model.comm_bytes`), with the options of a large
    cluster's step:

    * **expert-parallel all-to-all** with a Zipf(``skew``) expert popularity per
      pipeline stage (``expert_skew=skew``), bounded at ``capacity_factor`` x the mean
      with ``expert_load="capacity"``; for a model with node-limited routing
      (DeepSeek-V3) one copy per (token, destination server), to the GPU of the same
      in-node index (DeepEP; :func:`fabric_jax.workloads.step_collectives`), and the
      step's all-to-all bytes per GPU are those network bytes (``info``:
      ``ep_network_bytes_per_gpu``, ``ep_nodes``, ``ep_nodes_per_token``,
      ``ep_max_load``);
    * **pipeline sends** between consecutive stages of each lane, concurrent with the
      all-to-all;
    * **data-parallel reduce-scatter then all-gather** (the distributed optimizer /
      FSDP, ``dp="reduce_scatter_all_gather"``) over each DP and expert-DP group, by the
      algorithm NCCL runs for the group's calls (``dp_algorithm``,
      :data:`DP_ALGORITHMS`): rail-aligned steady-state rings
      (:func:`fabric_jax.workloads.phases.rail_rings`) in rank order (NCCL builds the
      inter-node ring in the order of the ranks the launcher gives), or PAT's
      ``ceil(log2 n)`` steps to peers at distances ``n/2, ..., 1`` of the group
      (:func:`fabric_jax.collectives.schedules.pat`), whose long-distance steps leave
      the leaf.  A rank's reduce-scatter starts when the all-to-all and pipeline flows
      into it have finished, its all-gather when the reduce-scatter into it has.
      NCCL's choice is made once per family, on its per-bucket call
      (``info["collectives"]``), at the bus bandwidth ``nic_rate x
      LINK_EFFICIENCY["net"]`` with NCCL's own constants and no added network latency:
      NCCL's tuner adds the net plugin's reported latency, which its InfiniBand / RoCE
      plugin leaves at 0 (NVIDIA/nccl ``src/transport/net_ib.cc``, ``props->latency =
      0; // Not set``), so the fabric's switch latency lengthens the chosen algorithm
      (:func:`collective_overhead`) but does not change the choice; and
      recorded as each call's ``algorithm`` (not with ``"ring"``, whose calls
      :func:`collective_overhead` prices by ``latency`` alone).

    Flows between two GPUs of one server are NVLink and left out.  A flow between
    servers leaves through the sender server's NIC on the *receiver's* rail (NCCL's
    PXN: the data crosses NVLink to that NIC first), so every network flow stays on
    one rail.

    Slices (an assumption, the compare study's, :func:`fabric_jax.study.scenario.
    model_slices`): the step's network bytes run as ``k`` equal back-to-back slices
    (gradient buckets, the micro-batches' all-to-alls), each meeting the same fabric
    state; the flows carry one, ``k = ceil(t_comm / slice_time)`` with ``t_comm`` the
    step's bytes per GPU at ``nic_rate``.  Exact for a bandwidth-bound steady state.

    Per-message latency (``latency``, :data:`LATENCY_MODELS`): the step's collective
    *calls* are listed in ``info["collectives"]`` -- ``4 L/pp m`` all-to-alls, ``2 m``
    pipeline sends, and per data-parallel group one reduce-scatter and one all-gather
    per gradient bucket (:data:`BUCKET_PARAMS`, Megatron-Core's rule) -- with their
    ranks, servers and bytes; :func:`collective_overhead` prices them with NCCL's model
    and :func:`~fabric_jax.scale.point_metrics` adds that time to the step.

    Overlap (``overlap``): ``"megatron"`` (default, :func:`megatron_step_time`) records
    in ``info["overlap_windows"]`` the compute each data-parallel phase can hide behind
    -- the backward and the forward of one micro-batch, ``(math_time + tp_time) / m``
    split 2 : 1 (3 : 1 with full recomputation, whose backward re-runs the forward:
    :func:`fabric_jax.workloads.model.training_flops`) -- and in
    ``info["dp_buckets"]`` the gradient buckets (:data:`BUCKET_PARAMS`); a number is a
    flat fraction of the compute (:func:`job_step_time`).

    Args:
      model, plan: from :func:`scale_plan`.
      gpu: :data:`fabric_jax.workloads.model.GPUS` name.
      skew: Zipf exponent of the expert load (0: uniform).
      seed: seed of the expert popularity.
      slice_time: line-rate seconds of one slice (``None``: one slice, the whole step).
      nic_rate: NIC line rate for the slicing, bytes/s.
      latency: :data:`LATENCY_MODELS` (default ``"nccl"``); ``"ring"`` (NCCL restricted
        to rings) also makes ``dp_algorithm="nccl"`` choose rings.
      overlap: :data:`OVERLAP_MODELS` or a fraction in [0, 1] (default
        :data:`DEFAULT_OVERLAP`).
      dp_algorithm: :data:`DP_ALGORITHMS` (default ``"nccl"``).
      expert_load: ``"zipf"`` or ``"capacity"``
        (:func:`fabric_jax.workloads.phases.expert_loads`).
      capacity_factor: the capacity bound, times the mean expert load.

    Returns:
      :class:`StepFlows`.
    """
    if latency not in LATENCY_MODELS:
        raise ValueError(f"latency: must be one of {LATENCY_MODELS}; got {latency!r}")
    overlap = _check_overlap(overlap)
    if dp_algorithm not in DP_ALGORITHMS:
        raise ValueError(f"dp_algorithm: must be one of {DP_ALGORITHMS}; got "
                         f"{dp_algorithm!r}")
    if dp_algorithm == "pat" and latency == "ring":
        raise ValueError("dp_algorithm: 'pat' with latency='ring' would price rings for "
                         "PAT's flows; use dp_algorithm='ring' or latency='nccl'")
    mdl, gpu = get_model(model), get_gpu(gpu)
    plan.check(mdl)
    g = plan.gpus_per_server
    n = plan.n_gpus
    server = np.arange(n) // g
    slot = np.arange(n) % g
    cb = comm_bytes(mdl, plan)
    calls = _collective_calls(plan, cb, plan.groups(), server)
    algs = _dp_algorithms(calls, dp_algorithm, latency, float(nic_rate))
    for c in calls:
        if dp_algorithm != "ring" and c["name"].split("_")[0] in algs:
            c["algorithm"] = algs[c["name"].split("_")[0]]
    routing = {}
    w = step_collectives(mdl, plan, expert_skew=skew, seed=seed,
                         dp="reduce_scatter_all_gather", pp_order="direction",
                         dp_algorithms=algs, expert_load=expert_load,
                         capacity_factor=capacity_factor, routing=routing)
    ep_bytes = cb["ep_bytes_sent"]
    if mdl.node_limit and cb["ep_alltoall_count"]:
        ep_bytes = float(w.size[w.columns["phase"] == 0].sum()) / n
    # flows inside a server ride NVLink: left out (a dependency on one is dropped)
    w = w.subset((server[w.src] != server[w.dst]) & (w.size > 0), drop_deps=True)
    src_r, dst_r, phase = w.src, w.dst, w.columns["phase"]
    ag_dep = w.deps[:, 0] if w.max_deps else np.full(w.n_flows, -1, np.int32)
    # a rank's reduce-scatter (its first step) waits for the all-to-all and pipeline
    # flows into it
    f01 = np.flatnonzero(phase <= 1)
    order = f01[np.argsort(dst_r[f01], kind="stable")]
    cnt = np.bincount(dst_r[order], minlength=n)
    into = np.full((n, max(int(cnt.max(initial=0)), 1)), -1, np.int64)
    into[dst_r[order], np.arange(order.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)] = order
    first = (phase == 2) & (ag_dep < 0)
    deps = np.concatenate([np.where(first[:, None], into[src_r], -1),
                           ag_dep[:, None].astype(np.int64)], axis=1)
    deps = -np.sort(-deps, axis=1)
    width = int((deps >= 0).sum(axis=1).max(initial=0))
    deps = deps[:, :width].astype(np.int32)

    step_bytes = cb["dp_bytes_sent"] + ep_bytes + cb["pp_bytes_sent"]
    t_comm = step_bytes / float(nic_rate)
    k = 1 if slice_time is None else max(1, math.ceil(t_comm / float(slice_time) - 1e-9))
    comp = step_compute(mdl, plan, gpu)
    info = dict(model=mdl.name, gpu=gpu.name, tp=plan.tp, pp=plan.pp, dp=plan.dp,
                ep=plan.ep, micro_batch=plan.micro_batch, microbatches=comp["microbatches"],
                global_batch=mdl.global_batch, overlap=overlap, skew=float(skew),
                step_flops=comp["step_flops"], peak_flops=gpu.peak_flops,
                math_time=comp["math_time"],
                pipeline_bubble=comp["bubble"], compute_time=comp["compute_time"],
                comm_bytes_per_gpu=step_bytes, line_rate_comm_time=t_comm, slices=k,
                latency=latency, dp_algorithm=dp_algorithm, collectives=calls,
                **{f"bytes_{k_}": v for k_, v in cb.items()})
    # Megatron's overlap windows: one micro-batch's forward and backward (step_flows)
    per_mb = (comp["math_time"] + comp["tp_time"]) / comp["microbatches"]
    fwd = 0.25 if plan.recompute else 1.0 / 3.0
    info.update(overlap_windows=dict(forward=fwd * per_mb, backward=(1.0 - fwd) * per_mb),
                dp_buckets=max([c["count"] for c in info["collectives"]
                                if c["phase"] == 2] or [1]))
    if expert_load != "zipf":
        info.update(expert_load=expert_load, capacity_factor=float(capacity_factor))
    if routing:
        info.update(ep_network_bytes_per_gpu=ep_bytes, ep_nodes=int(routing["nodes"]),
                    ep_nodes_per_token=float(routing["nodes_per_token"].mean()),
                    node_limit=int(mdl.node_limit),
                    ep_max_load=float(routing["load"].max() * mdl.n_experts))
    # PXN: a flow leaves the sender's server through the NIC on the receiver's rail
    flows = dataclasses.replace(
        w, src=server[src_r] * g + slot[dst_r], dst=dst_r, size=w.size / k, deps=deps,
        columns=dict(src_rank=src_r, dst_rank=dst_r, phase=phase,
                     rail=slot[dst_r].astype(np.int32)))
    return StepFlows(flows, n_gpus=n, gpus_per_server=g, slices=k,
                     compute_time=comp["compute_time"],
                     tokens_per_step=float(mdl.tokens_per_step), info=info)


def _dp_algorithms(calls, dp_algorithm: str, latency: str, nic_rate: float) -> dict:
    """``{"dp" | "edp": "ring" | "pat"}``: the algorithm of each data-parallel family's
    flows (:func:`step_flows`, :data:`DP_ALGORITHMS`), from its reduce-scatter call."""
    out = {}
    bus = nic_rate * LINK_EFFICIENCY["net"]
    for c in calls:
        if c["op"] != "reduce_scatter":
            continue
        key, p, nodes = c["name"].split("_")[0], int(c["ranks"]), int(c["nodes"])
        if dp_algorithm == "ring" or nodes != p:
            out[key] = "ring"
        elif dp_algorithm == "pat":
            out[key] = "pat"
        else:
            algs = ("ring",) if latency == "ring" else ("ring", "pat")
            out[key] = nccl_choice("reduce_scatter", float(c["nbytes"]), p, nodes,
                                   bus_bandwidth=bus, algorithms=algs)[0]
    return out


def _collective_calls(plan: ParallelPlan, cb: dict, groups: dict, server) -> list:
    """The step's collective calls per rank (:func:`step_flows`, "Per-message
    latency"): ``[{name, op, ranks, nodes, nbytes, count, phase}]``, ``nbytes`` per
    call as NCCL counts it, ``nodes`` the servers of one group."""
    def nodes(row):
        return int(np.unique(server[np.asarray(row)]).size)
    calls = []
    if cb["ep_alltoall_count"]:
        calls.append(dict(name="ep_all_to_all", op="all_to_all", ranks=plan.ep,
                          nodes=nodes(groups["ep"][0]), nbytes=cb["ep_alltoall_bytes"],
                          count=int(cb["ep_alltoall_count"]), phase=0))
    if cb["pp_send_count"]:
        calls.append(dict(name="pp_send", op="p2p", ranks=2, nodes=nodes(groups["pp"][0][:2]),
                          nbytes=cb["pp_send_bytes"], count=int(cb["pp_send_count"]),
                          phase=1))
    bucket = max(BUCKET_PARAMS[0], BUCKET_PARAMS[1] * plan.dp)
    for key, nbytes in (("dp", cb["dp_allreduce_bytes"]), ("edp", cb["edp_allreduce_bytes"])):
        ranks = int(groups[key].shape[1])
        if not nbytes or ranks < 2:
            continue
        n_b = max(1, math.ceil(nbytes / plan.grad_bytes / bucket))
        for op, ph in (("reduce_scatter", 2), ("all_gather", 3)):
            calls.append(dict(name=f"{key}_{op}", op=op, ranks=ranks,
                              nodes=nodes(groups[key][0]), nbytes=nbytes / n_b,
                              count=n_b, phase=ph))
    return calls


def _check_overlap(overlap):
    """``overlap`` as :func:`step_flows` keeps it: a name of :data:`OVERLAP_MODELS` or
    a float in [0, 1]."""
    if isinstance(overlap, str):
        if overlap in OVERLAP_MODELS:
            return overlap
    elif not isinstance(overlap, bool) and isinstance(overlap, (int, float)) \
            and math.isfinite(overlap) and 0 <= overlap <= 1:
        return float(overlap)
    raise ValueError(f"overlap: must be one of {OVERLAP_MODELS} or a fraction in [0, 1]; "
                     f"got {overlap!r}")


def megatron_exposed(comm, window, buckets):
    """Exposed seconds of a bucketed data-parallel collective overlapped with compute,
    the way Megatron-Core's ``DistributedDataParallel`` runs it (NumPy, elementwise).

    ``comm`` seconds of collective in ``n = buckets`` equal buckets run one after
    another (one NCCL stream), beside ``window`` seconds of compute:

    * ``overlap_grad_reduce``: bucket ``i``'s gradients are ready at ``i W / n`` of the
      backward (the buckets follow the backward's order) and its reduce-scatter starts
      then; the step waits for the last one: finished at ``max_i (i W/n + (n - i + 1)
      c/n)``, so ``max(c / n, c - W (n - 1) / n)`` is exposed past the backward;
    * ``overlap_param_gather``: bucket ``i``'s all-gather must finish before the forward
      reaches its layers, ``(i - 1) W / n`` in; the all-gathers start together with the
      forward: the same form (the first bucket's all-gather is always exposed).

    So: one bucket's time when the collective is short against the compute, ``c - W (n
    - 1)/n`` when it is long.  Assumption (named): the window's compute is spread evenly
    over the buckets.  Source: Megatron-Core ``DistributedDataParallelConfig``
    (``overlap_grad_reduce``, ``overlap_param_gather``, ``bucket_size``) and its
    ``distributed`` package docs; 0 where ``comm`` is 0."""
    c = np.asarray(comm, float)
    W = np.asarray(window, float)
    n = np.maximum(np.asarray(buckets, float), 1.0)
    return np.where(c > 0, np.maximum(c / n, c - W * (n - 1.0) / n), 0.0)


def megatron_step_time(compute, slices, phase_times, windows, buckets, latency):
    """A job's step time with Megatron's communication overlap (``overlap="megatron"``),
    ``C + k t_a + X(k t_rs, W_b) + X(k t_ag, W_f) + L`` (NumPy, elementwise over jobs):

    * ``C`` the compute (with the 1F1B bubble), ``k`` slices, ``L`` the per-message
      latency (:func:`collective_overhead`), all exposed;
    * ``t_a``, ``t_rs``, ``t_ag``: the slice's time to the end of the all-to-all and
      pipeline sends, then on to the end of the reduce-scatter, then of the all-gather
      (``phase_times [..., 3]``, :func:`~fabric_jax.scale.phase_slice_times`); the
      all-to-all and pipeline sends stay exposed (each micro-batch's compute waits for
      its tokens and activations: an assumption, no overlap of them is modelled);
    * ``X`` :func:`megatron_exposed` with ``W_b`` / ``W_f`` (``windows [..., 2]``,
      backward then forward) the backward of the *last* micro-batch and the forward of
      the *first*: Megatron-Core syncs gradients only in the last micro-batch's
      backward (``no_sync`` for the others; ``enable_grad_sync`` for the last
      micro-batch in ``pipeline_parallel/schedules.py``) and gathers the parameters in
      the first micro-batch's forward pre-hooks; ``buckets`` per collective.

    Departure: the pipeline's other stages, which end their backward earlier (1F1B
    cooldown), are not given more time; the first stage's window is the step's."""
    pt = np.asarray(phase_times, float)
    w = np.asarray(windows, float)
    k = np.asarray(slices, float)
    return (np.asarray(compute, float) + k * pt[..., 0]
            + megatron_exposed(k * pt[..., 1], w[..., 0], buckets)
            + megatron_exposed(k * pt[..., 2], w[..., 1], buckets)
            + np.asarray(latency, float))


def flat_overlap(compute, slices, slice_time, latency, step_time):
    """The flat overlap fraction ``f`` that gives ``step_time`` in :func:`job_step_time`,
    ``(C + k T + L - step) / C`` clipped to [0, 1] (NumPy): how
    :func:`~fabric_jax.scale.independent_overlap` takes a Megatron step."""
    C = np.asarray(compute, float)
    f = (C + np.asarray(slices, float) * np.asarray(slice_time, float)
         + np.asarray(latency, float) - np.asarray(step_time, float)) / C
    return np.clip(f, 0.0, 1.0)


def job_step_time(compute, overlap, slices, slice_time, latency):
    """A job's step time, ``max(C, (1 - f) C + k T + L)``: compute ``C`` (s) of which a
    fraction ``f`` overlaps the network, ``k`` slices of ``T`` seconds each, and the
    per-message latency ``L`` (s) of the step's calls (:func:`collective_overhead`).
    NumPy, elementwise over jobs."""
    C = np.asarray(compute, float)
    return np.maximum(C, (1.0 - np.asarray(overlap, float)) * C
                      + np.asarray(slices, float) * np.asarray(slice_time, float)
                      + np.asarray(latency, float))


def collective_overhead(info: dict, nic_rate: float, path_latency=0.0) -> dict:
    """Time per step that the step's collective calls cost beyond the bytes the fluid
    run carries: NCCL's per-call latency (:func:`fabric_jax.collectives.nccl_latency`),
    summed over the calls of ``info["collectives"]`` (:func:`step_flows`) as they run
    one after another.

    The algorithm of each reduce-scatter / all-gather (``info["latency"] == "nccl"``)
    is the one its flows run (the call's ``algorithm``, NCCL's choice made by
    :func:`step_flows`): the flows carry its bytes, so the call pays its latency only.
    Departure: NCCL's model runs PAT at ``0.75`` of the bus bandwidth (its tuner's
    efficiency factor, used for the choice); the flows carry PAT's bytes at the rate the
    fabric gives, and that factor is not charged on top.  A call without an
    ``algorithm`` (rings in the flows): NCCL's choice between ring and PAT here, with
    the chosen algorithm's shortfall against the ring's bytes at bus rate
    (:func:`fabric_jax.collectives.nccl_time`).  ``"ring"``: the ring's latency.  The
    bus bandwidth is ``nic_rate x LINK_EFFICIENCY["net"]``; all-to-alls and pipeline
    sends pay one network step each (``p2p``).  ``"none"``, or no calls listed: 0.

    Args:
      info: a :class:`StepFlows`' ``info``.
      nic_rate: NIC line rate, bytes/s.
      path_latency: the fabric's zero-load one-way latency between two ranks, s: a
        number or ``{phase: seconds}`` (:data:`PHASES` ids); 0 on the ideal fabric.

    Returns:
      ``{"total": seconds per step, "calls": {name: {"algorithm", "per_call",
      "count", "phase"}}}``.
    """
    mode = info.get("latency", "none")
    calls = info.get("collectives") or []
    if mode not in LATENCY_MODELS:
        raise ValueError(f"info['latency']: must be one of {LATENCY_MODELS}; got {mode!r}")
    out = {"total": 0.0, "calls": {}}
    if mode == "none":
        return out
    bus = float(nic_rate) * LINK_EFFICIENCY["net"]
    for c in calls:
        lat = (path_latency.get(c["phase"], 0.0) if isinstance(path_latency, dict)
               else float(path_latency))
        p, nb = int(c["ranks"]), float(c["nbytes"])
        if c["op"] in ("all_to_all", "p2p"):
            alg = "p2p"
            per = nccl_latency(c["op"], alg, p, c["nodes"], path_latency=lat)
        elif mode == "nccl" and "algorithm" in c:
            # the flows run this algorithm and carry its bytes: its latency only
            alg = c["algorithm"]
            per = nccl_latency(c["op"], alg, p, c["nodes"], path_latency=lat)
        else:
            algs = ("ring",) if mode == "ring" else ("ring", "pat")
            alg, t = nccl_choice(c["op"], nb, p, c["nodes"], bus_bandwidth=bus,
                                 path_latency=lat, algorithms=algs)
            per = t - nb * (p - 1) / p / bus     # beyond the ring's bytes at bus rate
        out["calls"][c["name"]] = dict(algorithm=alg, per_call=per, count=int(c["count"]),
                                       phase=int(c["phase"]))
        out["total"] += per * int(c["count"])
    return out
