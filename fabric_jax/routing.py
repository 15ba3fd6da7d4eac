"""Routing policies: how each flow's rate is split over its candidate paths, per step.

Units: times in seconds, rates and capacities in bytes/s, queues in bytes.

A flow ``f`` has up to ``paths`` equal-cost candidate paths (a
:class:`~fabric_jax.paths.PathSet` whose pairs are the flows).  A routing policy
produces ``split [flows, paths]``: the fraction of the flow's rate sent on each path
(non-negative, zero on padded paths, rows summing to one).  Like the congestion-control
laws (:mod:`fabric_jax.cc`), a policy is a :class:`Policy` of pure functions:

* ``init(paths, params, seed) -> RoutingState`` (host side: hashes, path tables);
* ``step(state, view, dt, params) -> RoutingState`` (device side, jit/vmap safe): one
  control step given the link state :class:`RoutingView`;
* ``default_params(**overrides)``.

The fluid loop (:func:`fabric_jax.fluid.simulate_fluid` with ``routing=``) calls
``step`` at the start of every time step; the static split ``state.split`` after
``init`` can also be fed to :meth:`fabric_jax.Incidence.from_paths` for the
event-driven simulator.

Policies (:data:`POLICIES`):

``ecmp``
    Per-flow hashing, hop by hop as switches do it: at hop ``h`` the flow's 5-tuple
    (src, dst, a random UDP source port -- RoCEv2 entropy --, dst port 4791, UDP) is
    hashed with the seed of that tier, and the hash modulo the number of distinct next
    links among the remaining candidates picks one.  A whole flow takes one path, so
    flows collide (balls into bins).  With the *same* seed on every tier the choices
    are correlated (hash polarisation: in a 3-tier fat-tree only a fraction of the
    cores is used); distinct per-tier seeds (the default) decorrelate them.
``weighted_ecmp``
    ``split = softmax(logits)`` over the valid paths; ``logits [flows, paths]`` is the
    learnable parameter (what :mod:`fabric_jax.optimize` trains).
``spray``
    UEC packet spraying: even split over all candidate paths.  With ``reps = 1`` a
    REPS-like variant: an EWMA of each path's ECN marking steers weight away from
    marked paths, ``split ~ exp(-beta * score)`` (Bonato et al., "REPS: Recycled
    Entropy Packet Spraying", 2024; the fluid form is ours).
``flowlet``
    Flowlet switching (CONGA, Alizadeh et al. SIGCOMM 2014; LetFlow, Vanini et al.
    NSDI 2017): a flow stays on one path; after it has been idle (offered rate below
    ``idle_fraction`` of its NIC link) for the flowlet timeout ``gap`` (default 500
    us, CONGA), it moves to the path with the least congestion metric (CONGA's
    maximum link utilisation along the path) as known ``info_delay`` late (CONGA's
    leaf-to-leaf feedback, about one RTT).  Fluid flows that never pause keep their
    first (hashed) path: flowlet switching needs gaps, and RDMA collectives rarely
    leave any.
``adaptive``, ``ib_ar``, ``spectrum_x_ar``
    Per-packet adaptive routing as a fluid split.  Every ``decision_interval`` (one
    4 KiB packet at 400 Gb/s by default; a step of ``dt`` holds ``dt /
    decision_interval`` decisions) the split moves a fraction ``gain`` per decision
    towards ``softmax(-cost / temperature)`` over the live paths, with the path cost
    built from ``q_l / (C_l tau) + load_l / C_l`` of its hops.  What the policies
    differ in is *what they know and when* (:func:`decision_hops` splits each path's
    hops into those where a switch chooses and the remote rest):

    * ``ib_ar`` (:func:`ib_ar_params`): each switch sees only its own egress queues
      at the hops where it chooses, with no delay; a congested spine downlink two hops
      away costs nothing to the leaf's choice.  Departure, stated: with several
      decision hops (fat-tree edge and aggregation uplinks) the per-switch choices
      are folded into one softmin over the sum of their local costs, not chained
      switch by switch.
    * ``spectrum_x_ar`` (:func:`spectrum_x_ar_params`): the same switch-local cost
      *plus* the remote hops' cost as reported by end-to-end telemetry to the NIC,
      ``info_delay`` old (about one RTT; :func:`delayed` is the delay line).
    * ``adaptive`` (:func:`adaptive_params`): an idealised router that sees every hop
      at once (``info_delay = 0``), or only local hops with ``visibility="local"``.

    Reordering: per-packet routing delivers out of order; its cost is not modelled
    here (Spectrum-X SuperNICs and IB HCAs place out-of-order data directly).

Link failures (``simulate_fluid(faults=)``, :mod:`fabric_jax.faults`): the view's
``capacity`` is the capacity *in force* (0 on a failed link).  A path is *live* when
every hop has capacity > 0 (:func:`path_alive`); every policy puts weight 0 on dead
paths, as its real counterpart does once the port is down:

* ``ecmp``: resilient hashing.  A flow whose hashed path is live stays on it; a flow
  whose path died is rehashed among the live candidates (a second per-flow hash picks
  one of them, uniformly); when its path recovers it returns to it (the choice is a
  function of the 5-tuple and the live set).  Departure: the rehash is over whole
  candidate paths, not hop by hop.
* ``weighted_ecmp``, ``spray``: the softmax / even split is taken over live paths
  (the group drops the member; spraying stops using the dead entropy values).
* ``flowlet``: a flow on a dead path moves at once (no gap needed) to the least loaded
  live path.
* ``adaptive``: dead paths get weight 0 at once (the port is out of the AR group) and
  the rest of the split is renormalised; the target split is over live paths.

A flow with no live path keeps its split; the fluid loop reports it as stranded.

Departures, stated: switch decisions are per flow path (the candidate list), not per
port on each switch; per-packet behaviour is a continuous split; costs use the link
state at the start of the step (one step of feedback delay, on top of each policy's
``info_delay``); the local-only policies know that a *remote* link is dead as soon as
the fluid loop does (InfiniBand SHIELD / fault-routing notifications and Ethernet
link-down events are taken as immediate), and the loop never sends on a dead path.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .paths import PathSet, mix64

__all__ = ["masked_softmax", "Policy", "RoutingState", "RoutingView", "Routing", "POLICIES", "ECMP",
           "WEIGHTED_ECMP", "SPRAY", "FLOWLET", "IB_AR", "SPECTRUM_X_AR", "get_policy",
           "make_routing", "ecmp_params", "weighted_ecmp_params", "spray_params",
           "flowlet_params", "adaptive_params", "ib_ar_params", "spectrum_x_ar_params",
           "ecmp_choice", "path_link_cost", "path_alive", "decision_hops", "delayed",
           "TELEMETRY_SLOTS", "TELEMETRY_DELAY_US", "PACKET_DECISION_US", "PACKET_GAIN",
           "FLOWLET_GAP_US", "FLOWLET_INFO_DELAY_US", "AUX_FLOW_AXIS"]

_BIG = np.iinfo(np.int64).max


@dataclasses.dataclass(frozen=True)
class RoutingView:
    """Link state seen by routing (each field ``[links]`` unless noted).

    Attributes:
      queue: egress queue, bytes.
      capacity: link capacity, bytes/s.
      load: offered load in the previous step, bytes/s.
      mark: marking probability in the previous step (ECN/FECN).
      flow_rate: ``[flows]`` offered rate in the previous step, bytes/s.
      active: ``[flows]`` bool, flow started and not finished.
      t: time, seconds (scalar).
    """

    queue: Any
    capacity: Any
    load: Any
    mark: Any
    flow_rate: Any
    active: Any
    t: Any


@dataclasses.dataclass(frozen=True)
class RoutingState:
    """State of a routing policy.

    Attributes:
      split: ``[flows, paths]`` fraction of each flow's rate on each path.
      links: ``[flows, paths, hops]`` int32 link ids (-1 padding).
      hop_mask: ``[flows, paths, hops]`` bool.
      path_mask: ``[flows, paths]`` bool.
      aux: policy-specific arrays (dict).
    """

    split: Any
    links: Any
    hop_mask: Any
    path_mask: Any
    aux: Any


jax.tree_util.register_dataclass(RoutingView)
jax.tree_util.register_dataclass(RoutingState)


@dataclasses.dataclass(frozen=True, eq=False)
class Policy:
    """A routing policy (hashable by identity: a static argument under jit).

    Attributes:
      name: short name.
      init: ``(paths, params, seed) -> RoutingState`` (host side).
      step: ``(state, view, dt, params) -> RoutingState`` (jit/vmap safe).
      default_params: ``(**overrides) -> params`` pytree.
    """

    name: str
    init: Callable
    step: Callable
    default_params: Callable

    @staticmethod
    def view(**fields) -> RoutingView:
        return RoutingView(**fields)

    def __repr__(self) -> str:
        return f"Policy({self.name!r})"


@dataclasses.dataclass(frozen=True)
class Routing:
    """A policy bound to its parameters and initial state (``simulate_fluid(routing=)``).

    Attributes:
      policy: the :class:`Policy` (static).
      params: its parameter pytree.
      state: initial :class:`RoutingState`.
    """

    policy: Policy
    params: Any
    state: RoutingState

    @property
    def links(self):
        return self.state.links

    @property
    def hop_mask(self):
        return self.state.hop_mask

    @property
    def split(self):
        return self.state.split


# ------------------------------------------------------------------ helpers
def _tuple_hash(src, dst, sport, seed):
    with np.errstate(over="ignore"):
        k = (np.asarray(src, np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             ^ np.asarray(dst, np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
             ^ np.asarray(sport, np.uint64) * np.uint64(0x165667B19E3779F9)
             ^ np.uint64(4791 * 17))
        return mix64(k ^ mix64(np.uint64(seed) + np.uint64(0x632BE59BD9B4E019)))


def _check_paths(paths) -> PathSet:
    if not isinstance(paths, PathSet):
        raise ValueError(f"paths must be a fabric_jax.paths.PathSet (one pair per flow); "
                         f"got {type(paths).__name__}")
    return paths


def _base_state(paths: PathSet, split, aux=None) -> RoutingState:
    return RoutingState(split=jnp.asarray(split, jnp.zeros(()).dtype),
                        links=jnp.asarray(paths.links, jnp.int32),
                        hop_mask=jnp.asarray(paths.hop_mask, bool),
                        path_mask=jnp.asarray(paths.path_mask, bool), aux=aux or {})


def masked_softmax(logits, mask):
    """Softmax over the last axis restricted to ``mask``: exactly 0 where ``mask`` is
    False, all 0 on a row with no valid entry, and NaN-free values and gradients (the
    max is taken over valid entries only and held constant for the gradient).

    The one masked softmax of the package (routing policies' splits and the learned
    splits of :mod:`fabric_jax.optimize`).

    Args:
      logits: ``[..., paths]``.
      mask: bool, broadcastable to ``logits``.
    """
    z = jnp.where(mask, logits, -1e30)
    m = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    e = jnp.where(mask, jnp.exp(jnp.where(mask, logits - m, 0.0)), 0.0)
    return e / jnp.maximum(jnp.sum(e, axis=-1, keepdims=True), 1e-30)


def path_link_cost(state: RoutingState, per_link, hops_mask=None):
    """``[flows, paths]`` sum of a ``[links]`` quantity over each path's (selected) hops."""
    n_links = per_link.shape[0]
    ext = jnp.concatenate([per_link, jnp.zeros((1,), per_link.dtype)])
    mask = state.hop_mask if hops_mask is None else hops_mask
    idx = jnp.where(mask, state.links, n_links)
    return jnp.sum(jnp.where(mask, ext[idx], 0.0), axis=-1)


