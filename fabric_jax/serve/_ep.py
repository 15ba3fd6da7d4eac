"""Wide expert parallelism in decode: one MoE layer's dispatch and combine all-to-all.

The model (DeepSeek-V3 serving with DeepEP's low-latency kernels)
------------------------------------------------------------------
A DeepSeek-V3-style MoE layer (256 routed experts, top-8, hidden 7168;
:data:`fabric_jax.workloads.model.MODELS` ``"deepseek_v3"``) is spread over ``ep`` GPUs
(expert-parallel degree ``E``), ``n_experts / E`` experts per GPU, on ``E / 8`` servers of
8 GPUs (NVLink inside, one NIC per GPU on a rail-optimised fabric:
:func:`ep_topology`).  Each GPU holds ``T`` tokens per decode step (DeepEP's
low-latency benchmark: 128).

* **Dispatch**: every token goes to each of its ``top_k`` experts' GPUs, **one message
  per (token, expert)** even when two of its experts share a GPU (deepseek-ai/DeepEP
  ``csrc/kernels/internode_ll.cu``, ``dispatch``: each of the first ``top_k`` warps
  issues one put per destination expert).  A message is ``sizeof(int4) = 16`` bytes of
  header (the source token index and three reserved ints) + the hidden vector + with FP8
  one float32 scale per 128 channels: ``16 + hidden + hidden / 128 * 4`` = 7,408 B at
  hidden 7168 (``num_bytes_per_msg`` in the same kernel), or ``16 + 2 hidden`` in BF16.
* **Combine**: the reverse, one BF16 message of ``2 hidden`` = 14,336 B per (token,
  expert), no header (``num_bytes_per_slot`` of ``combine``).
* **Transport**: the messages of one (source GPU, destination GPU) pair are one flow of
  ``n_msgs x msg_bytes``.  Since DeepEP's 2025-06-05 change (README: "low-latency kernels
  now leverage NVLink as much as possible", PR #173; ``nvshmemi_get_p2p_ptr`` in
  ``internode_ll.cu`` selects a warp copy over NVLink for a peer it can reach by P2P), a
  same-server peer is reached over NVLink and every other peer by RDMA from the GPU's
  own NIC straight to the destination GPU's NIC (IBGDA, no forwarding on another rail):
  the model sends intra-server pairs over NVLink and inter-server pairs over PCIe, the
  NIC, its rail leaf and (across rails) a spine.  The README's current low-latency table
  (77 / 118 / 155 us dispatch at EP 8 / 16 / 32) was measured with that change; its
  earlier "pure RDMA" table (163 / 173 / 182 us, :data:`DEEPEP_LL_PURE_RDMA_US`) is kept
  for reference and not simulated.  A message to the GPU itself is a local copy and
  is not a flow.
* **Per-message cost**: the NIC's message rate (``msg_rate``, ConnectX-7: an
  assumption, :data:`DEFAULT_MSG_RATE`) charged on the sending and on the receiving NIC
  for every inter-server message, as a serialisation bound ``n_msgs / msg_rate`` per NIC
  that the transfer cannot beat (``max`` with the fluid run's completion, a closed form
  added outside the engine: at 7.4-14 KB messages it never binds on a 400 Gb/s NIC,
  ~3 us for 1,024 messages against ~150 us of bytes).
* **Fixed cost**: kernel launch, FP8 cast, the counter exchange, grid syncs and the
  receiver's packing, one constant per operation (:data:`DEEPEP_FIXED_US`): an
  assumption **fitted** on DeepEP's EP 256 row (the row whose transfer is almost all
  NIC-bound), never on the EP 8 / 16 / 32 rows it is validated against
  (:func:`deepep_fixed_us` recomputes it).

Expert choice (:func:`route_tokens`): uniform random top-k without replacement
(DeepEP's benchmark draws random scores and takes their top-k), ``"hot"``: Zipf over
experts (``p_e ~ rank^-zipf_s``, ``zipf_s = 1.0`` by default, ranks shuffled with the
seed: the hot experts' GPUs see an incast), ``"balanced"``: every (source, destination)
pair gets the same count (the closed form's case), and node-limited routing
(``node_limit=M``: each token's experts on at most ``M`` servers, DeepSeek-V3 Sec. 2.1.2,
``M = 4`` in the model card).

Closed form (:func:`ep_closed_form`, the oracle): on an idle fabric one operation takes
``fixed + max over GPUs of (inter-server bytes out or in / NIC rate, intra-server bytes
out or in / NVLink rate, inter-server messages out or in / msg_rate) + path latency``.
The fluid run (:func:`ep_step_time`) puts the same flows through a preset's dynamics
(:func:`fabric_jax.fabric_sim.simulate_paths`) or the ideal fabric's max-min
(:func:`fabric_jax.fabric_sim.simulate_ideal`); completion = the last flow's finish
(which includes its path latency) + ``fixed``.

Departures: no per-QP or per-SM limits (DeepEP posts from ``n_experts / E`` QPs per peer
and one warp group per expert); the receiver's packing copy and the FP8 cast are in the
fixed cost, not scaled with tokens; the self-sends are free; no retransmission beyond
what a preset models.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

import numpy as np

from .. import units
from ..fabric_sim import ideal_incidence, simulate_ideal, simulate_paths
from ..fabrics import PRESETS, get_fabric
from ..paths import shortest_paths
from ..topology import rail_optimized
from ..workloads.model import get_gpu, get_model

__all__ = ["GPUS_PER_SERVER", "DEFAULT_MSG_RATE", "MSG_RATE_BAND", "MSG_HEADER_BYTES",
           "DEEPEP_LL_US", "DEEPEP_LL_PURE_RDMA_US", "DEEPEP_FIXED_US", "EPFlows",
           "message_bytes", "route_tokens", "ep_message_counts", "ep_normal_counts",
           "ep_step_flows",
           "ep_topology", "ep_closed_form", "ep_step_time", "ep_sweep", "ep_step_table",
           "deepep_fixed_us", "IDEAL"]

#: GPUs per server (HGX/DGX H800): ``ep`` must be a multiple.
GPUS_PER_SERVER = 8
#: The ideal fabric's name in :func:`ep_step_time` / :func:`ep_sweep`.
IDEAL = "ideal"
#: Message header of the low-latency dispatch: one ``int4`` (source token index + 3
#: reserved ints), deepseek-ai/DeepEP ``internode_ll.cu`` ``num_bytes_per_msg``.
MSG_HEADER_BYTES = 16
#: FP8 dispatch: one float32 scale per 128 channels (same kernel, ``kNumPerChannels``).
FP8_GROUP = 128
#: ConnectX-7 message rate per NIC and direction, messages/s.  An **assumption**:
#: NVIDIA's ConnectX-7 product brief quotes a few hundred million messages per second
#: for small messages; we take 330e6 with the band :data:`MSG_RATE_BAND`.  At DeepEP's
#: 7.4-14 KB messages it does not bind (~3 us per 1,024 messages).
DEFAULT_MSG_RATE = 330e6
MSG_RATE_BAND = (200e6, 400e6)

#: deepseek-ai/DeepEP README (docs/legacy.md in V2), "Low-latency kernels", H800 with one
#: ConnectX-7 400 Gb/s InfiniBand NIC per GPU, 128 tokens per batch, hidden 7168, top-8,
#: FP8 dispatch, BF16 combine, after the 2025-06-05 NVLink change: ``{ep: (dispatch_us,
#: combine_us)}``.  Its "RDMA bandwidth" column is the logical bytes (same-server
#: messages included) over the time.
DEEPEP_LL_US = {8: (77.0, 114.0), 16: (118.0, 195.0), 32: (155.0, 273.0),
                64: (173.0, 314.0), 128: (192.0, 369.0), 256: (194.0, 360.0)}
#: The same table before the NVLink change ("pure RDMA", DeepEP README of 2025-02/05).
DEEPEP_LL_PURE_RDMA_US = {8: (163.0, 318.0), 16: (173.0, 329.0), 32: (182.0, 350.0),
                          64: (186.0, 353.0), 128: (192.0, 369.0), 256: (194.0, 360.0)}

_DTYPES = {"fp8", "bf16"}
_ROUTINGS = ("uniform", "hot", "balanced")


def message_bytes(hidden: int, dtype: str, *, op: str = "dispatch") -> int:
    """Bytes of one (token, expert) message of DeepEP's low-latency kernels.

    Dispatch: ``16 + hidden + hidden / 128 * 4`` in FP8 (7,408 at hidden 7168), ``16 +
    2 hidden`` in BF16; combine: ``2 hidden`` (BF16 only, as in the kernel).

    Raises:
      ValueError: unknown ``op`` or ``dtype``, hidden not a multiple of 128.
    """
    if op not in ("dispatch", "combine"):
        raise ValueError(f"op: expected 'dispatch' or 'combine'; got {op!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"{op}_dtype: expected one of {sorted(_DTYPES)}; got {dtype!r}")
    if op == "combine":
        if dtype != "bf16":
            raise ValueError(f"combine_dtype: the low-latency combine sends BF16 only; got "
                             f"{dtype!r} (use 'bf16')")
        return 2 * int(hidden)
    if hidden % FP8_GROUP:
        raise ValueError(f"hidden: must be a multiple of {FP8_GROUP}; got {hidden}")
    if dtype == "fp8":
        return MSG_HEADER_BYTES + int(hidden) + int(hidden) // FP8_GROUP * 4
    return MSG_HEADER_BYTES + 2 * int(hidden)


# ------------------------------------------------------------------ checks
def check_ep(model, ep: int, n_gpus: int | None = None) -> int:
    """``ep`` checked for ``model`` (a positive multiple of 8 GPUs per server dividing its
    experts, at most ``n_gpus``): the degree, or ValueError naming ``ep``."""
    if isinstance(ep, bool) or not isinstance(ep, (int, np.integer)) or ep < 1:
        raise ValueError(f"ep: must be a positive integer; got {ep!r}")
    ep = int(ep)
    if ep % GPUS_PER_SERVER:
        raise ValueError(f"ep: must be a multiple of {GPUS_PER_SERVER} GPUs per server; got "
                         f"{ep} (use 8, 16, 32, ...)")
    if model.n_experts % ep:
        raise ValueError(f"ep: must divide the {model.n_experts} routed experts of "
                         f"{model.name!r}; got {ep}")
    if n_gpus is not None and ep > n_gpus:
        raise ValueError(f"ep: {ep} GPUs do not fit the fabric's {n_gpus} GPUs; give a "
                         f"smaller ep or a larger fabric")
    return ep


def _check_tokens(tokens_per_gpu) -> int:
    if (isinstance(tokens_per_gpu, bool) or not isinstance(tokens_per_gpu, (int, np.integer))
            or tokens_per_gpu <= 0):
        raise ValueError(f"tokens_per_gpu: must be an integer > 0; got {tokens_per_gpu!r}")
    return int(tokens_per_gpu)


def _check_pos(x, name):
    if x is None or not np.isfinite(x) or x <= 0:
        raise ValueError(f"{name}: must be > 0; got {x!r}")
    return float(x)


# ------------------------------------------------------------------ routing
def route_tokens(n_tokens: int, n_experts: int, top_k: int, *, routing: str = "uniform",
                 zipf_s: float = 1.0, node_limit: int | None = None,
                 experts_per_node: int | None = None, seed: int = 0) -> np.ndarray:
    """Each token's ``top_k`` distinct experts: ``[n_tokens, top_k]`` int.

    ``"uniform"``: uniformly random without replacement (Gumbel top-k of equal scores).
    ``"hot"``: Gumbel top-k of ``log p`` with ``p_e ~ rank_e^-zipf_s`` and the ranks a
    seeded permutation of the experts (sampling without replacement proportional to
    ``p``).  ``"balanced"``: token ``t`` takes experts ``(t * top_k + j) mod n_experts``
    (deterministic, every expert equally loaded).  ``node_limit=M`` (with
    ``experts_per_node``): DeepSeek-V3's node-limited routing (arXiv 2412.19437 Sec.
    2.1.2): the ``M`` nodes with the highest sums of their ``top_k / M`` best scores are
    kept, then the top-k among their experts.
    """
    if routing not in _ROUTINGS:
        raise ValueError(f"routing: expected one of {list(_ROUTINGS)}; got {routing!r}")
    if routing == "balanced":
        return (np.arange(n_tokens)[:, None] * top_k + np.arange(top_k)) % n_experts
    rng = np.random.default_rng(seed)
    if routing == "hot":
        zipf_s = _check_pos(zipf_s, "zipf_s")
        rank = rng.permutation(n_experts) + 1.0
        logp = (-zipf_s * np.log(rank)).astype(np.float32)
    else:
        logp = np.zeros(n_experts, np.float32)
    scores = logp + rng.gumbel(size=(n_tokens, n_experts)).astype(np.float32)
    if node_limit is not None and experts_per_node is not None:
        n_nodes = n_experts // experts_per_node
        if node_limit < n_nodes:
            per = max(top_k // node_limit, 1)
            by_node = scores.reshape(n_tokens, n_nodes, experts_per_node)
            best = -np.sort(-by_node, axis=2)[:, :, :per].sum(axis=2)
            keep = np.argsort(-best, axis=1)[:, :node_limit]
            mask = np.zeros((n_tokens, n_nodes), bool)
            np.put_along_axis(mask, keep, True, axis=1)
            scores = np.where(np.repeat(mask, experts_per_node, axis=1), scores, -np.inf)
    return np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]


def ep_message_counts(model="deepseek_v3", *, ep: int, tokens_per_gpu: int,
                      routing: str = "uniform", zipf_s: float = 1.0,
                      node_limit: int | None = None, seed: int = 0) -> np.ndarray:
    """Dispatch messages from each GPU to each GPU: ``[ep, ep]`` int (the diagonal: the
    self-sends, local copies).  Combine sends the transpose.

    Expert ``e`` lives on GPU ``e // (n_experts / ep)`` (DeepEP's ``dst_rank = expert /
    num_local_experts``); ``node_limit`` counts servers of :data:`GPUS_PER_SERVER` GPUs.
    """
    model = get_model(model)
    ep = check_ep(model, ep)
    tokens = _check_tokens(tokens_per_gpu)
    per_gpu = model.n_experts // ep
    topk = route_tokens(ep * tokens, model.n_experts, model.top_k, routing=routing,
                        zipf_s=zipf_s, node_limit=node_limit,
                        experts_per_node=per_gpu * GPUS_PER_SERVER, seed=seed)
    src = np.repeat(np.arange(ep), tokens * model.top_k)
    dst = (topk // per_gpu).reshape(-1)
    return np.bincount(src * ep + dst, minlength=ep * ep).reshape(ep, ep)


def ep_normal_counts(model="deepseek_v3", *, ep: int, tokens_per_gpu: int,
                     routing: str = "uniform", zipf_s: float = 1.0,
                     node_limit: int | None = 4, seed: int = 0) -> np.ndarray:
    """Dispatch messages of DeepEP's **normal** (training / prefill) kernels, ``[ep, ep]``.

    The pattern of DeepSeek-V3 (arXiv 2412.19437 Sec. 3.2.2) and DeepEP's normal
    internode kernels: a token goes **once per target server** over RDMA to the GPU with
    the same in-server index there (its own rail: no spine crossing in a rail-optimised
    fabric), which forwards it over NVLink **once per target GPU** of that server; a
    target server that is the source's own gets NVLink copies straight from the source.
    So the matrix holds RDMA messages between same-rail GPUs of different servers and
    NVLink messages inside servers (the forwarding and the local ones); the diagonal is
    the local copies.  ``node_limit`` (default 4, DeepSeek-V3's ``M``) bounds a token's
    servers.  Combine is the transpose (the forwarding GPU reduces before the RDMA).
    Departures: the forwarding starts with the transfer (DeepEP pipelines it in chunks),
    top-k weights and indices riding with the token are left out.
    """
    model = get_model(model)
    ep = check_ep(model, ep)
    tokens = _check_tokens(tokens_per_gpu)
    per_gpu = model.n_experts // ep
    g = GPUS_PER_SERVER
    n_srv = ep // g
    topk = route_tokens(ep * tokens, model.n_experts, model.top_k, routing=routing,
                        zipf_s=zipf_s, node_limit=node_limit,
                        experts_per_node=per_gpu * g, seed=seed)
    mask = np.zeros((ep * tokens, ep), bool)
    np.put_along_axis(mask, topk // per_gpu, True, axis=1)
    mask = mask.reshape(ep, tokens, ep)                  # [source, token, target GPU]
    per_pair = mask.sum(axis=1)                          # tokens of s targeting GPU d
    per_node = mask.reshape(ep, tokens, n_srv, g).any(axis=3).sum(axis=1)   # [s, server]
    node = np.arange(ep) // g
    local = np.arange(ep) % g
    same = node[:, None] == node[None, :]
    counts = np.where(same, per_pair, 0)                 # NVLink inside the source server
    # RDMA: once per (token, other server), to the same in-server index there
    rdma = np.where(node[:, None] == np.arange(n_srv)[None, :], 0, per_node)
    rows = np.repeat(np.arange(ep), n_srv)
    cols = (np.tile(np.arange(n_srv), ep) * g + np.repeat(local, n_srv))
    np.add.at(counts, (rows, cols), rdma.reshape(-1))
    # forwarding over NVLink on the target server: (B, i) -> (B, j), j != i
    fwd = np.zeros((g, ep), np.int64)                    # [source in-server index, target]
    np.add.at(fwd, local, np.where(same, 0, per_pair))
    relay = node[None, :] * g + np.arange(g)[:, None]    # [i, target]: the relay GPU (B, i)
    keep = relay != np.arange(ep)[None, :]               # the relay is not the target
    np.add.at(counts, (relay[keep], np.broadcast_to(np.arange(ep), (g, ep))[keep]),
              fwd[keep])
    return counts


# ------------------------------------------------------------------ flows
@dataclasses.dataclass(frozen=True)
class EPFlows:
    """One operation's flows: every ordered pair of distinct GPUs (padded: a pair with no
    message is a flow of 0 bytes, so the shape depends on ``ep`` only).

    Attributes:
      src, dst: ``[flows]`` GPU (host) indices.
      n_msgs: ``[flows]`` messages.
      size: ``[flows]`` bytes (``n_msgs * msg_bytes``).
      intra: ``[flows]`` same server (NVLink).
      msg_bytes: bytes per message.
      self_msgs: ``[ep]`` messages each GPU sends itself (local copies, not flows).
      op: ``"dispatch"`` or ``"combine"``.
    """

    src: np.ndarray
    dst: np.ndarray
    n_msgs: np.ndarray
    size: np.ndarray
    intra: np.ndarray
    msg_bytes: int
    self_msgs: np.ndarray
    op: str

    @property
    def ep(self) -> int:
        return int(self.self_msgs.size)


def ep_step_flows(model="deepseek_v3", *, ep: int, tokens_per_gpu: int, op: str = "dispatch",
                  dtype: str | None = None, counts: np.ndarray | None = None,
                  routing: str = "uniform", zipf_s: float = 1.0,
                  node_limit: int | None = None, seed: int = 0) -> EPFlows:
    """The flows of one dispatch or combine (module docstring): one per ordered pair of
    distinct GPUs, ``n_msgs x msg_bytes``; ``counts`` (from :func:`ep_message_counts`)
    reuses a routing for both operations (combine sends its transpose).

    ``dtype``: ``"fp8"`` (dispatch default) or ``"bf16"``; combine is BF16.
    """
    model = get_model(model)
    ep = check_ep(model, ep)
    tokens = _check_tokens(tokens_per_gpu)
    dtype = ("fp8" if op == "dispatch" else "bf16") if dtype is None else dtype
    msg = message_bytes(model.hidden, dtype, op=op)
    if counts is None:
        counts = ep_message_counts(model, ep=ep, tokens_per_gpu=tokens, routing=routing,
                                   zipf_s=zipf_s, node_limit=node_limit, seed=seed)
    counts = np.asarray(counts)
    if op == "combine":
        counts = counts.T
    src, dst = np.nonzero(~np.eye(ep, dtype=bool))
    n = counts[src, dst].astype(np.int64)
    return EPFlows(src=src, dst=dst, n_msgs=n, size=n.astype(float) * msg,
                   intra=(src // GPUS_PER_SERVER) == (dst // GPUS_PER_SERVER),
                   msg_bytes=msg, self_msgs=np.diag(counts).copy(), op=op)


@lru_cache(maxsize=16)
def ep_topology(ep: int, *, link_gbps: float = 400.0, nvlink_gbps: float = 1600.0,
                servers_per_leaf: int = 32):
    """``ep / 8`` servers of 8 GPUs on a rail-optimised fabric
    (:func:`fabric_jax.rail_optimized` with the server model): NVLink ``nvlink_gbps`` per
    GPU and direction (H800: 400 GB/s bidirectional = 1600 Gb/s), one NIC of
    ``link_gbps`` per GPU on its rail, non-blocking leaves."""
    n_servers = ep // GPUS_PER_SERVER
    return rail_optimized(n_servers, GPUS_PER_SERVER,
                          servers_per_leaf=min(servers_per_leaf, n_servers),
                          link_gbps=link_gbps, gpus_per_server=GPUS_PER_SERVER,
                          nvlink_gbps=nvlink_gbps)


# ------------------------------------------------------------------ closed form
def _per_gpu_loads(flows: EPFlows):
    ep = flows.ep
    inter = ~flows.intra

    def tot(x, idx):
        return np.bincount(idx, weights=x, minlength=ep)

    return dict(inter_out=tot(flows.size * inter, flows.src),
                inter_in=tot(flows.size * inter, flows.dst),
                intra_out=tot(flows.size * flows.intra, flows.src),
                intra_in=tot(flows.size * flows.intra, flows.dst),
                msgs_out=tot(flows.n_msgs * inter, flows.src),
                msgs_in=tot(flows.n_msgs * inter, flows.dst))


def message_rate_time(flows: EPFlows, msg_rate: float) -> float:
    """The NIC message-rate bound: the most inter-server messages any NIC sends or
    receives over ``msg_rate``, s."""
    loads = _per_gpu_loads(flows)
    return float(max(loads["msgs_out"].max(), loads["msgs_in"].max()) / msg_rate)


def ep_closed_form(flows: EPFlows, *, nic_rate: float, nvlink_rate: float,
                   msg_rate: float = DEFAULT_MSG_RATE, fixed_s: float = 0.0,
                   latency=None) -> dict:
    """One operation on an idle fabric (module docstring), s.

    ``fixed_s + max_g max(inter_out_g / nic_rate + L_inter, inter_in_g / nic_rate +
    L_inter, intra_out_g / nvlink_rate + L_intra, intra_in_g / nvlink_rate + L_intra,
    msgs_out_g / msg_rate, msgs_in_g / msg_rate)`` with ``L_inter`` / ``L_intra`` the
    longest one-way path latency of the inter- / intra-server flows that carry bytes
    (``latency``: ``[flows]`` s, default none).

    Returns:
      ``{"time_s", "nic_s", "nvlink_s", "msg_s", "fixed_s", "latency_s",
      "remote_bytes_share"}`` (``latency_s``: the latency of the binding term).
    """
    loads = _per_gpu_loads(flows)
    nic = max(loads["inter_out"].max(), loads["inter_in"].max()) / nic_rate
    nvl = max(loads["intra_out"].max(), loads["intra_in"].max()) / nvlink_rate
    msg = max(loads["msgs_out"].max(), loads["msgs_in"].max()) / msg_rate
    lat = np.zeros(flows.size.size) if latency is None else np.asarray(latency, float)
    busy = flows.size > 0
    l_inter = float(np.max(np.where(busy & ~flows.intra, lat, 0.0), initial=0.0))
    l_intra = float(np.max(np.where(busy & flows.intra, lat, 0.0), initial=0.0))
    terms = [(nic + l_inter, l_inter), (nvl + l_intra, l_intra), (msg, 0.0)]
    t, l_bind = max(terms)
    total = flows.size.sum() + flows.self_msgs.sum() * flows.msg_bytes
    return dict(time_s=float(fixed_s + t), nic_s=float(nic),
                nvlink_s=float(nvl), msg_s=float(msg), fixed_s=float(fixed_s),
                latency_s=float(l_bind),
                remote_bytes_share=float(flows.size[~flows.intra].sum() / max(total, 1.0)))


# ------------------------------------------------------------------ the fixed cost
def deepep_fixed_us(op: str, *, ep: int = 256, seed: int = 0,
                    msg_rate: float = DEFAULT_MSG_RATE) -> float:
    """The fixed cost of ``op`` fitted on DeepEP's ``ep`` row (default 256): the
    published latency less the closed-form transfer (:func:`ep_closed_form` without
    fixed cost or latency) of the benchmark's configuration (H800, 400 Gb/s NIC, 128
    tokens, DeepSeek-V3, uniform routing with ``seed``), microseconds."""
    model = get_model("deepseek_v3")
    gpu = get_gpu("h800")
    counts = ep_message_counts(model, ep=ep, tokens_per_gpu=128, seed=seed)
    flows = ep_step_flows(model, ep=ep, tokens_per_gpu=128, op=op, counts=counts)
    cf = ep_closed_form(flows, nic_rate=units.gbps(400.0), nvlink_rate=gpu.nvlink_bandwidth,
                        msg_rate=msg_rate)
    published = DEEPEP_LL_US[ep][0 if op == "dispatch" else 1]
    return published - cf["time_s"] * 1e6


#: Fixed cost per operation (launch, FP8 cast, counter exchange, syncs, packing),
#: microseconds: an **assumption fitted** on DeepEP's EP 256 row by
#: :func:`deepep_fixed_us` (rounded), never on the EP 8 / 16 / 32 rows the model is
#: checked against.  Its effect: it is added once per operation, so it shifts every EP
#: degree by the same amount and sets none of the slope.
DEEPEP_FIXED_US = {"dispatch": 35.0, "combine": 53.0}


# ------------------------------------------------------------------ simulation
def _path_latency(topology, paths, fabric) -> np.ndarray:
    """``[flows]`` one-way latency of each flow's first candidate path, s."""
    lat = np.asarray(fabric.link_latency(topology) if fabric is not None
                     else topology.latency, float)
    links = np.asarray(paths.links)[:, 0, :]
    return np.where(links >= 0, lat[np.maximum(links, 0)], 0.0).sum(axis=1)


