"""What the operator observed: the :class:`Observation` record, its JSON table parsed and
validated against a problem, and synthetic observations of a planted fault
(:mod:`fabric_jax.optimize._locate`)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from ._forward import truth
from ._problem import LocateProblem

#: Keys of an observation file; ``description`` and ``run`` (the record of the command
#: that wrote it, :mod:`fabric_jax.results`) are accepted and not read.
_OBS_KEYS = {"flows", "ranks", "counters", "noise", "description", "run"}


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the operator observed (validated; see :func:`parse_observation`).

    Attributes:
      flow_idx, flow_finish: observed flows and their completion times, s.
      rank_idx, rank_finish: observed ranks (hosts) and their completion times, s.
      times: ``[samples]`` counter sampling instants, s (``k * period``).
      period: counter sampling period, s (0 without counters).
      link_idx: ``[observed links]``; bytes, congested: ``[observed links, samples]``
        cumulative.
      noise: the stated relative noise (0 if none).
      dropped: ``[observed links, samples]`` cumulative dropped bytes (the port's error
        counter; NaN where a link's is not given), or ``None`` (no drop counters).
    """

    flow_idx: np.ndarray
    flow_finish: np.ndarray
    rank_idx: np.ndarray
    rank_finish: np.ndarray
    times: np.ndarray
    period: float
    link_idx: np.ndarray
    bytes: np.ndarray
    congested: np.ndarray
    noise: float = 0.0
    dropped: np.ndarray | None = None

    def to_json(self) -> dict:
        d = dict(flows={str(int(f)): float(t) for f, t in zip(self.flow_idx, self.flow_finish)},
                 noise=float(self.noise))
        if self.rank_idx.size:
            d["ranks"] = {str(int(r)): float(t) for r, t in zip(self.rank_idx,
                                                                self.rank_finish)}
        if self.link_idx.size:
            d["counters"] = dict(period_s=float(self.period), links={
                str(int(l)): dict(bytes=self.bytes[i].tolist(),
                                  congested_s=self.congested[i].tolist(),
                                  **({} if self.dropped is None
                                     else dict(dropped=self.dropped[i].tolist())))
                for i, l in enumerate(self.link_idx)})
        return d


def _check_times(field, idx, vals, n, what):
    idx = np.asarray(idx)
    vals = np.asarray(vals, float)
    bad = (idx < 0) | (idx >= n)
    if np.any(bad):
        raise ValueError(f"observed.{field}: unknown {what} {idx[bad][:5].tolist()} (valid "
                         f"0 .. {n - 1}); every observation must match the workload")
    if np.any(~np.isfinite(vals)):
        raise ValueError(f"observed.{field}: NaN or infinite time for {what} "
                         f"{idx[~np.isfinite(vals)][:5].tolist()}; remove it or give the "
                         f"measured value")
    if np.any(vals <= 0):
        raise ValueError(f"observed.{field}: completion times must be > 0 s (from the "
                         f"phase's start); got {vals[vals <= 0][:5].tolist()} for {what} "
                         f"{idx[vals <= 0][:5].tolist()}")
    if np.unique(idx).size != idx.size:
        raise ValueError(f"observed.{field}: a {what} appears twice")
    return idx.astype(np.int32), vals


def _int_keys(field, d):
    if not isinstance(d, dict):
        raise ValueError(f"observed.{field} must be a table id -> value; got "
                         f"{type(d).__name__}")
    out = []
    for k in d:
        try:
            out.append(int(k))
        except (TypeError, ValueError):
            raise ValueError(f"observed.{field}: key {k!r} is not an integer id") from None
    return np.asarray(out, np.int64)


def _counter_record(key, rec) -> dict:
    """One link's counter lists (``bytes``, ``congested_s``, ``dropped``), validated."""
    if (not isinstance(rec, dict) or set(rec) - {"bytes", "congested_s", "dropped"}
            or not rec):
        raise ValueError(f"observed.counters.links[{key}] must hold 'bytes', "
                         f"'congested_s' and/or 'dropped' lists; got {rec!r}")
    arrs = {}
    for name in ("bytes", "congested_s", "dropped"):
        if name in rec:
            a = np.asarray(rec[name], float)
            if a.ndim != 1 or a.size == 0:
                raise ValueError(f"observed.counters.links[{key}].{name} must be a "
                                 f"non-empty list of cumulative samples")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"observed.counters.links[{key}].{name} holds NaN "
                                 f"or infinite samples")
            if np.any(a < 0):
                raise ValueError(f"observed.counters.links[{key}].{name} holds "
                                 f"negative samples")
            if np.any(np.diff(a) < 0):
                raise ValueError(f"observed.counters.links[{key}].{name} is "
                                 f"non-monotone: cumulative counters never decrease")
            arrs[name] = a
    return arrs


