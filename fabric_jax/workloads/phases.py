"""The collective flows of one training step of a parallel plan, at rank level.

One builder, :func:`step_collectives`, turns a model and a
:class:`~fabric_jax.workloads.model.ParallelPlan` into the network flows of one step's
collectives as a :class:`~fabric_jax.workloads.Workload` whose ``src`` / ``dst`` are GPU
*ranks* in Megatron order (``rank = (p dp + d) tp + t``, :meth:`ParallelPlan.groups`;
Narayanan et al., SC 2021), one group per collective instance, and a ``phase`` column
(:data:`PHASES`).  Bytes per GPU and step come from
:func:`fabric_jax.workloads.model.comm_bytes`.  The callers place the ranks on hosts and
drop the flows that stay inside a server (NVLink):
:func:`fabric_jax.workloads.model_training_step` (the compare study's model step, with
compute and step gating from :func:`fabric_jax.workloads.training_step`) and
:func:`fabric_jax.scale.step_flows` (one slice of the step at cluster scale).

Collectives:

* **expert-parallel all-to-all** in each EP group (``4 L/pp m`` all-to-alls per step,
  aggregated): uniform (rank ``a`` sends ``S/n`` to every other rank, as
  :func:`fabric_jax.workloads.all_to_all`) or, with ``expert_skew``, rank ``a`` sends rank
  ``b`` the share of ``b``'s experts in a Zipf(``s``) expert popularity (one popularity
  per pipeline stage, the same in every EP group and TP lane: the hot experts are a
  property of the layer; :func:`fabric_jax.workloads.zipf_expert_load`); zero-byte flows
  are left out; ``expert_load="capacity"`` bounds that popularity at a capacity
  factor (:func:`expert_loads`).  A model with node-limited routing
  (``ModelConfig.node_limit``, DeepSeek-V3) runs the all-to-all DeepEP's way
  (DeepSeek-V3, arXiv 2412.19437, Sec. 3.2.2, "Efficient Implementation of Cross-Node
  All-to-All Communication"): a token crosses the network once per destination server
  its experts sit on (at most ``node_limit``), to the GPU with the same in-node index,
  which forwards it over NVLink to the experts there.  With ``P_d`` the share of tokens
  whose experts include one on server ``d`` of the group (:func:`node_limited_routing`;
  the same for every source, an assumption: a token's routing does not depend on
  where it was produced), rank ``a`` on server ``i`` sends the rank of the same in-node
  index on server ``d != i``: ``2 U (P_d + P_i)`` bytes per step, ``U = total / (4
  top_k)`` the bytes of one pass over the rank's tokens (dispatch ``P_d`` and
  combine ``P_i``, forward and backward).  Per GPU that is ``4 U (N - 1)/N sum_d P_d``
  on average over the ``N`` servers of the group.  Dispatch and combine are both
  counted at the model's precision (DeepSeek-V3 dispatches in FP8 and combines in
  BF16, Sec. 3.3: not modelled);
* **pipeline sends** between consecutive stages of each lane, activations forward and
  gradients back (``m`` per direction, aggregated);
* **data-parallel gradient synchronisation** over each DP group (dense gradients) and
  each expert-DP group (expert gradients), either

  - ``dp="all_reduce"``: one steady-state pipelined ring all-reduce per group (every rank
    streams ``2 (n-1)/n`` of the payload to its successor, or the payload once with
    SHARP; :func:`fabric_jax.workloads.steady_state_all_reduce`), or
  - ``dp="reduce_scatter_all_gather"``: the distributed optimizer / FSDP's
    reduce-scatter then all-gather, each a steady-state ring carrying ``(n-1)/n`` of the
    payload, hierarchical when a group has several members per server (one ring per
    rail, :func:`rail_rings`); all-gather flow ``(i, j)`` waits for the reduce-scatter
    flow into its sender.  Or, per family (``dp_algorithms``), PAT where NCCL runs it
    (one member per server): ``ceil(log2 n)`` steps of
    :func:`fabric_jax.collectives.schedules.pat` each way, the same ``(n-1)/n`` of the
    payload per rank spread over peers at distances ``1, 2, 4, ...``; a rank's
    all-gather starts after the last reduce-scatter step into it.

Units: bytes, seconds.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabric_jax.collectives.schedules import TransferDag, all_to_all_pairs, pat, ring
from fabric_jax.workloads.flows import Workload, concat
from fabric_jax.workloads.model import ParallelPlan, comm_bytes, get_model, step_flops

__all__ = ["PHASES", "DP_COLLECTIVES", "EXPERT_LOADS", "ROUTING_TOKENS", "step_collectives",
           "step_compute", "rail_rings", "drop_empty_groups", "expert_loads",
           "capacity_bound", "node_limited_routing"]

#: Phase ids of a step's flows (the ``phase`` column): ``background`` marks other
#: traffic sharing the fabric (:func:`fabric_jax.scale.add_background`).
PHASES = {0: "ep_all_to_all", 1: "pp_send", 2: "dp_reduce_scatter", 3: "dp_all_gather",
          4: "background", 5: "dp_all_reduce"}
#: How the data-parallel gradients are synchronised (module docstring).
DP_COLLECTIVES = ("all_reduce", "reduce_scatter_all_gather")
#: Expert-load distributions (:func:`expert_loads`).
EXPERT_LOADS = ("zipf", "capacity")
#: Seeded tokens per pipeline stage that estimate node-limited routing's server shares
#: (:func:`node_limited_routing`).
ROUTING_TOKENS = 4096


def step_compute(model, plan: ParallelPlan, gpu) -> dict:
    """Compute of one step on every GPU: ``step_flops`` (FLOPs of the step),
    ``math_time`` (s, the FLOPs over ``n_gpus`` GPUs at ``achievable_fraction`` of
    ``gpu.peak_flops``; with an uneven pipeline, ``ParallelPlan.uneven_pp``, times the
    busiest stage's layers over the mean, ``ceil(L/pp) pp / L``: the pipeline runs at its
    slowest stage's pace), ``bubble`` (the 1F1B pipeline bubble ``(pp - 1)/m``, Narayanan
    et al. 2021), ``tp_time`` (s, the tensor-parallel bytes over NVLink) and
    ``compute_time = math_time (1 + bubble) + tp_time``."""
    m = plan.n_microbatches(model)
    flops = step_flops(model, recompute=plan.recompute)
    math_time = flops / plan.n_gpus / (gpu.peak_flops * plan.achievable_fraction)
    if model.n_layers % plan.pp:
        math_time *= -(-model.n_layers // plan.pp) * plan.pp / model.n_layers
    bubble = (plan.pp - 1) / m
    tp_time = comm_bytes(model, plan)["tp_bytes_sent"] / gpu.nvlink_bandwidth
    return dict(step_flops=flops, math_time=math_time, bubble=bubble, tp_time=tp_time,
                compute_time=math_time * (1.0 + bubble) + tp_time, microbatches=m)


def rail_rings(groups: np.ndarray, server: np.ndarray):
    """Rail-aligned rings of each group (hierarchical collective): ``[rings, n]`` ranks
    and the fraction of the payload each ring carries.

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


