"""`pl.select_ref(i, *refs)`: a DMA operand that is one of several refs,
chosen by a scalar at run time (the TPU lowering takes it for DMAs, at the
top of a ref's transforms).

Here a ref is a buffer or semaphore id (an int32 scalar of the program),
so the choice is a select among the candidates' ids -- and, for candidates
that are views indexed alike (``x.at[pl.ds(8 * k, 8)]``, ``sems.at[k]``),
among their index starts -- giving one ordinary ref that the DMA rules take
as they take any other. Candidates of one select have one type (jax checks
it); a whole ref counts as the view of all of it, and a candidate that is a
select itself is resolved first; views that differ in more than their
starts are not supported.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx


def is_select(x) -> bool:
    ref, transforms = _parts(x)
    return (
        jx.SelectTransform is not None
        and isinstance(ref, tuple)
        and bool(transforms)
        and isinstance(transforms[0], jx.SelectTransform)
    )


def _parts(x) -> tuple:
    """``(ref, transforms)`` of ``x``, views of views as one list (jax
    0.10.2 wraps a view of a select around it, later jax appends the
    view's transforms to the select's). For a select, ``ref`` is the tuple
    of candidates."""
    ref, transforms = jx.ref_and_transforms(x)
    return ref, tuple(transforms or ())


def first_candidate(x):
    """``x`` with a select replaced by its first candidate (for what all
    candidates share: the aval, the memory space); anything else as it is."""
    if not is_select(x):
        return x
    candidates, transforms = _parts(x)
    base, own = _parts(first_candidate(candidates[0]))
    rest = (*own, *transforms[1:])
    return jx.TransformedRef(base, rest) if rest else base


def resolve(x):
    """``x`` (a DMA operand's value) with a select replaced by the ref it
    chooses at run time; anything else as it is."""
    if not is_select(x):
        return x
    candidates, transforms = _parts(x)
    idx = transforms[0].idx
    # A candidate may be a select of its own (pl.select_ref nested).
    chosen = [_parts(resolve(r)) for r in candidates]
    base = _select(idx, [b for b, _ in chosen])
    merged = _merge(idx, [tuple(t) for _, t in chosen])
    rest = (*merged, *transforms[1:])
    return jx.TransformedRef(base, rest) if rest else base


def _same(a, b) -> bool:
    """Whether ``a`` and ``b`` (transforms, indices) are the same without
    comparing traced values: one tree, each leaf the same object or equal
    static numbers (``==`` on traced starts would not give a bool)."""
    (la, ta), (lb, tb) = jax.tree.flatten(a), jax.tree.flatten(b)
    return ta == tb and all(x is y or (_static(x) and _static(y) and x == y) for x, y in zip(la, lb))


def _select(idx, values):
    """``values[idx]`` at run time (one value when all are the same)."""
    if all(_same(v, values[0]) for v in values):
        return values[0]
    which = jnp.clip(jnp.asarray(idx, jnp.int32), 0, len(values) - 1)
    return lax.select_n(which, *(jnp.asarray(v, jnp.int32) for v in values))


def _static(v) -> bool:
    return isinstance(v, (int, np.integer))


def _merge(idx, transforms: list[tuple]) -> tuple:
    """One list of transforms standing for the candidates' ``transforms``:
    theirs when all are the same, else their indexers with selected starts."""
    first = transforms[0]
    if all(_same(t, first) for t in transforms[1:]):
        return first
    if any(len(t) != len(first) for t in transforms):
        transforms = _whole_views(transforms)
        first = transforms[0]
    return tuple(_merge_one(idx, same, transforms) for same in zip(*transforms))


def _whole_views(transforms: list[tuple]) -> list[tuple]:
    """``transforms`` where some candidates are whole refs (no transforms)
    and the others one slice of a ref of the same shape in every dimension
    (``x.at[0:8]`` of an (8, 128) ``x``): each whole ref as that slice from
    0, so that all are merged alike."""
    views = [t for t in transforms if t]
    if any(len(t) != 1 or not isinstance(t[0], jx.NDIndexer) for t in views):
        raise _unsupported(transforms)
    shape = tuple(views[0][0].shape)
    for (t,) in views:
        if (
            tuple(t.shape) != shape
            or not all(isinstance(c, jx.Slice) for c in t.indices)
            or tuple(t.get_indexer_shape()) != shape
        ):
            raise _unsupported(transforms)
    whole = jx.NDIndexer(tuple(jx.Slice(0, d, 1) for d in shape), shape, ())
    return [t if t else (whole,) for t in transforms]


def _merge_one(idx, same: tuple, transforms):
    if not all(isinstance(t, jx.NDIndexer) for t in same):
        if all(_same(t, same[0]) for t in same[1:]):
            return same[0]
        raise _unsupported(transforms)
    if any(t.shape != same[0].shape or len(t.indices) != len(same[0].indices) for t in same):
        raise _unsupported(transforms)
    parts = []
    for comps in zip(*(t.indices for t in same)):
        if all(isinstance(c, jx.Slice) for c in comps):
            if len({(c.size, c.stride) for c in comps}) != 1:
                raise _unsupported(transforms)
            parts.append(jx.Slice(_select(idx, [c.start for c in comps]), comps[0].size, comps[0].stride))
        elif not any(isinstance(c, jx.Slice) for c in comps) and all(np.shape(c) == () for c in comps):
            parts.append(_select(idx, list(comps)))
        else:
            raise _unsupported(transforms)
    return dataclasses.replace(same[0], indices=tuple(parts))


def _unsupported(transforms) -> NotImplementedError:
    return NotImplementedError(
        "pl.select_ref over refs viewed differently (other than by where their slices start) is not "
        f"supported in TPU interpret mode: {len(transforms)} candidates with transforms {transforms}"
    )
