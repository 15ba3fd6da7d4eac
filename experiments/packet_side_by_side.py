"""Fluid model vs a packet-level simulator (ns-3 3.44) on the same scenarios.

The packet side is ``experiments/packet_reference/fabric_ref.cc`` built by
``experiments/packet_reference/build.sh`` against the pip wheel of ns-3 (the optional
extra ``pip install -e ".[packet]"``).  ns-3 models TCP (here DCTCP), RED/ECN, drop-tail
queues and per-packet random ECMP (spraying); it has no RDMA NIC, PFC, DCQCN or HPCC,
so each scenario runs a mechanism both sides share:

1. **Incast** ``--senders``-to-1 (default 16) through one switch, 100 Gb/s, 1 us links,
   1 MB per sender, DCTCP with step ECN marking at ``K = C T / 7``: the fluid law
   :mod:`fabric_jax.cc.dctcp` (window-based, Alizadeh et al. 2011's fluid model) vs
   ns-3's ``TcpDctcp``: the bottleneck queue's p50 / p99 and the last finish time.
2. **Leaf-spine spraying, out of order**: 2 leaves x 4 hosts, 4 spines, every host sends
   to its peer on the other leaf at ``load`` x line rate (constant-rate UDP, per-packet
   random spine): the fraction of packets overtaken by a later one and the leaf-uplink
   queue, against :func:`fabric_jax.receiver.out_of_order_probability` with the port
   waits of :mod:`fabric_jax.queueing` (the same ports, the same rates).  The fluid's
   resulting goodput of ``roce(routing="spray")`` with and without a reordering NIC
   (go-back-N, :mod:`fabric_jax.receiver`) is printed next to it; ns-3 has no
   go-back-N RoCE receiver, so the goodput rows of the packet side are TCP's (below).
3. **Leaf-spine permutation, TCP goodput**: the same permutation with 4 MB DCTCP flows,
   per-flow ECMP (each flow pinned to a random spine, the same spines on both sides) or
   spraying with fast retransmit after 3 duplicate ACKs (reordering treated as loss)
   or after 1000 (tolerated): mean flow goodput over line rate.
4. **Ring all-reduce step across two leaves**: 8 hosts in a ring, each sends 1 MB to
   the next (two flows cross the spines), DCTCP, per-flow ECMP: the step's completion.
5. **HPCC paper fat-tree at 30-50 % load**: not run here: ns-3's wheel has no RDMA NIC,
   PFC, DCQCN or HPCC INT; ``experiments/hpcc_fct.py`` compares the fluid FCT slowdowns
   with the HPCC paper's published figures (transcribed in ``experiments/_hpcc.py`` /
   ``tests/experiments/test_hpcc_experiments.py``).

Times on the packet side run from the first data byte a flow hands to TCP (after its
handshake, which the fluid model does not have).  Link latencies: ns-3 stores and forwards, so each hop adds one packet's serialisation
(4096 B: 0.33 us at 100 Gb/s) to the propagation; the fluid fabric is cut-through, so
its link latency is set to propagation + one packet time.  Every fluid figure states its
``dt``; ``--dt-us`` changes it (the dt/4 check in ``docs/fidelity.md``).

Usage::

    pip install -e ".[packet]" && bash experiments/packet_reference/build.sh
    python experiments/packet_side_by_side.py --json results/side_by_side.json
    python experiments/packet_side_by_side.py --fit-burstiness   # the queueing hook's fit
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._common import finish, parser
from experiments.hpcc_incast import star_text

import fabric_jax as fj
from fabric_jax import links as lk
from fabric_jax import queueing as qm
from fabric_jax import receiver as rx
from fabric_jax.fabric_sim import bind_routing, route
from fabric_jax.units import gbps

HERE = Path(__file__).resolve().parent
BINARY = HERE / "packet_reference" / "build" / "fabric_ref"
MTU = 4096.0
LINK_GBPS = 100.0
LATENCY_US = 1.0
LOADS = (0.3, 0.5, 0.7, 0.9)


# ------------------------------------------------------------------ packet side
def run_ns3(binary, **kw) -> dict:
    """Runs the reference binary with ``--key=value`` arguments; parses its output."""
    cmd = [str(binary)] + [f"--{k}={v}" for k, v in kw.items()]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = {"flows": [], "ecmp_spine": {}, "command": " ".join(cmd)}
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "flow":
            d = dict(zip(parts[0::2], parts[1::2]))
            res["flows"].append({k: float(v) for k, v in d.items()})
        elif parts[0] == "ecmp_spine":
            res["ecmp_spine"][(int(parts[1]), int(parts[2]))] = int(parts[3])
        elif len(parts) == 2:
            try:
                res[parts[0]] = float(parts[1])
            except ValueError:
                res[parts[0]] = parts[1]
    return res


# ------------------------------------------------------------------ fluid side
def _hop_latency_us(link_gbps=LINK_GBPS, latency_us=LATENCY_US):
    """Propagation + one packet's store-and-forward time, us (module docstring)."""
    return latency_us + MTU * 8 / (link_gbps * 1e3)


