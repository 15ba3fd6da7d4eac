"""Disaggregated LLM inference: prefill servers, KV-cache transfers, decode servers.

Prefill/decode disaggregation (Splitwise, Patel et al. ISCA 2024; DistServe, Zhong et
al. OSDI 2024; Mooncake, Qin et al. 2024) runs the compute-bound prefill of a prompt
and the memory-bound token-by-token decode on different servers; the prompt's KV cache
crosses the network in between.  The model here:

* **Requests** arrive as a Poisson process of ``rate`` per second (seeded), each with a
  prompt of ``prompt_len`` tokens (optionally uniform in ``prompt_len * [1 - jitter,
  1 + jitter]``) and ``output_len`` output tokens.
* **Prefill** (one model instance per server, tensor-parallel over its ``tp`` GPUs):
  requests go round robin to the prefill servers and queue FIFO; a prompt of ``P``
  tokens takes ``forward FLOPs(P) / (tp * peak * achievable_fraction)``
  (:mod:`fabric_jax.workloads.model`, attention over the prompt itself).
* **KV transfer**: ``kv_cache_bytes(P) = 2 L kv_heads head_dim b P``, split over the
  ``tp`` GPUs (each holds its heads' share) and sent rail to rail, GPU ``r`` of the
  prefill server to GPU ``r`` of the decode server (``tp`` flows of ``KV / tp``),
  released when the prefill ends.  These are the network flows.
* **Decode** (round robin to decode servers, continuous batching up to
  ``max_batch``): a step produces one token for every request in the batch and takes
  ``(active weight bytes + KV bytes of the batch) / (tp * HBM bandwidth *
  bandwidth_fraction)``, the memory-bound roofline of decode (Pope et al., MLSys 2023,
  Sec. 3); a request joins at the first step after its KV cache has arrived.
  ``bandwidth_fraction`` (default 0.7) is our assumption for achieved HBM bandwidth.

Metrics (:meth:`DisaggregatedServing.serve`): time to first token ``TTFT = first
decode step end - arrival`` (the decode server emits the stream, so TTFT includes the
KV transfer; with ``first_token="prefill"`` it ends at the prefill instead, as when
the prefill server streams its own token), token latency (the gaps between consecutive
tokens of a request; with ``first_token="prefill"`` the first gap includes the KV
transfer), and the KV transfer time.  Left out: TP all-reduces in decode (NVLink),
chunked prefill, KV-cache memory limits, layer-wise streaming of the cache.

Units: bytes, seconds, tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabric_jax.workloads._random import as_rng
from fabric_jax.workloads.flows import Workload, concat, single_group
from fabric_jax.workloads.model import get_gpu, get_model, kv_cache_bytes

__all__ = ["prefill_time", "decode_step_time", "DisaggregatedServing",
           "disaggregated_serving"]


def prefill_time(model, n_tokens, gpu="h100_sxm", *, tp: int = 8,
                 achievable_fraction: float = 0.5):
    """Seconds to prefill prompts of ``n_tokens`` (array-friendly) on ``tp`` GPUs.

    Forward FLOPs: ``2 P_active`` per token plus attention ``4 P d_attn`` per token and
    layer over the prompt itself, plus the logits of the last token only.
    """
    model, gpu = get_model(model), get_gpu(gpu)
    p = np.asarray(n_tokens, np.float64)
    flops = p * (2.0 * model.layer_active_params
                 + model.n_layers * 4.0 * p * model.attn_dim) \
        + 2.0 * model.hidden * model.vocab
    return flops / (tp * gpu.peak_flops * achievable_fraction)


def decode_step_time(model, kv_tokens, gpu="h100_sxm", *, tp: int = 8,
                     bandwidth_fraction: float = 0.7):
    """Seconds of one decode step whose batch holds ``kv_tokens`` cached tokens in total
    (memory-bound: active weights + KV cache read once per step)."""
    model, gpu = get_model(model), get_gpu(gpu)
    weights = model.active_params * model.bytes_per_element
    kv = kv_cache_bytes(model, np.asarray(kv_tokens, np.float64))
    return (weights + kv) / (tp * gpu.hbm_bandwidth * bandwidth_fraction)


@dataclasses.dataclass(frozen=True, eq=False)
class DisaggregatedServing:
    """A disaggregated-serving run (from :func:`disaggregated_serving`).

    Attributes:
      workload: the KV-cache transfer flows, ``tp`` per request (request ``i`` owns
        flows ``i*tp .. i*tp+tp-1``).
      arrival: float64 [requests] request arrival, s.
      prompt_len, output_len: int [requests] tokens.
      prefill_end: float64 [requests] end of the prefill, s.
      decode_server: int [requests] decode server index (0-based among decode servers).
      info: inputs and derived constants.
    """

    workload: Workload
    arrival: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefill_end: np.ndarray
    decode_server: np.ndarray
    info: dict

    def kv_done(self, finish) -> np.ndarray:
        """float64 [requests] arrival of each request's whole KV cache, s."""
        finish = np.asarray(finish, np.float64)
        tp = self.info["tp"]
        if finish.shape != (self.workload.n_flows,):
            raise ValueError(f"finish: expected shape ({self.workload.n_flows},), got "
                             f"{finish.shape}")
        return finish.reshape(-1, tp).max(axis=1)

    def serve(self, finish, *, first_token: str = "decode") -> dict:
        """Run the decode servers given the KV flows' finish times.

        Args:
          finish: float [flows] finish times of ``workload`` from a simulation.
          first_token: ``"decode"`` (TTFT ends with the first decode step) or
            ``"prefill"`` (the prefill server emits the first token).

        Returns:
          dict of arrays: ``ttft`` [requests], ``token_latency`` [tokens] (gaps
          between consecutive tokens of each request), ``kv_transfer_time``
          [requests], ``finish_time`` [requests], ``decode_batch`` [steps] mean.
        """
        if first_token not in ("decode", "prefill"):
            raise ValueError(f"first_token: expected 'decode' or 'prefill'; got "
                             f"{first_token!r}")
        ready = self.kv_done(finish)
        n = ready.size
        inf = self.info
        out_len = self.output_len.copy()
        if first_token == "prefill":
            out_len = out_len - 1          # the prefill made token 1
        token_times: list[list[float]] = [[] for _ in range(n)]
        batches = []
        for srv in range(inf["n_decode"]):
            mine = np.flatnonzero(self.decode_server == srv)
            mine = mine[np.argsort(ready[mine], kind="stable")]
            left = {int(i): int(out_len[i]) for i in mine}
            waiting = [int(i) for i in mine if left[int(i)] > 0]
            active: list[int] = []
            t = 0.0
            while waiting or active:
                while waiting and len(active) < inf["max_batch"] and ready[waiting[0]] <= t:
                    active.append(waiting.pop(0))
                if not active:
                    t = max(t, float(ready[waiting[0]]))
                    continue
                ctx = sum(int(self.prompt_len[i]) + len(token_times[i]) for i in active)
                t += float(decode_step_time(inf["model"], ctx, inf["gpu"], tp=inf["tp"],
                                            bandwidth_fraction=inf["bandwidth_fraction"]))
                batches.append(len(active))
                for i in active:
                    token_times[i].append(t)
                    left[i] -= 1
                active = [i for i in active if left[i] > 0]
        first = np.array([tt[0] if tt else np.nan for tt in token_times])
        if first_token == "prefill":
            ttft = self.prefill_end - self.arrival
            starts = self.prefill_end
        else:
            ttft = first - self.arrival
            starts = None
        gaps = []
        for i, tt in enumerate(token_times):
            seq = np.asarray(tt)
            if starts is not None:
                seq = np.concatenate([[starts[i]], seq])
            gaps.append(np.diff(seq))
        last = np.array([tt[-1] if tt else self.prefill_end[i]
                         for i, tt in enumerate(token_times)])
        return dict(ttft=ttft, token_latency=np.concatenate(gaps) if gaps else np.zeros(0),
                    kv_transfer_time=ready - self.prefill_end, finish_time=last,
                    decode_batch=np.asarray(batches, np.float64))


