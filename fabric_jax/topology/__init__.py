"""Network topologies: nodes, directed links, and the builders of common AI fabrics.

A :class:`Topology` is a directed multigraph held as flat NumPy arrays on the host.
Nodes are hosts (NICs that send and receive traffic) or switches; a full-duplex cable
is two *links*, one per direction, and each link has its own

* ``capacity`` in bytes/s,
* ``latency`` in seconds (propagation plus switch traversal, charged once per hop),
* ``buffer`` in bytes (the egress queue in front of the link),
* ``link_up`` (``False`` once failed).

Hosts are addressed everywhere else in fabric_jax by their *host index*
``0 .. n_hosts-1``; ``hosts[h]`` is the node id of host ``h``.  ``node_tier`` orders
switches for up/down (valley-free) routing: 0 host, 1 leaf / edge / rail leaf,
2 spine / aggregation, 3 core.

Builders (all sizes in the unit named by the argument, converted here to bytes, seconds
and bytes/s with :mod:`fabric_jax.units`):

* :func:`leaf_spine` -- two-tier folded Clos, optionally oversubscribed, multi-plane
  (``planes=``) or three-tier (``tiers=3``: pods of leaves and spines under a
  super-spine layer);
* :func:`fat_tree` -- the three-tier k-ary fat-tree of Al-Fares et al. (SIGCOMM 2008);
* :func:`rail_optimized` -- GPU servers whose NIC ``i`` attaches to rail leaf ``i``
  (NVIDIA DGX SuperPOD reference architecture); same ``oversubscription=``,
  ``planes=`` and ``tiers=3`` options;
* :func:`from_edges` -- any graph, from an edge list or a networkx graph;
* :func:`disjoint_union` -- topologies side by side as one (independent cases in one
  simulation).

The package follows the stages of a build: ``_core`` (the :class:`Topology` record,
failures, bisection), ``_spec`` (a :class:`ClosSpec`: the arguments of
:func:`leaf_spine` and :func:`rail_optimized` resolved into one checked description),
``_clos`` (the Clos builders, one private wiring of a spec), ``_servers`` (the server
model) and ``_graph`` (:func:`from_edges`, :func:`disjoint_union`).

Server model (opt-in, ``gpus_per_server=...`` on every builder): hosts become GPUs.
Each server gets an NVSwitch node that every GPU of the server reaches over one NVLink
cable (``nvlink_gbps`` per direction: the whole NVLink bandwidth of a GPU, as NVSwitch
fabrics are non-blocking), and each NIC of the fabric becomes a non-host node (tier 1)
that its GPUs reach over a PCIe cable (``pcie_gbps``); GPU ``g`` of a server uses NIC
``g * nics_per_server // gpus_per_server``.  Switch tiers shift up by one (leaf 2,
spine 3, core 4).  Min-hop routing then sends intra-server traffic over NVLink (GPU ->
NVSwitch -> GPU, 2 hops) and inter-server traffic over PCIe, the NICs and the fabric
(>= 4 hops); hosts never forward, so nothing crosses another GPU.  Without
``gpus_per_server`` the builders build NIC hosts.  See :func:`with_servers` and
:mod:`fabric_jax.systems` for named servers.

Real topologies.  *Oversubscribed leaves*: ``oversubscription=r`` gives each leaf
``1/r`` of its downlink bandwidth upwards (slower uplinks, or fewer uplinks and
spines).

*Multi-plane* (``planes=P``): P independent copies of the switch layers; every host has
one port in each plane at ``link_gbps / P`` (the NIC's bandwidth split over the planes),
and nothing connects the planes, so every path stays inside one plane and
:func:`fabric_jax.paths.shortest_paths` returns the equal-cost paths of all planes:
ECMP, spraying and adaptive routing spread over them.  This is Spectrum-X Multiplane
("splits each SuperNIC across two or more independent network planes ... in a flat,
two-tier topology", 2 or 4 planes on ConnectX-8: NVIDIA Network Operator documentation,
"NVIDIA Spectrum-X Ethernet Networking Platform", v26.4), Alibaba HPN's dual-plane
design (each NIC's two 200G ports in different planes; Qian et al., SIGCOMM 2024) and
DeepSeek's multi-plane fat-tree (Zhao et al., "Insights into DeepSeek-V3", ISCA 2025).
Port speed falls by P, so a switch of the same ASIC has P times the radix (a 51.2 Tb/s
switch: 64 x 800G, 128 x 400G, 256 x 200G): give ``switch_radix`` at the per-plane port
speed.

*Three tiers* (``tiers=3``): the leaves form pods; each pod has its own ``n_spines``
spines (the leaves' uplinks spread over the pod's spines only), and spine ``j`` of
every pod has ``uplinks_per_spine`` cables to super-spine group ``j``
(``n_super_spines / n_spines`` super-spines, round robin).  This is the k-ary fat-tree
wiring of Al-Fares et al. (SIGCOMM 2008, Sec. 2.3: aggregation switch ``a`` of every
pod to core group ``a``) generalised to any sizes, as in the spine planes of Facebook's
data center fabric (Andreyev, 2014) and the super-spine layer of NVIDIA's large
reference architectures.  Defaults are non-blocking: ``uplinks_per_spine`` = the
spine's down ports, ``n_super_spines = n_spines * uplinks_per_spine`` (one cable to each
super-spine of the group).

Switch radix (opt-in, ``switch_radix=...`` on :func:`leaf_spine` and
:func:`rail_optimized`): a ``ValueError`` when a leaf, spine or super-spine would need
more ports than the radix (e.g. 64 for a 64 x 800G Quantum-X800 / Spectrum-4 class
switch, 128 for 128 x 400G), naming the fixes: ``tiers=3`` or ``planes=``.  Builders
refuse rather than silently grow a tier, so node and link numbering only change when
asked for.

Default link parameters: 400 Gb/s, 1 us per link (the per-link delay of the HPCC
simulations, Li et al. SIGCOMM 2019, Sec. 5.1) and 1 MB of buffer per egress port
(a 64 MB shared-buffer 64 x 400G switch, Tomahawk-4 class, split evenly).

Example::

    topo = fat_tree(4)                     # 16 hosts, 20 switches, 96 links
    topo = topo.with_failed_links([("pod0/agg0", "core0")], bidirectional=True)
    topo.bisection_bandwidth()             # bytes/s across the host-index halves

Topologies are immutable: ``with_failed_links`` and ``with_capacity_scaled`` return new
ones.  Paths over a topology come from :func:`fabric_jax.paths.shortest_paths`.
"""

from ._clos import fat_tree, leaf_spine, rail_optimized
from ._core import (CLOS_KINDS, DEFAULT_BUFFER_KB, DEFAULT_LATENCY_US, DEFAULT_LINK_GBPS,
                    Topology, host_indices)
from ._graph import UnionOffsets, disjoint_union, from_edges
from ._servers import (DEFAULT_NVLINK_GBPS, DEFAULT_NVLINK_LATENCY_US, DEFAULT_PCIE_GBPS,
                       DEFAULT_PCIE_LATENCY_US, with_servers)
from ._spec import ClosSpec

__all__ = [
    "CLOS_KINDS",
    "ClosSpec",
    "DEFAULT_BUFFER_KB",
    "DEFAULT_LATENCY_US",
    "DEFAULT_LINK_GBPS",
    "DEFAULT_NVLINK_GBPS",
    "DEFAULT_NVLINK_LATENCY_US",
    "DEFAULT_PCIE_GBPS",
    "DEFAULT_PCIE_LATENCY_US",
    "Topology",
    "UnionOffsets",
    "disjoint_union",
    "fat_tree",
    "from_edges",
    "host_indices",
    "leaf_spine",
    "rail_optimized",
    "with_servers",
]