def path_alive(state: RoutingState, capacity):
    """``[flows, paths]`` bool: a candidate path whose every hop has ``capacity > 0``."""
    n_links = capacity.shape[0]
    up = jnp.concatenate([capacity > 0, jnp.ones((1,), bool)])
    idx = jnp.where(state.hop_mask, state.links, n_links)
    return state.path_mask & jnp.all(up[idx], axis=-1)


def _live_mask(state: RoutingState, capacity):
    """Live candidate paths; all candidates for a flow with none live (it is stranded)."""
    alive = path_alive(state, capacity)
    return jnp.where(jnp.any(alive, axis=1, keepdims=True), alive, state.path_mask)


def _drop_dead(split, live):
    """Zeroes ``split`` outside ``live`` and renormalises (rows with no weight left keep it)."""
    s = jnp.where(live, split, 0.0)
    tot = jnp.sum(s, axis=1, keepdims=True)
    return jnp.where(tot > 0, s / jnp.where(tot > 0, tot, 1.0), split)


# ---------------------------------------------------------------------- ECMP
@dataclasses.dataclass(frozen=True)
class ECMPParams:
    """Attributes: tier_seeds ``[tiers]`` int hash seed of each hop tier (hop ``h`` uses
    ``tier_seeds[h % tiers]``); equal seeds reproduce hash polarisation."""

    tier_seeds: Any


