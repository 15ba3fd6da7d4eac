"""Empirical flow-size distributions: read, summarise and sample published CDF tables.

Data-centre studies describe flow sizes by a table of points ``(x_i, p_i)``: ``p_i`` is
the fraction of flows of size at most ``x_i`` bytes.  Between the points, two readings
are in use and give *different* distributions:

* ``"linear"`` (HPCC's ``traffic_gen``, pFabric, ns-3 ``EmpiricalRandomVariable``): the
  CDF is piecewise linear between points, so the size is a mixture of uniforms, each
  segment ``[x_{i-1}, x_i]`` carrying mass ``p_i - p_{i-1}``.  Mass ``p_0`` below the
  first point (when ``p_0 > 0``) is an atom at ``x_0``.  Mean
  ``p_0 x_0 + sum_i (p_i - p_{i-1}) (x_{i-1} + x_i) / 2``.
* ``"step"`` (the Homa simulator): the CDF jumps at the listed sizes, atom
  ``p_i - p_{i-1}`` at ``x_i`` (and ``p_0`` at ``x_0``).  Mean ``p_0 x_0 +
  sum_i (p_i - p_{i-1}) x_i``.  This is always >= the linear mean.

Both means are exact closed forms, and ``sample`` draws by inverse transform
(``x = F^{-1}(u)``, the generalised inverse ``inf{x : F(x) >= u}``) from 53-bit uniforms
made with ``jax.random``, so sample means converge to ``mean()``.

Files: one ``size cumulative`` pair per line (whitespace or comma separated); the
cumulative column may be in percent (ending at 100, HPCC) or probability (ending at 1,
Homa, ns-3); which one is detected from the last value.  A first line holding a single
number is a stated mean (Homa's header) and kept as ``stated_mean``.  Sizes are bytes
unless ``size_scale`` converts them (Homa's ``DCTCP_*`` files are in packets).

Built-in tables (``FlowSizeCDF.builtin(name)``, transcribed with citations in
``_cdf_tables.py``): ``web_search`` (DCTCP), ``hadoop`` (Facebook, HPCC's FB_Hadoop),
``storage`` (Alibaba 2019), ``rpc`` (Google all-RPC), ``data_mining`` (VL2),
``google_search_rpc`` (Homa W2, step), ``fb_webserver``, ``fb_cachefollower`` (Meta 2015).

Units: sizes in bytes; probabilities in [0, 1].

Example:
    >>> from fabric_jax.workloads import FlowSizeCDF
    >>> ws = FlowSizeCDF.builtin("web_search")
    >>> round(ws.mean())
    1711250
    >>> sizes = ws.sample(0, 1000)   # numpy float64 [1000], bytes
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from fabric_jax.workloads import _cdf_tables
from fabric_jax.workloads._random import as_key, uniform53

__all__ = ["FlowSizeCDF"]

_RULES = ("linear", "step")
# Relative tolerance for "the cumulative column ends at 1 (or 100)".
_END_TOL = 1e-6


def _check_rule(interpolation):
    if interpolation not in _RULES:
        raise ValueError(f"interpolation: expected 'linear' or 'step', got {interpolation!r}")
    return interpolation


@dataclasses.dataclass(frozen=True, eq=False)
class FlowSizeCDF:
    """A flow-size distribution given by CDF points and an interpolation rule.

    Build with :meth:`from_table`, :meth:`from_file` or :meth:`builtin` (they normalise
    percent tables); the constructor expects probabilities already.

    Attributes:
        sizes: float64 [points] bytes, non-decreasing.
        cum_prob: float64 [points] cumulative probability, non-decreasing, last = 1.
        interpolation: ``"linear"`` or ``"step"`` (see module docstring).
        name: label for tables and plots.
        source: citation or file path.
        stated_mean: the mean printed in the source (bytes), if it had one.
    """

    sizes: np.ndarray
    cum_prob: np.ndarray
    interpolation: str = "linear"
    name: str = ""
    source: str = ""
    stated_mean: float | None = None

    def __post_init__(self):
        _check_rule(self.interpolation)
        sizes = np.asarray(self.sizes, np.float64).reshape(-1)
        cum = np.asarray(self.cum_prob, np.float64).reshape(-1)
        if sizes.shape != cum.shape:
            raise ValueError(f"sizes/cum_prob: lengths differ ({sizes.size} vs {cum.size})")
        if sizes.size == 0:
            raise ValueError("sizes: a CDF needs at least one point")
        if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
            raise ValueError("sizes: must be finite and >= 0 bytes")
        bad = np.flatnonzero(np.diff(sizes) < 0)
        if bad.size:
            raise ValueError(f"sizes: must be non-decreasing; point {bad[0] + 1} "
                             f"({sizes[bad[0] + 1]}) is below point {bad[0]} ({sizes[bad[0]]})")
        if not np.all(np.isfinite(cum)) or np.any(cum < 0):
            raise ValueError("cum_prob: must be finite and >= 0")
        bad = np.flatnonzero(np.diff(cum) < 0)
        if bad.size:
            raise ValueError(f"cum_prob: must be non-decreasing; point {bad[0] + 1} "
                             f"({cum[bad[0] + 1]}) is below point {bad[0]} ({cum[bad[0]]})")
        if abs(cum[-1] - 1.0) > _END_TOL:
            raise ValueError(f"cum_prob: must end at 1, got {cum[-1]}; use from_table for "
                             "percent tables")
        cum = cum / cum[-1]
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "cum_prob", cum)
        if self.stated_mean is not None:
            object.__setattr__(self, "stated_mean", float(self.stated_mean))

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_table(cls, sizes, cum_prob, interpolation: str = "linear", *, name: str = "",
                   source: str = "", size_scale: float = 1.0,
                   stated_mean: float | None = None) -> FlowSizeCDF:
        """A CDF from its points; the cumulative column may be percent or probability.

        Args:
            sizes: [points] flow sizes (bytes after ``size_scale``), non-decreasing.
            cum_prob: [points] cumulative fraction, non-decreasing, ending at 1
                (probability) or at 100 (percent); detected from the last value.
            interpolation: ``"linear"`` or ``"step"``.
            name: label.
            source: citation or path.
            size_scale: multiply sizes by this (e.g. bytes per packet).
            stated_mean: a published mean, in the unscaled unit of ``sizes``.

        Raises:
            ValueError: if the table is not monotone or does not end at 1 or 100.
        """
        _check_rule(interpolation)
        sizes = np.asarray(sizes, np.float64).reshape(-1)
        cum = np.asarray(cum_prob, np.float64).reshape(-1)
        if cum.size == 0:
            raise ValueError("cum_prob: a CDF needs at least one point")
        scale = float(size_scale)
        if not np.isfinite(scale) or scale <= 0:
            raise ValueError(f"size_scale: must be a positive number, got {size_scale}")
        last = cum[-1]
        if abs(last - 100.0) <= 100.0 * _END_TOL:
            cum = cum / 100.0
        elif abs(last - 1.0) > _END_TOL:
            raise ValueError(
                f"cum_prob: the cumulative column must end at 1 (probability) or 100 "
                f"(percent), got {last!r}{' in ' + source if source else ''}; a partial or "
                "unnormalised table is not a flow-size CDF")
        return cls(sizes * scale, cum, interpolation, name=name, source=source,
                   stated_mean=None if stated_mean is None else float(stated_mean) * scale)

    @classmethod
    def from_file(cls, path, interpolation: str = "linear", *, size_scale: float = 1.0,
                  name: str | None = None) -> FlowSizeCDF:
        """Read a ``size cumulative`` text table (HPCC, Homa, ns-3 and Parsimon formats).

        Blank lines and ``#`` comments are skipped; a first line with one number is a
        stated mean (Homa).  See the module docstring for the formats.

        Args:
            path: file path.
            interpolation: ``"linear"`` or ``"step"``.
            size_scale: multiply sizes (and the stated mean) by this.
            name: label; defaults to the file name without extension.

        Raises:
            ValueError: on a malformed line, a non-monotone table, or a cumulative column
                that ends neither at 1 nor at 100.
        """
        _check_rule(interpolation)
        path = os.fspath(path)
        rows, stated = [], None
        with open(path) as fh:
            for lineno, line in enumerate(fh, 1):
                text = line.split("#", 1)[0].replace(",", " ").split()
                if not text:
                    continue
                try:
                    vals = [float(t) for t in text]
                except ValueError:
                    raise ValueError(f"path: {path}:{lineno}: expected numbers, got "
                                     f"{line.strip()!r}") from None
                if len(vals) == 1 and not rows and stated is None:
                    stated = vals[0]
                elif len(vals) == 2:
                    rows.append(vals)
                else:
                    raise ValueError(f"path: {path}:{lineno}: expected 'size cumulative', "
                                     f"got {line.strip()!r}")
        if not rows:
            raise ValueError(f"path: {path} holds no 'size cumulative' lines")
        table = np.asarray(rows)
        if name is None:
            name = os.path.splitext(os.path.basename(path))[0]
        return cls.from_table(table[:, 0], table[:, 1], interpolation, name=name, source=path,
                              size_scale=size_scale, stated_mean=stated)

    @classmethod
    def builtin(cls, name: str, interpolation: str | None = None) -> FlowSizeCDF:
        """A published distribution shipped with the package.

        Args:
            name: one of :meth:`builtin_names`.
            interpolation: override the rule its source uses (``None`` keeps it: linear
                for the HPCC/ns-3/Parsimon tables, step for the Homa table).
        """
        if name not in _cdf_tables.TABLES:
            raise ValueError(f"name: unknown built-in CDF {name!r}; choose one of "
                             f"{cls.builtin_names()}")
        rule, citation, table = _cdf_tables.TABLES[name]
        arr = np.asarray(table, np.float64)
        return cls.from_table(arr[:, 0], arr[:, 1], interpolation or rule, name=name,
                              source=citation)

    @classmethod
    def resolve(cls, cdf, arg: str = "size_cdf") -> FlowSizeCDF:
        """``cdf`` itself, or the built-in distribution it names; a ``ValueError``
        naming the argument ``arg`` otherwise (an unknown name, another type)."""
        if isinstance(cdf, str):
            if cdf not in _cdf_tables.TABLES:
                raise ValueError(f"{arg}: unknown flow-size distribution {cdf!r}; choose "
                                 f"one of {cls.builtin_names()}")
            return cls.builtin(cdf)
        if not isinstance(cdf, cls):
            raise ValueError(f"{arg}: expected a FlowSizeCDF or a built-in name, got "
                             f"{type(cdf).__name__}")
        return cdf

    @staticmethod
    def builtin_names() -> tuple[str, ...]:
        """Names accepted by :meth:`builtin`."""
        return tuple(_cdf_tables.TABLES)

    def with_interpolation(self, interpolation: str) -> FlowSizeCDF:
        """The same points read under the other rule."""
        return dataclasses.replace(self, interpolation=_check_rule(interpolation))

    # ------------------------------------------------------------- statistics
    def _masses(self):
        """Mass p_0 at x_0, then mass dp_i on segment i (between points i-1 and i)."""
        return self.cum_prob[0], np.diff(self.cum_prob)

    def mean(self) -> float:
        """Exact mean under the interpolation rule, bytes."""
        p0, dp = self._masses()
        x = self.sizes
        if self.interpolation == "linear":
            seg = 0.5 * (x[:-1] + x[1:])
        else:
            seg = x[1:]
        return float(p0 * x[0] + np.sum(dp * seg))

    def second_moment(self) -> float:
        """Exact E[X^2] under the interpolation rule, bytes^2."""
        p0, dp = self._masses()
        a, b = self.sizes[:-1], self.sizes[1:]
        if self.interpolation == "linear":
            seg = (a * a + a * b + b * b) / 3.0  # E[U^2], U ~ uniform[a, b]
        else:
            seg = b * b
        return float(p0 * self.sizes[0] ** 2 + np.sum(dp * seg))

    def std(self) -> float:
        """Exact standard deviation under the interpolation rule, bytes."""
        m = self.mean()
        return float(np.sqrt(max(self.second_moment() - m * m, 0.0)))

    def quantile(self, q) -> np.ndarray:
        """Generalised inverse CDF ``inf{x : F(x) >= q}``, bytes.

        Args:
            q: probabilities in [0, 1], any shape.

        Returns:
            float64 array of the shape of ``q``.
        """
        q = np.asarray(q, np.float64)
        if np.any(~np.isfinite(q) | (q < 0) | (q > 1)):
            raise ValueError("q: probabilities must lie in [0, 1]")
        cum, x = self.cum_prob, self.sizes
        idx = np.searchsorted(cum, q, side="left")  # first point with F >= q
        idx = np.minimum(idx, cum.size - 1)
        if self.interpolation == "step":
            return x[idx]
        lo = np.maximum(idx - 1, 0)
        width = cum[idx] - cum[lo]
        # idx == 0 means q <= p_0: the atom at x_0 (width 0, t irrelevant).
        t = np.where(width > 0, (q - cum[lo]) / np.where(width > 0, width, 1.0), 1.0)
        return x[lo] + np.clip(t, 0.0, 1.0) * (x[idx] - x[lo])

    def cdf(self, size) -> np.ndarray:
        """``F(size) = P(X <= size)`` under the interpolation rule."""
        s = np.asarray(size, np.float64)
        cum, x = self.cum_prob, self.sizes
        hi = np.searchsorted(x, s, side="right")  # points with x_i <= s: [0, hi)
        below = np.where(hi > 0, cum[np.maximum(hi - 1, 0)], 0.0)
        if self.interpolation == "step":
            return below
        nxt = np.minimum(hi, x.size - 1)
        inside = (hi > 0) & (hi < x.size)
        gap = x[nxt] - x[np.maximum(hi - 1, 0)]
        frac = np.where(inside & (gap > 0),
                        (s - x[np.maximum(hi - 1, 0)]) / np.where(gap > 0, gap, 1.0), 0.0)
        return below + frac * (cum[nxt] - below) * inside

    # ---------------------------------------------------------------- sampling
    def sample(self, key, n: int) -> np.ndarray:
        """Draw ``n`` flow sizes by inverse transform.

        Args:
            key: a ``jax.random`` key or an ``int`` seed.
            n: number of samples.

        Returns:
            float64 [n] sizes in bytes (host NumPy array).
        """
        n = int(n)
        if n < 0:
            raise ValueError(f"n: number of samples must be >= 0, got {n}")
        if n == 0:
            return np.zeros(0)
        return self.quantile(uniform53(as_key(key), n))

    def __repr__(self) -> str:
        return (f"FlowSizeCDF(name={self.name!r}, points={self.sizes.size}, "
                f"interpolation={self.interpolation!r}, mean={self.mean():.6g} B)")
