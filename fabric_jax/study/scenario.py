"""The compare scenario: its schema, its defaults, TOML parsing and validation.

A scenario is plain data (:class:`Scenario`, four dicts of numbers plus the preset
list, and optionally a training model and cost overrides); nothing here builds arrays
or runs a simulation.  :func:`scenario_from_dict`
checks **every** value before anything runs, including each preset's ``cc_options`` and
``routing_options``, and never changes a value silently: a value that the study could
not honour as written (a server count that does not fill whole leaves, an
expert-parallel group that does not divide the training job, a fan-in larger than the
tenant) is refused with a :class:`ScenarioError` naming the key and what it accepts.

Defaults follow the values the user wrote (:func:`derive_defaults`,
:data:`DERIVED_FROM`): the job sizes, the leaf size, the expert-parallel group, the
tenant's fan-in and the horizon's step count are derived from what holds, so a default
never contradicts a written value, and only a written key is ever named in an error
(a derived default that the written values leave no room for names the written key it
follows).  With a training model the job shrinks, unless its size is written, to the
largest one whose data-parallel width divides the model's global batch.

Sections (TOML tables) and keys, with the accepted values:

``[topology]``
    ``kind`` (``rail_optimized`` | ``leaf_spine``), ``n_servers`` (>= 1; default 32, or
    more to hold the jobs), ``nics_per_server`` (>= 1; rails, ``rail_optimized`` only),
    ``servers_per_leaf`` (>= 1; default ``min(16, n_servers / 2)``, whole leaves on a
    ``leaf_spine``), ``n_spines`` (>= 0, 0 = one per server of a full leaf),
    ``link_gbps`` (> 0), ``latency_us`` (>= 0), ``buffer_kb`` (> 0).
``[workload]``
    ``train_servers`` (>= 2; default the servers the tenant leaves), ``tenant_servers``
    (0 or >= 2; default a quarter of the servers), ``ep_servers`` (>= 2, divides
    ``train_servers``; default its largest divisor up to 4), ``all_reduce_mb`` (> 0),
    ``moe_mb`` (>= 0; 0 = a dense model, no all-to-all), ``expert_skew`` (>= 0),
    ``compute_us`` (>= 0), ``tenant_incast_mb`` (>= 0), ``tenant_fan_in`` (1 ..
    ``tenant_servers - 1`` when there is a tenant; default ``min(4, tenant_servers -
    1)``), ``background_load`` (in [0, 1)), ``background_cdf`` (a built-in CDF name),
    ``background_us`` (> 0).
``[simulation]``
    ``dt_us`` (> 0), ``n_steps`` (>= 1; default a 1 ms horizon, ``1000 / dt_us``),
    ``max_paths`` (>= 0; 0 = every equal-cost
    path, the default), ``seed`` (>= 0), ``isolation`` (true | false), ``fifo_bands``
    (>= 1: bands per egress FIFO of the fluid model, ``simulate_fluid(fifo_bands=)``;
    default 8, a numerical resolution like ``dt``: ``experiments/fifo_bands.py``).
``[economics]``
    ``gpu_price_per_hour`` (>= 0), ``tokens_per_gpu_per_step`` (> 0).
``[fabrics]``
    ``presets = [...]`` and per-preset tables ``[fabrics.<name>]`` with ``routing``,
    ``cc``, ``flow_control``, ``sharp``, ``routing_options``, ``cc_options``, ``reorder``
    (true | false: the NIC accepts out-of-order packets), ``loss_recovery``
    (``selective`` | ``go_back_n``) (:mod:`fabric_jax.receiver`), ``class_map`` (a
    table job name -> traffic class, e.g. ``{train = 1}``: the training job in its own
    class), ``class_weights``, ``class_levels``, ``shared_buffer_alpha``
    (:mod:`fabric_jax.qos`, :class:`fabric_jax.Fabric`).
``[model]`` (optional; or ``fabric-jax compare --model NAME``)
    ``name`` (a :data:`fabric_jax.workloads.model.MODELS` name) and any
    :class:`~fabric_jax.workloads.model.ModelConfig` field to override
    (``global_batch``, ``seq_len`` ...).  The training job's compute time, its
    collectives' bytes and its tokens per step then come from the model and the plan
    (:func:`fabric_jax.workloads.training.model_training_step`), so the keys of
    :data:`MODEL_REPLACES` are refused next to it.
``[parallelism]`` (optional, with a model)
    :class:`~fabric_jax.workloads.model.ParallelPlan` fields (``tp``, ``pp``, ``dp``,
    ``ep``, ``micro_batch``, ``overlap``, ``recompute``, ``achievable_fraction`` ...)
    and ``gpu`` (a :data:`fabric_jax.workloads.model.GPUS` name).  The plan fills the
    training job: ``tp pp dp = train_servers x GPUs per server`` (``dp`` defaults to
    what fills it, ``tp`` to the GPUs of a server).
``[costs]`` (optional)
    :class:`fabric_jax.economics.EconomicsParams` fields (``lifetime_years``,
    ``power_price_per_kwh``, ``pue``; the GPU price stays
    ``economics.gpu_price_per_hour``) and ``prices`` (a table of
    :class:`fabric_jax.economics.FabricPrices` overrides for every preset, or
    ``[costs.prices.<preset>]`` tables).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

from ..fabrics import PRESETS, get_fabric
from ..links import DEFAULT_FIFO_BANDS
from ..workloads import FlowSizeCDF

__all__ = ["Scenario", "ScenarioError", "default_scenario", "scenario_from_dict",
           "derive_defaults", "DERIVED_FROM",
           "load_scenario", "read_scenario_file", "validate_scenario", "SCHEMA",
           "FABRIC_KEYS", "MODEL_SECTIONS", "MODEL_REPLACES", "HORIZON_FACTOR",
           "model_setup", "check_model", "with_model_name", "model_comm_time", "model_slices",
           "with_classes"]


class ScenarioError(ValueError):
    """A scenario value the study refuses; ``key`` is its dotted name
    (``"workload.background_load"``)."""

    def __init__(self, key: str, msg: str):
        super().__init__(f"scenario key '{key}': {msg}")
        self.key, self.msg = key, msg


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
                   "seed": (_INT, 0), "isolation": (_BOOL,), "fifo_bands": (_INT, 1)},
    "economics": {"gpu_price_per_hour": (_FLOAT, 0),
                  "tokens_per_gpu_per_step": (_FLOAT, 0, False)},
}
#: Keys of a ``[fabrics.<preset>]`` table.
FABRIC_KEYS = ("routing", "cc", "flow_control", "sharp", "routing_options", "cc_options",
               "reorder", "loss_recovery", "class_map", "class_weights", "class_levels",
               "shared_buffer_alpha")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A compare scenario (see the module docstring); sections are dicts.

    ``model`` (``None``: the workload keys' constant training job) holds the training
    model of the ``[model]`` / ``[parallelism]`` sections or ``--model``:
    ``{"model": ModelConfig, "plan": ParallelPlan, "gpu": GPU, "slices": int}``
    (:func:`model_setup`).  ``costs`` (``None``: the defaults of
    :class:`fabric_jax.economics.EconomicsParams` and
    :data:`fabric_jax.economics.FABRIC_PRICES`) holds the ``[costs]`` section:
    ``{"params": EconomicsParams, "prices": {preset: overrides}}``.
    """

    topology: dict
    workload: dict
    simulation: dict
    economics: dict
    presets: tuple
    overrides: dict
    model: dict | None = None
    costs: dict | None = None


