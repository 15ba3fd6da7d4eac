"""The training model of a compare scenario: its ``[model]``, ``[parallelism]`` and
``[costs]`` sections.

With a ``[model]`` (or ``fabric-jax compare --model NAME``) the training job's compute
time, its collectives' bytes and its tokens per step come from a transformer model and
its parallelism plan (:mod:`fabric_jax.workloads.model`) instead of the workload keys
(:data:`MODEL_REPLACES`, refused beside it).  The plan fills the training job: ``tp pp
dp`` equals its GPUs (one per NIC).  A step moves gigabytes, far beyond the horizon
over which the fluid model resolves congestion control, so one slice of ``1/k`` of the
step's network bytes is simulated (:func:`model_slices`) and the step's communication
is ``k`` slices back to back.
"""

from __future__ import annotations

import math

from ._model import Scenario
from ._rules import ScenarioError

__all__ = ["MODEL_SECTIONS", "MODEL_REPLACES", "HORIZON_FACTOR", "with_model_name",
           "model_comm_time", "model_slices", "model_setup", "check_model"]

#: Scenario sections that describe the training model, its parallelism plan and the
#: fabric's costs, parsed by :func:`fabric_jax.economics.parse_model_sections`.
MODEL_SECTIONS = ("model", "parallelism", "costs")

#: Keys a training model replaces (compute time, collective sizes, tokens per step and
#: expert-parallel groups all follow from the model and the plan): a scenario with a
#: model that sets one of them is refused rather than silently ignored.
MODEL_REPLACES = ("workload.compute_us", "workload.all_reduce_mb", "workload.moe_mb",
                  "workload.ep_servers", "workload.expert_skew",
                  "economics.tokens_per_gpu_per_step")

#: With a model, the simulated communication is one slice of ``1/k`` of the step's
#: network bytes, ``k`` chosen so that the slice at line rate takes ``1 /
#: HORIZON_FACTOR`` of the simulation horizon ``n_steps x dt_us``
#: (:func:`model_slices`): room for a fabric that runs the collectives at a sixth of
#: line rate.  A model's step moves gigabytes (tens of ms at 400 Gb/s), far beyond the
#: 1 ms horizon at which the fluid model's time step resolves congestion control,
#: buffers and PFC.
HORIZON_FACTOR = 6.0


def with_model_name(data: dict, name: str | None) -> dict:
    """``data`` with ``model.name`` set to ``name`` (``fabric-jax compare --model``);
    ``data`` itself when ``name`` is ``None``."""
    if name is None:
        return data
    if not isinstance(data, dict):
        raise ScenarioError("(top level)", f"must be a mapping of sections; got "
                            f"{type(data).__name__}")
    body = data.get("model", {})
    if not isinstance(body, dict):
        raise ScenarioError("model", "must be a table ([model])")
    return {**data, "model": {**body, "name": name}}


def _job_gpus(topology: dict, workload: dict) -> tuple[int, int]:
    """(GPUs of the training job, GPUs = NICs per server): one NIC per GPU (rails); a
    ``leaf_spine`` server has one NIC."""
    nics = topology["nics_per_server"] if topology["kind"] == "rail_optimized" else 1
    return workload["train_servers"] * nics, nics


def model_comm_time(model, plan, link_gbps: float) -> float:
    """Seconds one GPU's NIC needs at line rate for the step's network traffic: the
    bytes each GPU sends per step in the DP, EP and PP collectives
    (:func:`fabric_jax.workloads.model.comm_bytes`) over the NIC rate.  An upper
    estimate of the ideal time (traffic between GPUs of one server stays on NVLink), used
    to size the simulation horizon (:data:`HORIZON_FACTOR`)."""
    from ..units import gbps
    from ..workloads.model import comm_bytes
    cb = comm_bytes(model, plan)
    return (cb["dp_bytes_sent"] + cb["ep_bytes_sent"] + cb["pp_bytes_sent"]) / gbps(link_gbps)


