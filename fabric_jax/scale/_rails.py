"""A preset's fluid run of some rails of a scale point, and the ideal fabric's run.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..fabrics import get_fabric
from ..fluid.options import save_schedule
from ._fabric import rail_buffer_weight, rail_view
from ._route import DEFAULT_HASH, DEFAULT_MAX_PATHS, DEFAULT_QPS, route_flows
from ._step import StepFlows

__all__ = ["DEFAULT_DT_US", "CONGESTED_DELAY", "HORIZON_FACTOR", "RailRun", "simulate_rails",
           "zero_load_latency", "simulate_rails_on_devices", "ideal_rails", "run_fabric"]

#: Default fluid step, microseconds (``docs/scale.md``, "dt": every headline figure
#: moves by <= 3 % when it is halved).
DEFAULT_DT_US = 0.5
#: A switch port is congested while a byte would wait longer than this behind its queue
#: (``q_l / C_l``), s: one microsecond, about the fabric's one-way base latency and the
#: depth at which the presets' ECN / telemetry start reacting (DCQCN's K_min of 100 KB at
#: 400 Gb/s is 2 us): an assumption, named here.
CONGESTED_DELAY = 1e-6
#: Horizon of a fluid run over the ideal fabric's slice time (doubled once when a run
#: leaves flows unfinished; the run stops early once the fabric is idle).
HORIZON_FACTOR = 2.0


@dataclasses.dataclass(frozen=True)
class RailRun:
    """One preset's fluid run of some rails (:func:`simulate_rails`).

    Attributes:
      flows: the flows simulated (stripes of hashed routing included), full-fabric host
        ids.
      start, finish: ``[flows]`` seconds.
      paused_time: link-seconds paused (PFC) or credit-starved over the run.
      congested_bytes: bytes served by switch ports while congested
        (:data:`CONGESTED_DELAY`), sampled every
        :data:`fabric_jax.fluid.options.SAVE_EVERY` steps.
      port_bytes: bytes the flows carry across switch ports (each hop counted).
      n_steps: the horizon simulated.
      wall_s: seconds of the run (compile included).
      rails: the rails simulated (``None``: the whole fabric).
      n_links: links of the simulated (sub-)fabric.
      t: ``[saves]`` snapshot times, s (``None`` for the ideal fabric).
      goodput: ``[saves]`` bytes/s delivered over all flows at each snapshot.
      latency: ``[flows]`` zero-load one-way latency of each flow's first path, s
        (``None``: none, the ideal crossbar).
      problem: the :class:`fabric_jax.fluid.FluidProblem` run (``None`` for the ideal
        fabric): compile it, or run it again, with :func:`fabric_jax.fluid.run`.
      run_s: seconds inside the engine's run (compile included, the device work
        waited for); ``wall_s - run_s`` is the host side.
      attempts: fluid runs made for this result (:func:`run_fabric` doubles the horizon
        once when flows are left unfinished); ``run_s`` sums them.
      hops: ``[flows]`` links on each flow's first path (``None``: the ideal crossbar);
        a path of more than two links (NIC -> leaf -> NIC) went above its leaf, through
        a spine (:func:`~fabric_jax.scale.spine_share`).
      split: rows of :attr:`flows` per flow of the step (plane stripes times QPs under
        hashed routing, :func:`~fabric_jax.scale.qp_split`; consecutive rows).
      marked_share: share of the delivered bytes that left their path marked by the
        law's switch marking (DCQCN's ECN, IB CC's FECN; each flow's path marking
        probability times its throughput, sampled as ``congested_bytes``); 0 under a
        law that does not mark.
    """

    flows: StepFlows
    start: np.ndarray
    finish: np.ndarray
    paused_time: float
    congested_bytes: float
    port_bytes: float
    n_steps: int
    wall_s: float
    rails: tuple | None
    n_links: int
    t: np.ndarray | None = None
    goodput: np.ndarray | None = None
    device: str = ""
    latency: np.ndarray | None = None
    problem: object = None
    run_s: float = 0.0
    attempts: int = 1
    hops: np.ndarray | None = None
    split: int = 1
    marked_share: float = 0.0


def simulate_rails(step: StepFlows, topology, fabric, *, rails=(0,), dt: float,
                   n_steps: int, max_paths=DEFAULT_MAX_PATHS, seed: int = 0,
                   fifo_bands: int | None = None, keep=None, qps: int = DEFAULT_QPS,
                   hash_fields: str = DEFAULT_HASH, polarized: bool = False) -> RailRun:
    """``fabric``'s fluid run of the flows of ``rails`` on their sub-fabric.

    The flows of the rails (``step.rail``) run alone on the rails' own links
    (:func:`~fabric_jax.scale.rail_view`), through the compare study's engine
    (:func:`fabric_jax.study.run.simulate_paths`: the preset's routing, congestion
    control at the NIC rate, flow control, receiver, per-link latency, each flow capped
    at its cut).  ``rails=None`` runs every flow on the whole fabric.  Routing:
    :func:`~fabric_jax.scale.route_flows` on the full fabric (so hashes and candidate
    sets are those of the full run), links renumbered in order.  ``keep`` (``[flows]``
    bool): run only these flows (a closed set: a kept flow's dependencies kept), each
    routed as in the run of every flow (its hash keeps its flow number).  ``qps``,
    ``hash_fields``, ``polarized``: :func:`~fabric_jax.scale.route_flows` (hashed
    routing runs each connection as its QPs; :attr:`RailRun.flows` lists them).
    """
    import jax

    from ..fabric_sim import prepare_paths
    from ..fluid import run as run_fluid
    fab = get_fabric(fabric)
    t0 = time.perf_counter()
    keep = np.ones(step.n_flows, bool) if keep is None else np.asarray(keep, bool)
    if keep.shape != (step.n_flows,):
        raise ValueError(f"keep: a [{step.n_flows}] bool mask; got shape {keep.shape}")
    if rails is None:
        ids = np.flatnonzero(keep)
        sub_step, topo, link_of, host_of = (step if keep.all() else step.subset(ids),
                                            topology, None, None)
    else:
        view = rail_view(topology, rails)
        ids = np.flatnonzero(np.isin(step.rail, view.rails) & keep)
        sub_step, topo = step.subset(ids), view.topology
        link_of, host_of = view.link_of, view.host_of
        if view.shared.any():
            warnings.warn("simulate_rails: the rails share links with other rails "
                          "(three tiers); their traffic is left out of this run",
                          stacklevel=2)
    flows, ps = route_flows(sub_step, topology, fab, max_paths=max_paths, seed=seed,
                            flow_ids=ids, qps=qps, hash_fields=hash_fields,
                            polarized=polarized)
    links = np.asarray(ps.links)
    if link_of is not None:
        links = np.where(links >= 0, link_of[np.maximum(links, 0)], -1).astype(np.int32)
        if np.any(np.asarray(ps.hop_mask) & (links < 0)):
            raise ValueError("rails: a path leaves the rails' sub-fabric")
        ps = dataclasses.replace(ps, links=links,
                                 src=host_of[np.asarray(ps.src)].astype(np.int32),
                                 dst=host_of[np.asarray(ps.dst)].astype(np.int32))
    n_steps, every = save_schedule(n_steps, round_up=True)
    opts = {} if fifo_bands is None else {"fifo_bands": int(fifo_bands)}
    opts.update(fab.buffer_options(topo, weight=None if rails is None else
                                   rail_buffer_weight(topology, view)))
    problem = prepare_paths(topo, ps, fab, flows.size, dt=float(dt), n_steps=n_steps,
                            arrival=flows.arrivals, deps=flows.deps, seed=seed,
                            save_every=every, fluid_options=opts)
    t_run = time.perf_counter()
    res = jax.block_until_ready(run_fluid(problem))
    run_s = time.perf_counter() - t_run
    tr = res.trajectory
    cap = np.asarray(topo.capacity, float)
    q = np.asarray(tr.queue, float)
    usable = np.asarray(tr.usable, float)
    switch = ~np.asarray(topo.node_is_host, bool)[np.asarray(topo.link_src)]
    hot = (q > CONGESTED_DELAY * cap[None, :]) & switch[None, :]
    congested = float(np.sum(np.where(hot, usable, 0.0)) * every * float(dt))
    thr = np.asarray(tr.throughput, float)
    got = float(np.sum(thr))
    marked_share = float(np.sum(thr * np.asarray(tr.mark, float)) / got) if got > 0 else 0.0
    hops = (np.asarray(ps.hop_mask) & (np.asarray(ps.links) >= 0))[:, 0, :]
    switch_hops = np.maximum(hops.sum(axis=1) - 1, 0)      # every hop but the NIC's
    port_bytes = float(np.sum(flows.size * switch_hops))
    return RailRun(flows=flows, start=np.asarray(res.start, float),
                   finish=np.asarray(res.finish, float),
                   paused_time=float(np.sum(np.asarray(res.info.paused_time))),
                   congested_bytes=congested, port_bytes=port_bytes, n_steps=n_steps,
                   wall_s=time.perf_counter() - t0,
                   rails=None if rails is None else tuple(view.rails), n_links=topo.n_links,
                   t=np.asarray(tr.t, float),
                   goodput=np.asarray(tr.throughput, float).sum(axis=1),
                   latency=zero_load_latency(ps, topo, fab), problem=problem, run_s=run_s,
                   hops=hops.sum(axis=1).astype(np.int32),
                   split=flows.n_flows // max(sub_step.n_flows, 1),
                   marked_share=marked_share)


def zero_load_latency(ps, topology, fabric) -> np.ndarray:
    """``[flows]`` zero-load one-way latency of each flow's first path, s: its links'
    latencies under ``fabric``'s switch and NIC latencies
    (:meth:`fabric_jax.Fabric.link_latency`), queues empty."""
    hops = (np.asarray(ps.hop_mask) & (np.asarray(ps.links) >= 0))[:, 0, :]
    lat_l = np.asarray(get_fabric(fabric).link_latency(topology), float)
    return np.sum(np.where(hops, lat_l[np.maximum(np.asarray(ps.links)[:, 0, :], 0)], 0.0),
                  axis=1)


def simulate_rails_on_devices(step: StepFlows, topology, fabric, *, rails, devices=None,
                              **kw) -> list:
    """Each rail of ``rails`` alone (:func:`simulate_rails`), rail ``i`` on device ``i mod
    len(devices)`` (default ``jax.devices()``), the devices' runs at once (threads: XLA
    runs outside Python's lock).

    The rails are independent representatives (under hashed routing, different samples
    of the collisions; :func:`~fabric_jax.scale.scale_point`), so they shard across
    devices without any communication: the way one host's devices, or with
    ``jax.distributed`` every process's, split a cluster too large for one device rail
    by rail.  Each run is the
    program :func:`simulate_rails` compiles for one rail, whichever device runs it.

    Returns:
      ``[RailRun]`` in the order of ``rails``; ``RailRun.device`` names the device.
    """
    import jax
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices: expected at least one device")
    rails = [int(r) for r in np.atleast_1d(rails)]

    def one(item):
        i, r = item
        dev = devs[i % len(devs)]
        with jax.default_device(dev):
            run = simulate_rails(step, topology, fabric, rails=(r,), **kw)
        return dataclasses.replace(run, device=str(dev))

    with ThreadPoolExecutor(max_workers=len(devs)) as pool:
        return list(pool.map(one, enumerate(rails)))


def ideal_rails(step: StepFlows, nic_rate: float, *, rails=(0,)) -> RailRun:
    """The ideal fabric for the flows of ``rails``: every NIC of those rails on one
    non-blocking crossbar at its line rate (all planes) with ideal congestion control,
    exact max-min recomputed at every flow start and completion
    (:func:`fabric_jax.fabric_sim.simulate_ideal`, each flow capped at the NIC rate).
    Rails never meet on a crossbar, so one rail's run is exact for it."""
    from ..fabric_sim import ideal_incidence, simulate_ideal
    t0 = time.perf_counter()
    ids = np.arange(step.n_flows) if rails is None else np.flatnonzero(
        np.isin(step.rail, np.asarray(rails)))
    sub = step.subset(ids)
    hosts, inv = np.unique(np.concatenate([sub.src, sub.dst]), return_inverse=True)
    hs, hd = inv[:sub.n_flows], inv[sub.n_flows:]
    inc, cap = ideal_incidence(hs, hd, hosts.size, nic_capacity=float(nic_rate))
    # compilation dominates, as in the compare study's baseline
    res = simulate_ideal(inc, cap, sub.size, arrival=sub.arrivals, deps=sub.deps,
                         demand=np.full(sub.n_flows, float(nic_rate)), one_table=True)
    return RailRun(flows=sub, start=np.asarray(res.start, float),
                   finish=np.asarray(res.finish, float), paused_time=0.0,
                   congested_bytes=0.0, port_bytes=float(np.sum(sub.size)), n_steps=0,
                   wall_s=time.perf_counter() - t0,
                   rails=None if rails is None else tuple(int(r) for r in rails),
                   n_links=2 * hosts.size)


def run_fabric(step: StepFlows, topology, fabric, t_ideal: float, *, rails=(0,),
               dt: float, max_paths=DEFAULT_MAX_PATHS, seed: int = 0, fifo_bands=None,
               horizon_factor=HORIZON_FACTOR, keep=None, qps: int = DEFAULT_QPS,
               hash_fields: str = DEFAULT_HASH, polarized: bool = False) -> RailRun:
    """``fabric``'s run of ``step`` (:func:`simulate_rails`, ``keep``, ``qps``,
    ``hash_fields``, ``polarized`` as there) over
    ``horizon_factor`` times the ideal fabric's slice time ``t_ideal`` (40 steps more),
    the horizon doubled once when flows are left unfinished."""
    n_steps = int(np.ceil(horizon_factor * t_ideal / dt)) + 40
    run_s = 0.0
    for attempt in range(1, 3):
        run = simulate_rails(step, topology, fabric, rails=rails, dt=dt, n_steps=n_steps,
                             max_paths=max_paths, seed=seed, fifo_bands=fifo_bands,
                             keep=keep, qps=qps, hash_fields=hash_fields,
                             polarized=polarized)
        run_s += run.run_s
        if np.all(np.isfinite(run.finish)):
            break
        n_steps *= 2
    return dataclasses.replace(run, run_s=run_s, attempts=attempt)
