"""The console script's persistent compilation cache (``fabric_jax.cli.compilation_cache``).

Each case runs a fresh Python process (the cache folder is global JAX state, set once per
process, and the test suite's own cache must not be touched): where the folder goes
(``FABRIC_JAX_CACHE``, ``XDG_CACHE_HOME``), that a compiled program lands in it, that
``FABRIC_JAX_CACHE=off`` writes nothing, and that a cache configured before is kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import jax
{before}
from fabric_jax.cli import compilation_cache
path = compilation_cache()
if path is not None:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.jit(lambda x: x * 3.0 + 1.0)(2.0).block_until_ready()
print("PATH", path)
"""


def _run(env_extra, before=""):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FABRIC_JAX_CACHE", "XDG_CACHE_HOME")}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", CODE.format(before=before)], env=env,
                         capture_output=True, text=True, check=True, cwd=ROOT)
    line = [x for x in out.stdout.splitlines() if x.startswith("PATH ")][-1]
    return line[5:]


def test_the_cache_goes_where_the_environment_says_and_holds_the_program(tmp_path):
    where = tmp_path / "cache"
    assert _run({"FABRIC_JAX_CACHE": str(where)}) == str(where)
    assert any(where.iterdir())
    xdg = tmp_path / "xdg"
    assert _run({"XDG_CACHE_HOME": str(xdg)}) == str(xdg / "fabric_jax" / "xla")
    assert any((xdg / "fabric_jax" / "xla").iterdir())


def test_off_writes_nothing_and_an_earlier_cache_is_kept(tmp_path):
    xdg = tmp_path / "xdg"
    assert _run({"FABRIC_JAX_CACHE": "off", "XDG_CACHE_HOME": str(xdg)}) == "None"
    assert not xdg.exists()
    mine = tmp_path / "mine"
    got = _run({"FABRIC_JAX_CACHE": str(tmp_path / "other")},
               before=f"jax.config.update('jax_compilation_cache_dir', {str(mine)!r})")
    assert got == str(mine) and not (tmp_path / "other").exists()