def ecmp_params(tier_seeds=(11, 23, 37, 41, 53, 67)) -> ECMPParams:
    """ECMP parameters (host-side integers)."""
    s = np.asarray(tier_seeds, np.int64).reshape(-1)
    if s.size == 0:
        raise ValueError("tier_seeds must hold at least one integer seed")
    return ECMPParams(tier_seeds=s)


def ecmp_choice(paths: PathSet, tier_seeds, sport) -> np.ndarray:
    """``[flows]`` index of the path each flow's hash picks, hop by hop (NumPy).

    Args:
      paths: candidate paths, one pair per flow.
      tier_seeds: ``[tiers]`` ints.
      sport: ``[flows]`` UDP source port (entropy) of each flow.
    """
    links = np.asarray(paths.links, np.int64)
    n_flows, n_paths, n_hops = links.shape
    cand = np.asarray(paths.path_mask, bool).copy()
    seeds = np.asarray(tier_seeds, np.int64).reshape(-1)
    for h in range(n_hops):
        hv = _tuple_hash(paths.src, paths.dst, sport, int(seeds[h % seeds.size]))
        nl = np.where(cand & paths.hop_mask[:, :, h], links[:, :, h], _BIG)
        srt = np.sort(nl, axis=1)
        distinct = (srt < _BIG) & np.concatenate(
            [np.ones((n_flows, 1), bool), srt[:, 1:] != srt[:, :-1]], axis=1)
        n_distinct = distinct.sum(axis=1)
        # rank of each candidate's next link among the distinct next links
        rank = np.sum(distinct[:, None, :] & (srt[:, None, :] < nl[:, :, None]), axis=2)
        pick = (hv % np.maximum(n_distinct, 1).astype(np.uint64)).astype(np.int64)
        keep = cand & ((rank == pick[:, None]) | (n_distinct[:, None] <= 1))
        cand = np.where(keep.any(axis=1)[:, None], keep, cand)
    return np.argmax(cand, axis=1)


