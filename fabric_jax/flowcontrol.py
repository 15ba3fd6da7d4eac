"""Link-level flow control for the fluid fabric: PFC, InfiniBand credits, lossy drop/trim.

Units: bytes, seconds, bytes/s.

The fluid fabric (:mod:`fabric_jax.fluid`, :mod:`fabric_jax.links`) keeps, for every
flow ``f`` and hop ``h`` of its path, the bytes ``x[f, h]`` standing in the **egress
queue** of link ``l(f, h)`` (in the switch at the link's upstream end) and the bytes
``transit[f, h]`` on the wire towards it.  Two views of the same bytes matter here:

* the egress queue of link ``l``: ``q_l = sum x[f, h]`` over entries on ``l``;
* the **ingress pool** of link ``k`` (the buffer of the downstream switch charged to the
  port ``k`` arrives on): ``b_k = sum (x + transit)[f, h]`` over entries whose
  *previous* hop is ``k`` (``l(f, h-1) = k``): what ``k`` has sent into that buffer and
  was not forwarded yet.  Bytes at a flow's first hop sit in the sender's NIC (its
  send buffer) and belong to no pool; a NIC is never dropped or trimmed.

Modes (:data:`MODES`):

``"none"``
    Ideal: infinite buffers, nothing is paused or dropped.
``"pfc"``
    Lossless Ethernet, IEEE 802.1Qbb (one priority class).  Pool ``b_k`` above
    ``xoff_k`` sends PAUSE: link ``k`` stops, for **every** flow crossing it
    (head-of-line blocking), after a reaction delay of ``pause_delay`` steps; below
    ``xon_k`` it resumes (hysteresis).  The headroom ``buffer - xoff`` absorbs what is in
    flight during the reaction; only its overflow is dropped.  A paused link's egress
    queue grows, fills *its* upstream pool, and the pause spreads (congestion tree).
    No published fluid model of PFC exists; this one follows the suggestion in
    ``congestion-control.md`` sec. 4.1 with [HPCC-NS3] ``switch-mmu.cc`` thresholds.
``"credit"``
    InfiniBand credit-based flow control (IBA vol. 1 sec. 7.9): link ``k`` may send only
    into free downstream buffer, ``usable_k = clip((buffer_k - b_k + out_k)/dt, 0, C_k)``
    where ``out_k`` is what left the pool in the previous step (credits returned one step
    later): continuous back-pressure, no hysteresis, no loss.
``"drop"``
    Lossy Ethernet: a switch egress queue above ``buffer_l`` drops the overflow (tail
    drop, charged to the step's arrivals that still stand in the queue).  Dropped bytes are resent; the sender learns of the
    loss ``rto`` seconds after the feedback delay.
``"trim"``
    Lossy with UEC packet trimming: overflow is cut to headers (their bandwidth is
    neglected); the sender gets a NACK one feedback delay later and resends.

In the smooth mode (:mod:`fabric_jax.smooth`) the PFC on/off decisions are logistic in
``(b - xoff)/(xoff - xon)`` and the credit clip is a softplus.

Traffic classes (:mod:`fabric_jax.qos`).  With ``n_classes > 1`` every function here
runs on ``links x classes`` **units** (unit ``l * n_classes + c``, arrays ``[units]``):
the pool ``b_(k,c)`` holds class ``c``'s bytes only, so PFC is **per priority** (IEEE
802.1Qbb: a PAUSE frame carries a per-priority enable vector and timers) and credits
are **per virtual lane** (IBA vol. 1 sec. 7.9.2: flow-control packets carry the VL):
an incast in one class pauses, or starves of credits, that class alone.  The state
``pause``/``history``/``paused_time`` is then ``[units]``.  Static per-port pools are
split evenly over the classes (:func:`class_params`; assumption: an IB subnet manager
/ a switch's static per-queue limits partition the port's memory), unless a shared
buffer is used.

Shared buffer with dynamic thresholds (:class:`SharedBuffer`; Choudhury and Hahne,
"Dynamic queue length thresholds for shared-memory packet switches", IEEE/ACM ToN 6(2),
1998).  A switch ``s`` has one memory of ``B_s`` bytes shared by its queues; queue
``i`` may grow to ``T_i = alpha_i (B_s - Q_s)``, ``Q_s`` the switch's total occupancy
(the "alpha per queue" of Broadcom's and NVIDIA Spectrum's shared-buffer MMUs; SONiC
sets it as ``dynamic_th``, ``alpha = 2^dynamic_th``).  ``N`` queues that all hold their
limit settle at ``T = alpha B / (1 + N alpha)`` (Choudhury-Hahne eq. 2), and the
memory ``B / (1 + N alpha)`` kept free protects queues that become active.  In the
fluid loop: ``drop``/``trim`` cut each egress queue to its threshold
(:func:`dynamic_limit`, the fixed point ``T = alpha (B - Q(T))`` solved by bisection
every step, so the step does not overshoot); ``pfc`` sends XOFF when an ingress pool
exceeds ``alpha (B - Q)`` with a static per-pool headroom on top (NVIDIA / SONiC
lossless-PG model: dynamic XOFF, reserved headroom; :func:`dynamic_params`);
``credit`` advertises the dynamic threshold as the VL's buffer (assumption).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import smooth as sm

__all__ = ["MODES", "FlowControl", "FlowControlParams", "FlowControlState",
           "flow_control_params", "pfc_thresholds", "pfc_headroom", "class_params",
           "SharedBuffer", "shared_buffer", "free_buffer", "dynamic_limit", "dynamic_params",
           "PFC_RESUME_OFFSET", "DYNAMIC_THRESHOLD_ITERATIONS"]

#: PFC resume offset ``xoff - xon``, bytes ([HPCC-NS3] ``switch-mmu.cc``: 3 KB).
PFC_RESUME_OFFSET = 3000.0
#: Bisection rounds of :func:`dynamic_limit` (resolution ``B / 2^24``: < 1 byte of a
#: 16 MB switch buffer).
DYNAMIC_THRESHOLD_ITERATIONS = 24

MODES = ("none", "pfc", "credit", "drop", "trim")


@dataclasses.dataclass(frozen=True)
class FlowControl:
    """Static choice of link-level flow control.

    Attributes:
      mode: one of :data:`MODES`.
      pause_delay: PFC reaction delay in fluid steps (>= 1): a pause/resume decided at
        step ``k`` takes effect at step ``k + pause_delay``.
      rto_steps: extra delay (steps) before a *dropped* byte is signalled to the sender.
    """

    mode: str = "none"
    pause_delay: int = 1
    rto_steps: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"flow_control mode must be one of {MODES}; got {self.mode!r}")
        if not (isinstance(self.pause_delay, (int, np.integer)) and self.pause_delay >= 1):
            raise ValueError(f"pause_delay must be an integer >= 1 step; got {self.pause_delay!r}")
        if not (isinstance(self.rto_steps, (int, np.integer)) and self.rto_steps >= 0):
            raise ValueError(f"rto_steps must be an integer >= 0; got {self.rto_steps!r}")

    @property
    def lossless(self) -> bool:
        return self.mode in ("none", "pfc", "credit")


@dataclasses.dataclass(frozen=True)
class FlowControlParams:
    """Per-link thresholds (leaves, ``[links]``, bytes).

    Attributes:
      buffer: egress buffer (``drop``/``trim``) or ingress pool size (``pfc``/``credit``);
        ``inf`` = unbounded.
      xoff: PFC pause threshold on the ingress pool.
      xon: PFC resume threshold (< xoff).
    """

    buffer: Any
    xoff: Any
    xon: Any


@dataclasses.dataclass(frozen=True)
class FlowControlState:
    """Attributes:
      pause: ``[links]`` pause decision now (0..1; exactly 0/1 in exact mode).
      history: ``[pause_delay, links]`` ring of past decisions (the one in force is the
        oldest).
      paused_time: ``[links]`` seconds each link spent paused (PFC) or credit-starved
        (credit: time-integral of ``1 - usable/C``).
      out: ``[links]`` bytes that left each ingress pool in the last step (credits).
    """

    pause: Any
    history: Any
    paused_time: Any
    out: Any


jax.tree_util.register_dataclass(FlowControlParams)
jax.tree_util.register_dataclass(FlowControlState)


def pfc_headroom(capacity, *, reaction_s, mtu: float = 1000.0) -> np.ndarray:
    """PFC headroom per link, bytes: ``capacity * reaction_s + 2 * mtu`` (host, NumPy;
    rule and sources in :func:`pfc_thresholds`)."""
    return np.asarray(capacity, float) * float(reaction_s) + 2 * mtu


def pfc_thresholds(capacity, buffer, *, reaction_s, mtu: float = 1000.0,
                   resume_offset: float = PFC_RESUME_OFFSET):
    """PFC XOFF/XON per link from buffer size and headroom (host, NumPy).

    Headroom = ``capacity * reaction_s + 2 * mtu`` (what arrives while the PAUSE
    travels and takes effect, plus a frame in progress at each end; cf. [HPCC-NS3]
    ``3 x rate x one-way delay`` and the Mellanox rule ``2 MTU + ...``),
    ``xoff = buffer - headroom``, ``xon = xoff - resume_offset`` ([HPCC-NS3] resume
    offset 3 KB).

    Raises:
      ValueError: if a buffer cannot hold the headroom plus the resume offset.
    """
    c = np.asarray(capacity, float)
    b = np.broadcast_to(np.asarray(buffer, float), c.shape)
    xoff = b - pfc_headroom(c, reaction_s=reaction_s, mtu=mtu)
    xon = xoff - resume_offset
    if np.any(np.isfinite(b) & (xon <= 0)):
        raise ValueError("buffer too small for PFC: it must exceed capacity * reaction_s + "
                         "2 * mtu + resume_offset on every link; enlarge buffer or shorten "
                         "reaction_s")
    return xoff, xon


def flow_control_params(n_links: int, *, buffer=np.inf, xoff=None, xon=None) -> FlowControlParams:
    """Builds :class:`FlowControlParams` with shape checks (host).

    ``xoff``/``xon`` default to ``buffer`` (no pause before the buffer is full).
    """
    dt = jnp.result_type(float)

    def arr(name, v):
        a = np.broadcast_to(np.asarray(v, float), (n_links,)) if not isinstance(
            v, jax.core.Tracer) else v
        if not isinstance(a, jax.core.Tracer):
            if np.any(np.isnan(a)) or np.any(a < 0):
                raise ValueError(f"{name} must be >= 0 bytes ([links] or scalar); got {v!r}")
        return jnp.asarray(a, dt)

    buffer_ = arr("buffer", buffer)
    xoff_ = buffer_ if xoff is None else arr("xoff", xoff)
    xon_ = xoff_ if xon is None else arr("xon", xon)
    if not any(isinstance(v, jax.core.Tracer) for v in (xoff, xon)) and np.any(
            np.asarray(xon_) > np.asarray(xoff_)):
        raise ValueError("xon must be <= xoff on every link")
    return FlowControlParams(buffer=buffer_, xoff=xoff_, xon=xon_)


# ------------------------------------------------------------------ device side
def init_state(fc: FlowControl, n_links: int, dtype) -> FlowControlState:
    z = jnp.zeros((n_links,), dtype)
    return FlowControlState(pause=z, history=jnp.zeros((fc.pause_delay, n_links), dtype),
                            paused_time=z, out=z)


def usable_capacity(fc: FlowControl, state: FlowControlState, capacity, ingress, params,
                    dt, smooth) -> Any:
    """``[links]`` capacity usable this step (bytes/s)."""
    if fc.mode == "pfc":
        in_force = state.history[0]
        return capacity * (1.0 - in_force)
    if fc.mode == "credit":
        credit = (params.buffer - ingress + state.out) / dt
        pos = capacity > 0
        return capacity * sm.clip01(credit / jnp.where(pos, capacity, 1.0), smooth)
    return capacity


def update(fc: FlowControl, state: FlowControlState, ingress, out, capacity, usable, params,
           dt, smooth) -> FlowControlState:
    """Advances the pause state from the ingress pools at the end of a step."""
    starved = jnp.where(capacity > 0, 1.0 - usable / jnp.where(capacity > 0, capacity, 1.0), 0.0)
    paused_time = state.paused_time + dt * starved
    if fc.mode != "pfc":
        return dataclasses.replace(state, paused_time=paused_time, out=out)
    width = jnp.maximum(params.xoff - params.xon, 1.0)
    on = sm.step((ingress - params.xoff) / width, smooth)
    off = sm.step((params.xon - ingress) / width, smooth)
    pause = on + (1.0 - on - off) * state.pause
    pause = jnp.clip(pause, 0.0, 1.0)
    history = jnp.concatenate([state.history[1:], pause[None]], axis=0)
    return FlowControlState(pause=pause, history=history, paused_time=paused_time, out=out)


# ------------------------------------------------------------- traffic classes
def class_params(params: FlowControlParams, n_links: int, n_classes: int) -> FlowControlParams:
    """``[units]`` thresholds (unit ``l * n_classes + c``): each link's values repeated
    for each of its classes (a scalar is broadcast first)."""
    def rep(v):
        a = jnp.broadcast_to(jnp.asarray(v), (n_links,))
        return jnp.repeat(a, n_classes)
    return FlowControlParams(buffer=rep(params.buffer), xoff=rep(params.xoff),
                             xon=rep(params.xon))


# ---------------------------------------------------------------- shared buffer
@dataclasses.dataclass(frozen=True)
class SharedBuffer:
    """Shared-memory switches with dynamic queue thresholds (module docstring).

    Attributes:
      size: ``[switches]`` memory ``B_s`` of each switch, bytes.
      alpha: ``[classes]`` (or scalar) dynamic-threshold factor per queue class.
      egress_switch: ``[links]`` int32 switch whose memory holds the link's egress
        queue (its source node), ``n_switches`` where that is a host.
      ingress_switch: ``[links]`` int32 switch whose memory holds what arrives over the
        link (its destination node: the PFC / credit ingress pool), ``n_switches`` at a
        host.
      n_switches: number of switches (static).
      weight: ``[switches]`` copies of its occupancy each switch counts (default 1): a
        switch of a reduced fabric that stands for ``g`` interchangeable copies of its
        traffic (the rail reduction of :mod:`fabric_jax.scale`: a spine shared by ``g``
        rails, one rail simulated) holds ``Q_s = g`` times what the simulated flows hold,
        so ``T = alpha (B_s - g q_s)``, the threshold of the full run.
    """

    size: Any
    alpha: Any
    egress_switch: Any
    ingress_switch: Any
    n_switches: int = dataclasses.field(metadata=dict(static=True))
    weight: Any = None


jax.tree_util.register_dataclass(SharedBuffer)


def _check_alpha(alpha):
    if isinstance(alpha, jax.core.Tracer):
        return alpha
    a = np.asarray(alpha, float)
    if a.ndim > 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError("alpha must be a finite number > 0 or a [classes] array of them "
                         f"(dynamic-threshold factor, e.g. 1 = SONiC dynamic_th 0); got {alpha!r}")
    return a


def shared_buffer(topology=None, *, alpha=1.0, size=None, egress_switch=None,
                  ingress_switch=None, weight=None) -> SharedBuffer:
    """Builds a :class:`SharedBuffer` (host).

    Either from a :class:`fabric_jax.Topology` (switches are its non-host nodes; each
    switch's memory defaults to the sum of its egress ports' ``buffer``, i.e. the same
    memory as the static per-port pools, now shared), or from explicit maps
    ``egress_switch`` / ``ingress_switch`` (``[links]`` switch ids, ``-1`` = a host;
    ``size`` required).

    Args:
      topology: a Topology, or ``None`` with the maps.
      alpha: dynamic-threshold factor, scalar or ``[classes]`` (> 0).  Default 1
        (SONiC's default ``dynamic_th = 0``; Choudhury-Hahne use 1 and 2).
      size: ``[switches]`` or scalar memory per switch, bytes.
      egress_switch, ingress_switch: ``[links]`` int maps (without a topology; a map
        left out means no such queues are shared).
      weight: ``[switches]`` or scalar occupancy weight (:class:`SharedBuffer`), >= 1;
        default 1.

    Raises:
      ValueError: naming the argument: alpha not > 0, size not > 0 or of the wrong
        shape, maps of the wrong shape or with ids below -1, neither a topology nor a
        map.
    """
    alpha = _check_alpha(alpha)
    if topology is not None:
        is_host = np.asarray(topology.node_is_host, bool)
        sw_ids = np.flatnonzero(~is_host)
        n_sw = sw_ids.size
        node_to_sw = np.full(is_host.size, n_sw, np.int64)
        node_to_sw[sw_ids] = np.arange(n_sw)
        eg = node_to_sw[np.asarray(topology.link_src)]
        ig = node_to_sw[np.asarray(topology.link_dst)]
        if size is None:
            size = np.bincount(eg, weights=np.asarray(topology.buffer, float),
                               minlength=n_sw + 1)[:n_sw]
    else:
        if egress_switch is None and ingress_switch is None:
            raise ValueError("shared_buffer needs a topology or egress_switch / "
                             "ingress_switch maps ([links] switch ids, -1 = host)")
        maps = [np.asarray(m, np.int64) for m in (egress_switch, ingress_switch)
                if m is not None]
        n_links = maps[0].shape[0]
        for name, m in (("egress_switch", egress_switch), ("ingress_switch", ingress_switch)):
            if m is not None:
                m = np.asarray(m)
                if m.shape != (n_links,) or not np.issubdtype(m.dtype, np.integer) or (
                        m.size and m.min() < -1):
                    raise ValueError(f"{name} must be a [links] integer array of switch ids "
                                     f"(-1 = host); got {m!r}")
        n_sw = int(max((m.max(initial=-1) for m in maps))) + 1
        fix = lambda m: (np.full(n_links, n_sw) if m is None else  # noqa: E731
                         np.where(np.asarray(m) < 0, n_sw, np.asarray(m)))
        eg, ig = fix(egress_switch), fix(ingress_switch)
        if size is None:
            raise ValueError("size (bytes per switch) is required without a topology")
    if not isinstance(size, jax.core.Tracer):
        s = np.broadcast_to(np.asarray(size, float), (n_sw,)) if np.ndim(size) == 0 else \
            np.asarray(size, float)
        if s.shape != (n_sw,) or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise ValueError(f"size must be finite bytes > 0, scalar or [switches] = [{n_sw}]; "
                             f"got shape {list(np.shape(size))}")
        size = s
    w = np.ones(n_sw) if weight is None else np.broadcast_to(
        np.asarray(weight, float), (n_sw,)) if np.ndim(weight) == 0 else np.asarray(weight, float)
    if w.shape != (n_sw,) or not np.all(np.isfinite(w)) or np.any(w < 1):
        raise ValueError(f"weight must be finite copies >= 1, scalar or [switches] = [{n_sw}]; "
                         f"got {weight!r}")
    fdt = jnp.result_type(float)
    return SharedBuffer(size=jnp.asarray(size, fdt), alpha=jnp.asarray(alpha, fdt),
                        egress_switch=jnp.asarray(eg, jnp.int32),
                        ingress_switch=jnp.asarray(ig, jnp.int32), n_switches=int(n_sw),
                        weight=jnp.asarray(w, fdt))


def free_buffer(occupancy, unit_switch, size, weight=None):
    """``[switches]`` free memory ``max(B_s - w_s Q_s, 0)``: ``occupancy`` ``[units]``
    summed over the units each switch holds (``unit_switch``; ``n_switches`` = none),
    times the switch's occupancy weight ``w_s`` (:class:`SharedBuffer`; default 1)."""
    n = size.shape[0]
    q = jax.ops.segment_sum(occupancy, unit_switch, num_segments=n + 1)[:n]
    if weight is not None:
        q = q * weight
    return jnp.maximum(size - q, 0.0)


def dynamic_limit(level, floor, unit_switch, unit_alpha, size,
                  iterations: int = DYNAMIC_THRESHOLD_ITERATIONS, weight=None):
    """``[units]`` queue limits ``T_i = alpha_i F_s`` of one step's drop decision.

    The free memory ``F_s`` solves ``F = B - sum_i clip(q_i, floor_i, alpha_i F)``: every
    queue is cut to its threshold but never below ``floor_i`` (its bytes that were
    standing before the step: only arrivals are dropped).  The right side falls as
    ``F`` grows, so the root is unique; it is found by bisection on ``[0, B]``
    (``iterations`` rounds, returning the lower end: the switch never overfills).

    Args:
      level: ``[units]`` queue before the decision, bytes.
      floor: ``[units]`` part of it that cannot be dropped, bytes.
      unit_switch: ``[units]`` int32 switch of each queue (``n_switches`` = not a
        switch queue: limit ``inf``).
      unit_alpha: ``[units]`` alpha of each queue.
      size: ``[switches]`` memory, bytes.
      weight: ``[switches]`` occupancy weight (:class:`SharedBuffer`; default 1): the
        sum is ``w_s`` times the switch's queues.
    """
    n = size.shape[0]
    on = unit_switch < n
    sw = jnp.where(on, unit_switch, n)

    def occupancy(free):
        f_ext = jnp.concatenate([free, jnp.zeros((1,), free.dtype)])[sw]
        q = jnp.maximum(jnp.minimum(level, unit_alpha * f_ext), floor)
        tot = jax.ops.segment_sum(jnp.where(on, q, 0.0), sw, num_segments=n + 1)[:n]
        return tot if weight is None else tot * weight

    def body(_, lo_hi):
        lo, hi = lo_hi
        mid = 0.5 * (lo + hi)
        up = mid - size + occupancy(mid) > 0
        return jnp.where(up, lo, mid), jnp.where(up, mid, hi)

    lo, _ = jax.lax.fori_loop(0, iterations, body, (jnp.zeros_like(size), size))
    f_ext = jnp.concatenate([lo, jnp.zeros((1,), lo.dtype)])[sw]
    return jnp.where(on, unit_alpha * f_ext, jnp.inf)


def dynamic_params(fc: FlowControl, free, unit_switch, unit_alpha, headroom,
                   resume_offset=PFC_RESUME_OFFSET) -> FlowControlParams:
    """``[units]`` ingress thresholds in force with a shared buffer (``pfc``/``credit``).

    ``T = alpha F_s`` at the pool's switch (``inf`` where the pool is at no switch).
    PFC: ``xoff = T``, ``xon = max(T - resume_offset, 0)``, pool size ``T + headroom``
    (headroom reserved per pool, not shared; NVIDIA/SONiC lossless PG model).
    Credits: the advertised buffer is ``T``.
    """
    n = free.shape[0]
    on = unit_switch < n
    f_ext = jnp.concatenate([free, jnp.zeros((1,), free.dtype)])[jnp.where(on, unit_switch, n)]
    thr = jnp.where(on, unit_alpha * f_ext, jnp.inf)
    if fc.mode == "pfc":
        return FlowControlParams(buffer=thr + headroom, xoff=thr,
                                 xon=jnp.maximum(thr - resume_offset, 0.0))
    return FlowControlParams(buffer=thr, xoff=thr, xon=thr)
