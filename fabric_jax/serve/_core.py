"""``serve``: a disaggregated serving deployment on each preset and the ideal fabric.

Pipeline (each stage's model in its module): requests (:mod:`._requests`) -> prefill
pool FIFO (:func:`._pools.schedule_prefill`) -> KV-cache flows streamed layer by layer
(:func:`._pools.kv_flows`) -> the fabric: busy periods through the fluid engine with the
preset's dynamics, or the ideal fabric (:mod:`._fabric`) -> each request's cache arrival
= the latest finish of its flows -> decode pool with continuous batching and KV memory
limits (:func:`._pools.run_decode`) -> metrics (:func:`metrics`).

Metrics, per preset and ``ideal``:

* ``ttft``: arrival -> first output token (the first decode step after the whole cache
  arrived), ``p50`` / ``p90`` / ``p99`` / ``mean`` over served requests, seconds;
* ``tpot``: per request ``(last token - first token) / (output tokens - 1)`` (requests
  of one token have none), percentiles over served requests, seconds;
* ``slo_attainment``: share of *arrived* requests served with TTFT <= ``slo.ttft_ms``
  and TPOT <= ``slo.tpot_ms`` (defaults 1 s and 50 ms, our assumption: TPOT 50 ms is 20
  tokens/s per user, a reading speed; DistServe (Zhong et al., OSDI 2024, Table 1) uses
  TTFT 0.25-4 s and TPOT 0.1-0.2 s for its chatbot workloads on smaller models);
* ``goodput_per_gpu``: output tokens of SLO-meeting requests / run time (first arrival
  to last token) / serving GPUs (prefill + decode), tokens/s/GPU (DistServe's goodput,
  in tokens);
* ``usd_per_mtok``: :func:`fabric_jax.economics.token_costs` of the serving GPUs for the
  run time over every output token served (GPU rental, the GPUs' share of the fabric's
  capital and power); the ideal fabric is priced as ``roce`` (it has no bill of
  materials);
* ``kv``: ``exposed`` (cache arrival - prefill end: what the transfer adds to TTFT),
  ``line_rate_exposed`` (the same for one request alone at line rate: the last chunk's
  bytes / line rate), and ``transfer`` (last finish - first release of a request's flows)
  percentiles, seconds;
* ``requests``: ``arrived``, ``served``, ``queued`` (not done at ``simulation``'s end:
  never, unless a horizon is set), ``dropped`` with ``reasons`` (``kv_unfinished``: a
  flow not finished within its busy period's horizon; ``kv_exceeds_memory``: one
  request's cache larger than a decode unit's free HBM); ``arrived == served + queued +
  dropped``.

Units: bytes, seconds inside; ms only in :func:`format_table`.
"""

from __future__ import annotations

import time

import numpy as np

from ..fabrics import PRESETS
from ._fabric import plan_periods, simulate_ideal_flows, simulate_preset
from ._pools import deployment, kv_flows, run_decode, schedule_prefill
from ._requests import make_requests
from ._scenario import load_scenario

__all__ = ["serve", "rate_sweep", "metrics", "build_run", "IDEAL"]

IDEAL = "ideal"
QS = (0.5, 0.9, 0.99)
#: The goodput knee: the lowest rate reaching this share of the sweep's highest goodput.
KNEE_SHARE = 0.95
#: The SLO knee: the highest rate whose SLO attainment is at least this.
SLO_KNEE = 0.9


def _pct(x) -> dict:
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {f"p{int(round(100 * q))}": None for q in QS} | {"mean": None}
    out = {f"p{int(round(100 * q))}": float(np.quantile(x, q)) for q in QS}
    out["mean"] = float(x.mean())
    return out


def _topology(scn):
    from ..topology import rail_optimized
    n = scn["prefill"]["servers"] + scn["decode"]["servers"]
    return rail_optimized(n, 8, servers_per_leaf=scn["network"]["servers_per_leaf"],
                             link_gbps=scn["network"]["link_gbps"])


