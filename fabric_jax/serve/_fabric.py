"""The KV-cache flows on the fabric: busy periods through the fluid engine, per preset,
and the ideal fabric through the exact event engine.

A serving fabric is idle most of the time (millisecond transfers, requests tens of
milliseconds apart), so one micro-second-step horizon over a run of seconds is out of
reach.  :func:`busy_periods` cuts the flows, sorted by release, into groups whose
line-rate transfer windows overlap: a flow joins the current group when it is released
before the group's end -- the latest, over the group's NICs, of the NIC's *serialised*
line-rate end (``end = max(end, release) + size / line_rate`` over the flows it sends or
receives: when the group drains at line rate if the NICs are the bottleneck) -- plus
``margin`` (default 50 us).  Each group is simulated
from its first release, on its own, padded to one flow count (padding flows are released
after the horizon and never send) and one horizon (:data:`HORIZON_FACTOR` x the longest
serialised group + the margin; a group with a flow unfinished then runs again with
:data:`RETRY_FACTOR` x that horizon, a second compilation only when it happens), ``batch`` groups per ``vmap``-ed fluid program
(:func:`fabric_jax.fluid.loop.stack` / ``run_batched``): one compilation per preset.
The split assumes a group has drained before the next starts; :func:`simulate_preset`
counts the groups where it did not (``overlaps``: the fabric was still busy, e.g. PFC
or retransmission tails longer than the margin) and the flows that did not finish
within the horizon (``unfinished``, never silently dropped: their requests are reported
dropped with that reason).  Bytes are checked: delivered == size for every finished flow.

The ideal fabric: every flow of the run at once on the non-blocking crossbar at NIC line
rate under exact max-min (:func:`fabric_jax.fabric_sim.simulate_ideal`; event-driven, so
idle time costs nothing), no path latency.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .. import fabric_sim
from ..fabrics import get_fabric
from ..paths import PathSet, shortest_paths

__all__ = ["busy_periods", "plan_periods", "simulate_preset", "simulate_ideal_flows",
           "run_problems", "take_paths"]

#: Horizon of a period, in units of the longest period's serialised line-rate time.
HORIZON_FACTOR = 1.3
#: A period with a flow unfinished at the horizon runs again with this many times it.
RETRY_FACTOR = 4


def busy_periods(release, size, line_rate: float, margin: float, src=None, dst=None):
    """Groups of flows whose line-rate windows overlap (module docstring).

    A group's end is the latest, over its NICs, of the NIC's *serialised* line-rate
    end (``end_nic = max(end_nic, release) + size / line_rate`` for each flow at its
    source and its destination NIC; without ``src`` / ``dst`` every flow is on one NIC).

    Returns:
      ``(group [flows] int, start [groups] s, span [groups] s)``: each flow's group, the
      group's first release and its serialised line-rate span (end - start).
    """
    release = np.asarray(release, np.float64)
    n = release.size
    src = np.zeros(n, np.int64) if src is None else np.asarray(src)
    dst = np.zeros(n, np.int64) if dst is None else np.asarray(dst)
    order = np.argsort(release, kind="stable")
    group = np.empty(n, np.int64)
    starts, spans = [], []
    end = -np.inf
    nic_end: dict = {}
    g = -1
    for f in order:                          # host-side sweep over the sorted releases
        r = float(release[f])
        if r > end + margin:
            g += 1
            starts.append(r)
            spans.append(0.0)
            end = r
            nic_end = {}
        d = float(size[f]) / line_rate
        for key in (("s", int(src[f])), ("d", int(dst[f]))):
            nic_end[key] = max(nic_end.get(key, -np.inf), r) + d
            end = max(end, nic_end[key])
        spans[g] = end - starts[g]
        group[f] = g
    return group, np.asarray(starts), np.asarray(spans)


def take_paths(ps: PathSet, idx) -> PathSet:
    """The rows ``idx`` of a :class:`~fabric_jax.paths.PathSet` (one pair per flow)."""
    return PathSet(*(np.asarray(getattr(ps, f.name))[idx]
                     for f in dataclasses.fields(ps)))


@dataclasses.dataclass
class PeriodPlan:
    """The busy periods of one run, shaped for the batched fluid program."""
    group: np.ndarray
    start: np.ndarray
    span: np.ndarray
    width: int              # flows per period (padded)
    n_steps: int
    members: list           # [groups] arrays of flow indices


def plan_periods(flows, line_rate: float, dt: float, margin: float) -> PeriodPlan:
    group, start, span = busy_periods(flows.release, flows.size, line_rate, margin,
                                      flows.src, flows.dst)
    members = [np.flatnonzero(group == g) for g in range(start.size)]
    width = max(m.size for m in members)
    horizon = HORIZON_FACTOR * float(span.max()) + margin
    n_steps = int(math.ceil(horizon / dt))
    return PeriodPlan(group, start, span, width, n_steps, members)


def _accounted(res):
    """Bytes of each flow delivered, on the wire or queued at the end of the run: a flow
    whose last bytes are still on the wire at the horizon has its finish time already
    (the delay line's), and its bytes are all accounted for."""
    return res.delivered + res.in_flight + res.queued


def run_problems(probs) -> tuple[np.ndarray, np.ndarray]:
    """Same-shaped fluid problems in one program (:func:`fabric_jax.fluid.loop.stack` /
    ``run_batched``; one plain run when they are all the same problem).

    Returns:
      ``(finish, accounted)``: float64 ``[problems, flows]`` finish times (s, ``inf``:
      unfinished) and bytes delivered, on the wire or queued at the end.
    """
    import jax

    from ..fluid.loop import run, run_batched, stack
    batch_p, axes = stack(probs)
    if all(a is None for a in jax.tree_util.tree_leaves(
            axes, is_leaf=lambda x: x is None)):           # one distinct problem
        res = run(probs[0])
        return (np.asarray(res.finish, np.float64)[None].repeat(len(probs), 0),
                np.asarray(_accounted(res), np.float64)[None].repeat(len(probs), 0))
    res = run_batched(batch_p, axes)
    return np.asarray(res.finish, np.float64), np.asarray(_accounted(res), np.float64)


def simulate_preset(topology, flows, fabric, *, line_rate: float, dt: float, margin: float,
                    seed: int = 0,
                    max_paths: int = 8, batch: int = 64, plan: PeriodPlan | None = None,
                    progress=None, fluid_options: dict | None = None) -> dict:
    """The KV flows under a preset's dynamics, busy period by busy period (module
    docstring).

    ``fluid_options`` (more keywords of :func:`fabric_jax.fluid.simulate_fluid`) default
    to the preset's switch memory (:meth:`fabric_jax.Fabric.buffer_options`: the shared
    buffers of the Ethernet presets), as the compare and scale studies run them.

    Returns:
      dict: ``finish [flows]`` s (``inf``: unfinished), ``delivered [flows]`` bytes
      delivered, on the wire or queued at the end of the flow's period,
      ``unfinished`` count, ``overlaps`` (periods still busy when the next began),
      ``periods``, ``width``, ``n_steps``, ``compile_s`` / ``run_s`` (the first batch /
      the others), ``bytes_conserved`` (bool).
    """
    plan = plan or plan_periods(flows, line_rate, dt, margin)
    if fluid_options is None:
        fluid_options = get_fabric(fabric).buffer_options(topology)
    paths = shortest_paths(topology, flows.src, flows.dst, max_paths=max_paths, seed=seed)
    n = flows.size.size
    finish = np.full(n, np.inf)
    delivered = np.zeros(n)
    w = plan.width
    times = []

    def run_groups(groups, n_steps, report):
        for b in range(-(-len(groups) // batch)):
            gs = groups[b * batch:(b + 1) * batch]
            gs_full = gs + [gs[-1]] * (batch - len(gs))       # pad the batch: one shape
            probs = []
            for g in gs_full:
                m = plan.members[g]
                idx = np.concatenate([m, np.full(w - m.size, m[0])])
                arr = np.concatenate([flows.release[m] - plan.start[g],
                                      np.full(w - m.size, 2.0 * n_steps * dt)])
                probs.append(fabric_sim.prepare_paths(
                    topology, take_paths(paths, idx), fabric, flows.size[idx], dt=dt,
                    n_steps=n_steps, arrival=arr, seed=seed, nic_rate=line_rate,
                    fluid_options=fluid_options))
            t0 = time.time()
            fin, dlv = run_problems(probs)
            times.append(time.time() - t0)
            for k, g in enumerate(gs):
                m = plan.members[g]
                finish[m] = plan.start[g] + fin[k, :m.size]
                delivered[m] = dlv[k, :m.size]
            if report and progress is not None:
                progress(len(gs))

    run_groups(list(range(plan.start.size)), plan.n_steps, True)
    t_compile, t_run = times[0], sum(times[1:])
    # periods with a flow still unfinished: once more with RETRY_FACTOR x the horizon
    late = sorted({int(plan.group[f]) for f in np.flatnonzero(~np.isfinite(finish))})
    if late:
        run_groups(late, RETRY_FACTOR * plan.n_steps, False)
    done = np.isfinite(finish)
    # a period still busy when the next one started breaks the split's assumption
    last = np.array([np.max(np.where(np.isfinite(finish[m]), finish[m], -np.inf))
                     for m in plan.members])           # unfinished flows count apart
    overlaps = int(np.sum(last[:-1] > plan.start[1:])) if last.size > 1 else 0
    rtol = 1e-3
    conserved = bool(np.all(np.abs(delivered[done] - flows.size[done])
                            <= rtol * flows.size[done]))
    return dict(finish=finish, delivered=delivered, unfinished=int((~done).sum()),
                overlaps=overlaps, periods=int(plan.start.size), width=int(w),
                n_steps=int(plan.n_steps), compile_s=t_compile, run_s=t_run,
                retried_periods=len(late), retry_s=sum(times) - t_compile - t_run,
                bytes_conserved=conserved)


def simulate_ideal_flows(topology, flows, *, line_rate: float) -> dict:
    """Every KV flow at once on the ideal fabric (module docstring)."""
    line = float(line_rate)
    inc, cap = fabric_sim.ideal_incidence(flows.src, flows.dst, topology.n_hosts,
                                          nic_capacity=line)
    res = fabric_sim.simulate_ideal(inc, cap, flows.size, arrival=flows.release,
                                    demand=np.full(flows.size.size, line))
    finish = np.asarray(res.finish, np.float64)
    return dict(finish=finish, delivered=np.where(np.isfinite(finish), flows.size, 0.0),
                unfinished=int((~np.isfinite(finish)).sum()), overlaps=0,
                periods=None, bytes_conserved=True)
