"""Placing ranks of jobs on hosts.

A job's ranks are numbered ``0..n_ranks-1``; a placement is the int array ``hosts`` with
``hosts[r]`` the host (NIC endpoint) of rank ``r``, which every collective builder takes.
Policies:

* ``"packed"`` — the lowest-numbered free hosts, in order (with server-major host
  numbering this fills servers one after another, the scheduler's best case);
* ``"random"`` — a uniformly random set of free hosts in random rank order (a
  fragmented cluster, the worst case for locality);
* ``"rail_aligned"`` — for rail-optimised fabrics (NVIDIA DGX SuperPOD reference
  architecture): each server hosts ``ranks_per_server`` consecutive ranks, rank ``r``
  uses rail (NIC index) ``a + r mod ranks_per_server`` on server ``r // ranks_per_server``,
  with the same rail window ``[a, a + ranks_per_server)`` on every server.  With the
  Megatron rank order (tensor-parallel fastest), data-parallel peers ``r, r + g,
  r + 2g, ...`` then sit on one rail, so their traffic stays on one rail leaf.

Server structure comes from ``host_server`` (server id of each host; a host's rail is its
position among its server's hosts in index order) or, for uniform server-major
numbering, from ``nics_per_server`` (``server = h // nics``, ``rail = h % nics``).

``place_jobs`` places several tenants one after another, never reusing a host.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fabric_jax.workloads._random import as_rng

__all__ = ["place_job", "place_jobs", "server_rails"]

_POLICIES = ("packed", "random", "rail_aligned")


def server_rails(n_hosts: int, host_server=None, nics_per_server: int | None = None):
    """Server and rail (NIC index within the server) of every host.

    Returns:
        ``(server, rail)``: int [n_hosts] each; servers are renumbered ``0..S-1`` in
        order of first appearance.
    """
    if host_server is not None:
        hs = np.asarray(host_server)
        if hs.shape != (n_hosts,):
            raise ValueError(f"host_server: expected shape ({n_hosts},) (one server id per "
                             f"host), got {hs.shape}")
        _, server = np.unique(hs, return_inverse=True)
        order = np.argsort(server, kind="stable")
        first = np.searchsorted(server[order], server[order], side="left")
        rail = np.empty(n_hosts, np.int64)
        rail[order] = np.arange(n_hosts) - first
        return server.astype(np.int64), rail
    if nics_per_server is not None:
        nics = int(nics_per_server)
        if nics < 1:
            raise ValueError(f"nics_per_server: must be >= 1, got {nics_per_server}")
        h = np.arange(n_hosts)
        return h // nics, h % nics
    raise ValueError("host_server/nics_per_server: rail_aligned placement needs the server "
                     "of each host; pass host_server (from the topology) or nics_per_server")


def _free_mask(n_hosts, exclude):
    free = np.ones(n_hosts, bool)
    if exclude is not None:
        ex = np.asarray(exclude, np.int64).reshape(-1)
        if np.any((ex < 0) | (ex >= n_hosts)):
            raise ValueError(f"exclude: host indices must lie in [0, {n_hosts})")
        free[ex] = False
    return free


def place_job(n_ranks: int, n_hosts: int, policy: str = "packed", *, seed=0,
              host_server=None, nics_per_server: int | None = None, exclude=None,
              ranks_per_server: int | None = None) -> np.ndarray:
    """Choose hosts for the ranks of one job.

    Args:
        n_ranks: number of ranks (>= 1).
        n_hosts: number of hosts in the topology.
        policy: ``"packed"``, ``"random"`` or ``"rail_aligned"`` (module docstring).
        seed: int seed or ``numpy.random.Generator`` (``"random"`` only).
        host_server: int [n_hosts] server id of each host (``rail_aligned``).
        nics_per_server: NICs (rails) per server, for server-major numbering.
        exclude: hosts that are taken (other tenants, failed nodes).
        ranks_per_server: ranks per server for ``rail_aligned`` (default: the number of
            rails, or ``n_ranks`` if smaller); must divide ``n_ranks``.

    Returns:
        int32 [n_ranks] host of each rank.

    Raises:
        ValueError: unknown policy, or not enough free hosts (or aligned rails).
    """
    if policy not in _POLICIES:
        raise ValueError(f"policy: expected one of {_POLICIES}, got {policy!r}")
    n_ranks, n_hosts = int(n_ranks), int(n_hosts)
    if n_ranks < 1:
        raise ValueError(f"n_ranks: must be >= 1, got {n_ranks}")
    free = _free_mask(n_hosts, exclude)
    n_free = int(free.sum())
    if n_ranks > n_free:
        raise ValueError(f"n_ranks: {n_ranks} ranks do not fit on the {n_free} free hosts "
                         f"(of {n_hosts})")
    if policy == "packed":
        return np.flatnonzero(free)[:n_ranks].astype(np.int32)
    if policy == "random":
        rng = as_rng(seed)
        return rng.choice(np.flatnonzero(free), size=n_ranks, replace=False).astype(np.int32)
    return _rail_aligned(n_ranks, n_hosts, free, host_server, nics_per_server,
                         ranks_per_server)


def _rail_aligned(n_ranks, n_hosts, free, host_server, nics_per_server, ranks_per_server):
    server, rail = server_rails(n_hosts, host_server, nics_per_server)
    n_servers, n_rails = int(server.max()) + 1, int(rail.max()) + 1
    host_at = np.full((n_servers, n_rails), -1, np.int64)
    host_at[server, rail] = np.arange(n_hosts)
    ok = (host_at >= 0) & free[np.maximum(host_at, 0)]          # [servers, rails]
    per = min(n_ranks, n_rails) if ranks_per_server is None else int(ranks_per_server)
    if per < 1 or per > n_rails or n_ranks % per:
        raise ValueError(f"ranks_per_server: {per} must lie in [1, {n_rails}] and divide "
                         f"n_ranks={n_ranks}")
    need = n_ranks // per
    best = None
    for a in range(n_rails - per + 1):                          # rail windows
        servers = np.flatnonzero(ok[:, a:a + per].all(axis=1))
        if servers.size >= need:
            score = servers[need - 1]                           # highest server used
            if best is None or score < best[0]:
                best = (score, a, servers[:need])
    if best is None:
        raise ValueError(f"n_ranks: no rail window of {per} rails is free on {need} servers; "
                         "free hosts, lower ranks_per_server, or use policy='packed'")
    _, a, servers = best
    r = np.arange(n_ranks)
    return host_at[servers[r // per], a + r % per].astype(np.int32)


def place_jobs(jobs: Sequence, n_hosts: int, *, policy: str = "packed", seed=0,
               host_server=None, nics_per_server: int | None = None,
               exclude=None) -> list[np.ndarray]:
    """Place several tenants without overlap, in the order given.

    Args:
        jobs: per job either ``n_ranks``, ``(n_ranks, policy)`` or a dict of
            :func:`place_job` keyword arguments with ``n_ranks`` (and optionally
            ``policy``, ``ranks_per_server``).
        n_hosts, host_server, nics_per_server, exclude: as in :func:`place_job`.
        policy: default policy for jobs that do not name one.
        seed: int seed; one generator is shared, so the result is reproducible.

    Returns:
        list of int32 [n_ranks_j] host arrays, pairwise disjoint.
    """
    rng = as_rng(seed)
    taken = [np.asarray(exclude, np.int64).reshape(-1)] if exclude is not None else []
    out = []
    for k, spec in enumerate(jobs):
        if isinstance(spec, dict):
            kwargs = dict(spec)
        elif isinstance(spec, (tuple, list)):
            if len(spec) != 2:
                raise ValueError(f"jobs[{k}]: expected (n_ranks, policy), got {spec!r}")
            kwargs = {"n_ranks": spec[0], "policy": spec[1]}
        else:
            kwargs = {"n_ranks": spec}
        if "n_ranks" not in kwargs:
            raise ValueError(f"jobs[{k}]: missing n_ranks")
        kwargs.setdefault("policy", policy)
        try:
            hosts = place_job(n_hosts=n_hosts, seed=rng, host_server=host_server,
                              nics_per_server=nics_per_server,
                              exclude=np.concatenate(taken) if taken else None, **kwargs)
        except ValueError as exc:
            raise ValueError(f"jobs[{k}]: {exc}") from None
        taken.append(hosts.astype(np.int64))
        out.append(hosts)
    return out