def disaggregated_serving(model, *, n_requests: int, rate: float, prompt_len: int,
                          output_len: int, n_prefill: int, n_decode: int,
                          gpu="h100_sxm", tp: int = 8, prompt_jitter: float = 0.0,
                          achievable_fraction: float = 0.5, bandwidth_fraction: float = 0.7,
                          max_batch: int = 64, seed=0, job: str = "serve",
                          host_of=None) -> DisaggregatedServing:
    """Build a disaggregated-serving run (model in the module docstring).

    Args:
      model: :class:`~fabric_jax.workloads.model.ModelConfig` or name.
      n_requests: requests (>= 1).
      rate: Poisson arrival rate, requests per second (> 0).
      prompt_len, output_len: tokens per request (>= 1).
      n_prefill, n_decode: servers of each kind (>= 1), ``tp`` GPUs / NICs each.
      gpu: GPU type.
      tp: tensor-parallel degree = GPUs (and NICs) per server used.
      prompt_jitter: relative half-width of uniform prompt-length jitter, [0, 1).
      achievable_fraction: of peak FLOP/s in prefill.
      bandwidth_fraction: of HBM bandwidth in decode.
      max_batch: decode batch cap per server.
      seed: int seed or numpy Generator.
      job: job name of the flows.
      host_of: callable ``(server, gpu) -> host index``; default server-major
        ``server * tp + gpu`` with prefill servers ``0..n_prefill-1`` then decode
        servers.
    """
    model, gpu = get_model(model), get_gpu(gpu)
    for key, val in (("n_requests", n_requests), ("prompt_len", prompt_len),
                     ("output_len", output_len), ("n_prefill", n_prefill),
                     ("n_decode", n_decode), ("tp", tp), ("max_batch", max_batch)):
        if isinstance(val, bool) or int(val) != val or val < 1:
            raise ValueError(f"{key}: must be an integer >= 1; got {val!r}")
    if not (np.isfinite(rate) and rate > 0):
        raise ValueError(f"rate: must be > 0 requests per second; got {rate!r}")
    if not 0 <= prompt_jitter < 1:
        raise ValueError(f"prompt_jitter: must lie in [0, 1); got {prompt_jitter!r}")
    for key, val in (("achievable_fraction", achievable_fraction),
                     ("bandwidth_fraction", bandwidth_fraction)):
        if not 0 < val <= 1:
            raise ValueError(f"{key}: must lie in (0, 1]; got {val!r}")
    rng = as_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n_requests))
    lo, hi = prompt_len * (1 - prompt_jitter), prompt_len * (1 + prompt_jitter)
    prompts = np.maximum(np.rint(rng.uniform(lo, hi, n_requests)), 1).astype(np.int64) \
        if prompt_jitter > 0 else np.full(n_requests, int(prompt_len))
    outs = np.full(n_requests, int(output_len), np.int64)
    req = np.arange(n_requests)
    pf_server = req % n_prefill
    dec_server = req % n_decode
    pf_time = prefill_time(model, prompts, gpu, tp=tp,
                           achievable_fraction=achievable_fraction)
    prefill_end = np.empty(n_requests)
    free = np.zeros(n_prefill)
    for i in range(n_requests):            # FIFO per prefill server (host-side queue)
        s = pf_server[i]
        free[s] = max(free[s], arrival[i]) + pf_time[i]
        prefill_end[i] = free[s]
    if host_of is None:
        def host_of(server, g):
            return server * tp + g
    g = np.arange(tp)
    src = np.concatenate([[host_of(int(pf_server[i]), k) for k in g] for i in req])
    dst = np.concatenate([[host_of(n_prefill + int(dec_server[i]), k) for k in g]
                          for i in req])
    size = np.repeat(kv_cache_bytes(model, prompts) / tp, tp)
    parts = []
    for i in req:
        sl = slice(i * tp, (i + 1) * tp)
        parts.append(single_group(src[sl], dst[sl], size[sl], None, name=f"kv_req{i}",
                                  kind="sendrecv", group_bytes=float(size[sl].sum()),
                                  n_ranks=2 * tp, job=job, arrival=float(prefill_end[i])))
    info = dict(model=model, gpu=gpu, tp=int(tp), n_prefill=int(n_prefill),
                n_decode=int(n_decode), rate=float(rate), prompt_len=int(prompt_len),
                output_len=int(output_len), prompt_jitter=float(prompt_jitter),
                achievable_fraction=float(achievable_fraction),
                bandwidth_fraction=float(bandwidth_fraction), max_batch=int(max_batch),
                n_requests=int(n_requests),
                kv_bytes_per_request_mean=float(kv_cache_bytes(model, prompts).mean()),
                prefill_time_mean=float(pf_time.mean()),
                decode_step_time_single=float(decode_step_time(
                    model, prompt_len, gpu, tp=tp, bandwidth_fraction=bandwidth_fraction)))
    return DisaggregatedServing(concat(*parts), arrival, prompts, outs, prefill_end,
                                dec_server, info)
