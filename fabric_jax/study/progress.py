"""A small text progress bar on stderr with an estimate of the time left.

Every long command of the project (``fabric-jax compare``, ``compare --plots``, the
experiments, ``experiments/report.py``) shows one::

    compare [#########...............] 5/13 uec: all jobs      31.2 s, ~42 s left

The estimate is the mean time per unit of work done so far times the work left
(``update(label, units)`` counts ``units``; give a costly step more units), or, before
the first unit is done, the caller's own ``estimate_s`` if it gave one.  On a terminal a
daemon thread redraws the line every second, so the clock moves while a long step runs;
elsewhere (a log, a test's captured stream) the line is written only at each update.
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["Progress", "format_seconds"]


def format_seconds(s: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``."""
    s = max(float(s), 0.0)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


class Progress:
    """``update(label)`` after each of ``total`` units of work; silent when
    ``enabled=False``.  Safe to call from several threads
    (:func:`fabric_jax.study.run.run_compare` with ``workers > 1``).

    Args:
      total: units of work (> 0).
      stream: where to write (default ``sys.stderr``).
      enabled: ``False`` writes nothing (``--quiet``).
      label: a prefix naming the command.
      estimate_s: an a-priori estimate of the whole run, seconds, shown until the first
        unit is done.
      tick_s: redraw period on a terminal (0: never redraw between updates).
    """

    def __init__(self, total: float, stream=None, enabled: bool = True, *, label: str = "",
                 estimate_s: float | None = None, tick_s: float = 1.0):
        self.total, self.done, self.t0 = max(float(total), 1e-9), 0.0, time.time()
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.label, self.estimate_s, self.last = label, estimate_s, ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        isatty = getattr(self.stream, "isatty", lambda: False)
        if enabled and tick_s > 0 and isatty():
            threading.Thread(target=self._tick, args=(tick_s,), daemon=True).start()

    # ------------------------------------------------------------------ public
    def update(self, label: str, units: float = 1.0):
        """``units`` more of the work are done; ``label`` says which."""
        with self._lock:
            self.done += float(units)
            self.last = label
            self._draw(final=self.done >= self.total - 1e-9)

    def close(self):
        """Stops the redraws and ends the line (idempotent)."""
        with self._lock:
            if not self._stop.is_set():
                self._stop.set()
                if self.enabled and self.done < self.total - 1e-9 and self.done > 0:
                    self.stream.write("\n")
                    self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def remaining_s(self) -> float | None:
        """The estimate of the time left, seconds (``None`` before any estimate)."""
        elapsed = time.time() - self.t0
        if self.done > 0:
            return elapsed / self.done * max(self.total - self.done, 0.0)
        if self.estimate_s is not None:
            return max(self.estimate_s - elapsed, 0.0)
        return None

    # ------------------------------------------------------------------ drawing
    def _tick(self, period):
        while not self._stop.wait(period):
            with self._lock:
                if self.done >= self.total - 1e-9:
                    return
                self._draw(final=False)

    def _draw(self, final: bool):
        if not self.enabled or (self._stop.is_set() and not final):
            return
        n = 24
        frac = min(self.done / self.total, 1.0)
        fill = int(n * frac)
        elapsed = time.time() - self.t0
        left = self.remaining_s()
        eta = "done" if final else ("" if left is None else f"~{format_seconds(left)} left")
        count = (f"{self.done:g}/{self.total:g}" if float(self.total).is_integer()
                 else f"{100 * frac:.0f}%")
        head = f"{self.label} " if self.label else ""
        self.stream.write(f"\r{head}[{'#' * fill}{'.' * (n - fill)}] {count} "
                          f"{self.last:<28.28} {format_seconds(elapsed):>9}, {eta:<16}")
        if final:
            self.stream.write("\n")
            self._stop.set()
        self.stream.flush()
