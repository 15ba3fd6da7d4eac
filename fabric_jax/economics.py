"""Economics of a token: the fabric's bill of materials, its amortised cost, $/token.

Bill of materials (:func:`bill_of_materials`), counted from a :class:`~fabric_jax.Topology`:

* **switches**: each switch node of the topology with ``d`` ports in use is
  ``ceil(d / radix)`` boxes of the preset's switch (a logical switch larger than one box
  is built from several boxes; the extra internal links of such a chassis are not
  counted);
* **NICs**: one per host (NIC endpoint);
* **optics**: one transceiver per cable end (both ends of every host-leaf and
  switch-switch cable; active optics throughout, as in multi-rack GPU clusters, NVIDIA
  DGX SuperPOD reference architecture), plus one fibre per cable;
* **power**: switches, NICs and transceivers at their rated power.

Cost per hour (:func:`fabric_cost_per_hour`): capital cost straight-line over
``lifetime_years``, plus power ``kW x PUE x price per kWh``.

Cost per token (:func:`cost_per_token_report`): the GPUs at ``gpu_price_per_hour``
(a cloud-style all-in rate) plus the job's share of the fabric (its hosts over the
topology's hosts), times the step time, over the tokens per step.

**Unit prices are assumptions.**  Network list prices are not published; the defaults
(:data:`FABRIC_PRICES`) are order-of-magnitude street prices from public reseller
listings and press reports (2024-2025) and should be overridden with quotes
(``prices={"switch_price": ...}``).  Power figures are the vendors' rated maxima where
cited.  The result names every input it used.

Units: dollars, watts, hours for prices; seconds and tokens for the step.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .workloads.model import (GPUS, MODELS, ModelConfig, ParallelPlan, get_gpu, get_model,
                              step_flops)

__all__ = ["FabricPrices", "FABRIC_PRICES", "get_prices", "EconomicsParams",
           "bill_of_materials", "fabric_cost_per_hour", "cost_per_token_report", "token_costs",
           "parse_model_sections", "HOURS_PER_YEAR"]

HOURS_PER_YEAR = 8760.0


@dataclasses.dataclass(frozen=True)
class FabricPrices:
    """Unit prices and power of one fabric's components (assumptions, see the module).

    Attributes:
      switch_name: the switch the prices describe.
      switch_radix: ports per switch box at the host link speed.
      switch_price: dollars per switch box.
      switch_power_w: watts per switch box (without transceivers).
      nic_name: the NIC.
      nic_price: dollars per NIC.
      nic_power_w: watts per NIC.
      transceiver_price: dollars per transceiver (one per cable end).
      transceiver_power_w: watts per transceiver.
      fibre_price: dollars per cable (fibre and connectors).
      source: where the figures come from.
    """

    switch_name: str
    switch_radix: int
    switch_price: float
    switch_power_w: float
    nic_name: str
    nic_price: float
    nic_power_w: float
    transceiver_price: float
    transceiver_power_w: float
    fibre_price: float = 100.0
    source: str = ""

    def __post_init__(self):
        if isinstance(self.switch_radix, bool) or not isinstance(self.switch_radix, int) \
                or self.switch_radix < 2:
            raise ValueError(f"switch_radix: must be an integer >= 2; got {self.switch_radix!r}")
        for f in ("switch_price", "switch_power_w", "nic_price", "nic_power_w",
                  "transceiver_price", "transceiver_power_w", "fibre_price"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ValueError(f"{f}: must be a number >= 0; got {v!r}")

    def replace(self, **changes) -> "FabricPrices":
        bad = set(changes) - {f.name for f in dataclasses.fields(self)}
        if bad:
            raise ValueError(f"prices.{sorted(bad)[0]}: unknown price key; accepted: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)


_STREET = ("our assumption: order-of-magnitude street prices from public reseller "
           "listings and press reports, 2024-2025; override with quotes")

#: Per-preset component prices at 400 Gb/s per NIC (assumptions, see each ``source``).
FABRIC_PRICES = {
    "infiniband": FabricPrices(
        "NVIDIA Quantum-2 QM9700 (64 x 400G NDR)", 64, 30_000.0, 1_100.0,
        "NVIDIA ConnectX-7 400G NDR", 2_000.0, 25.0, 1_000.0, 9.0,
        source="radix and 25.6 Tb/s: NVIDIA QM9700 datasheet; power 747 W typical with "
               "passive cables (datasheet), 1.1 kW assumed; prices: " + _STREET),
    "roce": FabricPrices(
        "51.2T Ethernet switch (Tomahawk-5 class, 128 x 400G)", 128, 25_000.0, 1_500.0,
        "ConnectX-7 400GbE (RoCEv2)", 1_800.0, 25.0, 800.0, 9.0,
        source="radix: Broadcom Tomahawk 5 (51.2 Tb/s, 64 x 800G = 128 x 400G); power "
               "assumed; prices: " + _STREET),
    "spectrum_x": FabricPrices(
        "NVIDIA Spectrum-4 SN5600 (64 x 800G = 128 x 400G)", 128, 40_000.0, 1_800.0,
        "NVIDIA BlueField-3 SuperNIC 400G", 2_500.0, 75.0, 800.0, 9.0,
        source="radix: NVIDIA SN5600 datasheet (51.2 Tb/s); SuperNIC power: BlueField-3 "
               "datasheet class (up to 150 W), 75 W assumed; prices: " + _STREET),
    "uec": FabricPrices(
        "51.2T UEC-capable Ethernet switch (128 x 400G)", 128, 25_000.0, 1_500.0,
        "UEC 1.0 400G NIC (e.g. AMD Pensando Pollara 400 class)", 2_000.0, 30.0, 800.0,
        9.0, source="radix as roce; prices and power: " + _STREET),
}


def get_prices(fabric_name, prices=None) -> FabricPrices:
    """The preset's :class:`FabricPrices`, with ``prices`` overrides (a dict or a
    FabricPrices that replaces them)."""
    if isinstance(prices, FabricPrices):
        return prices
    name = getattr(fabric_name, "name", fabric_name)
    if name not in FABRIC_PRICES:
        raise ValueError(f"fabric_name: no prices for {name!r}; known: "
                         f"{sorted(FABRIC_PRICES)} (or pass prices=FabricPrices(...))")
    base = FABRIC_PRICES[name]
    if prices is None:
        return base
    if not isinstance(prices, dict):
        raise ValueError(f"prices: expected a dict of FabricPrices fields or a FabricPrices; "
                         f"got {type(prices).__name__}")
    return base.replace(**prices)


@dataclasses.dataclass(frozen=True)
class EconomicsParams:
    """Operating assumptions (all overridable; defaults are our assumptions).

    Attributes:
      gpu_price_per_hour: dollars per GPU-hour, all-in (cloud on-demand H100 rates were
        about $2-4 in 2024-2025; 2.5 assumed, as in the compare study).
      lifetime_years: straight-line amortisation period of the network (5 assumed).
      power_price_per_kwh: dollars per kWh (0.08 assumed, a US industrial rate).
      pue: power usage effectiveness (1.3 assumed).
    """

    gpu_price_per_hour: float = 2.5
    lifetime_years: float = 5.0
    power_price_per_kwh: float = 0.08
    pue: float = 1.3

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ValueError(f"{f.name}: must be a number >= 0; got {v!r}")
        if self.lifetime_years <= 0:
            raise ValueError("lifetime_years: must be > 0")
        if self.pue < 1:
            raise ValueError(f"pue: must be >= 1 (total facility / IT power); got {self.pue}")


def bill_of_materials(topology, fabric_name, prices=None) -> dict:
    """Switches, NICs, optics and power of ``topology`` built with ``fabric_name``'s parts.

    Args:
      topology: a :class:`~fabric_jax.Topology` (failed links still count: they are
        installed).
      fabric_name: preset name (or a Fabric) selecting :data:`FABRIC_PRICES`.
      prices: overrides, dict of :class:`FabricPrices` fields, or a FabricPrices.

    Returns:
      dict: counts (``switches``, ``switch_nodes``, ``nics``, ``cables``,
      ``host_cables``, ``fabric_cables``, ``transceivers``), ``ports_used`` per switch
      node (max), ``capex`` by item and total (dollars), ``power_w`` by item and total,
      and the ``prices`` used.
    """
    p = get_prices(fabric_name, prices)
    src, dst = np.asarray(topology.link_src), np.asarray(topology.link_dst)
    rev = np.asarray(topology.link_reverse)
    idx = np.arange(src.size)
    cable = (rev < 0) | (idx < rev)                       # one link per full-duplex cable
    is_host = np.asarray(topology.node_is_host)
    cu, cv = src[cable], dst[cable]
    n_cables = int(cable.sum())
    host_cables = int(np.count_nonzero(is_host[cu] | is_host[cv]))
    degree = np.bincount(np.concatenate([cu, cv]), minlength=topology.n_nodes)
    sw_degree = degree[~is_host]
    boxes = int(np.ceil(sw_degree / p.switch_radix).sum())
    n_nics = int(topology.n_hosts)
    transceivers = 2 * n_cables
    capex = dict(switches=boxes * p.switch_price, nics=n_nics * p.nic_price,
                 transceivers=transceivers * p.transceiver_price,
                 fibre=n_cables * p.fibre_price)
    capex["total"] = float(sum(capex.values()))
    power = dict(switches=boxes * p.switch_power_w, nics=n_nics * p.nic_power_w,
                 transceivers=transceivers * p.transceiver_power_w)
    power["total"] = float(sum(power.values()))
    return dict(fabric=getattr(fabric_name, "name", fabric_name), topology=topology.name,
                switches=boxes, switch_nodes=int(sw_degree.size),
                max_ports_used=int(sw_degree.max()) if sw_degree.size else 0,
                radix_exceeded=bool(np.any(sw_degree > p.switch_radix)),
                nics=n_nics, cables=n_cables, host_cables=host_cables,
                fabric_cables=n_cables - host_cables, transceivers=transceivers,
                capex=capex, power_w=power, prices=dataclasses.asdict(p))


def fabric_cost_per_hour(bom: dict, params: EconomicsParams | None = None) -> dict:
    """Amortised capital and power cost of a fabric per hour.

    ``capex / (lifetime_years * 8760)`` plus ``power_kW * pue * power_price_per_kwh``.

    Returns:
      ``{"capex_per_hour", "power_per_hour", "total_per_hour"}`` dollars per hour.
    """
    params = EconomicsParams() if params is None else params
    capex = bom["capex"]["total"] / (params.lifetime_years * HOURS_PER_YEAR)
    power = bom["power_w"]["total"] / 1e3 * params.pue * params.power_price_per_kwh
    return dict(capex_per_hour=capex, power_per_hour=power, total_per_hour=capex + power)


def cost_per_token_report(step_time_s, model, plan: ParallelPlan, topology, fabric_name, *,
                          prices=None, params: EconomicsParams | None = None,
                          gpu="h100_sxm", tokens_per_step: float | None = None,
                          n_gpus: int | None = None) -> dict:
    """Cost per token of a training job, GPUs and fabric side by side.

    Args:
      step_time_s: simulated seconds per step (e.g. the mean of
        ``ModelStep.step_times``).
      model: :class:`ModelConfig` or name (tokens per step, FLOPs for MFU).
      plan: the :class:`ParallelPlan` (GPUs of the job).
      topology: the fabric's topology (bill of materials); the job pays the share
        ``n_gpus / topology.n_hosts`` of it.
      fabric_name: preset name for the prices.
      prices: :class:`FabricPrices` overrides.
      params: :class:`EconomicsParams`.
      gpu: :class:`GPU` or name (peak FLOP/s for MFU).
      tokens_per_step: default ``model.tokens_per_step``.
      n_gpus: default ``plan.n_gpus``.

    Returns:
      dict with ``cost_per_token`` and ``cost_per_million_tokens`` (total), the GPU and
      fabric parts (``gpu_cost_per_million_tokens``, ``fabric_capex_per_million_tokens``,
      ``fabric_power_per_million_tokens``), ``fabric_cost_share`` (fabric / total),
      ``tokens_per_second``, ``mfu`` (model FLOPs / (GPUs x peak x step time)), the
      ``bom`` and every input under ``inputs``.
    """
    model = get_model(model)
    gpu = get_gpu(gpu)
    params = EconomicsParams() if params is None else params
    n = plan.n_gpus if n_gpus is None else int(n_gpus)
    tokens = float(model.tokens_per_step if tokens_per_step is None else tokens_per_step)
    out = token_costs(step_time_s, tokens, n, topology, fabric_name, prices=prices,
                      params=params)
    step = out["step_time"]
    return dict(
        out, tokens_per_second=tokens / step,
        mfu=step_flops(model, recompute=plan.recompute) / (n * gpu.peak_flops * step),
        inputs=dict(model=model.name, plan=dataclasses.asdict(plan), gpu=gpu.name,
                    n_gpus=n, params=dataclasses.asdict(params)))


def token_costs(step_time_s, tokens_per_step, n_gpus, topology, fabric_name, *,
                prices=None, params: EconomicsParams | None = None) -> dict:
    """Dollars per token of a job's step, GPUs and fabric side by side (no model needed).

    The job runs ``n_gpus`` GPUs at ``params.gpu_price_per_hour`` for ``step_time_s``
    and pays the share ``n_gpus / topology.n_hosts`` of the fabric's amortised capital
    and power (:func:`fabric_cost_per_hour` of :func:`bill_of_materials`); every price
    is an assumption (:data:`FABRIC_PRICES`, :class:`EconomicsParams`).

    Args:
      step_time_s: seconds per step (finite, > 0).
      tokens_per_step: tokens the job processes per step (> 0).
      n_gpus: GPUs (one NIC each) of the job, at most ``topology.n_hosts``.
      topology: the fabric's :class:`~fabric_jax.Topology`.
      fabric_name: preset name selecting :data:`FABRIC_PRICES`.
      prices: :class:`FabricPrices` overrides.
      params: :class:`EconomicsParams`.

    Returns:
      dict: ``cost_per_token``, ``cost_per_million_tokens`` (total),
      ``gpu_cost_per_million_tokens``, ``fabric_capex_per_million_tokens``,
      ``fabric_power_per_million_tokens``, ``fabric_cost_per_million_tokens``,
      ``fabric_cost_share`` (fabric / total, in [0, 1]), ``fabric_cost_per_hour`` (the
      whole fabric), ``job_fabric_share``, ``step_time``, ``tokens_per_step``, ``fabric``
      and the ``bom``.
    """
    step = float(step_time_s)
    if not math.isfinite(step) or step <= 0:
        raise ValueError(f"step_time_s: must be finite and > 0 seconds; got {step_time_s!r}")
    tokens, n = float(tokens_per_step), int(n_gpus)
    if n < 1 or not tokens > 0:
        raise ValueError(f"n_gpus/tokens_per_step: must be >= 1 and > 0; got {n_gpus!r}, "
                         f"{tokens_per_step!r}")
    if n > topology.n_hosts:
        raise ValueError(f"n_gpus: {n} GPUs do not fit the topology's {topology.n_hosts} "
                         "hosts")
    params = EconomicsParams() if params is None else params
    bom = bill_of_materials(topology, fabric_name, prices)
    per_hour = fabric_cost_per_hour(bom, params)
    share = n / topology.n_hosts
    hours = step / 3600.0
    gpu_cost = params.gpu_price_per_hour * n * hours
    capex = per_hour["capex_per_hour"] * share * hours
    power = per_hour["power_per_hour"] * share * hours
    total = gpu_cost + capex + power
    mega = 1e6 / tokens
    return dict(
        fabric=bom["fabric"], step_time=step, tokens_per_step=tokens,
        cost_per_token=total / tokens, cost_per_million_tokens=total * mega,
        gpu_cost_per_million_tokens=gpu_cost * mega,
        fabric_capex_per_million_tokens=capex * mega,
        fabric_power_per_million_tokens=power * mega,
        fabric_cost_per_million_tokens=(capex + power) * mega,
        fabric_cost_share=(capex + power) / total if total > 0 else 0.0,
        fabric_cost_per_hour=per_hour["total_per_hour"], job_fabric_share=share, bom=bom)


# ------------------------------------------------------------- scenario sections
_PLAN_FIELDS = {f.name: f for f in dataclasses.fields(ParallelPlan)}
_MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}
_ECON_FIELDS = {f.name for f in dataclasses.fields(EconomicsParams)}


def _typed(section, key, val, like):
    if isinstance(like, bool):
        if not isinstance(val, bool):
            raise ValueError(f"scenario key '{section}.{key}': must be true or false; "
                             f"got {val!r}")
    elif isinstance(like, int):
        if isinstance(val, bool) or not isinstance(val, int):
            raise ValueError(f"scenario key '{section}.{key}': must be an integer; got {val!r}")
    elif isinstance(like, float):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise ValueError(f"scenario key '{section}.{key}': must be a number; got {val!r}")
        val = float(val)
    elif isinstance(like, str) and not isinstance(val, str):
        raise ValueError(f"scenario key '{section}.{key}': must be a string; got {val!r}")
    return val


def _parse_model_section(msec) -> ModelConfig:
    """The ``[model]`` table as a :class:`ModelConfig` (see :func:`parse_model_sections`)."""
    if not isinstance(msec, dict):
        raise ValueError("scenario key 'model': must be a table ([model])")
    body = dict(msec)
    name = body.pop("name", None)
    if name is not None and name not in MODELS:
        raise ValueError(f"scenario key 'model.name': expected one of {sorted(MODELS)}; "
                         f"got {name!r}")
    for key, val in body.items():
        if key not in _MODEL_FIELDS or key == "name":
            raise ValueError(f"scenario key 'model.{key}': unknown; accepted keys: "
                             f"{['name'] + [k for k in _MODEL_FIELDS if k != 'name']}")
    try:
        if name is not None:
            base = MODELS[name]
            body = {k: _typed("model", k, v, getattr(base, k)) for k, v in body.items()}
            return base.replace(**body)
        missing = [k for k, f in _MODEL_FIELDS.items() if k != "name" and
                   f.default is dataclasses.MISSING and k not in body]
        if missing:
            raise ValueError(f"scenario key 'model.{missing[0]}': required when "
                             "'model.name' is not given")
        return ModelConfig(name="custom", **body)
    except ValueError as e:
        msg = str(e)
        raise (e if msg.startswith("scenario key") else
               ValueError(f"scenario key 'model.{msg.split(':')[0]}': {msg}")) from None


def _parse_parallelism_section(psec, model: ModelConfig | None):
    """``(plan, gpu)`` of the ``[parallelism]`` table: a :class:`ParallelPlan` (checked
    against ``model`` when one is given) and the named :class:`GPU` or ``None``."""
    if not isinstance(psec, dict):
        raise ValueError("scenario key 'parallelism': must be a table ([parallelism])")
    body = dict(psec)
    gpu = body.pop("gpu", None)
    if gpu is not None:
        if gpu not in GPUS:
            raise ValueError(f"scenario key 'parallelism.gpu': expected one of "
                             f"{sorted(GPUS)}; got {gpu!r}")
        gpu = GPUS[gpu]
    base = ParallelPlan()
    for key, val in body.items():
        if key not in _PLAN_FIELDS:
            raise ValueError(f"scenario key 'parallelism.{key}': unknown; accepted keys: "
                             f"{sorted(list(_PLAN_FIELDS) + ['gpu'])}")
        body[key] = _typed("parallelism", key, val, getattr(base, key))
    try:
        plan = ParallelPlan(**body)
        if model is not None:
            plan.check(model)
    except ValueError as e:
        raise ValueError(f"scenario key 'parallelism.{str(e).split(':')[0]}': {e}") \
            from None
    return plan, gpu


def _parse_costs_section(csec):
    """``(params, prices)`` of the ``[costs]`` table: the :class:`EconomicsParams` and
    the :class:`FabricPrices` overrides per preset (presets without any left out)."""
    if not isinstance(csec, dict):
        raise ValueError("scenario key 'costs': must be a table ([costs])")
    body = dict(csec)
    prices = body.pop("prices", {})
    for key in body:
        if key not in _ECON_FIELDS:
            raise ValueError(f"scenario key 'costs.{key}': unknown; accepted keys: "
                             f"{sorted(_ECON_FIELDS | {'prices'})}")
    try:
        params = EconomicsParams(**body)
    except (ValueError, TypeError) as e:
        raise ValueError(f"scenario key 'costs.{str(e).split(':')[0]}': {e}") from None
    if not isinstance(prices, dict):
        raise ValueError("scenario key 'costs.prices': must be a table")
    flat = {k: v for k, v in prices.items() if not isinstance(v, dict)}
    per_preset = {}
    for preset in FABRIC_PRICES:
        over = dict(flat)
        over.update(prices.get(preset, {}) if isinstance(prices.get(preset), dict) else {})
        try:
            get_prices(preset, over)
        except ValueError as e:
            key = str(e).split(":")[0]
            key = key if key.startswith("prices.") else f"prices.{key}"
            raise ValueError(f"scenario key 'costs.{key}': {e}") from None
        if over:
            per_preset[preset] = over
    for key, val in prices.items():
        if isinstance(val, dict) and key not in FABRIC_PRICES:
            raise ValueError(f"scenario key 'costs.prices.{key}': unknown preset; "
                             f"accepted: {sorted(FABRIC_PRICES)}")
    return params, per_preset


def parse_model_sections(data: dict) -> dict:
    """Parse the ``[model]``, ``[parallelism]`` and ``[costs]`` tables of a scenario.

    ``[model]``: ``name`` (a :data:`MODELS` preset; required unless every
    :class:`ModelConfig` field is given) plus any ModelConfig field to override
    (``global_batch = 256``, ``seq_len = 4096`` ...).  ``[parallelism]``: the
    :class:`ParallelPlan` fields (``tp``, ``pp``, ``dp``, ``ep``, ``micro_batch``,
    ``overlap`` ...) and ``gpu`` (a :data:`GPUS` name).  ``[costs]``: the
    :class:`EconomicsParams` fields and ``prices`` (a table of :class:`FabricPrices`
    overrides applied to every preset, or ``[costs.prices.<preset>]`` tables).

    Args:
      data: the parsed TOML mapping (other sections are ignored).

    Returns:
      ``{"model": ModelConfig | None, "plan": ParallelPlan | None, "gpu": GPU,
      "params": EconomicsParams, "prices": {preset: dict}}``.

    Raises:
      ValueError: naming the offending key (``scenario key 'model.hidden': ...``).
    """
    out = dict(model=None, plan=None, gpu=GPUS["h100_sxm"], params=EconomicsParams(),
               prices={})
    if data.get("model") is not None:
        out["model"] = _parse_model_section(data["model"])
    if data.get("parallelism") is not None:
        out["plan"], gpu = _parse_parallelism_section(data["parallelism"], out["model"])
        if gpu is not None:
            out["gpu"] = gpu
    if data.get("costs") is not None:
        out["params"], out["prices"] = _parse_costs_section(data["costs"])
    return out