def model_slices(model, plan, topology: dict, simulation: dict) -> int:
    """``k``, the number of equal slices the step's network communication is cut into
    for the simulation (:data:`HORIZON_FACTOR`): the smallest integer with
    ``HORIZON_FACTOR x model_comm_time / k <= n_steps x dt_us``, at least 1.

    The model (an assumption, stated): the step's collectives run as ``k`` equal
    back-to-back slices, as gradient buckets do (PyTorch DDP ``bucket_cap_mb``, Li et
    al., "PyTorch Distributed", VLDB 2020; Megatron-LM's distributed-optimizer
    buckets), each meeting the same fabric state, so the step's communication takes
    ``k`` times one slice's transfer plus the path latency once
    (:func:`fabric_jax.study.run.full_step_times`); exact for a bandwidth-bound steady
    state, it cannot see what a fabric does only over longer times than the horizon."""
    t_comm = model_comm_time(model, plan, topology["link_gbps"])
    horizon = simulation["n_steps"] * simulation["dt_us"] * 1e-6
    return max(1, math.ceil(HORIZON_FACTOR * t_comm / horizon - 1e-9))


def _from_econ_error(err: ValueError) -> ScenarioError:
    """A :class:`ScenarioError` from economics' ``"scenario key 'k': msg"`` message."""
    import re
    match = re.match(r"scenario key '([^']+)': (.*)", str(err), re.S)
    if not match:
        return ScenarioError("model", str(err))
    key, msg = match.group(1), match.group(2)
    if key == "parallelism.micro_batch":
        msg += ("; set model.global_batch to a multiple of dp x micro_batch, or change "
                "the plan (dp = training GPUs / (tp x pp))")
    return ScenarioError(key, msg)


