"""Step time of the fluid loop with its flows split over devices (issue 25):
:func:`fabric_jax.simulate_fluid` on one device against
:func:`fabric_jax.simulate_fluid_sharded` over every device of the process, same
instance, same process.

Units: seconds (ms per step in the output).

Instance: ``bench_dynamics.workload`` (``fat_tree(k)``, random host pairs plus a
16-to-1 incast), 1 MB flows, DCQCN + PFC, 0.5 us steps, link latencies.  Each engine
runs twice; the first call's time is compile + run, the second's the run alone
(``--steps`` steps), reported per step.  ``--devices N`` sets
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts: N host
"devices" share the host's cores, so on a CPU this measures the cost of the
all-reduces and of the split, not a speed-up (for that, run on several accelerators
or hosts).

Usage::

    python experiments/bench_fluid_sharded.py --devices 4 --k 8 --flows 2048
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=4, help="host devices (CPU)")
    ap.add_argument("--k", type=int, default=8, help="fat-tree radix")
    ap.add_argument("--flows", type=int, default=2048, help="random host pairs")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform"
                                   f"_device_count={args.devices}")
    import jax
    import numpy as np

    import fabric_jax as fj
    from experiments._bench import write_json
    from experiments.bench_dynamics import workload

    topo, inc, cap, _ = workload(args.k, 16, args.seed, args.flows)
    size = np.full(inc.n_flows, 1e6)
    kw = dict(dt=0.5e-6, n_steps=args.steps, law="dcqcn", flow_control="pfc", buffer=1e6,
              link_latency=np.asarray(topo.latency), nic_links=topo)
    out = dict(devices=jax.device_count(), backend=jax.default_backend(), k=args.k,
               flows=inc.n_flows, links=inc.n_links, steps=args.steps)
    for name, fn in (("one_device", fj.simulate_fluid), ("sharded", fj.simulate_fluid_sharded)):
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            res = fn(inc, cap, size, **kw)
            jax.block_until_ready(res.sent)
            times.append(time.perf_counter() - t0)
        out[name] = dict(first_s=round(times[0], 2),
                         step_ms=round(1e3 * times[1] / args.steps, 3),
                         delivered=float(np.sum(np.asarray(res.delivered))))
    print(json.dumps(out, indent=1))
    write_json(args.json, out, started=started, inputs=vars(args))
    return out


if __name__ == "__main__":
    main()
