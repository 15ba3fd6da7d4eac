"""Topologies of the ns-3 RDMA simulators (HPCC's ``simulation/mix/*.txt`` format).

The HPCC authors' ns-3 simulator ([HPCC-NS3], github.com/alibaba-edu/
High-Precision-Congestion-Control, ``simulation/scratch/third.cc``) and the simulators
forked from it (ns3-datacenter of PowerTCP/ABM, Parsimon/m3's ground truth) read a
topology as a whitespace-separated token stream::

    <nodes> <switches> <links>
    <switch id> ... (``switches`` ids)
    <a> <b> <rate> <delay> <error_rate>      (``links`` lines, one full-duplex cable each)

Nodes are ``0 .. nodes-1``; the ids not listed as switches are hosts.  ``rate`` is an
ns-3 ``DataRate`` string (``100Gbps``, ``25Gbps``, ``400000Mbps``, ``1.25GBps``: bits
per second with ``bps``, bytes per second with ``Bps``; SI prefixes), ``delay`` an
ns-3 ``Time`` string (``1000ns``, ``1us``, ``0.001ms``; a bare number is seconds), and
``error_rate`` a packet error rate (HPCC's files all use 0; a lossless fluid fabric
has no random loss, so a non-zero value is rejected rather than silently ignored).

:func:`from_ns3_topology` turns such a file into a :class:`fabric_jax.Topology`:
host index ``i`` is the ``i``-th non-switch node in id order (HPCC's files number the
hosts first, so host index = ns-3 node id there), node names are ``h<id>`` and
``s<id>``.  Switch tiers come from the hop distance to the nearest host (1 = ToR, 2 =
aggregation, 3 = core); when every cable joins adjacent tiers the graph is a layered
Clos and routing is valley-free (``updown``), which on such a graph is exactly the
set of shortest paths that ns-3's ``CalculateRoute`` ECMP tables hold.

Buffers.  The ns-3 file has none; the simulator gives every switch one shared buffer
(``BUFFER_SIZE``, 32 MB in HPCC's ``mix/config.txt`` and ``run.py``'s ``16 bw/50`` MB at
100 Gb/s).  The fluid fabric has a buffer per port, so the shared buffer is split
evenly over the switch's ports (an assumption: the ns-3 MMU shares it dynamically,
``switch-mmu.cc``); a host's NIC port gets the share of the switch at the other end.

:func:`hpcc_fat_tree` builds the 320-host fat-tree of HPCC's large-scale simulations
(Li et al., SIGCOMM 2019, Sec. 5.1; ``simulation/mix/fat.txt``) without the file, and
:func:`to_ns3_topology` writes any topology back in the format.

Units: capacities bytes/s, latencies s, buffers bytes (``fabric_jax.units``).
"""

from __future__ import annotations

import os
import re
from collections import deque

import numpy as np

from . import units
from .topology import Topology

__all__ = ["from_ns3_topology", "hpcc_fat_tree", "to_ns3_topology",
           "HPCC_SWITCH_BUFFER_MB"]

#: Shared buffer per switch in HPCC's simulations, MB ([HPCC-NS3] ``mix/config.txt``
#: ``BUFFER_SIZE 32``; ``run.py`` sets ``16 * bw / 50`` MB = 32 MB at 100 Gb/s).
HPCC_SWITCH_BUFFER_MB = 32.0

_RATE_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9,
                "t": 1e12, "T": 1e12}
_TIME_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15,
              "min": 60.0, "h": 3600.0, "d": 86400.0}
_NUM = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"
_RATE_RE = re.compile(rf"^({_NUM})([kKmMgGtT]?)(bps|Bps|b/s|B/s)$")
_TIME_RE = re.compile(rf"^({_NUM})(s|ms|us|ns|ps|fs|min|h|d)?$")


def parse_rate(text: str) -> float:
    """ns-3 ``DataRate`` string -> bytes/s (``"100Gbps"`` -> 1.25e10)."""
    m = _RATE_RE.match(text)
    if not m:
        raise ValueError(f"rate {text!r} is not an ns-3 DataRate (e.g. '100Gbps', "
                         f"'400000Mbps', '12.5GBps')")
    value = float(m.group(1)) * _RATE_PREFIX[m.group(2)]
    return value if m.group(3)[0] == "B" else value / 8.0


