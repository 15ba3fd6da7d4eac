"""The options of a fluid run, each a small object that knows its defaults and checks.

:func:`fabric_jax.fluid.prepare` takes the run's data (incidence, capacities, sizes and
the flows' lifecycle) as arrays and every other choice as one of these objects, the
way diffrax's ``diffeqsolve`` takes a solver, a ``SaveAt`` and a step-size controller:

* :class:`CongestionControl` -- the senders' law and its parameters;
* :class:`FlowControlConfig` -- link-level flow control, its thresholds and buffers;
* :class:`Receiver` -- the receiving NIC (reordering, loss recovery);
* :class:`QoS` -- traffic classes and their arbitration;
* :class:`Solver` -- the per-step max-min solves (exact loop options, fixed iterations,
  smoothing for gradients);
* :class:`Numerics` -- resolution choices beyond ``dt`` (FIFO bands, delay lines);
* :class:`SaveAt` -- what to save and when to stop.

Each object checks its own values when built (a ``ValueError`` naming the field);
checks that need the run's sizes (a buffer of the wrong shape, parameters of another
law) are made by :func:`~fabric_jax.fluid.prepare`.  A plain string is accepted where
an object holds one choice: ``cc="dcqcn"`` is ``CongestionControl("dcqcn")``,
``flow_control="pfc"`` is ``FlowControlConfig("pfc")``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import flowcontrol as fcm
from .. import links as lk
from .. import queueing as qm
from .. import receiver as rx
from .. import smooth as sm
from ..cc import base as ccbase
from .checks import check_fifo_bands

__all__ = ["CongestionControl", "FlowControlConfig", "Receiver", "QoS", "Solver", "Numerics",
           "SaveAt", "SAVE_EVERY", "save_schedule", "as_options"]


def _positive_int(name, value, *, allow_none=False, minimum=1):
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not (isinstance(value, (int, np.integer))
                                                   and value >= minimum):
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class CongestionControl:
    """The senders' congestion-control law (:mod:`fabric_jax.cc`).

    Attributes:
      law: a :class:`fabric_jax.cc.Law` or its name (``"none"``, ``"dcqcn"``,
        ``"ibcc"``, ``"hpcc"``, ``"swift"``, ``"nscc"``).
      params: the law's parameter pytree (default ``law.default_params()``); must have
        the structure of the law's own parameters.
    """

    law: Any = "none"
    params: Any = None

    def __post_init__(self):
        object.__setattr__(self, "law", ccbase.get(self.law))

    def resolved_params(self):
        """``params``, or the law's defaults."""
        return self.law.default_params() if self.params is None else self.params


@dataclasses.dataclass(frozen=True)
class FlowControlConfig:
    """Link-level flow control (:mod:`fabric_jax.flowcontrol`) and the buffers it guards.

    Attributes:
      mode: a mode of :data:`fabric_jax.flowcontrol.MODES` or a
        :class:`~fabric_jax.flowcontrol.FlowControl`.
      params: :class:`~fabric_jax.flowcontrol.FlowControlParams`; default from
        ``buffer`` (PFC thresholds via :func:`~fabric_jax.flowcontrol.pfc_thresholds`
        with a reaction time of ``pause_delay * dt``).  ``xoff``/``xon`` other than
        ``buffer`` only with ``mode="pfc"``.
      buffer: ``[links]`` (or scalar) buffer per link, bytes (default ``inf``).
      shared_buffer: :class:`fabric_jax.flowcontrol.SharedBuffer`
        (:func:`fabric_jax.flowcontrol.shared_buffer`), or a
        :class:`fabric_jax.Topology` for its defaults: switch memory shared by its
        queues with dynamic thresholds.  ``None``: static per-port pools of ``buffer``.
    """

    mode: Any = "none"
    params: Any = None
    buffer: Any = None
    shared_buffer: Any = None

    def __post_init__(self):
        mode = self.mode
        if isinstance(mode, str):
            mode = fcm.FlowControl(mode)
        if not isinstance(mode, fcm.FlowControl):
            raise ValueError("flow_control must be a mode string or a FlowControl; "
                             f"got {self.mode!r}")
        object.__setattr__(self, "mode", mode)


