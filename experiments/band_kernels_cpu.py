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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric_jax import links as current_links

ROOT = Path(__file__).resolve().parents[1]
#: The package name the baseline revision's modules are imported under.
BASELINE = "baseline_fabric_jax"


def _baseline_links(rev: str, into: Path):
    """``fabric_jax/links.py`` of git revision ``rev``, imported as ``BASELINE.links``
    from that revision's package files extracted into ``into`` (with an empty package
    ``__init__``, so only the modules ``links`` imports are loaded)."""
    archive = subprocess.run(["git", "archive", rev, "fabric_jax"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "fabric_jax").rename(into / BASELINE)
    (into / BASELINE / "__init__.py").write_text("")
    sys.path.insert(0, str(into))
    from baseline_fabric_jax import links
    return links


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
    with tempfile.TemporaryDirectory() as tmp:
        mods = {"baseline": _baseline_links(args.against, Path(tmp)),
                "current": current_links}
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