def _flows(src, dst, size, group, names, kind, group_bytes, ranks, phase, job) -> Workload:
    """Rank-level flows of one collective family (one group per instance)."""
    src = np.asarray(src, np.int32)
    n, k = src.size, len(names)
    return Workload(
        src=src, dst=np.asarray(dst, np.int32), size=np.asarray(size, np.float64),
        arrival=np.zeros(n), deps=np.full((n, 0), -1, np.int32),
        delay=np.zeros(n), job=np.zeros(n, np.int32), group=group,
        group_names=tuple(names), job_names=(job,),
        group_bytes=np.broadcast_to(np.asarray(group_bytes, np.float64), (k,)),
        group_kind=(kind,) * k, group_ranks=np.full(k, int(ranks)),
        columns={"phase": np.full(n, phase, np.int32)})


def capacity_bound(load, capacity_factor: float) -> np.ndarray:
    """Expert loads ``load`` (``[..., E]``, each row summing to 1) bounded at
    ``capacity_factor`` times the mean ``1/E``, the excess of a capped expert spread
    over the others in proportion to their load (no token dropped): ``min(c, lam w_e)``
    with ``lam`` such that each row sums to 1 (water-filling, NumPy, vectorised)."""
    w = np.asarray(load, np.float64)
    E = w.shape[-1]
    cap = float(capacity_factor) / E
    ws = -np.sort(-w, axis=-1)                              # descending
    top = np.cumsum(ws, axis=-1) - ws                       # mass of the j larger ones
    j = np.arange(E)
    lam = (1.0 - j * cap) / np.maximum(1.0 - top, 1e-300)   # j experts capped
    ok = lam * ws <= cap * (1.0 + 1e-12)                    # the next one fits
    first = np.argmax(ok, axis=-1)[..., None]
    lam_j = np.take_along_axis(lam, first, axis=-1)
    return np.minimum(cap, lam_j * w)


