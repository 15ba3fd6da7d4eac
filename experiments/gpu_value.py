"""GPU utilisation, tokens/s and cost per token of a model's training, per fabric preset.

Units: bytes, seconds, bytes/s inside; JSON values are SI except keys ending in
``_hours`` (GPU-hours), ``_dollars`` and ``_per_million_tokens`` (dollars).

Model of a training run (:mod:`fabric_jax.workloads.model`): a named transformer
(``--model``, e.g. ``llama3_70b``; ``--global-batch`` / ``--seq-len`` override the
paper's values) under a parallelism plan (``--tp --pp --dp --ep --micro-batch``) on
``--gpu`` GPUs, 8 per server, one 400G NIC per GPU.  The model gives each step's
compute time (FLOPs at ``--achievable-fraction`` of the datasheet peak, 1F1B pipeline
bubble, tensor-parallel all-reduces over NVLink) and its network traffic: the
data-parallel gradient all-reduce (SHARP under ``infiniband``), pipeline sends and MoE
all-to-all, with ``--overlap`` of the compute available to hide communication.

Simulation.  ``--n-steps`` consecutive steps of the job run on a rail-optimised fabric
(``--servers-per-leaf`` servers per rail leaf, non-blocking spines) under each preset's
routing, with the exact event-driven max-min engine (``experiments/_econ.py``).  Step
times come from the flows' finish times (:class:`fabric_jax.workloads.StepSpec`), and
from them: GPU utilisation (busy time / step time), MFU (model FLOPs / (GPUs x peak x
step time)), tokens/s, and cost per token with the fabric's bill of materials,
amortisation and power next to the GPUs' price (:mod:`fabric_jax.economics`).

Reported per fabric (JSON ``fabrics.<preset>``): ``step_time``, ``compute_time``,
``exposed_comm_time``, ``gpu_utilization``, ``mfu``, ``tokens_per_second``,
``cost_per_million_tokens`` and its parts (``gpu_cost_per_million_tokens``,
``fabric_capex_per_million_tokens``, ``fabric_power_per_million_tokens``),
``fabric_cost_share``, ``gpu_hours_lost_to_communication`` and
``dollars_lost_to_communication`` over ``--train-tokens``, ``dollars_lost_vs_best``,
``bom`` (switches, NICs, transceivers, capex, power).  Every input is under ``inputs``.

Usage::

    python experiments/gpu_value.py --quick
    python experiments/gpu_value.py --model llama3_70b --tp 8 --pp 2 --dp 16 --json gv.json
    python experiments/gpu_value.py --model mixtral_8x7b --tp 2 --dp 64 --ep 8
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm
from experiments._econ import simulate_workload

import fabric_jax as fj  # noqa: E402
from fabric_jax import economics as econ  # noqa: E402
from fabric_jax.fabrics import PRESETS  # noqa: E402
from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.workloads.model import GPUS, MODELS, ParallelPlan, get_model  # noqa: E402
from fabric_jax.workloads.training import model_training_step  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

HOUR = 3600.0


def run_fabric(model, plan, gpu, topo, name, *, n_steps, params, seed, max_paths):
    """Simulate ``n_steps`` steps under preset ``name``; returns the per-fabric record."""
    fabric = fj.get_fabric(name)
    ms = model_training_step(model, plan, gpu, hosts=np.arange(plan.n_gpus),
                             host_server=topo.host_server, n_steps=n_steps,
                             sharp=fabric.sharp)
    if ms.workload is None:
        finish = None
        steps = np.full(n_steps, ms.compute_time)
    else:
        finish = simulate_workload(topo, ms.workload, fabric, max_paths=max_paths, seed=seed)
        steps = ms.step_times(finish)
    step = float(steps.mean())
    rep = econ.cost_per_token_report(step, model, plan, topo, name, params=params, gpu=gpu)
    rep.update(step_times=steps, step_time=step, compute_time=ms.compute_time,
               exposed_comm_time=step - ms.compute_time,
               gpu_utilization=ms.compute_time / step,
               network_bytes_per_step=ms.info.get("network_bytes_per_step", 0.0),
               n_flows=0 if ms.workload is None else ms.workload.n_flows)
    return rep, ms.info


def plot(fabrics: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(fabrics)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].bar(names, [100 * fabrics[n]["gpu_utilization"] for n in names],
                color=[f"C{i}" for i in range(len(names))])
    axes[0].set_ylabel("GPU utilisation, %")
    parts = [("gpu_cost_per_million_tokens", "GPUs"),
             ("fabric_capex_per_million_tokens", "fabric capex"),
             ("fabric_power_per_million_tokens", "fabric power")]
    bottom = np.zeros(len(names))
    for key, label in parts:
        vals = np.array([fabrics[n][key] for n in names])
        axes[1].bar(names, vals, bottom=bottom, label=label)
        bottom += vals
    axes[1].set_ylabel("$ per million tokens")
    axes[1].legend()
    for ax in axes:
        ax.tick_params(axis="x", rotation=20)
    return [save_figure(fig, out / "gpu_value.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--model", default="llama3_70b", choices=sorted(MODELS))
    ap.add_argument("--gpu", default="h100_sxm", choices=sorted(GPUS))
    ap.add_argument("--global-batch", type=int, default=None,
                    help="sequences per step (default: 128; --quick 32)")
    ap.add_argument("--seq-len", type=int, default=None, help="default: the model's")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=None, help="default 2 (--quick 1)")
    ap.add_argument("--dp", type=int, default=None, help="default 16 (--quick 4)")
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--overlap", type=float, default=0.0,
                    help="fraction of the compute that communication may overlap")
    ap.add_argument("--achievable-fraction", type=float, default=0.5,
                    help="fraction of peak FLOP/s the kernels reach (assumption)")
    ap.add_argument("--n-steps", type=int, default=2)
    ap.add_argument("--servers-per-leaf", type=int, default=None,
                    help="servers per rail leaf (default: half the servers)")
    ap.add_argument("--max-paths", type=int, default=8)
    ap.add_argument("--gpu-price-per-hour", type=float, default=2.5, help="dollars")
    ap.add_argument("--lifetime-years", type=float, default=5.0)
    ap.add_argument("--power-price-per-kwh", type=float, default=0.08)
    ap.add_argument("--pue", type=float, default=1.3)
    ap.add_argument("--train-tokens", type=float, default=1e12, help="tokens of the run")
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    a = ap.parse_args(argv)
    cm.check_positive(ap, tp=a.tp, ep=a.ep, micro_batch=a.micro_batch, n_steps=a.n_steps,
                      train_tokens=a.train_tokens, max_paths=a.max_paths)
    batch = a.global_batch or (32 if a.quick else 128)
    pp = a.pp or (1 if a.quick else 2)
    dp = a.dp or (4 if a.quick else 16)
    try:
        base = get_model(a.model)
        model = base.replace(global_batch=batch, seq_len=a.seq_len or base.seq_len)
        plan = ParallelPlan(tp=a.tp, pp=pp, dp=dp, ep=a.ep, micro_batch=a.micro_batch,
                            overlap=a.overlap, achievable_fraction=a.achievable_fraction)
        plan.check(model)
        params = econ.EconomicsParams(gpu_price_per_hour=a.gpu_price_per_hour,
                                      lifetime_years=a.lifetime_years,
                                      power_price_per_kwh=a.power_price_per_kwh, pue=a.pue)
    except ValueError as e:
        ap.error(str(e))
    n_servers = -(-plan.n_gpus // plan.gpus_per_server)
    if n_servers < 2:
        ap.error("tp*pp*dp must span at least 2 servers of 8 GPUs")
    spl = a.servers_per_leaf or max(n_servers // 2, 1)
    topo = fj.rail_optimized(n_servers, plan.gpus_per_server, servers_per_leaf=spl)
    gpu = GPUS[a.gpu]
    fabrics, info = {}, None
    bar = Progress(len(a.fabrics), label="gpu_value")
    for name in a.fabrics:
        fabrics[name], info = run_fabric(model, plan, gpu, topo, name, n_steps=a.n_steps,
                                         params=params, seed=a.seed, max_paths=a.max_paths)
        bar.update(name)
    steps_run = a.train_tokens / model.tokens_per_step
    for v in fabrics.values():
        exposed = max(v["exposed_comm_time"], 0.0)
        v["gpu_hours_lost_to_communication"] = plan.n_gpus * steps_run * exposed / HOUR
        v["dollars_lost_to_communication"] = (v["gpu_hours_lost_to_communication"]
                                              * params.gpu_price_per_hour)
    best = min(v["dollars_lost_to_communication"] for v in fabrics.values())
    for v in fabrics.values():
        v["dollars_lost_vs_best"] = v["dollars_lost_to_communication"] - best
    inputs = dict(model=dataclasses.asdict(model), plan=dataclasses.asdict(plan),
                  gpu=dataclasses.asdict(gpu), economics=dataclasses.asdict(params),
                  topology=topo.name, servers_per_leaf=spl, n_steps=a.n_steps,
                  train_tokens=a.train_tokens, seed=a.seed, max_paths=a.max_paths,
                  engine="simulate_flows (event-driven max-min)")
    results = dict(inputs=inputs, workload=info, fabrics=fabrics)
    print("inputs: " + ", ".join(f"{k}={v}" for k, v in dict(
        model=model.name, params=f"{model.n_params / 1e9:.1f}B", layers=model.n_layers,
        hidden=model.hidden, seq_len=model.seq_len, global_batch=model.global_batch,
        precision=model.precision, gpu=gpu.name, peak_tflops=gpu.peak_flops / 1e12,
        achievable_fraction=plan.achievable_fraction, tp=plan.tp, pp=plan.pp, dp=plan.dp,
        ep=plan.ep, micro_batch=plan.micro_batch, overlap=plan.overlap,
        gpu_price_per_hour=params.gpu_price_per_hour, lifetime_years=params.lifetime_years,
        power_price_per_kwh=params.power_price_per_kwh, pue=params.pue,
        topology=topo.name).items()))
    print(f"per step: {info['step_flops']:.3g} FLOPs, compute {info['compute_time']:.3f} s "
          f"(math {info['math_time']:.3f} s, bubble {info['pipeline_bubble_fraction']:.3f}, "
          f"TP/NVLink {info['tp_nvlink_time']:.3f} s), network "
          f"{info.get('network_bytes_per_step', 0) / 1e9:.3g} GB")
    rows = [dict(fabric=n, step_s=v["step_time"], exposed_ms=1e3 * v["exposed_comm_time"],
                 gpu_util_pct=100 * v["gpu_utilization"], mfu_pct=100 * v["mfu"],
                 ktok_per_s=v["tokens_per_second"] / 1e3,
                 usd_per_Mtok=v["cost_per_million_tokens"],
                 fabric_share_pct=100 * v["fabric_cost_share"],
                 switches=v["bom"]["switches"], usd_lost_k=v["dollars_lost_to_communication"]
                 / 1e3) for n, v in fabrics.items()]
    title = (f"{model.name} on {plan.n_gpus} x {gpu.name}, tp{plan.tp} pp{plan.pp} "
             f"dp{plan.dp} ep{plan.ep}; {a.train_tokens:.3g} training tokens")
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(fabrics, out)
    return cm.finish(results, a, rows, list(rows[0]), title, started=started)


if __name__ == "__main__":
    main()
