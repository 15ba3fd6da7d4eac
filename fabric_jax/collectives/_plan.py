"""A collective as a DAG of transfers over explicit links, and its simulation.

A :class:`CollectivePlan` is what every algorithm builder of this package returns: one
row per *transfer* (a chunk moving over a set of links), with

* ``links`` / ``weight``: ``[flows, width]`` link ids (``-1`` padded) and the fraction
  of the transfer's rate on each (1 on a single path; the routing split over several
  equal-cost paths; 1 on every link of an in-switch reduction or multicast, which moves
  the same bytes on all of them at one rate);
* ``size``: payload bytes;
* ``deps``: ``[flows, max_deps]`` transfers that must have arrived first (``-1`` pad);
* ``latency``: seconds from the last byte sent to the transfer counting as arrived: the
  protocol's per-step cost plus the links' latencies (:mod:`._tuning`);
* ``delay``: seconds between release and start (the launch latency on first steps).

:func:`simulate_plan` runs it with the exact event-driven max-min engine
(:func:`fabric_jax.simulate_flows`), the protocol's bandwidth fraction applied to the
link capacities, so per-step latency and bandwidth sharing both come out of the
simulation.  :func:`simulate_plans` runs plans of one shape (same algorithm, protocol
and ranks at different sizes) as one batch (:func:`fabric_jax.simulate_flows_batched`).

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..incidence import Incidence
from ..metrics import algbw as _algbw
from ..metrics import busbw as _busbw
from ..topology import Topology

__all__ = ["CollectivePlan", "CollectiveResult", "link_bytes", "link_classes",
           "simulate_plan", "simulate_plans", "critical_path"]

#: Link classes of a server-model topology (:func:`fabric_jax.topology.with_servers`).
LINK_CLASSES = ("net", "nvlink", "pcie")


@dataclasses.dataclass(frozen=True, eq=False)
class CollectivePlan:
    """Transfers of one collective (see the module docstring).

    Attributes:
      links: int32 ``[flows, width]`` link ids, ``-1`` padded.
      weight: float64 ``[flows, width]`` rate fraction per link (0 on padding).
      size: float64 ``[flows]`` bytes.
      deps: int32 ``[flows, max_deps]`` flow ids, ``-1`` padded, pointing backwards.
      latency: float64 ``[flows]`` seconds added after the last byte.
      delay: float64 ``[flows]`` seconds between release and start.
      op: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"broadcast"``,
        ``"all_to_all"``.
      algorithm: e.g. ``"ring"``, ``"tree"``, ``"nvls"``, ``"nvls_tree"``, ``"sharp"``.
      protocol: ``"LL"``, ``"LL128"`` or ``"Simple"``.
      nbytes: the collective's size ``S`` as nccl-tests counts it, bytes.
      n_ranks: ranks.
      n_links: links of the topology the plan was built on.
      bw_scale: ``[links]`` fraction of each link's capacity the protocol reaches.
    """

    links: np.ndarray
    weight: np.ndarray
    size: np.ndarray
    deps: np.ndarray
    latency: np.ndarray
    delay: np.ndarray
    op: str
    algorithm: str
    protocol: str
    nbytes: float
    n_ranks: int
    n_links: int
    bw_scale: np.ndarray

    @property
    def n_flows(self) -> int:
        return int(self.size.shape[0])

    def incidence(self) -> Incidence:
        """Flow-major :class:`~fabric_jax.Incidence` of the transfers."""
        import jax.numpy as jnp
        n, width = self.links.shape
        w = np.where(self.links >= 0, self.weight, 0.0)
        return Incidence(jnp.asarray(np.maximum(self.links, 0).ravel(), jnp.int32),
                         jnp.asarray(np.repeat(np.arange(n, dtype=np.int32), width)),
                         jnp.asarray(w.ravel(), jnp.result_type(float)),
                         int(self.n_links), int(n), int(width))


@dataclasses.dataclass(frozen=True)
class CollectiveResult:
    """Outcome of one simulated collective.

    Attributes:
      time_s: first release (t = 0) to the last transfer's arrival, seconds.
      algbw: ``nbytes / time_s``, bytes/s (nccl-tests).
      busbw: ``algbw`` times nccl-tests' factor for the op, bytes/s.
      algorithm, protocol: what ran.
      n_flows: transfers simulated.
      start, finish: ``[flows]`` seconds.
    """

    time_s: float
    algbw: float
    busbw: float
    algorithm: str
    protocol: str
    n_flows: int
    start: np.ndarray
    finish: np.ndarray


def link_classes(topology: Topology) -> np.ndarray:
    """``[links]`` index into :data:`LINK_CLASSES`: 0 fabric, 1 NVLink, 2 PCIe.

    Without the server model every link is a fabric link.
    """
    cls = np.zeros(topology.n_links, np.int64)
    if topology.params.get("server_model"):
        L0 = int(topology.params["fabric_links"])
        n_gpus = topology.n_hosts
        cls[L0:L0 + 2 * n_gpus] = 1
        cls[L0 + 2 * n_gpus:] = 2
    return cls


def link_bytes(plan: CollectivePlan) -> np.ndarray:
    """``[links]`` payload bytes each link carries (sum of weight x size)."""
    w = np.where(plan.links >= 0, plan.weight, 0.0) * plan.size[:, None]
    return np.bincount(np.maximum(plan.links, 0).ravel(), weights=w.ravel(),
                       minlength=plan.n_links)


def critical_path(plan: CollectivePlan) -> float:
    """Longest chain of ``delay + latency`` through the DAG, seconds (zero bytes).

    The latency floor of the plan: its time as the size goes to 0.
    """
    finish = np.zeros(plan.n_flows)
    own = plan.delay + plan.latency
    has = plan.deps >= 0
    while True:  # relaxation to the fixed point; iterations = DAG depth
        prev = np.where(has, finish[np.maximum(plan.deps, 0)], 0.0).max(axis=1, initial=0.0)
        new = prev + own
        if np.array_equal(new, finish):
            return float(finish.max(initial=0.0))
        finish = new


def _result(plan, start, finish) -> CollectiveResult:
    t = float(np.max(finish)) if finish.size else 0.0
    a = float(_algbw(plan.nbytes, t)) if t > 0 else float("inf")
    kind = plan.op
    return CollectiveResult(time_s=t, algbw=a, busbw=float(_busbw(a, plan.n_ranks, kind)),
                            algorithm=plan.algorithm, protocol=plan.protocol,
                            n_flows=plan.n_flows, start=start, finish=finish)


def simulate_plan(plan: CollectivePlan, topology: Topology) -> CollectiveResult:
    """Event-driven max-min simulation of one plan (:func:`fabric_jax.simulate_flows`).

    Capacities are the topology's, times ``plan.bw_scale`` (the protocol's fraction of
    line rate per link class); failed links count as zero.
    """
    return simulate_plans([plan], topology)[0]


def simulate_plans(plans, topology: Topology) -> list[CollectiveResult]:
    """Simulate plans of one shape (same ``links``, ``deps``) as one batch.

    Plans that differ only in ``size``, ``latency``, ``delay`` and ``bw_scale`` (one
    algorithm and protocol at several message sizes) share the incidence and the
    dependency DAG, so :func:`fabric_jax.simulate_flows_batched` runs them together
    with one compile.

    Raises:
      ValueError: plans of different shapes or built on another topology.
    """
    from ..sim import simulate_flows, simulate_flows_batched

    plans = list(plans)
    if not plans:
        return []
    first = plans[0]
    for p in plans:
        if p.n_links != topology.n_links:
            raise ValueError(f"plan built for {p.n_links} links, topology has "
                             f"{topology.n_links}; build the plan on this topology")
        if p.links.shape != first.links.shape or not np.array_equal(p.deps, first.deps) \
                or not np.array_equal(p.links, first.links):
            raise ValueError("simulate_plans: plans must share links and deps (one "
                             "algorithm, protocol and rank set); simulate others apart")
    cap = np.where(topology.link_up, topology.capacity, 0.0)
    n = first.n_flows
    inc, deps, pad = _padded(first)
    m = n + pad
    ext = lambda x: np.concatenate([x, np.zeros(pad)])  # noqa: E731 (padding flows)
    if len(plans) == 1:
        res = simulate_flows(inc, cap * first.bw_scale, np.zeros(m), ext(first.size),
                             deps=deps, delay=ext(first.delay), latency=ext(first.latency))
        return [_result(first, np.asarray(res.start, float)[:n],
                        np.asarray(res.finish, float)[:n])]
    caps = np.stack([cap * p.bw_scale for p in plans])
    res = simulate_flows_batched(inc, caps, np.zeros((len(plans), m)),
                                 np.stack([ext(p.size) for p in plans]), deps=deps,
                                 delay=np.stack([ext(p.delay) for p in plans]),
                                 latency=np.stack([ext(p.latency) for p in plans]))
    start, finish = np.asarray(res.start, float), np.asarray(res.finish, float)
    return [_result(p, start[i, :n], finish[i, :n]) for i, p in enumerate(plans)]


def _bucket(x: int, floor: int) -> int:
    return max(floor, 1 << int(np.ceil(np.log2(max(x, 1)))))


def _padded(plan: CollectivePlan):
    """Incidence and deps padded to power-of-two flows, row width and deps width, so
    that plans of different algorithms reuse the compiled event loop (padding flows
    have no bytes, no links and no deps: they complete at t = 0)."""
    import jax.numpy as jnp
    n, width = plan.links.shape
    m, w = _bucket(n, 256), _bucket(width, 4)
    links = np.full((m, w), -1, np.int64)
    links[:n, :width] = plan.links
    weight = np.zeros((m, w))
    weight[:n, :width] = np.where(plan.links >= 0, plan.weight, 0.0)
    d = _bucket(plan.deps.shape[1], 2)
    deps = np.full((m, d), -1, np.int32)
    deps[:n, :plan.deps.shape[1]] = plan.deps
    inc = Incidence(jnp.asarray(np.maximum(links, 0).ravel(), jnp.int32),
                    jnp.asarray(np.repeat(np.arange(m, dtype=np.int32), w)),
                    jnp.asarray(weight.ravel(), jnp.result_type(float)),
                    int(plan.n_links), int(m), int(w))
    return inc, deps, m - n
