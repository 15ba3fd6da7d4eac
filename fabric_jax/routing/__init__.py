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

The package holds the types and the shared path helpers (``_base``), what a policy
knows and when (``_information``: the delay line, decision hops), one module per policy
family (``_ecmp``: ECMP and weighted ECMP; ``_spray``; ``_flowlet``; ``_adaptive``:
``adaptive``, ``ib_ar``, ``spectrum_x_ar``) and the registry (``_registry``:
:data:`POLICIES`, :func:`make_routing`, :data:`AUX_FLOW_AXIS`).
"""

from ._adaptive import (IB_AR, PACKET_DECISION_US, PACKET_GAIN, SPECTRUM_X_AR, TELEMETRY_DELAY_US,
                        adaptive_params, ib_ar_params, spectrum_x_ar_params)
from ._base import (Policy, Routing, RoutingState, RoutingView, masked_softmax, path_alive,
                    path_link_cost)
from ._ecmp import ECMP, WEIGHTED_ECMP, ecmp_choice, ecmp_params, weighted_ecmp_params
from ._flowlet import FLOWLET, FLOWLET_GAP_US, FLOWLET_INFO_DELAY_US, flowlet_params
from ._information import TELEMETRY_SLOTS, decision_hops, delayed
from ._registry import AUX_FLOW_AXIS, POLICIES, get_policy, make_routing
from ._spray import SPRAY, spray_params

# public outside __all__: the parameter records and the generic adaptive policy
from ._adaptive import ADAPTIVE, AdaptiveParams  # noqa: F401
from ._ecmp import ECMPParams, WeightedECMPParams  # noqa: F401
from ._flowlet import FlowletParams  # noqa: F401
from ._spray import SprayParams  # noqa: F401

__all__ = ["masked_softmax", "Policy", "RoutingState", "RoutingView", "Routing", "POLICIES", "ECMP",
           "WEIGHTED_ECMP", "SPRAY", "FLOWLET", "IB_AR", "SPECTRUM_X_AR", "get_policy",
           "make_routing", "ecmp_params", "weighted_ecmp_params", "spray_params",
           "flowlet_params", "adaptive_params", "ib_ar_params", "spectrum_x_ar_params",
           "ecmp_choice", "path_link_cost", "path_alive", "decision_hops", "delayed",
           "TELEMETRY_SLOTS", "TELEMETRY_DELAY_US", "PACKET_DECISION_US", "PACKET_GAIN",
           "FLOWLET_GAP_US", "FLOWLET_INFO_DELAY_US", "AUX_FLOW_AXIS"]
