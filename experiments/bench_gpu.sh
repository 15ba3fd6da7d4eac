#!/usr/bin/env bash
# GPU sizes of the simulator's kernels in one run (issue #13), at most 8 minutes:
#   solver   max_min_fair on 1,000,000 flows (4 random links each of 20,000)
#   events   simulate_flows (exact, warm-started) on coupled instances, 10k-100k flows
#   batched  simulate_flows_batched, 8 seeds x 10k flows, vs one by one
#   fluid    fabric_jax.simulate_fluid (public API), 100k flows, steps per second
# Each part times the first call (compile) and the steady state separately and is
# written to results/gpu.json as soon as it finishes, so a timeout keeps what ran.
#
# Usage:  experiments/bench_gpu.sh [--small]     (--small: CPU-sized smoke run)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
SMALL=0
[[ "${1:-}" == "--small" ]] && SMALL=1
mkdir -p results
SMALL=$SMALL timeout 480 python - <<'PY'
import json, os, sys, time
sys.path.insert(0, "experiments")
import numpy as np
import jax, jax.numpy as jnp
from _bench import device_info, time_jax, write_json
import fabric_jax as fj
from bench_flowsim import coupled_instance

small = os.environ.get("SMALL") == "1"
out = {"device": device_info(), "date": time.strftime("%Y-%m-%d"), "small": small,
       "parts": {}}
path = "results/gpu.json"


def save(name, rows):
    out["parts"][name] = rows
    write_json(path, out)
    print(name, rows, flush=True)


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

# 1. max-min solve
n_flows, n_links = (20_000, 1_000) if small else (1_000_000, 20_000)
inc, cap = random_incidence(n_flows, n_links, 0)
first, steady, res = time_jax(fj.max_min_fair, inc, jnp.asarray(cap), repeats=3)
save("solver", dict(flows=n_flows, links=n_links, first_s=first, steady_s=steady,
                    iterations=int(res.info.iterations)))

# 2. event-driven engine, exact (float32 default here; the CPU table is x64)
rows = []
for n in ([1_000, 3_000] if small else [10_000, 30_000, 100_000]):
    inc, c, a, s = coupled_instance(n, 0)
    t0 = time.perf_counter()
    r = fj.simulate_flows(inc, c.astype(np.float32), a.astype(np.float32),
                          s.astype(np.float32), max_active=n)
    r.finish.block_until_ready()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = fj.simulate_flows(inc, c.astype(np.float32), a.astype(np.float32),
                          s.astype(np.float32), max_active=n)
    r.finish.block_until_ready()
    rows.append(dict(flows=n, events=int(r.n_events), first_s=first,
                     steady_s=time.perf_counter() - t0))
    save("events", rows)

# 3. batched engine
n, b = (1_000, 4) if small else (10_000, 8)
inc, c, a, s = coupled_instance(n, 0)
sizes = np.stack([coupled_instance(n, i)[3] for i in range(b)]).astype(np.float32)
caps = np.broadcast_to(c.astype(np.float32), (b, c.size))
arrs = np.zeros((b, n), np.float32)
first, steady, _ = time_jax(fj.simulate_flows_batched, inc, caps, arrs, sizes,
                            max_active=n, repeats=1)
t0 = time.perf_counter()
for i in range(b):
    fj.simulate_flows(inc, caps[i], arrs[i], sizes[i], max_active=n).finish.block_until_ready()
loop = (time.perf_counter() - t0) / b
save("batched", dict(flows=n, batch=b, first_s=first, per_scenario_s=steady / b,
                     loop_per_scenario_s=loop))

# 4. fluid step (public API only)
n, steps = (10_000, 20) if small else (100_000, 200)
inc, c, a, s = coupled_instance(n, 1)
size = jnp.asarray(s, jnp.float32)
first, steady, _ = time_jax(lambda: fj.simulate_fluid(inc, jnp.asarray(c, jnp.float32),
                                                      size, dt=1e-4, n_steps=steps),
                            repeats=2)
save("fluid", dict(flows=n, n_steps=steps, first_s=first, steady_s=steady,
                   steps_per_s=steps / steady))
PY
