"""Congestion-control laws for the fluid fabric (:func:`fabric_jax.fluid.simulate_fluid`).

Each law is a :class:`Law` with ``init``/``step``/``mark``/``default_params``
(:mod:`fabric_jax.cc.base`); parameters are pytrees of traced leaves.

Parameters per line rate: :func:`params_for` returns a law's defaults derived from the
NIC line rate, the way the reference simulators scale them (DCQCN's ECN thresholds and
increase steps in proportion to the rate, HPCC's additive step, IB CC's timer in
inverse proportion ...); :data:`LINE_RATE_SCALING` holds each parameter's rule as an
exponent ``e`` (``value(B) = value(B_ref) (B / B_ref) ** e``), and
``docs/cc_parameters.md`` tabulates every default with its unit and source::

    p = params_for("dcqcn", gbps(400))      # K_min 1.6 MB, R_AI 80 Mb/s, R_HAI 800 Mb/s

========  ===========================================================================
name      model
========  ===========================================================================
none      line rate, no reaction (ideal / baseline)
dcqcn     DCQCN fluid model of Zhu et al., CoNEXT 2016 (RED/ECN, CNP, alpha, R_T/R_C)
ibcc      InfiniBand CC (annex A10): FECN above a threshold, BECN, CCTI and CC table
hpcc      HPCC (Li et al., SIGCOMM 2019): INT utilisation target eta
swift     Swift (Kumar et al., SIGCOMM 2020): delay target, AIMD on cwnd
nscc      UEC NSCC (ECN + delay, sender window), optional RCCC receiver credit
========  ===========================================================================
"""

from . import dcqcn as _dcqcn, hpcc as _hpcc, ibcc as _ibcc, none as _none
from . import nscc as _nscc, swift as _swift
from . import dctcp as _dctcp  # noqa: F401  (registers "dctcp"; not in LAWS, see its docstring)
from .base import FlowSignals, Law, LinkView, get
from .none import NONE, none_params
from .dcqcn import DCQCN, DCQCNParams, dcqcn_params
from .ibcc import IBCC, IBCCParams, ibcc_params
from .hpcc import HPCC, HPCCParams, hpcc_params
from .swift import SWIFT, SwiftParams, swift_params
from .nscc import NSCC, NSCCParams, nscc_params
from .dctcp import DCTCP, DCTCPParams, dctcp_params

#: Every law by name.
LAWS = {law.name: law for law in (NONE, DCQCN, IBCC, HPCC, SWIFT, NSCC)}

#: Per law, each parameter's line-rate exponent (see :func:`params_for`).
LINE_RATE_SCALING = {"none": _none.LINE_RATE_SCALING, "dcqcn": _dcqcn.LINE_RATE_SCALING,
                     "ibcc": _ibcc.LINE_RATE_SCALING, "hpcc": _hpcc.LINE_RATE_SCALING,
                     "swift": _swift.LINE_RATE_SCALING, "nscc": _nscc.LINE_RATE_SCALING}

_BUILDERS = {"none": none_params,
             "dcqcn": lambda **kw: dcqcn_params(kw.pop("variant", "hpcc_ns3"), **kw),
             "ibcc": ibcc_params, "hpcc": hpcc_params, "swift": swift_params,
             "nscc": nscc_params}


def params_for(law, line_rate, **overrides):
    """A law's default parameters derived from the NIC line rate.

    DCQCN uses the line-rate-scaled ``"hpcc_ns3"`` set (``variant=`` picks another);
    every other law its only set.  The rules and their sources are in each law's module
    docstring, :data:`LINE_RATE_SCALING` and ``docs/cc_parameters.md``.

    Args:
      law: a :class:`Law` or its name.
      line_rate: NIC line rate, bytes/s (a scalar; ``fabric_jax.units.gbps(400)``).
      **overrides: keyword arguments of the law's builder (parameter fields,
        ``variant`` for DCQCN, ``rccc`` for NSCC, ``expected_flows`` for HPCC).

    Returns:
      the law's parameter pytree.

    Raises:
      ValueError: unknown law, bad line rate, or an override the builder refuses.
    """
    name = get(law).name
    if name not in _BUILDERS:
        raise ValueError(f"params_for: no line-rate defaults for law {name!r}; known: "
                         f"{sorted(_BUILDERS)}")
    if "link_gbps" in overrides:
        raise ValueError("params_for: give the rate as line_rate (bytes/s), not link_gbps")
    try:
        return _BUILDERS[name](line_rate=line_rate, **overrides)
    except TypeError as err:
        raise ValueError(f"params_for({name!r}): {err}") from None


__all__ = ["Law", "FlowSignals", "LinkView", "get", "LAWS", "LINE_RATE_SCALING", "params_for",
           "NONE", "none_params", "DCQCN", "DCQCNParams", "dcqcn_params", "IBCC", "IBCCParams",
           "ibcc_params", "HPCC", "HPCCParams", "hpcc_params", "SWIFT", "SwiftParams",
           "swift_params", "NSCC", "NSCCParams", "nscc_params", "DCTCP", "DCTCPParams",
           "dctcp_params"]
