"""Line-rate arguments of the parameter builders (host side, one home for the check).

Every builder accepts the NIC line rate either as ``line_rate`` (bytes/s, the package's
unit) or as the convenience ``link_gbps`` (Gb/s); :func:`resolve_gbps` turns either into
Gb/s for the scaling rules, which are written per Gb/s in their sources.
"""

from __future__ import annotations

import math

from ..units import to_gbps

__all__ = ["resolve_gbps", "scale"]


def resolve_gbps(line_rate, link_gbps, default_gbps: float, law: str) -> float:
    """The line rate in Gb/s from ``line_rate`` (bytes/s) or ``link_gbps``.

    Raises:
      ValueError: both given, or a value that is not a finite number > 0.
    """
    if line_rate is not None and link_gbps is not None:
        raise ValueError(f"{law}: give the line rate once, as line_rate (bytes/s) or "
                         f"link_gbps (Gb/s), not both")
    if line_rate is not None:
        name, value = "line_rate", line_rate
    elif link_gbps is not None:
        name, value = "link_gbps", link_gbps
    else:
        return float(default_gbps)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{law}: {name} must be a number (a scalar line rate); got "
                         f"{value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{law}: {name} must be finite and > 0; got {value!r}")
    return to_gbps(v) if name == "line_rate" else v


def scale(value: float, gbps: float, reference_gbps: float, exponent: int) -> float:
    """``value * (gbps / reference_gbps) ** exponent``: one line-rate rule."""
    return value * (gbps / reference_gbps) ** exponent
