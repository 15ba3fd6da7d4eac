"""Named GPU systems: servers (GPUs, NVLink, NICs) on a rail-optimised fabric.

Each :class:`System` records one server design with its sources; :func:`build` puts
``n_servers`` of them on a fabric (:func:`fabric_jax.topology.rail_optimized` by
default, ``"leaf_spine"`` or ``"fat_tree"`` on request) with the server model of
:func:`fabric_jax.topology.with_servers`.

====================  =====  ===============  ==============  ==========================
system                GPUs   NVLink / GPU     NICs            sources
====================  =====  ===============  ==============  ==========================
``hgx_h100``          8      450 GB/s (NVL4)  8 x 400G CX-7   H100 datasheet; DGX H100
                                                              user guide (8 x CX-7 OSFP)
``hgx_b200``          8      900 GB/s (NVL5)  8 x 400G CX-7   B200 / DGX B200 datasheet
``dgx_a100``          8      300 GB/s (NVL3)  8 x 200G CX-6   DGX A100 user guide
``gb200_nvl72``       72     900 GB/s (NVL5)  72 x 400G CX-7  GB200 NVL72 product page
====================  =====  ===============  ==============  ==========================

NVLink figures are per GPU per direction (NVLink4: 18 links x 25 GB/s; NVLink5: 18
links x 50 GB/s).  Fabric links: 400 Gb/s NDR InfiniBand or 400GbE, ``latency_us``
0.5 us per link (a cut-through switch port-to-port ~0.3 us on Quantum-2 class
switches plus cable and FEC: an assumption, see ``/work/shared/reference/
collectives.md``).  A GB200 NVL72 rack is modelled as one 72-GPU "server" (one
NVLink domain); its NVSwitch trays are lumped into one non-blocking switch.

Units: arguments in Gb/s and microseconds (converted by the topology builders).
"""

from __future__ import annotations

import dataclasses

from .topology import Topology, fat_tree, leaf_spine, rail_optimized

__all__ = ["System", "SYSTEMS", "PUBLISHED", "build", "get_system"]


@dataclasses.dataclass(frozen=True)
class System:
    """A GPU server design.

    Attributes:
      name: key in :data:`SYSTEMS`.
      gpus_per_server: GPUs in one NVLink domain.
      nvlink_gbps: NVLink bandwidth per GPU per direction, Gb/s.
      nics_per_server: scale-out NICs per server.
      nic_gbps: NIC line rate, Gb/s.
      pcie_gbps: GPU <-> NIC link, Gb/s.
      latency_us: fabric latency per link, microseconds.
      nvls: the NVSwitch reduces in the switch (NVLink SHARP: third-generation
        NVSwitch, H100 and later; not A100).  Stored as ``params["nvls"]`` of the
        topology; :mod:`fabric_jax.collectives` offers NVLS algorithms only then.
      sources: where the figures come from.
    """

    name: str
    gpus_per_server: int
    nvlink_gbps: float
    nics_per_server: int
    nic_gbps: float
    pcie_gbps: float = 512.0
    latency_us: float = 0.5
    nvls: bool = True
    sources: str = ""


SYSTEMS = {
    "hgx_h100": System(
        "hgx_h100", 8, 3600.0, 8, 400.0,
        sources="NVIDIA H100 Tensor Core GPU datasheet (NVLink 900 GB/s bidirectional); "
                "NVIDIA DGX H100 user guide (8 x ConnectX-7 400 Gb/s for compute "
                "fabric); PCIe Gen5 x16 GPU-NIC"),
    "hgx_b200": System(
        "hgx_b200", 8, 7200.0, 8, 400.0,
        sources="NVIDIA DGX B200 datasheet (NVLink5 1.8 TB/s per GPU bidirectional, "
                "8 x ConnectX-7 400 Gb/s)"),
    "dgx_a100": System(
        "dgx_a100", 8, 2400.0, 8, 200.0, pcie_gbps=256.0, nvls=False,
        sources="NVIDIA DGX A100 user guide (NVLink3 600 GB/s bidirectional per GPU, "
                "8 x ConnectX-6 200 Gb/s HDR for compute, PCIe Gen4)"),
    "gb200_nvl72": System(
        "gb200_nvl72", 72, 7200.0, 72, 400.0,
        sources="NVIDIA GB200 NVL72 product page (72 Blackwell GPUs in one NVLink "
                "domain, 1.8 TB/s per GPU); one 400 Gb/s ConnectX-7 per GPU "
                "(reference architecture)"),
}