@lru_cache(maxsize=16)
def _paths(ep: int, link_gbps: float, nvlink_gbps: float, seed: int):
    topo = ep_topology(ep, link_gbps=link_gbps, nvlink_gbps=nvlink_gbps)
    src, dst = np.nonzero(~np.eye(ep, dtype=bool))
    # every equal-cost path (one per spine across rails: <= 8 up to EP 64)
    return topo, shortest_paths(topo, src, dst, max_paths=None, seed=seed)


def _simulate(flows: EPFlows, fabric, *, link_gbps, nvlink_gbps, dt, n_steps, seed):
    """Last finish of the flows (path latency included), s (``inf`` if unfinished), and
    ``[flows]`` one-way path latency, s."""
    topo, paths = _paths(flows.ep, float(link_gbps), float(nvlink_gbps), int(seed))
    nic = units.gbps(link_gbps)
    nvl = units.gbps(nvlink_gbps)
    if fabric == IDEAL:
        lat = _path_latency(topo, paths, None)
        ep = flows.ep
        inter = ~flows.intra
        # inter-server: the NIC up-link of the source and down-link of the destination
        # on the crossbar; intra-server: kept NVLink out of the source, into the dest
        src = np.stack([np.where(inter, flows.src, -1), np.full(ep * (ep - 1), -1)], 1)
        dst = np.stack([np.full(ep * (ep - 1), -1), np.where(inter, flows.dst, -1)], 1)
        keep = np.stack([np.where(inter, -1, 2 * flows.src),
                         np.where(inter, -1, 2 * flows.dst + 1)], 1)
        inc, cap = ideal_incidence(src, dst, ep, nic_capacity=nic, keep_links=keep,
                                   keep_capacity=np.full(2 * ep, nvl))
        res = simulate_ideal(inc, cap, flows.size, latency=lat,
                             demand=np.where(inter, nic, nvl), one_table=True)
        return float(np.max(np.asarray(res.finish))), lat
    fab = get_fabric(fabric)
    # save_every = the horizon: one snapshot, and the run stops once the fabric is idle
    # the preset's switch memory (shared buffers of the Ethernet presets), as compare,
    # scale and the KV flows run it
    res = simulate_paths(topo, paths, fab, flows.size, dt=dt, n_steps=n_steps, seed=seed,
                         nic_rate=nic, save_every=n_steps,
                         fluid_options=fab.buffer_options(topo))
    return float(np.max(np.asarray(res.finish))), _path_latency(topo, paths, fab)


