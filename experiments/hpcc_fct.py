"""FCT slowdown by flow size in the HPCC paper's large-scale setting (fluid model).

Setting (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, Sec. 5.1;
the authors' ns-3 simulator [HPCC-NS3], alibaba-edu/High-Precision-Congestion-Control):

* the 320-host fat-tree of ``simulation/mix/fat.txt`` (:func:`fabric_jax.hpcc_fat_tree`,
  or any ns-3 topology file with ``--topology``): 100 Gb/s hosts, 400 Gb/s fabric,
  1 us links, 32 MB per switch, PFC (lossless), per-flow ECMP;
* open-loop Poisson flows from every host to uniformly random other hosts, sizes from
  the WebSearch (DCTCP) or FB_Hadoop CDF of ``traffic_gen/`` (built-in tables
  ``web_search`` / ``hadoop`` of :class:`fabric_jax.workloads.FlowSizeCDF`), at
  ``--load`` of the host links (payload bytes, as the paper defines load);
* with ``--incast`` (default: at 30 % load, as in the paper): incast events, each
  ``--incast-senders`` random hosts sending ``--incast-bytes`` to one random receiver,
  Poisson in time, adding ``--incast-load`` of the total host capacity.  The defaults
  (60 senders x 500 KB, 2 % of the load) are this script's reading of the paper's
  incast, an **assumption** to be checked against its Sec. 5.1 text;
* laws ``dcqcn`` (the [HPCC-NS3] vendor "Mellanox" parameters scaled to 100 Gb/s) and
  ``hpcc`` (eta 0.95, maxStage 0), and any other law of :mod:`fabric_jax.cc` as extra
  rows (``experiments/_hpcc.py``).

Metric (the paper's, [HPCC-NS3] ``scratch/third.cc`` ``qp_finish``): a flow's FCT is
measured at the sender, from its start to the ACK of its last byte, and divided by its
*standalone* FCT ``base RTT + size / line rate`` (``base RTT`` = twice the path's
propagation; the simulator adds one packet's store-and-forward time, which the fluid
model has on neither side).  The fluid run gives the time the last byte reaches the
receiver; ACKs travel in the highest-priority queue (no data queueing), so the ACK
arrives one one-way propagation later: slowdown ``= (fct + L) / (size / line + 2 L)``
(:func:`paper_slowdown`), floored at 1.  Measured flows are sorted by size into 20
equal-count buckets; per bucket the p50/p95/p99 slowdown
(:func:`fabric_jax.metrics.size_buckets`).  Incast flows are reported apart.
``pfc_pause_fraction`` is the mean over links of the fraction of the simulated time
each link was paused.

Windows.  The fabric starts empty, so flows arrive from time 0 but only those arriving
in ``[warm-up, warm-up + window)`` are measured: ``--warmup-ms`` (default 2 ms for
WebSearch: the delivered load reaches the offered 30 % after ~1.5 ms, measured with
``hpcc`` on this fabric) excludes the start-up transient, and arrivals continue through
``--drain-ms`` after the window (so the measured flows that are still running see the
same load to the end) until the horizon ``warm-up + window + drain``.  Measured flows
still running at the horizon are counted in ``n_unfinished`` and enter the buckets
with the lower bound ``(horizon - arrival)`` of their FCT (the percentiles are then
lower bounds).  ``--check-window`` also runs twice the window and reports how much
each percentile moved (relative change per bucket).  Measured (README, WebSearch 30 %,
4 -> 8 ms, independent arrivals): HPCC p50/p95 move by a median 3-5 % per bucket (max
33 % / 23 %), p99 by 16 % (max 74 %); DCQCN's tails move by 20-30 % (max > 2x), so read
single-bucket tails, and DCQCN's above all, as +-25 % or worse.  The 4 ms default
costs 525 s of CPU (both laws, with the incast), 460 s with ``--incast off``
(2026-12-03, after the NIC change of ``fabric_jax.fluid_step._nic_send``).  For FB_Hadoop the 0.5 ms
warm-up is an assumption (its largest flow lasts 0.8 ms at line rate), not measured.

Usage::

    python experiments/hpcc_fct.py --workload web_search --load 0.3 --json ws30.json
    python experiments/hpcc_fct.py --workload fb_hadoop --load 0.5 --cc dcqcn,hpcc,swift
    python experiments/hpcc_fct.py --check-window --plots figs/
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import table
from experiments._common import check_positive, finish, parser, plots_dir
from experiments._hpcc import ecmp_incidence, parse_laws, run_fluid

import fabric_jax as fj  # noqa: E402
from fabric_jax import metrics  # noqa: E402
from fabric_jax.units import gbps  # noqa: E402
from fabric_jax.workloads import FlowSizeCDF, poisson_background  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

#: ``--workload`` name -> built-in FlowSizeCDF table (HPCC ``traffic_gen/`` files).
WORKLOADS = {"web_search": "web_search", "fb_hadoop": "hadoop"}
#: Default measured arrival window per workload, ms (see the module docstring).
DEFAULT_WINDOW_MS = {"web_search": 4.0, "fb_hadoop": 0.5}
#: Default warm-up (arrivals not measured) per workload, ms (see the module docstring).
DEFAULT_WARMUP_MS = {"web_search": 2.0, "fb_hadoop": 0.5}
N_BUCKETS = 20
QUANTILES = (50.0, 95.0, 99.0)

#: What the HPCC paper and its authors' results page state in text about these
#: figures (the numbers themselves are only in plotted figures).  Sources: Li et al.,
#: SIGCOMM 2019, abstract and Sec. 5.3 (Fig. 11: FCT slowdown vs flow size, p50/p95/
#: p99, WebSearch and FB_Hadoop, 30 % and 50 % load); hpcc-group.github.io/results.html.
PAPER_CLAIMS = (
    "HPCC shortens flow completion times by up to 95 % compared to DCQCN (abstract).",
    "At 30 % load the 50th-percentile slowdowns are similar across schemes; HPCC improves "
    "flows < 200 KB mostly at the tail (p95/p99) (results page, WebSearch 30 %).",
    "At 50 % load HPCC improves short flows even at the 50th percentile (results page).",
    "HPCC can be slower for the longest flows (> 6 MB) because it keeps queues near zero "
    "(results page, 70 % load).",
)


#: Published packet-level values, read by eye (about +-10 %, log axes) off the HPCC
#: authors' results page (hpcc-group.github.io/results.html; repository
#: hpcc-group/hpcc-group.github.io, figs/fct_{wb,fb}{30,50}_{50,95,99}pct.png): ns-3,
#: "same topology and configurations of CC schemes as those in the paper", HPCC with
#: eta = 99 % (PINT; HPCC-INT is within a few % below 1 MB) and DCQCN+w (DCQCN with a
#: window cap, the paper's improved DCQCN; plain DCQCN is worse in the paper's Fig. 11).
#: ``(workload, load, percentile) -> {size_bytes: {law: slowdown}}`` at the bucket whose
#: upper bound is nearest ``size_bytes``.
PUBLISHED = {
    ("web_search", 0.3, "p50"): {
        5e3: {"hpcc": 1.0, "dcqcn": 1.0}, 73e3: {"hpcc": 1.3, "dcqcn": 1.35},
        200e3: {"hpcc": 1.5, "dcqcn": 1.55}, 1e6: {"hpcc": 1.8, "dcqcn": 1.85},
        30e6: {"hpcc": 1.9, "dcqcn": 1.85}},
    ("web_search", 0.3, "p95"): {
        5e3: {"hpcc": 1.25, "dcqcn": 3.0}, 73e3: {"hpcc": 2.0, "dcqcn": 2.85},
        200e3: {"hpcc": 2.5, "dcqcn": 3.2}, 1e6: {"hpcc": 3.4, "dcqcn": 3.7},
        30e6: {"hpcc": 3.6, "dcqcn": 3.2}},
    ("web_search", 0.3, "p99"): {
        5e3: {"hpcc": 1.7, "dcqcn": 4.4}, 73e3: {"hpcc": 2.6, "dcqcn": 3.7},
        200e3: {"hpcc": 3.3, "dcqcn": 4.0}, 1e6: {"hpcc": 4.7, "dcqcn": 6.1},
        30e6: {"hpcc": 4.8, "dcqcn": 4.1}},
    ("web_search", 0.5, "p95"): {
        5e3: {"hpcc": 1.5, "dcqcn": 4.7}, 73e3: {"hpcc": 3.0, "dcqcn": 4.5},
        200e3: {"hpcc": 4.0, "dcqcn": 5.0}, 1e6: {"hpcc": 5.7, "dcqcn": 7.9},
        30e6: {"hpcc": 7.6, "dcqcn": 6.0}},
    ("fb_hadoop", 0.3, "p95"): {
        1e3: {"hpcc": 1.5, "dcqcn": 2.8}, 120e3: {"hpcc": 2.3, "dcqcn": 2.8},
        10e6: {"hpcc": 3.9, "dcqcn": 3.5}},
    ("fb_hadoop", 0.3, "p99"): {
        1e3: {"hpcc": 2.1, "dcqcn": 4.2}, 120e3: {"hpcc": 2.9, "dcqcn": 3.6},
        10e6: {"hpcc": 5.6, "dcqcn": 4.3}},
}


def side_by_side(results: dict, workload: str, load: float) -> list[dict]:
    """Rows ``{percentile, size, law, published, fluid}`` where a published value exists."""
    rows = []
    for (wl, ld, key), points in PUBLISHED.items():
        if wl != workload or abs(ld - load) > 1e-9:
            continue
        for size, laws in points.items():
            for law, pub in laws.items():
                if law not in results:
                    continue
                buckets = results[law]["buckets"]
                ups = np.array([b["size_max_bytes"] for b in buckets])
                b = buckets[int(np.argmin(np.abs(np.log(ups / size))))]
                rows.append({"pct": key, "size": _fmt_size(size), "law": law,
                             "published": pub, "fluid": round(b[key], 2),
                             "bucket_max": _fmt_size(b["size_max_bytes"])})
    return rows


def paper_slowdown(fct, size, line_rate, one_way):
    """FCT slowdown as the HPCC simulator reports it (see the module docstring).

    ``(fct + one_way) / (size / line_rate + 2 one_way)``, floored at 1: the fluid FCT
    (last byte at the receiver) plus the ACK's return, over the standalone FCT ``base
    RTT + size / line rate`` ([HPCC-NS3] ``scratch/third.cc`` ``qp_finish``).

    Args:
      fct: ``[flows]`` fluid FCT (arrival to last byte delivered), s.
      size: ``[flows]`` bytes.
      line_rate: NIC line rate, bytes/s.
      one_way: ``[flows]`` one-way propagation of each flow's path, s.
    """
    lat = np.asarray(one_way, float)
    sd = metrics.slowdown(np.asarray(fct, float) + lat, size, line_rate, 2.0 * lat)
    return np.maximum(np.asarray(sd, float), 1.0)


def incast_events(n_hosts: int, *, senders: int, size: float, load: float,
                  host_rate: float, window: float, seed: int):
    """Poisson incast events over ``window`` adding ``load`` of the total host capacity.

    Event rate ``load * n_hosts * host_rate / (senders * size)``; each picks a receiver
    and ``senders`` distinct other hosts uniformly.  Returns ``(src, dst, size, arrival)``.
    """
    if senders >= n_hosts:
        raise ValueError(f"--incast-senders must be < the number of hosts ({n_hosts}); "
                         f"got {senders}")
    rng = np.random.default_rng([seed, 0x1C])
    rate = load * n_hosts * host_rate / (senders * size)
    n_ev = rng.poisson(rate * window)
    src, dst, arr = [], [], []
    for _ in range(n_ev):  # a handful of events per ms: host-side setup
        recv = int(rng.integers(n_hosts))
        others = np.delete(np.arange(n_hosts), recv)
        src.append(rng.choice(others, senders, replace=False))
        dst.append(np.full(senders, recv))
        arr.append(np.full(senders, rng.uniform(0.0, window)))
    if not n_ev:
        e = np.zeros(0)
        return e.astype(np.int32), e.astype(np.int32), e, e
    src, dst, arr = (np.concatenate(x) for x in (src, dst, arr))
    return src, dst, np.full(src.size, float(size)), arr


def build_flows(topo, workload: str, load: float, horizon: float, *, incast: bool,
                incast_senders: int, incast_bytes: float, incast_load: float,
                host_gbps: float, seed: int, measure=None) -> dict:
    """Background + incast flows arriving over ``[0, horizon)``.

    Returns arrays ``src, dst, size, arrival, is_incast, measured``; ``measured`` marks
    the flows arriving in ``measure = (t0, t1)`` (default: all).
    """
    host_rate = gbps(host_gbps)
    bg = poisson_background(topo.n_hosts, load, host_rate, WORKLOADS[workload], horizon,
                            seed=seed)
    parts = [(bg.src, bg.dst, bg.size, bg.arrival, np.zeros(bg.n_flows, bool))]
    if incast:
        s, d, z, a = incast_events(topo.n_hosts, senders=incast_senders, size=incast_bytes,
                                   load=incast_load, host_rate=host_rate, window=horizon,
                                   seed=seed)
        parts.append((s, d, z, a, np.ones(s.size, bool)))
    src, dst, size, arr, inc = (np.concatenate(x) for x in zip(*parts))
    order = np.argsort(arr, kind="stable")
    keep = size[order] > 0  # the CDFs start at 0 B: a zero-byte flow has no FCT to compare
    order = order[keep]
    arr = arr[order]
    t0, t1 = (0.0, np.inf) if measure is None else measure
    return dict(src=src[order].astype(np.int32), dst=dst[order].astype(np.int32),
                size=size[order], arrival=arr, is_incast=inc[order],
                measured=(arr >= t0) & (arr < t1))


def simulate(topo, flows: dict, laws, *, dt: float, horizon: float, host_gbps: float,
             seed: int, max_active: int | None = None) -> dict:
    """Runs every law on ``flows``; returns per-law buckets (measured flows), pauses and
    counts."""
    inc, latency = ecmp_incidence(topo, flows["src"], flows["dst"], seed=seed)
    n_steps = int(math.ceil(horizon / dt))
    size = flows["size"]
    line = gbps(host_gbps)
    meas = flows.get("measured", np.ones(size.shape, bool))
    bg = ~flows["is_incast"] & meas
    isel = flows["is_incast"] & meas
    out = {}
    bar = Progress(len(laws), label="hpcc_fct")
    for law in laws:
        t0 = time.perf_counter()
        res = run_fluid(topo, inc, latency, size, law=law, link_gbps=host_gbps, dt=dt,
                        n_steps=n_steps, arrival=flows["arrival"], max_active=max_active)
        bar.update(law)
        fct = np.asarray(res.fct, float)
        done = np.isfinite(fct)
        # a flow still running at the horizon took at least (horizon - arrival): its
        # slowdown enters the buckets as that lower bound, so unfinished flows make the
        # percentiles lower bounds rather than silently better
        fct = np.where(done, fct, n_steps * dt - flows["arrival"])
        sd = paper_slowdown(fct, size, line, latency)
        entry = {
            "buckets": metrics.size_buckets(sd[bg], size[bg], N_BUCKETS, QUANTILES),
            "pfc_pause_fraction": float(np.asarray(res.info.paused_time).sum()
                                        / (topo.n_links * n_steps * dt)),
            "n_flows": int(bg.sum()), "n_unfinished": int((bg & ~done).sum()),
            "n_simulated": int(size.size),
            "overall": {f"p{q:g}": float(v) for q, v in
                        zip(QUANTILES, np.percentile(sd[bg], QUANTILES))},
            "wall_s": time.perf_counter() - t0,
        }
        if flows["is_incast"].any():
            entry["incast"] = {"n_flows": int(isel.sum()),
                               "n_unfinished": int((isel & ~done).sum())}
            if isel.any():
                entry["incast"].update({f"p{q:g}": float(v) for q, v in
                                        zip(QUANTILES, np.percentile(sd[isel], QUANTILES))})
        out[law] = entry
    return out


def window_change(short: dict, long: dict) -> dict:
    """Per law and percentile: median and max over buckets of ``|long/short - 1|``."""
    res = {}
    for law in short:
        res[law] = {}
        for q in QUANTILES:
            key = f"p{q:g}"
            a = np.array([b[key] for b in short[law]["buckets"]])
            b = np.array([b[key] for b in long[law]["buckets"]])
            rel = np.abs(b / a - 1.0)
            res[law][key] = {"median_rel_change": float(np.median(rel)),
                             "max_rel_change": float(rel.max())}
    return res


def figure(results: dict, path) -> str:
    """Paper-style figure: slowdown vs flow size (bucket), p50/p95/p99, one line per law."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fabric_jax.plots import save_figure
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, q in zip(axes, QUANTILES):
        key = f"p{q:g}"
        for i, (law, r) in enumerate(results["results"].items()):
            ys = [b[key] for b in r["buckets"]]
            ax.plot(np.arange(len(ys)), ys, marker="o", ms=3, color=f"C{i}", label=law)
            ups = np.array([b["size_max_bytes"] for b in r["buckets"]])
            pub = PUBLISHED.get((results["workload"], results["load"], key), {})
            pts = [(int(np.argmin(np.abs(np.log(ups / sz)))), v[law])
                   for sz, v in pub.items() if law in v]
            if pts:
                xs, vs = zip(*pts)
                ax.scatter(xs, vs, marker="x", s=60, color=f"C{i}",
                           label=f"{law} published (ns-3)")
        labels = [_fmt_size(b["size_max_bytes"])
                  for b in next(iter(results["results"].values()))["buckets"]]
        ax.set_xticks(np.arange(len(labels)))
        ax.set_xticklabels(labels, rotation=60, fontsize=7)
        ax.set_yscale("log")
        ax.set(xlabel="flow size (bucket upper bound)", ylabel=f"{key} FCT slowdown",
               title=f"{results['workload']} {results['load']:.0%} load: {key}")
        ax.legend()
    return save_figure(fig, path)


