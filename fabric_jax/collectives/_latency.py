"""NCCL's closed-form cost model of one collective: latency, bandwidth and the choice.

NCCL picks an algorithm for each collective call by a closed-form estimate,
``time = latency + bytes / bandwidth`` (NVIDIA/nccl ``src/graph/tuning.cc``,
``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``; constants of the current master,
``ncclTunerConstantsDefaults``).  This module transcribes that model for the Simple
protocol, the one large transfers use, and the algorithms of a data-parallel group:

* **ring** (every op): ``baseLat + (nsteps - nInter) intraLat + nInter interLat``
  with ``nsteps = p - 1`` for all-gather / reduce-scatter, ``2 (p - 1)`` for
  all-reduce, and ``nInter`` the steps that cross the network (``nodes - 1``, resp.
  ``2 (nodes - 1)``); bandwidth ``busBw p / nsteps``.
* **PAT** (all-gather and reduce-scatter; NCCL >= 2.23, one rank per node only):
  ``8 + log2(nodes) interLat / 3.5 + 2.8 p`` us ("Still a linear part; hopefully we'll
  manage to remove it at some point"), bandwidth ``0.75 busBw`` (S. Jeaugey, "PAT: a
  new algorithm for all-gather and reduce-scatter operations at scale",
  arXiv:2506.20252, 2025: logarithmic network transfers for small sizes, bounded
  buffers).
* **tree** (all-reduce): ``baseLat + 2 ((ppn - 1) intraLat + log2(nodes) interLat)``,
  bandwidth ``0.92 busBw / 2``.
* **p2p** (a send/receive, and the direct all-to-all built of them): NCCL's tuner has
  no model for point-to-point; here one network step of the ring model, ``baseLat +
  interLat`` (an assumption).

Constants (Simple protocol, microseconds): ``baseLat`` ring 8.4, tree 6.8, PAT 8.0;
``hwLat`` network ring 14.0, tree 14.0, PAT 14.0, NVLink ring 3.4, tree 4.0.  With one
rank per node NCCL charges the tree's network latency to every algorithm ("With ppn=1
latencies are fully exposed"); the same 14 us here.  ``interLat`` adds the network's
own latency twice for Simple (NCCL's ``latencyInter``, the net plugin's reported
latency, "plus the flush"): here ``path_latency``, the fabric's zero-load one-way
latency between the two ranks (switches, links, NICs), so a fabric with faster
switches pays less per step -- a modelled mechanism, not a NCCL constant.  A
multi-node ring's intra-node steps cost at least NCCL's network overhead (``3 x 1 us``
for Simple on a non-AMD host).  ``lg`` is NCCL's ``log2i`` (floor).

Bus bandwidth ``busBw`` is the caller's (e.g. the NIC line rate times
:data:`~._tuning.LINK_EFFICIENCY` ``["net"]``).  Departures: one protocol (Simple; LL
and LL128 win only below ~1 MB, which no gradient bucket at this scale is), no
NVLS / CollNet, no tree correction factors (they scale tree bandwidth below 128 MB).

Units: seconds, bytes, bytes/s (the constants are quoted in microseconds).
"""

from __future__ import annotations

import math

__all__ = ["NCCL_BASE_LATENCY_US", "NCCL_NET_LATENCY_US", "NCCL_NVLINK_LATENCY_US",
           "LATENCY_ALGORITHMS", "nccl_latency", "nccl_time", "nccl_choice"]

#: ``baseLat`` (Simple), per algorithm, us (NVIDIA/nccl ``src/graph/tuning.cc``).
NCCL_BASE_LATENCY_US = {"ring": 8.4, "tree": 6.8, "pat": 8.0, "p2p": 8.4}
#: ``hwLat[NET]`` (Simple), us; with one rank per node every algorithm uses the tree's.
NCCL_NET_LATENCY_US = {"ring": 14.0, "tree": 14.0, "pat": 14.0, "p2p": 14.0}
#: ``hwLat[NVLINK]`` (Simple), us.
NCCL_NVLINK_LATENCY_US = {"ring": 3.4, "tree": 4.0, "pat": 4.0, "p2p": 3.4}
#: NCCL's network overhead per intra-node ring step of a multi-node ring (``3 x 1 us``
#: for Simple, ``getNetOverhead``), us.
_NET_OVERHEAD_US = 3.0
#: PAT's bandwidth factor and linear term, ``busBw *= .75``; ``nRanks * 2.8`` us.
_PAT_BW, _PAT_LINEAR_US = 0.75, 2.8
#: Tree all-reduce bandwidth: ``0.92 busBw`` over two trees (``ratio .5``).
_TREE_BW = 0.92 * 0.5

#: The algorithms each op may use in this model.
LATENCY_ALGORITHMS = {"all_gather": ("ring", "pat"), "reduce_scatter": ("ring", "pat"),
                      "all_reduce": ("ring", "tree"), "p2p": ("p2p",),
                      "all_to_all": ("p2p",)}


def _log2i(n: int) -> int:
    return int(n).bit_length() - 1


def _check(op, algorithm, n_ranks, n_nodes, path_latency):
    if op not in LATENCY_ALGORITHMS:
        raise ValueError(f"op: {op!r} is not one of {sorted(LATENCY_ALGORITHMS)}")
    if algorithm not in LATENCY_ALGORITHMS[op]:
        raise ValueError(f"algorithm: {algorithm!r} does not run {op} (one of "
                         f"{LATENCY_ALGORITHMS[op]})")
    p = int(n_ranks)
    nodes = p if n_nodes is None else int(n_nodes)
    if p < 1 or nodes < 1 or nodes > p or p % nodes:
        raise ValueError(f"n_ranks, n_nodes: need 1 <= n_nodes <= n_ranks with n_nodes "
                         f"dividing n_ranks; got {n_ranks!r}, {n_nodes!r}")
    if not (path_latency >= 0 and math.isfinite(path_latency)):
        raise ValueError(f"path_latency: must be a finite number of seconds >= 0; got "
                         f"{path_latency!r}")
    if algorithm == "pat" and nodes != p:
        raise ValueError(f"algorithm: NCCL runs PAT with one rank per node only; got "
                         f"{p} ranks on {nodes} nodes (use 'ring')")
    return p, nodes


