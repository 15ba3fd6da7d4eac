"""The blocks of ``experiments/report.py``: one function per ``<!-- report:NAME -->``
marker, each rendering Markdown from the experiments' ``results/*.json`` (and their
printed output), and the rows of the README's headline validation table."""

from __future__ import annotations

import math

from experiments import report as R
from fabric_jax.results import strip_run


def _f(x, digits=3):
    return R._f(x, digits)


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f} %"


# ------------------------------------------------------------------ stdout blocks
# every experiment's own printed table, with its command
for _name in R.EXPERIMENTS:
    if _name not in ("compare", "hpcc_fct"):
        R.BLOCKS[_name] = (lambda n: lambda: R.stdout_block(n))(_name)


# the convergence table keeps its headline metrics (marked *), the rest is in the JSON
R.BLOCKS["convergence"] = lambda: R.stdout_block(
    "convergence", keep=r"\*|worst|^preset|relative change|^dt = ")


@R.block("compare")
def compare_block():
    from fabric_jax.compare import format_table
    data, meta = R.load("compare")
    if meta is None:
        return R._missing("compare")
    from fabric_jax.compare import is_ideal
    data = strip_run(data)
    ordered = {k: v for k, v in data.items() if not is_ideal(k)}
    ordered.update({k: v for k, v in data.items() if is_ideal(k)})
    return R._source(meta) + "\n```\n" + format_table(ordered) + "\n```\n"


@R.block("hpcc_fct")
def hpcc_fct_block():
    data, meta = R.load("hpcc_fct")
    if meta is None:
        return R._missing("hpcc_fct")
    out = [R._source(meta),
           f"{data['workload']} at {data['load']:.0%} load, {data['n_hosts']} hosts, "
           f"{data['window_ms']:g} ms measured after {data['warmup_ms']:g} ms warm-up, "
           f"dt = {data['dt_us']:g} us.", "",
           R._row(("law", "measured flows", "unfinished", "p50", "p95", "p99",
                   "PFC paused (share of link-time)")),
           R._row(("---",) * 7)]
    for law, r in data["results"].items():
        out.append(R._row((law, r["n_flows"], r["n_unfinished"], _f(r["overall"]["p50"]),
                           _f(r["overall"]["p95"]), _f(r["overall"]["p99"]),
                           _pct(r["pfc_pause_fraction"]))))
    comp = data.get("published_comparison") or []
    if comp:
        out += ["", "Against the published ns-3 values (slowdown at the bucket nearest each "
                "size):", "", R._row(("percentile", "size", "law", "published", "fluid",
                                      "fluid / published")), R._row(("---",) * 6)]
        for c in comp:
            out.append(R._row((c["pct"], c["size"], c["law"], c["published"], c["fluid"],
                               _f(c["fluid"] / c["published"], 2))))
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ README summaries
@R.block("nccl-summary")
def nccl_summary():
    data, meta = R.load("nccl_tests")
    if meta is None:
        return R._missing("nccl_tests")
    pub = [p for p in data.get("published", [])]
    out = [R._row(("GPUs", "op", "algorithm (both)", "published busbw GB/s", "simulated",
                   "ratio", "NCCL's default here (not compared)", "source")),
           R._row(("---",) * 8)]
    for p in pub:
        gpus = p["gpus"] or 8 * p["nodes"]
        out.append(R._row((f"{gpus} ({p['nodes']} node{'s' if p['nodes'] > 1 else ''})",
                           p["op"], p["algorithm"], f"{p['busbw'] / 1e9:.0f}",
                           f"{p['simulated'] / 1e9:.1f}", f"{p['ratio']:.3f}",
                           f"{p['default_algorithm']} {p['default'] / 1e9:.1f}",
                           p["source"].split(";")[0])))
    return R._source(meta) + "\n" + "\n".join(out) + "\n"


