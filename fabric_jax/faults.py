"""Link faults during a run: capacity factors (fail, degrade, recover) and lossy links.

Units: times in seconds; a *factor* multiplies a link's nominal capacity (bytes/s):
``0`` = the link fails, ``0 < f < 1`` = it degrades (e.g. a lane of a 4-lane port goes
down: ``f = 0.75``), ``1`` = nominal (a recovery).  A *loss* is the fraction ``p`` of
the bytes a link carries that it corrupts and the next port drops (a gray failure: a
dirty optic or a marginal cable with a raised bit-error rate; SprayCheck, 2026, locates
links dropping 1.5 % and 0.5 % of their packets): ``0`` = a clean link.

A schedule is a list of events.  A capacity event ``(time, links, factor)``
(:func:`link_event`): from ``time`` on, every link in ``links`` runs at ``factor *
capacity`` until a later event sets it again.  A loss event (:func:`lossy_link`,
:class:`LossEvent`): from ``time`` on, every link in ``links`` drops the fraction
``loss`` of what it carries, until a later loss event sets it again.  The two kinds
are independent (a loss event leaves the factor alone and vice versa).  Events are
absolute (a later event *replaces* the value, it does not multiply it), and events at
equal times apply in the order given.

Host side, :func:`fault_schedule` validates the events and compiles them into a
piecewise-constant table (:class:`FaultSchedule`): ``step [rows]`` (the first time step
at which each row applies), ``factor [rows, links]`` (every link's factor from then
on; row 0 is all ones from step 0) and, when any loss event is given, ``loss [rows,
links]`` (row 0 all zeros; ``None`` otherwise, so a run without lossy links carries
no loss model at all).  Device side, :func:`capacity_factor` and
:func:`loss_fraction` pick the row with ``searchsorted`` on the step index: one gather
per step, no Python loop.

Time discretisation (stated): the fluid loop (:func:`fabric_jax.fluid.simulate_fluid`,
``faults=``) advances in steps ``[k dt, (k + 1) dt)``.  An event at time ``T`` takes
effect from the first step that *starts* at or after ``T``: ``k_T = ceil(T / dt)``
(``T / dt`` is rounded to 9 significant digits first, so ``T = 100 * dt`` gives
``k_T = 100`` despite binary round-off).  Step indices, not float times, are compared
on the device, so the schedule is exact and a resumed run (``init_state=``) sees the
same events at the same steps.

What a fault does to the fluid model is described in :mod:`fabric_jax.fluid`
("Faults"): bytes queued on a failed link are dropped and returned to their senders,
routing policies react (:mod:`fabric_jax.routing`, "Link failures"), and flows left
without a live path stall and are reported (``FluidInfo.stranded``).  A lossy link
carries every byte sent to it (retransmissions included, so they occupy it) and drops
the fraction ``loss`` of them: the sender resends what was lost (selective
retransmission; under ``loss_recovery="go_back_n"`` each loss also opens a discard
window), the drops enter the law's loss signal, and each link's drops are counted
(``FluidResult.link_corrupted``, the receiving port's error counter).  One flow alone
on one lossy link at capacity ``C`` therefore delivers ``C (1 - p)`` (its goodput).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["LinkEvent", "LossEvent", "FaultSchedule", "link_event", "lossy_link",
           "fault_schedule", "capacity_factor", "loss_fraction"]


@dataclasses.dataclass(frozen=True)
class LinkEvent:
    """One fault event.

    Attributes:
      time: when it happens, seconds (>= 0).
      links: link indices it affects (tuple of ints).
      factor: capacity factor from then on, in ``[0, 1]`` (0 fail, 1 recover).
    """

    time: float
    links: tuple
    factor: float


def link_event(time: float, links, factor: float = 0.0) -> LinkEvent:
    """An event: ``links`` (an int or a sequence of ints) run at ``factor`` from ``time`` (s)."""
    return LinkEvent(time=time, links=tuple(np.atleast_1d(np.asarray(links)).tolist()),
                     factor=factor)


@dataclasses.dataclass(frozen=True)
class LossEvent:
    """One lossy-link event.

    Attributes:
      time: when it happens, seconds (>= 0).
      links: link indices it affects (tuple of ints).
      loss: fraction of the bytes each link carries that it drops from then on, in
        ``[0, 1)`` (0: the link is clean again).
    """

    time: float
    links: tuple
    loss: float


def lossy_link(links, loss: float, time: float = 0.0) -> LossEvent:
    """An event: ``links`` (an int or a sequence of ints) drop the fraction ``loss`` of
    the bytes they carry from ``time`` (s) on, e.g. ``lossy_link(12, 0.015)`` for a link
    dropping 1.5 % of its packets (validated by :func:`fault_schedule`)."""
    return LossEvent(time=time, links=tuple(np.atleast_1d(np.asarray(links)).tolist()),
                     loss=loss)


@dataclasses.dataclass(frozen=True)
class FaultSchedule:
    """A compiled, validated schedule (a pytree: usable inside ``jit``/``vmap``).

    Attributes:
      step: ``[rows]`` int32, first time step at which each row applies (row 0: step 0),
        non-decreasing.
      factor: ``[rows, links]`` capacity factor of each link from that step on.
      loss: ``[rows, links]`` fraction of the bytes each link drops from that step on,
        or ``None`` (no lossy link in the schedule).
    """

    step: Any
    factor: Any
    loss: Any = None


jax.tree_util.register_dataclass(FaultSchedule)


def _as_event(e, i):
    if isinstance(e, (LinkEvent, LossEvent)):
        return e
    if isinstance(e, dict):
        if "loss" in e and "factor" in e:
            raise ValueError(f"faults[{i}] gives both 'factor' and 'loss'; write a capacity "
                             f"event and a loss event (two entries)")
        unknown = set(e) - {"time", "links", "factor", "loss"}
        if unknown:
            raise ValueError(f"faults[{i}]: unknown key(s) {sorted(unknown)}; accepted: "
                             f"time, links, and factor or loss")
        try:
            if "loss" in e:
                return lossy_link(e["links"], e["loss"], e["time"])
            return link_event(e["time"], e["links"], e.get("factor", 0.0))
        except KeyError as err:
            raise ValueError(f"faults[{i}] must have keys 'time', 'links' (and 'factor' or "
                             f"'loss'); missing {err}") from None
    if isinstance(e, (tuple, list)) and len(e) in (2, 3):
        return link_event(*e)
    raise ValueError(f"faults[{i}] must be a LinkEvent, a LossEvent, a (time, links, factor) "
                     f"tuple or a dict with keys time/links/factor (or loss); got {e!r}")


def fault_schedule(faults: Iterable, n_links: int, dt: float) -> FaultSchedule:
    """Validates fault events and compiles them into a :class:`FaultSchedule`.

    Args:
      faults: events: :class:`LinkEvent` / :class:`LossEvent`, ``(time_s, links,
        factor)`` tuples or dicts with keys ``time``, ``links`` and ``factor`` or
        ``loss``; or an already compiled :class:`FaultSchedule` (its shape is checked
        against ``n_links``).
      n_links: number of links of the network.
      dt: the fluid step, seconds (event times are converted to step indices).

    Raises:
      ValueError: naming ``faults`` and the bad event: a time that is not finite or is
        negative, a link index out of ``[0, n_links)``, a factor outside ``[0, 1]``, a
        loss outside ``[0, 1)``.
    """
    if isinstance(faults, FaultSchedule):
        f = faults.factor
        if np.ndim(f) != 2 or np.shape(f)[1] != n_links:
            raise ValueError(f"faults.factor must be [rows, links] with links = {n_links}; "
                             f"got shape {np.shape(f)}")
        if faults.loss is not None and np.shape(faults.loss) != np.shape(f):
            raise ValueError(f"faults.loss must have the shape of faults.factor "
                             f"{np.shape(f)}; got {np.shape(faults.loss)}")
        return faults
    if isinstance(faults, (LinkEvent, LossEvent, dict)):
        faults = [faults]
    try:
        events = [_as_event(e, i) for i, e in enumerate(faults)]
    except TypeError:
        raise ValueError(f"faults must be a list of events (time_s, links, factor); "
                         f"got {faults!r}") from None
    parsed = []
    for i, e in enumerate(events):
        is_loss = isinstance(e, LossEvent)
        value = e.loss if is_loss else e.factor
        try:
            t, val = float(e.time), float(value)
        except (TypeError, ValueError):
            what = "loss" if is_loss else "factor"
            raise ValueError(f"faults[{i}]: time and {what} must be numbers; got {e!r}") from None
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"faults[{i}].time must be a finite number of seconds >= 0; "
                             f"got {e.time!r}")
        if is_loss and not (0.0 <= val < 1.0):
            raise ValueError(f"faults[{i}].loss must be the fraction of bytes the link drops, "
                             f"in [0, 1) (e.g. 0.015 for 1.5 %; 0 = clean); got {e.loss!r}")
        if not is_loss and not (0.0 <= val <= 1.0):
            raise ValueError(f"faults[{i}].factor must be in [0, 1] (0 fail, 1 recover); "
                             f"got {e.factor!r}")
        links = np.asarray(e.links)
        if links.size == 0 or links.dtype.kind not in "iu":
            raise ValueError(f"faults[{i}].links must be a non-empty list of integer link "
                             f"indices; got {e.links!r}")
        if links.min() < 0 or links.max() >= n_links:
            raise ValueError(f"faults[{i}].links must be in [0, {n_links}); got {e.links!r}")
        parsed.append((int(math.ceil(float(f"{t / dt:.9g}"))), links, val, is_loss))
    lossy = any(p[3] for p in parsed)
    rows_step, rows = [0], [np.stack([np.ones(n_links), np.zeros(n_links)])]
    for k, links, val, is_loss in sorted(parsed, key=lambda p: p[0]):  # stable: equal times
        row = rows[-1].copy()
        row[int(is_loss), links] = val
        if k == rows_step[-1]:
            rows[-1] = row
        else:
            rows_step.append(k)
            rows.append(row)
    if rows_step[-1] >= np.iinfo(np.int32).max:
        raise ValueError("faults: an event time is beyond 2^31 steps of dt")
    table = np.stack(rows)
    return FaultSchedule(step=jnp.asarray(rows_step, jnp.int32),
                         factor=jnp.asarray(table[:, 0]),
                         loss=jnp.asarray(table[:, 1]) if lossy else None)


def _row(schedule: FaultSchedule, k):
    row = jnp.searchsorted(schedule.step, jnp.asarray(k, schedule.step.dtype), side="right") - 1
    return jnp.maximum(row, 0)


def capacity_factor(schedule: FaultSchedule, k) -> Any:
    """``[links]`` capacity factors in force during step ``k`` (int scalar, jit-safe)."""
    return schedule.factor[_row(schedule, k)]


def loss_fraction(schedule: FaultSchedule, k) -> Any:
    """``[links]`` fraction of the carried bytes each link drops during step ``k``
    (zeros when the schedule has no lossy link)."""
    if schedule.loss is None:
        return jnp.zeros(schedule.factor.shape[1:], schedule.factor.dtype)
    return schedule.loss[_row(schedule, k)]
