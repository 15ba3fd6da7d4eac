"""The HPCC-paper experiments: the 16-to-1 incast micro-benchmark and the FCT study.

``hpcc_incast``: with HPCC (Li et al., SIGCOMM 2019) each of N flows into one link of
capacity C converges to its fair share.  The fluid law's equilibrium (set dR/dt = 0 in
``R = R_c eta / U + R_AI`` with ``U = N R / C`` and no standing queue, see
``fabric_jax.cc.hpcc``) is ``R = (eta + N R_AI / C) C / N``: with eta = 0.95,
R_AI = 40 Mb/s, N = 16, C = 100 Gb/s, R = 0.9564 C/16.  The queue built by the
line-rate start is bounded by what N flows at line rate add during the feedback delay
plus the reaction (< 2 base RTTs of (N-1) C), and drains to ~0.

``hpcc_fct``: smoke run on the 320-host fat-tree with a short window; checks the JSON
keys of the issue, the 20 equal-count buckets and slowdown >= 1.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import hpcc_fct, hpcc_incast


@pytest.mark.slow  # experiment run; tests/dynamics/test_cc.py::test_hpcc_equilibrium_utilisation stays fast
def test_incast_hpcc_converges_to_fair_share_with_bounded_queue(tmp_path):
    out = tmp_path / "incast.json"
    hpcc_incast.main(["--cc", "hpcc", "--duration-us", "600", "--json", str(out),
                      "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    r = data["laws"]["hpcc"]
    n, c = 16, 100e9 / 8
    eta, r_ai = 0.95, 40e6 / 8
    expected = (eta + n * r_ai / c)  # rate / (C/N) at the fluid equilibrium
    assert r["mean_rate_over_fair"] == pytest.approx(expected, abs=0.02)
    assert abs(r["mean_rate_over_fair"] - 1.0) < 0.06          # C/16 within 6 %
    assert r["max_flow_rate_error"] < 0.06                      # every flow, not the mean
    assert r["jain_index"] > 0.999
    base_rtt = 4e-6  # host -> switch -> host, 1 us per link, both ways
    assert r["max_queue_bytes"] < 2 * base_rtt * (n - 1) * c    # bounded burst
    assert r["steady_queue_bytes"] < 5e3                        # near-zero queue
    rates = np.asarray(r["rate_gbps"])
    assert rates.shape[0] == n and np.all(rates[:, 0] > 50)     # start at line rate
    assert (tmp_path / "hpcc_incast.png").exists()


@pytest.mark.slow
def test_incast_with_finite_flows_reports_completion_against_n_size_over_c(tmp_path):
    # 4 x 0.5 MB into one 400 Gb/s port: the bottleneck can finish no sooner than
    # 4 x 0.5 MB / 50 GB/s = 40 us after the first byte arrives (path latency 1 us).  A
    # law that keeps the port busy (DCQCN under PFC) meets it; HPCC's rate cut leaves
    # the port idle for a while and cannot beat it.
    out = tmp_path / "incast.json"
    hpcc_incast.main(["--cc", "hpcc,dcqcn", "--senders", "4", "--link-gbps", "400",
                      "--latency-us", "0.5", "--flow-mb", "0.5", "--duration-us",
                      "100", "--dt-us", "0.5", "--json", str(out)])
    laws = json.loads(out.read_text())["laws"]
    for r in laws.values():
        assert r["ideal_completion_us"] == pytest.approx(4 * 0.5e6 / 50e3 + 1.0)
        assert r["completion_over_ideal"] == pytest.approx(
            r["completion_us"] / r["ideal_completion_us"])
        assert r["completion_over_ideal"] >= 1.0 - 1e-3
    assert laws["dcqcn"]["completion_over_ideal"] == pytest.approx(1.0, abs=0.01)
    assert laws["hpcc"]["completion_over_ideal"] > 1.05


def test_incast_rejects_unknown_law():
    with pytest.raises(SystemExit):
        hpcc_incast.main(["--cc", "tcp_reno"])


def test_size_buckets_equal_count_and_percentiles():
    from fabric_jax.metrics import size_buckets
    rng = np.random.default_rng(0)
    size = rng.permutation(np.arange(1, 101, dtype=float) * 1e3)
    sd = size / 1e3  # slowdown = size in KB, so bucket i holds 5i+1 .. 5i+5
    b = size_buckets(sd, size, 20)
    assert len(b) == 20 and all(x["n_flows"] == 5 for x in b)
    assert [x["size_max_bytes"] for x in b] == [5e3 * (i + 1) for i in range(20)]
    assert b[0]["p50"] == 3.0 and b[19]["p50"] == 98.0
    assert b[3]["p99"] == pytest.approx(np.percentile([16, 17, 18, 19, 20], 99))
    with pytest.raises(ValueError, match="buckets"):
        size_buckets(sd[:10], size[:10], 20)
    with pytest.raises(ValueError, match="finite"):
        size_buckets(np.full(40, np.inf), np.ones(40), 20)


def test_paper_slowdown_is_the_ns3_definition():
    # [HPCC-NS3] third.cc qp_finish: standalone FCT = base RTT + size / bw, FCT measured
    # at the sender (last ACK).  A 5 KB flow over 6 hops of 1 us at 100 Gb/s: alone it
    # takes 0.4 us + 6 us to reach the receiver (fluid FCT), slowdown exactly 1; 10 us
    # of queueing on the way gives (16.4 + 6) / (0.4 + 12) = 1.806.
    line, lat = 12.5e9, np.array([6e-6, 6e-6, 2e-6])
    size = np.array([5e3, 5e3, 1e6])
    fct = np.array([0.4e-6 + 6e-6, 16.4e-6, 1e6 / line + 2e-6 - 1e-7])
    sd = hpcc_fct.paper_slowdown(fct, size, line, lat)
    assert sd[0] == pytest.approx(1.0, rel=1e-6)
    assert sd[1] == pytest.approx(22.4 / 12.4, rel=1e-6)
    assert sd[2] == 1.0                                   # floored: never below alone


def test_build_flows_marks_the_measured_window():
    import fabric_jax as fj
    topo = fj.hpcc_fat_tree()
    f = hpcc_fct.build_flows(topo, "fb_hadoop", 0.3, 0.3e-3, incast=False, incast_senders=4,
                             incast_bytes=2e4, incast_load=0.01, host_gbps=100.0, seed=0,
                             measure=(0.1e-3, 0.2e-3))
    arr = f["arrival"]
    assert arr.min() < 0.1e-3 and arr.max() > 0.2e-3      # arrivals before and after
    np.testing.assert_array_equal(f["measured"], (arr >= 0.1e-3) & (arr < 0.2e-3))
    # Poisson: about a third of the arrivals fall in the middle third
    assert abs(f["measured"].mean() - 1 / 3) < 0.05


def test_incast_events_hit_their_load():
    # 0.02 of 320 x 12.5 GB/s over 50 ms in 60 x 500 KB events: ~133 events expected
    src, dst, size, arr = hpcc_fct.incast_events(320, senders=60, size=500e3, load=0.02,
                                                 host_rate=12.5e9, window=0.05, seed=1)
    n_ev = src.size // 60
    assert abs(n_ev - 133.3) < 4 * np.sqrt(133.3)
    assert np.all(src != dst) and np.all(arr >= 0) and np.all(arr < 0.05)
    for k in range(n_ev):  # 60 distinct senders into one receiver per event
        ev = slice(60 * k, 60 * (k + 1))
        assert len(set(src[ev].tolist())) == 60 and len(set(dst[ev].tolist())) == 1


@pytest.mark.slow  # heavy; the slow suite runs it
def test_hpcc_fct_smoke(tmp_path):
    out = tmp_path / "fct.json"
    hpcc_fct.main(["--quick", "--cc", "hpcc", "--workload", "fb_hadoop",
                   "--window-ms", "0.03", "--drain-ms", "0.3",
                   "--incast", "on", "--incast-senders", "4",
                   "--incast-bytes", "20000", "--incast-load", "0.05",
                   "--json", str(out), "--plots", str(tmp_path)])
    data = json.loads(out.read_text())
    assert data["workload"] == "fb_hadoop" and data["load"] == 0.3
    r = data["results"]["hpcc"]
    assert set(r) >= {"buckets", "pfc_pause_fraction"}
    assert len(r["buckets"]) == 20
    for b in r["buckets"]:
        assert set(b) >= {"size_max_bytes", "n_flows", "p50", "p95", "p99"}
        assert 1.0 <= b["p50"] <= b["p95"] <= b["p99"]
    sizes = [b["size_max_bytes"] for b in r["buckets"]]
    assert sizes == sorted(sizes)
    counts = [b["n_flows"] for b in r["buckets"]]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == r["n_flows"]  # unfinished flows enter as lower bounds
    assert 0.0 <= r["pfc_pause_fraction"] <= 1.0
    assert r["incast"]["n_flows"] % 4 == 0
    assert (tmp_path / "hpcc_fct_fb_hadoop_0.3.png").exists()


def test_hpcc_fct_rejects_bad_flags():
    with pytest.raises(SystemExit):
        hpcc_fct.main(["--load", "1.5"])
    with pytest.raises(SystemExit):
        hpcc_fct.main(["--cc", "dcqcn,nope"])
    with pytest.raises(SystemExit):
        hpcc_fct.main(["--workload", "storage"])


def test_side_by_side_picks_the_nearest_bucket():
    ups = [2e3, 6e3, 70e3, 190e3, 1.1e6, 29e6]
    buckets = [{"size_max_bytes": u, "n_flows": 1, "p50": 1.0 + i, "p95": 2.0 + i,
                "p99": 3.0 + i} for i, u in enumerate(ups)]
    rows = hpcc_fct.side_by_side({"hpcc": {"buckets": buckets}}, "web_search", 0.3)
    assert rows and all(r["law"] == "hpcc" for r in rows)  # no dcqcn results given
    at = {(r["pct"], r["size"]): r for r in rows}
    # 5 KB -> the 6 KB bucket (index 1); 73 KB -> 70 KB (index 2); 30 MB -> last
    assert at[("p95", "5K")]["fluid"] == 3.0
    assert at[("p95", "73K")]["fluid"] == 4.0
    assert at[("p99", "30M")]["fluid"] == 8.0
    published = hpcc_fct.PUBLISHED[("web_search", 0.3, "p95")][5e3]["hpcc"]
    assert at[("p95", "5K")]["published"] == published
    assert hpcc_fct.side_by_side({"hpcc": {"buckets": buckets}}, "web_search", 0.7) == []
