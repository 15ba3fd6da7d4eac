"""Stage 7 of a step: congestion signals into the feedback ring.

From the standing queues at **switch** ports only: marking (the law's ``mark``),
queueing delay ``q_l / C_l`` added to the base RTT, HPCC's telemetry ``q_l / (C_l T) +
tx_l / C_l``, losses, the receiver's credit share, the bytes arrived (the ACK clock).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...cc import base as ccbase
from ..state import SIGNALS
from .common import over_flows

__all__ = ["emit_signals"]


def emit_signals(static, net, c, x, cap_k, usable, tx, split, offered, dropped, still,
                  params, fcp, smooth, dt, arrived):
    """Congestion signals from the standing queues at switch ports -> feedback ring
    (``tx`` ``[links]``: the rate each link transmitted in the step, bytes/s;
    ``arrived`` ``[flows]``: bytes that reached the receiver so far, the ACK clock)."""
    hops, law = net.hops, static.law
    q_sw = hops.link_sum(x) * net.switch
    cap_pos = cap_k > 0
    safe_cap = jnp.where(cap_pos, cap_k, 1.0)
    t_hpcc = over_flows(jnp.max(net.base_rtt, initial=dt), hops.axis_name, jax.lax.pmax)
    view = ccbase.LinkView(queue=q_sw, capacity=cap_k, usable=usable, tx_rate=tx,
                           buffer=fcp.buffer, base_rtt=t_hpcc, switch_port=net.switch)
    mark_l = law.mark(view, params, smooth) * net.switch
    valid3 = hops.per_path(hops.valid)
    # log(1 - p) once per link, gathered per hop (== path_mark of the gathered p)
    lg3 = hops.per_path(hops.gather(ccbase.log_unmarked(mark_l)))
    p_path = jnp.sum(split * ccbase.path_mark_from_log(lg3, valid3), axis=1)
    qdel_l = jnp.where(cap_pos, q_sw / safe_cap, 0.0)
    rtt = net.base_rtt + jnp.sum(split * jnp.sum(hops.per_path(hops.gather(qdel_l)), axis=2),
                                 axis=1)
    util_l = net.switch * jnp.where(cap_pos, q_sw / (safe_cap * t_hpcc) + tx / safe_cap, 0.0)
    util = jnp.sum(split * jnp.max(hops.per_path(hops.gather(util_l)), axis=2), axis=1)
    n_links = hops.n_links
    last_link = jnp.max(jnp.where(hops.last, hops.link, -1), axis=1)
    last_link = jnp.where(last_link < 0, n_links, last_link)
    n_rx = over_flows(jax.ops.segment_sum(still.astype(dt.dtype), last_link,
                                           num_segments=n_links + 1), hops.axis_name)
    cap_ext = jnp.concatenate([cap_k, jnp.zeros((1,), cap_k.dtype)])
    rx_share = 0.99 * cap_ext[last_link] / jnp.maximum(n_rx[last_link], 1.0)
    new = dict(mark=p_path, rtt=rtt, util=util, rate=offered, loss=dropped / dt,
               rx_share=rx_share, arrived=arrived)
    w = c.k % static.shape.ring_len
    ring = c.ring.at[w].set(jnp.stack([new[f] for f in SIGNALS], axis=1))
    return ring, mark_l, p_path
