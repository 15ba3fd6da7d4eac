"""The ``fabric-jax tune`` and ``fabric-jax locate`` subcommands (thin layers).

Every argument and file is checked before any simulation runs, by the one validator of
:mod:`fabric_jax.scenario`: the scenario files against their schemas (compare's for
tune, :data:`~fabric_jax.optimize._locate_scenario.LOCATE_SCHEMA` for locate), the
flags against :data:`TUNE_FLAGS` and :data:`LOCATE_FLAGS`.  A bad value prints one
line naming the key or flag, the value, the rule and the fix, and exits with status 2.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from ..fabrics import PRESETS
from ..results import write_results
from ..scenario import check, check_args, integer, number, one_of, refuse
from ._locate_scenario import build_locate, load_locate_scenario
from ._tuning_model import OBJECTIVES

__all__ = ["add_tune_parser", "add_locate_parser", "tune_main", "locate_main",
           "load_locate_scenario", "build_locate", "TUNE_FLAGS", "LOCATE_FLAGS"]

#: The rules of ``fabric-jax tune``'s flags (the scenario file: compare's schema).
TUNE_FLAGS = {
    "--preset": one_of(PRESETS, default="roce"),
    "--objective": one_of(OBJECTIVES, default="step_time"),
    "--iterations": integer(1, default=None),
    "--baseline": integer(0, default=0),
    "--settings": integer(2, default=64),
}
#: The rules of ``fabric-jax locate``'s flags (the scenario file: ``LOCATE_SCHEMA``).
LOCATE_FLAGS = {"--noise": number(0, 1, hi_open=True, unit="relative", default=0.0)}
#: The rules of the value of each ``LINK=VALUE`` item of ``--plant`` / ``--plant-loss``.
PLANT_RULES = {"--plant": number(0, 1, lo_open=True, unit="capacity factor"),
               "--plant-loss": number(0, 1, hi_open=True,
                                      unit="fraction of the bytes the link drops")}


def add_tune_parser(sub):
    p = sub.add_parser(
        "tune", help="tune a preset's congestion/flow-control parameters by gradient descent",
        description="Tunes a preset's knobs (physical ranges: docs/tuning.md) on a scenario "
                    "(default: the small tuning scenario, docs/scenarios/tune_small.toml) "
                    "by gradient descent through the smooth fluid model.")
    p.add_argument("--scenario", metavar="FILE", help="TOML scenario (compare schema)")
    p.add_argument("--preset", default=TUNE_FLAGS["--preset"].default,
                   help="preset to tune (default roce)")
    p.add_argument("--objective", default=TUNE_FLAGS["--objective"].default,
                   help="step_time | p99_fct | mix (default step_time)")
    p.add_argument("--params", metavar="LIST",
                   help="knobs to tune, comma separated, each NAME or NAME=LO:HI (SI "
                        "units); default every knob of the preset")
    p.add_argument("--iterations", type=int, default=None,
                   help="gradient steps (default 30; --all: 20)")
    p.add_argument("--baseline", type=int, metavar="N",
                   default=TUNE_FLAGS["--baseline"].default,
                   help="also run random search and Nelder-Mead with N evaluations each "
                        "and report the evaluations each method needs")
    p.add_argument("--list", action="store_true",
                   help="print the preset's knobs (default, range, source) and exit")
    p.add_argument("--all", action="store_true",
                   help="the ease-of-tuning table over every preset (default regret, "
                        "configuration risk, transfer regret)")
    p.add_argument("--settings", type=int, default=TUNE_FLAGS["--settings"].default,
                   help="--all: random settings for the configuration risk (default 64)")
    p.add_argument("--no-transfer", action="store_true", help="--all: skip transfer regret")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON")
    p.add_argument("--plots", metavar="DIR", help="write figures (PNG) into DIR")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def add_locate_parser(sub):
    p = sub.add_parser(
        "locate", help="locate degraded or lossy links from completion times and port counters",
        description="Ranks links by estimated capacity factor (gradient descent through "
                    "the flow-level model), next to tomography (NNLS) and vote counting.")
    p.add_argument("--scenario", metavar="FILE", required=True,
                   help="TOML locate scenario ([topology], [workload], [locate]; "
                        "docs/tuning.md)")
    p.add_argument("--observed", metavar="FILE",
                   help="observation JSON (flows / ranks / counters; docs/tuning.md)")
    p.add_argument("--plant", metavar="LINK=FACTOR,...",
                   help="instead of --observed: synthesise observations of these "
                        "degraded links (exact flow-level model)")
    p.add_argument("--plant-loss", metavar="LINK=P,...",
                   help="instead of / with --plant: synthesise observations of these lossy "
                        "links, each dropping the fraction P in [0, 1) of the bytes it "
                        "carries (with port counters: every link's drop counter)")
    p.add_argument("--noise", type=float, default=LOCATE_FLAGS["--noise"].default,
                   help="--plant: relative noise")
    p.add_argument("--no-counters", action="store_true", help="--plant: no port counters")
    p.add_argument("--write-observed", metavar="PATH", help="--plant: save the observation")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON")
    return p


def _fail(cmd, err) -> int:
    print(f"fabric-jax {cmd}: error: {str(err).splitlines()[0]}", file=sys.stderr)
    return 2


def _parse_params(text):
    if not text:
        return None
    out = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" in item:
            name, rng = item.split("=", 1)
            try:
                lo, hi = (float(x) for x in rng.split(":"))
            except ValueError:
                raise refuse("--params", f"{item!r}: a bound is NAME=LO:HI with two "
                             f"numbers (SI units)", value=item) from None
            out[name.strip()] = (lo, hi)
        else:
            out[item] = None
    return out


def tune_main(args, *, command=None, started: float | None = None) -> int:
    """Runs ``fabric-jax tune``; ``command``, ``started``: the ``--json`` file's run record
    (:func:`fabric_jax.results.run_record`)."""
    from . import _plots
    from ._tune import (check_objective, ease_of_tuning, evaluations_to_reach, nelder_mead,
                        random_search, tune)
    from ._tuning_model import TuningModel

    started = time.time() if started is None else started
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr,
                                                                 flush=True))
    try:
        check_args(args, TUNE_FLAGS)
        if args.all:
            if args.params:
                raise refuse("--params", "applies to one preset; --all tunes every knob")
            model = TuningModel.build(args.scenario, "roce")
            check_objective(model, args.objective)
        else:
            params = _parse_params(args.params)
            model = TuningModel.build(args.scenario, args.preset)
            check_objective(model, args.objective)
            from ._tunables import resolve_params
            resolve_params(model.tunables, params)
    except ValueError as err:
        return _fail("tune", err)
    if args.list:
        print(format_knobs(model.tunables if not args.all else []))
        return 0
    if args.all:
        table = ease_of_tuning(model.scenario, objective=args.objective,
                               n_settings=args.settings,
                               iterations=args.iterations or 20,
                               transfer=not args.no_transfer, progress=say)
        print(format_ease_table(table, args.objective))
        out = dict(objective=args.objective, table=table)
        if args.plots:
            print(f"wrote {_plots.ease_figure(table, Path(args.plots) / 'ease_of_tuning.png')}")
    else:
        res = tune(None, args.preset, args.objective, params, model=model,
                   iterations=args.iterations or 30,
                   progress=lambda i, v: say(f"  evaluation {i}: {v:.6g}"))
        print(res.report())
        out = dict(gradient=res.to_dict())
        runs = {"gradient": res}
        if args.baseline:
            rnd = random_search(None, args.preset, args.objective, params, model=model,
                                budget=args.baseline)
            nm = nelder_mead(None, args.preset, args.objective, params, model=model,
                             budget=args.baseline)
            runs.update(random=rnd, nelder_mead=nm)
            for name, r in (("random", rnd), ("nelder_mead", nm)):
                n_b = r.best_evaluation
                n_g = evaluations_to_reach(res, r.after)
                print(f"{name:12s}: best {r.after:.6g} at evaluation {n_b}; gradient "
                      f"reaches it at {n_g if n_g is not None else 'never'}")
                out[name] = r.to_dict()
                out[name]["gradient_reaches_at"] = n_g
        if args.plots:
            path = Path(args.plots) / f"tune_{args.preset}_{args.objective}.png"
            print(f"wrote {_plots.trajectory_figure(runs, path, title=args.preset)}")
    if args.json:
        write_results(args.json, out, command=command, started=started)
        print(f"wrote {args.json}")
    print(f"({time.time() - started:.1f} s)", file=sys.stderr)
    return 0


def format_knobs(tunables) -> str:
    """A markdown table of knobs: name, default, range, space, unit, source."""
    lines = ["| knob | default | range | space | unit | source of the range |",
             "|---|---|---|---|---|---|"]
    for t in tunables:
        lines.append(f"| `{t.name}` | {t.default:.4g} | {t.lo:.3g} .. {t.hi:.3g} | {t.space} "
                     f"| {t.unit} | {t.source}{'; kept >= 1.1 x ' + t.above if t.above else ''} |")
    return "\n".join(lines)


def format_ease_table(table: dict, objective: str) -> str:
    """The ease-of-tuning table as text."""
    workloads = sorted({w for row in table.values() for w in row.get("transfer", {})})
    head = (f"{'preset':11s} {'knobs':>5s} {'default':>8s} {'risk p10':>8s} {'p50':>6s} "
            f"{'p90':>6s} " + " ".join(f"{w[:12]:>12s}" for w in workloads))
    lines = [f"ease of tuning, objective {objective} (ratios to the tuned optimum)", head]
    for p, row in table.items():
        tr = " ".join(f"{row['transfer'][w]['regret']:12.3f}" if w in row["transfer"]
                      else f"{'-':>12s}" for w in workloads)
        lines.append(f"{p:11s} {row['knobs']:5d} {row['default_regret']:8.3f} "
                     f"{row['risk_p10']:8.3f} {row['risk_p50']:6.3f} {row['risk_p90']:6.3f} "
                     f"{tr}")
    return "\n".join(lines)


def _parse_link_values(text, n_links, flag, fill, usage):
    """``LINK=VALUE,...`` of ``flag`` as a ``[links]`` array (``fill`` elsewhere); each
    value checked by ``PLANT_RULES[flag]`` (``usage``: the form of an item)."""
    out = np.full(n_links, fill, float)
    for item in text.split(","):
        try:
            link, v = item.split("=")
            link, v = int(link), float(v)
        except ValueError:
            raise refuse(flag, f"{item!r}: use {usage}", value=item) from None
        check(flag, integer(0, n_links - 1, unit="link id"), link, flag=flag)
        out[link] = check(flag, PLANT_RULES[flag], v, flag=flag)
    return out


def _parse_plant(text, n_links):
    return _parse_link_values(text, n_links, "--plant", 1.0,
                              "LINK=FACTOR (an integer link id and a capacity factor in "
                              "[0.1, 1])")


def _parse_plant_loss(text, n_links):
    return _parse_link_values(text, n_links, "--plant-loss", 0.0,
                              "LINK=P (an integer link id and the fraction of bytes it "
                              "drops, in [0, 1))")


def locate_main(args, *, command=None, started: float | None = None) -> int:
    """Runs ``fabric-jax locate``; ``command``, ``started``: as :func:`tune_main`."""
    from ._locate import load_observation, locate, observe, tomography, vote_count

    started = time.time() if started is None else started
    try:
        planted = args.plant is not None or args.plant_loss is not None
        if (args.observed is None) == (not planted):
            raise refuse("--observed", "give exactly one of --observed FILE or --plant "
                         "LINK=FACTOR (and/or --plant-loss LINK=P)")
        if args.observed is not None and not Path(args.observed).is_file():
            raise refuse("--observed", f"no such file {args.observed!r}",
                         value=args.observed)
        check_args(args, LOCATE_FLAGS)
        scn = load_locate_scenario(args.scenario)
        topo, wl, prob, preset, routing = build_locate(scn)
        if args.observed:
            obs = load_observation(args.observed, prob)
        else:
            phi = (_parse_plant(args.plant, prob.n_links) if args.plant
                   else np.ones(prob.n_links))
            loss = (_parse_plant_loss(args.plant_loss, prob.n_links) if args.plant_loss
                    else None)
    except ValueError as err:
        return _fail("locate", err)
    if planted:
        obs = observe(prob, phi, noise=args.noise, counters=not args.no_counters, loss=loss)
        if args.write_observed:
            write_results(args.write_observed, obs.to_json(), command=command,
                          started=started)
            print(f"wrote {args.write_observed}")
    res = locate(None, None, obs, preset, routing=routing, problem=prob,
                 steps=scn.horizon.params["steps"])
    out = {"gradient": res.to_dict()}
    print(f"locate ({preset}, {routing}, {prob.n_hosts} hosts, {prob.n_links} links, "
          f"{prob.n_flows} flows): fault {'reported' if res.fault else 'not reported'}, "
          f"confidence {res.confidence:.2f}, {res.evaluations} evaluations, "
          f"{res.wall_time:.1f} s")
    for link, fac in res.top(5):
        lossy = ("" if res.link_loss is None
                 else f", loss {100 * float(res.link_loss[link]):.2f} %")
        print(f"  link {link:5d} ({int(topo.link_src[link])} -> {int(topo.link_dst[link])}): "
              f"capacity factor {fac:.3f}{lossy}")
    if obs.flow_idx.size:
        for base in (tomography(prob, obs), vote_count(prob, obs)):
            out[base.method] = base.to_dict()
            print(f"  {base.method:10s}: top {[l for l, _ in base.top(3)]}")
    if args.json:
        write_results(args.json, out, command=command, started=started)
        print(f"wrote {args.json}")
    print(f"({time.time() - started:.1f} s)", file=sys.stderr)
    return 0