#: Seed of the second hash that picks a live path for a flow whose path failed.
_FAILOVER_SEED = 0x5EED_FA11


def _ecmp_init(paths, params, seed=0):
    paths = _check_paths(paths)
    rng = np.random.default_rng(seed)
    sport = rng.integers(49152, 65536, size=paths.n_pairs)
    choice = ecmp_choice(paths, params.tier_seeds, sport)
    split = np.zeros(paths.path_mask.shape, np.float32)
    split[np.arange(paths.n_pairs), choice] = 1.0
    h = _tuple_hash(paths.src, paths.dst, sport, _FAILOVER_SEED)
    u = (h >> np.uint64(40)).astype(np.float64) / float(1 << 24)  # uniform in [0, 1)
    return _base_state(paths, split, aux={"home": jnp.asarray(split, jnp.zeros(()).dtype),
                                          "u": jnp.asarray(u, jnp.zeros(()).dtype)})


def _ecmp_step(state, view, dt, params):
    # resilient hashing: keep the hashed ("home") path while it is live; otherwise the
    # failover hash u picks the floor(u * n_live)-th live candidate.
    alive = path_alive(state, view.capacity)
    home = state.aux["home"]
    home_ok = jnp.any((home > 0) & alive, axis=1, keepdims=True)
    n_live = jnp.sum(alive, axis=1, keepdims=True)
    pick = jnp.minimum(jnp.floor(state.aux["u"][:, None] * n_live), n_live - 1)
    rank = jnp.cumsum(alive, axis=1) - 1
    alt = (alive & (rank == pick)).astype(home.dtype)
    split = jnp.where(home_ok | (n_live == 0), home, alt)
    return dataclasses.replace(state, split=split)


ECMP = Policy("ecmp", _ecmp_init, _ecmp_step, ecmp_params)


# ------------------------------------------------------------- weighted ECMP
@dataclasses.dataclass(frozen=True)
class WeightedECMPParams:
    """Attributes: logits ``[flows, paths]`` (``None`` until bound: zeros = even split)."""

    logits: Any


def weighted_ecmp_params(logits=None) -> WeightedECMPParams:
    return WeightedECMPParams(logits=None if logits is None else jnp.asarray(logits))


def _wecmp_init(paths, params, seed=0):
    paths = _check_paths(paths)
    logits = (jnp.zeros(paths.path_mask.shape) if params.logits is None
              else jnp.asarray(params.logits))
    if logits.shape != paths.path_mask.shape:
        raise ValueError(f"logits must have shape [flows, paths] = "
                         f"{paths.path_mask.shape}; got {logits.shape}")
    return _base_state(paths, masked_softmax(logits, jnp.asarray(paths.path_mask)))


def _wecmp_step(state, view, dt, params):
    logits = jnp.zeros(state.split.shape) if params.logits is None else params.logits
    return dataclasses.replace(state,
                               split=masked_softmax(logits, _live_mask(state, view.capacity)))


WEIGHTED_ECMP = Policy("weighted_ecmp", _wecmp_init, _wecmp_step, weighted_ecmp_params)


# ------------------------------------------------------------------- spraying
@dataclasses.dataclass(frozen=True)
class SprayParams:
    """Attributes: reps (0 plain spraying, 1 REPS-like), beta (steering strength per
    unit of marking score), ewma (gain per second of the marking score)."""

    reps: Any
    beta: Any
    ewma: Any


def spray_params(*, reps: bool = False, beta: float = 8.0, ewma_per_us: float = 0.2) -> SprayParams:
    if beta < 0 or ewma_per_us <= 0:
        raise ValueError("beta must be >= 0 and ewma_per_us > 0")
    return SprayParams(reps=jnp.asarray(float(reps)), beta=jnp.asarray(float(beta)),
                       ewma=jnp.asarray(float(ewma_per_us) * 1e6))


def _spray_init(paths, params, seed=0):
    paths = _check_paths(paths)
    m = np.asarray(paths.path_mask, np.float32)
    return _base_state(paths, m / m.sum(axis=1, keepdims=True),
                       aux={"score": jnp.zeros(m.shape)})


def _spray_step(state, view, dt, params):
    n_links = view.mark.shape[0]
    p = jnp.clip(view.mark, 0.0, 1.0 - 1e-7)
    ext = jnp.concatenate([jnp.log1p(-p), jnp.zeros((1,), p.dtype)])
    idx = jnp.where(state.hop_mask, state.links, n_links)
    pm = -jnp.expm1(jnp.sum(jnp.where(state.hop_mask, ext[idx], 0.0), axis=-1))
    g = jnp.clip(params.ewma * dt, 0.0, 1.0)
    score = (1.0 - g) * state.aux["score"] + g * pm
    split = masked_softmax(-params.reps * params.beta * score, _live_mask(state, view.capacity))
    return dataclasses.replace(state, split=split, aux={"score": score})


