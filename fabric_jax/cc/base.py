"""The shared interface of congestion-control laws.

A law is a :class:`Law`: a small immutable object holding four pure functions.

* ``init(line_rate, params) -> State``: per-flow state for flows with NIC line rate
  ``line_rate`` ``[flows]`` (bytes/s).  Every state has a ``rate`` field ``[flows]``:
  the rate (bytes/s) the sender would offer now.
* ``step(state, signals, dt, params, smooth) -> State``: advances the senders by ``dt``
  seconds given the :class:`FlowSignals` that reached them (already delayed by the
  feedback path).
* ``mark(links, params, smooth) -> [links]``: the switch side: per-link probability
  that a packet departing the link is marked (ECN CE, IB FECN), from :class:`LinkView`.
* ``default_params(**kwargs)``: the law's default parameter pytree.
* ``window(state, signals, params) -> [flows]`` (optional, window-based laws): the
  bytes the flow may have in flight (sent, not yet acknowledged).  The fluid loop caps
  the step's offer so that in-flight bytes never exceed it (:func:`window_cap`):
  ``o_f <= max(W_f - I_f, 0) / dt`` with ``I_f`` the bytes in flight at the start of
  the step after the acknowledgements that arrived (bytes queued or in transit in the
  fabric, plus those that reached the receiver less than one base RTT ago, whose
  acknowledgements are still on their way).  ``None``: a rate-based law (DCQCN, IB CC),
  no cap.

Parameters are pytrees of array leaves (so ``jax.grad`` works with respect to ECN
thresholds, gains ...); only the choice of law is static.  The fluid loop
(:func:`fabric_jax.fluid.simulate_fluid`) owns time, queues and feedback delays; a law
only sees signals.

Units: rates bytes/s, sizes bytes, times seconds; marking values are probabilities per
packet.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from .. import smooth as sm

__all__ = ["Law", "FlowSignals", "LinkView", "path_mark", "x_over_expm1", "p_over_neglog1p",
           "register", "window_cap"]


@dataclasses.dataclass(frozen=True)
class FlowSignals:
    """What reaches the senders, per flow (each field ``[flows]``).

    Attributes:
      mark: probability that a packet of the flow was marked on its path,
        ``1 - prod_l (1 - p_l)`` (ECN CE for DCQCN/NSCC, FECN for IB CC).
      rtt: round-trip time seen, base RTT plus queueing delay on the path, seconds.
      base_rtt: the flow's propagation round trip, seconds.
      util: HPCC in-band telemetry: max over the path of ``q/(C T) + tx/C``.
      rate: the flow's sending rate (bytes that left its NIC per second) when the
        feedback was generated, bytes/s.
      loss: rate at which the flow's bytes were dropped or trimmed, bytes/s (NACKs).
      rx_share: receiver credit rate, ``0.99 * C_last / n_active_last`` (RCCC), bytes/s.
      line_rate: the NIC line rate, bytes/s.
      hops: number of links on the path.
    """

    mark: Any
    rtt: Any
    base_rtt: Any
    util: Any
    rate: Any
    loss: Any
    rx_share: Any
    line_rate: Any
    hops: Any


@dataclasses.dataclass(frozen=True)
class LinkView:
    """Per-link switch state seen by the marking logic (each field ``[links]``).

    Attributes:
      queue: egress queue, bytes.
      capacity: nominal capacity, bytes/s.
      usable: capacity usable this step after pause / credits, bytes/s.
      tx_rate: bytes/s transmitted this step.
      buffer: buffer size, bytes (``inf`` if unbounded).
      base_rtt: HPCC's ``T`` (max base RTT), seconds (scalar broadcast).
      switch_port: 1.0 where the link's egress queue is a switch port, 0.0 at a host
        NIC (whose backlog is the sender's send buffer: ``queue`` is already 0 there
        and the fluid loop zeroes the NIC's marks); ``None``: all switch ports.
    """

    queue: Any
    capacity: Any
    usable: Any
    tx_rate: Any
    buffer: Any
    base_rtt: Any
    switch_port: Any = None


jax.tree_util.register_dataclass(FlowSignals)
jax.tree_util.register_dataclass(LinkView)


@dataclasses.dataclass(frozen=True, eq=False)
class Law:
    """A congestion-control law (hashable by identity, so usable as a static argument).

    Attributes:
      name: short name (``"dcqcn"``, ``"ibcc"``, ...).
      init: ``(line_rate, params) -> State``; ``State.rate`` is the offered rate.
      step: ``(state, signals, dt, params, smooth) -> State``.
      mark: ``(links, params, smooth) -> [links]`` marking probability.
      default_params: ``(**kwargs) -> Params``.
      window: ``(state, signals, params) -> [flows]`` bytes allowed in flight, or
        ``None`` for a rate-based law (module docstring).
    """

    name: str
    init: Callable
    step: Callable
    mark: Callable
    default_params: Callable
    window: Callable | None = None

    def __repr__(self) -> str:
        return f"Law({self.name!r})"


_REGISTRY: dict[str, Law] = {}


def register(law: Law) -> Law:
    _REGISTRY[law.name] = law
    return law


def get(law) -> Law:
    """Returns a :class:`Law` given one or its name."""
    if isinstance(law, Law):
        return law
    if isinstance(law, str) and law in _REGISTRY:
        return _REGISTRY[law]
    raise ValueError(f"law must be a fabric_jax.cc Law or one of {sorted(_REGISTRY)}; "
                     f"got {law!r}")


def window_cap(window, in_flight, dt, smooth=sm.EXACT, scale=1.0):
    """``[flows]`` the largest rate (bytes/s) a flow may send in a step of ``dt`` so that
    its bytes in flight, ``in_flight`` now, stay within ``window`` (both bytes):
    ``max(window - in_flight, 0) / dt``; in smooth mode the max is
    :func:`fabric_jax.smooth.maximum` at ``scale`` bytes (e.g. a line rate times ``dt``).

    A sender that is window-limited sends as acknowledgements free its window (the ACK
    clock; [HPCC-NS3] ``RdmaQueuePair::IsWinBound``: no packet while ``snd_nxt - snd_una
    >= win``).  Over one step the fluid sender may send what its window has free at the
    start of the step, acknowledgements of the step included in ``in_flight``.
    """
    return sm.maximum(window - in_flight, 0.0, scale, smooth) / dt


# --------------------------------------------------------------- numerics helpers
_SMALL = 1e-6


def x_over_expm1(x):
    """``x / (exp(x) - 1)`` for ``x >= 0`` with the limit 1 at 0 (NaN-free gradients)."""
    small = x < _SMALL
    safe = jnp.where(small, 1.0, x)
    # x e^-x / (1 - e^-x): no overflow (nor inf/inf gradients) for large x.
    return jnp.where(small, 1.0 - 0.5 * x, safe * jnp.exp(-safe) / -jnp.expm1(-safe))


def p_over_neglog1p(p):
    """``p / (-log(1 - p))`` for ``p in [0, 1)`` with the limit 1 at 0."""
    small = p < _SMALL
    safe = jnp.where(small, 0.5, p)
    return jnp.where(small, 1.0 - 0.5 * p, safe / (-jnp.log1p(-safe)))


def log_unmarked(p):
    """``log(1 - p)`` of marking probabilities (clipped to ``[0, 1 - 1e-7]``): what
    :func:`path_mark` sums over a path's hops.  Per link, so a caller can take it once
    per link and gather it per hop (:func:`path_mark_from_log`)."""
    return jnp.log1p(-jnp.clip(p, 0.0, 1.0 - 1e-7))


def path_mark_from_log(log_unmarked_per_hop, hop_mask):
    """``1 - exp(sum_h log(1 - p_h))`` over the valid hops (``[..., hops]`` values of
    :func:`log_unmarked`)."""
    return -jnp.expm1(jnp.sum(jnp.where(hop_mask, log_unmarked_per_hop, 0.0), axis=-1))


def path_mark(link_mark_per_hop, hop_mask):
    """``1 - prod_h (1 - p_h)`` over the valid hops of ``[flows, hops]`` probabilities."""
    return path_mark_from_log(log_unmarked(link_mark_per_hop), hop_mask)
