r"""Scale out: batched scenario sweeps and multi-device (multi-host) sharding.

Units: as everywhere, bytes, seconds and bytes/s in every array.

Two ways to use more than one scenario or more than one device, both built on JAX's own
machinery (:class:`jax.sharding.Mesh`, :class:`jax.sharding.NamedSharding`,
:func:`jax.shard_map`, collectives ``psum``/``pmin``); nothing here communicates by
itself.

* :func:`sweep` -- many scenarios of the same padded shape (seeds, loads, capacities,
  failed-link sets given as capacity masks) at once.  A per-scenario function is
  ``vmap``-ed over the leading scenario axis; with more than one device (or an explicit
  ``mesh``) that axis is sharded across the devices (inputs placed with a
  :class:`~jax.sharding.NamedSharding`, ``jit`` with ``out_shardings``), after padding
  the batch to a multiple of the device count (the padding repeats the last scenario
  and is stripped from the result).  Functions that
  already take a leading batch axis (``max_min_fair`` with ``[batch, links]``
  capacities, :func:`fabric_jax.simulate_flows_batched`,
  :func:`fabric_jax.simulate_fluid_batched`, which keep host-side logic) run
  with ``batched=True``: their batched inputs are placed sharded and the functions' own
  ``jit``-ed kernels follow that placement (GSPMD sharding propagation).
* :func:`max_min_fair_sharded` -- one huge scenario: the *flow* dimension of the
  max-min solve is split across devices with :func:`jax.shard_map`.  Each device holds
  a contiguous slice of flows and their incidence rows (flow-major layout,
  ``[flows / devices, row_width]``); the two per-link reductions of an iteration (open
  weight and frozen load; the smallest target level of a link's flows) become a
  ``psum`` / ``pmin`` over the device axis, so every device sees the same per-link
  levels and freezes exactly the flows the single-device solver
  (:func:`fabric_jax.max_min_fair`, :mod:`fabric_jax.fairness`) freezes, iteration by
  iteration.  Rates agree with it up to float summation order.  Per device and
  iteration it moves ``O(nnz / devices)`` entries plus one all-reduce of ``2 x links``
  and one of ``links`` floats.
* :func:`simulate_fluid_sharded` -- one huge fluid run (:func:`fabric_jax.simulate_fluid`)
  with its flows split the same way, a driver over the fluid engine's contract
  (:func:`fabric_jax.fluid.prepare`, :func:`fabric_jax.fluid.loop.run_body`): each device steps its slice of the flows and all
  their per-flow state; every sum of flows onto links in the step (the hop table's
  link and pool sums, :class:`fabric_jax.links.HopTable` with ``axis_name``; link
  loads; the step's max-min solves) is an all-reduce, so every device holds the same
  link state (flow control, queues per link).  Per device the state and work are
  ``1 / devices`` of the single-device run's per-flow part plus the ``[links]`` part.

Multi-host.  The same code runs on several hosts: call ``jax.distributed.initialize()``
on every process first (same program, same inputs on every process), then call these
functions unchanged; the default mesh spans ``jax.devices()`` (all processes' devices),
inputs are placed with :func:`jax.make_array_from_callback` (each process supplies its
own shards from its copy of the host arrays), and the collectives run over the global
mesh.  Results are then global :class:`jax.Array`\ s; fetch them on a host with
``jax.experimental.multihost_utils.process_allgather``.

Memory.  How memory grows with flows, links, hops and paths, and the largest scenario a
host or an H200 holds, is measured in ``docs/performance.md`` ("Memory")."""

from .mesh import BATCH_AXIS, FLOW_AXIS, check_mesh, device_mesh, place
from .sharded_fluid import simulate_fluid_sharded
from .sharded_solve import max_min_fair_sharded
from .sweep import sweep

__all__ = ["sweep", "max_min_fair_sharded", "simulate_fluid_sharded", "device_mesh",
           "check_mesh", "place", "BATCH_AXIS", "FLOW_AXIS"]
