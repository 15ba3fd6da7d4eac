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

Hyper increase (not in [ZHU16]'s model; the packet protocol's third stage, [DCQCN15]
via ``congestion-control.md`` sec. 1.1, and [HPCC-NS3] ``RdmaHw::RateIncEventMlx``):
after ``F`` fast-recovery steps and ``ai_stages`` additive steps without a rate cut,
each increase event adds ``R_HAI`` instead of ``R_AI`` to ``R_T``.  Fluid form: the
state carries ``age``, the expected time since the last cut, a renewal process reset at
the cut rate ``a/tau``: ``d age/dt = 1 - age a/tau`` (integrated exactly over ``dt``).
The increase events past ``F + ai_stages`` stages (``rc_H = rb (1-p)^((F+A) B/S)``,
``re_H = rd (1-p)^((F+A) T R/S)``) add ``R_HAI - R_AI`` more, once the age has passed
``F + ai_stages`` increase periods (``T``; with a byte counter, the slower of ``T`` and
``B/R``, since both counters must pass ``F``):

    dR_T/dt += (R_HAI - R_AI) (rc_H + re_H) 1[age >= (F + A) period]

So after congestion ends ``R_T`` climbs by ``R_AI`` per period, then by ``R_HAI`` per
period: the acceleration of the packet protocol.

Unclamped target ([HPCC-NS3] CLAMP_TARGET_RATE 0): a cut sets ``R_T <- R_C`` only if an
increase event happened since the previous cut, so back-to-back cuts keep the target
and fast recovery returns towards it.  Fluid form: the ``R_T`` reset term is
multiplied by the probability of a timer expiry since the last cut, ``(1-p)^(T R/S)``
(``clamp_target = 0``; 1 restores [ZHU16]'s term).  With ``r_hai == r_ai`` (the
``"paper"`` set, as in [ZHU16]) the model is exactly [ZHU16]'s.  Departures from the
packet protocol: the additive stage starts at once after a cut in the fluid form (its
survival factors, not the age, gate fast recovery, so that [ZHU16]'s fixed point
holds); CNP coalescing and timers are expected rates, not events.

Line rate ([HPCC-NS3] ``run.py``, ``mix/config.txt``): the ``"hpcc_ns3"`` set scales
``K_min``, ``K_max``, ``R_AI`` and ``R_HAI`` linearly with the NIC line rate from the
25 Gb/s reference (100 KB, 400 KB, 5 Mb/s, 50 Mb/s); timers, ``g``, ``P_max`` and the
minimum rate do not scale (:data:`LINE_RATE_SCALING`, ``docs/cc_parameters.md``).
[HPCC-NS3] scales the ECN thresholds with each *switch port's* rate (x4 on 4x links);
here they follow the NIC line rate (one threshold for every port; pass ``[links]``
arrays as ``k_min``/``k_max`` for per-port values).

Its fixed point (``fixed_point``) is [ZHU16] ``dcqcn-stability.tex``: all ``R_C* =
C/N`` and ``p*`` solves ``a^2 alpha* / ((b+d)(c+e)) = tau^2 R_AI R_C*`` (packet units).

Named parameter sets (:func:`dcqcn_params`): ``"paper"`` ([DCQCN15] defaults as used
in [ZHU16], 40 Gb/s, hyper increase off), ``"hpcc_ns3"`` (the HPCC authors' ns-3
"Mellanox" DCQCN, timer-only, ``run.py --cc dcqcn``, scaled to the line rate; the set
of :func:`fabric_jax.cc.params_for`), ``"nvidia"`` (ConnectX firmware values where
published, ``"hpcc_ns3"`` values elsewhere).  Sources:
``../shared/reference/congestion-control.md`` sec. 1.3; every default with its unit,
source and line-rate rule: ``docs/cc_parameters.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import smooth as sm
from ..units import KB, MB, US
from ._linerate import resolve_gbps, scale
from .base import Law, p_over_neglog1p, register, x_over_expm1

__all__ = ["DCQCNParams", "DCQCNState", "DCQCN", "dcqcn_params", "red_mark",
           "fixed_point", "LINE_RATE_SCALING", "REFERENCE_GBPS"]

#: [HPCC-NS3] ``run.py``: thresholds and increase steps are given per 25 Gb/s of NIC rate.
REFERENCE_GBPS = 25.0

