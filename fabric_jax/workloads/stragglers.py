"""Stragglers: a slow GPU or a slow NIC, and how far the slowdown spreads.

A synchronous job advances at the pace of its slowest rank.  Two kinds of straggler
(Lin et al., "Understanding Stragglers in Large Model Training Using What-if
Analysis", OSDI 2025; Wu et al., "FALCON", 2024):

* **compute** (a slow or throttled GPU): rank ``x`` needs ``factor`` times longer to
  compute, so it enters each collective late.  In a workload this is the ``delay`` of
  its flows (compute between a dependency and the send) scaled by ``factor``, plus the
  compute that precedes its first sends (their ``arrival`` offset from the job start),
  also scaled: :func:`slow_compute`.  For a training step built by
  :func:`~fabric_jax.workloads.training_step` this is *exactly* rebuilding the step
  with rank ``x``'s ``compute_time`` multiplied by ``factor`` (:func:`scale_compute`);
  :func:`slow_compute_spec` updates the :class:`~fabric_jax.workloads.StepSpec`
  likewise.
* **NIC** (a degraded link, a NIC that negotiated a lower speed): the capacity of
  host ``x``'s access links (both directions) divided by ``factor``:
  :func:`slow_nics` (a :class:`~fabric_jax.Topology`) or :func:`nic_capacity` (a
  capacity array, e.g. one row of a batched sweep).

The spread is measured by :func:`straggler_impact` against a run without stragglers:
per-rank finish times, the job's step time against the baseline, and the *blast
radius*: how many ranks finish later and the GPU time lost (every GPU of a
synchronous job is held until the step ends, so ``ranks * (T - T0)``).

Send order.  The collective builders give each flow the data dependency of its
algorithm only (a ring rank forwards what it has just received); if a rank falls
behind, several of its sends become ready at once and share its NIC (processor
sharing), which over-penalises a straggler's neighbours: in a ring of 6 a first send
late by one chunk time delays the collective by ~14 chunk times.  NCCL sends the
chunks of one channel in order, so :func:`in_order_sends` adds that FIFO order (each
flow also waits for the previous flow of the same ``(src, dst, group)``); with it a
ring meets the closed forms tested in ``tests/workloads/test_stragglers.py``: a NIC at ``B/2``
doubles the collective time (every step's bytes cross the slow NIC in turn:
``2 (n-1)/n * S / (B/2)``), and a first send late by ``d`` delays it by exactly ``d``.

Units: bytes, seconds, bytes/s.  Everything here runs on the host (NumPy).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabric_jax.topology import Topology, host_indices
from fabric_jax.workloads.flows import Workload
from fabric_jax.workloads.training import StepSpec

__all__ = [
    "in_order_sends", "slow_compute", "scale_compute", "slow_compute_spec",
    "host_links", "nic_capacity", "slow_nics", "StragglerImpact", "straggler_impact",
]


def _factor(factor, name="factor") -> float:
    try:
        f = float(factor)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {factor!r}") from None
    if not np.isfinite(f) or f <= 0:
        raise ValueError(f"{name}: must be finite and > 0 (1 = no slowdown, 2 = twice as "
                         f"slow), got {factor!r}")
    return f


def _hosts(hosts, name="hosts") -> np.ndarray:
    h = np.asarray(hosts).reshape(-1)
    if h.size and not np.issubdtype(h.dtype, np.integer):
        raise ValueError(f"{name}: expected integer host indices, got dtype {h.dtype}")
    h = h.astype(np.int64)
    if np.any(h < 0):
        raise ValueError(f"{name}: host indices must be >= 0")
    return h


# ------------------------------------------------------------------ send order
def in_order_sends(workload: Workload) -> Workload:
    """Make each flow also wait for the previous flow on the same channel.

    A channel is a ``(src, dst, group)`` triple; "previous" is row order (every builder
    emits flows in topological order).  Flows with ``group == -1`` (background traffic)
    are left alone.  For a ring all-reduce this is NCCL's in-order chunk pipeline: rank
    ``i`` sends step ``s + 1`` only after its step-``s`` send.  All-to-all (one flow per
    channel) is unchanged.

    Returns:
        A validated :class:`Workload` with one more ``deps`` column (``-1`` where a flow
        is first on its channel).

    Raises:
        ValueError: if the added order closes a cycle (flows not in topological order).
    """
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: expected a Workload, got {type(workload).__name__}")
    w = workload
    n = w.n_flows
    prev = np.full(n, -1, np.int64)
    grouped = np.flatnonzero(w.group >= 0)
    if grouped.size:
        key = np.stack([w.src[grouped], w.dst[grouped], w.group[grouped]])
        order = np.lexsort((grouped, key[2], key[1], key[0]))  # channel, then row order
        rows = grouped[order]
        k = key[:, order]
        same = np.all(k[:, 1:] == k[:, :-1], axis=0)
        prev[rows[1:][same]] = rows[:-1][same]
    deps = np.concatenate([w.deps, prev[:, None].astype(np.int32)], axis=1)
    return dataclasses.replace(w, deps=deps).validate()


# ------------------------------------------------------------------ compute
def slow_compute(workload: Workload, hosts, factor: float = 1.0, *, extra: float = 0.0,
                 start: float | None = None, job: str | None = None) -> Workload:
    """Slow GPUs: the compute of the ranks on ``hosts`` takes ``factor`` times longer.

    For every flow sent by one of ``hosts`` (of job ``job``, or of any job):
    ``delay *= factor`` (the compute between its dependencies and the send) and
    ``arrival = start + factor * (arrival - start) + extra`` (the compute before the
    job's first sends, counted from the job start, scaled; ``extra`` seconds more).

    On a :func:`~fabric_jax.workloads.training_step` workload (collectives without a
    ``delay`` of their own) the result equals the step rebuilt with
    :func:`scale_compute`.  On a bare collective (``delay = 0``, every arrival equal
    to ``start``) only ``extra`` has an effect: the rank enters late by ``extra``.

    Args:
        workload: the flows.
        hosts: int host index or [k] indices of the slow ranks.
        factor: compute slowdown, > 0 (1.5 = 50 % slower).
        extra: seconds added to the arrival of the slow ranks' flows, >= 0.
        start: the job start, seconds (default 0; pass ``spec.start`` for a training
            step built with ``arrival > 0``).
        job: restrict to this job's flows (by name).

    Returns:
        The modified :class:`Workload` (flows, deps and groups unchanged).
    """
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: expected a Workload, got {type(workload).__name__}")
    factor = _factor(factor)
    extra = float(extra)
    if not np.isfinite(extra) or extra < 0:
        raise ValueError(f"extra: must be finite and >= 0 seconds, got {extra}")
    w = workload
    mine = np.ones(w.n_flows, bool)
    if job is not None:
        if job not in w.job_names:
            raise ValueError(f"job: {job!r} is not one of {w.job_names}")
        mine = w.job == w.job_names.index(job)
    start = 0.0 if start is None else float(start)
    if not np.isfinite(start) or (mine.any() and start > w.arrival[mine].min()):
        raise ValueError(f"start: must be finite and <= the earliest arrival of the job's "
                         f"flows; got {start}")
    sel = mine & np.isin(w.src, _hosts(hosts))
    arrival = w.arrival.copy()
    delay = w.delay.copy()
    arrival[sel] = start + factor * (arrival[sel] - start) + extra
    delay[sel] = delay[sel] * factor
    return dataclasses.replace(w, arrival=arrival, delay=delay)


def scale_compute(compute_time, ranks, factor: float, *, n_ranks: int | None = None,
                  n_steps: int | None = None) -> np.ndarray:
    """``compute_time`` for :func:`training_step` with ``ranks`` ``factor`` times slower.

    Args:
        compute_time: scalar, [ranks] or [steps, ranks] seconds (as ``training_step``).
        ranks: int rank index or [k] indices (positions in the job's ``hosts``).
        factor: slowdown, > 0.
        n_ranks: number of ranks (needed when ``compute_time`` is a scalar).
        n_steps: if given, return [n_steps, ranks] (e.g. a straggler in some steps only:
            scale a per-step table yourself).

    Returns:
        float64 [ranks] (or [steps, ranks]) seconds.
    """
    factor = _factor(factor)
    c = np.asarray(compute_time, np.float64)
    if c.ndim == 0:
        if n_ranks is None:
            raise ValueError("n_ranks: required when compute_time is a scalar")
        c = np.full(int(n_ranks), float(c))
    if n_steps is not None:
        c = np.broadcast_to(c, (int(n_steps), c.shape[-1])).copy()
    else:
        c = c.copy()
    r = _hosts(ranks, "ranks")
    if r.size and r.max() >= c.shape[-1]:
        raise ValueError(f"ranks: index {int(r.max())} outside [0, {c.shape[-1]})")
    c[..., r] *= factor
    return c


def slow_compute_spec(spec: StepSpec, hosts, factor: float) -> StepSpec:
    """The :class:`StepSpec` of a step whose ranks on ``hosts`` compute ``factor`` slower
    (pairs with :func:`slow_compute` for step times and utilisation)."""
    factor = _factor(factor)
    comp = spec.compute_time.copy()
    comp[:, np.isin(spec.hosts, _hosts(hosts))] *= factor
    return dataclasses.replace(spec, compute_time=comp)


# ------------------------------------------------------------------ NIC
def host_links(topology: Topology, hosts) -> np.ndarray:
    """int64 link ids of the access links of ``hosts`` (both directions), ascending.

    ``hosts``: host indices or names.  A host's access links are those that leave or
    enter its node (its NIC ports).
    """
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology; got {type(topology).__name__}")
    h = host_indices(topology, hosts, "hosts").reshape(-1)
    nodes = topology.hosts[h]
    mask = np.isin(topology.link_src, nodes) | np.isin(topology.link_dst, nodes)
    return np.flatnonzero(mask)


def nic_capacity(topology: Topology, hosts, factor: float, capacity=None) -> np.ndarray:
    """float64 [links] capacity with the NICs of ``hosts`` ``factor`` times slower.

    Args:
        topology: the network.
        hosts: the slow hosts (indices or names).
        factor: slowdown, > 0: their access links run at ``capacity / factor``.
        capacity: [links] starting capacities (default ``topology.capacity``), e.g. a
            degraded or failed-link variant.
    """
    factor = _factor(factor)
    cap = np.array(topology.capacity if capacity is None else capacity, np.float64)
    if cap.shape != (topology.n_links,):
        raise ValueError(f"capacity: expected shape ({topology.n_links},), got {cap.shape}")
    cap[host_links(topology, hosts)] /= factor
    return cap


def slow_nics(topology: Topology, hosts, factor: float) -> Topology:
    """A copy of ``topology`` with the NICs of ``hosts`` ``factor`` times slower
    (:meth:`Topology.with_capacity_scaled` on :func:`host_links`)."""
    factor = _factor(factor)
    return topology.with_capacity_scaled(host_links(topology, hosts), 1.0 / factor)


# ------------------------------------------------------------------ impact
@dataclasses.dataclass(frozen=True)
class StragglerImpact:
    """How a straggler spread through a job (seconds unless stated).

    Attributes:
        hosts: int [ranks] the job's hosts.
        rank_finish: [ranks] when each rank's last flow (sent or received) finished.
        baseline_rank_finish: [ranks] the same without the straggler.
        rank_delay: [ranks] ``rank_finish - baseline_rank_finish``.
        step_time: the job's time (its steps, or its flows' span) with the straggler.
        baseline_step_time: the same without.
        slowdown: ``step_time / baseline_step_time``.
        ranks_delayed: number of ranks whose finish moved later (beyond ``rtol``).
        blast_radius: ``ranks_delayed / ranks``, in [0, 1].
        gpu_seconds_lost: ``ranks * (step_time - baseline_step_time)``: GPU time the
            job holds for nothing (a synchronous job keeps every GPU until the end).
    """

    hosts: np.ndarray
    rank_finish: np.ndarray
    baseline_rank_finish: np.ndarray
    rank_delay: np.ndarray
    step_time: float
    baseline_step_time: float
    slowdown: float
    ranks_delayed: int
    blast_radius: float
    gpu_seconds_lost: float

    @property
    def gpu_hours_lost(self) -> float:
        """``gpu_seconds_lost / 3600``."""
        return self.gpu_seconds_lost / 3600.0


def _rank_finish(w: Workload, finish: np.ndarray, hosts: np.ndarray, mine: np.ndarray):
    """[ranks] latest finish of the flows (of ``mine``) each host sends or receives."""
    top = int(max(hosts.max(initial=0), w.src.max(initial=0), w.dst.max(initial=0))) + 1
    rank_of = np.full(top, -1, np.int64)
    rank_of[hosts] = np.arange(hosts.size)
    out = np.full(hosts.size, -np.inf)
    for end in (w.src, w.dst):
        r = rank_of[end]
        ok = mine & (r >= 0)
        np.maximum.at(out, r[ok], finish[ok])
    if np.any(np.isneginf(out)):
        bad = hosts[np.isneginf(out)]
        raise ValueError(f"hosts: host {int(bad[0])} sends and receives no flow of the job; "
                         "list only the job's ranks")
    return out


def straggler_impact(workload: Workload, finish, baseline_finish, *,
                     baseline_workload: Workload | None = None, hosts=None,
                     job: str | None = None, spec: StepSpec | None = None,
                     baseline_spec: StepSpec | None = None,
                     rtol: float = 1e-6) -> StragglerImpact:
    """Per-rank finish times, step time and blast radius of a straggler.

    Args:
        workload: the flows simulated with the straggler.
        finish: [flows] their finish times (e.g. ``simulate_flows(...).finish``).
        baseline_finish: [flows] finish times of the same flows without the straggler.
        baseline_workload: the workload of the baseline run (default ``workload``; must
            have the same flows, ``src`` and ``dst``; :func:`slow_compute` changes only
            times).
        hosts: the job's ranks (default: every host the job's flows touch, sorted).
        job: the job's name (default: every flow).
        spec: :class:`StepSpec` of the straggled job: step time from
            ``spec.step_end_times`` (includes compute).  Default: the span of the job's
            flows, ``max finish - min arrival``.
        baseline_spec: the baseline's spec (default ``spec``; use
            :func:`slow_compute_spec` for compute stragglers).
        rtol: a rank counts as delayed when its finish moves later by more than
            ``rtol * baseline_step_time``.

    Returns:
        :class:`StragglerImpact`.

    Raises:
        ValueError: mismatched shapes or workloads, unknown job, or a non-finite
            finish time of the job's flows (a stalled run).
    """
    w = workload
    b = w if baseline_workload is None else baseline_workload
    if not (isinstance(w, Workload) and isinstance(b, Workload)):
        raise ValueError("workload and baseline_workload must be Workload records")
    if b.n_flows != w.n_flows or not (np.array_equal(b.src, w.src)
                                       and np.array_equal(b.dst, w.dst)):
        raise ValueError("baseline_workload: must have the same flows (src, dst) as "
                         "workload; only times may differ")
    f = np.asarray(finish, np.float64)
    f0 = np.asarray(baseline_finish, np.float64)
    for name, x in (("finish", f), ("baseline_finish", f0)):
        if x.shape != (w.n_flows,):
            raise ValueError(f"{name}: expected shape ({w.n_flows},), got {x.shape}")
    mine = np.ones(w.n_flows, bool)
    if job is not None:
        if job not in w.job_names:
            raise ValueError(f"job: {job!r} is not one of {w.job_names}")
        mine = w.job == w.job_names.index(job)
    for name, x in (("finish", f), ("baseline_finish", f0)):
        if not np.all(np.isfinite(x[mine])):
            raise ValueError(f"{name}: some of the job's flows never finished (inf/NaN); "
                             "the run stalled, lengthen it or restore capacity")
    if hosts is None:
        hosts = np.unique(np.concatenate([w.src[mine], w.dst[mine]]))
    hosts = _hosts(hosts)
    if np.unique(hosts).size != hosts.size:
        raise ValueError("hosts: each rank's host must appear once")
    rtol = float(rtol)
    if not np.isfinite(rtol) or rtol < 0:
        raise ValueError(f"rtol: must be finite and >= 0, got {rtol}")

    if spec is None and baseline_spec is None:
        # One origin for both runs: a compute straggler may move the job's first arrival.
        t0 = min(float(b.arrival[mine].min()), float(w.arrival[mine].min())) \
            if mine.any() else 0.0
        step = float(f[mine].max() - t0) if mine.any() else 0.0
        base = float(f0[mine].max() - t0) if mine.any() else 0.0
    else:
        s1 = spec if spec is not None else baseline_spec
        s0 = baseline_spec if baseline_spec is not None else spec
        step = float(s1.step_end_times(w, f)[-1] - s1.start)
        base = float(s0.step_end_times(b, f0)[-1] - s0.start)
    rf = _rank_finish(w, f, hosts, mine)
    rf0 = _rank_finish(b, f0, hosts, mine)
    delay = rf - rf0
    delayed = delay > rtol * base + 1e-300
    n = hosts.size
    return StragglerImpact(
        hosts=hosts, rank_finish=rf, baseline_rank_finish=rf0, rank_delay=delay,
        step_time=step, baseline_step_time=base,
        slowdown=step / base if base > 0 else float("nan"),
        ranks_delayed=int(delayed.sum()), blast_radius=float(delayed.mean()) if n else 0.0,
        gpu_seconds_lost=float(n * (step - base)))
