"""Several jobs sharing the cluster, and background traffic, as one step's flows.

Each job's step is :func:`~fabric_jax.scale.step_flows` on its own servers;
:func:`job_servers` chooses the cluster servers of each job, :func:`place_jobs` joins
the jobs' flows into one :class:`~fabric_jax.scale.StepFlows`
(:func:`fabric_jax.workloads.concat` of their ``Workload`` records), and
:func:`add_background` adds open-loop traffic sharing the fabric.

Units: bytes, seconds.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workloads.flows import Workload, concat
from ._step import BACKGROUND, CLUSTER_PLACEMENTS, DEFAULT_BACKGROUND_CDF, JOB_PLACEMENTS, StepFlows

__all__ = ["job_servers", "place_jobs", "add_background"]


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
    if placement in CLUSTER_PLACEMENTS:
        raise ValueError(f"placement: {placement!r} places one job on a cluster larger than "
                         f"it (cluster_servers); jobs that fill the cluster take one of "
                         f"{JOB_PLACEMENTS}")
    if placement not in JOB_PLACEMENTS:
        raise ValueError(f"placement: must be one of {JOB_PLACEMENTS}; got {placement!r}")
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

    def moved(j, st):            # job j's flows on its cluster servers, as job j
        f = st.flows
        return dataclasses.replace(
            f, src=gid(j, f.src), dst=gid(j, f.dst), job=np.zeros(f.n_flows, np.int32),
            job_names=(f"job{j}",), columns=dict(f.columns,
                                                 src_rank=gid(j, st.src_rank).astype(np.int32),
                                                 dst_rank=gid(j, st.dst_rank).astype(np.int32)))
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
    return StepFlows(concat(*[moved(j, st) for j, st in enumerate(steps)]),
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
    info = dict(step.info, background=dict(load=load, size_cdf=size_cdf.name or "custom",
                                           window=float(window), server_flows=n_bg,
                                           flows=n_bg * g, seed=int(seed)))
    n = n_bg * g
    job = (np.zeros(n, np.int32) if step.server_job is None
           else step.server_job[dst // g])
    bg = Workload(src=src, dst=dst, size=np.tile(w.size, g), arrival=np.tile(w.arrival, g),
                  deps=np.full((n, 0), -1, np.int32), delay=np.zeros(n), job=job,
                  group=np.full(n, -1), group_names=(), job_names=step.flows.job_names,
                  group_bytes=np.zeros(0), group_kind=(), group_ranks=np.zeros(0),
                  columns=dict(src_rank=src.astype(np.int32), dst_rank=dst.astype(np.int32),
                               phase=np.full(n, BACKGROUND, np.int32),
                               rail=rail.astype(np.int32)))
    return dataclasses.replace(step, flows=concat(step.flows, bg), info=info)
