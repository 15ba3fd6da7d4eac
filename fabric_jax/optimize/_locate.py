"""Fault localisation as an inverse problem: which link is slow, from what an operator sees.

Setting.  A collective phase runs on a fabric: flows that start together (e.g. a slice
of an all-to-all, :func:`diagnostic_workload`).  One or more links may run at a
*capacity factor* ``phi_l < 1`` (a lane down, a flapping optic, an FEC-heavy link;
:mod:`fabric_jax.faults`).  The operator observes

* per-flow completion times (or per-rank completion: a rank finishes with its last
  flow), optionally noisy;
* per-port cumulative counters sampled every ``period_s``: transmitted **bytes**, and
  the **congested** time, the seconds the port held a standing queue -- the model's
  stand-in for each preset's congestion counter (RoCE: ECN marks and PFC pauses;
  InfiniBand: FECN marks / PortXmitWait; Spectrum-X: its telemetry; UEC: ECN marks and
  trims): :data:`PRESET_COUNTERS` names them; and optionally **dropped** bytes, the
  receiving port's error counter (Ethernet FCS errors, InfiniBand ``PortRcvErrors``).

Faults: a link at capacity factor ``phi_l`` (degraded), or a *lossy* link that drops the
fraction ``p_l`` of the bytes it carries (:func:`fabric_jax.faults.lossy_link`; a gray
failure).  A lossy link keeps its capacity: a flow crossing it sends at the same rate
but delivers ``(1 - p_l)`` of it (selective retransmission), so its completion stretches
by ``1 / (1 - p_l)`` whether or not the link is a bottleneck, and the link's error
counter grows by ``p_l`` of what it carries.

Forward model (flow level, the cheap model at 1,024 hosts; chosen over the fluid model
because one evaluation is a few segment sums over ``flows x paths x hops`` entries, so
hundreds of gradient steps fit in seconds, and over
:func:`fabric_jax.sim.simulate_flows_fixed_step` because a degradation is read from the
rates the flows get while they all run).  Routing gives each flow a split over its
candidate paths (``ecmp``: the hashed path of :func:`fabric_jax.routing.make_routing`;
``spray``: even; ``adaptive``: in proportion to each path's bottleneck capacity in
force over the links that tell the flow's paths apart (not its NIC links, which every
path crosses), the steady state of a router that equalises utilisation, an
approximation).
Then

* rates: exact weighted max-min (:func:`fabric_jax.max_min_fair`) for the **truth**
  (:func:`observe`); for the **inverse** the *fair-share bottleneck* model
  ``r_f = min_l phi_l C_l / W_l`` over the links the flow uses (``W_l`` the split-weighted
  number of flows on ``l``), with the min a soft-min whose temperature is annealed to
  zero.  Why not differentiate the max-min solve itself: its gradient reaches only the
  links that are bottlenecks *now*, so a degraded link that the current estimate does
  not make a bottleneck gets no gradient and descent blames the links that are; the
  soft-min gives every link on a slow flow's path a share of the blame, in proportion
  to how close it is to being the bottleneck.  The two models agree where every flow is
  held at the fair share of its tightest link; where max-min hands a link's leftover to
  the flows that can use it they differ (the fair-share model is slower), and that
  mismatch is inside every accuracy figure.
* completion ``T_f = S_f / (g_f r_f) + latency_f`` (first order: each flow at the rate it
  gets while every flow runs; exact for a flow held at its bottleneck to the end), with
  ``g_f = sum_p s_fp prod_{l in p} (1 - p_l)`` the fraction of what it sends that
  arrives (1 without lossy links).
* counters: ``bytes_l(t) = sum_f A_lf r_f min(t, T'_f)`` with ``T'_f = S_f / (g_f
  r_f)``; ``congested_l(t) = sat_l min(t, max_f T'_f)`` with ``sat_l`` 1 where the link is
  saturated; ``dropped_l(t) = p_l bytes_l(t)`` (exact for one lossy link per path; the
  losses upstream of a second lossy link are not subtracted from what it carries).

Inverse (:func:`locate`): Adam on ``theta`` with ``phi = 0.02 + 0.98 sigmoid(theta)``,
minimising the chi-square of the log completion times (and of the counters, scaled by
the port capacity x time) plus a sparsity prior ``lambda sum_l (1 - phi_l)``;
links are ranked by ``phi`` (most degraded first).  Then a **single-link refit**
(capacity faults, not ``lossy``): the :data:`REFIT_CANDIDATES` most degraded links are
each tried alone, every other link healthy, at its best factor (two log-spaced grids of
:data:`REFIT_GRID` factors in ``[PHI_MIN, 1]``, the hard min), scored by the misfit plus
the prior, and ranked first by that score, each reported at its refitted factor.  Why:
Adam steps every link at about the same pace whatever the number of flows behind its
gradient, so where one link explains a set of slow flows that several lightly used
links explain only together (under spraying a leaf's uplink against the NIC links of
the leaf's hosts: every flow crosses both), the descent ends with both degraded and
ranked by round-off; the refit asks which one link explains the observations, as the
prior intends.  A fault is reported when the descent's top estimate is degraded by
more than ``detect`` (default ``max(0.05, 3 noise)``).
With ``lossy=True`` (the default when the observation holds a non-zero drop counter)
each link also gets a loss ``p_l = LOSS_SCALE u_l`` fitted alongside ``phi`` (projected
descent: ``u`` starts at 0 and is clipped to ``[0, LOSS_MAX / LOSS_SCALE]`` after every
step, so a clean link's loss stays exactly 0 under the prior; a sigmoid, as for
``phi``, would start its gradient at ~``p`` and lose it), with the drop counters'
residuals ``p_l bytes_l - dropped_l`` over the observed ``bytes_l`` (pseudo-Huber, scale
:data:`LOSS_SIGMA`) and the same sparsity prior on ``p``; links are then ranked by the larger of
``(1 - phi_l) / detect`` and ``p_l / detect_loss`` (each estimate over its reporting
threshold), and a fault is reported when either exceeds its threshold.
Baselines: network tomography (:func:`tomography`: non-negative least squares over the
path-link incidence, the flows' log slowdown against the nominal model as the sum of
non-negative per-link terms, ``scipy.optimize.lsq_linear``) and vote counting
(:func:`vote_count`: every slow flow votes for its links, a link's score the voting
fraction of the flows through it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import jit
from ..fairness import max_min_fair
from ..incidence import Incidence
from ..paths import shortest_paths
from ..routing import make_routing

__all__ = ["LocateProblem", "LocateResult", "Observation", "locate", "locate_batch", "observe",
           "tomography",
           "vote_count", "diagnostic_workload", "locate_problem", "load_observation",
           "parse_observation", "ROUTINGS", "PRESET_ROUTING", "PRESET_COUNTERS",
           "DEFAULT_STEPS", "PHI_MIN", "LOSS_MAX", "DETECT_LOSS", "REFIT_CANDIDATES",
           "REFIT_GRID"]

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
#: Keys of an observation file; ``description`` and ``run`` (the record of the command
#: that wrote it, :mod:`fabric_jax.results`) are accepted and not read.
_OBS_KEYS = {"flows", "ranks", "counters", "noise", "description", "run"}


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


# ------------------------------------------------------------------ forward models
def _split(prob: LocateProblem, cap, tau):
    """``[flows, paths]`` split under capacities in force ``cap`` (adaptive: in
    proportion to each path's (soft) bottleneck capacity)."""
    if prob.routing != "adaptive":
        return jnp.asarray(prob.split0, cap.dtype)
    hops = jnp.asarray(prob.path_hops)
    # padded hops and paths get a large finite capacity (inf would make NaN gradients)
    big = jnp.max(cap) * 1e6 + 1.0
    c = jnp.where(hops >= 0, cap[jnp.maximum(hops, 0)], big)
    logc = jnp.log(jnp.maximum(c, 1e-30))
    if tau is None:
        bott = jnp.min(logc, axis=-1)
    else:
        m = jnp.min(logc, axis=-1, keepdims=True)
        bott = m[..., 0] - tau * jnp.log(jnp.sum(jnp.exp(-(logc - m) / tau), axis=-1))
    w = jnp.where(jnp.asarray(prob.path_mask), jnp.exp(bott - jnp.max(bott, axis=1,
                                                                       keepdims=True)), 0.0)
    return w / jnp.sum(w, axis=1, keepdims=True)


def _scaled_rates(prob: LocateProblem, cap, split, rate0, tau):
    """``r_f = r0_f softmin(1, min_l cap_l / load0_l)`` over the links the flow uses:
    each link whose capacity in force falls below its nominal load ``load0_l = sum_f
    A_lf r0_f`` slows every flow on it in proportion (log-space soft-min, temperature
    ``tau``; the hard min at ``tau -> 0``)."""
    ew = split[prob.e_flow, prob.e_path]
    load0 = jax.ops.segment_sum(ew * rate0[prob.e_flow], prob.e_link,
                                num_segments=prob.n_links)
    # each link of the flow once: a link crossed on every path (its NIC links under
    # spraying) is one constraint, not one per path (counted per path it took ~n_paths
    # times the soft-min's weight, and descent blamed the NIC links of a slow leaf's
    # hosts before the leaf's uplink that slowed them)
    x = (jnp.log(jnp.maximum(cap, 1e-30)) - jnp.log(jnp.maximum(load0, 1e-30)))[prob.u_link]
    m = jnp.minimum(jax.ops.segment_min(x, prob.u_flow, num_segments=prob.n_flows), 0.0)
    z = jax.ops.segment_sum(jnp.exp(-(x - m[prob.u_flow]) / tau), prob.u_flow,
                            num_segments=prob.n_flows) + jnp.exp(m / tau)
    return rate0 * jnp.exp(m - tau * jnp.log(z))


def _goodput(prob: LocateProblem, split, loss):
    """``[flows]`` fraction of the bytes a flow sends that arrive: ``sum_p s_fp
    prod_{l in p} (1 - p_l)`` over its paths (split ``s``), ``loss`` ``[links]``."""
    seg = prob.e_flow.astype(np.int64) * prob.n_paths + prob.e_path
    keep = jax.ops.segment_sum(jnp.log1p(-loss[prob.e_link]), seg,
                               num_segments=prob.n_flows * prob.n_paths)
    return jnp.sum(split * jnp.exp(keep).reshape(prob.n_flows, prob.n_paths), axis=1)


def _predict(prob: LocateProblem, rates, split, cap, times, sat=None, loss=None):
    """Completion times ``[flows]`` and cumulative counters ``[links, samples]``:
    ``(finish, bytes, congested, dropped)`` (``loss`` ``[links]``, default none)."""
    size = jnp.asarray(prob.size, rates.dtype)
    end = size / rates
    if loss is not None:
        end = end / _goodput(prob, split, loss)
    finish = end + jnp.asarray(prob.latency, rates.dtype)
    ew = split[prob.e_flow, prob.e_path]
    t = jnp.asarray(times, rates.dtype)
    sent = jnp.minimum(t[None, :], end[prob.e_flow][:, None])          # [entries, samples]
    bytes_ = jax.ops.segment_sum((ew * rates[prob.e_flow])[:, None] * sent, prob.e_link,
                                 num_segments=prob.n_links)
    if sat is None:
        load = jax.ops.segment_sum(ew * rates[prob.e_flow], prob.e_link,
                                   num_segments=prob.n_links)
        util = load / jnp.maximum(cap, 1e-30)
        sat = jax.nn.sigmoid((util - SATURATION + 0.004) / 0.002)
    busy = jax.ops.segment_max(jnp.where(ew > 0, end[prob.e_flow], 0.0), prob.e_link,
                               num_segments=prob.n_links)
    busy = jnp.maximum(busy, 0.0)
    congested = sat[:, None] * jnp.minimum(t[None, :], busy[:, None])
    dropped = (jnp.zeros_like(bytes_) if loss is None else loss[:, None] * bytes_)
    return finish, bytes_, congested, dropped


def _exact_rates(prob: LocateProblem, phi):
    """Exact weighted max-min rates ``[flows]`` at capacity factors ``phi``."""
    cap = jnp.asarray(prob.capacity * np.asarray(phi, float), jnp.result_type(float))
    split = _split(prob, cap, None)
    inc = _merge_entries(prob.e_link, prob.e_flow,
                         np.asarray(split, float)[prob.e_flow, prob.e_path],
                         prob.n_links, prob.n_flows)
    res = max_min_fair(inc, cap)
    return jnp.maximum(res.rates, 1e-30), res, split, cap


def truth(prob: LocateProblem, phi, times=(), loss=None):
    """The exact flow-level observation (max-min rates, hard saturation): ``(finish,
    bytes, congested, dropped)`` at capacity factors ``phi`` ``[links]`` and loss
    fractions ``loss`` ``[links]`` (default none)."""
    rates, res, split, cap = _exact_rates(prob, phi)
    if loss is not None:
        loss = jnp.asarray(np.asarray(loss, float), rates.dtype)
    return _predict(prob, rates, split, cap, np.asarray(times, float),
                    sat=jnp.asarray(res.saturated, rates.dtype), loss=loss)


def _merge_entries(link, flow, weight, n_links, n_flows) -> Incidence:
    """One entry per (link, flow) (a sprayed flow crosses its host links on every path)."""
    key = np.asarray(flow, np.int64) * n_links + np.asarray(link)
    uniq, inv = np.unique(key, return_inverse=True)
    ww = np.zeros(uniq.size)
    np.add.at(ww, inv, np.asarray(weight, float))
    keep = ww > 0
    return Incidence.from_coo((uniq[keep] % n_links).astype(np.int32),
                              (uniq[keep] // n_links).astype(np.int32),
                              np.minimum(ww[keep], 1.0), n_links=n_links, n_flows=n_flows)


# ------------------------------------------------------------------ observations
@dataclasses.dataclass(frozen=True)
class Observation:
    """What the operator observed (validated; see :func:`parse_observation`).

    Attributes:
      flow_idx, flow_finish: observed flows and their completion times, s.
      rank_idx, rank_finish: observed ranks (hosts) and their completion times, s.
      times: ``[samples]`` counter sampling instants, s (``k * period``).
      period: counter sampling period, s (0 without counters).
      link_idx: ``[observed links]``; bytes, congested: ``[observed links, samples]``
        cumulative.
      noise: the stated relative noise (0 if none).
      dropped: ``[observed links, samples]`` cumulative dropped bytes (the port's error
        counter; NaN where a link's is not given), or ``None`` (no drop counters).
    """

    flow_idx: np.ndarray
    flow_finish: np.ndarray
    rank_idx: np.ndarray
    rank_finish: np.ndarray
    times: np.ndarray
    period: float
    link_idx: np.ndarray
    bytes: np.ndarray
    congested: np.ndarray
    noise: float = 0.0
    dropped: np.ndarray | None = None

    def to_json(self) -> dict:
        d = dict(flows={str(int(f)): float(t) for f, t in zip(self.flow_idx, self.flow_finish)},
                 noise=float(self.noise))
        if self.rank_idx.size:
            d["ranks"] = {str(int(r)): float(t) for r, t in zip(self.rank_idx,
                                                                self.rank_finish)}
        if self.link_idx.size:
            d["counters"] = dict(period_s=float(self.period), links={
                str(int(l)): dict(bytes=self.bytes[i].tolist(),
                                  congested_s=self.congested[i].tolist(),
                                  **({} if self.dropped is None
                                     else dict(dropped=self.dropped[i].tolist())))
                for i, l in enumerate(self.link_idx)})
        return d


def _check_times(field, idx, vals, n, what):
    idx = np.asarray(idx)
    vals = np.asarray(vals, float)
    bad = (idx < 0) | (idx >= n)
    if np.any(bad):
        raise ValueError(f"observed.{field}: unknown {what} {idx[bad][:5].tolist()} (valid "
                         f"0 .. {n - 1}); every observation must match the workload")
    if np.any(~np.isfinite(vals)):
        raise ValueError(f"observed.{field}: NaN or infinite time for {what} "
                         f"{idx[~np.isfinite(vals)][:5].tolist()}; remove it or give the "
                         f"measured value")
    if np.any(vals <= 0):
        raise ValueError(f"observed.{field}: completion times must be > 0 s (from the "
                         f"phase's start); got {vals[vals <= 0][:5].tolist()} for {what} "
                         f"{idx[vals <= 0][:5].tolist()}")
    if np.unique(idx).size != idx.size:
        raise ValueError(f"observed.{field}: a {what} appears twice")
    return idx.astype(np.int32), vals


def _int_keys(field, d):
    if not isinstance(d, dict):
        raise ValueError(f"observed.{field} must be a table id -> value; got "
                         f"{type(d).__name__}")
    out = []
    for k in d:
        try:
            out.append(int(k))
        except (TypeError, ValueError):
            raise ValueError(f"observed.{field}: key {k!r} is not an integer id") from None
    return np.asarray(out, np.int64)


def parse_observation(obs: dict, prob: LocateProblem) -> Observation:
    """Validates an observation table against a problem (host side, before any solve).

    Format (JSON)::

        {"flows": {"<flow index>": finish_s, ...},          # and/or
         "ranks": {"<host index>": finish_s, ...},
         "counters": {"period_s": P,
                      "links": {"<link id>": {"bytes": [cumulative at P, 2P, ...],
                                              "congested_s": [cumulative, ...],
                                              "dropped": [cumulative bytes, ...]}}},
         "noise": 0.05}                                     # optional

    ``description`` and ``run`` (what wrote the file) may be present; they are ignored.

    Raises:
      ValueError: naming the field: an unknown key, flow, rank or link; NaN, negative or
        zero times; counters (``bytes``, ``congested_s``, ``dropped``: each optional per
        link) that decrease (non-monotone) or differ in length; a
        sampling period below the model's step ``dt``; nothing observed.
    """
    if not isinstance(obs, dict):
        raise ValueError("observed must be a JSON object (table)")
    unknown = set(obs) - _OBS_KEYS
    if unknown:
        raise ValueError(f"observed: unknown key(s) {sorted(unknown)}; accepted: "
                         f"{sorted(_OBS_KEYS)} (nothing observed is dropped)")
    noise = obs.get("noise", 0.0)
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and 0 <= noise < 1):
        raise ValueError(f"observed.noise must be a relative noise in [0, 1); got {noise!r}")
    fl = obs.get("flows", {})
    f_idx, f_fin = _check_times("flows", _int_keys("flows", fl), list(fl.values()),
                                prob.n_flows, "flow")
    rk = obs.get("ranks", {})
    r_idx, r_fin = _check_times("ranks", _int_keys("ranks", rk), list(rk.values()),
                                prob.n_hosts, "rank")
    if r_idx.size:
        ranks_with_flows = np.unique(prob.src)
        missing = np.setdiff1d(r_idx, ranks_with_flows)
        if missing.size:
            raise ValueError(f"observed.ranks: rank(s) {missing[:5].tolist()} send no flow "
                             f"in this workload (unknown ranks)")
    times = np.zeros(0)
    period = 0.0
    l_idx = np.zeros(0, np.int32)
    by = cg = np.zeros((0, 0))
    dr = None
    if "counters" in obs:
        c = obs["counters"]
        if not isinstance(c, dict) or set(c) - {"period_s", "links"} or "links" not in c:
            raise ValueError("observed.counters must be {period_s: s, links: {id: {bytes: "
                             "[...], congested_s: [...], dropped: [...]}}}")
        period = c.get("period_s")
        if not (isinstance(period, (int, float)) and math.isfinite(period) and period > 0):
            raise ValueError(f"observed.counters.period_s must be a sampling period > 0 s; "
                             f"got {period!r}")
        if period < prob.dt * (1 - 1e-9):
            raise ValueError(f"observed.counters.period_s = {period:g} s is below the "
                             f"model's step dt = {prob.dt:g} s; sample at >= dt or pass a "
                             f"smaller dt")
        links = c["links"]
        l_idx = _int_keys("counters.links", links)
        bad = (l_idx < 0) | (l_idx >= prob.n_links)
        if np.any(bad):
            raise ValueError(f"observed.counters.links: unknown link(s) "
                             f"{l_idx[bad][:5].tolist()} (valid 0 .. {prob.n_links - 1})")
        rows_b, rows_c, rows_d, n_s = [], [], [], None
        for key, rec in links.items():
            if (not isinstance(rec, dict) or set(rec) - {"bytes", "congested_s", "dropped"}
                    or not rec):
                raise ValueError(f"observed.counters.links[{key}] must hold 'bytes', "
                                 f"'congested_s' and/or 'dropped' lists; got {rec!r}")
            arrs = {}
            for name in ("bytes", "congested_s", "dropped"):
                if name in rec:
                    a = np.asarray(rec[name], float)
                    if a.ndim != 1 or a.size == 0:
                        raise ValueError(f"observed.counters.links[{key}].{name} must be a "
                                         f"non-empty list of cumulative samples")
                    if not np.all(np.isfinite(a)):
                        raise ValueError(f"observed.counters.links[{key}].{name} holds NaN "
                                         f"or infinite samples")
                    if np.any(a < 0):
                        raise ValueError(f"observed.counters.links[{key}].{name} holds "
                                         f"negative samples")
                    if np.any(np.diff(a) < 0):
                        raise ValueError(f"observed.counters.links[{key}].{name} is "
                                         f"non-monotone: cumulative counters never decrease")
                    arrs[name] = a
            lens = {a.size for a in arrs.values()}
            if len(lens) != 1 or (n_s is not None and lens != {n_s}):
                raise ValueError(f"observed.counters.links[{key}]: every counter list must "
                                 f"have the same number of samples")
            n_s = lens.pop()
            rows_b.append(arrs.get("bytes", np.full(n_s, np.nan)))
            rows_c.append(arrs.get("congested_s", np.full(n_s, np.nan)))
            rows_d.append(arrs.get("dropped", np.full(n_s, np.nan)))
        times = period * np.arange(1, (n_s or 0) + 1)
        by, cg = np.array(rows_b), np.array(rows_c)
        if any("dropped" in rec for rec in links.values()):
            dr = np.array(rows_d)
        l_idx = l_idx.astype(np.int32)
    if f_idx.size + r_idx.size == 0 and l_idx.size == 0:
        raise ValueError("observed: nothing observed (no flows, ranks or counters)")
    return Observation(f_idx, f_fin, r_idx, r_fin, times, float(period), l_idx, by, cg,
                       float(noise), dr)


def load_observation(path, prob: LocateProblem) -> Observation:
    """Reads and validates an observation JSON file (:func:`parse_observation`)."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"observed file {path}: not JSON ({err})") from None
    return parse_observation(data, prob)


def observe(prob: LocateProblem, phi, *, noise: float = 0.0, seed: int = 0,
            counters: bool = True, ranks: bool = False, period: float | None = None,
            n_samples: int = 4, loss=None, drops: bool | None = None) -> Observation:
    """Synthetic observations of a planted fault (the exact flow-level model,
    :func:`truth`), with multiplicative Gaussian noise of relative size ``noise`` on
    every time and counter (clipped to keep times positive and counters monotone).

    Args:
      phi: ``[links]`` capacity factors in force (1 = healthy).
      counters: include per-port counters of every link.
      ranks: per-rank completion times instead of per-flow ones.
      period: counter sampling period, s (default: the earliest flow completion /
        ``n_samples``, rounded down to a multiple of ``prob.dt``, at least ``dt``).
      loss: ``[links]`` fraction of the carried bytes each link drops (lossy links;
        default none).
      drops: include every link's drop (error) counter with the counters (default:
        when ``loss`` is given).
    """
    rng = np.random.default_rng(seed)
    fin0 = truth(prob, np.ones(prob.n_links))[0]
    if period is None:
        first = float(np.min(np.asarray(fin0)))
        period = max(prob.dt, math.floor(first / n_samples / prob.dt) * prob.dt)
    times = period * np.arange(1, n_samples + 1) if counters else np.zeros(0)
    fin, by, cg, dr = (np.asarray(a, float) for a in truth(prob, phi, times, loss=loss))
    drops = (loss is not None) if drops is None else bool(drops)

    def noisy(x):
        return x * np.maximum(1.0 + noise * rng.standard_normal(x.shape), 0.05)

    obs_f = noisy(fin)
    f_idx = np.arange(prob.n_flows, dtype=np.int32)
    r_idx = np.zeros(0, np.int32)
    r_fin = np.zeros(0)
    if ranks:
        hosts = np.unique(prob.src)
        r_fin = np.array([obs_f[prob.src == h].max() for h in hosts])
        r_idx, f_idx, obs_f = hosts.astype(np.int32), np.zeros(0, np.int32), np.zeros(0)
    if counters:
        inc_b = np.diff(by, axis=1, prepend=0.0)
        inc_c = np.diff(cg, axis=1, prepend=0.0)
        inc_d = np.diff(dr, axis=1, prepend=0.0)
        by = np.cumsum(np.maximum(noisy(inc_b), 0.0), axis=1)
        dr = np.cumsum(np.maximum(noisy(inc_d), 0.0), axis=1) if drops else None
        cg = np.cumsum(np.clip(inc_c + noise * period * rng.standard_normal(inc_c.shape),
                               0.0, period), axis=1)
        l_idx = np.arange(prob.n_links, dtype=np.int32)
    else:
        l_idx, by, cg = np.zeros(0, np.int32), np.zeros((0, 0)), np.zeros((0, 0))
        dr = None
    return Observation(f_idx, obs_f, r_idx, r_fin, times if counters else np.zeros(0),
                       float(period if counters else 0.0), l_idx, by, cg, float(noise), dr)


# ------------------------------------------------------------------ inverse
@dataclasses.dataclass(frozen=True)
class LocateResult:
    """Links ranked by estimated capacity factor (most degraded first).

    Attributes:
      ranking: ``[links]`` link ids, most degraded first (with ``loss``: by the larger
        of ``(1 - factor) / detect`` and ``loss / detect_loss``).
      factor: ``[links]`` estimated capacity factor of each link (by link id).
      fault: whether a fault is reported (top degradation above ``detect``, or top
        loss above ``detect_loss``).
      confidence: ``(d1 - d2) / d1`` with ``d1, d2`` the two largest estimated
        degradations ``1 - phi`` (each over its threshold with ``loss``; 0 when no fault
        is reported): how clearly the top link stands out.
      detect: the reporting threshold on ``1 - phi``.
      evaluations: forward-model evaluations: the descent's steps (each with its
        gradient) plus the single-link refit's (without).
      wall_time: seconds, compilation included.
      method: ``"gradient"``, ``"tomography"`` or ``"vote"``.
      loss: final value of the objective (gradient method).
      link_loss: ``[links]`` estimated fraction of the carried bytes each link drops
        (``lossy`` localisations), else ``None``.
      detect_loss: the reporting threshold on ``link_loss``.
    """

    ranking: np.ndarray
    factor: np.ndarray
    fault: bool
    confidence: float
    detect: float
    evaluations: int
    wall_time: float
    method: str
    loss: float = float("nan")
    link_loss: np.ndarray | None = None
    detect_loss: float = float("nan")

    def top(self, k: int = 5) -> list:
        """``[(link, factor), ...]`` of the ``k`` most degraded links."""
        return [(int(l), float(self.factor[l])) for l in self.ranking[:k]]

    def to_dict(self) -> dict:
        d = dict(method=self.method, fault=bool(self.fault), confidence=self.confidence,
                 detect=self.detect, evaluations=self.evaluations,
                 wall_time=self.wall_time, loss=self.loss, top=self.top(10))
        if self.link_loss is not None:
            d.update(detect_loss=self.detect_loss, top_loss=[
                (int(l), float(self.link_loss[l])) for l in self.ranking[:10]])
        return d


def _confidence(score, detect):
    order = np.argsort(-score, kind="stable")
    d1 = float(score[order[0]])
    d2 = float(score[order[1]]) if score.size > 1 else 0.0
    fault = d1 > detect
    return order, fault, ((d1 - d2) / d1 if fault and d1 > 0 else 0.0)


def locate(topology, workload, observed, preset: str = "roce", *, routing: str | None = None,
           steps: int = DEFAULT_STEPS, learning_rate: float = 0.1, sparsity: float = 1.0,
           detect: float | None = None, seed: int = 0, dt: float = 1e-6,
           problem: LocateProblem | None = None, lossy: bool | None = None) -> LocateResult:
    """Ranks links by estimated capacity factor from observed completion times and
    counters, by gradient descent through the flow-level model (module docstring).

    Args:
      topology: the :class:`fabric_jax.Topology`.
      workload: the flows that ran (:func:`locate_problem`).
      observed: an :class:`Observation`, a dict in the JSON format of
        :func:`parse_observation`, or the path of such a JSON file.
      preset: decides the routing when ``routing`` is ``None``
        (:data:`PRESET_ROUTING`).
      routing: ``"ecmp"``, ``"spray"`` or ``"adaptive"``.
      steps: Adam steps (each one model evaluation with its gradient).
      learning_rate: Adam's step on the logits of ``phi``.
      sparsity: weight ``lambda`` of the prior ``sum_l (1 - phi_l)`` (chi-square units).
      detect: reporting threshold on ``1 - phi`` (default ``max(0.05, 3 noise)``).
      seed: ECMP hash seed (must be the run's).
      dt: the model's time step, s (counters sampled faster are refused).
      problem: a prebuilt :class:`LocateProblem` (then topology/workload are not used).
      lossy: also fit a loss fraction per link (lossy links); default: when the
        observation holds a drop counter with a non-zero sample.

    Returns:
      :class:`LocateResult`.

    Raises:
      ValueError: before any solve: unknown preset or routing; an observation that does
        not match (unknown flows, ranks or links, NaN, negative or non-monotone values,
        a sampling period below ``dt``).
    """
    t0 = time.perf_counter()
    if preset not in PRESET_ROUTING:
        raise ValueError(f"preset must be one of {sorted(PRESET_ROUTING)}; got {preset!r}")
    routing = PRESET_ROUTING[preset] if routing is None else routing
    if problem is None:
        problem = locate_problem(topology, workload, routing=routing, seed=seed, dt=dt)
    prob = problem
    if isinstance(observed, (str, Path)):
        obs = load_observation(observed, prob)
    elif isinstance(observed, dict):
        obs = parse_observation(observed, prob)
    elif isinstance(observed, Observation):
        obs = observed
    else:
        raise ValueError("observed must be an Observation, a dict or a JSON file path")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1; got {steps!r}")
    return locate_batch(prob, [obs], steps=steps, learning_rate=learning_rate,
                        sparsity=sparsity, detect=detect, lossy=lossy, _t0=t0)[0]


def _obs_arrays(obs: Observation) -> dict:
    drop = obs.dropped if obs.dropped is not None else np.full(obs.bytes.shape, np.nan)
    return dict(
        f_idx=np.asarray(obs.flow_idx, np.int32), f_log=np.log(obs.flow_finish),
        r_log=np.log(obs.rank_finish), l_idx=np.asarray(obs.link_idx, np.int32),
        bytes=np.nan_to_num(obs.bytes), b_ok=np.isfinite(obs.bytes),
        cong=np.nan_to_num(obs.congested), c_ok=np.isfinite(obs.congested),
        drop=np.nan_to_num(drop), d_ok=np.isfinite(drop),
        sig=np.asarray(max(obs.noise, 0.01)))


def _has_drops(obs: Observation) -> bool:
    return obs.dropped is not None and bool(np.any(np.nan_to_num(obs.dropped) > 0))


def locate_batch(problem: LocateProblem, observations: list, *, steps: int = DEFAULT_STEPS,
                 learning_rate: float = 0.1, sparsity: float = 1.0,
                 detect: float | None = None, lossy: bool | None = None, _t0=None) -> list:
    """:func:`locate` for many observations of one problem at once (``vmap`` over the
    observations; they must share their layout: the same observed flows, ranks, links
    and sampling instants).  Returns one :class:`LocateResult` per observation (each
    ``wall_time`` is the batch's over its size).  ``lossy`` (default: when any
    observation holds a non-zero drop counter) fits a loss per link too."""
    t0 = time.perf_counter() if _t0 is None else _t0
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1; got {steps!r}")
    first = observations[0]
    has = (bool(first.flow_idx.size), bool(first.rank_idx.size), bool(first.link_idx.size))
    for o in observations[1:]:
        if not (np.array_equal(o.flow_idx, first.flow_idx)
                and np.array_equal(o.rank_idx, first.rank_idx)
                and np.array_equal(o.link_idx, first.link_idx)
                and np.array_equal(o.times, first.times)):
            raise ValueError("locate_batch: observations must share their layout (flows, "
                             "ranks, links, sampling instants)")
    if lossy is None:
        lossy = any(_has_drops(o) for o in observations)
    drops = bool(lossy) and all(o.dropped is not None for o in observations)
    run = _solver(problem, has + (bool(lossy), drops), tuple(np.round(first.times, 15)),
                  tuple(first.rank_idx.tolist()), int(steps), float(learning_rate))
    dtype = jnp.result_type(float)
    stacked = {k: np.stack([_obs_arrays(o)[k] for o in observations])
               for k in _obs_arrays(first)}
    stacked = {k: jnp.asarray(v, dtype if v.dtype.kind == "f" else v.dtype)
               for k, v in stacked.items()}
    (theta, u), value, refits = jax.vmap(run, in_axes=(0, None))(
        stacked, jnp.asarray(sparsity, dtype))
    phis = np.asarray(PHI_MIN + (1 - PHI_MIN) * jax.nn.sigmoid(theta), float)
    refits = ([None] * len(phis) if refits is None
              else list(zip(*(np.asarray(a) for a in refits))))
    losses = np.asarray(LOSS_SCALE * u, float) if lossy else [None] * len(phis)
    wall = (time.perf_counter() - t0) / len(observations)
    out = []
    for phi, loss, v, o, rf in zip(phis, losses, np.asarray(value), observations, refits):
        thr = max(0.05, 3 * o.noise) if detect is None else float(detect)
        if loss is None:
            order, fault, conf = _confidence(1.0 - phi, thr)
            thr_loss = float("nan")
            if rf is not None:
                # the refitted candidates first, best single-link fit first (ties:
                # the descent's order), each at its refitted factor
                cand, sc, g = rf
                by = np.argsort(sc, kind="stable")
                cand, g = cand[by], g[by]
                order = np.concatenate([cand, order[~np.isin(order, cand)]])
                phi = phi.copy()
                phi[cand] = g
        else:
            thr_loss = DETECT_LOSS if drops else thr
            order, fault, conf = _confidence(np.maximum((1.0 - phi) / thr, loss / thr_loss),
                                             1.0)
        n_eval = int(steps) + (0 if rf is None else 2 * REFIT_GRID * len(rf[0]))
        out.append(LocateResult(order, phi, bool(fault), float(conf), thr, n_eval, wall,
                                "gradient", float(v), loss, thr_loss))
    return out


_SOLVERS: dict = {}


def _solver(prob: LocateProblem, has, times, ranks, steps, learning_rate):
    """The whole descent as one jitted ``lax.scan`` (cached per problem and observation
    layout, so many observations of one problem share a compilation)."""
    import optax

    key = (id(prob), has, times, ranks, steps, learning_rate)
    hit = _SOLVERS.get(key)
    if hit is not None and hit[0] is prob:
        return hit[1]
    has_f, has_r, has_c, lossy, has_d = has
    times = np.asarray(times, float)
    cap0 = jnp.asarray(prob.capacity, jnp.result_type(float))
    r_idx = np.asarray(ranks, np.int64)
    rank_of = jnp.asarray(np.searchsorted(r_idx, prob.src)) if has_r else None
    rank_valid = jnp.asarray(np.isin(prob.src, r_idx)) if has_r else None
    n_ranks = max(int(r_idx.size), 1)
    # nominal rates: exact max-min at nominal capacities (the model is exact there)
    rate0 = _exact_rates(prob, np.ones(prob.n_links))[0]
    t_row = jnp.asarray(times, cap0.dtype)[None, :]

    def predict(phi, p_loss, tau):
        cap = cap0 * phi
        split = _split(prob, cap, tau)
        rates = _scaled_rates(prob, cap, split, rate0, tau)
        return _predict(prob, rates, split, cap, times, loss=p_loss)

    def loss(params, tau, obs, sparsity):
        theta, u = params
        phi = PHI_MIN + (1 - PHI_MIN) * jax.nn.sigmoid(theta)
        p_loss = LOSS_SCALE * u if lossy else None
        prior = jnp.sum(1.0 - phi) + (jnp.sum(p_loss) if lossy else 0.0)
        return misfit(phi, p_loss, tau, obs) + sparsity * prior

    def misfit(phi, p_loss, tau, obs):
        sig = obs["sig"]
        fin, by, cg, dr = predict(phi, p_loss, tau)
        chi = 0.0
        if has_f:
            chi = chi + jnp.sum((jnp.log(fin[obs["f_idx"]]) - obs["f_log"]) ** 2)
        if has_r:
            rf = jax.ops.segment_max(jnp.where(rank_valid, fin, 0.0), rank_of,
                                     num_segments=n_ranks)
            chi = chi + jnp.sum((jnp.log(rf) - obs["r_log"]) ** 2)
        rob = 0.0
        if has_c:
            li = obs["l_idx"]
            rb = (by[li] - obs["bytes"]) / (cap0[li][:, None] * t_row)
            rc = (cg[li] - obs["cong"]) / t_row
            # robust (Cauchy) terms: where the fair-share model cannot follow max-min's
            # redistribution the residual is large, and must not outvote the rest
            sc = jnp.maximum(sig, COUNTER_SIGMA)
            rob = (jnp.sum(jnp.where(obs["b_ok"], jnp.log1p((rb / sc) ** 2), 0.0))
                   + jnp.sum(jnp.where(obs["c_ok"], jnp.log1p((rc / sc) ** 2), 0.0)))
            if has_d:
                # a port's drops over the bytes it carried (observed where given, else
                # the model's) estimate its loss directly, whatever the rates; the
                # residual is pseudo-Huber, not Cauchy: a lossy link starts 15 sigma away
                # (1.5 % at p = 0), where a Cauchy gradient has faded and the flow times'
                # terms of the anneal's first steps hold p at 0 (tried at 1,024 hosts)
                seen = jnp.where(obs["b_ok"], obs["bytes"], by[li])
                carried = jnp.maximum(seen, 1e-3 * cap0[li][:, None] * t_row)
                rd = (p_loss[li][:, None] * seen - obs["drop"]) / carried / LOSS_SIGMA
                rob = rob + jnp.sum(jnp.where(obs["d_ok"],
                                              2.0 * (jnp.sqrt(1.0 + rd ** 2) - 1.0), 0.0))
        return chi / sig ** 2 + rob

    opt = optax.adam(learning_rate)
    grad = jax.value_and_grad(loss)

    def run(obs, sparsity):
        theta = jnp.full((prob.n_links,), 4.0, cap0.dtype)
        theta = (theta, jnp.zeros((prob.n_links,) if lossy else (0,), cap0.dtype))

        def step(carry, i):
            theta, state = carry
            frac = i.astype(cap0.dtype) / max(steps - 1, 1)
            tau = TAU_START * (TAU_END / TAU_START) ** frac
            value, g = grad(theta, tau, obs, sparsity)
            g = jax.tree_util.tree_map(lambda a: jnp.where(jnp.isfinite(a), a, 0.0), g)
            upd, state = opt.update(g, state, theta)
            th, u = optax.apply_updates(theta, upd)
            return ((th, jnp.clip(u, 0.0, LOSS_MAX / LOSS_SCALE)), state), value

        (theta, _), values = jax.lax.scan(step, (theta, opt.init(theta)),
                                          jnp.arange(steps))
        if lossy:
            return theta, values[-1], None
        return theta, values[-1], refit(theta[0], obs, sparsity)

    def refit(theta, obs, sparsity):
        """Single-link hypotheses for the REFIT_CANDIDATES most degraded links: each
        alone at its best factor (every other link healthy), scored by the misfit plus
        the prior at the hard min; returns ``(candidates, scores, factors)``."""
        ones = jnp.ones_like(theta)
        cand = jax.lax.top_k(-theta, min(REFIT_CANDIDATES, prob.n_links))[1]

        def score(link, g):
            return misfit(ones.at[link].set(g), None, TAU_END, obs) + sparsity * (1.0 - g)

        def fit(link):
            def best(log_g):          # (score, log factor) of the best on a grid
                sc = jax.lax.map(lambda x: score(link, jnp.exp(x)), log_g)
                return jnp.min(sc), log_g[jnp.argmin(sc)]
            # log-spaced factors in [PHI_MIN, 1], then a finer grid around the best
            coarse = jnp.linspace(jnp.log(PHI_MIN), 0.0, REFIT_GRID)
            step = coarse[1] - coarse[0]
            _, centre = best(coarse)
            sc, lg = best(jnp.minimum(centre + jnp.linspace(-step, step, REFIT_GRID), 0.0))
            return sc, jnp.exp(lg)

        scores, factors = jax.lax.map(fit, cand)
        return cand, scores, factors

    run = jit(run)
    _SOLVERS.clear()          # one problem at a time (bounded memory)
    _SOLVERS[key] = (prob, run)
    return run


def _nominal_log_slowdown(prob: LocateProblem, obs: Observation):
    """Per observed flow: ``log(T_obs / T_nominal)`` and its flows' link rows."""
    fin0 = np.asarray(truth(prob, np.ones(prob.n_links))[0], float)
    return np.log(obs.flow_finish / fin0[obs.flow_idx])


def _flow_link_matrix(prob: LocateProblem, flows):
    import scipy.sparse as sp
    w = prob.split0[prob.e_flow, prob.e_path]
    a = sp.csr_matrix((w, (prob.e_flow, prob.e_link)), shape=(prob.n_flows, prob.n_links))
    a.sum_duplicates()
    a.data = np.minimum(a.data, 1.0)
    return a[flows]


def tomography(problem: LocateProblem, observed: Observation, *,
               detect: float | None = None) -> LocateResult:
    """Baseline: network tomography by non-negative least squares.

    Each observed flow's log slowdown against the nominal model, ``y_f = log(T_f /
    T_f^0)``, is written as ``sum_l A_lf x_l`` with ``x_l >= 0`` a per-link slowdown
    (``A`` the path-link incidence with split weights, the routing at nominal
    capacities); ``scipy.optimize.lsq_linear`` with bounds ``[0, inf)``.  Links ranked
    by ``x``; a fault is reported when ``1 - exp(-x_max) > detect``.  Per-flow
    observations only (ranks and counters are not used).
    """
    from scipy.optimize import lsq_linear

    t0 = time.perf_counter()
    if observed.flow_idx.size == 0:
        raise ValueError("tomography needs per-flow completion times (observed.flows)")
    y = _nominal_log_slowdown(problem, observed)
    a = _flow_link_matrix(problem, observed.flow_idx)
    sol = lsq_linear(a, y, bounds=(0.0, np.inf), lsmr_tol="auto", max_iter=100, tol=1e-6)
    x = np.maximum(sol.x, 0.0)
    deg = 1.0 - np.exp(-x)
    detect = max(0.05, 3 * observed.noise) if detect is None else float(detect)
    order, fault, conf = _confidence(deg, detect)
    return LocateResult(order, 1.0 - deg, bool(fault), float(conf), detect, 1,
                        time.perf_counter() - t0, "tomography", float(sol.cost))


def vote_count(problem: LocateProblem, observed: Observation, *,
               threshold: float | None = None, detect: float = 0.5) -> LocateResult:
    """Baseline: vote counting over the paths of slow flows.

    A flow is slow when ``log(T_f / T_f^0) > threshold`` (default ``max(0.05, 3
    noise)``); each slow flow votes for every link on its paths (split-weighted); a
    link's score is its votes over the flows through it (the fraction of its flows that
    are slow), ties broken by the raw votes.  ``factor`` holds ``1 - score``; a fault is
    reported when the top score exceeds ``detect``.
    """
    t0 = time.perf_counter()
    if observed.flow_idx.size == 0:
        raise ValueError("vote counting needs per-flow completion times (observed.flows)")
    thr = max(0.05, 3 * observed.noise) if threshold is None else float(threshold)
    y = _nominal_log_slowdown(problem, observed)
    a = _flow_link_matrix(problem, observed.flow_idx)
    slow = (y > thr).astype(float)
    votes = np.asarray(a.T @ slow).ravel()
    through = np.asarray(a.sum(axis=0)).ravel()
    score = np.where(through > 0, votes / np.maximum(through, 1e-12), 0.0)
    key = score + 1e-6 * votes / max(votes.max(), 1.0)
    order, fault, conf = _confidence(key, detect)
    return LocateResult(order, 1.0 - score, bool(fault), float(conf), detect, 1,
                        time.perf_counter() - t0, "vote", float("nan"))
