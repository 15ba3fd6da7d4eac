"""Scale sweep: one training step at 16 to 32,768 GPUs, every preset and the ideal fabric.

A thin caller of ``fabric-jax scale`` (:mod:`fabric_jax.scale`; method, metrics and
figures in ``docs/scale.md``): every argument is passed on.  The all-reduce sweep of
issue 12 that this script used to run is ``experiments/allreduce_sweep.py``.

Usage::

    python experiments/scale_sweep.py --gpus 16,128,1024,8192 --json results/scale.json
    python experiments/scale_sweep.py --gpus 1024 --fabrics roce,spectrum_x --plots figs/
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric_jax.cli import main as cli_main


def main(argv=None) -> int:
    """``fabric-jax scale`` with ``argv`` (default ``sys.argv[1:]``); the exit status."""
    return cli_main(["scale", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
