"""Flow entropy at scale: QPs per connection, what the hash sees of them, and the
completion efficiency beside the mean flow share.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

On rail 0 of ``--gpus`` GPUs (:func:`fabric_jax.scale.scale_topology`), every NIC sends
``--size-mb`` at ``t = 0`` in a ring shift of one scalable unit or a random bisection
(:func:`fabric_jax.scale.ring_shift`, :func:`fabric_jax.scale.random_bisection`),
under routing alone (``cc = none``, ``flow_control = none``: max-min sharing each step,
so only the paths differ): ECMP with ``N`` QPs per connection hashed per QP (``qp``),
spread over successive uplinks (``qp_spread``) or on the connection's 5-tuple
(``connection``), against adaptive routing and spraying over every spine.  Per row:
the mean flow share (:func:`fabric_jax.scale.window_efficiency`, the effective-bisection
figure) and the completion efficiency (:func:`fabric_jax.scale.completion_metrics`: the
line-rate time over the slowest connection's time), with the balls-into-bins closed
forms for the ring shift: ``1 - (1 - 1/K)^(N K)`` for the mean (the uplinks in use),
``1 / E[max load]``
(:func:`fabric_jax.scale.expected_max_load`; ``N`` QPs of ``1/N`` each: ``N / E[max
load of N K balls]``) for the slowest flow.

Usage::

    python experiments/scale_entropy.py --gpus 1024 --json results/scale_entropy.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fabric_jax import scale as sc
from fabric_jax.fabrics import get_fabric


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--size-mb", type=float, default=2.5)
    p.add_argument("--qps", default="1,4,16")
    p.add_argument("--dt-us", type=float, default=0.5)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    topo = sc.scale_topology(a.gpus)
    K = sc.clos_paths(topo).n_spines
    nic = 50e9
    size = a.size_mb * 1e6
    t = size / nic
    rows = []
    for pattern, flows in (("ring_shift", sc.ring_shift(topo, size)),
                           ("random_bisection", sc.random_bisection(topo, size))):
        cases = [("ecmp", "roce", q, h) for q in (int(x) for x in a.qps.split(","))
                 for h in (("qp", "qp_spread", "connection") if q > 1 else ("qp",))]
        cases += [("ib_ar", "infiniband", 1, "qp"), ("spray", "uec", 1, "qp")]
        for routing, preset, q, h in cases:
            fab = get_fabric(preset, cc="none", flow_control="none")
            run = sc.simulate_rails(flows, topo, fab, rails=(0,), dt=a.dt_us * 1e-6,
                                    n_steps=int(6 * t / (a.dt_us * 1e-6)), qps=q,
                                    hash_fields=h, max_paths=None)
            m = sc.completion_metrics(run, nic)
            row = dict(pattern=pattern, routing=routing, qps=q, hash=h,
                       mean_share=sc.window_efficiency(run, nic, 0.1 * t, 0.9 * t),
                       completion_efficiency=m["completion_efficiency"],
                       mean_flow_share=m["mean_flow_share"],
                       finished=bool(np.all(np.isfinite(run.finish))))
            if pattern == "ring_shift" and routing == "ecmp":
                row.update(closed_mean=(1 - (1 - 1 / K) ** (q * K) if h == "qp" else
                                        sc.balls_into_bins(K) if h == "connection" else
                                        1.0 if q >= K else float("nan")),
                           closed_completion=(q / sc.expected_max_load(q * K, K)
                                              if h == "qp" else
                                              1 / sc.expected_max_load(K, K)
                                              if h == "connection" else float("nan")))
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = dict(gpus=a.gpus, spines=K, size_mb=a.size_mb, dt_us=a.dt_us, rows=rows,
               wall_s=time.perf_counter() - t0)
    print(f"wall {out['wall_s']:.1f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