#: Exponent ``e`` of each parameter's line-rate rule in the ``"hpcc_ns3"`` /
#: ``"nvidia"`` sets: ``value(B) = value(25 Gb/s) * (B / 25 Gb/s) ** e``.
LINE_RATE_SCALING = {"k_min": 1, "k_max": 1, "p_max": 0, "g": 0, "tau": 0, "tau_prime": 0,
                     "timer": 0, "byte_counter": 0, "fast_recovery": 0, "ai_stages": 0,
                     "r_ai": 1, "r_hai": 1, "clamp_target": 0, "min_rate": 0, "packet": 0}


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
      ai_stages: number of additive-increase steps before hyper increase.
      r_ai: additive-increase step, bytes/s.
      r_hai: hyper-increase step, bytes/s (``== r_ai``: no hyper increase).
      clamp_target: 1: every cut sets ``R_T <- R_C`` ([DCQCN15], [NS3RDMA]
        CLAMP_TARGET_RATE 1); 0: only a cut after at least one increase event does
        ([HPCC-NS3] CLAMP_TARGET_RATE 0, ``CheckRateDecreaseMlx``).
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
    ai_stages: Any
    r_ai: Any
    r_hai: Any
    clamp_target: Any
    min_rate: Any
    packet: Any


@dataclasses.dataclass(frozen=True)
class DCQCNState:
    """Attributes: ``rate`` (= R_C), ``target`` (R_T), ``alpha``, ``age`` (expected time
    since the last rate cut, s), ``line_rate``, each ``[flows]``."""

    rate: Any
    target: Any
    alpha: Any
    age: Any
    line_rate: Any


jax.tree_util.register_dataclass(DCQCNParams)
jax.tree_util.register_dataclass(DCQCNState)


def dcqcn_params(variant: str | None = None, *, line_rate=None, link_gbps=None,
                 **overrides) -> DCQCNParams:
    """Named DCQCN parameter sets.

    Args:
      variant: default ``"hpcc_ns3"`` when a line rate is given, else ``"paper"``.
        ``"paper"``: [DCQCN15]/[ZHU16] defaults at 40 Gb/s, not scaled (K_min
        5 KB, K_max 200 KB, P_max 1 %, g 1/256, tau 50 us, tau' 55 us, T 55 us, B 10 MB,
        F 5, R_AI 40 Mb/s, no hyper increase (R_HAI = R_AI, as in [ZHU16]'s model),
        min rate 100 Mb/s, packet 1 KB).  ``"hpcc_ns3"``: [HPCC-NS3] ``run.py --cc
        dcqcn`` at line rate ``bw`` Gb/s: tau = RATE_DECREASE_INTERVAL 4 us (a cut at
        most every 4 us if a CNP arrived), tau' = ALPHA_RESUME_INTERVAL 1 us (alpha
        update period), T = RP_TIMER 300 us (increase timer), no byte counter, F 1,
        one additive step then hyper increase (``RateIncEventMlx``: stage < F fast
        recovery, = F additive, > F hyper), R_AI = 5 bw/25 Mb/s, R_HAI = 50 bw/25 Mb/s,
        target not clamped on back-to-back cuts (CLAMP_TARGET_RATE 0), min rate 1 Gb/s,
        K_min/K_max = 100/400 bw/25 KB, P_max 0.2, 1000 B payload.
        ``"nvidia"``: [NV-DCQCN] ConnectX values where published (g = 5/1024 from
        DCE_TCP_G 1019, alpha period 1 us, rate-reduce period 4 us, min rate 1 Mb/s);
        increase-stage values, not published by NVIDIA, from ``"hpcc_ns3"``.
      line_rate: NIC line rate, bytes/s, that scales the ``hpcc_ns3``/``nvidia`` sets
        (:data:`LINE_RATE_SCALING`); ``"paper"`` is a 40 Gb/s set and refuses another
        rate.
      link_gbps: the same in Gb/s (give one of the two; default 40 Gb/s).
      **overrides: field values replacing the set's (in the units of
        :class:`DCQCNParams`).

    Raises:
      ValueError: unknown variant or field, a negative value, ``k_max <= k_min``, a bad
        line rate.
    """
    given = line_rate is not None or link_gbps is not None
    bw = resolve_gbps(line_rate, link_gbps, 40.0, "dcqcn_params")
    if variant is None:
        variant = "hpcc_ns3" if given else "paper"
    if variant == "paper" and given and not np.isclose(bw, 40.0):
        raise ValueError(f"dcqcn_params: the 'paper' set is defined at 40 Gb/s (got "
                         f"{bw:g} Gb/s); use variant='hpcc_ns3' for line-rate-scaled values")
    mbps = lambda x: x * 1e6 / 8.0  # noqa: E731
    if variant == "paper":
        p = dict(k_min=5 * KB, k_max=200 * KB, p_max=0.01, g=1 / 256, tau=50 * US,
                 tau_prime=55 * US, timer=55 * US, byte_counter=10 * MB, fast_recovery=5.0,
                 ai_stages=1.0, r_ai=mbps(40.0), r_hai=mbps(40.0), clamp_target=1.0,
                 min_rate=mbps(100.0), packet=1 * KB)
    elif variant in ("hpcc_ns3", "nvidia"):
        base = dict(k_min=100 * KB, k_max=400 * KB, p_max=0.2, g=1 / 256, tau=4 * US,
                    tau_prime=1 * US, timer=300 * US, byte_counter=np.inf,
                    fast_recovery=1.0, ai_stages=1.0, r_ai=mbps(5.0), r_hai=mbps(50.0),
                    clamp_target=0.0, min_rate=mbps(1000.0), packet=1 * KB)
        p = {k: scale(v, bw, REFERENCE_GBPS, LINE_RATE_SCALING[k]) for k, v in base.items()}
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
    return DCQCNState(rate=r, target=r, alpha=jnp.ones_like(r), age=jnp.zeros_like(r),
                      line_rate=r)


