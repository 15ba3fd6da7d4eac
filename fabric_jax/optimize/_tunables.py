"""Tunable congestion- and flow-control parameters per preset, with physical ranges.

A :class:`Tunable` is one knob an operator can turn: its name, where it lives (a field
of the preset's congestion-control parameters, or a PFC threshold), its default (the
preset's shipped value at the NIC line rate, :func:`fabric_jax.cc.params_for`), its
physical range and the source of that range.

Range rule (one rule for every knob, so that no fabric gets a narrower box than
another by choice): the range spans the **published settings** of the knob (each with
its source below) **widened by a factor 2 on each side** (in log space; in linear space
for fractions), clipped to hard limits (a probability <= 1, a utilisation target < 1).
Where only one value is published the range is that value /4 .. x4 in log space and
says so.  Line-rate rules of the sources are applied first (``B`` is the NIC line rate;
``docs/cc_parameters.md``), so a range at 400 Gb/s holds the 400 Gb/s values.

Per law (source keys of ``docs/cc_parameters.md`` / ``congestion-control.md``):

DCQCN (``roce``), published values at line rate ``B``:

=================  ========================================================  =========
knob               published values                                          space
=================  ========================================================  =========
``k_min``          5 KB [DCQCN15]; 41 KB (40 cells) [NS3RDMA];               log
                   100 KB B/25G [HPCC-NS3]
``k_max``          200 KB [DCQCN15]; 1 MB [ZHU16 stable]; 1.03 MB [NS3RDMA];  log
                   400 KB B/25G [HPCC-NS3]; kept >= 1.1 ``k_min``
``p_max``          0.01 [DCQCN15]; 0.2 [HPCC-NS3]; 1.0 [NS3RDMA] (<= 1)       log
``g``              1/256 [DCQCN15, HPCC-NS3]; 5/1024 [NV-DCQCN];             log
                   1/16 [HPCC-NS3 RdmaHw attribute]
``r_ai``           10 Mb/s [ZHU16 stable]; 40 Mb/s [DCQCN15];                log
                   5 Mb/s B/25G [HPCC-NS3]; B/20 [htsim dcqcn.cpp]
``r_hai``          200 Mb/s [NS3RDMA]; 50 Mb/s B/25G [HPCC-NS3];              log
                   B/10 [htsim dcqcn.cpp]
``timer``          55 us [DCQCN15]; 60 us [NS3RDMA]; 300 us [HPCC-NS3 run.py]; log
                   900 us [HPCC-NS3 config.txt]; 1500 us [RdmaHw attribute]
``tau_prime``      1 us [NV-DCQCN, HPCC-NS3]; 55 us [DCQCN15, NS3RDMA]         log
=================  ========================================================  =========

(``tau_prime`` is the alpha timer, ``timer`` the rate-increase timer ``T``.)

PFC (``roce``, ``spectrum_x``; :mod:`fabric_jax.flowcontrol`): ``pfc_headroom``
(buffer above XOFF, bytes; ``xoff = buffer - headroom``): ``C reaction + 2 MTU`` (the
project's rule, :func:`fabric_jax.flowcontrol.pfc_headroom`, reaction one step) and
``3 C d_link`` ([HPCC-NS3] ``third.cc``, one-way link delay ``d_link``), log, at most
half the port buffer; ``pfc_resume_offset`` (``xoff - xon``): 3 KB [HPCC-NS3]; 2 cells
= 2.06 KB [NS3RDMA]; 3 packets of 1 KB [HTSIM 15/12], log.

IB CC (``infiniband``, :mod:`fabric_jax.cc.ibcc`): ``threshold`` 16 KB (the model's
assumption for Threshold 0xF; only one value: /4 .. x4), ``ccti_increase`` 1
[MLNX-CCMGR, OPENSM] (one value: /4 .. x4; the fluid law reads it as the mean index
increase per BECN, so fractional values are expectations), ``ccti_timer`` 30 us x
(40 Gb/s / B) [IBMODEL rule] and 30 us unscaled (the pre-rule value), log.

HPCC (``spectrum_x``, :mod:`fabric_jax.cc.hpcc`): ``eta`` 0.95 [HPCC19] (linear,
/.. with hard limit 0.99: one value, range 0.8 .. 0.99, assumption), ``r_ai`` the
paper's rule ``C (1 - eta) / N`` with ``N`` = 100 (ours) and [HPCC-NS3] ``10 B/25``
Mb/s, log.  HPCC's ``maxStage`` is **not** a knob here: the law implements
[HPCC-NS3] ``run.py``'s ``MI_THRESH 0`` (every update multiplicative), and a
``maxStage > 0`` additive stage is not modelled.  Spectrum-X's own algorithm is not
public; the preset models it by HPCC, so its knobs are HPCC's.

NSCC (``uec``, :mod:`fabric_jax.cc.nscc`; [UET-HTSIM]): ``target_fraction`` 0.75
(trimming) and 1.0 (no trimming); ``gamma`` 0.8 (linear, 0.2 .. 1.0, assumption: one
value); ``k_min_bdp`` 0.2, ``k_max_bdp`` 0.8 (kept >= 1.1 ``k_min_bdp``),
``maxwnd_bdp`` 1.5 (one value each: /4 .. x4 would reach 6 BDP windows, so x/2).
Swift (no preset; ``cc="swift"`` overrides): ``base_target`` 20 us, ``per_hop``
20/6.55 us, ``ai`` 1, ``beta`` 0.8 [HTSIM] (one value each, /2 .. x2).

Reparametrisation (:func:`to_unit`, :func:`from_unit`): every knob is a number ``u``
in ``[0, 1]`` (log knobs: ``v = lo (hi/lo)^u``; linear: ``v = lo + (hi - lo) u``) and
the optimiser works on ``z = logit(u)`` (unbounded), so any step stays inside the
physical range.  A knob with ``above`` is placed between ``max(lo, 1.1 x the other)``
and ``hi``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..units import KB, US, gbps

__all__ = ["Tunable", "LAW_KNOBS", "PFC_KNOBS", "ABOVE_MARGIN", "preset_tunables",
           "resolve_params", "to_unit", "from_unit", "unit_of_defaults", "apply_knobs"]

#: A knob with ``above=other`` stays at least this factor above the other knob.
ABOVE_MARGIN = 1.1


@dataclasses.dataclass(frozen=True)
class Tunable:
    """One knob, resolved at a line rate.

    Attributes:
      name: the knob's name (``params=`` keys, the CLI's ``--params``).
      target: ``"law"`` (a field of the congestion-control parameters) or ``"pfc"``.
      field: the law field, or ``"headroom"`` / ``"resume_offset"`` for PFC.
      lo, hi: physical range in SI units (bytes, seconds, bytes/s, fractions).
      default: the preset's shipped value.
      space: ``"log"`` or ``"linear"``.
      unit: unit of ``lo``/``hi``/``default`` (for display).
      source: the published values the range comes from.
      above: name of a knob this one must exceed by :data:`ABOVE_MARGIN`, or ``None``.
    """

    name: str
    target: str
    field: str
    lo: float
    hi: float
    default: float
    space: str
    unit: str
    source: str
    above: str | None = None


def _range(published, *, space="log", widen=2.0, lo_limit=None, hi_limit=None):
    vals = np.asarray(published, float)
    if space == "log":
        lo, hi = vals.min() / widen, vals.max() * widen
    else:
        span = max(vals.max() - vals.min(), 0.0)
        lo, hi = vals.min() - span / 2, vals.max() + span / 2
    if lo_limit is not None:
        lo = max(lo, lo_limit)
    if hi_limit is not None:
        hi = min(hi, hi_limit)
    return float(lo), float(hi)


def _mbps(x):
    return x * 1e6 / 8.0


# Per law: knob -> (field, published(B) -> list, range kwargs, unit, source, above)
# B: NIC line rate in bytes/s.
def _dcqcn(B):
    r = B / gbps(25.0)
    return {
        "k_min": ("k_min", [5 * KB, 40 * 1030.0, 100 * KB * r], {}, "B",
                  "5 KB [DCQCN15]; 40 cells [NS3RDMA]; 100 KB x B/25G [HPCC-NS3]", None),
        "k_max": ("k_max", [200 * KB, 1000 * KB, 1000 * 1030.0, 400 * KB * r], {}, "B",
                  "200 KB [DCQCN15]; 1 MB [ZHU16]; 1000 cells [NS3RDMA]; 400 KB x B/25G "
                  "[HPCC-NS3]", "k_min"),
        "p_max": ("p_max", [0.01, 0.2, 1.0], dict(hi_limit=1.0), "-",
                  "0.01 [DCQCN15]; 0.2 [HPCC-NS3]; 1.0 [NS3RDMA]", None),
        "g": ("g", [1 / 256, 5 / 1024, 1 / 16], {}, "-",
              "1/256 [DCQCN15, HPCC-NS3]; 5/1024 [NV-DCQCN]; 1/16 [HPCC-NS3 attr]", None),
        "r_ai": ("r_ai", [_mbps(10), _mbps(40), _mbps(5) * r, B / 20], {}, "B/s",
                 "10 Mb/s [ZHU16]; 40 Mb/s [DCQCN15]; 5 Mb/s x B/25G [HPCC-NS3]; B/20 "
                 "[htsim]", None),
        "r_hai": ("r_hai", [_mbps(200), _mbps(50) * r, B / 10], {}, "B/s",
                  "200 Mb/s [NS3RDMA]; 50 Mb/s x B/25G [HPCC-NS3]; B/10 [htsim]", None),
        "timer": ("timer", [55 * US, 60 * US, 300 * US, 900 * US, 1500 * US], {}, "s",
                  "55 us [DCQCN15]; 60 us [NS3RDMA]; 300/900/1500 us [HPCC-NS3]", None),
        "tau_prime": ("tau_prime", [1 * US, 55 * US], {}, "s",
                      "1 us [NV-DCQCN, HPCC-NS3]; 55 us [DCQCN15, NS3RDMA]", None),
    }


def _ibcc(B):
    return {
        "threshold": ("threshold", [16 * KB], dict(widen=4.0), "B",
                      "16 KB (model assumption for Threshold 0xF; one value: /4 .. x4)", None),
        "ccti_increase": ("ccti_increase", [1.0], dict(widen=4.0), "index",
                          "1 [MLNX-CCMGR, OPENSM] (one value: /4 .. x4)", None),
        "ccti_timer": ("ccti_timer", [30 * US * gbps(40.0) / B, 30 * US], {}, "s",
                       "30 us x 40G/B [IBMODEL rule]; 30 us unscaled", None),
    }


def _hpcc(B):
    return {
        "eta": ("eta", [0.95], dict(space="linear"), "-",
                "0.95 [HPCC19] (one value: 0.8 .. 0.99, assumption)", None),
        "r_ai": ("r_ai", [B * 0.05 / 100, _mbps(10) * B / gbps(25.0)], {}, "B/s",
                 "C (1 - eta)/N, N = 100 [HPCC19 rule, N ours]; 10 Mb/s x B/25G "
                 "[HPCC-NS3]", None),
    }


def _nscc(B):
    return {
        "target_fraction": ("target_fraction", [0.75, 1.0], {}, "of base RTT",
                            "0.75 (trimming), 1.0 [UET-HTSIM]", None),
        "gamma": ("gamma", [0.8], dict(space="linear"), "-",
                  "0.8 [UET-HTSIM] (one value: 0.2 .. 1.0, assumption)", None),
        "k_min_bdp": ("k_min_bdp", [0.2], {}, "BDP", "0.2 [UET-HTSIM] (x/2)", None),
        "k_max_bdp": ("k_max_bdp", [0.8], {}, "BDP", "0.8 [UET-HTSIM] (x/2)", "k_min_bdp"),
        "maxwnd_bdp": ("maxwnd_bdp", [1.5], {}, "BDP", "1.5 [UET-HTSIM] (x/2)", None),
    }


def _swift(B):
    return {
        "base_target": ("base_target", [20 * US], {}, "s", "20 us [HTSIM] (x/2)", None),
        "per_hop": ("per_hop", [20 * US / 6.55], {}, "s", "base/6.55 [HTSIM] (x/2)", None),
        "ai": ("ai", [1.0], {}, "MSS/RTT", "1 [HTSIM] (x/2)", None),
        "beta": ("beta", [0.8], dict(hi_limit=1.0), "-", "0.8 [HTSIM] (x/2, <= 1)", None),
    }


#: Knob tables per congestion-control law (functions of the line rate, bytes/s).
LAW_KNOBS = {"dcqcn": _dcqcn, "ibcc": _ibcc, "hpcc": _hpcc, "nscc": _nscc,
             "swift": _swift, "none": lambda B: {}}

#: Fixed linear ranges of the knobs documented as assumptions (not the x2 rule).
_LINEAR_RANGES = {("hpcc", "eta"): (0.8, 0.99), ("nscc", "gamma"): (0.2, 1.0)}

#: PFC knob names.
PFC_KNOBS = ("pfc_headroom", "pfc_resume_offset")


def _pfc(capacity, buffer, link_latency, dt):
    """PFC knobs on the switch ports: defaults from the project's rule."""
    from ..flowcontrol import PFC_RESUME_OFFSET, pfc_headroom
    c = float(np.max(capacity))
    rule = float(pfc_headroom(c, reaction_s=dt))
    ns3 = 3.0 * c * float(np.max(link_latency))
    finite = np.asarray(buffer, float)[np.isfinite(buffer)]
    buf = float(np.min(finite)) if finite.size else np.inf
    lo, hi = _range([rule, ns3])
    hi = min(hi, buf / 2)
    r_lo, r_hi = _range([PFC_RESUME_OFFSET, 2 * 1030.0, 3 * KB])
    return [
        Tunable("pfc_headroom", "pfc", "headroom", lo, hi, rule, "log", "B",
                "C x reaction + 2 MTU [flowcontrol rule]; 3 C d_link [HPCC-NS3]; "
                "<= buffer/2"),
        Tunable("pfc_resume_offset", "pfc", "resume_offset", r_lo, r_hi,
                float(PFC_RESUME_OFFSET), "log", "B",
                "3 KB [HPCC-NS3]; 2 cells [NS3RDMA]; 3 x 1 KB [HTSIM]"),
    ]


