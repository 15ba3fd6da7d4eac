"""Training steps: per-rank compute followed (or overlapped) by collectives.

A synchronous training step on rank ``x`` is: compute for ``C_k(x)`` seconds, then the
step's communication *phases* — each phase a collective ``Workload`` built on (a subset
of) the job's hosts, e.g. the data-parallel all-reduce (one ring per rail), the MoE
all-to-all, pipeline sends.  ``training_step`` replicates the phases ``n_steps`` times and
wires them to compute with ``arrival``, ``deps`` and ``delay``:

* **Overlap.** ``overlap = f`` in [0, 1] means the communication of step ``k`` may start
  once ``(1 - f)`` of the compute is done: ``f = 0`` serialises communication after
  compute, ``f = 1`` lets it start with the compute (gradient bucketing in DDP/FSDP
  overlaps the backward pass, typically ``f ~ 0.3-0.6``).  The step ends on rank ``x``
  at ``max(compute end, communication end)``.
* **Phases.** With ``serialize=True`` phase ``c+1`` on rank ``x`` starts when ``x``'s
  part of phase ``c`` has ended (collectives issued on one stream); with ``False`` every
  phase is gated only by the compute (separate communicators/streams).
* **Rank end of a phase.** ``x``'s part of a collective ends when its *sink* flows into
  ``x`` (flows no other flow depends on) have finished: the last ring or
  halving-doubling step into ``x``, every all-to-all flow into ``x``, the final
  broadcast into a tree leaf.  A rank with no incoming sink (a tree's interior node)
  uses its last flow in, in row order; a rank that only sends, its last send.  For the
  double tree this takes the tree in which ``x`` is a leaf, ignoring the concurrent,
  symmetric broadcast of the other tree (an approximation that keeps ``deps`` narrow).
* **Next step.** Step ``k+1`` on ``x`` starts when ``x``'s part of step ``k`` has ended
  (no global barrier: a rank proceeds once it holds the reduced gradients).

Encoding and exactness: in step 0 every flow sent by ``x`` has ``arrival = t0 +
(1 - f) C_0(x)``, which is exact.  In later steps a collective's opening flows from ``x``
(those with no deps) wait for ``x``'s previous-step end plus ``delay = (1 - f) C_k(x)``,
which is exact; ``x``'s forwarding flows (ring steps > 0, tree interior nodes) wait for
their data and for ``x``'s previous-step end but not for ``x``'s compute, so a straggler's
own compute is enforced only on its opening sends after step 0.  The next step is gated
on the communication end only, so with ``f > 0`` and communication shorter than
``f C`` the model starts the next step early (it is exact in the network-bound regime
``comm >= f C`` that the emulator is for).  ``StepSpec`` recovers step times from flow
finish times with ``max(compute end, comm end)``.

From a model: :func:`model_training_step` derives the compute time and the DP / PP /
EP phases of a transformer's step from a :class:`~fabric_jax.workloads.model.ModelConfig`
and a :class:`~fabric_jax.workloads.model.ParallelPlan` (formulas and sources in
:mod:`fabric_jax.workloads.model`; the collective flows from the one step builder,
:func:`fabric_jax.workloads.step_collectives`, with uniform all-to-alls and one ring
all-reduce per data-parallel group) and calls :func:`training_step` with them.

Metrics: :class:`StepSpec` carries per-rank compute times, tokens per step and the group
names of each step so that step time, GPU utilisation (compute / step time) and tokens/s
can be computed from the simulator's flow finish times.

Units: bytes, seconds.

Example:
    >>> import numpy as np
    >>> from fabric_jax.workloads import ring_all_reduce, training_step
    >>> hosts = np.arange(8)
    >>> w, spec = training_step(hosts, 0.1, [ring_all_reduce(hosts, 1e9)], overlap=0.5,
    ...                         n_steps=2, tokens_per_step=1e6)
    >>> w.n_flows, spec.n_steps
    (224, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from fabric_jax.workloads.flows import Workload, check_hosts, concat
from fabric_jax.workloads.model import ParallelPlan, comm_bytes, get_gpu, get_model
from fabric_jax.workloads.phases import drop_empty_groups, step_collectives, step_compute

__all__ = ["StepSpec", "training_step", "megatron_groups", "ModelStep",
           "model_training_step"]


@dataclasses.dataclass(frozen=True, eq=False)
class StepSpec:
    """What metrics need to turn flow finish times into step time and utilisation.

    Attributes:
        job: job name (matches ``Workload.job_names``).
        hosts: int32 [ranks] host of each rank.
        compute_time: float64 [steps, ranks] compute seconds per step and rank.
        overlap: fraction of compute that communication may overlap.
        tokens_per_step: tokens (or samples) processed per step by the whole job.
        start: arrival time of step 0, seconds.
        step_group_names: per step, the names of its collective groups.
    """

    job: str
    hosts: np.ndarray
    compute_time: np.ndarray
    overlap: float
    tokens_per_step: float
    start: float
    step_group_names: tuple[tuple[str, ...], ...]

    @property
    def n_steps(self) -> int:
        """Number of steps."""
        return int(self.compute_time.shape[0])

    @property
    def ideal_step_time(self) -> np.ndarray:
        """float64 [steps] step time with an infinitely fast network (max compute)."""
        return self.compute_time.max(axis=1)

    def flow_steps(self, workload: Workload) -> np.ndarray:
        """int32 [flows] step index of each flow of this job in ``workload`` (-1 otherwise).

        Works on the workload returned by :func:`training_step` and on any concatenation
        containing it (flows are matched by job and group names).
        """
        lookup = {name: k for k, names in enumerate(self.step_group_names) for name in names}
        group_step = np.array([lookup.get(name, -1) for name in workload.group_names] + [-1],
                              np.int32)
        mine = np.array([name == self.job for name in workload.job_names] + [False])
        job_ok = mine[workload.job] if workload.n_flows else np.zeros(0, bool)
        steps = group_step[workload.group]  # group -1 -> last entry (-1)
        return np.where(job_ok, steps, -1).astype(np.int32)

    def step_end_times(self, workload: Workload, finish) -> np.ndarray:
        """float64 [steps] end time of each step given flow finish times.

        Step ``k`` ends at ``max(last finish of its flows, end of step k-1 + max_x
        C_k(x))`` (the compute of the slowest rank; step -1 ends at ``start``).
        """
        finish = np.asarray(finish, np.float64)
        if finish.shape != (workload.n_flows,):
            raise ValueError(f"finish: expected shape ({workload.n_flows},) (one finish "
                             f"time per flow), got {finish.shape}")
        steps = self.flow_steps(workload)
        comm_end = np.full(self.n_steps, -np.inf)
        ok = steps >= 0
        np.maximum.at(comm_end, steps[ok], finish[ok])
        ends = np.empty(self.n_steps)
        prev = self.start
        for k in range(self.n_steps):
            prev = max(comm_end[k], prev + self.ideal_step_time[k])
            ends[k] = prev
        return ends

    def step_times(self, workload: Workload, finish) -> np.ndarray:
        """float64 [steps] duration of each step, seconds."""
        ends = self.step_end_times(workload, finish)
        return np.diff(np.concatenate([[self.start], ends]))

    def gpu_utilization(self, workload: Workload, finish) -> float:
        """Mean over ranks of compute time / elapsed time over all steps, in [0, 1]."""
        elapsed = self.step_end_times(workload, finish)[-1] - self.start
        return float(self.compute_time.sum(axis=0).mean() / elapsed) if elapsed > 0 else 1.0

    def tokens_per_second(self, workload: Workload, finish) -> float:
        """Job throughput, tokens per second."""
        elapsed = self.step_end_times(workload, finish)[-1] - self.start
        return float(self.n_steps * self.tokens_per_step / elapsed)


def megatron_groups(hosts, tp: int = 1, pp: int = 1) -> dict[str, np.ndarray]:
    """Split a job's ranks into tensor-, data- and pipeline-parallel groups.

    Megatron-LM rank order: tensor-parallel fastest, then data-parallel, then pipeline
    (Narayanan et al., SC 2021): ``rank = (p * dp + d) * tp + t``.

    Args:
        hosts: int [ranks] placement, ``ranks`` divisible by ``tp * pp``.
        tp: tensor-parallel degree (usually the GPUs of one server, kept off the network).
        pp: pipeline-parallel degree.

    Returns:
        ``{"tp": [pp*dp, tp], "dp": [pp*tp, dp], "pp": [dp*tp, pp]}`` host arrays; row
        ``i`` of each is one group (e.g. one data-parallel ring).
    """
    hosts = check_hosts(hosts, min_ranks=1)
    tp, pp = int(tp), int(pp)
    if tp < 1 or pp < 1 or hosts.size % (tp * pp):
        raise ValueError(f"tp/pp: {hosts.size} ranks are not divisible by tp*pp = {tp * pp}")
    dp = hosts.size // (tp * pp)
    grid = hosts.reshape(pp, dp, tp)
    return {
        "tp": grid.reshape(pp * dp, tp),
        "dp": grid.transpose(0, 2, 1).reshape(pp * tp, dp),
        "pp": grid.transpose(1, 2, 0).reshape(dp * tp, pp),
    }


def _rank_end_flows(w: Workload, src_rank, dst_rank, n_ranks) -> list[np.ndarray]:
    """Per rank, the flows that end its part of ``w`` (see module docstring)."""
    n = w.n_flows
    is_sink = np.ones(n, bool)
    is_sink[w.deps[w.deps >= 0]] = False
    idx = np.arange(n)
    last_in = np.full(n_ranks, -1, np.int64)
    np.maximum.at(last_in, dst_rank, idx)
    last_out = np.full(n_ranks, -1, np.int64)
    np.maximum.at(last_out, src_rank, idx)
    sink_in = idx[is_sink]
    order = np.argsort(dst_rank[sink_in], kind="stable")
    sink_in = sink_in[order]
    bounds = np.searchsorted(dst_rank[sink_in], np.arange(n_ranks + 1))
    out = []
    for x in range(n_ranks):
        mine = sink_in[bounds[x]:bounds[x + 1]]
        if mine.size == 0:
            mine = last_in[x:x + 1] if last_in[x] >= 0 else last_out[x:x + 1]
            mine = mine[mine >= 0]
        out.append(mine)
    return out


def _table(rows: Sequence[np.ndarray]) -> np.ndarray:
    width = max((r.size for r in rows), default=0)
    table = np.full((len(rows), width), -1, np.int64)
    for x, r in enumerate(rows):
        table[x, :r.size] = r
    return table


def _phase_gates(ends, offsets, n_ranks, serialize):
    """Per phase ``c`` and rank: the flows that gate it within the step (``serialize``:
    the rank's end of the previous phase) and from the previous step, as template flow
    indices (previous-step ones are offset by ``(k-1) * per_step`` later), and whether
    the rank's compute gates it."""
    same_rows, prev_rows, compute_gate = [], [], []
    for c in range(len(ends)):
        same, prev, gated = [], [], np.zeros(n_ranks, bool)
        for x in range(n_ranks):
            earlier = [e for e in range(c) if ends[e][x].size] if serialize else []
            if earlier:
                e = earlier[-1]
                same.append(ends[e][x] + offsets[e])
                prev.append(np.zeros(0, np.int64))
            else:
                gated[x] = True
                same.append(np.zeros(0, np.int64))
                later = [e for e in range(len(ends)) if ends[e][x].size]
                if serialize:
                    later = later[-1:]
                prev.append(np.concatenate([ends[e][x] + offsets[e] for e in later])
                            if later else np.zeros(0, np.int64))
        same_rows.append(_table(same))
        prev_rows.append(_table(prev))
        compute_gate.append(gated)
    return same_rows, prev_rows, compute_gate


def _check_step_inputs(compute_time, overlap, arrival, n_steps, n_ranks):
    """``compute_time`` as [n_steps, ranks] seconds, ``overlap`` and ``arrival`` checked."""
    n_steps = int(n_steps)
    if n_steps < 1:
        raise ValueError(f"n_steps: must be >= 1, got {n_steps}")
    comp = np.asarray(compute_time, np.float64)
    if comp.ndim == 0 or comp.shape == (n_ranks,):
        comp = np.broadcast_to(comp, (n_steps, n_ranks)).copy()
    elif comp.shape != (n_steps, n_ranks):
        raise ValueError(f"compute_time: expected a scalar, ({n_ranks},) or ({n_steps}, "
                         f"{n_ranks}), got {comp.shape}")
    if not np.all(np.isfinite(comp)) or np.any(comp < 0):
        raise ValueError("compute_time: seconds must be finite and >= 0")
    overlap = float(overlap)
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap: must lie in [0, 1], got {overlap}")
    arrival = float(arrival)
    if not np.isfinite(arrival) or arrival < 0:
        raise ValueError(f"arrival: must be finite and >= 0 seconds, got {arrival}")
    return comp, overlap, arrival


def _step_deps(internal, same, prev, n_steps):
    """The ``[n_steps, per_step, width]`` deps of every step from one step's ``internal``
    deps, its within-step gates ``same`` and its previous-step gates ``prev``."""
    per_step = internal.shape[0]
    internal = internal.astype(np.int64)
    # Step-0 table in absolute indices of step 0; later steps in those of step 1, then
    # shifted by (k - 1) * per_step (prev-step gates point into step 0 = k - 1).
    dep0 = _compact(np.concatenate([internal, same], axis=1))
    dep1 = _compact(np.concatenate([np.where(internal >= 0, internal + per_step, -1),
                                    np.where(same >= 0, same + per_step, -1), prev], axis=1))
    width = max(dep0.shape[1], dep1.shape[1] if n_steps > 1 else 0)
    deps = np.full((n_steps, per_step, width), -1, np.int32)
    deps[0, :, :dep0.shape[1]] = dep0
    if n_steps > 1:
        shift = (np.arange(n_steps - 1) * per_step)[:, None, None]
        deps[1:, :, :dep1.shape[1]] = np.where(dep1[None] >= 0, dep1[None] + shift, -1)
    return deps


def _check_phases(collectives) -> list[Workload]:
    """The phases of one step as a list of non-empty, validated ``Workload``s."""
    if isinstance(collectives, Workload):
        collectives = [collectives]
    phases = [w for w in collectives]
    for c, w in enumerate(phases):
        if not isinstance(w, Workload):
            raise ValueError(f"collectives[{c}]: expected a Workload, got {type(w).__name__}")
        if w.n_flows == 0:
            raise ValueError(f"collectives[{c}]: has no flows")
        w.validate()
    return phases


def _phase_ranks(phases: list[Workload], hosts: np.ndarray):
    """``(src_r, dst_r)``: per phase, the job rank (index into ``hosts``) of each flow's
    source and destination; a host outside ``hosts`` is an error."""
    rank_of = np.full(int(hosts.max()) + 1, -1, np.int64)
    rank_of[hosts] = np.arange(hosts.size)

    def ranks(a, c, what):
        if np.any(a > hosts.max()) or np.any(rank_of[np.minimum(a, hosts.max())] < 0):
            raise ValueError(f"collectives[{c}]: {what} uses a host outside `hosts`; build "
                             "the collective on the job's own hosts")
        return rank_of[a]

    src_r = [ranks(w.src, c, "src") for c, w in enumerate(phases)]
    dst_r = [ranks(w.dst, c, "dst") for c, w in enumerate(phases)]
    return src_r, dst_r


def _tile_steps(template: Workload, deps: np.ndarray, delay: np.ndarray,
                flow_arrival: np.ndarray, job: str):
    """``(workload, step_group_names)``: ``template`` (the flows of one step) repeated
    for each of the ``delay.shape[0]`` steps, with the given ``[steps, flows, k]`` deps
    and ``[steps, flows]`` delays and arrivals, and groups named
    ``"{job}/step{k}/{collective}"``."""
    n_steps, per_step = delay.shape
    n_groups = template.n_groups
    names = _unique(template.group_names)
    step_group_names = tuple(tuple(f"{job}/step{k}/{name}" for name in names)
                             for k in range(n_steps))
    group = np.where(template.group >= 0,
                     template.group[None] + (np.arange(n_steps) * n_groups)[:, None], -1)
    out = Workload(
        src=np.tile(template.src, n_steps), dst=np.tile(template.dst, n_steps),
        size=np.tile(template.size, n_steps), arrival=flow_arrival.reshape(-1),
        deps=deps.reshape(n_steps * per_step, deps.shape[2]), delay=delay.reshape(-1),
        job=np.zeros(n_steps * per_step, np.int32), group=group.reshape(-1),
        group_names=sum(step_group_names, ()), job_names=(job,),
        group_bytes=np.tile(template.group_bytes, n_steps),
        group_kind=template.group_kind * n_steps,
        group_ranks=np.tile(template.group_ranks, n_steps),
    )
    return out, step_group_names


def training_step(hosts, compute_time, collectives: Sequence[Workload], *,
                  overlap: float = 0.0, n_steps: int = 1, serialize: bool = True,
                  tokens_per_step: float = 0.0, job: str = "train",
                  arrival: float = 0.0) -> tuple[Workload, StepSpec]:
    """Build ``n_steps`` training steps of one job (model in the module docstring).

    Args:
        hosts: int [ranks] the job's placement.
        compute_time: seconds of compute per step: scalar, [ranks] (per-rank, e.g. a
            straggler) or [n_steps, ranks] (per step, e.g. jitter).
        collectives: the communication phases of one step, in issue order; each a
            ``Workload`` from the builders (may hold several groups, e.g. one ring per
            rail), using only ``hosts``.
        overlap: fraction ``f`` of the compute that communication may overlap, [0, 1].
        n_steps: number of consecutive steps.
        serialize: phases run one after another on each rank (``True``) or concurrently.
        tokens_per_step: tokens processed per step (for tokens/s).
        job: job name given to every flow.
        arrival: start of step 0, seconds.

    Returns:
        ``(workload, spec)``: the flows of all steps (groups named
        ``"{job}/step{k}/{collective}"``) and the :class:`StepSpec` for metrics.
    """
    hosts = check_hosts(hosts, min_ranks=1)
    n_ranks = hosts.size
    comp, overlap, arrival = _check_step_inputs(compute_time, overlap, arrival, n_steps,
                                                n_ranks)
    n_steps = comp.shape[0]
    phases = _check_phases(collectives)
    src_r, dst_r = _phase_ranks(phases, hosts)
    ends = [_rank_end_flows(w, s, d, n_ranks) for w, s, d in zip(phases, src_r, dst_r)]
    offsets = np.cumsum([0] + [w.n_flows for w in phases])
    per_step = int(offsets[-1])
    same_rows, prev_rows, compute_gate = _phase_gates(ends, offsets, n_ranks, serialize)
    lead = 1.0 - overlap
    template = concat(*phases)                     # one step; deps/groups offset
    xs = np.concatenate(src_r)                     # sending rank of each template flow
    is_root = ~np.any(template.deps >= 0, axis=1)
    same = np.full((per_step, 0), -1, np.int64)
    prev = np.full((per_step, 0), -1, np.int64)
    opening = np.zeros(per_step, bool)
    if per_step:
        same = _stack_rows([same_rows[c][src_r[c]] for c in range(len(phases))])
        prev = _stack_rows([prev_rows[c][src_r[c]] for c in range(len(phases))])
        opening = is_root & np.concatenate([compute_gate[c][src_r[c]]
                                            for c in range(len(phases))])
    # Opening flows wait for the full gate (exact); forwarding flows only for its last
    # flow in row order, which keeps the padded deps table narrow.
    def narrow(table):
        if table.shape[1] == 0:
            return table
        last = table.max(axis=1, keepdims=True)
        return np.where(is_root[:, None], table, np.pad(
            last, ((0, 0), (0, table.shape[1] - 1)), constant_values=-1))

    same, prev = narrow(same), narrow(prev)
    deps = _step_deps(template.deps, same, prev, n_steps)
    delay = np.broadcast_to(template.delay, (n_steps, per_step)).copy()
    delay[1:] += np.where(opening, lead * comp[1:, xs], 0.0)
    flow_arrival = np.full((n_steps, per_step), arrival)
    # Exact: nothing rank x sends in step 0 precedes (1 - f) of its compute.
    flow_arrival[0] += lead * comp[0, xs]
    out, step_group_names = _tile_steps(template, deps, delay, flow_arrival, job)
    spec = StepSpec(job=job, hosts=hosts, compute_time=comp, overlap=overlap,
                    tokens_per_step=float(tokens_per_step), start=arrival,
                    step_group_names=step_group_names)
    return out, spec


def _stack_rows(tables: Sequence[np.ndarray]) -> np.ndarray:
    width = max(t.shape[1] for t in tables)
    return np.concatenate([np.pad(t, ((0, 0), (0, width - t.shape[1])), constant_values=-1)
                           for t in tables])


def _compact(deps: np.ndarray) -> np.ndarray:
    """Drop duplicate and padding entries per row; pad to the widest row."""
    if deps.shape[1] == 0:
        return deps.astype(np.int32)
    srt = np.sort(deps, axis=1)
    dup = np.zeros_like(srt, bool)
    dup[:, 1:] = srt[:, 1:] == srt[:, :-1]
    srt = np.where(dup, -1, srt)
    srt = -np.sort(-srt, axis=1)  # valid (>= 0) entries first, descending
    width = int((srt >= 0).sum(axis=1).max()) if srt.size else 0
    return srt[:, :width].astype(np.int32)


def _unique(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            out.append(f"{name}#{seen[name]}")
        else:
            seen[name] = 0
            out.append(name)
    return out


# ------------------------------------------------- steps of a transformer model
@dataclasses.dataclass(frozen=True, eq=False)
class ModelStep:
    """A model's training steps as flows (from :func:`model_training_step`).

    Attributes:
      workload: the network flows of all steps (``None`` if nothing crosses the network).
      spec: :class:`StepSpec` for step times, utilisation and tokens/s (``None`` with
        ``workload``).
      compute_time: seconds per step on every rank before network communication: math
        at ``achievable_fraction`` of peak, the pipeline bubble and the TP collectives
        over NVLink.
      info: every input and derived quantity (FLOPs, times, bytes), JSON-friendly.
    """

    workload: Workload | None
    spec: StepSpec | None
    compute_time: float
    info: dict

    def step_times(self, finish) -> np.ndarray:
        """float64 [steps] step durations given the flows' finish times."""
        if self.spec is None:
            return np.full(self.info["n_steps"], self.compute_time)
        return self.spec.step_times(self.workload, finish)


def model_training_step(model, plan: ParallelPlan, gpu="h100_sxm", *, hosts=None,
                        host_server=None, n_steps: int = 1, sharp: bool = False,
                        job: str = "train") -> ModelStep:
    """Training steps of ``model`` under ``plan`` as network flows plus compute time.

    Args:
      model: :class:`ModelConfig` or a name in :data:`MODELS`.
      plan: the :class:`ParallelPlan` (``n_gpus = tp pp dp`` ranks).
      gpu: :class:`GPU` or a name in :data:`GPUS`.
      hosts: int [n_gpus] NIC (host index) of each rank; default ``arange(n_gpus)``
        (server-major numbering: rank ``r`` on server ``r // gpus_per_server``, rail
        ``r % gpus_per_server``, the rail-aligned placement of
        :func:`fabric_jax.workloads.place_job`).
      host_server: int [n_hosts] server of each host (``topology.host_server``); default
        ``host // gpus_per_server``.  Flows between hosts of one server are dropped
        (NVLink).
      n_steps: consecutive steps.
      sharp: in-network reduction for the DP all-reduces (InfiniBand SHARP).
      job: job name of the flows.

    The collectives are :func:`fabric_jax.workloads.step_collectives` with a uniform
    expert-parallel all-to-all and one steady-state ring (or SHARP) all-reduce over each
    data-parallel and expert-data-parallel group (``dp="all_reduce"``), ranks placed on
    ``hosts``; phase 1 of the step is the all-to-all with the pipeline sends, phase 2
    the all-reduces (:func:`training_step`, serialised).

    Returns:
      :class:`ModelStep`.  Flow groups are named ``"{job}/step{k}/dp_g{row}"`` etc.
    """
    model = get_model(model)
    gpu = get_gpu(gpu)
    if not isinstance(plan, ParallelPlan):
        raise ValueError(f"plan: expected a ParallelPlan; got {type(plan).__name__}")
    plan.check(model)
    n = plan.n_gpus
    hosts = np.arange(n, dtype=np.int32) if hosts is None else check_hosts(hosts, min_ranks=1)
    if hosts.size != n:
        raise ValueError(f"hosts: expected {n} hosts (tp*pp*dp), got {hosts.size}")
    if host_server is None:
        server = np.arange(int(hosts.max()) + 1) // plan.gpus_per_server
    else:
        server = np.asarray(host_server, np.int64)
        if server.ndim != 1 or server.size <= hosts.max():
            raise ValueError("host_server: expected [n_hosts] server ids covering every "
                             "host of `hosts`")
    comp = step_compute(model, plan, gpu)
    m, flops, math_time = comp["microbatches"], comp["step_flops"], comp["math_time"]
    bubble, tp_time, compute = comp["bubble"], comp["tp_time"], comp["compute_time"]
    cb = comm_bytes(model, plan)
    # the step's collectives at rank level, placed on ``hosts``; flows inside a server
    # (NVLink) and the collective instances left empty by that are dropped
    w = step_collectives(model, plan, dp="all_reduce", sharp=sharp, pp_order="lane", job=job)
    w = dataclasses.replace(w, src=hosts[w.src], dst=hosts[w.dst])
    w = w.subset(server[w.src] != server[w.dst])
    phases = [drop_empty_groups(w.subset(np.isin(w.columns["phase"], ids)))
              for ids in ((0, 1), (5,))]
    phases = [p for p in phases if p.n_flows]
    info = dict(
        model=dataclasses.asdict(model), plan=dataclasses.asdict(plan),
        gpu=dataclasses.asdict(gpu), n_gpus=n, n_steps=int(n_steps), sharp=bool(sharp),
        n_params=model.n_params, active_params=model.active_params,
        tokens_per_step=model.tokens_per_step, n_microbatches=m, step_flops=flops,
        math_time=math_time, pipeline_bubble_fraction=bubble, tp_nvlink_time=tp_time,
        compute_time=compute, **cb)
    if not phases:
        return ModelStep(None, None, compute, info)
    net_hosts = np.unique(np.concatenate([np.concatenate([p.src, p.dst]) for p in phases]))
    work, spec = training_step(net_hosts, compute, phases, overlap=plan.overlap,
                               n_steps=n_steps, tokens_per_step=model.tokens_per_step,
                               job=job)
    info["network_bytes_per_step"] = float(sum(p.total_bytes for p in phases))
    return ModelStep(work, spec, compute, info)