def _dctcp_params(k_packets):
    return fj.cc.dctcp_params(k_bytes=float(k_packets) * MTU, mss=MTU)


def fluid_incast(n_senders, flow_bytes, k_packets, dt_us):
    topo = fj.from_ns3_topology(star_text(n_senders, LINK_GBPS, _hop_latency_us()))
    src, dst = np.arange(n_senders), np.full(n_senders, n_senders)
    _, _, inc = route(topo, src, dst, max_paths=1)       # one path: a static route
    bott = topo.link_index(f"s{n_senders + 1}", f"h{n_senders}")
    cap = gbps(LINK_GBPS)
    horizon = 1.6 * n_senders * flow_bytes / cap + 50e-6
    dt = dt_us * 1e-6
    n = int(np.ceil(horizon / dt))
    res = fj.simulate_fluid(inc, topo.capacity, np.full(n_senders, float(flow_bytes)), dt=dt,
                            n_steps=n, save_every=1, law="dctcp",
                            params=_dctcp_params(k_packets), link_latency=topo.latency,
                            nic_links=topo)
    fin = np.asarray(res.finish, float)
    t = np.asarray(res.trajectory.t)
    q = np.asarray(res.trajectory.queue)[:, bott]
    busy = q[t <= fin.max()]
    return {"finish_us": float(fin.max() * 1e6), "queue_p50_bytes": float(np.median(busy)),
            "queue_p99_bytes": float(np.quantile(busy, 0.99)),
            "queue_max_bytes": float(q.max()), "dt_us": dt_us,
            "ideal_us": (n_senders * flow_bytes / cap + 2 * _hop_latency_us() * 1e-6) * 1e6}


def _leaf_spine(hosts_per_leaf=4, spines=4):
    topo = fj.leaf_spine(2, spines, hosts_per_leaf, link_gbps=LINK_GBPS,
                         latency_us=_hop_latency_us())
    h = hosts_per_leaf
    src = np.r_[np.arange(h), h + np.arange(h)]
    dst = np.r_[h + np.arange(h), np.arange(h)]
    return topo, src, dst


def spray_model(load, burstiness=qm.DEFAULT_BURSTINESS, hosts_per_leaf=4, spines=4):
    """The model's out-of-order probability and leaf-uplink queue for the sprayed
    permutation at ``load`` (every flow at ``load`` x line rate, even split): the same
    functions the fluid receiver calls each step, on the same ports and rates."""
    topo, src, dst = _leaf_spine(hosts_per_leaf, spines)
    ps = fj.shortest_paths(topo, src, dst)
    links = np.asarray(ps.links)
    mask = np.asarray(ps.hop_mask, bool) & (links >= 0)
    n_f, n_p, seg = links.shape
    tab = np.where(mask, links, topo.n_links).reshape(n_f, -1)
    hops = lk.hop_table(tab, jnp.asarray(mask.reshape(n_f, -1), jnp.float32), seg, topo.n_links)
    pr = qm.ingress_pairs(np.asarray(hops.link), np.asarray(hops.prev), topo.n_links)
    pairs = qm.IngressPairs(jnp.asarray(pr.pair), jnp.asarray(pr.pair_link))
    cap = jnp.asarray(topo.capacity, jnp.float32)
    split = jnp.full((n_f, n_p), 1.0 / n_p)
    rate = jnp.full((n_f,), load * gbps(LINK_GBPS))
    wait = rx.path_waits(hops, split, rate, cap, pairs, MTU, burstiness)
    p = rx.out_of_order_probability(split, jnp.zeros((n_f, n_p)), rate, MTU, wait=wait)
    entry = jnp.where(hops.valid, jnp.repeat(split * rate[:, None], seg, axis=1), 0.0)
    pw = qm.port_wait(entry, hops.link, pairs, cap, MTU, burstiness=burstiness)
    up = topo.link_index("leaf0", "spine0")
    rho = load * hosts_per_leaf / spines
    queue = float(pw.mean[up]) * rho * float(cap[up])   # Little: bytes = lambda W mtu
    return float(np.mean(np.asarray(p))), queue


