"""Traffic classes: priorities / virtual lanes and their arbitration at a link.

Units: bytes, seconds, bytes/s.

Real fabrics carry several traffic classes per port, each with its own egress queue
(and, lossless, its own pause state or credits), and a scheduler that shares the link
among the classes:

* **InfiniBand**: a packet's service level (SL, 0..15) is mapped per port to a virtual
  lane (VL) by the SL-to-VL table; data VLs are served by **VL arbitration**, a
  high-priority and a low-priority table of ``(VL, weight)`` entries (weights in units
  of 64 bytes), the high table served first up to "Limit of High Priority" (IBA vol. 1
  rel. 1.4, sec. 7.6.9 "VL arbitration and prioritization"; credits are per VL,
  sec. 7.9).
* **Ethernet** (RoCE, Spectrum-X, UEC): 802.1p priorities are mapped to traffic
  classes, served by **Enhanced Transmission Selection** (IEEE 802.1Qaz, now 802.1Q
  clause 37: each ETS class is guaranteed its bandwidth percentage, and bandwidth
  another class leaves unused is given to the others) or by strict priority; PFC
  pauses each priority on its own (IEEE 802.1Qbb, :mod:`fabric_jax.flowcontrol`).

Fluid model (:func:`arbitrate`).  Each class has a priority ``level`` and a weight
``w_c``.  At a link of usable capacity ``u`` where class ``c`` wants ``d_c`` bytes/s
(its standing bytes per step plus its fresh offers, capped by its own flow-control
ceiling), the levels are served from the highest down, each against what the higher
ones left; inside a level the classes share by **weighted max-min** (water-filling):
``g_c = min(d_c, w_c * lambda)`` with ``lambda`` the level at which the grants fill
the capacity, so a class gets at least ``w_c / sum_(active) w`` of the link and what an
idle or satisfied class leaves goes to the others in proportion to their weights
(work conserving).  ``"strict"`` puts every class on its own level (higher class id =
higher priority, as 802.1Q's priority 7 above 0); ``"ets"`` puts all on one level.
Mixed schemes (IB's high/low tables, an Ethernet strict class above ETS classes) give
``levels`` explicitly.

Assumptions, named: arbitration is fluid (the byte-granular DWRR / VL-table round
robin is replaced by its long-run share); IB's "Limit of High Priority" is infinite
(the high table is strict); a class's demand counts every fresh offer of the class
at the link even when the flow is limited elsewhere -- the fluid loop gives what such
a class leaves unused to the others in a second, redistribution pass
(:func:`fabric_jax.fluid.simulate_fluid`).

Per-class queues come for free in the fluid loop: its queues are per flow and hop,
so a class's queue at a link is the sum over that class's entries
(:func:`class_hops`: the hop table of ``links x classes`` "units", unit
``l * n_classes + c``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import links as lk

__all__ = ["TrafficClasses", "traffic_classes", "arbitrate", "class_hops", "check_traffic_class",
           "ARBITRATIONS", "MAX_CLASSES"]

#: Arbitration schemes of :func:`traffic_classes`.
ARBITRATIONS = ("ets", "strict")
#: Most classes a port has: 16 IB VLs (15 data VLs + VL15), 8 Ethernet priorities.
MAX_CLASSES = 16


@dataclasses.dataclass(frozen=True)
class TrafficClasses:
    """Traffic classes of every port and their arbitration.

    Attributes:
      weights: ``[classes]`` ETS / VL-arbitration weights (a leaf: traceable and
        differentiable); only ratios inside a priority level matter.
      levels: per class, its priority level (static; higher is served first).
      names: per class, a label (static; for reports).
    """

    weights: Any
    levels: tuple = dataclasses.field(metadata=dict(static=True))
    names: tuple = dataclasses.field(default=(), metadata=dict(static=True))

    @property
    def n_classes(self) -> int:
        return len(self.levels)


jax.tree_util.register_dataclass(TrafficClasses)


def traffic_classes(n_classes: int, *, arbitration: str = "ets", weights=None, levels=None,
                    names=None) -> TrafficClasses:
    """Builds a validated :class:`TrafficClasses` (host).

    Args:
      n_classes: number of classes (1..:data:`MAX_CLASSES`).
      arbitration: ``"ets"`` (one level, weighted sharing: 802.1Qaz ETS, an IB
        VL-arbitration table) or ``"strict"`` (class ``c`` on level ``c``: higher id
        first).  Ignored when ``levels`` is given.
      weights: ``[classes]`` weights > 0 (default all 1).
      levels: ``[classes]`` integer priority levels (overrides ``arbitration``).
      names: ``[classes]`` labels (default ``"tc0"``, ``"tc1"``...).

    Raises:
      ValueError: naming the argument: a class count out of range, an unknown
        arbitration, weights not finite and > 0 or of the wrong length, levels of the
        wrong length.
    """
    if not (isinstance(n_classes, (int, np.integer)) and not isinstance(n_classes, bool)
            and 1 <= n_classes <= MAX_CLASSES):
        raise ValueError(f"n_classes must be an integer in [1, {MAX_CLASSES}]; got {n_classes!r}")
    n = int(n_classes)
    if arbitration not in ARBITRATIONS:
        raise ValueError(f"arbitration must be one of {ARBITRATIONS}; got {arbitration!r}")
    if weights is None:
        w = np.ones(n)
    elif isinstance(weights, jax.core.Tracer):
        w = weights
    else:
        w = np.asarray(weights, float)
        if w.shape != (n,):
            raise ValueError(f"weights must have shape [classes] = [{n}]; got {list(w.shape)}")
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(f"weights must be finite and > 0 (ETS / VL-arbitration weights); "
                             f"got {w.tolist()}")
    if levels is None:
        lv = tuple(range(n)) if arbitration == "strict" else (0,) * n
    else:
        lv = tuple(int(v) for v in np.asarray(levels).ravel())
        if len(lv) != n:
            raise ValueError(f"levels must have one integer per class ({n}); got {levels!r}")
    nm = tuple(f"tc{c}" for c in range(n)) if names is None else tuple(str(s) for s in names)
    if len(nm) != n:
        raise ValueError(f"names must have one label per class ({n}); got {names!r}")
    return TrafficClasses(weights=jnp.asarray(w, jnp.result_type(float)), levels=lv, names=nm)


def check_traffic_class(traffic_class, n_flows: int, n_classes: int) -> np.ndarray:
    """``[flows]`` int32 class of each flow, validated (host).

    Raises:
      ValueError: ``traffic_class`` not ``[flows]`` integers in ``[0, n_classes)``.
    """
    if traffic_class is None:
        return np.zeros(n_flows, np.int32)
    if isinstance(traffic_class, jax.core.Tracer):
        raise ValueError("traffic_class must be concrete (it sets the per-class queue layout)")
    a = np.asarray(traffic_class)
    if a.shape != (n_flows,):
        raise ValueError(f"traffic_class must have shape [flows] = [{n_flows}]; "
                         f"got {list(a.shape)}")
    if a.size and not (np.issubdtype(a.dtype, np.integer)
                       or (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)))):
        raise ValueError(f"traffic_class must hold integer class ids; got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= n_classes):
        raise ValueError(f"traffic_class holds class {int(a.max() if a.max() >= n_classes else a.min())}, "
                         f"outside [0, {n_classes}); raise classes' n_classes or fix the ids")
    return a.astype(np.int32)


# ------------------------------------------------------------------ device side
def _weighted_fill(capacity, demand, weight):
    """Weighted max-min of ``capacity`` ``[links]`` over ``demand`` ``[links, classes]``
    (water-filling; classes with weight 0 take no part): at most ``classes + 1``
    freezing rounds, each freezing the classes whose demand is below their weighted
    share, exact for any demand."""
    n = demand.shape[1]
    part = weight > 0
    sat = (demand <= 0) | ~part

    def level(sat):
        open_w = jnp.sum(jnp.where(sat, 0.0, weight), axis=1)
        rem = capacity - jnp.sum(jnp.where(sat & part, demand, 0.0), axis=1)
        pos = open_w > 0
        return jnp.where(pos, jnp.maximum(rem, 0.0) / jnp.where(pos, open_w, 1.0), 0.0)

    for _ in range(n):  # static: n is the (small) number of classes
        lam = level(sat)
        sat = sat | (demand <= weight * lam[:, None])
    lam = level(sat)
    return jnp.where(part, jnp.where(sat, demand, weight * lam[:, None]), 0.0)


def arbitrate(capacity, demand, weights, levels):
    """Shares each link among its classes (module docstring).

    Args:
      capacity: ``[links]`` usable capacity, bytes/s.
      demand: ``[links, classes]`` what each class wants, bytes/s (>= 0).
      weights: ``[classes]`` weights > 0.
      levels: ``[classes]`` static priority levels (higher first).

    Returns:
      ``[links, classes]`` grants, bytes/s: ``<= demand``, summing to at most the
      capacity, and to ``min(capacity, sum demand)`` (work conserving).
    """
    demand = jnp.maximum(demand, 0.0)
    weights = jnp.broadcast_to(jnp.asarray(weights, demand.dtype), demand.shape)
    grant = jnp.zeros_like(demand)
    left = capacity
    for lev in sorted(set(levels), reverse=True):
        member = jnp.asarray(np.asarray(levels) == lev)
        g = _weighted_fill(left, jnp.where(member, demand, 0.0), jnp.where(member, weights, 0.0))
        grant = grant + g
        left = jnp.maximum(left - jnp.sum(g, axis=1), 0.0)
    return grant


def class_hops(hops: lk.HopTable, traffic_class, n_classes: int) -> lk.HopTable:
    """The hop table of ``links x classes`` units: hop ``(f, h)`` on link ``l`` belongs
    to unit ``l * n_classes + class_f``; its previous hop's unit likewise (the
    per-class ingress pool)."""
    n_links = hops.n_links
    n_units = n_links * n_classes
    cls = jnp.asarray(traffic_class, jnp.int32)[:, None]
    link = jnp.where(hops.valid, hops.link * n_classes + cls, n_units)
    prev = jnp.where(hops.prev < n_links, hops.prev * n_classes + cls, n_units)
    return lk.HopTable(link=link.astype(jnp.int32), prev=prev.astype(jnp.int32),
                       valid=hops.valid, last=hops.last, seg=hops.seg, n_links=n_units)
