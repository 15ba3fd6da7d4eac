"""``fabric-jax serve``: the serving table per preset and the ideal fabric (JSON, plots).

A thin layer over :func:`fabric_jax.serve.serve`: every scenario key and flag is checked
before anything runs (one line naming the key or flag and the fix, exit status 2).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from ..results import write_results
from ..scenario import ScenarioError, number, check_args, integer

__all__ = ["add_parser", "run", "format_table", "format_beside", "plot_cdfs",
           "plot_rate_sweep", "format_ep_sweep", "plot_ep_sweep",
           "SERVE_FLAGS"]

#: The rules of serve's own flags.
SERVE_FLAGS = {
    "--rate": number(0, 1e6, lo_open=True, default=None, unit="req/s"),
    "--requests": integer(1, 100000, default=None),
    "--rate-sweep": number(0, 1e6, lo_open=True, many=True, default=None, unit="req/s"),
    "--dt-us": number(0, 1000, lo_open=True, default=None, unit="us"),
    "--ep-sweep": integer(8, 256, many=True, default=None, unit="GPUs"),
}


def add_parser(sub):
    """The ``serve`` subcommand on an argparse ``subparsers`` object."""
    from ..fabrics import PRESETS
    p = sub.add_parser(
        "serve", help="disaggregated prefill/decode serving on every preset and the "
                      "ideal fabric: TTFT, TPOT, SLO attainment, goodput, $/Mtok",
        description="Simulates a disaggregated serving deployment (default: DeepSeek-V3, "
                    "4 prefill + 4 decode H100 servers, decode EP 32 with DP attention, "
                    "Poisson requests): prefill FIFO, the KV cache streamed layer by "
                    "layer over the fabric under each preset's dynamics (fluid engine, "
                    "busy period by busy period), decode with continuous batching.")
    p.add_argument("--scenario", metavar="FILE", help="TOML serving scenario (sections "
                   "model, gpu, prefill, decode, parallel, requests, kv, slo, network, "
                   "simulation; see docs)")
    p.add_argument("--fabrics", default=",".join(PRESETS),
                   help=f"comma-separated presets (default {','.join(PRESETS)})")
    p.add_argument("--no-ideal", action="store_true", help="skip the ideal fabric")
    p.add_argument("--rate", help="requests per second (replaces requests.rate)")
    p.add_argument("--requests", help="requests to simulate (replaces requests.n)")
    p.add_argument("--dt-us", help="fluid step, microseconds (replaces simulation.dt_us)")
    p.add_argument("--rate-sweep", metavar="R1,R2,...",
                   help="goodput against request rate at these rates (with --plots: the "
                        "figure; the knee per preset in the table)")
    p.add_argument("--ep-sweep", metavar="E1,E2,...",
                   help="instead of serving: the decode dispatch / combine latency of one "
                        "MoE layer at these EP degrees on each --fabrics preset (and the "
                        "ideal fabric), in DeepEP's published configuration (H800, 400 Gb/s "
                        "per GPU, 128 tokens per GPU, hidden 7168, top-8, FP8 dispatch, BF16 "
                        "combine), beside DeepEP's figures")
    p.add_argument("--with-training", action="store_true",
                   help="also run the serving deployment beside a training job on one "
                        "fabric (scenario section [training]): isolation both ways, one "
                        "traffic class and separate classes; minutes per preset")
    p.add_argument("--json", metavar="PATH", help="write results as JSON")
    p.add_argument("--plots", metavar="DIR", help="write TTFT / TPOT CDFs per preset")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _overrides(flags) -> dict:
    ov = {}
    for flag, key in (("--rate", "requests.rate"), ("--requests", "requests.n"),
                      ("--dt-us", "simulation.dt_us")):
        if flags.get(flag) is not None:
            ov[key] = flags[flag]
    return ov


def format_table(results: dict) -> str:
    """preset | TTFT p50/p99 ms | TPOT p50/p99 ms | SLO % | goodput tok/s/GPU | $/Mtok |
    KV ms (exposed after prefill, p50/p99)."""
    def ms(x, digits=1):
        return "-" if x is None else f"{1e3 * x:.{digits}f}"
    head = ("fabric", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "SLO %", "goodput tok/s/GPU",
            "$/Mtok", "KV ms p50/p99", "served/queued/dropped")
    rows = [head]
    for name, v in results["fabrics"].items():
        r = v["requests"]
        rows.append((name, f"{ms(v['ttft']['p50'])} / {ms(v['ttft']['p99'])}",
                     f"{ms(v['tpot']['p50'])} / {ms(v['tpot']['p99'])}",
                     f"{100 * v['slo_attainment']:.1f}", f"{v['goodput_per_gpu']:.1f}",
                     "-" if v["usd_per_mtok"] is None else f"{v['usd_per_mtok']:.2f}",
                     f"{ms(v['kv']['exposed']['p50'], 3)} / {ms(v['kv']['exposed']['p99'], 3)}",
                     f"{r['served']}/{r['queued']}/{r['dropped']}"))
    width = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(row, width)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in width))
    d = results["deployment"]
    s = results["scenario"]
    lines.append(
        f"{d['model']} on {d['serving_gpus']} {d['gpu']} GPUs ({s['prefill']['servers']} "
        f"prefill + {s['decode']['servers']} decode servers, attention {d['attention']}, "
        f"decode EP {s['decode']['ep'] if d['attention'] == 'dp' else '-'}); "
        f"{s['requests']['n']} requests at {s['requests']['rate']:g}/s; KV "
        f"{d['kv_bytes_per_token'] / 1e3:.1f} KB/token in {d['kv_chunks']} chunk(s); "
        f"SLO TTFT {s['slo']['ttft_ms']:g} ms, TPOT {s['slo']['tpot_ms']:g} ms; "
        f"dt {s['simulation']['dt_us']:g} us, {d['busy_periods']} busy periods; "
        f"TTFT/TPOT percentiles over requests")
    return "\n".join(lines)


def format_beside(results: dict) -> str:
    """The isolation table of :func:`fabric_jax.serve.beside_training`: per preset and
    class variant, the training step against training alone and the serving tails
    against serving alone on the same fabric."""
    def ms(x, digits=2):
        return "-" if x is None else f"{1e3 * x:.{digits}f}"

    def ratio(x):
        return "-" if x is None else f"{x:.3f}"
    head = ("fabric", "classes", "train step alone/mean/p99 ms", "train slowdown",
            "TTFT p99 ms alone/beside", "KV exposed p99 x", "SLO % alone/beside")
    rows = [head]
    for name, f in results["fabrics"].items():
        for variant in ("shared", "classes"):
            if variant not in f:
                continue
            v, a = f[variant], f["alone"]
            tr = v["training"]
            rows.append((name, "one" if variant == "shared" else "train separate",
                         f"{ms(tr['step_time_alone'], 3)} / {ms(tr['step_time_mean'], 3)} / "
                         f"{ms(tr['step_time_p99'], 3)}", f"{tr['slowdown']:.4f}",
                         f"{ms(a['ttft']['p99'])} / {ms(v['serving']['ttft']['p99'])}",
                         ratio(v["isolation"]["kv_exposed_p99_ratio"]),
                         f"{100 * a['slo_attainment']:.1f} / "
                         f"{100 * v['serving']['slo_attainment']:.1f}"))
    width = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(row, width)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in width))
    t, w, lay = results["training"], results["windows"], results["layout"]
    lines.append(
        f"beside training: {t['servers']} training servers ({t['placement']}, "
        f"{lay['servers']} servers, {lay['servers_per_leaf']} per leaf), per rail a ring "
        f"all-reduce of {t['all_reduce_mb']:g} MB per GPU after {t['compute_us']:g} us of "
        f"compute; the first {t['requests_used']} requests; {w['count']} windows of "
        f"{t['steps_per_window']} steps, dt {1e6 * w['dt']:g} us")
    return "\n".join(lines)


def plot_cdfs(results: dict, out_dir) -> list[str]:
    """TTFT and TPOT CDFs per preset (needs ``keep_samples=True``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import save_figure
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, v in results["fabrics"].items():
        for ax, key in zip(axes, ("ttft_samples", "tpot_samples")):
            x = np.sort(np.asarray(v.get(key, []), float))
            x = x[np.isfinite(x)]
            if x.size:
                ax.step(1e3 * x, np.arange(1, x.size + 1) / x.size, where="post",
                        label=name, ls="--" if name == "ideal" else "-")
    axes[0].set_xlabel("time to first token, ms")
    axes[1].set_xlabel("time per output token, ms")
    for ax in axes:
        ax.set_ylabel("CDF over requests")
        ax.legend()
        ax.grid(alpha=0.3)
    from pathlib import Path
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return [save_figure(fig, Path(out_dir) / "serve_cdf.png")]


def plot_rate_sweep(sweep: dict, out_dir) -> list[str]:
    """Goodput per GPU against request rate, one line per preset, the knee marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import save_figure
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in sweep["fabrics"].items():
        ax.plot(sweep["rates"], c["goodput_per_gpu"], marker="o", label=name,
                ls="--" if name == "ideal" else "-")
        k = sweep["knee"].get(name)
        if k is not None:
            ax.axvline(k, color=ax.lines[-1].get_color(), alpha=0.3)
    ax.set_xlabel("request rate, req/s")
    ax.set_ylabel("goodput, tokens/s per GPU (SLO met)")
    ax.legend()
    ax.grid(alpha=0.3)
    from pathlib import Path
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return [save_figure(fig, Path(out_dir) / "serve_goodput_rate.png")]


def run(args, *, command: str, started: float) -> int:
    """Runs ``fabric-jax serve`` from parsed arguments; returns the exit status."""
    from ..fabrics import PRESETS
    from . import rate_sweep, serve
    from ._scenario import load_scenario
    try:
        flags = check_args(args, SERVE_FLAGS)
        fabrics = [f.strip() for f in args.fabrics.split(",") if f.strip()]
        for f in fabrics:
            if f not in PRESETS:
                raise ScenarioError("--fabrics", f"unknown preset {f!r}",
                                    fix=f"comma-separated among {list(PRESETS)}",
                                    flag="--fabrics")
        if not fabrics:
            raise ScenarioError("--fabrics", "no preset given", flag="--fabrics")
        ov = _overrides(flags)
        load_scenario(args.scenario, overrides=ov)       # every key, before any run
    except ValueError as err:
        print(f"fabric-jax serve: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    if flags.get("--ep-sweep"):
        return _ep_sweep(args, flags, fabrics, command=command, started=started)
    res = serve(args.scenario, fabrics=fabrics, ideal=not args.no_ideal,
                progress=not args.quiet, overrides=ov, keep_samples=bool(args.plots))
    print(format_table(res))
    sweep = None
    if flags.get("--rate-sweep"):
        sweep = rate_sweep(flags["--rate-sweep"], args.scenario, fabrics=fabrics,
                           ideal=not args.no_ideal, progress=not args.quiet, overrides=ov)
        print("goodput tok/s/GPU against rate (req/s): " + "; ".join(
            f"{n}: " + ", ".join(f"{r:g}->{g:.1f}" for r, g in
                                 zip(sweep["rates"], c["goodput_per_gpu"]))
            + f" (knee {sweep['knee'][n]}, SLO knee {sweep['slo_knee'][n]})"
            for n, c in sweep["fabrics"].items()))
        res["rate_sweep"] = sweep
    if args.with_training:
        from ._beside import beside_training
        res["with_training"] = beside_training(args.scenario, fabrics=fabrics,
                                               progress=not args.quiet, overrides=ov)
        print(format_beside(res["with_training"]))
    if args.plots:
        for path in plot_cdfs(res, args.plots) + (
                plot_rate_sweep(sweep, args.plots) if sweep else []):
            print(f"wrote {path}")
        for v in res["fabrics"].values():
            v.pop("ttft_samples", None)
            v.pop("tpot_samples", None)
    if args.json:
        write_results(args.json, res, command=command, started=started,
                      inputs=res["scenario"])
        print(f"wrote {args.json}")
    print(f"({time.time() - started:.1f} s)", file=sys.stderr)
    return 0


def format_ep_sweep(sweep: dict) -> str:
    """Dispatch / combine of one MoE layer per preset and EP degree, beside DeepEP's
    published low-latency figures."""
    def us(x):
        return "-" if x is None else f"{x:.1f}"
    head = ("fabric", "EP", "remote share", "dispatch us (closed form)",
            "DeepEP dispatch us", "combine us (closed form)", "DeepEP combine us")
    rows = [head]
    for name, per in sweep.items():
        for ep, v in per.items():
            rows.append((name, str(ep), f"{v['remote_bytes_share']:.3f}",
                         f"{us(v['dispatch_us'])} ({us(v['closed_dispatch_us'])})",
                         us(v["published_dispatch_us"]),
                         f"{us(v['combine_us'])} ({us(v['closed_combine_us'])})",
                         us(v["published_combine_us"])))
    width = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(row, width)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in width))
    any_v = next(iter(next(iter(sweep.values())).values()))
    lines.append(f"DeepSeek-V3 MoE layer, 128 tokens per GPU, H800 + 400 Gb/s per GPU, "
                 f"uniform top-8 routing; dt {1e6 * any_v['dt']:g} us; DeepEP: "
                 "deepseek-ai/DeepEP README, low-latency kernels")
    return "\n".join(lines)


def plot_ep_sweep(sweep: dict, out_dir) -> list[str]:
    """Dispatch and combine latency against EP degree, one line per preset, DeepEP's
    published low-latency figures as black markers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pathlib import Path

    from ..plots import save_figure
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    for ax, op in zip(axes, ("dispatch", "combine")):
        pub = {}
        for name, per in sweep.items():
            eps = sorted(int(e) for e in per)
            ax.plot(eps, [per[str(e)][f"{op}_us"] for e in eps], marker="o", label=name,
                    ls="--" if name == "ideal" else "-")
            pub.update({e: per[str(e)][f"published_{op}_us"] for e in eps
                        if per[str(e)][f"published_{op}_us"] is not None})
        if pub:
            ax.plot(sorted(pub), [pub[e] for e in sorted(pub)], "ks", label="DeepEP published")
        ax.set_xscale("log", base=2)
        ticks = sorted({int(e) for per in sweep.values() for e in per})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("EP degree (GPUs)")
        ax.set_ylabel(f"{op} of one MoE layer, us")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return [save_figure(fig, Path(out_dir) / "serve_ep_sweep.png")]


def _ep_sweep(args, flags, fabrics, *, command: str, started: float) -> int:
    from ..study.progress import Progress
    from ..workloads.model import get_model
    from ._ep import IDEAL, check_ep, ep_sweep
    names = fabrics + ([] if args.no_ideal else [IDEAL])
    degrees = [int(e) for e in flags["--ep-sweep"]]
    try:
        for e in degrees:                         # every degree checked before any run
            check_ep(get_model("deepseek_v3"), e)
    except ValueError as err:
        print(f"fabric-jax serve: error: --ep-sweep: {str(err).splitlines()[0]}",
              file=sys.stderr)
        return 2
    bar = Progress(len(names) * len(degrees), enabled=not args.quiet, label="ep-sweep",
                   estimate_s=30.0 * len(names) * len(degrees))
    sweep = {}
    for name in names:
        sweep[name] = {}
        for e in degrees:
            sweep[name][str(e)] = ep_sweep(name, [e])[e]
            bar.update(f"{name} EP {e}")
    bar.close()
    print(format_ep_sweep(sweep))
    if args.plots:
        for path in plot_ep_sweep(sweep, args.plots):
            print(f"wrote {path}")
    if args.json:
        write_results(args.json, dict(ep_sweep=sweep), command=command, started=started,
                      inputs=dict(ep_degrees=degrees, fabrics=names))
        print(f"wrote {args.json}")
    print(f"({time.time() - started:.1f} s)", file=sys.stderr)
    return 0
