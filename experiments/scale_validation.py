"""Validation at scale: ECMP against balls into bins, effective bisection, adaptive routing.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

On one rail of ``G`` GPUs of HGX H100 servers on the fabric of ``fabric-jax scale``
(:func:`fabric_jax.scale.scale_topology`: two tiers of 128-port switches up to 8,192
GPUs, planes beyond), every NIC of the rail sends ``--size-mb`` at ``t = 0``:

* **ring shift** (:func:`fabric_jax.scale.ring_shift`): each server to the server one
  scalable unit on, so a leaf's 64 flows all go to the next leaf.  Per-flow ECMP puts
  64 balls into 64 uplinks: the expected share of uplinks in use, which is the
  aggregate throughput with max-min sharing, is ``1 - (1 - 1/n)^n`` = 0.6350 at
  ``n = 64`` (``-> 1 - 1/e = 0.632``).  Counted on the host from the hashes
  (``ecmp_uplinks_used``) and simulated;
* **random bisection** (:func:`fabric_jax.scale.random_bisection`, Hoefler et al.'s
  bisect pattern): the effective bisection bandwidth, the mean per-flow bandwidth over
  ``--seeds`` patterns.

Routing mechanisms alone (``cc = none``, ``flow_control = none``: infinite buffers,
max-min sharing each step, so only the paths differ): ``ecmp`` (the ``roce`` preset's
per-flow hash), ``spray`` (``uec``: even split over every candidate path), ``ib_ar``
(``infiniband``'s switch-local adaptive routing) and ``spectrum_x_ar`` (adaptive with
end-to-end telemetry), over every equal-cost path and over the capped candidate set of
the step simulations (``--max-paths`` per plane, ``*_capped``); then the four presets
with their whole dynamics (congestion control, flow control, receiver).

Metric (:func:`fabric_jax.scale.window_efficiency`): delivered throughput averaged over
the snapshots in ``[0.1, 0.9] x`` the line-rate time (every flow still sending) over
``flows x`` line rate.

Published values (side by side in ``docs/scale.md``): NVIDIA, "NVIDIA Ethernet Networking
Accelerates World's Largest AI Supercomputer, Built by xAI" (press release, 28 Oct
2024): standard Ethernet "delivering only 60% data throughput" against 95 % with
Spectrum-X on 100,000 GPUs; Hoefler, Schneider, Lumsdaine, "Multistage Switches are
not Crossbars: Effects of Static Routing in High-Performance Networks", IEEE Cluster
2008: production InfiniBand clusters with full bisection bandwidth and static routing
deliver 55-60 % effective bisection bandwidth; Geoffray and Hoefler, "Adaptive Routing
Strategies for Modern High Performance Networks", Hot Interconnects 2008: 38 % static
on a 512-node Clos, 77 % with adaptive routing.

Usage::

    python experiments/scale_validation.py --json results/scale_validation.json
    python experiments/scale_validation.py --quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

import numpy as np  # noqa: E402

from fabric_jax import scale as sc  # noqa: E402
from fabric_jax.fabrics import get_fabric  # noqa: E402

#: Routing mechanisms (preset whose routing it is).
MECHANISMS = {"ecmp": "roce", "spray": "uec", "ib_ar": "infiniband",
              "spectrum_x_ar": "spectrum_x"}
#: Published reference values (module docstring).
PUBLISHED = {
    "ethernet_ecmp_throughput": (0.60, "NVIDIA press release on xAI Colossus, 2024-10-28"),
    "spectrum_x_throughput": (0.95, "NVIDIA press release on xAI Colossus, 2024-10-28"),
    "static_bisection": ((0.55, 0.60), "Hoefler, Schneider, Lumsdaine, IEEE Cluster 2008"),
    "adaptive_bisection_512": (0.77, "Geoffray, Hoefler, Hot Interconnects 2008 (38 % "
                               "static on 512 nodes)"),
}


def _efficiency(flows, topo, fabric, *, dt, size, nic, max_paths, seed=0):
    t_line = size / nic
    run = sc.simulate_rails(flows, topo, fabric, rails=(0,), dt=dt,
                            n_steps=int(np.ceil(t_line / dt)) + 20, max_paths=max_paths,
                            seed=seed)
    return sc.window_efficiency(run, nic, 0.1 * t_line, 0.9 * t_line), run.wall_s


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--gpus", type=int, nargs="+", default=None,
                    help="GPU counts (default 8192 16384 32768; --quick 1024)")
    ap.add_argument("--size-mb", type=float, default=2.5,
                    help="bytes per flow, MB (default 2.5: 50 us at 400 Gb/s)")
    ap.add_argument("--dt-us", type=float, default=0.5, help="fluid step, us (default 0.5)")
    ap.add_argument("--seeds", type=int, default=2, help="random bisections (default 2)")
    ap.add_argument("--max-paths", type=int, default=sc.DEFAULT_MAX_PATHS,
                    help="capped candidate paths per plane (default that of the step "
                         "simulations)")
    ap.add_argument("--no-presets", action="store_true",
                    help="routing mechanisms only (skip the presets' full dynamics)")
    a = ap.parse_args(argv)
    gpus = a.gpus or ([1024] if a.quick else [8192, 16384, 32768])
    cm.check_positive(ap, gpus=gpus, size_mb=a.size_mb, dt_us=a.dt_us, seeds=a.seeds,
                      max_paths=a.max_paths)
    size, dt, nic = a.size_mb * 1e6, a.dt_us * 1e-6, 50e9
    t_start = time.perf_counter()
    rows, out = [], {"points": [], "published": PUBLISHED}
    for g in gpus:
        topo = sc.scale_topology(g)
        table = sc.clos_paths(topo)
        n_up = table.n_spines
        pt = dict(gpus=g, topology=topo.name, uplinks_per_leaf=n_up,
                  theory=sc.balls_into_bins(n_up))
        shift = sc.ring_shift(topo, size)
        links = sc.ecmp_paths(table, shift.src, shift.dst, np.zeros(shift.n_flows, int),
                              sc.source_port(a.seed, np.arange(shift.n_flows)))
        pt["ecmp_uplinks_used"] = sc.uplinks_used(topo, shift, links)
        patterns = {"ring_shift": [shift],
                    "bisection": [sc.random_bisection(topo, size, a.seed + s)
                                  for s in range(a.seeds)]}
        variants = []
        for mech, preset in MECHANISMS.items():
            ideal = get_fabric(preset, cc="none", flow_control="none")
            variants.append((mech, ideal, None))
            if mech != "ecmp":
                variants.append((f"{mech}_capped", ideal, a.max_paths))
        if not a.no_presets:
            variants += [(f"preset_{p}", get_fabric(p), a.max_paths)
                         for p in MECHANISMS.values()]
        for pat, flows_list in patterns.items():
            for name, fab, mp in variants:
                effs, wall = [], 0.0
                for i, flows in enumerate(flows_list):
                    e, w = _efficiency(flows, topo, fab, dt=dt, size=size, nic=nic,
                                       max_paths=mp, seed=a.seed + i)
                    effs.append(e)
                    wall += w
                pt[f"{pat}/{name}"] = float(np.mean(effs))
                rows.append(dict(gpus=g, pattern=pat, routing=name,
                                 efficiency=float(np.mean(effs)),
                                 theory=pt["theory"] if name == "ecmp" and
                                 pat == "ring_shift" else float("nan"), wall_s=wall))
                print(f"  {g} GPUs {pat} {name}: {np.mean(effs):.3f} ({wall:.0f} s)",
                      flush=True)
        out["points"].append(pt)
    out.update(rows=rows, inputs=vars(a), wall_s=time.perf_counter() - t_start)
    return cm.finish(out, a, rows, list(rows[0]),
                     f"one rail, {a.size_mb:g} MB per flow, dt = {a.dt_us:g} us: mean "
                     f"per-flow bandwidth / line rate over [0.1, 0.9] x line-rate time",
                     started=started)


if __name__ == "__main__":
    main()