def get_system(name) -> System:
    """A :class:`System` by name (or the System itself)."""
    if isinstance(name, System):
        return name
    if name not in SYSTEMS:
        raise ValueError(f"system must be one of {sorted(SYSTEMS)}; got {name!r}")
    return SYSTEMS[name]


def build(system, n_servers: int = 1, *, fabric_topology: str = "rail_optimized",
          **overrides) -> Topology:
    """``n_servers`` servers of ``system`` on a fabric.

    Args:
      system: name in :data:`SYSTEMS` or a :class:`System`.
      n_servers: servers (>= 1).
      fabric_topology: ``"rail_optimized"`` (default; DGX SuperPOD style),
        ``"leaf_spine"`` (servers on consecutive leaf ports, 32 NIC ports per leaf) or
        ``"fat_tree"`` (smallest even ``k`` with enough hosts).
      overrides: keyword arguments of the builder (e.g. ``servers_per_leaf``,
        ``switch_radix``, ``nvlink_gbps``).
    """
    s = get_system(system)
    if isinstance(n_servers, bool) or int(n_servers) != n_servers or n_servers < 1:
        raise ValueError(f"n_servers must be an integer >= 1; got {n_servers!r}")
    n_servers = int(n_servers)
    server = dict(gpus_per_server=s.gpus_per_server, nvlink_gbps=s.nvlink_gbps,
                  pcie_gbps=s.pcie_gbps, link_gbps=s.nic_gbps, latency_us=s.latency_us)
    server.update(overrides)
    topo = _fabric(s, n_servers, fabric_topology, server)
    return dataclasses.replace(topo, params=dict(topo.params, nvls=s.nvls))


