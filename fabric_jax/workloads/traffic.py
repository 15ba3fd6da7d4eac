"""Non-collective traffic: Poisson background load, incast, random permutations.

Background traffic follows the standard open-loop model of the data-centre transport
literature (pFabric, Alizadeh et al. SIGCOMM 2013; HPCC, Li et al. SIGCOMM 2019): each
host starts flows as a Poisson process with rate

    lambda = load * link_rate / E[size]      (flows per second per host)

to a destination drawn uniformly among the other hosts, with sizes drawn from an
empirical :class:`FlowSizeCDF`.  The offered load of each host's access link is then
``lambda * E[size] / link_rate = load``.  Arrivals are generated exactly: the number of
flows per host over ``duration`` is Poisson(``lambda * duration``) and, given the count,
their times are i.i.d. uniform on the window (the order-statistics property).

``incast`` (many senders to one receiver at once, the partition/aggregate pattern) and
``permutation`` (each host sends to one other, a random derangement: every host sends
and receives exactly one flow) are the two classic stress patterns.

Units: bytes, seconds, bytes per second (``link_rate``; use ``fabric_jax.units.gbps``).

Example:
    >>> from fabric_jax.units import gbps
    >>> from fabric_jax.workloads import poisson_background
    >>> w = poisson_background(16, 0.3, gbps(100), "web_search", 0.01, seed=0)
"""

from __future__ import annotations

import numpy as np

from fabric_jax.workloads._random import as_key, as_rng
from fabric_jax.workloads.cdf import FlowSizeCDF
from fabric_jax.workloads.flows import Workload, check_hosts, check_size, single_group

__all__ = ["poisson_background", "incast", "permutation"]


def _positive(value, name):
    try:
        val = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not np.isfinite(val) or val <= 0:
        raise ValueError(f"{name}: must be finite and > 0, got {val}")
    return val


def poisson_background(hosts, load: float, link_rate: float, size_cdf, duration: float,
                       seed: int = 0, *, start: float = 0.0,
                       job: str = "background") -> Workload:
    """Open-loop Poisson background traffic at a target access-link load.

    Args:
        hosts: an int ``n_hosts`` (hosts ``0..n-1``) or int [hosts] distinct host indices
            (at least 2).
        load: offered load per host as a fraction of ``link_rate`` (> 0; e.g. 0.3).
        link_rate: host access-link capacity, bytes/s.
        size_cdf: a :class:`FlowSizeCDF` or a built-in name (``"web_search"``, ...).
        duration: length of the arrival window, seconds.
        seed: int seed (NumPy generator for counts, times and destinations; a
            ``jax.random`` key derived from it for sizes).
        start: window start, seconds.
        job: job name of these flows.

    Returns:
        ``Workload`` of independent flows (``group = -1``, no groups), sorted by arrival.
        Expected bytes per host: ``load * link_rate * duration``.
    """
    if isinstance(hosts, (int, np.integer)):
        if hosts < 2:
            raise ValueError(f"hosts: need at least 2 hosts, got {hosts}")
        hosts = np.arange(int(hosts), dtype=np.int32)
    hosts = check_hosts(hosts)
    load = _positive(load, "load")
    link_rate = _positive(link_rate, "link_rate")
    duration = _positive(duration, "duration")
    start = float(start)
    if not np.isfinite(start) or start < 0:
        raise ValueError(f"start: must be finite and >= 0 seconds, got {start}")
    size_cdf = FlowSizeCDF.resolve(size_cdf, "size_cdf")
    mean = size_cdf.mean()
    if mean <= 0:
        raise ValueError("size_cdf: the mean flow size must be > 0")
    rng = as_rng(seed)
    n = hosts.size
    rate = load * link_rate / mean                    # flows / s / host
    counts = rng.poisson(rate * duration, size=n)
    src_rank = np.repeat(np.arange(n), counts)
    total = src_rank.size
    times = start + rng.uniform(0.0, duration, size=total)
    # Uniform over the n-1 other hosts: add a non-zero offset modulo n.
    dst_rank = (src_rank + rng.integers(1, n, size=total)) % n
    key = as_key(int(rng.integers(0, 2**31 - 1)))  # sizes: jax.random, seeded from rng
    sizes = size_cdf.sample(key, total)
    order = np.argsort(times, kind="stable")
    return Workload(
        src=hosts[src_rank[order]], dst=hosts[dst_rank[order]], size=sizes[order],
        arrival=times[order], deps=np.full((total, 0), -1, np.int32),
        delay=np.zeros(total), job=np.zeros(total, np.int32),
        group=np.full(total, -1, np.int32), group_names=(), job_names=(job,),
        group_bytes=np.zeros(0), group_kind=(), group_ranks=np.zeros(0, np.int32),
    )


def incast(senders, receiver: int, size, *, job: str = "job0", name: str | None = None,
           arrival: float = 0.0) -> Workload:
    """``len(senders)`` simultaneous flows of ``size`` bytes into one ``receiver``.

    ``group_bytes`` is the total ``len(senders) * size``, so ``algbw`` is the receiver's
    goodput.

    Raises:
        ValueError: if the receiver is among the senders.
    """
    senders = check_hosts(senders, "senders", min_ranks=1)
    receiver = int(receiver)
    if receiver < 0:
        raise ValueError(f"receiver: must be a host index >= 0, got {receiver}")
    if np.any(senders == receiver):
        raise ValueError("receiver: must not be one of the senders")
    size = check_size(size)
    n = senders.size
    return single_group(senders, np.full(n, receiver), size, None, name=name or "incast",
                        kind="incast", group_bytes=n * size, n_ranks=n + 1, job=job,
                        arrival=arrival)


def permutation(hosts, size, seed: int = 0, *, job: str = "job0",
                name: str | None = None, arrival: float = 0.0) -> Workload:
    """Each host sends ``size`` bytes to another, along a uniformly random derangement.

    The derangement is drawn by rejection (a uniform permutation has no fixed point with
    probability ~1/e, so ~2.7 draws on average), hence uniform over derangements.
    """
    hosts = check_hosts(hosts)
    size = check_size(size)
    rng = as_rng(seed)
    n = hosts.size
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            break
    return single_group(hosts, hosts[perm], size, None, name=name or "permutation",
                        kind="permutation", group_bytes=size, n_ranks=n, job=job,
                        arrival=arrival)
