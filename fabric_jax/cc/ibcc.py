"""InfiniBand congestion control (IBTA vol. 1 annex A10) as a fluid law.

Mechanism ([OPENSM], [MLNX-CCMGR], Linux ``hfi1`` ``process_becn``/``set_link_ipg``;
``congestion-control.md`` sec. 2):

* switch: a port whose queue exceeds a threshold marks FECN on eligible packets, on
  average one in ``1 + marking_rate``; with ``victim_mask`` a port that is *blocked*
  (out of credits / paused) marks as well;
* receiver: returns a BECN for every FECN;
* sender: each BECN raises the congestion-control table index by ``ccti_increase``
  (up to ``ccti_limit``); every ``ccti_timer`` it drops by one (not below ``ccti_min``);
  the rate is ``line_rate / (1 + IPD(CCTI))`` with the inter-packet delay ``IPD`` (in
  packet times) read from the CC table.

Fluid form (``congestion-control.md`` sec. 2.3): with ``m`` the path FECN probability
and ``R~`` the flow's rate one feedback delay ago,

    dCCTI/dt = ccti_increase * (R~/S) * m  -  1[CCTI > ccti_min] / ccti_timer,

CCTI continuous and the table interpolated linearly between integer indices.  At
equilibrium the marking rate equals ``S / (r * ccti_increase * ccti_timer)``.

Defaults and their sources (``docs/cc_parameters.md``): the CC table is the
LLNL/Simula ``simula_llnl`` table (128 entries, shift 3, multiplier
``floor((7 i^2/106^2)/0.408)``: IPD from 0 to 3 packet times, i.e. down to 25 % of line
rate) [OPENSM]; ``ccti_increase`` 1, ``ccti_min`` 0 and ``marking_rate`` 10 (0xA: on
average one eligible packet in 11 is marked) are the Mellanox CC manager defaults
[MLNX-CCMGR]; ``victim_mask`` on (LLNL sets every port [OPENSM]); 2 KB packets (IB MTU
2048, an assumption: NDR links also run 4 KB).  The annex's Threshold (0-15) to
buffer-level mapping is not public: the vendor default 0xF is "most aggressive", here a
16 KB queue (about 8 packets, an assumption, not scaled with the rate: a cut-through
port marks within a few packets whatever its speed).

Line rate: ``ccti_timer`` is 30 us at 40 Gb/s (4x QDR, the OMNeT++ IB CC example
configurations [IBMODEL]) and scales as ``40 Gb/s / B`` (7.5 us at 160, 3 us at 400
Gb/s).  The vendor's manager computes the timer from the fabric size by an unpublished
formula [MLNX-CCMGR]; the rule used here is this model's assumption, chosen because it
keeps the mechanism's two rate-free quantities fixed: the equilibrium FECN fraction
``S / (R ccti_increase ccti_timer)`` and the time a congestion episode keeps a flow
throttled (BECNs arrive ``R/S`` times faster, the timer returns them ``R`` times faster).
The CC table is in packet times, so it needs no scaling.  Only switch egress ports mark
(``switch_port``, see :func:`switch_port_mask`).

Behaviour to expect (measured in the compare study, pinned in ``tests/dynamics/test_cc.py``): an
uncongested flow is never slowed (no queue, no mark: line rate); a congestion episode
charges the CCTI fast -- at 50 GB/s with 2 KB packets and every eligible packet
marked one in 11 times, about 2.3 indices per microsecond -- while the timer returns it
by one index per ``ccti_timer``, and the LLNL table inserts no delay below index 26.  So
a flow that crossed a hot spot for a few tens of microseconds stays throttled long
after the hot spot has gone (from index 127 back to 26 takes ``101 ccti_timer``: 3 ms at
the 40 Gb/s reference, 0.3 ms at 400 Gb/s).  This asymmetry is the mechanism's:
the marking rate and increase are the vendor settings above; a shorter timer or a
gentler table (``cct``, ``ccti_timer``) trades this hangover for weaker control
(``docs/cc_parameters.md``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import smooth as sm
from ..units import KB, US
from ._linerate import resolve_gbps, scale
from .base import Law, register

__all__ = ["IBCCParams", "IBCCState", "IBCC", "ibcc_params", "llnl_cct", "switch_port_mask",
           "LINE_RATE_SCALING", "REFERENCE_GBPS"]

#: The line rate of the [IBMODEL] configurations that give ``ccti_timer`` = 30 us.
REFERENCE_GBPS = 40.0

#: Exponent ``e``: ``value(B) = value(40 Gb/s) (B / 40 Gb/s) ** e`` (``cct`` included,
#: element-wise).
LINE_RATE_SCALING = {"threshold": 0, "marking_rate": 0, "victim_mask": 0, "ccti_increase": 0,
                     "ccti_timer": -1, "ccti_min": 0, "ccti_limit": 0, "cct": 0, "packet": 0,
                     "switch_port": 0}


def switch_port_mask(topology) -> np.ndarray:
    """``[links]`` 1.0 where the link leaves a switch, 0.0 where it leaves a host (HCA).

    FECN is set by switches (the congestion point of annex A10; switch attributes
    ``SwitchCongestionSetting`` / ``SwitchPortCongestionSetting`` [OPENSM, MLNX-CCMGR],
    ``congestion-control.md`` sec. 2.1); an HCA does not mark its own packets.  In the
    fluid fabric a sender's excess over its max-min share waits in its first-hop egress
    queue, i.e. in the NIC (:mod:`fabric_jax.flowcontrol`), so without this mask that
    NIC backlog would be read as a congested switch port.  Pass it as
    ``ibcc_params(switch_port=switch_port_mask(topo))``
    (:func:`fabric_jax.compare.simulate_case` does).

    A link leaves a switch when its source node is not a host
    (``topology.node_is_host``), whatever the node numbering: graphs from
    :func:`fabric_jax.topology.from_edges` may number hosts after switches.
    """
    is_host = np.asarray(topology.node_is_host, bool)
    return (~is_host[np.asarray(topology.link_src)]).astype(float)


def llnl_cct(n: int = 128) -> np.ndarray:
    """LLNL/Simula CC table: inter-packet delay (packet times) of each index."""
    i = np.arange(n)
    mult = np.floor((7.0 * i**2 / 106.0**2) / 0.408)
    return mult * 2.0**-3


@dataclasses.dataclass(frozen=True)
class IBCCParams:
    """Attributes (leaves): threshold (bytes), marking_rate, victim_mask (0/1),
    ccti_increase, ccti_timer (s), ccti_min, ccti_limit, cct (``[entries]`` IPD in
    packet times), packet (bytes), switch_port (scalar or ``[links]``: 1 where the link's
    egress queue is a switch port that may set FECN, 0 for an HCA's own uplink)."""

    threshold: Any
    marking_rate: Any
    victim_mask: Any
    ccti_increase: Any
    ccti_timer: Any
    ccti_min: Any
    ccti_limit: Any
    cct: Any
    packet: Any
    switch_port: Any = 1.0


@dataclasses.dataclass(frozen=True)
class IBCCState:
    """Attributes: ``rate``, ``ccti``, ``line_rate``, each ``[flows]``."""

    rate: Any
    ccti: Any
    line_rate: Any


jax.tree_util.register_dataclass(IBCCParams)
jax.tree_util.register_dataclass(IBCCState)


def ibcc_params(*, line_rate=None, link_gbps=None, **overrides) -> IBCCParams:
    """Default IB CC parameters at a NIC line rate (see the module docstring).

    Args:
      line_rate: NIC line rate, bytes/s (or ``link_gbps`` in Gb/s; default 40 Gb/s,
        the reference of the timer rule).
      **overrides: field values of :class:`IBCCParams` (bytes, seconds).

    Raises:
      ValueError: unknown field, a bad CC table or ``ccti_limit``, bad line rate.
    """
    gb = resolve_gbps(line_rate, link_gbps, REFERENCE_GBPS, "ibcc_params")
    cct = llnl_cct()
    p = dict(threshold=16 * KB, marking_rate=10.0, victim_mask=1.0, ccti_increase=1.0,
             ccti_timer=scale(30 * US, gb, REFERENCE_GBPS, LINE_RATE_SCALING["ccti_timer"]),
             ccti_min=0.0, ccti_limit=float(cct.size - 1), cct=cct,
             packet=2 * KB, switch_port=1.0)
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown IB CC parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    if not isinstance(p["cct"], jax.core.Tracer):
        c = np.asarray(p["cct"], float)
        if c.ndim != 1 or c.size < 2 or np.any(c < 0):
            raise ValueError("cct must be a 1-D array of >= 2 non-negative inter-packet delays")
        if float(np.asarray(p["ccti_limit"])) > c.size - 1:
            raise ValueError(f"ccti_limit must be <= len(cct) - 1 = {c.size - 1}")
    dt = jnp.result_type(float)
    return IBCCParams(**{k: jnp.asarray(v, dt) for k, v in p.items()})


def _rate(ccti, line, params):
    ipd = jnp.interp(ccti, jnp.arange(params.cct.shape[0], dtype=ccti.dtype), params.cct)
    return line / (1.0 + ipd)


def _init(line_rate, params):
    line = jnp.asarray(line_rate)
    ccti = jnp.broadcast_to(params.ccti_min, line.shape).astype(line.dtype)
    return IBCCState(rate=_rate(ccti, line, params), ccti=ccti, line_rate=line)


def _step(state, signals, dt, params, smooth):
    becn = signals.rate / params.packet * signals.mark
    above = sm.step(state.ccti - params.ccti_min, smooth)
    dc = params.ccti_increase * becn - above / params.ccti_timer
    ccti = jnp.clip(state.ccti + dt * dc, params.ccti_min, params.ccti_limit)
    return IBCCState(rate=_rate(ccti, state.line_rate, params), ccti=ccti,
                     line_rate=state.line_rate)


def _mark(links, params, smooth):
    root = sm.step((links.queue - params.threshold) / params.threshold, smooth)
    pos = links.capacity > 0
    starved = jnp.where(pos, 1.0 - links.usable / jnp.where(pos, links.capacity, 1.0), 0.0)
    victim = params.victim_mask * sm.step(starved - 0.05, smooth)
    return params.switch_port * jnp.maximum(root, victim) / (1.0 + params.marking_rate)


IBCC = register(Law("ibcc", _init, _step, _mark, ibcc_params))
