"""The compare scenario: its schema, its defaults, TOML parsing and validation.

A scenario is plain data (:class:`Scenario`, four dicts of numbers plus the preset
list); nothing here builds arrays or runs a simulation.  :func:`scenario_from_dict`
checks **every** value before anything runs, including each preset's ``cc_options`` and
``routing_options``, and never changes a value silently: a value that the study could
not honour as written (a server count that does not fill whole leaves, an
expert-parallel group that does not divide the training job, a fan-in larger than the
tenant) is refused with a :class:`ScenarioError` naming the key and what it accepts.

Sections (TOML tables) and keys, with the accepted values:

``[topology]``
    ``kind`` (``rail_optimized`` | ``leaf_spine``), ``n_servers`` (>= 1),
    ``nics_per_server`` (>= 1; rails, ``rail_optimized`` only), ``servers_per_leaf``
    (>= 1), ``n_spines`` (>= 0, 0 = one per server of a full leaf), ``link_gbps`` (> 0),
    ``latency_us`` (>= 0), ``buffer_kb`` (> 0).
``[workload]``
    ``train_servers`` (>= 2), ``tenant_servers`` (0 or >= 2), ``ep_servers`` (>= 2,
    divides ``train_servers``), ``all_reduce_mb`` (> 0), ``moe_mb`` (>= 0; 0 = a dense model, no all-to-all),
    ``expert_skew`` (>= 0), ``compute_us`` (>= 0), ``tenant_incast_mb`` (>= 0),
    ``tenant_fan_in`` (1 .. ``tenant_servers - 1`` when there is a tenant),
    ``background_load`` (in [0, 1)), ``background_cdf`` (a built-in CDF name),
    ``background_us`` (> 0).
``[simulation]``
    ``dt_us`` (> 0), ``n_steps`` (>= 1), ``max_paths`` (>= 0; 0 = every equal-cost
    path, the default), ``seed`` (>= 0), ``isolation`` (true | false).
``[economics]``
    ``gpu_price_per_hour`` (>= 0), ``tokens_per_gpu_per_step`` (> 0).
``[fabrics]``
    ``presets = [...]`` and per-preset tables ``[fabrics.<name>]`` with ``routing``,
    ``cc``, ``flow_control``, ``sharp``, ``routing_options``, ``cc_options``, ``reorder``
    (true | false: the NIC accepts out-of-order packets), ``loss_recovery``
    (``selective`` | ``go_back_n``) (:mod:`fabric_jax.receiver`).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

from ..fabrics import PRESETS, get_fabric
from ..workloads import FlowSizeCDF

__all__ = ["Scenario", "ScenarioError", "default_scenario", "scenario_from_dict",
           "load_scenario", "validate_scenario", "SCHEMA", "FABRIC_KEYS"]


class ScenarioError(ValueError):
    """A scenario value the study refuses; ``key`` is its dotted name
    (``"workload.background_load"``)."""

    def __init__(self, key: str, msg: str):
        super().__init__(f"scenario key '{key}': {msg}")
        self.key = key


# (type, lower bound, lower bound inclusive?, upper bound exclusive or None) per key;
# a tuple of strings is a choice.
_INT, _FLOAT, _BOOL = "int", "float", "bool"
SCHEMA = {
    "topology": {"kind": ("rail_optimized", "leaf_spine"), "n_servers": (_INT, 1),
                 "nics_per_server": (_INT, 1), "servers_per_leaf": (_INT, 1),
                 "n_spines": (_INT, 0), "link_gbps": (_FLOAT, 0, False),
                 "latency_us": (_FLOAT, 0), "buffer_kb": (_FLOAT, 0, False)},
    "workload": {"train_servers": (_INT, 2), "tenant_servers": (_INT, 0),
                 "ep_servers": (_INT, 2), "all_reduce_mb": (_FLOAT, 0, False),
                 "moe_mb": (_FLOAT, 0), "expert_skew": (_FLOAT, 0),
                 "compute_us": (_FLOAT, 0), "tenant_incast_mb": (_FLOAT, 0),
                 "tenant_fan_in": (_INT, 0), "background_load": (_FLOAT, 0, True, 1.0),
                 "background_cdf": tuple(FlowSizeCDF.builtin_names()),
                 "background_us": (_FLOAT, 0, False)},
    "simulation": {"dt_us": (_FLOAT, 0, False), "n_steps": (_INT, 1), "max_paths": (_INT, 0),
                   "seed": (_INT, 0), "isolation": (_BOOL,)},
    "economics": {"gpu_price_per_hour": (_FLOAT, 0),
                  "tokens_per_gpu_per_step": (_FLOAT, 0, False)},
}
#: Keys of a ``[fabrics.<preset>]`` table.
FABRIC_KEYS = ("routing", "cc", "flow_control", "sharp", "routing_options", "cc_options",
               "reorder", "loss_recovery")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A compare scenario (see the module docstring); sections are dicts."""

    topology: dict
    workload: dict
    simulation: dict
    economics: dict
    presets: tuple
    overrides: dict


