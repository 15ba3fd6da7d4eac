"""The policies by name, the flow axis of their state's entries, and the binding of a
policy to a path set (:mod:`fabric_jax.routing`)."""

from __future__ import annotations

from ..paths import PathSet
from ._adaptive import ADAPTIVE, IB_AR, SPECTRUM_X_AR
from ._base import Policy, Routing
from ._ecmp import ECMP, WEIGHTED_ECMP
from ._flowlet import FLOWLET
from ._spray import SPRAY

#: The flow axis of each entry a policy keeps in ``RoutingState.aux`` (``None``: not per
#: flow: a clock, the delay line's time stamps); ``split``, ``links``, ``hop_mask`` and
#: ``path_mask`` are per flow on axis 0.  Read by
#: :func:`fabric_jax.distributed.simulate_fluid_sharded` to split a policy's state over
#: devices: a new aux entry must be listed here.
AUX_FLOW_AXIS = dict(home=0, u=0, score=0, idle=0, jitter=0, decide=0, hist=1,
                     hist_t=None, slot=None, clock=None)

#: Every policy by name.
POLICIES = {p.name: p for p in (ECMP, WEIGHTED_ECMP, SPRAY, FLOWLET, ADAPTIVE, IB_AR,
                                SPECTRUM_X_AR)}


def get_policy(policy) -> Policy:
    """Returns a :class:`Policy` given one or its name."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy]
    raise ValueError(f"routing policy must be one of {sorted(POLICIES)}; got {policy!r}")


def make_routing(policy, paths: PathSet, params=None, *, seed: int = 0) -> Routing:
    """Binds a policy to a path set: ``simulate_fluid(..., routing=make_routing(...))``.

    Args:
      policy: a :class:`Policy` or its name (:data:`POLICIES`).
      paths: candidate paths, one pair per flow.
      params: the policy's params (default ``policy.default_params()``).
      seed: seed of hashes / source ports.
    """
    policy = get_policy(policy)
    params = policy.default_params() if params is None else params
    return Routing(policy, params, policy.init(paths, params, seed))
