"""nccl-tests in the emulator: a size sweep of one collective on a named GPU system.

Reproduces ``all_reduce_perf -b 8 -e 8G -f 2`` (and ``all_gather_perf``,
``reduce_scatter_perf``, ``alltoall_perf``) on ``--nodes`` servers of ``--system``
(:mod:`fabric_jax.systems`) joined by a rail-optimised fabric, for each ``--fabric``
preset (its routing split and SHARP; the fabric matters only with 2+ nodes).  Each
size runs the algorithm and protocol NCCL's cost model would pick
(:func:`fabric_jax.collectives.select_algorithm`; force them with ``--algo`` /
``--proto`` like ``NCCL_ALGO`` / ``NCCL_PROTO``) as a transfer DAG in the exact
event-driven max-min engine (:mod:`fabric_jax.collectives`).

Prints nccl-tests' columns (size, count, type, redop, root, time in us, algbw and busbw
in GB/s = 1e9 B/s, with nccl-tests' busbw factors) plus the algorithm/protocol chosen;
``--json`` writes rows with ``size_bytes``, ``count``, ``time_s``, ``algbw``, ``busbw``
(bytes/s), ``algorithm``, ``protocol``, ``fabric``; ``--plot`` draws busbw against size
per fabric; ``--published`` prints the published nccl-tests figures of
:data:`fabric_jax.systems.PUBLISHED` for this system next to the simulated ones.

Example (defaults: hgx_h100, 1 node, all_reduce, 8 B .. 8 GiB; ~1 min on 2 cores)::

    python experiments/nccl_tests.py --nodes 2 --fabric infiniband,roce --plot busbw.png
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np  # noqa: E402

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

from fabric_jax import collectives, systems  # noqa: E402
from fabric_jax.metrics import busbw_factor  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

NCCL_OPS = {"all_reduce": "sum", "all_gather": "none", "reduce_scatter": "sum",
            "alltoall": "none", "all_to_all": "none", "broadcast": "none"}
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_bytes(text: str) -> int:
    """nccl-tests' size syntax: ``8``, ``64K``, ``128M``, ``8G`` (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", str(text).upper())
    if not m:
        raise argparse.ArgumentTypeError(f"size must look like 8, 64K, 128M or 8G; got "
                                          f"{text!r}")
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def sizes_between(lo: int, hi: int, factor: float) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(int(s))
        s *= factor
    return out


def run(system="hgx_h100", nodes=1, op="all_reduce", fabrics=("infiniband",),
        min_bytes=8, max_bytes=8 * 1024**3, factor=2, algorithm=None, protocol=None,
        gpus=None, dtype_bytes=4):
    """Rows of the sweep for every fabric (list of dicts, SI units)."""
    topo = systems.build(system, nodes)
    hosts = None if gpus is None else np.arange(int(gpus))
    n = topo.n_hosts if gpus is None else int(gpus)
    rows = []
    bar = Progress(len(fabrics), label="nccl_tests")
    for fab in fabrics:
        t0 = time.perf_counter()
        sizes = sizes_between(min_bytes, max_bytes, factor)
        res = collectives.sweep(topo, op, sizes, hosts=hosts, fabric=fab,
                                algorithm=algorithm, protocol=protocol)
        wall = time.perf_counter() - t0
        bar.update(f"sweep on {fab}")
        for s, r in zip(sizes, res):
            rows.append(dict(fabric=fab, system=system, nodes=nodes, ranks=n, op=op,
                             size_bytes=s, count=s // dtype_bytes, type="float",
                             redop=NCCL_OPS.get(op, "sum"), time_s=r.time_s,
                             algbw=r.algbw, busbw=r.busbw, algorithm=r.algorithm,
                             protocol=r.protocol, transfers=r.n_flows, wall_s=wall))
    return rows


def format_rows(rows, op, n) -> str:
    lines = [f"# busbw factor ({op}, {n} ranks): {busbw_factor(n, op):.4f}",
             "#       size         count      type   redop    root     time   algbw   "
             "busbw  algorithm/protocol",
             "#        (B)    (elements)                               (us)  (GB/s)  "
             "(GB/s)"]
    for r in rows:
        lines.append(f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8s}  "
                     f"{r['redop']:>6s}  {-1:6d}  {r['time_s'] * 1e6:8.2f}  "
                     f"{r['algbw'] / 1e9:6.2f}  {r['busbw'] / 1e9:6.2f}  "
                     f"{r['algorithm']}/{r['protocol']}")
    peak = max(r["busbw"] for r in rows)
    lines.append(f"# Avg bus bandwidth    : "
                 f"{np.mean([r['busbw'] for r in rows]) / 1e9:.4f}   (peak "
                 f"{peak / 1e9:.2f} GB/s)")
    return "\n".join(lines)


