"""Shared pieces of the HPCC-paper experiments (``hpcc_fct.py``, ``hpcc_incast.py``).

Setting of Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019
(Sec. 5.1) and of the authors' ns-3 simulator [HPCC-NS3]
(alibaba-edu/High-Precision-Congestion-Control, ``simulation/run.py``,
``mix/config.txt``):

* **Laws and parameters** (:func:`law_params`): ``dcqcn`` with the [HPCC-NS3]
  ``run.py --cc dcqcn`` "Mellanox" parameters scaled to the NIC speed
  (:func:`fabric_jax.cc.dcqcn_params` ``"hpcc_ns3"``: K_min/K_max 100/400 KB x bw/25G,
  P_max 0.2, timer 300 us, R_AI 5 Mb/s x bw/25G); ``hpcc`` with eta 0.95, maxStage 0,
  R_AI 10 Mb/s x bw/25G (:func:`fabric_jax.cc.hpcc_params`).  Any other law of
  :data:`fabric_jax.cc.LAWS` runs with its own defaults (``link_gbps`` passed when the
  law's parameter builder accepts it).
* **Routing** (:func:`ecmp_incidence`): per-flow ECMP, each flow hashed onto one of its
  equal-cost shortest paths hop by hop (:func:`fabric_jax.routing.ecmp_choice`), as the
  ns-3 switches hash the 5-tuple.
* **Flow control**: PFC (lossless), with the ingress pool of each link equal to the
  downstream switch's per-port share of its 32 MB buffer (:mod:`fabric_jax.ns3`).
* **Timing**: each flow's ``latency`` is its path's one-way propagation (sum of link
  latencies) and its feedback delay ``base_rtt`` twice that.

Only the public API is used (``fabric_jax.simulate_fluid``, ``fabric_jax.cc``), so the
experiments follow the engine and the laws as they evolve.
"""

from __future__ import annotations

import inspect

import numpy as np

import fabric_jax as fj
from fabric_jax import cc
from fabric_jax.routing import ecmp_choice
from fabric_jax.units import gbps

#: Laws of the paper's comparison; the others run as extra rows.
PAPER_LAWS = ("dcqcn", "hpcc")


def law_params(name: str, link_gbps: float):
    """Parameters of law ``name`` for NICs of ``link_gbps`` (see the module docstring)."""
    if name == "dcqcn":
        return cc.dcqcn_params("hpcc_ns3", link_gbps=link_gbps)
    if name == "hpcc":  # [HPCC-NS3] run.py: rate AI = 10 Mb/s x bw / 25 Gb/s
        return cc.hpcc_params(link_gbps=link_gbps, r_ai=gbps(0.010 * link_gbps / 25.0))
    if name not in cc.LAWS:
        raise ValueError(f"--cc: unknown law {name!r}; known: {sorted(cc.LAWS)}")
    build = cc.LAWS[name].default_params
    try:
        takes_speed = "link_gbps" in inspect.signature(build).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        takes_speed = False
    return build(link_gbps=link_gbps) if takes_speed else build()


def parse_laws(text: str) -> list[str]:
    """``"dcqcn,hpcc"`` -> ``["dcqcn", "hpcc"]``; ValueError naming ``--cc`` if unknown."""
    names = [s.strip() for s in str(text).split(",") if s.strip()]
    if not names:
        raise ValueError("--cc: give at least one law, e.g. --cc dcqcn,hpcc")
    bad = [n for n in names if n not in cc.LAWS]
    if bad:
        raise ValueError(f"--cc: unknown law(s) {bad}; known: {sorted(cc.LAWS)}")
    return names


def ecmp_incidence(topo, src, dst, seed: int = 0):
    """Per-flow ECMP routes of flows ``src -> dst`` (host indices).

    Returns:
      ``(incidence, one_way_latency)``: the :class:`fabric_jax.Incidence` of each flow
      on its hashed path (entries in hop order) and ``[flows]`` seconds of propagation
      along it.
    """
    src = np.asarray(src)
    dst = np.asarray(dst)
    paths = fj.shortest_paths(topo, src, dst, max_paths=64, seed=seed)
    rng = np.random.default_rng(seed)
    sport = rng.integers(1024, 65536, size=src.size)
    choice = ecmp_choice(paths, rng.integers(0, 2**31 - 1, size=8), sport)
    one = paths.select(choice.astype(np.int64))
    latency = one.latency(topo)[:, 0]
    return fj.Incidence.from_paths(one, n_links=topo.n_links), latency


def pfc_pool(topo) -> np.ndarray:
    """``[links]`` PFC ingress pool of each link: its downstream end's port share, bytes.

    The pool of link ``k`` lives in the switch it enters; that switch's per-port buffer
    is the egress buffer of the reverse link (:mod:`fabric_jax.ns3`).
    """
    rev = topo.link_reverse
    return np.where(rev >= 0, topo.buffer[np.maximum(rev, 0)], topo.buffer)


def run_fluid(topo, inc, latency, size, *, law: str, link_gbps: float, dt: float,
              n_steps: int, arrival=None, save_every=None, max_active=None):
    """One :func:`fabric_jax.simulate_fluid` run in the HPCC setting (PFC, ECMP); with
    ``max_active`` on that many flow slots (:func:`fabric_jax.simulate_fluid_windowed`,
    same results, cost follows the flows in the fabric at once)."""
    kw = dict(dt=dt, n_steps=int(n_steps), law=law,
              params=law_params(law, link_gbps), arrival=arrival, latency=latency,
              base_rtt=np.maximum(2.0 * latency, dt), flow_control="pfc",
              buffer=pfc_pool(topo))
    if max_active:
        return fj.simulate_fluid_windowed(inc, topo.capacity, np.asarray(size, float),
                                          max_active=int(max_active), **kw)
    return fj.simulate_fluid(inc, topo.capacity, np.asarray(size, float),
                             save_every=save_every, **kw)
