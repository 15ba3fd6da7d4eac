"""Shared test fixtures: small canonical instances, random-instance generators, x64 switch.

Instances are link-by-flow incidence problems in COO form (``link_idx``, ``flow_idx``,
``weight``: flow ``f`` puts the fraction ``weight`` of its rate on link ``l``; duplicate
``(link, flow)`` entries add up) plus link ``capacity`` and optional flow ``demand``.
Units: bytes and bytes per second. Everything here is NumPy on the host; tests turn it
into device arrays themselves so that they control the dtype.
"""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import strategies as st

# A realistic link speed: 100 Gb/s in bytes/s.
LINK_100G = 100e9 / 8.0


@dataclasses.dataclass(frozen=True)
class Instance:
    """One incidence problem on the host (NumPy arrays, float64 values).

    Attributes:
        link_idx: ``[nnz]`` int32 link of each entry.
        flow_idx: ``[nnz]`` int32 flow of each entry.
        weight: ``[nnz]`` float64 in (0, 1]; fraction of the flow's rate on the link.
        n_links: number of links.
        n_flows: number of flows.
        capacity: ``[links]`` float64 bytes/s.
        demand: ``[flows]`` float64 bytes/s (``inf`` = uncapped) or ``None``.
    """

    link_idx: np.ndarray
    flow_idx: np.ndarray
    weight: np.ndarray
    n_links: int
    n_flows: int
    capacity: np.ndarray
    demand: np.ndarray | None = None

    @property
    def dense(self) -> np.ndarray:
        """``[links, flows]`` float64 matrix, duplicate entries summed."""
        return coo_to_dense(self.link_idx, self.flow_idx, self.weight, self.n_links, self.n_flows)

    def replace(self, **changes) -> "Instance":
        return dataclasses.replace(self, **changes)


def coo_to_dense(link_idx, flow_idx, weight, n_links, n_flows) -> np.ndarray:
    """Sum COO entries into a dense ``[links, flows]`` float64 matrix."""
    dense = np.zeros((n_links, n_flows))
    np.add.at(dense, (np.asarray(link_idx), np.asarray(flow_idx)), np.asarray(weight, np.float64))
    return dense


def from_routes(routes, capacity, demand=None, n_links=None) -> Instance:
    """Build an :class:`Instance` from per-flow routes.

    Args:
        routes: one entry per flow: a list of link ids (weight 1 each) or of
            ``(link, weight)`` pairs; an empty list is a flow on no link.
        capacity: ``[links]`` bytes/s.
        demand: optional ``[flows]`` bytes/s.
        n_links: defaults to ``len(capacity)``.
    """
    capacity = np.asarray(capacity, dtype=np.float64)
    n_links = len(capacity) if n_links is None else n_links
    links, flows, weights = [], [], []
    for f, route in enumerate(routes):
        for hop in route:
            link, w = (hop, 1.0) if np.isscalar(hop) else hop
            links.append(link)
            flows.append(f)
            weights.append(w)
    return Instance(
        link_idx=np.asarray(links, dtype=np.int32),
        flow_idx=np.asarray(flows, dtype=np.int32),
        weight=np.asarray(weights, dtype=np.float64),
        n_links=n_links,
        n_flows=len(routes),
        capacity=capacity,
        demand=None if demand is None else np.asarray(demand, dtype=np.float64),
    )


# ---------------------------------------------------------------------------------------
# Canonical instances
# ---------------------------------------------------------------------------------------


def dumbbell(n_flows=4, capacity=LINK_100G, access_capacity=None) -> Instance:
    """``n_flows`` senders, each on its own access link, sharing one bottleneck link.

    Links: 0 = bottleneck (``capacity``), ``1 + i`` = access link of flow ``i``
    (``access_capacity[i]``, default ``2 * capacity``). Flow ``i`` crosses links 0 and
    ``1 + i``.
    """
    if access_capacity is None:
        access_capacity = np.full(n_flows, 2.0 * capacity)
    routes = [[0, 1 + i] for i in range(n_flows)]
    return from_routes(routes, np.concatenate([[capacity], access_capacity]))


