"""Loop-invariant integer work of a loop body, moved before the loop.

Unrolled SparseCore kernels compute per-row shifts, destinations and
masks from vectors loaded before a `pl.loop` (`src_indices[r] % 2 * 16`,
...): inside the body that is one native scalar program per row and an
XLA slice per element on every trip (ragged_scatter: ~60 of its ~300 calls
per trip). Computed once before the loop, they come in as loop constants.

Only what cannot change a result is moved: equations of a loop known to
run at least once (a counted `fori_loop` / `pl.loop`, a `parallel_loop`
with static bounds: nothing runs that would not have run), pure (no
effects, no sub-jaxprs), reading only the loop's constants and other moved
values, with integer or bool results (exact wherever XLA computes them; a
float might fuse differently outside the loop than in it) of at most
`_MAX_ELEMENTS` each. Broadcasts and iotas stay: a store of a broadcast
scalar is a native fill (`splat`), and they cost nothing to recompute.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx

_MAX_ELEMENTS = 1024
_KEEP = {lax.broadcast_in_dim_p, lax.iota_p}


@dataclasses.dataclass(frozen=True)
class Hoisted:
    """`prelude` computes, from the loop's invariant inputs at `inputs`
    (positions in the body's constvars + invars), the values `body` takes
    as extra inputs right after its invariant ones."""

    prelude: object  # Jaxpr
    inputs: tuple
    body: object  # Jaxpr


_CACHE: dict = {}
_CACHE_LIMIT = 4096


def hoist(jaxpr, num_invariant: int) -> Hoisted | None:
    """The loop-invariant split of a loop body `jaxpr` whose first
    `num_invariant` invars (after its constvars) are the loop's constants;
    None when nothing moves. Cached per jaxpr."""
    key = (id(jaxpr), num_invariant)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    result = _hoist(jaxpr, num_invariant)
    if len(_CACHE) > _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = (jaxpr, result)
    return result


def _pure_integer(eqn) -> bool:
    """Pure, no sub-jaxpr, integer or bool results of at most `_MAX_ELEMENTS`."""
    if eqn.effects or eqn.primitive in _KEEP or any(_has_jaxpr(p) for p in eqn.params.values()):
        return False
    for v in eqn.outvars:
        aval = v.aval
        if not hasattr(aval, "dtype") or not hasattr(aval, "shape"):
            return False
        try:
            kind = np.dtype(aval.dtype).kind
        except TypeError:  # extended dtypes (semaphores, PRNG keys)
            return False
        if kind not in "iub" or math.prod(aval.shape) > _MAX_ELEMENTS:
            return False
    return True


def _has_jaxpr(param) -> bool:
    if isinstance(param, (tuple, list)):
        return any(_has_jaxpr(p) for p in param)
    return isinstance(param, jx.Jaxpr) or hasattr(param, "jaxpr")


def _hoist(jaxpr, num_invariant: int):
    inputs = [*jaxpr.constvars, *jaxpr.invars[:num_invariant]]
    invariant = set(inputs)
    # Equations of literals only stay where they are (the scalar programs
    # fold them at trace time; as a loop input they would be computed): a
    # moved equation reading one gets a copy of it in the prelude.
    constant: dict = {}  # var -> its equation
    moved, kept = [], []
    for eqn in jaxpr.eqns:
        operands = [v for v in eqn.invars if not isinstance(v, jx.Literal)]
        if not _pure_integer(eqn) or not all(v in invariant or v in constant for v in operands):
            kept.append(eqn)
        elif all(v in constant for v in operands):
            constant.update((v, eqn) for v in eqn.outvars)
            kept.append(eqn)
        else:
            moved.append(eqn)
            invariant.update(v for v in eqn.outvars if not isinstance(v, jx.DropVar))
    if not moved:
        return None
    produced = {v for e in moved for v in e.outvars}
    read_after = [v for e in kept for v in e.invars if not isinstance(v, jx.Literal)]
    read_after += [v for v in jaxpr.outvars if not isinstance(v, jx.Literal)]
    exported = list(dict.fromkeys(v for v in read_after if v in produced))
    if not exported:  # (dead code: left where it was)
        return None
    copies = _constants_read(moved, constant)
    used = {v for e in moved for v in e.invars if not isinstance(v, jx.Literal)}
    prelude_inputs = [v for v in inputs if v in used]
    prelude = jaxpr.replace(
        constvars=[], invars=prelude_inputs, outvars=exported, eqns=[*copies, *moved], effects=jx.no_effects
    )
    positions = {v: k for k, v in enumerate(inputs)}
    body = jaxpr.replace(invars=[*jaxpr.invars[:num_invariant], *exported, *jaxpr.invars[num_invariant:]], eqns=kept)
    return Hoisted(prelude, tuple(positions[v] for v in prelude_inputs), body)


def _constants_read(moved, constant: dict) -> list:
    """The literal-only equations `moved` reads, with what they read, in
    program order (each once)."""
    needed: dict = {}  # id(eqn) -> eqn

    def need(v):
        eqn = constant.get(v)
        if eqn is not None and id(eqn) not in needed:
            for w in eqn.invars:
                if not isinstance(w, jx.Literal):
                    need(w)
            needed[id(eqn)] = eqn

    for eqn in moved:
        for v in eqn.invars:
            if not isinstance(v, jx.Literal):
                need(v)
    return list(needed.values())