def nccl_latency(op: str, algorithm: str, n_ranks: int, n_nodes: int | None = None, *,
                 path_latency: float = 0.0) -> float:
    """Latency term of NCCL's model for one collective, seconds (module docstring).

    Args:
      op: ``"all_gather"``, ``"reduce_scatter"``, ``"all_reduce"``, ``"p2p"`` or
        ``"all_to_all"`` (direct: its sends go out together, one network step).
      algorithm: ``"ring"``, ``"pat"``, ``"tree"`` or ``"p2p"`` (:data:`LATENCY_ALGORITHMS`).
      n_ranks: ranks of the communicator; n_nodes: the servers they are on (default
        ``n_ranks``: one rank per node).
      path_latency: the fabric's zero-load one-way latency between two ranks, s (NCCL's
        ``latencyInter``, counted twice for Simple).

    Raises:
      ValueError: unknown op or algorithm, impossible rank / node counts, PAT with
        several ranks per node, a negative latency.
    """
    p, nodes = _check(op, algorithm, n_ranks, n_nodes, path_latency)
    if p == 1:
        return 0.0
    ppn = p // nodes
    inter = (NCCL_NET_LATENCY_US["tree" if ppn == 1 else algorithm]
             + 2.0 * path_latency * 1e6)
    intra = NCCL_NVLINK_LATENCY_US[algorithm]
    base = NCCL_BASE_LATENCY_US[algorithm]
    if algorithm == "p2p":
        return (base + (inter if nodes > 1 else intra)) * 1e-6
    if algorithm == "pat":
        return (base + _log2i(nodes) * inter / 3.5 + _PAT_LINEAR_US * p) * 1e-6
    if algorithm == "tree":
        return (base + 2.0 * ((ppn - 1) * intra + _log2i(nodes) * inter)) * 1e-6
    steps = 2 * (p - 1) if op == "all_reduce" else p - 1
    n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if op == "all_reduce" else nodes - 1)
    if nodes > 1:
        intra = max(intra, _NET_OVERHEAD_US)
    return (base + (steps - n_inter) * intra + n_inter * inter) * 1e-6


def nccl_time(op: str, algorithm: str, nbytes: float, n_ranks: int,
              n_nodes: int | None = None, *, bus_bandwidth: float,
              path_latency: float = 0.0) -> float:
    """NCCL's estimate of one collective, ``latency + nbytes / algorithm bandwidth``, s.

    ``nbytes`` follows NCCL (and nccl-tests): the all-reduce buffer, the full output of
    all-gather, the full input of reduce-scatter, one message for ``p2p``, a rank's
    send buffer for ``all_to_all``.  ``bus_bandwidth``: the bus bandwidth of one rank,
    bytes/s (for a ring over the network, its NIC's effective rate)."""
    if not (bus_bandwidth > 0 and math.isfinite(bus_bandwidth)):
        raise ValueError(f"bus_bandwidth: must be a finite rate > 0 in bytes/s; got "
                         f"{bus_bandwidth!r}")
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes: must be a finite byte count >= 0; got {nbytes!r}")
    lat = nccl_latency(op, algorithm, n_ranks, n_nodes, path_latency=path_latency)
    p = int(n_ranks)
    if p == 1:
        return 0.0
    if algorithm == "pat":
        bw = _PAT_BW * bus_bandwidth
    elif algorithm == "tree":
        bw = _TREE_BW * bus_bandwidth
    elif algorithm == "ring":
        steps = 2 * (p - 1) if op == "all_reduce" else p - 1
        bw = bus_bandwidth * p / steps
    else:                       # p2p; all-to-all sends (p - 1)/p of its buffer
        bw = bus_bandwidth * (p / (p - 1) if op == "all_to_all" else 1.0)
    return lat + float(nbytes) / bw


def nccl_choice(op: str, nbytes: float, n_ranks: int, n_nodes: int | None = None, *,
                bus_bandwidth: float, path_latency: float = 0.0,
                algorithms=None) -> tuple[str, float]:
    """``(algorithm, seconds)``: the algorithm NCCL's model picks for one collective
    (the smallest :func:`nccl_time` among ``algorithms``, default every one the op may
    use here; PAT only with one rank per node, as NCCL enables it)."""
    p = int(n_ranks)
    nodes = p if n_nodes is None else int(n_nodes)
    if op not in LATENCY_ALGORITHMS:
        raise ValueError(f"op: {op!r} is not one of {sorted(LATENCY_ALGORITHMS)}")
    cands = LATENCY_ALGORITHMS[op] if algorithms is None else tuple(algorithms)
    cands = [a for a in cands if not (a == "pat" and nodes != p)]
    if not cands:
        raise ValueError(f"algorithms: none of {algorithms!r} runs {op} on {p} ranks "
                         f"over {nodes} nodes")
    times = {a: nccl_time(op, a, nbytes, p, nodes, bus_bandwidth=bus_bandwidth,
                          path_latency=path_latency) for a in cands}
    best = min(cands, key=lambda a: (times[a], cands.index(a)))
    return best, times[best]
