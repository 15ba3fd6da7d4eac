"""Disaggregated inference: time to first token and token latency per fabric preset.

Units: bytes, seconds inside; the table prints ms; JSON values are SI.

Scenario (:mod:`fabric_jax.workloads.inference`): ``--model`` served with tensor
parallelism over the 8 GPUs of a server, ``--n-prefill`` prefill servers and
``--n-decode`` decode servers on a rail-optimised fabric with ``--servers-per-leaf``
servers per rail leaf (default: the prefill servers fill the first leaf group and the
decode servers the next, so every KV-cache transfer crosses the spines).  Requests
arrive as a Poisson process (``--rate`` per second, seeded) with ``--prompt-len`` (+-
``--prompt-jitter``) prompt tokens and ``--output-len`` output tokens.  Each prompt's
KV cache (``2 L kv_heads head_dim bytes P``) goes from the prefill server's GPU ``r``
to the decode server's GPU ``r`` (8 flows), released when the prefill ends; the flows of
all requests are simulated together under each preset's routing with the exact
event-driven max-min engine (``experiments/_econ.py``), so concurrent transfers share
links and ECMP hash collisions slow some of them.  Decode runs continuous batching on
the memory-bound roofline.

Reported per fabric (JSON ``fabrics.<preset>``): ``ttft`` and ``token_latency``
percentiles (``p50``, ``p90``, ``p99``, ``mean``), ``kv_transfer_time`` percentiles and
the ideal (line-rate) transfer time, and ``mean_decode_batch``.  Inputs under
``inputs``.

Usage::

    python experiments/inference.py --quick
    python experiments/inference.py --model llama3_70b --rate 8 --json inf.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm
from experiments._econ import simulate_workload

import fabric_jax as fj  # noqa: E402
from fabric_jax.fabrics import PRESETS  # noqa: E402
from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.workloads.inference import disaggregated_serving  # noqa: E402
from fabric_jax.workloads.model import GPUS, MODELS  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

QS = (0.5, 0.9, 0.99)


def _pct(x) -> dict:
    x = np.asarray(x, np.float64)
    out = {f"p{int(round(100 * q))}": float(np.quantile(x, q)) for q in QS}
    out["mean"] = float(x.mean())
    return out


def plot(fabrics: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(fabrics)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    x = np.arange(len(names))
    for k, q in enumerate(("p50", "p90", "p99")):
        axes[0].bar(x + (k - 1) * 0.25, [1e3 * fabrics[n]["ttft"][q] for n in names], 0.25,
                    label=q)
        axes[1].bar(x + (k - 1) * 0.25,
                    [1e3 * fabrics[n]["kv_transfer_time"][q] for n in names], 0.25, label=q)
    axes[0].set_ylabel("time to first token, ms")
    axes[1].set_ylabel("KV-cache transfer, ms")
    for ax in axes:
        ax.set_xticks(x, names, rotation=20)
        ax.legend()
    return [save_figure(fig, out / "inference.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--model", default="llama3_70b", choices=sorted(MODELS))
    ap.add_argument("--gpu", default="h100_sxm", choices=sorted(GPUS))
    ap.add_argument("--n-prefill", type=int, default=4)
    ap.add_argument("--n-decode", type=int, default=4)
    ap.add_argument("--servers-per-leaf", type=int, default=None,
                    help="default: --n-prefill (prefill and decode in different groups)")
    ap.add_argument("--n-requests", type=int, default=None, help="default 400 (--quick 60)")
    ap.add_argument("--rate", type=float, default=10.0, help="requests per second")
    ap.add_argument("--prompt-len", type=int, default=8192)
    ap.add_argument("--prompt-jitter", type=float, default=0.5)
    ap.add_argument("--output-len", type=int, default=None, help="default 256 (--quick 32)")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--achievable-fraction", type=float, default=0.5)
    ap.add_argument("--bandwidth-fraction", type=float, default=0.7)
    ap.add_argument("--link-gbps", type=float, default=400.0)
    ap.add_argument("--first-token", choices=("decode", "prefill"), default="decode")
    ap.add_argument("--max-paths", type=int, default=8)
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    a = ap.parse_args(argv)
    n_req = a.n_requests or (60 if a.quick else 400)
    out_len = a.output_len or (32 if a.quick else 256)
    cm.check_positive(ap, n_prefill=a.n_prefill, n_decode=a.n_decode, n_requests=n_req,
                      rate=a.rate, prompt_len=a.prompt_len, output_len=out_len,
                      max_batch=a.max_batch, link_gbps=a.link_gbps, max_paths=a.max_paths)
    tp = 8
    spl = a.servers_per_leaf or a.n_prefill
    topo = fj.rail_optimized(a.n_prefill + a.n_decode, tp, servers_per_leaf=spl,
                             link_gbps=a.link_gbps)
    try:
        run = disaggregated_serving(
            a.model, n_requests=n_req, rate=a.rate, prompt_len=a.prompt_len,
            output_len=out_len, n_prefill=a.n_prefill, n_decode=a.n_decode, gpu=a.gpu,
            tp=tp, prompt_jitter=a.prompt_jitter, achievable_fraction=a.achievable_fraction,
            bandwidth_fraction=a.bandwidth_fraction, max_batch=a.max_batch, seed=a.seed)
    except ValueError as e:
        ap.error(str(e))
    line = float(topo.capacity[0])
    ideal_kv = run.workload.size.reshape(-1, tp).max(axis=1) / line
    fabrics = {}
    bar = Progress(len(a.fabrics), label="inference")
    for name in a.fabrics:
        finish = simulate_workload(topo, run.workload, name, max_paths=a.max_paths,
                                   seed=a.seed)
        bar.update(name)
        res = run.serve(finish, first_token=a.first_token)
        fabrics[name] = dict(ttft=_pct(res["ttft"]), token_latency=_pct(res["token_latency"]),
                             kv_transfer_time=_pct(res["kv_transfer_time"]),
                             kv_slowdown=_pct(res["kv_transfer_time"] / ideal_kv),
                             mean_decode_batch=float(res["decode_batch"].mean()))
    info = dict(run.info)
    info["model"], info["gpu"] = info["model"].name, info["gpu"].name
    inputs = dict(info, topology=topo.name, servers_per_leaf=spl, link_gbps=a.link_gbps,
                  first_token=a.first_token, seed=a.seed, max_paths=a.max_paths,
                  engine="simulate_flows (event-driven max-min)",
                  ideal_kv_transfer_time=_pct(ideal_kv))
    print("inputs: " + ", ".join(f"{k}={v}" for k, v in inputs.items()
                                 if not isinstance(v, dict)))
    rows = [dict(fabric=n, ttft_p50_ms=1e3 * v["ttft"]["p50"], ttft_p99_ms=1e3 * v["ttft"]["p99"],
                 tok_p50_ms=1e3 * v["token_latency"]["p50"],
                 tok_p99_ms=1e3 * v["token_latency"]["p99"],
                 kv_p50_ms=1e3 * v["kv_transfer_time"]["p50"],
                 kv_p99_ms=1e3 * v["kv_transfer_time"]["p99"],
                 kv_slowdown_p99=v["kv_slowdown"]["p99"]) for n, v in fabrics.items()]
    title = (f"{a.model}: {a.n_prefill} prefill + {a.n_decode} decode servers x {tp} "
             f"{a.gpu}, {n_req} requests at {a.rate:g}/s, prompt {a.prompt_len} tokens, "
             f"output {out_len}; KV {info['kv_bytes_per_request_mean'] / 1e9:.3g} GB/request")
    results = dict(inputs=inputs, fabrics=fabrics)
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(fabrics, out)
    return cm.finish(results, a, rows, list(rows[0]), title, started=started)


if __name__ == "__main__":
    main()
