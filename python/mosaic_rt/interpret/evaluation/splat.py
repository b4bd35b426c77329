"""Stores of a broadcast scalar (`acc_ref[...] = jnp.zeros_like(acc_ref)`,
`jnp.full(shape, -inf)`, ...) as native fills: the value stored is found
to be `broadcast_in_dim` of a rank-0 value (through dtype-preserving
`convert_element_type`s), so the store passes that scalar and no broadcast
reaches XLA (each XLA:CPU fusion costs milliseconds of compile). Anything
else that uses the broadcast still gets it from XLA."""

from __future__ import annotations

import functools
from typing import Any, Callable

from jax import lax

from mosaic_rt import jax_internals as jx


class BlockStores:
    """What the swaps of one jaxpr block need to know about their operands:
    which values are broadcasts of a scalar, and which results are used."""

    def __init__(self, jaxpr, read: Callable[[Any], Any], skip_floats: bool):
        self._jaxpr = jaxpr
        self._read = read
        # skip_floating_point_ops stores a sentinel in place of any float
        # value a skipped equation computes (the broadcast itself too).
        self._skip_floats = skip_floats

    @functools.cached_property
    def _facts(self):
        """(var -> rank-0 atom it broadcasts, set of vars read)."""
        sources, used = {}, set()
        for eqn in self._jaxpr.eqns:
            used.update(v for v in eqn.invars if not isinstance(v, jx.Literal))
            if len(eqn.invars) != 1 or len(eqn.outvars) != 1:
                continue
            operand, out = eqn.invars[0], eqn.outvars[0]
            if eqn.primitive is lax.broadcast_in_dim_p and operand.aval.shape == ():
                sources[out] = operand
            elif (
                eqn.primitive is lax.convert_element_type_p
                and not isinstance(operand, jx.Literal)  # (inlined calls pass literals on)
                and operand in sources
                and operand.aval.dtype == out.aval.dtype
            ):
                sources[out] = sources[operand]
        used.update(v for v in self._jaxpr.outvars if not isinstance(v, jx.Literal))
        return sources, used

    def fill_value(self, var, dtype):
        """The rank-0 value `var` (to be stored as `dtype`) broadcasts, or
        None when it is not such a broadcast."""
        if isinstance(var, jx.Literal):
            return None
        source = self._facts[0].get(var)
        if source is None or source.aval.dtype != dtype:
            return None
        if self._skip_floats and jx.is_float(dtype):
            return None
        return self._read(source)

    def is_used(self, var) -> bool:
        return var in self._facts[1]
