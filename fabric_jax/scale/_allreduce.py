"""The all-reduce sweep: completion time and effective bandwidth versus GPU count.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

Shared by ``experiments/allreduce_sweep.py`` and the scaling curve of ``fabric-jax compare
--plots`` (:func:`fabric_jax.compare.scaling_study`).

**What is simulated.**  ``G`` GPUs in servers of a named system (default ``hgx_h100``:
8 GPUs, NVLink4, 8 x 400 Gb/s NICs, :mod:`fabric_jax.systems`) on a rail-optimised
fabric (:func:`~fabric_jax.scale.sweep_topology`) run one all-reduce of ``S`` bytes per
GPU, built by :mod:`fabric_jax.collectives` as NCCL runs it: a DAG of chunked transfers with the
protocol's per-step latency, the launch latency, the link efficiencies and, for SHARP,
the switches' aggregation tree (:func:`fabric_jax.collectives.build_plan`).  The
algorithm is chosen per preset the NCCL way (:func:`choose_algorithm`, the cost model of
:func:`fabric_jax.collectives.select_algorithm`) among :data:`SWEEP_ALGORITHMS`:
NVLS inside the servers and NCCL's double binary tree across them (``nvls_tree``, what
NCCL picks on multi-node H100) or, on a fabric with SHARP (``infiniband``), the SHARP
aggregation tree per rail (``sharp``, NCCL's NVLS + CollNet).  ``algorithms=`` overrides
(e.g. ``("ring",)``; a flat ring of ``G`` ranks has ``8 G (G - 1)`` transfers, too many
for the fluid model beyond a few hundred GPUs).

Each preset runs its plans through the fluid model, and each plan runs once on the
ideal fabric (:mod:`fabric_jax.scale._plans`:
:func:`~fabric_jax.scale.simulate_plans_fluid`,
:func:`~fabric_jax.scale.simulate_plans_ideal`).

**Metrics** (:func:`completion_stats`).  The completion time of rank ``r`` is the arrival
of the last transfer into GPU ``r`` (it then holds the reduced result); the collective's
completion time is the largest (what ``nccl-tests`` times).  ``p50`` and ``p99`` are the
50th and 99th percentiles **over the ranks** of one collective (NumPy's linear
interpolation), so the p99 shows how far the slow ranks trail (servers deep in the tree,
ranks behind a congested link).  Effective bandwidth is
:func:`fabric_jax.metrics.collective_effective_bandwidth` of the collective: its
line-rate time (:func:`fabric_jax.metrics.collective_ideal_time`: the most bytes one NIC
sends or receives over the fabric in the plan, at the NIC line rate) over its completion
time.
"""

from __future__ import annotations

import time

import numpy as np

from .. import collectives as col
from .. import metrics as mx
from ..collectives import link_bytes, link_classes
from ..fabrics import get_fabric
from ._plans import (DEFAULT_SWEEP_PATHS, nic_nodes, plan_flows, simulate_plans_fluid,
                     simulate_plans_ideal)

__all__ = ["SWEEP_ALGORITHMS", "DEFAULT_SWEEP_CHUNKS", "choose_algorithm", "rank_completion",
           "nic_ideal_time", "completion_stats", "CURVE_KEYS", "scaling_curves",
           "scaling_point"]

#: Candidate all-reduce algorithms of the sweep (NCCL's choice on multi-node NVSwitch
#: servers: NVLS + tree, or NVLS + SHARP where the fabric has SHARP).  Servers without
#: NVLS fall back to ``("tree", "sharp")`` (:func:`choose_algorithm`).
SWEEP_ALGORITHMS = ("nvls_tree", "sharp")

#: Pipeline chunks per plan (NCCL pipelines in 512 KiB chunks; 4 keeps the transfer
#: count, and so the fluid model's cost, linear in the servers with small constants --
#: a stated approximation for large messages, whose last chunk drains 1/4 of the
#: message instead of one NCCL chunk).
DEFAULT_SWEEP_CHUNKS = 4


