"""What adaptive routing knows and when: InfiniBand AR vs Spectrum-X vs flowlets vs ECMP.

Units: bytes, seconds, bytes/s in every array and JSON value (keys with another unit say
so, e.g. ``_us``); effective bandwidth is a fraction of the foreground's line rate.

Fabric.  A 1:1 leaf-spine with 3 leaves, ``--spines`` spines (default 4) and ``2 x
spines`` hosts per leaf, every link ``--link-gbps`` (400 Gb/s), infinite buffers, no
congestion control (``law="none"``: the routing mechanism alone).  The *foreground*:
hosts ``0 .. S-1`` of leaf 0 each send ``--size-mb`` to hosts ``0 .. S-1`` of leaf 1
(a random permutation), routed by the policy under test over the ``S`` spine paths.
The *background* (``S`` flows from leaf 2 to hosts ``S .. 2S-1`` of leaf 1, so no
receiver is shared with the foreground) makes the scenarios:

``remote_congestion``
    Asymmetric congestion two hops away: every background flow is pinned (a single
    candidate path) through spine 0 and together they send ``--bg-load`` (0.75) of a
    link (their NIC line rates), so the downlink spine 0 -> leaf 1 has a quarter of a
    link left.  The foreground's leaf-0 uplinks are all equally loaded: a leaf that
    sees only its own egress queues (``ib_ar``) keeps splitting evenly and a quarter
    of each foreground flow queues behind the background; end-to-end telemetry
    (``spectrum_x_ar``) moves the foreground to spines 1 .. S-1 one RTT later.
    Best case: ``(S - 1 + 1 - bg_load) / S`` of line rate (0.81 for S = 4).
``failed_link``
    The cable leaf 2 <-> spine 0 fails at ``--fail-us`` (``simulate_fluid(faults=)``,
    :mod:`fabric_jax.faults`).  The background (full line rate, routed by the same
    policy) loses its spine-0 path, so the downlinks spine j -> leaf 1, ``j >= 1``,
    carry ``S / (S-1)`` links of background while spine 0 -> leaf 1 carries none: the
    right answer for the foreground is to lean on spine 0, which only telemetry of the
    remote hops shows (CONGA's motivating case: asymmetry created by a failure).  Into
    leaf 1 the offered load is twice the downlink capacity, so the best case is 0.5.
``hot_spot``
    A hot spot behind the spine that moves: half of the background (``--bg-load`` of
    a link) is pinned through spine 0 from 0 to ``--move-us``; the other half, pinned
    through spine 1, starts at ``--move-us`` and outlasts the foreground.  Policies
    with old information keep avoiding spine 0 and keep using spine 1 for their
    information delay after the move.

No congestion control runs, so a queue that forms at a critically loaded downlink
drains only when its offered load drops: bytes sent onto the hot path before the
policy moved away finish last (their drain time is part of the reaction cost).

Policies (:mod:`fabric_jax.routing`): ``ecmp`` (per-flow hash), ``flowlet`` (CONGA,
500 us flowlet timeout: the foreground never pauses, so it never moves),
``ib_ar`` (per-packet, local egress queues only), ``ib_ar_credit`` (the same with
InfiniBand credit flow control and the topology's 1 MB buffers: the only way a
local-only switch learns of remote congestion is the back-pressure that fills its own
egress queue), ``spectrum_x_ar`` (local queues +
remote hops from end-to-end telemetry 4 us old), ``spectrum_x_ar_slow`` (the same with
``--slow-delay-us`` = 40 us of information delay), ``adaptive`` (idealised: every hop,
no delay), ``spray`` (even split, no information).

Metrics (JSON ``scenarios.<scenario>.<policy>``):

``completion_s``
    Completion time of the foreground (its last flow).
``effective_bw``
    ``S x size / completion_s / (S x line rate)``: the foreground's effective bandwidth
    as a fraction of its line rate.
``t99_s`` / ``effective_bw99``
    Time at which 99 % of the foreground's bytes have been delivered, and ``0.99 x
    size / t99_s / line rate`` (less sensitive to the last bytes stuck behind a hot
    queue, which drain at the queue's residual rate).  The figure shows this one.
``bg_completion_s``
    Completion time of the background.
``unfinished``
    Flows not finished within the horizon (should be 0).

Resolution: ``dt`` (``--dt-us``, default 0.5 us) is printed with the table; the
``remote_congestion`` rows of ``ib_ar`` and ``spectrum_x_ar`` are re-run at ``dt / 4``
(columns ``dt4_us``, ``t99_dt4_us``; JSON ``completion_s_dt4``, ``t99_s_dt4`` and
``dt_check``, the relative change of the completion time).  ``t99`` is interpolated
inside the step that crosses 99 %.  Why 0.5 us: per-packet AR reacts to its own egress
queues at once, while the fluid policy sees the queues of the start of the step and
moves its split half-way to the target per microsecond (:data:`fabric_jax.routing.PACKET_GAIN`);
at dt = 1 us that loop over-shoots (1 MB flows, ``spectrum_x_ar``: the split swings
back onto spine 0 in one step and 2 us of line rate join its uplink queue) and
``remote_congestion``'s ``t99`` is 1.58 x ideal against 1.35-1.36 x at dt = 0.5, 0.25
and 0.125 us.  With 2 MB flows dt = 1 us is within 0.4 % in ``t99``.

Measured (default run, seed 0, dt = 0.5 us, 2026-12-03, FIFO queues and per-path
cut-through allocation; ``eff_bw99`` of the foreground; ``ib_ar_credit`` equals
``ib_ar`` to the printed digits)::

    python experiments/adaptive_routing.py      # 108 s wall, 77 s CPU, 2 shared cores

=================== ===== ======= ===== ===== ============= ================== ========
scenario            ecmp  flowlet spray ib_ar spectrum_x_ar spectrum_x_ar_slow adaptive
=================== ===== ======= ===== ===== ============= ================== ========
remote_congestion   0.48  0.48    0.56  0.56  0.78          0.56               0.78
failed_link         0.25  0.25    0.48  0.48  0.53          0.48               0.53
hot_spot            0.31  0.31    0.68  0.68  0.79          0.68               0.78
=================== ===== ======= ===== ===== ============= ================== ========

(best cases: 0.81, 0.5 and 0.81.)  Reading: with congestion two hops away local-only
AR is exactly spraying (it cannot tell the paths apart; its ``t99``, 71.2 us, is the
FIFO closed form: the quarter of the foreground on spine 0 leaves the hot queue at
1/1.75 of its service, ``tests/routing/test_ar_information.py``), telemetry 4 us old gains 41 %
and is as good as the zero-delay idealised router, and 40 us old telemetry is worth
nothing because the 2 MB transfer is over before it arrives.  After the failure
telemetry gains 10 %.  When the hot spot moves, 4 us old telemetry gains 15 % over
local-only (the bytes it sends onto the new hot spot during its delay cost less than
local-only's steady quarter share).  ``ib_ar_credit`` equals ``ib_ar``: the hot queue
never fills the 1 MB credit pool, so no back-pressure reaches the leaf.  ECMP and
flowlets depend on where the hash puts the foreground (seed 0: no foreground flow on
spine 0 in ``remote_congestion``, but two pairs collide on spines 1 and 2, hence 0.48);
flowlet switching never moves a continuous RDMA flow (500 us timeout) and differs from
ECMP only after the failure (it leaves a dead path for the least loaded one).  At dt / 4
= 0.125 us the two checked rows move by <= 0.5 % in completion time (ib_ar 73.57 ->
73.89 us, spectrum_x_ar 53.02 -> 52.76 us) and <= 0.3 % in ``t99`` (71.20 -> 71.20,
50.59 -> 50.75 us); the whole table at dt = 0.125 us (``--dt-us 0.125 --no-dt-check``,
75 s wall): every ``eff_bw99`` within 0.5 %, every completion time within 2.8 %
(``hot_spot`` spectrum_x_ar 54.5 -> 53.0 us).  With ``--quick`` (1 MB flows, the spot
moves at 10 us, dt = 0.5 us, 52 s wall): ``remote_congestion`` ib_ar 0.53 vs
spectrum_x_ar 0.73, ``hot_spot`` 0.64 vs 0.69.

Outputs: a table, ``--json PATH``, and with ``--plots DIR`` ``adaptive_routing.png``
(``effective_bw99`` per policy and scenario, and the foreground throughput over time in
``remote_congestion``).

Usage::

    python experiments/adaptive_routing.py                 # default (~2 min on 2 cores)
    python experiments/adaptive_routing.py --quick         # CI-sized
    python experiments/adaptive_routing.py --json out.json --plots figs/
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax.fluid import simulate_fluid  # noqa: E402
from fabric_jax.fabric_sim import bind_routing  # noqa: E402
from fabric_jax.paths import PathSet, shortest_paths  # noqa: E402
from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.routing import get_policy, make_routing  # noqa: E402
from fabric_jax.topology import leaf_spine  # noqa: E402
from fabric_jax.units import MB, gbps  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

SCENARIOS = ("remote_congestion", "failed_link", "hot_spot")
POLICIES = ("ecmp", "flowlet", "spray", "ib_ar", "ib_ar_credit", "spectrum_x_ar",
            "spectrum_x_ar_slow", "adaptive")
#: Rows re-run at dt / 4 (scenario, policy).
DT_CHECK = (("remote_congestion", "ib_ar"), ("remote_congestion", "spectrum_x_ar"))


def _pin(paths: PathSet, rows, spine_link: np.ndarray) -> PathSet:
    """Restricts flows ``rows`` to their candidate whose hop 1 is ``spine_link[row]``."""
    links, pm, hm = paths.links.copy(), paths.path_mask.copy(), paths.hop_mask.copy()
    npaths = paths.n_paths.copy()
    for r in rows:
        p = int(np.flatnonzero(links[r, :, 1] == spine_link[r])[0])
        keep = links[r, p].copy()
        keep_h = hm[r, p].copy()
        links[r] = -1
        hm[r] = False
        pm[r] = False
        links[r, 0], hm[r, 0], pm[r, 0] = keep, keep_h, True
        npaths[r] = 1
    return PathSet(src=paths.src, dst=paths.dst, links=links, path_mask=pm, hop_mask=hm,
                   n_paths=npaths)


def build(spines: int, seed: int, link_gbps: float):
    """Topology and the unpinned path set: ``S`` foreground then ``S`` background flows."""
    s = spines
    topo = leaf_spine(3, s, 2 * s, link_gbps=link_gbps)
    rng = np.random.default_rng(seed)
    hpl = 2 * s
    fg_src, fg_dst = np.arange(s), hpl + rng.permutation(s)
    bg_src, bg_dst = 2 * hpl + np.arange(s), hpl + s + rng.permutation(s)
    paths = shortest_paths(topo, np.r_[fg_src, bg_src], np.r_[fg_dst, bg_dst], max_paths=s)
    return topo, paths


def scenario(name: str, topo, paths: PathSet, spines: int, *, size, line, bg_load, fail_s,
             move_s):
    """(paths, arrival, size, line_rate, faults) of one scenario; ``faults`` always has
    two events so that every scenario compiles to the same program."""
    s = spines
    n = paths.n_pairs
    bg = np.arange(s, 2 * s)
    up = np.array([topo.link_index("leaf2", f"spine{j}") for j in range(s)])
    cable = np.array([topo.link_index("leaf2", "spine0"), topo.link_index("spine0", "leaf2")])
    arrival = np.zeros(n)
    sizes = np.full(n, size)
    rate = np.full(n, line)
    factor = 1.0
    if name == "remote_congestion":
        paths = _pin(paths, bg, dict(zip(bg, np.full(s, up[0]))))
        rate[bg] = bg_load * line / s
    elif name == "failed_link":
        factor = 0.0
    elif name == "hot_spot":
        half = s // 2
        spine_of = {int(r): up[0] if i < half else up[1] for i, r in enumerate(bg)}
        paths = _pin(paths, bg, spine_of)
        rate[bg[:half]] = bg_load * line / half
        rate[bg[half:]] = bg_load * line / (s - half)
        sizes[bg[:half]] = rate[bg[:half]] * move_s          # ends when the spot moves
        sizes[bg[half:]] = rate[bg[half:]] * 4 * size / line  # outlasts the foreground
        arrival[bg[half:]] = move_s
    else:
        raise ValueError(f"unknown scenario {name!r}")
    faults = [(fail_s, cable, factor), (1.0, cable, 1.0)]
    return paths, arrival, sizes, rate, faults


def _routing(policy: str, paths: PathSet, seed: int, slow_delay_us: float):
    if policy == "ib_ar_credit":
        return make_routing("ib_ar", paths, seed=seed)
    if policy == "spectrum_x_ar_slow":
        pol = get_policy("spectrum_x_ar")
        return make_routing(pol, paths, pol.default_params(info_delay_us=slow_delay_us),
                            seed=seed)
    return make_routing(policy, paths, seed=seed)


def horizon_steps(spines: int, ideal_s: float, move_s: float, dt: float) -> int:
    """Steps of a run: the foreground behind a saturated spine downlink shared with the
    whole background (worst case: 1/(S+1)... of the link), plus the hot spot's start,
    plus 40 us of slack."""
    return int(math.ceil(((spines + 2) * ideal_s + move_s + 40e-6) / dt))


def run_one(policy, topo, paths, arrival, sizes, rate, faults, *, dt, n_steps, seed, spines,
            line, slow_delay_us):
    """One fluid run; foreground / background metrics."""
    r, inc = bind_routing(paths, _routing(policy, paths, seed, slow_delay_us),
                          n_links=topo.n_links)
    n = paths.n_pairs
    t0 = time.perf_counter()
    credit = policy == "ib_ar_credit"
    res = simulate_fluid(inc, topo.capacity, sizes, dt=dt, n_steps=n_steps, routing=r,
                         arrival=arrival, line_rate=rate, faults=faults, latency=np.zeros(n),
                         link_latency=topo.latency, nic_links=topo, save_every=1,
                         flow_control="credit" if credit else "none",
                         buffer=topo.buffer if credit else None)
    finish = np.asarray(res.finish, float)
    wall = time.perf_counter() - t0
    fg = finish[:spines]
    comp = float(fg.max())
    t = np.asarray(res.trajectory.t, float)
    got = np.cumsum(np.asarray(res.trajectory.throughput, float)[:, :spines].sum(axis=1)) * dt
    t99 = t_fraction(t, got, 0.99 * spines * sizes[0], dt)
    hit = np.flatnonzero(np.isfinite([t99]))
    out = dict(completion_s=comp, t99_s=t99,
               effective_bw99=float(0.99 * sizes[0] / t99 / line) if hit.size else 0.0,
               effective_bw=float(spines * sizes[0] / comp / (spines * line))
               if np.isfinite(comp) else 0.0,
               bg_completion_s=float(finish[spines:].max()),
               unfinished=int(np.sum(~np.isfinite(finish))),
               max_residual=float(res.info.max_residual), wall_s=wall)
    thr = np.asarray(res.trajectory.throughput, float)[:, :spines].sum(axis=1)
    return out, (t, thr / (spines * line))


def t_fraction(t, got, target, dt) -> float:
    """Time at which the cumulative delivered bytes ``got`` (at the step ends ``t``)
    reach ``target``, interpolated linearly inside the step that crosses it (the
    trajectory holds each step's mean throughput); ``inf`` if never."""
    hit = np.flatnonzero(got >= target)
    if not hit.size:
        return float("inf")
    i = int(hit[0])
    prev = float(got[i - 1]) if i > 0 else 0.0
    step = float(got[i]) - prev
    frac = (target - prev) / step if step > 0 else 1.0
    return float(t[i] - dt + frac * dt)


def plot(results, traces, out) -> list[str]:
    """Bars: ``effective_bw99`` per scenario and policy; lines: the foreground's
    delivered throughput over time in ``remote_congestion``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    scen = list(results)
    pols = list(results[scen[0]])
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.0, 4.0),
                                  gridspec_kw={"width_ratios": [1.6, 1.0]})
    w = 0.8 / len(pols)
    for i, p in enumerate(pols):
        vals = [100 * results[s][p]["effective_bw99"] for s in scen]
        ax.bar(np.arange(len(scen)) + (i - (len(pols) - 1) / 2) * w, vals, w, label=p,
               color=f"C{i}")
    ax.set_xticks(np.arange(len(scen)), scen)
    ax.set_ylabel("foreground eff. bandwidth\n(99 % of bytes, % of line rate)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    ax.set_title("What adaptive routing knows and when (leaf-spine, 400 Gb/s)")
    for i, p in enumerate(pols):
        if p in traces:
            t, frac = traces[p]
            ax2.plot(t * 1e6, 100 * frac, color=f"C{i}", lw=1.2, label=p)
    ax2.set_xlabel("time (us)")
    ax2.set_ylabel("foreground throughput (% of line rate)")
    ax2.set_ylim(0, 105)
    ax2.set_title("remote_congestion over time")
    t99 = [results["remote_congestion"][p]["t99_s"] for p in pols]
    ax2.set_xlim(0, 1.4e6 * max(v for v in t99 if np.isfinite(v)))
    ax2.legend(fontsize=7)
    return [save_figure(fig, out / "adaptive_routing.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--spines", type=int, default=4, help="spines (default 4)")
    ap.add_argument("--size-mb", type=float, default=2.0, help="bytes per flow, MB (default 2)")
    ap.add_argument("--link-gbps", type=float, default=400.0, help="every link, Gb/s")
    ap.add_argument("--fail-us", type=float, default=5.0, help="failed_link: failure time, us")
    ap.add_argument("--move-us", type=float, default=20.0,
                    help="hot_spot: when the hot spot moves to spine 1, us")
    ap.add_argument("--slow-delay-us", type=float, default=40.0,
                    help="information delay of spectrum_x_ar_slow, us (default 40)")
    ap.add_argument("--bg-load", type=float, default=0.75,
                    help="pinned background per hot downlink, fraction of a link (0.75)")
    ap.add_argument("--dt-us", type=float, default=0.5, help="fluid step, us (default 0.5)")
    ap.add_argument("--no-dt-check", action="store_true", help="skip the dt / 4 re-runs")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"comma-separated subset of {','.join(POLICIES)}")
    a = ap.parse_args(argv)
    pols = [p for p in a.policies.split(",") if p]
    bad = [p for p in pols if p not in POLICIES]
    if bad:
        ap.error(f"--policies: unknown {bad}; choose from {list(POLICIES)}")
    if a.quick:
        pols = [p for p in pols if p in ("ecmp", "flowlet", "ib_ar", "spectrum_x_ar")]
        a.size_mb = min(a.size_mb, 1.0)
        a.move_us = min(a.move_us, 10.0)
        a.no_dt_check = True
    cm.check_positive(ap, spines=a.spines, size_mb=a.size_mb, link_gbps=a.link_gbps,
                      dt_us=a.dt_us, bg_load=a.bg_load, move_us=a.move_us,
                      slow_delay_us=a.slow_delay_us)
    if a.spines < 2:
        ap.error("--spines must be >= 2")
    if a.fail_us < 0:
        ap.error("--fail-us must be >= 0")
    topo, base = build(a.spines, a.seed, a.link_gbps)
    line = gbps(a.link_gbps)
    size = a.size_mb * MB
    dt = a.dt_us * 1e-6
    ideal = size / line
    n_steps = horizon_steps(a.spines, ideal, a.move_us * 1e-6, dt)
    results, rows, traces = {}, [], {}
    kw = dict(seed=a.seed, spines=a.spines, line=line, slow_delay_us=a.slow_delay_us)
    bar = Progress(len(SCENARIOS) * len(pols), label="adaptive_routing")
    for sc in SCENARIOS:
        paths, arrival, sizes, rate, faults = scenario(
            sc, topo, base, a.spines, size=size, line=line, bg_load=a.bg_load,
            fail_s=a.fail_us * 1e-6, move_s=a.move_us * 1e-6)
        results[sc] = {}
        for p in pols:
            r, trace = run_one(p, topo, paths, arrival, sizes, rate, faults, dt=dt,
                               n_steps=n_steps, **kw)
            if sc == "remote_congestion":
                traces[p] = trace
            if not a.no_dt_check and (sc, p) in DT_CHECK:
                r4, _ = run_one(p, topo, paths, arrival, sizes, rate, faults, dt=dt / 4,
                             n_steps=4 * n_steps, **kw)
                r["completion_s_dt4"] = r4["completion_s"]
                r["t99_s_dt4"] = r4["t99_s"]
                r["dt_check"] = abs(r4["completion_s"] / r["completion_s"] - 1.0)
            results[sc][p] = r
            bar.update(f"{sc}: {p}")
            rows.append(dict(scenario=sc, policy=p, completion_us=r["completion_s"] * 1e6,
                             t99_us=r["t99_s"] * 1e6,
                             eff_bw=r["effective_bw"], bg_us=r["bg_completion_s"] * 1e6,
                             eff_bw99=r["effective_bw99"],
                             dt4_us=r.get("completion_s_dt4", float("nan")) * 1e6,
                             t99_dt4_us=r.get("t99_s_dt4", float("nan")) * 1e6,
                             unfinished=r["unfinished"]))
    out = dict(spines=a.spines, size_bytes=size, line_rate=line, dt_s=dt, n_steps=n_steps,
               ideal_s=ideal, fail_s=a.fail_us * 1e-6, move_s=a.move_us * 1e-6,
               slow_delay_s=a.slow_delay_us * 1e-6, scenarios=results)
    pdir = cm.plots_dir(a)
    if pdir is not None:
        out["plots"] = plot(results, traces, pdir)
    cols = ["scenario", "policy", "completion_us", "t99_us", "eff_bw", "eff_bw99", "bg_us",
            "dt4_us", "t99_dt4_us", "unfinished"]
    title = (f"leaf-spine 3 leaves x {a.spines} spines, {a.link_gbps:g} Gb/s, {a.spines} "
             f"foreground flows x {a.size_mb:g} MB (ideal {ideal * 1e6:.1f} us), "
             f"dt = {a.dt_us:g} us (dt4_us: the same row at dt/4)")
    return cm.finish(out, a, rows, cols, title, started=started)


if __name__ == "__main__":
    main()