def build_run(scn: dict) -> dict:
    """The host-side part of a run, shared by every fabric: requests, prefill, flows."""
    dep = deployment(scn)
    arrival, prompt, output = make_requests(scn["requests"], scn["simulation"]["seed"])
    pf_start, pf_end, inst, src = schedule_prefill(dep, arrival, prompt)
    flows = kv_flows(dep, prompt, pf_start, pf_end, src)
    topo = _topology(scn)
    line = scn["network"]["link_gbps"] * 1e9 / 8.0
    return dict(dep=dep, arrival=arrival, prompt=prompt, output=output, pf_start=pf_start,
                pf_end=pf_end, flows=flows, topology=topo, line_rate=line)


def metrics(run: dict, sim: dict, scn: dict, fabric_name: str, *, comm_time=None) -> dict:
    """Decode and the metrics (module docstring) from the flows' finish times."""
    from ..economics import token_costs
    dep, flows = run["dep"], run["flows"]
    n = run["arrival"].size
    finish = sim["finish"]
    ready = np.full(n, -np.inf)
    np.maximum.at(ready, flows.request, finish)
    first_rel = np.full(n, np.inf)
    np.minimum.at(first_rel, flows.request, flows.release)
    reasons = {}
    unfinished = ~np.isfinite(ready)
    if unfinished.any():
        reasons["kv_unfinished"] = int(unfinished.sum())
    need = dep.kv_bytes_per_token * (run["prompt"] + run["output"]).astype(float)
    too_big = (need > dep.kv_capacity) & ~unfinished
    if too_big.any():
        reasons["kv_exceeds_memory"] = int(too_big.sum())
    ready_ok = np.where(unfinished | too_big, np.inf, ready)
    dec = run_decode(dep, ready_ok, run["prompt"], run["output"], flows.decode_unit,
                     comm_time=comm_time)
    served = dec["tokens"] == run["output"]
    queued = ~served & np.isfinite(ready_ok)
    dropped = int((unfinished | too_big).sum())
    ttft = dec["first"] - run["arrival"]
    out = run["output"].astype(float)
    tpot = np.where(out > 1, (dec["last"] - dec["first"]) / np.maximum(out - 1, 1), np.nan)
    s = scn["slo"]
    ok = served & (ttft <= s["ttft_ms"] * 1e-3) & (np.nan_to_num(tpot) <= s["tpot_ms"] * 1e-3)
    t_end = float(np.nanmax(dec["last"])) if served.any() else float(run["arrival"][-1])
    span = t_end - float(run["arrival"][0])
    n_gpus = dep.n_gpus
    tokens = float(out[served].sum())
    good = float(out[ok].sum()) / span / n_gpus if span > 0 else 0.0
    usd = None
    if tokens > 0 and span > 0:
        price_as = "roce" if fabric_name == IDEAL else fabric_name
        usd = token_costs(span, tokens, n_gpus, run["topology"],
                          price_as)["cost_per_million_tokens"]
    last_bytes = np.zeros(n)
    is_last = flows.chunk == dep.kv_chunks - 1
    np.maximum.at(last_bytes, flows.request[is_last], flows.size[is_last])
    exposed = ready - run["pf_end"]
    return dict(
        ttft=_pct(ttft[served]), tpot=_pct(tpot[served]),
        slo_attainment=float(ok.sum()) / n,
        goodput_per_gpu=good, usd_per_mtok=usd,
        throughput_per_gpu=tokens / span / n_gpus if span > 0 else 0.0,
        kv=dict(exposed=_pct(exposed[np.isfinite(exposed)]),
                line_rate_exposed=_pct(last_bytes / run["line_rate"]),
                transfer=_pct((ready - first_rel)[np.isfinite(ready)])),
        requests=dict(arrived=int(n), served=int(served.sum()), queued=int(queued.sum()),
                      dropped=dropped, reasons=reasons),
        decode=dict(steps=int(dec["steps"]), batch_mean=float(dec["batch_mean"]),
                    waited_for_memory=dec["mem_waits"]),
        fabric=dict((k, v) for k, v in sim.items()
                    if k not in ("finish", "delivered")),
        run_time_s=span,
        _ttft=ttft[served], _tpot=tpot[served])