# Defaults that others follow (:func:`derive_defaults`).
_SPL, _EP, _FAN_IN, _HORIZON_US = 16, 4, 4, 1000.0


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
        simulation=dict(dt_us=1.0, n_steps=1000, max_paths=0, seed=0, isolation=True,
                        fifo_bands=DEFAULT_FIFO_BANDS),
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
    if scn.model is None and (w["ep_servers"] > w["train_servers"]
                              or w["train_servers"] % w["ep_servers"]):
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
    if scn.model is not None:
        check_model(scn)
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
        key = next((k for k in ("routing", "cc", "flow_control", "loss_recovery", "class_map",
                                "class_weights", "class_levels", "shared_buffer_alpha")
                    if k in options
                    and k in str(err)), None)
        raise ScenarioError(f"fabrics.{name}" + (f".{key}" if key else ""), str(err)) \
            from None
    for key, build in (("cc_options", fab.law_params), ("routing_options",
                                                        fab.routing_params)):
        try:
            build()
        except (ValueError, TypeError) as err:
            raise ScenarioError(f"fabrics.{name}.{key}", str(err)) from None


#: Defaults that follow other keys (:func:`derive_defaults`): key -> the keys it is
#: derived from.  A default is derived only when the user did not write the key.
DERIVED_FROM = {
    "topology.n_servers": ("workload.train_servers", "workload.tenant_servers",
                           "topology.servers_per_leaf", "topology.kind"),
    "topology.servers_per_leaf": ("topology.n_servers", "topology.kind",
                                  "workload.train_servers", "workload.tenant_servers"),
    "workload.tenant_servers": ("topology.n_servers", "workload.train_servers"),
    "workload.train_servers": ("topology.n_servers", "workload.tenant_servers"),
    "workload.ep_servers": ("workload.train_servers", "topology.n_servers",
                            "workload.tenant_servers"),
    "workload.tenant_fan_in": ("workload.tenant_servers", "topology.n_servers",
                               "workload.train_servers"),
    "simulation.n_steps": ("simulation.dt_us",),
}
DERIVED_FROM_TEXT = {
    "topology.n_servers": "32, or train_servers + tenant_servers where more, in whole "
                          "leaves on a leaf_spine",
    "topology.servers_per_leaf": "min(16, n_servers / 2) on rail_optimized, the largest "
                                 "divisor of n_servers up to that on a leaf_spine",
    "workload.tenant_servers": "a quarter of n_servers, at most what the training job "
                               "leaves, 0 when that is 1",
    "workload.train_servers": "n_servers - tenant_servers",
    "workload.ep_servers": "the largest divisor of train_servers up to 4",
    "workload.tenant_fan_in": "min(4, tenant_servers - 1)",
    "simulation.n_steps": "a 1 ms horizon: round(1000 / dt_us)",
}


