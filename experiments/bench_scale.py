"""Scale benchmark: cost of a max-min solve and of a fluid step from 10^3 flows upwards.

Units: seconds, bytes, bytes/s (``_gbs`` keys: 10^9 bytes/s).

Scenario.  A two-tier leaf-spine sized with the flow count (``F / 8`` hosts, 32 hosts per
leaf, 16 spines, 400 Gb/s links): every host sources 8 flows to random other hosts,
each on one random spine (ECMP), so a flow crosses 4 links (host up, leaf->spine,
spine->leaf, host down) and the incidence has ``4 F`` entries.  It is built directly in
the flow-major :class:`fabric_jax.Incidence` layout (no path search: the point is the
solver's cost, not the host set-up).

Per size (``--min-flows`` .. ``--max-flows`` in steps of ``--factor``; default 10^3 ..
10^6):

``solve_s`` / ``solve_compile_s``
    steady-state median of :func:`fabric_jax.max_min_fair` (``block_until_ready``) and
    first-call compile overhead, timed separately (``experiments/_bench.time_jax``);
    ``iterations`` (bottleneck depth) and ``max_violation`` (largest link overload as a
    fraction of capacity: float round-off only).
``iter_s``, ``bytes_per_iter``, ``achieved_gbs``, ``peak_fraction``
    one *full-size* solver iteration (:func:`fabric_jax.fairness._progressive._iteration_rows`,
    jitted alone) timed in steady state; its bytes accessed from XLA's
    ``cost_analysis()``; achieved bandwidth ``bytes_per_iter / iter_s`` and its
    fraction of the device peak (``--peak-gbs``; default from :data:`PEAK_GBS`, on CPU
    a large NumPy copy measured in the same run).
``fluid_step_s`` / ``fluid_compile_s``
    :func:`fabric_jax.simulate_fluid` (no congestion control, ``--fluid-steps`` steps
    of 1 us) steady time divided by the step count (sizes up to ``--max-fluid-flows``).
``sharded_s`` / ``sharded_compile_s``
    :func:`fabric_jax.distributed.max_min_fair_sharded` over all devices (only with more
    than one device; on CPU run with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``),
    and ``sharded_max_rel_err`` against the single-device rates.
``solve_temp_bytes``, ``solve_arg_bytes``
    XLA ``memory_analysis()`` of the compiled solve (scratch and arguments); the peak
    host RSS of the process after the solve and after the fluid run
    (``solve_peak_rss_bytes``, ``peak_rss_bytes``; ``getrusage``), and on accelerators
    the device's ``peak_bytes_in_use`` (``device_peak_bytes``).

Writes ``results/bench_scale.json`` and ``results/bench_scale.png`` (log-log cost
versus flows) by default.

Usage::

    python experiments/bench_scale.py --max-flows 100000
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python experiments/bench_scale.py
    python experiments/bench_scale.py --min-flows 1000000 --max-flows 10000000   # GPU
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import ROOT, time_jax
from experiments._common import check_positive, finish, parser, plots_dir

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from fabric_jax.plots import save_figure  # noqa: E402
import fabric_jax as fj  # noqa: E402
from fabric_jax.fairness import _api, _progressive  # noqa: E402
from fabric_jax.distributed import max_min_fair_sharded  # noqa: E402

#: Peak memory bandwidth, 10^9 bytes/s, by ``device_kind`` substring (vendor sheets).
PEAK_GBS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0, "B200": 8000.0,
            "TPU v5p": 2765.0, "TPU v5 lite": 819.0, "TPU v4": 1200.0}

HOSTS_PER_LEAF = 32
SPINES = 16
FLOWS_PER_HOST = 8
LINK_BPS = 400e9 / 8  # bytes/s


def leaf_spine_instance(n_flows: int, seed: int):
    """``(incidence, capacity)`` of the benchmark scenario (see the module docstring)."""
    rng = np.random.default_rng(seed)
    hosts = max(2 * HOSTS_PER_LEAF, -(-n_flows // FLOWS_PER_HOST))
    leaves = -(-hosts // HOSTS_PER_LEAF)
    hosts = leaves * HOSTS_PER_LEAF
    # link ids: [host up | host down | leaf->spine | spine->leaf]
    up, down = 0, hosts
    l2s, s2l = 2 * hosts, 2 * hosts + leaves * SPINES
    n_links = 2 * hosts + 2 * leaves * SPINES
    src = np.repeat(np.arange(hosts), FLOWS_PER_HOST)[:n_flows]
    if src.size < n_flows:
        src = rng.integers(0, hosts, n_flows)
    dst = (src + rng.integers(1, hosts, n_flows)) % hosts
    spine = rng.integers(0, SPINES, n_flows)
    ls, ld = src // HOSTS_PER_LEAF, dst // HOSTS_PER_LEAF
    links = np.stack([up + src, l2s + ls * SPINES + spine, s2l + ld * SPINES + spine,
                      down + dst], axis=1).astype(np.int32)
    same_leaf = ls == ld  # stays under its leaf: host up, host down only
    weight = np.ones(links.shape, np.float32)
    weight[same_leaf, 1:3] = 0.0
    links[same_leaf, 1:3] = 0
    inc = fj.Incidence(jnp.asarray(links.ravel()),
                       jnp.asarray(np.repeat(np.arange(n_flows, dtype=np.int32), 4)),
                       jnp.asarray(weight.ravel()), n_links, n_flows, 4)
    return inc, jnp.full((n_links,), LINK_BPS, jnp.float32)


def host_copy_gbs(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Host memory bandwidth of a large NumPy copy (read + write), 10^9 bytes/s."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best / 1e9


def device_peak_gbs(override: float | None) -> tuple[float, str]:
    if override:
        return float(override), "--peak-gbs"
    dev = jax.devices()[0]
    kind = str(getattr(dev, "device_kind", ""))
    for key, gbs in PEAK_GBS.items():
        if key.lower() in kind.lower():
            return gbs, f"table ({key})"
    if dev.platform == "cpu":
        return host_copy_gbs(), "measured numpy copy"
    return float("nan"), f"unknown device {kind!r}; pass --peak-gbs"


def _iteration_cost(inc, capacity, repeats):
    """Steady time and XLA bytes accessed of one full-size solver iteration."""
    shape = (inc.n_flows, inc.row_width)
    li = inc.link_idx.reshape(shape)
    w = inc.weight.reshape(shape)
    act = w != 0
    demand = jnp.full((inc.n_flows,), jnp.inf, capacity.dtype)
    rate = jnp.zeros((inc.n_flows,), capacity.dtype)
    frozen = jnp.zeros((inc.n_flows,), bool)
    step = jax.jit(_progressive._iteration_rows, static_argnums=(5,))
    args = (li, w, act, capacity, demand, inc.n_links, rate, frozen)
    cost = step.lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    _, steady, _ = time_jax(step, *args, repeats=repeats)
    return steady, float(cost.get("bytes accessed", float("nan")))


def _memory(inc, capacity):
    demand = jnp.full((inc.n_flows,), jnp.inf, capacity.dtype)
    ma = _api._max_min_fair.lower(inc, capacity, demand, None,
                                  inc.n_flows + 1).compile().memory_analysis()
    if ma is None:
        return {}
    return dict(solve_temp_bytes=int(ma.temp_size_in_bytes),
                solve_arg_bytes=int(ma.argument_size_in_bytes))


def measure(n_flows: int, args) -> dict:
    inc, capacity = leaf_spine_instance(n_flows, args.seed)
    row = dict(flows=n_flows, links=inc.n_links, entries=inc.nnz)
    first, steady, res = time_jax(fj.max_min_fair, inc, capacity, repeats=args.repeats)
    row.update(solve_s=steady, solve_compile_s=max(first - steady, 0.0),
               iterations=int(res.info.iterations),
               max_violation=float(res.info.max_violation) / LINK_BPS)
    row.update(_memory(inc, capacity))
    row["solve_peak_rss_bytes"] = _peak_rss()
    iter_s, nbytes = _iteration_cost(inc, capacity, args.repeats)
    row.update(iter_s=iter_s, bytes_per_iter=nbytes, achieved_gbs=nbytes / iter_s / 1e9)
    if n_flows <= args.max_fluid_flows:
        size = jnp.full((n_flows,), 1e6, jnp.float32)
        run = lambda: fj.simulate_fluid(inc, capacity, size, dt=1e-6,  # noqa: E731
                                        n_steps=args.fluid_steps)
        f_first, f_steady, _ = time_jax(run, repeats=max(1, args.repeats // 2))
        row.update(fluid_step_s=f_steady / args.fluid_steps,
                   fluid_compile_s=max(f_first - f_steady, 0.0))
    if jax.device_count() > 1:
        s_first, s_steady, sres = time_jax(max_min_fair_sharded, inc, capacity,
                                           repeats=args.repeats)
        ref = np.asarray(res.rates)
        row.update(sharded_s=s_steady, sharded_compile_s=max(s_first - s_steady, 0.0),
                   sharded_max_rel_err=float(np.max(np.abs(np.asarray(sres.rates) - ref)
                                                    / np.maximum(np.abs(ref), 1e-30))))
    row["peak_rss_bytes"] = _peak_rss()
    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)()
    if stats and "peak_bytes_in_use" in stats:  # accelerators: device memory high-water mark
        row["device_peak_bytes"] = int(stats["peak_bytes_in_use"])
    return row


def _peak_rss() -> int:
    """High-water mark of this process's resident memory, bytes (Linux ``ru_maxrss``
    is in KiB; it only grows, so rows of increasing size read off their own peak)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("solve_s", "max-min solve"), ("iter_s", "one solver iteration"),
                       ("fluid_step_s", "fluid step"), ("sharded_s", "sharded solve")):
        pts = [(r["flows"], r[key]) for r in rows if r.get(key)]
        if pts:
            x, y = zip(*pts)
            ax.loglog(x, y, "o-", label=label)
    ax.set_xlabel("flows")
    ax.set_ylabel("seconds")
    ax.set_title(f"cost vs size ({jax.devices()[0].platform}, {jax.device_count()} device(s))")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def main(argv=None):
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--min-flows", type=int, default=1000)
    ap.add_argument("--max-flows", type=int, default=1_000_000)
    ap.add_argument("--factor", type=float, default=10.0, help="size step (default 10)")
    ap.add_argument("--max-fluid-flows", type=int, default=None,
                    help="largest size for the fluid step (default --max-flows)")
    ap.add_argument("--fluid-steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peak-gbs", type=float, default=None,
                    help="device peak memory bandwidth, 10^9 B/s (default: table / measured)")
    ap.set_defaults(json=str(ROOT / "results" / "bench_scale.json"),
                    plots=str(ROOT / "results"))
    args = ap.parse_args(argv)
    if args.quick:  # smoke size: one point, compile-dominated (~10 s on 2 CPU cores)
        args.min_flows = args.max_flows = 1000
        args.repeats, args.fluid_steps = 1, 2
    check_positive(ap, min_flows=args.min_flows, max_flows=args.max_flows,
                   fluid_steps=args.fluid_steps, repeats=args.repeats, peak_gbs=args.peak_gbs,
                   max_fluid_flows=args.max_fluid_flows)
    if not args.factor > 1:
        ap.error(f"--factor must be > 1; got {args.factor}")
    if args.max_flows < args.min_flows:
        ap.error("--max-flows must be >= --min-flows")
    if args.max_fluid_flows is None:
        args.max_fluid_flows = args.max_flows
    baseline_rss = _peak_rss()
    sizes, n = [], float(args.min_flows)
    while n <= args.max_flows * (1 + 1e-9):
        sizes.append(int(round(n)))
        n *= args.factor
    rows = []
    for n in sizes:
        rows.append(measure(n, args))
        print(f"  {n} flows done", flush=True)
    # After the sizes: the host-copy baseline allocates 0.5 GB, which would mask the
    # solver's own peak RSS.
    peak, peak_src = device_peak_gbs(args.peak_gbs)
    for r in rows:
        r["peak_fraction"] = r["achieved_gbs"] / peak
    results = dict(rows=rows, peak_gbs=peak, peak_source=peak_src,
                   baseline_rss_bytes=baseline_rss, command_args=vars(args))
    out = plots_dir(args)
    if out is not None:
        results["plot"] = plot(rows, out / "bench_scale.png")
    cols = ["flows", "links", "entries", "iterations", "solve_s", "solve_compile_s", "iter_s",
            "achieved_gbs", "peak_fraction", "fluid_step_s", "fluid_compile_s", "sharded_s",
            "solve_temp_bytes", "peak_rss_bytes"]
    return finish(results, args, rows, cols,
                  title=f"bench_scale: peak {peak:.4g} GB/s ({peak_src})", started=started)


if __name__ == "__main__":
    main()
