"""Per-packet adaptive routing as a fluid split: the idealised ``adaptive`` router,
InfiniBand AR (switch-local, at once) and Spectrum-X AR (local plus delayed end-to-end
telemetry) (:mod:`fabric_jax.routing`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._base import Policy, base_state, check_paths, live_mask, masked_softmax, path_link_cost
from ._information import decision_hops, delay_init, delayed


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


jax.tree_util.register_dataclass(AdaptiveParams)


#: One 4096-byte packet (the InfiniBand and RoCE MTU) at 400 Gb/s, microseconds: the
#: decision granularity of per-packet adaptive routing (NVIDIA: "Adaptive Routing
#: enables the switch to select the output port based on the port's load", per
#: packet, InfiniBand Cluster Bring-up Procedure, "Adaptive Routing"; Spectrum-4
#: RoCE adaptive routing selects the least-congested port for each packet, NVIDIA
#: Spectrum-X documentation).
PACKET_DECISION_US = 4096 * 8 / 400e9 * 1e6
#: Per-decision gain: chosen so that the fluid split moves half-way to its target per
#: microsecond of per-packet decisions, ``1 - (1 - g)^(1 / PACKET_DECISION_US) = 0.5``
#: (our assumption: the fluid step cannot resolve per-packet queue oscillations).
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


def _drop_dead(split, live):
    """Zeroes ``split`` outside ``live`` and renormalises (rows with no weight left keep it)."""
    s = jnp.where(live, split, 0.0)
    tot = jnp.sum(s, axis=1, keepdims=True)
    return jnp.where(tot > 0, s / jnp.where(tot > 0, tot, 1.0), split)


def _adaptive_init(paths, params, seed=0):
    paths = check_paths(paths)
    m = np.asarray(paths.path_mask, np.float32)
    st = base_state(paths, m / m.sum(axis=1, keepdims=True))
    return dataclasses.replace(st, aux={"clock": jnp.asarray(0.0, st.split.dtype),
                                        "decide": jnp.asarray(decision_hops(paths)),
                                        **delay_init(m.shape, st.split.dtype)})


def _adaptive_step(state, view, dt, params):
    safe = jnp.where(view.capacity > 0, view.capacity, 1.0)
    per_link = jnp.where(view.capacity > 0,
                         view.queue / (safe * params.queue_tau) + view.load / safe, 1e3)
    decide = state.aux["decide"]
    local = path_link_cost(state, per_link, decide)
    remote_now = path_link_cost(state, per_link, state.hop_mask & ~decide)
    aux, remote = delayed(state.aux, remote_now, view.t, dt, params.info_delay)
    cost = local + params.remote_weight * remote
    live = live_mask(state, view.capacity)
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

