"""NCCL's protocols, per-step latencies, link efficiencies and algorithm selection.

Protocols (NCCL ``src/device/prims_*.h``; tuning model ``src/graph/tuning.cc``):

* **LL** (low latency): 8-byte stores of 4 bytes of data + a 4-byte flag, no
  synchronisation round trip; the lowest per-step latency, a quarter of the Simple
  bandwidth in NCCL's model (``busBw *= 1.0/4.0`` for ring all-reduce).
* **LL128**: 128-byte lines with 120 bytes of data (``0.92`` of Simple,
  "120.0/128.0"), latency between LL and Simple.
* **Simple**: bulk copies with a flag per chunk (memory fences): full bandwidth, the
  highest per-step latency.

:data:`PROTOCOLS` holds, per protocol, NCCL's ``baseLat`` (once per collective: kernel
launch and setup) and ``hwLat`` (per algorithm step, NVLink vs network), ring column,
from the tuning table of NVIDIA/nccl ``src/graph/tuning.cc`` (v2.8-era values, in us:
``baseLat`` ring ``{LL 3.6, LL128 10.0, Simple 8.4}``; ``hwLat`` NVLink ring
``{.47, 1.9, 3.4}``, network ring ``{2.7, 4.0, 9.6}``).  A step that crosses the
fabric is charged the network figure, others the NVLink one; the topology's link
latencies are added on top (NCCL's figures are host-to-host measurements that include
a short wire; our fabric links default to a fraction of a microsecond per hop in
:mod:`fabric_jax.systems`, so the double count is small -- an assumption).

Link efficiency (:data:`LINK_EFFICIENCY`): the fraction of line rate NCCL's Simple
copies reach, per link class -- the only calibrated numbers, each from one published
maintainer statement:

* NVLink ``0.822``: "450GB/s is the line rate. With the protocol overhead (~20%) NCCL
  can get an effective NVLink bandwidth of 370GB/s" (S. Jeaugey, NVIDIA/nccl-tests
  issue #212, H100);
* network ``0.94``: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (NVIDIA/
  nccl-tests issue #290): 47 / 50;
* NVLS ``0.687``: the NVSwitch multimem reduction path; on 8 H100 "you should reach a
  peak busBw of ~480GB/s (algbw ~275GB/s)" (nccl-tests #212), which with the NVLS
  traffic model of :func:`~fabric_jax.collectives.nvls_all_reduce` (``S (n+1)/n`` per
  NVLink direction) is 309 GB/s = 0.687 x 450.  The 4-GPU figure (~370 GB/s,
  NVIDIA/nccl issue #1455) is then a prediction, checked in the tests.
* PCIe ``1.0`` (not a bottleneck for one 400G NIC per x16 Gen5 GPU).

Selection (:func:`select`), as ``ncclTopoGetAlgoTime``: for every eligible (algorithm,
protocol), estimated time = critical-path latency of its plan + ``S x max over links of
(bytes on the link / effective capacity)`` (both from the plan itself, built at unit
size), and the smallest wins.  Eligibility (:data:`ALGORITHMS`): ring for every op;
tree, NVLS and the hierarchical variants for all-reduce only, NVLS only with NVSwitch
servers, SHARP only when the fabric has it; all-to-all is direct sends.  Override with
``algorithm=`` / ``protocol=``.

Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Protocol", "PROTOCOLS", "ALGORITHM_PROTOCOLS", "LINK_EFFICIENCY", "ALGORITHMS", "DEFAULT_CHUNKS",
           "SHARP_LEVEL_LATENCY_US", "CHUNK_LEVELS", "CHUNK_BYTES",
           "auto_chunks"]


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One NCCL protocol's cost parameters.

    Attributes:
      name: ``"LL"``, ``"LL128"`` or ``"Simple"``.
      base_latency_us: once per collective (launch and setup), microseconds.
      nvlink_step_us: per step over NVLink / PCIe inside a server, microseconds.
      net_step_us: per step across the network, microseconds.
      bw_fraction: fraction of the Simple bandwidth the protocol reaches.
    """

    name: str
    base_latency_us: float
    nvlink_step_us: float
    net_step_us: float
    bw_fraction: float


#: NVIDIA/nccl src/graph/tuning.cc (ring column of baseLat / hwLat; LL 1/4 and LL128
#: 0.92 bandwidth factors of ncclTopoTuneModel).
PROTOCOLS = {
    "LL": Protocol("LL", 3.6, 0.47, 2.7, 0.25),
    "LL128": Protocol("LL128", 10.0, 1.9, 4.0, 0.92),
    "Simple": Protocol("Simple", 8.4, 3.4, 9.6, 1.0),
}

#: Fraction of line rate reached by NCCL's Simple copies, per link class (module
#: docstring for the sources).  ``nvls`` applies to NVLink under the NVLS algorithms.
LINK_EFFICIENCY = {"net": 0.94, "nvlink": 0.822, "pcie": 1.0, "nvls": 0.687}

#: Protocols each algorithm supports (NCCL: NVLS and NVLS-tree run Simple only; CollNet
#: (SHARP) has no LL128; others all three).
ALGORITHM_PROTOCOLS = {"nvls": ("Simple",), "nvls_tree": ("Simple",),
                       "sharp": ("LL", "Simple")}

#: Algorithms eligible per op for automatic selection.
ALGORITHMS = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "sharp"),
    "all_gather": ("ring",),
    "reduce_scatter": ("ring",),
    "broadcast": ("ring",),
    "all_to_all": ("direct",),
}

#: Pipeline depth (chunks) of tree, NVLS, SHARP, hierarchical and broadcast plans when
#: ``n_chunks`` is not given: the largest of :data:`CHUNK_LEVELS` that keeps a chunk at
#: least :data:`CHUNK_BYTES`.  NCCL pipelines in chunks of ``NCCL_BUFFSIZE /
#: NCCL_STEPS`` per channel (4 MiB / 8 = 512 KiB for Simple; NVLS uses 128 KiB); small
#: messages go in one chunk, large ones in many.  A few fixed levels keep the number of
#: transfers independent of the message size (an 8 GB sweep stays cheap, and sizes of
#: one level share a compiled simulation); the last chunk's drain is then up to
#: ``1/16`` of the message instead of one 128 KiB chunk: an approximation.
CHUNK_LEVELS = (1, 4, 16)
CHUNK_BYTES = 128 * 1024
DEFAULT_CHUNKS = None


def auto_chunks(nbytes: float) -> int:
    """Pipeline depth for a message of ``nbytes`` (see :data:`CHUNK_LEVELS`)."""
    k = 1
    for level in CHUNK_LEVELS:
        if nbytes >= level * CHUNK_BYTES:
            k = level
    return k


#: SHARP: latency of one aggregation level (switch reduction), microseconds.  An
#: assumption of the order of a Quantum-2 switch traversal plus the aggregation node's
#: processing (Graham et al., "Scalable Hierarchical Aggregation Protocol (SHArP)",
#: COMHPC 2016, report a few microseconds per tree for small reductions).
SHARP_LEVEL_LATENCY_US = 1.0