def expert_loads(n_experts: int, stages: int, skew: float, seed: int, *,
                 expert_load: str = "zipf", capacity_factor: float = 1.25) -> np.ndarray:
    """``[stages, E]`` share of a stage's token-expert assignments each expert receives.

    ``"zipf"``: a Zipf(``skew``) popularity over the experts in a random order per
    stage (:func:`fabric_jax.workloads.zipf_expert_load`); ``"capacity"``: the same,
    bounded at ``capacity_factor`` times the mean by :func:`capacity_bound` (a router
    that keeps every expert within its capacity without dropping tokens, as
    DeepSeek-V3's auxiliary-loss-free bias does, arXiv 2412.19437 Sec. 2.1.2 and "No
    Token-Dropping"; capacity factors 1.0-1.25 in Switch Transformer, Fedus et al.,
    JMLR 2022, Sec. 2.2; the bound standing for the residual imbalance is our
    assumption; Switch and GShard drop the tokens over capacity instead, not modelled).
    """
    rng = np.random.default_rng(seed)
    E = int(n_experts)
    w = np.arange(1, E + 1, dtype=np.float64) ** -float(skew)
    w /= w.sum()
    perm = rng.permuted(np.broadcast_to(np.arange(E), (stages, E)), axis=1)
    load = np.empty((stages, E))
    np.put_along_axis(load, perm, np.broadcast_to(w, (stages, E)), axis=1)
    if expert_load == "capacity":
        load = capacity_bound(load, capacity_factor)
    elif expert_load != "zipf":
        raise ValueError(f"expert_load: must be one of {EXPERT_LOADS}; got {expert_load!r}")
    return load


