"""Collective schedules: who sends to whom, in which step, after which earlier sends.

Each schedule appends transfers to a :class:`TransferDag` (in topological order) and
returns their ids, so that schedules compose (a chunk waits for the previous chunk on
the same edge; a hierarchical all-reduce feeds one schedule's result into the next).
These are the one definition of each algorithm, used by NCCL's model
(:func:`fabric_jax.collectives.build_plan`: channels, protocols, NVLink, per-step
latency) and by the host-level flow builders of :mod:`fabric_jax.workloads`
(:func:`~fabric_jax.workloads.ring_all_reduce`,
:func:`~fabric_jax.workloads.tree_all_reduce`, ...: one :class:`Workload` per call).

Ring (Patarasuk & Yuan, JPDC 2009; NCCL ``ncclPatternRingTwice``): ``2 (n-1)`` steps
for all-reduce, ``n-1`` for all-gather and reduce-scatter; in each, position ``i``
sends one chunk to ``i+1``.  Step ``s`` from position ``i`` waits for step ``s-1`` into
``i`` (store and forward: it forwards, after reducing, the chunk it has just received).

Tree (NCCL ``ncclPatternTreeUpDown``; double binary tree of Sanders, Speck & Traeff,
Parallel Computing 35(12), 2009, as ``ncclGetDtree``, :mod:`.trees`): reduce up (a
child's transfer waits for those of its own children), then broadcast down (a transfer
waits for the one into its sender; at the root, for every reduction into the root).
Chunks pipeline: each transfer also waits for the previous chunk on the same edge.

Halving-doubling (Rabenseifner; Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005,
Sec. 4.4; MPICH's algorithm, which NCCL does not use): recursive-halving
reduce-scatter, then recursive-doubling all-gather over ``2^m`` ranks.

PAT (S. Jeaugey, "PAT: a new algorithm for all-gather and reduce-scatter operations at
scale", arXiv:2506.20252, 2025; NCCL >= 2.23, one rank per node): the Bruck all-gather
with its dimensions reversed, so the long distances come first with the least data
(each rank's chunk follows a binomial tree over offsets, the high bit of the offset
first); reduce-scatter is its mirror.  Modelled as that dimension-reversed Bruck
pattern (:func:`pat`); NCCL's bounded intermediate buffer, which splits PAT's
aggregation into rounds, is not modelled (an assumption: each tree edge still carries
each chunk once, so the bytes per peer are the ones here).

All-to-all (NCCL's grouped send/recv): every ordered pair of distinct ranks at once.

Units: bytes.
"""

from __future__ import annotations

import numpy as np

from .trees import double_binary_tree, tree_depth

__all__ = ["TransferDag", "dep_columns", "ring", "chain", "tree_reduce", "tree_broadcast",
           "tree_reduce_bcast", "tree_parents", "halving_doubling", "all_to_all_pairs",
           "pat_steps", "pat",
           "compact_deps"]


class TransferDag:
    """Transfers appended in topological order.

    Host-to-host transfers (``add``) carry their source and destination host, routed
    later by the caller; in-switch transfers (``add_links``) name their links.  Each
    transfer's dependencies are the ids of earlier transfers it waits for (-1 none).
    """

    def __init__(self):
        self.src, self.dst, self.size, self.deps = [], [], [], []
        self.rows, self.hop_latency = [], []   # explicit links (None for host pairs)
        self.n = 0

    def _append(self, src, dst, size, deps, rows, hop_latency):
        m = int(np.size(src))
        ids = self.n + np.arange(m)
        self.src.append(np.asarray(src, np.int64).ravel())
        self.dst.append(np.asarray(dst, np.int64).ravel())
        self.size.append(np.broadcast_to(np.asarray(size, float), np.shape(src)).ravel())
        cols = [np.broadcast_to(np.asarray(d, np.int64), np.shape(src)).ravel()
                for d in deps if d is not None]
        self.deps.append(np.stack(cols, 1) if cols else np.full((m, 1), -1))
        self.rows.append(rows)
        self.hop_latency.append(hop_latency)
        self.n += m
        return ids.reshape(np.shape(src))

    def add(self, src, dst, size, *deps):
        """Host-to-host transfers (arrays of one shape); returns their ids.  Each of
        ``deps`` (None: skipped) is one dependency column, broadcast to that shape."""
        src = np.asarray(src)
        return self._append(src, np.asarray(dst), size, deps, None, None)

    def add_links(self, rows, size, hop_latency, *deps):
        """Transfers over explicit links ``rows [m, w]`` (-1 pad); ``hop_latency
        [m]`` seconds of path latency each."""
        rows = np.asarray(rows, np.int64)
        m = rows.shape[0]
        return self._append(np.full(m, -1), np.full(m, -1), size, deps, rows,
                            np.broadcast_to(np.asarray(hop_latency, float), (m,)))

    def arrays(self):
        """``(src [m], dst [m], size [m], deps [m, k])`` of every transfer in order;
        ``src = dst = -1`` for in-switch transfers, ``deps`` padded with -1."""
        width = max((d.shape[1] for d in self.deps), default=1)
        deps = [np.pad(d, ((0, 0), (0, width - d.shape[1])), constant_values=-1)
                for d in self.deps]
        if not deps:
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                    np.full((0, 1), -1, np.int64))
        return (np.concatenate(self.src), np.concatenate(self.dst),
                np.concatenate(self.size), np.concatenate(deps))