def choose_algorithm(topology, fabric, nbytes: float, *, algorithms=None, protocol=None,
                     n_chunks: int = DEFAULT_SWEEP_CHUNKS, hosts=None):
    """NCCL-like (algorithm, protocol) of an all-reduce on ``fabric``.

    :func:`fabric_jax.collectives.select_algorithm` (critical-path latency plus bytes on
    the busiest link, NCCL's ``ncclTopoGetAlgoTime`` model) over the eligible members of
    ``algorithms`` (default :data:`SWEEP_ALGORITHMS`, or ``("tree", "sharp")`` when the
    servers have no NVLS: one GPU per server or ``params["nvls"]`` False).  SHARP is
    eligible only where ``fabric.sharp``.

    Returns:
      ``(algorithm, protocol)``.
    """
    fab = get_fabric(fabric)
    if algorithms is None:
        nvls = bool(topology.params.get("nvls", True)) and int(
            topology.params.get("gpus_per_server", 1)) > 1
        algorithms = SWEEP_ALGORITHMS if nvls else ("tree", "sharp")
    algorithms = tuple(a for a in algorithms if a != "sharp" or fab.sharp)
    algo, proto, _ = col.select_algorithm(
        topology, "all_reduce", nbytes, hosts=hosts, fabric=fab, algorithms=algorithms,
        protocols=None if protocol is None else (protocol,), n_chunks=n_chunks)
    return algo, proto


# ------------------------------------------------------------------ metrics
def rank_completion(plan, topology, finish, hosts=None) -> np.ndarray:
    """``[ranks]`` completion time of each rank: the last arrival into its GPU, s.

    Args:
      plan: the plan that ran.
      topology: its topology.
      finish: ``[flows]`` finish times of its transfers, s.
      hosts: ``[ranks]`` host of each rank (default every host).
    """
    hosts = np.arange(topology.n_hosts) if hosts is None else np.asarray(hosts)
    links = np.asarray(plan.links)
    real = links >= 0
    node = topology.link_dst[np.maximum(links, 0)]
    host_of_node = np.full(topology.n_nodes, -1)
    host_of_node[topology.hosts] = np.arange(topology.n_hosts)
    into = np.where(real, host_of_node[node], -1)
    out = np.full(topology.n_hosts, -np.inf)
    f = np.broadcast_to(np.asarray(finish, float)[:, None], links.shape)
    np.maximum.at(out, into[into >= 0], f[into >= 0])
    return out[hosts]


def nic_ideal_time(plan, topology) -> float:
    """Line-rate time of a plan: :func:`fabric_jax.metrics.collective_ideal_time` of the
    bytes each NIC sends and receives over the fabric (``max(sent, received)`` per NIC,
    at the NIC line rate of all its planes), seconds."""
    cls = link_classes(topology)
    nics = nic_nodes(topology)
    nic_of = np.full(topology.n_nodes, -1)
    nic_of[nics] = np.arange(nics.size)
    lb = link_bytes(plan)
    net = cls == 0
    up, down = np.zeros(nics.size), np.zeros(nics.size)
    s, d = nic_of[topology.link_src], nic_of[topology.link_dst]
    np.add.at(up, s[net & (s >= 0)], lb[net & (s >= 0)])
    np.add.at(down, d[net & (d >= 0)], lb[net & (d >= 0)])
    rate = float(np.asarray(topology.capacity)[net & (topology.link_src == nics[0])].sum())
    ids = np.arange(nics.size)
    return float(mx.collective_ideal_time(ids, ids, np.maximum(up, down),
                                          np.zeros(ids.size, np.int32), 1, ids.size,
                                          rate)[0])