def _check_fabric(fabric):
    if isinstance(fabric, str) and fabric != IDEAL and fabric not in PRESETS:
        raise ValueError(f"fabric: expected one of {sorted(PRESETS) + [IDEAL]} or a Fabric; "
                         f"got {fabric!r}")
    return fabric


def ep_step_time(fabric="infiniband", *, model="deepseek_v3", ep: int,
                 tokens_per_gpu: int = 128, gpu="h800", link_gbps: float = 400.0,
                 nvlink_gbps: float | None = None, dispatch_dtype: str = "fp8",
                 combine_dtype: str = "bf16", routing: str = "uniform",
                 zipf_s: float = 1.0, node_limit: int | None = None, seed: int = 0,
                 dt: float = 0.5e-6, n_steps: int | None = None,
                 msg_rate: float = DEFAULT_MSG_RATE, fixed_us: dict | None = None,
                 n_gpus: int | None = None, kernel: str = "low_latency") -> dict:
    """One dispatch and one combine of a MoE layer through a preset's dynamics (or the
    ideal fabric), and their closed forms.

    Args:
      fabric: a preset name, a :class:`fabric_jax.Fabric`, or ``"ideal"``.
      model: a :data:`fabric_jax.workloads.model.MODELS` name or record.
      ep: expert-parallel degree (GPUs): a multiple of 8 that divides the experts.
      tokens_per_gpu: tokens each GPU holds in the step (> 0).
      gpu: its NVLink bandwidth (per direction) is the intra-server rate unless
        ``nvlink_gbps`` is given.
      link_gbps: NIC line rate, Gb/s.
      dispatch_dtype, combine_dtype: ``"fp8"`` / ``"bf16"`` (combine: BF16 only).
      routing, zipf_s, node_limit, seed: expert choice (:func:`route_tokens`).
      dt: fluid step, s; n_steps: horizon in steps (default: 4x the slower closed form
        plus 40 us; the run stops once the fabric is idle, so a long horizon costs
        nothing; a fixed ``n_steps`` compiles once per ``ep`` and ``dt``).
      msg_rate: NIC message rate, messages/s.
      fixed_us: ``{"dispatch", "combine"}`` fixed cost, us (default
        :data:`DEEPEP_FIXED_US`).
      n_gpus: GPUs of the fabric the deployment must fit (optional check).
      kernel: ``"low_latency"`` (decode: one message per (token, expert), direct RDMA)
        or ``"normal"`` (prefill: :func:`ep_normal_counts`, RDMA on the rail then NVLink
        forwarding; ``node_limit`` defaults to 4 there and ``fixed_us`` to 0: the
        high-throughput kernels' regime is bytes, their fixed cost is not fitted).

    Returns:
      ``{"dispatch_s", "combine_s", "dispatch_us", "combine_us", "closed_form":
      {"dispatch": ..., "combine": ...}, "transfer_s": {...}, "msg_s": {...},
      "fixed_s": {...}, "dispatch_bytes", "combine_bytes", "n_msgs", "self_msgs"}``.

    Raises:
      ValueError: bad ``ep``, ``tokens_per_gpu``, dtype, routing, rates, ``fabric``.
    """
    model = get_model(model)
    ep = check_ep(model, ep, n_gpus)
    tokens = _check_tokens(tokens_per_gpu)
    _check_fabric(fabric)
    message_bytes(model.hidden, dispatch_dtype, op="dispatch")   # dtype checks first
    message_bytes(model.hidden, combine_dtype, op="combine")
    nvlink_gbps = (units.to_gbps(get_gpu(gpu).nvlink_bandwidth) if nvlink_gbps is None
                   else nvlink_gbps)
    link_gbps = _check_pos(link_gbps, "link_gbps")
    nvlink_gbps = _check_pos(nvlink_gbps, "nvlink_gbps")
    dt = _check_pos(dt, "dt")
    msg_rate = _check_pos(msg_rate, "msg_rate")
    if kernel == "low_latency":
        fixed = dict(DEEPEP_FIXED_US if fixed_us is None else fixed_us)
        counts = ep_message_counts(model, ep=ep, tokens_per_gpu=tokens, routing=routing,
                                   zipf_s=zipf_s, node_limit=node_limit, seed=seed)
    elif kernel == "normal":
        fixed = dict({"dispatch": 0.0, "combine": 0.0} if fixed_us is None else fixed_us)
        counts = ep_normal_counts(model, ep=ep, tokens_per_gpu=tokens, routing=routing,
                                  zipf_s=zipf_s, seed=seed,
                                  node_limit=model.node_limit or None
                                  if node_limit is None else node_limit)
    else:
        raise ValueError(f"kernel: expected 'low_latency' or 'normal'; got {kernel!r}")
    ops = {op: ep_step_flows(model, ep=ep, tokens_per_gpu=tokens, op=op, counts=counts,
                             dtype=dispatch_dtype if op == "dispatch" else combine_dtype)
           for op in ("dispatch", "combine")}
    nic, nvl = units.gbps(link_gbps), units.gbps(nvlink_gbps)
    closed = {op: ep_closed_form(f, nic_rate=nic, nvlink_rate=nvl, msg_rate=msg_rate,
                                 fixed_s=fixed[op] * 1e-6) for op, f in ops.items()}
    # (latency-free here: it sets the horizon; the reported closed form adds it below)
    if n_steps is None:
        slow = max(c["time_s"] - c["fixed_s"] for c in closed.values())
        n_steps = int(math.ceil((4.0 * slow + 40e-6) / dt))
    out = dict(closed_form={}, transfer_s={}, msg_s={}, fixed_s={}, n_steps=int(n_steps),
               dt=dt, ep=ep, tokens_per_gpu=tokens, fabric=_fabric_name(fabric))
    for op, f in ops.items():
        finish, lat = _simulate(f, fabric, link_gbps=link_gbps, nvlink_gbps=nvlink_gbps,
                                dt=dt, n_steps=n_steps, seed=seed)
        if not np.isfinite(finish):
            raise RuntimeError(f"{op}: flows unfinished after {n_steps} steps of {dt} s; "
                               f"give a larger n_steps")
        msg_s = message_rate_time(f, msg_rate)
        t = fixed[op] * 1e-6 + max(finish, msg_s)
        out[f"{op}_s"] = t
        out[f"{op}_us"] = t * 1e6
        out["transfer_s"][op] = finish
        out["msg_s"][op] = msg_s
        out["fixed_s"][op] = fixed[op] * 1e-6
        out["closed_form"][op] = ep_closed_form(f, nic_rate=nic, nvlink_rate=nvl,
                                                msg_rate=msg_rate,
                                                fixed_s=fixed[op] * 1e-6, latency=lat)
        out[f"{op}_bytes"] = float(f.size.sum() + f.self_msgs.sum() * f.msg_bytes)
    out["n_msgs"] = int(counts.sum())
    out["self_msgs"] = int(np.trace(counts))
    return out


