"""A small text progress bar on stderr (the study's only output while it runs)."""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["Progress"]


class Progress:
    """``update(label)`` after each of ``total`` runs; silent when ``enabled=False``.
    Safe to call from several threads (:func:`fabric_jax.study.run.run_compare` with
    ``workers > 1``)."""

    def __init__(self, total: int, stream=None, enabled: bool = True):
        self.total, self.done, self.t0 = max(int(total), 1), 0, time.time()
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._lock = threading.Lock()

    def update(self, label: str):
        with self._lock:
            self._update(label)

    def _update(self, label: str):
        self.done += 1
        if not self.enabled:
            return
        n = 24
        fill = int(n * min(self.done, self.total) / self.total)
        self.stream.write(f"\r[{'#' * fill}{'.' * (n - fill)}] {self.done}/{self.total} "
                          f"{label:<28} {time.time() - self.t0:6.1f}s")
        if self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()
