"""Collective operations as DAGs of point-to-point flows, one :class:`Workload` per call.

The schedules (who sends to whom, in which step, after which earlier flow; ring order;
tree parents) are NCCL's model's, :mod:`fabric_jax.collectives.schedules`; the builders
here lay one schedule over ``hosts`` with one flow per transfer.  Each builder takes
``hosts`` (int [ranks]: rank ``r`` runs on host ``hosts[r]``; choose them with
:mod:`placement`) and the collective's payload ``size`` ``S`` in bytes, and returns a
single-group :class:`Workload` whose ``deps`` encode the algorithm's data dependencies.
Every step is a *store-and-forward* exchange: a rank forwards a chunk only after the
flow carrying the data it needs has completely arrived.  This is the step model of
Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 19(1), 2005 (cost ``alpha + n_bytes * beta`` per step); NCCL additionally
pipelines each step in small chunks, which the flow-level model ignores except where
``n_chunks`` is offered.

Closed forms (``n`` ranks, payload ``S``), as tested:

=========================  ===================  ===========  ==========================
builder                    flows                flow size    bytes sent per rank
=========================  ===================  ===========  ==========================
ring_all_reduce            ``2 (n-1) n``        ``S/n``      ``2 (n-1)/n S``
ring_reduce_scatter        ``(n-1) n``          ``S/n``      ``(n-1)/n S``
ring_all_gather            ``(n-1) n``          ``S/n``      ``(n-1)/n S``
halving_doubling_all_red.  ``2 log2(n) n``      ``S/2..S/n``  ``2 (n-1)/n S``
tree_all_reduce (double)   ``4 (n-1) k``        ``S/(2k)``   ``<= 2 S`` (interior)
all_to_all (uniform)       ``n (n-1)``          ``S/n``      ``(n-1)/n S``
=========================  ===================  ===========  ==========================

``S`` follows nccl-tests: the all-reduce buffer, the full (gathered) output of
all-gather, the full input of reduce-scatter, each rank's send buffer for all-to-all.
``group_bytes = S`` so that ``algbw = S / time``; ``busbw`` applies the usual factors
(``2 (n-1)/n`` all-reduce, ``(n-1)/n`` the others).

Units: bytes, seconds.

Example:
    >>> from fabric_jax.workloads import ring_all_reduce
    >>> w = ring_all_reduce([0, 1, 2, 3], 4e6)   # 4 ranks, 4 MB buffer
    >>> w.n_flows, float(w.size[0])              # 2*(4-1)*4 flows of S/4
    (24, 1000000.0)
"""

from __future__ import annotations

import numpy as np

from fabric_jax.collectives.schedules import (TransferDag, all_to_all_pairs, compact_deps,
                                              halving_doubling, ring, tree_broadcast,
                                              tree_reduce)
from fabric_jax.collectives.trees import btree_parent, double_binary_tree
from fabric_jax.workloads._random import as_key
from fabric_jax.workloads.flows import Workload, check_hosts, check_size, single_group

__all__ = [
    "ring_all_reduce", "ring_reduce_scatter", "ring_all_gather",
    "halving_doubling_all_reduce", "tree_all_reduce", "double_binary_tree",
    "all_to_all", "zipf_expert_load", "pipeline_sends", "steady_state_all_reduce",
]


def _ring(hosts, size, n_steps, *, kind, name, job, arrival):
    """``n_steps`` steps of :func:`fabric_jax.collectives.schedules.ring` over the
    ranks in order, ``S/n`` each.  Flow id ``s * n + i``."""
    n = hosts.size
    dag = TransferDag()
    ring(dag, hosts[None], n_steps, size / n)
    src, dst, _, dep = dag.arrays()
    return single_group(src, dst, size / n, dep, name=name or f"ring_{kind}",
                        kind=kind, group_bytes=size, n_ranks=n, job=job, arrival=arrival)


