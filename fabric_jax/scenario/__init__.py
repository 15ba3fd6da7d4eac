"""The one host-side description every study reads, and the one validator.

A :class:`Scenario` has four parts -- :class:`Network` (a topology family and its
parameters, or a built topology), :class:`Traffic` (the jobs), :class:`Fabrics` (the
presets and their overrides) and :class:`Horizon` (time step, steps, seed and the
run's other numerical options) -- plus economics (:mod:`._model`).  Each study reads
its inputs into one:

* ``fabric-jax compare`` and ``tune``: a TOML file (:func:`load_scenario`,
  :func:`scenario_from_dict`; the built-in :func:`default_scenario`), every key's rule
  in :data:`SCHEMA`, defaults that follow what the user wrote (:func:`derive_defaults`)
  and a training model from ``[model]`` / ``[parallelism]`` (:mod:`._training`);
* ``fabric-jax locate``: its TOML file (:func:`fabric_jax.optimize._locate_scenario.
  load_locate_scenario`);
* ``fabric-jax scale``: its flags (:func:`fabric_jax.scale.scale_scenarios`);
  :func:`fabric_jax.scale.scale_point` takes the scenario.

Every key and flag goes through one validator (:mod:`._rules`): rule tables (``{key:
Rule}``: type, range or choices, unit, default or derived default, fix) and
:func:`check`, which refuses a value with one :class:`ScenarioError` naming the key --
or the ``--flag`` it came from, through a flag map -- the value, the rule and the fix.
A command prints that one line and exits with status 2.
"""

from ._compare import (DERIVED_FROM, DERIVED_FROM_TEXT, FABRIC_KEYS, PRESETS_RULE, SCHEMA,
                       check_preset_options, default_scenario, derive_defaults,
                       load_scenario, read_scenario_file, scenario_from_dict,
                       validate_scenario, with_classes)
from . import physical
from ._model import STUDIES, Fabrics, Horizon, Network, Scenario, Traffic
from ._rules import (REQUIRED, Rule, ScenarioError, arg_name, boolean, check, check_args,
                     check_section, describe, flag_map, integer, number, one_of, refuse,
                     text)
from ._training import (HORIZON_FACTOR, MODEL_REPLACES, MODEL_SECTIONS, check_model,
                        model_comm_time, model_setup, model_slices, with_model_name)

__all__ = ["Scenario", "Network", "Traffic", "Fabrics", "Horizon", "STUDIES",
           "Rule", "ScenarioError", "REQUIRED", "integer", "number", "one_of", "boolean",
           "text", "describe", "check", "check_section", "check_args", "refuse",
           "flag_map", "arg_name",
           "SCHEMA", "FABRIC_KEYS", "PRESETS_RULE", "DERIVED_FROM", "DERIVED_FROM_TEXT",
           "default_scenario", "scenario_from_dict", "derive_defaults", "load_scenario",
           "read_scenario_file", "validate_scenario", "check_preset_options",
           "with_classes", "MODEL_SECTIONS", "MODEL_REPLACES", "HORIZON_FACTOR",
           "with_model_name", "model_comm_time", "model_slices", "model_setup",
           "check_model", "physical"]
