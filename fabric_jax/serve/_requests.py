"""Requests: Poisson arrivals with fixed or uniform-jittered lengths, or a trace CSV.

Units: seconds, tokens.
"""

from __future__ import annotations

import csv

import numpy as np

from ..scenario import refuse

__all__ = ["make_requests", "read_trace"]

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


def read_trace(path):
    """``(arrival_s, prompt_tokens, output_tokens)`` arrays from a CSV with those columns
    (a header row; arrivals sorted here).  Azure's LLM inference trace 2023 (Patel et al.,
    Splitwise, ISCA 2024; ``Azure/AzurePublicDataset``, ``TIMESTAMP, ContextTokens,
    GeneratedTokens``) converts to it with its timestamps as seconds from the first.

    Raises:
      ScenarioError: a missing column, a length <= 0 or a negative arrival, naming
        ``requests.trace``.
    """
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or any(c not in rows[0] for c in TRACE_COLUMNS):
        raise refuse("requests.trace", f"{path}: needs the columns {list(TRACE_COLUMNS)}",
                     fix="a header row arrival_s,prompt_tokens,output_tokens")
    try:
        arr = np.array([float(r["arrival_s"]) for r in rows])
        p = np.array([int(float(r["prompt_tokens"])) for r in rows])
        o = np.array([int(float(r["output_tokens"])) for r in rows])
    except ValueError as err:
        raise refuse("requests.trace", f"{path}: a value that is not a number ({err})",
                     fix="numbers in every row") from None
    if (p <= 0).any() or (o <= 0).any():
        raise refuse("requests.trace", f"{path}: prompt_tokens and output_tokens must be "
                     "> 0 in every row", fix="drop or fix the rows with lengths <= 0")
    if (arr < 0).any() or not np.isfinite(arr).all():
        raise refuse("requests.trace", f"{path}: arrival_s must be finite and >= 0")
    order = np.argsort(arr, kind="stable")
    return arr[order], p[order], o[order]


def make_requests(req: dict, seed: int):
    """``(arrival [n] s, prompt [n], output [n] tokens)`` for the ``[requests]`` section:
    the trace if one is given, else ``n`` Poisson arrivals at ``rate`` per second with
    lengths uniform in ``tokens x [1 - jitter, 1 + jitter]`` (fixed when jitter is 0),
    all from one seeded generator (NumPy's default_rng)."""
    if req["trace"]:
        return read_trace(req["trace"])
    rng = np.random.default_rng(seed)
    n = int(req["n"])
    arrival = np.cumsum(rng.exponential(1.0 / req["rate"], n))

    def lengths(mean, jitter):
        if jitter <= 0:
            return np.full(n, int(mean), np.int64)
        x = rng.uniform(mean * (1 - jitter), mean * (1 + jitter), n)
        return np.maximum(np.rint(x), 1).astype(np.int64)

    prompt = lengths(req["prompt_tokens"], req["prompt_jitter"])
    output = lengths(req["output_tokens"], req["output_jitter"])
    return arrival, prompt, output
