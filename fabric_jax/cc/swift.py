"""Swift (Kumar et al., SIGCOMM 2020) as a fluid law: delay target, AIMD on cwnd.

Per ACK ([HTSIM] ``sim/swift.cpp``): if the measured delay is below the target the
window grows by ``ai`` MSS per RTT, else it shrinks, at most once per RTT, by the factor
``max(1 - beta (delay - target)/delay, 1 - max_mdf)``.  The fluid form
(``congestion-control.md`` sec. 3.2), with ``d`` the RTT signal (base + queueing):

    dW/dt = ai MSS / d                                   if d < target
          = -W min(beta (d - target)/d, max_mdf) / d     otherwise,

and rate ``W / d``.  ``target = base_target + hops * per_hop``.  With ``N`` flows on
one bottleneck the fluid equilibrium sits on the switching surface ``d = target``:
queueing delay ``target - base_rtt``, i.e. a queue of ``C (target - base_rtt)`` bytes.
Defaults (htsim, labelled as guesses there; ``congestion-control.md`` sec. 3.2): ai 1,
beta 0.8, max_mdf 0.5, base_target 20 us, per_hop = base_target/6.55, MSS 4096 B,
min cwnd 41 B (htsim's floor, 1 % of an MSS).  Line rate (``docs/cc_parameters.md``):
no parameter scales.  Swift's targets are delays and its increase is in MSS per RTT
(Kumar et al. sec. 3), so the line rate enters only through the state: the window
starts at, and is capped near, the flow's BDP (line rate x base RTT).  Departure: the
flow-scaling term ``fs`` (larger target for small windows) is omitted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .. import smooth as sm
from ..units import US
from ._linerate import resolve_gbps
from .base import Law, register

__all__ = ["SwiftParams", "SwiftState", "SWIFT", "swift_params", "LINE_RATE_SCALING"]

#: Exponent of each parameter's line-rate rule: none scales.
LINE_RATE_SCALING = {"ai": 0, "beta": 0, "max_mdf": 0, "base_target": 0, "per_hop": 0,
                     "mss": 0, "min_cwnd": 0}


@dataclasses.dataclass(frozen=True)
class SwiftParams:
    """Attributes: ai (MSS per RTT), beta, max_mdf, base_target (s), per_hop (s),
    mss (bytes), min_cwnd (bytes)."""

    ai: Any
    beta: Any
    max_mdf: Any
    base_target: Any
    per_hop: Any
    mss: Any
    min_cwnd: Any


@dataclasses.dataclass(frozen=True)
class SwiftState:
    """Attributes: ``rate``, ``cwnd`` (bytes; ``inf`` until the first RTT is known),
    ``line_rate``, each ``[flows]``."""

    rate: Any
    cwnd: Any
    line_rate: Any


jax.tree_util.register_dataclass(SwiftParams)
jax.tree_util.register_dataclass(SwiftState)


def swift_params(*, line_rate=None, link_gbps=None, **overrides) -> SwiftParams:
    """htsim Swift defaults; fields may be overridden.

    ``line_rate`` (bytes/s) / ``link_gbps`` are accepted for a uniform builder API and
    checked; no Swift parameter depends on them (see the module docstring).
    """
    resolve_gbps(line_rate, link_gbps, 100.0, "swift_params")
    p = dict(ai=1.0, beta=0.8, max_mdf=0.5, base_target=20 * US, per_hop=20 * US / 6.55,
             mss=4096.0, min_cwnd=41.0)
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown Swift parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    dt = jnp.result_type(float)
    return SwiftParams(**{k: jnp.asarray(v, dt) for k, v in p.items()})


def _init(line_rate, params):
    line = jnp.asarray(line_rate)
    return SwiftState(rate=line, cwnd=jnp.full_like(line, jnp.inf), line_rate=line)


def _step(state, signals, dt, params, smooth):
    d = signals.rtt
    bdp = state.line_rate * signals.base_rtt
    cwnd = jnp.minimum(state.cwnd, bdp)                      # first step: start at one BDP
    target = params.base_target + signals.hops * params.per_hop
    over = sm.step((d - target) / target, smooth)
    inc = params.ai * params.mss / d
    dec = cwnd * jnp.minimum(params.beta * (d - target) / d, params.max_mdf) / d
    cwnd = cwnd + dt * ((1.0 - over) * inc - over * jnp.maximum(dec, 0.0))
    cwnd = jnp.clip(cwnd, params.min_cwnd, 4.0 * bdp + 4.0 * params.mss)
    rate = jnp.minimum(cwnd / d, state.line_rate)
    return SwiftState(rate=rate, cwnd=cwnd, line_rate=state.line_rate)


def _mark(links, params, smooth):
    return jnp.zeros_like(links.queue)


def _window(state, signals, params):
    """Bytes allowed in flight: the congestion window.  Swift is window-based (Kumar et
    al., SIGCOMM 2020, Sec. 3.1: the window bounds the packets in flight, pacing only
    below one packet; [HTSIM] ``swift.cpp`` sends while in flight < cwnd); the fluid
    loop caps the offer to it (:func:`fabric_jax.cc.base.window_cap`)."""
    return state.cwnd


SWIFT = register(Law("swift", _init, _step, _mark, swift_params, _window))