def fluid_spray_goodput(load, reorder, dt_us, burstiness=qm.DEFAULT_BURSTINESS,
                        horizon_us=200.0):
    """Goodput (delivered / arrived) of ``roce(routing="spray")`` flows at ``load`` x
    line rate (law ``none``: the load is what is offered), reordering NIC or not."""
    topo, src, dst = _leaf_spine()
    _, r, inc = route(topo, src, dst, "spray")
    dt = dt_us * 1e-6
    res = fj.simulate_fluid(inc, topo.capacity, np.full(src.size, 1e12), dt=dt,
                            n_steps=int(round(horizon_us / dt_us)), law="none",
                            line_rate=np.full(src.size, load * gbps(LINK_GBPS)),
                            link_latency=topo.latency, nic_links=topo, routing=r,
                            reorder=reorder, loss_recovery="go_back_n",
                            burstiness=burstiness)
    deliv, disc = float(np.sum(res.delivered)), float(np.sum(res.discarded))
    return deliv / (deliv + disc) if deliv + disc > 0 else 1.0


def fluid_tcp_permutation(routing, reorder, spine_of, flow_bytes, k_packets, dt_us,
                          ring=False):
    """DCTCP flows on the 2 x 4 x 4 leaf-spine: the permutation (or one ring step);
    ``routing``: ``"ecmp"`` (each flow on the spine ns-3 pinned it to) or ``"spray"``.
    Returns ``(finish [flows] s, delivered [flows] bytes, horizon s)``."""
    topo, src, dst = _leaf_spine()
    if ring:
        n = 8
        src, dst = np.arange(n), (np.arange(n) + 1) % n
    ps = fj.shortest_paths(topo, src, dst)
    names = topo.node_names
    dt = dt_us * 1e-6
    size = np.full(src.size, float(flow_bytes))
    cap = gbps(LINK_GBPS)
    n_steps = int(np.ceil((4.0 * flow_bytes / cap + 100e-6) / dt))
    kw = dict(dt=dt, n_steps=n_steps, law="dctcp", params=_dctcp_params(k_packets),
              link_latency=topo.latency, nic_links=topo)
    if routing == "ecmp":
        choice = np.zeros(src.size, np.int64)
        for f in range(src.size):
            s = spine_of.get((int(src[f]), int(dst[f])))
            if s is None:        # same leaf: one path
                continue
            for p in range(int(ps.n_paths[f])):
                hop1 = int(ps.links[f, p, 1])
                if names[int(topo.link_dst[hop1])] == f"spine{s}":
                    choice[f] = p
        one = ps.select(choice)
        res = fj.simulate_fluid(fj.Incidence.from_paths(one, n_links=topo.n_links),
                                topo.capacity, size, **kw)
    else:
        r, inc = bind_routing(ps, "spray", n_links=topo.n_links)
        res = fj.simulate_fluid(inc, topo.capacity, size, routing=r, reorder=reorder,
                                loss_recovery="go_back_n", **kw)
    return np.asarray(res.finish, float), np.asarray(res.delivered, float), n_steps * dt


def _goodput(finish, delivered, horizon, size):
    """Mean over flows of size / finish (delivered / horizon for a flow that did not
    finish), over the line rate."""
    done = np.isfinite(finish)
    g = np.where(done, size / np.where(done, finish, 1.0), delivered / horizon)
    return float(np.mean(g / gbps(LINK_GBPS)))


# ------------------------------------------------------------------ the study
def _ratio(a, b):
    return float(a) / float(b) if b not in (0, None) and np.isfinite(b) and b != 0 else None