def default_scenario() -> Scenario:
    """The built-in scenario: 256 GPUs (32 servers x 8 rails), 2 tenants, background;
    every equal-cost path (``max_paths = 0``)."""
    return Scenario(
        topology=dict(kind="rail_optimized", n_servers=32, nics_per_server=8,
                      servers_per_leaf=16, n_spines=0, link_gbps=400.0, latency_us=1.0,
                      buffer_kb=1024.0),
        workload=dict(train_servers=24, tenant_servers=8, ep_servers=4, all_reduce_mb=32.0,
                      moe_mb=4.0, expert_skew=1.0, compute_us=1000.0, tenant_incast_mb=1.0,
                      tenant_fan_in=4, background_load=0.05, background_cdf="web_search",
                      background_us=200.0),
        simulation=dict(dt_us=4.0, n_steps=250, max_paths=0, seed=0, isolation=True),
        economics=dict(gpu_price_per_hour=2.5, tokens_per_gpu_per_step=8.0),
        presets=tuple(PRESETS), overrides={})


def _describe(rule) -> str:
    if isinstance(rule, tuple) and rule and isinstance(rule[0], str) and rule[0] not in (
            _INT, _FLOAT, _BOOL):
        return f"one of {list(rule)}"
    kind = rule[0]
    if kind == _BOOL:
        return "true or false"
    lo = rule[1]
    incl = rule[2] if len(rule) > 2 else True
    hi = rule[3] if len(rule) > 3 else None
    what = "an integer" if kind == _INT else "a number"
    bound = f"{'>=' if incl else '>'} {lo:g}"
    if hi is not None:
        return f"{what} in [{lo:g}, {hi:g})"
    return f"{what} {bound}"


def _check_value(key: str, rule, val):
    """The value (ints stay ints, numbers become floats) or :class:`ScenarioError`."""
    if isinstance(rule, tuple) and rule and rule[0] not in (_INT, _FLOAT, _BOOL):
        if val not in rule:
            raise ScenarioError(key, f"accepted values: {list(rule)}; got {val!r}")
        return val
    kind = rule[0]
    if kind == _BOOL:
        if not isinstance(val, bool):
            raise ScenarioError(key, f"must be true or false; got {val!r}")
        return val
    ok_type = (isinstance(val, int) if kind == _INT else isinstance(val, (int, float))) \
        and not isinstance(val, bool)
    if not ok_type or (kind == _FLOAT and not math.isfinite(val)):
        raise ScenarioError(key, f"must be {_describe(rule)}; got {val!r}")
    lo = rule[1]
    incl = rule[2] if len(rule) > 2 else True
    hi = rule[3] if len(rule) > 3 else None
    if (val < lo if incl else val <= lo) or (hi is not None and val >= hi):
        raise ScenarioError(key, f"must be {_describe(rule)}; got {val!r}")
    return val if kind == _INT else float(val)


def validate_scenario(scn: Scenario) -> Scenario:
    """Checks every value of ``scn`` (types, ranges, cross-key consistency, each preset's
    options) and returns it unchanged.

    Raises:
      ScenarioError: the first offending key, with the values it accepts.
    """
    for sec, schema in SCHEMA.items():
        body = getattr(scn, sec)
        missing = sorted(set(schema) - set(body))
        if missing:
            raise ScenarioError(f"{sec}.{missing[0]}", "missing")
        for key, val in body.items():
            if key not in schema:
                raise ScenarioError(f"{sec}.{key}", f"unknown key; accepted keys: "
                                    f"{sorted(schema)}")
            _check_value(f"{sec}.{key}", schema[key], val)
    t, w = scn.topology, scn.workload
    if t["kind"] == "leaf_spine":
        if t["n_servers"] % t["servers_per_leaf"]:
            raise ScenarioError("topology.n_servers", f"a leaf_spine needs whole leaves: "
                                f"a multiple of servers_per_leaf={t['servers_per_leaf']}; "
                                f"got {t['n_servers']}")
        if t["n_servers"] // t["servers_per_leaf"] < 2:
            raise ScenarioError("topology.n_servers", f"a leaf_spine needs >= 2 leaves: "
                                f">= {2 * t['servers_per_leaf']} servers (2 x "
                                f"servers_per_leaf); got {t['n_servers']}")
    if w["train_servers"] + w["tenant_servers"] > t["n_servers"]:
        raise ScenarioError("workload.train_servers", f"train_servers + tenant_servers must "
                            f"be <= topology.n_servers={t['n_servers']}; got "
                            f"{w['train_servers']} + {w['tenant_servers']}")
    if w["ep_servers"] > w["train_servers"] or w["train_servers"] % w["ep_servers"]:
        raise ScenarioError("workload.ep_servers", f"must be an integer >= 2 that divides "
                            f"train_servers={w['train_servers']}; got {w['ep_servers']}")
    if w["tenant_servers"] == 1:
        raise ScenarioError("workload.tenant_servers", "must be 0 (no tenant) or >= 2 (an "
                            "incast needs a sender and a receiver); got 1")
    if w["tenant_servers"] >= 2 and not 1 <= w["tenant_fan_in"] <= w["tenant_servers"] - 1:
        raise ScenarioError("workload.tenant_fan_in", f"must lie in [1, tenant_servers - 1 = "
                            f"{w['tenant_servers'] - 1}]; got {w['tenant_fan_in']}")
    if not scn.presets or any(p not in PRESETS for p in scn.presets):
        raise ScenarioError("fabrics.presets", f"must be a non-empty list of "
                            f"{sorted(PRESETS)}; got {list(scn.presets)!r}")
    for name, ov in scn.overrides.items():
        check_preset_options(name, ov)
    return scn