def parking_lot(n_links=4, capacity=LINK_100G) -> Instance:
    """A chain of ``n_links`` links; flow 0 crosses all, flow ``1 + i`` only link ``i``.

    ``capacity`` is a scalar or a ``[links]`` array.
    """
    capacity = np.broadcast_to(np.asarray(capacity, np.float64), (n_links,)).copy()
    routes = [list(range(n_links))] + [[i] for i in range(n_links)]
    return from_routes(routes, capacity)


def multipath_split(capacity=LINK_100G, with_competitor=True) -> Instance:
    """Flow 0 split 0.5/0.5 over links 0 and 1; optionally flow 1 on link 0 alone."""
    routes = [[(0, 0.5), (1, 0.5)]]
    if with_competitor:
        routes.append([0])
    return from_routes(routes, [capacity, capacity])


# ---------------------------------------------------------------------------------------
# Random instances
# ---------------------------------------------------------------------------------------

_NICE_WEIGHTS = (1.0, 1.0, 1.0, 0.5, 0.25, 0.75, 1.0 / 3.0)


@st.composite
def instances(
    draw,
    max_links: int = 6,
    max_flows: int = 8,
    max_hops: int = 3,
    scale: float = LINK_100G,
    with_demand: bool | None = None,
    allow_zero_capacity: bool = True,
    allow_no_link_flows: bool = True,
    allow_duplicates: bool = True,
    allow_inf_demand: bool = True,
):
    """Hypothesis strategy for random :class:`Instance` values.

    Covers weights below one (dyadic and arbitrary), per-flow demands (some ``inf``,
    some zero), zero-capacity links, flows on no link, duplicate ``(link, flow)`` entries
    (their weights add up, so a dense entry may exceed one) and shuffled entry order.
    Capacities and finite demands lie in ``[0.05, 10] * scale`` bytes/s; some are round
    values or round values nudged by 1e-6 or 1e-3 relative, to create ties and near-ties.

    Args:
        with_demand: ``True``/``False`` forces a demand array / ``None``; ``None`` draws.
    """
    n_links = draw(st.integers(1, max_links))
    n_flows = draw(st.integers(1, max_flows))
    weight_st = st.one_of(
        st.sampled_from(_NICE_WEIGHTS),
        st.floats(0.01, 1.0, allow_nan=False, allow_infinity=False),
    )

    links, flows, weights = [], [], []
    for f in range(n_flows):
        min_hops = 0 if allow_no_link_flows else 1
        hops = draw(st.integers(min_hops, min(max_hops, n_links)))
        route = draw(st.lists(st.integers(0, n_links - 1), min_size=hops, max_size=hops, unique=True))
        for link in route:
            links.append(link)
            flows.append(f)
            weights.append(draw(weight_st))
    if allow_duplicates and links:
        n_dup = draw(st.integers(0, 2))
        for _ in range(n_dup):
            k = draw(st.integers(0, len(links) - 1))
            links.append(links[k])
            flows.append(flows[k])
            weights.append(draw(weight_st))
    order = draw(st.permutations(range(len(links))))
    order = np.asarray(order, dtype=np.int64)

    # Capacities and demands: arbitrary values, plus a few round ones, some nudged by a
    # tiny relative amount, to produce exact ties and near-ties between bottlenecks.
    round_st = st.builds(
        lambda v, nudge: v * (1.0 + nudge),
        st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]),
        st.sampled_from([0.0, 0.0, 1e-3, -1e-3, 1e-6]),
    )
    cap_st = st.one_of(st.floats(0.05, 10.0, allow_nan=False, allow_infinity=False), round_st)
    capacity = np.asarray([draw(cap_st) for _ in range(n_links)]) * scale
    if allow_zero_capacity:
        zero = np.asarray(draw(st.lists(st.integers(0, 9), min_size=n_links, max_size=n_links))) == 0
        capacity[zero] = 0.0

    if with_demand is None:
        with_demand = draw(st.booleans())
    demand = None
    if with_demand:
        kinds = draw(st.lists(st.integers(0, 9), min_size=n_flows, max_size=n_flows))
        values = np.asarray([draw(cap_st) for _ in range(n_flows)]) * scale
        kinds = np.asarray(kinds)
        demand = np.where(kinds == 0, 0.0, values)  # some flows want nothing
        if allow_inf_demand:
            demand = np.where(kinds >= 7, np.inf, demand)  # some are uncapped

    return Instance(
        link_idx=np.asarray(links, dtype=np.int32)[order] if links else np.zeros(0, np.int32),
        flow_idx=np.asarray(flows, dtype=np.int32)[order] if flows else np.zeros(0, np.int32),
        weight=np.asarray(weights, dtype=np.float64)[order] if weights else np.zeros(0),
        n_links=n_links,
        n_flows=n_flows,
        capacity=capacity,
        demand=demand,
    )