def dep_columns(ready, ndim: int) -> list:
    """Dependency columns of ``ready``: one array of ``ndim`` dims per trailing entry
    when ``ready`` has an extra trailing axis (several transfers to wait for)."""
    if ready is None:
        return []
    ready = np.asarray(ready)
    if ready.ndim == ndim + 1:
        return [ready[..., c] for c in range(ready.shape[-1])]
    return [ready]


def compact_deps(deps: np.ndarray) -> np.ndarray:
    """Move the valid deps of each row to its left and drop all-padding columns."""
    order = np.argsort(deps < 0, axis=1, kind="stable")
    deps = np.take_along_axis(deps, order, axis=1)
    width = int((deps >= 0).sum(axis=1).max()) if deps.size else 0
    return deps[:, :width]


# ------------------------------------------------------------------ ring
def ring(dag: TransferDag, order: np.ndarray, n_steps: int, flow_bytes: float,
         ready=None, prev=None):
    """``n_steps`` ring steps on each row of ``order [rows, n]`` (hosts): position
    ``i`` sends ``flow_bytes`` to position ``(i+1) mod n``.

    Args:
      ready: ``[rows, n]`` transfer after which each position may start (-1 none), or
        ``[rows, n, k]`` several.
      prev: ids ``[n_steps, rows, n]`` of the same ring for the previous chunk (the
        same edge and step waits for it: chunks pipeline instead of sharing).

    Returns:
      ``(ids [n_steps, rows, n], done [rows, n])``: ``done`` is the last transfer into
      each position.  Ids are step-major: step ``s`` of position ``i`` in a one-row
      ring is transfer ``s n + i`` of a fresh dag.
    """
    rows, n = order.shape
    ready_cols = dep_columns(ready, 2)
    dst = np.roll(order, -1, axis=1)
    ids = np.zeros((n_steps, rows, n), np.int64)
    for s in range(n_steps):  # a Python loop over steps, vectorised over ranks
        into = np.roll(ids[s - 1], 1, axis=1) if s > 0 else -1
        ids[s] = dag.add(order, dst, flow_bytes, into,
                         None if prev is None else prev[s], *ready_cols)
    return ids, np.roll(ids[-1], 1, axis=1)


def chain(dag: TransferDag, order: np.ndarray, n_chunks: int, flow_bytes: float):
    """Pipelined chain ``order[:, 0] -> ... -> order[:, -1]`` (ring broadcast)."""
    rows, n = order.shape
    prev = None
    for _c in range(n_chunks):
        ids = np.zeros((n - 1, rows), np.int64)
        for t in range(n - 1):
            ids[t] = dag.add(order[:, t], order[:, t + 1], flow_bytes,
                             ids[t - 1] if t > 0 else -1,
                             None if prev is None else prev[t])
        prev = ids
    return prev


# ------------------------------------------------------------------ trees
def tree_reduce(dag: TransferDag, host_of: np.ndarray, parent: np.ndarray,
                flow_bytes: float, ready=None, prev=None, *,
                prev_last: bool = False) -> np.ndarray:
    """Reduce one chunk up the tree ``parent [n]`` (-1 at the root), deepest edges
    first, so a child's transfer precedes its parent's.

    Each transfer ``v -> parent[v]`` waits for ``ready[v]``, ``prev[v]`` (the previous
    chunk on this edge) and the transfers from ``v``'s children (in rank order), in
    that column order; ``prev_last`` lists ``prev[v]`` after the children instead (the
    host-level builders' table; the same set).

    Returns:
      ``up [n]`` transfer ids, -1 at the root.
    """
    n = parent.size
    ready = np.full(n, -1) if ready is None else np.asarray(ready)
    depth = tree_depth(parent)
    nonroot = np.flatnonzero(parent >= 0)
    up = np.full(n, -1, np.int64)
    for d in sorted(set(depth[nonroot].tolist()), reverse=True):
        v = nonroot[depth[nonroot] == d]
        kids = [up[(parent == x)] for x in v]
        width = max((k.size for k in kids), default=0)
        kid_dep = np.full((v.size, max(width, 1)), -1, np.int64)
        for r, k in enumerate(kids):
            kid_dep[r, :k.size] = k
        cols = [kid_dep[:, c] for c in range(kid_dep.shape[1])]
        chunk_dep = [None if prev is None else prev[v]]
        cols = cols + chunk_dep if prev_last else chunk_dep + cols
        up[v] = dag.add(host_of[v], host_of[parent[v]], flow_bytes, ready[v], *cols)
    return up


