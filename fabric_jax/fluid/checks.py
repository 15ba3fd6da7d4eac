"""Host-side checks and layouts of a fluid run (NumPy, before anything is traced).

Each function validates one input of :func:`fabric_jax.fluid.prepare` against the run's
sizes, raising a ``ValueError`` that names the argument and the fix, or derives a
static layout choice the host can prove (one NIC port per flow, the sweeps of the
queue service).
"""

from __future__ import annotations

import jax
import numpy as np

from .. import flowcontrol as fcm
from .. import links as lk
from .. import qos
from ..incidence import Incidence

__all__ = ["hop_entries", "check_positive_array", "check_fifo_bands", "one_nic_port",
           "nic_sweeps", "mean_over_paths", "check_single_path", "check_routing_covers",
           "check_law_params", "check_fc_params", "prepare_classes", "prepare_shared",
           "check_n_steps", "check_dt"]


# ----------------------------------------------------------------- host side
def hop_entries(inc: Incidence):
    """Host: ``[flows, hops]`` COO entry index of each hop of each flow (-1 padded),
    NumPy (the hop layout of both fluid engines, :mod:`fabric_jax.fluid.windowed` too)."""
    li = np.asarray(inc.link_idx)
    fi = np.asarray(inc.flow_idx)
    w = inc.weight
    if isinstance(w, jax.core.Tracer):
        keep = np.ones(li.shape, bool)
    else:
        keep = np.asarray(w) != 0
    e = np.flatnonzero(keep)
    order = e[np.argsort(fi[e], kind="stable")]
    counts = np.bincount(fi[order], minlength=inc.n_flows)
    n_hops = max(int(counts.max(initial=0)), 1)
    pos = np.arange(order.size) - np.repeat(np.cumsum(counts) - counts, counts)
    entry = np.full((inc.n_flows, n_hops), -1, np.int64)
    entry[fi[order], pos] = order
    return entry