SPRAY = Policy("spray", _spray_init, _spray_step, spray_params)


# ------------------------------------------------------ delayed information
#: Slots of the delay line that holds what a policy knows ``info_delay`` late (static:
#: it sets the state's shape).  The observed value is sampled every
#: ``info_delay / (TELEMETRY_SLOTS - 2)`` seconds (and at most once per step), so the
#: value used at time ``t`` was observed between ``t - info_delay * (1 + 1 / 14)`` and
#: ``t - info_delay``; with ``info_delay = 0`` it is the current view.
TELEMETRY_SLOTS = 16
_NEVER = -1e30  # time stamp of the empty slots: "nothing known yet" (value 0)


def _delay_init(shape, dtype) -> dict:
    return {"hist": jnp.zeros((TELEMETRY_SLOTS,) + tuple(shape), dtype),
            "hist_t": jnp.full((TELEMETRY_SLOTS,), _NEVER, dtype),
            "slot": jnp.asarray(0, jnp.int32)}


def delayed(aux: dict, value, t, dt, delay):
    """Pushes ``value`` observed at ``t`` into a delay line; returns what is known now.

    The model of an information delay (end-to-end telemetry that returns after about
    one RTT, CONGA's leaf-to-leaf feedback): the policy acts at ``t`` on the newest
    observation made at or before ``t - delay``.  Before anything that old exists the
    known value is 0 (no congestion known).

    Args:
      aux: dict holding ``hist [slots, ...]``, ``hist_t [slots]``, ``slot`` (int).
      value: the current observation, shape of ``hist[0]``.
      t: time of the observation, seconds.
      dt: step, seconds (slack of the time comparisons).
      delay: information delay, seconds (>= 0, traced).

    Returns:
      ``(aux', known)``: the updated delay line and the value known at ``t``.
    """
    hist, hist_t, slot = aux["hist"], aux["hist_t"], aux["slot"]
    eps = 1e-3 * dt
    period = delay / (TELEMETRY_SLOTS - 2)
    write = t - hist_t[slot] >= period - eps
    nxt = jnp.where(write, (slot + 1) % TELEMETRY_SLOTS, slot)
    hist = hist.at[nxt].set(jnp.where(write, value, hist[nxt]))
    hist_t = hist_t.at[nxt].set(jnp.where(write, t, hist_t[nxt]))
    usable = hist_t <= t - delay + eps
    pick = jnp.argmax(jnp.where(usable, hist_t, -jnp.inf))
    known = jnp.where(jnp.any(usable), hist[pick], jnp.zeros_like(value))
    return dict(aux, hist=hist, hist_t=hist_t, slot=nxt), known


def decision_hops(paths: PathSet) -> np.ndarray:
    """``[flows, paths, hops]`` True where a switch *chooses*: hop ``h`` of path ``p``
    is a decision hop when another candidate shares the links before ``h`` and leaves
    by a different link at ``h`` (the leaf uplink in a leaf-spine; the edge and
    aggregation uplinks in a 3-tier fat-tree).  The other hops (spine / core
    downlinks, the last hop) are fixed once the upstream choices are made: a switch
    on the way cannot see their queues (host side, NumPy).
    """
    links = np.asarray(paths.links)
    pmask = np.asarray(paths.path_mask, bool)
    hmask = np.asarray(paths.hop_mask, bool)
    out = np.zeros(links.shape, bool)
    chunk = 256
    for s in range(0, links.shape[0], chunk):
        lk, pm, hm = links[s:s + chunk], pmask[s:s + chunk], hmask[s:s + chunk]
        eq = lk[:, :, None, :] == lk[:, None, :, :]                  # [f, p, q, h]
        same_prefix = np.concatenate([np.ones(eq.shape[:3] + (1,), bool),
                                      np.cumprod(eq, axis=3)[..., :-1].astype(bool)], axis=3)
        both = (pm[:, :, None] & pm[:, None, :])[..., None] & hm[:, :, None, :] & hm[:, None, :, :]
        out[s:s + chunk] = np.any(same_prefix & ~eq & both, axis=2)
    return out & hmask


# -------------------------------------------------------------------- flowlet
@dataclasses.dataclass(frozen=True)
class FlowletParams:
    """Attributes: gap (flowlet timeout: idle time that ends a flowlet, s -- the
    decision granularity), idle_fraction (rate below this fraction of the NIC link
    counts as idle), info_delay (age of the path congestion metric, s)."""

    gap: Any
    idle_fraction: Any
    info_delay: Any


