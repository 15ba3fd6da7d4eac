"""Optimisation through the differentiable emulator: routing, parameter tuning, fault location.

Routing optimisation: learn split weights by gradient descent, compare with the optimum.

The differentiable emulator turns routing into an optimisation problem.  A routing over
candidate paths is a ``[pairs, paths]`` split; link load is linear in it, so the maximum
link utilisation (MLU) is a convex, piecewise-linear function of the split, and the
completion time of a collective under max-min sharing is piecewise smooth.  This package

1. describes a problem (:func:`routing_problem`: commodities, candidate equal-cost
   paths from :func:`fabric_jax.paths.shortest_paths`, capacities, fixed base load,
   tenants; optional exact aggregation to switch pairs);
2. learns softmax logits per (pair, path) with any optax optimiser
   (:func:`optimize_routing`, and :func:`optimize_routing_batched` for many traffic
   matrices at once under ``vmap``) against smooth MLU (log-sum-exp), per-tenant MLU,
   collective / mean completion time under max-min sharing (unrolled event loop
   through :func:`fabric_jax.fairness.solve`; bias documented in ``_objectives``), or
   an end-of-run metric of the fluid congestion-control simulation
   (:func:`fluid_objective`);
3. solves the exact min-MLU linear program over the same candidate paths with HiGHS
   (:func:`solve_mlu_lp`), and the max-min fair optimum over routings on small
   instances (:func:`solve_max_min_lp`);
4. trains a DOTE-style policy (Perry et al., "DOTE: Rethinking (Predictive) WAN Traffic
   Engineering", NSDI 2023) mapping a traffic matrix to splits, on a distribution of
   matrices, and evaluates it on held-out ones (:func:`train_routing_policy`);
5. compares with ECMP hashing, spraying and an adaptive-routing approximation
   (:func:`baseline_splits`), and reports per-link load before/after and per-pair splits
   (:func:`routing_report`).

Units: demand and load bytes/s, sizes bytes, times seconds; utilisation is load /
capacity.

Example::

    from fabric_jax.topology import fat_tree
    from fabric_jax.optimize import routing_problem, optimize_routing, solve_mlu_lp
    topo = fat_tree(4, link_gbps=100, fabric_gbps=25)
    src, dst = np.nonzero(~np.eye(16, dtype=bool))
    prob = routing_problem(topo, src, dst, demand=np.full(src.size, 1e9), aggregate=True)
    res = optimize_routing(prob, steps=300)
    lp = solve_mlu_lp(prob)
    print(res.mlu, lp.mlu)          # learned vs optimal MLU
    print(res.report())             # per-link before/after, per-pair splits

Parameter tuning (``docs/tuning.md``): :func:`tune` sets a preset's
congestion- and flow-control knobs (each with its physical range and source,
:mod:`._tunables`) by gradient descent through the smooth fluid model
(:mod:`._tuning_model`), :func:`random_search` and :func:`nelder_mead` are the
derivative-free baselines on the same evaluations, :func:`ease_of_tuning` builds the
ease-of-tuning table (default regret, configuration risk, transfer regret).

Fault localisation: :func:`locate` ranks links by their estimated capacity
factor from what an operator observes (:mod:`._locate`), against network tomography
and vote counting (:func:`tomography`, :func:`vote_count`).
"""

from ._baselines import adaptive_split, ecmp_split, spray_split
from ._fluid import fluid_objective
from ._lp import LPResult, MaxMinLPResult, solve_max_min_lp, solve_mlu_lp
from ._objectives import (completion_times, masked_softmax, smooth_max, tenant_mlu,
                          utilization)
from ._policy import PolicyResult, train_routing_policy
from ._problem import ProblemArrays, RoutingProblem, problem_from_paths, routing_problem
from ._report import routing_report
from ._train import (OBJECTIVES, RoutingResult, anneal, default_optimizer, init_logits,
                     optimize_routing, optimize_routing_batched)
from ._tunables import Tunable, preset_tunables, resolve_params
from ._tuning_model import (TUNE_SOLVER_ITERATIONS, TUNE_TEMPERATURE, WORKLOADS, TuningModel,
                            load_tuning_scenario, tuning_scenario)
from ._tuning_model import OBJECTIVES as TUNE_OBJECTIVES
from ._locate import (PRESET_COUNTERS, PRESET_ROUTING, ROUTINGS, LocateProblem, LocateResult,
                      Observation, diagnostic_workload, load_observation, locate, locate_batch,
                      locate_problem, observe, parse_observation, tomography, vote_count)
from ._tune import (TuneResult, check_objective, ease_of_tuning, evaluations_to_reach,
                    nelder_mead, random_search, tune)


def baseline_splits(problem: RoutingProblem, *, seed: int = 0) -> dict:
    """``{"ecmp", "spray", "adaptive"}`` -> ``[pairs, paths]`` reference splits."""
    return {"ecmp": ecmp_split(problem, seed), "spray": spray_split(problem),
            "adaptive": adaptive_split(problem, seed=seed)}


__all__ = [
    "LPResult", "MaxMinLPResult", "OBJECTIVES", "PolicyResult", "ProblemArrays",
    "RoutingProblem", "RoutingResult", "anneal", "baseline_splits", "completion_times",
    "default_optimizer", "fluid_objective", "init_logits", "masked_softmax",
    "optimize_routing", "optimize_routing_batched", "problem_from_paths", "routing_problem",
    "routing_report", "smooth_max", "solve_max_min_lp", "solve_mlu_lp", "tenant_mlu",
    "train_routing_policy", "utilization",
    "TUNE_OBJECTIVES", "TUNE_SOLVER_ITERATIONS", "TUNE_TEMPERATURE", "TuneResult", "Tunable",
    "TuningModel", "WORKLOADS", "check_objective", "ease_of_tuning", "evaluations_to_reach",
    "load_tuning_scenario", "nelder_mead", "preset_tunables", "random_search",
    "resolve_params", "tune", "tuning_scenario",
    "LocateProblem", "LocateResult", "Observation", "PRESET_COUNTERS", "PRESET_ROUTING",
    "ROUTINGS", "diagnostic_workload", "load_observation", "locate", "locate_batch",
    "locate_problem",
    "observe", "parse_observation", "tomography", "vote_count",
]
