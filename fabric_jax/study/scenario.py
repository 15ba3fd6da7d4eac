"""The compare study's scenario: :mod:`fabric_jax.scenario` (the model, the validator
and the TOML schema of ``fabric-jax compare`` and ``tune``), under the names the study
reads."""

from ..scenario import (DERIVED_FROM, DERIVED_FROM_TEXT, FABRIC_KEYS, HORIZON_FACTOR,
                        MODEL_REPLACES, MODEL_SECTIONS, SCHEMA, Scenario, ScenarioError,
                        check_model, check_preset_options, default_scenario,
                        derive_defaults, load_scenario, model_comm_time, model_setup,
                        model_slices, read_scenario_file, scenario_from_dict,
                        validate_scenario, with_classes, with_model_name)

__all__ = ["Scenario", "ScenarioError", "default_scenario", "scenario_from_dict",
           "derive_defaults", "DERIVED_FROM", "DERIVED_FROM_TEXT", "load_scenario",
           "read_scenario_file", "validate_scenario", "check_preset_options", "SCHEMA",
           "FABRIC_KEYS", "MODEL_SECTIONS", "MODEL_REPLACES", "HORIZON_FACTOR",
           "model_setup", "check_model", "with_model_name", "model_comm_time",
           "model_slices", "with_classes"]