def run(binary, *, dt_us=0.25, quick=False, n_senders=16, fit=False) -> dict:
    out = {"dt_us": dt_us, "link_gbps": LINK_GBPS, "latency_us": LATENCY_US, "rows": [],
           "burstiness": qm.DEFAULT_BURSTINESS}
    rows = out["rows"]

    def row(scenario, figure, fluid, packet, note=""):
        rows.append({"scenario": scenario, "figure": figure, "fluid": fluid,
                     "packet": packet, "fluid/packet": _ratio(fluid, packet), "note": note})

    # 1. incast
    flow = 2.5e5 if quick else 1e6
    pk = run_ns3(binary, scenario="incast", senders=n_senders, linkGbps=LINK_GBPS,
                 latencyUs=LATENCY_US, flowBytes=int(flow), sampleNs=100)
    k = int(pk["k_packets"])
    fl = fluid_incast(n_senders, flow, k, dt_us)
    done = max(f["done_us"] for f in pk["flows"]) - min(f["start_us"] for f in pk["flows"])
    out["incast"] = {"packet": pk, "fluid": fl}
    name = f"incast {n_senders}:1, {flow / 1e6:g} MB, DCTCP K={k}"
    row(name, "finish (us)", fl["finish_us"], done)
    row(name, "queue p50 (KB)", fl["queue_p50_bytes"] / 1e3, pk["queue_p50_bytes"] / 1e3)
    row(name, "queue p99 (KB)", fl["queue_p99_bytes"] / 1e3, pk["queue_p99_bytes"] / 1e3)

    # 2. sprayed permutation, out of order
    loads = LOADS[1:3] if quick else LOADS
    dur = 1000 if quick else 3000
    spray = []
    for load in loads:
        pk = run_ns3(binary, scenario="leafspine", routing="spray", transport="udp",
                     load=load, linkGbps=LINK_GBPS, latencyUs=LATENCY_US, durationUs=dur)
        n_pk = sum(f["packets"] for f in pk["flows"])
        ooo = sum(f["ooo"] for f in pk["flows"]) / max(n_pk, 1)
        p_model, q_model = spray_model(load)
        p1, q1 = spray_model(load, burstiness=1.0)
        g_plain = fluid_spray_goodput(load, False, dt_us)
        g_reorder = fluid_spray_goodput(load, True, dt_us)
        spray.append(dict(load=load, packet_ooo=ooo, model_ooo=p_model, model_ooo_analytic=p1,
                          packet_queue_mean=pk["queue_mean_bytes"], model_queue_mean=q_model,
                          model_queue_mean_analytic=q1, packet_queue_p99=pk["queue_p99_bytes"],
                          fluid_goodput_plain=g_plain, fluid_goodput_reorder=g_reorder,
                          command=pk["command"]))
        name = f"spray, load {load:g}"
        row(name, "P(out of order)", p_model, ooo,
            f"kappa=1: {p1:.4f}" if qm.DEFAULT_BURSTINESS != 1.0 else "")
        row(name, "uplink queue mean (B)", q_model, pk["queue_mean_bytes"])
        row(name, "fluid goodput, go-back-N / reorder", g_plain, None,
            f"reorder NIC {g_reorder:.3f}")
    out["spray"] = spray

    # 3. TCP permutation: ECMP, spray with dupthresh 3 / 1000
    flow = 1e6 if quick else 4e6
    perm = {}
    for label, routing, dup in (("ecmp", "ecmp", 3), ("spray dupthresh 3", "spray", 3),
                                ("spray dupthresh 1000", "spray", 1000)):
        pk = run_ns3(binary, scenario="leafspine", routing=routing, transport="tcp",
                     flowBytes=int(flow), dupThresh=dup, linkGbps=LINK_GBPS,
                     latencyUs=LATENCY_US, seed=1)
        k_ls = int(pk["k_packets"])        # K of this fabric's RTT (C T / 7)
        fct = np.array([f["done_us"] - f["start_us"] for f in pk["flows"]]) * 1e-6
        good_pk = float(np.mean(flow / fct / gbps(LINK_GBPS)))
        perm[label] = {"packet": pk, "packet_goodput": good_pk}
        if routing == "ecmp":
            spines = pk["ecmp_spine"]
            good_fl = _goodput(*fluid_tcp_permutation("ecmp", True, spines, flow, k_ls, dt_us),
                               flow)
            row("permutation 8 x 4 MB, ECMP", "mean goodput / line rate", good_fl, good_pk)
        else:
            reorder = dup > 3
            good_fl = _goodput(*fluid_tcp_permutation("spray", reorder, {}, flow, k_ls,
                                                     dt_us),
                               flow)
            row(f"permutation, spray, {'reordering' if reorder else 'plain'} receiver",
                "mean goodput / line rate", good_fl, good_pk,
                "fluid: RoCE go-back-N; ns-3: TCP " + ("dupthresh 1000" if reorder else
                                                       "dupthresh 3 (fast retransmit)"))
        perm[label]["fluid_goodput"] = good_fl
    out["permutation"] = {k2: {kk: vv for kk, vv in v.items() if kk != "packet"} | {
        "command": v["packet"]["command"]} for k2, v in perm.items()}

    # 4. ring all-reduce step across two leaves
    flow = 1e6
    pk = run_ns3(binary, scenario="ring", routing="ecmp", flowBytes=int(flow),
                 linkGbps=LINK_GBPS, latencyUs=LATENCY_US, seed=1)
    done = max(f["done_us"] for f in pk["flows"]) - min(f["start_us"] for f in pk["flows"])
    fin, _, _ = fluid_tcp_permutation("ecmp", True, pk["ecmp_spine"], flow,
                                      int(pk["k_packets"]), dt_us, ring=True)
    row("ring step, 8 hosts on 2 leaves, 1 MB", "step time (us)", float(fin.max() * 1e6), done)
    out["ring"] = {"packet_us": done, "fluid_us": float(fin.max() * 1e6),
                   "command": pk["command"]}

    row("HPCC fat-tree 30-50 % load", "FCT slowdown per size bucket", None, None,
        "not in ns-3's wheel (no RDMA/PFC/DCQCN/HPCC): experiments/hpcc_fct.py vs the "
        "paper's figures")
    if fit:
        out["fit"] = fit_burstiness(spray)
    return out


