"""The spec of a folded Clos: one frozen record of every size, speed and option, checked.

:func:`leaf_spine` and :func:`rail_optimized` describe one family of fabrics and differ
only in how hosts attach to leaves.  Both resolve their arguments here into a
:class:`ClosSpec`, and one private builder (``_clos.build_clos``) wires it:

* hosts are the NIC ports of ``n_servers`` servers with ``rails`` ports each; servers
  form groups of ``servers_per_leaf``, and port ``i`` of every server of group ``g``
  attaches to leaf ``g * rails + i`` (``rail_optimized``; ``leaf_spine`` is
  ``rails = 1``: one host per server, ``hosts_per_leaf`` servers per leaf);
* every leaf has ``uplinks_per_leaf`` cables to the ``n_spines`` spines, round robin;
* with ``tiers = 3`` the leaves form pods of ``leaves_per_pod`` with their own spines,
  and spine ``j`` of every pod has ``uplinks_per_spine`` cables to super-spine group
  ``j`` (Al-Fares et al., SIGCOMM 2008, Sec. 2.3, generalised);
* ``planes`` independent copies of the switch layers split each NIC's ``link_gbps``.

The arguments a user gives (any two of uplinks, fabric speed and oversubscription; pod
sizes in the builder's unit) are resolved by :meth:`ClosSpec.resolve`; the rules and
their sources are in the docstrings of the two builders.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import NamedTuple

from ._core import check_int, check_pos


class _Words(NamedTuple):
    pod_arg: str     # the argument that sizes a pod
    fabric: str      # the fabric, in errors
    leaves: str      # its leaves, in errors


#: How each kind names its pods and switches in errors.
_WORDS = {
    "leaf_spine": _Words("leaves_per_pod", "leaf_spine", "leaves"),
    "rail_optimized": _Words("groups_per_pod", "rail_optimized fabric", "rail leaves"),
}


def link_args(link_gbps, fabric_gbps, latency_us, buffer_kb):
    """Checked ``(link, fabric, latency, buffer)``; ``fabric`` defaults to ``link``."""
    link = check_pos(link_gbps, "link_gbps")
    fabric = link if fabric_gbps is None else check_pos(fabric_gbps, "fabric_gbps")
    return (link, fabric, check_pos(latency_us, "latency_us", allow_zero=True),
            check_pos(buffer_kb, "buffer_kb", allow_zero=True))


def check_tiers_planes(tiers, planes) -> int:
    """``planes`` checked (>= 1), after a ValueError unless ``tiers`` is 2 or 3."""
    if isinstance(tiers, bool) or not isinstance(tiers, numbers.Integral) \
            or tiers not in (2, 3):
        raise ValueError(f"tiers must be 2 (leaf-spine) or 3 (leaf, pod spine, "
                         f"super-spine); got {tiers!r}")
    return check_int(planes, "planes", 1)


@dataclasses.dataclass(frozen=True)
class ClosSpec:
    """A 2- or 3-tier folded Clos with ``planes`` planes, every size resolved and checked.

    Construction checks every field (the same ValueErrors the builders raise), the
    switch radix last.  Build one with :meth:`resolve` from a builder's arguments.

    Attributes:
      kind: ``"leaf_spine"`` or ``"rail_optimized"``: host and leaf names, ``params``.
      n_servers: servers (``leaf_spine``: hosts).
      rails: NIC ports per server, each on its own rail leaf (``leaf_spine``: 1).
      servers_per_leaf: servers per group (down ports of a leaf).
      n_spines: spines per plane (per pod with 3 tiers).
      uplinks_per_leaf: cables from each leaf to the spines (>= ``n_spines``).
      link_gbps: a host NIC's speed over all planes, Gb/s.
      fabric_gbps: switch-to-switch cable speed, Gb/s.
      latency_us: per-link latency, microseconds.
      buffer_kb: egress buffer per link, kB.
      switch_radix: ports per switch, checked against every layer (None: unchecked).
      planes: independent switch planes.
      tiers: 2 or 3.
      leaves_per_pod: leaves per pod (3 tiers; None with 2).
      uplinks_per_spine: cables from each pod spine to the super-spines (3 tiers; 0).
      n_super_spines: super-spines per plane, a multiple of ``n_spines`` (3 tiers; 0).
    """

    kind: str
    n_servers: int
    rails: int
    servers_per_leaf: int
    n_spines: int
    uplinks_per_leaf: int
    link_gbps: float
    fabric_gbps: float
    latency_us: float
    buffer_kb: float
    switch_radix: int | None = None
    planes: int = 1
    tiers: int = 2
    leaves_per_pod: int | None = None
    uplinks_per_spine: int = 0
    n_super_spines: int = 0

    def __post_init__(self):
        if self.kind not in _WORDS:
            raise ValueError(f"kind must be one of {list(_WORDS)}; got {self.kind!r}")
        for arg in ("n_servers", "rails", "servers_per_leaf", "n_spines"):
            check_int(getattr(self, arg), arg, 1)
        check_int(self.uplinks_per_leaf, "uplinks_per_leaf", self.n_spines)
        check_tiers_planes(self.tiers, self.planes)
        link_args(self.link_gbps, self.fabric_gbps, self.latency_us, self.buffer_kb)
        if self.tiers == 2:
            if (self.leaves_per_pod, self.uplinks_per_spine, self.n_super_spines) != (
                    None, 0, 0):
                raise ValueError("leaves_per_pod, uplinks_per_spine and n_super_spines "
                                 "only apply with tiers=3")
        else:
            check_int(self.leaves_per_pod, "leaves_per_pod", 1)
            check_int(self.uplinks_per_spine, "uplinks_per_spine", 1)
            check_int(self.n_super_spines, "n_super_spines", self.n_spines)
            if self.n_super_spines % self.n_spines:
                raise ValueError(f"n_super_spines={self.n_super_spines} must be a multiple "
                                 f"of the {self.n_spines} spines per pod")
        self._check_radix()

    # ------------------------------------------------------------------ sizes
    @property
    def host_gbps(self) -> float:
        """A host port's speed in one plane: the NIC's bandwidth split over the planes."""
        return self.link_gbps / self.planes

    @property
    def n_groups(self) -> int:
        return -(-self.n_servers // self.servers_per_leaf)

    @property
    def n_leaves(self) -> int:
        return self.n_groups * self.rails

    @property
    def n_hosts(self) -> int:
        return self.n_servers * self.rails

    @property
    def leaf_down_ports(self) -> int:
        """Down ports of a leaf: the servers of a full group."""
        return min(self.servers_per_leaf, self.n_servers)

    @property
    def oversubscription(self) -> float:
        """A leaf's downlink over uplink bandwidth."""
        return self.leaf_down_ports * self.host_gbps / (
            self.uplinks_per_leaf * self.fabric_gbps)

    @property
    def n_pods(self) -> int:
        if self.leaves_per_pod is None:
            return 1
        return -(-self.n_leaves // self.leaves_per_pod)

    @property
    def spine_down_ports(self) -> int:
        per_pod = self.n_leaves if self.leaves_per_pod is None else min(
            self.leaves_per_pod, self.n_leaves)
        return -(-per_pod * self.uplinks_per_leaf // self.n_spines)

    @property
    def super_ports(self) -> int:
        if self.leaves_per_pod is None:
            return 0
        group = self.n_super_spines // self.n_spines
        return self.n_pods * -(-self.uplinks_per_spine // group)

    # ------------------------------------------------------------------ radix
    def _check_radix(self) -> None:
        """ValueError when a leaf, spine or super-spine needs more than the radix."""
        if self.switch_radix is None:
            return
        radix = check_int(self.switch_radix, "switch_radix", 2)
        three = self.tiers == 3
        words = _WORDS[self.kind]
        what = (f"{words.fabric} ({self.n_leaves} {words.leaves} x {self.uplinks_per_leaf} "
                f"uplinks, {self.n_spines} spines{' per pod' if three else ''})")
        spine_up = self.uplinks_per_spine if three else 0
        ports = (("leaf", self.leaf_down_ports + self.uplinks_per_leaf),
                 ("spine", self.spine_down_ports + spine_up),
                 ("super-spine", self.super_ports))
        for role, need in ports:
            if need > radix:
                raise ValueError(
                    f"switch_radix={radix}: each {role} of this {what} needs {need} ports "
                    f"(more than the radix); {_radix_fix(not three)}")

    # ------------------------------------------------------------------ resolution
    @classmethod
    def resolve(cls, kind: str, *, n_servers: int, rails: int, servers_per_leaf: int,
                n_spines: int | None, uplinks_per_leaf, oversubscription, link_gbps,
                fabric_gbps, latency_us, buffer_kb, switch_radix, planes, tiers,
                pod_size, uplinks_per_spine, n_super_spines) -> "ClosSpec":
        """The spec of a builder's arguments (sizes already checked), or a ValueError.

        ``n_spines`` None derives it (``rail_optimized``: the servers of a full group, or
        that over ``oversubscription`` when neither uplinks nor fabric speed is given);
        ``pod_size`` is the pod in the builder's unit (groups of servers for
        ``rail_optimized``, leaves for ``leaf_spine``).
        """
        planes = check_tiers_planes(tiers, planes)
        link, fabric, lat, buf = link_args(link_gbps, fabric_gbps, latency_us, buffer_kb)
        fabric_given = fabric_gbps is not None
        host_gbps = link / planes
        fabric = fabric if fabric_given else host_gbps
        full = min(servers_per_leaf, n_servers)
        if oversubscription is not None and n_spines is None and uplinks_per_leaf is None \
                and not fabric_given:
            n_spines = _spines_of_ratio(full, oversubscription)
        n_spines = full if n_spines is None else check_int(n_spines, "n_spines", 1)
        uplinks, fabric = _uplink_plan(full * host_gbps, n_spines, uplinks_per_leaf,
                                       fabric, fabric_given, oversubscription)
        n_leaves = -(-n_servers // servers_per_leaf) * rails
        pods = _plan_pods(tiers=tiers, n_leaves=n_leaves, uplinks=uplinks,
                          n_spines=n_spines, pod_size=pod_size,
                          uplinks_per_spine=uplinks_per_spine,
                          n_super_spines=n_super_spines, pod_arg=_WORDS[kind].pod_arg,
                          pod_unit=rails)
        return cls(kind=kind, n_servers=n_servers, rails=rails,
                   servers_per_leaf=servers_per_leaf, n_spines=n_spines,
                   uplinks_per_leaf=uplinks, link_gbps=link, fabric_gbps=fabric,
                   latency_us=lat, buffer_kb=buf, switch_radix=switch_radix, planes=planes,
                   tiers=tiers, leaves_per_pod=pods[0], uplinks_per_spine=pods[1],
                   n_super_spines=pods[2])


def _radix_fix(two_tier: bool) -> str:
    return ("use fewer hosts per leaf, more spines, tiers=3 (a super-spine layer: a "
            "three-tier Clos like fat_tree) or planes=P (P independent planes of "
            "link_gbps/P ports; give switch_radix at that port speed)" if two_tier else
            "use more pods (smaller leaves_per_pod / groups_per_pod), fewer uplinks, "
            "more super-spines (n_super_spines), or planes=P")


def _spines_of_ratio(full: int, oversubscription) -> int:
    """``rail_optimized``'s spines when only ``oversubscription`` thins the uplinks."""
    ratio = check_pos(oversubscription, "oversubscription")
    exact = full / ratio
    n_spines = int(round(exact))
    if abs(exact - n_spines) > 1e-9 * exact or n_spines < 1:
        raise ValueError(
            f"oversubscription={oversubscription} with {full} servers per rail leaf "
            f"needs {exact:g} spines, not a whole number >= 1; give n_spines, "
            f"uplinks_per_leaf or fabric_gbps too")
    return n_spines


def _uplink_plan(down: float, n_spines: int, uplinks_per_leaf, fabric: float,
                 fabric_given: bool, oversubscription):
    """``(uplinks_per_leaf, fabric_gbps)`` from any two of uplinks, speed and ratio.

    ``down`` is a leaf's downlink bandwidth (Gb/s); the ratio is ``down / (uplinks *
    fabric)``.  See :func:`leaf_spine` for the rules.
    """
    if uplinks_per_leaf is not None:
        uplinks_per_leaf = check_int(uplinks_per_leaf, "uplinks_per_leaf", n_spines)
    if oversubscription is not None:
        ratio = check_pos(oversubscription, "oversubscription")
        if not fabric_given:
            uplinks_per_leaf = n_spines if uplinks_per_leaf is None else uplinks_per_leaf
            fabric = down / (ratio * uplinks_per_leaf)
        elif uplinks_per_leaf is None:
            exact = down / (ratio * fabric)
            uplinks_per_leaf = int(round(exact))
            if abs(exact - uplinks_per_leaf) > 1e-9 * exact or uplinks_per_leaf < n_spines:
                raise ValueError(
                    f"oversubscription={oversubscription} with fabric_gbps={fabric:g} "
                    f"needs {exact:g} uplinks per leaf, not a whole number >= n_spines; "
                    f"give uplinks_per_leaf instead of fabric_gbps")
        elif abs(down / (uplinks_per_leaf * fabric) - ratio) > 1e-9 * ratio:
            raise ValueError(
                f"oversubscription={oversubscription} disagrees with uplinks_per_leaf="
                f"{uplinks_per_leaf} and fabric_gbps={fabric:g} (ratio "
                f"{down / (uplinks_per_leaf * fabric):g}); give only two of the three")
    uplinks_per_leaf = n_spines if uplinks_per_leaf is None else uplinks_per_leaf
    return uplinks_per_leaf, fabric


def _plan_pods(*, tiers: int, n_leaves: int, uplinks: int, n_spines: int, pod_size,
               uplinks_per_spine, n_super_spines, pod_arg: str, pod_unit: int):
    """``(leaves_per_pod, uplinks_per_spine, n_super_spines)`` of the third tier.

    ``(None, 0, 0)`` with two tiers; ``pod_arg`` names the pod-size argument in errors
    and ``pod_unit`` is the number of leaves per unit of ``pod_size``.
    """
    extra = dict(leaves_per_pod=pod_size, uplinks_per_spine=uplinks_per_spine,
                 n_super_spines=n_super_spines)
    if tiers == 2:
        given = [k for k, v in extra.items() if v is not None]
        if given:
            given = [pod_arg if k == "leaves_per_pod" else k for k in given]
            raise ValueError(f"{', '.join(given)} only apply with tiers=3; add tiers=3 or "
                             f"drop them")
        return None, 0, 0
    if pod_size is None:
        raise ValueError(f"tiers=3 needs {pod_arg} (the size of a pod: leaves that share "
                         f"the pod's spines)")
    lpp = check_int(pod_size, pod_arg, 1) * pod_unit
    per_pod = min(lpp, n_leaves)
    ups = (-(-per_pod * uplinks // n_spines) if uplinks_per_spine is None
           else check_int(uplinks_per_spine, "uplinks_per_spine", 1))
    n_super = (n_spines * ups if n_super_spines is None
               else check_int(n_super_spines, "n_super_spines", n_spines))
    if n_super % n_spines:
        raise ValueError(f"n_super_spines={n_super} must be a multiple of the {n_spines} "
                         f"spines per pod (spine j of every pod connects to super-spine "
                         f"group j); use {n_spines * max(1, n_super // n_spines)}")
    return lpp, ups, n_super