def random_instance(
    rng: np.random.Generator,
    n_links: int,
    n_flows: int,
    max_hops: int = 3,
    *,
    scale: float = LINK_100G,
    demand_fraction: float = 0.2,
    split_fraction: float = 0.3,
) -> Instance:
    """A larger random instance, built vectorised with NumPy (for size-dependent paths).

    Each flow crosses 1..``max_hops`` distinct links; a ``split_fraction`` of entries
    carry weight 0.5 instead of 1; capacities are 1, 2 or 4 times ``scale`` (ties
    collapse bottleneck levels, which keeps the oracle fast); a ``demand_fraction`` of
    flows have a finite demand in ``[0.01, 1] * scale``, the rest ``inf``.
    """
    hops = rng.integers(1, max_hops + 1, size=n_flows)
    links = np.argsort(rng.random((n_flows, n_links)), axis=1)[:, :max_hops]
    used = np.arange(max_hops)[None, :] < hops[:, None]
    weight = np.where(rng.random((n_flows, max_hops)) < split_fraction, 0.5, 1.0)
    flows = np.broadcast_to(np.arange(n_flows)[:, None], links.shape)
    capacity = rng.choice([1.0, 2.0, 4.0], size=n_links) * scale
    demand = np.where(rng.random(n_flows) < demand_fraction, rng.uniform(0.01, 1.0, n_flows) * scale, np.inf)
    return Instance(
        link_idx=links[used].astype(np.int32),
        flow_idx=flows[used].astype(np.int32),
        weight=weight[used],
        n_links=n_links,
        n_flows=n_flows,
        capacity=capacity,
        demand=demand,
    )


def _split(link_idx, flow_idx, weight, candidates):
    """Split the heaviest entry among ``candidates`` into two halves."""
    k = max(candidates, key=lambda i: weight[i])
    weight[k] /= 2.0
    link_idx.append(link_idx[k])
    flow_idx.append(flow_idx[k])
    weight.append(weight[k])


def pad_entries(inst: Instance, nnz: int | None = None, row_width: int | None = None) -> Instance:
    """Return an equivalent instance with more COO entries, by splitting entries in halves.

    Splitting ``(l, f, w)`` into two entries ``(l, f, w/2)`` leaves the dense matrix
    unchanged up to the rounding of the sums (duplicates add up), so the problem is the
    same; compare against the oracle run on the padded instance's own ``dense``. Tests use this to map many
    random instances onto a few array shapes, so the solver compiles once per shape.

    Args:
        inst: instance with at least one entry (otherwise it is returned unchanged).
        row_width: first make the busiest flow have exactly this many entries (the
            per-flow row width of a flow-major padded layout).
        nnz: then reach exactly this many entries in total, never taking a flow above
            ``row_width`` entries.

    Raises:
        ValueError: when the instance already exceeds a target or cannot reach ``nnz``.
    """
    link_idx, flow_idx, weight = list(inst.link_idx), list(inst.flow_idx), list(inst.weight)
    if not weight:
        return inst
    counts = np.bincount(np.asarray(flow_idx), minlength=inst.n_flows)
    if row_width is not None:
        busiest = int(np.argmax(counts))
        if counts[busiest] > row_width:
            raise ValueError(f"flow {busiest} has {counts[busiest]} entries, more than row_width={row_width}")
        while counts[busiest] < row_width:
            _split(link_idx, flow_idx, weight, [i for i, f in enumerate(flow_idx) if f == busiest])
            counts[busiest] += 1
    if nnz is not None:
        if len(weight) > nnz:
            raise ValueError(f"instance has {len(weight)} entries, more than nnz={nnz}")
        limit = np.inf if row_width is None else row_width
        while len(weight) < nnz:
            open_entries = [i for i, f in enumerate(flow_idx) if counts[f] < limit]
            if not open_entries:
                raise ValueError(f"cannot reach nnz={nnz} with row_width={row_width}")
            _split(link_idx, flow_idx, weight, open_entries)
            counts[flow_idx[-1]] += 1
    return inst.replace(
        link_idx=np.asarray(link_idx, np.int32),
        flow_idx=np.asarray(flow_idx, np.int32),
        weight=np.asarray(weight, np.float64),
    )