def completion_stats(plan, topology, finish, ideal_time: float | None = None) -> dict:
    """p50 / p99 over ranks, completion time and effective bandwidth of one run.

    Returns:
      ``{"p50_completion_time", "p99_completion_time", "completion_time"`` (s),
      ``"effective_bandwidth"`` (fraction), ``"unfinished_transfers"``, ``"ranks"``
      (ranks in the percentiles: every rank that receives data)}``.
    """
    finish = np.asarray(finish, float)
    per_rank = rank_completion(plan, topology, finish)
    per_rank = per_rank[per_rank > -np.inf]          # hosts outside the collective
    t = float(np.max(per_rank))
    ideal = nic_ideal_time(plan, topology) if ideal_time is None else ideal_time
    pct = mx.percentiles(per_rank, (50, 99))
    return dict(p50_completion_time=float(pct["p50"]), p99_completion_time=float(pct["p99"]),
                completion_time=t,
                effective_bandwidth=float(mx.collective_effective_bandwidth(
                    np.array([t]), np.array([ideal]))),
                unfinished_transfers=int(np.sum(~np.isfinite(finish))),
                ranks=int(per_rank.size))


# ------------------------------------------------------------------ the sweep
def _sweep_plans(topologies, fabs, nbytes, algorithms, protocol, n_chunks, seed):
    """Per topology, ``{preset: (algorithm, protocol)}`` chosen and ``{(algorithm,
    protocol): plan}`` (each distinct plan built once)."""
    chosen, plans = [], []
    for topo in topologies:
        ch, pl = {}, {}
        for name, fab in fabs.items():
            key = choose_algorithm(topo, fab, nbytes, algorithms=algorithms,
                                   protocol=protocol, n_chunks=n_chunks)
            ch[name] = key
            if key not in pl:
                pl[key] = col.build_plan(topo, "all_reduce", nbytes, algorithm=key[0],
                                         protocol=key[1], fabric=fab, n_chunks=n_chunks,
                                         seed=seed)
        chosen.append(ch)
        plans.append(pl)
    return chosen, plans


def _append_point(curve: dict, ideal_curve: dict, stats: dict, key, ideal: dict):
    """Appends one point of a preset (``stats`` of its run, ``key`` its algorithm and
    protocol, ``ideal`` its plan's ideal stats) to its lists in :func:`scaling_curves`."""
    st = dict(stats, algorithm=key[0], protocol=key[1],
              **{f"ideal_{k}": ideal[k] for k in
                 ("p50_completion_time", "p99_completion_time", "completion_time")})
    for k in CURVE_KEYS:
        curve.setdefault(k, []).append(st[k])
    curve.setdefault("all_reduce_completion_time", []).append(st["completion_time"])
    curve.setdefault("p99_collective_completion_time", []).append(st["p99_completion_time"])
    b = dict(ideal, algorithm=key[0], protocol=key[1])
    for k in ("p50_completion_time", "p99_completion_time", "completion_time",
              "effective_bandwidth", "algorithm", "protocol"):
        ideal_curve.setdefault(k, []).append(b[k])


#: Keys of each preset's lists in :func:`scaling_curves`.
CURVE_KEYS = ("p50_completion_time", "p99_completion_time", "completion_time",
              "effective_bandwidth", "unfinished_transfers", "ranks",
              "ideal_p50_completion_time", "ideal_p99_completion_time",
              "ideal_completion_time", "algorithm", "protocol", "transfers", "n_steps",
              "wall_s")


