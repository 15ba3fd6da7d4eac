"""Results files: the one JSON writer of the command line and the experiments.

A results file is a JSON object: the keys a command writes (its figures), plus one
``"run"`` record saying what produced them::

    {..., "run": {"fabric_jax": "0.1.0", "commit": "a32c9f3", "dirty": false,
                  "jax": "0.6.2", "backend": "cpu", "device_kind": "cpu",
                  "command": "fabric-jax compare --json r.json", "wall_s": 41.2,
                  "date": "2025-06-01T12:00:00+00:00"}}

:func:`write_results` writes it atomically: the text is built first, written to a
temporary file beside the target and renamed over it, so a run stopped at any moment
leaves either the previous file or the new one, never half a file.  Values become JSON
the way every writer of the package did: NumPy and JAX scalars and arrays become
Python numbers and lists, NaN and infinities become ``null``, dictionary keys become
strings, tuples become lists, and anything else (a path, an enum) its ``str``.

A reader ignores ``"run"`` or reads it; :func:`strip_run` drops it for readers that
treat every top-level key as a result (``fabric-jax compare``'s presets).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["RUN_KEY", "to_json", "run_record", "write_results", "strip_run",
           "check_output_file", "check_output_dir"]

#: The key of the record that says what produced a results file.
RUN_KEY = "run"


def to_json(value):
    """A copy of ``value`` made of JSON types only.

    Dicts keep their order with ``str`` keys; lists and tuples become lists; NumPy and
    JAX scalars and arrays become Python numbers, booleans and (nested) lists; a float
    that is NaN or infinite becomes ``None``; paths and any other object become their
    ``str``.
    """
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.generic) or hasattr(value, "__array__"):
        return to_json(np.asarray(value).tolist())   # NumPy or JAX, scalar or array
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _git(*args) -> str | None:
    """Output of ``git args`` in the package's directory; ``None`` outside a checkout."""
    try:
        proc = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def run_record(*, command=None, inputs=None, started: float | None = None) -> dict:
    """What produced a result: code, machine, command line, wall time and date.

    Args:
      command: the command line, a string or a list of arguments (default
        ``sys.orig_argv``, the interpreter's own).
      inputs: optional dict of the run's inputs (e.g. ``vars(args)``), stored as
        ``"inputs"``.
      started: ``time.time()`` when the run began; ``wall_s`` is the seconds since
        (``None`` without it).

    Returns:
      ``{"fabric_jax": version, "commit": short hash of the checkout's HEAD or None
      outside a git checkout, "dirty": whether tracked files differ from HEAD (None
      outside a checkout), "jax": version, "backend": "cpu" / "gpu" / ...,
      "device_kind": jax.devices()[0].device_kind, "command": str, "wall_s": float or
      None, "date": UTC time in ISO 8601}`` plus ``"inputs"`` when given.
    """
    import jax

    from . import __version__          # the package is fully imported by the time it runs
    if command is None:
        command = sys.orig_argv
    if not isinstance(command, str):
        command = shlex.join(str(c) for c in command)
    commit = _git("rev-parse", "--short", "HEAD")
    status = None if commit is None else _git("status", "--porcelain", "--untracked-files=no")
    record = {
        "fabric_jax": __version__,
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "command": command,
        "wall_s": None if started is None else time.time() - started,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if inputs is not None:
        record["inputs"] = inputs
    return record


def _writable_ancestor(path: Path, flag: str) -> None:
    """Refuse ``path`` unless its nearest existing ancestor is a folder a file can be
    created in (probed by creating and removing one: permissions, read-only mounts and
    pseudo file systems such as ``/proc`` all answer the same way)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"{flag}: {folder} is not a folder, so {path} cannot be created; "
                         f"give a path under a writable folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".fabric_jax_probe_")
    except OSError as exc:
        raise ValueError(f"{flag}: cannot write into {folder} ({exc.strerror or exc}); give "
                         f"a path under a writable folder") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path, flag: str = "--json") -> Path:
    """Refuse, before any work, a results file that could not be written at the end.

    ``path`` may not exist yet (nor its parent folders, which :func:`write_results`
    creates); it must not be a folder, an existing file must be writable, and the
    nearest existing folder above it must accept a new file.

    Raises:
      ValueError: naming ``flag``, the path and the fix.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag}: {path} is a folder; give a file path such as "
                         f"{path / 'results.json'}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{flag}: {path} exists and is not writable; give another path")
    _writable_ancestor(path, flag)
    return path


def check_output_dir(path, flag: str = "--plots") -> Path:
    """Refuse, before any work, a figures folder that could not be written at the end:
    an existing path must be a folder that accepts a new file; a missing one must be
    creatable (its nearest existing ancestor a writable folder).

    Raises:
      ValueError: naming ``flag``, the path and the fix.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag}: {path} exists and is not a folder; give a folder path")
    _writable_ancestor(path / "probe", flag)
    return path


def write_results(path, results: dict, *, command=None, inputs=None,
                  started: float | None = None) -> Path:
    """Writes ``results`` and its ``"run"`` record to ``path`` as JSON, atomically.

    The whole text is serialised before any file is touched, then written to a
    temporary file in the same directory and renamed over ``path``: a failure or a kill
    leaves the previous file as it was.  Parent directories are created.

    Args:
      path: the file to write.
      results: the results, a dict (see :func:`to_json` for the values it may hold).
        A ``"run"`` key it holds (a results file read back and extended) is replaced.
      command, inputs, started: the :func:`run_record` arguments.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.
    """
    out = dict(results)
    out[RUN_KEY] = run_record(command=command, inputs=inputs, started=started)
    text = json.dumps(to_json(out), indent=1, allow_nan=False) + "\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def strip_run(data: dict) -> dict:
    """``data`` without its ``"run"`` record (the results alone)."""
    return {k: v for k, v in data.items() if k != RUN_KEY}