def model_setup(data: dict, sections: dict,
                written: set | None = None) -> tuple[dict | None, dict | None]:
    """The ``model`` and ``costs`` entries of a :class:`Scenario` from the ``[model]``,
    ``[parallelism]`` and ``[costs]`` tables (:data:`MODEL_SECTIONS`).

    ``[model]``: ``name`` (a :data:`~fabric_jax.workloads.model.MODELS` name) and any
    :class:`~fabric_jax.workloads.model.ModelConfig` field to override.
    ``[parallelism]``: :class:`~fabric_jax.workloads.model.ParallelPlan` fields and
    ``gpu``; the plan fills the training job: ``gpus_per_server`` is the NICs per
    server (one per GPU), ``tp`` defaults to it, and ``dp`` to ``train GPUs / (tp
    pp)``.  ``[costs]``: :class:`~fabric_jax.economics.EconomicsParams` fields except
    the GPU price (``economics.gpu_price_per_hour``) and ``prices`` overrides.

    A default adapts to the model: when neither ``workload.train_servers`` nor
    ``parallelism.dp`` is in ``written`` (the dotted keys the user set; default: every
    key of ``sections`` counts as written) and the data-parallel width does not divide
    the model's ``global_batch`` (``dp x micro_batch``), the training job shrinks to
    the largest number of servers (``sections`` is updated) whose ``dp`` does, as one
    sizes a data-parallel job to its batch.

    The model's entry: ``{"model": ModelConfig, "plan": ParallelPlan, "gpu": GPU,
    "slices": k}`` (:func:`model_slices`).

    Raises:
      ScenarioError: naming the offending key.
    """
    from ..economics import parse_model_sections
    given = {sec: data.get(sec) for sec in MODEL_SECTIONS if sec in data}
    for sec, body in given.items():
        if not isinstance(body, dict):
            raise ScenarioError(sec, f"must be a table ([{sec}])")
    if "gpu_price_per_hour" in given.get("costs", {}):
        raise ScenarioError("costs.gpu_price_per_hour", "the study's GPU price is "
                            "economics.gpu_price_per_hour; set it there")
    if "parallelism" in given and "model" not in given:
        raise ScenarioError("parallelism", "needs a training model: a [model] section "
                            "or --model NAME")
    if "model" in given:
        for full in MODEL_REPLACES:
            sec, key = full.split(".")
            if isinstance(data.get(sec), dict) and key in data[sec]:
                raise ScenarioError(full, "replaced by the training model ([model] / "
                                    "--model), which sets the compute time, the "
                                    "collectives' bytes and the tokens per step; remove it")
        n_gpus, nics = _job_gpus(sections["topology"], sections["workload"])
        par = dict(given.get("parallelism", {}))
        par.setdefault("gpus_per_server", nics)
        if par["gpus_per_server"] != nics:
            raise ScenarioError("parallelism.gpus_per_server", f"must equal the GPUs (= "
                                f"NICs) per server of the topology, {nics}; got "
                                f"{par['gpus_per_server']!r}")
        par.setdefault("tp", nics)
        tp, pp = par["tp"], par.get("pp", 1)
        derive_dp = "dp" not in par and all(isinstance(v, int) and not isinstance(v, bool)
                                            and v >= 1 for v in (tp, pp))
        adapt = derive_dp and written is not None and \
            "workload.train_servers" not in written
        tp_key = "parallelism.pp" if written is not None and "parallelism.pp" in written \
            and "parallelism.tp" not in written else "parallelism.tp"
        train = sections["workload"]["train_servers"]
        first = None
        for servers in (range(train, 1, -1) if adapt else (train,)):
            plan = dict(par)
            if derive_dp:
                n_gpus = servers * nics
                if n_gpus % (tp * pp):
                    if first is None:
                        first = ScenarioError(tp_key, f"tp x pp = {tp * pp} must divide "
                                              f"the training job's {n_gpus} GPUs "
                                              f"(workload.train_servers x GPUs per server)")
                    if adapt:
                        continue
                    raise first
                plan["dp"] = n_gpus // (tp * pp)
            try:
                parsed = parse_model_sections({**given, "parallelism": plan})
            except ValueError as err:
                failed = _from_econ_error(err)
                first = first or failed
                if adapt and failed.key == "parallelism.micro_batch":
                    continue               # a smaller job whose dp divides the batch
                raise failed from None
            sections["workload"]["train_servers"] = servers
            given["parallelism"] = plan
            break
        else:
            raise first
    else:
        try:
            parsed = parse_model_sections(given)
        except ValueError as err:
            raise _from_econ_error(err) from None
    costs = dict(params=parsed["params"], prices=parsed["prices"]) if "costs" in given \
        else None
    if "model" not in given:
        return None, costs
    model = dict(model=parsed["model"], plan=parsed["plan"], gpu=parsed["gpu"])
    model["slices"] = model_slices(model["model"], model["plan"], sections["topology"],
                                   sections["simulation"])
    return model, costs


def check_model(scn: Scenario) -> None:
    """The scenario's training model fits its training job: ``tp pp dp`` equals the
    job's GPUs, ``gpus_per_server`` the NICs per server, and the plan divides the
    model (:meth:`~fabric_jax.workloads.model.ParallelPlan.check`).

    Raises:
      ScenarioError: naming the ``parallelism`` key to change.
    """
    missing = sorted({"model", "plan", "gpu", "slices"} - set(scn.model))
    if missing:
        raise ScenarioError(f"model.{missing[0]}", "missing: build the model entry with "
                            "scenario_from_dict or model_setup")
    plan, model = scn.model["plan"], scn.model["model"]
    k = scn.model["slices"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ScenarioError("model.slices", f"must be an integer >= 1; got {k!r}")
    n_gpus, nics = _job_gpus(scn.topology, scn.workload)
    if plan.n_gpus != n_gpus:
        raise ScenarioError("parallelism.dp", f"tp x pp x dp must equal the training "
                            f"job's {n_gpus} GPUs (workload.train_servers x GPUs per "
                            f"server); got {plan.tp} x {plan.pp} x {plan.dp} = "
                            f"{plan.n_gpus}")
    if plan.gpus_per_server != nics:
        raise ScenarioError("parallelism.gpus_per_server", f"must equal the topology's "
                            f"{nics} GPUs (NICs) per server; got {plan.gpus_per_server}")
    try:
        plan.check(model)
    except ValueError as err:
        key = str(err).split(":")[0]
        raise ScenarioError(f"parallelism.{key}", str(err)) from None
