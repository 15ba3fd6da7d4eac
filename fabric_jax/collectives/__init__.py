"""Collectives as NCCL runs them: chunked transfer DAGs with per-step latency.

::

    from fabric_jax import systems, collectives
    topo = systems.build("hgx_h100", n_servers=2)
    res = collectives.run_collective(topo, "all_reduce", 1 << 30)   # auto-selected
    res.algorithm, res.busbw / 1e9                                   # GB/s
    plan = collectives.build_plan(topo, "all_reduce", 1 << 30, algorithm="ring")
    collectives.link_bytes(plan)          # bytes per link, = the analytic counts

:func:`build_plan` turns (op, size, algorithm, protocol) into a
:class:`CollectivePlan` (transfers over explicit links with deps and latencies; the
algorithms are described in :mod:`._algorithms`, the protocol and selection model in
:mod:`._tuning`); :func:`simulate_plan` runs it in the exact event-driven max-min
engine; :func:`select_algorithm` picks the algorithm and protocol NCCL's way;
:func:`run_collective` and :func:`sweep` do all three.  :func:`nccl_latency`,
:func:`nccl_time` and :func:`nccl_choice` are NCCL's closed-form model of one call
(current NCCL, with PAT; :mod:`._latency`), for workloads too large to build as DAGs.
``S`` (``nbytes``) follows nccl-tests: the all-reduce / broadcast buffer, the full
output of all-gather, the full input of reduce-scatter, each rank's send buffer for
all-to-all.

Each algorithm's schedule (ring, tree, chain, halving-doubling, all-to-all pairs) is
defined once, in :mod:`.schedules` (NCCL's trees in :mod:`.trees`); :func:`build_plan`
lays it over channels, servers and links, and the host-level flow builders of
:mod:`fabric_jax.workloads` (``ring_all_reduce``, ``tree_all_reduce``, ...) lay it over
hosts, one flow per transfer.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..topology import Topology
from . import _algorithms as A
from .schedules import (TransferDag, all_to_all_pairs, chain, ring, tree_parents,
                        tree_reduce_bcast)
from ._plan import (LINK_CLASSES, CollectivePlan, CollectiveResult, critical_path,
                    link_bytes, link_classes, simulate_plan, simulate_plans)
from ._latency import (LATENCY_ALGORITHMS, NCCL_BASE_LATENCY_US, NCCL_NET_LATENCY_US,
                       NCCL_NVLINK_LATENCY_US, nccl_choice, nccl_latency, nccl_time)
from ._tuning import (ALGORITHM_PROTOCOLS, ALGORITHMS, CHUNK_BYTES, CHUNK_LEVELS, DEFAULT_CHUNKS,
                      LINK_EFFICIENCY, PROTOCOLS, SHARP_LEVEL_LATENCY_US, Protocol,
                      auto_chunks)

__all__ = ["CollectivePlan", "CollectiveResult", "Protocol", "PROTOCOLS", "ALGORITHMS",
           "ALGORITHM_PROTOCOLS", "LINK_EFFICIENCY", "DEFAULT_CHUNKS", "CHUNK_LEVELS",
           "CHUNK_BYTES", "auto_chunks", "SHARP_LEVEL_LATENCY_US", "OPS",
           "DEFAULT_CHANNELS", "build_plan", "simulate_plan", "simulate_plans",
           "select_algorithm", "run_collective", "sweep", "link_bytes", "link_classes",
           "critical_path", "ring_orders", "nccl_latency", "nccl_time", "nccl_choice",
           "LATENCY_ALGORITHMS", "NCCL_BASE_LATENCY_US", "NCCL_NET_LATENCY_US",
           "NCCL_NVLINK_LATENCY_US"]

ring_orders = A.ring_orders

#: Ops understood by :func:`build_plan` (nccl-tests' names with underscores).
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")

#: Ring channels across servers.  NCCL opens 2 channels per NIC on H100-class systems
#: (``NCCL_MIN_NCHANNELS`` / the ring graph search gives 16 or 32 channels); channels
#: that share every link are merged here (their max-min rates are the same), so the
#: distinct channels are the ``gpus_per_server`` rail-aligned snakes.
DEFAULT_CHANNELS = 8

_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather",
            "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
            "broadcast": "broadcast"}


def _op(op: str) -> str:
    key = str(op).lower().replace("-", "_")
    key = _ALIASES.get(key.replace("_", ""), key)
    if key not in OPS:
        raise ValueError(f"op must be one of {OPS} (or nccl-tests' names, e.g. "
                         f"'alltoall'); got {op!r}")
    return key


def _hosts(topology: Topology, hosts) -> np.ndarray:
    h = np.arange(topology.n_hosts) if hosts is None else np.asarray(hosts, np.int64)
    if h.ndim != 1 or h.size < 2 or np.unique(h).size != h.size or h.min() < 0 \
            or h.max() >= topology.n_hosts:
        raise ValueError(f"hosts must be >= 2 distinct host indices in [0, "
                         f"{topology.n_hosts}); got {np.asarray(hosts).tolist()[:8]}")
    return h


def _fabric(fabric):
    if fabric is None:
        return None
    from ..fabrics import get_fabric
    return get_fabric(fabric)


def _route(topology, src, dst, fabric, seed):
    """Per-transfer (links, weights) of host pairs over the fabric's routing split (an
    even split over the candidate paths without a fabric)."""
    from ..fabric_sim import route
    key = src * topology.n_hosts + dst
    uniq, inv = np.unique(key, return_inverse=True)
    us, ud = np.divmod(uniq, topology.n_hosts)
    _, _, inc = route(topology, us, ud, None if fabric is None else fabric.routing,
                      params=None if fabric is None else fabric.routing_params(), seed=seed,
                      compact=True)
    w = inc.row_width
    links = np.asarray(inc.link_idx).reshape(-1, w)
    weight = np.asarray(inc.weight, float).reshape(-1, w)
    links = np.where(weight > 0, links, -1)
    return links[inv], weight[inv]


def _finish(dag, topology, *, op, algorithm, protocol, nbytes, n_ranks, fabric, seed,
            nvls: bool) -> CollectivePlan:
    proto = PROTOCOLS[protocol]
    src, dst, size, deps = dag.arrays()
    host = src >= 0
    if host.any():
        r_links, r_w = _route(topology, src[host], dst[host], fabric, seed)
    cls = link_classes(topology)
    lat = topology.latency
    k = 0
    links_all, weight_all, hop_lat = [], [], []
    for part_rows, part_lat, part_src in zip(dag.rows, dag.hop_latency, dag.src):
        m = part_src.size
        if part_rows is None:
            lk, wt = r_links[k:k + m], r_w[k:k + m]
            k += m
            hl = np.where(lk >= 0, wt * lat[np.maximum(lk, 0)], 0.0).sum(1)
        else:
            lk = part_rows
            wt = (lk >= 0).astype(float)
            hl = part_lat
        links_all.append(lk)
        weight_all.append(wt)
        hop_lat.append(hl)
    W = max(x.shape[1] for x in links_all)
    links = np.concatenate([np.pad(x, ((0, 0), (0, W - x.shape[1])), constant_values=-1)
                            for x in links_all])
    weight = np.concatenate([np.pad(x, ((0, 0), (0, W - x.shape[1])))
                             for x in weight_all])
    crosses_net = ((links >= 0) & (cls[np.maximum(links, 0)] == 0)).any(1)
    step = np.where(crosses_net, proto.net_step_us, proto.nvlink_step_us) * 1e-6
    latency = np.concatenate(hop_lat) + step
    first = (deps < 0).all(1)
    delay = np.where(first, proto.base_latency_us * 1e-6, 0.0)
    eff = dict(LINK_EFFICIENCY)
    if nvls:
        eff["nvlink"] = eff["nvls"]
    scale = np.array([eff[c] for c in LINK_CLASSES])[cls] * proto.bw_fraction
    return CollectivePlan(links=links.astype(np.int32), weight=weight, size=size,
                          deps=deps.astype(np.int32), latency=latency, delay=delay, op=op,
                          algorithm=algorithm, protocol=protocol, nbytes=float(nbytes),
                          n_ranks=int(n_ranks), n_links=topology.n_links, bw_scale=scale)


def _groups_or_raise(topology, hosts, algorithm):
    groups = A.server_groups(topology, hosts)
    if groups is None:
        raise ValueError(f"algorithm={algorithm!r} needs the same number of ranks on "
                         f"every server; place the ranks evenly or use 'ring'")
    return groups


def build_plan(topology: Topology, op: str, nbytes: float, *, hosts=None,
               algorithm: str = "ring", protocol: str = "Simple",
               n_channels: int = DEFAULT_CHANNELS, n_chunks: int | None = DEFAULT_CHUNKS,
               fabric=None, seed: int = 0, sharp_max_trees: int | None = None,
               sharp_level_latency_us: float = SHARP_LEVEL_LATENCY_US) -> CollectivePlan:
    """The transfer DAG of one collective.

    Args:
      topology: the network (with the server model for NVLS and hierarchical plans).
      op: one of :data:`OPS`.
      nbytes: ``S`` in bytes (nccl-tests' convention, see the module docstring).
      hosts: ``[ranks]`` host of each rank (default: every host, in order).
      algorithm: ``"ring"`` (every op), for ``all_reduce`` also ``"tree"``,
        ``"nvls"`` (one server), ``"nvls_tree"`` (NVLS in servers, trees across),
        ``"hierarchical"`` (ring in servers, ring across), ``"sharp"`` (NVLS or ring
        in servers, SHARP aggregation tree per rail across); ``"direct"`` for
        ``all_to_all``.
      protocol: ``"LL"``, ``"LL128"`` or ``"Simple"`` (:data:`PROTOCOLS`).
      n_channels: ring channels across servers (:data:`DEFAULT_CHANNELS`).
      n_chunks: pipeline depth of tree / NVLS / SHARP / hierarchical / broadcast plans;
        None: :func:`auto_chunks` of ``nbytes`` (one of :data:`CHUNK_LEVELS`).
      fabric: a :class:`fabric_jax.Fabric` or preset name whose routing splits the
        host-to-host transfers (default: even split over the equal-cost paths);
        ``"sharp"`` needs ``fabric.sharp`` unless ``fabric`` is None.
      seed: routing hash seed.
      sharp_max_trees: concurrent SHARP aggregation trees (None: one per rail).
      sharp_level_latency_us: SHARP per-level latency, microseconds.

    Raises:
      ValueError: unknown op/algorithm/protocol, an algorithm that does not apply
        (e.g. ``nvls`` without NVSwitch servers), bad sizes.
    """
    op = _op(op)
    hosts = _hosts(topology, hosts)
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}; got {protocol!r}")
    nbytes = float(nbytes)
    if not np.isfinite(nbytes) or nbytes < 0:
        raise ValueError(f"nbytes must be finite and >= 0; got {nbytes}")
    if n_chunks is None:
        n_chunks = auto_chunks(nbytes)
    for name, v in (("n_channels", n_channels), ("n_chunks", n_chunks)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {v!r}")
    n_chunks = int(n_chunks)
    fab = _fabric(fabric)
    n = hosts.size
    proto = PROTOCOLS[protocol]
    step = proto.nvlink_step_us * 1e-6
    dag = TransferDag()
    valid = {"all_to_all": ("direct",)}.get(op, ("ring",) if op != "all_reduce" else
                                            ("ring", "tree", "nvls", "nvls_tree",
                                             "hierarchical", "sharp"))
    if algorithm not in valid:
        raise ValueError(f"algorithm for {op} must be one of {valid}; got {algorithm!r}")
    nvls = False
    if op == "all_to_all":
        s, d = all_to_all_pairs(n)
        dag.add(hosts[s], hosts[d], nbytes / n)
    elif op == "broadcast":
        order = A.ring_orders(topology, hosts, n_channels)
        chain(dag, order, n_chunks, nbytes / (order.shape[0] * n_chunks))
    elif algorithm == "ring":
        order = A.ring_orders(topology, hosts, n_channels)
        steps = 2 * (n - 1) if op == "all_reduce" else n - 1
        ring(dag, order, steps, nbytes / (n * order.shape[0]))
    elif algorithm == "tree":
        _tree_all_reduce(dag, hosts, _groups_or_raise(topology, hosts, algorithm), nbytes,
                         n_channels, n_chunks)
    elif algorithm == "nvls":
        groups = _groups_or_raise(topology, hosts, algorithm)
        if groups.shape[0] != 1:
            raise ValueError("algorithm='nvls' runs inside one server; use 'nvls_tree' or "
                             "'sharp' across servers")
        if not topology.params.get("nvls", True):
            raise ValueError("algorithm='nvls': these servers' NVSwitches do not reduce "
                             "(params['nvls'] is False, e.g. dgx_a100)")
        nvls = True
        _nvls_all_reduce(dag, topology, hosts, nbytes, n_chunks, step)
    else:  # hierarchical, nvls_tree, sharp
        groups = _groups_or_raise(topology, hosts, algorithm)
        if algorithm == "sharp" and fab is not None and not fab.sharp:
            raise ValueError(f"algorithm='sharp' needs a fabric with SHARP; "
                             f"{fab.name!r} has sharp=False")
        intra = "ring" if algorithm == "hierarchical" else "nvls"
        if intra == "nvls" and not (topology.params.get("server_model")
                                    and topology.params.get("nvls", True)):
            if algorithm == "nvls_tree":
                raise ValueError("algorithm='nvls_tree' needs NVSwitch servers with NVLS "
                                 "(server model, params['nvls'] not False)")
            intra = "ring"
        nvls = intra == "nvls"
        _hierarchical(dag, topology, hosts[groups], nbytes, n_chunks, intra,
                      {"hierarchical": "ring", "nvls_tree": "tree",
                       "sharp": "sharp"}[algorithm],
                      step, sharp_max_trees, sharp_level_latency_us * 1e-6)
    return _finish(dag, topology, op=op, algorithm=algorithm, protocol=protocol,
                   nbytes=nbytes, n_ranks=n, fabric=fab, seed=seed, nvls=nvls)


def _tree_all_reduce(dag, hosts, groups, nbytes, n_channels, n_chunks):
    """NCCL's trees (:func:`.schedules.tree_parents`), one pair per chain head (up to
    ``n_channels``), each tree carrying an equal share, pipelined in ``n_chunks``."""
    n_srv, g = groups.shape
    n_heads = min(int(n_channels), g) if n_srv > 1 else 1
    inst = []
    for j in range(n_heads):
        pos = np.concatenate([grp[(j + np.arange(g)) % g] for grp in groups])
        for par in tree_parents(n_srv, g):
            inst.append((hosts[pos], par))
    chunk = nbytes / (len(inst) * n_chunks)
    prev = [None] * len(inst)
    for _c in range(n_chunks):
        for t, (host_of, par) in enumerate(inst):
            prev[t], _ = tree_reduce_bcast(dag, host_of, par, chunk, prev=prev[t])


def _nvls_all_reduce(dag, topology, group_hosts, nbytes, n_chunks, step):
    g = group_hosts.size
    up, down = A.nvls_links(topology, group_hosts)
    lat = topology.latency[up[0]] + topology.latency[down[0]] + step
    chunk = nbytes / (g * n_chunks)
    red = mc = None
    for _c in range(n_chunks):
        red = A.nvls_reduce(dag, topology, group_hosts, chunk, lat, prev=red)
        mc = A.nvls_multicast(dag, topology, group_hosts, chunk, lat, red, prev=mc)


def _hierarchical(dag, topology, grid, nbytes, n_chunks, intra, inter, step,
                  sharp_max_trees, level_latency):
    """Reduce-scatter in servers, all-reduce across servers per local index (rail),
    all-gather in servers; pipelined in ``n_chunks`` chunks.  ``grid [servers, g]``."""
    n_srv, g = grid.shape
    shard = nbytes / (n_chunks * g)       # per GPU per chunk after the reduce-scatter
    prev_rs = prev_x = prev_ag = None
    if intra == "nvls":
        up, down = A.nvls_links(topology, grid[0])
        nv_lat = topology.latency[up[0]] + topology.latency[down[0]] + step
    for _c in range(n_chunks):
        # 1. reduce-scatter inside every server
        if g == 1:
            done = np.full((n_srv, 1), -1)
        elif intra == "ring":
            prev_rs, done = ring(dag, grid, g - 1, shard, prev=prev_rs)
        else:
            ids = [A.nvls_reduce(dag, topology, grid[m], shard, nv_lat,
                                 prev=None if prev_rs is None else prev_rs[m])
                   for m in range(n_srv)]
            prev_rs = done = np.stack(ids)
        # 2. all-reduce of each shard across servers, rail by rail
        if n_srv > 1:
            rails = grid.T                                # [g, servers]
            if inter == "ring":
                prev_x, xdone = ring(dag, rails, 2 * (n_srv - 1), shard / n_srv,
                                     ready=done.T, prev=prev_x)
                done = xdone.T
            elif inter == "tree":
                pars = tree_parents(n_srv, 1)
                new_prev, xdone = [], []
                for r in range(g):
                    d = done[:, r]
                    cols = []
                    for t, par in enumerate(pars):
                        p = None if prev_x is None else prev_x[r * len(pars) + t]
                        ids, dn = tree_reduce_bcast(dag, rails[r], par,
                                                    shard / len(pars), ready=d, prev=p)
                        new_prev.append(ids)
                        cols.append(dn)
                    xdone.append(np.concatenate(cols, axis=1))     # both trees' results
                prev_x = new_prev
                done = np.stack(xdone).transpose(1, 0, 2)          # [servers, g, k]
            else:  # sharp
                new_prev, xdone = [], np.zeros((g, n_srv), np.int64)
                for r in range(g):
                    wait = None
                    if sharp_max_trees is not None and r >= int(sharp_max_trees):
                        wait = int(new_prev[r - int(sharp_max_trees)][1].max())
                    p = None if prev_x is None else prev_x[r]
                    ids, dn = A.sharp_all_reduce(dag, topology, rails[r], shard,
                                                 level_latency, done[:, r], r, prev=p,
                                                 wait=wait)
                    new_prev.append(ids)
                    xdone[r] = dn
                prev_x = new_prev
                done = xdone.T
        # 3. all-gather inside every server
        if g == 1:
            continue
        if intra == "ring":
            prev_ag, _ = ring(dag, grid, g - 1, shard, ready=done, prev=prev_ag)
        else:
            ids = [A.nvls_multicast(dag, topology, grid[m], shard, nv_lat, done[m],
                                    prev=None if prev_ag is None else prev_ag[m])
                   for m in range(n_srv)]
            prev_ag = np.stack(ids)


# ------------------------------------------------------------------ selection
def _eligible(topology, op, hosts, fabric):
    op = _op(op)
    algos = list(ALGORITHMS[op])
    if op != "all_reduce":
        return algos
    groups = A.server_groups(topology, hosts)
    server_model = bool(topology.params.get("server_model"))
    has_nvls = server_model and bool(topology.params.get("nvls", True))
    n_srv = 0 if groups is None else groups.shape[0]
    keep = []
    for a in algos:
        if a == "tree" and groups is None:
            continue
        if a == "nvls" and not (has_nvls and n_srv == 1 and groups.shape[1] > 1):
            continue
        if a == "nvls_tree" and not (has_nvls and n_srv > 1 and groups.shape[1] > 1):
            continue
        if a == "sharp" and not (n_srv > 1 and fabric is not None and fabric.sharp
                                 and server_model):
            continue
        keep.append(a)
    return keep


_UNIT_PLANS: dict = {}


def _plan_at(topology, op, nbytes, hosts, algorithm, protocol, fabric, kw):
    """The plan at ``nbytes``: transfer sizes scale linearly, so one unit-size plan per
    (topology, ranks, algorithm, protocol) is built and cached."""
    kw = dict(kw)
    if kw.get("n_chunks") is None:
        kw["n_chunks"] = auto_chunks(nbytes)
    key = (id(topology), op, hosts.tobytes(), algorithm, protocol, repr(fabric),
           tuple(sorted(kw.items())))
    hit = _UNIT_PLANS.get(key)
    if hit is None or hit[0] is not topology:
        if len(_UNIT_PLANS) > 256:
            _UNIT_PLANS.clear()
        plan = build_plan(topology, op, 1.0, hosts=hosts, algorithm=algorithm,
                          protocol=protocol, fabric=fabric, **kw)
        hit = _UNIT_PLANS[key] = (topology, plan)
    unit = hit[1]
    return dataclasses.replace(unit, size=unit.size * float(nbytes), nbytes=float(nbytes))


def _estimate(plan: CollectivePlan, topology: Topology):
    """(latency floor, seconds per byte) of a unit-size plan."""
    cap = np.where(topology.link_up, topology.capacity, 0.0) * plan.bw_scale
    load = link_bytes(plan)
    used = load > 0
    per_byte = float(np.max(load[used] / np.maximum(cap[used], 1e-300))) if used.any() \
        else 0.0
    return critical_path(plan), per_byte


def select_algorithm(topology: Topology, op: str, nbytes: float, *, hosts=None,
                     fabric=None, algorithms=None, protocols=None, **kw):
    """NCCL-like choice of (algorithm, protocol) for one message size.

    Every eligible pair's plan is built once at unit size; its estimated time at
    ``nbytes`` is its critical-path latency plus ``nbytes`` times its most loaded
    link's seconds per byte (module docstring of :mod:`._tuning`), and the fastest
    wins, as ``ncclTopoGetAlgoTime`` / ``getAlgoInfo`` do with NCCL's own model.

    Args:
      algorithms, protocols: restrict the candidates (override, like ``NCCL_ALGO`` /
        ``NCCL_PROTO``).
      kw: passed to :func:`build_plan` (``n_channels``, ``n_chunks`` ...).

    Returns:
      ``(algorithm, protocol, estimates)`` with ``estimates[(algorithm, protocol)] =
      seconds``.
    """
    hosts = _hosts(topology, hosts)
    fab = _fabric(fabric)
    algos = [a for a in _eligible(topology, op, hosts, fab)
             if algorithms is None or a in algorithms]
    protos = [p for p in PROTOCOLS if protocols is None or p in protocols]
    if not algos or not any(p in ALGORITHM_PROTOCOLS.get(a, PROTOCOLS)
                                for a in algos for p in protos):
        raise ValueError(f"no eligible algorithm/protocol for {op!r} among "
                         f"algorithms={algorithms}, protocols={protocols}")
    est = {}
    for a in algos:
        for p in protos:
            if p not in ALGORITHM_PROTOCOLS.get(a, PROTOCOLS):
                continue
            kw_s = dict(kw)
            if kw_s.get("n_chunks") is None:
                kw_s["n_chunks"] = auto_chunks(nbytes)
            lat, per_byte = _estimate(_plan_at(topology, _op(op), 1.0, hosts, a, p, fab,
                                               kw_s), topology)
            est[(a, p)] = lat + float(nbytes) * per_byte
    best = min(est, key=est.get)
    return best[0], best[1], est


def run_collective(topology: Topology, op: str, nbytes: float, *, hosts=None,
                   algorithm: str | None = None, protocol: str | None = None,
                   fabric=None, **kw) -> CollectiveResult:
    """Select (unless given), build and simulate one collective."""
    return sweep(topology, op, [nbytes], hosts=hosts, algorithm=algorithm,
                 protocol=protocol, fabric=fabric, **kw)[0]


def sweep(topology: Topology, op: str, sizes, *, hosts=None, algorithm: str | None = None,
          protocol: str | None = None, fabric=None, **kw) -> list[CollectiveResult]:
    """One collective at several sizes (nccl-tests' sweep), each with its own choice.

    Sizes that choose the same (algorithm, protocol) share one plan shape and run as
    one batched simulation (:func:`simulate_plans`).
    """
    hosts = _hosts(topology, hosts)
    fab = _fabric(fabric)
    op = _op(op)
    sizes = [float(s) for s in sizes]
    chosen = []
    for s in sizes:
        a, p = algorithm, protocol
        if a is None or p is None:
            sa, sp, _ = select_algorithm(
                topology, op, s, hosts=hosts, fabric=fab,
                algorithms=None if a is None else (a,),
                protocols=None if p is None else (p,), **kw)
            a, p = sa, sp
        chosen.append((a, p, kw.get("n_chunks") or auto_chunks(s)))
    out: list = [None] * len(sizes)
    for key in dict.fromkeys(chosen):
        idx = [i for i, c in enumerate(chosen) if c == key]
        plans = [_plan_at(topology, op, sizes[i], hosts, key[0], key[1], fab,
                          dict(kw, n_chunks=key[2])) for i in idx]
        for i, r in zip(idx, simulate_plans(plans, topology)):
            out[i] = r
    return out
