"""``fabric-jax scale``: one training step at 16 to 32,768 GPUs, every preset and the ideal
fabric, as a table (and JSON, figures)."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

from ..results import to_json, write_results
from ..scenario import ScenarioError, arg_name, check_args, integer, refuse
from ._scenario import (MAX_GPUS, MIN_GPUS, RAIL_SYSTEMS, SCALE_FLAGS, SCALE_RULES,
                        scale_scenarios)

__all__ = ["add_parser", "run", "format_table", "plot", "MIN_GPUS", "MAX_GPUS", "RUN_FLAGS"]

#: ``--gpus`` when it is not given.
DEFAULT_GPUS = ",".join(str(n) for n in SCALE_RULES["topology.gpus"].default)


def add_parser(sub):
    """The ``scale`` subcommand on an argparse ``subparsers`` object."""
    p = sub.add_parser(
        "scale", help="one training step at 16 to 32,768 GPUs on every preset and the "
                      "ideal fabric",
        description="Simulates one training step of a model filling the cluster (TP "
                    "inside the server, PP across, DP reduce-scatter + all-gather, MoE "
                    "all-to-all with skewed experts) on the rail-optimised fabric a real "
                    "build uses at each size (two tiers up to the switch radix, planes "
                    "or three tiers beyond), on each preset and the ideal fabric; one "
                    "representative rail when the rails are interchangeable "
                    "(docs/scale.md).")
    _add_cluster_args(p)
    _add_workload_args(p)
    _add_run_args(p)
    return p


def _add_cluster_args(p):
    """The ``scale`` flags of the cluster and its fabric: GPU counts, system, presets,
    model, fluid step, rails, paths, switch radix."""
    from ..fabrics import PRESETS, VARIANTS
    from ..workloads.model import MODELS
    from . import _step
    from ._rails import DEFAULT_DT_US
    from ._route import DEFAULT_MAX_PATHS
    p.add_argument("--gpus", default=None,
                   help=f"comma-separated GPU counts, {MIN_GPUS} to {MAX_GPUS} (default "
                        f"{DEFAULT_GPUS}; with --job-gpus, their sum); counts that are not "
                        f"whole servers are rounded down to whole servers, and the table "
                        f"says so")
    p.add_argument("--system", default=_default("topology.system"),
                   help=f"server design: one of {', '.join(RAIL_SYSTEMS)} (default "
                        f"{_default('topology.system')})")
    p.add_argument("--fabrics", default=",".join(PRESETS),
                   help=f"comma-separated presets (default {','.join(PRESETS)}; also the "
                        f"named variants {','.join(VARIANTS)})")
    p.add_argument("--model", default=_step.DEFAULT_MODEL,
                   help=f"one of {', '.join(sorted(MODELS))} (default {_step.DEFAULT_MODEL})")
    p.add_argument("--dt-us", type=float, default=DEFAULT_DT_US,
                   help=f"fluid step, microseconds (default {DEFAULT_DT_US:g})")
    p.add_argument("--rails", default="1",
                   help="rails simulated: a count (the first N rails) or 'all' (default 1: "
                        "exact when the rails are interchangeable, see the 'exact' column)")
    p.add_argument("--max-paths", type=int, default=DEFAULT_MAX_PATHS,
                   help=f"candidate paths per flow under adaptive routing / spraying "
                        f"(default {DEFAULT_MAX_PATHS})")
    from ._route import HASH_FIELDS
    p.add_argument("--qps", type=int, default=_default("fabrics.qps"),
                   help="QPs per connection under hashed (ECMP) routing, each its own flow "
                        "of the connection's bytes / N (default 1, NCCL's "
                        "NCCL_IB_QPS_PER_CONNECTION)")
    p.add_argument("--hash", default=_default("fabrics.hash"),
                   help=f"what the ECMP hash sees of a connection's QPs: "
                        f"{', '.join(HASH_FIELDS)} (default {_default('fabrics.hash')}: each "
                        f"QP its own UDP source port; connection: one port per connection; "
                        f"qp_spread: QP q on the q-th uplink after the connection's)")
    p.add_argument("--hash-polarization", action="store_true",
                   help="the same ECMP hash at every tier of a three-tier build "
                        "(--beyond-radix tiers): each spine reaches only S2/gcd(S1, S2) of "
                        "its uplinks; two-tier and multi-plane builds hash once")
    p.add_argument("--switch-radix", type=int, default=_default("topology.switch_radix"),
                   help="switch ports at the NIC speed (default 128: 128 x 400G)")
    p.add_argument("--beyond-radix", default=_default("topology.beyond_radix"),
                   help="what grows past the radix: planes (default) or tiers")
    p.add_argument("--cluster-gpus", default=None,
                   help="GPUs of the cluster the one job runs in (its fabric; the other "
                        "servers idle, drained, spare or other tenants', whose traffic is "
                        "not simulated); default 1.5 x --gpus for --placement fragmented "
                        "or topology_aware (Llama 3: 16K of a 24K-GPU cluster), else "
                        "--gpus; at most 32768")


def _add_workload_args(p):
    """The ``scale`` flags of the training step: slice, parallelism, skew, overlap,
    jobs and their placement, background traffic, per-message latency."""
    from . import _step
    p.add_argument("--slice-us", type=float, default=_default("workload.slice_us"),
                   help="line-rate time of the simulated slice of the step's traffic, "
                        "microseconds (default 250)")
    p.add_argument("--pp", type=int, default=_step.DEFAULT_PP,
                   help=f"pipeline stages wanted (default {_step.DEFAULT_PP})")
    p.add_argument("--ep", type=int, default=_step.DEFAULT_EP,
                   help=f"expert-parallel degree: must divide the model's experts and, "
                        f"at each size, the data-parallel ranks (default "
                        f"{_step.DEFAULT_EP}, shrunk to fit where it does not)")
    p.add_argument("--microbatches", type=int, default=None,
                   help=f"micro-batches per replica and step, the same at every GPU count "
                        f"(weak scaling; default {_step.DEFAULT_MICROBATCHES}); not with "
                        f"--global-batch")
    p.add_argument("--global-batch", default=None, metavar="SEQUENCES",
                   help="fixed global batch (strong scaling): sequences per step at every "
                        "GPU count; each replica runs global batch / (dp x micro-batch) "
                        "micro-batches, which must be whole (default: weak scaling, "
                        "--microbatches per replica)")
    p.add_argument("--skew", type=float, default=_step.DEFAULT_SKEW,
                   help=f"Zipf exponent of the expert load (default {_step.DEFAULT_SKEW:g})")
    p.add_argument("--expert-load", default=_default("workload.expert_load"),
                   help="expert-load distribution: zipf (Zipf(--skew) popularity) or "
                        "capacity (the same bounded at --capacity-factor x the mean, the "
                        "excess spread over the other experts, no token dropped; default "
                        "zipf)")
    p.add_argument("--capacity-factor", type=float,
                   default=_default("workload.capacity_factor"),
                   help=f"with --expert-load capacity: the bound, x the mean expert load "
                        f"(default {_step.DEFAULT_CAPACITY_FACTOR:g}, Switch Transformer's)")
    p.add_argument("--overlap", default=None,
                   help=f"how communication overlaps compute: megatron (default: "
                        f"Megatron-Core's overlap_grad_reduce and overlap_param_gather, "
                        f"the DP reduce-scatter behind the last micro-batch's backward and "
                        f"the all-gather behind the first one's forward, bucket by bucket; "
                        f"all-to-all and pipeline sends exposed) or a flat fraction of the "
                        f"compute in [0, 1] (0: nothing overlaps)")
    p.add_argument("--jobs", type=int, default=_default("workload.jobs"),
                   help="jobs sharing the cluster, each on GPUs / jobs GPUs with its own "
                        "plan and hot experts (default 1: one job fills the cluster)")
    p.add_argument("--job-gpus", default=None, metavar="N,N,...",
                   help="jobs of different sizes sharing the cluster: GPUs per job, whole "
                        "servers, summing to the cluster (e.g. 4096,2048,1024,1024); each "
                        "job gets the plan of its size; instead of --jobs")
    p.add_argument("--job-models", default=None, metavar="NAME,NAME,...",
                   help="one model per job (with --jobs or --job-gpus), e.g. "
                        "mixtral_8x7b,llama3_70b; default: --model for every job")
    p.add_argument("--placement", default=_default("workload.placement"),
                   help=f"how the jobs share the servers: {', '.join(_step.PLACEMENTS)} "
                        f"(default packed: whole blocks; spread: round robin, every leaf "
                        f"holds every job; random: a random permutation, also with one "
                        f"job; fragmented: one job on a busy cluster (--cluster-gpus) "
                        f"after other jobs came and went, drained and spare servers, "
                        f"first free servers in hostname order; topology_aware: the same "
                        f"cluster, the fewest scalable units)")
    p.add_argument("--job-overlap", default=_default("workload.job_overlap"),
                   help="several jobs: always (default) runs every job's slices at once, an "
                        "upper bound on their interference; independent also runs every "
                        "set of the jobs apart (2^J - 1 runs per fabric, at most 6 jobs) "
                        "and weights each job's slice time by the chance that the others "
                        "communicate with it, for jobs whose steps are not synchronised "
                        "(adds the columns 'ind util %%' and 'ind vs ideal +%%')")
    p.add_argument("--background", type=float, default=_default("workload.background"),
                   metavar="LOAD",
                   help="background traffic sharing the fabric: open-loop Poisson flows "
                        "between servers at this fraction of each NIC's line rate, [0, 1) "
                        "(default 0: none); the step's figures leave them out and the "
                        "table adds their flow-completion slowdowns")
    from ..workloads.cdf import FlowSizeCDF
    p.add_argument("--background-cdf", default=_step.DEFAULT_BACKGROUND_CDF, metavar="NAME",
                   help=f"flow sizes of the background: one of "
                        f"{', '.join(FlowSizeCDF.builtin_names())} (default "
                        f"{_step.DEFAULT_BACKGROUND_CDF})")
    p.add_argument("--latency", default=_step.DEFAULT_LATENCY,
                   help=f"per-message latency of the step's collective calls, priced by "
                        f"NCCL's cost model and added to the step: "
                        f"{', '.join(_step.LATENCY_MODELS)} (default "
                        f"{_step.DEFAULT_LATENCY}: ring or PAT as NCCL >= 2.23 picks; "
                        f"ring: rings only; none: the bandwidth view)")
    p.add_argument("--dp-algorithm", default=_step.DEFAULT_DP_ALGORITHM,
                   help=f"algorithm of the data-parallel reduce-scatter / all-gather "
                        f"flows: {', '.join(_step.DP_ALGORITHMS)} (default "
                        f"{_step.DEFAULT_DP_ALGORITHM}: the one NCCL picks per call, ring "
                        f"or PAT, the choice that prices the latency; ring: rings whatever "
                        f"NCCL runs; pat: PAT wherever one rank per server allows)")


def _add_run_args(p):
    """The ``scale`` flags of the run itself: seed, workers, outputs, progress."""
    p.add_argument("--seed", type=int, default=_default("simulation.seed"),
                   help="seed (hashes, expert popularity)")
    p.add_argument("--workers", type=int, default=RUN_FLAGS["--workers"].default,
                   help="presets run at once, in threads (default 1)")
    p.add_argument("--no-ideal", action="store_true", help="skip the ideal fabric rows")
    p.add_argument("--json", metavar="PATH",
                   help="write the results as JSON (rewritten after every row, with "
                        "\"complete\": false until the run ends, so a stopped run keeps "
                        "what it finished)")
    p.add_argument("--resume", action="store_true",
                   help="with --json: keep the rows an earlier, stopped run of the same "
                        "inputs wrote there and run only the missing ones")
    p.add_argument("--plots", metavar="DIR",
                   help="write the figures into DIR (scale_step.png, scale_tail.png; "
                        "scale_jobs.png with --jobs or a random placement)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


#: The rules of the command's own flags (its run options; the scenario's keys are
#: :data:`~fabric_jax.scale.SCALE_RULES`, through :data:`~fabric_jax.scale.SCALE_FLAGS`).
RUN_FLAGS = {"--workers": integer(1, default=1)}


def _scenarios(args) -> list:
    """The checked scenarios of the command line, one per GPU count
    (:func:`~fabric_jax.scale.scale_scenarios`); a :class:`ScenarioError` naming the
    flag otherwise."""
    check_args(args, RUN_FLAGS)
    values = {key: getattr(args, arg_name(flag)) for key, flag in SCALE_FLAGS.items()}
    return scale_scenarios(values, flags=SCALE_FLAGS)


def _default(key: str):
    """The default of scenario key ``key`` (:data:`~fabric_jax.scale.SCALE_RULES`)."""
    return SCALE_RULES[key].default


def run(args, *, command=None, started: float | None = None) -> int:
    """Runs the subcommand (``args`` from :func:`add_parser`); returns the exit status.

    ``command``, ``started``: the ``--json`` file's run record
    (:func:`fabric_jax.results.run_record`).
    """
    from ..study.progress import Progress
    from ._point import scale_point
    t0, c0 = time.perf_counter(), time.process_time()
    started = time.time() if started is None else started
    try:
        scenarios = _scenarios(args)
        earlier = _earlier(args)
    except ScenarioError as err:
        print(f"fabric-jax scale: error: {err}", file=sys.stderr)
        return 2
    for scn in scenarios:
        net = scn.network.params
        if net["requested_gpus"] != net["gpus"]:
            print(f"note: {net['requested_gpus']} GPUs are not whole {net['system']} "
                  f"servers; simulating {net['gpus']}", file=sys.stderr)
    n_runs = sum(len(scn.fabric.presets) + 1 for scn in scenarios)
    bar = Progress(n_runs, enabled=not args.quiet)
    points = []
    inputs = {k: x for k, x in vars(args).items() if k != "func"}
    inputs["command"] = None

    def save(partial_point):
        if args.json:
            write_results(args.json, dict(points=points + [partial_point], inputs=inputs,
                                          complete=False), command=command, started=started)
    try:
        for scn in scenarios:
            points.append(scale_point(
                scn, ideal=not args.no_ideal, workers=args.workers, progress=bar.update,
                on_row=save, done=earlier.get(scn.network.params["gpus"])))
    except ValueError as err:
        print(f"fabric-jax scale: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    import jax
    results = dict(points=points, inputs=inputs, complete=True,
                   wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
                   device=str(jax.devices()[0]))
    if earlier:
        results["resumed"] = True       # wall_s / cpu_s: this run's; each point's: all runs
    print(format_table(results))
    if args.json:
        write_results(args.json, results, command=command, started=started)
        print(f"wrote {args.json}")
    if args.plots:
        for path in plot(results, args.plots):
            print(f"wrote {path}")
    print(f"wall {results['wall_s']:.1f} s, CPU {results['cpu_s']:.1f} s on "
          f"{results['device']}", file=sys.stderr)
    return 0


# inputs that must match for --resume to reuse an earlier run's rows
_SAME = ("system", "model", "dt_us", "rails", "max_paths", "switch_radix", "beyond_radix",
         "slice_us", "pp", "ep", "microbatches", "skew", "expert_load", "capacity_factor",
         "overlap", "seed", "no_ideal",
         "jobs", "placement", "background", "background_cdf", "latency", "job_gpus",
         "job_models", "job_overlap", "cluster_gpus", "global_batch", "dp_algorithm", "qps",
         "hash", "hash_polarization")
#: values of inputs an older JSON may lack (it was written before the flag existed)
_BEFORE = {"jobs": 1, "placement": "packed", "background": 0.0,
           "background_cdf": "web_search", "latency": "none", "job_gpus": None,
           "job_models": None, "job_overlap": "always", "cluster_gpus": None,
           "global_batch": None, "dp_algorithm": "ring", "qps": 1, "hash": "qp",
           "hash_polarization": False, "expert_load": "zipf", "capacity_factor": 1.25}


def _earlier(args) -> dict:
    """``{gpus: partial point}`` from the JSON an earlier run of the same inputs wrote."""
    if not args.resume:
        return {}
    if not args.json:
        raise refuse("--resume", "needs --json PATH (the file the earlier run wrote)")
    if not os.path.exists(args.json):
        return {}
    try:
        with open(args.json) as fh:
            old = json.load(fh)
        old_in, pts = old["inputs"], old["points"]
    except (OSError, ValueError, KeyError, TypeError):
        raise refuse("--resume", f"{args.json} is not a JSON file this command "
                     f"wrote") from None
    now = _resolved({k: to_json(getattr(args, k, None)) for k in _SAME})
    then = _resolved({k: old_in.get(k, _BEFORE.get(k)) for k in _SAME})
    diff = [k for k in _SAME if then[k] != now[k]]
    if diff:
        raise refuse("--resume", f"{args.json} was written with other inputs "
                     f"({', '.join('--' + k.replace('_', '-') for k in diff)})",
                     fix="drop --resume or give the same values")
    return {int(p["gpus"]): p for p in pts}


def _resolved(inputs: dict) -> dict:
    """``inputs`` (``_SAME``'s flags as given) with the step's batch and overlap as the
    scenario reads them (a flag left out: its default), for ``--resume``."""
    out = dict(inputs)
    if out["global_batch"] is not None:
        out["global_batch"] = int(out["global_batch"])
    elif out["microbatches"] is None:
        out["microbatches"] = _default("workload.microbatches")
    if out["overlap"] is None:
        out["overlap"] = _default("workload.overlap")
    elif out["overlap"] not in SCALE_RULES["workload.overlap"].also:
        out["overlap"] = float(out["overlap"])
    return out


def format_table(results: dict) -> str:
    """The scale table: one row per GPU count and preset, the ideal fabric after them.

    Columns: step time (ms), GPU utilisation (%), the per-message latency of the step's
    collective calls included in both (``lat ms``, NCCL's model, ``--latency``), p50 /
    p99 over ranks of the step's communication time (ms) and their ratio, effective
    bandwidth (fraction of line rate), share of port-bytes that met a congested port
    (%), port-seconds paused by PFC or starved of credits per step over the whole
    fabric (s), the fabric's share
    of $/token (%), and whether the simulated rails give the cluster exactly; with
    several jobs, ``jobs +%``: how much longer the slowest job's step is than the
    fastest's (%; the jobs' own hot experts differ, so the ideal fabric has a spread
    too), ``vs ideal +%``: the largest slowdown of a job against the same job on the
    ideal fabric (%; the fabric's part, job by job), and the step time and utilisation
    are the slowest job's and the jobs' mean; with background traffic, ``bg p50 x`` /
    ``bg p99 x``: the background flows' completion-time slowdowns (over their time on
    an idle fabric) and ``vs ideal +%``; with ``--job-overlap independent``, ``ind util
    %`` and ``ind vs ideal +%``: the utilisation and the largest slowdown against the
    ideal fabric for jobs whose steps are not synchronised
    (:func:`~fabric_jax.scale.independent_overlap`)."""
    from ._metrics import worst_vs_ideal
    several = any(_placed(pt) for pt in results["points"])
    bg = any(pt.get("background") for pt in results["points"])
    several = several or bg          # "vs ideal +%" is the step's figure with background
    ind = any(pt.get("job_overlap") == "independent" for pt in results["points"])
    head = (f"{'GPUs':>6} {'fabric':<11} {'step ms':>8} {'util %':>6} {'lat ms':>6} "
            f"{'p50 ms':>7} "
            f"{'p99 ms':>7} {'p99/p50':>7} {'eff bw':>6} {'congst %':>8} {'pause s':>8} "
            f"{'fabric $ %':>10} {'exact':>5}"
            + (f" {'jobs +%':>7} {'vs ideal +%':>11}" if several else "")
            + (f" {'bg p50 x':>8} {'bg p99 x':>8}" if bg else "")
            + (f" {'ind util %':>10} {'ind vs ideal +%':>15}" if ind else ""))
    lines = [head, "-" * len(head)]
    for pt in results["points"]:
        rows = list(pt["fabrics"].items())
        if "ideal" in pt:
            rows.append(("ideal", pt["ideal"]))
        for name, m in rows:
            red = pt["reduction"].get(name, {"exact": True})
            f = lambda x, s=1.0, d=1: ("-" if x is None or not math.isfinite(x)  # noqa
                                       else f"{x * s:.{d}f}")
            lines.append(
                f"{pt['gpus']:>6} {name:<11} {f(m['step_time'], 1e3):>8} "
                f"{f(m['gpu_utilization'], 100):>6} {f(m.get('latency_time', 0.0), 1e3, 2):>6} "
                f"{f(m['p50_completion'], 1e3, 2):>7} "
                f"{f(m['p99_completion'], 1e3, 2):>7} {f(m['p99_over_p50'], 1, 3):>7} "
                f"{f(m['effective_bandwidth'], 1, 3):>6} {f(m['congested_share'], 100):>8} "
                f"{f(m['pfc_pause_time'], 1, 2):>8} {f(m['fabric_cost_share'], 100):>10} "
                f"{'yes' if red['exact'] else 'no':>5}"
                + (f" {f(m.get('job_spread', 1.0) - 1.0, 100, 2):>7} "
                   f"{f(worst_vs_ideal(m, pt.get('ideal')), 100, 2):>11}"
                   if several else "")
                + (f" {f(m.get('background_p50_slowdown'), 1, 2):>8} "
                   f"{f(m.get('background_p99_slowdown'), 1, 2):>8}" if bg else "")
                + (f" {f(m.get('gpu_utilization_independent'), 100):>10} "
                   f"{f(worst_vs_ideal(m, pt.get('ideal'), independent=True), 100, 2):>15}"
                   if ind else ""))
    for pt in results["points"]:
        whose = "the first job's " if pt.get("job_gpus") or pt.get("job_models") else ""
        lines.append(f"{pt['gpus']} GPUs: {pt['topology']}; {whose}"
                     f"plan tp={pt['plan']['tp']} "
                     f"pp={pt['plan']['pp']} dp={pt['plan']['dp']} ep={pt['plan']['ep']}, "
                     f"global batch {pt['plan']['global_batch']} ("
                     f"{pt['plan']['microbatches']} micro-batches per replica, bubble "
                     f"{pt['plan']['pipeline_bubble']:.2f}), overlap "
                     f"{pt['plan'].get('overlap', 0.0)}, "
                     f"{pt['slices']} slices, rails simulated "
                     f"{'all' if pt['rails'] is None else pt['rails']}"
                     + _latency_note(pt)
                     + (f"; {pt['jobs']} job{'s' if pt['jobs'] > 1 else ''} of "
                        f"{_job_sizes(pt)}, {pt['placement']} placement "
                        f"(plan per job)" if _placed(pt) else "")
                     + _cluster_note(pt)
                     + ("; ind: jobs whose steps are not synchronised (--job-overlap "
                        "independent)" if pt.get("job_overlap") == "independent" else "")
                     + (f"; background {pt['background']['load']:g} of line rate per NIC "
                        f"({pt['background']['size_cdf']} sizes, "
                        f"{pt['background']['flows']} flows arriving over "
                        f"{pt['background']['window'] * 1e6:.0f} us)"
                        if pt.get("background") else ""))
        for name, red in pt["reduction"].items():
            if not red["exact"]:
                lines.append(f"  {name}: not exact: {red['reason']}")
    return "\n".join(lines)


def _cluster_note(pt: dict) -> str:
    """``"; fragmented placement on a 1536-GPU cluster: ..."``: where one job on a larger
    cluster landed (:func:`~fabric_jax.scale.cluster_servers`); ``""`` otherwise."""
    cl = pt.get("cluster")
    if not cl:
        return ""
    busy = ("" if "other_job_servers" not in cl else
            f", {cl['drained_servers']} drained, {cl['spare_servers']} spare, "
            f"{cl['other_job_servers']} other jobs'")
    return (f"; {pt['placement']} placement on a {cl['cluster_gpus']}-GPU cluster "
            f"({cl['job_servers']} of {cl['cluster_servers']} servers{busy}): "
            f"{pt['sus_spanned']} scalable units (fewest {pt['min_sus']}), "
            f"{100 * pt['cross_leaf_share']:.1f} % of the step's bytes cross leaves")


def _latency_note(pt: dict) -> str:
    """``"; latency nccl (dp: pat, edp: ring); DP flows nccl; spine 5.24 % of bytes"``:
    the latency model of a point, the algorithm of its data-parallel calls (the first
    preset's row: with ``--dp-algorithm ring`` NCCL's choice in the pricing depends on
    the path latency, and the ideal crossbar has none), the DP flows' algorithm
    (``--dp-algorithm``) and the share of the step's bytes that crossed a spine (the
    first row's ``spine_share``: the same flows on every row)."""
    mode = pt.get("latency", "none")
    rows = list(pt["fabrics"].values()) + ([pt["ideal"]] if "ideal" in pt else [])
    algs = rows[0].get("latency_algorithms", {}) if rows else {}
    dp = [f"{k.split('_')[0]}: {a}" for k, a in algs.items() if k.endswith("_all_gather")]
    spine = rows[0].get("spine_share") if rows else None
    flows = pt.get("plan", {}).get("dp_algorithm")
    return (f"; latency {mode}" + (f" ({', '.join(dp)})" if dp and mode != "none" else "")
            + (f"; DP flows {flows}" if flows else "")
            + (f"; spine {spine * 100:.2f} % of bytes" if spine is not None else ""))


def _job_sizes(pt: dict) -> str:
    """``"1024 GPUs"`` (equal jobs) or ``"4096/2048/1024/1024 GPUs"`` (``job_gpus``),
    with the models when the jobs have their own (``"64 GPUs (mixtral_8x7b/llama3_8b)"``)."""
    sizes = pt.get("job_gpus")
    text = "/".join(str(x) for x in sizes) if sizes else str(pt["gpus"] // pt["jobs"])
    models = pt.get("job_models")
    return f"{text} GPUs" + (f" ({'/'.join(models)})" if models else "")


def _placed(pt: dict) -> bool:
    """Whether a point ran several jobs or one job placed at random."""
    return int(pt.get("jobs", 1)) > 1 or pt.get("placement") == "random"


def plot(results: dict, out) -> list:
    """Step time and GPU utilisation vs GPU count per preset (log x), and the p99/p50
    ratio vs GPU count; with several jobs (or one placed at random) also each job's
    slowdown against the ideal fabric (``scale_jobs.png``); returns the PNG paths."""
    from pathlib import Path

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import save_figure
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pts = results["points"]
    gpus = [p["gpus"] for p in pts]
    names = list(pts[0]["fabrics"]) + (["ideal"] if "ideal" in pts[0] else [])

    def series(name, key, scale=1.0):
        return [scale * (p["ideal"] if name == "ideal" else p["fabrics"][name])[key]
                for p in pts]

    style = lambda i, name: dict(color="0.3", ls="--", marker="s") if name == "ideal" \
        else dict(color=f"C{i}", marker="o")  # noqa: E731
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(names):
        ax.plot(gpus, series(name, "step_time", 1e3), label=name, **style(i, name))
        bx.plot(gpus, series(name, "gpu_utilization", 100), label=name, **style(i, name))
    for a, lab in ((ax, "step time (ms)"), (bx, "GPU utilisation (%)")):
        a.set_xscale("log", base=2)
        a.set_xlabel("GPUs")
        a.set_ylabel(lab)
        a.legend(fontsize=8)
    dt = results["inputs"].get("dt_us")
    fig.suptitle(f"one training step, fluid model per preset (dt = {dt:g} us) vs ideal "
                 f"fabric", fontsize=10)
    paths = [save_figure(fig, out / "scale_step.png")]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, name in enumerate(names):
        ax.plot(gpus, series(name, "p99_over_p50"), label=name, **style(i, name))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("p99 / p50 of the step's communication over ranks")
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out / "scale_tail.png"))
    placed = [p for p in pts if _placed(p) and "ideal" in p]
    if placed:
        paths.append(_plot_jobs(placed, names, out, dt))
    return paths


