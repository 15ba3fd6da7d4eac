"""NCCL's binary trees over ranks, as parent arrays.

A tree over ranks ``0..n-1`` is an int ``[n]`` array of parents, ``-1`` at the root.
:func:`btree_parent` is NCCL's binary tree (``ncclGetBtree``, src/graph/trees.cc),
:func:`double_binary_tree` its two complementary trees (``ncclGetDtree``; Sanders,
Speck & Traeff, Parallel Computing 35(12), 2009), :func:`tree_depth` the depth of every
rank.  The tree schedules of :mod:`fabric_jax.collectives.schedules` build on them:
NCCL's tree algorithm (:func:`fabric_jax.collectives.build_plan`) and the host-level
tree all-reduce (:func:`fabric_jax.workloads.tree_all_reduce`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["btree_parent", "double_binary_tree", "tree_depth"]


def btree_parent(n: int) -> np.ndarray:
    """NCCL's binary tree on ranks 0..n-1 (``ncclGetBtree``, src/graph/trees.cc): the
    parent of ``r > 0`` is ``(r ^ b) | (b << 1)`` with ``b`` its lowest set bit, or
    ``r ^ b`` if that is out of range; rank 0 is the root (parent -1)."""
    r = np.arange(n, dtype=np.int64)
    low = r & -r
    up = (r ^ low) | (low << 1)
    up = np.where(up >= n, r ^ low, up)
    return np.where(r == 0, -1, up)


def double_binary_tree(n: int) -> np.ndarray:
    """Parents in NCCL's two complementary binary trees (``ncclGetDtree``).

    Tree 0 is :func:`btree_parent`; tree 1 mirrors it (``r -> n-1-r``) when ``n`` is
    even and shifts it by one rank when ``n`` is odd, so that most leaves of one tree
    are interior nodes of the other (Sanders, Speck & Traeff, Parallel Computing 35(12),
    2009).

    Returns:
        int [2, n] parent rank of each rank in each tree, ``-1`` at the root.
    """
    p0 = btree_parent(n)
    r = np.arange(n)
    if n % 2 == 0:
        q = p0[n - 1 - r]
        p1 = np.where(q < 0, -1, n - 1 - q)
    else:
        q = p0[(r - 1) % n]
        p1 = np.where(q < 0, -1, (q + 1) % n)
    return np.stack([p0, p1])


def tree_depth(parent: np.ndarray) -> np.ndarray:
    """int64 ``[n]`` depth of each rank in the tree ``parent`` (0 at the root)."""
    depth = np.zeros(parent.size, np.int64)
    cur = parent.copy()
    while np.any(cur >= 0):
        depth += cur >= 0
        cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
    return depth