def preset_tunables(law_name: str, law_params, *, line_rate: float, flow_control: str,
                    capacity=None, buffer=None, link_latency=None, dt=None) -> list:
    """The knobs of a law + flow-control pair at a line rate, with defaults taken from
    ``law_params`` (the preset's shipped parameters).

    Args:
      law_name: congestion-control law name.
      law_params: the law's parameter pytree (defaults read from it).
      line_rate: NIC line rate, bytes/s.
      flow_control: the preset's flow-control mode (``"pfc"`` adds the PFC knobs).
      capacity, buffer, link_latency: ``[links]`` arrays (PFC knobs only).
      dt: the simulation step, s (PFC reaction time; PFC knobs only).

    Returns:
      list of :class:`Tunable`, in table order.
    """
    out = []
    table = LAW_KNOBS.get(law_name, lambda B: {})(float(line_rate))
    for name, (field, published, kw, unit, source, above) in table.items():
        space = kw.pop("space", "log")
        if (law_name, name) in _LINEAR_RANGES:
            lo, hi = _LINEAR_RANGES[(law_name, name)]
        else:
            lo, hi = _range(published, space=space, **kw)
        default = float(np.asarray(getattr(law_params, field)).ravel()[0])
        out.append(Tunable(name, "law", field, lo, hi, default, space, unit, source, above))
    if flow_control == "pfc":
        out.extend(_pfc(capacity, buffer, link_latency, dt))
    return out


