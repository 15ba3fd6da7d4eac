"""The localisation problem: the model's constants, the host-side arrays of a problem
(paths, split, entries) and the diagnostic workload (:mod:`fabric_jax.optimize._locate`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...paths import shortest_paths
from ...routing import make_routing

ROUTINGS = ("ecmp", "spray", "adaptive")
#: The routing each preset runs natively (:mod:`fabric_jax.fabrics`).
PRESET_ROUTING = {"roce": "ecmp", "infiniband": "adaptive", "spectrum_x": "adaptive",
                  "uec": "spray"}
#: The preset's own names of the two counter kinds the model has.
PRESET_COUNTERS = {"roce": ("port bytes", "ECN marks + PFC pause time"),
                   "infiniband": ("PortXmitData", "FECN marks / PortXmitWait"),
                   "spectrum_x": ("port bytes", "congestion telemetry"),
                   "uec": ("port bytes", "ECN marks + trims")}
DEFAULT_STEPS = 300
PHI_MIN = 0.02
#: Soft-min temperature (log space) at the first and last step of the anneal.
TAU_START, TAU_END = 0.3, 0.003
#: A port counts as congested above this utilisation (of its capacity in force).
SATURATION = 0.999
#: Links re-fitted one at a time after the descent (the most degraded first), and the
#: factors tried per link in each of the fit's two grids.
REFIT_CANDIDATES, REFIT_GRID = 32, 9
#: Scale of the counters' robust residuals (fraction of capacity x time, of time).
COUNTER_SIGMA = 0.05
#: Largest loss fraction the inverse estimates, and the scale of its descent variable
#: (``p = LOSS_SCALE u``: one Adam step of ``u`` moves ``p`` by about
#: ``learning_rate x LOSS_SCALE``).
LOSS_MAX, LOSS_SCALE = 0.5, 0.05
#: Scale of the drop counters' robust residuals, as a fraction of the bytes carried.
LOSS_SIGMA = 1e-3
#: Reporting threshold on an estimated loss fitted with drop counters (0.2 %; without
#: drop counters the capacity threshold ``detect`` applies).
DETECT_LOSS = 2e-3


@dataclasses.dataclass(frozen=True, eq=False)
class LocateProblem:
    """Host-side arrays of a localisation problem (built by :func:`locate_problem`).

    Attributes:
      n_links, n_flows, n_hosts: sizes.
      capacity: ``[links]`` nominal capacity, bytes/s.
      size, latency, src: ``[flows]`` bytes, seconds (zero-load path latency), host.
      e_flow, e_path, e_link: ``[entries]`` one per (flow, path, hop) of a real path.
      u_flow, u_link: ``[pairs]`` one per (flow, link) the flow uses, in the order of
        their first entry (a sprayed flow crosses its NIC links on every path: one pair).
      n_paths: number of path slots per flow.
      routing: ``"ecmp"``, ``"spray"`` or ``"adaptive"``.
      split0: ``[flows, paths]`` split at nominal capacities.
      path_hops: ``[flows, paths, hops]`` link ids of the hops that set adaptive splits:
        -1 for padding and for a link that every path of the flow crosses (its NIC
        links), which cannot tell its paths apart.
      dt: time resolution of the model, s (counter periods must not be shorter).
    """

    n_links: int
    n_flows: int
    n_hosts: int
    capacity: np.ndarray
    size: np.ndarray
    latency: np.ndarray
    src: np.ndarray
    e_flow: np.ndarray
    e_path: np.ndarray
    e_link: np.ndarray
    n_paths: int
    routing: str
    split0: np.ndarray
    path_hops: np.ndarray
    path_mask: np.ndarray
    dt: float
    u_flow: np.ndarray
    u_link: np.ndarray


def diagnostic_workload(n_hosts: int, *, shifts: int = 4, size: float = 1e6,
                        hosts_per_leaf: int = 1):
    """``shifts`` concurrent permutations (a slice of an all-to-all): host ``h`` sends
    ``size`` bytes to ``(h + s * stride) mod n`` for ``s = 1..shifts`` with ``stride =
    hosts_per_leaf + 1`` (every flow leaves its leaf when ``hosts_per_leaf`` is the
    leaf size).  Returns ``(src, dst, size)`` arrays."""
    h = np.arange(n_hosts)
    stride = hosts_per_leaf + 1
    src = np.concatenate([h] * shifts)
    dst = np.concatenate([(h + s * stride) % n_hosts for s in range(1, shifts + 1)])
    keep = src != dst
    return src[keep].astype(np.int32), dst[keep].astype(np.int32), np.full(keep.sum(), float(size))


def locate_problem(topology, workload, *, routing: str = "ecmp", seed: int = 0,
                   dt: float = 1e-6, max_paths: int | None = None) -> LocateProblem:
    """Builds the host-side arrays (paths, split, entries) of a localisation problem.

    Args:
      topology: a :class:`fabric_jax.Topology`.
      workload: a :class:`fabric_jax.workloads.Workload` or ``(src, dst, size)``: flows
        that start together (arrivals and dependencies are not used).
      routing: one of :data:`ROUTINGS`.
      seed: ECMP hash seed.
      dt: the model's time resolution, s.
      max_paths: cap on candidate paths per flow (default every equal-cost path).

    Raises:
      ValueError: unknown routing, bad flows.
    """
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {list(ROUTINGS)}; got {routing!r}")
    if hasattr(workload, "src"):
        src, dst, size = workload.src, workload.dst, workload.size
    else:
        src, dst, size = workload
    src, dst = np.asarray(src, np.int32), np.asarray(dst, np.int32)
    size = np.broadcast_to(np.asarray(size, float), src.shape).copy()
    if src.ndim != 1 or src.size == 0 or np.any(size <= 0) or not np.all(np.isfinite(size)):
        raise ValueError("workload: flows need [flows] src, dst and sizes > 0 bytes")
    paths = shortest_paths(topology, src, dst, max_paths=max_paths, seed=seed)
    links = np.asarray(paths.links)
    hop = np.asarray(paths.hop_mask, bool) & (links >= 0)
    pmask = np.asarray(paths.path_mask, bool)
    if routing == "ecmp":
        split0 = np.asarray(make_routing("ecmp", paths, seed=seed).split, float)
    else:
        split0 = pmask / pmask.sum(axis=1, keepdims=True)
    f_i, p_i, _ = np.nonzero(hop)
    e_link = links[hop]
    keep = split0[f_i, p_i] > 0 if routing == "ecmp" else np.ones(f_i.size, bool)
    lat = paths.latency(topology)[:, 0]
    ph = np.where(hop, links, -1)
    # a link on every path of the flow (e.g. its NIC links) does not steer an adaptive
    # split: with it, a 400 Gb/s NIC would be every path's bottleneck and adaptive
    # routing would spray evenly whatever the fabric links' capacities
    on_path = ((ph[:, :, :, None, None] == ph[:, None, None, :, :])
               & (ph[:, :, :, None, None] >= 0)).any(axis=4)     # [flows, p, hops, q]
    shared = (on_path & pmask[:, None, None, :]).sum(axis=3) == pmask.sum(axis=1)[:, None, None]
    e_flow, e_link = f_i[keep].astype(np.int32), e_link[keep].astype(np.int32)
    # the (flow, link) pairs, each once, in the order of their first entry (so a
    # single-path problem's pairs are its entries, in the same order)
    _, first = np.unique(e_flow.astype(np.int64) * topology.n_links + e_link,
                         return_index=True)
    first = np.sort(first)
    return LocateProblem(
        n_links=int(topology.n_links), n_flows=int(src.size), n_hosts=int(topology.n_hosts),
        capacity=np.asarray(topology.capacity, float), size=size, latency=np.asarray(lat, float),
        src=src, e_flow=e_flow, e_path=p_i[keep].astype(np.int32),
        e_link=e_link, n_paths=int(links.shape[1]), routing=routing,
        split0=split0, path_hops=np.where(shared, -1, ph), path_mask=pmask, dt=float(dt),
        u_flow=e_flow[first], u_link=e_link[first])

