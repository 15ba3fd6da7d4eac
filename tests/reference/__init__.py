"""Plain NumPy reference implementations (oracles) that the JAX kernels are tested against.

Each oracle is written for clarity, not speed: float64, sequential, textbook algorithm,
independent of the design of the kernel it checks.
"""
