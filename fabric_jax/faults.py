"""Link faults during a run: a schedule of capacity factors (fail, degrade, recover).

Units: times in seconds; a *factor* multiplies a link's nominal capacity (bytes/s):
``0`` = the link fails, ``0 < f < 1`` = it degrades (e.g. a lane of a 4-lane port goes
down: ``f = 0.75``), ``1`` = nominal (a recovery).

A schedule is a list of events ``(time, links, factor)``; from ``time`` on, every link
in ``links`` runs at ``factor * capacity`` until a later event sets it again.  Events
are absolute (a later event *replaces* the factor, it does not multiply it), and
events at equal times apply in the order given.

Host side, :func:`fault_schedule` validates the events and compiles them into a
piecewise-constant table (:class:`FaultSchedule`): ``step [rows]`` (the first time step
at which each row applies) and ``factor [rows, links]`` (every link's factor from then
on; row 0 is all ones from step 0).  Device side, :func:`capacity_factor` picks the row
with ``searchsorted`` on the step index: one gather per step, no Python loop.

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
without a live path stall and are reported (``FluidInfo.stranded``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["LinkEvent", "FaultSchedule", "link_event", "fault_schedule", "capacity_factor"]


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
class FaultSchedule:
    """A compiled, validated schedule (a pytree: usable inside ``jit``/``vmap``).

    Attributes:
      step: ``[rows]`` int32, first time step at which each row applies (row 0: step 0),
        non-decreasing.
      factor: ``[rows, links]`` capacity factor of each link from that step on.
    """

    step: Any
    factor: Any


jax.tree_util.register_dataclass(FaultSchedule)


def _as_event(e, i) -> LinkEvent:
    if isinstance(e, LinkEvent):
        return e
    if isinstance(e, dict):
        try:
            return link_event(e["time"], e["links"], e.get("factor", 0.0))
        except KeyError as err:
            raise ValueError(f"faults[{i}] must have keys 'time', 'links' (and 'factor'); "
                             f"missing {err}") from None
    if isinstance(e, (tuple, list)) and len(e) in (2, 3):
        return link_event(*e)
    raise ValueError(f"faults[{i}] must be a LinkEvent, a (time, links, factor) tuple or a "
                     f"dict with keys time/links/factor; got {e!r}")


def fault_schedule(faults: Iterable, n_links: int, dt: float) -> FaultSchedule:
    """Validates fault events and compiles them into a :class:`FaultSchedule`.

    Args:
      faults: events: :class:`LinkEvent`, ``(time_s, links, factor)`` tuples or dicts
        with keys ``time``, ``links``, ``factor``; or an already compiled
        :class:`FaultSchedule` (its shape is checked against ``n_links``).
      n_links: number of links of the network.
      dt: the fluid step, seconds (event times are converted to step indices).

    Raises:
      ValueError: naming ``faults`` and the bad event: a time that is not finite or is
        negative, a link index out of ``[0, n_links)``, a factor outside ``[0, 1]``.
    """
    if isinstance(faults, FaultSchedule):
        f = faults.factor
        if np.ndim(f) != 2 or np.shape(f)[1] != n_links:
            raise ValueError(f"faults.factor must be [rows, links] with links = {n_links}; "
                             f"got shape {np.shape(f)}")
        return faults
    if isinstance(faults, (LinkEvent, dict)):
        faults = [faults]
    try:
        events = [_as_event(e, i) for i, e in enumerate(faults)]
    except TypeError:
        raise ValueError(f"faults must be a list of events (time_s, links, factor); "
                         f"got {faults!r}") from None
    parsed = []
    for i, e in enumerate(events):
        try:
            t, fac = float(e.time), float(e.factor)
        except (TypeError, ValueError):
            raise ValueError(f"faults[{i}]: time and factor must be numbers; got {e!r}") from None
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"faults[{i}].time must be a finite number of seconds >= 0; "
                             f"got {e.time!r}")
        if not (0.0 <= fac <= 1.0):
            raise ValueError(f"faults[{i}].factor must be in [0, 1] (0 fail, 1 recover); "
                             f"got {e.factor!r}")
        links = np.asarray(e.links)
        if links.size == 0 or links.dtype.kind not in "iu":
            raise ValueError(f"faults[{i}].links must be a non-empty list of integer link "
                             f"indices; got {e.links!r}")
        if links.min() < 0 or links.max() >= n_links:
            raise ValueError(f"faults[{i}].links must be in [0, {n_links}); got {e.links!r}")
        parsed.append((int(math.ceil(float(f"{t / dt:.9g}"))), links, fac))
    rows_step, rows = [0], [np.ones(n_links)]
    for k, links, fac in sorted(parsed, key=lambda p: p[0]):  # stable: equal times in order
        row = rows[-1].copy()
        row[links] = fac
        if k == rows_step[-1]:
            rows[-1] = row
        else:
            rows_step.append(k)
            rows.append(row)
    if rows_step[-1] >= np.iinfo(np.int32).max:
        raise ValueError("faults: an event time is beyond 2^31 steps of dt")
    return FaultSchedule(step=jnp.asarray(rows_step, jnp.int32),
                         factor=jnp.asarray(np.stack(rows)))


def capacity_factor(schedule: FaultSchedule, k) -> Any:
    """``[links]`` capacity factors in force during step ``k`` (int scalar, jit-safe)."""
    row = jnp.searchsorted(schedule.step, jnp.asarray(k, schedule.step.dtype), side="right") - 1
    return schedule.factor[jnp.maximum(row, 0)]