def _fabric_name(fabric) -> str:
    return fabric if isinstance(fabric, str) else getattr(fabric, "name", str(fabric))


def ep_sweep(fabric="infiniband", ep_degrees=(8, 16, 32), **kwargs) -> dict:
    """:func:`ep_step_time` at each EP degree: ``{ep: {"dispatch_us", "combine_us",
    "closed_dispatch_us", "closed_combine_us", "published_dispatch_us",
    "published_combine_us"}}`` (published: :data:`DEEPEP_LL_US` where the degree is in
    it, else ``None``; meaningful only for DeepEP's configuration).

    Raises:
      ValueError: an EP degree that is bad (before any simulation).
    """
    model = get_model(kwargs.get("model", "deepseek_v3"))
    degrees = [check_ep(model, e, kwargs.get("n_gpus")) for e in ep_degrees]
    _check_tokens(kwargs.get("tokens_per_gpu", 128))
    _check_fabric(fabric)
    out = {}
    for e in degrees:
        r = ep_step_time(fabric, ep=e, **kwargs)
        pub = DEEPEP_LL_US.get(e, (None, None))
        out[e] = dict(dispatch_us=r["dispatch_us"], combine_us=r["combine_us"],
                      closed_dispatch_us=r["closed_form"]["dispatch"]["time_s"] * 1e6,
                      closed_combine_us=r["closed_form"]["combine"]["time_s"] * 1e6,
                      remote_bytes_share=r["closed_form"]["dispatch"]["remote_bytes_share"],
                      published_dispatch_us=pub[0], published_combine_us=pub[1],
                      dt=r["dt"], n_steps=r["n_steps"])
    return out