def _largest_divisor(n: int, at_most: int, at_least: int) -> int:
    """The largest divisor of ``n`` in ``[at_least, at_most]``, ``n`` when there is none."""
    fits = [d for d in range(at_least, min(at_most, n) + 1) if n % d == 0]
    return max(fits) if fits else n


def derive_defaults(sections: dict, written: set, *, with_model: bool = False) -> None:
    """Sets, in place, each default of :data:`DERIVED_FROM` that the user did not write
    (``written``: dotted keys) from the values that hold (the user's or, in turn,
    derived), so that a default never contradicts a value the user set.  On the
    built-in scenario every derived value equals :func:`default_scenario`'s.

    * ``topology.n_servers``: 32, or ``train_servers + tenant_servers`` (their written
      or default values) where that is more; on a ``leaf_spine`` whose
      ``servers_per_leaf`` is written, rounded up to whole leaves (>= 2);
    * ``topology.servers_per_leaf``: ``min(16, n_servers / 2)`` (>= 1): two scalable
      units at least, so traffic crosses the spines; on a ``leaf_spine`` the largest
      divisor of ``n_servers`` up to that (whole leaves);
    * ``workload.tenant_servers``: ``n_servers / 4`` (8 of 32), at most ``n_servers -
      train_servers``; 0 where that gives 1 (an incast needs two servers);
    * ``workload.train_servers``: ``n_servers - tenant_servers`` (the training job
      fills the servers the tenant leaves);
    * ``workload.ep_servers``: the largest divisor of ``train_servers`` up to 4 (>= 2;
      ``train_servers`` itself when it has none);
    * ``workload.tenant_fan_in``: ``min(4, tenant_servers - 1)`` (4 without a tenant);
    * ``simulation.n_steps``: a 1 ms horizon, ``max(1, round(1000 / dt_us))``.
    """
    t, w, sim = sections["topology"], sections["workload"], sections["simulation"]
    given = lambda key: key in written  # noqa: E731
    leaf_spine = t["kind"] == "leaf_spine"
    if not given("topology.n_servers"):
        n = max(t["n_servers"], w["train_servers"] + w["tenant_servers"])
        if leaf_spine and given("topology.servers_per_leaf"):
            spl = t["servers_per_leaf"]
            n = max(2 * spl, -(-n // spl) * spl)
        t["n_servers"] = n
    n = t["n_servers"]
    if not given("workload.tenant_servers"):
        room = n - w["train_servers"] if given("workload.train_servers") else n
        ten = max(0, min(n // 4, room))
        w["tenant_servers"] = 0 if ten == 1 else ten
    if not given("workload.train_servers"):
        w["train_servers"] = max(2, n - w["tenant_servers"])
    if not given("topology.servers_per_leaf"):
        cap = max(1, min(_SPL, n // 2))
        t["servers_per_leaf"] = _largest_divisor(n, cap, 1) if leaf_spine else cap
    if not given("workload.ep_servers") and not with_model:
        w["ep_servers"] = _largest_divisor(w["train_servers"], _EP, 2)
    if not given("workload.tenant_fan_in"):
        w["tenant_fan_in"] = min(_FAN_IN, w["tenant_servers"] - 1) \
            if w["tenant_servers"] >= 2 else _FAN_IN
    if given("simulation.dt_us") and not given("simulation.n_steps"):
        sim["n_steps"] = max(1, int(round(_HORIZON_US / sim["dt_us"])))


#: With a training model, the keys that together set the plan and the batch, in the
#: order an error names the first one the user wrote.
_MODEL_KEYS = ("model.global_batch", "parallelism.micro_batch", "parallelism.dp",
               "parallelism.tp", "parallelism.pp", "workload.train_servers",
               "topology.n_servers", "topology.nics_per_server", "model.name")


def _as_written(err: ScenarioError, written: set) -> ScenarioError:
    """``err`` as the user should read it: unchanged when it names a key the user wrote;
    else (a default -- derived or fixed -- that the user's values leave no room for) it
    names the first written key the default depends on, says which default, and
    keeps the check."""
    if "." not in err.key or any(err.key == k or err.key.startswith(k + ".")
                                 for k in written):      # a section, or inside a written key
        return err
    if err.key in DERIVED_FROM:
        deps, why = DERIVED_FROM[err.key], f" ({DERIVED_FROM_TEXT[err.key]})"
    elif err.key.split(".")[0] in MODEL_SECTIONS:
        deps, why = _MODEL_KEYS, ""
    else:
        return err
    given = [k for k in deps if k in written]
    if not given:
        return err
    return ScenarioError(given[0], f"leaves no valid default for {err.key}{why}: "
                         f"{err.msg}")


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
    written: set[str] = set()                      # the keys the user set
    accepted = sorted(list(SCHEMA) + ["fabrics"] + list(MODEL_SECTIONS))
    presets, overrides = list(base.presets), {}
    for sec, body in data.items():
        if sec not in accepted:
            raise ScenarioError(sec, f"unknown section; accepted sections: {accepted}")
        if not isinstance(body, dict):
            raise ScenarioError(sec, "must be a table ([section])")
        if sec in MODEL_SECTIONS:
            continue                               # model_setup below
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
            written.add(full)
    for sec in MODEL_SECTIONS:
        if isinstance(data.get(sec), dict):
            written.update(f"{sec}.{key}" for key in data[sec])
    derive_defaults(sections, written, with_model="model" in data)
    try:
        model, costs = model_setup(data, sections, written)
        return validate_scenario(Scenario(presets=tuple(presets), overrides=overrides,
                                          model=model, costs=costs, **sections))
    except ScenarioError as err:
        raise _as_written(err, written) from None


def read_scenario_file(path) -> dict:
    """The parsed TOML mapping of a scenario file (not yet validated).

    Raises:
      ValueError: ``--scenario`` names no file or is not TOML.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--scenario: no such file {str(path)!r}")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--scenario {str(path)!r} is not valid TOML: {e}") from None


def load_scenario(path, *, model: str | None = None) -> Scenario:
    """Reads and validates a TOML scenario file (see the module docstring).

    Args:
      path: the TOML file.
      model: a :data:`~fabric_jax.workloads.model.MODELS` name that replaces the file's
        ``model.name`` (``fabric-jax compare --model``); the file's other ``[model]``
        keys still apply.

    Raises:
      ValueError: ``--scenario`` names no file or is not TOML; :class:`ScenarioError`
        for a bad value.
    """
    return scenario_from_dict(with_model_name(read_scenario_file(path), model))


# ------------------------------------------------ the training model (issue 14)
#: Scenario sections that describe the training model, its parallelism plan and the
#: fabric's costs, parsed by :func:`fabric_jax.economics.parse_model_sections`.
MODEL_SECTIONS = ("model", "parallelism", "costs")

#: Keys a training model replaces (compute time, collective sizes, tokens per step and
#: expert-parallel groups all follow from the model and the plan): a scenario with a
#: model that sets one of them is refused rather than silently ignored.
MODEL_REPLACES = ("workload.compute_us", "workload.all_reduce_mb", "workload.moe_mb",
                  "workload.ep_servers", "workload.expert_skew",
                  "economics.tokens_per_gpu_per_step")

#: With a model, the simulated communication is one slice of ``1/k`` of the step's
#: network bytes, ``k`` chosen so that the slice at line rate takes ``1 /
#: HORIZON_FACTOR`` of the simulation horizon ``n_steps x dt_us``
#: (:func:`model_slices`): room for a fabric that runs the collectives at a sixth of
#: line rate.  A model's step moves gigabytes (tens of ms at 400 Gb/s), far beyond the
#: 1 ms horizon at which the fluid model's time step resolves congestion control,
#: buffers and PFC.
HORIZON_FACTOR = 6.0


def with_model_name(data: dict, name: str | None) -> dict:
    """``data`` with ``model.name`` set to ``name`` (``fabric-jax compare --model``);
    ``data`` itself when ``name`` is ``None``."""
    if name is None:
        return data
    if not isinstance(data, dict):
        raise ScenarioError("(top level)", f"must be a mapping of sections; got "
                            f"{type(data).__name__}")
    body = data.get("model", {})
    if not isinstance(body, dict):
        raise ScenarioError("model", "must be a table ([model])")
    return {**data, "model": {**body, "name": name}}


def with_classes(scn: Scenario, class_map: dict | None = None) -> Scenario:
    """``scn`` with every preset's jobs in separate traffic classes (``fabric-jax compare
    --classes``): ``class_map`` (default :data:`fabric_jax.fabrics.TENANT_CLASSES`: the
    training job alone in class 1, the tenant and the background in class 0) is set in
    each preset's options unless the scenario already sets one for that preset under
    ``[fabrics.<preset>]``.  The classes' arbitration (weights, levels, names) is the
    preset's own."""
    from ..fabrics import TENANT_CLASSES
    cmap = dict(TENANT_CLASSES if class_map is None else class_map)
    over = {name: dict(scn.overrides.get(name, {})) for name in scn.presets}
    for name, ov in over.items():
        ov.setdefault("class_map", cmap)
    over.update({k: v for k, v in scn.overrides.items() if k not in over})
    return validate_scenario(dataclasses.replace(scn, overrides=over))


def _job_gpus(topology: dict, workload: dict) -> tuple[int, int]:
    """(GPUs of the training job, GPUs = NICs per server): one NIC per GPU (rails); a
    ``leaf_spine`` server has one NIC."""
    nics = topology["nics_per_server"] if topology["kind"] == "rail_optimized" else 1
    return workload["train_servers"] * nics, nics


def model_comm_time(model, plan, link_gbps: float) -> float:
    """Seconds one GPU's NIC needs at line rate for the step's network traffic: the
    bytes each GPU sends per step in the DP, EP and PP collectives
    (:func:`fabric_jax.workloads.model.comm_bytes`) over the NIC rate.  An upper
    estimate of the ideal time (traffic between GPUs of one server stays on NVLink), used
    to size the simulation horizon (:data:`HORIZON_FACTOR`)."""
    from ..units import gbps
    from ..workloads.model import comm_bytes
    cb = comm_bytes(model, plan)
    return (cb["dp_bytes_sent"] + cb["ep_bytes_sent"] + cb["pp_bytes_sent"]) / gbps(link_gbps)


def model_slices(model, plan, topology: dict, simulation: dict) -> int:
    """``k``, the number of equal slices the step's network communication is cut into
    for the simulation (:data:`HORIZON_FACTOR`): the smallest integer with
    ``HORIZON_FACTOR x model_comm_time / k <= n_steps x dt_us``, at least 1.

    The model (an assumption, stated): the step's collectives run as ``k`` equal
    back-to-back slices, as gradient buckets do (PyTorch DDP ``bucket_cap_mb``, Li et
    al., "PyTorch Distributed", VLDB 2020; Megatron-LM's distributed-optimizer
    buckets), each meeting the same fabric state, so the step's communication takes
    ``k`` times one slice's transfer plus the path latency once
    (:func:`fabric_jax.study.run.full_step_times`); exact for a bandwidth-bound steady
    state, it cannot see what a fabric does only over longer times than the horizon."""
    t_comm = model_comm_time(model, plan, topology["link_gbps"])
    horizon = simulation["n_steps"] * simulation["dt_us"] * 1e-6
    return max(1, math.ceil(HORIZON_FACTOR * t_comm / horizon - 1e-9))


def _from_econ_error(err: ValueError) -> ScenarioError:
    """A :class:`ScenarioError` from economics' ``"scenario key 'k': msg"`` message."""
    import re
    match = re.match(r"scenario key '([^']+)': (.*)", str(err), re.S)
    if not match:
        return ScenarioError("model", str(err))
    key, msg = match.group(1), match.group(2)
    if key == "parallelism.micro_batch":
        msg += ("; set model.global_batch to a multiple of dp x micro_batch, or change "
                "the plan (dp = training GPUs / (tp x pp))")
    return ScenarioError(key, msg)


def model_setup(data: dict, sections: dict,
                written: set | None = None) -> tuple[dict | None, dict | None]:
    """The ``model`` and ``costs`` entries of a :class:`Scenario` from the ``[model]``,
    ``[parallelism]`` and ``[costs]`` tables (:data:`MODEL_SECTIONS`).

    ``[model]``: ``name`` (a :data:`~fabric_jax.workloads.model.MODELS` name) and any
    :class:`~fabric_jax.workloads.model.ModelConfig` field to override.
    ``[parallelism]``: :class:`~fabric_jax.workloads.model.ParallelPlan` fields and
    ``gpu``; the plan fills the training job: ``gpus_per_server`` is the NICs per
    server (one per GPU), ``tp`` defaults to it, and ``dp`` to ``train GPUs / (tp
    pp)``.  ``[costs]``: :class:`~fabric_jax.economics.EconomicsParams` fields except
    the GPU price (``economics.gpu_price_per_hour``) and ``prices`` overrides.

    A default adapts to the model: when neither ``workload.train_servers`` nor
    ``parallelism.dp`` is in ``written`` (the dotted keys the user set; default: every
    key of ``sections`` counts as written) and the data-parallel width does not divide
    the model's ``global_batch`` (``dp x micro_batch``), the training job shrinks to
    the largest number of servers (``sections`` is updated) whose ``dp`` does, as one
    sizes a data-parallel job to its batch.

    The model's entry: ``{"model": ModelConfig, "plan": ParallelPlan, "gpu": GPU,
    "slices": k}`` (:func:`model_slices`).

    Raises:
      ScenarioError: naming the offending key.
    """
    from ..economics import parse_model_sections
    given = {sec: data.get(sec) for sec in MODEL_SECTIONS if sec in data}
    for sec, body in given.items():
        if not isinstance(body, dict):
            raise ScenarioError(sec, f"must be a table ([{sec}])")
    if "gpu_price_per_hour" in given.get("costs", {}):
        raise ScenarioError("costs.gpu_price_per_hour", "the study's GPU price is "
                            "economics.gpu_price_per_hour; set it there")
    if "parallelism" in given and "model" not in given:
        raise ScenarioError("parallelism", "needs a training model: a [model] section "
                            "or --model NAME")
    if "model" in given:
        for full in MODEL_REPLACES:
            sec, key = full.split(".")
            if isinstance(data.get(sec), dict) and key in data[sec]:
                raise ScenarioError(full, "replaced by the training model ([model] / "
                                    "--model), which sets the compute time, the "
                                    "collectives' bytes and the tokens per step; remove it")
        n_gpus, nics = _job_gpus(sections["topology"], sections["workload"])
        par = dict(given.get("parallelism", {}))
        par.setdefault("gpus_per_server", nics)
        if par["gpus_per_server"] != nics:
            raise ScenarioError("parallelism.gpus_per_server", f"must equal the GPUs (= "
                                f"NICs) per server of the topology, {nics}; got "
                                f"{par['gpus_per_server']!r}")
        par.setdefault("tp", nics)
        tp, pp = par["tp"], par.get("pp", 1)
        derive_dp = "dp" not in par and all(isinstance(v, int) and not isinstance(v, bool)
                                            and v >= 1 for v in (tp, pp))
        adapt = derive_dp and written is not None and \
            "workload.train_servers" not in written
        tp_key = "parallelism.pp" if written is not None and "parallelism.pp" in written \
            and "parallelism.tp" not in written else "parallelism.tp"
        train = sections["workload"]["train_servers"]
        first = None
        for servers in (range(train, 1, -1) if adapt else (train,)):
            plan = dict(par)
            if derive_dp:
                n_gpus = servers * nics
                if n_gpus % (tp * pp):
                    if first is None:
                        first = ScenarioError(tp_key, f"tp x pp = {tp * pp} must divide "
                                              f"the training job's {n_gpus} GPUs "
                                              f"(workload.train_servers x GPUs per server)")
                    if adapt:
                        continue
                    raise first
                plan["dp"] = n_gpus // (tp * pp)
            try:
                parsed = parse_model_sections({**given, "parallelism": plan})
            except ValueError as err:
                failed = _from_econ_error(err)
                first = first or failed
                if adapt and failed.key == "parallelism.micro_batch":
                    continue               # a smaller job whose dp divides the batch
                raise failed from None
            sections["workload"]["train_servers"] = servers
            given["parallelism"] = plan
            break
        else:
            raise first
    else:
        try:
            parsed = parse_model_sections(given)
        except ValueError as err:
            raise _from_econ_error(err) from None
    costs = dict(params=parsed["params"], prices=parsed["prices"]) if "costs" in given \
        else None
    if "model" not in given:
        return None, costs
    model = dict(model=parsed["model"], plan=parsed["plan"], gpu=parsed["gpu"])
    model["slices"] = model_slices(model["model"], model["plan"], sections["topology"],
                                   sections["simulation"])
    return model, costs


def check_model(scn: Scenario) -> None:
    """The scenario's training model fits its training job: ``tp pp dp`` equals the
    job's GPUs, ``gpus_per_server`` the NICs per server, and the plan divides the
    model (:meth:`~fabric_jax.workloads.model.ParallelPlan.check`).

    Raises:
      ScenarioError: naming the ``parallelism`` key to change.
    """
    missing = sorted({"model", "plan", "gpu", "slices"} - set(scn.model))
    if missing:
        raise ScenarioError(f"model.{missing[0]}", "missing: build the model entry with "
                            "scenario_from_dict or model_setup")
    plan, model = scn.model["plan"], scn.model["model"]
    k = scn.model["slices"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ScenarioError("model.slices", f"must be an integer >= 1; got {k!r}")
    n_gpus, nics = _job_gpus(scn.topology, scn.workload)
    if plan.n_gpus != n_gpus:
        raise ScenarioError("parallelism.dp", f"tp x pp x dp must equal the training "
                            f"job's {n_gpus} GPUs (workload.train_servers x GPUs per "
                            f"server); got {plan.tp} x {plan.pp} x {plan.dp} = "
                            f"{plan.n_gpus}")
    if plan.gpus_per_server != nics:
        raise ScenarioError("parallelism.gpus_per_server", f"must equal the topology's "
                            f"{nics} GPUs (NICs) per server; got {plan.gpus_per_server}")
    try:
        plan.check(model)
    except ValueError as err:
        key = str(err).split(":")[0]
        raise ScenarioError(f"parallelism.{key}", str(err)) from None
