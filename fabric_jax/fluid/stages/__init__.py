"""The stages of one fluid step, one module each, in the order :func:`fabric_jax.fluid.step.step`
runs them: :mod:`.clock` (clock, faults, route), :mod:`.offer`, :mod:`.transmit` (one
class) or :mod:`.classes` (traffic classes), :mod:`.receive`, :mod:`.complete`,
:mod:`.signals`; :mod:`.common` holds the reductions over flows that a sharded run
makes global."""
