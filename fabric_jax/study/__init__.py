"""The compare study, in four layers whose imports point one way:

* :mod:`~fabric_jax.study.scenario` -- schema, defaults, TOML parsing, validation;
* :mod:`~fabric_jax.study.case` -- a scenario as host-side arrays (:class:`Case`);
* :mod:`~fabric_jax.study.run` -- fluid runs per preset, the ideal-fabric baseline,
  and each run's metrics (from :mod:`fabric_jax.metrics`);
* :mod:`~fabric_jax.study.report` -- the table and the JSON file;

plus :mod:`~fabric_jax.study.progress` (the progress bar).  :mod:`fabric_jax.compare`
re-exports the public names.
"""

from .case import JOBS, NEVER, Case, alone_arrival, build_case
from .report import METRICS, format_table, model_notes, write_json
from .run import (IDEAL, IDEAL_SHARP, case_metrics, class_isolation, fabric_cost_metrics,
                  is_ideal, run_compare, run_ideal, scaling_study, simulate_case,
                  simulate_ideal)
from .scenario import (FABRIC_KEYS, MODEL_SECTIONS, SCHEMA, Scenario, ScenarioError,
                       default_scenario, load_scenario, read_scenario_file,
                       scenario_from_dict, validate_scenario, with_classes,
                       with_model_name)

__all__ = ["Scenario", "ScenarioError", "default_scenario", "load_scenario",
           "scenario_from_dict", "validate_scenario", "SCHEMA", "FABRIC_KEYS", "Case",
           "build_case", "alone_arrival", "NEVER", "JOBS", "simulate_case", "simulate_ideal",
           "case_metrics", "run_compare", "scaling_study", "IDEAL",
           "METRICS", "format_table", "write_json", "model_notes", "fabric_cost_metrics",
           "MODEL_SECTIONS", "read_scenario_file", "with_model_name", "with_classes",
           "class_isolation", "IDEAL_SHARP", "is_ideal", "run_ideal"]