def check_preset_options(name: str, options: dict):
    """Builds preset ``name`` with ``options`` and its law and routing parameters, so
    that a bad ``cc_options`` / ``routing_options`` fails before any preset runs.

    Raises:
      ScenarioError: naming ``fabrics.<name>.<key>``.
    """
    if name not in PRESETS:
        raise ScenarioError(f"fabrics.{name}", f"unknown preset; accepted: {sorted(PRESETS)}")
    bad = sorted(set(options) - set(FABRIC_KEYS))
    if bad:
        raise ScenarioError(f"fabrics.{name}.{bad[0]}", f"unknown; accepted keys: "
                            f"{list(FABRIC_KEYS)}")
    for key in ("routing_options", "cc_options"):
        if key in options and not isinstance(options[key], dict):
            raise ScenarioError(f"fabrics.{name}.{key}", f"must be a table of keyword "
                                f"values; got {options[key]!r}")
    for key in ("sharp", "reorder"):
        if key in options and not isinstance(options[key], bool):
            raise ScenarioError(f"fabrics.{name}.{key}", f"must be true or false; got "
                                f"{options[key]!r}")
    try:
        fab = get_fabric(name, **options)
    except (ValueError, TypeError) as err:
        key = next((k for k in ("routing", "cc", "flow_control", "loss_recovery") if k in options
                    and k in str(err)), None)
        raise ScenarioError(f"fabrics.{name}" + (f".{key}" if key else ""), str(err)) \
            from None
    for key, build in (("cc_options", fab.law_params), ("routing_options",
                                                        fab.routing_params)):
        try:
            build()
        except (ValueError, TypeError) as err:
            raise ScenarioError(f"fabrics.{name}.{key}", str(err)) from None


def scenario_from_dict(data: dict) -> Scenario:
    """A :class:`Scenario` from a parsed TOML mapping laid over :func:`default_scenario`,
    validated (:func:`validate_scenario`).

    Raises:
      ScenarioError: naming the offending key and the accepted keys / values.
    """
    if not isinstance(data, dict):
        raise ScenarioError("(top level)", f"must be a mapping of sections; got "
                            f"{type(data).__name__}")
    base = default_scenario()
    sections = {name: dict(getattr(base, name)) for name in SCHEMA}
    accepted = sorted(list(SCHEMA) + ["fabrics"])
    presets, overrides = list(base.presets), {}
    for sec, body in data.items():
        if sec not in accepted:
            raise ScenarioError(sec, f"unknown section; accepted sections: {accepted}")
        if not isinstance(body, dict):
            raise ScenarioError(sec, "must be a table ([section])")
        if sec == "fabrics":
            for key, val in body.items():
                if key == "presets":
                    if not (isinstance(val, list) and val and all(
                            isinstance(v, str) and v in PRESETS for v in val)):
                        raise ScenarioError("fabrics.presets", f"must be a non-empty list "
                                            f"of {sorted(PRESETS)}; got {val!r}")
                    presets = list(val)
                elif key in PRESETS and isinstance(val, dict):
                    overrides[key] = dict(val)
                else:
                    raise ScenarioError(f"fabrics.{key}", f"unknown; accepted: 'presets' or "
                                        f"a preset table [fabrics.<name>] with name in "
                                        f"{sorted(PRESETS)}")
            continue
        schema = SCHEMA[sec]
        for key, val in body.items():
            full = f"{sec}.{key}"
            if key not in schema:
                raise ScenarioError(full, f"unknown key; accepted keys: {sorted(schema)}")
            sections[sec][key] = _check_value(full, schema[key], val)
    return validate_scenario(Scenario(presets=tuple(presets), overrides=overrides, **sections))


def load_scenario(path) -> Scenario:
    """Reads and validates a TOML scenario file (see the module docstring).

    Raises:
      ValueError: ``--scenario`` names no file or is not TOML; :class:`ScenarioError`
        for a bad value.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--scenario: no such file {str(path)!r}")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--scenario {str(path)!r} is not valid TOML: {e}") from None
    return scenario_from_dict(data)