def pad_links(inst: Instance, n_links: int) -> Instance:
    """Return an equivalent instance with ``n_links`` links (extra ones carry no flow).

    The added links get the instance's largest capacity; no flow uses them, so every
    rate is unchanged.
    """
    if n_links < inst.n_links:
        raise ValueError(f"instance has {inst.n_links} links, more than n_links={n_links}")
    fill = inst.capacity.max(initial=0.0) or 1.0
    capacity = np.concatenate([inst.capacity, np.full(n_links - inst.n_links, fill)])
    return inst.replace(n_links=n_links, capacity=capacity)


def pad_flows(inst: Instance, n_flows: int) -> Instance:
    """Return an instance with ``n_flows`` flows; the extra ones cross no link.

    Added flows are uncapped (demand ``inf``), so they get ``inf`` and leave every other
    rate unchanged.
    """
    if n_flows < inst.n_flows:
        raise ValueError(f"instance has {inst.n_flows} flows, more than n_flows={n_flows}")
    demand = inst.demand
    if demand is not None:
        demand = np.concatenate([demand, np.full(n_flows - inst.n_flows, np.inf)])
    return inst.replace(n_flows=n_flows, demand=demand)


def pad(
    inst: Instance,
    n_links: int | None = None,
    nnz: int | None = None,
    row_width: int | None = None,
    flow_buckets: tuple[int, ...] | None = None,
) -> Instance:
    """Pad to fixed sizes: links (:func:`pad_links`), flows up to the smallest of
    ``flow_buckets`` that fits (:func:`pad_flows`), and entries (:func:`pad_entries`)."""
    if n_links is not None:
        inst = pad_links(inst, n_links)
    if flow_buckets is not None:
        inst = pad_flows(inst, min(b for b in flow_buckets if b >= inst.n_flows))
    if nnz is not None or row_width is not None:
        inst = pad_entries(inst, nnz=nnz, row_width=row_width)
    return inst


# ---------------------------------------------------------------------------------------
# Precision switch
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def enable_x64(enabled: bool = True):
    """Temporarily set ``jax_enable_x64``; restores the previous value on exit."""
    previous = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


# ------------------------------------------------------------------ scenarios
# The smallest compare scenario: 4 servers x 2 rails at 100 Gb/s, a 2-server training
# job beside a 2-server incast tenant, no background.  Tests override sections with
# ``tiny_scenario(simulation={...})``.
TINY_SCENARIO = {
    "topology": {"kind": "rail_optimized", "n_servers": 4, "nics_per_server": 2,
                 "servers_per_leaf": 2, "link_gbps": 100},
    "workload": {"train_servers": 2, "tenant_servers": 2, "ep_servers": 2,
                 "tenant_fan_in": 1, "background_load": 0.0},
    "simulation": {"n_steps": 50, "isolation": False},
    "fabrics": {"presets": ["roce"]},
}


def tiny_scenario(**sections) -> dict:
    """A deep copy of :data:`TINY_SCENARIO` with each ``section={key: value}`` merged in."""
    import copy
    data = copy.deepcopy(TINY_SCENARIO)
    for sec, body in sections.items():
        data.setdefault(sec, {}).update(body)
    return data