def _fabric(s: System, n_servers: int, fabric_topology: str, server: dict) -> Topology:
    if fabric_topology == "rail_optimized":
        return rail_optimized(n_servers, s.nics_per_server, **server)
    if fabric_topology == "leaf_spine":
        nics = n_servers * s.nics_per_server
        per_leaf = min(32, nics)
        if per_leaf % s.nics_per_server and nics > per_leaf:
            raise ValueError("leaf_spine: a server's NICs must fit evenly on 32-port "
                             "leaves; use rail_optimized")
        n_leaves = -(-nics // per_leaf)
        if nics % per_leaf:
            raise ValueError(f"leaf_spine: {nics} NIC ports do not fill {per_leaf}-port "
                             f"leaves; use a multiple of {per_leaf // s.nics_per_server} "
                             f"servers")
        server.setdefault("nics_per_server", s.nics_per_server)
        return leaf_spine(n_leaves, max(1, per_leaf // 2), per_leaf,
                          uplinks_per_leaf=per_leaf, **server)
    if fabric_topology == "fat_tree":
        nics = n_servers * s.nics_per_server
        k = 2
        while k ** 3 // 4 < nics or (k ** 3 // 4) % s.nics_per_server:
            k += 2
        # The fat-tree's extra hosts would be extra servers: require an exact fit.
        if k ** 3 // 4 != nics:
            raise ValueError(f"fat_tree: {nics} NIC ports do not fill a k-ary fat-tree "
                             f"(k={k} has {k ** 3 // 4}); use rail_optimized")
        server.setdefault("nics_per_server", s.nics_per_server)
        return fat_tree(k, **server)
    raise ValueError(f"fabric_topology must be 'rail_optimized', 'leaf_spine' or "
                     f"'fat_tree'; got {fabric_topology!r}")


#: Published nccl-tests bus bandwidths (large messages), for validation.  Each row:
#: ``system``, ``nodes``, ``gpus`` (ranks; all GPUs when None), ``op``, ``algorithm``
#: (the algorithm the measurement ran -- forced with ``NCCL_ALGO``, or NCCL's own
#: choice as its source states it: NVLS for the default 8-GPU H100 all-reduce, the ring
#: for all-gather / reduce-scatter, "observe as BusBw when running non-allreduce
#: operations, or when running with NCCL_ALGO=RING", nccl-tests#212), ``busbw`` in
#: bytes/s, ``source``, ``kind`` ("maintainer" statement or "user" measurement) and
#: ``note``.  Every row names its algorithm so that a simulation compares like with
#: like (ring with ring, NVLS with NVLS): NVLS's busbw counts bytes that no wire
#: carries, so it is above a ring's on the same machine and must never be read
#: against a ring measurement.  The calibrated rows (used to set
#: :data:`fabric_jax.collectives.LINK_EFFICIENCY`) say so in ``note``; the others are
#: predictions.
PUBLISHED = (
    dict(system="hgx_h100", nodes=1, gpus=None, op="all_reduce", algorithm="ring",
         busbw=370e9, kind="maintainer", source="NVIDIA/nccl-tests#212 (S. Jeaugey)",
         note="calibration of the NVLink efficiency (370/450)"),
    dict(system="hgx_h100", nodes=1, gpus=None, op="all_gather", algorithm="ring",
         busbw=370e9, kind="maintainer", source="NVIDIA/nccl-tests#212 (S. Jeaugey)",
         note="'observe as BusBw when running non-allreduce operations'"),
    dict(system="hgx_h100", nodes=1, gpus=None, op="reduce_scatter", algorithm="ring",
         busbw=370e9, kind="maintainer", source="NVIDIA/nccl-tests#212 (S. Jeaugey)",
         note="as all_gather"),
    dict(system="hgx_h100", nodes=1, gpus=None, op="all_reduce", algorithm="nvls",
         busbw=480e9, kind="maintainer", source="NVIDIA/nccl-tests#212 (S. Jeaugey); "
         "476 GB/s in NVIDIA/nccl-tests#290; 475 GB/s on H200 in nccl-tests#272",
         note="NVLS; calibration of the NVLS efficiency"),
    *(dict(system="hgx_h100", nodes=1, gpus=g, op="all_reduce", algorithm="ring",
           busbw=367.5e9, kind="user", source="NVIDIA/nccl#1455",
           note="ring 365-370 GB/s for 2 to 8 GPUs") for g in (2, 4, 8)),
    *(dict(system="hgx_h100", nodes=1, gpus=g, op="all_reduce", algorithm="nvls",
           busbw=b, kind="user", source="NVIDIA/nccl#1455",
           note="NVLS busbw vs GPU count") for g, b in ((4, 370e9), (5, 420e9),
                                                      (6, 440e9), (7, 460e9))),
    dict(system="hgx_h100", nodes=2, gpus=None, op="all_reduce", algorithm="ring",
         busbw=376e9, kind="maintainer", source="NVIDIA/nccl-tests#290 (46-48 GB/s per "
         "NDR NIC, 8 NICs); busbw = NICs x per-NIC as in nccl-tests#252",
         note="network-bound ring; calibration of the network efficiency (47/50)"),
    dict(system="dgx_a100", nodes=2, gpus=None, op="all_reduce", algorithm="ring",
         busbw=192e9, kind="maintainer", source="NVIDIA/nccl#812 (AddyLaddy: DGX A100, "
         "8 x 200 Gb/s IB, 192 GB/s all-reduce busbw)",
         note="prediction: HDR NICs with the NDR-calibrated efficiency"),
    dict(system="hgx_h100", nodes=4, gpus=None, op="all_reduce", algorithm="ring",
         busbw=376e9, kind="maintainer", source="NVIDIA/nccl-tests#290 per-NIC figure",
         note="ring busbw stays at NICs x per-NIC with more nodes"),
)
