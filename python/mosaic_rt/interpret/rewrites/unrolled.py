"""Copies of one piece of column work that Python unrolled, run as one.

SparseCore kernels also walk a row's columns in Python loops:
``for off in range(0, 128, 8): v = ref[r, pl.ds(c + off, 8)]; ...;
ref[r, pl.ds(c + off, 8)] = w`` traces to K copies of the same equations
that differ only in the literal ``off`` of the ``c + off`` starting their
column slices (ragged_scatter's bf16 unpacking: 16 copies of 8 rows of
load / shift / mask / select / store, ~380 native calls per 128 columns).
Such copies, when they follow each other with nothing in between, become
one copy over all K * 8 columns, under `widening`'s checks (the same
proof that the rewrite changes no value as for a `parallel_loop`): each
copy touches its own columns of the refs it writes, lane values only
flow elementwise, and nothing else has an effect.

Found, not assumed: the anchors are ``add(c, literal)`` equations with one
``c`` whose literals step evenly at evenly spaced positions; the copies
are the equal-length stretches around them, equal equation for equation
(primitive, parameters, literals) with each copy reading what the first
reads from outside or its own results, and nothing after the copies
reads their results.
"""

from __future__ import annotations

import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.rewrites import widening

# The same object must come back for a jaxpr while a kernel is traced (a
# `cond`'s parent plans the branch the branch then evaluates).
_CACHE: dict = {}
_CACHE_LIMIT = 8192


def widen_unrolled(jaxpr):
    """`jaxpr` with each qualifying run of unrolled column copies replaced
    by one wide copy; `jaxpr` itself when it has none. Cached per jaxpr."""
    hit = _CACHE.get(id(jaxpr))
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    result = jaxpr
    eqns = list(jaxpr.eqns)
    changed = True
    while changed:
        changed = False
        for run in _candidate_runs(eqns):
            wide = _widen_run(jaxpr, eqns, *run)
            if wide is not None:
                begin, end, new = wide
                eqns = [*eqns[:begin], *new, *eqns[end:]]
                changed = True
                break
    if len(eqns) != len(jaxpr.eqns) or any(a is not b for a, b in zip(eqns, jaxpr.eqns)):
        result = jaxpr.replace(eqns=eqns)
    if len(_CACHE) > _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[id(jaxpr)] = (jaxpr, result)
    return result


def _anchor(eqn):
    """``(base, literal position, value)`` of an ``add(c, literal)`` on a
    scalar integer ``c``, else None."""
    if eqn.primitive is not lax.add_p or len(eqn.invars) != 2:
        return None
    a, b = eqn.invars
    for base, lit, pos in ((a, b, 1), (b, a, 0)):
        if isinstance(lit, jx.Literal) and not isinstance(base, jx.Literal):
            if base.aval.shape != () or np.dtype(base.aval.dtype).kind not in "iu":
                return None
            value = np.asarray(lit.val)
            if value.shape != ():
                return None
            return base, pos, int(value)
    return None


def _candidate_runs(eqns):
    """``(positions, literal position, step)`` of anchors on one base,
    evenly spaced with evenly stepping literals, longest first."""
    by_base: dict = {}
    for i, eqn in enumerate(eqns):
        found = _anchor(eqn)
        if found is not None:
            base, pos, value = found
            by_base.setdefault((id(base), pos), []).append((i, value))
    runs = []
    for (_, pos), hits in by_base.items():
        k = 0
        while k + 1 < len(hits):
            gap, step = hits[k + 1][0] - hits[k][0], hits[k + 1][1] - hits[k][1]
            j = k + 1
            while j + 1 < len(hits) and hits[j + 1][0] - hits[j][0] == gap and hits[j + 1][1] - hits[j][1] == step:
                j += 1
            if step > 0:
                runs.append(([i for i, _ in hits[k : j + 1]], pos, step))
            k = j
    runs.sort(key=lambda r: -len(r[0]))
    return runs


