"""The scale study's inputs as scenarios: one rule table, its flags, one scenario per size.

``fabric-jax scale``'s flags (or a Python mapping of the same keys) name the keys of a
:class:`~fabric_jax.scenario.Scenario` (``study = "scale"``), each checked by the one
validator (:func:`fabric_jax.scenario.check`) against :data:`SCALE_RULES`, then against
each other (:func:`scale_scenarios`).  Each GPU count gives one scenario:

* network (``topology.*``): ``kind = "scale_topology"`` (the rail-optimised Clos a real
  build uses at that size, :func:`~fabric_jax.scale.scale_topology`), ``gpus``,
  ``system``, ``switch_radix``, ``beyond_radix``;
* traffic (``workload.*``): the model and its plan (``pp``, ``ep``, ``microbatches``,
  ``overlap``), the step's slice (``skew``, ``expert_load``, ``capacity_factor``,
  ``slice_us``), the jobs (``jobs`` or
  ``job_gpus``, ``job_models``, ``placement``, ``job_overlap``), the background and the
  latency model;
* fabric (``fabrics.*``): ``presets`` and the options ``max_paths``, ``rails``;
* horizon (``simulation.*``): ``dt_us``, ``seed``, ``horizon_factor``, ``fifo_bands``
  (the horizon itself follows from the ideal fabric's time).

:func:`~fabric_jax.scale.scale_point` takes such a scenario.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..fabrics import PRESETS
from ..scenario import (Fabrics, Horizon, Network, Scenario, ScenarioError, Traffic, check,
                        flag_map, integer, number, one_of, refuse)
from ..scenario import physical
from ..systems import SYSTEMS
from ..workloads.cdf import FlowSizeCDF
from ..workloads.model import MODELS
from ..workloads.phases import EXPERT_LOADS
from ._fabric import DEFAULT_SWITCH_RADIX
from ._overlap import JOB_OVERLAPS, MAX_OVERLAP_JOBS
from ._rails import DEFAULT_DT_US, HORIZON_FACTOR
from ._route import DEFAULT_MAX_PATHS
from ._jobs import job_servers
from ._step import (DEFAULT_BACKGROUND_CDF, DEFAULT_CAPACITY_FACTOR, DEFAULT_EP,
                    DEFAULT_LATENCY, DEFAULT_MICROBATCHES, DEFAULT_MODEL, DEFAULT_PP,
                    DEFAULT_SKEW, LATENCY_MODELS, PLACEMENTS, scale_plan)

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
    # traffic
    "workload.model": one_of(sorted(MODELS), default=DEFAULT_MODEL),
    "workload.pp": integer(1, default=DEFAULT_PP),
    "workload.ep": integer(1, default=DEFAULT_EP),
    "workload.microbatches": integer(1, default=DEFAULT_MICROBATCHES,
                                     unit="per replica and step"),
    "workload.skew": number(0, default=DEFAULT_SKEW, unit="Zipf exponent"),
    "workload.expert_load": one_of(EXPERT_LOADS, default="zipf"),
    "workload.capacity_factor": number(1, default=DEFAULT_CAPACITY_FACTOR,
                                       unit="x the mean expert load"),
    "workload.overlap": number(0, 1, default=0.0, unit="fraction of the compute"),
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
    # fabric
    "fabrics.presets": one_of(PRESETS, many=True, default=tuple(PRESETS)),
    "fabrics.max_paths": integer(1, default=DEFAULT_MAX_PATHS),
    "fabrics.rails": integer(1, also=("all",), default=1, unit="rails simulated"),
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
    rails = v["fabrics.rails"]
    if rails != "all" and rails > g:
        raise refuse("fabrics.rails", f"must lie in [1, {g}] (rails of "
                     f"{v['topology.system']}) or be 'all'; got {rails!r}", flags=flags,
                     value=rails)
    names = list(models) if models is not None else [v["workload.model"]]
    _check_ep_experts(v["workload.ep"], names, flags)
    out = []
    for asked in v["topology.gpus"]:
        n = max(2, asked // g) * g
        if not job_gpus:
            try:
                job_servers(n // g, v["workload.jobs"], v["workload.placement"])
            except ValueError as err:
                raise refuse("workload.jobs", f"{v['workload.jobs']} at {n} GPUs: {err}",
                              flags=flags, value=v["workload.jobs"]) from None
        sizes = job_gpus or [n // v["workload.jobs"]] * v["workload.jobs"]
        for size, name in zip(sizes, names * len(sizes) if models is None else names):
            _check_ep_fits(v, name, size, g, flags)
        out.append(_scenario(v, n, asked))
    return out


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
    net.update(gpus=n_gpus, requested_gpus=asked)
    fab = part("fabrics")
    return Scenario(network=Network(net), traffic=Traffic(part("workload")),
                    fabric=Fabrics(tuple(fab.pop("presets")), options=fab),
                    horizon=Horizon(part("simulation")), study="scale")
