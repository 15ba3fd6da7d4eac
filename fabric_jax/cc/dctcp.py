"""DCTCP as a fluid law: ECN marking at a queue threshold ``K``, window cut by ``alpha / 2``.

The fluid model of Alizadeh, Javanmard and Prabhakar, "Analysis of DCTCP: stability,
convergence, and fairness", SIGMETRICS 2011, eqs. (1)-(3), with the window in bytes
(``mss`` bytes per packet) and ``R`` the flow's round trip (the RTT signal, base +
queueing):

    dW/dt     = mss / R - W alpha / (2 R) p(t - R)   (used as d ln W/dt = ln(1 - alpha p/2)/R
                                                   for the cut, its per-RTT form)
    dalpha/dt = g / R (p(t - R) - alpha)

``p`` is the probability that a packet of the flow was marked on its path (the fluid
loop's ``FlowSignals.mark``, already one feedback delay old); a switch port marks every
packet while its queue exceeds ``K`` (DCTCP's step marking on the instantaneous queue,
Alizadeh et al., SIGCOMM 2010, Sec. 3.1).  The sender is window-based: its bytes in
flight never exceed ``W`` (:attr:`fabric_jax.cc.Law.window`), and it paces at ``W / R``.

Defaults: ``g = 1/16`` (SIGCOMM 2010 Sec. 3.4; ns-3 ``TcpDctcp::DctcpShiftG`` 0.0625),
``alpha`` starts at 1 (RFC 8257 Sec. 3.3, ns-3
``TcpDctcp::DctcpAlphaOnInit``: the first marks halve the window), ``K = C T / 7`` per port (SIGCOMM 2010 eq. 13, ``K > C RTT / 7``; ``T`` the largest
base RTT) unless ``k_bytes > 0`` sets it, ``mss`` 4096 B, a window of at least one
``mss``, and the window starts at one BDP (line rate x base RTT: the sender starts at
line rate as every law here does; ``experiments/packet_reference`` starts ns-3's DCTCP
the same way, initial window = slow-start threshold = one BDP).  Departures: no slow
start, no delayed-ACK state machine, no retransmission timeout.

Not in :data:`fabric_jax.cc.LAWS` (nor ``params_for`` / ``docs/cc_parameters.md``): it
is the packet-level reference's law (``experiments/packet_side_by_side.py``); reach it
by name, ``simulate_fluid(law="dctcp")``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .. import smooth as sm
from ._linerate import resolve_gbps
from .base import Law, register

__all__ = ["DCTCPParams", "DCTCPState", "DCTCP", "dctcp_params"]


@dataclasses.dataclass(frozen=True)
class DCTCPParams:
    """Attributes: g (alpha gain per RTT), mss (bytes), k_bytes (marking threshold,
    bytes; 0: ``k_bdp`` of each port's BDP), k_bdp, alpha_init."""

    g: Any
    mss: Any
    k_bytes: Any
    k_bdp: Any
    alpha_init: Any


@dataclasses.dataclass(frozen=True)
class DCTCPState:
    """Attributes: ``rate``, ``cwnd`` (bytes; ``inf`` before the first step), ``alpha``,
    ``line_rate``, each ``[flows]``."""

    rate: Any
    cwnd: Any
    alpha: Any
    line_rate: Any


jax.tree_util.register_dataclass(DCTCPParams)
jax.tree_util.register_dataclass(DCTCPState)


def dctcp_params(*, line_rate=None, link_gbps=None, **overrides) -> DCTCPParams:
    """DCTCP defaults (module docstring); fields may be overridden.

    Raises:
      ValueError: an unknown field or a bad line rate.
    """
    resolve_gbps(line_rate, link_gbps, 100.0, "dctcp_params")
    p = dict(g=1.0 / 16.0, mss=4096.0, k_bytes=0.0, k_bdp=1.0 / 7.0, alpha_init=1.0)
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown DCTCP parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    dt = jnp.result_type(float)
    return DCTCPParams(**{k: jnp.asarray(v, dt) for k, v in p.items()})


def _init(line_rate, params):
    line = jnp.asarray(line_rate)
    return DCTCPState(rate=line, cwnd=jnp.full_like(line, jnp.inf),
                      alpha=jnp.full_like(line, params.alpha_init), line_rate=line)


def _step(state, signals, dt, params, smooth):
    r = signals.rtt
    w = jnp.minimum(state.cwnd, state.line_rate * signals.base_rtt)   # first step: a BDP
    p = signals.mark
    k = -jnp.expm1(-params.g * dt / r)          # dalpha/dt = g (p - alpha) / R, exact step
    alpha = state.alpha + k * (p - state.alpha)
    # the cut W <- W (1 - alpha/2) once per window of marked data: log-linear in time
    # (eq. (1)'s -W alpha p / (2R) is its small-alpha form; with alpha near 1 after an
    # incast it would halve the window in 1.4 R instead of R)
    cut = jnp.log1p(-0.5 * jnp.clip(alpha * p, 0.0, 1.0)) / r
    w = w * jnp.exp(dt * cut) + dt * params.mss / r
    w = jnp.clip(w, params.mss, 4.0 * state.line_rate * signals.base_rtt + 4.0 * params.mss)
    rate = jnp.minimum(w / r, state.line_rate)
    return DCTCPState(rate=rate, cwnd=w, alpha=alpha, line_rate=state.line_rate)


def _mark(links, params, smooth):
    k = jnp.where(params.k_bytes > 0, params.k_bytes,
                  params.k_bdp * links.capacity * links.base_rtt)
    return sm.step((links.queue - k) / jnp.maximum(k, 1.0), smooth)


def _window(state, signals, params):
    """Bytes allowed in flight: the congestion window (TCP)."""
    return state.cwnd


DCTCP = register(Law("dctcp", _init, _step, _mark, dctcp_params, _window))
