"""Wide-EP decode: one MoE layer's dispatch and combine per EP degree, per preset, beside
DeepEP's published low-latency kernel latencies.

Units: bytes, seconds inside; the table prints microseconds; JSON values are
microseconds under ``*_us`` keys.

Configuration (DeepEP README, low-latency kernels): H800 GPUs (NVLink 200 GB/s per
direction), one ConnectX-7 400 Gb/s NIC per GPU on a rail-optimised fabric, 128 tokens
per GPU, DeepSeek-V3 (hidden 7168, 256 experts, top-8), FP8 dispatch, BF16 combine,
uniform random routing (seed 0); model and assumptions in :mod:`fabric_jax.serve._ep`.
Each row runs the dispatch and the combine through the preset's fluid dynamics
(``--dt`` and, with ``--check-dt``, ``dt / 2``) and the closed form.

JSON: ``{"inputs", "fabrics": {fabric: {ep: {"dispatch_us", "combine_us",
"closed_dispatch_us", "closed_combine_us", "published_dispatch_us",
"published_combine_us", "remote_bytes_share", "dt", ...}}}, "dt_check": {...}}``.

Usage::

    python -m experiments.serve_ep --ep 8,16,32 --fabrics infiniband
    python -m experiments.serve_ep --ep 8,16,32,64 \\
        --fabrics infiniband,roce,spectrum_x,uec,ideal --check-dt --json ep.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric_jax.serve import DEEPEP_FIXED_US, DEFAULT_MSG_RATE, ep_sweep  # noqa: E402


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ep", type=_ints, default=[8, 16, 32], help="EP degrees (8,16,32)")
    ap.add_argument("--fabrics", default="infiniband",
                    help="comma-separated presets and/or 'ideal' (default infiniband)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per GPU (128)")
    ap.add_argument("--dt-us", type=float, default=0.5, help="fluid step, us (0.5)")
    ap.add_argument("--check-dt", action="store_true", help="also run dt/2 (<= 3 %% check)")
    ap.add_argument("--routing", default="uniform", choices=["uniform", "hot", "balanced"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.tokens <= 0:
        ap.exit(2, f"--tokens: must be > 0; got {args.tokens}\n")
    if args.dt_us <= 0:
        ap.exit(2, f"--dt-us: must be > 0; got {args.dt_us}\n")
    fabrics = [f.strip() for f in args.fabrics.split(",") if f.strip()]
    kw = dict(tokens_per_gpu=args.tokens, routing=args.routing, seed=args.seed)
    out = {"inputs": dict(vars(args), json=str(args.json), fixed_us=DEEPEP_FIXED_US,
                          msg_rate=DEFAULT_MSG_RATE, gpu="h800", link_gbps=400.0),
           "fabrics": {}, "dt_check": {}, "wall_s": {}}
    try:
        for fab in fabrics:
            t0 = time.time()
            out["fabrics"][fab] = ep_sweep(fab, args.ep, dt=args.dt_us * 1e-6, **kw)
            if args.check_dt and fab != "ideal":
                half = ep_sweep(fab, args.ep, dt=args.dt_us * 0.5e-6, **kw)
                out["dt_check"][fab] = {
                    e: {op: abs(half[e][f"{op}_us"] / out["fabrics"][fab][e][f"{op}_us"] - 1)
                        for op in ("dispatch", "combine")} for e in args.ep}
            out["wall_s"][fab] = time.time() - t0
            print(f"# {fab}: {out['wall_s'][fab]:.0f} s", file=sys.stderr, flush=True)
    except ValueError as exc:
        ap.exit(2, f"{exc}\n")
    _print(out, args)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return out


def _print(out: dict, args) -> None:
    print(f"EP dispatch/combine, us (tokens/GPU {args.tokens}, dt {args.dt_us} us, "
          f"routing {args.routing}, seed {args.seed}); DeepEP: published (H800, CX7 400G IB)")
    head = f"{'fabric':<11}{'EP':>4}{'remote':>8}{'disp':>8}{'closed':>8}{'DeepEP':>8}" \
           f"{'err':>7}{'comb':>8}{'closed':>8}{'DeepEP':>8}{'err':>7}{'dt/2':>7}"
    print(head)
    for fab, rows in out["fabrics"].items():
        for e, r in rows.items():
            line = f"{fab:<11}{e:>4}{r['remote_bytes_share']:>8.3f}"
            for op in ("dispatch", "combine"):
                pub = r[f"published_{op}_us"]
                err = f"{100 * (r[f'{op}_us'] / pub - 1):+.1f}%" if pub else "-"
                line += (f"{r[f'{op}_us']:>8.1f}{r[f'closed_{op}_us']:>8.1f}"
                         f"{(pub or float('nan')):>8.0f}{err:>7}")
            chk = out["dt_check"].get(fab, {}).get(e)
            line += f"{100 * max(chk.values()):>6.2f}%" if chk else f"{'-':>7}"
            print(line)


if __name__ == "__main__":
    main()
