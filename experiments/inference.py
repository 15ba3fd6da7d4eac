"""Disaggregated inference per fabric preset: a thin caller of :func:`fabric_jax.serve.serve`.

Units: bytes, seconds inside; the table prints ms; JSON values are SI.

The model of the run (requests, prefill pool, KV cache streamed layer by layer over the
fabric under each preset's dynamics, decode with continuous batching, metrics) is
:mod:`fabric_jax.serve`'s; this script maps its flags onto a serving scenario (default
``--model llama3_70b``, tensor-parallel over a server, 4 prefill + 4 decode servers) and
prints ``fabric-jax serve``'s table.  ``fabric-jax serve`` is the user-facing command.

Reported per fabric (JSON ``fabrics.<preset>``): :func:`fabric_jax.serve.serve`'s
metrics, plus ``kv_transfer_time`` (the cache arrival after prefill end, the exposed
transfer) and ``kv_slowdown`` (it over the line-rate time of the last chunk) percentiles.

Usage::

    python experiments/inference.py --quick
    python experiments/inference.py --model deepseek_v3 --rate 40 --json inf.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax.fabrics import PRESETS  # noqa: E402
from fabric_jax.serve import serve  # noqa: E402
from fabric_jax.serve.cli import format_table, plot_cdfs  # noqa: E402
from fabric_jax.workloads.model import MODELS  # noqa: E402


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--model", default="llama3_70b", choices=sorted(MODELS))
    ap.add_argument("--n-prefill", type=int, default=4)
    ap.add_argument("--n-decode", type=int, default=4)
    ap.add_argument("--n-requests", type=int, default=None, help="default 200 (--quick 24)")
    ap.add_argument("--rate", type=float, default=10.0, help="requests per second")
    ap.add_argument("--prompt-len", type=int, default=4096)
    ap.add_argument("--output-len", type=int, default=None, help="default 256 (--quick 16)")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--kv-mode", choices=("layerwise", "whole"), default="layerwise")
    ap.add_argument("--dt-us", type=float, default=2.0)
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    a = ap.parse_args(argv)
    n_req = a.n_requests or (24 if a.quick else 200)
    out_len = a.output_len or (16 if a.quick else 256)
    cm.check_positive(ap, n_prefill=a.n_prefill, n_decode=a.n_decode, n_requests=n_req,
                      rate=a.rate, prompt_len=a.prompt_len, output_len=out_len,
                      max_batch=a.max_batch, dt_us=a.dt_us)
    dense = MODELS[a.model].n_experts == 1
    scn = {"model": {"name": a.model, "weight_bytes": 2.0 if dense else 1.0},
           "prefill": {"servers": a.n_prefill},
           "decode": {"servers": a.n_decode, "max_batch": a.max_batch,
                      **({"instance_servers": 1} if dense else
                         {"instance_servers": a.n_decode, "ep": 8 * a.n_decode})},
           "network": {"servers_per_leaf": a.n_prefill},
           "requests": {"n": n_req, "rate": a.rate, "prompt_tokens": a.prompt_len,
                        "output_tokens": out_len},
           "kv": {"mode": a.kv_mode}, "simulation": {"dt_us": a.dt_us, "seed": a.seed}}
    try:
        res = serve(scn, fabrics=a.fabrics, keep_samples=bool(a.plots))
    except ValueError as err:
        ap.error(str(err))
    for v in res["fabrics"].values():
        v["kv_transfer_time"] = v["kv"]["exposed"]
        line = v["kv"]["line_rate_exposed"]
        v["kv_slowdown"] = {q: (None if v["kv"]["exposed"][q] is None
                                else v["kv"]["exposed"][q] / line[q]) for q in line}
    out = cm.plots_dir(a)
    if out is not None:
        res["plots"] = plot_cdfs(res, out)
        for v in res["fabrics"].values():
            v.pop("ttft_samples", None)
            v.pop("tpot_samples", None)
    print(format_table(res))
    results = dict(inputs=dict(res["scenario"], model=a.model, deployment=res["deployment"]),
                   fabrics=res["fabrics"])
    return cm.finish(results, a, started=started)


if __name__ == "__main__":
    main()
