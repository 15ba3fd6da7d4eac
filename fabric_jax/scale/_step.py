"""One training step of a model filling the cluster, as network flows (host side, vectorised).

Units: bytes, seconds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..collectives import LINK_EFFICIENCY, nccl_choice, nccl_latency
from ..collectives.schedules import TransferDag, ring
from ..workloads.model import (ParallelPlan, comm_bytes, get_gpu, get_model, step_flops)

__all__ = ["DEFAULT_MODEL", "DEFAULT_PP", "DEFAULT_EP", "DEFAULT_MICROBATCHES",
           "DEFAULT_SKEW", "StepFlows", "scale_plan", "step_flows", "PHASES", "PLACEMENTS",
           "job_servers", "place_jobs", "BACKGROUND", "DEFAULT_BACKGROUND_CDF",
           "add_background", "LATENCY_MODELS", "DEFAULT_LATENCY", "BUCKET_PARAMS",
           "collective_overhead", "ep_group_size"]

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

#: Phase ids of :attr:`StepFlows.phase` (:data:`BACKGROUND`: flows of other traffic
#: sharing the fabric, :func:`add_background`).
PHASES = {0: "ep_all_to_all", 1: "pp_send", 2: "dp_reduce_scatter", 3: "dp_all_gather",
          4: "background"}
#: Phase id of background flows (:func:`add_background`): not part of the step, left out
#: of its figures.
BACKGROUND = 4
#: Default flow-size distribution of the background traffic
#: (:meth:`fabric_jax.workloads.FlowSizeCDF.builtin`).
DEFAULT_BACKGROUND_CDF = "web_search"
#: How several jobs share the cluster's servers (:func:`job_servers`).
PLACEMENTS = ("packed", "spread", "random")
#: Per-message latency of the step's collectives (:func:`collective_overhead`):
#: ``"nccl"`` NCCL's own choice per call (ring or, for one rank per node, PAT: NCCL >=
#: 2.23), ``"ring"`` rings only (NCCL before 2.23, or ``NCCL_ALGO=ring``), ``"none"``
#: the bandwidth view (no per-message latency).
LATENCY_MODELS = ("nccl", "ring", "none")
DEFAULT_LATENCY = "nccl"
#: Megatron-Core's default gradient bucket, ``max(40,000,000, 1,000,000 x dp)``
#: parameters (``DistributedDataParallelConfig.bucket_size``: "larger DP sizes need
#: larger buckets to ensure collectives do not become latency-bound"): ``(floor, per
#: data-parallel rank)``.  Each bucket is one reduce-scatter and one all-gather.
BUCKET_PARAMS = (40_000_000, 1_000_000)


def ep_group_size(n_servers: int, wanted: int, minimum: int = 2) -> int:
    """The largest divisor of ``n_servers`` that is ``<= wanted`` and ``>= minimum``
    (``n_servers`` itself when none is): the expert-parallel group size a training job of
    ``n_servers`` servers can use when ``wanted`` does not divide it."""
    n, wanted = int(n_servers), int(wanted)
    fits = [d for d in range(minimum, min(wanted, n) + 1) if n % d == 0]
    return max(fits) if fits else n


def scale_plan(model=DEFAULT_MODEL, n_gpus: int = 1024, gpus_per_server: int = 8, *,
               tp: int | None = None, pp: int = DEFAULT_PP, ep: int = DEFAULT_EP,
               micro_batch: int = 1, microbatches: int = DEFAULT_MICROBATCHES,
               overlap: float = 0.0, **plan_fields):
    """``(model, plan)`` of one job filling ``n_gpus`` GPUs, weak-scaled.

    Tensor parallel inside the server (``tp``, default ``min(gpus_per_server, heads)``
    dividing it); pipeline parallel ``pp'``, the largest divisor of the layers with
    ``pp' <= pp`` that leaves at least two data-parallel ranks; data parallel over the
    rest; expert parallel ``ep'``, the largest divisor of both ``dp`` and the experts
    with ``ep' <= ep`` (1 for a dense model).  The global batch grows with ``dp``
    (``dp x micro_batch x microbatches`` sequences: each replica's work per step is
    fixed, the way a cluster is scaled out), so the compute per GPU and step is the
    same at every size and what changes with size is the network's part.

    Returns:
      ``(ModelConfig, ParallelPlan)``, checked (:meth:`ParallelPlan.check`).

    Raises:
      ValueError: sizes that do not fit, naming the argument.
    """
    mdl = get_model(model)
    n, g = int(n_gpus), int(gpus_per_server)
    if n < 1 or n % g:
        raise ValueError(f"n_gpus: {n_gpus!r} is not a multiple of {g} GPUs per server")
    if tp is None:
        tp = max(d for d in range(1, g + 1) if g % d == 0 and mdl.n_heads % d == 0)
    tp = int(tp)
    if n % tp:
        raise ValueError(f"tp: {tp} does not divide n_gpus={n}")
    lanes = n // tp
    pp = max([d for d in range(1, min(int(pp), lanes) + 1)
              if mdl.n_layers % d == 0 and lanes % d == 0 and lanes // d >= 2] or [1])
    dp = lanes // pp
    ep_ = 1
    if mdl.n_experts > 1:
        ep_ = max(d for d in range(1, min(int(ep), dp) + 1)
                  if dp % d == 0 and mdl.n_experts % d == 0)
    mb, m = int(micro_batch), int(microbatches)
    if mb < 1 or m < 1:
        raise ValueError(f"micro_batch, microbatches: must be >= 1; got {mb}, {m}")
    mdl = mdl.replace(global_batch=dp * mb * m)
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp, ep=ep_, micro_batch=mb, gpus_per_server=g,
                        overlap=float(overlap), **plan_fields)
    plan.check(mdl)
    return mdl, plan


@dataclasses.dataclass(frozen=True)
class StepFlows:
    """The network flows of one slice of a training step (:func:`step_flows`).

    The step's network bytes run as ``slices`` equal back-to-back slices (gradient
    buckets, micro-batches' all-to-alls); the flows carry one slice.

    Attributes:
      src, dst: ``[flows]`` NIC (host index) sending / receiving.
      src_rank, dst_rank: ``[flows]`` GPU ranks whose data the flow carries.
      size: ``[flows]`` bytes (one slice).
      deps: ``[flows, width]`` flows that must finish first (-1 padded).
      phase: ``[flows]`` :data:`PHASES` id.
      rail: ``[flows]`` rail (NIC index in the server) the flow runs on.
      n_gpus, gpus_per_server: sizes.
      slices: ``k``: the step's network bytes are ``k`` times the flows'.
      compute_time: seconds of compute per step and GPU (math at the achievable
        fraction of peak, the 1F1B bubble, TP over NVLink).
      tokens_per_step: tokens of the global batch (of every job).
      info: the model, plan and derived quantities (JSON-friendly; one job's when
        there are several, with ``jobs`` and ``placement``).
      server_job: ``[servers]`` job running on each server (``None``: one job); a
        flow's job is its receiver's server's (:attr:`job`).
      arrival: ``[flows]`` seconds after the slice's start at which each flow may start
        (``None``: all at 0, the step's flows, which wait only for their ``deps``;
        background flows arrive over time, :func:`add_background`).
      job_steps: jobs of different plans (:func:`place_jobs` with jobs of different
        sizes): one dict per job, ``{"gpus", "slices", "compute_time",
        "tokens_per_step", "info"}``, its own; ``None``: every job has the scalar
        fields above (one plan on equal shares; :attr:`per_job`).
    """

    src: np.ndarray
    dst: np.ndarray
    src_rank: np.ndarray
    dst_rank: np.ndarray
    size: np.ndarray
    deps: np.ndarray
    phase: np.ndarray
    rail: np.ndarray
    n_gpus: int
    gpus_per_server: int
    slices: int
    compute_time: float
    tokens_per_step: float
    info: dict
    server_job: np.ndarray | None = None
    arrival: np.ndarray | None = None
    job_steps: tuple | None = None

    @property
    def n_flows(self) -> int:
        return int(self.src.size)

    @property
    def arrivals(self) -> np.ndarray:
        """``[flows]`` arrival times, s (zeros without :attr:`arrival`)."""
        return np.zeros(self.n_flows) if self.arrival is None else self.arrival

    @property
    def is_step(self) -> np.ndarray:
        """``[flows]`` bool: the flow belongs to the training step (not background)."""
        return self.phase != BACKGROUND

    @property
    def n_jobs(self) -> int:
        return 1 if self.server_job is None else int(self.server_job.max()) + 1

    @property
    def job(self) -> np.ndarray:
        """``[flows]`` job of each flow (a job's flows stay among its servers)."""
        if self.server_job is None:
            return np.zeros(self.n_flows, np.int32)
        return self.server_job[self.dst // self.gpus_per_server]

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
        """The flows of ``keep`` (bool mask or indices, increasing), deps renumbered;
        a dependency outside the subset raises (the subset must be closed)."""
        idx = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep)
        new = np.full(self.n_flows, -1, np.int64)
        new[idx] = np.arange(idx.size)
        d = self.deps[idx]
        nd = np.where(d >= 0, new[np.maximum(d, 0)], -1)
        if np.any((d >= 0) & (nd < 0)):
            raise ValueError("keep: a kept flow depends on a flow left out")
        cut = lambda a: np.asarray(a)[idx]  # noqa: E731
        return dataclasses.replace(self, src=cut(self.src), dst=cut(self.dst),
                                   src_rank=cut(self.src_rank), dst_rank=cut(self.dst_rank),
                                   size=cut(self.size), deps=nd.astype(np.int32),
                                   phase=cut(self.phase), rail=cut(self.rail),
                                   arrival=None if self.arrival is None
                                   else cut(self.arrival))

    def stripes(self, n: int) -> "StepFlows":
        """Each flow split into ``n`` stripes of ``size / n`` (flow ``f`` becomes ``f n +
        s``); a flow waits for every stripe of each flow it depended on.  NCCL opens
        one connection per port of a multi-port (multi-plane) NIC and stripes its
        channels over them; a hashed (ECMP) flow then stays in its stripe's plane."""
        n = int(n)
        if n == 1:
            return self
        rep = lambda a: np.repeat(np.asarray(a), n)  # noqa: E731
        d = self.deps
        wide = np.where(d[:, :, None] >= 0, d[:, :, None] * n + np.arange(n), -1)
        wide = np.repeat(wide.reshape(d.shape[0], -1), n, axis=0)
        return dataclasses.replace(self, src=rep(self.src), dst=rep(self.dst),
                                   src_rank=rep(self.src_rank), dst_rank=rep(self.dst_rank),
                                   size=rep(self.size) / n, deps=wide.astype(np.int32),
                                   phase=rep(self.phase), rail=rep(self.rail),
                                   arrival=None if self.arrival is None
                                   else rep(self.arrival))


def _ordered_pairs(groups: np.ndarray):
    """Every ordered pair (a, b), a != b, of each row: ``(a, b, row, position of b)``."""
    n_groups, n = groups.shape
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    a = groups[:, i].reshape(-1)
    b = groups[:, j].reshape(-1)
    return a, b, np.repeat(np.arange(n_groups), i.size), np.tile(j, n_groups)


def _rings(groups: np.ndarray, server: np.ndarray):
    """Rail-aligned rings of each group (hierarchical collective): ``[rings, n]``
    ranks and the fraction of the payload each ring carries.

    A group whose members sit ``m`` per server (in server order) runs ``m`` rings over
    the servers, ring ``j`` through the ``j``-th member of each server, each carrying
    ``1/m`` of the payload (the intra-server part runs on NVLink); a group with an
    uneven number per server runs one ring over every member (its hops inside a server
    are NVLink and dropped)."""
    n_groups, n = groups.shape
    srv = server[groups]
    first = srv[:, :1]
    per = int(np.sum(srv[0] == first[0])) if n else 1
    even = (n % per == 0 and np.all(np.diff(srv, axis=1) >= 0)
            and np.all(srv.reshape(n_groups, n // per, per)
                       == srv.reshape(n_groups, n // per, per)[:, :, :1]))
    if even and per > 1:
        rings = groups.reshape(n_groups, n // per, per).transpose(0, 2, 1)
        return rings.reshape(n_groups * per, n // per), 1.0 / per
    return groups, 1.0


def step_flows(model, plan: ParallelPlan, gpu="h100_sxm", *, skew: float = DEFAULT_SKEW,
               seed: int = 0, slice_time: float | None = 250e-6,
               nic_rate: float = 50e9, latency: str = DEFAULT_LATENCY) -> StepFlows:
    """The network traffic of one training step (one slice of it), vectorised.

    Ranks in Megatron order (``rank = (p dp + d) tp + t``, :meth:`ParallelPlan.groups`)
    on server ``rank // gpus_per_server``, NIC ``rank % gpus_per_server`` of it (one NIC
    per GPU: the rails).  Bytes per GPU and step from
    :func:`fabric_jax.workloads.model.comm_bytes`; collectives:

    * **expert-parallel all-to-all** in each EP group (``4 L/pp m`` all-to-alls per
      step, aggregated): rank ``a`` sends rank ``b`` the share of ``b``'s experts in a
      Zipf(``skew``) expert popularity (one popularity per pipeline stage, i.e. per
      set of layers, the same in every EP group and TP lane: the hot experts are a
      property of the layer; :func:`fabric_jax.workloads.zipf_expert_load`);
    * **pipeline sends** between consecutive stages of each lane, activations forward
      and gradients back (``m`` per direction), concurrent with the all-to-all;
    * **data-parallel reduce-scatter then all-gather** (the distributed optimizer /
      FSDP) of the dense gradient shard over each DP group and of the expert shard over
      each expert-DP group, as steady-state pipelined rings (every rank streams ``(n -
      1)/n`` of the payload to its successor; :func:`fabric_jax.workloads.
      steady_state_all_reduce`), hierarchical when a group has several members per
      server (:func:`_rings`).  A rank's reduce-scatter starts when the all-to-all and
      pipeline flows into it have finished, its all-gather when the reduce-scatter
      flow into it has.

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

    Args:
      model, plan: from :func:`scale_plan`.
      gpu: :data:`fabric_jax.workloads.model.GPUS` name.
      skew: Zipf exponent of the expert load (0: uniform).
      seed: seed of the expert popularity.
      slice_time: line-rate seconds of one slice (``None``: one slice, the whole step).
      nic_rate: NIC line rate for the slicing, bytes/s.
      latency: :data:`LATENCY_MODELS` (default ``"nccl"``).

    Returns:
      :class:`StepFlows`.
    """
    if latency not in LATENCY_MODELS:
        raise ValueError(f"latency: must be one of {LATENCY_MODELS}; got {latency!r}")
    mdl, gpu = get_model(model), get_gpu(gpu)
    plan.check(mdl)
    g = plan.gpus_per_server
    n = plan.n_gpus
    server = np.arange(n) // g
    slot = np.arange(n) % g
    cb = comm_bytes(mdl, plan)
    m = plan.n_microbatches(mdl)
    groups = plan.groups()
    parts = []                                     # (a, b, size, phase)

    if cb["ep_alltoall_count"]:
        total = cb["ep_alltoall_bytes"] * cb["ep_alltoall_count"]
        a, b, row, pos = _ordered_pairs(groups["ep"])
        # EP groups are [pp, tp, dp/ep] rows: the stage of row r is r // (tp dp/ep)
        stage = row // (plan.tp * (plan.dp // plan.ep))
        rng = np.random.default_rng(seed)
        E = mdl.n_experts
        w = np.arange(1, E + 1, dtype=np.float64) ** -float(skew)
        w /= w.sum()
        perm = rng.permuted(np.broadcast_to(np.arange(E), (plan.pp, E)), axis=1)
        load = np.empty((plan.pp, E))
        np.put_along_axis(load, perm, np.broadcast_to(w, (plan.pp, E)), axis=1)
        per_rank = load.reshape(plan.pp, plan.ep, E // plan.ep).sum(axis=2)
        parts.append((a, b, total * per_rank[stage, pos], 0))
    if cb["pp_send_count"]:
        per = cb["pp_send_bytes"] * cb["pp_send_count"] / 2.0
        lanes = groups["pp"]
        a, b = lanes[:, :-1].reshape(-1), lanes[:, 1:].reshape(-1)
        parts.append((np.concatenate([a, b]), np.concatenate([b, a]),
                      np.full(2 * a.size, per), 1))
    rings = []                                     # (ring table, payload per ring)
    for key, nbytes in (("dp", cb["dp_allreduce_bytes"]), ("edp", cb["edp_allreduce_bytes"])):
        if nbytes:
            r, frac = _rings(groups[key], server)
            if r.shape[1] >= 2:
                rings.append((r, (r.shape[1] - 1) / r.shape[1] * nbytes * frac))
    # layout: phases 0/1, then every ring family's reduce-scatter, then its all-gather,
    # each one merged step of :func:`fabric_jax.collectives.schedules.ring`; a rank's
    # all-gather flow waits for the reduce-scatter flow into that rank
    src_r, dst_r, size, phase, ag_dep = [], [], [], [], []
    for a, b, s, ph in parts:
        src_r.append(a), dst_r.append(b), size.append(np.broadcast_to(s, a.shape))
        phase.append(np.full(a.size, ph)), ag_dep.append(np.full(a.size, -1))
    off = sum(a.size for a, *_ in parts)
    dag = TransferDag()
    rs_done = [ring(dag, r, 1, s)[1] for r, s in rings]
    for (r, s), done in zip(rings, rs_done):
        ring(dag, r, 1, s, ready=done)
    if rings:
        a, b, s, dep = dag.arrays()
        ready = dep.max(axis=1)                   # the one dependency, or -1
        src_r.append(a), dst_r.append(b), size.append(s)
        phase.append(np.where(ready >= 0, 3, 2)), ag_dep.append(np.where(ready >= 0,
                                                                         off + ready, -1))
    cat = lambda xs, dt: (np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))  # noqa
    src_r, dst_r = cat(src_r, np.int64), cat(dst_r, np.int64)
    size, phase, ag_dep = cat(size, np.float64), cat(phase, np.int32), cat(ag_dep, np.int64)
    # flows inside a server ride NVLink: left out (a dependency on one is dropped)
    net = (server[src_r] != server[dst_r]) & (size > 0)
    new_id = np.where(net, np.cumsum(net) - 1, -1)
    ag_dep = np.where(ag_dep >= 0, new_id[np.maximum(ag_dep, 0)], -1)[net]
    src_r, dst_r, size, phase = src_r[net], dst_r[net], size[net], phase[net]
    # a rank's reduce-scatter waits for the all-to-all and pipeline flows into it
    f01 = np.flatnonzero(phase <= 1)
    order = f01[np.argsort(dst_r[f01], kind="stable")]
    cnt = np.bincount(dst_r[order], minlength=n)
    into = np.full((n, max(int(cnt.max(initial=0)), 1)), -1, np.int64)
    into[dst_r[order], np.arange(order.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)] = order
    deps = np.concatenate([np.where((phase == 2)[:, None], into[src_r], -1),
                           ag_dep[:, None]], axis=1)
    deps = -np.sort(-deps, axis=1)
    width = int((deps >= 0).sum(axis=1).max(initial=0))
    deps = deps[:, :width].astype(np.int32)

    src = server[src_r] * g + slot[dst_r]          # PXN: the receiver's rail
    dst = dst_r.astype(np.int64)
    rail = slot[dst_r]
    step_bytes = cb["dp_bytes_sent"] + cb["ep_bytes_sent"] + cb["pp_bytes_sent"]
    t_comm = step_bytes / float(nic_rate)
    k = 1 if slice_time is None else max(1, math.ceil(t_comm / float(slice_time) - 1e-9))
    flops = step_flops(mdl, recompute=plan.recompute)
    math_time = flops / n / (gpu.peak_flops * plan.achievable_fraction)
    bubble = (plan.pp - 1) / m
    compute = math_time * (1.0 + bubble) + cb["tp_bytes_sent"] / gpu.nvlink_bandwidth
    info = dict(model=mdl.name, gpu=gpu.name, tp=plan.tp, pp=plan.pp, dp=plan.dp,
                ep=plan.ep, micro_batch=plan.micro_batch, microbatches=m,
                global_batch=mdl.global_batch, overlap=plan.overlap, skew=float(skew),
                step_flops=flops, math_time=math_time, pipeline_bubble=bubble,
                compute_time=compute, comm_bytes_per_gpu=step_bytes,
                line_rate_comm_time=t_comm, slices=k, latency=latency,
                collectives=_collective_calls(plan, cb, groups, server),
                **{f"bytes_{k_}": v for k_, v in cb.items()})
    return StepFlows(src=src.astype(np.int32), dst=dst.astype(np.int32),
                     src_rank=src_r.astype(np.int32), dst_rank=dst_r.astype(np.int32),
                     size=size / k, deps=deps, phase=phase, rail=rail.astype(np.int32),
                     n_gpus=n, gpus_per_server=g, slices=k, compute_time=compute,
                     tokens_per_step=float(mdl.tokens_per_step), info=info)


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
    and for a call NCCL runs as PAT its bandwidth shortfall against the ring the flows
    model (:func:`fabric_jax.collectives.nccl_time`), summed over the calls of
    ``info["collectives"]`` (:func:`step_flows`) as they run one after another.

    The algorithm of each reduce-scatter / all-gather is NCCL's choice between ring and
    PAT (``info["latency"] == "nccl"``) or the ring (``"ring"``) at the bus bandwidth
    ``nic_rate x LINK_EFFICIENCY["net"]``; all-to-alls and pipeline sends pay one
    network step each (``p2p``).  ``"none"``, or no calls listed: 0.

    Args:
      info: a :class:`StepFlows`' ``info``.
      nic_rate: NIC line rate, bytes/s.
      path_latency: the fabric's zero-load one-way latency between two ranks, s: a
        number or ``{phase: seconds}`` (:data:`PHASES` ids); 0 on the ideal fabric.

    Returns:
      ``{"total": seconds per step, "calls": {name: {"algorithm", "per_call",
      "count"}}}``.
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
        else:
            algs = ("ring",) if mode == "ring" else ("ring", "pat")
            alg, t = nccl_choice(c["op"], nb, p, c["nodes"], bus_bandwidth=bus,
                                 path_latency=lat, algorithms=algs)
            per = t - nb * (p - 1) / p / bus     # beyond the ring's bytes at bus rate
        out["calls"][c["name"]] = dict(algorithm=alg, per_call=per, count=int(c["count"]))
        out["total"] += per * int(c["count"])
    return out


def job_servers(n_servers: int, n_jobs: int | None = None, placement: str = "packed", *,
                seed: int = 0, sizes=None):
    """The cluster servers of each job: ``[jobs, servers per job]`` for equal jobs, a
    list of ``[servers of job j]`` arrays with ``sizes``; entry ``s`` of job ``j`` is the
    cluster server its ``s``-th server is.

    * ``"packed"``: job ``j`` on servers ``j S .. (j + 1) S - 1`` (a scheduler that
      allocates whole blocks: jobs of whole scalable units share no leaf); with
      ``sizes``, consecutive blocks in the order given;
    * ``"spread"``: round robin, job ``j``'s ``s``-th server is ``s J + j`` (every leaf
      holds every job: the most shared); with ``sizes``, each job's servers evenly
      interleaved (job ``j``'s ``k``-th server at position ``(k + 1/2) / S_j`` of the
      cluster, ties in job order: equal sizes give the round robin);
    * ``"random"``: a seeded random permutation of the servers (a fragmented cluster),
      cut into the jobs in order.

    Args:
      n_servers: servers of the cluster.
      n_jobs: equal jobs (ignored with ``sizes``, which must then have ``n_jobs``
        entries if both are given).
      sizes: servers per job, each at least 2, summing to ``n_servers`` (jobs of
        different sizes).

    Raises:
      ValueError: ``n_jobs`` not dividing the servers into jobs of at least two servers
        (a one-server job has no network traffic), ``sizes`` that do not, or an unknown
        placement.
    """
    n = int(n_servers)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: must be one of {PLACEMENTS}; got {placement!r}")
    if sizes is not None:
        sz = [int(x) for x in sizes]
        if (not sz or any(x < 2 for x in sz) or sum(sz) != n
                or (n_jobs is not None and int(n_jobs) != len(sz))):
            raise ValueError(f"sizes: servers per job must each be >= 2 and sum to the {n} "
                             f"servers; got {list(sizes)!r}")
        if len(set(sz)) > 1:
            cut = np.cumsum(sz)[:-1]
            if placement == "packed":
                return np.split(np.arange(n), cut)
            if placement == "random":
                return np.split(np.random.default_rng(seed).permutation(n), cut)
            pos = np.concatenate([(np.arange(x) + 0.5) / x for x in sz])
            owner = np.repeat(np.arange(len(sz)), sz)
            # cluster server i goes to the job of the i-th position (ties in job order)
            job_of = owner[np.lexsort((owner, pos))]
            return [np.flatnonzero(job_of == j) for j in range(len(sz))]
        n_jobs = len(sz)
    J = int(n_jobs) if n_jobs is not None else 0
    if J < 1 or n % J or n // J < 2:
        raise ValueError(f"n_jobs: {n_jobs!r} must divide the {n} servers into jobs of at "
                         f"least 2 servers")
    S = n // J
    if placement == "packed":
        return np.arange(n).reshape(J, S)
    if placement == "spread":
        return np.arange(n).reshape(S, J).T.copy()
    return np.random.default_rng(seed).permutation(n).reshape(J, S)


def place_jobs(steps, servers, *, placement: str | None = None) -> StepFlows:
    """Several jobs' steps (:func:`step_flows`, one per job, each on its own servers
    ``0 .. S_j - 1``) as one cluster's traffic: job ``j``'s server ``s`` becomes cluster
    server ``servers[j][s]`` (:func:`job_servers`), its NICs, ranks and dependencies
    renumbered; flows in job order.  The jobs run their steps at once.

    Jobs of one plan (equal shares) keep the scalar fields.  Jobs of different plans
    (different sizes or models: other data-parallel degrees, slice counts, compute
    times, collective calls) keep
    theirs in :attr:`StepFlows.job_steps`: each job's flows carry one slice of *its*
    step, and since every job's slice is the same line-rate time (``slice_time`` of
    :func:`step_flows`, up to rounding to whole slices), one slice of each job meets one
    of every other's -- an assumption, exact when the slices are equally long.

    Raises:
      ValueError: shapes that do not match, a server used twice.
    """
    steps = list(steps)
    J = len(steps)
    if isinstance(servers, np.ndarray) and servers.ndim == 2:
        rows = list(servers.astype(np.int64))
    else:
        rows = [np.asarray(r, np.int64).reshape(-1) for r in servers]
    if J < 1 or len(rows) != J:
        raise ValueError(f"servers: expected one server list per job ({J}); got "
                         f"{len(rows)}")
    g = steps[0].gpus_per_server
    bad = [j for j, st in enumerate(steps)
           if st.gpus_per_server != g or st.n_gpus != rows[j].size * g]
    if bad:
        raise ValueError(f"steps: job {bad[0]} must run on {rows[bad[0]].size} servers of "
                         f"{g} GPUs")
    n_srv = sum(r.size for r in rows)
    if sorted(np.concatenate(rows).tolist()) != list(range(n_srv)):
        raise ValueError(f"servers: must use each of the {n_srv} servers once")
    if J == 1 and np.array_equal(rows[0], np.arange(rows[0].size)):
        return steps[0]
    one_plan = all(st.info == steps[0].info and st.slices == steps[0].slices
                   and st.compute_time == steps[0].compute_time
                   and st.n_gpus == steps[0].n_gpus for st in steps)
    gid = lambda j, x: rows[j][np.asarray(x) // g] * g + np.asarray(x) % g  # noqa
    cat = lambda f: np.concatenate([f(j, st) for j, st in enumerate(steps)])  # noqa
    off = np.cumsum([0] + [st.n_flows for st in steps])
    width = max(st.deps.shape[1] for st in steps)

    def deps(j, st):
        d = np.full((st.n_flows, width), -1, np.int64)
        d[:, :st.deps.shape[1]] = np.where(st.deps >= 0, st.deps + off[j], -1)
        return d
    server_job = np.empty(n_srv, np.int32)
    for j, r in enumerate(rows):
        server_job[r] = j
    info = dict(steps[0].info, jobs=J, placement=placement)
    job_steps = None if one_plan else tuple(
        dict(gpus=int(st.n_gpus), slices=int(st.slices), compute_time=float(st.compute_time),
             tokens_per_step=float(st.tokens_per_step), info=st.info) for st in steps)
    if job_steps is not None:
        info["job_gpus"] = [int(st.n_gpus) for st in steps]
        info["job_models"] = [st.info.get("model") for st in steps]
    return StepFlows(src=cat(lambda j, st: gid(j, st.src)).astype(np.int32),
                     dst=cat(lambda j, st: gid(j, st.dst)).astype(np.int32),
                     src_rank=cat(lambda j, st: gid(j, st.src_rank)).astype(np.int32),
                     dst_rank=cat(lambda j, st: gid(j, st.dst_rank)).astype(np.int32),
                     size=cat(lambda j, st: st.size), deps=cat(deps).astype(np.int32),
                     phase=cat(lambda j, st: st.phase), rail=cat(lambda j, st: st.rail),
                     n_gpus=n_srv * g, gpus_per_server=g, slices=steps[0].slices,
                     compute_time=steps[0].compute_time,
                     tokens_per_step=float(sum(st.tokens_per_step for st in steps)),
                     info=info, server_job=server_job, job_steps=job_steps)


def add_background(step: StepFlows, load: float, nic_rate: float, *,
                   size_cdf=DEFAULT_BACKGROUND_CDF, window: float | None = None,
                   seed: int = 0) -> StepFlows:
    """``step`` with open-loop background traffic sharing its fabric (phase
    :data:`BACKGROUND`, appended after the step's flows).

    The background is Poisson traffic between servers
    (:func:`fabric_jax.workloads.poisson_background` over the servers: uniform random
    destination server, flow sizes from ``size_cdf``, arrivals over ``[0, window]``),
    and each server-to-server flow runs on **every rail**, one flow of the sampled size
    per rail between the two servers' NICs of that rail: each NIC then offers ``load``
    times its line rate on average.  Storage, checkpoint and data-loading traffic on a
    converged back-end fabric is striped over a server's NICs in the same way; the
    assumption that every rail carries the same background (an assumption, named here)
    is what keeps the rail reduction exact (:func:`~fabric_jax.scale.scale_point`:
    every rail carries the same flows); other placements of background traffic would
    give each rail its own sample.

    Background flows have no dependencies and count for no job: the step's figures
    (:func:`~fabric_jax.scale.point_metrics`) leave them out and report their flow
    completion times apart.

    Args:
      step: the step's flows (:func:`step_flows`, :func:`place_jobs`).
      load: offered load per NIC, fraction of ``nic_rate``, in ``[0, 1)`` (0: ``step``
        unchanged).
      nic_rate: NIC line rate, bytes/s.
      size_cdf: :class:`~fabric_jax.workloads.FlowSizeCDF` or built-in name (default
        :data:`DEFAULT_BACKGROUND_CDF`, the DCTCP web-search distribution).
      window: seconds over which flows arrive (default twice the slice's line-rate
        communication time, ``2 t_comm / k``: the background covers the step's slice
        while its efficiency stays above one half).
      seed: seed of the arrivals, pairs and sizes.

    Raises:
      ValueError: ``load`` outside ``[0, 1)``, a non-positive ``window`` or
        ``nic_rate``, an unknown ``size_cdf``, or a ``step`` that has background already.
    """
    from ..workloads.cdf import FlowSizeCDF
    from ..workloads.traffic import poisson_background
    try:
        load = float(load)
    except (TypeError, ValueError):
        raise ValueError(f"load: expected a number in [0, 1), got {load!r}") from None
    if not (np.isfinite(load) and 0.0 <= load < 1.0):
        raise ValueError(f"load: the background's offered load per NIC must lie in [0, 1) "
                         f"of the line rate; got {load!r}")
    if np.any(step.phase == BACKGROUND):
        raise ValueError("step: already has background flows; add them once")
    if not (np.isfinite(nic_rate) and nic_rate > 0):
        raise ValueError(f"nic_rate: must be > 0 bytes/s; got {nic_rate!r}")
    size_cdf = FlowSizeCDF.resolve(size_cdf, "size_cdf")
    if load == 0.0:
        return step
    if window is None:
        window = 2.0 * float(step.info["line_rate_comm_time"]) / step.slices
    if not (np.isfinite(window) and window > 0):
        raise ValueError(f"window: must be > 0 seconds; got {window!r}")
    g = step.gpus_per_server
    n_srv = step.n_gpus // g
    w = poisson_background(n_srv, load, float(nic_rate), size_cdf, float(window), seed)
    n_bg = int(w.src.size)
    rail = np.repeat(np.arange(g), n_bg)              # rail-major: each rail, same order
    src = np.tile(w.src.astype(np.int64), g) * g + rail
    dst = np.tile(w.dst.astype(np.int64), g) * g + rail
    cat = lambda a, b, dt: np.concatenate([np.asarray(a), b]).astype(dt)  # noqa: E731
    info = dict(step.info, background=dict(load=load, size_cdf=size_cdf.name or "custom",
                                           window=float(window), server_flows=n_bg,
                                           flows=n_bg * g, seed=int(seed)))
    return dataclasses.replace(
        step, src=cat(step.src, src, np.int32), dst=cat(step.dst, dst, np.int32),
        src_rank=cat(step.src_rank, src, np.int32), dst_rank=cat(step.dst_rank, dst, np.int32),
        size=cat(step.size, np.tile(w.size, g), np.float64),
        deps=np.concatenate([step.deps, np.full((n_bg * g, step.deps.shape[1]), -1,
                                                np.int32)]).astype(np.int32),
        phase=cat(step.phase, np.full(n_bg * g, BACKGROUND), np.int32),
        rail=cat(step.rail, rail, np.int32),
        arrival=cat(step.arrivals, np.tile(w.arrival, g), np.float64), info=info)
