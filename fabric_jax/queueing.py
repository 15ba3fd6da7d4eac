"""Packet-scale waiting time at a switch egress port, given the fluid state of the port.

Units: bytes, seconds, bytes/s.

The fluid queue ``q_l`` of :mod:`fabric_jax.fluid` is the *mean* backlog of a port: below
saturation it is 0, yet packets still wait behind each other whenever two of them reach
the port at once from different ingress ports.  That wait is what reorders a flow
sprayed over equal paths (each packet meets a different instantaneous queue), so the
receiver model (:func:`fabric_jax.receiver.out_of_order_probability`) needs its
distribution, not only the mean.  Model, per switch egress port ``l`` of capacity
``C_l`` (service time of one packet ``S_l = mtu / C_l``, fixed-size packets):

* **Utilisation and its make-up.**  ``rho_l = sum_i p_il``, with ``p_il`` the share of
  ``C_l`` fed by ingress port ``i`` (the previous hop of the traffic).  Packets arriving
  from one ingress port come serialised at most one per ``S_l`` and never queue behind
  each other; only packets from different ingress ports collide.
* **Mean wait.**  The output-queued switch with independent Bernoulli inputs (Karol,
  Hluchyj and Morgan, "Input versus output queueing on a space-division packet switch",
  IEEE Trans. Commun. 35(12), 1987, eq. 9: mean queue ``(N-1)/N rho^2 / (2(1 - rho))``
  packets for ``N`` equal inputs), in the form valid for unequal inputs (the
  discrete-time queue ``Q' = max(Q + A - 1, 0)`` with ``A`` a sum of independent
  Bernoulli(``p_i``) arrivals per slot: ``E[Q] = (E[A^2] - E[A]) / (2 (1 - E[A]))``):
  ``E[W_l] = kappa (rho^2 - sum_i p_i^2) / (2 rho (1 - rho)) S_l`` (Little's law).  One
  input gives 0; many equal inputs give the Pollaczek-Khinchine M/D/1 mean
  ``rho S / (2 (1 - rho))`` (Kleinrock, *Queueing Systems* vol. 1, 1975, eq. 5.105).
  ``kappa`` (:data:`DEFAULT_BURSTINESS`) is the arrival burstiness relative to
  Bernoulli inputs, Kingman's ``(c_a^2 + c_s^2) / 2`` factor with ``c_s = 0`` (Kingman
  1961; Whitt, "The Queueing Network Analyzer", Bell Syst. Tech. J. 62(9), 1983): the
  calibration hook of this model (below).
* **Shape.**  A packet waits at all with probability ``b_l = rho (1 - H_l)``, ``H_l =
  sum_i p_i^2 / rho^2`` the ingress concentration (``1/N`` for ``N`` equal inputs; the
  M/G/1 busy probability ``rho`` when ``N`` is large), and, when it waits, for an
  exponential time of mean ``E[W_l] / b_l`` (the M/M/1 waiting-time law, exact there,
  Kleinrock sec. 3.2; the heavy-traffic limit of any G/G/1 queue, Kingman 1962).  So
  ``P(W_l > t) = b_l exp(-t b_l / E[W_l])``.
* **Saturation.**  ``rho`` enters capped at :data:`MAX_UTILISATION` (an assumption):
  at and above it the port is saturated in the fluid sense, its standing queue
  ``q_l / C_l`` carries the delay (a deterministic part of every packet's wait) and
  congestion control holds it; the packet-scale term stays that of a port at 95 %.
* **A path.**  A packet's random delay over a set of hops is the sum of independent
  port waits; :func:`path_wait` keeps its exact atom ``prod_h (1 - b_h)`` and mean
  ``sum_h E[W_h]`` and makes the rest one exponential (an approximation: the sum of
  two or more exponentials is less spread; ``tests/dynamics/test_fidelity.py`` measures the
  error against a Monte Carlo of the per-hop sums).

Calibration hook, not a fudge: ``kappa = 1`` is the analytic model (Bernoulli inputs,
each packet's path drawn independently: exactly how per-packet spraying picks paths).
The default :data:`DEFAULT_BURSTINESS` is fitted against the packet-level simulator
(ns-3, ``experiments/packet_reference/``; the fit and its command are in
``docs/fidelity.md``), because a NIC sends a flow's packets back to back in bursts
below one fluid step, which the fluid rate cannot represent.  ``docs/fidelity.md``
shows the affected figures with and without it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MAX_UTILISATION", "DEFAULT_BURSTINESS", "PortWait", "IngressPairs", "check_burstiness",
           "ingress_pairs", "port_wait", "path_wait", "common_hops"]

#: Utilisation at which the packet-scale wait is evaluated on saturated ports
#: (assumption, see the module docstring).
MAX_UTILISATION = 0.95

#: Arrival burstiness ``kappa`` relative to independent Bernoulli inputs (the
#: calibration hook; 1.0 is the analytic model).  Fitted against ns-3 3.44
#: (``python experiments/packet_side_by_side.py --fit-burstiness``, docs/fidelity.md).
DEFAULT_BURSTINESS = 1.0


@dataclasses.dataclass(frozen=True)
class PortWait:
    """Waiting time of a packet at each port: ``P(W > t) = busy exp(-t busy / mean)``.

    Attributes:
      busy: ``[links]`` probability that a packet waits at all.
      mean: ``[links]`` mean wait, s (over all packets, including those that do not
        wait).
    """

    busy: Any
    mean: Any


@dataclasses.dataclass(frozen=True)
class IngressPairs:
    """Host-built map of hop entries to (ingress port, egress port) pairs.

    Attributes:
      pair: ``[flows, hops]`` int32 pair of each hop entry (``n_pairs`` on padding and
        at hops that have no ingress port, i.e. a path's first hop).
      pair_link: ``[n_pairs]`` int32 egress link of each pair.
    """

    pair: Any
    pair_link: Any


jax.tree_util.register_dataclass(PortWait)
jax.tree_util.register_dataclass(IngressPairs)


def ingress_pairs(link, prev, n_links: int) -> IngressPairs:
    """Host: the distinct (previous hop, hop) link pairs of a hop table (NumPy).

    Args:
      link: ``[flows, hops]`` link of each hop, ``n_links`` on padding.
      prev: ``[flows, hops]`` link of the previous hop, ``n_links`` at a first hop.
      n_links: number of links.

    Returns:
      :class:`IngressPairs` (NumPy int32 arrays).
    """
    link = np.asarray(link, np.int64)
    prev = np.asarray(prev, np.int64)
    ok = (link < n_links) & (prev < n_links)
    key = np.where(ok, prev * (n_links + 1) + link, -1)
    uniq, inv = np.unique(key[ok], return_inverse=True)
    n_pairs = uniq.size
    pair = np.full(link.shape, n_pairs, np.int64)
    pair[ok] = inv
    return IngressPairs(pair=pair.astype(np.int32),
                        pair_link=(uniq % (n_links + 1)).astype(np.int32))


def port_wait(entry_rate, link, pairs: IngressPairs, capacity, mtu, *,
              burstiness=DEFAULT_BURSTINESS, max_utilisation=MAX_UTILISATION) -> PortWait:
    """Packet-scale waiting time at every port (module docstring).

    Args:
      entry_rate: ``[flows, hops]`` rate of each hop entry (bytes/s; 0 on padding).
      link: ``[flows, hops]`` int32 link of each entry (``n_links`` on padding).
      pairs: :class:`IngressPairs` of the same table.
      capacity: ``[links]`` capacity in force, bytes/s.
      mtu: packet size, bytes.
      burstiness: ``kappa`` (scalar).
      max_utilisation: cap on ``rho``.

    Returns:
      :class:`PortWait` over ``[links]`` (0 where nothing arrives from two ports).
    """
    n_links = capacity.shape[0]
    n_pairs = pairs.pair_link.shape[0]
    pos = capacity > 0
    safe_c = jnp.where(pos, capacity, 1.0)
    pair_rate = jax.ops.segment_sum(entry_rate.ravel(), pairs.pair.ravel(),
                                    num_segments=n_pairs + 1)[:n_pairs]
    p_pair = pair_rate / safe_c[pairs.pair_link]
    sum_p2 = jax.ops.segment_sum(p_pair * p_pair, pairs.pair_link, num_segments=n_links)
    # the port's utilisation counted over the entries that have an ingress port
    has_in = pairs.pair < n_pairs
    load = jax.ops.segment_sum(jnp.where(has_in, entry_rate, 0.0).ravel(),
                               jnp.where(has_in, link, n_links).ravel(),
                               num_segments=n_links + 1)[:n_links]
    rho_raw = jnp.where(pos, load / safe_c, 0.0)
    rho = jnp.minimum(rho_raw, max_utilisation)
    # concentration H = sum p^2 / rho^2 of the uncapped shares (scale-free)
    r_pos = rho_raw > 0
    conc = jnp.where(r_pos, sum_p2 / jnp.where(r_pos, rho_raw * rho_raw, 1.0), 1.0)
    spread = jnp.clip(1.0 - conc, 0.0, 1.0)
    busy = rho * spread
    service = mtu / safe_c
    mean = jnp.where(pos, burstiness * busy * service / (2.0 * (1.0 - rho)), 0.0)
    return PortWait(busy=jnp.where(pos, busy, 0.0), mean=mean)


def common_hops(link, split, hop_valid):
    """``[flows, paths, hops]`` True where the hop's link is at the same position on
    every path the flow uses (``split > 0``): hops that all its packets share, in the
    order they reach them, so they cannot reorder it.

    Args:
      link: ``[flows, paths, hops]`` link of each hop.
      split: ``[flows, paths]``.
      hop_valid: ``[flows, paths, hops]`` bool.
    """
    used = split > 0
    ref = jnp.argmax(used, axis=1)                                   # a used path
    ref_link = jnp.take_along_axis(link, ref[:, None, None], axis=1)  # [flows, 1, hops]
    same = (link == ref_link) | ~used[:, :, None]
    return jnp.all(same, axis=1, keepdims=True) & hop_valid


def path_wait(busy, mean, random_hop):
    """Atom and conditional mean of the random delay of each path over its hops
    ``random_hop`` (module docstring: exact atom and mean, exponential remainder).

    Args:
      busy, mean: ``[flows, paths, hops]`` the :class:`PortWait` values of each hop's
        port.
      random_hop: ``[flows, paths, hops]`` bool, the hops whose wait counts.

    Returns:
      ``(atom, theta)``: ``[flows, paths]`` probability of no wait, and the mean of the
      wait when there is one, s.
    """
    b = jnp.clip(busy, 0.0, 1.0 - 1e-6)
    atom = jnp.exp(jnp.sum(jnp.where(random_hop, jnp.log1p(-b), 0.0), axis=2))
    total = jnp.sum(jnp.where(random_hop, mean, 0.0), axis=2)
    waits = (atom < 1.0) & (total > 0)
    theta = jnp.where(waits, total / jnp.where(waits, 1.0 - atom, 1.0), 0.0)
    return jnp.where(waits, atom, 1.0), theta


def check_burstiness(burstiness):
    """Host check of ``burstiness`` (a finite number >= 0).

    Raises:
      ValueError: naming ``burstiness``.
    """
    if isinstance(burstiness, jax.core.Tracer):
        return
    ok = isinstance(burstiness, (int, float, np.floating, np.integer)) \
        and not isinstance(burstiness, bool) and np.isfinite(burstiness) and burstiness >= 0
    if not ok:
        raise ValueError(f"burstiness must be a finite number >= 0 (1.0: Bernoulli arrivals, "
                         f"the analytic model); got {burstiness!r}")
