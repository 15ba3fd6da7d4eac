"""The ``compare`` study: one scenario, every fabric preset, one table.

``fabric-jax compare`` runs a scenario (:func:`default_scenario`, or a TOML file read by
:func:`load_scenario`) on every fabric preset with
:func:`fabric_jax.fluid.simulate_fluid`, adds the ideal-fabric baseline (the same
workload on a non-blocking crossbar with ideal congestion control), and prints one table
(:func:`format_table`; :func:`write_json` for ``--json``).

The implementation lives in :mod:`fabric_jax.study` (scenario -> case -> run -> report);
this module is its stable public face:

* :mod:`fabric_jax.scenario` -- the scenario (network, traffic, fabric, horizon) and
  the rule of every key (:data:`SCHEMA`);
* :mod:`fabric_jax.study.case` -- the workload (training job, tenant, background);
* :mod:`fabric_jax.study.run` -- the simulation driver and the per-preset ideals;
* :mod:`fabric_jax.study.report` -- the metrics and their JSON keys.
"""

from .study import (FABRIC_KEYS, IDEAL, IDEAL_SHARP, JOBS, METRICS, MODEL_SECTIONS, NEVER, SCHEMA, Case,
                    Scenario, ScenarioError, alone_arrival, build_case, case_metrics,
                    default_scenario, fabric_cost_metrics,
                    format_table, load_scenario, model_notes, read_scenario_file,
                    run_compare, scaling_study, scenario_from_dict, simulate_case,
                    simulate_ideal, validate_scenario, with_classes, with_model_name,
                    write_json, class_isolation, is_ideal, run_ideal)

__all__ = ["Scenario", "ScenarioError", "Case", "default_scenario", "load_scenario",
           "scenario_from_dict", "validate_scenario", "build_case", "simulate_case",
           "simulate_ideal", "case_metrics", "alone_arrival",
           "run_compare", "scaling_study", "format_table", "write_json", "METRICS", "NEVER",
           "JOBS", "IDEAL", "SCHEMA", "FABRIC_KEYS", "MODEL_SECTIONS", "model_notes",
           "fabric_cost_metrics", "read_scenario_file", "with_model_name", "with_classes",
           "class_isolation", "IDEAL_SHARP", "is_ideal", "run_ideal"]
