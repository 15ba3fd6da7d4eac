"""Textbook progressive filling: the NumPy oracle for weighted max-min fairness.

The model (Bertsekas & Gallager, *Data Networks*, 2nd ed., Sec. 6.5.2, "progressive
filling"; SimGrid ``lmm`` for the weighted form). ``links`` links of capacity ``c_l``
(bytes/s) carry ``flows`` flows of rate ``r_f`` (bytes/s). Flow ``f`` puts the fraction
``w_lf >= 0`` of its rate on link ``l`` (the weights of a multipath flow add up to one
per path; a flow crossing a link twice has ``w_lf = 2``), so link ``l`` carries

    load_l = sum_f w_lf * r_f      and must satisfy    load_l <= c_l.

Flow ``f`` may also be capped by a demand ``d_f`` (bytes/s, ``+inf`` = uncapped).

Progressive filling raises the rates of all *unfrozen* flows together, at the same speed,
starting from zero. The first time a link becomes full, every flow crossing it freezes;
the first time a flow reaches its demand, that flow freezes. Repeat until every flow is
frozen. Each iteration of :func:`progressive_filling` is one such step: it computes the
largest common increment ``delta`` that keeps every link feasible and every unfrozen
flow below its demand, applies it, and freezes exactly the flows that hit the binding
constraint(s). The result is the unique weighted max-min fair allocation, characterised
by the *bottleneck certificate* checked by :func:`bottleneck_certificate`: rates are
feasible and every flow either meets its demand or crosses a saturated link on which no
other flow has a higher rate.

A flow that crosses no link is unconstrained: it gets its demand, or ``+inf`` without
one. A zero-capacity link freezes its flows at rate zero in the first step.

Units: capacities, demands and rates in bytes per second. Float64 throughout.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

# Relative slack for deciding that two constraints bind at the same increment (ties),
# and that a link is full. Far below any tolerance the tests use against the solver.
TIE_RTOL = 1e-12


def progressive_filling(A, capacity, demand=None):
    """Weighted max-min fair rates by textbook sequential progressive filling.

    Args:
        A: ``[links, flows]`` non-negative weights; ``A[l, f]`` is the fraction of flow
            ``f``'s rate carried on link ``l`` (0 = flow does not use the link).
        capacity: ``[links]`` non-negative finite link capacities, bytes/s.
        demand: optional ``[flows]`` non-negative per-flow rate caps, bytes/s (``inf``
            allowed). ``None`` means uncapped.

    Returns:
        ``(rates, iterations)``: ``rates`` a float64 ``[flows]`` array in bytes/s
        (``inf`` for an uncapped flow that uses no link) and the number of filling
        steps taken.
    """
    if sp.issparse(A):  # large benchmark instances: same algorithm, sparse products
        A = sp.csr_array(A, dtype=np.float64)
    else:
        A = np.asarray(A, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    n_links, n_flows = A.shape
    assert capacity.shape == (n_links,)
    assert (A.min() if A.size else 0) >= 0 and np.all(capacity >= 0) and np.all(np.isfinite(capacity))
    if demand is None:
        demand = np.full(n_flows, np.inf)
    demand = np.asarray(demand, dtype=np.float64)
    assert demand.shape == (n_flows,) and np.all(demand >= 0)

    has_links = (A.T @ np.ones(n_links)) > 0

    rates = np.zeros(n_flows)
    frozen = np.zeros(n_flows, dtype=bool)
    # A flow on no link is limited by its demand only; taking it out of the filling loop
    # gives the same answer as letting it rise with the others until its demand.
    rates[~has_links] = demand[~has_links]
    frozen[~has_links] = True

    iterations = 0
    while not frozen.all():
        iterations += 1
        active = ~frozen
        # Rate at which each link's load grows when every active flow gains 1 byte/s.
        growth = A @ active.astype(np.float64)
        load = A @ np.where(np.isfinite(rates), rates, 0.0)
        slack = np.maximum(capacity - load, 0.0)
        grows = growth > 0
        link_step = np.full(n_links, np.inf)
        link_step[grows] = slack[grows] / growth[grows]
        flow_step = np.full(n_flows, np.inf)
        flow_step[active] = demand[active] - rates[active]
        delta = min(link_step.min(), flow_step.min())
        assert np.isfinite(delta), "every active flow crosses a link of finite capacity"

        rates[active] += delta
        # Freeze exactly the flows whose binding constraint is this step's (ties within
        # TIE_RTOL of the step, measured against the rates reached, bind together).
        tol = TIE_RTOL * max(delta + rates[active].max(initial=0.0), 1.0)
        full_links = grows & (link_step <= delta + tol)
        on_full_link = ((A.T @ full_links.astype(np.float64)) > 0) & active
        at_demand = active & (flow_step <= delta + tol)
        newly = on_full_link | at_demand
        assert newly.any()
        frozen |= newly
    return rates, iterations


def bottleneck_certificate(A, capacity, demand, rates, rtol):
    """Check the max-min optimality certificate of ``rates``; return a per-flow mask.

    Flow ``f`` is certified when its rate is within its demand and either it meets its
    demand, or it crosses a saturated link ``l`` (``load_l >= c_l - tol``) on which no
    flow has a rate above ``r_f + tol``. Together with feasibility of every link this
    characterises the max-min fair allocation (Bertsekas & Gallager, Prop. 6.5.1,
    extended to fixed split weights).

    Args:
        A: ``[links, flows]`` weights.
        capacity: ``[links]`` bytes/s.
        demand: ``[flows]`` bytes/s or ``None``.
        rates: ``[flows]`` candidate rates, bytes/s.
        rtol: relative tolerance; absolute slack is ``rtol`` times the largest finite
            capacity/demand/rate scale.

    Returns:
        ``[flows]`` bool array, True where the certificate holds.
    """
    A = np.asarray(A, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    rates = np.asarray(rates, dtype=np.float64)
    n_flows = A.shape[1]
    demand = np.full(n_flows, np.inf) if demand is None else np.asarray(demand, np.float64)
    finite = np.concatenate([capacity, demand[np.isfinite(demand)], rates[np.isfinite(rates)]])
    tol = rtol * max(np.abs(finite).max(initial=0.0), 1.0)

    uses_link = A > 0
    has_links = uses_link.any(axis=0)
    load = A @ np.where(has_links, rates, 0.0)
    saturated = load >= capacity - tol

    within_demand = rates <= demand + tol
    meets_demand = rates >= demand - tol
    # max rate among the flows on each link (-inf on an unused link)
    link_max = np.where(uses_link, rates[None, :], -np.inf).max(axis=1, initial=-np.inf)
    is_top = uses_link & saturated[:, None] & (rates[None, :] >= link_max[:, None] - tol)
    bottlenecked = is_top.any(axis=0)
    return within_demand & (meets_demand | bottlenecked)