def fit_burstiness(spray, grid=np.round(np.arange(0.5, 2.001, 0.05), 3)):
    """Least squares in log P(out of order) of the model against ns-3 over the loads
    where ns-3 saw reordering: the default of :data:`fabric_jax.queueing
    .DEFAULT_BURSTINESS`."""
    pts = [(s["load"], s["packet_ooo"]) for s in spray if s["packet_ooo"] > 0]
    err = []
    for kappa in grid:
        e = sum((np.log(spray_model(load, burstiness=float(kappa))[0]) - np.log(p)) ** 2
                for load, p in pts)
        err.append(e)
    best = float(grid[int(np.argmin(err))])
    print(f"fitted burstiness kappa = {best:g} over loads {[p[0] for p in pts]} "
          f"(sum of squared log errors {min(err):.3f}; kappa = 1: "
          f"{err[int(np.argmin(np.abs(grid - 1.0)))]:.3f})")
    return {"kappa": best, "loads": [p[0] for p in pts], "grid": grid.tolist(), "sse": err}


def main(argv=None) -> dict:
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--dt-us", type=float, default=0.25, help="fluid step (default 0.25 us)")
    ap.add_argument("--senders", type=int, default=16, help="incast degree (default 16)")
    ap.add_argument("--binary", default=str(BINARY), help="the built reference program")
    ap.add_argument("--fit-burstiness", action="store_true",
                    help="also fit the queueing burstiness hook against ns-3")
    args = ap.parse_args(argv)
    if not (args.dt_us > 0 and args.senders >= 1):
        ap.error("--dt-us must be > 0 and --senders >= 1")
    binary = Path(args.binary)
    if not binary.is_file():
        print(f"packet_side_by_side: {binary} not found.  Install the packet simulator "
              f"(ns-3 3.44 wheel) and build the reference:\n"
              f"  pip install -e \".[packet]\"\n  bash experiments/packet_reference/build.sh",
              file=sys.stderr)
        sys.exit(2)
    t0 = time.perf_counter()
    res = run(binary, dt_us=args.dt_us, quick=args.quick, n_senders=args.senders,
              fit=args.fit_burstiness)
    res["wall_s"] = time.perf_counter() - t0
    return finish(res, args, res["rows"], ["scenario", "figure", "fluid", "packet",
                                           "fluid/packet", "note"],
                  title=f"fluid (dt = {args.dt_us:g} us) vs ns-3 3.44, {LINK_GBPS:g} Gb/s, "
                        f"{LATENCY_US:g} us links (wall {res['wall_s']:.0f} s)", started=started)


if __name__ == "__main__":
    main()
