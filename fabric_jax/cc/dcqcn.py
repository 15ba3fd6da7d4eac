"""DCQCN as the per-flow fluid model of Zhu et al., CoNEXT 2016 [ZHU16].

Roles (Zhu et al., SIGCOMM 2015; [ZHU16] sec. 2): the switch (CP) marks ECN on egress
with a RED ramp (0 below ``K_min``, linear to ``P_max`` at ``K_max``, **1 above**
``K_max``); the receiver (NP) sends at most one CNP per ``tau`` per flow; the sender
(RP) cuts ``R_C <- R_C (1 - alpha/2)`` on a CNP (after ``R_T <- R_C``), updates
``alpha <- (1-g) alpha + g`` and decays ``alpha`` every ``tau'`` without CNP, and
recovers by timer ``T`` and byte counter ``B`` (``F`` fast-recovery steps
``R_C <- (R_T + R_C)/2``, then additive increase ``R_T += R_AI``).

The fluid model ([ZHU16] fig. "DCQCN fluid model", ``dcqcn-model.tex``; MATLAB
``fluidmodel/dcqcn/dcqcn2.m``) is implemented term by term, in bytes instead of packets
(``S`` = packet size, 1000 B in the paper).  With ``p~`` and ``R~`` the path marking
probability and the flow's rate one feedback delay ago (the fluid loop's delay line):

    a   = 1 - (1-p~)^(tau R~/S)                   (a CNP in a tau window)
    rb  = (R~/S) p~ / ((1-p~)^(-B/S) - 1)         (byte-counter expiries / s)
    rd  = (R~/S) p~ / ((1-p~)^(-T R~/S) - 1)      (timer expiries / s)
    rc  = rb (1-p~)^(F B/S),  re = rd (1-p~)^(F T R~/S)   (past fast recovery)
    dalpha/dt = g/tau' [(1 - (1-p~)^(tau' R~/S)) - alpha]
    dR_T/dt   = -(R_T - R_C) a / tau + R_AI (rc + re)
    dR_C/dt   = -R_C alpha a / (2 tau) + (R_T - R_C)/2 (rb + rd)

integrated with explicit Euler at the fluid step ``dt``; rates are clipped to
``[min_rate, line_rate]`` ([ZHU16] ``dcqcn2.m`` zeroes positive derivatives at line
rate).  Powers are computed as ``exp(n log1p(-p))`` and the ratios with their finite
limits at ``p -> 0`` (``rb -> R/B``, ``rd -> 1/T``), so gradients are NaN-free.
Departures from the packet protocol: hyper increase is not in the fluid model (as in
[ZHU16]); CNP coalescing and timers are expected rates, not events.

Its fixed point (``fixed_point``) is [ZHU16] ``dcqcn-stability.tex``: all ``R_C* =
C/N`` and ``p*`` solves ``a^2 alpha* / ((b+d)(c+e)) = tau^2 R_AI R_C*`` (packet units).

Named parameter sets (:func:`dcqcn_params`): ``"paper"`` ([DCQCN15] defaults as used
in [ZHU16]), ``"hpcc_ns3"`` (the HPCC authors' ns-3 "Mellanox" DCQCN, timer-only,
``run.py --cc dcqcn``), ``"nvidia"`` (ConnectX firmware values where published, paper
values elsewhere).  Sources: ``../shared/reference/congestion-control.md`` sec. 1.3.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import smooth as sm
from ..units import KB, MB, US, gbps
from .base import Law, p_over_neglog1p, register, x_over_expm1

__all__ = ["DCQCNParams", "DCQCNState", "DCQCN", "dcqcn_params", "red_mark",
           "fixed_point"]


@dataclasses.dataclass(frozen=True)
class DCQCNParams:
    """DCQCN parameters (all array leaves; bytes, seconds, bytes/s).

    Attributes:
      k_min, k_max: RED thresholds on the egress queue, bytes.
      p_max: marking probability at ``k_max``.
      g: alpha EWMA gain.
      tau: CNP generation interval (NP), s.
      tau_prime: alpha decay interval, s.
      timer: rate-increase timer ``T``, s.
      byte_counter: ``B``, bytes (``inf``: timer only).
      fast_recovery: ``F``, number of fast-recovery steps.
      r_ai: additive-increase step, bytes/s.
      min_rate: lowest rate, bytes/s.
      packet: packet size ``S``, bytes.
    """

    k_min: Any
    k_max: Any
    p_max: Any
    g: Any
    tau: Any
    tau_prime: Any
    timer: Any
    byte_counter: Any
    fast_recovery: Any
    r_ai: Any
    min_rate: Any
    packet: Any


@dataclasses.dataclass(frozen=True)
class DCQCNState:
    """Attributes: ``rate`` (= R_C), ``target`` (R_T), ``alpha``, ``line_rate``, each ``[flows]``."""

    rate: Any
    target: Any
    alpha: Any
    line_rate: Any


jax.tree_util.register_dataclass(DCQCNParams)
jax.tree_util.register_dataclass(DCQCNState)


def dcqcn_params(variant: str = "paper", *, link_gbps: float = 40.0, **overrides) -> DCQCNParams:
    """Named DCQCN parameter sets.

    Args:
      variant: ``"paper"``: [DCQCN15]/[ZHU16] defaults (K_min 5 KB, K_max 200 KB,
        P_max 1 %, g 1/256, tau 50 us, tau' 55 us, T 55 us, B 10 MB, F 5, R_AI 40 Mb/s,
        packet 1 KB).  ``"hpcc_ns3"``: [HPCC-NS3] ``run.py --cc dcqcn`` (tau = rate
        decrease interval 4 us, tau' = alpha resume interval 1 us, T = 300 us, no byte
        counter, F 1, R_AI = 5 bw/25 Mb/s, min rate 1 Gb/s, K_min/K_max = 100/400
        bw/25 KB, P_max 0.2, 1000 B payload).  ``"nvidia"``: [NV-DCQCN] ConnectX
        values where published (g = 5/1024 from DCE_TCP_G 1019, alpha period
        1 us, rate-reduce period 4 us, min rate 1 Mb/s); increase-stage values, not
        published by NVIDIA, taken from ``"hpcc_ns3"``.
      link_gbps: link speed that scales the ``hpcc_ns3``/``nvidia`` sets, Gb/s.
      **overrides: field values replacing the set's (in the units of
        :class:`DCQCNParams`).
    """
    bw = float(link_gbps)
    mbps = lambda x: x * 1e6 / 8.0  # noqa: E731
    if variant == "paper":
        p = dict(k_min=5 * KB, k_max=200 * KB, p_max=0.01, g=1 / 256, tau=50 * US,
                 tau_prime=55 * US, timer=55 * US, byte_counter=10 * MB, fast_recovery=5.0,
                 r_ai=mbps(40.0), min_rate=mbps(100.0), packet=1 * KB)
    elif variant in ("hpcc_ns3", "nvidia"):
        p = dict(k_min=100 * bw / 25 * KB, k_max=400 * bw / 25 * KB, p_max=0.2, g=1 / 256,
                 tau=4 * US, tau_prime=1 * US, timer=300 * US, byte_counter=np.inf,
                 fast_recovery=1.0, r_ai=mbps(5 * bw / 25), min_rate=mbps(1000.0),
                 packet=1 * KB)
        if variant == "nvidia":
            p.update(g=5 / 1024, min_rate=mbps(1.0))
    else:
        raise ValueError(f"variant must be 'paper', 'hpcc_ns3' or 'nvidia'; got {variant!r}")
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown DCQCN parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    for name, v in p.items():
        if not isinstance(v, jax.core.Tracer) and not np.all(np.asarray(v) >= 0):
            raise ValueError(f"DCQCN parameter {name} must be >= 0; got {v!r}")
    if not any(isinstance(p[k], jax.core.Tracer) for k in ("k_min", "k_max")) and not np.all(
            np.asarray(p["k_max"]) > np.asarray(p["k_min"])):
        raise ValueError("k_max must exceed k_min")
    dt = jnp.result_type(float)
    return DCQCNParams(**{k: jnp.asarray(v, dt) for k, v in p.items()})


def red_mark(queue, k_min, k_max, p_max, smooth=sm.EXACT):
    """RED/ECN marking probability: 0 below k_min, ramp to p_max at k_max, 1 above."""
    width = k_max - k_min
    x = (queue - k_min) / width
    ramp = p_max * sm.clip01(x, smooth)
    return ramp + (1.0 - p_max) * sm.step(x - 1.0, smooth)


def _init(line_rate, params):
    r = jnp.asarray(line_rate)
    return DCQCNState(rate=r, target=r, alpha=jnp.ones_like(r), line_rate=r)


def _rates(p, rate, params):
    """Event rates of the fluid model (see the module docstring), ``[flows]``."""
    s = params.packet
    p = jnp.clip(p, 0.0, 1.0 - 1e-6)
    nlq = -jnp.log1p(-p)                                   # -log(1-p) >= 0
    n_tau = params.tau * rate / s
    a = -jnp.expm1(-n_tau * nlq)
    hit = -jnp.expm1(-params.tau_prime * rate / s * nlq)
    n_b = params.byte_counter / s
    n_t = params.timer * rate / s
    po = p_over_neglog1p(p)
    finite_b = jnp.isfinite(n_b)
    n_b_safe = jnp.where(finite_b, n_b, 1.0)
    rb = jnp.where(finite_b, rate / jnp.where(finite_b, params.byte_counter, 1.0) * po
                   * x_over_expm1(n_b_safe * nlq), 0.0)
    rd = po / params.timer * x_over_expm1(n_t * nlq)
    rc = jnp.where(finite_b, rb * jnp.exp(-params.fast_recovery * n_b_safe * nlq), 0.0)
    re = rd * jnp.exp(-params.fast_recovery * n_t * nlq)
    return a, hit, rb, rd, rc, re


def _step(state, signals, dt, params, smooth):
    rate_d = signals.rate
    a, hit, rb, rd, rc, re = _rates(signals.mark, rate_d, params)
    rc_, rt, alpha = state.rate, state.target, state.alpha
    d_alpha = params.g / params.tau_prime * (hit - alpha)
    d_rt = -(rt - rc_) * a / params.tau + params.r_ai * (rc + re)
    d_rc = -rc_ * alpha * a / (2 * params.tau) + 0.5 * (rt - rc_) * (rb + rd)
    line = state.line_rate
    lo = jnp.minimum(params.min_rate, line)
    alpha = jnp.clip(alpha + dt * d_alpha, 0.0, 1.0)
    rt = jnp.clip(rt + dt * d_rt, lo, line)
    rc_ = jnp.clip(rc_ + dt * d_rc, lo, line)
    return DCQCNState(rate=rc_, target=rt, alpha=alpha, line_rate=line)


def _mark(links, params, smooth):
    return red_mark(links.queue, params.k_min, params.k_max, params.p_max, smooth)


DCQCN = register(Law("dcqcn", _init, _step, _mark, dcqcn_params))


# ------------------------------------------------------------------- fixed point
def fixed_point(n_flows: int, capacity: float, params: DCQCNParams) -> dict:
    """[ZHU16] fixed point of N identical DCQCN flows on one bottleneck (host, float64).

    Solves ``a^2 alpha* / ((b+d)(c+e)) = tau^2 R_AI R_C*`` for ``p*`` (packet units,
    ``dcqcn-stability.tex``) with ``R_C* = C/N``, ``alpha* = 1 - (1-p*)^(tau' R_C*)``,
    ``q* = p*/P_max (K_max - K_min) + K_min`` and ``R_T* = R_C*(1 + (c+e) tau R_AI/a)``
    (``stability.m``).

    Returns:
      dict with ``p``, ``alpha``, ``queue`` (bytes), ``rate`` (bytes/s), ``target``.
    """
    from scipy.optimize import brentq

    P = {k: float(np.asarray(v)) for k, v in dataclasses.asdict(params).items()}
    s = P["packet"]
    r = capacity / n_flows / s                          # packets/s
    tau, taup, T, B, F = P["tau"], P["tau_prime"], P["timer"], P["byte_counter"] / s, P["fast_recovery"]
    rai = P["r_ai"] / s

    def terms(p):
        lq = np.log1p(-p)
        a = -np.expm1(tau * r * lq)
        b = p / np.expm1(-B * lq) if np.isfinite(B) else 0.0
        c = b * np.exp(F * B * lq) if np.isfinite(B) else 0.0
        d = p / np.expm1(-T * r * lq)
        e = d * np.exp(F * T * r * lq)
        alpha = -np.expm1(taup * r * lq)
        return a, b, c, d, e, alpha

    def resid(logp):
        a, b, c, d, e, alpha = terms(np.exp(logp))
        return np.log(a * a * alpha / ((b + d) * (c + e))) - np.log(tau * tau * rai * r)

    with np.errstate(over="ignore", divide="ignore"):
        logp = brentq(resid, np.log(1e-12), np.log(0.999), xtol=1e-14)
        p = float(np.exp(logp))
        a, b, c, d, e, alpha = terms(p)
    queue = p / P["p_max"] * (P["k_max"] - P["k_min"]) + P["k_min"]
    return dict(p=p, alpha=float(alpha), queue=float(queue), rate=capacity / n_flows,
                target=capacity / n_flows * (1 + (c + e) * tau * rai / a))
