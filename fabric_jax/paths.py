"""Equal-cost shortest paths between hosts, as padded fixed-shape arrays.

For each (src, dst) host pair, :func:`shortest_paths` enumerates the minimum-hop paths
over the links that are up -- the candidate set that ECMP hashing, adaptive routing and
packet spraying choose from -- and returns a :class:`PathSet` of link ids, padded to
``[pairs, paths, hops]`` with masks, ready for :mod:`fabric_jax.incidence`.

Model.
  * Clos kinds (``leaf_spine``, ``fat_tree``, ``rail_optimized``: ``topology.updown``)
    route valley-free: up the tiers, then down, never down-then-up.  Without failures
    this is exactly the min-hop set; with failures a pair whose up/down paths are all
    cut is unreachable even if a valley path exists (as with BGP/up-down routing in
    real fabrics).
  * Other graphs route over the BFS shortest-path DAG.  Hosts forward traffic only
    when ``topology.host_transit`` is True.
  * Parallel links are distinct paths.

Algorithm (all NumPy, vectorised over pairs; Python loops run over hop levels only).
  1. A host with a single up link to a switch (every host of the builders) is
     replaced by that switch, its *anchor*; a pair's paths are its uplink, the paths
     between the anchors, and the destination's downlink.  Pairs sharing anchors form a
     *class* (one per edge-switch pair in a fat-tree), so work scales with classes.
  2. A level-synchronous BFS from every destination anchor at once (sparse-matrix
     products) gives hop distances, and a second sweep the number of shortest paths
     ``N`` from every state, saturating at ``COUNT_CAP``.  With ``updown`` a state is
     (node, phase), phase 0 still climbing, phase 1 descending.
  3. Paths of a class are ranked ``0 .. N-1`` in lexicographic order of link ids and
     *unranked* by walking the DAG: at each hop the next link is the child whose
     cumulative path count first exceeds the remaining rank (one ``searchsorted`` per
     hop for all paths at once).
  4. When ``N > max_paths`` a pair takes the ranks ``(offset + floor(j N / max_paths))
     mod N``, evenly spread (so they fan out over the first-hop choices) with an offset
     hashed from ``(seed, src, dst)``: deterministic, and different across pairs so
     pairs do not all share the same spines.

Cost: O(pairs x paths x hops) for the output plus O(states x destination anchors) for
the distance and count tables (a fat-tree's anchors are its edge switches; a graph
whose hosts are all multi-homed has one anchor per destination host).

Independent cases in one simulation: :func:`concat_paths` lays the path sets of the
parts of a :func:`fabric_jax.topology.disjoint_union` side by side
(:func:`concat_padded` for any per-part id array).

Units: link latencies in seconds, capacities in bytes/s (from the topology).

Example::

    topo = fat_tree(4)
    ps = shortest_paths(topo, [0, 0, 0], [1, 2, 8])  # same edge, same pod, other pod
    ps.n_paths                                          # [1, 2, 4]
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import scipy.sparse as sp

from .topology import Topology, host_indices

__all__ = ["PathSet", "PathsTruncatedWarning", "shortest_paths", "mix64", "concat_paths",
           "concat_padded"]


class PathsTruncatedWarning(UserWarning):
    """A ``max_paths`` cap left equal-cost paths out; ``n_dropped`` counts them."""

    def __init__(self, message: str, n_dropped: int = 0):
        super().__init__(message)
        self.n_dropped = int(n_dropped)

#: Path counts saturate here; ranks and cumulative counts then fit 32 bits.
COUNT_CAP = 2**31
# Work per chunk of the [anchors, transitions] DAG-edge scan (elements).
_DAG_CHUNK = 2**24


@dataclasses.dataclass(frozen=True, eq=False)
class PathSet:
    """Candidate paths of a batch of host pairs, padded to fixed shapes.

    Attributes:
      src: ``[pairs]`` int32 source host index.
      dst: ``[pairs]`` int32 destination host index.
      links: ``[pairs, paths, hops]`` int32 link ids in path order, -1 in padding.
      path_mask: ``[pairs, paths]`` bool, True for real paths (packed first).
      hop_mask: ``[pairs, paths, hops]`` bool, True where ``links`` holds a link.
      n_paths: ``[pairs]`` int32 number of real paths, >= 1.
    """

    src: np.ndarray
    dst: np.ndarray
    links: np.ndarray
    path_mask: np.ndarray
    hop_mask: np.ndarray
    n_paths: np.ndarray

    def __post_init__(self):
        links = np.asarray(self.links)
        if links.ndim != 3:
            raise ValueError(f"links must be [pairs, paths, hops]; got shape {links.shape}")
        n_pairs = links.shape[0]
        for field, shape in (("src", (n_pairs,)), ("dst", (n_pairs,)),
                             ("n_paths", (n_pairs,)), ("path_mask", links.shape[:2]),
                             ("hop_mask", links.shape)):
            if np.shape(getattr(self, field)) != shape:
                raise ValueError(f"{field} must have shape {shape}; got "
                                 f"{np.shape(getattr(self, field))}")

    @property
    def n_pairs(self) -> int:
        return int(self.links.shape[0])

    @property
    def max_paths(self) -> int:
        return int(self.links.shape[1])

    @property
    def max_hops(self) -> int:
        return int(self.links.shape[2])

    def _check(self, topology: Topology):
        if not isinstance(topology, Topology):
            raise ValueError(f"topology must be a Topology; got {type(topology).__name__}")
        if self.links.size and self.links.max() >= topology.n_links:
            raise ValueError(f"topology has {topology.n_links} links but the paths use "
                             f"link {int(self.links.max())}; pass the topology the paths "
                             f"were built on")

    def latency(self, topology: Topology) -> np.ndarray:
        """``[pairs, paths]`` sum of link latencies, seconds (0 on padded paths)."""
        self._check(topology)
        lat = topology.latency[np.maximum(self.links, 0)]
        return np.where(self.hop_mask, lat, 0.0).sum(axis=-1)

    def bottleneck(self, topology: Topology) -> np.ndarray:
        """``[pairs, paths]`` smallest link capacity, bytes/s.

        A link that is down counts as 0; padded paths give 0.
        """
        self._check(topology)
        cap = np.where(topology.link_up, topology.capacity, 0.0)[np.maximum(self.links, 0)]
        low = np.where(self.hop_mask, cap, np.inf).min(axis=-1, initial=np.inf)
        return np.where(self.path_mask, low, 0.0)

    def select(self, path_index) -> "PathSet":
        """The single path ``path_index[p]`` of each pair, as a PathSet with one path.

        Args:
          path_index: ``[pairs]`` ints in ``[0, n_paths[p])``.
        """
        idx = np.asarray(path_index)
        if idx.shape != (self.n_pairs,) or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"path_index must be [pairs] = ({self.n_pairs},) integers; "
                             f"got shape {idx.shape}, dtype {idx.dtype}")
        bad = (idx < 0) | (idx >= self.n_paths)
        if np.any(bad):
            p = int(np.flatnonzero(bad)[0])
            raise ValueError(f"path_index[{p}] = {int(idx[p])} is outside [0, n_paths[{p}]"
                             f" = {int(self.n_paths[p])})")
        rows = np.arange(self.n_pairs)
        links = self.links[rows, idx][:, None, :]
        return PathSet(src=self.src, dst=self.dst, links=links,
                       path_mask=np.ones((self.n_pairs, 1), bool), hop_mask=links >= 0,
                       n_paths=np.ones(self.n_pairs, np.int32))

    def n_candidates(self, topology: Topology) -> np.ndarray:
        """``[pairs]`` int64 number of equal-cost shortest paths on ``topology``.

        Counts every path, not only the ``n_paths <= max_paths`` kept here
        (saturating at ``COUNT_CAP``); 0 where a pair is unreachable on ``topology``
        (e.g. after more failures).
        """
        self._check(topology)
        plan = _Plan(topology, self.src.astype(np.int64), self.dst.astype(np.int64))
        return np.maximum(plan.class_count, 0)[plan.pair_class]


def concat_padded(arrays, *, fill=-1, offsets=None) -> np.ndarray:
    """Per-part arrays of independent parts as one, along the first axis.

    Each array is padded at the end of its trailing axes to the largest shape among
    them with ``fill``.  With ``offsets`` the arrays hold ids (links, flows, hosts; -1
    for none): part ``i``'s ids ``>= 0`` are shifted by ``offsets[i]`` and its negative
    entries become ``fill``, as for parts laid side by side
    (:func:`fabric_jax.topology.disjoint_union`).

    Args:
      arrays: a sequence of arrays of one number of dimensions.
      fill: the padding value.
      offsets: ``[parts]`` (or longer) id offset of each part, or ``None``.

    Returns:
      the concatenation, ``[sum of first axes, *largest trailing shape]``.
    """
    arrays = [np.asarray(a) for a in arrays]
    tail = [max(a.shape[k] for a in arrays) for k in range(1, arrays[0].ndim)]
    out = []
    for i, a in enumerate(arrays):
        if offsets is not None:
            a = np.where(a >= 0, a + offsets[i], fill)
        out.append(np.pad(a, [(0, 0)] + [(0, t - n) for t, n in zip(tail, a.shape[1:])],
                          constant_values=fill))
    return np.concatenate(out)


def concat_paths(pathsets, link_offsets, host_offsets) -> PathSet:
    """Path sets of independent parts as one, padded to one ``[paths, hops]`` shape.

    Part ``i``'s link ids are shifted by ``link_offsets[i]`` and its host indices by
    ``host_offsets[i]``: the paths of each part of a
    :func:`fabric_jax.topology.disjoint_union` (its ``offsets.links`` and
    ``offsets.hosts``) on the union, or of copies of one topology (offsets ``i x
    n_links`` and ``i x n_hosts``: the copies hash differently under ECMP).

    Args:
      pathsets: a sequence of :class:`PathSet`.
      link_offsets, host_offsets: ``[parts]`` (or longer) offsets.

    Returns:
      one :class:`PathSet` of ``sum(n_pairs)`` pairs, in part order.
    """
    pathsets = list(pathsets)

    def cat(field, offsets):
        return np.concatenate([np.asarray(getattr(p, field)) + offsets[i]
                               for i, p in enumerate(pathsets)]).astype(np.int32)

    return PathSet(src=cat("src", host_offsets), dst=cat("dst", host_offsets),
                   links=concat_padded([p.links for p in pathsets],
                                       offsets=link_offsets).astype(np.int32),
                   path_mask=concat_padded([p.path_mask for p in pathsets], fill=False),
                   hop_mask=concat_padded([p.hop_mask for p in pathsets], fill=False),
                   n_paths=cat("n_paths", np.zeros(len(pathsets), np.int32)))


def _unique_inverse(values: np.ndarray, bound: int, counts: bool = False):
    """``np.unique(values, return_inverse=True[, return_counts=True])`` for ints in
    ``[0, bound)``; a counting pass instead of a sort when ``bound`` is small."""
    if bound > max(4 * values.size, 1 << 20):
        out = np.unique(values, return_inverse=True, return_counts=counts)
        return (out[0], out[1].reshape(-1)) + tuple(out[2:])
    hist = np.bincount(values, minlength=bound)
    uniq = np.flatnonzero(hist)
    index = np.zeros(bound, np.int64)
    index[uniq] = np.arange(uniq.size)
    out = (uniq, index[values])
    return out + (hist[uniq],) if counts else out


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele et al., OOPSLA 2014): a uint64 -> uint64 hash."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def host_anchors(topology: Topology):
    """``(anchor, uplink, downlink)``, each ``[hosts]``: the switch that represents a host.

    A host with exactly one up link out and one in, to and from the same switch, is
    anchored at that switch (``uplink``: host -> anchor link, ``downlink``: anchor ->
    host); any other host is its own anchor (``uplink``/``downlink`` = -1).  Pairs of
    hosts under the same two anchors share their paths beyond the access links.
    """
    n = topology.n_nodes
    up = np.flatnonzero(topology.link_up)
    lsrc, ldst = topology.link_src[up].astype(np.int64), topology.link_dst[up].astype(np.int64)
    out_deg = np.bincount(lsrc, minlength=n)
    in_deg = np.bincount(ldst, minlength=n)
    out_link = np.full(n, -1, np.int64)
    in_link = np.full(n, -1, np.int64)
    out_link[lsrc] = up
    in_link[ldst] = up
    h = topology.hosts.astype(np.int64)
    ol, il = out_link[h], in_link[h]
    peer = topology.link_dst[np.maximum(ol, 0)]
    single = (out_deg[h] == 1) & (in_deg[h] == 1)
    single &= peer == topology.link_src[np.maximum(il, 0)]
    single &= ~topology.node_is_host[peer]
    anchor = np.where(single, peer, h).astype(np.int64)
    return anchor, np.where(single, ol, -1), np.where(single, il, -1)


class _Plan:
    """Anchors, classes, BFS distances and path counts of one batch (host side)."""

    def __init__(self, topology: Topology, src: np.ndarray, dst: np.ndarray):
        topo = self.topology = topology
        n = topo.n_nodes
        up = np.flatnonzero(topo.link_up)
        lsrc, ldst = topo.link_src[up].astype(np.int64), topo.link_dst[up].astype(np.int64)

        # 1. anchors (see host_anchors).
        self.anchor, self.prefix, self.suffix = host_anchors(topo)

        # 2. state graph: state = node + phase * n.
        n_phase = 2 if topo.updown else 1
        self.n_states = S = n * n_phase
        if topo.updown:
            dt = topo.node_tier[ldst] - topo.node_tier[lsrc]
            upw, dnw, lat = dt > 0, dt < 0, dt == 0
            parts = [(lsrc[upw], ldst[upw], up[upw]),                  # climb
                     (lsrc[dnw], ldst[dnw] + n, up[dnw]),              # turn down
                     (lsrc[dnw] + n, ldst[dnw] + n, up[dnw]),          # keep descending
                     (lsrc[lat], ldst[lat], up[lat]),
                     (lsrc[lat] + n, ldst[lat] + n, up[lat])]
            ts = np.concatenate([p[0] for p in parts])
            tt = np.concatenate([p[1] for p in parts])
            tl = np.concatenate([p[2] for p in parts])
        else:
            ts, tt, tl = lsrc, ldst, up
        node_of_state = np.arange(S) % n
        self.transit = (~topo.node_is_host | topo.host_transit)[node_of_state]

        # classes: (start state, destination-anchor column).
        self.cols, pair_col = _unique_inverse(self.anchor[dst], n)
        A = self.n_cols = self.cols.size
        # Column-major class order keeps the unranking queries of one destination
        # together (cache-friendly searchsorted over that column's DAG edges).
        keys = pair_col * n + self.anchor[src]
        ukeys, self.pair_class, self.class_pairs = _unique_inverse(
            keys, n * A, counts=True)
        self.class_col, self.class_start = np.divmod(ukeys, n)

        # Keep only transitions out of states a walk from a class start can be in
        # (drops host uplinks, phase-1 states above the top, unused corners).
        fwd = sp.csr_matrix((np.ones(ts.size, np.int32), (tt, ts)), shape=(S, S))
        is_start = np.zeros(S, bool)
        is_start[self.class_start] = True
        seen, frontier = is_start.copy(), is_start.copy()
        while frontier.any():
            frontier = (fwd @ frontier.astype(np.int32) > 0) & ~seen
            seen |= frontier
            frontier &= self.transit
        expands = seen & (self.transit | is_start)
        keep = expands[ts]
        ts, tt, tl = ts[keep], tt[keep], tl[keep]
        order = np.lexsort((tl, ts))
        self.tr_s, self.tr_t, self.tr_link = ts[order], tt[order], tl[order]

        # 3. BFS distances and saturating path counts to every column's anchor.
        tmat = sp.csr_matrix((np.ones(ts.size, np.int64), (ts, tt)), shape=(S, S))
        tmat.sum_duplicates()  # parallel links: entry = multiplicity
        dist = np.full((S, A), -1, np.int16)  # hop counts; < 2**15 levels
        count = np.zeros((S, A), np.int64)
        target = np.zeros((S, A), bool)
        for ph in range(n_phase):
            target[self.cols + ph * n, np.arange(A)] = True
        dist[target] = 0
        count[target] = 1
        frontier, level = target, 0
        while frontier.any():
            feed = frontier if level == 0 else frontier & self.transit[:, None]
            contrib = np.asarray(tmat @ np.where(feed, count, 0))
            new = (contrib > 0) & (dist < 0)
            dist[new] = level + 1
            count[new] = np.minimum(contrib[new], COUNT_CAP)
            frontier, level = new, level + 1
            if level >= np.iinfo(np.int16).max:
                raise ValueError("topology: paths longer than 32766 hops are not supported")
        self.dist, self.count = dist, count
        # Renumber classes longest first (then column-major): items generated in class
        # order then shrink to a prefix as the hop loop of _unrank passes their length.
        length = dist[self.class_start, self.class_col]
        perm = np.lexsort((self.class_start, self.class_col, -length.astype(np.int64)))
        relabel = np.empty_like(perm)
        relabel[perm] = np.arange(perm.size)
        self.pair_class = relabel[self.pair_class]
        self.class_start, self.class_col = self.class_start[perm], self.class_col[perm]
        self.class_pairs = self.class_pairs[perm]
        self.class_len = length[perm].astype(np.int64)
        self.class_count = np.where(self.class_len >= 0,
                                    count[self.class_start, self.class_col], -1)

    def dag(self):
        """Edges of the shortest-path DAGs, ordered by (column, state, link).

        Returns ``(keys, excl, child_key, link)`` per DAG edge: ``keys = (seg << 32) |
        min(cum, COUNT_CAP)`` with ``seg = col * S + state`` and ``cum`` the inclusive
        running path count within the segment; ``excl`` the exclusive count;
        ``child_key = (col * S + child_state) << 32``; ``link`` the link id.
        """
        S, A = self.n_states, self.n_cols
        dist_t = np.ascontiguousarray(self.dist.T)
        count_t = np.ascontiguousarray(self.count.T)
        ok_t = self.transit[self.tr_t]
        E = self.tr_s.size
        step = max(1, _DAG_CHUNK // max(E, 1))
        cols, edges = [], []
        for lo in range(0, A, step):  # chunks of columns bound the [A, E] scan
            d_t = dist_t[lo:lo + step][:, self.tr_t]
            d_s = dist_t[lo:lo + step][:, self.tr_s]
            ok = (d_t >= 0) & (d_s == d_t + 1) & (ok_t[None, :] | (d_t == 0))
            c, e = np.nonzero(ok)
            cols.append(c + lo)
            edges.append(e)
        col = np.concatenate(cols)
        edge = np.concatenate(edges)
        state = self.tr_s[edge]
        child = count_t[col, self.tr_t[edge]]
        seg = col * S + state
        cum = np.cumsum(child)
        first = np.ones(seg.size, bool)
        first[1:] = seg[1:] != seg[:-1]
        base = (cum - child)[first][np.cumsum(first) - 1]
        incl = cum - base
        keys = (seg << 32) | np.minimum(incl, COUNT_CAP)
        child_key = (col * S + self.tr_t[edge]) << 32
        return keys, incl - child, child_key, self.tr_link[edge].astype(np.int32)


def _unrank(plan: _Plan, dag, item_class: np.ndarray,
            item_rank: np.ndarray) -> np.ndarray:
    """``[items, L]`` int32 link ids of path ``item_rank`` of each item's class.

    ``item_class`` must be non-decreasing (classes are numbered longest first), so the
    items still walking at hop ``h`` are a prefix.
    """
    keys, excl, child_key, link = dag
    length = plan.class_len[item_class]
    n_hops = int(length.max(initial=0))
    out = np.full((item_class.size, n_hops), -1, np.int32)
    seg_key = (plan.class_col[item_class] * plan.n_states
               + plan.class_start[item_class]) << 32
    rank = item_rank.astype(np.int64)
    for hop in range(n_hops):  # loop over hop levels, vectorised over items
        n_act = int(np.count_nonzero(length > hop))
        e = np.searchsorted(keys, seg_key[:n_act] | rank[:n_act], side="right")
        rank[:n_act] -= excl[e]
        seg_key[:n_act] = child_key[e]
        out[:n_act, hop] = link[e]
    return out


def _pair_ranks(plan: _Plan, src_h, dst_h, max_paths, seed):
    """``(rank, valid, n_keep, keep_c)``: ``[pairs, width]`` ranks of the kept paths and
    their mask, kept path counts per pair and per class (warns when paths are dropped)."""
    P = src_h.size
    # Ranks of the kept paths: all of them when n <= max_paths, else the evenly
    # spread ranks (offset + floor(j n / max_paths)) mod n.  floor(j n / max_paths)
    # depends on n only: one small table row per distinct class count.
    cc = plan.class_count
    if max_paths is None:
        max_paths = max(int(cc.max()), 1)
    max_paths = int(max_paths)
    keep_c = np.minimum(cc, max_paths)
    n_all = cc[plan.pair_class]
    n_keep = keep_c[plan.pair_class]
    width = int(keep_c.max())
    j = np.arange(width, dtype=np.int64)
    u_count, class_row = np.unique(cc, return_inverse=True)
    spread = np.where(u_count[:, None] > max_paths,
                      (j[None, :] * u_count[:, None]) // max_paths, j[None, :])
    spread = np.where(j[None, :] < u_count[:, None], spread, 0)   # padded slots: rank 0
    valid = j[None, :] < n_keep[:, None]
    rank = np.take(spread, class_row.reshape(-1)[plan.pair_class], axis=0)
    capped = n_all > max_paths
    if capped.any():
        n_dropped = int(np.sum(n_all - n_keep))
        warnings.warn(PathsTruncatedWarning(
            f"max_paths={max_paths} dropped {n_dropped} of {int(np.sum(n_all))} equal-cost "
            f"paths ({int(capped.sum())} of {P} pairs have up to {int(n_all.max())}); pass "
            f"max_paths=None to keep them all", n_dropped), stacklevel=3)
        # Per-pair rotation hashed from (seed, src, dst); uint64 arrays wrap silently.
        key = (np.full(src_h.size, seed & 0xFFFFFFFFFFFFFFFF, np.uint64)
               * np.uint64(0x9E3779B97F4A7C15)
               + src_h.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03)
               + dst_h.astype(np.uint64) * np.uint64(0x8CB92BA72F3D8DD7))
        offset = np.where(capped, mix64(key) % n_all.astype(np.uint64), 0)
        rank += offset.astype(np.int64)[:, None]
        np.subtract(rank, n_all[:, None], out=rank, where=rank >= n_all[:, None])
    return rank, valid, n_keep, keep_c


def _enumerate(plan: _Plan, rank, valid, keep_c):
    """``(body, item)``: ``[items, L]`` anchor-to-anchor link ids of the enumerated paths
    and the ``[pairs, width]`` item of each kept path."""
    cc = plan.class_count
    # Enumerate whole classes when that is cheaper than per-pair paths; else per pair.
    whole = cc <= plan.class_pairs * keep_c
    table_n = np.where(whole, cc, 0)
    table_off = np.cumsum(table_n) - table_n
    n_table = int(table_n.sum())
    t_class = np.repeat(np.arange(cc.size), table_n)
    t_rank = np.arange(n_table) - table_off[t_class]
    if whole.all():
        item_class, item_rank = t_class, t_rank
        item = rank
        item += table_off[plan.pair_class][:, None]
    else:
        # Per-pair items, laid out with the pairs grouped by class (locality).
        order = np.argsort(plan.pair_class, kind="stable")
        direct = ~whole[plan.pair_class][:, None] & valid
        d_sorted = direct[order]
        n_direct = int(np.count_nonzero(d_sorted))
        item_class = np.concatenate([t_class,
                                     plan.pair_class[order[np.nonzero(d_sorted)[0]]]])
        item_rank = np.concatenate([t_rank, rank[order][d_sorted]])
        ids = np.zeros(direct.shape, np.int64)
        ids[d_sorted] = n_table + np.arange(n_direct)
        item = rank + table_off[plan.pair_class][:, None]
        item[order] = np.where(d_sorted, ids, item[order])
        item[~valid] = 0
    dag = plan.dag()
    if whole.all():
        body = _unrank(plan, dag, item_class, item_rank)  # [items, L]
    else:  # two runs, each in class order
        parts = [_unrank(plan, dag, item_class[:n_table], item_rank[:n_table]),
                 _unrank(plan, dag, item_class[n_table:], item_rank[n_table:])]
        body = np.full((item_class.size, max(b.shape[1] for b in parts)), -1, np.int32)
        body[:n_table, :parts[0].shape[1]] = parts[0]
        body[n_table:, :parts[1].shape[1]] = parts[1]
    return body, item


def shortest_paths(topology: Topology, src, dst, *, max_paths: int | None = None,
                   seed: int = 0) -> PathSet:
    """Equal-cost min-hop paths of a batch of host pairs.

    Args:
      topology: the network.
      src: ``[pairs]`` source hosts: indices or names (a scalar is one pair).
      dst: ``[pairs]`` destination hosts, same shape as ``src``.
      max_paths: keep at most this many paths per pair (>= 1); ``None`` (default):
        every equal-cost path.  When a pair has more, a deterministic, seeded, evenly
        spread subset (different across pairs), and a :class:`PathsTruncatedWarning`
        says how many paths were dropped.
      seed: seed of that subset.

    Returns:
      A :class:`PathSet`; its ``paths`` dimension is the largest ``n_paths`` of the
      batch and its ``hops`` dimension the longest path.

    Raises:
      ValueError: shapes differ, unknown host names or out-of-range indices,
        ``src == dst``, a pair has no path over the links that are up, or
        ``max_paths < 1``.
    """
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology; got {type(topology).__name__}")
    if max_paths is not None and (isinstance(max_paths, bool) or not isinstance(
            max_paths, (int, np.integer)) or max_paths < 1):
        raise ValueError(f"max_paths must be an integer >= 1 or None (every equal-cost "
                         f"path); got {max_paths!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer; got {seed!r}")
    if np.shape(src) != np.shape(dst):
        raise ValueError(f"src and dst must have the same shape; got {np.shape(src)} and "
                         f"{np.shape(dst)}")
    src_h = host_indices(topology, src, "src").reshape(-1)
    dst_h = host_indices(topology, dst, "dst").reshape(-1)
    names = topology.host_names
    same = np.flatnonzero(src_h == dst_h)
    if same.size:
        raise ValueError(f"src == dst for pairs {same[:5].tolist()} (host "
                         f"{names[src_h[same[0]]]!r}); drop pairs with no network "
                         f"traffic")
    P = src_h.size
    if P == 0:
        return PathSet(src=src_h.astype(np.int32), dst=dst_h.astype(np.int32),
                       links=np.zeros((0, 1, 0), np.int32),
                       path_mask=np.zeros((0, 1), bool), hop_mask=np.zeros((0, 1, 0), bool),
                       n_paths=np.zeros(0, np.int32))
    plan = _Plan(topology, src_h, dst_h)
    dead = np.flatnonzero(plan.class_count[plan.pair_class] <= 0)
    if dead.size:
        show = ", ".join(f"{names[src_h[p]]}->{names[dst_h[p]]}" for p in dead[:5])
        raise ValueError(f"src/dst: {dead.size} pair(s) unreachable over the links that "
                         f"are up (e.g. {show}); drop them or restore links")
    rank, valid, n_keep, keep_c = _pair_ranks(plan, src_h, dst_h, max_paths, seed)
    body, item = _enumerate(plan, rank, valid, keep_c)

    # Assemble [prefix uplink] + anchor-to-anchor path + [suffix downlink].
    pre = plan.prefix[src_h]
    suf = plan.suffix[dst_h]
    has_pre = pre >= 0
    length = plan.class_len[plan.pair_class]
    hops = int((has_pre + length + (suf >= 0)).max())
    shift = 1 if has_pre.all() else 0
    table = np.full((body.shape[0], hops), -1, np.int32)
    table[:, shift:shift + body.shape[1]] = body
    links = np.take(table, item, axis=0)          # [P, width, hops]
    if shift == 0 and has_pre.any():
        rows = np.flatnonzero(has_pre)
        links[rows, :, 1:] = links[rows, :, :-1]
    if shift:
        links[:, :, 0] = pre[:, None]
    elif has_pre.any():
        links[has_pre, :, 0] = pre[has_pre][:, None]
    rows = np.flatnonzero(suf >= 0)
    links[rows, :, (has_pre + length)[rows]] = suf[rows][:, None]
    links[~valid] = -1
    return PathSet(src=src_h.astype(np.int32), dst=dst_h.astype(np.int32), links=links,
                   path_mask=valid, hop_mask=links >= 0, n_paths=n_keep.astype(np.int32))