def tree_broadcast(dag: TransferDag, host_of: np.ndarray, parent: np.ndarray,
                   flow_bytes: float, up: np.ndarray, ready_root: int = -1, prev=None, *,
                   prev_last: bool = False):
    """Broadcast one chunk down the tree ``parent [n]``, shallowest edges first.

    Each transfer ``parent[v] -> v`` waits for ``prev[v]`` (the previous chunk on this
    edge), then the one into ``parent[v]`` (at the root: every reduction ``up`` into
    the root, then ``ready_root``); ``prev_last`` lists ``prev[v]`` last instead (the
    host-level builders' table; the same set).

    Returns:
      ``(down [n], done [n, k])``: ``down`` is -1 at the root; ``done`` lists the
      transfers after which each position holds the result (its broadcast in; at the
      root every reduction in), -1 padded.
    """
    n = parent.size
    depth = tree_depth(parent)
    nonroot = np.flatnonzero(parent >= 0)
    root = int(np.flatnonzero(parent < 0)[0])
    root_in = up[parent == root]
    down = np.full(n, -1, np.int64)
    for d in sorted(set(depth[nonroot].tolist())):
        v = nonroot[depth[nonroot] == d]
        p = parent[v]
        if d == 1:
            cols = [np.full(v.size, x) for x in root_in] + [np.full(v.size, ready_root)]
        else:
            cols = [down[p]]
        chunk_dep = [None if prev is None else prev[v]]
        cols = cols + chunk_dep if prev_last else chunk_dep + cols
        down[v] = dag.add(host_of[p], host_of[v], flow_bytes, *cols)
    done = np.full((n, max(root_in.size, 1)), -1, np.int64)
    done[:, 0] = down
    done[root, :] = -1
    done[root, :root_in.size] = root_in
    if root_in.size == 0:
        done[root, 0] = ready_root
    return down, done


def tree_reduce_bcast(dag: TransferDag, host_of: np.ndarray, parent: np.ndarray,
                      flow_bytes: float, ready=None, prev=None):
    """Reduce up and broadcast down one tree (one chunk): :func:`tree_reduce`, then
    :func:`tree_broadcast`.

    Args:
      host_of: ``[n]`` host of each tree position.
      parent: ``[n]`` parent position, -1 at the root.
      ready: ``[n]`` transfer after which each position's input is ready.
      prev: ``(up_ids, down_ids)`` of the previous chunk on this tree.

    Returns:
      ``((up_ids [n], down_ids [n]), done [n, k])`` (see :func:`tree_broadcast`).
    """
    n = parent.size
    ready = np.full(n, -1) if ready is None else np.asarray(ready)
    root = int(np.flatnonzero(parent < 0)[0])
    up = tree_reduce(dag, host_of, parent, flow_bytes, ready,
                     None if prev is None else prev[0])
    down, done = tree_broadcast(dag, host_of, parent, flow_bytes, up, int(ready[root]),
                                None if prev is None else prev[1])
    return (up, down), done


def tree_parents(n_servers: int, g: int, head: int = 0) -> np.ndarray:
    """NCCL's tree over ``n_servers x g`` positions (position ``m g + t`` is the
    ``t``-th GPU of server ``m``'s chain starting at local GPU ``head``): ``[2, n]``
    parents, chains inside servers, the double binary tree across chain heads."""
    node_par = double_binary_tree(n_servers) if n_servers > 1 else np.full((2, 1), -1)
    out = np.full((node_par.shape[0], n_servers * g), -1, np.int64)
    for k, par in enumerate(node_par):
        for m in range(n_servers):
            base = m * g
            out[k, base + 1:base + g] = base + np.arange(g - 1)
            out[k, base] = -1 if par[m] < 0 else par[m] * g
    return out


