#!/usr/bin/env bash
# GPU sizes of the simulator's kernels in one run (issue #13), at most 8 minutes:
#   solver    max_min_fair on 10^4, 10^5 and 10^6 flows (4 random links each), GPU and
#             this machine's CPU backend side by side: the CPU/GPU crossover of a solve
#   batched   simulate_flows_batched, 8 seeds x 10k flows, vs one by one
#   fluid     fabric_jax.simulate_fluid (public API), 100k flows, steps per second
#   events    simulate_flows (exact, warm-started) on the coupled instances of
#             experiments/bench_flowsim.py, 1k-100k flows on the GPU and 1k-10k on the
#             CPU backend: the crossover in number of active flows (all start at t = 0)
# float32 throughout (the GPU default; bench_flowsim.py's CPU table is x64).  Each part
# times the first call (compile) and the steady state separately and is written to
# results/gpu.json as soon as it finishes, so a timeout keeps what ran; the largest
# event run comes last.
#
# Usage:  experiments/bench_gpu.sh [--small]     (--small: CPU-sized smoke run)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
SMALL=0
[[ "${1:-}" == "--small" ]] && SMALL=1
mkdir -p results
SMALL=$SMALL timeout 480 python - <<'PY'
import os, sys, time
sys.path.insert(0, "experiments")
import numpy as np
import jax, jax.numpy as jnp
from _bench import device_info, time_jax, write_json
import fabric_jax as fj
from bench_flowsim import coupled_instance

small = os.environ.get("SMALL") == "1"
out = {"device": device_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
       "small": small, "parts": {}}
path = "results/gpu.json"
accel = jax.devices()[0]
cpu = jax.devices("cpu")[0]
devices = {"gpu": accel, "cpu": cpu} if accel.platform != "cpu" else {"cpu": cpu}


def save(name, rows):
    out["parts"][name] = rows
    write_json(path, out)
    print(name, rows, flush=True)


def on(device, fn, *args, repeats=2, **kwargs):
    """time_jax with the inputs (NumPy) placed on ``device``."""
    with jax.default_device(device):
        return time_jax(fn, *args, repeats=repeats, **kwargs)


def crossover(rows, size_key):
    """Smallest size at which the accelerator's steady state beats the CPU backend."""
    faster = [r[size_key] for r in rows
              if "gpu_steady_s" in r and "cpu_steady_s" in r
              and r["gpu_steady_s"] < r["cpu_steady_s"]]
    return min(faster) if faster else None


def random_incidence(n_flows, n_links, seed, hops=4):
    rng = np.random.default_rng(seed)
    links = rng.integers(0, n_links, (n_flows, hops))
    # distinct links per flow: resample duplicates by shifting (cheap, host side)
    for k in range(1, hops):
        dup = (links[:, k:k + 1] == links[:, :k]).any(axis=1)
        links[dup, k] = (links[dup, k] + k * 7919) % n_links
    inc = fj.Incidence.from_coo(links.reshape(-1), np.repeat(np.arange(n_flows), hops),
                                None, n_links=n_links, n_flows=n_flows)
    return inc, rng.uniform(1e9, 1e10, n_links).astype(np.float32)


# 1. max-min solve, both backends
rows = []
for n_flows in ([2_000, 20_000] if small else [10_000, 100_000, 1_000_000]):
    n_links = max(1_000, n_flows // 50)
    inc, cap = random_incidence(n_flows, n_links, 0)
    row = dict(flows=n_flows, links=n_links)
    for name, dev in devices.items():
        first, steady, res = on(dev, fj.max_min_fair, inc, cap, repeats=3)
        row.update({f"{name}_first_s": first, f"{name}_steady_s": steady,
                    "iterations": int(res.info.iterations)})
    rows.append(row)
    save("solver", rows)
out["solver_crossover_flows"] = crossover(rows, "flows")

# 2. batched engine (accelerator)
n, b = (1_000, 4) if small else (10_000, 8)
inc, c, a, s = coupled_instance(n, 0)
sizes = np.stack([coupled_instance(n, i)[3] for i in range(b)]).astype(np.float32)
caps = np.broadcast_to(c.astype(np.float32), (b, c.size))
arrs = np.zeros((b, n), np.float32)
first, steady, _ = on(accel, fj.simulate_flows_batched, inc, caps, arrs, sizes,
                      max_active=n, repeats=1)
t0 = time.perf_counter()
with jax.default_device(accel):
    for i in range(b):
        fj.simulate_flows(inc, caps[i], arrs[i], sizes[i],
                          max_active=n).finish.block_until_ready()
loop = (time.perf_counter() - t0) / b
save("batched", dict(flows=n, batch=b, first_s=first, per_scenario_s=steady / b,
                     loop_per_scenario_s=loop))

# 3. fluid step (public API only, accelerator)
n, steps = (10_000, 20) if small else (100_000, 200)
inc, c, a, s = coupled_instance(n, 1)
first, steady, _ = on(accel, lambda: fj.simulate_fluid(inc, c.astype(np.float32),
                                                       s.astype(np.float32), dt=1e-4,
                                                       n_steps=steps))
save("fluid", dict(flows=n, n_steps=steps, first_s=first, steady_s=steady,
                   steps_per_s=steps / steady))

# 4. event-driven engine, exact; both backends up to 10k flows, then the accelerator
rows = []
for n in ([300, 1_000, 3_000] if small else [1_000, 3_000, 10_000, 30_000, 100_000]):
    inc, c, a, s = coupled_instance(n, 0)
    c, a, s = (x.astype(np.float32) for x in (c, a, s))
    row = dict(flows=n)
    rows.append(row)
    for name, dev in devices.items():
        if name == "cpu" and n > 10_000:
            continue
        first, steady, r = on(dev, fj.simulate_flows, inc, c, a, s, max_active=n,
                              repeats=1)
        row.update({f"{name}_first_s": first, f"{name}_steady_s": steady,
                    "events": int(r.n_events)})
        save("events", rows)
out["events_crossover_flows"] = crossover(rows, "flows")
save("events", rows)
PY
