"""The ``Workload`` record: a set of flows, their dependency DAG, and their owners.

A workload is what the simulator consumes: one row per flow, all NumPy arrays built on
the host.  Flow ``i`` moves ``size[i]`` bytes from host ``src[i]`` to host ``dst[i]``
(hosts are the topology's endpoints, numbered ``0 .. n_hosts-1``).  It becomes *ready*
when its arrival time has passed and every flow listed in ``deps[i]`` has finished, and
then waits ``delay[i]`` more seconds (compute before the send) before it starts::

    start[i] = max(arrival[i], max_j finish[deps[i, j]]) + delay[i]

``deps`` is a padded ``[flows, max_deps]`` int32 table (``-1`` = no entry), so a
collective is a DAG of flows: ring all-reduce step ``s+1`` on rank ``i`` waits for the
step-``s`` flow into rank ``i``.  Every builder in this package emits flows in
topological order (each dep points to an earlier row); ``validate`` accepts any acyclic
order.

Ownership: ``job[i]`` indexes ``job_names`` (a tenant), ``group[i]`` indexes the
collective-instance tables ``group_names``, ``group_kind``, ``group_bytes`` (the
collective's nominal payload ``S`` so that ``algbw = S / time``) and ``group_ranks`` (its
participant count, for the busbw factors of nccl-tests); ``group == -1`` marks
independent flows (background traffic).

Extra per-flow columns: ``columns`` maps a name to a ``[flows]`` array that a builder
attaches and a consumer reads (e.g. the training step at scale's ``src_rank``,
``dst_rank``, ``phase`` and ``rail``, :func:`fabric_jax.scale.step_flows`); they follow
the flows through :func:`concat`, :meth:`Workload.subset` and :meth:`Workload.stripes`.

Units: bytes, seconds.  Shapes: ``[flows]`` unless stated, ``[groups]`` for group tables.

Example:
    >>> from fabric_jax.workloads import ring_all_reduce, concat
    >>> w = concat(ring_all_reduce([0, 1, 2, 3], 1e6, job="a"),
    ...            ring_all_reduce([4, 5, 6, 7], 1e6, job="b"))
    >>> w.n_flows, w.job_names
    (48, ('a', 'b'))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

__all__ = ["Workload", "concat"]


def _as(a, dtype, name):
    try:
        return np.ascontiguousarray(np.asarray(a, dtype=dtype))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot convert to {np.dtype(dtype).name} ({exc})") from None


@dataclasses.dataclass(frozen=True, eq=False)
class Workload:
    """Flows, their dependency DAG and their owners (see the module docstring).

    Attributes:
        src: int32 [flows] sending host.
        dst: int32 [flows] receiving host (``!= src``).
        size: float64 [flows] bytes.
        arrival: float64 [flows] earliest start, seconds.
        deps: int32 [flows, max_deps] indices of flows that must finish first, ``-1`` padded.
        delay: float64 [flows] seconds of compute after the deps are met, before the send.
        job: int32 [flows] index into ``job_names``.
        group: int32 [flows] index into the group tables, ``-1`` for independent flows.
        group_names: tuple[str] [groups] collective-instance names.
        job_names: tuple[str] [jobs] tenant names.
        group_bytes: float64 [groups] nominal payload ``S`` (bytes) of each collective.
        group_kind: tuple[str] [groups] e.g. ``"all_reduce"``, ``"all_to_all"``.
        group_ranks: int32 [groups] number of participating ranks.
        columns: ``{name: [flows] array}`` extra per-flow columns (module docstring);
            empty by default.
    """

    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    arrival: np.ndarray
    deps: np.ndarray
    delay: np.ndarray
    job: np.ndarray
    group: np.ndarray
    group_names: tuple[str, ...]
    job_names: tuple[str, ...]
    group_bytes: np.ndarray
    group_kind: tuple[str, ...]
    group_ranks: np.ndarray
    columns: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        # Normalise dtypes so that every consumer can rely on them; shape and value
        # checks are left to ``validate`` (a builder may assemble pieces first).
        conv = {
            "src": np.int32, "dst": np.int32, "size": np.float64, "arrival": np.float64,
            "delay": np.float64, "job": np.int32, "group": np.int32,
            "group_bytes": np.float64, "group_ranks": np.int32,
        }
        for name, dtype in conv.items():
            object.__setattr__(self, name, _as(getattr(self, name), dtype, name))
        deps = _as(self.deps, np.int32, "deps")
        if deps.ndim == 1 and deps.size == 0:
            deps = deps.reshape(self.src.shape[0], 0)
        object.__setattr__(self, "deps", deps)
        for name in ("group_names", "job_names", "group_kind"):
            object.__setattr__(self, name, tuple(str(v) for v in getattr(self, name)))
        object.__setattr__(self, "columns", {str(k): np.ascontiguousarray(v)
                                             for k, v in dict(self.columns).items()})

    # ------------------------------------------------------------------ sizes
    @property
    def n_flows(self) -> int:
        """Number of flows."""
        return int(self.src.shape[0])

    @property
    def n_groups(self) -> int:
        """Number of collective instances (rows of the group tables)."""
        return len(self.group_names)

    @property
    def n_jobs(self) -> int:
        """Number of jobs (tenants)."""
        return len(self.job_names)

    @property
    def max_deps(self) -> int:
        """Width of the ``deps`` table."""
        return int(self.deps.shape[1])

    @property
    def total_bytes(self) -> float:
        """Sum of all flow sizes, bytes."""
        return float(self.size.sum())

    # ------------------------------------------------------------ constructors
    @classmethod
    def empty(cls) -> Workload:
        """A workload with no flows, groups or jobs."""
        z_i = np.zeros(0, np.int32)
        z_f = np.zeros(0, np.float64)
        return cls(z_i, z_i, z_f, z_f, np.zeros((0, 0), np.int32), z_f, z_i, z_i,
                   (), (), z_f, (), z_i)

    @classmethod
    def concat(cls, *workloads: Workload) -> Workload:
        """Concatenate workloads; see :func:`concat`."""
        return concat(*workloads)

    # ---------------------------------------------------------------- editing
    def with_arrival_offset(self, t: float) -> Workload:
        """Shift every arrival time by ``t`` seconds (deps and delays are relative)."""
        t = float(t)
        if not np.isfinite(t):
            raise ValueError(f"t: the arrival offset must be finite seconds, got {t}")
        return dataclasses.replace(self, arrival=self.arrival + t)

    def with_job(self, name: str) -> Workload:
        """Assign every flow to one job called ``name`` (e.g. before concatenating)."""
        return dataclasses.replace(self, job=np.zeros(self.n_flows, np.int32),
                                   job_names=(str(name),))

    def with_columns(self, **columns) -> Workload:
        """This workload with the extra per-flow ``columns`` added (or replaced)."""
        return dataclasses.replace(self, columns={**self.columns, **columns})

    def subset(self, keep, *, drop_deps: bool = False) -> Workload:
        """The flows of ``keep`` (bool mask or increasing indices), deps renumbered.

        A kept flow's dependency on a flow left out raises (the subset must be closed),
        or with ``drop_deps`` is dropped (e.g. a dependency on an NVLink hop that leaves
        the network).  Group tables are kept whole; columns follow the flows.
        """
        idx = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep)
        new = np.full(self.n_flows, -1, np.int64)
        new[idx] = np.arange(idx.size)
        d = self.deps[idx]
        nd = np.where(d >= 0, new[np.maximum(d, 0)], -1)
        if not drop_deps and np.any((d >= 0) & (nd < 0)):
            raise ValueError("keep: a kept flow depends on a flow left out")
        cut = lambda a: np.asarray(a)[idx]  # noqa: E731
        return dataclasses.replace(
            self, src=cut(self.src), dst=cut(self.dst), size=cut(self.size),
            arrival=cut(self.arrival), deps=nd.astype(np.int32), delay=cut(self.delay),
            job=cut(self.job), group=cut(self.group),
            columns={k: cut(v) for k, v in self.columns.items()})

    def stripes(self, n: int) -> Workload:
        """Each flow split into ``n`` stripes of ``size / n`` (flow ``f`` becomes rows ``f n
        .. f n + n - 1``, same columns); a stripe waits for every stripe of each flow its
        flow depended on.  NCCL opens one connection per port of a multi-port
        (multi-plane) NIC and stripes its channels over them."""
        n = int(n)
        if n == 1:
            return self
        rep = lambda a: np.repeat(np.asarray(a), n)  # noqa: E731
        d = self.deps
        wide = np.where(d[:, :, None] >= 0, d[:, :, None] * n + np.arange(n), -1)
        wide = np.repeat(wide.reshape(d.shape[0], -1), n, axis=0)
        return dataclasses.replace(
            self, src=rep(self.src), dst=rep(self.dst), size=rep(self.size) / n,
            arrival=rep(self.arrival), deps=wide.astype(np.int32), delay=rep(self.delay),
            job=rep(self.job), group=rep(self.group),
            columns={k: rep(v) for k, v in self.columns.items()})

    def select_groups(self) -> dict[str, np.ndarray]:
        """Flow indices of each group, keyed by group name (later duplicates get ``#k``)."""
        order = np.argsort(self.group, kind="stable")
        bounds = np.searchsorted(self.group[order], np.arange(self.n_groups + 1))
        out: dict[str, np.ndarray] = {}
        for g, name in enumerate(self.group_names):
            key, k = name, 1
            while key in out:
                key, k = f"{name}#{k}", k + 1
            out[key] = order[bounds[g]:bounds[g + 1]]
        return out

    # ------------------------------------------------------------- validation
    def validate(self, n_hosts: int | None = None) -> Workload:
        """Check shapes, ranges and that ``deps`` is acyclic.

        Args:
            n_hosts: number of hosts in the topology; if given, ``src``/``dst`` must lie
                in ``[0, n_hosts)``.

        Returns:
            ``self``, so that ``w = builder(...).validate(n)`` chains.

        Raises:
            ValueError: naming the first inconsistent field and what is expected.
        """
        n = self.n_flows
        for name in ("src", "dst", "size", "arrival", "delay", "job", "group"):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"{name}: expected shape ({n},) like src, got {arr.shape}")
        if self.deps.ndim != 2 or self.deps.shape[0] != n:
            raise ValueError(f"deps: expected shape ({n}, max_deps), got {self.deps.shape}")
        n_groups = len(self.group_names)
        for name in ("group_bytes", "group_kind", "group_ranks"):
            m = len(getattr(self, name))
            if m != n_groups:
                raise ValueError(f"{name}: expected {n_groups} entries like group_names, got {m}")
        for name, arr in self.columns.items():
            if arr.shape != (n,):
                raise ValueError(f"columns[{name!r}]: expected shape ({n},) like src, got "
                                 f"{arr.shape}")
        if n_hosts is not None:
            n_hosts = int(n_hosts)
            for name in ("src", "dst"):
                arr = getattr(self, name)
                bad = np.flatnonzero((arr < 0) | (arr >= n_hosts))
                if bad.size:
                    raise ValueError(f"{name}: flow {bad[0]} uses host {arr[bad[0]]}, outside "
                                     f"[0, {n_hosts}); place ranks on existing hosts")
        else:
            for name in ("src", "dst"):
                if n and getattr(self, name).min() < 0:
                    raise ValueError(f"{name}: host indices must be >= 0")
        same = np.flatnonzero(self.src == self.dst)
        if same.size:
            raise ValueError(f"src/dst: flow {same[0]} sends from host {self.src[same[0]]} "
                             "to itself; drop self-flows (they never touch the network)")
        for name in ("size", "arrival", "delay"):
            arr = getattr(self, name)
            bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
            if bad.size:
                raise ValueError(f"{name}: flow {bad[0]} has {arr[bad[0]]}; must be finite "
                                 "and >= 0")
        if np.any(~np.isfinite(self.group_bytes) | (self.group_bytes < 0)):
            raise ValueError("group_bytes: must be finite and >= 0")
        if np.any(self.group_ranks < 1):
            raise ValueError("group_ranks: every group needs >= 1 rank")
        bad = np.flatnonzero((self.group < -1) | (self.group >= n_groups))
        if bad.size:
            raise ValueError(f"group: flow {bad[0]} has group {self.group[bad[0]]}, outside "
                             f"[-1, {n_groups})")
        bad = np.flatnonzero((self.job < 0) | (self.job >= len(self.job_names)))
        if bad.size:
            raise ValueError(f"job: flow {bad[0]} has job {self.job[bad[0]]}, outside "
                             f"[0, {len(self.job_names)})")
        self._validate_deps()
        return self

    def _validate_deps(self):
        n = self.n_flows
        deps = self.deps
        rows = np.broadcast_to(np.arange(n, dtype=np.int64)[:, None], deps.shape)
        present = deps >= 0
        if np.any(deps < -1) or np.any(deps >= n):
            i, j = np.argwhere((deps < -1) | (deps >= n))[0]
            raise ValueError(f"deps: flow {i} lists {deps[i, j]}, outside [-1, {n}); deps "
                             "index flows of this same workload")
        if np.any(present & (deps == rows)):
            i = np.argwhere(present & (deps == rows))[0, 0]
            raise ValueError(f"deps: flow {i} depends on itself (a cycle)")
        if not np.any(present & (deps > rows)):
            return  # every dep points backwards: topological order, hence acyclic
        # General case: a directed graph is acyclic iff each strongly connected
        # component is a single node (self-loops were rejected above).
        edge_src = deps[present].astype(np.int64)
        edge_dst = rows[present]
        graph = scipy.sparse.csr_matrix(
            (np.ones(edge_src.size, np.int8), (edge_src, edge_dst)), shape=(n, n))
        n_comp, labels = scipy.sparse.csgraph.connected_components(
            graph, directed=True, connection="strong")
        if n_comp < n:
            counts = np.bincount(labels)
            cyc = np.flatnonzero(counts[labels] > 1)
            raise ValueError(f"deps: flows {cyc[:8].tolist()} form a dependency cycle; "
                             "a flow may only wait for flows that do not wait for it")

    def __repr__(self) -> str:
        return (f"Workload(n_flows={self.n_flows}, n_groups={self.n_groups}, "
                f"jobs={self.job_names}, total_bytes={self.total_bytes:.6g}, "
                f"max_deps={self.max_deps})")


