"""The scenario file of ``fabric-jax compare`` and ``tune``: schema, defaults, reading.

A TOML file (or the parsed mapping of one) becomes a :class:`~fabric_jax.scenario.
Scenario` (``study = "compare"``): ``[topology]`` its network, ``[workload]`` (and
``[model]``, ``[parallelism]``) its traffic, ``[fabrics]`` its fabric, ``[simulation]``
its horizon, ``[economics]`` and ``[costs]`` its economics.  Nothing here builds arrays
or runs a simulation.  Each key's rule (type, range, unit, default) is in
:data:`SCHEMA`, read by the one validator (:func:`fabric_jax.scenario.check`);
:func:`scenario_from_dict` checks **every** value before anything runs, including each preset's ``cc_options`` and
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
    ``link_gbps`` (1-3,200), ``latency_us`` (0-1,000), ``buffer_kb`` (1-10^6): physical
    ranges, :mod:`fabric_jax.scenario.physical`.
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
    ``dt_us`` (0.001-100), ``n_steps`` (>= 1; default a 1 ms horizon, ``1000 / dt_us``),
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
import tomllib
from pathlib import Path

from ..fabrics import PRESETS, VARIANTS, get_fabric
from ..links import DEFAULT_FIFO_BANDS
from ..workloads import FlowSizeCDF
from . import physical
from ._model import Scenario
from ._rules import ScenarioError, boolean, check, check_section, integer, number, one_of
from ._training import MODEL_SECTIONS, check_model, model_setup, with_model_name

__all__ = ["default_scenario", "scenario_from_dict", "derive_defaults", "DERIVED_FROM",
           "DERIVED_FROM_TEXT", "load_scenario", "read_scenario_file", "validate_scenario",
           "check_preset_options", "SCHEMA", "FABRIC_KEYS", "with_classes"]

_US, _MB = "microseconds", "MB"
#: The rules of every key of the four flat sections (:mod:`._rules`): type, range or
#: choices, unit, default (the built-in scenario's), and for a default that follows
#: other keys (:data:`DERIVED_FROM`) how, in words.
SCHEMA = {
    "topology": {
        "kind": one_of(("rail_optimized", "leaf_spine"), default="rail_optimized"),
        "n_servers": integer(1, default=32, derived="32, or train_servers + "
                             "tenant_servers where more, in whole leaves on a leaf_spine"),
        "nics_per_server": integer(1, default=8),
        "servers_per_leaf": integer(1, default=16, derived="min(16, n_servers / 2) on "
                                    "rail_optimized, the largest divisor of n_servers up "
                                    "to that on a leaf_spine"),
        "n_spines": integer(0, default=0),
        "link_gbps": physical.link_gbps(default=400.0),
        "latency_us": physical.latency_us(default=1.0),
        "buffer_kb": physical.buffer_kb(default=1024.0)},
    "workload": {
        "train_servers": integer(2, default=24, derived="n_servers - tenant_servers"),
        "tenant_servers": integer(0, default=8, derived="a quarter of n_servers, at most "
                                  "what the training job leaves, 0 when that is 1"),
        "ep_servers": integer(2, default=4, derived="the largest divisor of train_servers "
                              "up to 4"),
        "all_reduce_mb": number(0, lo_open=True, unit=_MB + " per GPU", default=32.0),
        "moe_mb": number(0, unit=_MB + " per GPU", default=4.0),
        "expert_skew": number(0, unit="Zipf exponent", default=1.0),
        "compute_us": number(0, unit=_US, default=1000.0),
        "tenant_incast_mb": number(0, unit=_MB + " per sender", default=1.0),
        "tenant_fan_in": integer(0, default=4, derived="min(4, tenant_servers - 1)"),
        "background_load": number(0, 1, hi_open=True, unit="fraction of each NIC's line "
                                  "rate", default=0.05),
        "background_cdf": one_of(FlowSizeCDF.builtin_names(), default="web_search"),
        "background_us": number(0, lo_open=True, unit=_US, default=200.0)},
    "simulation": {
        "dt_us": physical.dt_us(default=1.0),
        "n_steps": integer(1, default=1000, derived="a 1 ms horizon: round(1000 / dt_us)"),
        "max_paths": integer(0, default=0),
        "seed": integer(0, default=0),
        "isolation": boolean(default=True),
        "fifo_bands": integer(1, default=DEFAULT_FIFO_BANDS)},
    "economics": {
        "gpu_price_per_hour": number(0, unit="$ per GPU-hour", default=2.5),
        "tokens_per_gpu_per_step": number(0, lo_open=True, default=8.0)},
}
#: ``fabrics.presets``: the presets that run, in the order of the table's columns.
PRESETS_RULE = one_of((*PRESETS, *VARIANTS), many=True, default=tuple(PRESETS))
#: Keys of a ``[fabrics.<preset>]`` table.
FABRIC_KEYS = ("routing", "cc", "flow_control", "sharp", "routing_options", "cc_options",
               "reorder", "loss_recovery", "class_map", "class_weights", "class_levels",
               "shared_buffer_alpha", "switch_buffer_mb")


# Defaults that others follow (:func:`derive_defaults`).
_SPL, _EP, _FAN_IN, _HORIZON_US = 16, 4, 4, 1000.0


def default_scenario() -> Scenario:
    """The built-in scenario (every default of :data:`SCHEMA`): 256 GPUs (32 servers x
    8 rails), 2 tenants, background; every equal-cost path (``max_paths = 0``)."""
    sec = {name: {key: rule.default for key, rule in table.items()}
           for name, table in SCHEMA.items()}
    return Scenario(topology=sec["topology"], workload=sec["workload"],
                    simulation=sec["simulation"], economics=sec["economics"],
                    presets=tuple(PRESETS), overrides={})


def validate_scenario(scn: Scenario) -> Scenario:
    """Checks every value of ``scn`` (types, ranges, cross-key consistency, each preset's
    options) and returns it unchanged.

    Raises:
      ScenarioError: the first offending key, with the values it accepts.
    """
    if scn.study != "compare":
        raise ScenarioError("study", f"a {scn.study} scenario; compare and tune read "
                            f"compare scenarios (scenario_from_dict, load_scenario)")
    for sec, schema in SCHEMA.items():
        body = getattr(scn, sec)
        missing = sorted(set(schema) - set(body))
        if missing:
            raise ScenarioError(f"{sec}.{missing[0]}", "missing")
        check_section(sec, schema, body)
    t, w = scn.topology, scn.workload
    if t["kind"] == "leaf_spine":
        if t["n_servers"] % t["servers_per_leaf"]:
            raise ScenarioError("topology.n_servers", f"a leaf_spine needs whole leaves: "
                                f"a multiple of servers_per_leaf={t['servers_per_leaf']}; "
                                f"got {t['n_servers']}", value=t["n_servers"],
                                fix="or set servers_per_leaf to a divisor of n_servers")
        if t["n_servers"] // t["servers_per_leaf"] < 2:
            raise ScenarioError("topology.n_servers", f"a leaf_spine needs >= 2 leaves: "
                                f">= {2 * t['servers_per_leaf']} servers (2 x "
                                f"servers_per_leaf); got {t['n_servers']}",
                                value=t["n_servers"])
    if w["train_servers"] + w["tenant_servers"] > t["n_servers"]:
        raise ScenarioError("workload.train_servers", f"train_servers + tenant_servers must "
                            f"be <= topology.n_servers={t['n_servers']}; got "
                            f"{w['train_servers']} + {w['tenant_servers']}",
                            value=w["train_servers"], fix="raise topology.n_servers or "
                            "shrink the jobs")
    if scn.model is None and (w["ep_servers"] > w["train_servers"]
                              or w["train_servers"] % w["ep_servers"]):
        raise ScenarioError("workload.ep_servers", f"must be an integer >= 2 that divides "
                            f"train_servers={w['train_servers']}; got {w['ep_servers']}",
                            value=w["ep_servers"])
    if w["tenant_servers"] == 1:
        raise ScenarioError("workload.tenant_servers", "must be 0 (no tenant) or >= 2 (an "
                            "incast needs a sender and a receiver); got 1", value=1)
    if w["tenant_servers"] >= 2 and not 1 <= w["tenant_fan_in"] <= w["tenant_servers"] - 1:
        raise ScenarioError("workload.tenant_fan_in", f"must lie in [1, tenant_servers - 1 = "
                            f"{w['tenant_servers'] - 1}]; got {w['tenant_fan_in']}",
                            value=w["tenant_fan_in"])
    check("fabrics.presets", PRESETS_RULE, list(scn.presets))
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
    if name not in PRESETS and name not in VARIANTS:
        raise ScenarioError(f"fabrics.{name}", f"unknown preset; accepted: "
                            f"{sorted((*PRESETS, *VARIANTS))}")
    bad = sorted(set(options) - set(FABRIC_KEYS))
    if bad:
        raise ScenarioError(f"fabrics.{name}.{bad[0]}", f"unknown; accepted keys: "
                            f"{list(FABRIC_KEYS)}")
    for key in ("routing_options", "cc_options"):
        if key in options and not isinstance(options[key], dict):
            raise ScenarioError(f"fabrics.{name}.{key}", f"must be a table of keyword "
                                f"values; got {options[key]!r}")
    for key in ("sharp", "reorder"):
        if key in options:
            check(f"fabrics.{name}.{key}", boolean(), options[key])
    try:
        fab = get_fabric(name, **options)
    except (ValueError, TypeError) as err:
        key = next((k for k in ("routing", "cc", "flow_control", "loss_recovery", "class_map",
                                "class_weights", "class_levels", "shared_buffer_alpha",
                                "switch_buffer_mb")
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


def check_buffers(scn: Scenario, written: set) -> None:
    """The switch memories and ECN thresholds the user wrote, against each other (host,
    before any run).

    * a port buffer (``topology.buffer_kb``) or a switch memory
      (``fabrics.<name>.switch_buffer_mb``) smaller than one bandwidth-delay product:
      the port's rate times the round trip of
      :data:`fabric_jax.fabrics.BDP_HOPS` links each way at ``latency_us``;
    * DCQCN's ``K_max`` (``fabrics.<name>.cc_options``) at or above the PFC XOFF of the
      port as built (:func:`fabric_jax.fabrics.check_ecn_below_xoff`), when the user
      wrote both the thresholds and a buffer (``topology.buffer_kb`` or the preset's
      ``switch_buffer_mb`` / ``shared_buffer_alpha``); a shared buffer without an ASIC
      counts a leaf's ports as ``2 servers_per_leaf`` (assumption).

    Raises:
      ScenarioError: naming the key and the fix.
    """
    from ..fabrics import BDP_HOPS, check_ecn_below_xoff
    t, sim = scn.topology, scn.simulation
    rate = t["link_gbps"] * 1e9 / 8
    bdp = rate * 2 * BDP_HOPS * t["latency_us"] * 1e-6
    if "topology.buffer_kb" in written and t["buffer_kb"] * 1e3 < bdp:
        raise ScenarioError("topology.buffer_kb", f"{t['buffer_kb']:g} KB per port is smaller "
                            f"than one bandwidth-delay product ({bdp / 1e3:g} KB = "
                            f"{t['link_gbps']:g} Gb/s x {2 * BDP_HOPS * t['latency_us']:g} us "
                            f"round trip); give at least {bdp / 1e3:g} KB",
                            value=t["buffer_kb"])
    for name in scn.presets:
        ov = scn.overrides.get(name, {})
        sb = ov.get("switch_buffer_mb")
        if sb is not None and sb * 1e6 < bdp:
            raise ScenarioError(f"fabrics.{name}.switch_buffer_mb", f"{sb:g} MB is smaller than "
                                f"one bandwidth-delay product ({bdp / 1e6:g} MB); give at "
                                f"least {bdp / 1e6:g} MB", value=sb)
        cco = ov.get("cc_options", {})
        wrote_buffer = ("topology.buffer_kb" in written or "switch_buffer_mb" in ov
                        or "shared_buffer_alpha" in ov)
        if not ({"k_min", "k_max"} & set(cco)) or not wrote_buffer:
            continue
        fab = get_fabric(name, **ov)
        ports = None if fab.switch_asic else 2 * int(t["servers_per_leaf"])
        try:
            check_ecn_below_xoff(fab, port_buffer=t["buffer_kb"] * 1e3, capacity=rate,
                                 reaction_s=sim["dt_us"] * 1e-6, line_rate=rate, ports=ports,
                                 name="k_max")
        except ValueError as err:
            raise ScenarioError(f"fabrics.{name}.cc_options", str(err)) from None


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
#: How each default of :data:`DERIVED_FROM` follows, in words (the rules' ``derived``).
DERIVED_FROM_TEXT = {key: SCHEMA[key.split(".")[0]][key.split(".")[1]].derived
                     for key in DERIVED_FROM}


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
                         f"{err.msg}", fix=err.fix)


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
                    presets = check("fabrics.presets", PRESETS_RULE, val)
                elif (key in PRESETS or key in VARIANTS) and isinstance(val, dict):
                    overrides[key] = dict(val)
                else:
                    raise ScenarioError(f"fabrics.{key}", f"unknown; accepted: 'presets' or "
                                        f"a preset table [fabrics.<name>] with name in "
                                        f"{sorted(PRESETS)}")
            continue
        sections[sec].update(check_section(sec, SCHEMA[sec], body))
        written.update(f"{sec}.{key}" for key in body)
    for sec in MODEL_SECTIONS:
        if isinstance(data.get(sec), dict):
            written.update(f"{sec}.{key}" for key in data[sec])
    derive_defaults(sections, written, with_model="model" in data)
    try:
        model, costs = model_setup(data, sections, written)
        scn = validate_scenario(Scenario(presets=tuple(presets), overrides=overrides,
                                         model=model, costs=costs, **sections))
        check_buffers(scn, written)
        return scn
    except ScenarioError as err:
        raise _as_written(err, written) from None


def read_scenario_file(path, *, flag: str = "--scenario") -> dict:
    """The parsed TOML mapping of a scenario file (not yet validated).

    Raises:
      ScenarioError: naming ``flag``: no such file, or not TOML.
    """
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(flag, f"no such file {str(path)!r}", value=str(path), flag=flag)
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ScenarioError(flag, f"{str(path)!r} is not valid TOML: {e}", value=str(path),
                            flag=flag) from None


def load_scenario(path=None, *, model: str | None = None) -> Scenario:
    """Reads and validates a TOML scenario file (see the module docstring), the flags
    laid over it: the one path of ``fabric-jax compare``'s ``--scenario`` and flags.

    Args:
      path: the TOML file (``None``: no file, the built-in scenario's values).
      model: a :data:`~fabric_jax.workloads.model.MODELS` name that replaces the file's
        ``model.name`` (``fabric-jax compare --model``); the file's other ``[model]``
        keys still apply.

    Raises:
      ScenarioError: ``--scenario`` names no file or is not TOML, or a bad value.
    """
    data = {} if path is None else read_scenario_file(path)
    return scenario_from_dict(with_model_name(data, model))


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
