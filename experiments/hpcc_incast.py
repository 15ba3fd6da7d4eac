"""HPCC's 16-to-1 incast micro-benchmark: queue trajectory and per-flow rate per law.

Setting (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, the
incast micro-benchmark of Sec. 5): 16 senders and one receiver on one switch, every
link 100 Gb/s with 1 us of propagation, 16 long flows starting together at line rate.
The topology is written in the ns-3 format and read with
:func:`fabric_jax.from_ns3_topology` (the same path as a user's own ns-3 file); PFC
with the 32 MB switch buffer split over the 17 ports; laws and parameters as in
``experiments/_hpcc.py`` (DCQCN with the [HPCC-NS3] vendor parameters, HPCC eta 0.95).

Expected (HPCC paper; closed form of the fluid law): HPCC drains the incast queue
within a few RTTs and then holds it near zero while each flow sends at its fair share
``C/16``; its fluid equilibrium is ``U = eta + N R_AI / C`` (``fabric_jax.cc.hpcc``),
i.e. a per-flow rate of ``(eta + N R_AI/C) C/N`` = 0.956 C/16 at 100 Gb/s.  DCQCN
converges too (the flows are symmetric) but holds a standing queue between K_min and
K_max.  Reported per law: the bottleneck queue over time, each flow's sending rate
(the law's rate, not the delivered throughput, which is C/16 for any law while the
link is busy), the mean rate over the last quarter relative to ``C/16``, Jain's index,
the steady queue and the largest queue.  With ``--flow-mb`` the flows are finite and
each law also reports the incast's completion time against the ideal ``N size / C`` +
latency (what a law's rate cut and recovery cost; at 400 Gb/s and 1 us of base RTT this
resolves HPCC's first-order dependence on ``dt / base RTT``, README "Scale sweep").

Usage::

    python experiments/hpcc_incast.py --json incast.json --plots figs/
    python experiments/hpcc_incast.py --cc hpcc,dcqcn,swift --duration-us 2000
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._common import check_positive, finish, parser, plots_dir
from experiments._hpcc import parse_laws, run_fluid

import fabric_jax as fj  # noqa: E402
from fabric_jax import metrics  # noqa: E402
from fabric_jax.fabric_sim import route  # noqa: E402
from fabric_jax.units import gbps  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

#: Laws run by default (the paper's two and one delay-based extra).
DEFAULT_CC = "hpcc,dcqcn,swift"


def star_text(n_senders: int, link_gbps: float, latency_us: float) -> str:
    """ns-3 topology text: hosts ``0..n`` on switch ``n+1`` (host ``n`` receives)."""
    n_hosts = n_senders + 1
    sw = n_hosts
    lines = [f"{n_hosts + 1} 1 {n_hosts}", str(sw)]
    lines += [f"{h} {sw} {link_gbps:g}Gbps {latency_us * 1000:g}ns 0" for h in range(n_hosts)]
    return "\n".join(lines) + "\n"


def run(laws, *, n_senders=16, link_gbps=100.0, latency_us=1.0, duration_us=1000.0,
        dt_us=0.5, n_saves=200, seed=0, flow_bytes=None) -> dict:
    """Simulates the incast under each law; returns the results dict (see module doc).

    ``flow_bytes``: each sender's flow size, bytes (default: long flows that never
    finish).  With it each law's entry also has ``completion_us`` (the last flow's
    finish) and ``completion_over_ideal`` (over ``N size / C`` plus the path's one-way
    latency: the bottleneck busy from the first byte's arrival to the last)."""
    topo = fj.from_ns3_topology(star_text(n_senders, link_gbps, latency_us),
                                name=f"star({n_senders}+1)")
    src = np.arange(n_senders)
    dst = np.full(n_senders, n_senders)
    # One path per pair: host -> switch -> receiver (the ECMP helper is not needed).
    paths, _, inc = route(topo, src, dst, seed=seed, max_paths=1)
    latency = paths.latency(topo)[:, 0]
    bottleneck = topo.link_index(f"s{n_senders + 1}", f"h{n_senders}")
    cap = gbps(link_gbps)
    fair = cap / n_senders
    dt = dt_us * 1e-6
    n_steps = int(round(duration_us / dt_us))
    save_every = max(n_steps // n_saves, 1)
    n_steps = save_every * (n_steps // save_every)
    finite = flow_bytes is not None
    # long flows (default): never finish in the window
    size = np.full(n_senders, float(flow_bytes) if finite else 1e15)
    ideal_s = n_senders * float(flow_bytes) / cap + float(latency[0]) if finite else None
    out = {"n_senders": n_senders, "link_gbps": link_gbps, "latency_us": latency_us,
           "duration_us": n_steps * dt_us, "dt_us": dt_us, "fair_share_gbps": link_gbps / n_senders,
           "laws": {}}
    bar = Progress(len(laws), label="hpcc_incast")
    for law in laws:
        t0 = time.perf_counter()
        res = run_fluid(topo, inc, latency, size, law=law, link_gbps=link_gbps, dt=dt,
                        n_steps=n_steps, save_every=save_every)
        bar.update(law)
        tr = res.trajectory
        t = np.asarray(tr.t)
        rate = np.asarray(tr.rate, float)            # [saves, flows] bytes/s
        thr = np.asarray(tr.throughput, float)
        queue = np.asarray(tr.queue, float)[:, bottleneck]
        tail = t >= t[-1] * 0.75
        mean_rate = rate[tail].mean(axis=0)          # [flows]
        total = rate.sum(axis=1)
        # first time the total sending rate stays within 10 % of C
        ok = np.abs(total / cap - 1.0) <= 0.10
        settled = np.flatnonzero(~ok)
        t_conv = (float(t[settled[-1] + 1]) if settled.size and settled[-1] + 1 < t.size
                  else (float(t[0]) if not settled.size else None))
        out["laws"][law] = {
            "t_us": (t * 1e6).tolist(),
            "queue_bytes": queue.tolist(),
            "rate_gbps": (rate * 8e-9).T.tolist(),   # [flows][saves]
            "throughput_gbps_total": (thr.sum(axis=1) * 8e-9).tolist(),
            "mean_rate_over_fair": float(mean_rate.mean() / fair),
            "max_flow_rate_error": float(np.max(np.abs(mean_rate / fair - 1.0))),
            "jain_index": float(metrics.jain_index(mean_rate)),
            "steady_queue_bytes": float(queue[tail].mean()),
            "max_queue_bytes": float(queue.max()),
            "convergence_time_us": None if t_conv is None else t_conv * 1e6,
            "pfc_pause_fraction": float(np.asarray(res.info.paused_time).sum()
                                        / (topo.n_links * t[-1])),
            "wall_s": time.perf_counter() - t0,
        }
        if finite:
            fin = np.asarray(res.finish, float)
            done = float(fin.max()) if np.all(np.isfinite(fin)) else float("inf")
            out["laws"][law].update(completion_us=done * 1e6,
                                    ideal_completion_us=ideal_s * 1e6,
                                    completion_over_ideal=done / ideal_s)
    return out


def figure(results: dict, path) -> str:
    """Queue (left) and per-flow sending rate (right) against time, one colour per law."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fabric_jax.plots import save_figure
    fig, (ax_q, ax_r) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (law, r) in enumerate(results["laws"].items()):
        t = np.asarray(r["t_us"])
        ax_q.plot(t, np.asarray(r["queue_bytes"]) / 1e3, color=f"C{i}", label=law)
        rates = np.asarray(r["rate_gbps"])
        for j, row in enumerate(rates):
            ax_r.plot(t, row, color=f"C{i}", lw=0.8, alpha=0.6,
                      label=law if j == 0 else None)
    ax_r.axhline(results["fair_share_gbps"], color="k", ls="--", lw=1, label="C/16")
    ax_q.set(xlabel="time (us)", ylabel="bottleneck queue (KB)",
             title=f"{results['n_senders']}-to-1 incast, {results['link_gbps']:g} Gb/s")
    ax_r.set(xlabel="time (us)", ylabel="sending rate per flow (Gb/s)", yscale="log")
    ax_q.legend()
    ax_r.legend()
    return save_figure(fig, path)


def main(argv=None) -> dict:
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--cc", default=DEFAULT_CC,
                    help=f"comma-separated laws (default {DEFAULT_CC})")
    ap.add_argument("--senders", type=int, default=16, help="incast degree (default 16)")
    ap.add_argument("--link-gbps", type=float, default=100.0)
    ap.add_argument("--latency-us", type=float, default=1.0, help="per-link latency")
    ap.add_argument("--duration-us", type=float, default=1000.0)
    ap.add_argument("--dt-us", type=float, default=0.5, help="fluid step (default 0.5 us)")
    ap.add_argument("--flow-mb", type=float, default=None,
                    help="each sender's flow size, MB (default: long flows); adds the "
                         "incast's completion time against N size / C + latency")
    args = ap.parse_args(argv)
    check_positive(ap, senders=args.senders, link_gbps=args.link_gbps,
                   duration_us=args.duration_us, dt_us=args.dt_us, flow_mb=args.flow_mb)
    try:
        laws = parse_laws(args.cc)
    except ValueError as exc:
        ap.error(str(exc))
    duration = 300.0 if args.quick and args.duration_us == 1000.0 else args.duration_us
    t0 = time.perf_counter()
    res = run(laws, n_senders=args.senders, link_gbps=args.link_gbps,
              latency_us=args.latency_us, duration_us=duration, dt_us=args.dt_us,
              seed=args.seed, flow_bytes=None if args.flow_mb is None else args.flow_mb * 1e6)
    res["wall_s"] = time.perf_counter() - t0
    if args.flow_mb is None:
        rows = [{"law": law, "rate/fair (last 1/4)": r["mean_rate_over_fair"],
                 "max flow err": r["max_flow_rate_error"], "jain": r["jain_index"],
                 "steady queue KB": r["steady_queue_bytes"] / 1e3,
                 "max queue KB": r["max_queue_bytes"] / 1e3,
                 "converged us": r["convergence_time_us"],
                 "pfc pause": r["pfc_pause_fraction"]} for law, r in res["laws"].items()]
    else:   # finite flows: the steady-state columns mean nothing
        rows = [{"law": law, "max queue KB": r["max_queue_bytes"] / 1e3,
                 "pfc pause": r["pfc_pause_fraction"], "completion us": r["completion_us"],
                 "/ideal": r["completion_over_ideal"]} for law, r in res["laws"].items()]
    out = plots_dir(args)
    if out is not None:
        res["figure"] = figure(res, out / "hpcc_incast.png")
    return finish(res, args, rows, list(rows[0]),
                  title=f"{args.senders}-to-1 incast, {args.link_gbps:g} Gb/s, "
                        f"{res['duration_us']:g} us simulated (wall {res['wall_s']:.1f} s)",
                  started=started)


if __name__ == "__main__":
    main()
