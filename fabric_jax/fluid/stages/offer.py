"""Stage 3 of a step: the senders.

The signals emitted one base RTT ago (the feedback ring; a delay of ``n + phi`` steps
reads steps ``k - n`` and ``k - n - 1`` weighted ``1 - phi`` and ``phi``) reach the
law, which updates its state; the flow offers ``o_f = min(min(rate_f, line_rate_f)
p_f, remaining_f / dt)``, ``p_f`` the part of the step after its release (1 after its
first step); a window-based law is also capped by its window less the bytes in flight.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ... import smooth as sm
from ...cc import base as ccbase
from ..state import SIGNALS, pack_law, unpack_law
from .clock import hop_count

__all__ = ["offer"]


def offer(static, net, c, t, start, started, active, stranded, params, smooth, dt):
    """Senders: delayed feedback -> law step -> offered rates ``[flows]``.

    A flow released inside the step sends only after its release: its offer is scaled
    by the part of the step it is active, ``(t + dt - start) / dt``."""
    law = static.law
    k, ring, ring_len = c.k, c.ring, static.shape.ring_len
    ar = jnp.arange(net.line_rate.shape[0])
    phi = net.fb_phi

    def delayed(lag):   # [flows, signals] emitted lag + phi steps ago (linear in phi)
        return ((1.0 - phi)[:, None] * ring[(k - lag) % ring_len, ar]
                + phi[:, None] * ring[(k - lag - 1) % ring_len, ar])

    got = dict(zip(SIGNALS, jnp.moveaxis(delayed(net.fb_steps), 1, 0)))
    if static.fc.mode == "drop" and static.fc.rto_steps:   # losses are seen after the RTO
        got["loss"] = delayed(net.fb_steps + static.fc.rto_steps)[:, SIGNALS.index("loss")]
    sig = ccbase.FlowSignals(
        mark=got["mark"], rtt=got["rtt"], base_rtt=net.base_rtt, util=got["util"],
        rate=got["rate"], loss=got["loss"], rx_share=got["rx_share"],
        line_rate=net.line_rate, hops=hop_count(net.hops).astype(dt.dtype))
    law0 = law.init(net.line_rate, params)
    law_state = law.step(unpack_law(c.law, law0), sig, dt, params, smooth)

    def pick(a, b):
        s = started.reshape(started.shape + (1,) * (jnp.ndim(a) - 1))
        return jnp.where(s, a, b)
    law_state = jax.tree_util.tree_map(pick, law_state, law0)
    live = jnp.clip((t + dt - jnp.where(started, start, t)) / dt, 0.0, 1.0)
    offered = jnp.minimum(jnp.minimum(law_state.rate, net.line_rate) * live,
                          c.remaining / dt)
    if law.window is not None:
        # window-based law: bytes in flight = queued or in transit in the fabric + those
        # that reached the receiver less than one base RTT ago (their ACKs are still on
        # the way back; ``arrived`` read one feedback delay ago is what is acknowledged)
        acked = got["arrived"]
        in_flight = (jnp.sum(c.x, axis=1) + jnp.sum(c.transit, axis=1)
                     + jnp.maximum(c.passed + c.discarded - acked, 0.0))
        # smooth mode: the cap's max and min relaxed like the laws' own (exact: as is)
        cap_rate = ccbase.window_cap(law.window(law_state, sig, params), in_flight, dt,
                                     smooth, net.line_rate * dt)
        offered = sm.minimum(offered, cap_rate, net.line_rate, smooth)
    offered = jnp.where(active & ~stranded, jnp.maximum(offered, 0.0), 0.0)
    # the senders' new state and offers in one kernel (the barrier keeps XLA from
    # reading the rows through the stack, which would split it again)
    packed = jax.lax.optimization_barrier(pack_law(law_state, offered))
    return unpack_law(packed, law0), packed[-1], packed
