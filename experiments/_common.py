"""Shared pieces of the experiment scripts: the command line, replicated networks, the
table and results file.

Units: bytes, seconds, bytes/s in every array and JSON value (keys carry a unit suffix
where they are not SI, e.g. ``_us``).

* :func:`parser` -- the common command line (``--seed``, ``--json``, ``--plots``,
  ``--quick``).
* :func:`replicate` -- independent copies of one small network as one block-diagonal
  network (:func:`fabric_jax.topology.disjoint_union`): copy ``i`` uses links
  ``i * n_links + l`` and hosts ``i * n_hosts + h``.  Flows of different copies share
  no link, so one :func:`fabric_jax.fluid.simulate_fluid` call advances every seed at
  once (the copies are the batch axis; shapes stay static, so one compile serves all
  seeds).
* :func:`finish` -- prints the table, writes JSON, returns the results dict.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from experiments._bench import device_info, table, write_json  # noqa: F401
from fabric_jax.paths import concat_paths
from fabric_jax.topology import disjoint_union


def parser(doc: str) -> argparse.ArgumentParser:
    """Argument parser with the options every experiment script shares."""
    ap = argparse.ArgumentParser(description=doc.strip().split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    ap.add_argument("--json", type=str, default=None, metavar="PATH",
                    help="write the results dict here (JSON)")
    ap.add_argument("--plots", type=str, default=None, metavar="DIR",
                    help="write PNG figures into this directory")
    ap.add_argument("--quick", action="store_true",
                    help="CI-sized run (well under 30 s on 2 CPU cores)")
    return ap


def check_positive(ap: argparse.ArgumentParser, **values):
    """``ap.error`` naming the flag (``--name``) when a value (or an item of a list) is not
    a finite number > 0: the one validator's rule (:func:`fabric_jax.scenario.check`)."""
    from fabric_jax.scenario import ScenarioError, check, number
    for name, v in values.items():
        if v is None:
            continue
        flag = f"--{name.replace('_', '-')}"
        try:
            check(flag, number(0, lo_open=True, many=isinstance(v, (list, tuple))), v,
                  flag=flag)
        except ScenarioError as err:
            ap.error(str(err))


def replicate(topology, pathsets) -> tuple:
    """``len(pathsets)`` independent copies of ``topology`` as one block-diagonal network,
    copy ``i`` carrying the pairs of ``pathsets[i]``.

    Args:
      topology: the :class:`~fabric_jax.topology.Topology` copied.
      pathsets: list of :class:`~fabric_jax.paths.PathSet` on ``topology``.

    Returns:
      ``(network, paths)``: :func:`fabric_jax.topology.disjoint_union` of the copies
      (copy ``i`` has links ``i * n_links + l``) and one PathSet over it
      (:func:`fabric_jax.paths.concat_paths`; hosts offset likewise, so hashes of
      different copies differ).
    """
    network, off = disjoint_union([topology] * len(pathsets))
    return network, concat_paths(pathsets, off.links, off.hosts)


def finish(results: dict, args, rows=None, columns=None, title: str | None = None, *,
           started: float | None = None) -> dict:
    """Prints ``rows`` as a table, writes ``results`` to ``--json`` (with the ``run``
    record of :mod:`fabric_jax.results`: ``started``, a ``time.time()``, and the parsed
    arguments); returns ``results``."""
    if title:
        print(title)
    if rows:
        print(table(rows, columns))
    results.setdefault("device", device_info())
    write_json(args.json, results, started=started, inputs=vars(args))
    return results


def plots_dir(args) -> Path | None:
    """The ``--plots`` directory (created), or ``None``."""
    if not args.plots:
        return None
    out = Path(args.plots)
    out.mkdir(parents=True, exist_ok=True)
    return out


# ------------------------------------------------------------ training scenarios
NICS_PER_SERVER = 8


