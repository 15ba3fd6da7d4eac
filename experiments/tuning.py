"""Ease of tuning (issue 29): gradient vs derivative-free tuning, and the ease-of-tuning table.

For every preset on the default tuning scenario (``fabric_jax.optimize.tuning_scenario``,
``docs/scenarios/tune_small.toml``: 16 hosts, dt 1 us, 500 steps), objective
``step_time`` (or ``--objective``):

1. gradient descent (``tune``, ``--iterations`` steps) against random search and
   Nelder-Mead with ``--budget`` evaluations each: the best each reaches, the
   evaluation at which the baseline reaches its best, and the evaluation at which the
   gradient reaches the baseline's best;
2. the ease-of-tuning table: default regret (defaults / best found), configuration risk
   (p10 / p50 / p90 of the objective over the first 64 random settings, over the best
   found), transfer regret (the training-step setting on ``incast``, ``moe_skew``,
   ``background``, ``degraded_link`` against each workload's own optimum);
3. a dt check: defaults and the tuned setting re-evaluated in the exact mode at dt and
   dt/2 (the default regret at both).

Writes ``results/tuning.json`` and figures (objective against evaluations per preset,
ease-of-tuning bars).  Run: ``PYTHONPATH=. python experiments/tuning.py --plots
results/tuning`` (about an hour on 2 loaded cores; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._common import parser

from fabric_jax import smooth as sm  # noqa: E402
from fabric_jax.optimize import (TuningModel, evaluations_to_reach, nelder_mead,  # noqa: E402
                                 random_search, tune, tuning_scenario)
from fabric_jax.optimize._plots import ease_figure, trajectory_figure  # noqa: E402
from fabric_jax.results import write_results  # noqa: E402


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_preset(preset, objective, iterations, budget, transfer_iterations, seed, dt_check):
    t0 = time.perf_counter()
    model = TuningModel.build(None, preset)
    g = tune(None, preset, objective, model=model, iterations=iterations, exact_check=False)
    log(f"{preset}: gradient {g.before:.6g} -> {g.after:.6g} at evaluation "
        f"{g.best_evaluation} ({g.wall_time:.0f} s)")
    rnd = random_search(None, preset, objective, model=model, budget=budget, seed=seed)
    log(f"{preset}: random best {rnd.after:.6g} at {rnd.best_evaluation} "
        f"({rnd.wall_time:.0f} s)")
    nm = nelder_mead(None, preset, objective, model=model, budget=budget)
    log(f"{preset}: Nelder-Mead best {nm.after:.6g} at {nm.best_evaluation} "
        f"({nm.wall_time:.0f} s)")
    comparison = {}
    for name, base in (("random", rnd), ("nelder_mead", nm)):
        comparison[name] = dict(best=base.after, evaluations_to_best=base.best_evaluation,
                                gradient_evaluations_to_reach=evaluations_to_reach(
                                    g, base.after),
                                wall_time=base.wall_time)
    comparison["gradient"] = dict(best=g.after, evaluations_to_best=g.best_evaluation,
                                  wall_time=g.wall_time,
                                  random_evaluations_to_reach=evaluations_to_reach(rnd,
                                                                                   g.after),
                                  nelder_mead_evaluations_to_reach=evaluations_to_reach(
                                      nm, g.after))
    best = min(g.after, rnd.after, nm.after)
    tuned = min((g, rnd, nm), key=lambda r: r.after).tuned
    vals = np.array([r["objective"] for r in rnd.trajectory[1:65]])
    q10, q50, q90 = np.percentile(vals / best, [10, 50, 90])
    row = dict(knobs=len(g.tunables), before=g.before, after=best,
               default_regret=g.before / best, risk_p10=float(q10), risk_p50=float(q50),
               risk_p90=float(q90), risk_spread=float(q90 - q10),
               risk_settings=int(vals.size), tuned=tuned, transfer={})
    for w in model.workloads():
        if w == "train":
            continue
        own = tune(None, preset, objective, model=model, workload=w,
                   iterations=transfer_iterations, exact_check=False)
        moved = float(model.objective(tuned, objective, workload=w))
        best_w = min(own.after, moved, own.before)
        row["transfer"][w] = dict(transferred=moved, own_optimum=best_w, defaults=own.before,
                                  regret=moved / best_w, default_regret=own.before / best_w)
        log(f"{preset}: transfer to {w}: x{moved / best_w:.3f} (defaults "
            f"x{own.before / best_w:.3f})")
    if dt_check:
        check = {}
        for label, dt in (("dt", model.dt), ("dt/2", model.dt / 2)):
            m = model if label == "dt" else TuningModel.build(None, preset, dt=dt)
            d = float(m.objective({}, objective, smooth=sm.EXACT))
            t = float(m.objective(tuned, objective, smooth=sm.EXACT))
            check[label] = dict(dt=dt, defaults=d, tuned=t, regret=d / t)
            log(f"{preset}: exact at {label}: {d:.6g} / {t:.6g} = x{d / t:.3f}")
        row["dt_check"] = check
    row["wall_time"] = time.perf_counter() - t0
    return row, comparison, dict(gradient=g.to_dict(), random=rnd.to_dict(),
                                 nelder_mead=nm.to_dict())


def main(argv=None):
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--presets", default="infiniband,roce,spectrum_x,uec")
    ap.add_argument("--objective", default="step_time")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--transfer-iterations", type=int, default=15)
    ap.add_argument("--no-dt-check", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.iterations, args.budget, args.transfer_iterations = 3, 8, 2
    presets = args.presets.split(",")
    scn = tuning_scenario()
    out = dict(scenario=dict(topology=scn.topology, workload=scn.workload,
                             simulation=scn.simulation), objective=args.objective,
               iterations=args.iterations, budget=args.budget, table={}, comparison={},
               runs={})
    path = Path(args.json or "results/tuning.json")
    for preset in presets:
        row, comp, runs = run_preset(preset, args.objective, args.iterations, args.budget,
                                     args.transfer_iterations, args.seed,
                                     not args.no_dt_check)
        out["table"][preset], out["comparison"][preset] = row, comp
        out["runs"][preset] = runs
        write_results(path, out, started=started, inputs=vars(args))
        log(f"{preset}: done in {row['wall_time']:.0f} s; wrote {path}")
        if args.plots:
            trajectory_figure(runs, Path(args.plots) / f"tune_{preset}.png",
                              title=f"{preset}: {args.objective}")
    if args.plots:
        ease_figure(out["table"], Path(args.plots) / "ease_of_tuning.png",
                    title=f"ease of tuning ({args.objective})")
    from fabric_jax.optimize.cli import format_ease_table
    print(format_ease_table(out["table"], args.objective))
    for p, c in out["comparison"].items():
        print(f"{p}: gradient best {c['gradient']['best']:.6g} at "
              f"{c['gradient']['evaluations_to_best']}; random best {c['random']['best']:.6g}"
              f" at {c['random']['evaluations_to_best']} (gradient reaches it at "
              f"{c['random']['gradient_evaluations_to_reach']}); Nelder-Mead best "
              f"{c['nelder_mead']['best']:.6g} at {c['nelder_mead']['evaluations_to_best']} "
              f"(gradient: {c['nelder_mead']['gradient_evaluations_to_reach']})")
    return out


if __name__ == "__main__":
    main()