def parse_time(text: str) -> float:
    """ns-3 ``Time`` string -> seconds (``"1000ns"`` -> 1e-6; a bare number is s)."""
    m = _TIME_RE.match(text)
    if not m:
        raise ValueError(f"delay {text!r} is not an ns-3 Time (e.g. '1000ns', '1us')")
    return float(m.group(1)) * _TIME_UNIT[m.group(2) or "s"]


def _read_text(path_or_text) -> tuple[str, str]:
    """(text, label): a path to an existing file, or the file's content itself."""
    if isinstance(path_or_text, os.PathLike):
        path_or_text = os.fspath(path_or_text)
    if not isinstance(path_or_text, str):
        raise ValueError("path_or_text must be a path (str or PathLike) or the text of "
                         f"an ns-3 topology; got {type(path_or_text).__name__}")
    if "\n" not in path_or_text.strip() and os.path.isfile(path_or_text):
        with open(path_or_text, encoding="utf-8") as fh:
            return fh.read(), os.path.basename(path_or_text)
    if "\n" not in path_or_text.strip():
        raise ValueError(f"path_or_text: {path_or_text!r} is neither an existing file nor "
                         "topology text (which has at least three lines)")
    return path_or_text, "ns3"


def _int_token(tok: str, what: str) -> int:
    try:
        v = int(tok)
    except ValueError:
        raise ValueError(f"ns-3 topology: {what} must be an integer; got {tok!r}") from None
    return v


