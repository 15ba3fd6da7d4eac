"""Flowlet switching (CONGA, LetFlow): a flow moves to the least congested path after an
idle gap, on a congestion metric known late (:mod:`fabric_jax.routing`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._base import Policy, live_mask, path_alive
from ._ecmp import ecmp_init, ecmp_params
from ._information import delay_init, delayed


@dataclasses.dataclass(frozen=True)
class FlowletParams:
    """Attributes: gap (flowlet timeout: idle time that ends a flowlet, s -- the
    decision granularity), idle_fraction (rate below this fraction of the NIC link
    counts as idle), info_delay (age of the path congestion metric, s)."""

    gap: Any
    idle_fraction: Any
    info_delay: Any


jax.tree_util.register_dataclass(FlowletParams)


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
    st = ecmp_init(paths, ecmp_params(), seed)
    rng = np.random.default_rng(seed + 1)
    jitter = rng.uniform(0, 1e-6, size=paths.path_mask.shape)  # tie breaking
    return dataclasses.replace(st, aux=dict(st.aux, idle=jnp.zeros(paths.n_pairs),
                                            jitter=jnp.asarray(jitter, st.split.dtype),
                                            **delay_init(paths.path_mask.shape,
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
    live = live_mask(state, view.capacity)
    best = jnp.argmin(jnp.where(live, cost, jnp.inf), axis=1)
    on_dead = ~jnp.any((state.split > 0) & alive, axis=1) & jnp.any(alive, axis=1)
    move = ((state.aux["idle"] >= params.gap) & view.active & ~idle_now) | on_dead
    split = jnp.where(move[:, None], _one_hot(best, state.split.shape[1], state.split.dtype),
                      state.split)
    return dataclasses.replace(state, split=split, aux=dict(aux, idle=idle))


FLOWLET = Policy("flowlet", _flowlet_init, _flowlet_step, flowlet_params)