def ring_all_reduce(hosts, size, *, job: str = "job0", name: str | None = None,
                    arrival: float = 0.0) -> Workload:
    """Ring all-reduce: reduce-scatter then all-gather around a ring (Patarasuk & Yuan,
    JPDC 2009; NCCL's ring algorithm; Thakur et al. 2005 Sec. 4.4).

    ``2 (n-1)`` steps; in each, rank ``i`` sends ``S/n`` bytes to rank ``(i+1) mod n``.
    The step-``s+1`` flow from rank ``i`` depends on the step-``s`` flow into rank ``i``
    (it forwards, after reducing, the chunk it has just received).

    Args:
        hosts: int [ranks] host of each rank, distinct, ``ranks >= 2``.
        size: buffer size ``S``, bytes.
        job: job (tenant) name.
        name: group name (default ``"ring_all_reduce"``).
        arrival: earliest start of every flow, seconds.

    Returns:
        ``Workload`` with ``2 (n-1) n`` flows of ``S/n`` bytes in step-major order.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    return _ring(hosts, size, 2 * (hosts.size - 1), kind="all_reduce", name=name, job=job,
                 arrival=arrival)


def ring_reduce_scatter(hosts, size, *, job: str = "job0", name: str | None = None,
                        arrival: float = 0.0) -> Workload:
    """Ring reduce-scatter: ``n-1`` ring steps of ``S/n`` (``S`` = full input buffer).

    Same dependency rule as :func:`ring_all_reduce`; returns ``(n-1) n`` flows.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    return _ring(hosts, size, hosts.size - 1, kind="reduce_scatter", name=name, job=job,
                 arrival=arrival)


def ring_all_gather(hosts, size, *, job: str = "job0", name: str | None = None,
                    arrival: float = 0.0) -> Workload:
    """Ring all-gather: ``n-1`` ring steps of ``S/n`` (``S`` = full gathered output).

    Same dependency rule as :func:`ring_all_reduce`; returns ``(n-1) n`` flows.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    return _ring(hosts, size, hosts.size - 1, kind="all_gather", name=name, job=job,
                 arrival=arrival)


def halving_doubling_all_reduce(hosts, size, *, job: str = "job0", name: str | None = None,
                                arrival: float = 0.0) -> Workload:
    """Rabenseifner's all-reduce: recursive-halving reduce-scatter, then
    recursive-doubling all-gather (Thakur et al. 2005, Sec. 4.4, Fig. 5).

    With ``n = 2^m`` ranks: reduce-scatter step ``k = 0..m-1`` pairs rank ``i`` with
    ``i XOR n/2^(k+1)`` and each sends ``S / 2^(k+1)``; the all-gather mirrors it
    (distances ``1, 2, ..., n/2``, sizes ``S/n, 2S/n, ..., S/2``).  Each flow depends on
    the previous step's flow into its sender.  ``2 m n`` flows; each rank sends
    ``2 (n-1)/n S`` in total, as in the ring, in ``2 log2 n`` steps instead of ``2 (n-1)``.

    Raises:
        ValueError: if the number of ranks is not a power of two.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    n = hosts.size
    m = int(np.log2(n))
    if 2**m != n:
        raise ValueError(f"hosts: halving-doubling needs a power-of-two number of ranks, got "
                         f"{n}; use ring_all_reduce or tree_all_reduce")
    dag = TransferDag()
    halving_doubling(dag, hosts, size)
    src, dst, flow_bytes, dep = dag.arrays()
    return single_group(src, dst, flow_bytes, dep, name=name or "halving_doubling_all_reduce",
                        kind="all_reduce", group_bytes=size, n_ranks=n, job=job,
                        arrival=arrival)