@dataclasses.dataclass(frozen=True)
class Receiver:
    """The receiving NIC (:mod:`fabric_jax.receiver`).

    Attributes:
      reorder: the NIC accepts out-of-order packets (default ``True``: spraying costs
        nothing).  ``False``: a flow split over paths of different delay (latency +
        queueing) loses the out-of-order arrivals and everything after them until a
        go-back-N resend arrives (a plain RoCE NIC).
      loss_recovery: ``"selective"`` (only lost bytes are resent) or ``"go_back_n"``
        (a loss also wastes what the flow sends until it is detected, one base RTT
        plus ``rto_steps`` of the flow control in ``drop`` mode).
      mtu: packet size, bytes, for the reordering and go-back-N models (default 4096).
      reorder_tolerance: path-delay difference a ``reorder=False`` NIC absorbs, s.
      burstiness: arrival burstiness ``kappa`` of the packet-scale port waits that
        reorder a sprayed flow (:mod:`fabric_jax.queueing`; 1 is the analytic model).
    """

    reorder: bool = True
    loss_recovery: str = "selective"
    mtu: float = rx.DEFAULT_MTU
    reorder_tolerance: float = 0.0
    burstiness: float = qm.DEFAULT_BURSTINESS

    def __post_init__(self):
        rx.check_options(self.reorder, self.loss_recovery, self.mtu, self.reorder_tolerance)
        qm.check_burstiness(self.burstiness)


@dataclasses.dataclass(frozen=True)
class QoS:
    """Traffic classes (:mod:`fabric_jax.qos`).

    Attributes:
      traffic_class: ``[flows]`` int class of each flow (default all 0).
      classes: :class:`fabric_jax.qos.TrafficClasses` (number of classes, ``"ets"`` /
        ``"strict"`` arbitration, weights); default ``max(traffic_class) + 1`` classes
        under ETS with equal weights.  One class runs the single-class model.
    """

    traffic_class: Any = None
    classes: Any = None


@dataclasses.dataclass(frozen=True)
class Solver:
    """The per-step max-min solves (:func:`fabric_jax.fairness.solve`).

    Attributes:
      iterations: fixed iteration count of each solve (needed for reverse-mode
        gradients); default: exact while loop, or ``flows + 1`` with ``smooth``.
      unroll: iterations of each solve (and rounds of the NIC water-fill) run as a loop
        of known trip count before its while loop, which finishes what is left
        (:func:`fabric_jax.fairness.solve`, ``unroll``): bit-identical results, for
        accelerators, where a step that settles within them runs with no
        data-dependent stop.  Default 0 (the plain while loop, fastest on a CPU).  Not
        with ``iterations`` or ``smooth``.
      check_every: iterations of each solve's while loop between its tests "is any
        flow still open" (``check_every`` of :func:`fabric_jax.fairness.solve`):
        bit-identical results and iteration counts; on a GPU each test is a predicate
        read back to the host, so a deep solve waits on the host that many times less
        often, for at most ``check_every - 1`` idle iterations.  Default 1.  Not with
        ``iterations`` or ``smooth``.
      smooth: :class:`fabric_jax.smooth.Smoothing` (default exact): finite gradients
        through marking and pause thresholds.
    """

    iterations: int | None = None
    unroll: int = 0
    check_every: int = 1
    smooth: Any = None

    def __post_init__(self):
        _positive_int("solver_iterations", self.iterations, allow_none=True)
        smooth = sm.EXACT if self.smooth is None else self.smooth
        if not isinstance(smooth, sm.Smoothing):
            raise ValueError("smooth must be a fabric_jax.smooth.Smoothing "
                             "(e.g. smooth.smooth(0.05))")
        object.__setattr__(self, "smooth", smooth)


