"""How often concurrent jobs' communication meets: the independent-phases estimate.

The several-jobs runs (:func:`~fabric_jax.scale.place_jobs`) put one slice of every
job on the fabric at once, as if every job were always communicating.  A job spends
only part of its step on the network -- its *duty* ``u_j = k_j t_j / step_j`` (``k_j``
slices of ``t_j`` seconds each, over its step time) -- and jobs that are not
synchronised to each other start their steps at unrelated times.  Under the named
assumption that the jobs' step phases are independent and uniformly distributed (no
common clock, no scheduler aligning them), the chance that job ``j`` is communicating
at a moment when job ``i`` is, is ``u_j``, independently for every ``j``; so the slice
time job ``i`` meets on average is

    E[t_i] = sum over sets S of the other jobs of
             prod_{j in S} u_j  prod_{j not in S, j != i} (1 - u_j)  t_i(S + {i}),

with ``t_i(S)`` job ``i``'s slice time when exactly the jobs of ``S`` run (one fluid run
per set: ``2^J - 1`` of them).  The duties depend on the slice times (a slowed job
stays on the network longer), so ``u`` is the fixed point of ``u_j = min(1, k_j
E[t_j] / step_j(E[t_j]))``, found by iterating from the jobs' duties alone (the map
is monotone when ``t_i(S)`` grows with ``S``, so the iteration rises to the smallest
fixed point).  ``E[t_i]`` is a weighted mean of job ``i``'s slice times over the sets
it runs in, so it lies between job ``i`` alone and job ``i`` with every other job (the
"always" bound the runs report) when those times grow with the set -- with two jobs,
always; with more, up to the runs' own variation (about 1 % of a slice at 8,192
GPUs, where a third job can make a second one's routing luckier) -- and
it equals both when the jobs share no link.

Departures: a job's communication window is treated as uniform (its slices are alike,
as :func:`~fabric_jax.scale.step_flows` makes them), and a slice's time is taken from
a run in which the other jobs' slices start together with it (the runs' concurrency).
Step time per job is then ``max(C, (1 - f) C + k E[t] + L)``
(:func:`~fabric_jax.scale.job_step_time`, as :func:`~fabric_jax.scale.point_metrics`).

Units: seconds.
"""

from __future__ import annotations

import numpy as np

from ._step import job_step_time

__all__ = ["JOB_OVERLAPS", "MAX_OVERLAP_JOBS", "expected_slice_times", "independent_overlap"]

#: ``--job-overlap``: ``"always"`` (every job's slices at once: the runs as they are,
#: an upper bound on the interference) or ``"independent"`` (this module's estimate).
JOB_OVERLAPS = ("always", "independent")
#: Largest number of jobs for ``"independent"`` (``2^J - 1`` runs per fabric).
MAX_OVERLAP_JOBS = 6


def expected_slice_times(table: np.ndarray, duty: np.ndarray) -> np.ndarray:
    """``[J]`` expected slice time of each job given the others' duties.

    Args:
      table: ``[2^J, J]`` seconds; row ``m`` (a bit mask of the jobs running) holds
        ``t_i(m)`` for each job ``i`` in ``m`` (other entries are ignored; row 0 too).
      duty: ``[J]`` fractions in ``[0, 1]``.
    """
    table = np.asarray(table, float)
    duty = np.asarray(duty, float)
    n_masks, J = table.shape
    if n_masks != 2 ** J:
        raise ValueError(f"table: {n_masks} rows for {J} jobs; expected 2^J = {2 ** J}")
    if duty.shape != (J,) or np.any(~np.isfinite(duty)) or np.any((duty < 0) | (duty > 1)):
        raise ValueError(f"duty: [{J}] fractions in [0, 1]; got {duty!r}")
    masks = np.arange(n_masks)
    member = (masks[:, None] >> np.arange(J)[None, :]) & 1 == 1       # [masks, J]
    out = np.zeros(J)
    for i in range(J):                    # J <= MAX_OVERLAP_JOBS: a loop over jobs
        rows = member[:, i]
        others = np.delete(np.arange(J), i)
        p = np.prod(np.where(member[rows][:, others], duty[others], 1.0 - duty[others]),
                    axis=1)
        out[i] = float(np.sum(p * table[rows, i]))
    return out


def independent_overlap(table, slices, compute, overlap, latency, *, tol: float = 1e-9,
                        max_iter: int = 500) -> dict:
    """The independent-phases estimate (module docstring) from the runs' slice times.

    Args:
      table: ``[2^J, J]`` slice times per set of running jobs (:func:`expected_slice_times`).
      slices, compute, overlap, latency: ``[J]`` each job's ``k``, ``C`` (s), ``f`` and
        ``L`` (s).

    Returns:
      ``{"duty": [J], "slice_times": [J] E[t], "step_times": [J], "iterations",
      "converged"}``.
    """
    table = np.asarray(table, float)
    J = table.shape[1]
    k, C, f, L = (np.broadcast_to(np.asarray(x, float), (J,)) for x in
                  (slices, compute, overlap, latency))

    def step(t):
        return job_step_time(C, f, k, t, L)

    def duty_of(t):
        return np.clip(k * t / step(t), 0.0, 1.0)

    alone = table[1 << np.arange(J), np.arange(J)]
    u = duty_of(alone)
    t = alone
    it, converged = 0, False
    for it in range(1, max_iter + 1):
        t = expected_slice_times(table, u)
        new = duty_of(t)
        if np.max(np.abs(new - u)) <= tol:
            u, converged = new, True
            break
        u = new
    return dict(duty=u, slice_times=t, step_times=step(t), iterations=it,
                converged=converged)