def decode_comm_tables(scn: dict, dep, names) -> dict | None:
    """Per fabric, the decode step's wide-EP communication (``decode.ep_comm = "fluid"``
    under DP attention): :func:`fabric_jax.serve.ep_step_table` of the decode instance's
    EP degree over a grid of tokens per GPU up to ``decode.max_batch`` (powers of two from
    8 and the cap; a batch below 8 tokens per GPU pays the 8-token figure, where the
    operations' fixed cost dominates), on the scenario's GPU and NIC line rate, at
    ``simulation.ep_dt_us``, with
    ``decode.overlap``; ``None`` under TP attention or ``ep_comm = "none"`` (the tensor-
    parallel all-reduces of a TP decode stay on NVLink and are not modelled)."""
    from ._ep import ep_step_table
    if dep.attention != "dp" or scn["decode"]["ep_comm"] == "none":
        return None
    cap = int(scn["decode"]["max_batch"])
    grid = sorted({1 << k for k in range(3, cap.bit_length()) if (1 << k) <= cap} | {cap})
    out = {}
    for name in names:
        f = ep_step_table(name, ep=8 * dep.decode_inst, tokens_per_gpu_grid=grid,
                          overlap=bool(scn["decode"]["overlap"]), model=dep.model.name,
                          gpu=dep.gpu.name, link_gbps=scn["network"]["link_gbps"],
                          dt=scn["simulation"]["ep_dt_us"] * 1e-6,
                          seed=scn["simulation"]["seed"])
        f.takes_compute = True
        out[name] = f
    return out


def serve(scenario=None, *, fabrics=tuple(PRESETS), ideal: bool = True,
          progress: bool = True, comm_time=None, overrides: dict | None = None,
          keep_samples: bool = False) -> dict:
    """Simulate a disaggregated serving deployment on each preset and the ideal fabric.

    Args:
      scenario: ``None`` (the built-in DeepSeek-V3 scenario), a dict of sections or a
        TOML path (:func:`fabric_jax.serve.load_scenario`).
      fabrics: preset names.
      ideal: add the ideal fabric (key ``"ideal"``).
      progress: a progress bar with an estimate on stderr.
      comm_time: per-step decode communication, ``tokens_per_gpu -> seconds``, or a dict
        ``{fabric name: callable}``; default :func:`decode_comm_tables` (the wide-EP
        dispatch / combine of every MoE layer, simulated per preset and on the ideal
        fabric; none under TP attention or ``decode.ep_comm = "none"``).
      overrides: ``{"section.key": value}`` applied to the scenario.
      keep_samples: keep the per-request TTFT / TPOT arrays (``ttft_samples``,
        ``tpot_samples``, seconds) for CDFs.

    Returns:
      JSON-ready dict: ``scenario`` (every key, resolved), ``deployment`` (derived
      constants), ``fabrics`` ({name: metrics, module docstring}), ``wall_s``.

    Raises:
      ValueError (:class:`fabric_jax.scenario.ScenarioError`): a bad scenario key, an
      unknown preset, before any simulation.
    """
    from ..study.progress import Progress
    from ..scenario import refuse
    started = time.time()
    scn = load_scenario(scenario, overrides=overrides)
    fabrics = list(fabrics)
    for f in fabrics:
        if f not in PRESETS:
            raise refuse("--fabrics", f"unknown preset {f!r}", fix=f"among {list(PRESETS)}")
    run = build_run(scn)
    sim_cfg = scn["simulation"]
    dt = sim_cfg["dt_us"] * 1e-6
    margin = sim_cfg["margin_us"] * 1e-6
    plan = plan_periods(run["flows"], run["line_rate"], dt, margin)
    auto = comm_time is None
    tables = {}

    def comm_for(name):
        if not auto:
            return comm_time.get(name) if isinstance(comm_time, dict) else comm_time
        if name not in tables:
            t = decode_comm_tables(scn, run["dep"], [name])
            tables[name] = None if t is None else t[name]
            bar.update(f"{name}: decode all-to-all", plan.start.size / 4)
        return tables[name]

    total = (len(fabrics) + (1 if ideal else 0)) * (1.25 * plan.start.size + 1)
    bar = Progress(total, enabled=progress, label="serve",
                   estimate_s=40.0 * len(fabrics) + 20.0)
    out = {}
    for name in fabrics:
        ct = comm_for(name)
        sim = simulate_preset(run["topology"], run["flows"], name, line_rate=run["line_rate"],
                              dt=dt, margin=margin, seed=sim_cfg["seed"],
                              max_paths=scn["network"]["max_paths"],
                              batch=min(sim_cfg["batch"], plan.start.size), plan=plan,
                              progress=lambda k, name=name: bar.update(name, k))
        out[name] = metrics(run, sim, scn, name, comm_time=ct)
    if ideal:
        ct = comm_for(IDEAL)
        sim = simulate_ideal_flows(run["topology"], run["flows"], line_rate=run["line_rate"])
        bar.update(IDEAL, plan.start.size + 1)
        out[IDEAL] = metrics(run, sim, scn, IDEAL, comm_time=ct)
    cap = float(scn["decode"]["max_batch"])
    for name, v in out.items():
        f = tables.get(name) if auto else None
        if f is not None:
            v["decode"]["comm"] = dict(
                model="wide-EP dispatch + combine per MoE layer (fabric_jax.serve._ep)",
                ep=8 * run["dep"].decode_inst, overlap=bool(f.overlap),
                grid_tokens_per_gpu=[int(x) for x in f.grid],
                layer_s=[float(x) for x in f.layer_s],
                per_step_at_max_batch_s=float(f(cap)))
    for v in out.values():
        t, p = v.pop("_ttft"), v.pop("_tpot")
        if keep_samples:
            v["ttft_samples"], v["tpot_samples"] = t.tolist(), p.tolist()
    dep = run["dep"]
    return dict(
        scenario=scn,
        deployment=dict(model=dep.model.name, gpu=dep.gpu.name, attention=dep.attention,
                        serving_gpus=dep.n_gpus, kv_bytes_per_token=dep.kv_bytes_per_token,
                        kv_capacity_per_unit=dep.kv_capacity,
                        weights_per_unit=dep.weight_bytes, kv_chunks=dep.kv_chunks,
                        line_rate=run["line_rate"], kv_flows=int(run["flows"].size.size),
                        busy_periods=int(plan.start.size), period_width=int(plan.width),
                        period_steps=int(plan.n_steps),
                        prefill_time_mean=float(np.mean(run["pf_end"] - run["pf_start"]))),
        fabrics=out, wall_s=time.time() - started)