def check_positive_array(name, x, shape):
    if x is None or isinstance(x, jax.core.Tracer):
        return
    a = np.asarray(x, float)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {list(shape)}; got {list(a.shape)}")
    if np.any(np.isnan(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be > 0 everywhere; got min {np.nanmin(a)!r}")


# ------------------------------------------------------------------ host checks
def check_fifo_bands(fifo_bands):
    """Host: ``fifo_bands`` as an int >= 1 (shared with :mod:`fabric_jax.fluid.windowed`).

    Raises:
      ValueError: not a positive integer.
    """
    if isinstance(fifo_bands, bool) or not (isinstance(fifo_bands, (int, np.integer))
                                            and fifo_bands >= 1):
        raise ValueError(f"fifo_bands must be a positive integer (bands per egress FIFO, "
                         f"default {lk.DEFAULT_FIFO_BANDS}); got {fifo_bands!r}")
    return int(fifo_bands)


def one_nic_port(link_tab, seg, nic):
    """Host: every flow's paths leave through at most one host-NIC link (their first
    hops that are NIC egress links are one link), so :func:`_nic_send` is a water-fill
    per port whatever the split."""
    n_links = nic.shape[0]
    first = np.asarray(link_tab)[:, ::seg]
    is_nic = np.append(np.asarray(nic, bool), False)[first]
    if first.size == 0:
        return True
    port = np.where(is_nic, first, n_links).min(axis=1)
    top = np.where(is_nic, first, -1).max(axis=1)
    return bool(np.all(top <= port))


def nic_sweeps(link_tab, seg, nic):
    """Host: sweeps :func:`fabric_jax.links.serve_through` needs: one per hop that can
    hold a standing queue along a path, i.e. ``seg - 1`` when every path starts at a
    host NIC (whose backlog stays with the sender, :func:`_hold_at_sender`), else
    ``seg``."""
    first = np.asarray(link_tab)[:, ::seg]
    n_links = nic.shape[0]
    real = first < n_links
    at_nic = np.append(np.asarray(nic, bool), False)[first]
    if seg > 1 and np.all(at_nic | ~real):
        return seg - 1
    return seg


def mean_over_paths(per_path, link_tab, seg, n_links):
    """``[flows]`` mean of ``[flows, paths]`` values over each flow's real paths."""
    n_flows = link_tab.shape[0]
    tab = link_tab.reshape(n_flows, link_tab.shape[1] // seg, seg)
    live = (tab < n_links).any(axis=2)
    return np.where(live, per_path, 0.0).sum(axis=1) / np.maximum(live.sum(axis=1), 1)


def check_single_path(inc: Incidence):
    """Host: every flow has one path (weights 0 or 1, no link twice), as the engines
    without a routing policy need (shared with :mod:`fabric_jax.fluid.windowed`).

    Raises:
      ValueError: a flow split over several paths.
    """
    w = inc.weight
    if isinstance(w, jax.core.Tracer):
        return
    w = np.asarray(w)
    li, fi = np.asarray(inc.link_idx), np.asarray(inc.flow_idx)
    nz = w != 0
    split = nz & (np.abs(w - 1.0) > 1e-6)
    code = fi[nz].astype(np.int64) * (inc.n_links + 1) + li[nz]
    if np.any(split) or np.unique(code).size != code.size:
        f = int(fi[split][0]) if np.any(split) else int(fi[nz][0])
        raise ValueError(
            "incidence splits a flow over several paths (weights other than 0/1 or a link "
            f"listed twice, first at flow {f}) but routing=None: the fluid loop would chain "
            "the paths into one; pass routing=fabric_jax.make_routing(policy, paths) or one "
            "path per flow")


def check_routing_covers(inc: Incidence, rlinks, rhop):
    w = inc.weight
    if isinstance(w, jax.core.Tracer):
        return
    nz = np.asarray(w) != 0
    stride = inc.n_links + 1
    have = np.asarray(inc.flow_idx)[nz].astype(np.int64) * stride + np.asarray(inc.link_idx)[nz]
    fl = np.broadcast_to(np.arange(rlinks.shape[0])[:, None, None], rlinks.shape)
    cand = fl[rhop].astype(np.int64) * stride + rlinks[rhop]
    miss = ~np.isin(have, cand)
    if np.any(miss):
        code = int(have[miss][0])
        raise ValueError(f"routing does not agree with incidence: flow {code // stride} uses "
                         f"link {code % stride}, which none of its routing.links paths "
                         "contains; build both from the same PathSet")


def check_law_params(law, params):
    ref = jax.tree_util.tree_structure(law.default_params())
    got = jax.tree_util.tree_structure(params)
    if got != ref:
        raise ValueError(f"params do not belong to law {law.name!r}: expected the structure "
                         f"of {law.name}'s default_params() ({ref}); got {got}")


def check_fc_params(fc, fcp, n_links):
    if not isinstance(fcp, fcm.FlowControlParams):
        raise ValueError("fc_params must be a fabric_jax.flowcontrol.FlowControlParams "
                         f"(flow_control_params(...)); got {type(fcp).__name__}")
    leaves = [fcp.buffer, fcp.xoff, fcp.xon]
    if any(isinstance(v, jax.core.Tracer) for v in leaves):
        return
    for name, v in zip(("buffer", "xoff", "xon"), leaves):
        if np.shape(v) not in ((), (n_links,)):
            raise ValueError(f"fc_params.{name} must be [links] = [{n_links}] or a scalar; "
                             f"got shape {list(np.shape(v))}")
    if fc.mode != "pfc" and (np.any(np.asarray(fcp.xoff) != np.asarray(fcp.buffer))
                             or np.any(np.asarray(fcp.xon) != np.asarray(fcp.xoff))):
        raise ValueError(f"fc_params has PFC thresholds (xoff/xon below buffer) but "
                         f"flow_control={fc.mode!r}; use flow_control='pfc' or "
                         "flow_control_params(n_links, buffer=...) without xoff/xon")


def prepare_classes(traffic_class, classes, n_flows):
    """Host: ``(TrafficClasses or None, [flows] int32 classes)``; ``None`` with one class."""
    if classes is not None and not isinstance(classes, qos.TrafficClasses):
        raise ValueError("classes must be a fabric_jax.qos.TrafficClasses "
                         f"(qos.traffic_classes(n, ...)); got {type(classes).__name__}")
    if classes is None:
        tc = qos.check_traffic_class(traffic_class, n_flows, qos.MAX_CLASSES)
        n = int(tc.max(initial=0)) + 1
        classes = qos.traffic_classes(n) if n > 1 else None
    else:
        tc = qos.check_traffic_class(traffic_class, n_flows, classes.n_classes)
    if classes is not None and classes.n_classes == 1:
        classes = None
    return classes, tc


def prepare_shared(shared_buffer, n_links, n_classes):
    """Host: a validated :class:`~fabric_jax.flowcontrol.SharedBuffer` or ``None``."""
    if shared_buffer is None:
        return None
    if not isinstance(shared_buffer, fcm.SharedBuffer):
        if hasattr(shared_buffer, "node_is_host"):
            shared_buffer = fcm.shared_buffer(shared_buffer)
        else:
            raise ValueError("shared_buffer must be a fabric_jax.flowcontrol.SharedBuffer "
                             "(flowcontrol.shared_buffer(topology, alpha=...)) or a Topology; "
                             f"got {type(shared_buffer).__name__}")
    for name in ("egress_switch", "ingress_switch"):
        if np.shape(getattr(shared_buffer, name)) != (n_links,):
            raise ValueError(f"shared_buffer.{name} must be [links] = [{n_links}]; got shape "
                             f"{list(np.shape(getattr(shared_buffer, name)))}")
    if np.ndim(shared_buffer.alpha) == 1 and np.shape(shared_buffer.alpha)[0] != n_classes:
        raise ValueError(f"shared_buffer.alpha must be a scalar or [classes] = [{n_classes}]; "
                         f"got shape {list(np.shape(shared_buffer.alpha))}")
    return shared_buffer


def check_n_steps(n_steps) -> int:
    """``n_steps`` as a positive int."""
    if isinstance(n_steps, (bool, np.bool_)) or not (isinstance(n_steps, (int, np.integer))
                                                     and n_steps >= 1):
        raise ValueError(f"n_steps must be a positive integer; got {n_steps!r}")
    return int(n_steps)


def check_dt(dt) -> None:
    """``dt`` a positive, finite number of seconds (concrete: it sets the delay lines)."""
    if isinstance(dt, jax.core.Tracer):
        raise ValueError("dt must be concrete: it sets the delay-line length")
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number of seconds; got {dt!r}")