def _rates(p, rate, params):
    """Event rates of the fluid model (see the module docstring), ``[flows]``.

    Returns ``(a, hit, rb, rd, rc, re, rh, clamp)``: ``rh = rc_H + re_H`` are the
    increase events past ``F + ai_stages`` stages (hyper increase); ``clamp`` the
    fraction of cuts that set ``R_T <- R_C``.
    """
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
    f, fh = params.fast_recovery, params.fast_recovery + params.ai_stages
    # P(a timer expiry since the last cut): a cut then also resets R_T when unclamped
    clamp = params.clamp_target + (1.0 - params.clamp_target) * jnp.exp(-n_t * nlq)
    rc = jnp.where(finite_b, rb * jnp.exp(-f * n_b_safe * nlq), 0.0)
    re = rd * jnp.exp(-f * n_t * nlq)
    rh = (jnp.where(finite_b, rb * jnp.exp(-fh * n_b_safe * nlq), 0.0)
          + rd * jnp.exp(-fh * n_t * nlq))
    return a, hit, rb, rd, rc, re, rh, clamp


def _hyper_gate(age, rate, params, smooth):
    """1 once ``age`` has passed ``F + ai_stages`` increase periods, else 0.

    The period is ``T``; with a finite byte counter the slower of ``T`` and ``B/R``
    (both counters must pass ``F``, [NS3RDMA] ``qbb-net-device.cc``).
    """
    r_safe = jnp.maximum(rate, 1.0)
    period = jnp.where(jnp.isfinite(params.byte_counter),
                       jnp.maximum(params.timer, jnp.where(jnp.isfinite(params.byte_counter),
                                                           params.byte_counter, 0.0) / r_safe),
                       params.timer)
    stages = params.fast_recovery + params.ai_stages
    return sm.step(age / period - stages, smooth)


def _step(state, signals, dt, params, smooth):
    rate_d = signals.rate
    a, hit, rb, rd, rc, re, rh, clamp = _rates(signals.mark, rate_d, params)
    rc_, rt, alpha = state.rate, state.target, state.alpha
    hyper = _hyper_gate(state.age, rate_d, params, smooth)
    d_alpha = params.g / params.tau_prime * (hit - alpha)
    d_rt = (-(rt - rc_) * a * clamp / params.tau + params.r_ai * (rc + re)
            + (params.r_hai - params.r_ai) * rh * hyper)
    d_rc = -rc_ * alpha * a / (2 * params.tau) + 0.5 * (rt - rc_) * (rb + rd)
    # age: renewal reset at the cut rate lam = a/tau, exact over dt:
    # age(t+dt) = age e^(-lam dt) + (1 - e^(-lam dt))/lam  (-> age + dt as lam -> 0).
    x = a / params.tau * dt
    decay = jnp.exp(-x)
    age = state.age * decay + dt * decay / x_over_expm1(x)
    line = state.line_rate
    lo = jnp.minimum(params.min_rate, line)
    alpha = jnp.clip(alpha + dt * d_alpha, 0.0, 1.0)
    rt = jnp.clip(rt + dt * d_rt, lo, line)
    rc_ = jnp.clip(rc_ + dt * d_rc, lo, line)
    return DCQCNState(rate=rc_, target=rt, alpha=alpha, age=age, line_rate=line)


def _mark(links, params, smooth):
    return red_mark(links.queue, params.k_min, params.k_max, params.p_max, smooth)


DCQCN = register(Law("dcqcn", _init, _step, _mark, dcqcn_params))


