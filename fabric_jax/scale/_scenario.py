"""The scale study's inputs as scenarios: one rule table, its flags, one scenario per size.

``fabric-jax scale``'s flags (or a Python mapping of the same keys) name the keys of a
:class:`~fabric_jax.scenario.Scenario` (``study = "scale"``), each checked by the one
validator (:func:`fabric_jax.scenario.check`) against :data:`SCALE_RULES`, then against
each other (:func:`scale_scenarios`).  Each GPU count gives one scenario:

* network (``topology.*``): ``kind = "scale_topology"`` (the rail-optimised Clos a real
  build uses at that size, :func:`~fabric_jax.scale.scale_topology`), ``gpus``,
  ``system``, ``switch_radix``, ``beyond_radix``, ``cluster_gpus`` (one job on a
  larger cluster, :func:`~fabric_jax.scale.cluster_servers`; :data:`MAX_GPUS` caps the
  cluster);
* traffic (``workload.*``): the model and its plan (``pp``, ``ep``, ``microbatches``
  or a fixed ``global_batch``, ``overlap``), the step's slice (``skew``,
  ``expert_load``, ``capacity_factor``, ``slice_us``), the jobs (``jobs`` or
  ``job_gpus``, ``job_models``, ``placement``, ``job_overlap``), the background and the
  latency model;
* fabric (``fabrics.*``): ``presets`` and the options ``max_paths``, ``rails``, ``qps``,
  ``hash``, ``hash_polarization``;
* horizon (``simulation.*``): ``dt_us``, ``seed``, ``horizon_factor``, ``fifo_bands``
  (the horizon itself follows from the ideal fabric's time).

:func:`~fabric_jax.scale.scale_point` takes such a scenario.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..fabrics import PRESETS, VARIANTS
from ..scenario import (Fabrics, Horizon, Network, Scenario, ScenarioError, Traffic, boolean,
                        check, flag_map, integer, number, one_of, refuse)
from ..scenario import physical
from ..systems import SYSTEMS
from ..workloads.cdf import FlowSizeCDF
from ..workloads.model import MODELS
from ..workloads.phases import EXPERT_LOADS
from ._fabric import DEFAULT_SWITCH_RADIX
from ._overlap import JOB_OVERLAPS, MAX_OVERLAP_JOBS
from ._rails import DEFAULT_DT_US, HORIZON_FACTOR
from ._route import DEFAULT_HASH, DEFAULT_MAX_PATHS, DEFAULT_QPS, HASH_FIELDS
from ._cluster import default_cluster_gpus, serviceable_servers
from ._jobs import job_servers
from ._step import DEFAULT_DP_ALGORITHM, DP_ALGORITHMS
from ._step import (CLUSTER_PLACEMENTS, DEFAULT_BACKGROUND_CDF, DEFAULT_CAPACITY_FACTOR,
                    DEFAULT_EP, DEFAULT_LATENCY, DEFAULT_MICROBATCHES, DEFAULT_MODEL,
                    DEFAULT_OVERLAP, DEFAULT_PP, DEFAULT_SKEW, LATENCY_MODELS,
                    OVERLAP_MODELS, PLACEMENTS, scale_plan)

__all__ = ["SCALE_RULES", "SCALE_FLAGS", "MIN_GPUS", "MAX_GPUS", "RAIL_SYSTEMS",
           "scale_scenarios"]

#: GPU counts the study accepts.
MIN_GPUS, MAX_GPUS = 16, 32768
#: Server designs with one NIC per GPU (the rails the study reduces to).
RAIL_SYSTEMS = tuple(sorted(k for k, v in SYSTEMS.items()
                            if v.nics_per_server == v.gpus_per_server))
_US = "microseconds"

#: The rule of every key of a scale scenario.
SCALE_RULES = {
    # network
    "topology.gpus": integer(MIN_GPUS, MAX_GPUS, many=True, unit="GPUs",
                             default=(1024, 4096, 16384, 32768),
                             derived="the sum of workload.job_gpus where given"),
    "topology.system": one_of(RAIL_SYSTEMS, default="hgx_h100"),
    "topology.switch_radix": integer(4, default=DEFAULT_SWITCH_RADIX,
                                     unit="ports at the NIC speed"),
    "topology.beyond_radix": one_of(("planes", "tiers"), default="planes"),
    "topology.cluster_gpus": integer(MIN_GPUS, MAX_GPUS, unit="GPUs", default=None,
                                     derived="1.5 x the job's GPUs for the fragmented and "
                                             "topology_aware placements, else --gpus"),
    # traffic
    "workload.model": one_of(sorted(MODELS), default=DEFAULT_MODEL),
    "workload.pp": integer(1, default=DEFAULT_PP),
    "workload.ep": integer(1, default=DEFAULT_EP),
    "workload.microbatches": integer(1, default=DEFAULT_MICROBATCHES,
                                     unit="per replica and step"),
    "workload.skew": number(0, default=DEFAULT_SKEW, unit="Zipf exponent"),
    "workload.global_batch": integer(1, default=None,
                                     unit="sequences per step, the same at every GPU count",
                                     derived="none: weak scaling, workload.microbatches "
                                             "per replica"),
    "workload.overlap": number(0, 1, also=OVERLAP_MODELS, default=DEFAULT_OVERLAP,
                               unit="fraction of the compute"),
    "workload.expert_load": one_of(EXPERT_LOADS, default="zipf"),
    "workload.capacity_factor": number(1, default=DEFAULT_CAPACITY_FACTOR,
                                       unit="x the mean expert load"),
    "workload.slice_us": number(0, lo_open=True, unit=_US, default=250.0),
    "workload.jobs": integer(1, default=1),
    "workload.job_gpus": integer(1, many=True, min_items=2, unit="GPUs per job",
                                 default=None),
    "workload.job_models": one_of(sorted(MODELS), many=True, default=None),
    "workload.placement": one_of(PLACEMENTS, default="packed"),
    "workload.job_overlap": one_of(JOB_OVERLAPS, default="always"),
    "workload.background": number(0, 1, hi_open=True, default=0.0,
                                  unit="fraction of each NIC's line rate"),
    "workload.background_cdf": one_of(FlowSizeCDF.builtin_names(),
                                      default=DEFAULT_BACKGROUND_CDF),
    "workload.latency": one_of(LATENCY_MODELS, default=DEFAULT_LATENCY),
    "workload.dp_algorithm": one_of(DP_ALGORITHMS, default=DEFAULT_DP_ALGORITHM),
    # fabric
    "fabrics.presets": one_of((*PRESETS, *VARIANTS), many=True, default=tuple(PRESETS)),
    "fabrics.max_paths": integer(1, default=DEFAULT_MAX_PATHS),
    "fabrics.rails": integer(1, also=("all",), default=1, unit="rails simulated"),
    "fabrics.qps": integer(1, default=DEFAULT_QPS, unit="QPs per connection"),
    "fabrics.hash": one_of(HASH_FIELDS, default=DEFAULT_HASH),
    "fabrics.hash_polarization": boolean(default=False),
    # horizon
    "simulation.dt_us": physical.dt_us(default=DEFAULT_DT_US),
    "simulation.seed": integer(0, default=0),
    "simulation.horizon_factor": number(1, default=HORIZON_FACTOR,
                                        unit="x the ideal fabric's time"),
    "simulation.fifo_bands": integer(1, default=None),
}
#: The flag of each key ``fabric-jax scale`` sets (``--dt-us`` for ``simulation.dt_us``;
#: ``horizon_factor`` and ``fifo_bands`` are Python's only).
SCALE_FLAGS = flag_map([k for k in SCALE_RULES if k not in ("simulation.horizon_factor",
                                                            "simulation.fifo_bands")],
                       {"fabrics.presets": "--fabrics"})


def scale_scenarios(values: Mapping[str, Any], *, flags: Mapping | None = None) -> list:
    """One :class:`~fabric_jax.scenario.Scenario` per GPU count of ``values`` (``{key:
    value}`` of :data:`SCALE_RULES`, the rest their defaults), every value checked, then
    the values against each other: the jobs fill the cluster in whole servers of at
    least two, one model per job, ``job_overlap = "independent"`` with 2 to
    :data:`~fabric_jax.scale.MAX_OVERLAP_JOBS` jobs, rails within a server's.

    A GPU count that is not whole servers is rounded down to whole servers (at least
    two); ``network.params["requested_gpus"]`` keeps the count asked for.

    Args:
      values: the inputs; on a command line (``flags``: ``{key: "--flag"}``,
        :data:`SCALE_FLAGS`) lists and counts may be text (``"1024,4096"``) and an error
        names the flag.

    Raises:
      ScenarioError: naming the key (or its flag), the value and the rule.
    """
    flags = dict(flags or {})
    unknown = sorted(set(values) - set(SCALE_RULES))
    if unknown:
        raise ScenarioError(unknown[0], f"unknown key; accepted keys: {sorted(SCALE_RULES)}")
    v = {}
    for key, rule in SCALE_RULES.items():
        val = values.get(key)
        if val is None:
            v[key] = None if key == "topology.gpus" else rule.default
        else:
            v[key] = check(key, rule, val, flag=flags.get(key))
    g = SYSTEMS[v["topology.system"]].gpus_per_server
    job_gpus = v["workload.job_gpus"]
    if job_gpus is not None:
        if any(x < 2 * g or x % g for x in job_gpus):
            raise refuse("workload.job_gpus", f"each job must be whole servers of {g} GPUs "
                         f"and at least 2 servers; got {job_gpus}", flags=flags,
                         value=job_gpus)
        if v["workload.jobs"] != 1:
            jobs = flags.get("workload.jobs", "workload.jobs")
            raise refuse("workload.job_gpus", f"replaces {jobs}: give one of them",
                         flags=flags)
    if v["topology.gpus"] is None:
        v["topology.gpus"] = [sum(job_gpus)] if job_gpus else \
            list(SCALE_RULES["topology.gpus"].default)
    elif job_gpus and v["topology.gpus"] != [sum(job_gpus)]:
        gpus = flags.get("topology.gpus", "topology.gpus")
        raise refuse("workload.job_gpus", f"the jobs ({sum(job_gpus)} GPUs) must fill the "
                     f"one {gpus} count; got {gpus} {values.get('topology.gpus')!r}",
                     flags=flags)
    n_jobs = len(job_gpus) if job_gpus else v["workload.jobs"]
    models = v["workload.job_models"]
    if models is not None and len(models) != n_jobs:
        raise refuse("workload.job_models", f"must name one model per job ({n_jobs}); got "
                     f"{len(models)}: {models}", flags=flags, value=models)
    if v["workload.job_overlap"] == "independent" and not 2 <= n_jobs <= MAX_OVERLAP_JOBS:
        raise refuse("workload.job_overlap", f"independent needs 2 to {MAX_OVERLAP_JOBS} jobs "
                     f"(it runs every set of them); got {n_jobs}", flags=flags,
                     fix="set workload.jobs or workload.job_gpus")
    if v["workload.global_batch"] is not None:
        if values.get("workload.microbatches") is not None:
            raise refuse("workload.global_batch", f"fixes the micro-batches per replica "
                         f"(global batch / data-parallel degree); drop "
                         f"{flags.get('workload.microbatches', 'workload.microbatches')}",
                         flags=flags)
        v["workload.microbatches"] = None
    rails = v["fabrics.rails"]
    if rails != "all" and rails > g:
        raise refuse("fabrics.rails", f"must lie in [1, {g}] (rails of "
                     f"{v['topology.system']}) or be 'all'; got {rails!r}", flags=flags,
                     value=rails)
    placement, cluster = v["workload.placement"], v["topology.cluster_gpus"]
    on_cluster = placement in CLUSTER_PLACEMENTS or cluster is not None
    if on_cluster and n_jobs != 1:
        key = "workload.placement" if placement in CLUSTER_PLACEMENTS else \
            "topology.cluster_gpus"
        raise refuse(key, f"places one job on a cluster larger than it; several jobs "
                     f"({flags.get('workload.jobs', 'workload.jobs')} / "
                     f"{flags.get('workload.job_gpus', 'workload.job_gpus')}) fill the "
                     f"cluster", flags=flags, value=v[key],
                     fix="use --jobs 1, or packed/spread/random without --cluster-gpus")
    if cluster is not None and cluster % g:
        raise refuse("topology.cluster_gpus", f"must be whole servers of {g} GPUs; got "
                     f"{cluster}", flags=flags, value=cluster)
    names = list(models) if models is not None else [v["workload.model"]]
    _check_ep_experts(v["workload.ep"], names, flags)
    out = []
    for asked in v["topology.gpus"]:
        n = max(2, asked // g) * g
        if on_cluster:
            _check_cluster(n, cluster, g, placement, flags)
        if not job_gpus and not on_cluster:
            try:
                job_servers(n // g, v["workload.jobs"], v["workload.placement"])
            except ValueError as err:
                raise refuse("workload.jobs", f"{v['workload.jobs']} at {n} GPUs: {err}",
                              flags=flags, value=v["workload.jobs"]) from None
        if v["workload.global_batch"] is not None:
            _check_global_batch(v, n, g, flags)
        sizes = job_gpus or [n // v["workload.jobs"]] * v["workload.jobs"]
        for size, name in zip(sizes, names * len(sizes) if models is None else names):
            _check_ep_fits(v, name, size, g, flags)
        out.append(_scenario(v, n, asked))
    return out


def _check_cluster(n: int, cluster, g: int, placement: str, flags: dict) -> None:
    """One job of ``n`` GPUs on a cluster of ``cluster`` GPUs (``None``: the default of
    ``placement``): large enough for the job (its serviceable servers, for the busy
    cluster's placements), within :data:`MAX_GPUS`."""
    busy = placement in CLUSTER_PLACEMENTS
    cl = default_cluster_gpus(n, g) if cluster is None else cluster
    gpus = flags.get("topology.gpus", "topology.gpus")
    if cluster is None and cl > MAX_GPUS:
        raise refuse("topology.cluster_gpus", f"the default cluster of a {n}-GPU job is "
                     f"{cl} GPUs (1.5 x the job: Llama 3's 16K of 24K GPUs), above the "
                     f"{MAX_GPUS} the study builds", flags=flags,
                     fix=f"give a cluster of at most {MAX_GPUS} GPUs, or {gpus} at most "
                         f"{MAX_GPUS * 2 // 3 // g * g}")
    room = serviceable_servers(cl // g) if busy else cl // g
    if n // g > room:
        what = (f"{room} serviceable servers (drained and spare servers left out)"
                if busy else f"{room} servers")
        raise refuse("topology.cluster_gpus", f"a cluster of {cl} GPUs has {what}; the "
                     f"{n}-GPU job needs {n // g}", flags=flags, value=cluster,
                     fix=f"give a larger cluster or a smaller {gpus}")


def _check_global_batch(v: dict, n_gpus: int, g: int, flags: dict) -> None:
    """Refuses a fixed global batch that is not a whole number of micro-batches per
    replica for some job's plan at ``n_gpus`` GPUs (:func:`~fabric_jax.scale.scale_plan`,
    host side, before any simulation), naming the key (or its flag) and the nearest
    valid values."""
    sizes = v["workload.job_gpus"] or [n_gpus // v["workload.jobs"]] * v["workload.jobs"]
    models = v["workload.job_models"] or [v["workload.model"]] * len(sizes)
    for size, mdl in sorted(set(zip(sizes, models))):
        try:
            scale_plan(mdl, n_gpus=size, gpus_per_server=g, pp=v["workload.pp"],
                       ep=v["workload.ep"], global_batch=v["workload.global_batch"])
        except ValueError as err:
            msg = str(err).split(": ", 1)[-1]
            raise refuse("workload.global_batch", msg, flags=flags,
                         value=v["workload.global_batch"]) from None


def _check_ep_experts(ep: int, names, flags) -> None:
    """The expert-parallel degree against each mixture-of-experts model's experts: at
    most the experts and dividing them (a dense model ignores it)."""
    for name in names:
        E = MODELS[name].n_experts
        if E > 1 and (ep > E or E % ep):
            ok = [d for d in range(1, E + 1) if E % d == 0]
            raise refuse("workload.ep", f"{name} has {E} experts: the expert-parallel "
                         f"degree must divide them; got {ep}", flags=flags, value=ep,
                         fix=f"use one of {ok}")


def _check_ep_fits(v: dict, name: str, n_gpus: int, g: int, flags) -> None:
    """An expert-parallel degree asked for (any but the default, which shrinks to fit)
    must be the plan's at ``n_gpus`` (:func:`~fabric_jax.scale.scale_plan`: dividing
    the data-parallel ranks), and for a node-limited model (DeepEP's per-server
    dispatch) fill whole servers or sit inside one."""
    mdl = MODELS[name]
    ep = v["workload.ep"]
    if mdl.n_experts == 1:
        return
    try:
        m, plan = scale_plan(name, n_gpus, g, pp=v["workload.pp"], ep=ep,
                             microbatches=v["workload.microbatches"])
    except ValueError:
        return                      # not the ep's fault: scale_point names the argument
    per = ep * plan.tp
    bad_servers = bool(mdl.node_limit) and per % g and g % per
    if (plan.ep != ep and ep != DEFAULT_EP) or bad_servers:
        ok = [d for d in range(1, min(plan.dp, mdl.n_experts) + 1)
              if plan.dp % d == 0 and mdl.n_experts % d == 0
              and not (mdl.node_limit and (d * plan.tp) % g and g % (d * plan.tp))]
        why = ("its groups of ep x tp = {per} GPUs must fill whole servers of {g}"
               .format(per=per, g=g) if bad_servers and plan.ep == ep else
               f"it must divide the data-parallel ranks (dp = {plan.dp}, tp = {plan.tp}, "
               f"pp = {plan.pp})")
        raise refuse("workload.ep", f"{ep} does not fit {name} at {n_gpus} GPUs: {why}",
                     flags=flags, value=ep, fix=f"use one of {ok}")


def _scenario(v: dict, n_gpus: int, asked: int) -> Scenario:
    """The scenario of checked values ``v`` at ``n_gpus`` GPUs."""
    part = lambda sec: {k.split(".")[1]: x for k, x in v.items()  # noqa: E731
                        if k.startswith(sec + ".")}
    net = dict(kind="scale_topology", **part("topology"))
    g = SYSTEMS[v["topology.system"]].gpus_per_server
    if v["workload.placement"] in CLUSTER_PLACEMENTS and net["cluster_gpus"] is None:
        net["cluster_gpus"] = default_cluster_gpus(n_gpus, g)
    net.update(gpus=n_gpus, requested_gpus=asked)
    fab = part("fabrics")
    return Scenario(network=Network(net), traffic=Traffic(part("workload")),
                    fabric=Fabrics(tuple(fab.pop("presets")), options=fab),
                    horizon=Horizon(part("simulation")), study="scale")
