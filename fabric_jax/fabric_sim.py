"""A fabric preset's dynamics on given flows and candidate paths: one fluid run.

:func:`prepare_paths` binds a :class:`~fabric_jax.fabrics.Fabric` preset to a
:class:`~fabric_jax.paths.PathSet` (:func:`preset_options`) and prepares one fluid
problem (:func:`fabric_jax.fluid.prepare`), which :func:`simulate_paths` runs: the
preset's routing policy over the candidate paths, its congestion-control law with
parameters at the NIC line rate, its flow control over the topology's buffers, its
receiver options and per-link latency, each flow capped at :func:`flow_line_rate`.  A
caller may replace the routing and the line rates, and any keyword of
:func:`~fabric_jax.fluid.simulate_fluid` (``fluid_options``, applied last).  It is the
engine of the compare study (:func:`fabric_jax.study.run.simulate_case`), of the scale
study and of its all-reduce sweep (:func:`fabric_jax.scale.simulate_plan_fluid`), so it
sits below them (imports point one way: ``fluid`` -> ``fabric_sim`` -> ``scale`` /
``study``).

Routing without a preset: :func:`route` (host pairs -> equal-cost paths -> a policy ->
the incidence of its split) and :func:`bind_routing` (a policy on paths already built).

Ideal.  The baseline every study compares a preset with: the same flows on a
non-blocking crossbar, each host (NIC) with one up-link into it and one down-link out
of it at its line rate (:func:`ideal_incidence`; links of the network kept beside it,
e.g. a server's NVLink and PCIe, where a study keeps them), under ideal congestion
control: exact max-min sharing at every flow start and completion
(:func:`simulate_ideal`).  The compare study, the scale study and the all-reduce sweep
each run it with their own options (demand cap, latencies, kept links).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .cc import ibcc
from .fabrics import get_fabric
from .fluid import run
from .fluid.simulate import prepare_kwargs
from .incidence import Incidence, compact_incidence
from .paths import shortest_paths
from .routing import Routing, make_routing
from .sim import simulate_flows

__all__ = ["simulate_paths", "prepare_paths", "preset_options", "flow_line_rate",
           "bind_routing", "route", "ideal_rows", "ideal_incidence", "simulate_ideal"]


def flow_line_rate(paths, split, capacity) -> np.ndarray:
    """``[flows]`` the most a flow can send: the capacity of the narrowest cut through the
    candidate paths it uses (split > 0).

    Every equal-cost path of a pair has the same hop count, so the links at hop ``h``
    of the used paths form a cut between source and destination; the line rate is the
    smallest, over ``h``, of the summed capacity of the *distinct* links at that hop.
    On a single plane that is the NIC port (the paths share the first and last hop);
    with ``planes=P`` (:func:`fabric_jax.topology.leaf_spine`) a flow spread over every
    plane gets the whole NIC (``P`` ports of ``link_gbps / P``), while a flow pinned to
    one path (ECMP) gets one plane's port.  (``simulate_fluid``'s own default, the
    smallest capacity on any candidate link, caps a sprayed multi-plane flow at one
    plane's share.)

    Args:
      paths: :class:`~fabric_jax.paths.PathSet` ``[flows, paths, hops]``.
      split: ``[flows, paths]`` fraction of each flow on each path (the routing's
        initial split; a dynamic policy may later use any path with split > 0).
      capacity: ``[links]`` bytes/s.

    Returns:
      float64 ``[flows]`` bytes/s.
    """
    links = np.asarray(paths.links)
    used = (np.asarray(paths.hop_mask, bool) & (links >= 0)
            & (np.asarray(split, float) > 0)[:, :, None])
    cap = np.asarray(capacity, float)
    tab = np.sort(np.where(used, links, -1).transpose(0, 2, 1), axis=2)  # [f, hops, paths]
    first = np.concatenate([np.ones(tab.shape[:2] + (1,), bool),
                            tab[..., 1:] != tab[..., :-1]], axis=2) & (tab >= 0)
    per_hop = np.where(first, cap[np.maximum(tab, 0)], 0.0).sum(axis=2)
    per_hop = np.where((tab >= 0).any(axis=2), per_hop, np.inf)
    rate = per_hop.min(axis=1)
    return np.where(np.isfinite(rate) & (rate > 0), rate, np.max(cap, initial=1.0))


def simulate_paths(topology, paths, fabric, size, **kwargs):
    """Fluid run of flows over candidate paths under a fabric preset's dynamics:
    :func:`fabric_jax.fluid.run` of :func:`prepare_paths` (the same arguments).

    Returns:
      :class:`fabric_jax.fluid.FluidResult`.
    """
    return run(prepare_paths(topology, paths, fabric, size, **kwargs))


def prepare_paths(topology, paths, fabric, size, *, dt: float, n_steps: int,
                  arrival=None, deps=None, delay=None, latency=None, seed: int = 0,
                  capacity=None, link_latency=None, nic_links=None,
                  nic_rate: float | None = None, buffer=None, line_rate=None, routing=None,
                  save_every=None, fluid_options: dict | None = None):
    """The fluid problem of flows over candidate paths under a fabric preset's dynamics.

    The engine of :func:`fabric_jax.study.run.simulate_case` and of the all-reduce
    sweep (:func:`fabric_jax.scale.simulate_plan_fluid`): :func:`preset_options` (the
    preset's routing, law, flow control, receiver and latencies bound to ``paths``) with
    the flows' sizes and lifecycle and the horizon.

    Args:
      topology: the :class:`~fabric_jax.Topology` the paths are on.
      paths: :class:`~fabric_jax.paths.PathSet`, one pair per flow.
      fabric: a :class:`fabric_jax.Fabric` or preset name.
      size: ``[flows]`` bytes.
      dt, n_steps: the fluid step (s) and horizon (steps).
      arrival, deps, delay, latency: flow lifecycle (:func:`fabric_jax.fluid.simulate_fluid`).
      seed, capacity, link_latency, nic_links, nic_rate, buffer, line_rate, routing: as
        for :func:`preset_options`.
      fluid_options: more keyword arguments of :func:`~fabric_jax.fluid.simulate_fluid`
        (e.g. the traffic classes of :meth:`fabric_jax.Fabric.class_options`), applied
        last: they replace what the preset sets (``line_rate=None``: the engine's
        default, ``params=``: other law parameters ...).
      save_every: trajectory snapshot period in steps; with it the run stops
        simulating once the fabric is idle for good (``stop_when_idle``: the same flow
        results, less time).

    Returns:
      :class:`fabric_jax.fluid.FluidProblem` (run it with :func:`fabric_jax.fluid.run`).
    """
    kw = preset_options(topology, paths, fabric, seed=seed, capacity=capacity,
                        link_latency=link_latency, nic_links=nic_links, nic_rate=nic_rate,
                        buffer=buffer, line_rate=line_rate, routing=routing)
    kw.update(size=size, dt=dt, n_steps=int(n_steps), arrival=arrival, deps=deps, delay=delay,
              latency=latency, save_every=save_every, stop_when_idle=save_every is not None)
    kw.update(fluid_options or {})
    return prepare_kwargs(**kw)


def preset_options(topology, paths, fabric, *, seed: int = 0, capacity=None,
                   link_latency=None, nic_links=None, nic_rate: float | None = None,
                   buffer=None, line_rate=None, routing=None) -> dict:
    """A fabric preset bound to candidate paths: the keyword arguments of
    :func:`~fabric_jax.fluid.simulate_fluid` it sets (all but the flows' sizes,
    lifecycle and horizon).

    The preset's routing policy bound to ``paths`` with ``seed`` (``incidence`` of its
    initial split, ``routing``), its congestion-control law with parameters at the NIC
    line rate (``fabric.law_params(line_rate=nic_rate)``; under IB CC only switch ports
    mark FECN, :func:`fabric_jax.cc.ibcc.switch_port_mask`, restricted to non-NIC
    links), its flow control over the topology's buffers, its receiver options,
    per-link latency ``fabric.link_latency(topology)``, and each flow capped at
    :func:`flow_line_rate` of its used paths.

    Args:
      topology: the :class:`~fabric_jax.Topology` the paths are on.
      paths: :class:`~fabric_jax.paths.PathSet`, one pair per flow.
      fabric: a :class:`fabric_jax.Fabric` or preset name.
      seed: routing hash seed.
      capacity: ``[links]`` bytes/s (default ``topology.capacity``).
      link_latency: ``[links]`` s (default ``fabric.link_latency(topology)``).
      nic_links: ``[links]`` bool, links never marked, dropped or trimmed (default the
        links leaving a host, ``nic_links=topology``).
      nic_rate: NIC line rate for the law's parameters, bytes/s (default the largest
        host-link capacity).
      buffer: ``[links]`` egress buffers, bytes (default ``topology.buffer``).
      line_rate: ``[flows]`` the most each flow sends, bytes/s (default
        :func:`flow_line_rate` of its used paths).
      routing: the routing instead of the preset's: a policy name or
        :class:`~fabric_jax.routing.Policy` (bound to ``paths`` with its default
        parameters and ``seed``) or a bound :class:`~fabric_jax.routing.Routing`.

    Returns:
      ``{"incidence", "capacity", "law", "params", "line_rate", "link_latency",
      "nic_links", "flow_control", "buffer", "routing"}`` and the receiver options.
    """
    fabric = get_fabric(fabric)
    cap = np.asarray(topology.capacity if capacity is None else capacity, float)
    is_host = np.asarray(topology.node_is_host, bool)[np.asarray(topology.link_src)]
    nic = is_host if nic_links is None else np.asarray(nic_links, bool)
    if nic_rate is None:
        nic_rate = float(np.max(cap[is_host], initial=0.0)) or float(np.max(cap))
    params = fabric.law_params(line_rate=nic_rate)
    if fabric.cc == "ibcc" and "switch_port" not in fabric.cc_options:
        # FECN is a switch function: the HCA's own uplink (the NIC backlog) never marks
        mask = ibcc.switch_port_mask(topology) * (~nic)
        params = dataclasses.replace(params, switch_port=np.asarray(
            mask, np.asarray(params.threshold).dtype))
    if routing is None:
        routing = make_routing(fabric.routing, paths, fabric.routing_params(), seed=seed)
    routing, inc = bind_routing(paths, routing, n_links=topology.n_links, seed=seed)
    if line_rate is None:
        line_rate = flow_line_rate(paths, np.asarray(routing.split), cap)
    lat = fabric.link_latency(topology) if link_latency is None else link_latency
    return dict(incidence=inc, capacity=cap, law=fabric.law(), params=params,
                line_rate=line_rate, link_latency=lat,
                nic_links=nic, flow_control=fabric.flow_control,
                buffer=topology.buffer if buffer is None else buffer, routing=routing,
                **fabric.receiver_options())


# ------------------------------------------------------------------ routing
def bind_routing(paths, policy, *, n_links: int, params=None, seed: int = 0):
    """A routing policy bound to candidate paths, and the incidence of its initial split.

    Args:
      paths: :class:`~fabric_jax.paths.PathSet`, one pair per flow.
      policy: a policy name or :class:`~fabric_jax.routing.Policy` (bound with
        ``params``, default its own, and ``seed``: :func:`fabric_jax.make_routing`), or
        a :class:`~fabric_jax.routing.Routing` already bound to ``paths``.
      n_links: links of the topology.

    Returns:
      ``(routing, incidence)``: the :class:`~fabric_jax.routing.Routing` (pass it to
      :func:`~fabric_jax.fluid.simulate_fluid` as ``routing=`` for a policy that
      moves) and the :class:`~fabric_jax.Incidence` of its split
      (:meth:`~fabric_jax.Incidence.from_paths`).
    """
    routing = _bound(policy, paths, params, seed)
    return routing, Incidence.from_paths(paths, np.asarray(routing.split), n_links=n_links)


def _bound(policy, paths, params, seed):
    return policy if isinstance(policy, Routing) else make_routing(policy, paths, params,
                                                                   seed=seed)


def route(topology, src, dst, policy="ecmp", *, params=None, seed: int = 0,
          max_paths: int | None = None, compact: bool = False):
    """Flows between hosts routed by a policy: equal-cost candidate paths
    (:func:`fabric_jax.shortest_paths` with ``max_paths`` and ``seed``), the policy
    bound to them (:func:`bind_routing`) and the incidence of its split.

    Args:
      topology: the :class:`~fabric_jax.Topology`.
      src, dst: ``[flows]`` host indices.
      policy: as for :func:`bind_routing`; ``None``: no policy, each flow spread evenly
        over its candidate paths.
      params, seed: the policy's parameters and hash seed (also the seed of the paths
        kept under ``max_paths``).
      compact: one incidence entry per distinct (flow, link)
        (:func:`fabric_jax.incidence.compact_incidence`) instead of one per path hop.

    Returns:
      ``(paths, routing, incidence)`` (``routing`` is ``None`` without a policy).
    """
    paths = shortest_paths(topology, src, dst, max_paths=max_paths, seed=seed)
    if policy is not None and not compact:
        return (paths, *bind_routing(paths, policy, n_links=topology.n_links, params=params,
                                     seed=seed))
    routing = None if policy is None else _bound(policy, paths, params, seed)
    if policy is None:
        mask = np.asarray(paths.path_mask, float)
        split = mask / mask.sum(axis=1, keepdims=True)
    else:
        split = np.asarray(routing.split)
    if compact:
        return paths, routing, compact_incidence(paths, split, topology.n_links)
    return paths, routing, Incidence.from_paths(paths, split, n_links=topology.n_links)


# ------------------------------------------------------------------ the ideal fabric
def ideal_rows(src, dst, n_hosts: int, *, nic_capacity, weight=None, keep_links=None,
               keep_capacity=None):
    """Flows on the ideal fabric, as rows of its links (module docstring, "Ideal").

    Links: the kept links first (ids ``0 .. K-1``, ``K = keep_capacity.size``: links of
    the network that stay as they are, e.g. a server's NVLink and PCIe), then each
    host's up-link into the crossbar (``K + h``) and down-link out of it
    (``K + n_hosts + h``).

    Args:
      src, dst: ``[flows]`` host whose up-link and down-link each flow crosses; or
        ``[flows, width]`` entries of each flow, -1 where none: entry ``(f, j)`` crosses
        the down-link of ``dst[f, j]`` if it is a host, else the up-link of ``src[f,
        j]``, else kept link ``keep_links[f, j]``, else nothing (e.g. a switch-to-switch
        hop, which the crossbar replaces).
      n_hosts: hosts on the crossbar.
      nic_capacity: bytes/s of the up- and down-links: a scalar, ``[n_hosts]``, or
        ``[2, n_hosts]`` (up, down).
      weight: ``[flows, width]`` fraction of the flow's rate at each entry (default 1).
      keep_links: ``[flows, width]`` kept link of each entry, -1 where none.
      keep_capacity: ``[K]`` bytes/s of the kept links.

    Returns:
      ``(links [flows, width], weight [flows, width], capacity [K + 2 n_hosts])``; turn
      the rows into an :class:`~fabric_jax.Incidence` with
      :meth:`~fabric_jax.Incidence.from_rows`.
    """
    src, dst = np.asarray(src), np.asarray(dst)
    if src.ndim == 1:      # one up-link, then one down-link, per flow
        src = np.stack([src, np.full(src.shape, -1)], axis=1)
        dst = np.stack([np.full(dst.shape, -1), dst], axis=1)
    kept = np.zeros(0) if keep_capacity is None else np.asarray(keep_capacity, float)
    keep = np.full(src.shape, -1) if keep_links is None else np.asarray(keep_links)
    n_kept = kept.size
    links = np.where(dst >= 0, n_kept + n_hosts + dst, np.where(src >= 0, n_kept + src, keep))
    w = np.ones(links.shape) if weight is None else np.asarray(weight, float)
    nic = np.broadcast_to(np.asarray(nic_capacity, float), (2, int(n_hosts)))
    return links, np.where(links >= 0, w, 0.0), np.concatenate([kept, nic[0], nic[1]])


def ideal_incidence(src, dst, n_hosts: int, **kwargs):
    """:func:`ideal_rows` as an incidence: ``(Incidence, capacity [links])``.  Entries
    of a flow on one link add up, to at most 1 (:meth:`~fabric_jax.Incidence.from_rows`).
    """
    links, weight, capacity = ideal_rows(src, dst, n_hosts, **kwargs)
    return Incidence.from_rows(links, weight, n_links=capacity.size), capacity


def simulate_ideal(incidence, capacity, size, *, arrival=None, deps=None, delay=None,
                   latency=None, demand=None, one_table: bool = False):
    """Flows on the ideal fabric (:func:`ideal_incidence`) under ideal congestion control:
    exact max-min sharing recomputed at every flow start and completion
    (:func:`fabric_jax.simulate_flows`).

    Args:
      incidence, capacity: the fabric, from :func:`ideal_incidence`.
      size: ``[flows]`` bytes.
      arrival, deps, delay, latency: the flows' lifecycle (default: all released at 0).
      demand: ``[flows]`` rate cap, bytes/s (e.g. the NIC line rate), or ``None``.
      one_table: one slot per flow and from-scratch solves: for runs whose cost is the
        compilation (~10^3 flows, ~10^2 events: no table regrowth, one compilation for
        every run of one shape, a smaller program; 12 s against 86 s for the compare
        study's baseline on 2 loaded cores, the same rates up to round-off).

    Returns:
      :class:`fabric_jax.FlowSimResult`.
    """
    n_flows = int(np.shape(size)[0])
    arrival = np.zeros(n_flows) if arrival is None else arrival
    table = dict(max_active=max(n_flows, 1), warm_start=False) if one_table else {}
    return simulate_flows(incidence, capacity, arrival, size, deps=deps, delay=delay,
                          latency=latency, demand=demand, **table)