# ------------------------------------------------------------------- fixed point
def fixed_point(n_flows: int, capacity: float, params: DCQCNParams) -> dict:
    """[ZHU16] fixed point of N identical DCQCN flows on one bottleneck (host, float64).

    Solves ``a^2 alpha* / ((b+d)(c+e)) = tau^2 R_AI R_C*`` for ``p*`` (packet units,
    ``dcqcn-stability.tex``) with ``R_C* = C/N``, ``alpha* = 1 - (1-p*)^(tau' R_C*)``,
    ``q* = p*/P_max (K_max - K_min) + K_min`` and ``R_T* = R_C*(1 + (c+e) tau R_AI/a)``
    (``stability.m``).  With hyper increase (``r_hai > r_ai``) the increase weight
    ``c + e`` becomes ``c + e + (R_HAI/R_AI - 1)(c_H + e_H) 1[age* >= (F+A) period]``
    with the stationary age ``age* = tau/a`` (the module docstring's fluid form; the
    same derivation: ``dR_T/dt = 0`` and ``dR_C/dt = 0``), and with an unclamped
    target one factor ``a`` becomes ``a (1-p*)^(T R_C*)``.

    Returns:
      dict with ``p``, ``alpha``, ``queue`` (bytes), ``rate`` (bytes/s), ``target``.
    """
    from scipy.optimize import brentq

    P = {k: float(np.asarray(v)) for k, v in dataclasses.asdict(params).items()}
    s = P["packet"]
    r = capacity / n_flows / s                          # packets/s
    tau, taup, T = P["tau"], P["tau_prime"], P["timer"]
    B, F = P["byte_counter"] / s, P["fast_recovery"]
    fh = F + P["ai_stages"]
    rai = P["r_ai"] / s
    extra = P["r_hai"] / P["r_ai"] - 1.0 if P["r_ai"] > 0 else 0.0
    period = max(T, B / r) if np.isfinite(B) else T

    def log_expm1(x):                                   # log(e^x - 1), x > 0, no overflow
        return np.where(x > 30, x + np.log1p(-np.exp(-np.minimum(x, 700))),
                        np.log(np.expm1(np.minimum(x, 30))))

    def log_terms(p):
        """Logs of a, b + d, the increase weight, alpha, and a x clamp (underflow-free)."""
        lq = np.log1p(-p)
        log_a = np.log(-np.expm1(tau * r * lq))
        log_d = np.log(p) - log_expm1(-T * r * lq)
        logs_bd, logs_inc, logs_h = [log_d], [log_d + F * T * r * lq], [log_d + fh * T * r * lq]
        if np.isfinite(B):
            log_b = np.log(p) - log_expm1(-B * lq)
            logs_bd.append(log_b)
            logs_inc.append(log_b + F * B * lq)
            logs_h.append(log_b + fh * B * lq)
        log_bd = np.logaddexp.reduce(logs_bd)
        log_inc = np.logaddexp.reduce(logs_inc)
        gate = np.exp(-log_a) * tau >= fh * period
        if extra > 0 and gate:
            log_inc = np.logaddexp(log_inc, np.log(extra) + np.logaddexp.reduce(logs_h))
        log_alpha = np.log(-np.expm1(taup * r * lq))
        clamp = P["clamp_target"] + (1 - P["clamp_target"]) * np.exp(T * r * lq)
        return log_a, log_bd, log_inc, log_alpha, log_a + np.log(clamp)

    def resid(logp):
        log_a, log_bd, log_inc, log_alpha, log_ak = log_terms(np.exp(logp))
        return log_a + log_ak + log_alpha - log_bd - log_inc - np.log(tau * tau * rai * r)

    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        # first sign change on a log grid (the unclamped target's factor (1-p)^(T R)
        # sends the residual back to -inf as p -> 1), then Brent on that bracket
        grid = np.linspace(np.log(1e-12), np.log(0.999), 400)
        vals = np.array([resid(x) for x in grid])
        up = np.flatnonzero((vals[:-1] < 0) & (vals[1:] >= 0))
        if up.size == 0:
            raise ValueError("fixed_point: no p* in (1e-12, 0.999) for these parameters")
        logp = brentq(resid, grid[up[0]], grid[up[0] + 1], xtol=1e-14)
        p = float(np.exp(logp))
        log_a, log_bd, log_inc, log_alpha, log_ak = log_terms(p)
    queue = p / P["p_max"] * (P["k_max"] - P["k_min"]) + P["k_min"]
    return dict(p=p, alpha=float(np.exp(log_alpha)), queue=float(queue),
                rate=capacity / n_flows,
                target=float(capacity / n_flows * (1 + np.exp(log_inc - log_ak) * tau * rai)))
