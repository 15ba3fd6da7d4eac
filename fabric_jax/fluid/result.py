"""What a fluid run returns: per-flow results, diagnostics and snapshots.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

__all__ = ["FluidResult", "FluidTrajectory", "FluidInfo", "COMPLETION_RTOL"]


#: A flow is complete when ``delivered >= size * (1 - COMPLETION_RTOL[dtype])``: float32
#: accumulation of a flow's bytes through queues and delay lines over thousands of
#: steps loses up to ~1e-5 of its size (measured: 11 B of 1 MB after 4,000 steps of a
#: 4-to-1 incast under credits), which must not leave a flow unfinished forever.  The
#: finish time moves by the time the flow needs for its last ``rtol * size`` bytes.
COMPLETION_RTOL = {np.dtype(np.float32): 3e-5, np.dtype(np.float64): 1e-6}


@dataclasses.dataclass(frozen=True)
class FluidInfo:
    """Diagnostics.

    Attributes:
      max_residual: max over steps of ``|sent - delivered - d(queued + in_flight) -
        dropped|`` in the step, bytes (float round-off only; fault drops included; over all calls of a
        resumed run).
      stalled: some flow did not finish within ``n_steps``.
      paused_time: ``[links]`` seconds each link was paused (PFC) or credit-starved
        (time-integral of ``1 - usable/C``); ``[links, classes]`` per class with
        traffic classes.
      max_queue: ``[links]`` largest egress queue seen, bytes.
      stranded_time: ``[flows]`` seconds each flow was active but had no live path
        (every path it routes on crosses a failed link, ``faults=``); zeros without
        faults.
      stranded: ``[flows]`` bool, the flow was active and stranded in the last step.
      discard_mode: ``[2, flows]`` fraction of each flow's arrivals that the receiver
        discards at the end of the run, after out-of-order arrivals (row 0) and losses
        under go-back-N (row 1) (:func:`fabric_jax.receiver.discard_step`).
      solver_iterations: ``[2]`` int32 iterations run by the per-step max-min solves
        over the run (the cut-through allocation, the NIC shares; over all calls of a
        resumed run): divided by the steps, the solves' average depth.
    """

    max_residual: Any
    stalled: Any
    paused_time: Any
    max_queue: Any
    stranded_time: Any = None
    stranded: Any = None
    discard_mode: Any = None
    solver_iterations: Any = None


@dataclasses.dataclass(frozen=True)
class FluidTrajectory:
    """Snapshots every ``save_every`` steps (leading axis ``saves``).

    Attributes:
      t: ``[saves]`` time at the end of the saved step, s.
      rate: ``[saves, flows]`` offered rate, bytes/s.
      throughput: ``[saves, flows]`` delivered bytes in the step / dt, bytes/s.
      queue: ``[saves, links]`` egress queues, bytes.
      usable: ``[saves, links]`` usable capacity (pause / credits), bytes/s.
      mark: ``[saves, flows]`` path marking probability emitted.
      law_state: the law's state pytree with a leading ``saves`` axis.
      sent, delivered, queued, dropped, in_flight, discarded: ``[saves]`` totals over
        flows, bytes.
    """

    t: Any
    rate: Any
    throughput: Any
    queue: Any
    usable: Any
    mark: Any
    law_state: Any
    sent: Any
    delivered: Any
    queued: Any
    dropped: Any
    in_flight: Any = None
    discarded: Any = None


@dataclasses.dataclass(frozen=True)
class FluidResult:
    """Result of :func:`fabric_jax.fluid.run` and :func:`fabric_jax.simulate_fluid`.

    Attributes:
      start, finish, fct: ``[flows]`` seconds (``finish = inf`` if unfinished).
      sent: ``[flows]`` bytes put on the wire (including resent bytes).
      delivered: ``[flows]`` bytes that reached the receiver (goodput).
      dropped: ``[flows]`` bytes dropped or trimmed.
      queued: ``[flows]`` bytes standing in switch queues at the end (bytes a NIC
        could not send stay unsent, in ``size - sent``).
      in_flight: ``[flows]`` bytes on the wire at the end (``sent = delivered +
        in_flight + queued + dropped + discarded``).
      link_queue: ``[links]`` egress queues at the end, bytes.
      law_state: final congestion-control state.
      trajectory: :class:`FluidTrajectory` or ``None``.
      info: :class:`FluidInfo`.
      routing_state: final routing-policy state (``routing=`` runs), else ``None``.
      state: the loop's complete carry after the last step
        (:class:`fabric_jax.fluid.FluidState`, with the step counter ``state.k``): pass it
        to :func:`fabric_jax.fluid.run` or as ``init_state=`` to continue the run, or
        save it with :func:`fabric_jax.checkpoint.save_checkpoint`.
      discarded: ``[flows]`` bytes that reached the receiver and were discarded
        (out of order without ``reorder``, or inside a go-back-N window after a loss)
        and resent (:mod:`fabric_jax.receiver`).
      link_corrupted: ``[links]`` bytes each link dropped as a lossy link
        (:func:`fabric_jax.faults.lossy_link`; the receiving port's error counter:
        Ethernet FCS errors, InfiniBand ``PortRcvErrors``), over all calls of a resumed
        run; zeros without lossy links.  Also counted in ``dropped`` (per flow).
    """

    start: Any
    finish: Any
    fct: Any
    sent: Any
    delivered: Any
    dropped: Any
    queued: Any
    link_queue: Any
    law_state: Any
    trajectory: Any
    info: FluidInfo
    routing_state: Any = None
    state: Any = None
    in_flight: Any = None
    discarded: Any = None
    link_corrupted: Any = None


for _cls in (FluidInfo, FluidTrajectory, FluidResult):
    jax.tree_util.register_dataclass(_cls)