def ep_step_table(fabric="infiniband", ep: int = 32, tokens_per_gpu_grid=(16, 32, 64, 128),
                  *, overlap: bool = False, **kwargs):
    """Communication time of one decode step as a function of the tokens per GPU.

    Runs :func:`ep_step_time` at each grid point (one fluid horizon for the whole grid,
    so each operation compiles once: the flows are padded to every GPU pair) and returns
    ``comm_time(tokens_per_gpu, compute_s=0.0) -> seconds``: the dispatch + combine of
    every MoE layer (DeepSeek-V3: 58), linearly interpolated between grid points (below
    the smallest point: its value; above the largest: ValueError).

    ``overlap=True``: DeepSeek's two-micro-batch decode (DeepSeek-V3 report Sec. 3.4.2;
    DeepEP README's receive hook): the step runs as two micro-batches of half the
    tokens, one's dispatch/combine hidden under the other's attention/MoE compute, so a
    layer takes ``max(compute_layer, 2 comm_layer(T / 2))`` and the exposed
    communication per step is ``L max(0, 2 comm_layer(T / 2) - compute_s / L)`` with
    ``compute_s`` the step's compute time over its ``L`` MoE layers.

    Returns:
      the callable, with ``.grid`` (tokens) and ``.layer_s`` (dispatch + combine of one
      layer at each grid point, s) attributes.
    """
    model = get_model(kwargs.get("model", "deepseek_v3"))
    grid = sorted({_check_tokens(t) for t in tokens_per_gpu_grid})
    ep = check_ep(model, ep, kwargs.get("n_gpus"))
    _check_fabric(fabric)
    if overlap:
        # two micro-batches of T/2: the grid must reach the halves
        grid = sorted(set(grid) | {max(t // 2, 1) for t in grid})
    kw = dict(kwargs)
    if kw.get("n_steps") is None:
        big = ep_step_time(IDEAL, ep=ep, tokens_per_gpu=grid[-1], **{
            k: v for k, v in kw.items() if k not in ("n_steps",)})
        slow = max(big["transfer_s"].values())
        kw["n_steps"] = int(math.ceil((4.0 * slow + 40e-6) / kw.get("dt", 0.5e-6)))
    layer = []
    for t in grid:
        r = ep_step_time(fabric, ep=ep, tokens_per_gpu=t, **kw)
        layer.append(r["dispatch_s"] + r["combine_s"])
    layer = np.asarray(layer)
    n_layers = model.moe_layers
    tmax = grid[-1]

    def layer_time(t):
        return float(np.interp(t, grid, layer))

    def comm_time(tokens_per_gpu, compute_s: float = 0.0) -> float:
        if tokens_per_gpu <= 0:
            raise ValueError(f"tokens_per_gpu: must be > 0; got {tokens_per_gpu!r}")
        if tokens_per_gpu > tmax:
            raise ValueError(f"tokens_per_gpu: {tokens_per_gpu} is beyond the table's grid "
                             f"(<= {tmax}); extend tokens_per_gpu_grid")
        if not overlap:
            return n_layers * layer_time(tokens_per_gpu)
        half = max(tokens_per_gpu / 2.0, 1.0)
        return n_layers * max(0.0, 2.0 * layer_time(half) - compute_s / n_layers)

    comm_time.grid = np.asarray(grid)
    comm_time.layer_s = layer
    comm_time.overlap = overlap
    return comm_time