def concat(*workloads: Workload) -> Workload:
    """Concatenate workloads into one.

    Flow rows are stacked in argument order; ``deps`` are offset by the number of flows
    before each part, ``group`` ids by the number of groups before it (every collective
    instance stays distinct).  Jobs are merged **by name**: parts whose jobs share a name
    (e.g. the collectives of one training job) share one job id, different names get
    different ids, in order of first appearance.  ``deps`` tables are padded to the
    widest part.  Extra ``columns`` are stacked by name; a part without a column that
    another part has gets ``-1`` there (in the column's dtype, from its first part).

    Args:
        *workloads: ``Workload`` records (a single list or tuple is also accepted).

    Returns:
        The concatenated ``Workload``.
    """
    if len(workloads) == 1 and isinstance(workloads[0], (list, tuple)):
        workloads = tuple(workloads[0])
    for k, w in enumerate(workloads):
        if not isinstance(w, Workload):
            raise ValueError(f"workloads[{k}]: expected a Workload, got {type(w).__name__}")
    if not workloads:
        return Workload.empty()
    width = max(w.max_deps for w in workloads)
    job_names: list[str] = []
    job_index: dict[str, int] = {}
    deps, jobs, groups = [], [], []
    flow_off = group_off = 0
    for w in workloads:
        d = np.full((w.n_flows, width), -1, np.int32)
        d[:, :w.max_deps] = np.where(w.deps >= 0, w.deps + flow_off, -1)
        deps.append(d)
        remap = np.empty(len(w.job_names), np.int32)
        for k, name in enumerate(w.job_names):
            if name not in job_index:
                job_index[name] = len(job_names)
                job_names.append(name)
            remap[k] = job_index[name]
        jobs.append(remap[w.job] if w.n_flows else np.zeros(0, np.int32))
        groups.append(np.where(w.group >= 0, w.group + group_off, -1))
        flow_off += w.n_flows
        group_off += w.n_groups

    def cat(name):
        return np.concatenate([getattr(w, name) for w in workloads])

    kinds = {}
    for w in workloads:
        for k, v in w.columns.items():
            kinds.setdefault(k, v.dtype)
    columns = {k: np.concatenate([w.columns[k] if k in w.columns
                                  else np.full(w.n_flows, -1, dt) for w in workloads])
               for k, dt in kinds.items()}

    return Workload(
        src=cat("src"), dst=cat("dst"), size=cat("size"), arrival=cat("arrival"),
        deps=np.concatenate(deps, axis=0), delay=cat("delay"),
        job=np.concatenate(jobs), group=np.concatenate(groups),
        group_names=sum((w.group_names for w in workloads), ()),
        job_names=tuple(job_names),
        group_bytes=cat("group_bytes"),
        group_kind=sum((w.group_kind for w in workloads), ()),
        group_ranks=cat("group_ranks"), columns=columns,
    )