def scaling_curves(topologies, presets, nbytes: float, *, dt: float = 1e-6,
                   algorithms=None, protocol=None, n_chunks: int = DEFAULT_SWEEP_CHUNKS,
                   max_paths: int | None = DEFAULT_SWEEP_PATHS, seed: int = 0,
                   horizon: float = 3.0, overrides: dict | None = None,
                   progress=None) -> dict:
    """Every preset's all-reduce of ``nbytes`` per GPU on each topology (one per GPU
    count).

    Per topology and preset the algorithm is chosen (:func:`choose_algorithm`) and its
    plan built; each distinct plan runs once on the ideal fabric
    (:func:`simulate_plans_ideal`, every plan of the sweep in one event simulation).
    Then each preset runs the plans of every topology side by side in one fluid run
    (:func:`simulate_plans_fluid`: one compile per preset for the whole sweep).  The
    horizon is ``horizon`` times the slowest ideal time (at least 20 steps more); a run
    that leaves transfers unfinished is repeated once with twice the horizon.

    Args:
      topologies: GPUs with the server model (:func:`sweep_topology`).
      presets: preset names.
      nbytes: all-reduce buffer per GPU, bytes.
      dt: fluid step, s.
      algorithms, protocol: restrict the NCCL-like choice (:func:`choose_algorithm`).
      n_chunks: pipeline chunks.
      max_paths: candidate paths per host pair.
      seed: routing hash seed.
      horizon: fluid horizon over the slowest ideal time.
      overrides: ``{preset: {field: value}}`` Fabric overrides.
      progress: optional callable taking a label.

    Returns:
      ``{"gpus": [...], "topologies": [name, ...], "fabrics": {preset: {key: [...]}},
      "ideal": {preset: {key: [...]}}}``: per preset the lists of :data:`CURVE_KEYS`
      (:func:`completion_stats`' keys plus the algorithm and protocol chosen, transfers,
      fluid steps, the ideal-fabric times of its plan, ``wall_s`` = the preset's fluid
      run, shared by its points) aligned with ``gpus``; under ``"ideal"`` the ideal
      baseline of the plan each preset ran (:func:`completion_stats`' keys, algorithm,
      protocol).  ``all_reduce_completion_time`` (= ``completion_time``) and
      ``p99_collective_completion_time`` (= ``p99_completion_time``) are added for
      :func:`fabric_jax.plots.scaling_figure`.
    """
    overrides = overrides or {}
    fabs = {n: get_fabric(n, **overrides.get(n, {})) for n in presets}
    chosen, plans = _sweep_plans(topologies, fabs, nbytes, algorithms, protocol, n_chunks,
                                 seed)
    t0 = time.perf_counter()
    items = [(plan, topo) for topo, pl in zip(topologies, plans) for plan in pl.values()]
    fins = iter(simulate_plans_ideal(items))
    ideal = [{key: completion_stats(plan, topo, next(fins)) for key, plan in pl.items()}
             for topo, pl in zip(topologies, plans)]
    if progress is not None:
        progress(f"ideal fabric, {len(items)} plans ({time.perf_counter() - t0:.0f} s)")
    slowest = max(st["completion_time"] for pt in ideal for st in pt.values())
    n_steps = int(np.ceil(horizon * slowest / dt)) + 20
    out = {"gpus": [int(t.n_hosts) for t in topologies],
           "topologies": [t.name for t in topologies], "fabrics": {}, "ideal": {}}
    for name, fab in fabs.items():
        t0 = time.perf_counter()
        items = []
        for topo, ch, pl in zip(topologies, chosen, plans):
            plan = pl[ch[name]]
            items.append((plan, topo, plan_flows(plan, topo, fab, max_paths=max_paths,
                                                 seed=seed)))
        steps = n_steps
        for _ in range(2):
            runs = simulate_plans_fluid(items, fab, dt=dt, n_steps=steps, seed=seed)
            if all(np.all(np.isfinite(f)) for _, f in runs):
                break
            steps *= 2
        wall = time.perf_counter() - t0
        d = out["fabrics"].setdefault(name, {})
        base_d = out["ideal"].setdefault(name, {})
        for (plan, topo, _), (_, fin), ch, base in zip(items, runs, chosen, ideal):
            st = completion_stats(plan, topo, fin)
            st.update(transfers=plan.n_flows, n_steps=steps, wall_s=wall)
            _append_point(d, base_d, st, ch[name], base[ch[name]])
        if progress is not None:
            progress(f"{name}: {len(items)} points, {sum(p.n_flows for p, _, _ in items)} "
                     f"transfers, {steps} steps ({wall:.0f} s)")
    return out


def scaling_point(topology, presets, nbytes: float, **kw) -> dict:
    """:func:`scaling_curves` at one topology, as ``{preset: stats}`` (each list's
    single entry), plus ``"ideal"``: ``{preset: ideal stats}``."""
    cur = scaling_curves([topology], presets, nbytes, **kw)
    one = lambda d: {k: v[0] for k, v in d.items()}  # noqa: E731
    return dict(fabrics={n: one(v) for n, v in cur["fabrics"].items()},
                ideal={n: one(v) for n, v in cur["ideal"].items()})
