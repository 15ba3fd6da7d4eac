"""Benchmark: equal-cost path enumeration for random host pairs on a fat-tree.

Times :func:`fabric_jax.paths.shortest_paths` for 10^4, 10^5 and 10^6 random
(src != dst) pairs on ``fat_tree(k)`` (default k=16: 1024 hosts, 320 switches) and
prints a table; ``--json PATH`` also writes the numbers.  Host-side NumPy only, so the
timings are CPU timings.  Each size is run ``--repeats`` times; the table shows the
first call (it also pays first-touch page faults of the output arrays) and the best.

Usage::

    python experiments/bench_paths.py                     # k=16, 1e4..1e6 pairs
    python experiments/bench_paths.py --k 8 --sizes 10000 --json results/bench_paths.json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.topology import fat_tree  # noqa: E402


def random_pairs(n_hosts: int, n_pairs: int, seed: int):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n_hosts, n_pairs)
    dst = (src + rng.integers(1, n_hosts, n_pairs)) % n_hosts  # never src
    return src, dst


def run(k: int, sizes, max_paths: int, repeats: int, seed: int) -> dict:
    start = time.perf_counter()
    topo = fat_tree(k)
    build_s = time.perf_counter() - start
    rows = []
    for n_pairs in sizes:
        src, dst = random_pairs(topo.n_hosts, n_pairs, seed)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            ps = shortest_paths(topo, src, dst, max_paths=max_paths, seed=seed)
            times.append(time.perf_counter() - start)
            shape, mean_paths = ps.links.shape, float(ps.n_paths.mean())
            out_mb = sum(a.nbytes for a in (ps.links, ps.hop_mask, ps.path_mask)) / 1e6
            del ps
        rows.append(dict(pairs=n_pairs, first_s=times[0], best_s=min(times),
                         pairs_per_s=n_pairs / min(times), shape=list(shape),
                         mean_paths=mean_paths, output_mb=out_mb))
    return dict(benchmark="bench_paths", topology=topo.name, n_hosts=topo.n_hosts,
                n_links=topo.n_links, max_paths=max_paths, repeats=repeats, seed=seed,
                topology_build_s=build_s, rows=rows,
                machine=dict(python=platform.python_version(), numpy=np.__version__,
                             cpus=os.cpu_count(), platform=platform.platform()))


def main(argv=None) -> dict:
    started = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=16, help="fat-tree radix (default 16)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6],
                        help="numbers of pairs")
    parser.add_argument("--max-paths", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args(argv)
    result = run(args.k, args.sizes, args.max_paths, args.repeats, args.seed)
    print(f"{result['topology']}: {result['n_hosts']} hosts, {result['n_links']} links, "
          f"max_paths={result['max_paths']}, built in {result['topology_build_s']:.3f} s")
    print(f"{'pairs':>10} {'first [s]':>10} {'best [s]':>10} {'pairs/s':>12} "
          f"{'paths/pair':>11} {'links shape':>18} {'out [MB]':>9}")
    for r in result["rows"]:
        print(f"{r['pairs']:>10} {r['first_s']:>10.3f} {r['best_s']:>10.3f} "
              f"{r['pairs_per_s']:>12.3g} {r['mean_paths']:>11.2f} "
              f"{str(tuple(r['shape'])):>18} {r['output_mb']:>9.0f}")
    write_json(args.json, result, started=started, inputs=vars(args))
    return result


if __name__ == "__main__":
    main()
