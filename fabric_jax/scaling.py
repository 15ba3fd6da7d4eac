"""Scaling studies: collective completion time and effective bandwidth versus GPU count.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

Shared by ``experiments/scale_sweep.py`` and the scaling-curve figure of
``fabric-jax compare --plots`` (:func:`fabric_jax.plots.compare_figures`).

Engine (:func:`run_maxmin`): the exact event-driven max-min flow simulation
(:func:`fabric_jax.simulate_flows`), flows capped at line rate, with the preset's routing
split at ``init`` (ECMP: hashed paths; adaptive routing and spraying: even split over the
candidates) and SHARP for ``infiniband``.  This is ideal congestion control: presets
differ only by routing and SHARP.  Three reductions make it cheap, none of which changes
the result beyond float round-off:

1. **Compact incidence** (:func:`compact_incidence`): a flow's candidate paths share
   their host links, so the ``paths x hops`` entries per flow collapse to the distinct
   links it uses (the split weights of duplicates add up; zero-weight entries go).  The
   max-min problem is the same matrix.
2. **Independent components** (:func:`components`): flows that share no link and no
   dependency never influence each other's max-min rate (the problem is block
   diagonal), so each connected component of the flow-link-dependency graph runs as
   its own event simulation.  On a rail-optimised fabric with per-rail collectives the
   rails are link-disjoint, giving ``nics_per_server`` components of equal size.  An
   event simulation of ``n`` flows costs about ``events x n`` (the slot table plus
   ``O(n)`` bookkeeping per event), so ``k`` components cost about ``1/k`` of one run.
3. **One compile per size**: components are padded to the same flow count and row
   width (padding flows have zero bytes and cross no link; they complete at ``t = 0``)
   and run with the slot table sized to the component (``max_active = flows``, so the
   table never overflows and recompiles); every component and every preset of one GPU
   count reuses one compiled event loop.  Presets whose max-min problems coincide (same
   flows and same routing split, e.g. ``spectrum_x`` and ``uec`` whose adaptive routing
   and spraying both start from the even split) are simulated once.

``sample_components`` (opt-in, an approximation) simulates only the first ``k``
components and reports statistics over their collectives: for statistically identical
rails it estimates the p99; it is off by default.

Why not ``vmap`` over components: :func:`fabric_jax.simulate_flows_batched` needs one
incidence pattern for the batch, and ECMP's hashed paths differ per rail; a vmapped
``while_loop`` also runs every member until the slowest finishes, which on a CPU costs
the sum of the members anyway.  Shape reuse (3.) gives the compile saving without it.

Metrics (:func:`collective_stats`): over the training job's collectives (every rail's
all-reduce and every expert-parallel group's all-to-all), the 99th percentile of their
completion time (first start to last finish of their flows), the slowest all-reduce,
and the effective bandwidth of :func:`fabric_jax.metrics.collective_effective_bandwidth`
(ideal line-rate time over completion time of the step's two collectives, each over
every rail: the same definition as ``compare``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from . import metrics as mx
from .incidence import Incidence
from .routing import make_routing
from .sim import simulate_flows
from .study.case import build_case, collective_phases
from .study.scenario import scenario_from_dict

__all__ = ["compact_incidence", "components", "collective_stats", "run_maxmin",
           "decompose", "ep_group_size", "training_only", "scaled_scenarios", "scaling_curves"]


def compact_incidence(paths, split, n_links: int, width: int | None = None) -> Incidence:
    """Flow-major incidence with one entry per distinct (flow, link), zero weights dropped.

    Args:
      paths: :class:`~fabric_jax.paths.PathSet` (one pair per flow).
      split: ``[flows, paths]`` fraction of each flow on each candidate path.
      n_links: links of the topology.
      width: entries per flow (>= the largest count); default the largest count.

    Returns:
      :class:`~fabric_jax.Incidence` with ``row_width = width`` whose dense matrix equals
      that of ``Incidence.from_paths(paths, split, n_links=n_links)``.
    """
    links = np.asarray(paths.links)
    hop = np.asarray(paths.hop_mask, bool) & (links >= 0)
    s = np.asarray(split, float)
    n_flows = links.shape[0]
    w = np.where(hop, s[:, :, None], 0.0)
    flow = np.broadcast_to(np.arange(n_flows)[:, None, None], links.shape)
    keep = w > 0
    key = flow[keep].astype(np.int64) * n_links + links[keep]
    uniq, inv = np.unique(key, return_inverse=True)
    wsum = np.bincount(inv, weights=w[keep], minlength=uniq.size)
    fi, li = np.divmod(uniq, n_links)
    counts = np.bincount(fi, minlength=n_flows)
    need = max(int(counts.max(initial=0)), 1)
    width = need if width is None else int(width)
    if width < need:
        raise ValueError(f"width={width} is smaller than the largest row ({need} links)")
    pos = np.arange(fi.size) - (np.cumsum(counts) - counts)[fi]
    lt = np.zeros((n_flows, width), np.int32)
    wt = np.zeros((n_flows, width), np.float32)
    lt[fi, pos] = li
    wt[fi, pos] = np.minimum(wsum, 1.0)
    return Incidence(jnp.asarray(lt.ravel()), jnp.asarray(np.repeat(np.arange(n_flows,
                     dtype=np.int32), width)), jnp.asarray(wt.ravel(), jnp.result_type(float)),
                     int(n_links), int(n_flows), width)


def components(inc: Incidence, deps=None) -> np.ndarray:
    """``[flows]`` component label: flows linked by a shared link or a dependency.

    Label propagation (minimum flow index) to a fixed point, NumPy.  Flows with
    different labels share no link (with non-zero weight) and no dependency.
    """
    n, L = inc.n_flows, inc.n_links
    li = np.asarray(inc.link_idx)
    fi = np.asarray(inc.flow_idx)
    keep = np.asarray(inc.weight) != 0
    li, fi = li[keep], fi[keep]
    d = np.zeros((n, 0), int) if deps is None else np.asarray(deps)
    dsrc = np.broadcast_to(np.arange(n)[:, None], d.shape)[d >= 0]
    ddst = d[d >= 0]
    lab = np.arange(n)
    while True:
        link_min = np.full(L, n)
        np.minimum.at(link_min, li, lab[fi])
        new = lab.copy()
        np.minimum.at(new, fi, link_min[li])
        np.minimum.at(new, dsrc, new[ddst])
        np.minimum.at(new, ddst, new[dsrc])
        new = new[new]  # pointer jumping
        if np.array_equal(new, lab):
            return lab
        lab = new


def collective_stats(case, start, finish, job: int = 0) -> dict:
    """p99 / all-reduce completion time and effective bandwidth of a job's collectives.

    Completion times are :func:`fabric_jax.metrics.collective_completion_time` (first
    start to last finish) of each collective (every rail's all-reduce, every
    expert-parallel group's all-to-all); the effective bandwidth is
    :func:`fabric_jax.metrics.collective_effective_bandwidth` over the training step's
    two collectives (each over every rail), the same definition ``compare`` reports.
    Flows not simulated (NaN start, e.g. outside a sampled component) are left out.
    """
    w = case.workload
    start, finish = np.asarray(start, float), np.asarray(finish, float)
    simulated = ~np.isnan(start)
    names = list(case.groups)
    group = np.full(w.n_flows, -1)
    for g, name in enumerate(names):
        idx = case.groups[name]
        group[idx[(case.job_of[idx] == job) & simulated[idx]]] = g
    cct = np.asarray(mx.collective_completion_time(np.nan_to_num(start), finish, group,
                                                   len(names)), float)
    present = ~np.isnan(cct)
    short = [n.rsplit("/", 1)[-1] for n in names]
    ar = [t for t, n, p in zip(cct, short, present) if p and "allreduce" in n]
    a2a = [t for t, n, p in zip(cct, short, present) if p and n.startswith("a2a")]
    times = cct[present]
    phase = np.where(simulated & (case.job_of == job), collective_phases(case), -1)
    phase_cct = mx.collective_completion_time(np.nan_to_num(start), finish, phase, 2)
    ideal = mx.collective_ideal_time(w.src, w.dst, w.size, phase, 2, case.topology.n_hosts,
                                     case.line_rate)
    return dict(p99_collective_completion_time=float(np.percentile(times, 99)),
                all_reduce_completion_time=float(max(ar)) if ar else float("nan"),
                all_to_all_p99_completion_time=(float(np.percentile(a2a, 99)) if a2a
                                                else float("nan")),
                effective_bandwidth=float(mx.collective_effective_bandwidth(phase_cct, ideal)),
                n_collectives=int(times.size))


def _sub_inputs(case, inc, idx, n_pad, links, n_links_pad):
    """Arrays of the flows ``idx`` (renumbered), padded with ``n_pad`` empty flows, on
    the component's ``links`` renumbered ``0..`` (padded to ``n_links_pad`` links)."""
    w = case.workload
    n = idx.size
    new_of = np.full(w.n_flows, -1, np.int64)
    new_of[idx] = np.arange(n)
    d = np.asarray(w.deps)[idx] if w.deps is not None else np.full((n, 1), -1)
    d = np.where(d >= 0, new_of[np.maximum(d, 0)], -1)
    if w.deps is not None and np.any((np.asarray(w.deps)[idx] >= 0) & (d < 0)):
        raise AssertionError("a dependency crosses components")
    W = inc.row_width
    lt = np.asarray(inc.link_idx).reshape(-1, W)[idx]
    wt = np.asarray(inc.weight).reshape(-1, W)[idx]
    local = np.zeros(inc.n_links, np.int32)
    local[links] = np.arange(links.size)
    lt = np.where(wt != 0, local[lt], 0)
    pad = lambda a, v: np.concatenate([a, np.full((n_pad,) + a.shape[1:], v, a.dtype)])  # noqa
    lt, wt, d = pad(lt, 0), pad(wt, 0), pad(d, -1)
    m = n + n_pad
    sub = Incidence(jnp.asarray(lt.ravel()), jnp.asarray(np.repeat(np.arange(m, dtype=np.int32),
                    W)), jnp.asarray(wt.ravel()), int(n_links_pad), m, W)
    cap = np.ones(n_links_pad)
    cap[:links.size] = np.asarray(case.topology.capacity, float)[links]
    arr = pad(np.asarray(case.sim_arrival, float)[idx], 0.0)
    size = pad(np.asarray(w.size, float)[idx], 0.0)
    delay = pad(np.asarray(w.delay, float)[idx], 0.0) if w.delay is not None else None
    lat = pad(np.asarray(case.latency, float)[idx], 0.0)
    return sub, cap, arr, size, d, delay, lat


def decompose(case) -> dict:
    """Component layout of a case, from the union of all candidate paths (so it is the
    same under any routing split, and one compile serves every preset).

    Returns ``{"label": [flows], "link_label": [links] (-1 unused), "flows": padded
    flows per component, "links": padded links per component, "width": row width}``.
    """
    n_links = case.topology.n_links
    pm = np.asarray(case.paths.path_mask, float)
    even = pm / np.maximum(pm.sum(axis=1, keepdims=True), 1.0)
    inc = compact_incidence(case.paths, even, n_links)
    lab = components(inc, case.workload.deps)
    li = np.asarray(inc.link_idx).reshape(-1, inc.row_width)
    nz = np.asarray(inc.weight).reshape(-1, inc.row_width) != 0
    link_lab = np.full(n_links, -1)
    link_lab[li[nz]] = np.broadcast_to(lab[:, None], li.shape)[nz]
    return dict(label=lab, link_label=link_lab, flows=int(np.bincount(lab).max()),
                links=int(np.bincount(link_lab[link_lab >= 0]).max()), width=inc.row_width)


def run_maxmin(case, fabric, *, seed: int = 0, layout: dict | None = None,
               sample_components: int | None = None, full: bool = False) -> dict:
    """Max-min (ideal CC) event simulation of one case under one preset's routing.

    Args:
      case: :class:`fabric_jax.compare.Case` (built with ``fabric.sharp``).
      fabric: :class:`fabric_jax.Fabric` (its routing's initial split is used).
      seed: routing hash seed.
      layout: :func:`decompose` of the case (computed when ``None``).
      sample_components: simulate only the first ``k`` components (approximation).
      full: one event simulation of all flows (no decomposition; the reference).

    Returns:
      ``{"start", "finish"}`` ``[flows]`` arrays (NaN for flows not simulated),
      ``"components"`` (independent components found), ``"stalled"``, ``"max_events"``.
    """
    layout = decompose(case) if layout is None else layout
    routing = make_routing(fabric.routing, case.paths, fabric.routing_params(), seed=seed)
    split = np.asarray(routing.split)
    inc = compact_incidence(case.paths, split, case.topology.n_links, layout["width"])
    w = case.workload
    if full:
        res = simulate_flows(inc, case.topology.capacity, case.sim_arrival, w.size,
                             deps=w.deps, delay=w.delay, latency=case.latency,
                             demand=np.full(w.n_flows, case.line_rate), max_active=w.n_flows)
        return dict(start=np.asarray(res.start, float), finish=np.asarray(res.finish, float),
                    components=1, stalled=bool(res.stalled), max_events=int(res.n_events))
    lab, link_lab, m = layout["label"], layout["link_label"], layout["flows"]
    roots = np.unique(lab)
    start = np.full(w.n_flows, np.nan)
    finish = np.full(w.n_flows, np.nan)
    stalled, n_events = False, 0
    todo = roots if sample_components is None else roots[:int(sample_components)]
    for r in todo:
        idx = np.flatnonzero(lab == r)
        sub, ccap, arr, size, d, delay, lat = _sub_inputs(
            case, inc, idx, m - idx.size, np.flatnonzero(link_lab == r), layout["links"])
        res = simulate_flows(sub, ccap, arr, size, deps=d, delay=delay, latency=lat,
                             demand=np.full(m, case.line_rate), max_active=m)
        start[idx] = np.asarray(res.start, float)[:idx.size]
        finish[idx] = np.asarray(res.finish, float)[:idx.size]
        stalled |= bool(res.stalled)
        n_events = max(n_events, int(res.n_events))
    return dict(start=start, finish=finish, components=int(roots.size), stalled=stalled,
                max_events=n_events)


def _problem_key(case, fabric, seed):
    split = np.asarray(make_routing(fabric.routing, case.paths, fabric.routing_params(),
                                    seed=seed).split)
    return (bool(fabric.sharp), hash(split.tobytes()))


def ep_group_size(n_servers: int, wanted: int, minimum: int = 2) -> int:
    """The largest divisor of ``n_servers`` that is ``<= wanted`` and ``>= minimum``
    (``n_servers`` itself when none is): the expert-parallel group size a training job of
    ``n_servers`` servers can use when ``wanted`` does not divide it."""
    n, wanted = int(n_servers), int(wanted)
    fits = [d for d in range(minimum, min(wanted, n) + 1) if n % d == 0]
    return max(fits) if fits else n


def training_only(scn, train_servers: int | None = None):
    """The scenario's training job alone (no tenant, no background) on
    ``train_servers`` servers (default: the scenario's), nothing else on the fabric.

    The returned scenario states every value it uses: ``ep_servers`` becomes
    :func:`ep_group_size` of the new server count (the scenario's when it divides it),
    and a ``leaf_spine``'s ``servers_per_leaf`` likewise (at most half the servers, so
    there are >= 2 leaves), so that the job fills whole groups and whole leaves."""
    t, w, sim = dict(scn.topology), dict(scn.workload), dict(scn.simulation)
    n = int(train_servers if train_servers is not None else w["train_servers"])
    if n < 2:
        raise ValueError(f"train_servers must be >= 2; got {n}")
    t["n_servers"] = n
    if t["kind"] == "leaf_spine":  # whole leaves: as many servers per leaf as divide n
        t["servers_per_leaf"] = ep_group_size(n, min(t["servers_per_leaf"], n // 2), minimum=1)
    w.update(train_servers=n, tenant_servers=0, background_load=0.0,
             ep_servers=ep_group_size(n, w["ep_servers"]))
    sim["isolation"] = False
    data = dict(topology=t, workload=w, simulation=sim, economics=dict(scn.economics),
                fabrics={"presets": list(scn.presets)})
    for name, ov in scn.overrides.items():
        data["fabrics"][name] = dict(ov)
    return scenario_from_dict(data)


def scaled_scenarios(scn, factors=(0.5, 1.0, 2.0, 4.0)) -> list:
    """Training-only copies of ``scn`` with ``train_servers`` scaled by each factor
    (rounded, >= 2, duplicates dropped)."""
    base = int(scn.workload["train_servers"])
    sizes = sorted({max(2, int(round(base * f))) for f in factors})
    return [training_only(scn, n) for n in sizes]


def scaling_curves(scenarios, presets=None, *, seed: int = 0,
                   sample_components: int | None = None, sample_above_gpus: int = 0,
                   full: bool = False, shared_shape: bool = False, progress=None) -> dict:
    """Max-min engine (:func:`run_maxmin`) over a list of (training-only) scenarios.

    Args:
      scenarios: :class:`fabric_jax.compare.Scenario` list (e.g. :func:`scaled_scenarios`).
      presets: preset names (default: each scenario's).
      seed: routing hash seed.
      sample_components: above ``sample_above_gpus`` GPUs simulate only this many
        independent components (rails) and take the statistics over their
        collectives (an estimate; ``None``: all components, exact).
      full: no decomposition (one event simulation of all flows; the reference).
      shared_shape: pad every scenario's components to the largest one's flows, links
        and row width, so one compile serves the whole sweep (worth it when the sizes
        are small; the per-event cost follows the padded size).
      progress: optional callable taking a label, called after each preset.

    Returns:
      ``{"gpus": [...], "fabrics": {preset: {metric: [...]}}}`` with the metrics of
      :func:`collective_stats` plus ``unfinished_flows``, ``components`` (found),
      ``components_simulated`` and ``wall_s`` (seconds spent on that preset's point,
      0 when it reused an identical problem).
    """
    import time

    from .fabrics import get_fabric
    out = {"gpus": [], "fabrics": {}}
    prepared = []
    for scn in scenarios:
        names = list(presets or scn.presets)
        fabs = {n: get_fabric(n, **scn.overrides.get(n, {})) for n in names}
        cases, layouts = {}, {}
        for fab in fabs.values():
            if fab.sharp not in cases:
                cases[fab.sharp] = build_case(scn, fab.sharp)
                layouts[fab.sharp] = decompose(cases[fab.sharp])
        prepared.append((fabs, cases, layouts))
    if shared_shape:  # pad every size to one shape: a single compile for the sweep
        every = [lay for _, _, ls in prepared for lay in ls.values()]
        common = {k: max(lay[k] for lay in every) for k in ("flows", "links", "width")}
        for lay in every:
            lay.update(common)
    for fabs, cases, layouts in prepared:
        done = {}
        gpus = int(next(iter(cases.values())).train_hosts.size)
        k = sample_components if (sample_components and gpus > sample_above_gpus) else None
        for name, fab in fabs.items():
            t0 = time.perf_counter()
            case = cases[fab.sharp]
            key = _problem_key(case, fab, seed)
            if key not in done:
                r = run_maxmin(case, fab, seed=seed, layout=layouts[fab.sharp],
                               sample_components=k, full=full)
                st = collective_stats(case, r["start"], r["finish"])
                sim = ~np.isnan(r["start"]) & (case.job_of == 0)
                st["unfinished_flows"] = int(np.sum(~np.isfinite(r["finish"][sim])))
                st["components"] = r["components"]
                st["components_simulated"] = (1 if full else
                                              min(k or r["components"], r["components"]))
                done[key] = st
            st = dict(done[key], wall_s=time.perf_counter() - t0)
            for m, v in st.items():
                out["fabrics"].setdefault(name, {}).setdefault(m, []).append(v)
            if progress is not None:
                progress(f"{gpus} GPUs {name}")
        out["gpus"].append(gpus)
    return out
