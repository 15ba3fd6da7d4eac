"""The convenience form of a fluid run: one call with every option as a keyword.

:func:`simulate_fluid` is :func:`~fabric_jax.fluid.prepare` then
:func:`~fabric_jax.fluid.run`, with the options given flat (``law=``, ``flow_control=``,
``buffer=``, ``reorder=``, ...) and grouped here into the option objects
(:func:`options_of`).  :func:`simulate_fluid_batched` prepares one problem per scenario
and runs them as one batch (:func:`~fabric_jax.fluid.stack`,
:func:`~fabric_jax.fluid.loop.run_batched`).
"""

from __future__ import annotations

import inspect

import numpy as np

from .. import links as lk
from .. import queueing as qm
from .. import receiver as rx
from .options import (CongestionControl, FlowControlConfig, Numerics, QoS, Receiver,
                      SaveAt, Solver)
from .problem import check_state, prepare
from .result import FluidResult
from .loop import run, run_batched, stack

__all__ = ["simulate_fluid", "simulate_fluid_batched", "options_of", "prepare_kwargs"]

#: The arguments of :func:`prepare` that are data, not options.
DATA_ARGS = ("arrival", "deps", "delay", "latency", "line_rate", "base_rtt", "link_latency",
             "nic_links", "routing", "faults")


def options_of(*, law="none", params=None, flow_control="none", fc_params=None, buffer=None,
               shared_buffer=None, reorder=True, loss_recovery="selective",
               mtu=rx.DEFAULT_MTU, reorder_tolerance=0.0,
               burstiness=qm.DEFAULT_BURSTINESS, traffic_class=None, classes=None,
               solver_iterations=None, solver_unroll=0, solver_check_every=1, smooth=None,
               fifo_bands=lk.DEFAULT_FIFO_BANDS, delay_steps=None, save_every=None,
               stop_when_idle=False) -> dict:
    """The option objects of :func:`prepare` from :func:`simulate_fluid`'s flat keywords:
    ``{"cc", "flow_control", "receiver", "qos", "solver", "numerics", "save"}``."""
    return dict(
        cc=CongestionControl(law, params),
        flow_control=FlowControlConfig(flow_control, fc_params, buffer, shared_buffer),
        receiver=Receiver(reorder, loss_recovery, mtu, reorder_tolerance, burstiness),
        qos=QoS(traffic_class, classes),
        solver=Solver(solver_iterations, solver_unroll, solver_check_every, smooth),
        numerics=Numerics(fifo_bands, delay_steps),
        save=SaveAt(save_every, stop_when_idle))


def prepare_kwargs(incidence, capacity, size, *, dt, n_steps, **kwargs):
    """:func:`prepare` from :func:`simulate_fluid`'s flat keyword arguments (all but
    ``init_state``).

    Raises:
      ValueError: an argument :func:`simulate_fluid` does not take, or any of
        :func:`prepare`'s.
    """
    unknown = sorted(set(kwargs) - set(_KEYWORDS) - {"init_state"})
    if unknown:
        raise ValueError(f"unknown arguments {unknown} (arguments of simulate_fluid)")
    if kwargs.get("init_state") is not None:
        raise ValueError("init_state: pass the state to fabric_jax.fluid.run instead")
    kwargs.pop("init_state", None)
    data = {k: kwargs.pop(k) for k in DATA_ARGS if k in kwargs}
    return prepare(incidence, capacity, size, dt=dt, n_steps=n_steps, **data,
                   **options_of(**kwargs))


