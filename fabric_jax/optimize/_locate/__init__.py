"""Fault localisation as an inverse problem: which link is slow, from what an operator sees.

Setting.  A collective phase runs on a fabric: flows that start together (e.g. a slice
of an all-to-all, :func:`diagnostic_workload`).  One or more links may run at a
*capacity factor* ``phi_l < 1`` (a lane down, a flapping optic, an FEC-heavy link;
:mod:`fabric_jax.faults`).  The operator observes

* per-flow completion times (or per-rank completion: a rank finishes with its last
  flow), optionally noisy;
* per-port cumulative counters sampled every ``period_s``: transmitted **bytes**, and
  the **congested** time, the seconds the port held a standing queue -- the model's
  stand-in for each preset's congestion counter (RoCE: ECN marks and PFC pauses;
  InfiniBand: FECN marks / PortXmitWait; Spectrum-X: its telemetry; UEC: ECN marks and
  trims): :data:`PRESET_COUNTERS` names them; and optionally **dropped** bytes, the
  receiving port's error counter (Ethernet FCS errors, InfiniBand ``PortRcvErrors``).

Faults: a link at capacity factor ``phi_l`` (degraded), or a *lossy* link that drops the
fraction ``p_l`` of the bytes it carries (:func:`fabric_jax.faults.lossy_link`; a gray
failure).  A lossy link keeps its capacity: a flow crossing it sends at the same rate
but delivers ``(1 - p_l)`` of it (selective retransmission), so its completion stretches
by ``1 / (1 - p_l)`` whether or not the link is a bottleneck, and the link's error
counter grows by ``p_l`` of what it carries.

Forward model (flow level, the cheap model at 1,024 hosts; chosen over the fluid model
because one evaluation is a few segment sums over ``flows x paths x hops`` entries, so
hundreds of gradient steps fit in seconds, and over
:func:`fabric_jax.sim.simulate_flows_fixed_step` because a degradation is read from the
rates the flows get while they all run).  Routing gives each flow a split over its
candidate paths (``ecmp``: the hashed path of :func:`fabric_jax.routing.make_routing`;
``spray``: even; ``adaptive``: in proportion to each path's bottleneck capacity in
force over the links that tell the flow's paths apart (not its NIC links, which every
path crosses), the steady state of a router that equalises utilisation, an
approximation).
Then

* rates: exact weighted max-min (:func:`fabric_jax.max_min_fair`) for the **truth**
  (:func:`observe`); for the **inverse** the *fair-share bottleneck* model
  ``r_f = min_l phi_l C_l / W_l`` over the links the flow uses (``W_l`` the split-weighted
  number of flows on ``l``), with the min a soft-min whose temperature is annealed to
  zero.  Why not differentiate the max-min solve itself: its gradient reaches only the
  links that are bottlenecks *now*, so a degraded link that the current estimate does
  not make a bottleneck gets no gradient and descent blames the links that are; the
  soft-min gives every link on a slow flow's path a share of the blame, in proportion
  to how close it is to being the bottleneck.  The two models agree where every flow is
  held at the fair share of its tightest link; where max-min hands a link's leftover to
  the flows that can use it they differ (the fair-share model is slower), and that
  mismatch is inside every accuracy figure.
* completion ``T_f = S_f / (g_f r_f) + latency_f`` (first order: each flow at the rate it
  gets while every flow runs; exact for a flow held at its bottleneck to the end), with
  ``g_f = sum_p s_fp prod_{l in p} (1 - p_l)`` the fraction of what it sends that
  arrives (1 without lossy links).
* counters: ``bytes_l(t) = sum_f A_lf r_f min(t, T'_f)`` with ``T'_f = S_f / (g_f
  r_f)``; ``congested_l(t) = sat_l min(t, max_f T'_f)`` with ``sat_l`` 1 where the link is
  saturated; ``dropped_l(t) = p_l bytes_l(t)`` (exact for one lossy link per path; the
  losses upstream of a second lossy link are not subtracted from what it carries).

Inverse (:func:`locate`): Adam on ``theta`` with ``phi = 0.02 + 0.98 sigmoid(theta)``,
minimising the chi-square of the log completion times (and of the counters, scaled by
the port capacity x time) plus a sparsity prior ``lambda sum_l (1 - phi_l)``;
links are ranked by ``phi`` (most degraded first).  Then a **single-link refit**
(capacity faults, not ``lossy``): the :data:`REFIT_CANDIDATES` most degraded links are
each tried alone, every other link healthy, at its best factor (two log-spaced grids of
:data:`REFIT_GRID` factors in ``[PHI_MIN, 1]``, the hard min), scored by the misfit plus
the prior, and ranked first by that score, each reported at its refitted factor.  Why:
Adam steps every link at about the same pace whatever the number of flows behind its
gradient, so where one link explains a set of slow flows that several lightly used
links explain only together (under spraying a leaf's uplink against the NIC links of
the leaf's hosts: every flow crosses both), the descent ends with both degraded and
ranked by round-off; the refit asks which one link explains the observations, as the
prior intends.  A fault is reported when the descent's top estimate is degraded by
more than ``detect`` (default ``max(0.05, 3 noise)``).
With ``lossy=True`` (the default when the observation holds a non-zero drop counter)
each link also gets a loss ``p_l = LOSS_SCALE u_l`` fitted alongside ``phi`` (projected
descent: ``u`` starts at 0 and is clipped to ``[0, LOSS_MAX / LOSS_SCALE]`` after every
step, so a clean link's loss stays exactly 0 under the prior; a sigmoid, as for
``phi``, would start its gradient at ~``p`` and lose it), with the drop counters'
residuals ``p_l bytes_l - dropped_l`` over the observed ``bytes_l`` (pseudo-Huber, scale
:data:`LOSS_SIGMA`) and the same sparsity prior on ``p``; links are then ranked by the larger of
``(1 - phi_l) / detect`` and ``p_l / detect_loss`` (each estimate over its reporting
threshold), and a fault is reported when either exceeds its threshold.
Baselines: network tomography (:func:`tomography`: non-negative least squares over the
path-link incidence, the flows' log slowdown against the nominal model as the sum of
non-negative per-link terms, ``scipy.optimize.lsq_linear``) and vote counting
(:func:`vote_count`: every slow flow votes for its links, a link's score the voting
fraction of the flows through it).

The package holds one module per stage: ``_problem`` (the constants, the host-side
:class:`LocateProblem` and the diagnostic workload), ``_forward`` (the forward models:
the fair-share model the inverse differentiates and the exact :func:`truth`),
``_observation`` (:class:`Observation`: parsing, loading, synthesising), ``_solve``
(:func:`locate`, :func:`locate_batch`: the jitted descent and the single-link refit),
``_baselines`` (:func:`tomography`, :func:`vote_count`) and ``_result``
(:class:`LocateResult`).
"""