def rate_sweep(rates, scenario=None, *, fabrics=tuple(PRESETS), ideal: bool = True,
               progress: bool = True, comm_time=None, overrides=None) -> dict:
    """Goodput against request rate: :func:`serve` at each rate (``requests.rate``).

    Returns:
      ``{"rates": [...], "fabrics": {name: {"goodput_per_gpu": [...],
      "slo_attainment": [...], "ttft_p99": [...]}}, "knee": {name: rate}, "slo_knee":
      {name: rate}}``: ``knee`` is the lowest rate whose goodput reaches
      :data:`KNEE_SHARE` (95 %) of the sweep's highest (where the curve flattens),
      ``slo_knee`` the highest rate whose SLO attainment is >= :data:`SLO_KNEE` (90 %;
      ``None`` if none).  With a fixed request count a high rate also shortens the run:
      sweep with enough requests that the queue reaches its steady state.
    """
    rates = [float(r) for r in rates]
    res = {}
    for r in rates:
        ov = dict(overrides or {}, **{"requests.rate": r})
        res[r] = serve(scenario, fabrics=fabrics, ideal=ideal, progress=progress,
                       comm_time=comm_time, overrides=ov)["fabrics"]
    names = list(res[rates[0]])
    curves = {n: dict(goodput_per_gpu=[res[r][n]["goodput_per_gpu"] for r in rates],
                      slo_attainment=[res[r][n]["slo_attainment"] for r in rates],
                      ttft_p99=[res[r][n]["ttft"]["p99"] for r in rates]) for n in names}
    knee, slo_knee = {}, {}
    for n in names:
        g = np.asarray(curves[n]["goodput_per_gpu"], float)
        knee[n] = rates[int(np.argmax(g >= KNEE_SHARE * g.max()))] if g.max() > 0 else None
        ok = [r for r, a in zip(rates, curves[n]["slo_attainment"]) if a >= SLO_KNEE]
        slo_knee[n] = max(ok) if ok else None
    return dict(rates=rates, fabrics=curves, knee=knee, slo_knee=slo_knee)
