"""Plain NumPy reference implementations (oracles) of the fabric_jax kernels.

Why these live in the package rather than under ``tests/``: they serve two users.
The tests check the JAX kernels against them, and the benchmarks in ``experiments/``
time the kernels against them as baselines (``bench_maxmin.py``, ``bench_flowsim.py``);
experiments import only the installed package, never test code.

Each oracle is an independent implementation, written for clarity, not speed: float64,
sequential, the textbook algorithm, plain NumPy/SciPy only. None of them imports the
kernel it checks (nor any other part of ``fabric_jax``), so a bug in a kernel cannot
hide in its oracle.

- :mod:`fabric_jax.reference.maxmin_numpy`: progressive filling (weighted max-min
  fairness) and the bottleneck certificate; the oracle for ``fabric_jax.fairness``.
- :mod:`fabric_jax.reference.flowsim_numpy`: event-driven flow-level simulator; the
  oracle for ``fabric_jax.sim.simulate_flows``.

These modules are not imported by ``import fabric_jax``; import them explicitly.
"""
