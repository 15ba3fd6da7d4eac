"""Output of the compare study: the metrics table and the JSON file.

Units: results are SI (bytes, seconds, bytes/s, fractions); the table converts (us,
ms, Gb/s, %) and says so in each row.  JSON keys of a result (one entry per preset, and
``"ideal"`` / ``"ideal_sharp"`` for the per-preset ideals of
:func:`fabric_jax.study.run.run_ideal`, which add ``algorithm``, ``presets`` and
``description``; each preset names its own under ``ideal_column``):

=============================  =====================================================
``effective_bandwidth``        the training step's two collectives (all-to-all, then
                               all-reduce, each over every rail): ideal time on a
                               non-blocking fabric at NIC line rate over actual
                               completion time, pooled
                               (:func:`fabric_jax.metrics.collective_effective_bandwidth`);
                               fraction
``collective_completion_time`` all-reduce completion time (first start to last
                               finish), s
``all_to_all_completion_time`` MoE all-to-all completion time, s
``bus_bandwidth``              all-reduce bus bandwidth (nccl-tests), bytes/s per NIC
``fct_slowdown_p50/_p99``      FCT / ideal FCT of tenant + background flows
``isolation``                  worst job's completion time with neighbours / alone
``pfc_pause_time``             link-seconds paused (PFC) or credit-starved, summed
``gpu_utilization``            compute / step time of the training job, fraction
``training_step_time``         s
``cost_per_million_tokens``    dollars of GPU time (``economics.gpu_price_per_hour``)
``unfinished_flows``           flows not done within ``n_steps`` (0 expected)
``paths_dropped``              equal-cost paths left out by a ``max_paths`` cap
``isolation_train``            training job's completion time with neighbours /
                               alone (``isolation`` is the worse of the two jobs)
``isolation_tenant``           the same for the tenant
``fabric_cost_per_million_``   dollars: the training job's share (its GPUs over all
``tokens``                     NICs) of the fabric's amortised capital and power,
                               from the preset's bill of materials
                               (:func:`fabric_jax.economics.token_costs`; every price
                               an assumption with its source in
                               :data:`fabric_jax.economics.FABRIC_PRICES`); null for
                               ``ideal``
``total_cost_per_million_``    GPUs + fabric, dollars
``tokens``
``fabric_cost_share``          fabric / total cost per token, fraction in [0, 1]
``compute_time``               the training step's compute per GPU, s
``tokens_per_step``            tokens of one training step
``tokens_per_second``          tokens per step / step time
``isolation_per_class``        per traffic class of the port, in class-id order:
                               ``{"class": name, "jobs": [...], "isolation"}``, the
                               worst isolation of the jobs in the class
                               (:func:`fabric_jax.study.run.class_isolation`; a
                               preset without ``class_map`` has one class, ``all``);
                               table rows "Isolation, class k" appear when a preset
                               has several (``compare --classes``)
``mfu``                        model FLOPs utilisation: the model's step FLOPs /
                               (GPUs x peak FLOP/s x step time); null without a
                               model (``--model`` / ``[model]``)
=============================  =====================================================

With a training model the table gains a footer with every input (model, plan, GPU,
compute time, bytes per collective, the time step).
"""

from __future__ import annotations

import math

from ..results import write_results

__all__ = ["METRICS", "OPTIONAL", "format_table", "model_notes", "write_json"]

# (key, label, unit, scale) rows of the table
METRICS = (
    ("effective_bandwidth", "Effective bandwidth", "% line rate", 100.0),
    ("collective_completion_time", "All-reduce completion", "us", 1e6),
    ("all_to_all_completion_time", "All-to-all completion", "us", 1e6),
    ("bus_bandwidth", "All-reduce bus bandwidth", "Gb/s", 8e-9),
    ("fct_slowdown_p50", "FCT slowdown p50", "x", 1.0),
    ("fct_slowdown_p99", "FCT slowdown p99", "x", 1.0),
    ("isolation", "Worst-job isolation", "x alone", 1.0),
    ("pfc_pause_time", "PFC pause / credit stall", "link-us", 1e6),
    ("gpu_utilization", "GPU utilisation", "%", 100.0),
    ("training_step_time", "Training step time", "ms", 1e3),
    ("cost_per_million_tokens", "Cost per million tokens", "$", 1.0),
    ("fabric_cost_per_million_tokens", "Fabric cost per million tokens", "$", 1.0),
    ("total_cost_per_million_tokens", "Total cost per million tokens", "$", 1.0),
    ("fabric_cost_share", "Fabric share of $/token", "%", 100.0),
    ("isolation_train", "Isolation, training job", "x alone", 1.0),
    ("isolation_tenant", "Isolation, tenant", "x alone", 1.0),
    ("mfu", "Model FLOPs utilisation", "%", 100.0),
)

#: Rows left out of the table when no column has a value (e.g. ``mfu`` without a
#: model, per-job isolation with ``simulation.isolation = false``).
OPTIONAL = ("isolation_train", "isolation_tenant", "mfu")


