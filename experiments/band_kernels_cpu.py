"""CPU time of one step of the FIFO band kernels, this tree's ``fabric_jax/links.py``
against the one of a git revision, in one process (calls alternated, so load on a
shared machine hits both alike), and a check that their forward outputs are
bit-identical.

The step: :func:`fabric_jax.links.serve_through` (``fifo_take``, ``serve``,
``service_span``) then ``merge_bands`` and ``reconcile_bands``, as the fluid loop runs
them, on a random ``[flows, hops, K]`` table (float32).  Units: ms of process CPU time
per jitted call (median over repeats of ``--calls`` calls).

    PYTHONPATH=$PWD python experiments/band_kernels_cpu.py --against 43fd54a
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _step(lk, link, n_hops, n_links):
    hops = lk.hop_table(link, jnp.ones(link.shape), n_hops, n_links)

    @jax.jit
    def step(bands, transit, usable):
        _, left_b, left_a, _, _, _, _, span = lk.serve_through(hops, bands, transit, usable,
                                                               1e-6, n_hops)
        x_new = jnp.sum(left_b, -1) + left_a
        return (lk.reconcile_bands(lk.merge_bands(hops, left_b, span[2]), x_new),
                span[0], span[1])
    return step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", default="HEAD", help="git revision of the baseline links.py")
    ap.add_argument("--flows", type=int, default=4096)
    ap.add_argument("--hops", type=int, default=4)
    ap.add_argument("--links", type=int, default=256)
    ap.add_argument("--bands", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args(argv)
    if min(args.flows, args.hops, args.links, args.bands, args.repeats, args.calls) < 1:
        raise ValueError("--flows, --hops, --links, --bands, --repeats, --calls must be >= 1")
    src = subprocess.run(["git", "show", f"{args.against}:fabric_jax/links.py"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        base_path = Path(tmp) / "links_baseline.py"
        base_path.write_text(src)
        mods = {"baseline": _load("links_baseline", base_path),
                "current": _load("links_current", ROOT / "fabric_jax" / "links.py")}
    rng = np.random.default_rng(0)
    shape = (args.flows, args.hops, args.bands)
    link = rng.integers(0, args.links, size=shape[:2])
    bands = jnp.asarray(rng.uniform(0, 5e3, size=shape) * (rng.uniform(size=shape) < 0.6),
                        jnp.float32)
    transit = jnp.asarray(rng.uniform(0, 2e3, size=shape[:2]), jnp.float32)
    usable = jnp.asarray(rng.uniform(1e9, 2e10, size=args.links), jnp.float32)
    steps = {k: _step(m, link, args.hops, args.links) for k, m in mods.items()}
    outs = {k: jax.block_until_ready(s(bands, transit, usable)) for k, s in steps.items()}
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
               zip(jax.tree_util.tree_leaves(outs["baseline"]),
                   jax.tree_util.tree_leaves(outs["current"])))
    print(f"forward outputs bit-identical: {same}")
    ms = {k: [] for k in steps}
    for _ in range(args.repeats):
        for k, s in steps.items():
            t0 = time.process_time()
            for _ in range(args.calls):
                o = s(bands, transit, usable)
            jax.block_until_ready(o)
            ms[k].append((time.process_time() - t0) / args.calls * 1e3)
    for k, v in ms.items():
        print(f"{k:>8}: {np.median(v):.3f} ms CPU per step (median of {args.repeats}; "
              f"min {np.min(v):.3f}, max {np.max(v):.3f})")
    ratio = np.median(ms["current"]) / np.median(ms["baseline"])
    print(f"current / baseline (medians): {ratio:.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