from ._baselines import tomography, vote_count
from ._observation import Observation, load_observation, observe, parse_observation
from ._problem import (DEFAULT_STEPS, DETECT_LOSS, LOSS_MAX, PHI_MIN, PRESET_COUNTERS,
                       PRESET_ROUTING, REFIT_CANDIDATES, REFIT_GRID, ROUTINGS, LocateProblem,
                       diagnostic_workload, locate_problem)
from ._result import LocateResult
from ._solve import locate, locate_batch

# public outside __all__: the exact observation model, the split under given capacities
# and the model's other constants
from ._forward import path_split, truth  # noqa: F401
from ._problem import (COUNTER_SIGMA, LOSS_SCALE, LOSS_SIGMA, SATURATION,  # noqa: F401
                       TAU_END, TAU_START)

__all__ = ["LocateProblem", "LocateResult", "Observation", "locate", "locate_batch", "observe",
           "tomography",
           "vote_count", "diagnostic_workload", "locate_problem", "load_observation",
           "parse_observation", "ROUTINGS", "PRESET_ROUTING", "PRESET_COUNTERS",
           "DEFAULT_STEPS", "PHI_MIN", "LOSS_MAX", "DETECT_LOSS", "REFIT_CANDIDATES",
           "REFIT_GRID"]