def _parse_counters(c, prob: LocateProblem):
    """``observed.counters`` validated: ``(times, period, link_idx, bytes, congested,
    dropped)`` (``dropped`` ``None`` when no link gives one)."""
    if not isinstance(c, dict) or set(c) - {"period_s", "links"} or "links" not in c:
        raise ValueError("observed.counters must be {period_s: s, links: {id: {bytes: "
                         "[...], congested_s: [...], dropped: [...]}}}")
    period = c.get("period_s")
    if not (isinstance(period, (int, float)) and math.isfinite(period) and period > 0):
        raise ValueError(f"observed.counters.period_s must be a sampling period > 0 s; "
                         f"got {period!r}")
    if period < prob.dt * (1 - 1e-9):
        raise ValueError(f"observed.counters.period_s = {period:g} s is below the "
                         f"model's step dt = {prob.dt:g} s; sample at >= dt or pass a "
                         f"smaller dt")
    links = c["links"]
    l_idx = _int_keys("counters.links", links)
    bad = (l_idx < 0) | (l_idx >= prob.n_links)
    if np.any(bad):
        raise ValueError(f"observed.counters.links: unknown link(s) "
                         f"{l_idx[bad][:5].tolist()} (valid 0 .. {prob.n_links - 1})")
    rows_b, rows_c, rows_d, n_s = [], [], [], None
    for key, rec in links.items():
        arrs = _counter_record(key, rec)
        lens = {a.size for a in arrs.values()}
        if len(lens) != 1 or (n_s is not None and lens != {n_s}):
            raise ValueError(f"observed.counters.links[{key}]: every counter list must "
                             f"have the same number of samples")
        n_s = lens.pop()
        rows_b.append(arrs.get("bytes", np.full(n_s, np.nan)))
        rows_c.append(arrs.get("congested_s", np.full(n_s, np.nan)))
        rows_d.append(arrs.get("dropped", np.full(n_s, np.nan)))
    times = period * np.arange(1, (n_s or 0) + 1)
    by, cg = np.array(rows_b), np.array(rows_c)
    dr = None
    if any("dropped" in rec for rec in links.values()):
        dr = np.array(rows_d)
    l_idx = l_idx.astype(np.int32)
    return times, period, l_idx, by, cg, dr


def parse_observation(obs: dict, prob: LocateProblem) -> Observation:
    """Validates an observation table against a problem (host side, before any solve).

    Format (JSON)::

        {"flows": {"<flow index>": finish_s, ...},          # and/or
         "ranks": {"<host index>": finish_s, ...},
         "counters": {"period_s": P,
                      "links": {"<link id>": {"bytes": [cumulative at P, 2P, ...],
                                              "congested_s": [cumulative, ...],
                                              "dropped": [cumulative bytes, ...]}}},
         "noise": 0.05}                                     # optional

    ``description`` and ``run`` (what wrote the file) may be present; they are ignored.

    Raises:
      ValueError: naming the field: an unknown key, flow, rank or link; NaN, negative or
        zero times; counters (``bytes``, ``congested_s``, ``dropped``: each optional per
        link) that decrease (non-monotone) or differ in length; a
        sampling period below the model's step ``dt``; nothing observed.
    """
    if not isinstance(obs, dict):
        raise ValueError("observed must be a JSON object (table)")
    unknown = set(obs) - _OBS_KEYS
    if unknown:
        raise ValueError(f"observed: unknown key(s) {sorted(unknown)}; accepted: "
                         f"{sorted(_OBS_KEYS)} (nothing observed is dropped)")
    noise = obs.get("noise", 0.0)
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and 0 <= noise < 1):
        raise ValueError(f"observed.noise must be a relative noise in [0, 1); got {noise!r}")
    fl = obs.get("flows", {})
    f_idx, f_fin = _check_times("flows", _int_keys("flows", fl), list(fl.values()),
                                prob.n_flows, "flow")
    rk = obs.get("ranks", {})
    r_idx, r_fin = _check_times("ranks", _int_keys("ranks", rk), list(rk.values()),
                                prob.n_hosts, "rank")
    if r_idx.size:
        ranks_with_flows = np.unique(prob.src)
        missing = np.setdiff1d(r_idx, ranks_with_flows)
        if missing.size:
            raise ValueError(f"observed.ranks: rank(s) {missing[:5].tolist()} send no flow "
                             f"in this workload (unknown ranks)")
    times = np.zeros(0)
    period = 0.0
    l_idx = np.zeros(0, np.int32)
    by = cg = np.zeros((0, 0))
    dr = None
    if "counters" in obs:
        times, period, l_idx, by, cg, dr = _parse_counters(obs["counters"], prob)
    if f_idx.size + r_idx.size == 0 and l_idx.size == 0:
        raise ValueError("observed: nothing observed (no flows, ranks or counters)")
    return Observation(f_idx, f_fin, r_idx, r_fin, times, float(period), l_idx, by, cg,
                       float(noise), dr)


