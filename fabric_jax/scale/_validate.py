"""Validation patterns at scale: ring shifts and random bisections on one rail.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import math

import numpy as np

from ..workloads.flows import Workload
from ._step import StepFlows

__all__ = ["ring_shift", "random_bisection", "window_efficiency", "balls_into_bins",
           "uplinks_used", "max_load_distribution", "expected_max_load",
           "expected_distinct", "polarized_uplinks"]


def _flows(src, dst, size, n_hosts, g) -> StepFlows:
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    n = src.size
    flows = Workload(src=src, dst=dst, size=np.full(n, float(size)), arrival=np.zeros(n),
                     deps=np.full((n, 0), -1, np.int32), delay=np.zeros(n),
                     job=np.zeros(n, np.int32), group=np.full(n, -1), group_names=(),
                     job_names=("job0",), group_bytes=np.zeros(0), group_kind=(),
                     group_ranks=np.zeros(0),
                     columns=dict(src_rank=src.astype(np.int32), dst_rank=dst.astype(np.int32),
                                  phase=np.zeros(n, np.int32), rail=(dst % g).astype(np.int32)))
    return StepFlows(flows, n_gpus=int(n_hosts), gpus_per_server=int(g), slices=1,
                     compute_time=0.0, tokens_per_step=1.0, info={"overlap": 0.0})


def ring_shift(topology, size: float, *, rail: int = 0, shift=None) -> StepFlows:
    """Every NIC of ``rail`` sends ``size`` bytes to the same-rail NIC ``shift`` servers
    on (default one scalable unit: every flow crosses the spines, and the flows of a
    leaf all go to the next leaf, so a spine's uplink and downlink carry the same
    flows: the balls-into-bins set-up of :func:`balls_into_bins`)."""
    g = int(topology.params["nics_per_server"])
    n_srv = topology.n_hosts // g
    shift = int(topology.params["servers_per_leaf"]) if shift is None else int(shift)
    srv = np.arange(n_srv)
    return _flows(srv * g + rail, ((srv + shift) % n_srv) * g + rail, size,
                  topology.n_hosts, g)


def random_bisection(topology, size: float, seed: int = 0, *, rail: int = 0) -> StepFlows:
    """A random bisect pattern on ``rail`` (Hoefler, Schneider, Lumsdaine, Cluster 2008):
    the NICs split into two random halves, each NIC of one half paired with a random
    NIC of the other, both directions sending ``size`` bytes."""
    g = int(topology.params["nics_per_server"])
    n_srv = topology.n_hosts // g
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_srv)
    a, b = perm[: n_srv // 2], perm[n_srv // 2: 2 * (n_srv // 2)]
    src = np.concatenate([a, b]) * g + rail
    dst = np.concatenate([b, a]) * g + rail
    return _flows(src, dst, size, topology.n_hosts, g)


def window_efficiency(run, nic_rate: float, t0: float, t1: float) -> float:
    """Delivered throughput of all flows averaged over snapshots in ``[t0, t1]`` (all
    flows still sending), over ``flows x nic_rate``: the mean per-flow bandwidth as a
    fraction of line rate (the quantity balls-into-bins and effective bisection
    bandwidth predict).  A flow is a (source, destination) pair: on a multi-plane fabric
    hashed routing runs each flow as one stripe per plane (:meth:`StepFlows.stripes`),
    and its stripes share that pair, so they count once."""
    keep = (run.t >= t0) & (run.t <= t1)
    if not keep.any():
        raise ValueError(f"t0, t1: no snapshot in [{t0}, {t1}] s")
    pairs = np.unique(np.stack([np.asarray(run.flows.src), np.asarray(run.flows.dst)]),
                      axis=1).shape[1]
    return float(np.mean(run.goodput[keep]) / (pairs * float(nic_rate)))


def balls_into_bins(n: int) -> float:
    """Expected share of ``n`` bins hit by ``n`` balls thrown uniformly: ``1 - (1 -
    1/n)^n`` (``-> 1 - 1/e = 0.632``)."""
    n = int(n)
    return 1.0 - (1.0 - 1.0 / n) ** n


def uplinks_used(topology, flows: StepFlows, links: np.ndarray) -> float:
    """Share of the leaf uplinks that carry at least one flow, over the uplinks of the
    leaves that send (host side, from each flow's path ``links [flows, 4]``: its second
    hop is the leaf's uplink when it crosses the spines)."""
    up = links[:, 1][links[:, 2] >= 0]
    src_leaf = np.asarray(topology.link_src)[up]
    n_up = np.bincount(np.asarray(topology.link_src)[np.flatnonzero(
        np.asarray(topology.node_tier)[np.asarray(topology.link_dst)] == 2)],
        minlength=topology.n_nodes)
    leaves = np.unique(src_leaf)
    return float(np.unique(up).size / n_up[leaves].sum())


def max_load_distribution(balls: int, bins: int) -> np.ndarray:
    """``[balls + 1]`` ``P(max load <= k)`` for ``balls`` thrown uniformly and
    independently into ``bins`` (exact: ``f_b(m) = sum_j Binom(m, 1/b)(j) f_{b-1}(m - j)``
    over ``j <= k``, bin by bin; Raab & Steger, "Balls into bins -- a simple and tight
    analysis", RANDOM 1998, give its asymptotics, ``ln n / ln ln n`` for ``n`` balls in
    ``n`` bins)."""
    from scipy.stats import binom
    n, K = int(balls), int(bins)
    if n < 0 or K < 1:
        raise ValueError(f"balls, bins: need balls >= 0 and bins >= 1; got {balls}, {bins}")
    m = np.arange(n + 1)
    out = np.zeros(n + 1)
    for k in range(n + 1):
        f = (m <= k).astype(float)                          # one bin: all m in it
        for b in range(2, K + 1):
            j = np.arange(min(k, n) + 1)
            pm = binom.pmf(j[None, :], m[:, None], 1.0 / b)  # [m, j]
            prev = np.where(m[:, None] - j[None, :] >= 0,
                            f[np.maximum(m[:, None] - j[None, :], 0)], 0.0)
            f = np.sum(pm * prev, axis=1)
        out[k] = f[n]
        if out[k] >= 1.0 - 1e-15:
            out[k:] = 1.0
            break
    return out


def expected_max_load(balls: int, bins: int, groups: int = 1) -> float:
    """Expected load of the fullest of ``bins`` bins after ``balls`` uniform throws,
    ``sum_k P(max > k)`` (:func:`max_load_distribution`), or of the fullest over
    ``groups`` independent such throws (``P(max <= k)^groups``: every sending leaf of a
    collective hashes its own flows).  With equal flows hashed onto equal links, the
    slowest flow's share of line rate is ``1 / max load``: the completion efficiency of
    a permutation (:func:`~fabric_jax.scale.completion_metrics`); with ``N`` QPs of
    ``1 / N`` of each flow, ``N / max load`` of ``N x`` the balls."""
    cdf = max_load_distribution(balls, bins) ** int(groups)
    return float(np.sum(1.0 - cdf))


def expected_distinct(balls: int, bins: int) -> float:
    """Expected number of distinct bins hit by ``balls`` uniform throws, ``K (1 - (1 -
    1/K)^n)``: the distinct paths of a connection's ``n`` QPs hashed independently onto
    ``K`` equal-cost uplinks (``--hash qp``)."""
    n, K = int(balls), int(bins)
    return K * (1.0 - (1.0 - 1.0 / K) ** n)


def polarized_uplinks(leaf_uplinks: int, spine_uplinks: int) -> int:
    """Uplinks a spine can use under polarised hashing
    (:func:`~fabric_jax.scale.tiered_ecmp_paths`): the flows a leaf sends to spine ``i``
    of ``S1`` all have ``h = i (mod S1)``, so ``h mod S2`` is fixed modulo ``gcd(S1,
    S2)`` and takes ``S2 / gcd(S1, S2)`` values; the spines' upward capacity usable is
    ``1 / gcd(S1, S2)`` of the built one (with ``S1 = S2``: one uplink per spine)."""
    s1, s2 = int(leaf_uplinks), int(spine_uplinks)
    return s2 // math.gcd(s1, s2)
