"""How fabric_jax's programs are compiled: loops that stay on the GPU.

Every jitted engine of the package (the fluid run, the event engine, the max-min
solves, the sharded and batched forms) is compiled through :func:`jit`, which is
``jax.jit`` with :func:`compiler_options` where the call is a program of its own (JAX
takes compiler options at the top level only: inside a user's ``jax.jit``, ``vmap`` or
``grad`` the engine is part of the user's program, compiled with the user's options).

**Device-side loops (CUDA graph conditional nodes).**  A ``lax.while_loop`` whose trip
count XLA does not know runs on XLA:GPU as a ``WhileThunk``: the condition is computed
on the device, copied to the host, and the host waits for it before launching the next
iteration -- one host round trip per test, which also drains the GPU's queue (and a
``conditional`` outside a command buffer reads its branch index back the same way).
The exact solves (a loop until every flow is frozen) and the event engine's loop over
events are such loops; the fluid run's idle-chunk test is such a conditional.  XLA:GPU
can instead record a loop into a *command buffer* (a CUDA graph) as a conditional
``while`` node: the condition kernel sets the node's handle on the device and the graph
runs the next iteration itself, no host in the loop (OpenXLA issue 6973, "On-device control flow with CUDA graph
conditional nodes"; CUDA Programming Guide, "Conditional Graph Nodes", CUDA >= 12.3).
XLA enables this per command type (``xla_gpu_enable_command_buffer``); its default set
records fusions, library calls and ``conditional`` (CONDITIONAL) but not ``while``
(WHILE).  :func:`compiler_options` adds WHILE to that default set.

What it changes: nothing on a CPU (the option is XLA:GPU's; the CPU program is the same,
``tests/fluid/test_compiling.py``) and nothing in any result (a command buffer runs the same
kernels in the same order).  On a GPU, the host round trips of the loops; where the
driver or CUDA runtime is older than 12.3, XLA drops WHILE and CONDITIONAL itself and
the program runs as before.  What it costs is a graph instantiation or update per call
(XLA records the graph on a call and updates it when buffer addresses change; a first
execution through plain thunks, its "warm-up", only where a command asks for one,
collectives, which these one-device loops do not hold), which a short call may not earn
back; ``experiments/bench_gpu.py --parts variants`` times both on a GPU
(``host_loops*``).  Which loops XLA:GPU records is its own decision: not, for one, a loop
whose body writes at a row of its own counter through a dynamic-slice fusion (a fluid
run's trajectory, ``save_every``, one row per chunk: a loop of known trip count, with
no test to read back), while what its body runs is recorded (``docs/performance.md``,
"Loops on the device").

Turn it off with the environment variable ``FABRIC_JAX_DEVICE_LOOPS=0`` (read when
fabric_jax is imported).  An ``XLA_FLAGS`` that sets ``--xla_gpu_enable_command_buffer``
itself wins: fabric_jax then passes no option, so XLA's documented way to disable
command buffers (``--xla_gpu_enable_command_buffer=``) still works.

The command types are named for the jaxlib releases this was read from (0.10: the
default set printed by XLA:GPU's compiler, ``gpu_compiler.cc``, plus WHILE); with an
older jaxlib, whose XLA may not know every name, no option is passed.
"""

from __future__ import annotations

import functools
import os

import jax

__all__ = ["jit", "Jitted", "compiler_options", "device_loops", "COMMAND_BUFFER_TYPES"]

#: XLA:GPU's default command buffer types in jaxlib 0.10, and WHILE.
COMMAND_BUFFER_TYPES = ("FUSION", "CUBLAS", "CUBLASLT", "CUDNN", "CUSTOM_CALL",
                        "DYNAMIC_SLICE_FUSION", "CONDITIONAL", "WHILE")
#: The oldest jaxlib whose XLA knows every name of :data:`COMMAND_BUFFER_TYPES`
#: (checked: 0.10.2, and 0.11.2 with its CUDA 13 plugin, the version a lent machine holds).
MIN_JAXLIB = (0, 10)


def _version(text: str) -> tuple:
    parts = []
    for p in text.split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def device_loops(environ=None, jaxlib_version: str | None = None) -> bool:
    """Whether :func:`compiler_options` asks XLA:GPU to keep while loops on the device:
    not turned off by ``FABRIC_JAX_DEVICE_LOOPS=0``, not overridden by an ``XLA_FLAGS``
    that sets ``xla_gpu_enable_command_buffer``, and a jaxlib of at least
    :data:`MIN_JAXLIB` (``environ`` and ``jaxlib_version`` default to this process's)."""
    env = os.environ if environ is None else environ
    flag = env.get("FABRIC_JAX_DEVICE_LOOPS", "1").strip().lower()
    if flag not in ("0", "1", "false", "true", "off", "on", ""):
        raise ValueError(f"FABRIC_JAX_DEVICE_LOOPS: 0 or 1; got {flag!r}")
    if flag in ("0", "false", "off"):
        return False
    if "xla_gpu_enable_command_buffer" in env.get("XLA_FLAGS", ""):
        return False
    if jaxlib_version is None:
        import jaxlib
        jaxlib_version = jaxlib.__version__
    return _version(jaxlib_version) >= MIN_JAXLIB


def compiler_options(loops: bool | None = None) -> dict:
    """The compiler options of fabric_jax's programs: ``{"xla_gpu_enable_command_buffer":
    <the types of COMMAND_BUFFER_TYPES>}`` when device loops are on (``loops``, default
    :func:`device_loops`), else none.  XLA:CPU ignores them."""
    if loops is None:
        loops = _DEVICE_LOOPS
    if not loops:
        return {}
    return {"xla_gpu_enable_command_buffer": ",".join(COMMAND_BUFFER_TYPES)}


_DEVICE_LOOPS = device_loops()


try:
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:   # pragma: no cover - a JAX without it: never pass the options
    def _trace_state_clean() -> bool:
        return False


def _top_level() -> bool:
    """No JAX transformation is tracing: a jitted call here is compiled as a program of its
    own (JAX takes ``compiler_options`` only there; a jit inside another's trace is part
    of the outer program, compiled with the outer's options)."""
    return _trace_state_clean()


class Jitted:
    """A function jitted twice: with :func:`compiler_options` for calls at the top level
    (a program of its own), and without for calls inside another transformation (jit,
    vmap, grad, shard_map of the caller), where JAX refuses the options.  The results are
    the same; attributes (``lower``, ``trace``, ``eval_shape``...) are the top-level
    form's, and :meth:`clear_cache` clears both."""

    def __init__(self, fun, options: dict, kwargs: dict):
        self._plain = jax.jit(fun, **kwargs)
        self._top = (jax.jit(fun, compiler_options=options, **kwargs) if options
                     else self._plain)
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        return (self._top if _top_level() else self._plain)(*args, **kwargs)

    def clear_cache(self):
        self._top.clear_cache()
        self._plain.clear_cache()

    def __getattr__(self, name):
        top = self.__dict__.get("_top")
        if top is None:
            raise AttributeError(name)
        return getattr(top, name)


def jit(fun=None, **kwargs):
    """``jax.jit(fun, **kwargs)`` compiled with :func:`compiler_options` where it is a
    program of its own (:class:`Jitted`); usable as a decorator, bare or with keyword
    arguments (``functools.partial(jit, static_argnums=...)``)."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    options = {**compiler_options(), **(kwargs.pop("compiler_options", None) or {})}
    return Jitted(fun, options, kwargs)
