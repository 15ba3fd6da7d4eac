"""The workload behind a token: transformer models, parallelism plans and their steps.

A training step of a transformer follows from three descriptions:

* a **model** (:class:`ModelConfig`): layers ``L``, hidden size ``h``, attention and
  KV heads, FFN size, vocabulary ``V``, sequence length ``s``, global batch ``B``
  (sequences), precision, and for mixture-of-experts models the experts and ``top_k``;
* a **parallelism plan** (:class:`ParallelPlan`): tensor ``tp``, pipeline ``pp``, data
  ``dp`` and expert ``ep`` parallel degrees, micro-batch size, GPUs per server, and
  the placement of ranks onto servers and rails (Megatron-LM order: tensor-parallel
  fastest, then data-parallel, then pipeline; Narayanan et al. SC 2021, Sec. 3);
* a **GPU** (:data:`GPUS`): peak dense BF16 FLOP/s, HBM and NVLink bandwidth from the
  NVIDIA datasheets, and the achievable fraction of peak.

FLOPs (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", SC 2021, Appendix / Eq. 3; Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models", 2022).  Per token and layer the
forward pass costs ``2 P_layer`` FLOPs for the matrix multiplications (``P_layer`` the
active weights of the layer: QKV and output projections, the FFN, for MoE the ``top_k``
experts a token visits) plus ``4 s d_attn`` for the attention scores and their product
with the values (``d_attn = heads * head_dim``; no causal-mask saving, as in
Narayanan's count), and the logits add ``2 h V`` per token.  Training is forward plus
backward (twice the forward): ``3 x`` forward, and with full activation recomputation
the layers' forward runs once more (``4 x`` for the layers, ``3 x`` for the logits).  For GPT-style models (``P_layer = 12 h^2``) this is exactly
Narayanan's ``F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h))`` with recomputation (and
``72 ... (1 + s/(6h) + V/(12 L h))`` without), and ``~ 6 N`` FLOPs per token (Kaplan et
al. 2020; Brown et al. 2020, Table D.1).

Compute time per step and GPU: ``FLOPs / (n_gpus * peak * achievable_fraction)``,
stretched by the pipeline bubble of the 1F1B schedule, ``(pp - 1) / m`` with ``m``
micro-batches per step (Narayanan et al. 2021, Sec. 2.2.1).

Communication per step and GPU (bytes ``b_a`` per activation element, ``b_g`` per
gradient element):

=============  ==============================================  =======================
dimension      collective, payload ``S``                       count per step
=============  ==============================================  =======================
TP (NVLink)    all-reduce of ``mb s h b_a`` (Shoeybi et al.      ``4 (L/pp) m`` (+2 per
               2019 Sec. 3; with sequence parallelism an         layer and micro-batch
               all-gather + reduce-scatter of the same bytes,    with recomputation)
               Korthikanti et al. 2022 Sec. 4.2.2)
PP             send of ``mb s h b_a / tp`` per TP lane per      ``2 m`` per stage
               boundary (forward activations, backward grads;    boundary (fwd + bwd)
               scatter/gather optimisation, Narayanan Sec. 4.1)
DP             all-reduce (or reduce-scatter + all-gather,       1 (bucketed, one
               ZeRO-1 / distributed optimizer, same bytes) of    collective per step)
               the GPU's dense gradient shard ``P_dense/(tp pp)
               b_g`` over ``dp`` ranks; expert gradients
               ``P_expert/(tp pp ep) b_g`` over ``dp/ep`` ranks
EP             all-to-all, each rank sends ``mb s k h b_a / tp``  ``4 (L/pp) m`` (dispatch
               (tokens sharded over TP by sequence parallelism;  + combine, fwd + bwd;
               Lepikhin et al. 2021 GShard; Megatron-Core MoE)   MoE layers only)
=============  ==============================================  =======================

Which traffic crosses the network: ranks of one server talk over NVLink (not simulated;
the TP time is ``bytes / nvlink_bandwidth`` added to the compute, an assumption until
NVLink domains are modelled).  :func:`fabric_jax.workloads.training.model_training_step`
builds the DP, PP and EP
traffic as flows between the servers' NICs (rank ``r`` on NIC ``hosts[r]``), drops
pairs inside one server, and hands the phases to
:func:`fabric_jax.workloads.training_step` with the compute time and the ``overlap``
parameter.  Aggregation (an approximation, stated): each collective is issued once per
step with the step's total bytes (pipelined ring for all-reduce,
:func:`fabric_jax.workloads.steady_state_all_reduce`; one all-to-all for the step's MoE
traffic; one send per lane and direction per stage boundary), which is exact for the bytes and
the link loads and for bandwidth-bound exposure, but not for per-message latency or
the micro-batch-level interleaving of PP/EP traffic with compute.

Units: bytes, seconds, FLOPs, FLOP/s.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


__all__ = ["GPU", "GPUS", "get_gpu", "MLA", "ModelConfig", "MODELS", "get_model",
           "ParallelPlan", "PublishedPlan", "PUBLISHED_PLANS", "training_flops", "step_flops",
           "kv_cache_bytes", "comm_bytes", "PRECISION_BYTES"]

#: Bytes per element of the named precisions.
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclasses.dataclass(frozen=True)
class GPU:
    """A GPU type.

    Attributes:
      name: short name.
      peak_flops: peak dense BF16/FP16 tensor-core FLOP/s (no 2:4 sparsity).
      hbm_bandwidth: HBM bandwidth, bytes/s.
      hbm_bytes: HBM capacity, bytes.
      nvlink_bandwidth: NVLink bandwidth per GPU per direction, bytes/s (half of the
        datasheet's bidirectional figure).
      power_w: board power (TDP), W.
      source: datasheet.
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    hbm_bytes: float
    nvlink_bandwidth: float
    power_w: float
    source: str


#: GPU types.  Datasheet "with sparsity" figures are halved to dense.
GPUS = {
    "a100": GPU("a100", 312e12, 2.039e12, 80e9, 300e9, 400.0,
                "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB): BF16 312 TFLOPS, "
                "HBM2e 2,039 GB/s, NVLink 600 GB/s, 400 W"),
    "h100_sxm": GPU("h100_sxm", 989e12, 3.35e12, 80e9, 450e9, 700.0,
                    "NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS with "
                    "sparsity (989 dense), HBM3 3.35 TB/s, NVLink 900 GB/s, 700 W"),
    "h800": GPU("h800", 989e12, 3.35e12, 80e9, 200e9, 700.0,
                "NVIDIA H800 Tensor Core GPU datasheet (SXM): the H100 SXM's compute and "
                "HBM3 (BF16 1,979 TFLOPS with sparsity, 989 dense; 3.35 TB/s, 80 GB), "
                "NVLink 400 GB/s bidirectional (200 GB/s per direction), 700 W; the GPU of "
                "DeepEP's published benchmarks (deepseek-ai/DeepEP README)"),
    "h200": GPU("h200", 989e12, 4.8e12, 141e9, 450e9, 700.0,
                "NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS with "
                "sparsity, HBM3e 4.8 TB/s 141 GB, NVLink 900 GB/s, 700 W"),
    "b200": GPU("b200", 2.25e15, 8e12, 192e9, 900e9, 1000.0,
                "NVIDIA HGX B200 (1,000 W configuration): BF16 4.5 PFLOPS with sparsity "
                "(2.25 dense), HBM3e 8 TB/s 192 GB, NVLink 5 1.8 TB/s"),
}


def get_gpu(gpu) -> GPU:
    """A :class:`GPU` from its name in :data:`GPUS` (or a GPU)."""
    if isinstance(gpu, GPU):
        return gpu
    if gpu not in GPUS:
        raise ValueError(f"gpu: expected one of {sorted(GPUS)} or a GPU record; got {gpu!r}")
    return GPUS[gpu]


@dataclasses.dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1; DeepSeek-V3,
    arXiv 2412.19437, Sec. 2.1.1): queries and keys/values pass through low-rank
    compressions, and a decoupled rotary part carries the position.

    Per layer (``n_h`` heads, hidden ``h``) the weights are the query down- and
    up-projections ``h x q_rank`` and ``q_rank x n_h (nope_dim + rope_dim)``, the joint
    key/value down-projection with the shared rotary key ``h x (kv_rank + rope_dim)``,
    the key and value up-projections ``kv_rank x n_h nope_dim`` and ``kv_rank x n_h
    v_dim``, and the output ``n_h v_dim x h`` (the norms of the latents left out).

    Attributes:
      q_rank: query compression dimension ``d_c'``.
      kv_rank: key/value compression dimension ``d_c`` (the cached latent).
      nope_dim: per-head query/key dimension without position ``d_h``.
      rope_dim: per-head decoupled rotary dimension ``d_h^R``.
      v_dim: per-head value dimension.
    """

    q_rank: int
    kv_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int

    def __post_init__(self):
        for f in dataclasses.fields(self):
            val = getattr(self, f.name)
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"mla.{f.name}: must be an integer >= 1; got {val!r}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer (dense or mixture-of-experts).

    Attributes:
      name: model name.
      n_layers: transformer layers ``L``.
      hidden: model width ``h``.
      n_heads: attention (query) heads; ``head_dim = hidden / n_heads``.
      n_kv_heads: key/value heads (``n_heads`` for multi-head attention, fewer for
        grouped-query attention, Ainslie et al. 2023).
      ffn_hidden: FFN inner size (per expert for MoE).
      vocab: vocabulary size ``V``.
      seq_len: training sequence length ``s``.
      global_batch: sequences per optimizer step ``B``.
      ffn_kind: ``"gelu"`` (two FFN matrices) or ``"swiglu"`` (three; Shazeer 2020).
      n_experts: routed experts per MoE layer (1: dense).
      top_k: routed experts each token visits.
      tied_embeddings: input and output embeddings shared.
      precision: ``"bf16"``, ``"fp16"``, ``"fp8"`` or ``"fp32"`` (activations, weights).
      source: publication of the architecture.
      shared_experts: experts every token visits besides its ``top_k`` routed ones
        (DeepSeekMoE's shared experts, Dai et al. 2024, arXiv 2401.06066, Sec. 3.2);
        replicated on every expert-parallel rank like the attention, so counted in
        :attr:`dense_params`, and not part of the all-to-all.
      first_dense_layers: leading layers whose FFN is dense (DeepSeek-V3: the first 3,
        arXiv 2412.19437 Sec. 4.2); the other ``n_layers - first_dense_layers`` are MoE.
      dense_ffn_hidden: FFN inner size of those dense layers (0: ``ffn_hidden``).
      mla: :class:`MLA` (multi-head latent attention) or ``None`` (multi-head /
        grouped-query attention from ``n_heads``, ``n_kv_heads``).
      node_limit: node-limited routing ``M``: each token's ``top_k`` experts lie on at
        most ``M`` servers (DeepSeek-V3 Sec. 2.1.2, "Node-Limited Routing"; 0: no
        limit).  Models with a limit are trained with DeepEP-style dispatch (one copy
        of a token per destination server, forwarded over NVLink inside it;
        :func:`fabric_jax.workloads.phases.step_collectives`).

    Parameters count the matrices only: biases, norms and the MoE router are left out
    (under 0.1 % for the named models).
    """

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    global_batch: int
    ffn_kind: str = "gelu"
    n_experts: int = 1
    top_k: int = 1
    tied_embeddings: bool = False
    precision: str = "bf16"
    source: str = ""
    shared_experts: int = 0
    first_dense_layers: int = 0
    dense_ffn_hidden: int = 0
    mla: MLA | None = None
    node_limit: int = 0

    def __post_init__(self):
        for key in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab",
                    "seq_len", "global_batch", "n_experts", "top_k"):
            val = getattr(self, key)
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{key}: must be an integer >= 1; got {val!r}")
        if self.hidden % self.n_heads:
            raise ValueError(f"n_heads: must divide hidden={self.hidden}; got {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads: must divide n_heads={self.n_heads}; got "
                             f"{self.n_kv_heads}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k: must be <= n_experts={self.n_experts}; got {self.top_k}")
        if self.ffn_kind not in ("gelu", "swiglu"):
            raise ValueError(f"ffn_kind: expected 'gelu' or 'swiglu'; got {self.ffn_kind!r}")
        if self.precision not in PRECISION_BYTES:
            raise ValueError(f"precision: expected one of {sorted(PRECISION_BYTES)}; got "
                             f"{self.precision!r}")
        for key in ("shared_experts", "first_dense_layers", "dense_ffn_hidden", "node_limit"):
            val = getattr(self, key)
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
                raise ValueError(f"{key}: must be an integer >= 0; got {val!r}")
        if self.first_dense_layers >= self.n_layers:
            raise ValueError(f"first_dense_layers: must be < n_layers={self.n_layers}; got "
                             f"{self.first_dense_layers}")
        if self.mla is not None and not isinstance(self.mla, MLA):
            raise ValueError(f"mla: expected an MLA record or None; got {self.mla!r}")

    # ------------------------------------------------------------- parameters
    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def bytes_per_element(self) -> int:
        """Bytes per activation / weight element of ``precision``."""
        return PRECISION_BYTES[self.precision]

    @property
    def attention_params(self) -> int:
        """Per layer: Q and output ``h x h``, K and V ``h x (kv_heads head_dim)``; with
        :attr:`mla` the latent projections (:class:`MLA`)."""
        if self.mla is not None:
            a, h, n = self.mla, self.hidden, self.n_heads
            return (h * a.q_rank + a.q_rank * n * (a.nope_dim + a.rope_dim)
                    + h * (a.kv_rank + a.rope_dim) + a.kv_rank * n * (a.nope_dim + a.v_dim)
                    + n * a.v_dim * h)
        kv = self.n_kv_heads * self.head_dim
        return 2 * self.hidden * self.hidden + 2 * self.hidden * kv

    @property
    def attn_dim(self) -> float:
        """``d_attn`` of the attention FLOPs ``4 s d_attn`` per token and layer: ``heads
        head_dim``; with :attr:`mla` the mean of the query-key width ``n_h (nope_dim +
        rope_dim)`` and the value width ``n_h v_dim`` (scores and weighted sum)."""
        if self.mla is not None:
            a = self.mla
            return self.n_heads * (a.nope_dim + a.rope_dim + a.v_dim) / 2.0
        return float(self.n_heads * self.head_dim)

    @property
    def expert_params(self) -> int:
        """Per layer and expert: the FFN matrices."""
        mats = 3 if self.ffn_kind == "swiglu" else 2
        return mats * self.hidden * self.ffn_hidden

    @property
    def dense_ffn_params(self) -> int:
        """Per dense layer (:attr:`first_dense_layers`): the FFN matrices."""
        mats = 3 if self.ffn_kind == "swiglu" else 2
        return mats * self.hidden * (self.dense_ffn_hidden or self.ffn_hidden)

    @property
    def moe_layers(self) -> int:
        """Layers with a mixture-of-experts FFN (0 for a dense model)."""
        return 0 if self.n_experts == 1 else self.n_layers - self.first_dense_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def dense_params(self) -> int:
        """Parameters replicated over expert-parallel ranks (attention, embeddings, the
        FFN of a dense model or of the :attr:`first_dense_layers`, shared experts)."""
        if self.n_experts == 1:
            return self.n_layers * (self.attention_params + self.expert_params) \
                + self.embedding_params
        return (self.n_layers * self.attention_params
                + self.first_dense_layers * self.dense_ffn_params
                + self.moe_layers * self.shared_experts * self.expert_params
                + self.embedding_params)

    @property
    def moe_params(self) -> int:
        """Routed-expert parameters of all MoE layers (0 for a dense model)."""
        return self.moe_layers * self.n_experts * self.expert_params

    @property
    def n_params(self) -> int:
        """Total parameters ``N``."""
        return self.dense_params + self.moe_params

    @property
    def layer_active_params(self) -> int:
        """Weights of all transformer layers a token uses: attention, and the dense FFN
        or ``top_k`` routed plus the shared experts of each MoE layer."""
        if self.n_experts == 1:
            return self.n_layers * (self.attention_params + self.top_k * self.expert_params)
        return (self.n_layers * self.attention_params
                + self.first_dense_layers * self.dense_ffn_params
                + self.moe_layers * (self.top_k + self.shared_experts) * self.expert_params)

    @property
    def active_params(self) -> int:
        """Parameters a token uses (``top_k`` routed and the shared experts per MoE
        layer)."""
        return self.layer_active_params + self.embedding_params

    @property
    def tokens_per_step(self) -> int:
        """``B s``."""
        return self.global_batch * self.seq_len

    def replace(self, **changes) -> "ModelConfig":
        """A copy with fields replaced (validated)."""
        bad = set(changes) - {f.name for f in dataclasses.fields(self)}
        if bad:
            raise ValueError(f"{sorted(bad)[0]}: unknown ModelConfig field; accepted: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)


#: Named published models.  Batch sizes are those of the papers' training runs.
MODELS = {
    "gpt3_175b": ModelConfig(
        "gpt3_175b", n_layers=96, hidden=12288, n_heads=96, n_kv_heads=96,
        ffn_hidden=4 * 12288, vocab=50257, seq_len=2048, global_batch=1536,
        tied_embeddings=True,
        source="Brown et al., 'Language Models are Few-Shot Learners', NeurIPS 2020, "
               "Table 2.1 (96 layers, d_model 12288, 96 heads, 2048 context, 3.2M-token "
               "batch); Narayanan et al. SC 2021 Table 1 (batch 1536)"),
    "llama3_8b": ModelConfig(
        "llama3_8b", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8,
        ffn_hidden=14336, vocab=128256, seq_len=8192, global_batch=512,
        ffn_kind="swiglu",
        source="Dubey et al. 2024, Table 3 (32 layers, 4096 model dim, FFN 14336, 32 "
               "heads, 8 KV heads, vocab 128K; 8.0B parameters); batch (4M tokens, 512 "
               "sequences of 8192) is our assumption"),
    "llama3_70b": ModelConfig(
        "llama3_70b", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8,
        ffn_hidden=28672, vocab=128256, seq_len=8192, global_batch=2048,
        ffn_kind="swiglu",
        source="Dubey et al., 'The Llama 3 Herd of Models', 2024, Table 3 (80 layers, "
               "8192 model dim, FFN 28672, 64 heads, 8 KV heads, vocab 128K); "
               "batch 16M tokens assumed as for 405B"),
    "llama3_405b": ModelConfig(
        "llama3_405b", n_layers=126, hidden=16384, n_heads=128, n_kv_heads=8,
        ffn_hidden=53248, vocab=128256, seq_len=8192, global_batch=2048,
        ffn_kind="swiglu",
        source="Dubey et al. 2024, Table 3 (126 layers, 16384, FFN 53248, 128 heads, 8 "
               "KV heads) and Sec. 3.4.1 (batch 16M tokens at sequence length 8192)"),
    "mixtral_8x7b": ModelConfig(
        "mixtral_8x7b", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8,
        ffn_hidden=14336, vocab=32000, seq_len=4096, global_batch=1024,
        ffn_kind="swiglu", n_experts=8, top_k=2,
        source="Jiang et al., 'Mixtral of Experts', 2024, Table 1 (32 layers, dim 4096, "
               "FFN 14336, 32 heads, 8 KV heads, 8 experts, top-2, vocab 32000; 46.7B "
               "total, 12.9B active); batch (4M tokens) is our assumption"),
    "deepseek_v3": ModelConfig(
        "deepseek_v3", n_layers=61, hidden=7168, n_heads=128, n_kv_heads=128,
        ffn_hidden=2048, vocab=129280, seq_len=4096, global_batch=15360,
        ffn_kind="swiglu", n_experts=256, top_k=8, shared_experts=1,
        first_dense_layers=3, dense_ffn_hidden=18432,
        mla=MLA(q_rank=1536, kv_rank=512, nope_dim=128, rope_dim=64, v_dim=128),
        node_limit=4,
        source="DeepSeek-AI, 'DeepSeek-V3 Technical Report', arXiv 2412.19437, Sec. 4.2 "
               "(61 layers, hidden 7168, 128 heads of dimension 128, KV compression 512, "
               "query compression 1536, decoupled rotary dimension 64; every FFN but the "
               "first three layers' is MoE with 1 shared and 256 routed experts of "
               "intermediate dimension 2048, 8 routed experts per token, each token sent "
               "to at most 4 nodes; sequence length 4K, batch up to 15,360 sequences; "
               "671B total, 37B activated); vocabulary 129,280 and the dense layers' "
               "FFN 18,432 from the released config.json (deepseek-ai/DeepSeek-V3 on "
               "Hugging Face); the multi-token-prediction module (14B) is left out"),
}


def get_model(model) -> ModelConfig:
    """A :class:`ModelConfig` from its name in :data:`MODELS` (or a ModelConfig)."""
    if isinstance(model, ModelConfig):
        return model
    if model not in MODELS:
        raise ValueError(f"model: expected one of {sorted(MODELS)} or a ModelConfig; got "
                         f"{model!r}")
    return MODELS[model]


@dataclasses.dataclass(frozen=True)
class PublishedPlan:
    """A parallelism plan a model was (or is recommended to be) trained with.

    Attributes:
      model: model name (a key of :data:`MODELS` where the architecture is there).
      gpus: GPUs of the run (``None``: not published).
      gpu: GPU type of the run.
      tp, pp, ep: tensor-, pipeline- and expert-parallel degrees (``None``: not
        published).
      dp: data-parallel kind (``"zero1"``: ZeRO-1 / distributed optimizer).
      source: where the plan is published.
    """

    model: str
    gpus: int | None
    gpu: str | None
    tp: int | None
    pp: int | None
    ep: int | None
    dp: str | None
    source: str


#: Published MoE training plans (``None``: the field is not published).
PUBLISHED_PLANS = {
    "deepseek_v3": PublishedPlan(
        "deepseek_v3", gpus=2048, gpu="h800", tp=1, pp=16, ep=64, dp="zero1",
        source="DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.1 (2,048 H800, 8 "
               "per node on NVLink/NVSwitch, InfiniBand between nodes) and Sec. 3.2 (16-way "
               "pipeline parallelism with DualPipe, 64-way expert parallelism spanning 8 "
               "nodes, ZeRO-1 data parallelism; no tensor parallelism)"),
    "deepseek_v3_megatron_bridge": PublishedPlan(
        "deepseek_v3", gpus=None, gpu=None, tp=2, pp=16, ep=64, dp="zero1",
        source="NVIDIA Megatron Bridge, parallelism-strategies guide "
               "(nemo-mbridge-perf-parallelism-strategies), MoE table: DeepSeek-V3 "
               "671B/37B at TP 2, PP 16, EP 64 (a recommended starting point, not a run)"),
    "deepseek_v2": PublishedPlan(
        "deepseek_v2", gpus=None, gpu="h800", tp=1, pp=16, ep=8, dp="zero1",
        source="DeepSeek-V2, arXiv 2405.04434, Sec. 3.1.3 (16-way zero-bubble pipeline "
               "parallelism, 8-way expert parallelism, ZeRO-1 data parallelism; the GPU "
               "count is not given); the model is not in MODELS"),
    "mixtral_8x7b": PublishedPlan(
        "mixtral_8x7b", gpus=None, gpu=None, tp=None, pp=None, ep=None, dp=None,
        source="not published: Jiang et al. 2024 ('Mixtral of Experts') give the "
               "architecture but no training cluster or parallelism; the scale study's "
               "plan for it (fabric_jax.scale.scale_plan) is our assumption"),
}


def _forward_flops_per_token(model: ModelConfig, seq_len: int) -> tuple[float, float]:
    """Forward FLOPs of one token (module docstring): (transformer layers, logits)."""
    layers = (2.0 * model.layer_active_params
              + model.n_layers * 4.0 * seq_len * model.attn_dim)
    return layers, 2.0 * model.hidden * model.vocab


def training_flops(model, n_tokens: float, *, recompute: bool = False) -> float:
    """FLOPs to train on ``n_tokens`` tokens (Narayanan et al. 2021, Eq. 3).

    Args:
      model: :class:`ModelConfig` or name.
      n_tokens: tokens processed (sequences of ``model.seq_len``).
      recompute: full activation recomputation (one more forward pass).
    """
    model = get_model(model)
    n_tokens = float(n_tokens)
    if not math.isfinite(n_tokens) or n_tokens < 0:
        raise ValueError(f"n_tokens: must be finite and >= 0; got {n_tokens}")
    layers, logits = _forward_flops_per_token(model, model.seq_len)
    # Recomputation repeats the layers' forward pass, not the logits (Narayanan Eq. 3).
    return ((4.0 if recompute else 3.0) * layers + 3.0 * logits) * n_tokens


def step_flops(model, *, recompute: bool = False) -> float:
    """FLOPs of one optimizer step (``B s`` tokens)."""
    model = get_model(model)
    return training_flops(model, model.tokens_per_step, recompute=recompute)


def kv_cache_bytes(model, n_tokens: float, *, bytes_per_element: int | None = None) -> float:
    """KV-cache bytes of ``n_tokens`` tokens: ``2 L kv_heads head_dim bytes n_tokens``
    (keys and values of every layer; Pope et al., "Efficiently Scaling Transformer
    Inference", MLSys 2023, Sec. 2); with multi-head latent attention ``L (kv_rank +
    rope_dim) bytes n_tokens`` (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1.3, Table 1).

    Args:
      model: :class:`ModelConfig` or name.
      n_tokens: cached tokens (prompt length); scalar or array.
      bytes_per_element: default the model's precision.
    """
    model = get_model(model)
    b = model.bytes_per_element if bytes_per_element is None else int(bytes_per_element)
    if b < 1:
        raise ValueError(f"bytes_per_element: must be >= 1; got {bytes_per_element}")
    per_token = 2.0 * model.n_layers * model.n_kv_heads * model.head_dim * b
    if model.mla is not None:       # the latent and the rotary key (DeepSeek-V2 Sec. 2.1.3)
        per_token = float(model.n_layers * (model.mla.kv_rank + model.mla.rope_dim) * b)
    tokens = np.asarray(n_tokens, np.float64)
    if np.any(~np.isfinite(tokens) | (tokens < 0)):
        raise ValueError("n_tokens: must be finite and >= 0")
    return per_token * tokens if tokens.ndim else per_token * float(tokens)


@dataclasses.dataclass(frozen=True)
class ParallelPlan:
    """How a model is split over GPUs, and where the ranks sit.

    Attributes:
      tp, pp, dp: tensor-, pipeline- and data-parallel degrees; ``n_gpus = tp pp dp``.
      ep: expert-parallel degree (divides ``dp``; EP groups are ``ep`` consecutive
        data-parallel ranks, Megatron-Core's layout).
      micro_batch: sequences per micro-batch ``mb``; ``m = B / (dp mb)`` micro-batches.
      gpus_per_server: GPUs (and NICs, one per GPU: rails) per server.
      overlap: fraction ``f`` of the compute that network communication may overlap,
        in [0, 1] (:func:`fabric_jax.workloads.training_step`).
      recompute: full activation recomputation (Narayanan et al. 2021, Sec. 3.5).
      sequence_parallel: TP all-reduces become all-gather + reduce-scatter (same bytes).
      grad_bytes: bytes per gradient element in the DP collective (2: BF16 gradients,
        our default assumption; Llama 3 reduce-scatters in FP32, 4).
      uneven_pp: ``pp`` need not divide the layers: the stages hold ``ceil`` or
        ``floor`` of ``L / pp`` layers (Megatron-Core's uneven / custom pipeline layout,
        ``--pipeline-model-parallel-layout``; DeepSeek-V3's 61 layers over 16 stages,
        arXiv 2412.19437 Sec. 3.2.1), and the per-stage traffic is the busiest stage's
        (``ceil``).  Default ``False``: ``pp`` must divide the layers.
      achievable_fraction: fraction of ``peak_flops`` the step's kernels reach.  Our
        default 0.5 is an assumption: published end-to-end MFU, which also loses the
        bubble and exposed communication, is 38-43 % for Llama 3 405B on H100
        (Dubey et al. 2024, Table 4) and 44-52 % for Megatron GPT on A100 (Narayanan
        et al. 2021, Table 1), so the kernels alone run somewhat faster.
    """

    tp: int = 8
    pp: int = 1
    dp: int = 1
    ep: int = 1
    micro_batch: int = 1
    gpus_per_server: int = 8
    overlap: float = 0.0
    recompute: bool = False
    sequence_parallel: bool = True
    grad_bytes: int = 2
    achievable_fraction: float = 0.5
    uneven_pp: bool = False

    def __post_init__(self):
        for key in ("tp", "pp", "dp", "ep", "micro_batch", "gpus_per_server", "grad_bytes"):
            val = getattr(self, key)
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{key}: must be an integer >= 1; got {val!r}")
        if self.dp % self.ep:
            raise ValueError(f"ep: must divide dp={self.dp} (EP groups are carved out of "
                             f"data-parallel ranks); got {self.ep}")
        if self.tp > self.gpus_per_server or self.gpus_per_server % self.tp:
            raise ValueError(f"tp: must divide gpus_per_server={self.gpus_per_server} "
                             f"(tensor parallelism stays inside a server); got {self.tp}")
        for key in ("overlap", "achievable_fraction"):
            val = getattr(self, key)
            if isinstance(val, bool) or not isinstance(val, (int, float)) or \
                    not math.isfinite(val) or not 0 <= val <= 1:
                raise ValueError(f"{key}: must be a number in [0, 1]; got {val!r}")
        if self.achievable_fraction == 0:
            raise ValueError("achievable_fraction: must be > 0")

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def n_microbatches(self, model: ModelConfig) -> int:
        """``m = B / (dp mb)``.

        Raises:
          ValueError: if ``dp mb`` does not divide the global batch.
        """
        per = self.dp * self.micro_batch
        if model.global_batch % per:
            raise ValueError(f"micro_batch: dp * micro_batch = {per} must divide the "
                             f"global batch {model.global_batch}")
        return model.global_batch // per

    def check(self, model: ModelConfig) -> "ParallelPlan":
        """Validate the plan against a model (divisibility of layers, heads, experts)."""
        if self.pp > model.n_layers or (model.n_layers % self.pp and not self.uneven_pp):
            raise ValueError(f"pp: must divide n_layers={model.n_layers} (or be at most "
                             f"n_layers with uneven_pp=True); got {self.pp}")
        if model.n_heads % self.tp or model.n_kv_heads % self.tp and self.tp % model.n_kv_heads:
            raise ValueError(f"tp: {self.tp} does not split n_heads={model.n_heads} / "
                             f"n_kv_heads={model.n_kv_heads}")
        if self.ep > 1 and model.n_experts % self.ep:
            raise ValueError(f"ep: must divide n_experts={model.n_experts}; got {self.ep}")
        if self.ep > 1 and model.n_experts == 1:
            raise ValueError("ep: a dense model has no experts; use ep = 1")
        self.n_microbatches(model)
        return self

    def replace(self, **changes) -> "ParallelPlan":
        bad = set(changes) - {f.name for f in dataclasses.fields(self)}
        if bad:
            raise ValueError(f"{sorted(bad)[0]}: unknown ParallelPlan field; accepted: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)

    def for_gpus(self, n_gpus: int) -> "ParallelPlan":
        """The same plan with ``dp = n_gpus / (tp pp)`` (e.g. to fill a job's GPUs).

        Raises:
          ValueError: if ``tp pp`` does not divide ``n_gpus`` or ``ep`` does not divide
            the resulting ``dp``.
        """
        n_gpus = int(n_gpus)
        if n_gpus < 1 or n_gpus % (self.tp * self.pp):
            raise ValueError(f"n_gpus: {n_gpus} GPUs are not a multiple of tp*pp = "
                             f"{self.tp * self.pp}")
        return self.replace(dp=n_gpus // (self.tp * self.pp))

    def groups(self) -> dict[str, np.ndarray]:
        """Rank groups in the Megatron order ``rank = (p dp + d) tp + t``.

        Returns:
          ``{"tp": [pp dp, tp], "dp": [pp tp, dp], "pp": [dp tp, pp],
          "ep": [pp tp dp/ep, ep], "edp": [pp tp ep, dp/ep]}`` rank arrays; ``edp`` are
          the expert-data-parallel groups (same expert shard, different EP group).
        """
        grid = np.arange(self.n_gpus).reshape(self.pp, self.dp, self.tp)
        dpg = grid.transpose(0, 2, 1)                              # [pp, tp, dp]
        eg = dpg.reshape(self.pp, self.tp, self.dp // self.ep, self.ep)
        return {
            "tp": grid.reshape(-1, self.tp),
            "dp": dpg.reshape(-1, self.dp),
            "pp": grid.transpose(1, 2, 0).reshape(-1, self.pp),
            "ep": eg.reshape(-1, self.ep),
            "edp": eg.transpose(0, 1, 3, 2).reshape(-1, self.dp // self.ep),
        }


def comm_bytes(model, plan: ParallelPlan) -> dict[str, float]:
    """Per-GPU communication of one step, by parallel dimension (module docstring table).

    Returns:
      dict with the payload ``S`` of each collective and how many there are per step:
      ``tp_allreduce_bytes``, ``tp_allreduce_count``, ``pp_send_bytes`` (per lane, per
      micro-batch and direction), ``pp_send_count`` (per boundary and lane: ``2 m``),
      ``dp_allreduce_bytes`` (dense gradient shard), ``edp_allreduce_bytes`` (expert
      gradient shard), ``ep_alltoall_bytes`` (per rank per all-to-all),
      ``ep_alltoall_count``, and the per-GPU bytes *sent* per step by each dimension
      (``tp_bytes_sent`` ... ``ep_bytes_sent``; ring all-reduce sends ``2 (n-1)/n S``,
      all-to-all ``(n-1)/n S``).  Layer counts are the busiest stage's, ``ceil(L /
      pp)`` (``ceil`` of the MoE layers for the all-to-all).  ``ep_*`` count the
      plain all-to-all's ``top_k`` copies of each token; with node-limited routing
      (``model.node_limit``) the network carries one copy per (token, destination
      server) instead (:func:`fabric_jax.workloads.phases.node_limited_routing`).
    """
    model = get_model(model)
    plan.check(model)
    m = plan.n_microbatches(model)
    act = plan.micro_batch * model.seq_len * model.hidden * model.bytes_per_element
    layers = -(-model.n_layers // plan.pp)            # the busiest stage's
    moe_layers = -(-model.moe_layers // plan.pp)
    tp_count = (6 if plan.recompute else 4) * layers * m if plan.tp > 1 else 0
    moe = model.n_experts > 1
    dense_shard = model.dense_params / (plan.tp * plan.pp) * plan.grad_bytes
    expert_shard = model.moe_params / (plan.tp * plan.pp * plan.ep) * plan.grad_bytes
    a2a = act * model.top_k / plan.tp if moe else 0.0
    a2a_count = 4 * moe_layers * m if (moe and plan.ep > 1) else 0
    edp = plan.dp // plan.ep
    out = dict(
        tp_allreduce_bytes=float(act), tp_allreduce_count=int(tp_count),
        pp_send_bytes=float(act / plan.tp) if plan.pp > 1 else 0.0,
        pp_send_count=int(2 * m) if plan.pp > 1 else 0,
        dp_allreduce_bytes=float(dense_shard) if plan.dp > 1 else 0.0,
        edp_allreduce_bytes=float(expert_shard) if (moe and edp > 1) else 0.0,
        ep_alltoall_bytes=float(a2a), ep_alltoall_count=int(a2a_count),
    )

    def ring(n):
        return 2.0 * (n - 1) / n if n > 1 else 0.0

    out["tp_bytes_sent"] = tp_count * ring(plan.tp) * act
    # A middle stage sends m activations forward and m gradients backward; count the
    # average over stages (pp-1 boundaries, each with a sender in each direction).
    out["pp_bytes_sent"] = (2.0 * (plan.pp - 1) / plan.pp * m * out["pp_send_bytes"])
    out["dp_bytes_sent"] = ring(plan.dp) * out["dp_allreduce_bytes"] + \
        ring(edp) * out["edp_allreduce_bytes"]
    out["ep_bytes_sent"] = a2a_count * (plan.ep - 1) / plan.ep * a2a
    return out
