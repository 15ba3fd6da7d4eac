"""A generalising routing policy, trained on a distribution of traffic matrices (DOTE).

DOTE (Perry et al., NSDI 2023) trains a neural network that maps traffic matrices to
split ratios end to end, by stochastic gradient descent on the MLU of its own output,
and then routes *unseen* matrices with one forward pass instead of solving an LP.  Here:

* input: the log of the demand vector normalised to mean 1,
  ``x = log(d / mean(d) + 1e-3)`` (MLU is homogeneous of degree 1 in the demand, so
  the optimal split depends on the shape of the matrix only; the log tames the heavy
  tail of real matrices);
* ``kind="mlp"``: ``logits = b + W2 gelu(W1 x + b1)`` reshaped to ``[pairs, paths]``
  (``b`` shared logits, the ECMP-free part of the policy; ``W2`` starts at zero, so
  training starts from ``b``); ``kind="shared"``: one set of logits for every matrix
  (a learned oblivious routing);
* split: the masked softmax of the logits (zero on invalid paths);
* loss: the mean over a minibatch of ``smooth MLU(split(x), d) / MLU_spray(d)``; the
  per-matrix normaliser (held constant) makes every matrix count alike, as DOTE's
  normalisation by the optimum does, without solving an LP per training matrix.

DOTE feeds a window of past matrices to predict the next; here the policy sees the
matrix it routes (DOTE's "oracle" input), the setting in which it is compared with the
per-matrix LP optimum.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..compiling import jit
from ._baselines import spray_split
from ._objectives import masked_softmax, smooth_max, utilization
from ._problem import RoutingProblem
from ._optax import optax_update

__all__ = ["PolicyResult", "train_routing_policy"]

POLICY_KINDS = ("mlp", "shared")


@dataclasses.dataclass(frozen=True, eq=False)
class PolicyResult:
    """A trained routing policy.

    Attributes:
      kind: ``"mlp"`` or ``"shared"``.
      params: parameter pytree (NumPy arrays).
      loss_history: ``[steps]`` training loss (normalised smooth MLU).
      seconds: training wall time, compilation excluded.
      compile_seconds: compilation wall time.
      problem: the routing problem whose candidate paths the policy splits over.
    """

    kind: str
    params: Any
    loss_history: np.ndarray
    seconds: float
    compile_seconds: float
    problem: RoutingProblem = dataclasses.field(repr=False, default=None)

    def split(self, demands) -> np.ndarray:
        """``[batch, pairs, paths]`` (or ``[pairs, paths]``) splits for demands (bytes/s)."""
        d = np.asarray(demands, np.float64)
        one = d.ndim == 1
        d = np.atleast_2d(d)
        if d.shape[1] != self.problem.n_pairs:
            raise ValueError(f"demands must be [batch, pairs] with pairs = "
                             f"{self.problem.n_pairs}; got {d.shape}")
        arrays = self.problem.arrays()
        params = jax.tree_util.tree_map(jnp.asarray, self.params)
        s = np.asarray(_apply_batch(self.kind, params, arrays.path_mask,
                                    jnp.asarray(d, arrays.capacity.dtype)), np.float64)
        s = np.where(self.problem.path_mask, s, 0.0)
        s /= s.sum(axis=-1, keepdims=True)
        return s[0] if one else s

    def mlu(self, demands) -> np.ndarray:
        """``[batch]`` exact MLU of the policy's splits on each demand row."""
        d = np.atleast_2d(np.asarray(demands, np.float64))
        return np.array([self.problem.mlu(s, di) for s, di in zip(self.split(d), d)])


#: Floor inside the log of the normalised demand (input features of the MLP).
FEATURE_FLOOR = 1e-3


def _features(demand):
    return jnp.log(demand / jnp.maximum(jnp.mean(demand), 1e-30) + FEATURE_FLOOR)


def _logits(kind, params, demand):
    if kind == "shared":
        return params["bias"]
    h = jax.nn.gelu(params["w1"] @ _features(demand) + params["b1"])
    out = params["w2"] @ h
    return params["bias"] + out.reshape(params["bias"].shape)


@functools.partial(jit, static_argnums=(0,))
def _apply_batch(kind, params, path_mask, demands):
    return jax.vmap(lambda d: masked_softmax(_logits(kind, params, d), path_mask))(demands)


def _init(kind, key, n_pairs, n_paths, hidden, dtype):
    bias = jnp.zeros((n_pairs, n_paths), dtype)
    if kind == "shared":
        return {"bias": bias}
    k1, _ = jax.random.split(key)
    scale = 1.0 / np.sqrt(n_pairs)
    return {"bias": bias,
            "w1": jax.random.normal(k1, (hidden, n_pairs), dtype) * scale,
            "b1": jnp.zeros((hidden,), dtype),
            "w2": jnp.zeros((n_pairs * n_paths, hidden), dtype)}