def node_limited_routing(load, n_nodes: int, top_k: int, node_limit: int, *,
                         tokens: int = ROUTING_TOKENS, seed: int = 0,
                         keep_tokens: bool = False) -> dict:
    """Which servers a token's ``top_k`` experts sit on, under node-limited routing.

    DeepSeek-V3 (arXiv 2412.19437, Sec. 2.1.2, "Node-Limited Routing"): each token goes
    to at most ``M = node_limit`` nodes, those with the highest sums of the ``top_k /
    M`` highest affinities of the experts on them, and picks its ``top_k`` experts among
    theirs.  Affinities here (an assumption, not the trained router): ``log load_e``
    plus a Gumbel draw per token and expert, so that without a node limit the top
    ``top_k`` are a draw without replacement in proportion to ``load`` (the Gumbel
    top-k trick).  Experts are laid out in order, ``E / n_nodes`` per node (expert
    parallelism's contiguous shards).  ``tokens`` seeded tokens per row of ``load``
    estimate the shares (Monte Carlo, error ~ ``1/sqrt(tokens)``).

    Args:
      load: ``[rows, E]`` expert loads (:func:`expert_loads`), or ``[E]``.
      n_nodes: servers the experts are spread over (dividing ``E``).
      top_k, node_limit: ``K`` and ``M`` (``M = 0`` or ``M >= n_nodes``: no limit).

    Returns:
      ``{"node_share": [rows, n_nodes]`` fraction of tokens whose experts include one
      on each node, ``"nodes_per_token": [rows]`` mean distinct nodes per token (the
      row sums of ``node_share``), ``"expert_share": [rows, E]`` fraction of
      token-expert assignments each expert got``}``; with ``keep_tokens`` also
      ``"token_nodes": [rows, tokens, n_nodes]`` (bool: the servers of each token) and
      ``"token_experts": [rows, tokens, top_k]`` (its experts).
    """
    load = np.atleast_2d(np.asarray(load, np.float64))
    rows, E = load.shape
    N, K = int(n_nodes), int(top_k)
    if N < 1 or E % N:
        raise ValueError(f"n_nodes: must divide the {E} experts; got {n_nodes}")
    M = int(node_limit) if node_limit and int(node_limit) < N else N
    if M * (E // N) < K:
        raise ValueError(f"node_limit: {M} servers of {E // N} experts hold fewer than "
                         f"top_k = {K} experts; use a smaller expert-parallel degree")
    rng = np.random.default_rng(seed)
    share, eshare = np.zeros((rows, N)), np.zeros((rows, E))
    kept_nodes, kept_experts = [], []
    for r in range(rows):                                    # pipeline stages
        u = (np.log(np.maximum(load[r], 1e-300))[None, :]
             + rng.gumbel(size=(tokens, E))).astype(np.float32)
        if M < N:
            per = u.reshape(tokens, N, E // N)
            kk = min(max(1, K // M), E // N)
            score = -np.sort(-per, axis=2)[:, :, :kk].sum(axis=2)      # [T, N]
            keep = np.argsort(-score, axis=1)[:, :M]
            allowed = np.zeros((tokens, N), bool)
            np.put_along_axis(allowed, keep, True, axis=1)
            u = np.where(np.repeat(allowed, E // N, axis=1), u, -np.inf)
        pick = np.argpartition(-u, K - 1, axis=1)[:, :K]                 # [T, K]
        chosen = np.zeros((tokens, E), bool)
        np.put_along_axis(chosen, pick, True, axis=1)
        eshare[r] = chosen.mean(axis=0) / K
        nodes = chosen.reshape(tokens, N, E // N).any(axis=2)
        share[r] = nodes.mean(axis=0)
        if keep_tokens:
            kept_nodes.append(nodes)
            kept_experts.append(np.sort(pick, axis=1))
    out = dict(node_share=share, nodes_per_token=share.sum(axis=1), expert_share=eshare)
    if keep_tokens:
        out.update(token_nodes=np.stack(kept_nodes), token_experts=np.stack(kept_experts))
    return out


def _member_nodes(groups, gpus_per_server):
    """``(node, local, q)``: each EP-group member's server index within its group, its
    index among the group's members on that server, and the members per server.

    Raises:
      ValueError: a group whose members do not sit ``q`` per server in server order.
    """
    srv = groups // gpus_per_server
    n_groups, n = groups.shape
    q = int(np.sum(srv[0] == srv[0, 0]))
    blocks = srv.reshape(n_groups, -1, q) if n % q == 0 else None
    if blocks is None or not np.all(blocks == blocks[:, :, :1]) or \
            not np.all(np.diff(blocks[:, :, 0], axis=1) > 0):
        raise ValueError("ep: the expert-parallel group's members do not sit evenly on "
                         "its servers; use an ep that fills whole servers")
    node = (np.arange(n) // q)[None, :]
    return np.broadcast_to(node, groups.shape), np.arange(n) % q, q


def _all_to_all(mdl, plan: ParallelPlan, groups, total, expert_skew, seed, job,
                expert_load="zipf", capacity_factor=1.25, routing=None):
    """The expert-parallel all-to-all of every EP group (module docstring)."""
    n_groups, n = groups.shape
    if mdl.node_limit:
        return _node_limited_all_to_all(mdl, plan, groups, total, expert_skew, seed, job,
                                        expert_load, capacity_factor, routing)
    i, j = all_to_all_pairs(n)
    a, b = groups[:, i].reshape(-1), groups[:, j].reshape(-1)
    row, pos = np.repeat(np.arange(n_groups), i.size), np.tile(j, n_groups)
    if expert_skew is None:
        size = total * np.full(a.size, 1.0 / n)
    else:
        # EP groups are [pp, tp, dp/ep] rows: the stage of row r is r // (tp dp/ep)
        stage = row // (plan.tp * (plan.dp // plan.ep))
        E = mdl.n_experts
        load = expert_loads(E, plan.pp, expert_skew, seed, expert_load=expert_load,
                            capacity_factor=capacity_factor)
        per_rank = load.reshape(plan.pp, plan.ep, E // plan.ep).sum(axis=2)
        size = total * per_rank[stage, pos]
    keep = size > 0
    return _flows(a[keep], b[keep], size[keep], row[keep],
                  [f"ep_g{g}" for g in range(n_groups)], "all_to_all", total, n, 0, job)


def _node_limited_all_to_all(mdl, plan, groups, total, expert_skew, seed, job,
                             expert_load, capacity_factor, routing):
    """The all-to-all of a node-limited model, DeepEP's way (module docstring)."""
    n_groups, n = groups.shape
    node, local, q = _member_nodes(groups, plan.gpus_per_server)
    N = n // q
    E = mdl.n_experts
    load = (np.full((plan.pp, E), 1.0 / E) if expert_skew is None else
            expert_loads(E, plan.pp, expert_skew, seed, expert_load=expert_load,
                         capacity_factor=capacity_factor))
    rt = node_limited_routing(load, N, mdl.top_k, mdl.node_limit, seed=seed + 7919)
    if routing is not None:
        routing.update(rt, nodes=N, load=load)
    if N == 1:
        return Workload.empty().with_columns(phase=np.zeros(0, np.int32))
    P = rt["node_share"]                                      # [pp, N]
    # one pass's bytes of a rank's tokens, one copy per token: total / (4 top_k)
    unit = total / (4.0 * mdl.top_k)
    ia, d = np.nonzero(~np.eye(N, dtype=bool))                 # node pairs, i != d
    pos_a = (ia[:, None] * q + np.arange(q)[None, :]).reshape(-1)
    pos_b = (d[:, None] * q + np.arange(q)[None, :]).reshape(-1)
    ni, nd = np.repeat(ia, q), np.repeat(d, q)
    rows = np.repeat(np.arange(n_groups), pos_a.size)
    stage = rows // (plan.tp * (plan.dp // plan.ep))
    a = groups[:, pos_a].reshape(-1)
    b = groups[:, pos_b].reshape(-1)
    dd, ii = np.tile(nd, n_groups), np.tile(ni, n_groups)
    size = 2.0 * unit * (P[stage, dd] + P[stage, ii])
    keep = size > 0
    return _flows(a[keep], b[keep], size[keep], rows[keep],
                  [f"ep_g{g}" for g in range(n_groups)], "all_to_all", total, n, 0, job)


def _pp_sends(lanes, per, order, job):
    """Sends between consecutive stages of each lane, both directions (module docstring):
    ``order="lane"`` lane by lane (forward then backward), ``"direction"`` every lane's
    forward sends, then every lane's backward ones."""
    L, p = lanes.shape
    a, b = lanes[:, :-1], lanes[:, 1:]
    if order == "lane":
        src, dst = np.concatenate([a, b], axis=1), np.concatenate([b, a], axis=1)
        group = np.repeat(np.arange(L), 2 * (p - 1))
    else:
        src, dst = np.stack([a, b]), np.stack([b, a])
        group = np.tile(np.repeat(np.arange(L), p - 1), 2)
    return _flows(src.reshape(-1), dst.reshape(-1), np.full(group.size, per), group,
                  [f"pp_g{g}" for g in range(L)], "sendrecv", per, p, 1, job)


def _dp_all_reduce(key, rows, nbytes, sharp, job):
    """One steady-state ring all-reduce per row of ``rows``: one step of
    :func:`fabric_jax.collectives.schedules.ring` carrying the rate share."""
    n_rows, n = rows.shape
    per = nbytes if sharp else 2.0 * (n - 1) / n * nbytes
    dag = TransferDag()
    ring(dag, rows, 1, per)
    src, dst, size, _ = dag.arrays()
    return _flows(src, dst, size, np.repeat(np.arange(n_rows), n),
                  [f"{key}_g{g}" for g in range(n_rows)], "all_reduce", nbytes, n, 5, job)


def _dp_rs_ag(families, job):
    """Reduce-scatter of every family, then their all-gathers, as one block (module
    docstring): ``families`` is ``[(key, rings [R, k], bytes, algorithm)]``.  A ring
    family: one step of :func:`fabric_jax.collectives.schedules.ring` carrying
    ``bytes`` per ring flow, an all-gather flow ready when the reduce-scatter flow into
    its sender is done.  A ``"pat"`` family: :func:`fabric_jax.collectives.schedules.
    pat` of a buffer of ``bytes`` per row, each way, a rank's all-gather ready when the
    last reduce-scatter step into it is done."""
    dag = TransferDag()
    done, counts = [], []
    for _, r, s, alg in families:
        if alg == "pat":
            ids, last = pat(dag, r, s, "reduce_scatter")
        else:
            ids, last = ring(dag, r, 1, s)
        done.append(last)
        counts.append(ids.shape[0])
    for (_, r, s, alg), into in zip(families, done):
        if alg == "pat":
            ids, _ = pat(dag, r, s, "all_gather", ready=into)
        else:
            ids, _ = ring(dag, r, 1, s, ready=into)
        counts.append(ids.shape[0])
    src, dst, size, deps = dag.arrays()
    parts, start, c = [], 0, 0
    for phase, kind, tag in ((2, "reduce_scatter", "rs"), (3, "all_gather", "ag")):
        for key, r, s, alg in families:
            n_r, k_r = r.shape
            end = start + r.size * counts[c]
            c += 1
            sent = (k_r - 1) / k_r * s if alg == "pat" else s     # bytes a rank sends
            parts.append(_flows(src[start:end], dst[start:end], size[start:end],
                                np.tile(np.repeat(np.arange(n_r), k_r), counts[c - 1]),
                                [f"{key}_{tag}_r{i}" for i in range(n_r)], kind, sent, k_r,
                                phase, job))
            start = end
    block = concat(*parts)
    # one dependency at most: -1 for a reduce-scatter flow
    return dataclasses.replace(block, deps=deps.max(axis=1)[:, None].astype(np.int32))


def step_collectives(model, plan: ParallelPlan, *, expert_skew: float | None = None,
                     seed: int = 0, dp: str = "all_reduce", sharp: bool = False,
                     pp_order: str = "lane", job: str = "train",
                     dp_algorithms=None, expert_load: str = "zipf",
                     capacity_factor: float = 1.25, routing: dict | None = None
                     ) -> Workload:
    """The collective flows of one training step at rank level (module docstring).

    Args:
      model: :class:`~fabric_jax.workloads.model.ModelConfig` or a name.
      plan: the :class:`ParallelPlan` (checked).
      expert_skew: Zipf exponent of the expert load (``None``: uniform all-to-all).
      seed: seed of the expert popularity.
      dp: :data:`DP_COLLECTIVES`.
      sharp: in-network reduction for ``dp="all_reduce"`` (InfiniBand SHARP).
      pp_order: ``"lane"`` or ``"direction"`` (:func:`_pp_sends`; the flows are the same).
      job: the job name of every flow.
      dp_algorithms: with ``"reduce_scatter_all_gather"``, ``{"dp" | "edp": "ring" |
        "pat"}`` per family (default ring); PAT needs one member per server.
      expert_load: :data:`EXPERT_LOADS` (:func:`expert_loads`; with ``expert_skew``).
      capacity_factor: the bound of ``expert_load="capacity"``, times the mean load
        (>= 1).
      routing: a dict filled, for a node-limited model, with
        :func:`node_limited_routing`'s result, ``nodes`` (servers per EP group) and
        ``load`` (the expert loads).

    Returns:
      a ``Workload`` over ranks ``0 .. n_gpus - 1`` in the order all-to-all, pipeline
      sends, data-parallel (dense groups, then expert groups; with
      ``"reduce_scatter_all_gather"`` every reduce-scatter, then every all-gather), with
      a ``phase`` column (:data:`PHASES`); flows between two ranks of one server are
      kept (the caller places the ranks).
    """
    if dp not in DP_COLLECTIVES:
        raise ValueError(f"dp: must be one of {DP_COLLECTIVES}; got {dp!r}")
    algs = dict(dp_algorithms or {})
    if set(algs) - {"dp", "edp"} or set(algs.values()) - {"ring", "pat"}:
        raise ValueError(f"dp_algorithms: keys 'dp' / 'edp', values 'ring' / 'pat'; got "
                         f"{algs!r}")
    if expert_load not in EXPERT_LOADS:
        raise ValueError(f"expert_load: must be one of {EXPERT_LOADS}; got {expert_load!r}")
    if not float(capacity_factor) >= 1.0:
        raise ValueError(f"capacity_factor: must be >= 1 (times the mean expert load); "
                         f"got {capacity_factor!r}")
    if pp_order not in ("lane", "direction"):
        raise ValueError(f"pp_order: must be 'lane' or 'direction'; got {pp_order!r}")
    mdl = get_model(model)
    plan.check(mdl)
    cb = comm_bytes(mdl, plan)
    groups = plan.groups()
    parts = []
    if cb["ep_alltoall_count"]:
        total = cb["ep_alltoall_bytes"] * cb["ep_alltoall_count"]
        parts.append(_all_to_all(mdl, plan, groups["ep"], total, expert_skew, seed, job,
                                 expert_load, capacity_factor, routing))
    if cb["pp_send_count"]:
        per = cb["pp_send_bytes"] * cb["pp_send_count"] / 2.0
        parts.append(_pp_sends(groups["pp"], per, pp_order, job))
    server = np.arange(plan.n_gpus) // plan.gpus_per_server
    families = []
    for key in ("dp", "edp"):
        nbytes = cb[f"{key}_allreduce_bytes"]
        if not nbytes:
            continue
        if dp == "all_reduce":
            if groups[key].shape[1] >= 2:
                parts.append(_dp_all_reduce(key, groups[key], nbytes, sharp, job))
            continue
        r, frac = rail_rings(groups[key], server)
        if r.shape[1] < 2:
            continue
        if algs.get(key, "ring") == "pat":
            srv = np.sort(server[r], axis=1)
            if frac != 1.0 or np.any(srv[:, 1:] == srv[:, :-1]):
                raise ValueError(f"dp_algorithms: PAT runs with one rank per server; the "
                                 f"{key} groups have several (use 'ring')")
            families.append((key, r, nbytes, "pat"))
        else:
            families.append((key, r, (r.shape[1] - 1) / r.shape[1] * nbytes * frac, "ring"))
    if families:
        parts.append(_dp_rs_ag(families, job))
    if not parts:
        return Workload.empty().with_columns(phase=np.zeros(0, np.int32))
    return concat(*parts)


def drop_empty_groups(w: Workload) -> Workload:
    """``w`` without the groups that have no flows (the rest renumbered in order)."""
    used = np.zeros(w.n_groups, bool)
    used[w.group[w.group >= 0]] = True
    new = np.cumsum(used) - 1
    keep = np.flatnonzero(used)
    return dataclasses.replace(
        w, group=np.where(w.group >= 0, new[np.maximum(w.group, 0)], -1),
        group_names=tuple(w.group_names[g] for g in keep), group_bytes=w.group_bytes[keep],
        group_kind=tuple(w.group_kind[g] for g in keep), group_ranks=w.group_ranks[keep])
