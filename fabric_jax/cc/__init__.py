"""Congestion-control laws for the fluid fabric (:func:`fabric_jax.fluid.simulate_fluid`).

Each law is a :class:`Law` with ``init``/``step``/``mark``/``default_params``
(:mod:`fabric_jax.cc.base`); parameters are pytrees of traced leaves.

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

from .base import FlowSignals, Law, LinkView, get
from .none import NONE
from .dcqcn import DCQCN, DCQCNParams, dcqcn_params
from .ibcc import IBCC, IBCCParams, ibcc_params
from .hpcc import HPCC, HPCCParams, hpcc_params
from .swift import SWIFT, SwiftParams, swift_params
from .nscc import NSCC, NSCCParams, nscc_params

#: Every law by name.
LAWS = {law.name: law for law in (NONE, DCQCN, IBCC, HPCC, SWIFT, NSCC)}

__all__ = ["Law", "FlowSignals", "LinkView", "get", "LAWS", "NONE", "DCQCN", "DCQCNParams",
           "dcqcn_params", "IBCC", "IBCCParams", "ibcc_params", "HPCC", "HPCCParams",
           "hpcc_params", "SWIFT", "SwiftParams", "swift_params", "NSCC", "NSCCParams",
           "nscc_params"]
