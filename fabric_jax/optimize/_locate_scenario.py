"""The scenario file of ``fabric-jax locate``: its rule tables, and the scenario it gives.

A locate scenario is a :class:`~fabric_jax.scenario.Scenario` (``study = "locate"``)
read from three TOML tables, each key checked by the one validator
(:func:`fabric_jax.scenario.check`) against :data:`LOCATE_SCHEMA`:

``[topology]`` (the network: a two-tier leaf-spine)
    ``kind`` (``leaf_spine``), ``n_leaves``, ``n_spines``, ``hosts_per_leaf`` (>= 1,
    required), ``link_gbps`` (host links, > 0, default 400), ``fabric_gbps``
    (leaf-spine links, > 0, default 400), ``latency_us`` (>= 0, default 1).
``[workload]`` (the traffic: a diagnostic all-to-all slice)
    ``shifts`` (concurrent permutations, >= 1, default 4), ``size_mb`` (bytes per flow,
    > 0, default 1).
``[locate]`` (the fabric and the horizon)
    ``preset`` (default ``roce``) and ``routing`` (default the preset's own,
    :data:`~fabric_jax.optimize._locate.PRESET_ROUTING`) -- the fabric; ``seed`` (ECMP
    hashes), ``dt_us`` (the model's time resolution) and ``steps`` (the solver's
    gradient steps) -- the horizon.
"""

from __future__ import annotations

from ..scenario import (REQUIRED, Fabrics, Horizon, Network, Scenario, ScenarioError,
                        Traffic, check_section, integer, number, one_of, read_scenario_file)
from ._locate import PRESET_ROUTING, ROUTINGS

__all__ = ["LOCATE_SCHEMA", "load_locate_scenario", "locate_scenario_from_dict",
           "build_locate"]

_GBPS = "Gb/s"
#: The rules of every key of a locate scenario file.
LOCATE_SCHEMA = {
    "topology": {"kind": one_of(("leaf_spine",), default="leaf_spine"),
                 "n_leaves": integer(1), "n_spines": integer(1),
                 "hosts_per_leaf": integer(1),
                 "link_gbps": number(0, lo_open=True, unit=_GBPS, default=400.0),
                 "fabric_gbps": number(0, lo_open=True, unit=_GBPS, default=400.0),
                 "latency_us": number(0, unit="microseconds", default=1.0)},
    "workload": {"shifts": integer(1, default=4),
                 "size_mb": number(0, lo_open=True, unit="MB per flow", default=1.0)},
    "locate": {"preset": one_of(PRESET_ROUTING, default="roce"),
               "routing": one_of(ROUTINGS, also=("",), default="",
                                 fix="leave it out (or '') for the preset's own routing"),
               "seed": integer(0, default=0),
               "dt_us": number(0, lo_open=True, unit="microseconds", default=1.0),
               "steps": integer(1, default=300)},
}
#: ``[locate]`` keys that describe the fabric; the others, the horizon.
_FABRIC_KEYS = ("preset", "routing")


def locate_scenario_from_dict(data: dict) -> Scenario:
    """The :class:`~fabric_jax.scenario.Scenario` of a parsed locate TOML mapping, every
    key checked (see the module docstring); ``fabric.options["routing"]`` is the
    routing that runs (the preset's own unless written).

    Raises:
      ScenarioError: naming the key: unknown, missing, wrong type or out of range.
    """
    if not isinstance(data, dict):
        raise ScenarioError("(top level)", f"must be a mapping of sections; got "
                            f"{type(data).__name__}")
    unknown = sorted(set(data) - set(LOCATE_SCHEMA))
    if unknown:
        raise ScenarioError(unknown[0], f"unknown section; accepted sections: "
                            f"{sorted(LOCATE_SCHEMA)}")
    sec = {}
    for name, table in LOCATE_SCHEMA.items():
        body = {key: rule.default for key, rule in table.items()}
        body.update(check_section(name, table, data.get(name, {})))
        missing = [key for key, val in body.items() if val is REQUIRED]
        if missing:
            raise ScenarioError(f"{name}.{missing[0]}", "missing")
        sec[name] = body
    loc = sec["locate"]
    routing = loc["routing"] or PRESET_ROUTING[loc["preset"]]
    return Scenario(
        network=Network(sec["topology"]), traffic=Traffic(sec["workload"]),
        fabric=Fabrics((loc["preset"],), options={"routing": routing}),
        horizon=Horizon({k: v for k, v in loc.items() if k not in _FABRIC_KEYS}),
        study="locate")


def load_locate_scenario(path) -> Scenario:
    """Reads and checks a locate scenario TOML file (:func:`locate_scenario_from_dict`).

    Raises:
      ScenarioError: ``--scenario`` names no file or is not TOML, or a bad key.
    """
    return locate_scenario_from_dict(read_scenario_file(path))


def build_locate(scn: Scenario):
    """``(topology, workload, problem, preset, routing)`` of a locate scenario."""
    from ..topology import leaf_spine
    from ._locate import diagnostic_workload, locate_problem
    if scn.study != "locate":
        raise ScenarioError("study", f"a {scn.study} scenario; locate reads a locate "
                            f"scenario (load_locate_scenario)")
    t, w, h = scn.network.params, scn.traffic.params, scn.horizon.params
    topo = leaf_spine(t["n_leaves"], t["n_spines"], t["hosts_per_leaf"],
                      link_gbps=t["link_gbps"], fabric_gbps=t["fabric_gbps"],
                      latency_us=t["latency_us"])
    wl = diagnostic_workload(topo.n_hosts, shifts=w["shifts"], size=w["size_mb"] * 1e6,
                             hosts_per_leaf=t["hosts_per_leaf"])
    routing = scn.fabric.options["routing"]
    prob = locate_problem(topo, wl, routing=routing, seed=h["seed"], dt=scn.horizon.dt)
    return topo, wl, prob, scn.fabric.presets[0], routing