@R.block("scale-summary")
def scale_summary():
    data, meta = R.load("allreduce_sweep")
    if meta is None:
        return R._missing("allreduce_sweep")
    gpus = data["gpus"]
    names = list(data["fabrics"])
    out = [R._row(["GPUs"] + [f"{n} p99 (us)" for n in names] + ["ideal (us), per algorithm"]),
           R._row(["---"] * (len(names) + 2))]
    for i, g in enumerate(gpus):
        cells = [g]
        ideals = {}
        for n in names:
            v = data["fabrics"][n]
            cells.append(f"{v['p99_completion_time'][i] * 1e6:.1f} ({v['algorithm'][i]})")
            base = data["ideal"][n]
            ideals[base["algorithm"][i]] = base["p99_completion_time"][i] * 1e6
        cells.append(", ".join(f"{a} {t:.1f}" for a, t in ideals.items()))
        out.append(R._row(cells))
    dt = data.get("inputs", {}).get("dt_us")
    return (R._source(meta) + f"\nOne all-reduce of {data['inputs']['all_reduce_bytes'] / 1e6:g}"
            f" MB per GPU, dt = {dt:g} us; p99 over ranks.\n\n" + "\n".join(out) + "\n")


@R.block("optimize-summary")
def optimize_summary():
    return R.stdout_block("optimize_routing", keep=r"^(?!\[).+")     # no "[name] done"


# ------------------------------------------------------------------ headline rows
@R._headline
def _dcqcn():
    """DCQCN fixed point (Zhu et al., CoNEXT 2016)"""
    d, _ = R.need("dcqcn_fixed_point")
    r = d["runs"][0] if "runs" in d else d
    err = max(r["rel_error"].values())
    return ("DCQCN fixed point, 2 flows at 40 Gb/s (Zhu et al., CoNEXT 2016): queue "
            f"{r['fixed_point_queue_kb']:.2f} KB, alpha {r['fixed_point_alpha']:.4f}",
            f"queue {r['sim_queue_kb']:.2f} KB, alpha {r['sim_alpha']:.4f} (largest "
            f"relative error {100 * err:.2f} %)", R._cmd("dcqcn_fixed_point"))


@R._headline
def _hpcc_incast():
    """HPCC 16-to-1 incast (Li et al., SIGCOMM 2019)"""
    d, _ = R.need("hpcc_incast")
    h = d["laws"]["hpcc"]
    q = {law: v["steady_queue_bytes"] / 1e3 for law, v in d["laws"].items()}
    return ("HPCC 16-to-1 incast: rate over fair share `eta + N R_AI / C` = 0.9564 (closed "
            "form), near-zero queue; DCQCN a standing queue of hundreds of KB (Li et al., "
            "SIGCOMM 2019, Fig. 9/10)",
            f"HPCC {h['mean_rate_over_fair']:.4f}, steady queue "
            + ", ".join(f"{law} {v:.0f} KB" for law, v in q.items())
            + f" (dt = {d['dt_us']:g} us)", R._cmd("hpcc_incast"))


@R._headline
def _hpcc_fct():
    """HPCC FCT slowdown vs published ns-3"""
    d, _ = R.need("hpcc_fct")
    comp = d.get("published_comparison") or []
    if not comp:
        return None
    ratios = {}
    for c in comp:
        ratios.setdefault(c["law"], []).append(c["fluid"] / c["published"])
    return (f"FCT slowdown per flow size, HPCC and DCQCN, {d['workload']} at "
            f"{d['load']:.0%} on the 320-host fat-tree: the authors' ns-3 results (read by "
            "eye, +-10 %)",
            "fluid / published: " + "; ".join(
                f"{law} {min(v):.2f}-{max(v):.2f} ({len(v)} points)"
                for law, v in ratios.items()), R._cmd("hpcc_fct"))