def _tiers(n_nodes: int, is_host: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hop distance of every node to its nearest host (multi-source BFS on the host)."""
    adj = [[] for _ in range(n_nodes)]
    for u, v in zip(a.tolist(), b.tolist()):
        adj[u].append(v)
        adj[v].append(u)
    dist = np.full(n_nodes, -1, np.int64)
    queue = deque(np.flatnonzero(is_host).tolist())
    dist[is_host] = 0
    while queue:  # host-side parse of a topology file, O(nodes + cables)
        u = queue.popleft()
        for v in adj[u]:
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _port_shares(n_nodes, is_host, cab_a, cab_b, switch_buffer):
    """Per-cable-end buffer (bytes): the switch buffer over its ports (see module doc)."""
    ports = np.bincount(np.concatenate([cab_a, cab_b]), minlength=n_nodes)
    share = np.where(ports > 0, switch_buffer / np.maximum(ports, 1), 0.0)
    # a host's port takes the share of the switch it connects to
    buf_a = np.where(is_host[cab_a], share[cab_b], share[cab_a])
    buf_b = np.where(is_host[cab_b], share[cab_a], share[cab_b])
    return buf_a, buf_b


def from_ns3_topology(path_or_text, *, switch_buffer_mb: float = HPCC_SWITCH_BUFFER_MB,
                      buffer_kb: float | None = None, name: str | None = None) -> Topology:
    """Reads an ns-3 RDMA-simulator topology (HPCC ``mix/*.txt`` format).

    Args:
      path_or_text: path of the file, or its text (anything with a line break).
      switch_buffer_mb: shared buffer per switch, MB, split evenly over its ports
        (default 32 MB, [HPCC-NS3] ``BUFFER_SIZE``).
      buffer_kb: if given, the same egress buffer on every link instead, kB.
      name: topology name (default: the file name, or ``"ns3"`` for text).

    Returns:
      A :class:`~fabric_jax.Topology` with two links per line (``a -> b`` is link
      ``2i``, ``b -> a`` link ``2i + 1`` for the ``i``-th cable), kind ``"graph"``,
      ``updown`` when the tiers are a strict layering, ``params`` holding the ns-3
      node id of every node (``ns3_id``).

    Raises:
      ValueError: malformed header, unknown or duplicated switch ids, a link naming a
        node outside ``[0, nodes)``, a self-loop, a rate or delay ns-3 would not parse,
        a non-zero error rate, a node no host can reach, fewer tokens than the header
        announces, or trailing tokens.
    """
    text, label = _read_text(path_or_text)
    tokens = text.split()
    if len(tokens) < 3:
        raise ValueError("ns-3 topology: the first line must be '<nodes> <switches> <links>'")
    n_nodes = _int_token(tokens[0], "the node count")
    n_sw = _int_token(tokens[1], "the switch count")
    n_cab = _int_token(tokens[2], "the link count")
    if n_nodes < 2 or not 0 <= n_sw < n_nodes or n_cab < 1:
        raise ValueError(f"ns-3 topology: header '{n_nodes} {n_sw} {n_cab}' needs nodes >= 2, "
                         "0 <= switches < nodes and links >= 1")
    need = 3 + n_sw + 5 * n_cab
    if len(tokens) < need:
        raise ValueError(f"ns-3 topology: the header announces {n_sw} switch ids and {n_cab} "
                         f"links ({need} tokens) but the text has only {len(tokens)} tokens")
    if len(tokens) > need:
        raise ValueError(f"ns-3 topology: {len(tokens) - need} tokens after the {n_cab} links "
                         "the header announces; fix the link count")
    switches = np.array([_int_token(t, "a switch id") for t in tokens[3:3 + n_sw]], np.int64)
    if switches.size and (switches.min() < 0 or switches.max() >= n_nodes):
        raise ValueError(f"ns-3 topology: switch ids must lie in [0, {n_nodes})")
    if np.unique(switches).size != switches.size:
        raise ValueError("ns-3 topology: a switch id is listed twice")
    rows = np.array(tokens[3 + n_sw:], dtype=object).reshape(n_cab, 5)
    cab_a = np.array([_int_token(t, "a link end") for t in rows[:, 0]], np.int64)
    cab_b = np.array([_int_token(t, "a link end") for t in rows[:, 1]], np.int64)
    ends = np.concatenate([cab_a, cab_b])
    if ends.min() < 0 or ends.max() >= n_nodes:
        raise ValueError(f"ns-3 topology: link ends must be node ids in [0, {n_nodes})")
    if np.any(cab_a == cab_b):
        i = int(np.flatnonzero(cab_a == cab_b)[0])
        raise ValueError(f"ns-3 topology: link {i} is a self-loop at node {cab_a[i]}")
    rate = np.array([parse_rate(t) for t in rows[:, 2]])
    delay = np.array([parse_time(t) for t in rows[:, 3]])
    err = np.array([float(t) for t in rows[:, 4]])
    if np.any(rate <= 0):
        raise ValueError("ns-3 topology: every link rate must be > 0")
    if np.any(err != 0):
        raise ValueError("ns-3 topology: a non-zero error_rate (random packet loss) is not "
                         "modelled by the fluid fabric; set it to 0")
    is_host = np.ones(n_nodes, bool)
    is_host[switches] = False
    if not is_host.any():
        raise ValueError("ns-3 topology: every node is a switch; there are no hosts")
    tier = _tiers(n_nodes, is_host, cab_a, cab_b)
    if np.any(tier < 0):
        bad = np.flatnonzero(tier < 0)[:5].tolist()
        raise ValueError(f"ns-3 topology: nodes {bad} are not connected to any host")
    layered = bool(np.all(np.abs(tier[cab_a] - tier[cab_b]) == 1))
    if buffer_kb is not None:
        if not (np.isfinite(buffer_kb) and buffer_kb >= 0):
            raise ValueError(f"buffer_kb must be finite and >= 0; got {buffer_kb!r}")
        buf_a = buf_b = np.full(n_cab, units.kb(float(buffer_kb)))
    else:
        if not (np.isfinite(switch_buffer_mb) and switch_buffer_mb > 0):
            raise ValueError(f"switch_buffer_mb must be finite and > 0; got {switch_buffer_mb!r}")
        buf_a, buf_b = _port_shares(n_nodes, is_host, cab_a, cab_b,
                                    float(switch_buffer_mb) * units.MB)
    # Hosts first (host index = rank among non-switch ids), then switches, by ns-3 id.
    order = np.concatenate([np.flatnonzero(is_host), np.flatnonzero(~is_host)])
    new_id = np.empty(n_nodes, np.int64)
    new_id[order] = np.arange(n_nodes)
    names = [("h" if is_host[i] else "s") + str(i) for i in order.tolist()]
    u, v = new_id[cab_a], new_id[cab_b]
    n_hosts = int(is_host.sum())
    return Topology(
        node_names=tuple(names), node_is_host=np.arange(n_nodes) < n_hosts,
        node_tier=tier[order], hosts=np.arange(n_hosts),
        link_src=np.stack([u, v], 1).ravel(), link_dst=np.stack([v, u], 1).ravel(),
        capacity=np.repeat(rate, 2), latency=np.repeat(delay, 2),
        buffer=np.stack([buf_a, buf_b], 1).ravel(),
        link_up=np.ones(2 * n_cab, bool), link_reverse=np.arange(2 * n_cab) ^ 1,
        host_server=np.arange(n_hosts), name=name or label, kind="graph",
        params=dict(ns3_id=order.tolist(), layered=layered), updown=layered,
        host_transit=False)


def hpcc_fat_tree(*, host_gbps: float = 100.0, fabric_gbps: float = 400.0,
                  latency_us: float = 1.0,
                  switch_buffer_mb: float = HPCC_SWITCH_BUFFER_MB) -> Topology:
    """The 320-host fat-tree of HPCC's large-scale simulations.

    Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, Sec. 5.1, and
    [HPCC-NS3] ``simulation/mix/fat.txt`` (commit 9950bbb): 376 nodes, 56 switches,
    480 cables.  Hosts 0..319 at ``host_gbps`` (100) to 20 ToRs (ns-3 ids 320..339,
    16 hosts each); ToR ``t`` of pod ``p = t // 4`` has 4 uplinks at ``fabric_gbps``
    (400) to the 4 aggregation switches of its pod (ids ``340 + 4p .. 343 + 4p``);
    aggregation switch ``j`` of each pod has 4 uplinks to cores ``360 + 4j .. 363 + 4j``
    (16 cores).  Every link ``latency_us`` (1 us).  No tier is oversubscribed
    (16 x 100 = 4 x 400 Gb/s).  Built as the text of that file and read with
    :func:`from_ns3_topology`, so the two can never differ.
    """
    for arg, v in (("host_gbps", host_gbps), ("fabric_gbps", fabric_gbps)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{arg} must be finite and > 0; got {v!r}")
    if not (np.isfinite(latency_us) and latency_us >= 0):
        raise ValueError(f"latency_us must be finite and >= 0; got {latency_us!r}")
    n_hosts, n_tor, n_agg, n_core, per_tor, up = 320, 20, 20, 16, 16, 4
    tor0, agg0, core0 = n_hosts, n_hosts + n_tor, n_hosts + n_tor + n_agg
    h = np.arange(n_hosts)
    t = np.repeat(np.arange(n_tor), up)
    a = np.repeat(np.arange(n_agg), up)
    j = np.tile(np.arange(up), n_tor)
    cab = [(h, tor0 + h // per_tor, host_gbps),
           (tor0 + t, agg0 + 4 * (t // 4) + j, fabric_gbps),
           (agg0 + a, core0 + 4 * (a % 4) + j, fabric_gbps)]
    rate = lambda g: f"{g:g}Gbps"  # noqa: E731
    lines = [f"{n_hosts + n_tor + n_agg + n_core} {n_tor + n_agg + n_core} "
             f"{n_hosts + 2 * n_tor * up}",
             " ".join(str(i) for i in range(tor0, core0 + n_core))]
    delay = f"{latency_us * 1000:g}ns"
    for src, dst, g in cab:
        lines += [f"{x} {y} {rate(g)} {delay} 0.000000" for x, y in zip(src, dst)]
    return from_ns3_topology("\n".join(lines) + "\n", switch_buffer_mb=switch_buffer_mb,
                             name="hpcc_fat_tree(320)")


def to_ns3_topology(topology: Topology) -> str:
    """The text of ``topology`` in the ns-3 format (one line per cable).

    Node ids: hosts first in host-index order, then switches.  Each cable (a link and
    its ``link_reverse``) is written once, from its lower link id; a one-way link is
    rejected (ns-3 point-to-point links are full duplex).  Rates are written in bps and
    delays in ns, rounded to integers.
    """
    rev = topology.link_reverse
    if np.any(rev < 0):
        raise ValueError("topology has one-way links; the ns-3 format holds full-duplex "
                         "cables only")
    if np.any(topology.capacity != topology.capacity[rev]) or np.any(
            topology.latency != topology.latency[rev]):
        raise ValueError("topology has cables whose two directions differ in capacity or "
                         "latency; the ns-3 format has one rate and delay per cable")
    order = np.concatenate([topology.hosts,
                            np.flatnonzero(~topology.node_is_host)])
    ns3 = np.empty(topology.n_nodes, np.int64)
    ns3[order] = np.arange(topology.n_nodes)
    first = np.flatnonzero(np.arange(topology.n_links) < rev)
    n_sw = topology.n_switches
    lines = [f"{topology.n_nodes} {n_sw} {first.size}",
             " ".join(str(i) for i in range(topology.n_hosts, topology.n_nodes))]
    for k in first.tolist():
        bps = int(round(topology.capacity[k] * 8))
        ns = int(round(topology.latency[k] * 1e9))
        lines.append(f"{ns3[topology.link_src[k]]} {ns3[topology.link_dst[k]]} {bps}bps "
                     f"{ns}ns 0.000000")
    return "\n".join(lines) + "\n"
