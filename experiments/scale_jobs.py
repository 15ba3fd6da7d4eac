"""Several jobs on one cluster: what placement costs, and which mechanism pays it.

Units: seconds (printed in ms), bytes/s; slowdowns are fractions of the ideal fabric's
step time, job by job.

``fabric-jax scale --jobs N --placement P`` (:func:`fabric_jax.scale.scale_point`)
gives each preset's step with ``N`` jobs placed ``packed``, ``spread`` or ``random``
(``docs/scale.md``, "Several jobs").  This script runs the same step for a list of
*variants* of a preset, so that a loss can be traced to a mechanism rather than
guessed: a variant is ``preset[:field=value,...][@max_paths]``, e.g.
``spectrum_x:cc=none@16`` (Spectrum-X's routing and PFC without its congestion-control
law, 16 candidate paths per flow and plane).  ``field=value`` pairs are
:class:`fabric_jax.fabrics.Fabric` fields (``cc``, ``routing``, ``flow_control``) or,
with a ``routing.`` prefix, options of its routing policy (``routing.info_delay_us=0``),
with a ``cc.`` prefix, parameters of its congestion-control law
(``cc.expected_flows=10``: :func:`fabric_jax.cc.params_for`).
Every variant runs on the same flows, placement and paths as the preset
(:func:`fabric_jax.scale.build_point` and :func:`fabric_jax.scale.run_fabric`, as
``fabric-jax scale`` does: rail 0, HGX H100 servers, the default model and plan), next
to the ideal fabric (:func:`fabric_jax.scale.ideal_rails`).  A plain preset's row equals
``fabric-jax scale``'s for the same jobs and placement (tested).

Usage::

    python experiments/scale_jobs.py --gpus 8192 --jobs 8 --placement random \\
        --variants spectrum_x@4 spectrum_x@16 spectrum_x:cc=none@4 spectrum_x:cc=none@16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

from fabric_jax import scale as sc
from fabric_jax.fabrics import PRESETS, get_fabric
from fabric_jax.study.progress import Progress


def parse_variant(text: str):
    """``(label, Fabric, max_paths)`` of ``preset[:field=value,...][@max_paths]``."""
    head, _, mp = text.partition("@")
    name, _, opts = head.partition(":")
    if name not in PRESETS:
        raise ValueError(f"--variants: {text!r}: unknown preset {name!r} (one of "
                         f"{', '.join(PRESETS)})")
    fab = get_fabric(name)
    over, routing, ccopt = {}, {}, {}
    for pair in filter(None, opts.split(",")):
        key, eq, val = pair.partition("=")
        if not eq:
            raise ValueError(f"--variants: {text!r}: expected field=value, got {pair!r}")
        try:
            val = float(val)
        except ValueError:
            pass
        if key.startswith("routing."):
            routing[key[len("routing."):]] = val
        elif key.startswith("cc."):
            ccopt[key[len("cc."):]] = val
        elif key in ("cc", "routing", "flow_control"):
            over[key] = val
        else:
            raise ValueError(f"--variants: {text!r}: field {key!r} is not cc, routing, "
                             f"flow_control, routing.<option> or cc.<option>")
    if routing:
        over["routing_options"] = {**fab.routing_options, **routing}
    if ccopt:
        over["cc_options"] = {**fab.cc_options, **ccopt}
    fab = fab.replace(**over) if over else fab
    try:
        max_paths = int(mp) if mp else sc.DEFAULT_MAX_PATHS
    except ValueError:
        raise ValueError(f"--variants: {text!r}: @{mp} is not a path count") from None
    if max_paths < 1:
        raise ValueError(f"--variants: {text!r}: @{mp} must be >= 1")
    return text, fab, max_paths


def main(argv=None) -> int:
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=8192, help="GPUs (default 8192)")
    ap.add_argument("--jobs", type=int, default=8, help="jobs (default 8)")
    ap.add_argument("--job-gpus", default=None, metavar="N,N,...",
                    help="jobs of different sizes instead of --jobs (GPUs per job, summing "
                         "to --gpus)")
    ap.add_argument("--job-models", default=None, metavar="NAME,NAME,...",
                    help="one model per job (default: the default model for every job)")
    ap.add_argument("--placement", default="random", choices=sc.PLACEMENTS,
                    help="job placement (default random)")
    ap.add_argument("--variants", nargs="+", required=True,
                    help="preset[:field=value,...][@max_paths], e.g. spectrum_x:cc=none@16")
    ap.add_argument("--dt-us", type=float, default=sc.DEFAULT_DT_US,
                    help=f"fluid step, us (default {sc.DEFAULT_DT_US:g})")
    ap.add_argument("--background", type=float, default=0.0,
                    help="background load per NIC, fraction of line rate (default 0)")
    ap.add_argument("--background-cdf", default=sc.DEFAULT_BACKGROUND_CDF,
                    help=f"background flow sizes (default {sc.DEFAULT_BACKGROUND_CDF})")
    ap.add_argument("--latency", default=sc.DEFAULT_LATENCY, choices=sc.LATENCY_MODELS,
                    help=f"per-message latency of the collective calls (default "
                         f"{sc.DEFAULT_LATENCY}; fabric-jax scale --latency)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variants]
        if not args.dt_us > 0:
            raise ValueError(f"--dt-us must be > 0; got {args.dt_us!r}")
        t0, c0 = time.perf_counter(), time.process_time()
        job_gpus = None if args.job_gpus is None else [
            int(x) for x in args.job_gpus.split(",") if x.strip()]
        topo, st, nic = sc.build_point(args.gpus, jobs=args.jobs, placement=args.placement,
                                       job_gpus=job_gpus,
                                       job_models=None if args.job_models is None
                                       else args.job_models.split(","),
                                       seed=args.seed, background=args.background,
                                       background_cdf=args.background_cdf,
                                       latency=args.latency)
    except ValueError as err:
        print(f"scale_jobs: error: {err}", file=sys.stderr)
        return 2
    g = st.gpus_per_server
    bar = Progress(len(variants) + 1)
    base = sc.ideal_rails(st, nic)
    ideal = sc.point_metrics(base, st, topo, None, nic, n_rails=g)
    bar.update("ideal fabric")
    t_ideal = float(np.max(base.finish))
    rows = []
    for label, fab, mp in variants:
        run = sc.run_fabric(st, topo, fab, t_ideal, dt=args.dt_us * 1e-6, max_paths=mp,
                            seed=args.seed)
        m = sc.point_metrics(run, st, topo, fab.name, nic, n_rails=g)
        rows.append(dict(variant=label, max_paths=mp, step_time=m["step_time"],
                         worst_vs_ideal=sc.worst_vs_ideal(m, ideal),
                         effective_bandwidth=m["effective_bandwidth"],
                         latency_time=m["latency_time"], congested_share=m["congested_share"],
                         unfinished_flows=m["unfinished_flows"], wall_s=m["wall_s"],
                         background_p99_slowdown=m.get("background_p99_slowdown",
                                                       float("nan"))))
        bar.update(label)
    sizes = args.job_gpus.replace(",", "/") if args.job_gpus else args.gpus // args.jobs
    print(f"{args.gpus} GPUs, {st.n_jobs} job(s) of {sizes} GPUs, "
          f"{args.placement} placement, dt = {args.dt_us:g} us; ideal fabric "
          f"{ideal['step_time'] * 1e3:.1f} ms"
          + (f"; background {args.background:g} of line rate ({args.background_cdf}), "
             f"p99 slowdown on the ideal fabric "
             f"{ideal['background_p99_slowdown']:.2f}" if args.background else ""))
    print(f"{'variant':<32} {'step ms':>8} {'vs ideal +%':>11} {'eff bw':>6} "
          f"{'congst %':>8} {'unfinished':>10}" + (f" {'bg p99 x':>8}" if args.background
                                                    else ""))
    for r in rows:
        print(f"{r['variant']:<32} {r['step_time'] * 1e3:>8.1f} "
              f"{r['worst_vs_ideal'] * 100:>11.2f} {r['effective_bandwidth']:>6.3f} "
              f"{r['congested_share'] * 100:>8.1f} {r['unfinished_flows']:>10d}"
              + (f" {r['background_p99_slowdown']:>8.2f}" if args.background else ""))
    out = dict(inputs=vars(args), ideal_step_time=ideal["step_time"], rows=rows,
               wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
    print(f"wall {out['wall_s']:.1f} s, CPU {out['cpu_s']:.1f} s", file=sys.stderr)
    write_json(args.json, out, started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
