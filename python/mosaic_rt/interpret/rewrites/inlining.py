"""A kernel block with its `jit` calls inlined, so that the native runs see
across them.

jnp's `where`, `remainder`, `clip`, ... trace to a `jit` equation; each one
evaluated as a block of its own ends the caller's pending vector program
and starts two more (the call's and the caller's rest). A SparseCore loop
doing `load -> shift -> where -> store` on 8 lanes became three programs
per row instead of one. XLA inlines every call before it optimizes, so the
graph it compiles (and what `vector_runs` reasons about to stay
bit-identical) is the same either way.

A call is inlined when its jaxpr has no consts (closed-over arrays cannot
be spliced in as literals); its equations get fresh variables per call
site (jax shares one traced jaxpr between identical calls).
"""

from __future__ import annotations

from mosaic_rt import jax_internals as jx

# Only jaxprs that changed are kept (an unchanged one is its own result).
# The same object must come back while a kernel is traced: a `cond`'s
# parent plans the inlined branch that the branch then evaluates, by
# position and variable; so the limit is far above a kernel's call count.
_CACHE: dict = {}
_CACHE_LIMIT = 8192


def inline_calls(jaxpr):
    """`jaxpr` with its const-free `jit` equations replaced by their bodies
    (recursively); `jaxpr` itself when it has none. Cached per jaxpr."""
    hit = _CACHE.get(id(jaxpr))
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    result = _inline(jaxpr)
    if result is jaxpr:
        return jaxpr
    if len(_CACHE) > _CACHE_LIMIT:  # jaxprs traced long ago (the cache holds them)
        _CACHE.clear()
    _CACHE[id(jaxpr)] = (jaxpr, result)
    return result


def _body(eqn):
    """The inlinable body of a `jit` equation, or None."""
    if eqn.primitive is not jx.jit_p:
        return None
    inner, consts = jx.closed_jaxpr_parts(eqn.params["jaxpr"])
    if consts or inner.constvars:
        return None
    return inline_calls(inner)


def _inline(jaxpr):
    if not any(_body(e) is not None for e in jaxpr.eqns):
        return jaxpr
    subst: dict = {}  # a call's result variable -> what computes it now

    def atom(v):
        return v if isinstance(v, jx.Literal) else subst.get(v, v)

    eqns = []
    for eqn in jaxpr.eqns:
        invars = [atom(v) for v in eqn.invars]
        body = _body(eqn)
        if body is None:
            eqns.append(eqn if invars == list(eqn.invars) else eqn.replace(invars=invars))
            continue
        local = dict(zip(body.invars, invars))

        def inner_atom(v, local=local):
            return v if isinstance(v, jx.Literal) else local[v]

        for inner in body.eqns:
            outvars = [v if isinstance(v, jx.DropVar) else jx.Var(v.aval) for v in inner.outvars]
            local.update((old, new) for old, new in zip(inner.outvars, outvars) if not isinstance(old, jx.DropVar))
            eqns.append(inner.replace(invars=[inner_atom(v) for v in inner.invars], outvars=outvars))
        for outer, inner_out in zip(eqn.outvars, body.outvars):
            if not isinstance(outer, jx.DropVar):
                subst[outer] = inner_atom(inner_out)
    return jaxpr.replace(eqns=eqns, outvars=[atom(v) for v in jaxpr.outvars])
