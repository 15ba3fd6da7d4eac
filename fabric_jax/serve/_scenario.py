"""The serving scenario: TOML sections, their rules and defaults, and the checks between
keys that refuse a bad deployment before any simulation (:func:`load_scenario`).

Units: the keys carry their unit in their name (``_gbps``, ``_us``, ``_ms``, ``_s``);
:func:`resolve` converts them to bytes, seconds and bytes/s for the core.
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..scenario import (ScenarioError, boolean, check_section, integer, number, one_of,
                        refuse, text)

__all__ = ["RULES", "DEFAULTS", "default_scenario", "load_scenario", "check_scenario"]

#: The rules of every section and key (:mod:`fabric_jax.scenario` validator).
RULES = {
    "model": {
        "name": text(default="deepseek_v3", fix="one of fabric_jax.workloads.model.MODELS"),
        "weight_bytes": number(0, 4, lo_open=True, default=1.0, unit="bytes/param",
                               fix="1 for FP8 weights (DeepSeek-V3's released "
                                   "checkpoint), 2 for BF16"),
        "kv_bytes": integer(1, 4, default=2, unit="bytes/element",
                            fix="2 for a BF16 KV cache"),
    },
    "gpu": {"name": text(default="h100_sxm", fix="one of fabric_jax.workloads.model.GPUS")},
    "prefill": {
        "servers": integer(1, 4096, default=4, fix="prefill servers (8 GPUs each)"),
        "instance_servers": integer(1, 512, default=1,
                                    fix="servers per prefill instance; must divide "
                                        "prefill.servers"),
        "achievable_fraction": number(0, 1, lo_open=True, default=0.5,
                                      fix="share of peak FLOP/s prefill reaches"),
    },
    "decode": {
        "servers": integer(1, 4096, default=4, fix="decode servers (8 GPUs each)"),
        "instance_servers": integer(1, 512, default=4,
                                    fix="servers per decode instance (EP degree = 8 x "
                                        "this with DP attention); must divide "
                                        "decode.servers"),
        "ep": integer(1, 4096, default=32, fix="expert-parallel degree of a decode "
                                               "instance: 8 x decode.instance_servers"),
        "max_batch": integer(1, 65536, default=64,
                             fix="requests per decode GPU (DP attention) or per server "
                                 "(TP) in one step"),
        "bandwidth_fraction": number(0, 1, lo_open=True, default=0.7,
                                     fix="share of HBM bandwidth a decode step reaches"),
        "memory_fraction": number(0, 1, lo_open=True, default=0.9,
                                  fix="share of HBM usable for weights + KV cache"),
        "ep_comm": one_of(("fluid", "none"), default="fluid",
                          fix="fluid: every decode step pays the wide-EP dispatch + "
                              "combine of each MoE layer, simulated per preset "
                              "(fabric_jax.serve.ep_step_table); none: no per-step "
                              "communication"),
        "overlap": boolean(default=False,
                           fix="true: two micro-batches hide one's dispatch / combine "
                               "under the other's compute (DeepSeek-V3 report Sec. "
                               "3.4.2)"),
    },
    "parallel": {
        "attention": one_of(("auto", "dp", "tp"), default="auto",
                            fix="dp: each request's attention on one GPU (DeepSeek-V3 "
                                "MoE); tp: tensor parallel over a server's 8 GPUs"),
    },
    "requests": {
        "n": integer(1, 100000, default=200, fix="requests to simulate"),
        "rate": number(0, 1e6, lo_open=True, default=70.0, unit="req/s",
                       fix="Poisson arrival rate > 0"),
        "prompt_tokens": integer(1, 10**6, default=2048, fix="prompt length > 0"),
        "output_tokens": integer(1, 10**6, default=256, fix="output length > 0"),
        "prompt_jitter": number(0, 1, hi_open=True, default=0.5,
                                fix="relative half-width of the uniform prompt length"),
        "output_jitter": number(0, 1, hi_open=True, default=0.5,
                                fix="relative half-width of the uniform output length"),
        "trace": text(default="", fix="a CSV with arrival_s, prompt_tokens, "
                                      "output_tokens columns"),
    },
    "kv": {
        "mode": one_of(("layerwise", "whole"), default="layerwise"),
        "chunks": integer(1, 1000, default=4,
                          fix="layer groups streamed as prefill finishes them, 1 .. "
                              "layers (layers: layer-exact)"),
    },
    "slo": {
        "ttft_ms": number(0, 1e7, lo_open=True, default=1000.0, unit="ms",
                          fix="a time-to-first-token bound > 0"),
        "tpot_ms": number(0, 1e7, lo_open=True, default=50.0, unit="ms",
                          fix="a time-per-output-token bound > 0"),
    },
    "network": {
        "link_gbps": number(0, 1e5, lo_open=True, default=400.0, unit="Gb/s"),
        "servers_per_leaf": integer(1, 4096, default=4,
                                    fix="servers per rail-leaf group; must divide the "
                                        "servers (prefill + decode)"),
        "max_paths": integer(1, 256, default=8),
    },
    "training": {
        "servers": integer(2, 4096, default=8,
                           fix="servers of the training job beside serving "
                               "(--with-training), 8 GPUs each"),
        "all_reduce_mb": number(0, 1e6, lo_open=True, default=32.0, unit="MB per GPU",
                                fix="the all-reduce of one training step (compare's "
                                    "workload.all_reduce_mb)"),
        "compute_us": number(0, 1e7, default=1000.0, unit="us",
                             fix="compute before each step's all-reduce"),
        "requests": integer(1, 100000, default=16,
                            fix="requests of the beside-training run (the first ones of "
                                "the stream; each busy period is a window of training "
                                "steps in the fluid engine)"),
        "placement": one_of(("interleaved", "separate"), default="interleaved",
                            fix="interleaved: both jobs under every leaf; separate: "
                                "serving servers first"),
    },
    "simulation": {
        "dt_us": number(0, 1000, lo_open=True, default=2.0, unit="us"),
        "seed": integer(0, 2**31 - 1, default=0),
        "margin_us": number(0, 1e6, default=50.0, unit="us",
                            fix="gap that separates two busy periods of the KV flows"),
        "batch": integer(1, 4096, default=64,
                         fix="busy periods per compiled fluid batch"),
        "ep_dt_us": number(0, 100, lo_open=True, default=0.5, unit="us",
                           fix="fluid step of the decode all-to-all (100-300 us "
                               "operations: 0.5 us moves them < 0.4 % when halved)"),
    },
}

#: The built-in scenario: DeepSeek-V3 (FP8 weights, BF16 MLA cache) on H100 servers,
#: 4 prefill + 4 decode servers (64 GPUs), decode one EP-32 instance with DP attention.
DEFAULTS = {sec: {k: r.default for k, r in keys.items()} for sec, keys in RULES.items()}


def default_scenario() -> dict:
    """A copy of :data:`DEFAULTS` (every section, every key)."""
    return copy.deepcopy(DEFAULTS)


def load_scenario(scenario=None, *, overrides: dict | None = None) -> dict:
    """A serving scenario, checked: ``None`` (the built-in one), a dict of sections, or
    a TOML file path; ``overrides`` (``{"requests.rate": 20}``) applied last.

    Raises:
      ScenarioError (a ValueError): an unknown section or key, a bad value, or a check
      between keys (:func:`check_scenario`), naming the key and the fix.
    """
    if scenario is None:
        body = {}
    elif isinstance(scenario, (str, Path)):
        import tomllib
        path = Path(scenario)
        if not path.is_file():
            raise ScenarioError("--scenario", f"no such file {str(path)!r}",
                                fix="give a TOML serving scenario")
        try:
            body = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise ScenarioError("--scenario", f"{path}: not valid TOML ({err})") from None
    elif isinstance(scenario, dict):
        body = copy.deepcopy(scenario)
    else:
        raise ScenarioError("scenario", f"expected None, a dict or a TOML path; got "
                            f"{type(scenario).__name__}")
    out = default_scenario()
    for sec, table in body.items():
        if sec not in RULES:
            raise ScenarioError(sec, f"unknown section; accepted: {sorted(RULES)}")
        out[sec].update(check_section(sec, RULES[sec], table))
    for key, val in (overrides or {}).items():
        sec, name = key.split(".", 1)
        out[sec].update(check_section(sec, RULES[sec], {name: val}))
    check_scenario(out)
    return out


def check_scenario(scn: dict) -> None:
    """The checks between keys (issue 49's bad-input list), before any simulation.

    Raises:
      ScenarioError: naming the key and the fix.
    """
    from ..workloads.model import GPUS, MODELS, kv_cache_bytes
    name = scn["model"]["name"]
    if name not in MODELS:
        raise refuse("model.name", f"unknown model {name!r}",
                     fix=f"one of {sorted(MODELS)}")
    if scn["gpu"]["name"] not in GPUS:
        raise refuse("gpu.name", f"unknown GPU {scn['gpu']['name']!r}",
                     fix=f"one of {sorted(GPUS)}")
    model = MODELS[name]
    att = attention_mode(scn)
    pf, dc = scn["prefill"], scn["decode"]
    for pool, sec in (("prefill", pf), ("decode", dc)):
        if sec["servers"] % sec["instance_servers"]:
            raise refuse(f"{pool}.instance_servers",
                         f"{sec['instance_servers']} does not divide {pool}.servers = "
                         f"{sec['servers']}", fix="whole instances per pool")
        if att == "tp" and sec["instance_servers"] != 1:
            raise refuse(f"{pool}.instance_servers", "must be 1 with tensor-parallel "
                         "attention (one TP-8 instance per server)",
                         fix="set 1, or parallel.attention = 'dp' for an MoE model")
    if att == "dp":
        if model.n_experts == 1:
            raise refuse("parallel.attention", f"'dp' needs an MoE model; {name} is dense",
                         fix="use 'tp' (or 'auto')")
        ep = dc["ep"]
        if ep != 8 * dc["instance_servers"]:
            raise refuse("decode.ep", f"{ep} is not the decode instance's GPUs "
                         f"(8 x decode.instance_servers = {8 * dc['instance_servers']})",
                         fix="set decode.ep = 8 x decode.instance_servers")
        if model.n_experts % ep:
            raise refuse("decode.ep", f"{ep} does not divide the {model.n_experts} "
                         f"experts of {name}", fix="an EP degree that divides the experts")
        if (8 * dc["servers"]) % ep:
            raise refuse("decode.ep", f"{ep} does not divide the {8 * dc['servers']} "
                         "decode GPUs", fix="whole EP groups in the decode pool")
    kv = scn["kv"]
    if kv["mode"] == "layerwise" and kv["chunks"] > model.n_layers:
        raise refuse("kv.chunks", f"{kv['chunks']} chunks for {model.n_layers} layers",
                     fix=f"at most {model.n_layers} (layer-exact)")
    net = scn["network"]
    n_servers = pf["servers"] + dc["servers"]
    if n_servers % net["servers_per_leaf"]:
        raise refuse("network.servers_per_leaf",
                     f"{net['servers_per_leaf']} does not divide the {n_servers} servers "
                     "(prefill.servers + decode.servers)",
                     fix="pools that fill whole rail-leaf groups")
    if net["servers_per_leaf"] * 8 > 1024:
        raise refuse("network.servers_per_leaf", "more ports than one leaf has",
                     fix="at most 128 servers per leaf group")
    req = scn["requests"]
    if req["trace"]:
        if not Path(req["trace"]).is_file():
            raise refuse("requests.trace", f"no such file {req['trace']!r}",
                         fix="a CSV with arrival_s, prompt_tokens, output_tokens")
    # memory: weights, then the KV cache at the stated batch
    mem = decode_memory(scn)
    if mem["kv_capacity"] <= 0:
        raise refuse("decode.ep" if att == "dp" else "model.name",
                     f"the weights ({mem['weights'] / 1e9:.1f} GB per "
                     f"{'GPU' if att == 'dp' else 'server'}) leave no HBM for the KV "
                     "cache", fix="a larger EP degree (more decode GPUs per instance), "
                     "FP8 weights or a larger GPU")
    per_req = kv_cache_bytes(model, req["prompt_tokens"] + req["output_tokens"],
                             bytes_per_element=scn["model"]["kv_bytes"])
    need = dc["max_batch"] * per_req
    if need > mem["kv_capacity"]:
        raise refuse("decode.max_batch",
                     f"{dc['max_batch']} requests of {req['prompt_tokens']} + "
                     f"{req['output_tokens']} tokens need {need / 1e9:.1f} GB of KV cache; "
                     f"{mem['kv_capacity'] / 1e9:.1f} GB are left per "
                     f"{'GPU' if att == 'dp' else 'server'} after the weights",
                     fix=f"decode.max_batch <= {int(mem['kv_capacity'] // per_req)}")


def attention_mode(scn: dict) -> str:
    """``"dp"`` (an MoE model's attention data-parallel, one GPU per request, experts EP
    over the instance) or ``"tp"`` (tensor-parallel over a server); ``auto``: ``dp`` for
    MoE models, ``tp`` for dense."""
    from ..workloads.model import MODELS
    att = scn["parallel"]["attention"]
    if att == "auto":
        return "tp" if MODELS[scn["model"]["name"]].n_experts == 1 else "dp"
    return att


def decode_memory(scn: dict) -> dict:
    """Per decode unit (a GPU under DP attention, a server under TP): resident weight
    bytes, HBM bytes usable, and what is left for the KV cache (bytes)."""
    from ..workloads.model import GPUS, MODELS
    model, gpu = MODELS[scn["model"]["name"]], GPUS[scn["gpu"]["name"]]
    wb = scn["model"]["weight_bytes"]
    if attention_mode(scn) == "dp":
        weights = wb * (model.dense_params + model.moe_params / scn["decode"]["ep"])
        hbm = gpu.hbm_bytes
    else:
        weights = wb * model.n_params
        hbm = 8 * gpu.hbm_bytes
    usable = scn["decode"]["memory_fraction"] * hbm
    return dict(weights=float(weights), usable=float(usable),
                kv_capacity=float(usable - weights))