def _fmt_size(b: float) -> str:
    for unit, f in (("M", 1e6), ("K", 1e3)):
        if b >= f:
            return f"{b / f:.3g}{unit}"
    return f"{b:.0f}"


def main(argv=None) -> dict:
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="web_search")
    ap.add_argument("--load", type=float, default=0.3,
                    help="background load of the host links (default 0.3)")
    ap.add_argument("--cc", default="dcqcn,hpcc", help="comma-separated laws "
                    "(default dcqcn,hpcc; e.g. dcqcn,hpcc,swift,nscc)")
    ap.add_argument("--window-ms", type=float, default=None,
                    help="measured arrival window, ms (default 4 for web_search, 0.5 for "
                         "fb_hadoop)")
    ap.add_argument("--warmup-ms", type=float, default=None,
                    help="arrivals before the window, not measured, ms (default 2 for "
                         "web_search, 0.5 for fb_hadoop; 0 with --quick)")
    ap.add_argument("--drain-ms", type=float, default=None,
                    help="simulated time after the window, arrivals continuing (default "
                         "2 x largest flow / line rate + 0.5 ms)")
    ap.add_argument("--dt-us", type=float, default=1.0, help="fluid step (default 1 us)")
    ap.add_argument("--incast", choices=("auto", "on", "off"), default="auto",
                    help="add the paper's incast (auto: at load <= 0.3)")
    ap.add_argument("--incast-senders", type=int, default=60)
    ap.add_argument("--incast-bytes", type=float, default=500e3)
    ap.add_argument("--incast-load", type=float, default=0.02)
    ap.add_argument("--topology", default=None, metavar="PATH",
                    help="ns-3 topology file (default: the built-in HPCC 320-host fat-tree)")
    ap.add_argument("--host-gbps", type=float, default=100.0, help="NIC line rate")
    ap.add_argument("--max-active", type=int, default=None,
                    help="run on this many flow slots (fabric_jax.simulate_fluid_windowed: "
                         "same results, cost follows concurrency; default: plain engine)")
    ap.add_argument("--check-window", action="store_true",
                    help="also run twice the window and report the percentile changes")
    args = ap.parse_args(argv)
    if args.warmup_ms is not None and not (math.isfinite(args.warmup_ms)
                                           and args.warmup_ms >= 0):
        ap.error(f"--warmup-ms must be >= 0; got {args.warmup_ms!r}")
    check_positive(ap, load=args.load, window_ms=args.window_ms, drain_ms=args.drain_ms,
                   dt_us=args.dt_us, incast_senders=args.incast_senders,
                   incast_bytes=args.incast_bytes, incast_load=args.incast_load,
                   host_gbps=args.host_gbps)
    if args.load >= 1:
        ap.error(f"--load must be < 1 (a fraction of the host link); got {args.load}")
    try:
        laws = parse_laws(args.cc)
    except ValueError as exc:
        ap.error(str(exc))
    topo = (fj.from_ns3_topology(args.topology) if args.topology
            else fj.hpcc_fat_tree(host_gbps=args.host_gbps))
    window_ms = args.window_ms or (0.1 if args.quick else DEFAULT_WINDOW_MS[args.workload])
    warmup_ms = (args.warmup_ms if args.warmup_ms is not None
                 else 0.0 if args.quick else DEFAULT_WARMUP_MS[args.workload])
    cdf = FlowSizeCDF.builtin(WORKLOADS[args.workload])
    line = gbps(args.host_gbps)
    drain_ms = args.drain_ms or (
        (0.3 if args.quick else 2.0 * float(cdf.sizes.max()) / line * 1e3 + 0.5))
    incast = args.incast == "on" or (args.incast == "auto" and args.load <= 0.3 + 1e-9)
    dt = args.dt_us * 1e-6

    def one(window_s):
        warm = warmup_ms * 1e-3
        horizon = warm + window_s + drain_ms * 1e-3
        flows = build_flows(topo, args.workload, args.load, horizon, incast=incast,
                            incast_senders=args.incast_senders, incast_bytes=args.incast_bytes,
                            incast_load=args.incast_load, host_gbps=args.host_gbps,
                            seed=args.seed, measure=(warm, warm + window_s))
        return simulate(topo, flows, laws, dt=dt, horizon=horizon,
                        host_gbps=args.host_gbps, seed=args.seed, max_active=args.max_active)

    t0 = time.perf_counter()
    results = one(window_ms * 1e-3)
    out = {"workload": args.workload, "load": args.load, "results": results,
           "topology": topo.name, "n_hosts": topo.n_hosts, "window_ms": window_ms,
           "warmup_ms": warmup_ms, "drain_ms": drain_ms,
           "simulated_ms": warmup_ms + window_ms + drain_ms, "dt_us": args.dt_us,
           "slowdown": "(fct + one-way) / (size / line rate + base RTT), [HPCC-NS3] qp_finish",
           "incast": ({"senders": args.incast_senders, "bytes": args.incast_bytes,
                       "load": args.incast_load} if incast else None),
           "paper_claims": list(PAPER_CLAIMS)}
    if args.check_window:
        doubled = one(2 * window_ms * 1e-3)
        out["window_check"] = {"window_ms": [window_ms, 2 * window_ms],
                               "doubled": doubled,
                               "change": window_change(results, doubled)}
    out["wall_s"] = time.perf_counter() - t0
    rows = []
    for law, r in results.items():
        for i, b in enumerate(r["buckets"]):
            row = {"law": law, "bucket": i, "size_max": _fmt_size(b["size_max_bytes"]),
                   "n": b["n_flows"], "p50": b["p50"], "p95": b["p95"], "p99": b["p99"]}
            if args.check_window:
                d = out["window_check"]["doubled"][law]["buckets"][i]
                row.update({"n 2W": d["n_flows"], "p50 2W": d["p50"], "p95 2W": d["p95"],
                            "p99 2W": d["p99"]})
            rows.append(row)
    summary = [{"law": law, "flows": r["n_flows"], "unfinished": r["n_unfinished"],
                "p50": r["overall"]["p50"], "p95": r["overall"]["p95"],
                "p99": r["overall"]["p99"], "pfc_pause_fraction": r["pfc_pause_fraction"],
                "incast p99": r.get("incast", {}).get("p99"), "wall_s": r["wall_s"]}
               for law, r in results.items()]
    print(table(summary, list(summary[0])))
    if args.check_window:
        crow = [{"law": law, **{f"{k} med/max": f"{v['median_rel_change']:.1%}/"
                                f"{v['max_rel_change']:.1%}" for k, v in ch.items()}}
                for law, ch in out["window_check"]["change"].items()]
        print(f"percentile change when the window doubles ({window_ms:g} -> "
              f"{2 * window_ms:g} ms), per bucket:")
        print(table(crow, list(crow[0])))
    # the published curves (results page) carry no incast: compare only like with like
    comp = [] if incast else side_by_side(results, args.workload, args.load)
    out["published_comparison"] = comp
    if incast and any(k[:2] == (args.workload, args.load) for k in PUBLISHED):
        print("(published values are without incast: rerun with --incast off to compare)")
    if comp:
        print("published packet-level values (ns-3, HPCC results page; dcqcn = DCQCN+w) "
              "vs this fluid run:")
        print(table(comp, list(comp[0])))
    pdir = plots_dir(args)
    if pdir is not None:
        out["figure"] = figure(out, pdir / f"hpcc_fct_{args.workload}_{args.load:g}.png")
    return finish(out, args, rows, list(rows[0]),
                  title=f"HPCC setting: {args.workload} at {args.load:.0%} load"
                        f"{' + incast' if incast else ''}, {topo.n_hosts} hosts, measured "
                        f"arrivals over {window_ms:g} ms after {warmup_ms:g} ms warm-up, "
                        f"{out['simulated_ms']:g} ms simulated "
                        f"(dt {args.dt_us:g} us), wall {out['wall_s']:.0f} s", started=started)


if __name__ == "__main__":
    main()
