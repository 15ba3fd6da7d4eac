"""Every figure of the README and the docs pages, regenerated from the code as it is.

Reruns the experiments behind the documented figures (at their defaults, or their CI
sizes with ``--quick``), writes ``results/<name>.json`` and ``results/<name>.log``, and
rewrites the blocks between markers in ``README.md`` and ``docs/*.md``::

    <!-- report:NAME -->
    ... generated: do not edit by hand ...
    <!-- /report:NAME -->

so a documented figure cannot outlive the code: the block says the command that made it
(with ``--quick`` when it ran at CI size) and the commit of the code.  A block whose
experiment has no result yet says how to produce it.

Usage::

    python experiments/report.py --quick            # every experiment at CI size
    python experiments/report.py                    # at the documented defaults (hours)
    python experiments/report.py --only compare     # one experiment, then every block
    python experiments/report.py --render           # rewrite the blocks, run nothing
    python experiments/report.py --list             # names, commands, time estimates

A progress bar (stderr) estimates the time left from each experiment's last wall time
(``results/report_times.json``) or, the first time, from the estimate in
:data:`EXPERIMENTS`.  Each experiment runs in its own process (``PYTHONPATH`` = the
repository), so one that fails leaves the others' figures in place; the failure is
reported at the end and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric_jax.results import strip_run, write_results  # noqa: E402
from fabric_jax.study.progress import Progress, format_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "results"
PAGES = ("README.md", "docs/validation.md", "docs/performance.md", "docs/models.md")
MARK = re.compile(r"(<!-- report:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /report:(?P=name) -->)",
                  re.S)


# ------------------------------------------------------------------ the experiments
def _exp(script, args=(), quick=None, est=60, quick_est=30, json_flag="--json"):
    """An experiment: ``python experiments/<script> <args>`` (``quick`` args with
    ``--quick``; ``None``: the same), and its estimated wall seconds on 2 CPU cores."""
    return dict(script=script, args=list(args), quick=None if quick is None else list(quick),
                est=est, quick_est=quick_est, json_flag=json_flag)


#: name -> experiment.  The figures of README.md and docs/*.md come from these runs.
EXPERIMENTS = {
    "compare": _exp("-m fabric_jax compare", ["--quiet"], est=120, quick_est=120),
    "nccl_tests": _exp("nccl_tests.py", ["--published"],
                       ["--published", "--min-bytes", "8", "--max-bytes", "8G", "--factor",
                        "16"], est=240, quick_est=200),
    "dcqcn_fixed_point": _exp("dcqcn_fixed_point.py", ["--flows", "2"], est=40, quick_est=40),
    "hpcc_incast": _exp("hpcc_incast.py", est=60, quick_est=60),
    "hpcc_fct": _exp("hpcc_fct.py", ["--incast", "off", "--max-active", "1500"],
                     ["--workload", "fb_hadoop", "--incast", "off", "--max-active", "1500"],
                     est=300, quick_est=60),
    "queue_discipline": _exp("queue_discipline.py", est=60, quick_est=60),
    "convergence": _exp("convergence.py", ["--dt-us", "1"], est=200, quick_est=200),
    "fifo_bands": _exp("fifo_bands.py", quick=["--bands", "1,8,16", "--presets", "roce,uec"],
                       est=400, quick_est=150),
    "ecmp_collisions": _exp("ecmp_collisions.py", quick=["--quick"], est=120, quick_est=40),
    "reordering": _exp("reordering.py", quick=["--quick"], est=90, quick_est=40),
    "adaptive_routing": _exp("adaptive_routing.py", quick=["--quick"], est=200,
                             quick_est=80),
    "isolation": _exp("isolation.py", quick=["--quick"], est=1200, quick_est=240),
    "allreduce_sweep": _exp("allreduce_sweep.py", ["--max-gpus", "128"], ["--quick"],
                            est=1200, quick_est=150),
    "topologies": _exp("topologies.py", quick=["--quick"], est=90, quick_est=40),
    "link_failure": _exp("link_failure.py", est=40, quick_est=40),
    "stragglers": _exp("stragglers.py", quick=["--quick"], est=40, quick_est=25),
    "optimize_routing": _exp("optimize_routing.py", ["--only", "fat_tree_k16"],
                             ["--quick", "--only", "fat_tree_k16"], est=200, quick_est=60),
    "bench_fluid_slots": _exp("bench_fluid_slots.py", est=120, quick_est=120),
    "bench_scale": _exp("bench_scale.py", ["--max-flows", "100000"],
                        ["--max-flows", "10000", "--repeats", "2"], est=300, quick_est=60),
    "bench_maxmin": _exp("bench_maxmin.py", [], ["--k", "8", "--flows", "10000",
                                                 "--batch", "8"], est=120, quick_est=40),
    "bench_paths": _exp("bench_paths.py", [], ["--sizes", "10000", "100000",
                                               "--repeats", "2"], est=60, quick_est=20),
    "bench_dynamics": _exp("bench_dynamics.py", [], ["--ms", "2"], est=60, quick_est=30),
    "bench_compare": _exp("bench_compare.py", [], ["--quick"], est=600, quick_est=60),
}


def command(name: str, quick: bool) -> str:
    """The command line of an experiment as a user types it (without ``--json``)."""
    e = EXPERIMENTS[name]
    args = e["quick"] if quick and e["quick"] is not None else e["args"]
    if e["script"].startswith("-m "):
        head = "fabric-jax " + e["script"].split(" ", 2)[2]
    else:
        head = f"python experiments/{e['script']}"
    return " ".join([head] + args)


def _argv(name: str, quick: bool, json_path: Path) -> list[str]:
    e = EXPERIMENTS[name]
    args = e["quick"] if quick and e["quick"] is not None else e["args"]
    head = e["script"].split() if e["script"].startswith("-m ") else \
        [str(ROOT / "experiments" / e["script"])]
    return [sys.executable] + head + args + [e["json_flag"], str(json_path)]


def _times() -> dict:
    path = RESULTS / "report_times.json"
    return strip_run(json.loads(path.read_text())) if path.is_file() else {}


def estimate(name: str, quick: bool) -> float:
    """Expected wall seconds: the last measured run of this mode, else the registry's."""
    key = f"{name}{' --quick' if quick else ''}"
    e = EXPERIMENTS[name]
    return float(_times().get(key, e["quick_est"] if quick else e["est"]))


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "fabric_jax", "experiments"], capture_output=True,
                               text=True).stdout.strip()
        return out + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_one(name: str, quick: bool) -> dict:
    """Runs one experiment; returns its record (also written to ``results/<name>.meta.json``)."""
    RESULTS.mkdir(exist_ok=True)
    json_path = RESULTS / f"{name}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0, load0 = time.time(), os.getloadavg()[0]
    proc = subprocess.run(_argv(name, quick, json_path), cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.time() - t0
    load = round((load0 + os.getloadavg()[0]) / 2, 1)       # how shared the cores were
    (RESULTS / f"{name}.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    meta = dict(name=name, command=command(name, quick), quick=quick, wall_s=wall,
                load_average=load, returncode=proc.returncode, commit=_git_commit(),
                stdout=proc.stdout)
    if proc.returncode == 0:
        write_results(RESULTS / f"{name}.meta.json", meta, started=t0)
        times = _times()
        times[f"{name}{' --quick' if quick else ''}"] = wall
        write_results(RESULTS / "report_times.json", times)
    return meta


# ------------------------------------------------------------------ rendering
class Missing(Exception):
    """An experiment has no result yet (its name is the message)."""


def need(name: str):
    """``(data, meta)`` of an experiment's last successful run; :class:`Missing` if none."""
    data, meta = load(name)
    if meta is None:
        raise Missing(name)
    return data, meta


#: Experiments read by the block being rendered, and whether each had a result
#: (:func:`render` uses it to leave a block alone under ``--only``).
_READ: dict = {}


def load(name: str):
    """``(data, meta)`` of an experiment's last successful run, or ``(None, None)``."""
    j, m = RESULTS / f"{name}.json", RESULTS / f"{name}.meta.json"
    found = j.is_file() and m.is_file()
    _READ[name] = found
    if not found:
        return None, None
    return json.loads(j.read_text()), json.loads(m.read_text())


def _missing(name: str) -> str:
    return (f"*Not run yet on this checkout: `python experiments/report.py --only {name}` "
            f"(or `--quick`).*\n")


def _source(meta: dict) -> str:
    load = (f", load average {meta['load_average']:g}" if "load_average" in meta else "")
    return (f"*`{meta['command']}`* -- {format_seconds(meta['wall_s'])} wall on 2 shared CPU "
            f"cores{load}, code at `{meta['commit']}` "
            f"(regenerated by `python experiments/report.py{' --quick' if meta['quick'] else ''}"
            f" --only {meta['name']}`)\n")


_NOISE = re.compile(r"^(wrote |# wall |\(\d+(\.\d+)? s\)|\s*$)")


def stdout_block(name: str, keep=None, drop=_NOISE) -> str:
    """The experiment's own printed output (its table), in a code block, with its
    command.  ``keep``: a regex of the lines to keep (default every line but noise)."""
    data, meta = load(name)
    if meta is None:
        return _missing(name)
    lines = [ln.rstrip() for ln in meta["stdout"].splitlines()]
    lines = [ln for ln in lines if not drop.match(ln) and (keep is None or re.search(keep, ln))]
    return _source(meta) + "\n```\n" + "\n".join(lines) + "\n```\n"


def _f(x, digits=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def headline() -> str:
    """README's validation table: reference, our figure, the command."""
    rows = []
    for fn in HEADLINE:
        try:
            row = fn()
        except Missing as err:
            row = ((fn.__doc__ or fn.__name__).strip().split("\n")[0],
                   "*not run yet on this checkout*",
                   f"`python experiments/report.py --only {err}`")
        except (KeyError, TypeError, ValueError, IndexError, StopIteration,
                AttributeError, ZeroDivisionError) as err:
            row = (fn.__doc__ or fn.__name__).strip().split("\n")[0], \
                f"*could not read its result ({type(err).__name__}: {err}); rerun it*", ""
        if row is not None:
            rows.append(row)
    out = [_row(("reference", "ours", "command")), _row(("---", "---", "---"))]
    out += [_row(r) for r in rows]
    return "\n".join(out) + "\n"


HEADLINE = []


def _headline(fn):
    HEADLINE.append(fn)
    return fn


def _cmd(name):
    _, meta = load(name)
    return f"`{meta['command']}`" if meta else f"not run: `report.py --only {name}`"


BLOCKS = {}


def block(name):
    def wrap(fn):
        BLOCKS[name] = fn
        return fn
    return wrap


def render(pages=PAGES, only=None) -> list[str]:
    """Rewrites every marked block of ``pages``; returns the names of unknown markers.

    ``only`` (the experiments just rerun, ``--only``): rewrite only the blocks that read
    one of them and whose every experiment has a result on this checkout, so that
    rerunning one experiment in a checkout without the others' results (``results/`` is
    not in git) leaves their blocks as they are.  Without ``only`` every block is
    rewritten, and one whose experiment has no result says how to make it."""
    load_blocks()
    unknown = []
    for page in pages:
        path = ROOT / page
        if not path.is_file():
            continue
        text = path.read_text()

        def sub(m):
            name = m.group("name")
            if name not in BLOCKS:
                unknown.append(f"{page}: {name}")
                return m.group(0)
            _READ.clear()
            body = BLOCKS[name]()
            if only is not None and (not set(_READ) & set(only) or not all(_READ.values())):
                return m.group(0)
            return m.group(1) + body + m.group(4)
        new = MARK.sub(sub, text)
        if new != text:
            path.write_text(new)
    return unknown


def load_blocks():
    """Registers the blocks and headline rows of ``experiments/_report_blocks.py`` (one
    function per block) in this module's :data:`BLOCKS` / :data:`HEADLINE`."""
    if BLOCKS:
        return
    # run as a file this module is ``__main__``: the blocks' ``from experiments import
    # report`` must find this module, not import a second copy
    sys.modules.setdefault("experiments.report", sys.modules[__name__])
    from experiments import _report_blocks  # noqa: F401


# ------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help="run each experiment at its CI size (minutes, not hours)")
    ap.add_argument("--only", action="append", metavar="NAME", default=None,
                    help=f"run only this experiment (repeatable); one of {sorted(EXPERIMENTS)}")
    ap.add_argument("--render", action="store_true", help="rewrite the blocks; run nothing")
    ap.add_argument("--list", action="store_true", help="print the experiments and exit")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    names = list(EXPERIMENTS) if a.only is None else a.only
    bad = [n for n in names if n not in EXPERIMENTS]
    if bad:
        ap.error(f"--only: unknown experiment(s) {bad}; choose from {sorted(EXPERIMENTS)}")
    if a.list:
        for n in EXPERIMENTS:
            print(f"{n:<18} ~{format_seconds(estimate(n, a.quick)):>10}  {command(n, a.quick)}")
        return 0
    failed = []
    if not a.render:
        est = {n: estimate(n, a.quick) for n in names}
        bar = Progress(sum(est.values()), enabled=not a.quiet, label="report",
                       estimate_s=sum(est.values()))
        with bar:
            for n in names:
                bar.last = f"{n} (running)"
                meta = run_one(n, a.quick)
                if meta["returncode"]:
                    failed.append(n)
                bar.update(f"{n} {'FAILED' if meta['returncode'] else 'done'}", est[n])
    unknown = render(only=None if a.only is None else names)
    for u in unknown:
        print(f"report.py: unknown block {u}", file=sys.stderr)
    for n in failed:
        print(f"report.py: {n} failed (exit status != 0); its log: results/{n}.log; the "
              f"pages keep its previous figures", file=sys.stderr)
    return 1 if failed or unknown else 0


if __name__ == "__main__":
    sys.exit(main())
