"""The receiving NIC of the fluid fabric: out-of-order delivery and go-back-N recovery.

Units: bytes, seconds, bytes/s.

Per-packet spraying and per-packet adaptive routing spread one flow over paths whose
one-way delays ``D_p`` differ (path length plus the queueing delay ``sum q_l / C_l``
on the path), so packets arrive out of order.  What that costs depends on the receiver:

* **reordering NIC** (``reorder=True``): it places out-of-order data directly (NVIDIA
  Spectrum-X SuperNIC "direct data placement", Spectrum-X white paper 2023; UEC 1.0
  packet delivery sublayer, unordered reliable delivery (RUD) with a per-packet
  acknowledgement bitmap; InfiniBand HCAs that support adaptive routing).  Out-of-order
  data costs nothing here (the reorder buffer is assumed large enough).
* **plain RoCE NIC** (``reorder=False``): a packet whose PSN is not the expected one is
  discarded and answered with a NAK (sequence error); the sender goes back to the
  expected PSN and resends everything from there (go-back-N; IB spec vol. 1 sec. 9.7.5
  for RC, which RoCEv2 inherits; measured on ConnectX NICs in Mittal et al.,
  "Revisiting Network Support for RDMA", SIGCOMM 2018 (IRN), sec. 2 and 4).  So one
  out-of-order arrival wastes what the sender sends until the NAK reaches it.

Losses (drops, trims, faults) are recovered by ``loss_recovery`` (:data:`LOSS_RECOVERY`):

* ``"selective"``: only the lost bytes are resent (UEC selective ACK/NACK; IRN's
  selective repeat).  Nothing else is wasted.
* ``"go_back_n"``: the sender resends everything from the lost byte, so every byte it
  sent between the loss and its detection is wasted (the receiver discards it as out
  of order): ConnectX RoCE as deployed (IRN sec. 2: "RoCE NICs use go-back-N"), and IB
  RC.  Detection takes one round trip (NAK of the next packet) plus the
  retransmission timeout ``rto`` when it is signalled by the timer
  (:attr:`fabric_jax.flowcontrol.FlowControl.rto_steps`).

Fluid model (ours; the packet-level facts above are the sources):

1. **Overtaking probability.**  The flow sends packets of ``mtu`` bytes at rate ``r``,
   so consecutive packets leave at least one serialisation time ``tau = mtu / r``
   apart; each takes path ``q`` with probability ``w_q`` (its split), independently.
   A packet sent on path ``p`` is overtaken by a later packet on ``q`` if that packet
   leaves less than ``D_p - D_q - tol`` after it.  We count the later packets as a
   Poisson stream of rate ``1 / tau`` that starts one ``tau`` after the tagged packet
   (an assumption: exact spacing would give the staircase ``ceil(x) - 1``, which has
   no gradient), so the expected number of overtakers is ``m_p = sum_q w_q
   max(D_p - D_q - tol - tau, 0) / tau`` and the packet is out of order with
   probability ``1 - exp(-m_p)``.  Per packet of the flow: ``P_ooo = sum_p w_p
   (1 - exp(-m_p))`` (:func:`out_of_order_probability`).  ``tol`` is the NIC's
   tolerance (0 for a plain RoCE NIC).  A single path, equal delays, or a spread below
   one packet time (82 ns for 4 KB at 400 Gb/s) gives 0 -- for the *mean* delays.
   Each packet's delay also carries its packet-scale waits at the
   switch ports its flow's paths do not share (:mod:`fabric_jax.queueing`: 0 below
   the collisions of two ingress ports, growing with utilisation), so an even spray
   over equal paths reorders as load rises; :func:`out_of_order_probability` with
   ``wait=`` takes the expectation over them exactly under the same Poisson send
   process (checked against a per-hop Monte Carlo and ns-3, ``docs/fidelity.md``).
2. **Discard mode.**  After a go-back event (an out-of-order arrival, or a loss under
   ``go_back_n``) the receiver discards everything of the flow until the resent bytes
   arrive, ``T`` later (``T`` = base RTT for a NAK, + ``rto`` for a loss).  The
   fraction ``phi`` of the flow's arrivals that meet a receiver in discard mode obeys
   ``dphi/dt = (1 - phi) lambda - phi / T`` with ``lambda`` events per second; per
   step of ``dt`` with ``n = lambda dt`` events we use the exact pieces
   ``phi' = 1 - (1 - phi) exp(-n)`` (events; the bytes of the step see ``phi'``) and
   ``phi <- phi' exp(-dt / T)`` (recovery) (:func:`discard_step`).  Its fixed point is
   ``phi = lambda T / (1 + lambda T)`` as ``dt -> 0``, the classic go-back-N efficiency
   ``1 / (1 + p N)`` with ``p`` events per packet and ``N = r T / mtu`` packets per
   window (e.g. Bertsekas and Gallager, *Data Networks*, sec. 2.4.2); an isolated event
   wastes ``r T`` bytes, one window.
3. **Accounting.**  Discarded bytes crossed every link of their path (they used the
   capacity) but never count as delivered; they return to the sender's backlog and are
   resent (``FluidResult.discarded``; ``sent = delivered + in_flight + queued + dropped
   + discarded``).

Approximations, stated: the sender's backlog regains discarded bytes in the step they
reach the receiver (not one NAK later); the sender does not idle during a timeout;
packets of other flows do not change a flow's packet spacing; the two discard
processes (out-of-order, loss) are independent.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from . import queueing as qm

__all__ = ["LOSS_RECOVERY", "DEFAULT_MTU", "QUADRATURE_NODES", "check_options",
           "out_of_order_probability", "path_waits", "discard_step", "discard_fixed_point"]

#: Loss-recovery schemes of the sending NIC.
LOSS_RECOVERY = ("selective", "go_back_n")

#: RoCEv2 / IB maximum transfer unit used as the packet size, bytes (IBTA: 256..4096;
#: 4096 is the usual RoCE setting on AI fabrics).
DEFAULT_MTU = 4096.0


def check_options(reorder, loss_recovery, mtu=DEFAULT_MTU, reorder_tolerance=0.0):
    """Host check of the receiver options.

    Raises:
      ValueError: ``reorder`` not a bool, ``loss_recovery`` not in
        :data:`LOSS_RECOVERY`, ``mtu`` not > 0, ``reorder_tolerance`` not >= 0.
    """
    if not isinstance(reorder, bool):
        raise ValueError(f"reorder must be True (the NIC reorders) or False (out-of-order "
                         f"arrivals trigger go-back-N); got {reorder!r}")
    if loss_recovery not in LOSS_RECOVERY:
        raise ValueError(f"loss_recovery must be one of {LOSS_RECOVERY}; got "
                         f"{loss_recovery!r}")
    for name, v, strict in (("mtu", mtu, True), ("reorder_tolerance", reorder_tolerance,
                                                   False)):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v \
            and v < float("inf") and (v > 0 if strict else v >= 0)
        if not ok:
            raise ValueError(f"{name} must be a finite number {'> 0 bytes' if strict else '>= 0 s'}"
                             f"; got {v!r}")


def out_of_order_probability(split, delay, rate, mtu, tolerance=0.0, wait=None):
    """Probability that a packet of the flow is overtaken by a later one (point 1 above).

    Without ``wait`` each path's delay is its mean ``D_p`` (then an even spray over equal
    paths never reorders).  With ``wait = (atom, theta)``
    each path's delay is ``D_p + A_p``, ``A_p`` the packet-scale wait over the hops that
    not all of the flow's paths share (:mod:`fabric_jax.queueing`): 0 with probability
    ``atom``, else exponential of mean ``theta``, independently per packet and path.
    Later packets leave as a Poisson stream of rate ``1/tau`` from ``tau`` after the
    tagged packet (as above); those on the tagged packet's own path never overtake it
    (FIFO ports).  Given the tagged packet's delay ``x``, the overtakers are then a
    thinned Poisson stream of mean ``mu(x) = sum_{q != p} w_q E[(x - tol - tau - D_q -
    A_q)^+] / tau``, with ``E[(z - A)^+] = z - (1 - atom)(theta)(1 - e^{-z/theta})`` for
    ``z > 0`` (0 otherwise), so exactly ``P_ooo(p) = 1 - E[e^{-mu(D_p + A_p)}]``: the
    atom in closed form, the exponential part by Gauss-Laguerre quadrature
    (:data:`QUADRATURE_NODES` nodes).  ``theta = 0`` recovers the mean-delay formula.

    Args:
      split: ``[flows, paths]`` fraction of the flow's packets on each path.
      delay: ``[flows, paths]`` mean one-way delay of each path, s.
      rate: ``[flows]`` sending rate, bytes/s.
      mtu: packet size, bytes.
      tolerance: delay difference the receiver absorbs, s.
      wait: ``None`` or ``(atom, theta)``, each ``[flows, paths]``
        (:func:`fabric_jax.queueing.path_wait`).

    Returns:
      ``[flows]`` ``P_ooo`` in ``[0, 1)``.
    """
    pos = (rate > 0)[:, None, None]
    tau = (mtu / jnp.where(rate > 0, rate, 1.0))[:, None, None]   # packet spacing, s
    gap = delay[:, :, None] - delay[:, None, :] - tolerance - tau  # [flows, p, q]
    if wait is None:
        window = jnp.where(pos & (gap > 0), gap, 0.0) / tau        # later packets in it
        overtakers = jnp.sum(split[:, None, :] * window, axis=2)
        return jnp.sum(split * -jnp.expm1(-overtakers), axis=1)
    atom, theta = wait
    n_paths = split.shape[1]
    other = ~jnp.eye(n_paths, dtype=bool)[None]                    # q != p
    w_q = jnp.where(other, split[:, None, :], 0.0) / tau            # [flows, p, q]
    a_q, th_q = atom[:, None, None, :], theta[:, None, None, :]     # [flows, 1, 1, q]
    t_pos = th_q > 0
    t_safe = jnp.where(t_pos, th_q, 1.0)

    def mu(extra):  # [flows, p, K] -> expected overtakers given the tagged wait `extra`
        z = gap[:, :, None, :] + extra[..., None]                   # [flows, p, K, q]
        zp = jnp.where(pos[..., None], jnp.maximum(z, 0.0), 0.0)
        spread = jnp.where(t_pos, t_safe * -jnp.expm1(-zp / t_safe), 0.0)
        return jnp.sum(w_q[:, :, None, :] * (zp - (1.0 - a_q) * spread), axis=-1)

    nodes, weights = _laguerre()
    extra = theta[:, :, None] * jnp.asarray(nodes, delay.dtype)      # [flows, p, K]
    no_wait = jnp.exp(-mu(jnp.zeros_like(theta)[:, :, None]))[..., 0]
    waited = jnp.sum(jnp.asarray(weights, delay.dtype) * jnp.exp(-mu(extra)), axis=-1)
    p_path = 1.0 - (atom * no_wait + (1.0 - atom) * waited)
    return jnp.sum(split * jnp.clip(p_path, 0.0, 1.0), axis=1)


#: Gauss-Laguerre nodes of the expectation over a path's exponential wait
#: (:func:`out_of_order_probability`).
QUADRATURE_NODES = 16


def _laguerre():
    return np.polynomial.laguerre.laggauss(QUADRATURE_NODES)


def path_waits(hops, split, rate, capacity, pairs, mtu, burstiness):
    """``(atom, theta)`` ``[flows, paths]`` of each path's packet-scale wait in a fluid
    step (:mod:`fabric_jax.queueing`): per-port waits from the step's rates on each hop
    (flow rate x split), summed over the hops that not all of the flow's paths share.

    Args:
      hops: :class:`fabric_jax.links.HopTable`.
      split: ``[flows, paths]``.
      rate: ``[flows]`` sending rate, bytes/s.
      capacity: ``[links]`` capacity in force, bytes/s.
      pairs: :class:`fabric_jax.queueing.IngressPairs` of ``hops``.
      mtu: packet size, bytes.
      burstiness: ``kappa`` of :func:`fabric_jax.queueing.port_wait`.
    """
    entry = jnp.where(hops.valid, jnp.repeat(split * rate[:, None], hops.seg, axis=1), 0.0)
    pw = qm.port_wait(entry, hops.link, pairs, capacity, mtu, burstiness=burstiness)
    valid3 = hops.per_path(hops.valid)
    random_hop = valid3 & ~qm.common_hops(hops.per_path(hops.link), split, valid3)
    return qm.path_wait(hops.per_path(hops.gather(pw.busy)),
                        hops.per_path(hops.gather(pw.mean)), random_hop)


def discard_step(phi, events, dt, recovery):
    """One step of the discard-mode fraction (point 2 above).

    Args:
      phi: ``[flows]`` fraction in discard mode at the start of the step.
      events: ``[flows]`` go-back events in the step (expected count, >= 0).
      dt: step, s.
      recovery: ``[flows]`` time until the resent bytes arrive, s (> 0).

    Returns:
      ``(phi_step, phi_next)``: the fraction the step's arrivals see, and the state for
      the next step.
    """
    phi_step = 1.0 - (1.0 - phi) * jnp.exp(-events)
    return phi_step, phi_step * jnp.exp(-dt / recovery)


def discard_fixed_point(events, dt, recovery):
    """Steady state of :func:`discard_step` under ``events`` per step: the fraction of
    the arrivals discarded, ``(1 - e^-n) / (1 - e^-n e^-dt/T)`` (the closed form that the
    tests and ``experiments/reordering.py`` compare with)."""
    en = jnp.exp(-events)
    return (1.0 - en) / (1.0 - en * jnp.exp(-dt / recovery))
