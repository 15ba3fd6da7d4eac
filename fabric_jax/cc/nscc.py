"""UEC NSCC (sender window, ECN + delay) with optional RCCC receiver credit, as a fluid law.

NSCC per ACK ([UET-HTSIM] ``uec.cpp``; ``congestion-control.md`` sec. 3.3), with queueing
delay ``d = rtt - base_rtt``, target ``D`` and ECN echo:

* no ECN, ``d >= D``: fair increase ``fi`` per acked byte;
* no ECN, ``d < D``: proportional increase ``alpha (D - d)`` per acked byte;
* ECN, ``avg_delay > D``: multiplicative decrease ``W <- W max(1 - gamma (avg - D)/avg,
  0.5)``, at most once per base RTT;
* ECN, ``d < D``: no change;
* NACK (trimmed packet): ``W -= nacked bytes``;
* every adjust period (one RTT): ``W += inc / W`` and ``W += eta``.

Fluid form (``congestion-control.md`` sec. 3.3 sketch), ``m`` the path mark probability
and ``R~`` the acked rate:

    dW/dt = R~ (1-m) (fi 1[d >= D] + alpha (D - d)^+) / W + eta / rtt
            - m 1[avg > D] gamma W (avg - D) / (avg * base_rtt) - nack_rate

with ``avg`` an EWMA of ``d`` (gain 0.0125 per ACK of ``mss`` bytes).  Scaling
(``initNsccParams``): ``a = BDP / (100 Gb/s * 12 us)``, ``b = D / 12 us``,
``alpha = 4 mss a b / D``, ``fi = 5 mss a``, ``eta = 0.15 mss a``, ``gamma = 0.8``,
``D = 0.75 base_rtt`` (trimming on), ``W`` in ``[mss, 1.5 BDP]``, starting at 1.5 BDP.
Switches mark ECN on dequeue with a ramp from 0 at ``0.2 BDP`` to 1 at ``0.8 BDP``
(BDP = link capacity x largest base RTT).

Line rate (``docs/cc_parameters.md``): the parameters above are fractions, counts and
an MSS, so none scales; the gains ``alpha``, ``fi`` and ``eta`` are derived per flow
from its BDP (line rate x base RTT) in every step, as htsim's ``initNsccParams`` does
(:func:`derived_gains`): ``fi`` and ``eta`` grow linearly with the line rate, ``alpha``
too (its ``b / D`` factor is rate-free), and the ECN ramp thresholds follow each
port's own BDP.  The UEC 1.0 specification's normative defaults were not available
(``congestion-control.md`` sec. 6); [UET-HTSIM] is UEC's own, non-normative
simulator.

RCCC ([UET-HTSIM] ``UecPullPacer``; ``rccc=1``): the receiver paces credit at
``0.99 C_rx`` shared among its active senders, so the rate is also capped at
``FlowSignals.rx_share`` (water-filling at the last hop).  Departures: quick adapt,
fast increase and the initial speculative burst are not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .. import smooth as sm
from ._linerate import resolve_gbps
from .base import Law, register

__all__ = ["NSCCParams", "NSCCState", "NSCC", "nscc_params", "derived_gains",
           "LINE_RATE_SCALING"]

#: Exponent of each parameter's line-rate rule: none scales (see :func:`derived_gains`).
LINE_RATE_SCALING = {"mss": 0, "target_fraction": 0, "gamma": 0, "ewma": 0, "maxwnd_bdp": 0,
                     "k_min_bdp": 0, "k_max_bdp": 0, "rccc": 0}

_REF_BDP = 100e9 / 8 * 12e-6      # 100 Gb/s x 12 us, bytes
_REF_DELAY = 12e-6


@dataclasses.dataclass(frozen=True)
class NSCCParams:
    """Attributes: mss (bytes), target_fraction (D / base_rtt), gamma, ewma, maxwnd_bdp,
    k_min_bdp, k_max_bdp (ECN ramp, fractions of BDP), rccc (0/1)."""

    mss: Any
    target_fraction: Any
    gamma: Any
    ewma: Any
    maxwnd_bdp: Any
    k_min_bdp: Any
    k_max_bdp: Any
    rccc: Any


@dataclasses.dataclass(frozen=True)
class NSCCState:
    """Attributes: ``rate``, ``cwnd`` (bytes, ``inf`` before the first step), ``avg_delay``
    (s), ``line_rate``, each ``[flows]``."""

    rate: Any
    cwnd: Any
    avg_delay: Any
    line_rate: Any


jax.tree_util.register_dataclass(NSCCParams)
jax.tree_util.register_dataclass(NSCCState)


def nscc_params(*, rccc: bool = False, line_rate=None, link_gbps=None,
                **overrides) -> NSCCParams:
    """[UET-HTSIM] defaults (4 KB MTU); ``rccc=True`` adds receiver credit.

    ``line_rate`` (bytes/s) / ``link_gbps`` are accepted for a uniform builder API and
    checked; the line rate acts through :func:`derived_gains`, not the parameters.
    """
    resolve_gbps(line_rate, link_gbps, 100.0, "nscc_params")
    p = dict(mss=4096.0, target_fraction=0.75, gamma=0.8, ewma=0.0125, maxwnd_bdp=1.5,
             k_min_bdp=0.2, k_max_bdp=0.8, rccc=1.0 if rccc else 0.0)
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown NSCC parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    dt = jnp.result_type(float)
    return NSCCParams(**{k: jnp.asarray(v, dt) for k, v in p.items()})


def derived_gains(line_rate, base_rtt, params):
    """htsim ``initNsccParams`` gains of a flow (``congestion-control.md`` sec. 3.3).

    With ``BDP = line_rate * base_rtt``, ``a = BDP / (100 Gb/s x 12 us)``, target
    ``D = target_fraction * base_rtt`` and ``b = D / 12 us``: ``alpha = 4 mss a b / D``
    (per second of delay below target), ``fi = 5 mss a``, ``eta = 0.15 mss a`` (bytes).

    Args:
      line_rate, base_rtt: bytes/s and seconds, any broadcastable shapes.
      params: :class:`NSCCParams`.

    Returns:
      ``(alpha, fi, eta, target, bdp)``.
    """
    bdp = line_rate * base_rtt
    target = params.target_fraction * base_rtt
    a = bdp / _REF_BDP
    b = target / _REF_DELAY
    return (4.0 * params.mss * a * b / target, 5.0 * params.mss * a, 0.15 * params.mss * a,
            target, bdp)


def _init(line_rate, params):
    line = jnp.asarray(line_rate)
    return NSCCState(rate=line, cwnd=jnp.full_like(line, jnp.inf),
                     avg_delay=jnp.zeros_like(line), line_rate=line)


def _step(state, signals, dt, params, smooth):
    base = signals.base_rtt
    alpha, fi, eta, target, bdp = derived_gains(state.line_rate, base, params)
    maxwnd = params.maxwnd_bdp * bdp
    w = jnp.minimum(state.cwnd, maxwnd)
    d = jnp.maximum(signals.rtt - base, 0.0)
    acked = signals.rate
    m = signals.mark
    k = jnp.minimum(params.ewma * acked / params.mss * dt, 1.0)
    avg = state.avg_delay + k * (d - state.avg_delay)
    above = sm.step((d - target) / target, smooth)
    inc = acked * (1.0 - m) * (fi * above + alpha * sm.relu(target - d, smooth)) / w
    avg_over = sm.step((avg - target) / target, smooth)
    avg_safe = jnp.maximum(avg, 1e-12)
    md = m * avg_over * params.gamma * w * jnp.minimum(
        sm.relu(avg - target, smooth) / avg_safe, 0.5) / base
    dw = inc + eta / signals.rtt - md - signals.loss
    w = jnp.clip(w + dt * dw, params.mss, maxwnd)
    rate = jnp.minimum(w / signals.rtt, state.line_rate)
    rate = jnp.where(params.rccc > 0.5, jnp.minimum(rate, signals.rx_share), rate)
    return NSCCState(rate=rate, cwnd=w, avg_delay=avg, line_rate=state.line_rate)


def _mark(links, params, smooth):
    bdp = links.capacity * links.base_rtt
    lo = params.k_min_bdp * bdp
    width = jnp.maximum((params.k_max_bdp - params.k_min_bdp) * bdp, 1.0)
    return sm.clip01((links.queue - lo) / width, smooth)


def _window(state, signals, params):
    """Bytes allowed in flight: the congestion window.  NSCC is window-based
    ([UET-HTSIM] ``uec.cpp``: a packet leaves while in flight < cwnd); the fluid loop
    caps the offer to it (:func:`fabric_jax.cc.base.window_cap`)."""
    return state.cwnd


NSCC = register(Law("nscc", _init, _step, _mark, nscc_params, _window))
