"""Serving beside training (fabric_jax.serve.beside_training): layout, the training job
alone against its closed form, isolation both ways on a small case, bad input."""

import numpy as np
import pytest

from fabric_jax.scenario import ScenarioError
from fabric_jax.serve import beside_training, server_layout, training_workload

SMALL = {"requests.n": 3, "requests.rate": 40.0, "training.servers": 4,
         "requests.prompt_tokens": 1024, "requests.output_tokens": 8}


def test_layout_interleaved_spreads_every_leaf_and_separate_is_contiguous():
    s, t = server_layout(8, 8, "interleaved")
    assert sorted(np.concatenate([s, t]).tolist()) == list(range(16))
    # every group of 4 consecutive slots (a rail leaf at servers_per_leaf = 4) holds both
    for leaf in range(4):
        slots = set(range(4 * leaf, 4 * leaf + 4))
        assert slots & set(s.tolist()) and slots & set(t.tolist())
    s, t = server_layout(6, 2, "separate")
    assert s.tolist() == list(range(6)) and t.tolist() == [6, 7]
    with pytest.raises(ValueError, match="placement"):
        server_layout(2, 2, "random")


def test_training_workload_bytes_and_chaining():
    w, per = training_workload(np.arange(4), all_reduce_mb=8.0, compute_us=100.0, n_steps=3)
    assert per == 4 * 8 and w.n_flows == 3 * per           # a ring per rail, 4 ranks
    # each rank streams 2 (n-1)/n of its rail's share (compare's ring in steady state)
    assert np.allclose(w.size, 2 * 3 / 4 * 8e6 / 8)
    # step k > 0 waits for step k - 1 (deps point back), step 0 waits for the compute
    assert np.all(w.arrival[:per] == pytest.approx(100e-6))
    assert np.all(w.deps[per:].max(axis=1) >= 0)


@pytest.fixture(scope="module")
def small_run():
    return beside_training(fabrics=("roce",), overrides=SMALL, progress=False)


@pytest.mark.slow
def test_training_alone_matches_its_closed_form(small_run):
    r = small_run
    ideal = r["training"]["step_time_ideal"]          # compute + ring bytes at line rate
    alone = r["fabrics"]["roce"]["training_alone"]["step_time"]
    # the fluid step adds path latency and the rate ramp: a few microseconds
    assert ideal <= alone <= ideal + 20e-6


@pytest.mark.slow
def test_isolation_both_ways(small_run):
    f = small_run["fabrics"]["roce"]
    for variant in ("shared", "classes"):
        v = f[variant]
        tr, iso = v["training"], v["isolation"]
        # sharing the fabric never speeds either job up (a little slack for dt)
        assert tr["slowdown"] >= 1.0 - 1e-3
        assert tr["step_time_p99"] >= tr["step_time_alone"] * (1 - 1e-3)
        assert iso["kv_exposed_p99_ratio"] >= 1.0 - 1e-2
        assert tr["unfinished_steps"] == 0
        req = v["serving"]["requests"]
        assert req["arrived"] == req["served"] + req["queued"] + req["dropped"] == 3


def test_bad_training_section_is_refused_before_any_run():
    with pytest.raises(ScenarioError, match="training.servers"):
        beside_training(fabrics=("roce",), overrides={"training.servers": 3},
                        progress=False)
    with pytest.raises(ScenarioError, match="training.placement"):
        beside_training(fabrics=("roce",), overrides={"training.placement": "x"},
                        progress=False)
    with pytest.raises(ValueError, match="--fabrics"):
        beside_training(fabrics=("nope",), overrides=SMALL, progress=False)