def single_group(src, dst, size, deps, *, name: str, kind: str, group_bytes: float,
                 n_ranks: int, job: str, delay=None, arrival: float = 0.0,
                 drop_empty: bool = False) -> Workload:
    """Wrap the flow arrays of one collective instance into a ``Workload`` (internal).

    ``deps`` may be ``None`` (no dependencies) or an int [flows, k] table.  With
    ``drop_empty`` zero-byte flows are removed and ``deps`` re-indexed (deps on a removed
    flow are dropped; only valid when the removed flows have no deps of their own, as in
    the dependency-free patterns that use it).
    """
    src = np.asarray(src, np.int32)
    dst = np.asarray(dst, np.int32)
    n = src.shape[0]
    size = np.broadcast_to(np.asarray(size, np.float64), (n,)).copy()
    deps = np.full((n, 0), -1, np.int32) if deps is None else np.asarray(deps, np.int32)
    delay = np.zeros(n) if delay is None else np.broadcast_to(
        np.asarray(delay, np.float64), (n,)).copy()
    if drop_empty:
        keep = size > 0
        new_index = np.cumsum(keep) - 1
        deps = np.where(deps >= 0, np.where(keep[np.maximum(deps, 0)],
                                            new_index[np.maximum(deps, 0)], -1), -1)
        src, dst, size, deps, delay = src[keep], dst[keep], size[keep], deps[keep], delay[keep]
        n = src.shape[0]
    return Workload(
        src=src, dst=dst, size=size, arrival=np.full(n, float(arrival)), deps=deps,
        delay=delay, job=np.zeros(n, np.int32), group=np.zeros(n, np.int32),
        group_names=(name,), job_names=(job,), group_bytes=np.array([group_bytes]),
        group_kind=(kind,), group_ranks=np.array([n_ranks]),
    )