@dataclasses.dataclass(frozen=True)
class Numerics:
    """Resolution choices beyond the step ``dt``.

    Attributes:
      fifo_bands: bands per egress FIFO (default 8; the state grows by ``[flows, hops,
        fifo_bands]``); 1 keeps standing queues well mixed.
      delay_steps: length of the delay lines in steps (the feedback ring and the
        receiver wires; static, part of the compiled program).  ``None``: this run's
        longest feedback delay ``max(base_rtt) / dt``.  Runs that differ only in
        latencies, base RTTs or ``dt`` compile one program when they pass the same
        value (at least each run's own need; results are the same, the lines only get
        longer: ``[delay_steps, flows, 7]`` floats for the ring).  A value below the
        need is a ``ValueError`` that states the need.
    """

    fifo_bands: int = lk.DEFAULT_FIFO_BANDS
    delay_steps: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "fifo_bands", check_fifo_bands(self.fifo_bands))


@dataclasses.dataclass(frozen=True)
class SaveAt:
    """What a run saves and when it stops.

    Attributes:
      every: save a :class:`fabric_jax.fluid.FluidTrajectory` snapshot every this many
        steps (must divide ``n_steps``); ``None``: no trajectory.
      stop_when_idle: skip the rest of the run, one ``every`` chunk (or the whole run
        without a trajectory) at a time, once the fabric is idle for good: every flow
        finished or released after the horizon, no byte queued or on a wire, no link
        paused.  Every flow result is what the full run gives; the law's state and the
        feedback ring stop where the last simulated chunk left them (the law would go
        on adapting with no traffic), and the skipped snapshots repeat an idle fabric.
        Not for reverse-mode gradients through ``n_steps`` (a ``lax.cond``; the skipped
        chunks have no gradient).
    """

    every: int | None = None
    stop_when_idle: bool = False

    def __post_init__(self):
        _positive_int("save_every", self.every, allow_none=True)


#: Snapshot period of the studies' runs, steps: the chunk in which a run with
#: ``SaveAt(every, stop_when_idle=True)`` checks that the fabric is idle for good.
SAVE_EVERY = 20


def save_schedule(n_steps: int, *, round_up: bool) -> tuple[int, int]:
    """``(n_steps, every)`` of a run that saves a snapshot every ``every`` steps.

    :class:`SaveAt` needs ``every`` to divide ``n_steps``; a study meets that in one of
    two ways:

    * ``round_up=True``: ``n_steps`` rounded up to a multiple of :data:`SAVE_EVERY`,
      saved every :data:`SAVE_EVERY` steps (the horizon is a bound the run stops short
      of: the scale study, the all-reduce sweep);
    * ``round_up=False``: ``n_steps`` kept (it is the user's), saved every the largest
      divisor of ``2 x SAVE_EVERY`` up to :data:`SAVE_EVERY` (20, 10, 8, 5, 4, 2, 1)
      that divides it (the compare study).

    Args:
      n_steps: the wanted horizon, steps (a positive integer).
      round_up: extend the horizon (True) or keep it (False).

    Returns:
      ``(n_steps, every)``, both ints.
    """
    n_steps = _positive_int("n_steps", int(n_steps))
    if round_up:
        return -(-n_steps // SAVE_EVERY) * SAVE_EVERY, SAVE_EVERY
    every = next(d for d in range(SAVE_EVERY, 0, -1)
                 if (2 * SAVE_EVERY) % d == 0 and n_steps % d == 0)
    return n_steps, every


#: The option classes and the shorthand each accepts for its first field.
_SHORTHAND = {CongestionControl: ("law", str), FlowControlConfig: ("mode", (str, fcm.FlowControl))}


def as_options(cls, value, name: str):
    """``value`` as a ``cls`` option: itself, ``cls()`` for ``None``, or the shorthand
    (``"dcqcn"`` for ``CongestionControl("dcqcn")``, a law object likewise, a flow-control
    mode or :class:`~fabric_jax.flowcontrol.FlowControl`)."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    short = _SHORTHAND.get(cls)
    if short is not None:
        if isinstance(value, short[1]) or (cls is CongestionControl
                                           and isinstance(value, ccbase.Law)):
            return cls(**{short[0]: value})
    raise ValueError(f"{name} must be a fabric_jax.fluid.{cls.__name__}"
                     + (" or a name" if short else "") + f"; got {type(value).__name__}")