def scenario_toml(data: dict) -> str:
    """Write a scenario dict (sections of scalars, lists and one level of sub-tables) as TOML."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = []
    for sec, body in data.items():
        subs = {k: v for k, v in body.items() if isinstance(v, dict)}
        lines.append(f"[{sec}]")
        lines += [f"{k} = {value(v)}" for k, v in body.items() if k not in subs]
        for sub, sbody in subs.items():
            tables = {k: v for k, v in sbody.items() if isinstance(v, dict)}
            lines.append(f"[{sec}.{sub}]")
            lines += [f"{k} = {value(v)}" for k, v in sbody.items() if k not in tables]
            for t, tbody in tables.items():
                lines.append(f"[{sec}.{sub}.{t}]")
                lines += [f"{k} = {value(v)}" for k, v in tbody.items()]
    return "\n".join(lines) + "\n"


def incast_leaf_spine():
    """``(topo, routing, incidence)``: leaf_spine(2 leaves, 2 spines, 4 hosts per leaf) at
    100 Gb/s with 1 us links, ECMP (seed 0), a 4-to-1 incast into host 4 plus two flows
    from the incast senders 0 and 1 to hosts 5 and 6 (six flows, multi-hop paths)."""
    from fabric_jax import Incidence, leaf_spine, make_routing, shortest_paths
    topo = leaf_spine(2, 2, 4, link_gbps=100.0, latency_us=1.0)
    ps = shortest_paths(topo, np.array([0, 1, 2, 3, 0, 1]), np.array([4, 4, 4, 4, 5, 6]))
    r = make_routing("ecmp", ps, seed=0)
    return topo, r, Incidence.from_paths(ps, np.asarray(r.split), n_links=topo.n_links)


def slow_except(values, keep):
    """Parametrisation ``values`` (scalars or tuples) with those not in ``keep`` marked
    ``slow``: the default suite runs a representative subset (chosen per file so that
    every law, mode and preset stays covered by some default case), the slow suite the
    rest.
    Each case compiles its own XLA program, which is most of a test's time."""
    keep = set(keep)
    unknown = keep - set(values)
    if unknown:
        raise ValueError(f"slow_except: keep names values not in the list: {sorted(unknown)}")
    return [v if v in keep else
            pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow)
            for v in values]


def emitter_probe(path=None):
    """Every output of three programs, as float64 arrays (a DCQCN + PFC fluid run with
    routing on :func:`incast_leaf_spine`, a float32 max-min solve and an event-driven run
    on a random coupled instance); with ``path``, also saved there (``np.savez``).
    Run in two processes, it compares two XLA configurations (tests/conftest.py's emitter
    flag against XLA's defaults)."""
    import jax

    import fabric_jax as fj
    topo, r, inc = incast_leaf_spine()
    fluid = fj.simulate_fluid(inc, topo.capacity, np.full(6, 1e6), dt=1e-6, n_steps=200,
                              law="dcqcn", flow_control="pfc", buffer=topo.buffer,
                              link_latency=topo.latency, nic_links=topo, routing=r,
                              save_every=10)
    rng = np.random.default_rng(0)
    A = (rng.random((40, 60)) < 0.1) * rng.uniform(0.25, 1.0, (40, 60))
    cap = rng.uniform(1e9, 1e11, 40)
    fair = fj.max_min_fair(A.astype(np.float32), cap.astype(np.float32))
    events = fj.simulate_flows(A.astype(np.float32), cap.astype(np.float32),
                               rng.uniform(0, 1e-5, 60), rng.uniform(1e3, 1e7, 60))
    out = [np.asarray(leaf, np.float64) for leaf in
           jax.tree_util.tree_leaves((fluid, fair.rates, events.finish))]
    if path is not None:
        np.savez(path, *out)
    return out


def with_host_devices(n: int) -> str:
    """``XLA_FLAGS`` for a subprocess with ``n`` host CPU devices that keeps this
    process's XLA flags (the test suite's emitter, tests/conftest.py)."""
    import os
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    return " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])


# ------------------------------------------------------------------ flow DAG oracle
def contention_free(w, rate: float = 1e9):
    """Start/finish times with every flow alone at ``rate`` (oracle; Python loop)."""
    order = topo_order(w)
    start = np.zeros(w.n_flows)
    finish = np.zeros(w.n_flows)
    for f in order:
        ready = w.arrival[f]
        for d in w.deps[f]:
            if d >= 0:
                ready = max(ready, finish[d])
        start[f] = ready + w.delay[f]
        finish[f] = start[f] + w.size[f] / rate
    return start, finish


def topo_order(w):
    """Flow ids in an order where every flow follows its dependencies."""
    indeg = (w.deps >= 0).sum(axis=1)
    children = [[] for _ in range(w.n_flows)]
    for f, row in enumerate(w.deps):
        for d in row:
            if d >= 0:
                children[d].append(f)
    stack = [f for f in range(w.n_flows) if indeg[f] == 0]
    order = []
    while stack:
        f = stack.pop()
        order.append(f)
        for c in children[f]:
            indeg[c] -= 1
            if indeg[c] == 0:
                stack.append(c)
    assert len(order) == w.n_flows, "dependency cycle"
    return order