def published_table(system: str, size=8 * 1024**3) -> list[dict]:
    """Simulated busbw at ``size`` next to every published row of ``system``, like with
    like: the simulation runs the algorithm the measurement ran (each row of
    :data:`fabric_jax.systems.PUBLISHED` names it; ring with ring, NVLS with NVLS).
    NCCL's own choice at that size (``default``, ``default_algorithm``) is reported
    beside it, never as the figure compared: on one HGX H100 it is NVLS, whose busbw
    counts bytes the NVSwitch reduces, above any ring measurement."""
    out = []
    rows = [p for p in systems.PUBLISHED if p["system"] == system]
    bar = Progress(len(rows), label="published rows")
    for p in rows:
        bar.last = f"{p['nodes']} node(s) {p['op']}"
        topo = systems.build(system, p["nodes"])
        hosts = None if p["gpus"] is None else np.arange(p["gpus"])
        r = collectives.run_collective(topo, p["op"], size, hosts=hosts,
                                       algorithm=p["algorithm"], fabric="infiniband")
        d = collectives.run_collective(topo, p["op"], size, hosts=hosts, fabric="infiniband")
        out.append(dict(p, simulated=r.busbw, ratio=r.busbw / p["busbw"],
                        chosen=f"{r.algorithm}/{r.protocol}", default=d.busbw,
                        default_algorithm=f"{d.algorithm}/{d.protocol}"))
        bar.update(f"{p['nodes']} node(s) {p['op']}")
    return out


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fabric_jax.plots import save_figure
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for fab in dict.fromkeys(r["fabric"] for r in rows):
        rr = [r for r in rows if r["fabric"] == fab]
        ax.plot([r["size_bytes"] for r in rr], [r["busbw"] / 1e9 for r in rr],
                marker="o", ms=3, label=fab)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", default="hgx_h100", choices=sorted(systems.SYSTEMS))
    ap.add_argument("--nodes", type=int, default=1, help="servers (default 1)")
    ap.add_argument("--op", default="all_reduce",
                    choices=["all_reduce", "all_gather", "reduce_scatter", "alltoall",
                             "broadcast"])
    ap.add_argument("--fabric", default="infiniband",
                    help="preset name(s), comma separated (default infiniband)")
    ap.add_argument("--min-bytes", "-b", type=parse_bytes, default=8)
    ap.add_argument("--max-bytes", "-e", type=parse_bytes, default=parse_bytes("8G"))
    ap.add_argument("--factor", "-f", type=float, default=2.0)
    ap.add_argument("--gpus", type=int, default=None,
                    help="ranks: the first N GPUs (default all GPUs of all nodes)")
    ap.add_argument("--algo", default=None, help="force the algorithm (NCCL_ALGO)")
    ap.add_argument("--proto", default=None, choices=sorted(collectives.PROTOCOLS),
                    help="force the protocol (NCCL_PROTO)")
    ap.add_argument("--json", default=None, metavar="PATH")
    ap.add_argument("--plot", default=None, metavar="PATH")
    ap.add_argument("--published", action="store_true",
                    help="also print the published nccl-tests figures of this system "
                         "next to simulated ones (8 GiB)")
    a = ap.parse_args(argv)
    if a.nodes < 1:
        ap.error("--nodes must be >= 1")
    if a.factor <= 1:
        ap.error("--factor must be > 1")
    if a.min_bytes < 1 or a.max_bytes < a.min_bytes:
        ap.error("need 1 <= --min-bytes <= --max-bytes")
    fabrics = [f.strip() for f in a.fabric.split(",") if f.strip()]
    from fabric_jax.fabrics import PRESETS
    bad = [f for f in fabrics if f not in PRESETS]
    if bad:
        ap.error(f"--fabric: unknown preset(s) {bad}; choose from {sorted(PRESETS)}")
    t0 = time.perf_counter()
    rows = run(a.system, a.nodes, a.op, fabrics, a.min_bytes, a.max_bytes, a.factor,
               a.algo, a.proto, a.gpus)
    n = rows[0]["ranks"]
    for fab in fabrics:
        print(f"# {a.op} on {a.system} x {a.nodes} node(s), {n} ranks, fabric {fab}")
        print(format_rows([r for r in rows if r["fabric"] == fab], a.op, n))
    out = dict(system=a.system, nodes=a.nodes, op=a.op, ranks=n, rows=rows)
    if a.published:
        pub = published_table(a.system)
        out["published"] = pub
        print("# published nccl-tests busbw (GB/s) vs simulated with the same algorithm "
              "at 8 GiB (NCCL's own choice beside it, not compared)")
        for p in pub:
            print(f"#  {p['nodes']} node(s) {p['gpus'] or 'all'} GPUs {p['op']:<14s} "
                  f"{p['algorithm']:<5s} published {p['busbw'] / 1e9:6.1f}"
                  f"  simulated {p['simulated'] / 1e9:6.1f} ({p['chosen']})  "
                  f"ratio {p['ratio']:.3f}  [default choice {p['default_algorithm']}: "
                  f"{p['default'] / 1e9:.1f}]  [{p['source']}]")
    out["wall_s"] = time.perf_counter() - t0
    print(f"# wall {out['wall_s']:.1f} s")
    write_json(a.json, out, started=started, inputs=vars(a))
    if a.plot:
        plot(rows, a.plot, f"{a.op}, {a.system} x {a.nodes}, {n} ranks")
    return out


if __name__ == "__main__":
    main()