def training_scenario(gpus: int, *, all_reduce_mb: float = 32.0, moe_mb: float = 4.0,
                      compute_us: float = 1000.0, ep_servers: int = 4,
                      tenant_servers: int = 0, tenant_fan_in: int = 4,
                      tenant_incast_mb: float = 1.0, background_load: float = 0.0,
                      tokens_per_gpu_per_step: float = 8.0, gpu_price_per_hour: float = 2.5,
                      link_gbps: float = 400.0, seed: int = 0, isolation: bool = False,
                      presets=None, dt_us: float = 4.0, slack: float = 6.0):
    """A :class:`fabric_jax.compare.Scenario` for a training job on ``gpus`` GPUs.

    Rail-optimised leaf-spine of ``gpus / 8`` servers x 8 NICs with at least two
    scalable units (``servers_per_leaf = min(16, servers / 2)``), so that rings and
    all-to-alls cross the spines.  The training job uses every server not given to the
    tenant.  The horizon ``n_steps`` covers ``slack`` times the line-rate time of the
    job's collectives (hierarchical: ring all-reduce of ``all_reduce_mb / 8`` per rail,
    all-to-all of ``moe_mb / 8`` per NIC) plus 50 us.

    Args:
      gpus: multiple of 16 (>= 2 servers).
      all_reduce_mb, moe_mb: per-GPU bytes of the step's all-reduce / all-to-all, MB.
      compute_us: compute per step, microseconds.
      tenant_servers, tenant_fan_in, tenant_incast_mb, background_load: neighbours.
      presets: fabric preset names (default all).
      ep_servers: expert-parallel group size wanted; the scenario uses the largest
        divisor of the training servers not above it
        (:func:`fabric_jax.scale.ep_group_size`) and says so in ``workload.ep_servers``.
    """
    from fabric_jax.compare import scenario_from_dict
    from fabric_jax.fabrics import PRESETS
    from fabric_jax.fluid.options import save_schedule
    from fabric_jax.scale import ep_group_size
    from fabric_jax.scenario import check, integer, refuse
    check("gpus", integer(2 * NICS_PER_SERVER, unit="GPUs"), gpus)
    if gpus % (2 * NICS_PER_SERVER):
        raise refuse("gpus", f"must be a multiple of {2 * NICS_PER_SERVER} (>= 2 servers of "
                     f"{NICS_PER_SERVER} GPUs); got {gpus}", value=gpus)
    n_servers = gpus // NICS_PER_SERVER
    train = n_servers - tenant_servers
    check("tenant_servers", integer(0, n_servers - 2, fix="the training job needs the "
                                     "other servers, at least 2"), tenant_servers)
    spl = max(1, min(16, n_servers // 2))
    line = link_gbps * 1e9 / 8
    ring = train if train > 1 else 2
    ep = ep_group_size(train, ep_servers)  # stated in the returned scenario
    if tenant_servers >= 2:  # an incast has at most tenant_servers - 1 senders
        tenant_fan_in = max(1, min(tenant_fan_in, tenant_servers - 1))
    t_ar = 2 * (ring - 1) / ring * all_reduce_mb * 1e6 / NICS_PER_SERVER / line
    t_a2a = (ep - 1) / ep * moe_mb * 1e6 / NICS_PER_SERVER / line
    t_tenant = tenant_fan_in * tenant_incast_mb * 1e6 / line if tenant_servers else 0.0
    horizon = slack * (t_ar + t_a2a + t_tenant) + 50e-6
    n_steps = int(math.ceil(horizon / (dt_us * 1e-6)))
    n_steps, _ = save_schedule(n_steps, round_up=True)  # so compare saves every SAVE_EVERY
    data = {
        "topology": dict(kind="rail_optimized", n_servers=n_servers,
                         nics_per_server=NICS_PER_SERVER, servers_per_leaf=spl,
                         link_gbps=float(link_gbps)),
        "workload": dict(train_servers=train, tenant_servers=tenant_servers,
                         ep_servers=ep, all_reduce_mb=float(all_reduce_mb),
                         moe_mb=float(moe_mb), compute_us=float(compute_us),
                         tenant_fan_in=tenant_fan_in, tenant_incast_mb=float(tenant_incast_mb),
                         background_load=float(background_load)),
        "simulation": dict(dt_us=float(dt_us), n_steps=n_steps, seed=int(seed),
                           isolation=bool(isolation)),
        "economics": dict(gpu_price_per_hour=float(gpu_price_per_hour),
                          tokens_per_gpu_per_step=float(tokens_per_gpu_per_step)),
        "fabrics": {"presets": list(presets or PRESETS)},
    }
    ideal = dict(all_reduce=t_ar, all_to_all=t_a2a)
    return scenario_from_dict(data), ideal
