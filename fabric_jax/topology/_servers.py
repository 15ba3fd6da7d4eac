"""The server model: GPUs as hosts, an NVSwitch per server, PCIe to the NICs.

Opt-in on every builder (``gpus_per_server=...``) or applied to any fabric with
:func:`with_servers`: the fabric's hosts are taken as NIC ports, each server gets an
NVSwitch node that every GPU of the server reaches over one NVLink cable (the whole
NVLink bandwidth of a GPU, as NVSwitch fabrics are non-blocking), and each GPU reaches
its NIC over a PCIe cable.  Min-hop routing then sends intra-server traffic over NVLink
(GPU -> NVSwitch -> GPU, 2 hops) and inter-server traffic over PCIe, the NICs and the
fabric (>= 4 hops); hosts never forward, so nothing crosses another GPU.  Named servers
(HGX H100, DGX A100, ...) are in :mod:`fabric_jax.systems`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import units
from ._core import DEFAULT_BUFFER_KB, Topology, check_int, check_pos

#: H100 SXM NVLink4: 18 links x 25 GB/s per direction = 450 GB/s = 3600 Gb/s (NVIDIA
#: H100 Tensor Core GPU datasheet; NVIDIA "NVLink and NVSwitch" product page).
DEFAULT_NVLINK_GBPS = 3600.0
#: PCIe Gen5 x16: 32 GT/s x 16 lanes = 512 Gb/s raw per direction (PCI-SIG PCIe 5.0).
DEFAULT_PCIE_GBPS = 512.0
#: One NVSwitch traversal (GPU -> NVSwitch or back), microseconds; an assumption of the
#: order of a cut-through switch hop.  NCCL's per-step software costs are charged by
#: :mod:`fabric_jax.collectives`, not here.
DEFAULT_NVLINK_LATENCY_US = 0.1
#: GPU <-> NIC over the PCIe switch, microseconds (assumption, same order).
DEFAULT_PCIE_LATENCY_US = 0.1


def with_servers(topology: Topology, gpus_per_server: int, *,
                 nics_per_server: int | None = None,
                 nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
                 pcie_gbps: float = DEFAULT_PCIE_GBPS,
                 nvlink_latency_us: float = DEFAULT_NVLINK_LATENCY_US,
                 pcie_latency_us: float = DEFAULT_PCIE_LATENCY_US) -> Topology:
    """GPU servers on a fabric whose hosts are NICs: GPUs become the hosts.

    The hosts of ``topology`` are taken as NIC ports, ``nics_per_server`` consecutive
    host indices per server (the layout of every builder here: ``rail_optimized``'s
    ``server * nics + nic``, consecutive hosts of a leaf in ``leaf_spine``).  Each
    server gets ``gpus_per_server`` GPU hosts and one NVSwitch node:

    * NVLink: one cable GPU <-> NVSwitch of ``nvlink_gbps`` per direction.  An
      NVSwitch system is non-blocking (HGX H100: four NVSwitch chips, 18 NVLink4 links
      per GPU, 450 GB/s per direction; NVIDIA "NVIDIA H100 Tensor Core GPU
      Architecture" whitepaper, 2022), so the per-GPU NVLink bandwidth is the only
      bound modelled;
    * PCIe: one cable GPU <-> its NIC of ``pcie_gbps`` (GPU ``g`` uses NIC
      ``g * nics_per_server // gpus_per_server``: the PCIe-switch pairing of DGX/HGX
      H100, one ConnectX-7 per GPU).

    NIC nodes stop being hosts (tier 1), switch tiers shift up by one, NVSwitches are
    tier 1, GPUs tier 0.  Host index of GPU ``g`` of server ``s``: ``s *
    gpus_per_server + g``; names ``srv{s}/gpu{g}`` and ``srv{s}/nvswitch``;
    ``host_server`` is the GPU's server.  Links of ``topology`` keep their ids; the
    NVLink cables follow (link ``L0 + 2 h`` GPU ``h`` -> NVSwitch, ``L0 + 2 h + 1``
    back), then the PCIe cables (``L0 + 2 G + 2 h`` GPU -> NIC, ``+ 1`` back), with
    ``L0 = topology.n_links`` and ``G`` GPUs.  ``params`` gains ``gpus_per_server``,
    ``nics_per_server``, ``n_servers``, ``nvlink_gbps``, ``pcie_gbps``,
    ``fabric_links`` (= ``L0``) and ``server_model=True``.

    Not modelled (assumptions): PXN (NCCL forwarding across rails through NVLink)
    -- a rail-crossing flow goes through the fabric; NVLink port contention inside the
    NVSwitch chips; CPU/host memory paths.

    Args:
      topology: a fabric whose hosts are NIC ports (not already a server model).
      gpus_per_server: GPUs per server (>= 1).
      nics_per_server: NIC ports per server (default ``gpus_per_server``); must
        divide the number of hosts of ``topology``.
      nvlink_gbps: NVLink bandwidth per GPU per direction, Gb/s.
      pcie_gbps: GPU <-> NIC bandwidth per direction, Gb/s.
      nvlink_latency_us: latency of each NVLink cable (one NVSwitch hop), us.
      pcie_latency_us: latency of each PCIe cable, us.

    Raises:
      ValueError: bad sizes, hosts not a multiple of ``nics_per_server``, a topology
        that already has the server model.
    """
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology; got {type(topology).__name__}")
    if topology.params.get("server_model"):
        raise ValueError("topology already has the server model; build it from a fabric "
                         "whose hosts are NICs")
    gps = check_int(gpus_per_server, "gpus_per_server", 1)
    nps = gps if nics_per_server is None else check_int(nics_per_server,
                                                         "nics_per_server", 1)
    nv = check_pos(nvlink_gbps, "nvlink_gbps")
    pc = check_pos(pcie_gbps, "pcie_gbps")
    nv_lat = check_pos(nvlink_latency_us, "nvlink_latency_us", allow_zero=True)
    pc_lat = check_pos(pcie_latency_us, "pcie_latency_us", allow_zero=True)
    n_nics = topology.n_hosts
    if n_nics % nps:
        raise ValueError(f"nics_per_server={nps} does not divide the {n_nics} hosts (NIC "
                         f"ports) of {topology.name!r}; give a fabric with a whole number "
                         f"of servers")
    n_servers = n_nics // nps
    n_gpus = n_servers * gps
    names, tier, is_host, gpu_node, server, cab_u, cab_v = _server_nodes(
        topology, gps, nps, n_servers)
    gb = np.repeat(np.concatenate([np.full(n_gpus, nv), np.full(n_gpus, pc)]), 2)
    lat = np.repeat(np.concatenate([np.full(n_gpus, nv_lat), np.full(n_gpus, pc_lat)]), 2)
    params = dict(topology.params, gpus_per_server=gps, nics_per_server=nps,
                  n_servers=n_servers, nvlink_gbps=nv, pcie_gbps=pc,
                  fabric_links=topology.n_links, server_model=True)
    return Topology(
        node_names=names, node_is_host=is_host, node_tier=tier, hosts=gpu_node,
        **_append_cables(topology, cab_u, cab_v, units.gbps(gb), units.us(lat)),
        host_server=server,
        name=f"{topology.name} + {n_servers} servers x {gps} GPUs",
        kind=topology.kind, params=params, updown=topology.updown, host_transit=False)


def _server_nodes(topology: Topology, gps: int, nps: int, n_servers: int):
    """Names, tiers and host flags of every node, and the NVLink then PCIe cables.

    Returns ``(names, tier, is_host, gpu_node, server, cab_u, cab_v)``: the node arrays
    of the whole topology, the node and server of each GPU (host index order), and the
    cables ``cab_u[c] <-> cab_v[c]`` (GPU -> NVSwitch for every GPU, then GPU -> NIC).
    """
    n0, n_gpus = topology.n_nodes, n_servers * gps
    gpu = np.arange(n_gpus)
    server, local = np.divmod(gpu, gps)
    gpu_node = n0 + gpu
    nvs_node = n0 + n_gpus + np.arange(n_servers)
    nic_node = topology.hosts[server * nps + local * nps // gps]
    names = (topology.node_names
             + tuple(f"srv{s}/gpu{g}" for s, g in zip(server.tolist(), local.tolist()))
             + tuple(f"srv{s}/nvswitch" for s in range(n_servers)))
    old_tier = np.where(topology.node_is_host, 1, topology.node_tier + 1)
    tier = np.concatenate([old_tier, np.zeros(n_gpus), np.ones(n_servers)])
    is_host = np.concatenate([np.zeros(n0, bool), np.ones(n_gpus, bool),
                              np.zeros(n_servers, bool)])
    cab_u = np.concatenate([gpu_node, gpu_node])
    cab_v = np.concatenate([nvs_node[server], nic_node])
    return names, tier, is_host, gpu_node, server, cab_u, cab_v


def _append_cables(topology: Topology, cab_u, cab_v, capacity, latency) -> dict:
    """The link arrays of ``topology`` followed by full-duplex cables ``cab_u <-> cab_v``.

    Link ``L0 + 2c`` is ``cab_u[c] -> cab_v[c]`` and ``L0 + 2c + 1`` the way back, with
    ``L0 = topology.n_links``; ``capacity`` (bytes/s) and ``latency`` (s) are per new
    link; the new links get the default buffer and are up.
    """
    new_src = np.stack([cab_u, cab_v], axis=1).reshape(-1)
    new_dst = np.stack([cab_v, cab_u], axis=1).reshape(-1)
    L0, n_new = topology.n_links, 2 * cab_u.size
    return dict(
        link_src=np.concatenate([topology.link_src, new_src]),
        link_dst=np.concatenate([topology.link_dst, new_dst]),
        capacity=np.concatenate([topology.capacity, capacity]),
        latency=np.concatenate([topology.latency, latency]),
        buffer=np.concatenate([topology.buffer,
                               np.full(n_new, units.kb(DEFAULT_BUFFER_KB))]),
        link_up=np.concatenate([topology.link_up, np.ones(n_new, bool)]),
        link_reverse=np.concatenate([topology.link_reverse, L0 + (np.arange(n_new) ^ 1)]))


class ServerModel(NamedTuple):
    """A builder's server-model arguments (:func:`with_servers`); checked when applied."""

    gpus_per_server: int | None = None
    nvlink_gbps: float | None = DEFAULT_NVLINK_GBPS
    pcie_gbps: float | None = DEFAULT_PCIE_GBPS
    nvlink_latency_us: float | None = DEFAULT_NVLINK_LATENCY_US
    pcie_latency_us: float | None = DEFAULT_PCIE_LATENCY_US

    def apply(self, topology: Topology, nics_per_server: int | None) -> Topology:
        """``topology`` with the server model (unchanged if ``gpus_per_server`` is None).

        An option passed as None takes :func:`with_servers`' default.
        """
        if self.gpus_per_server is None:
            return topology
        kw = {k: v for k, v in self._asdict().items() if v is not None}
        return with_servers(topology, nics_per_server=nics_per_server, **kw)
