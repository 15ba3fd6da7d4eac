"""Links, queues and wires of the fluid fabric: the hop table and its device-side kernels.

Units: bytes, seconds, bytes/s.

The fluid loop (:func:`fabric_jax.fluid.simulate_fluid`) lays the hops of every flow
out in a padded table ``[flows, hops]`` (:class:`HopTable`): ``link[f, h]`` is the link
of flow ``f``'s ``h``-th hop (``n_links`` = padding).  With dynamic routing the hops
of one flow are laid out path by path, ``paths x seg`` columns, ``seg`` hops per path.
Per hop the loop keeps two byte counts:

* ``queue[f, h]``: bytes of flow ``f`` **standing** in the egress queue of link
  ``link[f, h]``.  A link's queue is ``q_l = sum queue[f, h]`` over its entries.  The
  queue is a FIFO kept in ``K`` bands, ``bands[f, h, k]`` (oldest band first, band ``k``
  the same stretch of the queue for all the link's entries): :func:`serve` sends the
  bands in order, :func:`merge_bands` frees a band at the tail for the step's
  arrivals.
* bytes that leave the queue of hop ``h - 1`` reach hop ``h`` in the same step and are
  served there with its standing bytes (:func:`serve_through`), so bytes that pass
  through a link faster than they arrive never stand in its queue and never raise a
  congestion signal.  ``transit[f, h]`` holds what a route graph with cycles leaves
  for the next step (zero on every Clos route): in flight, not queued.

A flow's path also has a one-way latency (propagation + serialisation of its links,
plus host processing): the bytes that leave the last queue ride a per-flow **wire**
(:func:`wire_step`, :func:`wire_in_flight`), a ``[depth, flows]`` history of what
entered it, delivered after ``n + phi`` steps (``n`` integer steps, the fraction ``phi`` split
linearly over the two neighbouring steps, exact for traffic spread uniformly over a
step).

Approximations, stated: the network is simulated in the frame of the flow's wave
front, i.e. the path latency delays delivery and feedback but not the instant at which
bytes meet at a downstream hop (bytes that never queue cross the fabric cut-through in
their step, and so do bytes leaving a queue, through the hops below it, so that a
queued byte's path adds no ``(hops - 1) dt`` of delay: ``experiments/convergence.py``).

Host-NIC egress links (``nic``): the first hop of a flow leaves its host.  The NIC
arbitrates among its flows and keeps no shared backlog: what a flow cannot put
through its NIC stays unsent with the sender (``fabric_jax.fluid.stages.transmit.hold_at_sender``),
so a NIC hop never holds queued bytes, and nothing there is marked, counted as
queueing delay or in-band telemetry, dropped or trimmed (:func:`nic_links`).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .segments import segment_reduce, segment_table, tables_wanted

__all__ = ["HopTable", "hop_table", "nic_links", "wire_taps", "serve", "serve_through",
           "past_first", "fifo_take", "merge_bands", "reconcile_bands",
           "band_sums",
           "service_span",
           "DEFAULT_FIFO_BANDS",
           "wire_step", "wire_in_flight", "sum_rows", "path_latencies", "path_delay"]


@dataclasses.dataclass(frozen=True)
class HopTable:
    """Static layout of the hops of every flow (device arrays; ``seg``/``n_links`` static).

    Attributes:
      link: ``[flows, hops]`` int32 link of each hop, ``n_links`` on padding (ids in
        ``[0, n_links]``, which the link-side sums rely on).
      prev: ``[flows, hops]`` int32 link of the previous hop on the same path,
        ``n_links`` at a path's first hop (bytes there belong to no ingress pool).
      valid: ``[flows, hops]`` bool, the hop exists.
      last: ``[flows, hops]`` bool, the last hop of its path.
      seg: hops per path (the table has ``hops / seg`` paths per flow).
      n_links: number of links.
      by_link, by_prev: :class:`fabric_jax.segments.SegmentTable` of ``link`` and
        ``prev``: the link-side sums as gathers on accelerators
        (:func:`fabric_jax.segments.segment_reduce`), built on the host by
        :func:`hop_table` when :func:`fabric_jax.segments.tables_wanted`; ``None``:
        scatter-adds (the CPU's form, or a table built from traced weights).
      axis_name: ``None`` (default), or the mesh axis (name or tuple of names) over
        which the flows of the table are split inside :func:`jax.shard_map`
        (:func:`fabric_jax.distributed.simulate_fluid_sharded`): each shard holds a
        slice of the flows (rows), and every link-side reduction (:meth:`link_sum`,
        :meth:`link_max`, :meth:`pool_sum`) is then a ``psum`` / ``pmax`` over the axis,
        so every shard sees the whole fabric's link state.  Static.
    """

    link: Any
    prev: Any
    valid: Any
    last: Any
    seg: int = dataclasses.field(metadata=dict(static=True))
    n_links: int = dataclasses.field(metadata=dict(static=True))
    by_link: Any = None
    by_prev: Any = None
    axis_name: Any = dataclasses.field(default=None, metadata=dict(static=True))

    @property
    def n_paths(self) -> int:
        return self.link.shape[1] // self.seg

    def per_path(self, a):
        """``[flows, hops]`` -> ``[flows, paths, seg]``."""
        return a.reshape(a.shape[0], self.n_paths, self.seg)

    def _flat(self, values):
        """``[flows, hops, ...]`` -> ``[flows * hops, ...]``."""
        return values.reshape((self.link.size,) + values.shape[2:])

    def link_sum(self, values):
        """``[links, ...]`` sums of ``[flows, hops, ...]`` values over each link's
        entries."""
        out = segment_reduce(self._flat(values), self.link, self.n_links, self.by_link,
                             padded=True)
        return out if self.axis_name is None else jax.lax.psum(out, self.axis_name)

    def link_max(self, values):
        """``[links, ...]`` maxima of ``[flows, hops, ...]`` values over each link's
        entries (``-inf`` where a link has none)."""
        out = segment_reduce(self._flat(values), self.link, self.n_links, self.by_link, "max",
                             padded=True)
        return out if self.axis_name is None else jax.lax.pmax(out, self.axis_name)

    def pool_sum(self, values):
        """``[links, ...]`` sums over the entries whose *previous* hop is the link (the
        downstream switch's ingress pool charged to that link)."""
        out = segment_reduce(self._flat(values), self.prev, self.n_links, self.by_prev,
                             padded=True)
        return out if self.axis_name is None else jax.lax.psum(out, self.axis_name)

    def gather(self, link_values, fill=0.0):
        """``[flows, hops]`` value of each hop's link (``fill`` on padding)."""
        ext = jnp.concatenate([link_values, jnp.full((1,), fill, link_values.dtype)])
        return ext[self.link]

    def to_next_hop(self, a):
        """Moves ``[flows, hops]`` values one hop down their path (0 at first hops)."""
        a3 = self.per_path(a)
        pad = jnp.zeros(a3.shape[:2] + (1,), a.dtype)
        out = jnp.concatenate([pad, a3[:, :, :-1]], axis=2).reshape(a.shape)
        return jnp.where(self.valid, out, 0.0)


jax.tree_util.register_dataclass(HopTable)


def hop_table(link_tab: np.ndarray, weight, seg: int, n_links: int) -> HopTable:
    """Builds the :class:`HopTable` from a host ``[flows, hops]`` link table (NumPy,
    ``n_links`` on padding) and the hop weights (0 = no hop)."""
    link = np.asarray(link_tab)
    n_flows, n_hops = link.shape
    if isinstance(weight, jax.core.Tracer):
        valid = jnp.asarray(link < n_links) & (weight != 0)
        link_j = jnp.where(valid, jnp.asarray(link, jnp.int32), n_links)
        l3 = link_j.reshape(n_flows, n_hops // seg, seg)
        prev = jnp.concatenate([jnp.full(l3.shape[:2] + (1,), n_links, jnp.int32),
                                l3[:, :, :-1]], axis=2).reshape(n_flows, n_hops)
        prev = jnp.where(valid, prev, n_links)
        v3 = valid.reshape(l3.shape)
        nxt = jnp.concatenate([v3[:, :, 1:], jnp.zeros(l3.shape[:2] + (1,), bool)], axis=2)
        last = valid & ~nxt.reshape(n_flows, n_hops)
        return HopTable(link=link_j, prev=prev, valid=valid, last=last, seg=int(seg),
                        n_links=int(n_links))
    # host: the layout and its segment tables (link-side sums as gathers)
    valid = (link < n_links) & (np.asarray(weight) != 0)
    link_h = np.where(valid, link, n_links).astype(np.int32)
    l3 = link_h.reshape(n_flows, n_hops // seg, seg)
    prev = np.concatenate([np.full(l3.shape[:2] + (1,), n_links, np.int32), l3[:, :, :-1]],
                          axis=2).reshape(n_flows, n_hops)
    prev = np.where(valid, prev, n_links).astype(np.int32)
    v3 = valid.reshape(l3.shape)
    nxt = np.concatenate([v3[:, :, 1:], np.zeros(l3.shape[:2] + (1,), bool)], axis=2)
    last = valid & ~nxt.reshape(n_flows, n_hops)
    tables = tables_wanted()
    return HopTable(link=jnp.asarray(link_h), prev=jnp.asarray(prev), valid=jnp.asarray(valid),
                    last=jnp.asarray(last), seg=int(seg), n_links=int(n_links),
                    by_link=segment_table(link_h, n_links) if tables else None,
                    by_prev=segment_table(prev, n_links) if tables else None)


def nic_links(link_tab: np.ndarray, seg: int, n_links: int, nic=None) -> np.ndarray:
    """``[links]`` bool: the link is a host-NIC egress (host side, NumPy).

    Args:
      link_tab: ``[flows, hops]`` link of each hop, ``n_links`` on padding.
      seg: hops per path.
      n_links: number of links.
      nic: ``None`` (derive), a ``[links]`` bool mask, or a
        :class:`fabric_jax.Topology` (links whose source node is a host).

    Derivation when ``nic`` is ``None``: a link is a NIC egress when it is the first hop
    of some multi-hop path and no path uses it at a later hop or as its only hop (a
    one-hop path is a synthetic bottleneck, not a host uplink).  Pass ``nic=`` (e.g. the
    topology) when that rule does not fit.

    Raises:
      ValueError: a mask of the wrong shape.
    """
    if nic is not None:
        if hasattr(nic, "node_is_host") and hasattr(nic, "link_src"):
            mask = np.asarray(nic.node_is_host)[np.asarray(nic.link_src)]
        else:
            mask = np.asarray(nic, bool)
        if mask.shape != (n_links,):
            raise ValueError(f"nic_links must be a [links] bool mask of {n_links} links or a "
                             f"Topology; got shape {list(mask.shape)}")
        return mask.astype(bool)
    if np.size(link_tab) == 0:
        return np.zeros(n_links, bool)
    tab = np.asarray(link_tab).reshape(link_tab.shape[0], -1, seg)
    exists = tab < n_links
    n_valid = exists.sum(axis=2)
    first = tab[:, :, 0]
    multi = exists[:, :, 0] & (n_valid >= 2)
    single = exists[:, :, 0] & (n_valid == 1)
    first_hit = np.zeros(n_links + 1, bool)
    first_hit[first[multi]] = True
    banned = np.zeros(n_links + 1, bool)
    banned[tab[:, :, 1:][exists[:, :, 1:]]] = True
    banned[first[single]] = True
    return (first_hit & ~banned)[:n_links]


def path_latencies(link_latency, link_tab: np.ndarray, seg: int, n_links: int) -> np.ndarray:
    """Host: ``[flows, paths]`` one-way latency of each candidate path, s (the sum of its
    links' ``link_latency``; 0 on padded paths and without ``link_latency``).

    Raises:
      ValueError: ``link_latency`` not ``[links]`` finite seconds >= 0.
    """
    n_flows = link_tab.shape[0]
    tab = np.asarray(link_tab).reshape(n_flows, link_tab.shape[1] // seg, seg)
    if link_latency is None:
        return np.zeros(tab.shape[:2])
    lat = np.asarray(link_latency, float)
    if lat.shape != (n_links,) or np.any(~np.isfinite(lat)) or np.any(lat < 0):
        raise ValueError(f"link_latency must be [links] = [{n_links}] finite seconds >= 0 "
                         f"(e.g. topology.latency); got shape {list(lat.shape)}")
    return np.append(lat, 0.0)[tab].sum(axis=2)


def wire_taps(delay_s, dt: float):
    """Host: integer steps ``n`` and fraction ``phi`` of a delay, and the ring depth."""
    d = np.maximum(np.asarray(delay_s, float), 0.0) / float(dt)
    n = np.floor(d + 1e-9).astype(np.int32)
    phi = np.clip(d - n, 0.0, 1.0)
    phi = np.where(phi < 1e-9, 0.0, phi)
    return n, phi, int(n.max(initial=0)) + 2


# ------------------------------------------------------------------- device kernels
#: Default number of FIFO bands per egress queue (:func:`serve`).
DEFAULT_FIFO_BANDS = 8


def band_sums(hops: HopTable, bands):
    """``[links, K]`` bytes in each band of each link's queue (``bands`` ``[flows, hops, K]``)."""
    return hops.link_sum(bands)


def _gather_rows(hops: HopTable, per_link, fill=0.0):
    """``[flows, hops, K]`` row of each hop's link in a ``[links, K]`` table."""
    ext = jnp.concatenate([per_link, jnp.full((1, per_link.shape[1]), fill, per_link.dtype)])
    return ext[hops.link]


def _fill(x, hi):
    """``clip(x, 0, hi)`` (same values) whose derivative at a tie is that of the piece
    below it: ``x`` at ``x == hi``, ``0`` at ``x == 0`` (``jnp.clip`` gives half of each
    there).  The band kernels use it for the bytes a link's service reaches into a
    band (:func:`fifo_take`, :func:`serve`, :func:`service_span`), so that all of them
    differentiate the same side of a service that ends exactly at a band boundary."""
    return jnp.where(x > hi, hi, jnp.where(x > 0.0, x, 0.0))


def fifo_take(hops: HopTable, bands, amount, lb=None):
    """Takes ``amount`` ``[links]`` bytes from the head of each link's FIFO.

    ``bands`` ``[flows, hops, K]`` are the bytes of each entry in the ``K`` bands of its
    link's queue, oldest band first (band ``k`` of every entry of a link is the same
    stretch of that queue).  The link sends its bands in order; inside a band its
    entries leave in proportion to their bytes (a band is the resolution of the model).

    Returns ``[flows, hops, K]`` bytes taken; their sum over a link's entries is
    ``min(amount_l, q_l)`` exactly (up to round-off).  ``lb``: :func:`band_sums` of
    ``bands`` when the caller has it.

    Derivatives (forward and reverse mode): those of the piece just below a tie, i.e.
    of the take at ``amount - 0`` (:func:`_fill`).  A band that the amount ends
    exactly at the end of is partly taken (its take moves with the amount), the next
    band is untouched, and an empty band (``L_k = 0``) is taken whole when it lies
    below the amount (``amount > before``): it holds no byte, but its derivative (a
    band drained exactly at an earlier step) goes with it.  So the link's total take
    moves with ``min(amount, q)`` in every direction, and so do the bytes
    :func:`serve` sends behind it.  Ties are common (dyadic rates and steps make a
    grant equal a standing queue exactly), and ``jnp.clip`` / ``where(L > 0, ., 0)``
    gave derivatives that fit no side of them: tangent bytes lost or counted twice
    each step, e.g. a two-class ETS weight gradient of 30.9 against the closed form
    0.039 with 8 bands (``tests/dynamics/test_traffic_classes.py``).
    """
    lb = band_sums(hops, bands) if lb is None else lb
    before = jnp.cumsum(lb, axis=1) - lb
    a = amount[:, None]
    pos = lb > 0
    frac = jnp.where(pos, _fill((a - before) / jnp.where(pos, lb, 1.0), 1.0),
                     jnp.where(a > before, 1.0, 0.0))
    return bands * _gather_rows(hops, frac)


def merge_bands(hops: HopTable, bands, lb=None):
    """Frees the newest band of every link's queue for the step's arrivals by merging
    two adjacent bands into one (the older ones keep their order).

    The pair merged is the one whose merge misplaces the fewest bytes: for bands ``j``
    and ``j + 1`` of sizes ``L_j, L_j+1`` and entry contents ``b_j, b_j+1``, the cost is
    ``sum_e |b_ej L_j+1 - b_e,j+1 L_j| / (L_j + L_j+1)`` (how many bytes a merged band
    serves out of their order).  It is 0 when either band is empty (drained bands at
    the head merge first) and when the two have the same composition, so a queue whose
    make-up changes a few times keeps those boundaries exactly however long it is (a
    short flow that met a standing queue keeps its place behind it).  With ``K = 1``
    nothing is merged: standing bytes form a single band (a well-mixed queue).  ``lb``:
    :func:`band_sums` of ``bands`` when the caller has it.  Derivatives: the choice of
    the pair is piecewise constant (no derivative flows through the costs); the
    merged bands are linear in ``bands``."""
    n_bands = bands.shape[-1]
    if n_bands == 1:
        return bands
    lb = band_sums(hops, bands) if lb is None else lb
    lb_e = _gather_rows(hops, lb)
    mis = jnp.abs(bands[..., :-1] * lb_e[..., 1:] - bands[..., 1:] * lb_e[..., :-1])
    pair = lb[:, :-1] + lb[:, 1:]
    pos = pair > 0
    cost = jnp.where(pos, band_sums(hops, mis) / jnp.where(pos, pair, 1.0), 0.0)
    j = jnp.argmin(cost, axis=1)
    j_e = jnp.concatenate([j, jnp.full((1,), n_bands, j.dtype)])[hops.link][..., None]
    k = jnp.arange(n_bands)
    shifted = jnp.concatenate([bands[..., 1:], jnp.zeros_like(bands[..., :1])], axis=-1)
    return jnp.where(k < j_e, bands, jnp.where(k == j_e, bands + shifted, shifted))


def reconcile_bands(bands, queue):
    """Bands whose sum over ``K`` is ``queue`` ``[flows, hops]``: bytes removed elsewhere
    (drops, faults, bytes returned to the sender) leave every band of the entry in
    proportion; bytes added join the newest band (the tail of the FIFO).

    Derivatives: the bands' sum moves with ``queue`` in every direction, also at
    ``queue == sum(bands)`` (the usual case: a difference there joins the tail band;
    ``maximum(queue - tot, 0)`` would pass half of it)."""
    tot = jnp.sum(bands, axis=-1)
    over = tot > queue
    scale = jnp.where(over & (tot > 0), queue / jnp.where(tot > 0, tot, 1.0), 1.0)
    out = bands * scale[..., None]
    return out.at[..., -1].add(jnp.where(over, 0.0, queue - tot))


def service_span(hops: HopTable, bands, head, sent_a, sent_l, lb=None, s_q=None):
    """``(p0, p1)`` ``[flows, hops]``: where in its link's service of the step each entry's
    sent bytes lie, in bytes from the start of the step's service (``0 .. s_l``).

    A FIFO sends its standing bands in order, then the step's arrivals interleaved
    (:func:`serve`): an entry's bytes from band ``k`` leave between the band's start
    and the point the link reached in it, its arrivals between ``q_l`` served and
    ``s_l``.  ``p0`` is where its first sent byte leaves, ``p1`` its last (both 0 when it
    sent nothing).  The instant a flow's last byte leaves its last hop inside the step
    follows (``fabric_jax.fluid.stages.complete.finish_in_step``).  Third output: ``[links, K]`` the
    bytes left in each band (the :func:`band_sums` of ``bands - head``, for
    :func:`merge_bands`).  Derivatives: those of the piece just below a tie, as
    :func:`fifo_take` (a service ending exactly at a band's end ends inside it); which
    bands an entry sent from is piecewise constant.

    Args:
      bands: ``[flows, hops, K]`` standing bytes before the step's service.
      head: ``[flows, hops, K]`` what the link took from them (:func:`fifo_take`).
      sent_a: ``[flows, hops]`` arrivals sent in the step.
      sent_l: ``[links]`` bytes the link sent in the step.
    """
    lb = band_sums(hops, bands) if lb is None else lb
    before = jnp.cumsum(lb, axis=1) - lb
    if s_q is None:
        s_q = hops.link_sum(jnp.sum(head, axis=-1))
    end = before + _fill(s_q[:, None] - before, lb)
    has = head > 0
    any_b = jnp.any(has, axis=-1)
    p0_b = jnp.min(jnp.where(has, _gather_rows(hops, before), jnp.inf), axis=-1)
    p1_b = jnp.max(jnp.where(has, _gather_rows(hops, end), -jnp.inf), axis=-1)
    arr = sent_a > 0
    s_q_e, s_l_e = hops.gather(s_q), hops.gather(sent_l)
    p0 = jnp.where(any_b, p0_b, jnp.where(arr, s_q_e, 0.0))
    p1 = jnp.where(arr, s_l_e, jnp.where(any_b, p1_b, 0.0))
    return p0, p1, lb - (end - before)


def serve(hops: HopTable, bands, transit, usable, dt, head=None, lb=None, sent_q=None):
    """One step of the egress queues: FIFO.

    Link ``l`` holds ``q_l`` standing bytes in bands (oldest first, :func:`fifo_take`)
    and receives ``a_l`` bytes in the step; it sends ``s_l = min(q_l + a_l, u_l dt)``:
    its standing bytes first, band by band, then the step's arrivals, taken from each
    entry in proportion to what it brought (arrivals inside one step are simultaneous
    at the resolution of the model).

    Derivatives follow :func:`fifo_take` (the piece just below a tie): arrivals are
    served as one more band behind the standing ones, so ``s_l`` moves with
    ``min(q_l + a_l, u_l dt)`` in every direction, also when the standing bytes end
    exactly at the budget (the arrivals' share then does not move) or when no byte
    arrives (``a_l = 0``: an entry's derivative goes with it when there is room).

    Args:
      bands: ``[flows, hops, K]`` standing bytes per FIFO band.
      transit: ``[flows, hops]`` bytes arriving in the step.
      usable: ``[links]`` capacity, bytes/s.
      head: optional ``[flows, hops, K]`` what :func:`fifo_take` takes from ``bands``
        at ``usable`` (precomputed when ``usable`` does not depend on the arrivals).
      lb: optional :func:`band_sums` of ``bands``.
      sent_q: optional ``[links]`` bytes ``head`` takes per link (with ``head``).

    Returns:
      ``(sent_e, left_b, left_a, sent_l, head, sent_a)``: ``[flows, hops]`` bytes sent by
      each entry, ``[flows, hops, K]`` standing bytes left, ``[flows, hops]`` arrivals
      left (to join the tail), ``[links]`` ``s_l``, and the two parts of ``sent_e``:
      ``[flows, hops, K]`` taken from the bands, ``[flows, hops]`` arrivals sent.
    """
    budget = usable * dt
    if head is None:
        head = fifo_take(hops, bands, budget, lb)
    sent_b = jnp.sum(head, axis=-1)
    if sent_q is None:
        sent_q = hops.link_sum(sent_b)
    a_l = hops.link_sum(transit)
    room = budget - sent_q
    s_a = _fill(room, a_l)                  # min(a_l, max(room, 0)), see fifo_take
    pos = a_l > 0
    frac = jnp.where(pos, s_a / jnp.where(pos, a_l, 1.0), jnp.where(room > 0.0, 1.0, 0.0))
    sent_a = transit * hops.gather(frac)
    return sent_b + sent_a, bands - head, transit - sent_a, sent_q + s_a, head, sent_a


def serve_through(hops: HopTable, bands, transit, usable, dt, sweeps: int):
    """One step of every egress queue, bytes leaving a queue crossing the hops below it
    in the same step (cut-through, like the fresh offers).

    A byte that leaves hop ``h``'s queue reaches hop ``h + 1`` a link latency later; in
    the wave-front frame of the model (path latencies delay delivery and feedback, not
    the meeting of bytes at a hop) it joins that hop's FIFO in the same step and is
    served there after its standing bytes (:func:`serve`).  The step's arrivals at each
    hop are the fixed point ``a = transit + next_hop(served(queue, a))``, found by
    Jacobi sweeps: on a link graph without cycles (every up-down Clos route) sweep ``i``
    settles every link ``i`` hops from the sources, so ``sweeps >= hops`` gives it
    exactly.  What a truncated iteration leaves (a cyclic route set) waits on the wire
    for the next step (``carry``), so bytes are conserved either way.

    Args:
      bands: ``[flows, hops, K]`` standing bytes per FIFO band (:func:`serve`).
      transit: ``[flows, hops]`` bytes arriving from the wire (carried from the
        previous step; zero on acyclic routes).
      usable: ``[links]`` capacity, bytes/s, or a function of the ``[links]`` bytes
        standing and arriving in the step that returns it (a capacity that depends on
        the backlog, e.g. the grants of traffic classes, :func:`fabric_jax.qos.arbitrate`).
      sweeps: static number of sweeps (the hops per path).

    Returns:
      ``(sent_e, left_b, left_a, sent_l, arrived_e, carry_e, usable_l, span)``: the
      first four as :func:`serve`, the step's arrivals at each hop, the bytes sent
      downstream that did not join this step's arrivals (on the wire to the next step),
      the capacity used, and :func:`service_span` ``(p0, p1)``.
    """
    queue = jnp.sum(bands, axis=-1)
    lb = band_sums(hops, bands)
    head = None if callable(usable) else fifo_take(hops, bands, usable * dt, lb)
    cap_of = usable if callable(usable) else (lambda load: usable)
    inflow = transit
    out = cap = None
    # what the standing queues send does not depend on the arrivals: summed once
    sent_q = None if head is None else hops.link_sum(jnp.sum(head, axis=-1))
    for _ in range(max(int(sweeps), 1)):
        used = inflow
        cap = cap_of(hops.link_sum(queue + used))
        out = serve(hops, bands, used, cap, dt, head, lb, sent_q)
        inflow = transit + hops.to_next_hop(jnp.where(hops.last, 0.0, out[0]))
    carry = jnp.maximum(inflow - used, 0.0)
    sent_e, left_b, left_a, sent_l, head, sent_a = out
    span = service_span(hops, bands, head, sent_a, sent_l, lb, sent_q)
    return sent_e, left_b, left_a, sent_l, used, carry, cap, span


def past_first(hops: HopTable, overloaded):
    """``[flows, hops]`` bool: hops that lie after the first ``overloaded`` hop of their
    path (the excess waits at that hop and does not reach them)."""
    over_e = hops.per_path(hops.gather(overloaded, False) & hops.valid).astype(jnp.int32)
    after = (jnp.cumsum(over_e, axis=2) - over_e) > 0
    return after.reshape(hops.link.shape)


def wire_step(wire, k, taps_n, taps_phi, bytes_):
    """Step ``k`` of the receiver wires: ``bytes_`` ``[flows]`` enter, and each flow's
    wire delivers what entered ``taps_n + taps_phi`` steps ago (:func:`wire_taps`).

    ``wire`` ``[depth, flows]`` is the history of what entered each wire, row ``j %
    depth`` holding step ``j`` (``depth >= max(taps_n) + 2``, so a row is read before it
    is overwritten; zeros before the first step).  Bytes that enter at step ``j`` leave
    ``1 - phi`` of them at step ``j + n`` and ``phi`` at ``j + n + 1`` (exact for
    bytes spread uniformly over a step), so step ``k`` delivers ``(1 - phi) h[k - n] +
    phi h[k - n - 1]``: one row written and two read per step (a ring of arrival slots
    would need two scatter-adds per step).

    Returns:
      ``(wire, delivered [flows])``.
    """
    depth, n_flows = wire.shape
    wire = jax.lax.dynamic_update_slice(wire, bytes_[None].astype(wire.dtype),
                                        (k % depth, jnp.zeros((), jnp.int32)))
    ar = jnp.arange(n_flows)
    delivered = ((1.0 - taps_phi) * wire[(k - taps_n) % depth, ar]
                 + taps_phi * wire[(k - taps_n - 1) % depth, ar])
    return wire, delivered


def wire_in_flight(wire, k, taps_n, taps_phi, *, by_rows: bool = False):
    """``[flows]`` bytes still on each wire after step ``k`` (:func:`wire_step`): what
    entered in the last ``taps_n`` steps, and ``phi`` of what entered ``taps_n`` steps
    ago.

    ``by_rows``: the sum over the history as adds of its rows (:func:`sum_rows`), not
    one reduction: about 30x faster on XLA:CPU at 1e5 flows, but rounded in another
    order (last bits): for the per-step accounting check, while results use the
    reduction."""
    depth = wire.shape[0]
    age = (k - jnp.arange(depth, dtype=jnp.result_type(k))[:, None]) % depth   # steps ago
    weight = jnp.where(age < taps_n[None, :], 1.0,
                       jnp.where(age == taps_n[None, :], taps_phi[None, :], 0.0))
    terms = weight.astype(wire.dtype) * wire
    return sum_rows(terms) if by_rows else jnp.sum(terms, axis=0)


def sum_rows(a, block: int = 16):
    """``[n]`` sum of the rows of ``[rows, n]`` ``a`` as elementwise adds of row slices,
    ``block`` rows at a time (a tree of ``ceil(log_block(rows))`` levels).

    XLA:CPU runs a reduction over the leading axis of a ``[rows, n]`` array (the
    ``[depth, flows]`` wire history) at tens of ns an element once ``n`` is above ~2e4
    (measured: 8 rows, 1e5 columns: 30-60 ms, the adds < 1 ms); on accelerators the adds
    fuse into their consumer like the reduction does."""
    while a.shape[0] > block:                                  # [rows, n] -> [width, n]
        width = -(-a.shape[0] // block)
        a = jnp.pad(a, ((0, width * block - a.shape[0]), (0, 0))).reshape(block, width, -1)
        a = functools.reduce(operator.add, list(a))
    return functools.reduce(operator.add, list(a))


def path_delay(hops: HopTable, queue_l, capacity, path_latency):
    """``[flows, paths]`` one-way delay of each path now: its latency plus the queueing
    delay ``sum q_l / C_l`` of its hops (FIFO egress queues drained at the capacity in
    force; a link with no capacity adds none, its path carries nothing).

    Args:
      queue_l: ``[links]`` egress queues, bytes.
      capacity: ``[links]`` capacity in force, bytes/s.
      path_latency: ``[flows, paths]`` latency of each path, s (:func:`path_latencies`).
    """
    pos = capacity > 0
    qdel = jnp.where(pos, queue_l / jnp.where(pos, capacity, 1.0), 0.0)
    per_hop = hops.per_path(jnp.where(hops.valid, hops.gather(qdel), 0.0))
    return path_latency + jnp.sum(per_hop, axis=2)


