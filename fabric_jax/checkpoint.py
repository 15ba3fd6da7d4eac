"""Checkpoints of simulation state: pytrees of arrays to and from ``.npz`` files.

A long :func:`fabric_jax.fluid.simulate_fluid` run can be cut into pieces:
``FluidResult.state`` is the loop's complete carry after the last step (a pytree of
arrays, including the step counter), and ``simulate_fluid(..., init_state=state)``
continues from it.  On CPU the pieces reproduce the uninterrupted run bit for bit
(the step function and its inputs are the same; see ``tests/fluid/test_checkpoint.py``).

File format (``numpy.savez``, read with ``allow_pickle=False``: no code is pickled):

* ``__format__``: the string ``"fabric_jax.checkpoint/1"``;
* ``__paths__``: the key path of every leaf (``jax.tree_util.keystr``), in
  ``tree_flatten`` order, as a string array;
* ``__treedef__``: ``str(treedef)`` (informative: restoring matches key paths);
* ``__meta__``: a JSON object (user metadata given to :func:`save_checkpoint`);
* ``leaf_00000`` ...: the leaves, with their dtypes and shapes.

:func:`load_checkpoint` returns a :class:`Checkpoint` (the leaves keyed by path), or,
given ``like=`` (a pytree of the expected structure, e.g. the result of a short run or
``jax.eval_shape`` of one), the structured pytree.  :func:`restore` matches a
checkpoint or a pytree against a template and checks key paths, shapes and dtypes,
raising ``ValueError`` on any mismatch.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import jax
import numpy as np

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "restore", "flatten_state"]

FORMAT = "fabric_jax.checkpoint/1"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
      arrays: ``{key path: numpy array}`` in ``tree_flatten`` order.
      treedef: the saved ``str(treedef)`` (informative).
      meta: user metadata (dict from JSON).
    """

    arrays: Mapping[str, np.ndarray]
    treedef: str
    meta: Mapping[str, Any]


def flatten_state(state) -> dict:
    """``{key path: leaf}`` of a pytree, in ``tree_flatten`` order (``None`` leaves dropped)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(state)
    out = {}
    for path, leaf in leaves:
        out[jax.tree_util.keystr(path)] = leaf
    return out


def save_checkpoint(path, state, *, meta: Mapping | None = None) -> None:
    """Writes a pytree of arrays to ``path`` (a ``.npz`` file; written atomically).

    Args:
      path: file name (``.npz`` is *not* appended; the file is written as given).
      state: pytree of arrays (e.g. ``FluidResult.state``); leaves must be numeric or
        boolean arrays (no objects).
      meta: JSON-serialisable metadata stored with it (e.g. the run's parameters).

    Raises:
      ValueError: a leaf is not a numeric/boolean array, or ``meta`` is not JSON.
    """
    flat = flatten_state(state)
    _, treedef = jax.tree_util.tree_flatten(state)
    arrays = {}
    for i, (key, leaf) in enumerate(flat.items()):
        a = np.asarray(leaf)
        if a.dtype.kind not in "biuf":
            raise ValueError(f"state leaf {key} must be a numeric or boolean array; "
                             f"got dtype {a.dtype}")
        arrays[f"leaf_{i:05d}"] = a
    try:
        meta_s = json.dumps(dict(meta or {}))
    except (TypeError, ValueError) as err:
        raise ValueError(f"meta must be JSON-serialisable: {err}") from None
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as fh:
        np.savez(fh, __format__=np.asarray(FORMAT), __paths__=np.asarray(list(flat), dtype=str),
                 __treedef__=np.asarray(str(treedef)), __meta__=np.asarray(meta_s), **arrays)
    os.replace(tmp, path)


def load_checkpoint(path, like=None):
    """Reads a checkpoint written by :func:`save_checkpoint`.

    Args:
      path: the file.
      like: optional template pytree (same structure as the saved state); when given
        the structured pytree is returned (validated by :func:`restore`).

    Returns:
      a :class:`Checkpoint`, or the pytree if ``like`` is given.

    Raises:
      ValueError: the file is missing, not an ``.npz``, not a fabric_jax checkpoint,
        truncated (a leaf missing), or does not match ``like``.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise ValueError(f"path {p!r}: no such checkpoint file")
    try:
        with np.load(p, allow_pickle=False) as z:
            entries = {k: z[k] for k in z.files}
    except Exception as err:  # zipfile.BadZipFile, OSError, pickled data refused, ...
        raise ValueError(f"path {p!r} is not a readable .npz checkpoint: "
                         f"{type(err).__name__}: {err}") from None
    header = ("__format__", "__paths__", "__treedef__", "__meta__")
    for key in header:
        if key not in entries:
            raise ValueError(f"path {p!r} is not a fabric_jax checkpoint (no {key} entry)")
    fmt = str(entries["__format__"])
    if fmt != FORMAT:
        raise ValueError(f"path {p!r}: unsupported checkpoint format {fmt!r}; "
                         f"expected {FORMAT!r}")
    keys = [str(k) for k in entries["__paths__"].reshape(-1)]
    names = [f"leaf_{i:05d}" for i in range(len(keys))]
    for name, key in zip(names, keys):
        if name not in entries:
            raise ValueError(f"path {p!r}: checkpoint is truncated ({name} for {key} missing)")
    extra = set(entries) - set(names) - set(header)
    if extra:
        raise ValueError(f"path {p!r}: unexpected entries {sorted(extra)}")
    try:
        meta = json.loads(str(entries["__meta__"]))
    except ValueError:
        raise ValueError(f"path {p!r}: __meta__ is not valid JSON") from None
    arrays = {key: entries[name] for name, key in zip(names, keys)}
    treedef = str(entries["__treedef__"])
    ck = Checkpoint(arrays=arrays, treedef=treedef, meta=meta)
    return ck if like is None else restore(ck, like)


def restore(state, like, *, name: str = "state"):
    """Returns ``state`` (a :class:`Checkpoint` or a pytree) with the structure of ``like``.

    Leaves are matched by key path; every path of ``like`` must be present, with the same
    shape and dtype, and no other.  Works with tracers (only shapes and dtypes are read).

    Raises:
      ValueError: naming ``name``: missing or unexpected leaves, shape or dtype mismatch
        (e.g. a float64 state into a float32 run).
    """
    got = dict(state.arrays) if isinstance(state, Checkpoint) else flatten_state(state)
    want_leaves, treedef = jax.tree_util.tree_flatten_with_path(like)
    want = [(jax.tree_util.keystr(p), leaf) for p, leaf in want_leaves]
    missing = [k for k, _ in want if k not in got]
    extra = sorted(set(got) - {k for k, _ in want})
    if missing or extra:
        raise ValueError(f"{name} does not match this simulation's state: missing leaves "
                         f"{missing[:5]}, unexpected leaves {extra[:5]} (was it saved from a "
                         f"run with the same law, flow control, routing and faults?)")
    leaves = []
    for key, ref in want:
        a = got[key]
        if tuple(np.shape(a)) != tuple(np.shape(ref)):
            raise ValueError(f"{name}{key} has shape {tuple(np.shape(a))}; this simulation "
                             f"needs {tuple(np.shape(ref))} (same flows, links and paths?)")
        if np.dtype(a.dtype) != np.dtype(ref.dtype):
            raise ValueError(f"{name}{key} has dtype {a.dtype}; this simulation needs "
                             f"{ref.dtype} (same jax_enable_x64 setting?)")
        leaves.append(a)
    return jax.tree_util.tree_unflatten(treedef, leaves)
