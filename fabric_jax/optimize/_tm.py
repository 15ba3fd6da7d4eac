"""Rack-to-rack traffic matrices (Meta clusters, via Parsimon's evaluation) and a fabric
to route them on.

The JSON files in ``parsimon-eval/spatials/`` (Zhao et al., "Scalable Tail Latency
Estimation for Data Center Networks", NSDI 2023; matrices from Roy et al., "Inside the
Social Network's (Datacenter) Network", SIGCOMM 2015) hold ``matrix.inner``, an ``N x N``
integer matrix of *relative* byte counts between racks (row = source), the rack name of
each index (``matrix.idx2name``) and ``pod2tors``.  They carry no absolute rate: callers
scale them to a target load.

:func:`meta_fabric` builds the four-plane pod fabric of Meta's data centres (Andreyev,
"Introducing data center fabric", 2014) at rack granularity: each rack switch (the
*host* here: it sources and sinks its rack's traffic) has one uplink to each of the
``planes`` fabric switches of its pod; fabric switch ``j`` of every pod connects to the
``spines_per_plane`` spine switches of plane ``j``.  Paths: 2 hops inside a pod
(``planes`` choices), 4 hops across pods (``planes * spines_per_plane`` choices).

Units: capacities in bytes/s (arguments in Gb/s, converted at the edge).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..topology import Topology, from_edges

__all__ = ["load_rack_matrix", "meta_fabric", "perturbed_matrices"]


def load_rack_matrix(path) -> tuple[np.ndarray, np.ndarray]:
    """Loads a Parsimon spatial JSON.

    Args:
      path: file path.

    Returns:
      ``(matrix, pod)``: ``[racks, racks]`` float64 relative bytes (diagonal zeroed:
      intra-rack traffic never reaches the fabric) and ``[racks]`` int pod of each rack
      (pods numbered in ``pod2tors`` order; racks missing from it get pod -1).

    Raises:
      ValueError: the file is missing or not in the expected format.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"traffic matrix file {str(p)!r} not found; the Meta matrices live "
                         f"in ../shared/reference/workloads/parsimon-eval/spatials/")
    try:
        data = json.loads(p.read_text())
        m = np.asarray(data["matrix"]["inner"], np.float64)
        names = list(data["matrix"]["idx2name"])
        pod2tors = data["pod2tors"]
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{str(p)!r} is not a Parsimon spatial JSON ({exc})") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{str(p)!r}: matrix.inner must be square; got {m.shape}")
    pod_of = {t: i for i, tors in enumerate(pod2tors.values()) for t in tors}
    pod = np.array([pod_of.get(n, -1) for n in names[:m.shape[0]]]
                   + [-1] * max(0, m.shape[0] - len(names)), np.int64)
    np.fill_diagonal(m, 0.0)
    return m, pod


def meta_fabric(n_pods: int, racks_per_pod: int, *, planes: int = 4,
                spines_per_plane: int = 4, rack_uplink_gbps: float = 100.0,
                spine_gbps: float = 100.0) -> Topology:
    """Meta-style four-plane pod fabric at rack granularity (see the module docstring).

    Hosts are the rack switches ``rack{i}``, ``i = pod * racks_per_pod + r``.

    Args:
      n_pods: pods (>= 1).
      racks_per_pod: rack switches per pod (>= 1).
      planes: fabric switches per pod = spine planes.
      spines_per_plane: spine switches per plane.
      rack_uplink_gbps: each rack-to-fabric-switch link, Gb/s.
      spine_gbps: each fabric-to-spine link, Gb/s.
    """
    for name, v in (("n_pods", n_pods), ("racks_per_pod", racks_per_pod),
                    ("planes", planes), ("spines_per_plane", spines_per_plane)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")
    racks = [f"rack{i}" for i in range(n_pods * racks_per_pod)]
    edges = []
    for i, rack in enumerate(racks):
        pod = i // racks_per_pod
        edges += [(rack, f"pod{pod}/fsw{j}", {"capacity_gbps": rack_uplink_gbps})
                  for j in range(planes)]
    for pod in range(n_pods):
        for j in range(planes):
            edges += [(f"pod{pod}/fsw{j}", f"plane{j}/ssw{m}", {"capacity_gbps": spine_gbps})
                      for m in range(spines_per_plane)]
    return from_edges(edges, hosts=racks, host_transit=False,
                      name=f"meta_fabric({n_pods} pods x {racks_per_pod} racks, "
                           f"{planes} planes x {spines_per_plane} spines)")


def perturbed_matrices(bases, n: int, *, sigma: float = 0.5, seed: int = 0) -> np.ndarray:
    """``[n, racks, racks]`` samples around real matrices.

    Sample ``i`` takes a base matrix uniformly at random, multiplies every entry by an
    independent log-normal factor ``exp(sigma * N(0, 1) - sigma^2 / 2)`` (mean 1) and
    rescales to the base's total: the same hot spots, different fine structure (a
    stand-in for the time series DOTE trains on, which these files do not contain).

    Args:
      bases: a ``[racks, racks]`` matrix or a sequence of them (same shape).
      n: number of samples.
      sigma: log-normal spread (>= 0).
      seed: NumPy seed.
    """
    b = np.asarray(bases, np.float64)
    if b.ndim == 2:
        b = b[None]
    if b.ndim != 3 or b.shape[1] != b.shape[2]:
        raise ValueError(f"bases must be [racks, racks] or [k, racks, racks]; got {b.shape}")
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0; got {sigma}")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, b.shape[0], n)
    noise = np.exp(sigma * rng.standard_normal((n,) + b.shape[1:]) - sigma**2 / 2)
    out = b[pick] * noise
    out *= (b[pick].sum(axis=(1, 2)) / np.maximum(out.sum(axis=(1, 2)), 1e-300))[:, None, None]
    return out
