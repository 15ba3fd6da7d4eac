"""Validation beside a published figure: Mooncake's KV-cache transfer with vLLM.

Published (Mooncake documentation, vLLM v1 disaggregated-prefill benchmark; see
``shared/reference/inference.md``): one prefill and one decode instance joined by 8 x 200
Gb/s RoCE NICs (~200 GB/s), a 32k-token prompt's KV cache of ~4.5 GB moved in ~31.7 ms
(~142 GB/s, ~71 % of line rate).

Simulated: the cache of a 32,768-token prompt of Llama-3-8B (32 layers x 8 KV heads x 128
x 2 bytes x 2 = 131 KB per token: 4.29 GB, the model whose cache matches the published
size; the benchmark's model is our inference), whole (``kv.mode = "whole"``), sent rail
to rail from the 8 GPUs of one server to the 8 GPUs of another through their rail leaf
at 200 Gb/s per NIC, under the ``roce`` preset (or another); the transfer time is the
latest finish minus the release.
"""

from __future__ import annotations

from ._core import build_run
from ._fabric import simulate_preset
from ._scenario import load_scenario

__all__ = ["MOONCAKE", "mooncake_transfer"]

#: The published figure: bytes, seconds, bytes/s, share of line rate.
MOONCAKE = dict(kv_bytes=4.5e9, transfer_s=31.7e-3, throughput=142e9, line_share=0.71,
                line_rate=8 * 200e9 / 8,
                source="Mooncake transfer engine with vLLM v1 (Mooncake docs): 1P1D, 8 x "
                       "200 Gb/s RoCE, 32k-token prompt")


def mooncake_scenario(dt_us: float = 2.0) -> dict:
    """The serving scenario of the Mooncake transfer (module docstring)."""
    return load_scenario({
        "model": {"name": "llama3_8b", "weight_bytes": 2.0},
        "parallel": {"attention": "tp"},
        "prefill": {"servers": 1}, "decode": {"servers": 1, "instance_servers": 1,
                                              "max_batch": 1},
        "network": {"link_gbps": 200.0, "servers_per_leaf": 2},
        "requests": {"n": 1, "prompt_tokens": 32768, "output_tokens": 2,
                     "prompt_jitter": 0.0, "output_jitter": 0.0},
        "kv": {"mode": "whole"}, "simulation": {"dt_us": dt_us}})


def mooncake_transfer(fabric: str = "roce", *, dt_us: float = 2.0) -> dict:
    """The simulated Mooncake transfer beside the published one (module docstring).

    Returns:
      dict: ``kv_bytes``, ``transfer_s``, ``throughput`` (bytes/s), ``line_share``,
      ``line_rate_s`` (the bytes at 8 NICs' line rate), ``published`` (:data:`MOONCAKE`).
    """
    scn = mooncake_scenario(dt_us)
    run = build_run(scn)
    f = run["flows"]
    sim = simulate_preset(run["topology"], f, fabric, line_rate=run["line_rate"],
                          dt=dt_us * 1e-6, margin=50e-6, batch=1)
    t = float(sim["finish"].max() - f.release.min())
    total = float(f.size.sum())
    line = 8 * run["line_rate"]
    return dict(fabric=fabric, dt_us=dt_us, kv_bytes=total, transfer_s=t,
                throughput=total / t, line_share=total / t / line,
                line_rate_s=total / line, unfinished=sim["unfinished"],
                published=MOONCAKE)