#: CONGA's flowlet inactivity timeout, microseconds (Alizadeh et al., SIGCOMM 2014,
#: testbed setting; the public ns-3 reimplementation of CONGA defaults to the same
#: 500 us).  LetFlow (Vanini et al., NSDI 2017) studies timeouts of 50-500 us.
FLOWLET_GAP_US = 500.0
#: CONGA's congestion-to-leaf table is filled by feedback piggybacked on reverse
#: traffic: about one fabric RTT old.  Same value as :data:`TELEMETRY_DELAY_US`.
FLOWLET_INFO_DELAY_US = 4.0


def flowlet_params(*, gap_us: float = FLOWLET_GAP_US, idle_fraction: float = 0.05,
                   info_delay_us: float = FLOWLET_INFO_DELAY_US) -> FlowletParams:
    """Flowlet-switching parameters (CONGA / LetFlow).

    Args:
      gap_us: flowlet timeout, microseconds (default :data:`FLOWLET_GAP_US`, CONGA).
        A flow moves only after an idle gap at least this long.
      idle_fraction: offered rate below this fraction of the NIC link counts as idle
        (our assumption: a fluid flow is never exactly silent while it drains).
      info_delay_us: age of the per-path congestion metric (CONGA's max link
        utilisation along the path), microseconds (default one RTT,
        :data:`FLOWLET_INFO_DELAY_US`).
    """
    if not (np.isfinite(gap_us) and gap_us > 0) or not 0 <= idle_fraction < 1:
        raise ValueError("gap_us must be > 0 and idle_fraction in [0, 1)")
    if not (np.isfinite(info_delay_us) and info_delay_us >= 0):
        raise ValueError(f"info_delay_us must be a finite number >= 0; got {info_delay_us!r}")
    return FlowletParams(gap=jnp.asarray(gap_us * 1e-6), idle_fraction=jnp.asarray(idle_fraction),
                         info_delay=jnp.asarray(info_delay_us * 1e-6))


def _flowlet_init(paths, params, seed=0):
    st = _ecmp_init(paths, ecmp_params(), seed)
    rng = np.random.default_rng(seed + 1)
    jitter = rng.uniform(0, 1e-6, size=paths.path_mask.shape)  # tie breaking
    return dataclasses.replace(st, aux=dict(st.aux, idle=jnp.zeros(paths.n_pairs),
                                            jitter=jnp.asarray(jitter, st.split.dtype),
                                            **_delay_init(paths.path_mask.shape,
                                                          st.split.dtype)))


def _one_hot(idx, n, dtype):
    return (jnp.arange(n)[None, :] == idx[:, None]).astype(dtype)


def _flowlet_step(state, view, dt, params):
    n_links = view.capacity.shape[0]
    first = jnp.where(state.hop_mask[:, 0, 0], state.links[:, 0, 0], n_links)
    nic = jnp.concatenate([view.capacity, jnp.ones((1,), view.capacity.dtype)])[first]
    idle_now = view.flow_rate <= params.idle_fraction * nic
    idle = jnp.where(idle_now, state.aux["idle"] + dt, 0.0)
    safe = jnp.where(view.capacity > 0, view.capacity, 1.0)
    util = jnp.where(view.capacity > 0, view.load / safe, 0.0)
    ext = jnp.concatenate([util, jnp.zeros((1,), util.dtype)])
    idx = jnp.where(state.hop_mask, state.links, n_links)
    metric = jnp.max(jnp.where(state.hop_mask, ext[idx], 0.0), axis=-1)  # CONGA: max util
    aux, known = delayed(state.aux, metric, view.t, dt, params.info_delay)
    cost = known + state.aux["jitter"]
    alive = path_alive(state, view.capacity)
    live = _live_mask(state, view.capacity)
    best = jnp.argmin(jnp.where(live, cost, jnp.inf), axis=1)
    on_dead = ~jnp.any((state.split > 0) & alive, axis=1) & jnp.any(alive, axis=1)
    move = ((state.aux["idle"] >= params.gap) & view.active & ~idle_now) | on_dead
    split = jnp.where(move[:, None], _one_hot(best, state.split.shape[1], state.split.dtype),
                      state.split)
    return dataclasses.replace(state, split=split, aux=dict(aux, idle=idle))


FLOWLET = Policy("flowlet", _flowlet_init, _flowlet_step, flowlet_params)


# ---------------------------------------------------------- adaptive routing
@dataclasses.dataclass(frozen=True)
class AdaptiveParams:
    """Attributes (seconds where timed): decision_interval (time between the switches'
    re-decisions: the decision granularity), info_delay (age of the end-to-end
    telemetry of the remote hops), remote_weight (0: switch-local information only;
    1: local queues plus remote-hop telemetry), gain (fraction of the split moved
    towards the target per decision), temperature (softmin scale, in cost units),
    queue_tau (a queue of ``C queue_tau`` bytes costs as much as a fully loaded
    link)."""

    decision_interval: Any
    info_delay: Any
    remote_weight: Any
    gain: Any
    temperature: Any
    queue_tau: Any


