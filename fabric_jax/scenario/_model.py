"""The host-side scenario: network, traffic, fabric, horizon, and economics.

A :class:`Scenario` is plain data, checked on the host before anything runs: what the
flows run on (:class:`Network`), what runs (:class:`Traffic`), which fabric presets run
it and how they are changed (:class:`Fabrics`), and how long and how finely it is
simulated (:class:`Horizon`), plus the prices that turn times into $/token.  Each
part holds its parameters as the study's rule table checked them (plain values, units
in the key names: ``link_gbps``, ``dt_us``); ``study`` names the study whose tables
they follow, and so how the parts are read:

=========  ============================  ==========================  ==================
part       compare / tune (TOML)         locate (TOML)               scale (flags)
=========  ============================  ==========================  ==================
network    ``[topology]``                ``[topology]``              ``--gpus --system
                                                                     --switch-radix ...``
traffic    ``[workload]``, ``[model]``,  ``[workload]``              ``--model --pp
           ``[parallelism]``                                         --jobs ...``
fabric     ``[fabrics]``                 ``[locate]`` preset,        ``--fabrics
                                         routing                     --max-paths --rails``
horizon    ``[simulation]``              ``[locate]`` dt_us, steps,  ``--dt-us --seed``
                                         seed
economics  ``[economics]``, ``[costs]``  --                          --
=========  ============================  ==========================  ==================

The compare study reads its parts by their TOML section names, which stay attributes
of every scenario (``scn.topology`` is ``scn.network.params``, ``scn.workload`` the
traffic's, ``scn.simulation`` the horizon's, ``scn.presets`` / ``scn.overrides`` the
fabric's, ``scn.model`` the traffic's training model), and which the constructor and
:func:`dataclasses.replace` accept: ``dataclasses.replace(scn, simulation=sim)``
replaces the horizon's parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

__all__ = ["Scenario", "Network", "Traffic", "Fabrics", "Horizon", "STUDIES"]

#: The studies whose rule tables a scenario's parts follow.
STUDIES = ("compare", "locate", "scale")


@dataclasses.dataclass(frozen=True)
class Network:
    """What the flows run on.

    Attributes:
      params: the topology family (``params["kind"]``: a builder's name,
        ``"rail_optimized"``, ``"leaf_spine"``, ``"scale_topology"``) and its
        parameters.
      built: a built :class:`fabric_jax.Topology` (``None``: the study builds it from
        ``params``); not compared by ``==``.
    """

    params: Mapping[str, Any]
    built: Any = dataclasses.field(default=None, compare=False)

    @property
    def family(self) -> str | None:
        """The topology family: the name of the builder of ``params``."""
        return self.params.get("kind")


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What runs on the network: the jobs.

    Attributes:
      params: the jobs' description (job sizes, collective sizes, tenant and background
        for compare; permutations for locate; the model, plan and placement of the
        training jobs for scale).
      model: the training model of compare's ``[model]`` / ``[parallelism]``:
        ``{"model": ModelConfig, "plan": ParallelPlan, "gpu": GPU, "slices": int}``
        (``None``: the workload keys' constant training job).
    """

    params: Mapping[str, Any]
    model: dict | None = None


@dataclasses.dataclass(frozen=True)
class Fabrics:
    """Which fabric presets run the traffic.

    Attributes:
      presets: :data:`fabric_jax.fabrics.PRESETS` names, in the order they are reported.
      overrides: ``{preset: {field: value}}`` changes to a preset
        (:func:`fabric_jax.get_fabric` keywords).
      options: the study's routing options (locate's ``routing``; scale's
        ``max_paths``, ``rails``).
    """

    presets: tuple
    overrides: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Horizon:
    """How long and how finely the traffic is simulated.

    Attributes:
      params: ``dt_us`` (the fluid step, microseconds), ``n_steps`` where the scenario
        fixes the horizon (scale sizes it from the ideal fabric's time), ``seed``, and
        the run's other numerical options (compare: ``max_paths``, ``fifo_bands``,
        ``isolation``; locate: the solver's ``steps``; scale: ``horizon_factor``).
    """

    params: Mapping[str, Any]

    @property
    def dt(self) -> float:
        """The fluid step, seconds."""
        return float(self.params["dt_us"]) * 1e-6

    @property
    def n_steps(self) -> int | None:
        """Steps of the horizon (``None``: the study sizes it)."""
        return self.params.get("n_steps")


