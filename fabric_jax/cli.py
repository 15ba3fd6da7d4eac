"""Command line: ``fabric-jax compare [--scenario FILE] [--model NAME] [--json PATH]
[--plots DIR [--scaling-curve [--scaling-factors F,F,...]]] [--classes] [--workers N]``;
``fabric-jax tune`` and ``fabric-jax locate`` (:mod:`fabric_jax.optimize.cli`);
``fabric-jax scale [--gpus LIST] ...`` (:mod:`fabric_jax.scale`);
``fabric-jax serve [--scenario FILE] [--fabrics ...] [--json PATH] [--plots DIR]``
(:mod:`fabric_jax.serve.cli`).

A thin argparse layer over :mod:`fabric_jax.compare` (and :mod:`fabric_jax.plots`).
Every scenario key and flag goes through the one validator of
:mod:`fabric_jax.scenario` before anything runs: a bad value prints one line naming
the key (or the flag), the value, what it accepts and the fix, and exits with status 2
(argparse's own usage errors exit 2 as well).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from .results import check_output_dir, check_output_file
from .scenario import check_args, integer, number, refuse

__all__ = ["main", "build_parser", "COMPARE_FLAGS"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fabric-jax",
        description="Flow-level emulator of AI-cluster fabrics (InfiniBand, RoCE, "
                    "Spectrum-X, Ultra Ethernet) on JAX.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"fabric-jax {__version__}")
    sub = parser.add_subparsers(dest="command")
    cmp_ = sub.add_parser(
        "compare", help="run a scenario on every fabric preset and print one table",
        description="Runs the scenario (default: the built-in 256-GPU rail-optimised "
                    "scenario) with the infiniband, roce, spectrum_x and uec presets.")
    cmp_.add_argument("--scenario", metavar="FILE", help="TOML scenario file")
    cmp_.add_argument("--json", metavar="PATH", help="write results as JSON")
    cmp_.add_argument("--plots", metavar="DIR",
                      help="write PNG figures into DIR (bars, FCT CDFs, queue heat maps); "
                           "seconds on top of the compare")
    cmp_.add_argument("--scaling-curve", action="store_true",
                      help="with --plots: add a scaling curve, the training job's "
                           "all-reduce at --scaling-factors times its servers under each "
                           "preset's dynamics; a scale study that takes minutes per preset "
                           "and size on a CPU (progress bar with an estimate; "
                           "experiments/scale_sweep.py is the study at scale)")
    cmp_.add_argument("--scaling-factors", metavar="F,F,...",
                      default=COMPARE_FLAGS["--scaling-factors"].default,
                      help="sizes of the scaling curve, as factors of the training job's "
                           "servers (default 0.5,1,2,4)")
    cmp_.add_argument("--model", metavar="NAME",
                      help="derive the training job from a transformer model (compute "
                           "time, collectives' bytes, tokens per step): one of "
                           "fabric_jax.workloads.model.MODELS (e.g. llama3_8b, "
                           "mixtral_8x7b); replaces the scenario's model.name; the plan "
                           "comes from the scenario's [parallelism] table (default: "
                           "tensor-parallel inside a server, data-parallel across)")
    cmp_.add_argument("--classes", action="store_true",
                      help="put the training job in its own traffic class on every preset "
                           "(class_map = fabric_jax.fabrics.TENANT_CLASSES, unless the "
                           "scenario sets one) and report isolation per class")
    cmp_.add_argument("--quiet", action="store_true", help="no progress bar")
    cmp_.add_argument("--workers", type=int, metavar="N",
                      help="presets run at once, in threads (default: one per CPU core; "
                           "1: one after another; the results do not depend on it)")
    cmp_.add_argument("--no-ideal", action="store_true",
                      help="skip the ideal-fabric baseline column (non-blocking crossbar, "
                           "exact max-min)")
    _add_optimize_parsers(sub)
    _scale_parser(sub)
    _serve_parser(sub)
    return parser


def _add_optimize_parsers(sub):
    """``tune`` and ``locate``, defined in :mod:`fabric_jax.optimize.cli`."""
    from .optimize.cli import add_locate_parser, add_tune_parser
    add_tune_parser(sub)
    add_locate_parser(sub)


def _scale_parser(sub):
    """``fabric-jax scale``: its own block (:mod:`fabric_jax.scale.cli`)."""
    from .scale import cli as scale_cli
    scale_cli.add_parser(sub)


def _serve_parser(sub):
    """``fabric-jax serve``: its own block (:mod:`fabric_jax.serve.cli`)."""
    from .serve import cli as serve_cli
    serve_cli.add_parser(sub)


#: The rules of compare's own flags (its run options; the scenario's keys are
#: :data:`fabric_jax.scenario.SCHEMA`'s).
COMPARE_FLAGS = {
    "--workers": integer(1, default=None),
    "--scaling-factors": number(0, 1e3, lo_open=True, hi_open=True, many=True,
                                default="0.5,1,2,4"),
}

#: Programs that compile faster than this are not written to the disk cache (s).
CACHE_MIN_COMPILE_S = 0.5


def compilation_cache() -> str | None:
    """Turns on JAX's persistent compilation cache for the console script and returns its
    folder (``None`` when off): a rerun of the same scenario, or of the same point with
    other options, loads the compiled programs instead of recompiling them (compiling is
    most of a run's time at moderate sizes on a CPU).  The folder is
    ``$FABRIC_JAX_CACHE``, else ``$XDG_CACHE_HOME/fabric_jax/xla`` (default
    ``~/.cache/fabric_jax/xla``); ``FABRIC_JAX_CACHE=off`` turns it off.  A cache
    already configured in this process (the test suite's) is left as it is.  Entries
    are keyed by the program and the compiler, so a code change or a JAX upgrade
    compiles anew; only programs that took at least :data:`CACHE_MIN_COMPILE_S` to
    compile are stored."""
    import os
    from pathlib import Path

    import jax
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    path = os.environ.get("FABRIC_JAX_CACHE")
    if path is not None and path.strip().lower() in ("off", "0", "no", "none", ""):
        return None
    if path is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = str(Path(base) / "fabric_jax" / "xla")
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None                       # a read-only home: run without a cache
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_S)
    return path


def check_outputs(args) -> None:
    """Check the output paths the subcommands take (``--json PATH``, ``--plots DIR``,
    locate's ``--write-observed PATH``)
    before it runs (:func:`fabric_jax.results.check_output_file` / ``check_output_dir``):
    a study of minutes must not end in a traceback that loses its results."""
    for attr, flag in (("json", "--json"), ("write_observed", "--write-observed")):
        if getattr(args, attr, None):
            check_output_file(getattr(args, attr), flag)
    if getattr(args, "plots", None):
        check_output_dir(args.plots, "--plots")


def main(argv=None) -> int:
    """Entry point of the ``fabric-jax`` console script."""
    started = time.time()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    command = shlex.join(["fabric-jax", *argv])    # the results files' "run" record
    try:  # where the results go: refused before any work rather than lost after it
        check_outputs(args)
    except ValueError as err:
        print(f"fabric-jax {args.command}: error: {err}", file=sys.stderr)
        return 2
    compilation_cache()
    if args.command in ("tune", "locate"):
        from .optimize import cli as optimize_cli
        run = (optimize_cli.tune_main if args.command == "tune"
               else optimize_cli.locate_main)
        return run(args, command=command, started=started)
    if args.command == "scale":
        from .scale import cli as scale_cli
        return scale_cli.run(args, command=command, started=started)
    if args.command == "serve":
        from .serve import cli as serve_cli
        return serve_cli.run(args, command=command, started=started)
    from . import compare
    try:  # every value, every preset's options, every flag: checked before the first run
        scn = compare.load_scenario(args.scenario, model=args.model)
        if args.classes:
            scn = compare.with_classes(scn)
        flags = check_args(args, COMPARE_FLAGS)
        factors = None
        if args.scaling_curve:
            factors = tuple(flags["--scaling-factors"])
            if not args.plots:
                raise refuse("--scaling-curve", "draws into the --plots directory; give "
                             "--plots DIR")
    except ValueError as err:
        print(f"fabric-jax compare: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    results, details = compare.run_compare(scn, progress=not args.quiet, keep=True,
                                           ideal=not args.no_ideal, workers=args.workers)
    print(compare.format_table(results, notes=compare.model_notes(scn)))
    if args.json:
        compare.write_json(results, args.json, command=command, started=started,
                           inputs=scn.as_dict())
        print(f"wrote {args.json}")
    if args.plots:
        from . import plots
        curve = compare.scaling_study(scn, factors=factors, progress=not args.quiet) \
            if factors else None
        presets = {k: v for k, v in results.items() if not compare.is_ideal(k)}
        for path in plots.compare_figures(presets, details, args.plots, scaling=curve):
            print(f"wrote {path}")
    print(f"({time.time() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
