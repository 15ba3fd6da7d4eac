"""Fault localisation accuracy at 1,024 hosts (issue 29).

Fabric: ``leaf_spine(32, 8, 32, fabric_gbps=1600)`` (1,024 hosts at 400 Gb/s, 8 spines,
non-blocking; 2,560 directed links).  Workload: a diagnostic all-to-all slice, 2
shifted permutations (2,048 flows of 1 MB, every flow leaves its leaf;
``fabric_jax.optimize.diagnostic_workload``).  Per routing (``ecmp``, ``spray``,
``adaptive``) and with / without port counters:

* ``--faults`` seeded single faults on a switch-to-switch link drawn uniformly, the
  capacity factor uniform in [0.1, 0.9] (host-link faults are easier: every flow of one
  NIC slows; they are left out of the table, stated);
* ``--two`` seeded double faults (two such links, factors in [0.1, 0.9]);
* ``--clean`` runs with no fault (the false-positive rate);
* ``--lossy`` seeded lossy links per loss level in ``--loss-levels`` (default 1.5 % and
  0.5 %, SprayCheck's), on a switch-to-switch link drawn uniformly, located with a loss
  fitted per link (``locate(..., lossy=True)``): from flow times alone, and from flow
  times with port counters including every port's drop (error) counter.

Observations: the exact flow-level model (max-min rates) with ``--noise`` relative
Gaussian noise on every completion time and counter increment; counters sampled 4
times at a period of a quarter of the earliest completion (a multiple of dt = 1 us).
Methods: ``fabric_jax.optimize.locate`` (gradient, fair-share bottleneck model, 300
Adam steps), ``tomography`` (NNLS) and ``vote_count``.  Top-k: the planted link(s)
among the first ``k + (faults - 1)`` ranks.  Accuracy against severity (1 - factor) in
bins of 0.2; "smallest degradation at 95 % top-1": the lowest bin edge from which every
more severe bin has top-1 >= 95 %.

Run: ``PYTHONPATH=. python experiments/locate.py --plots results/locate`` (writes
``results/locate.json``; ``--quick`` for a smoke run).  ``--table A.json [B.json ...]``
prints the markdown table of docs/tuning.md from results files (one row per routing,
method and observation kind), and with ``--plots DIR`` draws their accuracy curves in
one figure, without running anything.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._common import parser, write_json

from fabric_jax.optimize import _locate as L  # noqa: E402
from fabric_jax.optimize._plots import accuracy_figure  # noqa: E402
from fabric_jax.topology import leaf_spine  # noqa: E402

BINS = np.array([0.1, 0.3, 0.5, 0.7, 0.9])


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def hit(ranking, planted, k):
    return bool(set(planted) <= set(int(x) for x in ranking[:k + len(planted) - 1]))


def summarise(rows, method):
    sev = np.array([r["severity"] for r in rows])
    t1 = np.array([r[method]["top1"] for r in rows])
    t5 = np.array([r[method]["top5"] for r in rows])
    curve = dict(severity=[], top1=[], n=[])
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        m = (sev >= lo) & (sev < hi)
        curve["severity"].append(float((lo + hi) / 2))
        curve["top1"].append(float(t1[m].mean()) if m.any() else float("nan"))
        curve["n"].append(int(m.sum()))
    smallest = None
    for i in range(len(curve["top1"]) - 1, -1, -1):
        if curve["n"][i] and curve["top1"][i] >= 0.95:
            smallest = float(BINS[i])
        else:
            break
    return dict(top1=float(t1.mean()), top5=float(t5.mean()), curve=curve,
                smallest_95=smallest,
                wall_median=float(np.median([r[method]["wall"] for r in rows])))


def _fmt(x, digits=2):
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def twin_sizes(prob) -> np.ndarray:
    """``[links]`` how many links carry exactly the same flows with the same (nominal)
    split weights as each link: a fault on one of them changes the flow times as on any
    other, so from flow times alone top-1 is at best ``1 / size`` and top-5 ``min(1, 5 /
    size)`` (links no flow crosses: 0)."""
    key = prob.e_flow.astype(np.int64) * prob.n_links + prob.e_link
    uniq, inv = np.unique(key, return_inverse=True)
    w = np.zeros(uniq.size)
    np.add.at(w, inv, prob.split0[prob.e_flow, prob.e_path])
    sig = {}
    for k, ww in zip(uniq, w):
        sig.setdefault(int(k % prob.n_links), []).append((int(k // prob.n_links),
                                                          round(float(ww), 6)))
    sig = {l: tuple(v) for l, v in sig.items()}
    count = {}
    for v in sig.values():
        count[v] = count.get(v, 0) + 1
    out = np.zeros(prob.n_links, int)
    for l, v in sig.items():
        out[l] = count[v]
    return out


def ceiling(data, routing) -> tuple:
    """Mean flow-time ceiling ``(top-1, top-5)`` over the single faults of a routing's
    cases (:func:`twin_sizes` at the results' fabric and seed)."""
    d = data["results"][routing]
    single = [r for r in next(iter(d["cases"].values()), []) if r["kind"] == "single"]
    if not single:
        return None
    topo = leaf_spine(32, 8, 32, fabric_gbps=1600)
    wl = L.diagnostic_workload(topo.n_hosts, shifts=2, hosts_per_leaf=32)
    size = twin_sizes(L.locate_problem(topo, wl, routing=routing, seed=data.get("seed", 0)))
    c = np.array([size[r["links"][0]] for r in single], float)
    return float(np.mean(1 / c)), float(np.mean(np.minimum(1, 5 / c)))


def table(paths) -> str:
    """Markdown table (docs/tuning.md) of the summaries in results files ``paths``."""
    head = ("| routing | method | observations | top-1 | top-5 | smallest degradation at "
            "95 % top-1 | two faults top-1 / top-5 | false positives (no fault) | "
            "cases (single / two / clean) | median wall per case |\n"
            + "|---" * 10 + "|\n")
    rows, lossy = [], []
    for path in paths:
        data = json.loads(Path(path).read_text())
        for routing, d in data["results"].items():
            n = {k: sum(r["kind"] == k for r in next(iter(d["cases"].values()), []))
                 for k in ("single", "double", "clean")}
            for key, s in d["summary"].items():
                method, obs = key.split(" (")
                obs = obs.rstrip(")").replace("+counters", " + port counters").replace(
                    "flows", "flow times")
                if "top1" in s:
                    small = s.get("smallest_95")
                    fp = s.get("false_positive")
                    fps = "n/a" if fp is None else f"{round(fp * n['clean'])} / {n['clean']}"
                    rows.append(
                        f"| {routing} | {method} | {obs} | {_fmt(s['top1'])} | "
                        f"{_fmt(s['top5'])} | {'none' if small is None else _fmt(small, 1)} | "
                        f"{_fmt(s.get('double_top1'))} / {_fmt(s.get('double_top5'))} | "
                        f"{fps} | {n['single']} / {n['double']} / {n['clean']} | "
                        f"{s['wall_median']:.1f} s |")
            for key, s in d.get("lossy", {}).items():
                method, obs = key.split(" (")
                obs = obs.rstrip(")").replace("+counters", " + port counters (with drops)"
                                              ).replace("flows", "flow times")
                lossy.append(f"| {routing} | {method} | {obs} | " + " | ".join(
                    f"{_fmt(v['top1'])} / {_fmt(v['top5'])} / {_fmt(v['reported'])} (n = "
                    f"{v['n']})" for _, v in sorted(s.items(), reverse=True)) + " |")
    out = head + "\n".join(rows) + "\n"
    ceil = [(r, ceiling(json.loads(Path(path).read_text()), r)) for path in paths
            for r in json.loads(Path(path).read_text())["results"]]
    ceil = [(r, c) for r, c in ceil if c is not None]
    if ceil:
        out += ("\nBest possible from flow times alone (a fault on a twin link, one that "
                "carries the same flows with the same split, gives the same flow times; "
                "mean over the single faults, top-1 / top-5): " + "; ".join(
                    f"{r} {c[0]:.2f} / {c[1]:.2f}" for r, c in ceil) + ".\n")
    if lossy:
        levels = sorted({lv for path in paths for d in json.loads(Path(path).read_text())[
            "results"].values() for s in d.get("lossy", {}).values() for lv in s},
            reverse=True)
        out += ("\nLossy links (top-1 / top-5 / reported):\n\n| routing | method | observations"
                " | " + " | ".join(f"loss {float(lv) * 100:g} %" for lv in levels) + " |\n"
                + "|---" * (3 + len(levels)) + "|\n" + "\n".join(lossy) + "\n")
    return out


def run_lossy(prob, fabric, args, rng):
    """Seeded lossy links, located with a loss per link; ``{method (obs): {level: ...}}``."""
    levels = [float(x) for x in args.loss_levels.split(",")]
    planted = [(p, int(rng.choice(fabric))) for p in levels for _ in range(args.lossy)]
    out = {}
    for mode in ("flows", "flows+counters"):
        obs_all = []
        for i, (p, link) in enumerate(planted):
            loss = np.zeros(prob.n_links)
            loss[link] = p
            obs_all.append(L.observe(prob, np.ones(prob.n_links), noise=args.noise,
                                     seed=5000 + i, counters=mode == "flows+counters",
                                     loss=loss))
        grads = []
        for b in range(0, len(obs_all), args.batch):
            grads += L.locate_batch(prob, obs_all[b:b + args.batch], lossy=True)
        methods = {"gradient": grads}
        if mode == "flows":
            methods["tomography"] = [L.tomography(prob, o) for o in obs_all]
            methods["vote"] = [L.vote_count(prob, o) for o in obs_all]
        for name, results in methods.items():
            per = {}
            for (p, link), r in zip(planted, results):
                per.setdefault(str(p), []).append((hit(r.ranking, [link], 1),
                                                   hit(r.ranking, [link], 5), bool(r.fault)))
            out[f"{name} ({mode})"] = {
                lv: dict(top1=float(np.mean([h[0] for h in v])),
                         top5=float(np.mean([h[1] for h in v])),
                         reported=float(np.mean([h[2] for h in v])), n=len(v))
                for lv, v in per.items()}
            log(f"lossy {name} ({mode}): " + ", ".join(
                f"loss {lv}: top1 {d['top1']:.2f} top5 {d['top5']:.2f} reported "
                f"{d['reported']:.2f}" for lv, d in out[f"{name} ({mode})"].items()))
    return out


def main(argv=None):
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--faults", type=int, default=100)
    ap.add_argument("--two", type=int, default=30)
    ap.add_argument("--clean", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--routings", default="ecmp,spray,adaptive")
    ap.add_argument("--batch", type=int, default=35, help="observations per vmap batch")
    ap.add_argument("--lossy", type=int, default=0,
                    help="lossy-link cases per loss level (default 0)")
    ap.add_argument("--loss-levels", default="0.015,0.005",
                    help="comma-separated loss fractions of the lossy cases")
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="print the markdown table of these results files and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table), end="")
        if args.plots:
            curves = {f"{r}, {k}": v["curve"] for path in args.table
                      for r, d in json.loads(Path(path).read_text())["results"].items()
                      for k, v in d["summary"].items()
                      if k.startswith(("gradient", "tomography")) and "curve" in v}
            print(accuracy_figure(curves, Path(args.plots) / "locate_accuracy.png",
                                  title="1,024 hosts, noise 2 %"))
        return None
    if args.quick:
        args.faults, args.two, args.clean = 4, 2, 2
    topo = leaf_spine(32, 8, 32, fabric_gbps=1600)
    wl = L.diagnostic_workload(topo.n_hosts, shifts=2, hosts_per_leaf=32)
    is_host = np.asarray(topo.node_is_host)
    fabric = np.flatnonzero(~is_host[topo.link_src] & ~is_host[topo.link_dst])
    out = dict(hosts=int(topo.n_hosts), links=int(topo.n_links), fabric_links=int(fabric.size),
               seed=args.seed,
               flows=int(wl[0].size), noise=args.noise, faults=args.faults, two=args.two,
               clean=args.clean, lossy=args.lossy, loss_levels=args.loss_levels, results={})
    for routing in args.routings.split(","):
        t0 = time.perf_counter()
        prob = L.locate_problem(topo, wl, routing=routing, seed=args.seed)
        rng = np.random.default_rng(args.seed)
        res = {"flows": [], "flows+counters": []}
        cases = [("single", 1)] * args.faults + [("double", 2)] * args.two \
            + [("clean", 0)] * args.clean
        planted = []
        for i, (kind, m) in enumerate(cases):
            links = rng.choice(fabric, size=m, replace=False) if m else np.zeros(0, int)
            factors = rng.uniform(0.1, 0.9, size=m)
            planted.append((kind, m, links, factors))
        for mode in (res if cases else ()):
            obs_all, rows = [], []
            for i, (kind, m, links, factors) in enumerate(planted):
                phi = np.ones(prob.n_links)
                phi[links] = factors
                obs = L.observe(prob, phi, noise=args.noise, seed=1000 + i,
                                counters=mode == "flows+counters")
                obs_all.append(obs)
                rows.append(dict(kind=kind, links=links.tolist(), factors=factors.tolist(),
                                 severity=float(1 - factors.min()) if m else 0.0))
            log(f"{routing} ({mode}): {len(obs_all)} observations")
            grads = []
            for b in range(0, len(obs_all), args.batch):
                grads += L.locate_batch(prob, obs_all[b:b + args.batch])
            log(f"{routing} ({mode}): gradient done ({grads[0].wall_time:.2f} s per case)")
            for i, (row, obs, g) in enumerate(zip(rows, obs_all, grads)):
                links, m = planted[i][2], planted[i][1]
                methods = [("gradient", g)]
                if mode == "flows":
                    methods += [("tomography", L.tomography(prob, obs)),
                                ("vote", L.vote_count(prob, obs))]
                for name, r in methods:
                    row[name] = dict(top1=hit(r.ranking, links, 1) if m else None,
                                     top5=hit(r.ranking, links, 5) if m else None,
                                     fault=bool(r.fault), wall=r.wall_time,
                                     confidence=r.confidence, top=r.top(3))
                res[mode].append(row)
        summary = {}
        for mode, rows in (res.items() if cases else ()):
            single = [r for r in rows if r["kind"] == "single"]
            double = [r for r in rows if r["kind"] == "double"]
            clean = [r for r in rows if r["kind"] == "clean"]
            for method in ("gradient", "tomography", "vote"):
                if method not in rows[0]:
                    continue
                s = summarise(single, method) if single else {}
                if double:
                    s["double_top1"] = float(np.mean([r[method]["top1"] for r in double]))
                    s["double_top5"] = float(np.mean([r[method]["top5"] for r in double]))
                if clean:
                    s["false_positive"] = float(np.mean([r[method]["fault"] for r in clean]))
                summary[f"{method} ({mode})"] = s
                log(f"{routing} {method} ({mode}): top1 {s.get('top1', np.nan):.2f} top5 "
                    f"{s.get('top5', np.nan):.2f} two-fault top1 "
                    f"{s.get('double_top1', np.nan):.2f} FP {s.get('false_positive', np.nan):.2f}"
                    f" smallest@95% {s.get('smallest_95')} median {s.get('wall_median', 0):.2f} s")
        out["results"][routing] = dict(summary=summary, cases=res if cases else {},
                                       wall_time=time.perf_counter() - t0)
        if args.lossy:
            out["results"][routing]["lossy"] = run_lossy(prob, fabric, args, rng)
            out["results"][routing]["wall_time"] = time.perf_counter() - t0
        write_json(args.json or "results/locate.json", out, started=started,
                   inputs=vars(args))
    if args.plots:
        curves = {f"{r}, {k}": v["curve"] for r, d in out["results"].items()
                  for k, v in d["summary"].items() if k.startswith("gradient") and "curve" in v}
        accuracy_figure(curves, Path(args.plots) / "locate_accuracy.png",
                        title=f"1,024 hosts, noise {args.noise:g}")
    return out


if __name__ == "__main__":
    main()