def _check_policy_inputs(problem, train_demands, kind, hidden, steps,
                         batch_size) -> np.ndarray:
    """The checked ``[samples, pairs]`` float64 training demands of
    :func:`train_routing_policy`, after checking its other size arguments."""
    if not isinstance(problem, RoutingProblem):
        raise ValueError(f"problem must be a RoutingProblem (see routing_problem); got "
                         f"{type(problem).__name__}")
    if kind not in POLICY_KINDS:
        raise ValueError(f"kind must be one of {POLICY_KINDS}; got {kind!r}")
    d = np.asarray(train_demands, np.float64)
    if d.ndim != 2 or d.shape[1] != problem.n_pairs or not np.all(np.isfinite(d)) \
            or np.any(d < 0):
        raise ValueError(f"train_demands must be finite, >= 0, [samples, pairs] with "
                         f"pairs = {problem.n_pairs}; got shape {d.shape}")
    for name, v in (("hidden", hidden), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")
    return d


def _init_bias(problem: RoutingProblem, init, dtype) -> jax.Array:
    """``[pairs, paths]`` initial shared logits from ``init`` (an array or a
    :class:`PolicyResult`), zero on padded paths."""
    bias = np.asarray(init.params["bias"] if isinstance(init, PolicyResult) else init,
                      np.float64)
    if bias.shape != problem.path_mask.shape:
        raise ValueError(f"init must be [pairs, paths] = {problem.path_mask.shape} "
                         f"logits or a PolicyResult of this problem; got {bias.shape}")
    return jnp.asarray(np.where(problem.path_mask, bias, 0.0), dtype)


def train_routing_policy(problem: RoutingProblem, train_demands, *, kind: str = "mlp",
                         hidden: int = 128, steps: int = 2000, batch_size: int = 32,
                         init=None,
                         optimizer=None, learning_rate: float | None = None,
                         temperature=(0.05, 0.005), seed: int = 0) -> PolicyResult:
    """Trains a policy traffic matrix -> split on a set of matrices (see module docstring).

    Args:
      problem: routing problem giving the candidate paths, capacities and base load.
      train_demands: ``[samples, pairs]`` bytes/s training traffic matrices.
      kind: ``"mlp"`` (one hidden layer) or ``"shared"`` (one split for all matrices).
      hidden: hidden width of the MLP.
      steps: SGD steps.
      batch_size: matrices per step (sampled with replacement).
      init: initial shared logits ``b``: a ``[pairs, paths]`` array, or a trained
        :class:`PolicyResult` (e.g. a ``"shared"`` policy, so an MLP only learns the
        matrix-dependent correction); default zeros (an even split).
      optimizer: optax optimiser (default ``adam(learning_rate)``).
      learning_rate: learning rate of the default optimiser (default 1e-3 for ``mlp``,
        1e-2 for ``shared``).
      temperature: relative LSE temperature, a float or ``(start, end)`` annealed.
      seed: seed of the initialisation and the minibatch sampling.

    Returns:
      :class:`PolicyResult`.
    """
    from ._train import check_learning_rate, anneal

    d = _check_policy_inputs(problem, train_demands, kind, hidden, steps, batch_size)
    temp = (anneal(float(temperature[0]), float(temperature[1]), steps)
            if isinstance(temperature, tuple) else temperature)
    if learning_rate is None:
        learning_rate = 1e-3 if kind == "mlp" else 1e-2
    learning_rate = check_learning_rate(learning_rate)
    if isinstance(temperature, tuple):
        if len(temperature) != 2 or not all(isinstance(t, (int, float)) and t > 0
                                            for t in temperature):
            raise ValueError(f"temperature must be > 0 or a (start, end) pair of numbers > 0; "
                             f"got {temperature!r}")
    elif not callable(temperature) and not (isinstance(temperature, (int, float))
                                            and temperature > 0):
        raise ValueError(f"temperature must be > 0 or a (start, end) pair; got {temperature!r}")
    optimizer = optax.adam(learning_rate) if optimizer is None else optimizer
    arrays = problem.arrays()
    dtype = arrays.capacity.dtype
    spray = spray_split(problem)
    norm = np.array([problem.mlu(spray, row) for row in d])
    norm = np.where(norm > 0, norm, 1.0)
    demands = jnp.asarray(d, dtype)
    norms = jnp.asarray(norm, dtype)
    key = jax.random.PRNGKey(seed)
    k_init, k_data = jax.random.split(key)
    params = _init(kind, k_init, problem.n_pairs, problem.max_paths, int(hidden), dtype)
    if init is not None:
        params["bias"] = _init_bias(problem, init, dtype)

    def loss_fn(p, batch_d, batch_n, t):
        def one(dm, nm):
            split = masked_softmax(_logits(kind, p, dm), arrays.path_mask)
            u = utilization(arrays, split, dm)
            return smooth_max(u, arrays.link_ok, t) / nm
        return jnp.mean(jax.vmap(one)(batch_d, batch_n))

    def train(params, demands, norms, key):
        def body(carry, k):
            p, opt_state, key = carry
            key, sub = jax.random.split(key)
            idx = jax.random.randint(sub, (batch_size,), 0, demands.shape[0])
            t = temp(k) if callable(temp) else temp
            loss, g = jax.value_and_grad(loss_fn)(p, demands[idx], norms[idx], t)
            updates, opt_state = optax_update(optimizer, g, opt_state, p)
            return (optax.apply_updates(p, updates), opt_state, key), loss

        (p, _, _), losses = jax.lax.scan(body, (params, optimizer.init(params), key),
                                         jnp.arange(steps))
        return p, losses

    t0 = time.perf_counter()
    compiled = jit(train).lower(params, demands, norms, k_data).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    p, losses = compiled(params, demands, norms, k_data)
    jax.block_until_ready((p, losses))
    run_s = time.perf_counter() - t0
    return PolicyResult(kind=kind, params=jax.tree_util.tree_map(np.asarray, p),
                        loss_history=np.asarray(losses), seconds=run_s,
                        compile_seconds=compile_s, problem=problem)
