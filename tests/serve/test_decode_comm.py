"""The decode step's wide-EP communication wired into serve (decode_comm_tables) and the
``--ep-sweep`` command line."""

import json

import pytest

from fabric_jax.cli import main
from fabric_jax.serve import DEEPEP_LL_US, decode_comm_tables, deployment, load_scenario, serve

SMALL = {"requests.n": 2, "requests.rate": 20.0, "requests.prompt_tokens": 512,
         "requests.output_tokens": 16, "decode.max_batch": 16}


@pytest.fixture(scope="module")
def with_and_without():
    on = serve(None, fabrics=("roce",), progress=False, overrides=SMALL)
    off = serve(None, fabrics=("roce",), progress=False,
                overrides=dict(SMALL, **{"decode.ep_comm": "none"}))
    return on, off


def test_decode_pays_the_all_to_all(with_and_without):
    on, off = with_and_without
    for name in ("roce", "ideal"):
        a, b = on["fabrics"][name], off["fabrics"][name]
        comm = a["decode"]["comm"]
        assert comm["ep"] == 32 and comm["grid_tokens_per_gpu"][0] == 8
        # a step at one request per GPU pays the 8-token figure of 58 layers
        per_step = 58 * comm["layer_s"][0]
        assert a["tpot"]["p50"] == pytest.approx(b["tpot"]["p50"] + per_step, rel=0.02)
    # the preset's all-to-all is never faster than the ideal fabric's
    assert (on["fabrics"]["roce"]["decode"]["comm"]["layer_s"][-1]
            >= on["fabrics"]["ideal"]["decode"]["comm"]["layer_s"][-1] * (1 - 1e-3))


def test_tp_attention_has_no_decode_all_to_all():
    scn = load_scenario(None, overrides={"model.name": "llama3_70b", "model.weight_bytes": 2,
                                         "decode.instance_servers": 1, "decode.ep": 8})
    assert decode_comm_tables(scn, deployment(scn), ["roce"]) is None


def test_ep_sweep_cli(tmp_path, capsys):
    out = tmp_path / "ep.json"
    assert main(["serve", "--ep-sweep", "8", "--fabrics", "infiniband", "--no-ideal",
                 "--quiet", "--json", str(out)]) == 0
    v = json.loads(out.read_text())["ep_sweep"]["infiniband"]["8"]
    pub_d, pub_c = DEEPEP_LL_US[8]
    assert v["published_dispatch_us"] == pub_d
    assert abs(v["dispatch_us"] / pub_d - 1) < 0.15 and abs(v["combine_us"] / pub_c - 1) < 0.15
    assert main(["serve", "--ep-sweep", "12", "--quiet"]) == 2
    assert "--ep-sweep" in capsys.readouterr().err