def _fmt(v, scale):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    x = v * scale
    return f"{x:,.0f}" if abs(x) >= 1000 else (f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def format_table(results: dict, notes=()) -> str:
    """The metrics table: rows = metrics (with units), columns = presets (and the
    per-preset ideals, headed ``ideal <algorithm>``, each with a footer line saying what
    it is and which presets it stands for, when present).  A footer line says how many equal-cost
    paths a ``max_paths`` cap dropped, when it dropped any; ``notes`` (lines, e.g.
    :func:`model_notes`) follow it."""
    names = list(results)
    heads = [f"ideal {results[n]['algorithm']}" if isinstance(results[n].get("algorithm"), str)
             else n for n in names]
    rows = [(f"{label} ({unit})", [_fmt(results[n].get(key), scale) for n in names])
            for key, label, unit, scale in METRICS
            if key not in OPTIONAL or not all(_missing(results[n].get(key)) for n in names)]
    classes = [results[n].get("isolation_per_class") or [] for n in names]
    n_cls = max((len(c) for c in classes), default=0)
    if n_cls > 1:
        for k in range(n_cls):
            rows.append((f"Isolation, class {k} (x alone)",
                         [_fmt(c[k]["isolation"], 1.0) if k < len(c) else "n/a"
                          for c in classes]))
    unfinished = [results[n].get("unfinished_flows", 0) for n in names]
    if any(unfinished):
        rows.append(("Unfinished flows (count)", [str(u) for u in unfinished]))
    w0 = max(len(r[0]) for r in rows)
    wc = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(heads)]
    lines = [" " * w0 + "  " + "  ".join(n.rjust(wc[i]) for i, n in enumerate(heads))]
    lines.append("-" * len(lines[0]))
    for label, vals in rows:
        lines.append(label.ljust(w0) + "  " + "  ".join(v.rjust(wc[i]) for i, v in enumerate(vals)))
    dropped = max((int(results[n].get("paths_dropped", 0) or 0) for n in names), default=0)
    if dropped:
        lines.append(f"note: the max_paths cap dropped {dropped} equal-cost paths (summed over "
                     f"flows); set simulation.max_paths = 0 to keep them all")
    if n_cls > 1:
        lines.append("classes: " + "; ".join(
            f"{n} " + ", ".join(f"{k}={c['class']} ({'+'.join(c['jobs']) or '-'})"
                                for k, c in enumerate(cl))
            for n, cl in zip(names, classes) if cl))
    for head, n in zip(heads, names):
        if isinstance(results[n].get("description"), str):
            lines.append(f"{head}: {results[n]['description']}")
    lines.extend(notes)
    return "\n".join(lines)


def model_notes(scn) -> list[str]:
    """Footer lines naming every input of the scenario's training model (empty without
    one): model, parameters, tokens per step, plan, GPU and achievable fraction,
    compute time, bytes of each network collective per GPU, and the time step."""
    if scn.model is None:
        return []
    from ..workloads.model import comm_bytes, step_flops
    m, plan, gpu = scn.model["model"], scn.model["plan"], scn.model["gpu"]
    cb = comm_bytes(m, plan)
    flops = step_flops(m, recompute=plan.recompute)
    mb = plan.n_microbatches(m)
    sim = scn.simulation
    lines = [
        f"model: {m.name} ({m.n_params / 1e9:.2f}B parameters, {m.active_params / 1e9:.2f}B "
        f"active; {m.n_layers} layers, hidden {m.hidden}, seq {m.seq_len}, global batch "
        f"{m.global_batch} = {m.tokens_per_step:,} tokens/step, {m.precision}); "
        f"{flops:.3g} FLOP/step",
        f"plan: tp={plan.tp} pp={plan.pp} dp={plan.dp} ep={plan.ep} micro_batch="
        f"{plan.micro_batch} ({mb} micro-batches), overlap={plan.overlap:g}, recompute="
        f"{plan.recompute}, {plan.n_gpus} x {gpu.name} ({gpu.peak_flops / 1e12:.0f} "
        f"TFLOP/s peak, achievable {plan.achievable_fraction:g})",
        f"per GPU and step: DP all-reduce {cb['dp_allreduce_bytes'] / 1e6:,.1f} MB"
        + (f", expert-DP all-reduce {cb['edp_allreduce_bytes'] / 1e6:,.1f} MB"
           if cb["edp_allreduce_bytes"] else "")
        + (f", EP all-to-all {cb['ep_alltoall_bytes'] * cb['ep_alltoall_count'] / 1e6:,.1f}"
           f" MB" if cb["ep_alltoall_count"] else "")
        + (f", PP sends {cb['pp_bytes_sent'] / 1e6:,.1f} MB" if cb["pp_send_count"] else "")
        + f"; TP over NVLink {cb['tp_bytes_sent'] / 1e9:,.1f} GB (in the compute time)",
        f"simulated: one slice of 1/{scn.model['slices']:,} of the step's network bytes "
        f"(bucketed collectives, k = {scn.model['slices']:,} back-to-back slices) over "
        f"{sim['n_steps']} x {sim['dt_us']:g} us; step time = (1 - overlap) x compute + "
        f"k x the slice's transfer + its latency once, or the compute if longer",
    ]
    return lines


def write_json(results: dict, path, *, command=None, started: float | None = None,
               inputs: dict | None = None) -> None:
    """Writes ``{preset: {metric: value}, "ideal": {...}}`` and the ``"run"`` record
    (:func:`fabric_jax.results.write_results`: atomic, non-finite values as null), with
    ``inputs`` (the resolved scenario, :meth:`Scenario.as_dict`) in it when given."""
    write_results(path, results, command=command, started=started, inputs=inputs)