def _widen_run(jaxpr, eqns, anchors, pos, step):
    """``(begin, end, wide equations)`` replacing ``eqns[begin:end]``, or
    None."""
    period = anchors[1] - anchors[0]
    # The copies may begin before their anchors: extend back while every
    # copy has the same primitive there (else from the anchors on).
    back = 0
    while back + 1 < period and anchors[0] - back - 1 >= 0:
        prims = {eqns[a - back - 1].primitive for a in anchors}
        if len(prims) != 1:
            break
        back += 1
    for b in dict.fromkeys((back, 0)):
        wide = _widen_copies_from(jaxpr, eqns, anchors, pos, step, period, b)
        if wide is not None:
            return wide
    return None


def _widen_copies_from(jaxpr, eqns, anchors, pos, step, period, back):
    begin = anchors[0] - back
    end = anchors[-1] - back + period
    if end > len(eqns):
        return None
    first = eqns[begin : begin + period]
    anchor_at = back
    defined: set = set()
    for k in range(1, len(anchors)):
        copy = eqns[begin + k * period : begin + (k + 1) * period]
        if not _same_copy(first, copy, anchor_at, pos, defined):
            return None
    for eqn in first:
        defined.update(id(v) for v in eqn.outvars if not isinstance(v, jx.DropVar))
    used_after = {id(v) for eqn in eqns[end:] for v in eqn.invars if not isinstance(v, jx.Literal)}
    used_after |= {id(v) for v in jaxpr.outvars if not isinstance(v, jx.Literal)}
    if used_after & defined:
        return None
    block = jaxpr.replace(invars=_free_vars(first), constvars=[], outvars=[], eqns=first)
    wide = widening.widen_copies(block, first[anchor_at].outvars[0], len(anchors), step)
    if wide is None:
        return None
    return begin, end, wide


def _same_copy(first, copy, anchor_at, pos, defined) -> bool:
    """Whether ``copy`` is ``first`` equation for equation (the anchor's
    literal aside), reading what ``first`` reads from outside or its own
    results; records the variables ``copy`` defines in ``defined``."""
    mine: dict = {}  # first's variable -> copy's
    for j, (a, b) in enumerate(zip(first, copy)):
        if a.primitive is not b.primitive or len(a.invars) != len(b.invars) or len(a.outvars) != len(b.outvars):
            return False
        if not _same_params(a.params, b.params):
            return False
        for n, (x, y) in enumerate(zip(a.invars, b.invars)):
            if isinstance(x, jx.Literal) or isinstance(y, jx.Literal):
                if not (isinstance(x, jx.Literal) and isinstance(y, jx.Literal)):
                    return False
                if not (j == anchor_at and n == pos) and not _same_literal(x, y):
                    return False
            elif mine.get(id(x), x) is not y:
                return False
        for x, y in zip(a.outvars, b.outvars):
            if isinstance(x, jx.DropVar) != isinstance(y, jx.DropVar) or x.aval != y.aval:
                return False
            if not isinstance(x, jx.DropVar):
                mine[id(x)] = y
                defined.add(id(y))
    return True


def _same_params(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if x is y:
            continue
        if isinstance(x, (jx.Jaxpr, np.ndarray)) or hasattr(x, "jaxpr"):
            return False
        try:
            if not bool(x == y):
                return False
        except (TypeError, ValueError):  # values without a plain equality
            return False
    return True


def _same_literal(x, y) -> bool:
    a, b = np.asarray(x.val), np.asarray(y.val)
    return x.aval == y.aval and a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def _free_vars(eqns) -> list:
    """The variables ``eqns`` read without defining, in first-use order."""
    defined, free, seen = set(), [], set()
    for eqn in eqns:
        for v in eqn.invars:
            if not isinstance(v, jx.Literal) and id(v) not in defined and id(v) not in seen:
                seen.add(id(v))
                free.append(v)
        defined.update(id(v) for v in eqn.outvars if not isinstance(v, jx.DropVar))
    return free
