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
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import smooth as sm

__all__ = ["MODES", "FlowControl", "FlowControlParams", "FlowControlState",
           "flow_control_params", "pfc_thresholds"]

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


def pfc_thresholds(capacity, buffer, *, reaction_s, mtu: float = 1000.0,
                   resume_offset: float = 3000.0):
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
    xoff = b - (c * float(reaction_s) + 2 * mtu)
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