def resolve_params(tunables: list, params) -> list:
    """The knobs selected by ``params`` (host-side validation, before any simulation).

    Args:
      tunables: every knob of the preset (:func:`preset_tunables`).
      params: ``None`` (every knob, its physical range), a sequence of knob names, or
        a dict ``name -> None | (lo, hi)`` narrowing a knob's range (SI units).

    Returns:
      the selected :class:`Tunable` list (ranges narrowed as asked).

    Raises:
      ValueError: an unknown name (listing the valid ones), a bound that is not two
        finite numbers ``lo < hi`` or lies outside the physical range, a knob whose
        ``above`` partner is not selected while its own range could fall below it.
    """
    by_name = {t.name: t for t in tunables}
    valid = sorted(by_name)
    if params is None:
        return list(tunables)
    if isinstance(params, str):
        params = [params]
    items = params.items() if isinstance(params, dict) else ((p, None) for p in params)
    chosen = []
    for name, bound in items:
        if name not in by_name:
            raise ValueError(f"params: unknown parameter {name!r} for this preset; valid: "
                             f"{valid}")
        t = by_name[name]
        if bound is not None:
            try:
                lo, hi = (float(b) for b in bound)
            except (TypeError, ValueError):
                raise ValueError(f"params[{name!r}]: a bound must be (lo, hi), two numbers "
                                 f"in {t.unit}; got {bound!r}") from None
            if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
                raise ValueError(f"params[{name!r}]: bound (lo, hi) must be finite with "
                                 f"lo < hi; got {bound!r}")
            if lo < t.lo * (1 - 1e-9) or hi > t.hi * (1 + 1e-9):
                raise ValueError(f"params[{name!r}]: bound ({lo:g}, {hi:g}) {t.unit} lies "
                                 f"outside the physical range [{t.lo:g}, {t.hi:g}] {t.unit} "
                                 f"({t.source}); narrow it to that range")
            t = dataclasses.replace(t, lo=lo, hi=hi)
        chosen.append(t)
    if not chosen:
        raise ValueError(f"params: select at least one parameter; valid: {valid}")
    names = [t.name for t in chosen]
    if len(set(names)) != len(names):
        raise ValueError(f"params: a parameter is named twice: {names}")
    return chosen


