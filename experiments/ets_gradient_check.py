"""Gradient check of the fluid model through its FIFO bands: two saturated traffic
classes share a link under ETS with weights ``w0 : 1`` (``tests/dynamics/test_traffic_classes.py``
two-sender fabric, 100 Gb/s, 50 steps of 1 us); class 0 delivers ``T C w0 / (w0 + 1)``,
so ``d/dw0 = T C / (w0 + 1)^2`` (reported in MB per unit weight; 0.0390625 at w0 = 3).

Prints the value, ``jax.grad``, ``jax.jvp`` and central differences at several steps
``eps`` (float64 with ``--x64``: differences that agree over eps = 1e-1 .. 1e-5 show a
locally smooth model, so a gradient that differs from them is a wrong derivative).

    PYTHONPATH=$PWD python experiments/ets_gradient_check.py --x64 --fifo-bands 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fifo-bands", type=int, default=8)
    ap.add_argument("--x64", action="store_true", help="float64 (jax_enable_x64)")
    ap.add_argument("--w0", type=float, default=3.0)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args(argv)
    if args.fifo_bands < 1 or args.steps < 1 or not args.w0 > 0:
        raise ValueError("--fifo-bands and --steps must be >= 1, --w0 > 0")
    import jax
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    from fabric_jax import qos
    from fabric_jax.fluid import simulate_fluid
    from fabric_jax.incidence import Incidence
    from fabric_jax.units import gbps

    c = gbps(100.0)
    inc = Incidence.from_coo(np.array([0, 2, 1, 2]), np.array([0, 0, 1, 1]), n_links=3,
                             n_flows=2)
    cap = np.array([2 * c, 2 * c, c])
    dt = 1e-6

    def delivered0(w0):
        res = simulate_fluid(inc, cap, np.full(2, 1e12), dt=dt, n_steps=args.steps,
                             traffic_class=[0, 1],
                             classes=qos.traffic_classes(2, weights=jnp.stack([w0, 1.0])),
                             solver_iterations=4, fifo_bands=args.fifo_bands)
        return res.delivered[0] / 1e6

    w = jnp.asarray(args.w0)
    t = args.steps * dt
    print(f"fifo_bands={args.fifo_bands} x64={args.x64} w0={args.w0} steps={args.steps}")
    want = t * c * args.w0 / (args.w0 + 1) / 1e6
    print(f"value {float(delivered0(w)):.9g}  closed form {want:.9g}")
    print(f"closed-form d/dw0 {t * c / (args.w0 + 1) ** 2 / 1e6:.9g}")
    print(f"jax.grad {float(jax.grad(delivered0)(w)):.9g}")
    print(f"jax.jvp  {float(jax.jvp(delivered0, (w,), (jnp.ones_like(w),))[1]):.9g}")
    for eps in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5):
        fd = (float(delivered0(w + eps)) - float(delivered0(w - eps))) / (2 * eps)
        print(f"central difference eps={eps:g}: {fd:.9g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
