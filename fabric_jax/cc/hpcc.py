"""HPCC (Li et al., SIGCOMM 2019 [HPCC19]) as a fluid law.

Every hop reports in-band telemetry; the sender computes the hop utilisation
``u_j = q_j/(B_j T) + tx_j/B_j`` and ``U = max_j u_j`` (the fluid loop provides it as
``FlowSignals.util``, with ``T`` the largest base RTT, [HPCC-NS3] ``GLOBAL_T 1``),
smooths it (``U <- U (T - tau)/T + u tau/T``), and once per RTT sets

    R <- R / (U / eta) + R_AI          ([HPCC-NS3] ``UpdateRateHp`` with MI_THRESH 0)

clipped to ``[min_rate, line_rate]``, where ``R`` on the right is the *reference*
rate ``R_c`` committed once per RTT.  Fluid form: ``dU/dt = (u~ - U)/T``,
``R = R_c eta / U + R_AI`` and ``d log R_c/dt = log(R / R_c)/T`` (the committed
reference is multiplied by ``R/R_c`` once per RTT).  For ``N`` flows on one link of capacity ``C``
without a standing queue the equilibrium utilisation is ``eta + N R_AI / C`` (set
``dR/dt = 0`` with ``U = N R / C``).

Defaults and line rate (``docs/cc_parameters.md``): ``eta`` = 0.95 ([HPCC19]
evaluation, [HPCC-NS3] ``U_TARGET``); ``T`` = the flow's base RTT (the fluid loop's
``FlowSignals.base_rtt``; [HPCC19] uses the fabric's largest base RTT, [HPCC-NS3]
``GLOBAL_T 1``); the additive step follows the paper's rule ``W_AI = W_init (1 - eta)
/ N`` ([HPCC19] parameter discussion; ``N`` the expected largest number of concurrent
flows on a link, ``W_init = C T``), in rate form ``R_AI = W_AI / T = C (1 - eta) / N``.
``N = expected_flows = 100`` is this model's assumption (50 Mb/s at 100 Gb/s, next to
[HPCC-NS3] ``run.py``'s ``10 bw/25`` = 40 Mb/s).  So ``R_AI`` scales linearly with the
NIC line rate and ``eta`` does not.  Min rate 100 Mb/s ([HPCC-NS3] ``RdmaHw``
``MinRate`` default, not scaled).  HPCC reads no ECN.
Departures: one reference-rate update per RTT is smoothed into a rate; no
per-ACK "fast react".

Window.  HPCC is window-based: a sender keeps at most ``W`` bytes in flight and paces
at ``R = W / T`` ([HPCC19] Sec. 3.2; the fluid law keeps ``R`` as its state, so ``W =
R T``).  [HPCC-NS3] runs HPCC with ``HAS_WIN 1``, ``VAR_WIN 1`` (``run.py --cc hp``),
where ``RdmaQueuePair::GetWin`` is ``win x rate / max_rate`` with ``win`` the largest
host-pair BDP (``third.cc``, ``GLOBAL_T 1``), i.e. ``W = R T`` with ``T`` the largest
base RTT; here ``T`` is the flow's base RTT, as for the rate law above.  The fluid loop
caps the offer so that in-flight bytes never exceed ``W``
(:func:`fabric_jax.cc.base.window_cap`): an incast's senders can put at most one
window each into the fabric before their first feedback, which bounds the queue and
with it the depth of the rate cut (README "Scale sweep": without the cap the 4-to-1
incast's finish time moved 1.21 -> 1.42 x ideal as dt went 1 -> 0.0625 us;
``docs/fidelity.md``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..units import gbps
from ._linerate import resolve_gbps
from .base import Law, register

__all__ = ["HPCCParams", "HPCCState", "HPCC", "hpcc_params", "LINE_RATE_SCALING",
           "REFERENCE_GBPS"]

#: Line rate at which the rules below are quoted (the [HPCC19] evaluation's host rate).
REFERENCE_GBPS = 100.0

#: Exponent ``e``: ``value(B) = value(100 Gb/s) (B / 100 Gb/s) ** e``.
LINE_RATE_SCALING = {"eta": 0, "r_ai": 1, "min_rate": 0}


@dataclasses.dataclass(frozen=True)
class HPCCParams:
    """Attributes: eta (target utilisation), r_ai (bytes/s), min_rate (bytes/s)."""

    eta: Any
    r_ai: Any
    min_rate: Any


@dataclasses.dataclass(frozen=True)
class HPCCState:
    """Attributes: ``rate``, ``ref`` (reference rate R_c), ``util`` (smoothed U),
    ``line_rate``, each ``[flows]``."""

    rate: Any
    ref: Any
    util: Any
    line_rate: Any


jax.tree_util.register_dataclass(HPCCParams)
jax.tree_util.register_dataclass(HPCCState)


def hpcc_params(*, line_rate=None, link_gbps=None, expected_flows: float = 100.0,
                **overrides) -> HPCCParams:
    """HPCC defaults at a NIC line rate (see the module docstring).

    Args:
      line_rate: NIC line rate, bytes/s (or ``link_gbps`` in Gb/s; default 100 Gb/s).
      expected_flows: ``N`` of the paper's ``W_AI = W_init (1 - eta)/N``.
      **overrides: ``eta``, ``r_ai`` (bytes/s), ``min_rate`` (bytes/s).  An ``eta``
        override also sets ``r_ai`` by the rule unless ``r_ai`` is given.

    Raises:
      ValueError: unknown field, bad line rate, ``expected_flows <= 0``.
    """
    gb = resolve_gbps(line_rate, link_gbps, REFERENCE_GBPS, "hpcc_params")
    if not float(expected_flows) > 0:
        raise ValueError(f"hpcc_params: expected_flows must be > 0; got {expected_flows!r}")
    eta = overrides.get("eta", 0.95)
    r_ai = None if isinstance(eta, jax.core.Tracer) else (
        gbps(gb) * (1.0 - float(np.asarray(eta))) / float(expected_flows))
    p = dict(eta=0.95, r_ai=r_ai, min_rate=100e6 / 8)
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown HPCC parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    if p["r_ai"] is None:
        raise ValueError("hpcc_params: a traced eta needs an explicit r_ai")
    dt = jnp.result_type(float)
    return HPCCParams(**{k: jnp.asarray(v, dt) for k, v in p.items()})


def _init(line_rate, params):
    line = jnp.asarray(line_rate)
    return HPCCState(rate=line, ref=line, util=jnp.zeros_like(line), line_rate=line)


def _step(state, signals, dt, params, smooth):
    t = signals.base_rtt
    k = jnp.minimum(dt / t, 1.0)
    # dU/dt = (u - U) / T integrated exactly over the step (HPCC's per-ACK EWMA with
    # weight tau/T is its dt -> 0 limit); forward Euler (weight dt/T) made the 4-to-1
    # incast's finish time 1.13 -> 1.19 x ideal as dt went 1 -> 0.0625 us even with
    # the window, the exact step 1.156 -> 1.187 (docs/fidelity.md)
    util = state.util - jnp.expm1(-dt / t) * (signals.util - state.util)
    u_safe = jnp.maximum(util, 1e-3)
    lo = jnp.minimum(params.min_rate, state.line_rate)
    # Per-ACK rate from the reference rate (no compounding within an RTT) ...
    rate = jnp.clip(state.ref * params.eta / u_safe + params.r_ai, lo, state.line_rate)
    # ... and the reference becomes the rate once per RTT: geometric interpolation, so
    # that over one RTT R_c is multiplied by R/R_c (= eta/U), as in the per-RTT update.
    ref = state.ref * jnp.exp(k * jnp.log(rate / state.ref))
    return HPCCState(rate=rate, ref=ref, util=util, line_rate=state.line_rate)


def _mark(links, params, smooth):
    return jnp.zeros_like(links.queue)


def _window(state, signals, params):
    """Bytes allowed in flight, ``W = R T`` (module docstring, "Window")."""
    return state.rate * signals.base_rtt


HPCC = register(Law("hpcc", _init, _step, _mark, hpcc_params, _window))