def _clip_unit(u):
    return jnp.clip(u, 0.0, 1.0)


def from_unit(tunables: list, u, fixed: dict | None = None) -> dict:
    """Knob values (SI) from unit coordinates ``u`` ``[..., knobs]`` in ``[0, 1]``.

    ``fixed``: values of knobs not tuned (for ``above`` partners), name -> value.
    Traceable (``jit``/``grad``/``vmap``)."""
    u = _clip_unit(jnp.asarray(u))
    fixed = dict(fixed or {})
    out = {}
    for i, t in enumerate(tunables):
        lo = t.lo
        if t.above is not None:
            other = out.get(t.above, fixed.get(t.above))
            if other is not None:
                lo = jnp.maximum(lo, ABOVE_MARGIN * other)
        ui = u[..., i]
        if t.space == "log":
            v = lo * jnp.exp(ui * jnp.log(t.hi / lo))
        else:
            v = lo + (t.hi - lo) * ui
        out[t.name] = v
    return out


def to_unit(tunables: list, values: dict, fixed: dict | None = None) -> np.ndarray:
    """Unit coordinates of knob values (host, NumPy; the inverse of :func:`from_unit`,
    clipped to ``[0, 1]``)."""
    fixed = dict(fixed or {})
    u = np.zeros(len(tunables))
    placed = {}
    for i, t in enumerate(tunables):
        v = float(values[t.name])
        lo = t.lo
        if t.above is not None:
            other = placed.get(t.above, fixed.get(t.above))
            if other is not None:
                lo = max(lo, ABOVE_MARGIN * float(other))
        if lo >= t.hi:
            ui = 1.0
        elif t.space == "log":
            ui = np.log(max(v, 1e-300) / lo) / np.log(t.hi / lo)
        else:
            ui = (v - lo) / (t.hi - lo)
        u[i] = float(np.clip(ui, 0.0, 1.0))
        placed[t.name] = float(from_unit([dataclasses.replace(t, above=None, lo=lo)],
                                         np.array([u[i]]))[t.name])
    return u


