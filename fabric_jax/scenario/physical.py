"""Physical ranges: the values a real cluster fabric can have, one rule per quantity.

A value outside its range is almost always a unit slip (``link_gbps = 400e9`` for
400 Gb/s, ``latency_us = 1e6`` for 1 us, ``dt_us = 1e-9`` for 1 ns) that would otherwise
allocate gigabytes or overflow inside a compiled loop; it is refused before any work,
naming the key, its unit and the range.

* link speed, 1-3,200 Gb/s: from 1 GbE to twice the fastest port shipping in 2026
  (1.6 Tb/s Ethernet, IEEE 802.3dj; InfiniBand XDR, 800 Gb/s per port);
* one link's propagation and switching latency, 0-1,000 us: 1 ms is 200 km of fibre,
  far beyond any data-centre hop (~0.5-2 us with its switch);
* a port's buffer, 1 KB-1 GB: at least one packet; a whole switch ASIC has tens to
  hundreds of MB (Broadcom Tomahawk 5: 165 MB; NVIDIA Spectrum-4: 160 MB);
* the time step ``dt``, 1 ns-100 us: below one packet time at 3.2 Tb/s nothing finer is
  resolved; above 100 us a step spans whole RTTs and collectives of the fabrics modelled.
"""

from __future__ import annotations

from ._rules import number

__all__ = ["LINK_GBPS", "LATENCY_US", "BUFFER_KB", "DT_US", "link_gbps", "latency_us",
           "buffer_kb", "dt_us"]

#: ``(lo, hi)`` of each physical quantity (module docstring).
LINK_GBPS = (1.0, 3200.0)
LATENCY_US = (0.0, 1000.0)
BUFFER_KB = (1.0, 1e6)
DT_US = (1e-3, 100.0)

_US = "microseconds"


def link_gbps(**kw):
    """The rule of a link speed in Gb/s."""
    return number(*LINK_GBPS, unit="Gb/s", **kw)


def latency_us(**kw):
    """The rule of one link's latency in microseconds."""
    return number(*LATENCY_US, unit=_US, **kw)


def buffer_kb(**kw):
    """The rule of a port's buffer in KB (1 KB = 1000 B)."""
    return number(*BUFFER_KB, unit="KB per port", **kw)


def dt_us(**kw):
    """The rule of the fluid engine's time step in microseconds."""
    return number(*DT_US, unit=_US, **kw)