def simulate_fluid(incidence, capacity, size, *, dt, n_steps: int, law="none", params=None,
                   arrival=None, deps=None, delay=None, latency=None, line_rate=None,
                   base_rtt=None, flow_control="none", fc_params=None, buffer=None,
                   smooth=None, save_every: int | None = None,
                   solver_iterations: int | None = None, solver_unroll: int = 0,
                   solver_check_every: int = 1, routing=None, faults=None,
                   init_state=None, link_latency=None, nic_links=None, reorder: bool = True,
                   loss_recovery: str = "selective", mtu: float = rx.DEFAULT_MTU,
                   reorder_tolerance: float = 0.0, traffic_class=None, classes=None,
                   shared_buffer=None, stop_when_idle: bool = False,
                   fifo_bands: int = lk.DEFAULT_FIFO_BANDS,
                   burstiness: float = qm.DEFAULT_BURSTINESS,
                   delay_steps: int | None = None) -> FluidResult:
    """Fluid simulation of flows under congestion control and link-level flow control:
    :func:`fabric_jax.fluid.prepare` then :func:`fabric_jax.fluid.run`, with every
    option a flat keyword (each group is documented on its option object).

    Args:
      incidence, capacity, size, dt, n_steps, arrival, deps, delay, latency, line_rate,
        base_rtt, link_latency, nic_links, routing, faults: the run's data, as
        :func:`fabric_jax.fluid.prepare` takes them.
      law, params: :class:`~fabric_jax.fluid.CongestionControl` (``law``, ``params``).
      flow_control, fc_params, buffer, shared_buffer:
        :class:`~fabric_jax.fluid.FlowControlConfig` (``mode``, ``params``, ``buffer``,
        ``shared_buffer``).
      reorder, loss_recovery, mtu, reorder_tolerance, burstiness:
        :class:`~fabric_jax.fluid.Receiver`.
      traffic_class, classes: :class:`~fabric_jax.fluid.QoS`.
      solver_iterations, solver_unroll, solver_check_every, smooth:
        :class:`~fabric_jax.fluid.Solver` (``iterations``, ``unroll``, ``check_every``,
        ``smooth``).
      fifo_bands, delay_steps: :class:`~fabric_jax.fluid.Numerics`.
      save_every, stop_when_idle: :class:`~fabric_jax.fluid.SaveAt` (``every``,
        ``stop_when_idle``).
      init_state: continue a run: ``FluidResult.state`` of an earlier call, or a
        :class:`fabric_jax.checkpoint.Checkpoint` loaded from disk.  The other
        arguments must be those of the earlier call (only ``n_steps`` and
        ``save_every`` may change).  On CPU, N steps + resume + M steps is
        bit-identical to N + M steps in one call.

    Returns:
      :class:`FluidResult`.

    Raises:
      ValueError: bad shapes or values, naming the argument (``params`` of another
        law; ``fc_params`` not a ``FlowControlParams`` or PFC thresholds without PFC;
        ``routing`` whose paths miss incidence entries; a multipath incidence without
        ``routing``; ``faults``: a time not finite or negative, a link out of range, a
        factor outside ``[0, 1]``; ``init_state``: a structure, shape or dtype that does
        not match this run; ``reorder`` not a bool, ``loss_recovery`` unknown, ``mtu``
        not > 0, ``reorder_tolerance`` < 0; ``traffic_class`` not ``[flows]`` integers
        in ``[0, n_classes)``; ``classes`` not a ``TrafficClasses``; ``shared_buffer``
        whose maps or ``alpha`` do not fit the links / classes; ``fifo_bands`` not a
        positive integer).
    """
    problem = prepare(
        incidence, capacity, size, dt=dt, n_steps=n_steps, arrival=arrival, deps=deps,
        delay=delay, latency=latency, line_rate=line_rate, base_rtt=base_rtt,
        link_latency=link_latency, nic_links=nic_links, routing=routing, faults=faults,
        **options_of(law=law, params=params, flow_control=flow_control,
                     fc_params=fc_params, buffer=buffer, shared_buffer=shared_buffer,
                     reorder=reorder, loss_recovery=loss_recovery, mtu=mtu,
                     reorder_tolerance=reorder_tolerance, burstiness=burstiness,
                     traffic_class=traffic_class, classes=classes,
                     solver_iterations=solver_iterations, solver_unroll=solver_unroll,
                     solver_check_every=solver_check_every, smooth=smooth,
                     fifo_bands=fifo_bands, delay_steps=delay_steps, save_every=save_every,
                     stop_when_idle=stop_when_idle))
    state = None if init_state is None else check_state(problem, init_state)
    return run(problem, state)


