"""One job on a busy cluster larger than it: the servers a scheduler gives it.

A job that fills the whole fabric cannot be fragmented; a production job shares its
cluster.  Llama 3 405B was pre-trained on up to 16K H100 GPUs of a 24K-GPU RoCE cluster
(Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.1): the default job share
:data:`DEFAULT_JOB_SHARE` = 2/3, the cluster ``1.5 x`` the job
(:func:`default_cluster_gpus`).  The fabric is built for the cluster
(:func:`~fabric_jax.scale.scale_topology` at ``cluster_gpus``); the job's flows run on
its servers; the other servers are idle, drained, spare or held by other jobs **whose
traffic is not simulated** (an assumption: the other tenants' traffic would only add
load; ``--background`` adds open-loop traffic on the job's own servers).

The cluster before the job arrives (:func:`cluster_churn`, seeded, a host loop over the
other jobs, never over flows):

* **drained servers**: a fraction :data:`DEFAULT_DRAINED` of the servers, at random,
  out of service (failed, in repair, failing health checks).  Meta's RSC-1 / RSC-2
  (16K and 8K A100; Kokolis et al., "Revisiting Reliability in Large-Scale Machine
  Learning Research Clusters", HPCA 2025) drain servers that fail health checks and
  remove "lemon" nodes; Llama 3's 16K-GPU run saw 419 unexpected interruptions in 54
  days (Dubey et al. 2024, table 5).  The 2 % standing share out of service is an
  **assumption** of that order, not a published figure;
* **hot spares**: a fraction :data:`DEFAULT_SPARES` of the servers, at random, held
  back to replace a failed server of a running job without waiting (an **assumption**,
  2 %);
* **other jobs**: Poisson arrivals, exponential holding times (mean 1, the time unit),
  sizes of ``k`` servers for ``k = 1, 2, 4, ..., 64`` (at most a quarter of the
  cluster) with probability proportional to ``1 / k`` -- every size class holds the
  same GPU-time, most jobs small and most GPU-time in large jobs, the shape reported
  for GPU clusters (Jeon et al., ATC 2019, Microsoft Philly; Hu et al., NSDI 2024,
  Acme; Kokolis et al. 2025: "smaller jobs make up the majority of jobs"); the exact
  classes and weights are an **assumption**.  The arrival rate gives an offered load
  of :data:`DEFAULT_OCCUPANCY` of the serviceable servers (an **assumption** of a busy
  cluster; Kokolis et al. report RSC-1 and RSC-2 running at high utilisation).  Each
  job takes the lowest-indexed free servers (first fit in hostname order,
  :func:`fabric_jax.workloads.placement.place_job` ``"packed"``) or is turned away
  when too few are free.  The churn runs :data:`WARMUP` mean holding times;
* **the job's start**: the job (the largest, highest priority) reserves the cluster:
  no other job starts, and it waits for departures until enough servers are free
  (SLURM's reservation of resources for the top-priority pending job, backfill off).
  The free servers are then spread wherever the departed jobs were.

On that cluster:

* ``"fragmented"``: the scheduler gives the job the lowest-indexed free servers (first
  fit in hostname order, SLURM's default ``select/linear`` without a topology plugin),
  ranks in that order;
* ``"topology_aware"``: a scheduler that knows the scalable units (the servers under
  one rail leaf per rail: SLURM ``topology/tree`` with the leaf switches as the
  lowest level, Kubernetes topology-aware scheduling) takes the fewest units: the
  units with the most free servers, whole, and for the rest the unit whose free
  servers fit it best (:func:`fewest_units`); ranks in unit order, then server
  order, so Megatron's consecutive-rank groups stay under one leaf where they can.
  Like SLURM's ``--switches=count@max-time`` it may wait for fewer units: up to
  :data:`DEFAULT_TOPOLOGY_WAIT` mean holding times more (an assumption) for the
  fewest units the serviceable servers allow; the wait is reported (``wait``).

The jobs-fill-the-cluster placements (:data:`~fabric_jax.scale.JOB_PLACEMENTS`) on a
cluster larger than the job: ``"packed"`` the first servers, ``"spread"`` evenly over
the cluster, ``"random"`` a random set in random order.

Units: servers, GPUs; times in mean holding times.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from ..workloads.placement import place_job
from ._step import PLACEMENTS, StepFlows

__all__ = ["DEFAULT_JOB_SHARE", "DEFAULT_OCCUPANCY", "DEFAULT_DRAINED", "DEFAULT_SPARES",
           "WARMUP", "DEFAULT_TOPOLOGY_WAIT", "default_cluster_gpus", "serviceable_servers",
           "cluster_churn", "fewest_units", "cluster_servers", "on_cluster",
           "cross_leaf_share"]

#: The job's share of the cluster's GPUs by default: Llama 3 405B on 16K of a 24K-GPU
#: cluster (Dubey et al. 2024).
DEFAULT_JOB_SHARE = 2.0 / 3.0
#: Offered load of the other jobs, fraction of the serviceable servers (assumption: a
#: busy cluster; Kokolis et al. 2025).
DEFAULT_OCCUPANCY = 0.8
#: Fraction of servers drained (out of service; assumption, module docstring).
DEFAULT_DRAINED = 0.02
#: Fraction of servers kept as hot spares (assumption, module docstring).
DEFAULT_SPARES = 0.02
#: How long a topology-aware job waits for fewer units, mean holding times (an
#: assumption: SLURM's ``--switches=count@max-time`` leaves ``max-time`` to the user).
DEFAULT_TOPOLOGY_WAIT = 1.0
#: Mean holding times the churn runs before the job arrives.
WARMUP = 10.0
#: Largest other job, servers (64: one scalable unit of 8-GPU servers, 512 GPUs).
MAX_OTHER_JOB = 64


def default_cluster_gpus(n_gpus: int, gpus_per_server: int) -> int:
    """The cluster around a job of ``n_gpus`` GPUs: ``n_gpus / DEFAULT_JOB_SHARE``
    rounded up to whole servers (1,024 -> 1,536; 16,384 -> 24,576, Llama 3's)."""
    g = int(gpus_per_server)
    return int(-(-int(round(int(n_gpus) / DEFAULT_JOB_SHARE)) // g) * g)


def serviceable_servers(n_servers: int, *, drained: float = DEFAULT_DRAINED,
                        spares: float = DEFAULT_SPARES) -> int:
    """Servers of a cluster of ``n_servers`` neither drained nor spare
    (:func:`cluster_churn`): the largest job it can place."""
    n = int(n_servers)
    return n - int(round(drained * n)) - int(round(spares * n))


def _size_classes(serviceable: int):
    """``(sizes, probabilities)`` of the other jobs (module docstring)."""
    top = max(1, min(MAX_OTHER_JOB, serviceable // 4))
    k = 2 ** np.arange(int(np.log2(top)) + 1)
    p = 1.0 / k
    return k, p / p.sum()


def cluster_churn(n_servers: int, need: int, *, occupancy: float = DEFAULT_OCCUPANCY,
                  drained: float = DEFAULT_DRAINED, spares: float = DEFAULT_SPARES,
                  warmup: float = WARMUP, servers_per_unit: int | None = None,
                  max_wait: float = 0.0, seed=0) -> dict:
    """The cluster's servers when a job of ``need`` servers starts (module docstring).

    With ``servers_per_unit``, the job asks for the fewest scalable units (SLURM's
    ``--switches=count@max-time``): once enough servers are free it waits on, up to
    ``max_wait`` mean holding times more, until the free servers fit in the fewest
    units the serviceable servers allow (:func:`fewest_units`), and starts at the
    departure that gives them or when the wait runs out.

    Returns:
      ``{"state", "occupancy", "other_jobs", "turned_away", "wait", "serviceable",
      "held"}``:
      ``state`` int8 ``[n_servers]`` (0 free, 1 drained, 2 spare, 3 held by another
      job), ``occupancy`` the time-averaged share of serviceable servers held by other
      jobs over the second half of the warm-up, ``other_jobs`` jobs started,
      ``turned_away`` arrivals that found too few free servers, ``wait`` mean holding
      times the job waited for its servers, ``serviceable`` servers neither drained nor
      spare, ``held`` the servers of each other job running when the job starts.

    Raises:
      ValueError: a job larger than the serviceable servers, fractions outside [0, 1).
    """
    n, need = int(n_servers), int(need)
    for name, x in (("occupancy", occupancy), ("drained", drained), ("spares", spares)):
        if not (np.isfinite(x) and 0.0 <= x < 1.0):
            raise ValueError(f"{name}: a fraction in [0, 1); got {x!r}")
    rng = np.random.default_rng(seed)   # an int seed or a Generator
    state = np.zeros(n, np.int8)
    n_d, n_s = int(round(drained * n)), int(round(spares * n))   # serviceable_servers
    perm = rng.permutation(n)
    state[perm[:n_d]] = 1
    state[perm[n_d:n_d + n_s]] = 2
    serviceable = n - n_d - n_s
    if not 1 <= need <= serviceable:
        raise ValueError(f"cluster_gpus: the job's {need} servers must fit the "
                         f"{serviceable} serviceable servers of the {n} ({n_d} drained, "
                         f"{n_s} spare); give a larger cluster")
    sizes, prob = _size_classes(serviceable)
    lam = occupancy * serviceable / float(np.sum(sizes * prob)) if occupancy > 0 else 0.0
    held, heap = {}, []                    # job -> servers; (departure, job)
    t, area, busy, t_last, started, away = 0.0, 0.0, 0, 0.5 * warmup, 0, 0

    def advance(to):                       # accumulate busy-time over [warmup/2, to]
        nonlocal area, t_last
        if to > t_last:
            area += busy * (to - t_last)
            t_last = to

    def depart():
        nonlocal busy
        td, j = heapq.heappop(heap)
        advance(min(td, warmup))
        srv = held.pop(j)
        state[srv] = 0
        busy -= srv.size
        return td

    while lam > 0:
        t += rng.exponential(1.0 / lam)
        if t > warmup:
            break
        while heap and heap[0][0] <= t:
            depart()
        advance(t)
        k = int(rng.choice(sizes, p=prob))
        if int(np.sum(state == 0)) < k:
            away += 1
            continue
        srv = place_job(k, n, "packed", exclude=np.flatnonzero(state != 0)).astype(np.int64)
        state[srv] = 3
        busy += k
        held[started] = srv
        heapq.heappush(heap, (t + rng.exponential(1.0), started))
        started += 1
    advance(warmup)
    occ = area / (0.5 * warmup * serviceable) if warmup > 0 else 0.0
    t_start = warmup
    while int(np.sum(state == 0)) < need:  # the reservation: departures only
        t_start = depart()
    if servers_per_unit is not None:       # fewer units: wait up to max_wait more
        spu = int(servers_per_unit)
        units = lambda ok: np.unique(fewest_units(ok, spu, need) // spu).size  # noqa
        best = units((state == 0) | (state == 3))
        give_up = t_start + float(max_wait)
        while units(state == 0) > best and heap and heap[0][0] <= give_up:
            t_start = depart()
    return dict(state=state, occupancy=float(occ), other_jobs=started, turned_away=away,
                wait=float(t_start - warmup), serviceable=serviceable,
                held=[held[j] for j in sorted(held)])


def fewest_units(free, servers_per_unit: int, need: int) -> np.ndarray:
    """``need`` servers of the ``free`` ones (bool ``[servers]``) in the fewest units of
    ``servers_per_unit`` consecutive servers: the units with the most free servers
    (ties: lower index) whole, then the unit whose free servers fit the rest best
    (fewest free that still hold it); returned in unit order, then server order.

    The number of units is the least possible: no ``m - 1`` units hold ``need`` free
    servers when the ``m - 1`` fullest do not.

    Raises:
      ValueError: fewer than ``need`` free servers.
    """
    free = np.asarray(free, bool)
    spu, need = int(servers_per_unit), int(need)
    if int(free.sum()) < need:
        raise ValueError(f"need: {need} servers, only {int(free.sum())} free")
    unit = np.arange(free.size) // spu
    cnt = np.bincount(unit[free], minlength=int(unit[-1]) + 1)
    order = np.lexsort((np.arange(cnt.size), -cnt))          # fullest first
    cum = np.cumsum(cnt[order])
    m = int(np.searchsorted(cum, need)) + 1                  # least units that hold it
    whole = order[:m - 1]
    rest = need - (int(cum[m - 2]) if m > 1 else 0)
    others = np.setdiff1d(np.arange(cnt.size), whole)
    fit = others[cnt[others] >= rest]
    last = fit[np.lexsort((fit, cnt[fit]))[0]]               # best fit, lower index
    take = free & np.isin(unit, whole)
    in_last = np.flatnonzero(free & (unit == last))[:rest]
    take[in_last] = True
    return np.flatnonzero(take)                              # unit order = index order


def cluster_servers(n_job_servers: int, n_cluster_servers: int, placement: str, *,
                    servers_per_leaf: int, seed=0, **churn) -> tuple:
    """``(servers, facts)``: the cluster server of each of the job's servers (its
    ``s``-th server is ``servers[s]``; ranks follow) and what the placement met
    (module docstring): ``{"cluster_servers", "job_servers", "servers_per_leaf",
    "sus_spanned", "min_sus"}`` and, for :data:`~fabric_jax.scale.CLUSTER_PLACEMENTS`,
    the churn's ``drained_servers``, ``spare_servers``, ``other_job_servers`` (held when
    the job starts), ``occupancy``, ``other_jobs``, ``turned_away``, ``wait``.

    ``churn``: :func:`cluster_churn`'s ``occupancy``, ``drained``, ``spares``,
    ``warmup`` (and, for ``"topology_aware"``, ``max_wait``, default
    :data:`DEFAULT_TOPOLOGY_WAIT`).  Both busy-cluster placements see the same churn
    (same seed); the topology-aware job may start later, on a cluster with more free
    servers.

    Raises:
      ValueError: an unknown placement, a job larger than the cluster (or its
        serviceable servers), a job of fewer than two servers.
    """
    S, N, spl = int(n_job_servers), int(n_cluster_servers), int(servers_per_leaf)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: must be one of {PLACEMENTS}; got {placement!r}")
    if not 2 <= S <= N:
        raise ValueError(f"cluster_gpus: the cluster's {N} servers must hold the job's "
                         f"{S} (at least 2)")
    facts = dict(cluster_servers=N, job_servers=S, servers_per_leaf=spl)
    rng = np.random.default_rng(seed)   # an int seed or a Generator
    if placement == "packed":
        srv = np.arange(S)
    elif placement == "spread":
        srv = np.floor((np.arange(S) + 0.5) * N / S).astype(np.int64)
    elif placement == "random":
        srv = rng.permutation(N)[:S]
    else:
        aware = dict(servers_per_unit=spl, max_wait=DEFAULT_TOPOLOGY_WAIT) \
            if placement == "topology_aware" else {}
        c = cluster_churn(N, S, seed=rng, **{**aware, **churn})
        free = c["state"] == 0
        if placement == "fragmented":
            srv = place_job(S, N, "packed", exclude=np.flatnonzero(~free)).astype(np.int64)
        else:
            srv = fewest_units(free, spl, S)
        st = c["state"]
        facts.update(drained_servers=int(np.sum(st == 1)), spare_servers=int(np.sum(st == 2)),
                     other_job_servers=int(np.sum(st == 3)), occupancy=c["occupancy"],
                     other_jobs=c["other_jobs"], turned_away=c["turned_away"],
                     wait=c["wait"])
    srv = np.asarray(srv, np.int64)
    facts.update(sus_spanned=int(np.unique(srv // spl).size), min_sus=-(-S // spl))
    return srv, facts


def on_cluster(step: StepFlows, servers) -> StepFlows:
    """``step`` (one job, servers ``0 .. S - 1``) run on cluster servers ``servers``
    (:func:`cluster_servers`): each flow's NICs move to the same rail of its servers'
    cluster servers; ranks, sizes, dependencies and ``n_gpus`` (the job's) unchanged.
    The fabric is the cluster's (``topology.n_hosts`` NICs, more than ``n_gpus``).

    Raises:
      ValueError: ``servers`` not one distinct server per job server.
    """
    g = step.gpus_per_server
    srv = np.asarray(servers, np.int64).reshape(-1)
    if srv.size != step.n_gpus // g or np.unique(srv).size != srv.size or np.any(srv < 0):
        raise ValueError(f"servers: one distinct cluster server per job server "
                         f"({step.n_gpus // g}); got {srv.size}")
    f = step.flows
    nic = lambda x: (srv[np.asarray(x) // g] * g + np.asarray(x) % g).astype(  # noqa
        np.asarray(x).dtype)
    return dataclasses.replace(step, flows=dataclasses.replace(f, src=nic(f.src),
                                                               dst=nic(f.dst)))


def cross_leaf_share(step: StepFlows, servers_per_leaf: int) -> float:
    """Share of the step's bytes (background left out) whose sending and receiving
    servers sit under different leaves (scalable units of ``servers_per_leaf``
    consecutive servers): the bytes that must climb to the spines, from the flow table
    alone (0 when the step has no bytes)."""
    g, spl = step.gpus_per_server, int(servers_per_leaf)
    mine = step.is_step
    size = np.asarray(step.size, float)[mine]
    cross = (step.src[mine] // g) // spl != (step.dst[mine] // g) // spl
    tot = float(size.sum())
    return float(size[cross].sum() / tot) if tot > 0 else 0.0