def steady_state_all_reduce(hosts, size, *, sharp: bool = False, job: str = "job0",
                            name: str | None = None, arrival: float = 0.0) -> Workload:
    """Bandwidth-bound all-reduce of ``size`` bytes over ``hosts``, one flow per host.

    Ring (``sharp=False``): the pipelined ring in its steady state: every rank streams
    ``2 (n-1)/n * size`` bytes to its ring successor, all at once (the per-step flows
    of :func:`ring_all_reduce` merged, keeping link loads and volumes, not the per-step
    latency).  SHARP: ``size`` bytes per rank (sent once to the switch, result received
    once), over the same host links.  For per-step latency, channels, NVLink and the
    SHARP aggregation tree use :mod:`fabric_jax.collectives`.

    Returns:
      a ``Workload`` with ``ranks`` flows and one group of kind ``all_reduce``.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    n = hosts.size
    per = size if sharp else 2.0 * (n - 1) / n * size
    dag = TransferDag()
    ring(dag, hosts[None], 1, per)               # one merged step around the ring
    src, dst, _, _ = dag.arrays()
    return single_group(src, dst, np.full(n, per), None,
                        name=name or ("sharp_all_reduce" if sharp else "ring_all_reduce"),
                        kind="all_reduce", group_bytes=size, n_ranks=n, job=job,
                        arrival=arrival)


def tree_all_reduce(hosts, size, *, n_chunks: int = 1, double: bool = True,
                    job: str = "job0", name: str | None = None,
                    arrival: float = 0.0) -> Workload:
    """Tree all-reduce: reduce up a binary tree, then broadcast down it (NCCL's tree
    algorithm; double binary tree of Sanders, Speck & Traeff 2009).

    With ``double=True`` the payload is split in halves, one per tree of
    :func:`double_binary_tree`, run concurrently; with ``double=False`` tree 0 carries
    all of ``S``.  Each half is cut into ``n_chunks`` chunks:

    * reduce flow ``child -> parent`` of chunk ``c`` waits for chunk ``c`` from each of
      the child's own children, and for chunk ``c-1`` on the same edge;
    * broadcast flow ``parent -> child`` of chunk ``c`` waits for chunk ``c`` to reach
      the parent (from the grandparent, or, at the root, all reduce flows into the root),
      and for chunk ``c-1`` on the same edge.

    ``n_chunks = 1`` is the unpipelined store-and-forward tree (time grows with the tree
    depth ``log2 n`` times ``S/2`` per hop); larger ``n_chunks`` pipelines the chunks
    down the tree like NCCL (at the cost of ``n_chunks`` times more flows).

    Returns:
        ``Workload`` with ``trees * 2 * n_chunks * (n-1)`` flows of ``S / (trees *
        n_chunks)`` bytes (``4 (n-1)`` flows of ``S/2`` for the default), total bytes
        ``2 (n-1) S`` like the ring.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    n_chunks = int(n_chunks)
    if n_chunks < 1:
        raise ValueError(f"n_chunks: must be >= 1, got {n_chunks}")
    n = hosts.size
    parents = double_binary_tree(n) if double else btree_parent(n)[None]
    chunk = size / (parents.shape[0] * n_chunks)
    dag = TransferDag()
    for parent in parents:       # per tree: every chunk's reduction, then broadcasts
        ups = []
        for _c in range(n_chunks):
            ups.append(tree_reduce(dag, hosts, parent, chunk,
                                   prev=ups[-1] if ups else None, prev_last=True))
        down = None
        for up in ups:
            down, _ = tree_broadcast(dag, hosts, parent, chunk, up, prev=down,
                                     prev_last=True)
    src, dst, _, deps = dag.arrays()
    return single_group(src, dst, chunk, compact_deps(deps), name=name or "tree_all_reduce",
                        kind="all_reduce", group_bytes=size, n_ranks=n, job=job,
                        arrival=arrival)