def simulate_fluid_batched(incidence, capacity, size, *, scenarios=None,
                           **kwargs) -> FluidResult:
    """Many fluid scenarios of one shape in one compiled program: :func:`simulate_fluid`
    ``vmap``-ed over a leading scenario axis.

    Scenario ``b`` is ``simulate_fluid(incidence, capacity[b], size[b], **kwargs,
    **scenarios[b])``: a load sweep (sizes), degraded links (capacities), a tuning sweep
    (``scenarios=[{"params": ...}, ...]``), seeds of a workload (``arrival``).  Each
    scenario is checked and prepared on the host as :func:`simulate_fluid` does; they
    must share every static choice (law, flow control, routing policy, ``n_steps`` and
    ``save_every``, the NIC-port layout the host proves) and every array shape, so that
    one program runs them all.  Arrays equal in every scenario (the hop table, usually)
    are passed once, not stacked.  The batch shares one compilation and, on an
    accelerator, each kernel launch (a step is launch-bound there); what it costs per
    scenario against a run alone is measured in ``docs/performance.md``
    (``experiments/bench_fluid_batched.py``).  The per-step
    solves' while loops run until every scenario's has converged (``vmap`` of a loop:
    a converged scenario's state is held, and its ``info.solver_iterations`` stays its
    own); the results are its own run's up to the order of float sums (bit for bit on
    the CPU in ``tests/fluid/test_fluid_batched.py``).

    Args:
      incidence: as :func:`simulate_fluid` (shared).
      capacity: ``[scenarios, links]`` bytes/s, or ``[links]`` shared.
      size: ``[scenarios, flows]`` bytes, or ``[flows]`` shared.
      scenarios: optional list of dicts, one per scenario, of further
        :func:`simulate_fluid` keyword arguments that differ between scenarios (a key
        may not also be in ``kwargs``).
      **kwargs: :func:`simulate_fluid` keyword arguments shared by every scenario
        (``dt`` and ``n_steps`` among them).

    Returns:
      :class:`FluidResult` with a leading scenario axis on every array.

    Raises:
      ValueError: nothing batched, batch sizes that differ, a key both in ``kwargs``
        and a scenario, an unknown argument, scenarios whose static choices or array
        shapes differ (each named with its index), or any of :func:`simulate_fluid`'s.
    """
    batch = {}
    if np.ndim(capacity) == 2:
        batch["capacity"] = np.shape(capacity)[0]
    if np.ndim(size) == 2:
        batch["size"] = np.shape(size)[0]
    if scenarios is not None:
        if not (isinstance(scenarios, (list, tuple))
                and all(isinstance(sc, dict) for sc in scenarios)):
            raise ValueError("scenarios: a list of dicts of simulate_fluid keyword "
                             f"arguments, one per scenario; got {type(scenarios).__name__}")
        batch["scenarios"] = len(scenarios)
    if not batch:
        raise ValueError("simulate_fluid_batched: nothing is batched; give capacity "
                         "[scenarios, links], size [scenarios, flows] or scenarios=[...] "
                         "(one scenario: use simulate_fluid)")
    if len(set(batch.values())) > 1:
        raise ValueError(f"the batch sizes differ: {batch}; give every batched argument "
                         "the same number of scenarios")
    n = next(iter(batch.values()))
    if n < 1:
        raise ValueError("simulate_fluid_batched: the batch is empty")
    problems = []
    for b in range(n):
        extra = {} if scenarios is None else scenarios[b]
        both = sorted(set(extra) & set(kwargs))
        if both:
            raise ValueError(f"scenarios[{b}]: {both} also given for every scenario; give "
                             "each argument one way")
        unknown = sorted((set(extra) | set(kwargs)) - set(_KEYWORDS))
        if unknown:
            raise ValueError(f"scenarios[{b}]: unknown arguments {unknown} (arguments of "
                             "simulate_fluid)")
        args = dict(kwargs, **extra)
        if args.get("init_state") is not None:
            raise ValueError(f"scenarios[{b}]: init_state is not supported in a batch; "
                             "run the scenario with simulate_fluid")
        args.pop("init_state", None)
        missing = sorted({"dt", "n_steps"} - set(args))
        if missing:
            raise ValueError(f"scenarios[{b}]: missing arguments {missing} (arguments of "
                             "simulate_fluid)")
        problems.append(prepare_kwargs(incidence, capacity[b] if "capacity" in batch
                                       else capacity,
                                       size[b] if "size" in batch else size, **args))
    batch_problem, axes = stack(problems)
    return run_batched(batch_problem, axes)


#: The keyword arguments of :func:`simulate_fluid` (besides ``incidence``, ``capacity``,
#: ``size``).
_KEYWORDS = tuple(name for name, p in inspect.signature(simulate_fluid).parameters.items()
                  if p.kind is inspect.Parameter.KEYWORD_ONLY)