_KEEP = object()


def _piece(part: str, name: str, doc: str) -> property:
    """A read-only attribute: ``name`` of the part ``part`` (a compare section name)."""
    return property(lambda self: getattr(getattr(self, part), name), doc=doc)


@dataclasses.dataclass(frozen=True, init=False)
class Scenario:
    """One study's inputs (see the module docstring).

    Attributes:
      network, traffic, fabric, horizon: the four parts.
      economics: ``gpu_price_per_hour`` ($ per GPU-hour) and
        ``tokens_per_gpu_per_step`` (compare), ``{}`` where the study uses the
        defaults of :mod:`fabric_jax.economics`.
      costs: compare's ``[costs]`` section: ``{"params": EconomicsParams, "prices":
        {preset: overrides}}`` (``None``: the defaults).
      study: the study whose rule tables the parts follow (:data:`STUDIES`).

    The constructor also takes the parts by compare's section names (``topology``,
    ``workload``, ``simulation``, ``presets``, ``overrides``, ``model``), each
    replacing that piece of a part given beside it.
    """

    network: Network
    traffic: Traffic
    fabric: Fabrics
    horizon: Horizon
    economics: Mapping[str, Any]
    costs: dict | None
    study: str

    def __init__(self, network: Network | None = None, traffic: Traffic | None = None,
                 fabric: Fabrics | None = None, horizon: Horizon | None = None,
                 economics: Mapping | None = None, costs: dict | None = None,
                 study: str = "compare", *, topology: Mapping | None = None,
                 workload: Mapping | None = None, simulation: Mapping | None = None,
                 presets=None, overrides: Mapping | None = None, model=_KEEP):
        if topology is not None:
            network = Network(topology)
        if workload is not None or model is not _KEEP:
            base = traffic or Traffic({})
            traffic = Traffic(base.params if workload is None else workload,
                              base.model if model is _KEEP else model)
        if presets is not None or overrides is not None:
            base = fabric or Fabrics(())
            fabric = Fabrics(base.presets if presets is None else tuple(presets),
                             base.overrides if overrides is None else overrides,
                             base.options)
        if simulation is not None:
            horizon = Horizon(simulation)
        parts = dict(network=network, traffic=traffic, fabric=fabric, horizon=horizon)
        missing = [name for name, part in parts.items() if part is None]
        if missing:
            raise TypeError(f"Scenario: no {missing[0]} (give the part, or its section: "
                            f"topology, workload, presets, simulation)")
        if study not in STUDIES:
            raise ValueError(f"Scenario: study must be one of {STUDIES}; got {study!r}")
        parts.update(economics={} if economics is None else economics, costs=costs,
                     study=study)
        for name, value in parts.items():
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict:
        """The resolved scenario (every default filled in) by compare's section names:
        what a results file records as its inputs (``"run"`` -> ``"inputs"``)."""
        out = {"study": self.study, "topology": dict(self.topology),
               "workload": dict(self.workload), "simulation": dict(self.simulation),
               "presets": list(self.presets), "overrides": dict(self.overrides or {})}
        if self.model is not None:   # the model, its plan and GPU as their fields
            out["model"] = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
                            for k, v in dict(self.model).items()}
        if self.economics:
            out["economics"] = dict(self.economics)
        return out

    # compare's section names for the parts' pieces
    topology = _piece("network", "params", "The network's parameters (``[topology]``).")
    workload = _piece("traffic", "params", "The traffic's parameters (``[workload]``).")
    model = _piece("traffic", "model", "The traffic's training model (``[model]``, "
                   "``[parallelism]``).")
    simulation = _piece("horizon", "params", "The horizon's parameters (``[simulation]``).")
    presets = _piece("fabric", "presets", "The fabric's presets (``fabrics.presets``).")
    overrides = _piece("fabric", "overrides", "The fabric's preset overrides "
                       "(``[fabrics.<preset>]``).")