def unit_of_defaults(tunables: list, fixed: dict | None = None) -> np.ndarray:
    """Unit coordinates of the knobs' shipped defaults."""
    return to_unit(tunables, {t.name: t.default for t in tunables}, fixed)


def apply_knobs(law_params, fc_params, knobs: dict, tunables: list, buffer) -> tuple[Any, Any]:
    """Law and flow-control parameter pytrees with the knob values put in.

    Args:
      law_params: the law's parameters (defaults).
      fc_params: :class:`fabric_jax.flowcontrol.FlowControlParams` (defaults).
      knobs: name -> value (traced or concrete).
      tunables: the knobs' specs (which field each one sets).
      buffer: ``[links]`` port buffers, bytes (PFC thresholds are placed below them).
    """
    by = {t.name: t for t in tunables}
    law_updates = {}
    for name, v in knobs.items():
        t = by[name]
        if t.target == "law":
            ref = getattr(law_params, t.field)
            law_updates[t.field] = jnp.broadcast_to(jnp.asarray(v, jnp.result_type(ref)),
                                                    jnp.shape(ref))
    if law_updates:
        law_params = dataclasses.replace(law_params, **law_updates)
    if any(by[n].target == "pfc" for n in knobs):
        buf = jnp.asarray(buffer, jnp.result_type(float))
        xoff, xon = fc_params.xoff, fc_params.xon
        if "pfc_headroom" in knobs:
            xoff = jnp.where(jnp.isfinite(buf), buf - knobs["pfc_headroom"], xoff)
        offset = knobs.get("pfc_resume_offset", fc_params.xoff - fc_params.xon)
        xon = jnp.maximum(xoff - offset, 0.0)
        fc_params = dataclasses.replace(fc_params, xoff=xoff, xon=xon)
    return law_params, fc_params

