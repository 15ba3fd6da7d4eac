"""Plain-NumPy oracle of one fluid step, looped over steps, for tiny cases.

Written from the model statement in :mod:`fabric_jax.fluid` / :mod:`fabric_jax.links`,
independently of their JAX code (explicit Python loops over flows, hops and links;
the per-step max-min share comes from the textbook progressive filling of
``maxmin_numpy``).  Law ``"none"`` (every active flow offers
``min(line_rate, remaining / dt)``), one path per flow, no faults or routing.

Per step ``k`` (``t = k dt``):

1. flow ``f`` is active when ``arrival_f < t + dt`` and it has not finished; it offers
   ``min(line_rate a_f, remaining / dt)``, ``a_f = (t + dt - arrival_f) / dt`` clipped
   to [0, 1] (it sends only after its arrival);
2. usable capacity ``u_l``: ``C_l``, or ``0`` while paused (PFC, a decision taken at the
   end of the previous step);
3. every link serves its standing queue plus the bytes arriving from the hop before
   in the same step, ``s_l = min(q_l + a_l, u_l dt)``, as an exact FIFO of cohorts: the
   bytes that joined the queue in one step form one cohort (a list kept in arrival
   order), the link serves whole cohorts oldest first, each entry of a cohort in
   proportion to its bytes, then the step's arrivals in proportion; links are taken
   in topological order of the route graph (a link after every link that precedes it
   on some path), so ``a_l`` is known when ``l`` is served;
4. each host NIC (``nic``) shares ``max(u_l - s_l/dt, 0)`` max-min among its flows'
   offers, whatever lies downstream: that is what the flow sends (the rest of its offer
   is not sent; ``sent`` counts only what left the NIC); the sent rates share
   ``max(u_l - s_l/dt, 0)`` max-min over the whole path (cut-through), and the rest of
   each sent rate waits at the first switch port of its path where the sent load
   exceeds that capacity;
5. buffers: PFC drops the ingress-pool overflow, ``drop`` the egress overflow at switch
   ports, both from the bytes that arrived in the step and still stand; what is left
   of them is the link's newest cohort;
6. bytes through the last hop and cut-through bytes ride the receiver wire for
   the flow's one-way latency ``L = n dt + phi dt`` (``1 - phi`` delivered ``n`` steps
   later, ``phi`` one step after that);
7. PFC: ingress pool (standing bytes) above ``xoff`` pauses the link,
   below ``xon`` resumes it;
8. a flow finishes when its bytes through the last queue reach its size, plus ``L``.
   Inside the step its bytes served by the last hop leave first, at their FIFO
   positions in the port's service (from the first cohort position it is served in
   to the end of the last), that service spread over the time the port needs for
   what it serves (``s_l / u_l``); its cut-through bytes leave from
   ``max(arrival, t)`` at its allocation raised by the smallest capacity left free on
   its path (``u_l - s_l/dt - sum of allocations``), at most its line rate.
"""

from __future__ import annotations

import numpy as np

from fabric_jax.reference.maxmin_numpy import progressive_filling