def check_hosts(hosts, name: str = "hosts", min_ranks: int = 2) -> np.ndarray:
    """Validate a rank -> host array (internal): 1-D, integer, distinct, >= 0."""
    arr = np.asarray(hosts)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of host indices, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.mod(arr, 1) == 0):
            raise ValueError(f"{name}: host indices must be integers")
    arr = arr.astype(np.int32)
    if arr.size < min_ranks:
        raise ValueError(f"{name}: need at least {min_ranks} ranks, got {arr.size}")
    if np.any(arr < 0):
        raise ValueError(f"{name}: host indices must be >= 0")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name}: host indices must be distinct (one rank per host); "
                         "model several GPUs per host as separate NIC endpoints")
    return arr


def check_size(size, name: str = "size") -> float:
    """Validate a scalar payload in bytes (internal)."""
    try:
        val = float(size)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number of bytes, got {size!r}") from None
    if not np.isfinite(val) or val < 0:
        raise ValueError(f"{name}: bytes must be finite and >= 0, got {val}")
    return val


def pad_deps(columns: Sequence[np.ndarray], n: int) -> np.ndarray:
    """Stack dep columns (each int [n], -1 = none) into an [n, k] table (internal)."""
    if not columns:
        return np.full((n, 0), -1, np.int32)
    return np.stack([np.asarray(c, np.int32) for c in columns], axis=1)
