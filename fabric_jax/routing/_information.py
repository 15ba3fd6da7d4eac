"""What a policy knows and when: the delay line of late information (end-to-end
telemetry, CONGA's feedback) and the hops where a switch chooses
(:mod:`fabric_jax.routing`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..paths import PathSet

#: Slots of the delay line that holds what a policy knows ``info_delay`` late (static:
#: it sets the state's shape).  The observed value is sampled every
#: ``info_delay / (TELEMETRY_SLOTS - 2)`` seconds (and at most once per step), so the
#: value used at time ``t`` was observed between ``t - info_delay * (1 + 1 / 14)`` and
#: ``t - info_delay``; with ``info_delay = 0`` it is the current view.
TELEMETRY_SLOTS = 16
_NEVER = -1e30  # time stamp of the empty slots: "nothing known yet" (value 0)


def delay_init(shape, dtype) -> dict:
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


