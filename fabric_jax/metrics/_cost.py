"""GPU utilisation and cost per token of a training step (:mod:`fabric_jax.metrics`)."""

from __future__ import annotations

from ._common import as_floats, check_nonnegative, safe_ratio

_SECONDS_PER_HOUR = 3600.0


def gpu_utilization(compute_time, step_time):
    """Fraction of a training step the GPUs spend computing: ``compute_time / step_time``.

    ``step_time`` is the wall time of the step including exposed (non-overlapped)
    communication, so communication stalls show up as utilisation below 1.

    Args:
      compute_time: seconds of computation per step.
      step_time: seconds per step (``inf`` result if 0 with nonzero compute).
    """
    check_nonnegative("compute_time", compute_time)
    check_nonnegative("step_time", step_time)
    compute_time, step_time = as_floats(compute_time, step_time)
    return safe_ratio(compute_time, step_time)


def cost_per_token(gpu_price_per_hour, n_gpus, step_time, tokens_per_step):
    """Dollars per token: ``price/3600 * n_gpus * step_time / tokens_per_step``.

    Args:
      gpu_price_per_hour: dollars per GPU-hour.
      n_gpus: GPUs the job occupies.
      step_time: seconds per training step.
      tokens_per_step: tokens processed per step (global batch x sequence length).

    Returns:
      dollars per token (``inf`` if ``tokens_per_step`` is 0 and the step costs money).
    """
    for name, value in (("gpu_price_per_hour", gpu_price_per_hour), ("n_gpus", n_gpus),
                        ("step_time", step_time), ("tokens_per_step", tokens_per_step)):
        check_nonnegative(name, value)
    price, n_gpus, step_time, tokens = as_floats(gpu_price_per_hour, n_gpus, step_time,
                                               tokens_per_step)
    dollars_per_step = price / _SECONDS_PER_HOUR * n_gpus * step_time
    return safe_ratio(dollars_per_step, tokens)


def cost_per_million_tokens(gpu_price_per_hour, n_gpus, step_time, tokens_per_step):
    """Dollars per million tokens: ``1e6 * cost_per_token(...)`` (same arguments)."""
    return 1e6 * cost_per_token(gpu_price_per_hour, n_gpus, step_time, tokens_per_step)
