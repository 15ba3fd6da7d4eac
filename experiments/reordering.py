"""Out-of-order delivery and go-back-N: goodput per fabric preset with and without a
reordering NIC, and lossy RoCE with go-back-N versus selective resend (issue 14).

Units: bytes, seconds, bytes/s; goodputs are fractions of the line rate.

Model: :mod:`fabric_jax.receiver` (sources there: IRN, Mittal et al. SIGCOMM 2018, for
RoCE go-back-N; Spectrum-X white paper and UEC 1.0 for reordering NICs).

Study 1 -- path-delay spread.  A 400 Gb/s leaf-spine with 2 leaves, 4 spines and one
host per leaf; one long flow (never finishing in the horizon) from leaf 0 to leaf 1,
sprayed evenly over the 4 spines (``routing="spray"`` for every preset, so that only
the receiver differs).  The path through spine ``j`` is ``spread x j / 3`` longer (its
spine downlink), so ``spread`` = max - min path delay.  Each preset runs with its own
congestion control and flow control, with ``reorder=True`` and ``reorder=False``;
goodput is the mean delivered throughput over the second half of the run.  ``theory``
is the receiver model's closed form for a flow at line rate: ``1 - phi`` with ``phi``
the fixed point of :func:`fabric_jax.receiver.discard_fixed_point` at
``P_ooo x C dt / mtu`` events per step and recovery one base RTT.
``roce`` with ``reorder=False`` is the named configuration ``roce(routing="spray")``.
All spread values run as independent copies of the network in one simulation.

Study 2 -- lossy RoCE.  ``roce(flow_control="drop")`` (PFC off, tail drop), ECMP,
DCQCN: a 2-to-1 incast of 1 MB per sender on a 400 Gb/s leaf-spine (2 leaves x 4
hosts, 2 spines), switch buffers swept, ECN thresholds :data:`ECN_KB` below the
smallest buffer; ``loss_recovery="selective"`` vs
``"go_back_n"``.  Goodput = bytes delivered / (last completion, or the 400 us horizon
if unfinished, - one-way latency) / line rate; ``dropped_frac`` and ``discarded_frac``
are bytes dropped / discarded over bytes to send.

Study 3 -- queueing (``--load``, not in the default run): equal-length paths, the
spread comes from queues.  A flow sprayed over 4 spines shares spine 0 with ``k``
pinned elephants (collided ECMP flows), RoCE's DCQCN + PFC, ``reorder`` on / off
(:func:`load_study`).

Usage::

    python experiments/reordering.py                    # default (~1-2 min on 2 cores)
    python experiments/reordering.py --quick --json out.json --plots figs/
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax import receiver as rx  # noqa: E402
from fabric_jax.fabric_sim import simulate_paths  # noqa: E402
from fabric_jax.fabrics import PRESETS, get_fabric  # noqa: E402
from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.routing import make_routing, weighted_ecmp_params  # noqa: E402
from fabric_jax.topology import leaf_spine  # noqa: E402
from fabric_jax.units import MB, US, gbps  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

SPREADS_NS = (0.0, 50.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0)
QUICK_SPREADS_NS = (0.0, 100.0, 200.0)
BUFFERS_KB = (64.0, 128.0, 256.0, 512.0)
#: Study 2's DCQCN ECN thresholds K_min, K_max, KB: below the smallest buffer, so that
#: marks come before tail drops (the line-rate-scaled 400 Gb/s defaults, 1.6 / 6.4 MB,
#: exceed these buffers and would leave DCQCN blind to the congestion).
ECN_KB = (20.0, 60.0)
DT = 1 * US


def spread_study(presets, spreads_ns, *, link_gbps=400.0, n_spines=4, n_steps=200):
    """Study 1: goodput vs path-delay spread per preset, reorder on/off."""
    topo = leaf_spine(2, n_spines, 1, link_gbps=link_gbps, latency_us=1.0)
    ps = shortest_paths(topo, np.array([0]), np.array([1]))
    blocks = len(spreads_ns)
    net, paths = cm.replicate(topo, [ps] * blocks)
    line = gbps(link_gbps)
    rows = []
    bar = Progress(2 * len(presets), label="reordering: spread")
    for name in presets:
        for reorder in (True, False):
            fab = get_fabric(name, routing="spray", reorder=reorder)
            base = fab.link_latency(net)
            lat = base.copy()
            for b, s in enumerate(spreads_ns):
                for j in range(n_spines):
                    lat[paths.links[b, j, 2]] += s * 1e-9 * j / (n_spines - 1)
            t0 = time.perf_counter()
            res = simulate_paths(net, paths, fab, np.full(blocks, 1e9), dt=DT,
                                 n_steps=n_steps, link_latency=lat, nic_rate=line,
                                 save_every=10)
            wall = time.perf_counter() - t0
            bar.update(f"{name}, reorder {'on' if reorder else 'off'}")
            t = np.asarray(res.trajectory.t)
            thr = np.asarray(res.trajectory.throughput, float)[t > n_steps * DT / 2]
            goodput = thr.mean(axis=0) / line
            one_way = np.asarray([lat[paths.links[b, :, :][paths.hop_mask[b]]].sum()
                                  / n_spines for b in range(blocks)])
            theory = _theory(spreads_ns, n_spines, line, one_way) if not reorder else \
                np.ones(blocks)
            for b, s in enumerate(spreads_ns):
                rows.append(dict(preset=name, reorder=reorder, spread_ns=float(s),
                                 goodput=float(goodput[b]), theory=float(theory[b]),
                                 discarded_frac=float(res.discarded[b] / max(
                                     float(res.sent[b]), 1.0)), wall_s=wall))
    return rows


def _theory(spreads_ns, n_spines, line, one_way):
    """Closed form of the receiver model at line rate (module docstring)."""
    s = np.asarray(spreads_ns, float)[:, None] * 1e-9
    delay = s * np.arange(n_spines)[None, :] / (n_spines - 1)
    split = np.full(delay.shape, 1.0 / n_spines)
    p = np.asarray(rx.out_of_order_probability(split, delay, np.full(len(s), line),
                                               rx.DEFAULT_MTU), float)
    phi = np.asarray(rx.discard_fixed_point(p * line * DT / rx.DEFAULT_MTU, DT, 2 * one_way),
                     float)
    return 1.0 - phi


def lossy_study(buffers_kb, *, link_gbps=400.0, size=1 * MB, n_steps=400, fan_in=2):
    """Study 2: lossy RoCE incast, go-back-N vs selective resend, per buffer size."""
    topo = leaf_spine(2, 2, 4, link_gbps=link_gbps, latency_us=1.0)
    ps = shortest_paths(topo, np.arange(fan_in), np.full(fan_in, 4))
    blocks = len(buffers_kb)
    net, paths = cm.replicate(topo, [ps] * blocks)
    buf = np.repeat(np.asarray(buffers_kb, float) * 1e3, topo.n_links)
    line = gbps(link_gbps)
    rows = []
    bar = Progress(2, label="reordering: lossy")
    for lr in ("selective", "go_back_n"):
        fab = get_fabric("roce", flow_control="drop", loss_recovery=lr,
                         cc_options=dict(k_min=ECN_KB[0] * 1e3, k_max=ECN_KB[1] * 1e3))
        res = simulate_paths(net, paths, fab, np.full(paths.n_pairs, size), dt=DT,
                             n_steps=n_steps, nic_rate=line, buffer=buf)
        bar.update(lr)
        per = lambda a: np.asarray(a, float).reshape(blocks, fan_in)  # noqa: E731
        fct = per(res.fct)
        one_way = 4e-6 + 3 * fab.switch_latency + 2 * fab.nic_latency
        for b, kb in enumerate(buffers_kb):
            last = fct[b].max()
            # unfinished: what was delivered within the horizon
            span = last if np.isfinite(last) else n_steps * DT
            rows.append(dict(loss_recovery=lr, buffer_kb=float(kb),
                             goodput=float(per(res.delivered)[b].sum() / (span - one_way)
                                           / line),
                             last_fct_us=float(last * 1e6),
                             dropped_frac=float(per(res.dropped)[b].sum() / (fan_in * size)),
                             discarded_frac=float(per(res.discarded)[b].sum()
                                                  / (fan_in * size))))
    return rows


def load_study(n_elephants=(0, 1, 2, 3), *, link_gbps=400.0, n_steps=300):
    """Study 3 (``--load``): queueing, not cabling, makes the spread.  2 leaves x 4
    spines x 4 hosts at 400 Gb/s (equal path lengths).  Host 0 sprays a long flow over
    the 4 spines to host 4; ``k`` elephants (hosts 1..k -> 5..k+4, long flows) are
    pinned to spine 0 (per-flow hashing that collided).  RoCE's stack (DCQCN, PFC) with
    spraying, ``reorder`` on and off; goodput of the sprayed flow over the second half,
    and the mean queueing-delay spread across its paths there."""
    topo = leaf_spine(2, 4, 4, link_gbps=link_gbps, latency_us=1.0)
    src = np.arange(4)
    ps = shortest_paths(topo, src, src + 4)
    blocks = len(n_elephants)
    net, paths = cm.replicate(topo, [ps] * blocks)
    cap = net.capacity
    line = gbps(link_gbps)
    # flow 0 sprays; flows 1..k are pinned to path 0 (spine 0); the others are idle
    logits = np.full(paths.path_mask.shape, -1e4, np.float32)
    size = np.zeros(paths.n_pairs)
    for b, k in enumerate(n_elephants):
        logits[4 * b, :] = 0.0
        logits[4 * b + 1:4 * b + 4, 0] = 0.0
        size[4 * b] = 1e9
        size[4 * b + 1:4 * b + 1 + k] = 1e9
    size = np.where(size > 0, size, 1.0)   # idle flows: one byte
    rows = []
    for reorder in (True, False):
        fab = get_fabric("roce", routing="weighted_ecmp", reorder=reorder)
        routing = make_routing("weighted_ecmp", paths, weighted_ecmp_params(logits))
        res = simulate_paths(net, paths, fab, size, dt=DT, n_steps=n_steps, nic_rate=line,
                             routing=routing, save_every=10)
        t = np.asarray(res.trajectory.t)
        late = t > n_steps * DT / 2
        thr = np.asarray(res.trajectory.throughput, float)[late]
        qdel = np.asarray(res.trajectory.queue, float)[late] / cap        # [saves, links]
        for b, k in enumerate(n_elephants):
            f = 4 * b
            hops = paths.links[f]                                          # [paths, hops]
            per_path = np.where(paths.hop_mask[f][None], qdel[:, np.maximum(hops, 0)],
                                0.0).sum(axis=2)                           # [saves, paths]
            spread = (per_path.max(axis=1) - per_path.min(axis=1)).mean()
            rows.append(dict(reorder=reorder, elephants=int(k),
                             goodput=float(thr[:, f].mean() / line),
                             queue_spread_ns=float(spread * 1e9),
                             discarded_frac=float(res.discarded[f] / max(float(res.sent[f]),
                                                                          1.0))))
    return rows


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, name in enumerate(dict.fromkeys(r["preset"] for r in rows)):
        for reorder, ls in ((True, "-"), (False, "--")):
            sel = [r for r in rows if r["preset"] == name and r["reorder"] == reorder]
            x = [max(r["spread_ns"], 1.0) for r in sel]
            ax.plot(x, [100 * r["goodput"] for r in sel], ls, marker="o", color=f"C{i}",
                    label=f"{name} reorder={'on' if reorder else 'off'}")
    th = [r for r in rows if not r["reorder"]]
    if th:
        first = th[0]["preset"]
        sel = [r for r in th if r["preset"] == first]
        ax.plot([max(r["spread_ns"], 1.0) for r in sel], [100 * r["theory"] for r in sel],
                "k:", label="closed form (line rate, reorder off)")
    ax.set_xscale("log")
    ax.set_xlabel("path-delay spread max - min, ns (0 plotted at 1)")
    ax.set_ylabel("goodput, % of line rate")
    ax.set_ylim(0, 105)
    ax.set_title("One flow sprayed over 4 spines, 400 Gb/s")
    ax.legend(fontsize=7)
    return save_figure(fig, out / "reordering.png")


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--presets", nargs="*", default=None,
                    help=f"presets for study 1 (default all: {list(PRESETS)}; --quick: roce "
                         "spectrum_x)")
    ap.add_argument("--load", action="store_true",
                    help="also run study 3 (queueing-driven spread, roce with spraying)")
    a = ap.parse_args(argv)
    presets = a.presets or (["roce", "spectrum_x"] if a.quick else list(PRESETS))
    bad = [p for p in presets if p not in PRESETS]
    if bad:
        ap.error(f"--presets: unknown {bad}; accepted: {sorted(PRESETS)}")
    spreads = QUICK_SPREADS_NS if a.quick else SPREADS_NS
    buffers = BUFFERS_KB[:2] if a.quick else BUFFERS_KB
    t0 = time.perf_counter()
    rows = spread_study(presets, spreads)
    lossy = lossy_study(buffers)
    results = dict(spread=rows, lossy=lossy, mtu=rx.DEFAULT_MTU, dt=DT)
    if a.load:
        results["load"] = load_study()
        print("Study 3: sprayed flow vs k elephants pinned to spine 0 (roce stack)")
        print(cm.table(results["load"], ["reorder", "elephants", "goodput",
                                         "queue_spread_ns", "discarded_frac"]))
    results["wall_s"] = time.perf_counter() - t0
    cols = ["preset", "reorder", "spread_ns", "goodput", "theory", "discarded_frac"]
    print("Study 2: lossy RoCE 2-to-1 incast (tail drop, DCQCN), go-back-N vs selective")
    print(cm.table(lossy, ["loss_recovery", "buffer_kb", "goodput", "last_fct_us",
                           "dropped_frac", "discarded_frac"]))
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = [plot(rows, out)]
    return cm.finish(results, a, rows, cols,
                     "Study 1: one flow sprayed over 4 spines (400 Gb/s), goodput / line rate",
                     started=started)


if __name__ == "__main__":
    main()
