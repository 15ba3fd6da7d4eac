"""End-of-run metrics of the fluid congestion-control simulation as routing objectives.

:func:`fabric_jax.fluid.simulate_fluid` treats the hops of one flow as a single chain,
so a pair split over several paths is simulated as one *sub-flow per candidate path*
(as a multipath transport does: MPTCP subflows, UEC/Spectrum-X spraying with per-path
state), each with ``size_pair * split_pair,path`` bytes and its own congestion-control
state.  The split enters only through the sub-flow sizes.

Metric.  The fluid model ends a flow at the end of the step in which its last bytes are
offered, so its finish times are quantised to ``dt`` and have zero derivative with
respect to sizes almost everywhere.  The objective therefore uses a smooth
completion-time *proxy* built from the delivered-bytes trajectory: for pair ``p`` with
``S_p`` bytes and ``D_p(t)`` delivered,

    T_p = 2 * integral_0^horizon (1 - D_p(t) / S_p) dt,

twice the time-average of the undelivered fraction, which equals the completion time
exactly for a flow served at a constant rate (``D = r t`` until ``S``: the integral is
``S / (2 r)``), and is differentiable in the sizes and the rates.  ``mean_fct`` is the
mean of ``T_p``; ``cct`` the largest.  With a congestion-control law, run the fluid
model in its smooth mode (``smooth=fabric_jax.smooth.smooth(T)``) so marking
thresholds have gradients too.

Bias: the fluid model's own (fixed step ``dt``, one hop per step, feedback one base RTT
late); the proxy weighs a slow start (ramping rate) differently from a constant-rate
transfer of the same length; a sub-flow of a few bytes still runs its own
congestion-control state; and gradients flow through sizes, not through which
sub-flows exist.  Gradients are checked against central differences of the same
simulation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..incidence import Incidence
from ._problem import RoutingProblem, check_flow_level

__all__ = ["fluid_objective"]

FLUID_METRICS = ("mean_fct", "cct")


def fluid_objective(problem: RoutingProblem, *, metric: str = "mean_fct", dt: float,
                    n_steps: int, **fluid_kwargs):
    """An objective ``f(split, arrays, size) -> (loss, metric)`` for :func:`optimize_routing`.

    Args:
      problem: the routing problem (``aggregate=False``: pairs are flows).
      metric: ``"mean_fct"`` (mean of the completion-time proxy ``T_p``) or ``"cct"``
        (the largest ``T_p``), seconds; see the module docstring.
      dt: fluid time step, seconds.
      n_steps: number of steps; the horizon ``dt * n_steps`` should cover every
        completion (bytes left at the horizon count up to the horizon only).
      **fluid_kwargs: passed to :func:`fabric_jax.fluid.simulate_fluid` (``law``,
        ``params``, ``flow_control``, ``buffer``, ``smooth``, ``solver_iterations``,
        ``latency`` ...).

    Returns:
      A callable for ``optimize_routing(problem, objective=..., size=...)``.

    Raises:
      ValueError: unknown metric, or an aggregated problem.
    """
    from ..fluid import simulate_fluid

    if metric not in FLUID_METRICS:
        raise ValueError(f"metric must be one of {FLUID_METRICS}; got {metric!r}")
    check_flow_level(problem)
    pair_v, path_v = np.nonzero(problem.path_mask)          # one sub-flow per valid path
    n_sub = pair_v.size
    hop = problem.hop_mask[pair_v, path_v]                  # [S, H]
    links = problem.links[pair_v, path_v]
    # Entries in hop order per sub-flow: the fluid model reads a flow's COO entries as
    # its path.
    sub = np.broadcast_to(np.arange(n_sub)[:, None], hop.shape)[hop]
    inc = Incidence.from_coo(links[hop], sub, n_links=problem.n_links, n_flows=n_sub)
    cap = problem.capacity
    cap_hop = np.where(hop, cap[np.maximum(links, 0)], np.inf)
    line_rate = cap_hop.min(axis=1)
    fluid_kwargs.setdefault("line_rate", line_rate)
    # Concrete defaults (simulate_fluid derives them from arrays that are traced here).
    fluid_kwargs.setdefault("base_rtt", np.full(n_sub, float(dt)))
    if fluid_kwargs.get("solver_iterations") is None:
        fluid_kwargs["solver_iterations"] = 32
    fluid_kwargs["save_every"] = 1
    # Build flow-control and law parameters here, outside any trace: simulate_fluid
    # derives them with NumPy from arrays that are traced inside the optimiser.
    if "fc_params" not in fluid_kwargs:
        from .. import flowcontrol as fcm

        buf = fluid_kwargs.pop("buffer", None)
        buf = np.inf if buf is None else buf
        mode = fluid_kwargs.get("flow_control", "none")
        fc = fcm.FlowControl(mode) if isinstance(mode, str) else mode
        if fc.mode == "pfc":
            xoff, xon = fcm.pfc_thresholds(cap, buf, reaction_s=fc.pause_delay * float(dt))
            fluid_kwargs["fc_params"] = fcm.flow_control_params(problem.n_links, buffer=buf,
                                                                xoff=xoff, xon=xon)
        else:
            fluid_kwargs["fc_params"] = fcm.flow_control_params(problem.n_links, buffer=buf)
    if fluid_kwargs.get("params") is None:
        from ..cc import base as ccbase

        fluid_kwargs["params"] = ccbase.get(fluid_kwargs.get("law", "none")).default_params()
    n_pairs = problem.n_pairs
    seg = jnp.asarray(pair_v, jnp.int32)
    pv, kv = jnp.asarray(pair_v), jnp.asarray(path_v)

    def objective(split, arrays, size):
        sub_size = size[pv] * split[pv, kv]
        res = simulate_fluid(inc, cap, sub_size, dt=dt, n_steps=n_steps, **fluid_kwargs)
        step_bytes = res.trajectory.throughput * dt                       # [steps, S]
        pair_bytes = jax.ops.segment_sum(step_bytes.T, seg, num_segments=n_pairs)  # [P, steps]
        delivered = jnp.cumsum(pair_bytes, axis=1)
        has = size > 0
        frac_left = jnp.where(has[:, None], 1.0 - delivered / jnp.where(has, size, 1.0)[:, None],
                              0.0)
        proxy = 2.0 * dt * jnp.sum(jnp.clip(frac_left, 0.0, 1.0), axis=1)   # [P] seconds
        value = jnp.mean(proxy) if metric == "mean_fct" else jnp.max(proxy)
        return value, value

    objective.__name__ = f"fluid_{metric}"
    return objective
