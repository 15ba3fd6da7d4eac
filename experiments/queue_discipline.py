"""A short flow behind a standing queue: the fluid FIFO against the closed form.

Units: bytes, seconds, bytes/s (arguments in us, KB and Gb/s, converted here).

Why: a switch port is a FIFO: a byte leaves after the bytes queued ahead of it.
:func:`fabric_jax.fluid.simulate_fluid` keeps each egress queue in ``fifo_bands`` bands
(:func:`fabric_jax.links.serve`, :func:`fabric_jax.links.merge_bands`): the bytes that
join a queue in a step enter a band at its tail and the port serves its bands oldest
first.  With one band (``fifo_bands=1``) the standing queue is a well-mixed tank that
serves each flow in proportion to its share of the queue, the model before 2026-12-03:
once a short flow that met a standing queue stops arriving, its share decays like
``exp(-C t / Q)`` and its finish stretches by ``(Q / C) ln(bytes left / tolerance)``; in
a FIFO its last byte leaves ``Q / C`` after it entered.  This script measures both on
the smallest case against the closed form.

Case (no congestion control, no flow control, infinite buffer): two hosts' NICs and one
switch port, all at ``--gbps``, every link ``--latency-us``.  A greedy flow G (100 MB)
starts at 0 through the port, alone, so no queue forms.  A short flow S (``--size-kb``)
starts at ``--start-us`` from the other NIC into the same port: during its
``s / C`` at line rate the port receives ``2 C`` and serves ``C``, so a queue of ``s``
bytes (half of them S's) builds, and then stays (G keeps arriving at ``C``).

FIFO closed form: S's path is its NIC link then the port, each ``L``.  Its last byte
enters the port at ``t_s + L + s / C`` when the queue is ``s`` bytes, leaves ``s / C``
later and reaches the receiver ``L`` after: ``t_s + 2 L + 2 s / C``, i.e. ``s / C``
after S's finish alone (``t_s + 2 L + s / C``, which the fluid model reproduces: the
``alone`` row).

Usage::

    PYTHONPATH=. python experiments/queue_discipline.py
    PYTHONPATH=. python experiments/queue_discipline.py --size-kb 1000 --json q.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._common import check_positive, finish, parser

from fabric_jax import Incidence, simulate_fluid
from fabric_jax.links import DEFAULT_FIFO_BANDS
from fabric_jax.units import KB, US, gbps
from fabric_jax.study.progress import Progress  # noqa: E402


def fifo_finish(start, size, rate, latency):
    """Finish time of S in a FIFO port (closed form of the module docstring), s."""
    return start + 2 * latency + 2 * size / rate


def run(size, rate, latency, start, dt, horizon, greedy=True, bands=None):
    """Finish time of S in the fluid model at step ``dt`` (with G, or alone), s, with
    ``bands`` FIFO bands per queue (default: the engine's)."""
    inc = Incidence.from_coo(np.array([0, 2, 1, 2]), np.array([0, 0, 1, 1]), n_links=3,
                             n_flows=2)
    res = simulate_fluid(inc, np.full(3, rate), np.array([100e6 if greedy else 1.0, size]), dt=dt,
                         n_steps=int(round(horizon / dt)), arrival=np.array([0.0, start]),
                         link_latency=np.full(3, latency),
                         **({} if bands is None else {"fifo_bands": bands}))
    return float(res.finish[1])


def main(argv=None) -> dict:
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--gbps", type=float, default=400.0, help="every link, Gb/s (default 400)")
    ap.add_argument("--size-kb", type=float, default=200.0, help="short flow, KB (default 200)")
    ap.add_argument("--start-us", type=float, default=20.0, help="its start, us (default 20)")
    ap.add_argument("--latency-us", type=float, default=0.5, help="per link, us (default 0.5)")
    ap.add_argument("--dt-us", type=float, default=1.0, help="fluid step, us (default 1)")
    ap.add_argument("--refine", type=lambda v: [int(x) for x in v.split(",")],
                    default=[1, 4, 16], help="dt divisors to run (default 1,4,16)")
    args = ap.parse_args(argv)
    if not args.refine or min(args.refine) < 1:
        ap.error(f"--refine: positive integers, e.g. 1,4,16; got {args.refine}")
    check_positive(ap, gbps=args.gbps, size_kb=args.size_kb, dt_us=args.dt_us,
                   latency_us=args.latency_us, start_us=args.start_us)
    rate, size = gbps(args.gbps), args.size_kb * KB
    lat, start = args.latency_us * US, args.start_us * US
    fifo = fifo_finish(start, size, rate, lat)
    horizon = start + 40 * (fifo - start) + 10 * US
    rows, res = [], {"fifo_finish": fifo, "fluid": {}, "fluid_one_band": {},
                     "fifo_bands": DEFAULT_FIFO_BANDS}
    bar = Progress(2 * sum(args.refine) + 1, label="queue_discipline")  # cost ~ 1 / dt
    for key, bands, label in (("fluid", None, f"{DEFAULT_FIFO_BANDS} FIFO bands"),
                              ("fluid_one_band", 1, "1 band (well-mixed tank)")):
        for div in args.refine:
            dt = args.dt_us * US / div
            f = run(size, rate, lat, start, dt, horizon, bands=bands)
            bar.update(f"{label}, dt/{div}", div)
            res[key][f"{dt:g}"] = f
            rows.append({"model": f"fluid, {label}, dt = {dt / US:g} us", "finish_us": f / US,
                         "fct_us": (f - start) / US,
                         "x FIFO FCT": (f - start) / (fifo - start)})
    alone = run(size, rate, lat, start, args.dt_us * US, horizon, greedy=False)
    bar.update("alone")
    res["fluid_alone"], res["alone_closed_form"] = alone, start + 2 * lat + size / rate
    rows.append({"model": f"fluid, S alone (G 1 byte), dt = {args.dt_us:g} us",
                 "finish_us": alone / US, "fct_us": (alone - start) / US,
                 "x FIFO FCT": (alone - start) / (fifo - start)})
    rows.append({"model": "FIFO (closed form)", "finish_us": fifo / US,
                 "fct_us": (fifo - start) / US, "x FIFO FCT": 1.0})
    return finish(res, args, rows, ["model", "finish_us", "fct_us", "x FIFO FCT"],
                  title=f"{args.size_kb:g} KB flow into a port with a greedy flow, "
                        f"{args.gbps:g} Gb/s, no CC", started=started)


if __name__ == "__main__":
    main()
