"""Sparse link-by-flow incidence: which links each flow crosses, and how much of it.

The incidence matrix ``A`` has shape ``[links, flows]``; entry ``A[l, f] = w`` means
that a fraction ``w`` of flow ``f``'s rate (bytes/s) is carried on link ``l``.  A flow on
a single path has ``w = 1`` on every link of the path; a flow split over paths with
weights ``s_p`` (summing to one) has ``w = s_p`` on the links of path ``p`` (entries of
paths that share a link add up).  The load of link ``l`` is ``sum_f A[l, f] * r_f``.

:class:`Incidence` stores ``A`` in COO form (``link_idx``, ``flow_idx``, ``weight``),
one entry per non-zero, as a JAX pytree: the three arrays are leaves (so split weights
can be traced and differentiated), ``n_links`` and ``n_flows`` are static.  Entries
whose weight is exactly zero are *inactive*: they are ignored by every kernel.  This is
how padded path sets (fixed shapes under ``jit``) and traced dense matrices are
represented without any host round trip.

Device-side helpers here (``link_sum``, ``flow_min`` ...) are the segment reductions
the rate solver and the simulators are built from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .compiling import jit
from .segments import segment_reduce

__all__ = ["Incidence", "as_incidence", "check_entries", "compact_incidence"]


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


@dataclasses.dataclass(frozen=True)
class Incidence:
    """Sparse ``[links, flows]`` matrix in COO form (a JAX pytree).

    Attributes:
      link_idx: ``[nnz]`` int32 link index of each entry.
      flow_idx: ``[nnz]`` int32 flow index of each entry.
      weight: ``[nnz]`` float, fraction of the flow's rate carried on that link;
        an entry with weight 0 is inactive (padding).
      n_links: number of links (static).
      n_flows: number of flows (static).
      row_width: if set (static), the entries are laid out flow-major with exactly
        ``row_width`` entries per flow (``flow_idx == repeat(arange(n_flows),
        row_width)``, padding entries have weight 0), so per-flow reductions are dense
        ``[flows, row_width]`` reductions.  Every host-side constructor produces this
        layout; ``None`` means arbitrary COO order.
      by_link: optional :class:`fabric_jax.segments.SegmentTable` of ``link_idx``: the
        per-link reductions gather on accelerators instead of scattering
        (:func:`fabric_jax.segments.segment_reduce`; e.g. the fluid step's incidence,
        built from its hop table).
    """

    link_idx: Any
    flow_idx: Any
    weight: Any
    n_links: int = dataclasses.field(metadata=dict(static=True))
    n_flows: int = dataclasses.field(metadata=dict(static=True))
    row_width: int | None = dataclasses.field(default=None, metadata=dict(static=True))
    by_link: Any = None

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_coo(cls, link_idx, flow_idx, weight=None, *, n_links: int, n_flows: int):
        """Builds an incidence from COO arrays, validated on the host.

        Args:
          link_idx: ``[nnz]`` link index of each entry, in ``[0, n_links)``.
          flow_idx: ``[nnz]`` flow index of each entry, in ``[0, n_flows)``.
          weight: ``[nnz]`` fraction of the flow's rate on that link, in ``(0, 1]``;
            defaults to 1 (a single-path flow).  Duplicate (link, flow) entries add up.
          n_links: number of links.
          n_flows: number of flows.

        Raises:
          ValueError: on a shape mismatch, an index out of range or a weight outside
            ``(0, 1]``.
        """
        n_links, n_flows = _check_dims(n_links, n_flows)
        if any(_is_traced(a) for a in (link_idx, flow_idx, weight)):
            # Inside jit: no host validation possible; trust the caller.
            w = jnp.ones(jnp.shape(link_idx)) if weight is None else weight
            return cls(jnp.asarray(link_idx, jnp.int32), jnp.asarray(flow_idx, jnp.int32),
                       w, n_links, n_flows)
        li = np.asarray(link_idx)
        fi = np.asarray(flow_idx)
        if li.ndim != 1 or fi.shape != li.shape:
            raise ValueError(
                f"link_idx and flow_idx must be 1-D arrays of equal length; got shapes "
                f"{li.shape} and {fi.shape}")
        for name, arr, n in (("link_idx", li, n_links), ("flow_idx", fi, n_flows)):
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"{name} must hold integers; got dtype {arr.dtype}")
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                bad = arr[(arr < 0) | (arr >= n)][0]
                raise ValueError(
                    f"{name} contains {bad}, outside [0, {n}); check the index or raise "
                    f"{'n_links' if name == 'link_idx' else 'n_flows'}")
        if weight is None:
            w = np.ones(li.shape, dtype=_float_dtype())
        else:
            w = np.asarray(weight)
            if w.shape != li.shape:
                raise ValueError(f"weight must have shape {li.shape} like link_idx; got {w.shape}")
            if not np.all(np.isfinite(w)) or np.any(w <= 0) or np.any(w > 1):
                raise ValueError(
                    "weight must lie in (0, 1] (the fraction of a flow's rate on a link); "
                    f"got values in [{np.nanmin(w)}, {np.nanmax(w)}]"
                    + (" including NaN/inf" if not np.all(np.isfinite(w)) else ""))
            w = w.astype(_float_dtype())
        return cls.flow_major(li, fi, w, n_links, n_flows)

    @classmethod
    def flow_major(cls, li, fi, w, n_links, n_flows):
        """Host-side: pads concrete COO entries into the flow-major ``row_width`` layout.

        Each flow gets one row of ``row_width`` entries (the most any flow has; at least
        1), its entries in their COO order, padded with link 0 and weight 0.  The
        entries are not validated (:meth:`from_coo` validates, then calls this).

        Args:
          li, fi, w: NumPy ``[nnz]`` link index, flow index and weight of each entry.
          n_links, n_flows: the incidence's dimensions.
        """
        order = np.argsort(fi, kind="stable")
        li, fi, w = li[order], fi[order], w[order]
        counts = np.bincount(fi, minlength=n_flows)
        width = max(int(counts.max(initial=0)), 1)
        pos = np.arange(fi.size) - (np.cumsum(counts) - counts)[fi]
        links = np.zeros((n_flows, width), np.int32)
        weight = np.zeros((n_flows, width), w.dtype)
        links[fi, pos] = li
        weight[fi, pos] = w
        flows = np.repeat(np.arange(n_flows, dtype=np.int32), width)
        return cls(jnp.asarray(links.ravel()), jnp.asarray(flows), jnp.asarray(weight.ravel()),
                   n_links, n_flows, width)

    @classmethod
    def from_dense(cls, matrix):
        """Builds an incidence from a dense ``[links, flows]`` matrix (zeros = absent).

        On a concrete (NumPy) matrix only the non-zeros are kept and validated
        (entries in ``[0, 1]``).  On a traced matrix (inside ``jit``/``grad``) every
        entry becomes a COO entry and zeros are inactive, so the result is
        differentiable with respect to the matrix.
        """
        if _is_traced(matrix):
            n_links, n_flows = matrix.shape
            fi, li = np.meshgrid(np.arange(n_flows), np.arange(n_links), indexing="ij")
            return cls(jnp.asarray(li.ravel(), jnp.int32), jnp.asarray(fi.ravel(), jnp.int32),
                       matrix.T.ravel(), n_links, n_flows, n_links)
        m = np.asarray(matrix)
        if m.ndim != 2:
            raise ValueError(f"incidence matrix must be 2-D [links, flows]; got shape {m.shape}")
        if not np.all(np.isfinite(m)) or np.any(m < 0) or np.any(m > 1):
            raise ValueError("incidence matrix entries must lie in [0, 1] (fraction of a "
                             "flow's rate on a link; 0 = link not used)")
        li, fi = np.nonzero(m)
        return cls.from_coo(li, fi, m[li, fi], n_links=m.shape[0], n_flows=m.shape[1])

    @classmethod
    def from_rows(cls, links, weight=None, *, n_links: int):
        """Builds an incidence from each flow's row of links, validated on the host.

        Entries of one flow on one link add up, to at most 1 (a flow never carries more
        than its rate on a link); each flow's links are laid out in increasing order.

        Args:
          links: ``[flows, width]`` link ids, -1 where none.
          weight: ``[flows, width]`` fraction of the flow's rate at each entry (default
            1); entries with weight 0 are dropped.
          n_links: number of links.

        Raises:
          ValueError: a link id outside ``[-1, n_links)``, a negative or non-finite
            weight.
        """
        links = np.asarray(links)
        if links.ndim != 2:
            raise ValueError(f"links must be [flows, width]; got shape {links.shape}")
        n_flows = links.shape[0]
        w = np.ones(links.shape) if weight is None else np.asarray(weight, float)
        if w.shape != links.shape or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"weight must be [flows, width] = {links.shape} of finite values "
                             f">= 0; got shape {w.shape}")
        if links.size and (links.min() < -1 or links.max() >= n_links):
            raise ValueError(f"links must lie in [-1, n_links={n_links}); got "
                             f"[{links.min()}, {links.max()}]")
        flow = np.broadcast_to(np.arange(n_flows)[:, None], links.shape)
        keep = (w > 0) & (links >= 0)
        key = flow[keep].astype(np.int64) * n_links + links[keep]
        uniq, inv = np.unique(key, return_inverse=True)
        wsum = np.minimum(np.bincount(inv, weights=w[keep], minlength=uniq.size), 1.0)
        fi, li = np.divmod(uniq, n_links)
        return cls.flow_major(li, fi, wsum.astype(_float_dtype()), int(n_links), n_flows)

    @classmethod
    def from_paths(cls, paths, split=None, *, n_links: int, flows=None, seed: int = 0):
        """Builds the incidence of flows routed over a :class:`~fabric_jax.paths.PathSet`.

        Args:
          paths: a PathSet (``links`` ``[pairs, paths, hops]`` with -1 padding and
            ``hop_mask``/``path_mask``); each pair is one flow.
          split: ``[pairs, paths]`` fraction of each flow's rate on each candidate
            path (rows sum to one, zero on padded paths).  ``None``: each flow on the
            one path its ECMP hash picks (the ``ecmp`` routing policy's split,
            :func:`fabric_jax.routing.ecmp_choice`, with ``seed``), as a switch fabric
            would place it.  May be a traced array (learned routing): the result is
            then differentiable with respect to it.
          n_links: number of links of the topology (``topology.n_links``); every link
            id of ``paths`` must lie in ``[0, n_links)``.
          seed: ECMP hash seed when ``split`` is None.

        Returns:
          An Incidence with ``pairs * paths * hops`` entries (padded ones inactive).

        Raises:
          ValueError: a link id outside ``[0, n_links)``, or a bad ``split``.
        """
        links = np.asarray(paths.links)
        if links.ndim != 3:
            raise ValueError(f"paths.links must be [pairs, paths, hops]; got shape "
                             f"{links.shape}")
        n_pairs, n_paths, n_hops = links.shape
        hop_mask = np.asarray(paths.hop_mask)
        if isinstance(n_links, bool) or not isinstance(n_links, (int, np.integer)) \
                or n_links < 1:
            raise ValueError(f"n_links must be a positive integer (topology.n_links); got "
                             f"{n_links!r}")
        used = links[hop_mask]
        if used.size and (used.min() < 0 or used.max() >= n_links):
            raise ValueError(f"paths use link ids in [{used.min()}, {used.max()}], outside "
                             f"[0, n_links={n_links}); pass n_links=topology.n_links of the "
                             f"topology the paths were built on")
        flow = np.broadcast_to(np.arange(n_pairs)[:, None, None], links.shape)
        if split is None:
            from .routing import make_routing
            split = np.asarray(make_routing("ecmp", paths, seed=seed).split)
        if not _is_traced(split):
            s = np.asarray(split)
            if s.shape != (n_pairs, n_paths):
                raise ValueError(f"split must have shape [pairs, paths] = {(n_pairs, n_paths)}; "
                                 f"got {s.shape}")
            if not np.all(np.isfinite(s)) or np.any(s < 0):
                raise ValueError("split must be finite and non-negative")
            if np.any(s[~np.asarray(paths.path_mask)] > 0):
                raise ValueError("split puts weight on padded (non-existent) paths; "
                                 "zero it where paths.path_mask is False")
            if not np.allclose(s.sum(axis=1), 1.0, atol=1e-5):
                raise ValueError("split rows must sum to 1 (each flow's rate is fully routed)")
        w = jnp.where(jnp.asarray(hop_mask), jnp.asarray(split)[:, :, None], 0.0)
        li = np.where(hop_mask, links, 0)
        return cls(jnp.asarray(li.ravel(), jnp.int32), jnp.asarray(flow.ravel(), jnp.int32),
                   jnp.ravel(w), int(n_links), int(n_pairs), (n_paths * n_hops) or None)

    # --------------------------------------------------------------- conversion
    @property
    def nnz(self) -> int:
        return int(np.shape(self.link_idx)[0])

    def to_dense(self):
        """Dense ``[links, flows]`` matrix (duplicates summed)."""
        return jnp.zeros((self.n_links, self.n_flows), jnp.result_type(self.weight)).at[
            self.link_idx, self.flow_idx].add(self.weight)

    def to_scipy(self):
        """``scipy.sparse.csr_array`` of shape ``[links, flows]`` (host; duplicates summed)."""
        import scipy.sparse as sp

        w = np.asarray(self.weight)
        keep = w != 0
        return sp.csr_array((w[keep], (np.asarray(self.link_idx)[keep],
                                       np.asarray(self.flow_idx)[keep])),
                            shape=(self.n_links, self.n_flows))

    def with_weight(self, weight) -> "Incidence":
        """Same sparsity pattern, new weights (e.g. new routing splits)."""
        return dataclasses.replace(self, weight=weight)

    # ------------------------------------------------------ device-side kernels
    @property
    def active(self):
        """``[nnz]`` bool: entries that carry traffic (weight != 0)."""
        return self.weight != 0

    def link_sum(self, per_entry):
        """Sums an ``[nnz]`` array into ``[links]``."""
        return segment_reduce(per_entry, self.link_idx, self.n_links, self.by_link,
                              in_range=True)

    def link_max(self, per_entry):
        """Per-link maximum of an ``[nnz]`` array (``-inf`` for a link without entries)."""
        return segment_reduce(per_entry, self.link_idx, self.n_links, self.by_link, "max",
                              in_range=True)

    def _rows(self, per_entry):
        """``[flows, row_width]`` view of an ``[nnz]`` array in the flow-major layout, or
        ``None`` (then per-flow reductions scatter)."""
        w = self.row_width
        if w is None or per_entry.shape[0] != self.n_flows * w:
            return None
        return per_entry.reshape(self.n_flows, w)

    def flow_sum(self, per_entry):
        """Sums an ``[nnz]`` array into ``[flows]``."""
        rows = self._rows(per_entry)
        if rows is not None:
            return jnp.sum(rows, axis=1)
        return jax.ops.segment_sum(per_entry, self.flow_idx, num_segments=self.n_flows)

    def link_load(self, rates):
        """``[links]`` load ``sum_f A[l, f] * rates[f]`` (bytes/s for rates in bytes/s)."""
        return self.link_sum(self.weight * rates[self.flow_idx])

    def link_min(self, per_entry, mask):
        """Per-link minimum of ``per_entry`` over entries where ``mask`` (else +inf)."""
        x = jnp.where(mask, per_entry, jnp.inf)
        return segment_reduce(x, self.link_idx, self.n_links, self.by_link, "min",
                              in_range=True)

    def flow_min(self, per_entry, mask):
        """Per-flow minimum of ``per_entry`` over entries where ``mask`` (else +inf)."""
        x = jnp.where(mask, per_entry, jnp.inf)
        rows = self._rows(x)
        if rows is not None:
            return jnp.min(rows, axis=1, initial=jnp.inf)
        return jax.ops.segment_min(x, self.flow_idx, num_segments=self.n_flows)

    def flow_any(self, per_entry_bool):
        """Per-flow logical OR of an ``[nnz]`` bool array."""
        rows = self._rows(per_entry_bool)
        if rows is not None:
            return jnp.any(rows, axis=1)
        return jax.ops.segment_max(per_entry_bool.astype(jnp.int32), self.flow_idx,
                                   num_segments=self.n_flows) > 0

    def flow_has_links(self):
        """``[flows]`` bool: the flow crosses at least one link."""
        return self.flow_any(self.active)


jax.tree_util.register_dataclass(Incidence)


def _float_dtype():
    return jnp.zeros(()).dtype  # float32, or float64 under jax_enable_x64


def _check_dims(n_links, n_flows):
    for name, n in (("n_links", n_links), ("n_flows", n_flows)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"{name} must be a non-negative integer; got {n!r}")
    return int(n_links), int(n_flows)


def as_incidence(incidence) -> Incidence:
    """Accepts an :class:`Incidence` or a dense ``[links, flows]`` array."""
    if isinstance(incidence, Incidence):
        return incidence
    if hasattr(incidence, "shape"):
        return Incidence.from_dense(incidence)
    raise ValueError("incidence must be a fabric_jax.Incidence or a dense [links, flows] "
                     f"array; got {type(incidence).__name__}")


@jit
def _entry_stats(li, fi, w):
    """``[min link, max link, min flow, max flow]`` and whether all weights lie in [0, 1]
    (on the device: only these five scalars travel to the host)."""
    ext = jnp.stack([jnp.min(li), jnp.max(li), jnp.min(fi), jnp.max(fi)])
    return ext, jnp.all(jnp.isfinite(w) & (w >= 0) & (w <= 1))


def check_entries(inc: Incidence):
    """Host-side checks of a concrete incidence's entries (skipped under tracing):
    shapes, indices in range, weights in ``[0, 1]`` (0 = padding).  Raises ``ValueError``.

    Arrays already on a device are reduced there (five scalars come back), not copied
    to the host."""
    arrays = (inc.link_idx, inc.flow_idx, inc.weight)
    if any(isinstance(x, jax.core.Tracer) for x in arrays):
        return
    shapes = [np.shape(x) for x in arrays]
    if not (shapes[0] == shapes[1] == shapes[2]) or len(shapes[0]) != 1:
        raise ValueError(f"incidence: link_idx, flow_idx and weight must be [nnz] arrays "
                         f"of one length; got {shapes[0]}, {shapes[1]}, {shapes[2]}")
    if shapes[0][0] == 0:
        return
    ext = w_ok = None
    if not all(isinstance(x, np.ndarray) for x in arrays):
        ext, w_ok = _entry_stats(*arrays)
        if isinstance(ext, jax.core.Tracer):  # concrete entries inside an outer jit
            ext = w_ok = None
    if ext is None:
        li, fi, w = (np.asarray(x) for x in arrays)
        wf = w.astype(float)
        ext = (li.min(), li.max(), fi.min(), fi.max())
        w_ok = np.all(np.isfinite(wf) & (wf >= 0) & (wf <= 1))
    ext, w_ok = np.asarray(ext), bool(w_ok)
    lo_l, hi_l, lo_f, hi_f = (int(v) for v in ext)
    if lo_l < 0 or hi_l >= inc.n_links:
        raise ValueError(f"incidence.link_idx must lie in [0, n_links={inc.n_links}); got "
                         f"[{lo_l}, {hi_l}] (padding entries use a valid link with weight 0)")
    if lo_f < 0 or hi_f >= inc.n_flows:
        raise ValueError(f"incidence.flow_idx must lie in [0, n_flows={inc.n_flows}); got "
                         f"[{lo_f}, {hi_f}]")
    if not w_ok:
        raise ValueError("incidence.weight must lie in [0, 1] (fraction of a flow's rate "
                         "on a link; 0 = padding)")


def compact_incidence(paths, split, n_links: int, width: int | None = None) -> Incidence:
    """Flow-major incidence with one entry per distinct (flow, link), zero weights dropped.

    A flow's candidate paths share their host links, so the ``paths x hops`` entries per
    flow collapse to the distinct links it uses (the split weights of duplicates add
    up).  The max-min problem is the same matrix.

    Args:
      paths: :class:`~fabric_jax.paths.PathSet` (one pair per flow).
      split: ``[flows, paths]`` fraction of each flow on each candidate path.
      n_links: links of the topology.
      width: entries per flow (>= the largest count); default the largest count.

    Returns:
      :class:`~fabric_jax.Incidence` with ``row_width = width`` whose dense matrix equals
      that of ``Incidence.from_paths(paths, split, n_links=n_links)``.
    """
    links = np.asarray(paths.links)
    hop = np.asarray(paths.hop_mask, bool) & (links >= 0)
    s = np.asarray(split, float)
    n_flows = links.shape[0]
    w = np.where(hop, s[:, :, None], 0.0)
    flow = np.broadcast_to(np.arange(n_flows)[:, None, None], links.shape)
    keep = w > 0
    key = flow[keep].astype(np.int64) * n_links + links[keep]
    uniq, inv = np.unique(key, return_inverse=True)
    wsum = np.bincount(inv, weights=w[keep], minlength=uniq.size)
    fi, li = np.divmod(uniq, n_links)
    counts = np.bincount(fi, minlength=n_flows)
    need = max(int(counts.max(initial=0)), 1)
    width = need if width is None else int(width)
    if width < need:
        raise ValueError(f"width={width} is smaller than the largest row ({need} links)")
    pos = np.arange(fi.size) - (np.cumsum(counts) - counts)[fi]
    lt = np.zeros((n_flows, width), np.int32)
    wt = np.zeros((n_flows, width), np.float32)
    lt[fi, pos] = li
    wt[fi, pos] = np.minimum(wsum, 1.0)
    return Incidence(jnp.asarray(lt.ravel()), jnp.asarray(np.repeat(np.arange(n_flows,
                     dtype=np.int32), width)), jnp.asarray(wt.ravel(), jnp.result_type(float)),
                     int(n_links), int(n_flows), width)