def simulate(paths, capacity, size, *, dt, n_steps, line_rate, one_way, mode="none",
             buffer=np.inf, xoff=None, xon=None, nic=None, arrival=None):
    """Runs the oracle.

    Args:
      paths: list of link lists, one per flow, in hop order.
      capacity: ``[links]`` bytes/s.
      size, line_rate, one_way, arrival: ``[flows]`` bytes, bytes/s, s, s.
      mode: ``"none"``, ``"pfc"`` or ``"drop"``.
      buffer, xoff, xon: ``[links]`` bytes.
      nic: ``[links]`` bool, host-NIC egress links (never drop).

    Returns:
      dict of ``queue`` ``[steps, links]``, ``delivered``, ``dropped``, ``sent``,
      ``queued``, ``in_flight``, ``finish`` (``[flows]``), ``paused`` ``[steps, links]``.
    """
    cap = np.asarray(capacity, float)
    n_links, n_flows = cap.size, len(paths)
    size = np.asarray(size, float)
    arrival = np.zeros(n_flows) if arrival is None else np.asarray(arrival, float)
    buf = np.broadcast_to(np.asarray(buffer, float), (n_links,))
    xoff = buf if xoff is None else np.asarray(xoff, float)
    xon = xoff if xon is None else np.asarray(xon, float)
    nic = np.zeros(n_links, bool) if nic is None else np.asarray(nic, bool)
    A = np.zeros((n_links, n_flows))
    for f, p in enumerate(paths):
        for l in p:
            A[l, f] = 1.0
    x = [np.zeros(len(p)) for p in paths]        # standing bytes per hop
    fifo = [[] for _ in range(n_links)]          # per link: cohorts {(f, h): bytes}
    # topological order of the links: l after every link that precedes it on a path
    preds = {l: set() for l in range(n_links)}
    for p in paths:
        for a, b in zip(p[:-1], p[1:]):
            preds[b].add(a)
    order, placed = [], set()
    while len(order) < n_links:
        ready = [l for l in range(n_links) if l not in placed and preds[l] <= placed]
        if not ready:
            raise ValueError("the oracle needs routes without cycles")
        order += ready
        placed |= set(ready)
    n_w = np.floor(np.asarray(one_way) / dt + 1e-9).astype(int)
    phi = np.asarray(one_way) / dt - n_w
    phi = np.where(phi < 1e-9, 0.0, phi)
    pending = {}                                 # (step, flow) -> bytes due
    remaining = size.copy()
    passed = np.zeros(n_flows)
    delivered = np.zeros(n_flows)
    dropped = np.zeros(n_flows)
    sent = np.zeros(n_flows)
    done = np.zeros(n_flows, bool)
    finish = np.full(n_flows, np.inf)
    pause = np.zeros(n_links)
    q_hist, p_hist = [], []
    for k in range(n_steps):
        t = k * dt
        active = (arrival < t + dt) & ~done
        live = np.clip((t + dt - arrival) / dt, 0.0, 1.0)
        offered = np.where(active, np.minimum(line_rate * live, remaining / dt), 0.0)
        usable = cap * (1.0 - pause) if mode == "pfc" else cap.copy()
        served = [np.zeros(len(p)) for p in paths]
        left = [np.zeros(len(p)) for p in paths]
        arrived_left = [np.zeros(len(p)) for p in paths]
        arr = [np.zeros(len(p)) for p in paths]  # bytes reaching each hop this step
        span = [[[np.inf, 0.0] for _ in p] for p in paths]   # FIFO positions sent
        s_l = np.zeros(n_links)
        for l in order:
            entries = [(f, h) for f, p in enumerate(paths) for h, m in enumerate(p) if m == l]
            budget = usable[l] * dt
            kept = []
            pos_l = 0.0                            # bytes the link has sent so far
            for cohort in fifo[l]:                 # oldest first
                tot = sum(cohort.values())
                take = min(budget, tot)
                frac = take / tot if tot > 0 else 0.0
                for (f, h), b in cohort.items():
                    served[f][h] += b * frac
                    if b * frac > 0:               # its bytes leave in [pos, pos + take]
                        span[f][h] = [min(span[f][h][0], pos_l), pos_l + take]
                budget -= take
                pos_l += take
                rest = {e: b * (1 - frac) for e, b in cohort.items() if b * (1 - frac) > 0}
                if rest and frac < 1:
                    kept.append(rest)
            fifo[l] = kept
            a_l = sum(arr[f][h] for f, h in entries)
            s_a = min(a_l, max(budget, 0.0))
            frac = s_a / a_l if a_l > 0 else 0.0
            for f, h in entries:
                served[f][h] += arr[f][h] * frac
                if arr[f][h] * frac > 0:           # arrivals: after the standing bytes
                    span[f][h] = [min(span[f][h][0], pos_l), pos_l + s_a]
                arrived_left[f][h] = arr[f][h] * (1 - frac)
                left[f][h] = x[f][h] + arr[f][h] - served[f][h]
                if h + 1 < len(paths[f]):
                    arr[f][h + 1] += served[f][h]
            s_l[l] = sum(served[f][h] for f, h in entries)
        fresh = np.maximum(usable - s_l / dt, 0.0)
        # the NICs share their capacity max-min among their flows' offers (a flow
        # whose path starts at no NIC sends its offer); the rest is not sent
        send = np.minimum(progressive_filling(A * nic[:, None], fresh, offered)[0], offered)
        held = offered - send
        alloc = np.minimum(progressive_filling(A, fresh, send)[0], send)
        load_s = A @ send
        for f, p in enumerate(paths):
            ex = (send[f] - alloc[f]) * dt
            for h, l in enumerate(p):
                if load_s[l] > fresh[l] * (1 + 1e-6) and not nic[l]:
                    left[f][h] += ex
                    arrived_left[f][h] += ex
                    break
            else:
                held[f] += ex      # no port downstream took it (round-off): not sent
        x_new = [lf.copy() for lf in left]
        drop_now = np.zeros(n_flows)
        if mode in ("pfc", "drop"):
            level = np.zeros(n_links)
            arr = np.zeros(n_links)
            for f, p in enumerate(paths):
                for h, l in enumerate(p):
                    pool = (p[h - 1] if h > 0 else None) if mode == "pfc" else l
                    if pool is None or (mode == "drop" and nic[l]):
                        continue
                    level[pool] += x_new[f][h]
                    arr[pool] += arrived_left[f][h]
            for f, p in enumerate(paths):
                for h, l in enumerate(p):
                    pool = (p[h - 1] if h > 0 else None) if mode == "pfc" else l
                    if pool is None or (mode == "drop" and nic[l]) or arr[pool] <= 0:
                        continue
                    ratio = min(max(level[pool] - buf[pool], 0.0) / arr[pool], 1.0)
                    d = arrived_left[f][h] * ratio
                    x_new[f][h] -= d
                    drop_now[f] += d
        passed_now = alloc * dt
        for f, p in enumerate(paths):
            passed_now[f] += served[f][len(p) - 1]
        for f in range(n_flows):
            for step, part in ((k + n_w[f], 1 - phi[f]), (k + n_w[f] + 1, phi[f])):
                pending[(step, f)] = pending.get((step, f), 0.0) + passed_now[f] * part
        deliv_now = np.array([pending.pop((k, f), 0.0) for f in range(n_flows)])
        sent += offered * dt - held * dt
        remaining = np.maximum(remaining - (offered - held) * dt + drop_now, 0.0)
        dropped += drop_now
        delivered += deliv_now
        spare = np.maximum(usable - s_l / dt - A @ alloc, 0.0)
        for f, p in enumerate(paths):
            if active[f] and passed[f] + passed_now[f] >= size[f] * (1 - 1e-5):
                need = max(size[f] - passed[f], 0.0)
                q_f, last = served[f][-1], p[-1]
                drain = min(s_l[last] / usable[last], dt) if usable[last] > 0 else dt
                # its bytes leave between the FIFO positions lo and hi of the port's
                # service of s_l bytes, spread over the drain time
                lo, hi = span[f][-1]
                lo, hi = (lo / s_l[last], hi / s_l[last]) if q_f > 0 else (0.0, 1.0)
                if q_f > 0 and need <= q_f:
                    t_in = t + drain * (lo + (hi - lo) * need / q_f)
                else:
                    rate = min(max(alloc[f] + min(spare[l] for l in p), alloc[f]),
                               max(line_rate[f], alloc[f]))
                    s0 = min(max(arrival[f], t), t + dt)
                    extra = min(need - q_f, alloc[f] * dt)   # above it: round-off
                    t_c = s0 + extra / rate if rate > 0 else s0
                    t_in = max(t + (drain * hi if q_f > 0 else 0.0), t_c)
                t_in = min(max(t_in, t), t + dt)
                finish[f] = max(t_in, arrival[f]) + one_way[f]
                done[f] = True
        passed += passed_now
        if mode == "pfc":
            pool = np.zeros(n_links)
            for f, p in enumerate(paths):
                for h in range(1, len(p)):
                    pool[p[h - 1]] += x_new[f][h]
            on = pool > xoff
            off = pool < xon
            pause = np.where(on, 1.0, np.where(off, 0.0, pause))
        for f, p in enumerate(paths):              # the step's newcomers: a new cohort
            for h, l in enumerate(p):
                b = x_new[f][h] - (left[f][h] - arrived_left[f][h])
                if b > 0:
                    if not fifo[l] or fifo[l][-1].get("k") != k:
                        fifo[l].append({"k": k})
                    fifo[l][-1][(f, h)] = b
        for l in range(n_links):
            for cohort in fifo[l]:
                cohort.pop("k", None)
        x = x_new
        q = np.zeros(n_links)
        for f, p in enumerate(paths):
            for h, l in enumerate(p):
                q[l] += x[f][h]
        q_hist.append(q)
        p_hist.append(pause.copy())
    in_flight = np.zeros(n_flows)
    for (step, f), b in pending.items():
        in_flight[f] += b
    return dict(queue=np.array(q_hist), delivered=delivered, dropped=dropped, sent=sent,
                queued=np.array([xf.sum() for xf in x]), in_flight=in_flight, finish=finish,
                paused=np.array(p_hist))
