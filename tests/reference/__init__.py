"""Plain NumPy reference implementations (oracles) that the JAX kernels are tested against.

Each oracle is written for clarity, not speed: float64, sequential, textbook algorithm,
independent of the design of the kernel it checks.  The oracles that benchmarks also use
as baselines (max-min progressive filling, the event-driven flow simulator) live in
:mod:`fabric_jax.reference`; ``maxmin_numpy`` and ``flowsim_numpy`` here re-export them.
"""