def _plot_jobs(pts, names, out, dt):
    """``scale_jobs.png``: each job's step time against the same job on the ideal
    fabric (%), per preset, one panel per GPU count (points with several jobs or a
    random placement)."""
    import matplotlib.pyplot as plt

    from ..plots import save_figure
    presets = [n for n in names if n != "ideal"]
    fig, axes = plt.subplots(1, len(pts), figsize=(4.5 * len(pts), 4.2), squeeze=False)
    for ax, p in zip(axes[0], pts):
        ideal = p["ideal"]["job_step_times"]
        for i, name in enumerate(presets):
            jobs = p["fabrics"][name]["job_step_times"]
            slow = [100.0 * (a / b - 1.0) for a, b in zip(jobs, ideal)
                    if a is not None and b is not None and math.isfinite(a / b)]
            if not slow:                 # a run that did not finish: nothing to draw
                continue
            ax.bar(i, max(slow), color=f"C{i}", alpha=0.35)
            ax.plot(np.full(len(slow), i), slow, "o", color=f"C{i}", ms=4)
        ax.set_xticks(range(len(presets)), presets, fontsize=8)
        ax.set_ylabel("job's step vs the ideal fabric (+%)")
        ax.set_title(f"{p['gpus']} GPUs: {p['jobs']} job{'s' if p['jobs'] > 1 else ''}, "
                     f"{p['placement']}", fontsize=9)
    fig.suptitle(f"each job (dots) and the worst (bar), dt = {dt:g} us", fontsize=10)
    return save_figure(fig, out / "scale_jobs.png")