def _expert_matrix(expert_load, n: int) -> np.ndarray:
    """Expert load -> row-normalised [n, n] destination shares (internal)."""
    w = np.asarray(expert_load, np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("expert_load: weights must be finite and >= 0")
    if w.ndim == 1:
        if w.size % n:
            raise ValueError(f"expert_load: {w.size} experts cannot be spread evenly over "
                             f"{n} ranks; give n_ranks or a multiple of it")
        w = w.reshape(n, -1).sum(axis=1)  # experts e*k..e*k+k-1 live on rank e
        w = np.broadcast_to(w, (n, n))
    elif w.shape != (n, n):
        raise ValueError(f"expert_load: expected shape ({n},), (k*{n},) or ({n}, {n}), got "
                         f"{w.shape}")
    total = w.sum(axis=1, keepdims=True)
    if np.any(total <= 0):
        raise ValueError("expert_load: every source needs a positive total weight")
    return w / total


def all_to_all(hosts, size, *, expert_load=None, job: str = "job0",
               name: str | None = None, arrival: float = 0.0) -> Workload:
    """All-to-all (MoE token dispatch): every rank sends to every other rank at once.

    Uniform: rank ``i`` sends ``S/n`` to each ``j != i`` (its own share stays local), as
    NCCL's grouped send/recv implementation.  Skewed (MoE with imbalanced experts): rank
    ``i`` sends ``S * w_j / sum_k w_k`` to rank ``j``, where ``w`` is ``expert_load``:

    * ``[n]`` — load of the experts on each rank,
    * ``[k n]`` — ``k`` experts per rank, expert ``e`` on rank ``e // k`` (summed),
    * ``[n, n]`` — a per-source routing matrix (row ``i`` = shares of rank ``i``).

    Bytes received by rank ``j`` are therefore proportional to its expert load.  Flows of
    zero bytes (an idle expert) are omitted.  All flows are independent (no deps).

    Args:
        hosts: int [ranks] distinct hosts.
        size: ``S``, bytes each rank dispatches (including its local share).
        expert_load: optional weights (see above), e.g. :func:`zipf_expert_load`.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    n = hosts.size
    src_rank, dst_rank = all_to_all_pairs(n)
    if expert_load is None:
        share = np.full(src_rank.size, 1.0 / n)
    else:
        share = _expert_matrix(expert_load, n)[src_rank, dst_rank]
    return single_group(hosts[src_rank], hosts[dst_rank], size * share, None,
                        name=name or "all_to_all", kind="all_to_all", group_bytes=size,
                        n_ranks=n, job=job, arrival=arrival, drop_empty=True)


def zipf_expert_load(n_experts: int, s: float, key_or_seed, *,
                     n_tokens: int | None = None) -> np.ndarray:
    """Zipf-skewed expert popularity for MoE all-to-all.

    The ``k``-th most popular expert gets weight ``k^-s / H`` (``k = 1..n_experts``,
    ``H`` the normaliser); which expert has which rank is a uniformly random permutation
    drawn from the key.  ``s = 0`` is uniform; ``s ~ 1`` is the skew commonly reported for
    token-to-expert routing.  With ``n_tokens`` the loads are a multinomial sample of that
    many tokens (routing noise) instead of the expectation.

    Args:
        n_experts: number of experts.
        s: Zipf exponent, >= 0.
        key_or_seed: ``jax.random`` key or int seed.
        n_tokens: optional number of tokens to route.

    Returns:
        float64 [n_experts] loads summing to 1.
    """
    import jax  # local: keep module import cheap for pure-NumPy users

    n_experts = int(n_experts)
    if n_experts < 1:
        raise ValueError(f"n_experts: must be >= 1, got {n_experts}")
    s = float(s)
    if not np.isfinite(s) or s < 0:
        raise ValueError(f"s: the Zipf exponent must be >= 0, got {s}")
    key_perm, key_tok = jax.random.split(as_key(key_or_seed, "key_or_seed"))
    p = np.arange(1, n_experts + 1, dtype=np.float64) ** -s
    p /= p.sum()
    perm = np.asarray(jax.random.permutation(key_perm, n_experts))
    load = np.empty(n_experts)
    load[perm] = p
    if n_tokens is not None:
        n_tokens = int(n_tokens)
        if n_tokens < 1:
            raise ValueError(f"n_tokens: must be >= 1, got {n_tokens}")
        draws = np.asarray(jax.random.choice(key_tok, n_experts, (n_tokens,), p=load))
        load = np.bincount(draws, minlength=n_experts) / n_tokens
    return load


def pipeline_sends(stages_hosts, size, n_microbatches: int, *, backward: bool = False,
                   compute_time: float = 0.0, backward_compute_time: float | None = None,
                   job: str = "job0", name: str | None = None,
                   arrival: float = 0.0) -> Workload:
    """Pipeline-parallel activation (and gradient) sends, GPipe schedule.

    Stage ``i`` sends each microbatch's activations to stage ``i+1`` (Huang et al.,
    "GPipe", NeurIPS 2019).  ``stages_hosts`` is ``[stages]`` or ``[stages, width]``;
    with a width (tensor-parallel lanes) lane ``w`` of stage ``i`` sends to lane ``w`` of
    stage ``i+1``.  Forward flow ``(m, i)`` depends on ``(m, i-1)`` (the microbatch has
    arrived at stage ``i``) and on ``(m-1, i)`` (a stage handles microbatches in order)
    and waits ``compute_time`` (one microbatch's forward compute) before sending.

    With ``backward=True`` gradients flow back stage ``i+1 -> i`` after the forward
    flush: backward flow ``(m, i+1 -> i)`` depends on the previous backward hop of
    microbatch ``m`` (or, at the last stage, on the last forward microbatch arriving) and
    on microbatch ``m-1`` on the same hop, after ``backward_compute_time`` (default
    ``2 * compute_time``).  Approximation: a stage's compute is serialised behind its own
    previous *send*, not its previous compute.

    Args:
        stages_hosts: int [stages] or [stages, width] hosts, all distinct, ``stages >= 2``.
        size: bytes per send (per lane, per microbatch).
        n_microbatches: microbatches per step, >= 1.

    Returns:
        ``Workload`` of kind ``"sendrecv"`` with ``(stages-1) * width * n_microbatches``
        forward flows (doubled with ``backward``); ``group_bytes = size``.
    """
    arr = np.asarray(stages_hosts)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] < 2:
        raise ValueError(f"stages_hosts: expected [stages >= 2] or [stages, width], got "
                         f"shape {np.shape(stages_hosts)}")
    flat = check_hosts(arr.reshape(-1), "stages_hosts")
    grid = flat.reshape(arr.shape)
    size = check_size(size)
    n_mb = int(n_microbatches)
    if n_mb < 1:
        raise ValueError(f"n_microbatches: must be >= 1, got {n_microbatches}")
    fwd_c = float(compute_time)
    bwd_c = 2.0 * fwd_c if backward_compute_time is None else float(backward_compute_time)
    if min(fwd_c, bwd_c) < 0:
        raise ValueError("compute_time/backward_compute_time: must be >= 0 seconds")
    n_stages, width = grid.shape
    hops = n_stages - 1
    m = np.repeat(np.arange(n_mb), hops * width)
    i = np.tile(np.repeat(np.arange(hops), width), n_mb)
    w = np.tile(np.arange(width), n_mb * hops)

    def fid(mm, ii, ww):
        return (mm * hops + ii) * width + ww

    n_fwd = n_mb * hops * width
    src = [grid[i, w]]
    dst = [grid[i + 1, w]]
    dep = [np.stack([np.where(i > 0, fid(m, i - 1, w), -1),
                     np.where(m > 0, fid(m - 1, i, w), -1)], axis=1)]
    delay = [np.full(n_fwd, fwd_c)]
    if backward:
        # Backward hop j sends from stage hops-j to stage hops-j-1 (j = 0 at the end).
        j = i
        sender = hops - j
        first = np.where(j == 0, fid(n_mb - 1, hops - 1, w), n_fwd + fid(m, j - 1, w))
        same_hop = np.where(m > 0, n_fwd + fid(m - 1, j, w), -1)
        src.append(grid[sender, w])
        dst.append(grid[sender - 1, w])
        dep.append(np.stack([first, same_hop], axis=1))
        delay.append(np.full(n_fwd, bwd_c))
    return single_group(np.concatenate(src), np.concatenate(dst), size,
                        np.concatenate(dep), name=name or "pipeline", kind="sendrecv",
                        group_bytes=size, n_ranks=grid.size, job=job,
                        delay=np.concatenate(delay), arrival=arrival)
