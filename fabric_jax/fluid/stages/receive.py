"""Stage 6 of a step: the receiver wire and the receiver.

Bytes served at the last hop and the cut-through bytes go on the flow's receiver wire,
which delivers them after the path's one-way latency (:func:`propagate`), less what
lossy links drop (:func:`lossy_links`).  A receiver in go-back-N discard mode throws
away a fraction of them after out-of-order arrivals or losses (:func:`receive`,
:mod:`fabric_jax.receiver`).
"""

from __future__ import annotations

import jax.numpy as jnp

from ... import faults as fm
from ... import links as lk
from ... import receiver as rx

__all__ = ["propagate", "lossy_links", "receive"]


def propagate(net, c, served, alloc, discard, dt, lost=0.0):
    """Bytes served at the last hop and the cut-through offers go on the receiver wire
    and arrive after the path latency, less ``lost`` ``[flows]`` (dropped by lossy
    links, :func:`lossy_links`); the fraction ``discard`` ``[flows]`` of them the
    receiver throws away (:func:`receive`).  (Bytes served at other hops joined the
    next hop in the same step, :func:`fabric_jax.links.serve_through`.)"""
    hops = net.hops
    arrived = alloc * dt + jnp.sum(jnp.where(hops.last, served, 0.0), axis=1) - lost
    discarded = arrived * discard
    passed = arrived - discarded
    wire, delivered = lk.wire_step(c.wire, c.k, net.wire_n, net.wire_phi, passed)
    return wire, passed, delivered, discarded


def lossy_links(net, sched, c, served, alloc_p, dt):
    """Bytes that lossy links drop in the step: ``([flows], [links])``.

    Model: the bytes that crossed a path in the step (cut-through ``alloc_p dt`` plus
    those its last hop served; the loss-free fluid) lose the fraction ``p_l`` at each
    lossy link ``l`` of the path, of what reached it: hop ``h`` drops ``B p_h
    prod_{j<h} (1 - p_j)``, so ``B prod_h (1 - p_h)`` arrive.  Approximation, stated: a
    corrupted packet is dropped by the next port's ingress, but here its bytes also
    counted on the hops after the lossy link in this step (an overestimate of their
    load by at most ``p``); the retransmission (the sender's backlog grows by the
    drops) re-crosses every hop."""
    hops = net.hops
    p = jnp.where(hops.valid, hops.gather(fm.loss_fraction(sched, c.k).astype(served.dtype)),
                  0.0)
    log_keep = hops.per_path(jnp.log1p(-p))
    before = jnp.exp(jnp.cumsum(log_keep, axis=2) - log_keep)    # prod_{j<h} (1 - p_j)
    reach = alloc_p * dt + jnp.sum(hops.per_path(jnp.where(hops.last, served, 0.0)), axis=2)
    lost_h = (reach[:, :, None] * before * hops.per_path(p)).reshape(served.shape)
    return jnp.sum(lost_h, axis=1), hops.link_sum(lost_h)


def receive(static, net, c, x_new, cap_k, split, served, alloc, offered, dropped, dt):
    """Receiver (:mod:`fabric_jax.receiver`): the fraction of the step's arrivals that a
    receiver in go-back-N discard mode throws away, and the next discard state.

    Events: out-of-order arrivals (``reorder=False``; mean path delays now, the
    packet-scale port waits of :mod:`fabric_jax.queueing` at the step's rates, the
    flow's sending rate) and losses (``go_back_n``; each dropped ``mtu`` is one event).
    Recovery: one base RTT after an out-of-order NAK; base RTT + ``rto`` after a loss
    (``drop`` mode's timer, as the loss signal in :func:`offer`)."""
    phi = c.rx_phi
    if not (static.rx_ooo or static.go_back_n):
        return jnp.zeros_like(offered), phi
    hops = net.hops
    arrived = alloc * dt + jnp.sum(jnp.where(hops.last, served, 0.0), axis=1)
    zero = jnp.zeros_like(offered)
    if static.rx_ooo:
        delay = lk.path_delay(hops, hops.link_sum(x_new), cap_k, net.path_lat)
        rate = jnp.maximum(offered, arrived / dt)
        wait = rx.path_waits(hops, split, rate, cap_k, net.wait_pairs, net.mtu,
                             net.burstiness)
        p_ooo = rx.out_of_order_probability(split, delay, rate, net.mtu, net.tolerance,
                                            wait=wait)
        ooo_events = p_ooo * arrived / net.mtu
    else:
        ooo_events = zero
    loss_events = dropped / net.mtu if static.go_back_n else zero
    rto = static.fc.rto_steps * dt if static.fc.mode == "drop" else 0.0
    recovery = jnp.stack([net.base_rtt, net.base_rtt + rto])
    phi_step, phi_next = rx.discard_step(phi, jnp.stack([ooo_events, loss_events]), dt,
                                         recovery)
    discard = 1.0 - (1.0 - phi_step[0]) * (1.0 - phi_step[1])
    return discard, phi_next
