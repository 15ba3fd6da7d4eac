"""FlowSizeCDF: closed-form means, quantiles, sampling, file formats, published tables."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from fabric_jax.workloads import FlowSizeCDF

REF = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "workloads"

# DCTCP web-search table (HPCC traffic_gen/WebSearch_distribution.txt): size, percent.
WEB = [(0, 0), (10000, 15), (20000, 20), (30000, 30), (50000, 40), (80000, 53),
       (200000, 60), (1000000, 70), (2000000, 80), (5000000, 90), (10000000, 97),
       (30000000, 100)]


def _step_mean_by_hand(table):
    """Atoms of mass (p_i - p_{i-1}) at x_i: an explicit loop, independent of the code."""
    total, prev = 0.0, 0.0
    for x, p in table:
        total += (p - prev) / 100.0 * x
        prev = p
    return total


def test_web_search_means_published_and_rules_differ():
    ws = FlowSizeCDF.builtin("web_search")
    # Published mean of HPCC's linear-interpolation sampler (reference README): 1,711,250 B.
    assert ws.interpolation == "linear"
    assert ws.mean() == pytest.approx(1_711_250.0, rel=1e-12)
    step = ws.with_interpolation("step")
    assert step.mean() == pytest.approx(_step_mean_by_hand(WEB), rel=1e-12)
    # Step puts each segment's mass at its upper end: strictly larger here (2,434,900 B).
    assert step.mean() > 1.4 * ws.mean()


@pytest.mark.parametrize("rule", ["linear", "step"])
@pytest.mark.parametrize("name", ["web_search", "hadoop"])
def test_sample_mean_matches_exact_mean(name, rule):
    cdf = FlowSizeCDF.builtin(name, interpolation=rule)
    # Enough samples that 1% is 4 standard errors (cv = 2.3 web search, 5.6 Hadoop), so
    # the check is meaningful, not lucky: n >= (4 cv / 0.01)^2.
    n = int(np.ceil((400 * cdf.std() / cdf.mean()) ** 2))
    assert 200_000 <= n <= 6_000_000
    sample = cdf.sample(jax.random.key(7), n)
    assert sample.shape == (n,) and sample.dtype == np.float64
    assert abs(sample.mean() / cdf.mean() - 1) < 0.01
    assert sample.min() >= cdf.sizes[0] and sample.max() <= cdf.sizes[-1]


def test_step_samples_only_listed_sizes():
    cdf = FlowSizeCDF.builtin("hadoop", interpolation="step")
    sample = cdf.sample(3, 10_000)
    assert np.all(np.isin(sample, cdf.sizes))


def test_quantile_hand_values():
    ws = FlowSizeCDF.builtin("web_search")
    # q = 0.175 lies halfway between (10 kB, 15%) and (20 kB, 20%).
    assert ws.quantile(0.175) == pytest.approx(15_000.0)
    assert ws.with_interpolation("step").quantile(0.175) == 20_000.0
    # At a listed probability both rules return the listed size.
    assert ws.quantile(0.15) == pytest.approx(10_000.0)
    assert ws.with_interpolation("step").quantile(0.15) == 10_000.0
    assert ws.quantile(1.0) == 30_000_000.0
    q = np.linspace(0.01, 0.99, 50)
    np.testing.assert_allclose(ws.cdf(ws.quantile(q)), q, rtol=1e-12)


def test_percent_and_probability_tables_agree_and_first_point_atom():
    a = FlowSizeCDF.from_table([0, 10, 20], [0, 50, 100])
    b = FlowSizeCDF.from_table([0, 10, 20], [0, 0.5, 1.0])
    np.testing.assert_array_equal(a.cum_prob, b.cum_prob)
    assert a.mean() == pytest.approx(10.0)  # uniform on [0, 20]
    # p_0 = 0.5 > 0: an atom of 0.5 at x_0 = 5, then uniform on [5, 10].
    c = FlowSizeCDF.from_table([5, 10], [0.5, 1.0])
    assert c.mean() == pytest.approx(0.5 * 5 + 0.5 * 7.5)
    assert c.with_interpolation("step").mean() == pytest.approx(0.5 * 5 + 0.5 * 10)
    s = c.sample(0, 100_000)
    assert abs(np.mean(s == 5.0) - 0.5) < 0.01
    # E[X^2] of uniform[0, 20] is 400/3.
    assert a.second_moment() == pytest.approx(400.0 / 3.0)


def test_sampling_is_reproducible_and_key_dependent():
    ws = FlowSizeCDF.builtin("web_search")
    np.testing.assert_array_equal(ws.sample(jax.random.key(1), 100), ws.sample(1, 100))
    assert not np.array_equal(ws.sample(1, 100), ws.sample(2, 100))
    assert ws.sample(0, 0).shape == (0,)


@pytest.mark.parametrize("sizes,cum,match", [
    ([0, 20, 10], [0, 50, 100], "sizes"),
    ([0, 10, 20], [0, 60, 50], "cum_prob"),
    ([0, 10, 20], [0, 0.3, 0.47], "end at 1"),
    ([0, 10, 20], [0, 30, 99], "end at 1"),
    ([-1, 10], [0, 1], "sizes"),
])
def test_bad_tables_raise(sizes, cum, match):
    with pytest.raises(ValueError, match=match):
        FlowSizeCDF.from_table(sizes, cum)


def test_bad_arguments_raise(tmp_path):
    with pytest.raises(ValueError, match="interpolation"):
        FlowSizeCDF.from_table([0, 1], [0, 1], interpolation="cubic")
    with pytest.raises(ValueError, match="name"):
        FlowSizeCDF.builtin("nope")
    with pytest.raises(ValueError, match="q"):
        FlowSizeCDF.builtin("hadoop").quantile(1.5)
    # resolve: a name or a distribution, errors naming the caller's argument
    hd = FlowSizeCDF.builtin("hadoop")
    assert FlowSizeCDF.resolve(hd) is hd
    assert FlowSizeCDF.resolve("hadoop").mean() == hd.mean()
    with pytest.raises(ValueError, match="^background_cdf: unknown"):
        FlowSizeCDF.resolve("nope", "background_cdf")
    with pytest.raises(ValueError, match="^size_cdf: expected a FlowSizeCDF"):
        FlowSizeCDF.resolve(3.0)
    from fabric_jax.workloads import poisson_background
    with pytest.raises(ValueError, match="^size_cdf: unknown"):
        poisson_background(4, 0.2, 1e9, "nope", 1e-3)
    bad = tmp_path / "bad.txt"
    bad.write_text("0 0\n10 abc\n")
    with pytest.raises(ValueError, match="bad.txt:2"):
        FlowSizeCDF.from_file(bad)


def test_from_file_formats(tmp_path):
    hpcc = tmp_path / "h.txt"
    hpcc.write_text("0 0\n100 50\n\n200 100\n")
    homa = tmp_path / "m.txt"
    homa.write_text("150.0\n100 0.5\n200 1.0\n")
    csv = tmp_path / "c.csv"
    csv.write_text("# comment\n0, 0\n100, 0.5\n200, 1\n")
    assert FlowSizeCDF.from_file(hpcc).mean() == pytest.approx(100.0)
    m = FlowSizeCDF.from_file(homa, "step", size_scale=2.0)
    # Step mean: 0.5*100 + 0.5*200 = 150, times size_scale 2; header scaled alike.
    assert m.mean() == pytest.approx(300.0) and m.stated_mean == pytest.approx(300.0)
    assert FlowSizeCDF.from_file(csv).name == "c"


# ------------------------------------------------ built-in tables vs published values
# These check the package's own tables against numbers transcribed from their sources,
# so they run in a clean clone.  The tests further down read the source files from
# ../shared (marked ``shared_data``: excluded from the default run, never skipped in it).

# Means of HPCC's linear sampler, as published in the HPCC reference README
# (traffic_gen: "WebSearch 1,711,250 B; FbHdp 120,420.8 B; ...").
HPCC_MEANS = {"WebSearch_distribution.txt": 1_711_250.0, "FbHdp_distribution.txt": 120_420.8,
              "AliStorage2019.txt": 40_869.8, "GoogleRPC2008.txt": 2_891.6}
HPCC_BUILTIN = {"WebSearch_distribution.txt": "web_search", "FbHdp_distribution.txt": "hadoop",
                "AliStorage2019.txt": "storage", "GoogleRPC2008.txt": "rpc"}

# VL2 data-mining CDF as distributed with ns-3-datacenter (datamining.csv): size, cum. prob.
DATA_MINING = [(100, 0), (180, 0.085), (250, 0.14), (560, 0.33), (900, 0.47), (1100, 0.55),
               (1870, 0.65), (3160, 0.7), (10000, 0.8), (100001, 0.874), (400000, 0.9),
               (1850000, 0.95), (10000000, 0.97), (30000000, 0.98), (100000000, 0.99),
               (250000000, 0.995), (1000000000, 1.0)]

# Homa's Google_SearchRPC.txt: header (mean of the step CDF) and first points.
GOOGLE_SEARCH_RPC_MEAN = 440.7907
GOOGLE_SEARCH_RPC_HEAD = [(2, 0.0756033901818394), (3, 0.132305932818219)]

# Parsimon's webserver-all.txt / cachefollower-all.txt (percent): first and last points.
FB_POINTS = {"fb_webserver": [(64, 0.25055089894350235), (81, 0.858249068105521),
                              (143, 1.1570319418415353), (1304462, 99.39530860638013),
                              (19791390, 100.0)],
             "fb_cachefollower": [(51, 0.3692950445896237), (71, 0.5589701443526884),
                                  (12540802, 99.75593059345823), (28388498, 100.0)]}


@pytest.mark.parametrize("fname", sorted(HPCC_MEANS))
def test_builtin_hpcc_tables_have_the_published_linear_means(fname):
    cdf = FlowSizeCDF.builtin(HPCC_BUILTIN[fname]).with_interpolation("linear")
    assert cdf.mean() == pytest.approx(HPCC_MEANS[fname], abs=0.05)  # README rounds to 0.1 B


def test_builtin_web_search_is_the_published_table():
    cdf = FlowSizeCDF.builtin("web_search")
    np.testing.assert_array_equal(cdf.sizes, [x for x, _ in WEB])
    np.testing.assert_allclose(cdf.cum_prob, [p / 100 for _, p in WEB], atol=1e-15)


def test_builtin_data_mining_is_the_published_table():
    cdf = FlowSizeCDF.builtin("data_mining")
    np.testing.assert_array_equal(cdf.sizes, [x for x, _ in DATA_MINING])
    np.testing.assert_allclose(cdf.cum_prob, [p for _, p in DATA_MINING], atol=1e-15)
    # linear mean by hand: segment midpoints weighted by their probability mass
    mean = sum((p1 - p0) * (x0 + x1) / 2 for (x0, p0), (x1, p1)
               in zip(DATA_MINING[:-1], DATA_MINING[1:]))
    assert cdf.mean() == pytest.approx(mean, rel=1e-9)


def test_builtin_google_search_rpc_matches_homa_header_mean():
    cdf = FlowSizeCDF.builtin("google_search_rpc")
    assert cdf.interpolation == "step"
    assert cdf.mean() == pytest.approx(GOOGLE_SEARCH_RPC_MEAN, rel=1e-6)
    for x, p in GOOGLE_SEARCH_RPC_HEAD:
        k = int(np.flatnonzero(np.asarray(cdf.sizes) == x)[0])
        assert cdf.cum_prob[k] == pytest.approx(p, abs=1e-15)


@pytest.mark.parametrize("name", sorted(FB_POINTS))
def test_builtin_facebook_tables_hold_the_published_points(name):
    cdf = FlowSizeCDF.builtin(name)
    sizes = np.asarray(cdf.sizes)
    for x, pct in FB_POINTS[name]:
        k = np.flatnonzero(sizes == x)
        assert k.size == 1, (name, x)
        assert cdf.cum_prob[k[0]] == pytest.approx(pct / 100, abs=1e-12)


# ----------------------------------------------------------------- reference files
def _ref(path):
    p = REF / path
    if not p.exists():
        pytest.skip(f"reference data not present: {p}")
    return p


@pytest.mark.shared_data
@pytest.mark.parametrize("fname,mean", sorted(HPCC_MEANS.items()))
def test_hpcc_files_linear_means(fname, mean):
    cdf = FlowSizeCDF.from_file(_ref("hpcc/" + fname), "linear")
    assert cdf.mean() == pytest.approx(mean, abs=0.05)  # README rounds to 0.1 B


HOMA = ["DCTCP_MsgSizeDist.txt", "DCTCP_MsgSizeDist_Original.txt",
        "Facebook_CacheFollowerDist_IntraCluster.txt", "Facebook_HadoopDist_All.txt",
        "Facebook_WebServerDist_IntraCluster.txt", "Google_AllRPC.txt", "Google_SearchRPC.txt"]


@pytest.mark.shared_data
@pytest.mark.parametrize("fname", HOMA)
def test_homa_header_mean_is_step_mean(fname):
    # Homa's first line is the mean of the step CDF (README); units cancel for DCTCP.
    cdf = FlowSizeCDF.from_file(_ref("homa/" + fname), "step")
    assert cdf.stated_mean is not None
    assert cdf.mean() == pytest.approx(cdf.stated_mean, rel=1e-5)
    assert cdf.with_interpolation("linear").mean() < cdf.mean()


@pytest.mark.shared_data
def test_partial_and_raw_tables_are_rejected():
    # FacebookKeyValueMsgSizeDist is a partial table (ends at 0.47), and Parsimon's
    # *-extract.csv are raw digitised points in KB that do not end at exactly 1.
    with pytest.raises(ValueError, match="end at 1"):
        FlowSizeCDF.from_file(_ref("homa/FacebookKeyValueMsgSizeDist.txt"))
    for p in sorted(_ref("parsimon-eval").glob("*-extract.csv")):
        with pytest.raises(ValueError, match="end at 1"):
            FlowSizeCDF.from_file(p)


@pytest.mark.shared_data
def test_every_reference_cdf_file_reads():
    root = _ref(".")
    files = (sorted(root.glob("hpcc/*.txt")) + sorted(root.glob("ns3-datacenter/*"))
             + sorted(root.glob("parsimon-eval/*.txt")) + sorted(root.glob("homa/*.txt")))
    files = [f for f in files if "FacebookKeyValue" not in f.name]
    assert len(files) >= 19
    for f in files:
        for rule in ("linear", "step"):
            cdf = FlowSizeCDF.from_file(f, rule)
            assert cdf.cum_prob[-1] == 1.0 and np.all(np.diff(cdf.cum_prob) >= 0), f
            assert 0 < cdf.mean() <= cdf.sizes[-1], f
            assert cdf.quantile(0.5) <= cdf.sizes[-1]
        lin, stp = cdf.with_interpolation("linear").mean(), cdf.mean()
        assert lin <= stp, f  # the step rule moves mass up within each segment


@pytest.mark.shared_data
def test_ns3_websearch_is_the_web_search_cdf_with_a_floor():
    ns3 = FlowSizeCDF.from_file(_ref("ns3-datacenter/websearch.txt"))
    assert ns3.mean() == pytest.approx(FlowSizeCDF.builtin("web_search").mean(), rel=1e-3)


BUILTIN_FILES = {"web_search": "hpcc/WebSearch_distribution.txt",
                 "hadoop": "hpcc/FbHdp_distribution.txt",
                 "storage": "hpcc/AliStorage2019.txt", "rpc": "hpcc/GoogleRPC2008.txt",
                 "data_mining": "ns3-datacenter/datamining.csv",
                 "google_search_rpc": "homa/Google_SearchRPC.txt",
                 "fb_webserver": "parsimon-eval/webserver-all.txt",
                 "fb_cachefollower": "parsimon-eval/cachefollower-all.txt"}


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(BUILTIN_FILES))
def test_builtin_tables_match_their_source_files(name):
    assert name in FlowSizeCDF.builtin_names()
    built = FlowSizeCDF.builtin(name)
    read = FlowSizeCDF.from_file(_ref(BUILTIN_FILES[name]), built.interpolation)
    np.testing.assert_array_equal(built.sizes, read.sizes)
    np.testing.assert_allclose(built.cum_prob, read.cum_prob, rtol=0, atol=1e-15)
    assert built.source  # carries its citation
