"""Units: one system everywhere.

Every array and result in fabric_jax uses SI base units:

* sizes in **bytes**,
* times in **seconds**,
* rates and capacities in **bytes per second**.

Builders and the CLI accept convenience arguments whose name carries their unit
(``link_gbps``, ``buffer_kb``, ``latency_us``); they are converted here, at the API
edge, and never stored in any other unit.  ``KB``/``MB`` are decimal (1 KB = 1000 B),
as in networking papers; ``KiB``/``MiB`` are binary.
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
KiB = 1024.0
MiB = 1024.0**2
GiB = 1024.0**3
US = 1e-6
NS = 1e-9
MS = 1e-3


def gbps(x):
    """Gigabits per second -> bytes per second (1 Gb/s = 1.25e8 B/s)."""
    return x * 1e9 / 8.0


def to_gbps(bytes_per_s):
    """Bytes per second -> gigabits per second."""
    return bytes_per_s * 8.0 / 1e9


def kb(x):
    """Kilobytes (1000 B) -> bytes."""
    return x * KB


def us(x):
    """Microseconds -> seconds."""
    return x * US