# ------------------------------------------------------------------ others
def halving_doubling(dag: TransferDag, order: np.ndarray, nbytes: float) -> np.ndarray:
    """Rabenseifner's all-reduce of ``nbytes`` over ``order [n]`` hosts, ``n = 2^m``.

    Reduce-scatter step ``k = 0..m-1`` pairs position ``i`` with ``i XOR n/2^(k+1)``,
    each sending ``nbytes / 2^(k+1)``; the all-gather mirrors it (distances ``1, 2,
    ..., n/2``, sizes ``nbytes/n, ..., nbytes/2``).  Each transfer waits for the
    previous step's transfer into its sender.

    Returns:
      ids ``[2 m, n]``, step-major.
    """
    n = order.size
    m = int(np.log2(n))
    if 2**m != n:
        raise ValueError(f"halving-doubling needs a power-of-two number of ranks, got {n}")
    k = np.arange(m)
    distance = np.concatenate([n >> (k + 1), 1 << k])          # [2m]
    chunk = np.concatenate([nbytes / 2.0 ** (k + 1), nbytes * 2.0**k / n])
    rank = np.arange(n)
    ids = np.zeros((2 * m, n), np.int64)
    for s in range(2 * m):
        # The transfer into rank i at step s-1 came from its partner at that step.
        into = ids[s - 1][rank ^ distance[s - 1]] if s > 0 else -1
        ids[s] = dag.add(order, order[rank ^ distance[s]], chunk[s], into)
    return ids


def pat_steps(n: int, op: str):
    """``(distance [L], chunks [L])`` of PAT over ``n`` ranks in step order (module
    docstring): ``L = ceil(log2 n)`` steps, step at distance ``2^j`` carrying the chunks
    (``1/n`` of the buffer each) of every offset ``o in [1, n-1]`` whose path uses that
    edge: the odd values of ``o >> j``, ``((n - 1 >> j) + 1) // 2`` of them (``2^(L-1-j)``
    for ``n = 2^L``; the chunks sum to ``n - 1``).  ``op="all_gather"``: the farthest
    first; ``"reduce_scatter"``: the nearest first (the mirror)."""
    n = int(n)
    if n < 2:
        raise ValueError(f"n: PAT needs at least 2 ranks; got {n}")
    if op not in ("all_gather", "reduce_scatter"):
        raise ValueError(f"op: 'all_gather' or 'reduce_scatter'; got {op!r}")
    j = np.arange((n - 1).bit_length())
    dist, chunks = 1 << j, (((n - 1) >> j) + 1) // 2
    if op == "all_gather":
        dist, chunks = dist[::-1], chunks[::-1]
    return dist, chunks


def pat(dag: TransferDag, order: np.ndarray, nbytes: float, op: str, ready=None):
    """PAT all-gather or reduce-scatter (module docstring) of a buffer of ``nbytes``
    (the all-gather's output, the reduce-scatter's input, as NCCL counts it) on each
    row of ``order [rows, n]`` (hosts): step ``s`` (:func:`pat_steps`) sends
    ``chunks[s] nbytes / n`` from position ``i`` to ``i + distance[s]`` (all-gather) or
    ``i - distance[s]`` (reduce-scatter), mod ``n``, after the previous step's transfer
    into ``i`` (it forwards, or reduces, what it received).

    Args:
      ready: ``[rows, n]`` transfer after which each position may start its first step
        (-1 none), or ``[rows, n, k]`` several.

    Returns:
      ``(ids [L, rows, n], done [rows, n])``: ``done`` is the last transfer into each
      position.
    """
    rows, n = order.shape
    dist, chunks = pat_steps(n, op)
    sign = 1 if op == "all_gather" else -1
    pos = np.arange(n)
    ready_cols = dep_columns(ready, 2)
    ids = np.zeros((dist.size, rows, n), np.int64)
    for s in range(dist.size):  # a Python loop over log2(n) steps, vectorised over ranks
        into = ids[s - 1][:, (pos - sign * dist[s - 1]) % n] if s > 0 else -1
        ids[s] = dag.add(order, order[:, (pos + sign * dist[s]) % n],
                         chunks[s] * float(nbytes) / n, into,
                         *(ready_cols if s == 0 else []))
    return ids, ids[-1][:, (pos - sign * dist[-1]) % n]


def all_to_all_pairs(n: int):
    """``(src_rank, dst_rank)`` of every ordered pair of distinct ranks, source-major
    (NCCL's all-to-all: one send/recv per pair, all at once)."""
    return np.nonzero(~np.eye(n, dtype=bool))
