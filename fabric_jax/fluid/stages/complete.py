"""Stage 8 of a step: which flows complete, and when inside the step.

A flow finishes when its last byte has passed its last queue, plus its one-way
latency; inside the step, queued bytes leave first (while the last port drains what it
serves) and cut-through bytes at the flow's pacing rate where the path has room, so a
flow shorter than ``dt`` is not stretched to a whole step.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...fairness import joining_share
from ..result import COMPLETION_RTOL

__all__ = ["complete", "finish_in_step", "last_bytes"]


def complete(net, c, t, start, active, passed_now, last, dt, remaining, in_net):
    """Flows whose last byte passed its last queue this step, and their finish time:
    the instant inside the step (:func:`finish_in_step`) plus the one-way latency.

    A flow completes when the bytes that passed reach its size (to
    :data:`COMPLETION_RTOL`), or when its sender has nothing left (``remaining`` after
    the step, ``[flows]``) and none of its bytes is queued or in transit (``in_net``
    ``[flows]``, to the same tolerance): the two running float32 totals ``remaining``
    (counted down from the size) and ``passed`` (counted up) round differently, and
    over ~10^4 steps of queueing a megabyte flow's ``passed`` can end ~1e-4 of its
    size short while ``remaining`` reached 0 -- a flow that had nothing more to send
    would otherwise never finish."""
    size = net.flows["size"]
    rtol = COMPLETION_RTOL.get(np.dtype(size.dtype), 3e-5)
    passed = c.passed + passed_now
    counted = passed >= size * (1.0 - rtol)
    drained = (remaining <= 0.0) & (in_net <= size * rtol) & (passed_now > 0.0)
    completes = active & (counted | drained)
    need = jnp.maximum(size - c.passed, 0.0)
    need = jnp.where(counted, need, jnp.minimum(need, passed_now))
    t_in = finish_in_step(t, start, need, passed_now, dt, **last)
    # A flow never finishes before it starts (a zero-byte flow released inside the
    # step completes at its release time).
    finish = jnp.where(completes, jnp.maximum(t_in, start) + net.one_way, c.finish)
    return passed, completes, finish


def finish_in_step(t, start, need, passed_now, dt, *, queued, drain, cut, cut_rate,
                    q_lo=0.0, q_hi=1.0):
    """When inside the step ``[t, t + dt]`` a flow's last ``need`` bytes pass.

    The step moves two kinds of bytes past a flow's last queue (``passed_now`` of them
    after receiver discards): ``queued`` ``[flows]`` bytes served by its last hop,
    which a FIFO port sends first, during the ``drain`` ``[flows]`` seconds it takes to
    serve what it serves this step (``s_l / u_l``): the flow's bytes leave between the
    fractions ``q_lo`` and ``q_hi`` of that service, their FIFO positions
    (:func:`fabric_jax.links.service_span`), interleaved with the other flows'; and
    ``cut`` bytes crossing cut-through, sent from ``max(start, t)`` at ``cut_rate``:
    the flow's allocation raised by the capacity still free on every hop of its path,
    up to its pacing rate (a flow whose last step is short is not slowed to spread its
    bytes over the whole step).  Exact for a lone flow; otherwise the instant differs
    from a uniform spread of the step's bytes by less than ``dt`` (so both agree as
    ``dt -> 0``).  The link's other flows are held at their allocations when
    ``cut_rate`` is raised (an estimate: a FIFO would share the port in proportion).
    """
    got = passed_now > 0
    keep = jnp.where(got, passed_now / jnp.where(got, queued + cut, 1.0), 1.0)
    need_a = need / jnp.where(keep > 0, keep, 1.0)          # in bytes before discards
    q_pos = queued > 0
    t_q = t + drain * (q_lo + (q_hi - q_lo)
                       * jnp.clip(need_a / jnp.where(q_pos, queued, 1.0), 0.0, 1.0))
    r_pos = cut_rate > 0
    s0 = jnp.clip(start, t, t + dt)
    # bytes wanted from the cut-through part: at most what crossed (a need above
    # ``queued + cut`` is float round-off; with no cut-through bytes the last byte
    # was a queued one)
    extra = jnp.clip(need_a - queued, 0.0, cut)
    t_c = s0 + extra / jnp.where(r_pos, cut_rate, jnp.inf)
    t_in = jnp.where(need_a <= queued, t_q,
                     jnp.maximum(t + jnp.where(q_pos, drain * q_hi, 0.0), t_c))
    return jnp.clip(t_in, t, t + dt)


def last_bytes(net, served, served_l, usable, inc_k, alloc, pace, dt, span, load=None):
    """The per-flow inputs of :func:`finish_in_step` from the step's transmit stage
    (``span``: the FIFO positions of :func:`fabric_jax.links.service_span`)."""
    hops = net.hops
    u_pos = usable > 0
    drain_l = jnp.where(u_pos, jnp.minimum(served_l / jnp.where(u_pos, usable, 1.0), dt), dt)
    last_served = jnp.where(hops.last, served, 0.0)
    at_last = last_served > 0
    drain = jnp.max(jnp.where(at_last, hops.gather(drain_l), 0.0), axis=1)
    s_e = hops.gather(served_l)
    s_pos = s_e > 0
    lo = jnp.clip(span[0] / jnp.where(s_pos, s_e, 1.0), 0.0, 1.0)
    hi = jnp.clip(span[1] / jnp.where(s_pos, s_e, 1.0), 0.0, 1.0)
    q_lo = jnp.min(jnp.where(at_last, lo, 1.0), axis=1)
    q_hi = jnp.max(jnp.where(at_last, hi, 0.0), axis=1)
    any_last = jnp.any(at_last, axis=1)
    q_lo, q_hi = jnp.where(any_last, q_lo, 0.0), jnp.where(any_last, q_hi, 1.0)
    # the rate the flow sends its last bytes at: its share if it wanted its pacing rate
    # (the other flows at its bottleneck give way to it), not its last step's allocation
    fresh = jnp.maximum(usable - served_l / dt, 0.0)
    cut_rate = jnp.clip(joining_share(inc_k, fresh, alloc, load, axis_name=hops.axis_name),
                        alloc,
                        jnp.maximum(pace, alloc))
    return dict(queued=jnp.sum(last_served, axis=1), drain=drain, cut=alloc * dt,
                cut_rate=cut_rate, q_lo=q_lo, q_hi=q_hi)
