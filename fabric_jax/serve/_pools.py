"""Prefill pool, KV-cache flows, decode pool (host-side request bookkeeping).

Prefill (Splitwise, Patel et al. ISCA 2024; DistServe, Zhong et al. OSDI 2024): a pool of
instances of ``prefill.instance_servers`` servers, one FIFO queue in front of them (a
request starts on the instance that frees first); a prompt of ``P`` tokens takes
:func:`fabric_jax.workloads.inference.prefill_time` on the instance's GPUs (forward
FLOPs over the GPUs' peak x ``achievable_fraction``).  Under DP attention (DeepSeek-V3
serving: each request's attention on one GPU, experts EP over the instance) the request's
cache lives on one GPU of the instance (round robin); under TP it is split over the 8
GPUs of the server.  Departure: one prompt at a time per instance (no batching of
prompts, no chunked prefill).

KV cache (Mooncake, Qin et al. FAST 2025; DistServe Sec. 4): streamed layer by layer as
prefill proceeds -- the ``L`` layers in ``kv.chunks`` groups (as even as possible; chunk
``c`` released when prefill has finished its last layer, the layers taking equal time;
``kv.chunks = L`` is layer-exact) -- or whole at prefill end (``kv.mode = "whole"``).
Flows: DP attention, prefill GPU ``g`` -> a decode GPU on the same rail ``g``
(round robin over the decode servers), one flow per chunk; TP, GPU ``r`` -> GPU ``r``
of the decode server (8 flows per chunk, ``1/8`` of the bytes each).

Decode: instances of ``decode.instance_servers`` servers step in lock step (the MoE
all-to-all joins the instance's GPUs every step); a unit (a GPU under DP attention, a
server under TP) runs at most ``decode.max_batch`` requests and holds at most its HBM
left after the weights of KV cache (a request reserves its whole prompt + output cache
on admission: no preemption); a request joins at the first step after its whole cache
has arrived and there is room (it waits, counted as queued, while there is not).  Step
time: the memory roofline of decode (Pope et al., MLSys 2023, Sec. 3) -- resident weight
bytes (under DP attention the GPU's expert share ``experts / EP`` plus the replicated
attention / dense / shared-expert weights; under TP the whole model over 8 GPUs; all
read every step, as at a large batch every expert is touched) plus the largest unit's
KV bytes, over HBM bandwidth x ``bandwidth_fraction`` -- plus ``comm_time(tokens per
GPU)``, the per-step communication (default 0; the wide-EP dispatch / combine model is
plugged in here per preset).  The first output token comes from the first decode step
(TTFT includes the KV transfer).

Units: bytes, seconds, tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workloads.inference import prefill_time
from ..workloads.model import GPUS, MODELS, kv_cache_bytes
from ._scenario import attention_mode, decode_memory

__all__ = ["Deployment", "deployment", "schedule_prefill", "kv_flows", "run_decode"]

GPUS_PER_SERVER = 8


@dataclasses.dataclass(frozen=True)
class Deployment:
    """The resolved constants of a scenario (SI units)."""
    model: object
    gpu: object
    attention: str
    n_prefill: int          # servers
    n_decode: int           # servers
    prefill_inst: int       # servers per prefill instance
    decode_inst: int        # servers per decode instance
    achievable_fraction: float
    bandwidth_fraction: float
    max_batch: int
    kv_bytes_per_token: float
    kv_capacity: float      # per decode unit, bytes
    weight_bytes: float     # resident per decode unit, bytes
    unit_bandwidth: float   # HBM bytes/s per decode unit
    kv_mode: str
    kv_chunks: int

    @property
    def n_gpus(self) -> int:
        return GPUS_PER_SERVER * (self.n_prefill + self.n_decode)

    @property
    def decode_units(self) -> int:
        return self.n_decode * (GPUS_PER_SERVER if self.attention == "dp" else 1)

    @property
    def units_per_instance(self) -> int:
        return self.decode_inst * (GPUS_PER_SERVER if self.attention == "dp" else 1)


def deployment(scn: dict) -> Deployment:
    """The :class:`Deployment` of a checked scenario."""
    model, gpu = MODELS[scn["model"]["name"]], GPUS[scn["gpu"]["name"]]
    att = attention_mode(scn)
    mem = decode_memory(scn)
    chunks = 1 if scn["kv"]["mode"] == "whole" else int(scn["kv"]["chunks"])
    return Deployment(
        model=model, gpu=gpu, attention=att, n_prefill=scn["prefill"]["servers"],
        n_decode=scn["decode"]["servers"], prefill_inst=scn["prefill"]["instance_servers"],
        decode_inst=scn["decode"]["instance_servers"],
        achievable_fraction=scn["prefill"]["achievable_fraction"],
        bandwidth_fraction=scn["decode"]["bandwidth_fraction"],
        max_batch=scn["decode"]["max_batch"],
        kv_bytes_per_token=float(kv_cache_bytes(model, 1,
                                                bytes_per_element=scn["model"]["kv_bytes"])),
        kv_capacity=mem["kv_capacity"], weight_bytes=mem["weights"],
        unit_bandwidth=gpu.hbm_bandwidth * (1 if att == "dp" else GPUS_PER_SERVER),
        kv_mode=scn["kv"]["mode"], kv_chunks=chunks)


def schedule_prefill(dep: Deployment, arrival, prompt):
    """FIFO over the prefill instances (the first free instance takes the oldest request).

    Returns:
      ``(start [n], end [n], instance [n], src_gpu [n])``: prefill start / end, s; the
      instance; the GPU (0..7 of the instance's first server under TP, the GPU index in
      the pool under DP attention) that holds the cache.
    """
    n = arrival.size
    n_inst = dep.n_prefill // dep.prefill_inst
    gpus_inst = GPUS_PER_SERVER * dep.prefill_inst
    dur = prefill_time(dep.model, prompt, dep.gpu, tp=gpus_inst,
                       achievable_fraction=dep.achievable_fraction)
    free = np.zeros(n_inst)
    rr = np.zeros(n_inst, np.int64)
    start, end = np.empty(n), np.empty(n)
    inst = np.empty(n, np.int64)
    src = np.empty(n, np.int64)
    for i in range(n):                 # host-side queue, one request at a time
        k = int(np.argmin(free))
        start[i] = max(free[k], arrival[i])
        end[i] = start[i] + dur[i]
        free[k] = end[i]
        inst[i] = k
        src[i] = k * gpus_inst + rr[k] % gpus_inst
        rr[k] += 1
    return start, end, inst, src


def chunk_layers(n_layers: int, chunks: int) -> np.ndarray:
    """``[chunks]`` layers per chunk, as even as possible (the larger ones first) --
    chunk ``c`` is released when prefill has finished ``cumsum(layers)[c]`` layers."""
    base, extra = divmod(n_layers, chunks)
    return np.array([base + (1 if c < extra else 0) for c in range(chunks)], np.int64)


@dataclasses.dataclass(frozen=True)
class KVFlows:
    """The KV-cache flows of every request (flat arrays over flows)."""
    src: np.ndarray         # host
    dst: np.ndarray         # host
    size: np.ndarray        # bytes
    release: np.ndarray     # s
    request: np.ndarray     # request index
    chunk: np.ndarray       # chunk index
    decode_unit: np.ndarray  # [requests] the decode unit of each request


def kv_flows(dep: Deployment, prompt, pf_start, pf_end, src_gpu) -> KVFlows:
    """The KV flows (module docstring): hosts are ``server * 8 + gpu``, prefill servers
    first, then decode servers."""
    n = prompt.size
    layers = chunk_layers(dep.model.n_layers, dep.kv_chunks)
    frac_done = np.cumsum(layers) / dep.model.n_layers          # [chunks]
    kv = dep.kv_bytes_per_token * prompt.astype(np.float64)     # [n]
    dur = pf_end - pf_start
    rel = pf_start[:, None] + dur[:, None] * frac_done[None, :]  # [n, chunks]
    rel[:, -1] = pf_end                                          # exact at the end
    csize = kv[:, None] * (layers / dep.model.n_layers)[None, :]  # [n, chunks]
    base = GPUS_PER_SERVER * dep.n_prefill
    if dep.attention == "dp":
        rail = src_gpu % GPUS_PER_SERVER
        # round robin over the decode servers, per rail
        counts = np.zeros(GPUS_PER_SERVER, np.int64)
        dserver = np.empty(n, np.int64)
        for i in range(n):
            dserver[i] = counts[rail[i]] % dep.n_decode
            counts[rail[i]] += 1
        unit = dserver * GPUS_PER_SERVER + rail            # decode GPU in the pool
        src = np.repeat(src_gpu, dep.kv_chunks)
        dst = np.repeat(base + unit, dep.kv_chunks)
        size = csize.reshape(-1)
        release = rel.reshape(-1)
        req = np.repeat(np.arange(n), dep.kv_chunks)
        chunk = np.tile(np.arange(dep.kv_chunks), n)
    else:
        pserver = src_gpu // GPUS_PER_SERVER
        unit = np.arange(n) % dep.n_decode                 # decode server
        g = np.arange(GPUS_PER_SERVER)
        src = (pserver[:, None, None] * GPUS_PER_SERVER + g[None, None, :]) \
            + 0 * rel[:, :, None].astype(np.int64)
        dst = (base + unit[:, None, None] * GPUS_PER_SERVER + g[None, None, :]) \
            + 0 * rel[:, :, None].astype(np.int64)
        src, dst = src.reshape(-1), dst.reshape(-1)
        size = np.repeat(csize.reshape(-1) / GPUS_PER_SERVER, GPUS_PER_SERVER)
        release = np.repeat(rel.reshape(-1), GPUS_PER_SERVER)
        req = np.repeat(np.arange(n), dep.kv_chunks * GPUS_PER_SERVER)
        chunk = np.tile(np.repeat(np.arange(dep.kv_chunks), GPUS_PER_SERVER), n)
    return KVFlows(src.astype(np.int64), dst.astype(np.int64), size.astype(np.float64),
                   release.astype(np.float64), req, chunk, unit.astype(np.int64))


def decode_step_time(dep: Deployment, kv_tokens_max: float, tokens_per_gpu: float,
                     comm_time=None) -> float:
    """One decode step of an instance (module docstring): resident weights + the largest
    unit's KV bytes over the unit's HBM bandwidth x fraction, + ``comm_time``.

    ``comm_time(tokens_per_gpu)`` or, when it takes the keyword, ``comm_time(
    tokens_per_gpu, compute_s=...)`` with the step's memory time (what a two-micro-batch
    overlap hides communication under, :func:`fabric_jax.serve.ep_step_table`)."""
    t = (dep.weight_bytes + dep.kv_bytes_per_token * kv_tokens_max) \
        / (dep.unit_bandwidth * dep.bandwidth_fraction)
    if comm_time is not None:
        if getattr(comm_time, "takes_compute", False):
            t += float(comm_time(float(tokens_per_gpu), compute_s=float(t)))
        else:
            t += float(comm_time(float(tokens_per_gpu)))
    return float(t)


def run_decode(dep: Deployment, ready, prompt, output, unit, *, comm_time=None,
               horizon: float | None = None):
    """Continuous batching on every decode instance (module docstring).

    Args:
      ready: ``[n]`` s, arrival of each request's whole cache (``inf``: never; the
        request is not admitted).
      prompt, output: ``[n]`` tokens.
      unit: ``[n]`` decode unit of each request.
      comm_time: callable ``tokens_per_gpu -> s`` per step, or ``None``.
      horizon: stop stepping at this time (requests not done are still queued or
        running); ``None``: run until every admitted request is done.

    Returns:
      dict of ``[n]`` arrays: ``admit``, ``first`` (first token), ``last`` (last token),
      ``tokens`` (emitted), and ``steps`` (per instance: step count), ``batch_mean``,
      ``mem_waits`` (requests that waited for KV memory).
    """
    n = ready.size
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    admit = np.full(n, np.nan)
    tokens = np.zeros(n, np.int64)
    upi = dep.units_per_instance
    gpus_per_unit = 1 if dep.attention == "dp" else GPUS_PER_SERVER
    need = dep.kv_bytes_per_token * (prompt + output).astype(np.float64)
    steps, batch_sum, mem_waited = 0, 0.0, np.zeros(n, bool)
    inst_of = unit // upi
    for inst in range(dep.decode_units // upi):
        mine = np.flatnonzero((inst_of == inst) & np.isfinite(ready))
        mine = mine[np.argsort(ready[mine], kind="stable")]
        waiting = {u: [int(i) for i in mine if unit[i] == u]
                   for u in range(inst * upi, (inst + 1) * upi)}
        active = {u: [] for u in waiting}
        used = {u: 0.0 for u in waiting}
        t = 0.0
        while any(waiting.values()) or any(active.values()):
            if horizon is not None and t >= horizon:
                break
            for u, q in waiting.items():      # admission at the step boundary
                while q and ready[q[0]] <= t and len(active[u]) < dep.max_batch:
                    i = q[0]
                    if used[u] + need[i] > dep.kv_capacity:
                        mem_waited[i] = True
                        break
                    q.pop(0)
                    used[u] += need[i]
                    admit[i] = t
                    active[u].append(i)
            if not any(active.values()):
                t = max(t, min(ready[q[0]] for q in waiting.values() if q))
                continue
            kv_max = max((sum(int(prompt[i] + tokens[i]) for i in a) for a in active.values()),
                         default=0)
            per_gpu = max(len(a) for a in active.values()) / gpus_per_unit
            t += decode_step_time(dep, kv_max, per_gpu, comm_time)
            steps += 1
            batch_sum += sum(len(a) for a in active.values())
            for u, a in active.items():
                keep = []
                for i in a:
                    tokens[i] += 1
                    if tokens[i] == 1:
                        first[i] = t
                    last[i] = t
                    if tokens[i] < output[i]:
                        keep.append(i)
                    else:
                        used[u] -= need[i]
                active[u] = keep
    return dict(admit=admit, first=first, last=last, tokens=tokens, steps=steps,
                batch_mean=batch_sum / max(steps, 1), mem_waits=int(mem_waited.sum()))