#: One 4096-byte packet (the InfiniBand and RoCE MTU) at 400 Gb/s, microseconds: the
#: decision granularity of per-packet adaptive routing (NVIDIA: "Adaptive Routing
#: enables the switch to select the output port based on the port's load", per
#: packet, InfiniBand Cluster Bring-up Procedure, "Adaptive Routing"; Spectrum-4
#: RoCE adaptive routing selects the least-congested port for each packet, NVIDIA
#: Spectrum-X documentation).
PACKET_DECISION_US = 4096 * 8 / 400e9 * 1e6
#: Per-decision gain: chosen so that the fluid split moves half-way to its target per
#: microsecond of per-packet decisions, ``1 - (1 - g)^(1 / PACKET_DECISION_US) = 0.5``
#: (our assumption: the fluid step cannot resolve per-packet queue oscillations; the
#: value reproduces the 0.5-per-us relaxation this module used before).
PACKET_GAIN = float(1.0 - 0.5 ** PACKET_DECISION_US)
#: Age of end-to-end telemetry, microseconds: about one base RTT of a 2-tier
#: leaf-spine (our assumption: 3 cut-through switches at ~0.3 us, NIC 2 x 0.3 us,
#: short cables, both directions; the NIC learns a path's congestion when the
#: telemetry of a packet returns to it).
TELEMETRY_DELAY_US = 4.0


def adaptive_params(*, visibility: str = "global",
                    decision_interval_us: float = PACKET_DECISION_US,
                    info_delay_us: float = 0.0, gain: float = PACKET_GAIN,
                    temperature: float = 0.05, queue_tau_us: float = 2.0) -> AdaptiveParams:
    """Adaptive-routing parameters (the generic ``adaptive`` policy: an idealised
    router that sees every hop of every path at once -- neither vendor's design; see
    :func:`ib_ar_params` and :func:`spectrum_x_ar_params` for those).

    Args:
      visibility: ``"local"`` (decision hops only: each switch its own egress queues)
        or ``"global"`` (local queues plus the remote hops via telemetry delayed by
        ``info_delay_us``).
      decision_interval_us: time between decisions, microseconds (default one packet,
        :data:`PACKET_DECISION_US`).  A step of ``dt`` holds ``dt /
        decision_interval`` decisions when the interval is shorter than ``dt``.
      info_delay_us: age of the remote-hop telemetry, microseconds (>= 0).
      gain: fraction of the way to the target split moved per decision, ``(0, 1]``.
      temperature: softmin temperature over path costs (> 0).
      queue_tau_us: queue normalisation, microseconds.
    """
    if visibility not in ("local", "global"):
        raise ValueError(f"visibility must be 'local' or 'global'; got {visibility!r}")
    vals = dict(decision_interval_us=decision_interval_us, info_delay_us=info_delay_us,
                gain=gain, temperature=temperature, queue_tau_us=queue_tau_us)
    if not all(np.isfinite(v) for v in vals.values()) or not (
            decision_interval_us > 0 and info_delay_us >= 0 and 0 < gain <= 1
            and temperature > 0 and queue_tau_us > 0):
        raise ValueError("decision_interval_us > 0, info_delay_us >= 0, 0 < gain <= 1, "
                         "temperature > 0 and queue_tau_us > 0 (all finite) are required; "
                         f"got {vals}")
    return AdaptiveParams(decision_interval=jnp.asarray(decision_interval_us * 1e-6),
                          info_delay=jnp.asarray(info_delay_us * 1e-6),
                          remote_weight=jnp.asarray(1.0 if visibility == "global" else 0.0),
                          gain=jnp.asarray(gain), temperature=jnp.asarray(temperature),
                          queue_tau=jnp.asarray(queue_tau_us * 1e-6))


def ib_ar_params(**overrides) -> AdaptiveParams:
    """InfiniBand adaptive routing (NVIDIA Quantum switches, ConnectX HCAs).

    Mechanism: every switch picks, per packet, the output port of the destination's AR
    group with the least load ("Adaptive Routing (AR) enables the switch to select the
    output port based on the port's load", NVIDIA InfiniBand Cluster Bring-up
    Procedure, "Adaptive Routing"; groups set by the subnet manager, TREE algorithm for
    fat-trees).  It knows only its *own* egress queues, at once (``info_delay = 0``):
    congestion on a spine downlink two hops away is invisible to the leaf until it
    backs up into the leaf's uplink queue (credit back-pressure, when modelled).
    Defaults: ``visibility="local"``, per-packet decisions
    (:data:`PACKET_DECISION_US`).  Link faults: SHIELD / fault-routing notifications
    take a dead port out of the groups; the model removes dead paths at once.
    """
    return adaptive_params(**{"visibility": "local", "info_delay_us": 0.0, **overrides})