def load_observation(path, prob: LocateProblem) -> Observation:
    """Reads and validates an observation JSON file (:func:`parse_observation`)."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"observed file {path}: not JSON ({err})") from None
    return parse_observation(data, prob)


def observe(prob: LocateProblem, phi, *, noise: float = 0.0, seed: int = 0,
            counters: bool = True, ranks: bool = False, period: float | None = None,
            n_samples: int = 4, loss=None, drops: bool | None = None) -> Observation:
    """Synthetic observations of a planted fault (the exact flow-level model,
    :func:`truth`), with multiplicative Gaussian noise of relative size ``noise`` on
    every time and counter (clipped to keep times positive and counters monotone).

    Args:
      phi: ``[links]`` capacity factors in force (1 = healthy).
      counters: include per-port counters of every link.
      ranks: per-rank completion times instead of per-flow ones.
      period: counter sampling period, s (default: the earliest flow completion /
        ``n_samples``, rounded down to a multiple of ``prob.dt``, at least ``dt``).
      loss: ``[links]`` fraction of the carried bytes each link drops (lossy links;
        default none).
      drops: include every link's drop (error) counter with the counters (default:
        when ``loss`` is given).
    """
    rng = np.random.default_rng(seed)
    fin0 = truth(prob, np.ones(prob.n_links))[0]
    if period is None:
        first = float(np.min(np.asarray(fin0)))
        period = max(prob.dt, math.floor(first / n_samples / prob.dt) * prob.dt)
    times = period * np.arange(1, n_samples + 1) if counters else np.zeros(0)
    fin, by, cg, dr = (np.asarray(a, float) for a in truth(prob, phi, times, loss=loss))
    drops = (loss is not None) if drops is None else bool(drops)

    def noisy(x):
        return x * np.maximum(1.0 + noise * rng.standard_normal(x.shape), 0.05)

    obs_f = noisy(fin)
    f_idx = np.arange(prob.n_flows, dtype=np.int32)
    r_idx = np.zeros(0, np.int32)
    r_fin = np.zeros(0)
    if ranks:
        hosts = np.unique(prob.src)
        r_fin = np.array([obs_f[prob.src == h].max() for h in hosts])
        r_idx, f_idx, obs_f = hosts.astype(np.int32), np.zeros(0, np.int32), np.zeros(0)
    if counters:
        inc_b = np.diff(by, axis=1, prepend=0.0)
        inc_c = np.diff(cg, axis=1, prepend=0.0)
        inc_d = np.diff(dr, axis=1, prepend=0.0)
        by = np.cumsum(np.maximum(noisy(inc_b), 0.0), axis=1)
        dr = np.cumsum(np.maximum(noisy(inc_d), 0.0), axis=1) if drops else None
        cg = np.cumsum(np.clip(inc_c + noise * period * rng.standard_normal(inc_c.shape),
                               0.0, period), axis=1)
        l_idx = np.arange(prob.n_links, dtype=np.int32)
    else:
        l_idx, by, cg = np.zeros(0, np.int32), np.zeros((0, 0)), np.zeros((0, 0))
        dr = None
    return Observation(f_idx, obs_f, r_idx, r_fin, times if counters else np.zeros(0),
                       float(period if counters else 0.0), l_idx, by, cg, float(noise), dr)

