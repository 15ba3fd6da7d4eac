"""The scale headline with placement side by side: `fabric-jax scale` once per placement,
one table (docs/scale.md, "What a fabric engineer would check"; README "3. Scale").

    python experiments/scale_placement.py --gpus 1024,8192 --out results/placement
    python experiments/scale_placement.py --tabulate results/placement   # table only

Each placement is one `fabric-jax scale --gpus ... --placement P --json OUT/P.json` run
(every preset and the ideal fabric, the command's defaults otherwise); the table puts
the rows of every placement side by side: step time, GPU utilisation, the step against
the ideal fabric of the same placement, the share of the step's bytes that crossed a
spine (`spine_share`), the completion efficiency of the step's collectives (their
slowest flow against line rate, `completion_efficiency`), the mean flow share, p99/p50
over ranks and the ECN-marked share.  Units: ms, %.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

PLACEMENTS = ("packed", "fragmented")


def run(gpus: str, placements, out: pathlib.Path, extra=()) -> None:
    """One ``fabric-jax scale`` per placement, each writing ``out/<placement>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    for p in placements:
        cmd = [sys.executable, "-m", "fabric_jax", "scale", "--gpus", gpus, "--placement", p,
               "--json", str(out / f"{p}.json"), *extra]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)


def rows(out: pathlib.Path, placements) -> list:
    """``[dict]`` one per (GPUs, placement, fabric) from the runs' JSON files."""
    table = []
    for p in placements:
        data = json.loads((out / f"{p}.json").read_text())
        for pt in data["points"]:
            ideal = pt.get("ideal") or {}
            t0 = ideal.get("step_time")
            for name, r in list(pt["fabrics"].items()) + [("ideal", ideal)]:
                if not r:
                    continue
                table.append(dict(
                    gpus=pt["gpus"], placement=p, cluster=pt.get("cluster_gpus") or pt["gpus"],
                    fabric=name, step_ms=1e3 * r["step_time"],
                    util=100 * r["gpu_utilization"],
                    vs_ideal=100 * (r["step_time"] / t0 - 1) if t0 else float("nan"),
                    spine=100 * r.get("spine_share", float("nan")),
                    eff=r.get("completion_efficiency", float("nan")),
                    share=r.get("mean_flow_share", float("nan")),
                    tail=r.get("p99_over_p50", float("nan")),
                    marked=100 * r.get("ecn_marked_share", 0.0),
                    wall=r.get("wall_s", float("nan"))))
    return table


def markdown(table: list) -> str:
    head = ("| GPUs (cluster) | placement | fabric | step ms | GPU util % | vs ideal % | "
            "spine share % | completion eff. | mean flow share | p99/p50 | ECN-marked % |")
    lines = [head, "|" + " --- |" * 11]
    for r in sorted(table, key=lambda r: (r["gpus"], r["fabric"] == "ideal", r["fabric"],
                                          r["placement"])):
        lines.append(f"| {r['gpus']:,} ({r['cluster']:,}) | {r['placement']} | {r['fabric']} | "
                     f"{r['step_ms']:.1f} | {r['util']:.1f} | {r['vs_ideal']:+.1f} | "
                     f"{r['spine']:.1f} | {r['eff']:.3f} | {r['share']:.3f} | "
                     f"{r['tail']:.3f} | {r['marked']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="1024,8192", help="GPU counts (default 1024,8192)")
    ap.add_argument("--placements", default=",".join(PLACEMENTS),
                    help=f"comma-separated placements (default {','.join(PLACEMENTS)})")
    ap.add_argument("--out", default="results/placement", help="folder of the JSON files")
    ap.add_argument("--tabulate", default=None, metavar="DIR",
                    help="only print the table of the JSON files in DIR")
    args, extra = ap.parse_known_args(argv)
    placements = [p for p in args.placements.split(",") if p]
    out = pathlib.Path(args.tabulate or args.out)
    if args.tabulate is None:
        run(args.gpus, placements, out, extra)
    print(markdown(rows(out, placements)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