def spectrum_x_ar_params(**overrides) -> AdaptiveParams:
    """NVIDIA Spectrum-X RoCE adaptive routing (Spectrum-4 switch + SuperNIC).

    Mechanism: the switch chooses per packet the least-congested egress port from its
    local queue state (as InfiniBand), and the path choice is also steered with
    end-to-end congestion telemetry that reaches the NIC about one RTT late
    (``info_delay``, default :data:`TELEMETRY_DELAY_US`): the path cost is the local
    queues *now* plus the remote hops as last reported.  As a split this is the
    product of the switch's local choice and a NIC-side weight on each path:
    ``softmax(-(c_local + c_remote)/T) ~ softmax(-c_local/T) * softmax(-c_remote/T)``.
    Packets arrive out of order and the SuperNIC places them directly (reordering
    costs nothing here).  Sources: NVIDIA Spectrum-X networking platform white paper
    and "RoCE adaptive routing" documentation (Spectrum-4 per-packet AR, BlueField-3
    SuperNIC out-of-order placement); NVIDIA does not publish the telemetry algorithm,
    so the additive cost is our model of it and the delay our assumption.
    """
    return adaptive_params(**{"visibility": "global", "info_delay_us": TELEMETRY_DELAY_US,
                              **overrides})


def _adaptive_init(paths, params, seed=0):
    paths = _check_paths(paths)
    m = np.asarray(paths.path_mask, np.float32)
    st = _base_state(paths, m / m.sum(axis=1, keepdims=True))
    return dataclasses.replace(st, aux={"clock": jnp.asarray(0.0, st.split.dtype),
                                        "decide": jnp.asarray(decision_hops(paths)),
                                        **_delay_init(m.shape, st.split.dtype)})


def _adaptive_step(state, view, dt, params):
    safe = jnp.where(view.capacity > 0, view.capacity, 1.0)
    per_link = jnp.where(view.capacity > 0,
                         view.queue / (safe * params.queue_tau) + view.load / safe, 1e3)
    decide = state.aux["decide"]
    local = path_link_cost(state, per_link, decide)
    remote_now = path_link_cost(state, per_link, state.hop_mask & ~decide)
    aux, remote = delayed(state.aux, remote_now, view.t, dt, params.info_delay)
    cost = local + params.remote_weight * remote
    live = _live_mask(state, view.capacity)
    target = masked_softmax(-cost / params.temperature, live)
    clock = aux["clock"] + dt
    fire = clock >= params.decision_interval * (1.0 - 1e-6)
    # clock / decision_interval decisions happened since the last update (>= 1)
    n_dec = clock / params.decision_interval
    keep = jnp.exp(n_dec * jnp.log1p(-jnp.minimum(params.gain, 1.0 - 1e-7)))
    g = jnp.where(fire, 1.0 - keep, 0.0)
    split = (1.0 - g) * state.split + g * target
    split = jnp.where(state.path_mask, split, 0.0)
    split = split / jnp.maximum(jnp.sum(split, axis=1, keepdims=True), 1e-30)
    split = _drop_dead(split, live)
    clock = jnp.where(fire, 0.0, clock)
    return dataclasses.replace(state, split=split, aux=dict(aux, clock=clock))


ADAPTIVE = Policy("adaptive", _adaptive_init, _adaptive_step, adaptive_params)
IB_AR = Policy("ib_ar", _adaptive_init, _adaptive_step, ib_ar_params)
SPECTRUM_X_AR = Policy("spectrum_x_ar", _adaptive_init, _adaptive_step, spectrum_x_ar_params)

for _cls in (ECMPParams, WeightedECMPParams, SprayParams, FlowletParams, AdaptiveParams):
    jax.tree_util.register_dataclass(_cls)

#: The flow axis of each entry a policy keeps in ``RoutingState.aux`` (``None``: not per
#: flow: a clock, the delay line's time stamps); ``split``, ``links``, ``hop_mask`` and
#: ``path_mask`` are per flow on axis 0.  Read by
#: :func:`fabric_jax.distributed.simulate_fluid_sharded` to split a policy's state over
#: devices: a new aux entry must be listed here.
AUX_FLOW_AXIS = dict(home=0, u=0, score=0, idle=0, jitter=0, decide=0, hist=1,
                     hist_t=None, slot=None, clock=None)

#: Every policy by name.
POLICIES = {p.name: p for p in (ECMP, WEIGHTED_ECMP, SPRAY, FLOWLET, ADAPTIVE, IB_AR,
                                SPECTRUM_X_AR)}


def get_policy(policy) -> Policy:
    """Returns a :class:`Policy` given one or its name."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy]
    raise ValueError(f"routing policy must be one of {sorted(POLICIES)}; got {policy!r}")


def make_routing(policy, paths: PathSet, params=None, *, seed: int = 0) -> Routing:
    """Binds a policy to a path set: ``simulate_fluid(..., routing=make_routing(...))``.

    Args:
      policy: a :class:`Policy` or its name (:data:`POLICIES`).
      paths: candidate paths, one pair per flow.
      params: the policy's params (default ``policy.default_params()``).
      seed: seed of hashes / source ports.
    """
    policy = get_policy(policy)
    params = policy.default_params() if params is None else params
    return Routing(policy, params, policy.init(paths, params, seed))