@R._headline
def _nccl():
    """nccl-tests bus bandwidths"""
    d, _ = R.need("nccl_tests")
    pub = d["published"]
    rat = [p["ratio"] for p in pub]
    return ("nccl-tests bus bandwidth at 8 GiB, HGX H100 1-4 nodes, each with the algorithm "
            "it ran (nccl-tests#212, #290, nccl#1455)",
            f"simulated / published {min(rat):.2f}-{max(rat):.2f} over {len(pub)} rows",
            R._cmd("nccl_tests"))


@R._headline
def _ecmp():
    """ECMP collisions vs balls into bins"""
    d, _ = R.need("ecmp_collisions")
    rows = d["sweep"]
    return ("ECMP permutation throughput: balls-into-bins expectation `1 - (1 - 1/n)^n`",
            "; ".join(f"n = {r['n']}: {r['ecmp_effective_bandwidth']:.3f} vs "
                      f"{r['theory']:.3f}" for r in rows), R._cmd("ecmp_collisions"))


@R._headline
def _queue():
    """FIFO closed form"""
    d, _ = R.need("queue_discipline")
    fifo = d["fifo_finish"]
    start = None
    fl = d["fluid"]
    first = next(iter(fl.values()))
    return ("A 200 KB flow behind a greedy flow at one 400 Gb/s port: FIFO closed form "
            "`t_s + 2 L + 2 s / C`",
            f"finish {first * 1e6:.2f} us vs {fifo * 1e6:.2f} us at every dt "
            f"({', '.join(f'{float(k) * 1e6:g}' for k in fl)} us)" if start is None else "",
            R._cmd("queue_discipline"))


@R._headline
def _reorder():
    """Go-back-N goodput vs closed form"""
    d, _ = R.need("reordering")
    # the closed form is at line rate: RoCE (DCQCN runs at line rate here); HPCC's
    # eta < 1 keeps Spectrum-X below it by design
    rows = [r for r in d["spread"] if r["preset"] == "roce" and not r["reorder"]]
    err = max(abs(r["goodput"] / r["theory"] - 1) for r in rows)
    return ("A flow sprayed over 4 paths into a go-back-N NIC (RoCE): goodput against the "
            "spread of path delays, closed form of the receiver model",
            ", ".join(f"{r['goodput']:.4f} vs {r['theory']:.4f}" for r in rows)
            + f" (largest relative difference {100 * err:.2f} %)", R._cmd("reordering"))


@R._headline
def _stragglers():
    """Stragglers vs closed forms"""
    d, _ = R.need("stragglers")
    err = max(abs(r["step_time"] / r["model_step_time"] - 1)
              for kind in ("compute", "nic") for r in d.get(kind, []))
    return ("Data-parallel step with one slow GPU or NIC: closed forms `f C + T`, `C + f T`",
            f"largest relative difference {100 * err:.2f} %", R._cmd("stragglers"))


@R._headline
def _convergence():
    """Convergence in dt"""
    d, _ = R.need("convergence")
    return ("Compare metrics at dt, dt/2, dt/4 (the project's rule: <= 3 % change)",
            f"worst headline change dt = {d['dt_us'][0]:g} -> {d['dt_us'][-1]:g} us: "
            f"{100 * d['worst_headline_change']:.2f} %", R._cmd("convergence"))


@R._headline
def _ideal_bound():
    """Per-preset ideal bound"""
    d, _ = R.need("compare")
    worst = []
    for name, v in d.items():
        col = v.get("ideal_column") if isinstance(v, dict) else None
        if not col:
            continue
        b = d[col]
        worst.append(v["collective_completion_time"] / b["collective_completion_time"])
    return ("Each preset's all-reduce against its own ideal (the same algorithm, the job "
            "alone on a non-blocking crossbar): >= 1 by construction",
            f"preset / ideal {min(worst):.2f}-{max(worst):.2f}", R._cmd("compare"))


R.BLOCKS["headline"] = R.headline

__all__ = ["compare_block", "hpcc_fct_block", "nccl_summary", "scale_summary",
           "optimize_summary", "math"]
