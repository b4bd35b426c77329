"""A SparseCore `parallel_loop` whose iterations touch disjoint columns, run
as one iteration over all of them.

SparseCore kernels walk a row of a few thousand columns 8 or 16 lanes at a
time: `plsc.parallel_loop(0, cols, step=16)` around loads `ref[r, pl.ds(c,
16)]`, elementwise work and stores at the same columns. Interpreted trip by
trip, every trip pays a native call per load, store and vector program (and
an XLA fusion per float chain): ragged_gather_reduce's column loop was ~60
calls per 16 columns. Here such a loop becomes one straight-line block whose
loads and stores take all `n * step` columns at once.

The result is the loop's, element for element, whatever `parallel_loop`
promises: it is checked, not assumed, that the rewrite changes no value.

* The index is used only as the start of a column slice `pl.ds(c, step)`
  (size == step, stride 1) on the last axis of a ref access whose earlier
  indexers keep that axis whole. Iteration k then touches columns
  `[lower + k*step, lower + (k+1)*step)` of that access and no other.
* A ref the loop writes is accessed only that way: every iteration touches
  its own columns, so no iteration reads what another wrote, and the order
  of accesses to any one element is the program order, as in the loop.
  Refs it only reads may also be read whole (once instead of n times).
* Values computed from the index's columns (the "lane" values) flow only
  through elementwise equations whose other operands are scalars (or
  scalar broadcasts), and through slices / squeezes / broadcasts that leave
  the column axis alone; floats only through ops that round per element
  (`_FLOAT_SAFE`), so XLA computes each element as in the loop.
* Anything else with an effect (DMAs, semaphores, control flow, callbacks)
  leaves the loop as it is; so do carries and dynamic bounds.
"""

from __future__ import annotations

import math

import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx

_ELEMENTWISE = {
    p
    for p in (
        lax.add_p,
        lax.sub_p,
        lax.mul_p,
        lax.div_p,
        lax.rem_p,
        lax.max_p,
        lax.min_p,
        lax.and_p,
        lax.or_p,
        lax.xor_p,
        lax.not_p,
        lax.neg_p,
        lax.abs_p,
        lax.sign_p,
        lax.eq_p,
        lax.ne_p,
        lax.lt_p,
        lax.le_p,
        lax.gt_p,
        lax.ge_p,
        lax.shift_left_p,
        lax.shift_right_arithmetic_p,
        lax.shift_right_logical_p,
        lax.select_n_p,
        lax.convert_element_type_p,
        lax.bitcast_convert_type_p,
        lax.clamp_p,
        lax.population_count_p,
        lax.clz_p,
        lax.integer_pow_p,
        lax.floor_p,
        lax.ceil_p,
        lax.round_p,
        lax.is_finite_p,
        lax.square_p,
        getattr(lax, "copy_p", None),
        jx.sc_bitcast_p,
    )
    if p is not None
}
# Float ops whose per-element result cannot depend on how many elements
# XLA computes at once (IEEE basic operations; no polynomial
# approximations). Other float work keeps the loop.
_FLOAT_SAFE = _ELEMENTWISE - {lax.integer_pow_p, lax.square_p}
_STRUCTURAL = {lax.broadcast_in_dim_p, lax.slice_p, lax.squeeze_p}

_CACHE: dict = {}
_CACHE_LIMIT = 4096


class _Reject(Exception):
    """The loop keeps its iterations."""


def widen(body, num_consts: int, lower: int, upper: int, step: int):
    """A jaxpr of the loop's constants (``body.invars[:num_consts]``) doing
    what ``body`` does for every index ``lower, lower + step, ... < upper``,
    in one pass; None when the loop does not qualify (see the module doc).
    ``body``: the loop body with its constvars converted to invars, then the
    index, then no carries. Cached per jaxpr and bounds."""
    key = (id(body), num_consts, lower, upper, step)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is body:
        return hit[1]
    try:
        if step <= 0 or upper <= lower or len(body.invars) != num_consts + 1:
            raise _Reject
        count = math.ceil((upper - lower) / step)
        result = _Widening(body, num_consts, body.invars[num_consts], lower, count, step).run()
    except _Reject:
        result = None
    if len(_CACHE) > _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = (body, result)
    return result


def widen_copies(block, start, count: int, step: int):
    """The equations of ``block`` (a jaxpr whose invars are every variable
    it reads from outside) done for ``count`` copies whose column slices
    start ``step`` columns apart, in one pass; None when they do not
    qualify (see the module doc). ``start``: the variable ``block``
    defines as its first copy's column start (``c + off``, see
    `unrolled`). Not cached: the caller caches the block it rewrites."""
    try:
        if step <= 0 or count < 2:
            raise _Reject
        return _Widening(block, len(block.invars), start, None, count, step).run().eqns
    except _Reject:
        return None


class _Widening:
    def __init__(self, body, num_consts, index, lower, count, step):
        """``index``: the column start, an invar (a loop's index, first
        value ``lower``) or a variable the body defines (``lower`` None:
        its new variable is the wide slice's start)."""
        if body.outvars:
            raise _Reject
        self.body, self.num_consts = body, num_consts
        self.index = index
        self.lower, self.step = lower, step
        self.width = count * step
        self.subst: dict = {}  # old var -> new atom
        self.lane: set = set()  # new vars holding all iterations' columns
        self.splats: dict = {}  # old var -> (operand, eqn) of a scalar broadcast
        self.wide_splats: dict = {}
        self.column_refs: set = set()  # refs accessed by columns
        self.whole_refs: set = set()  # refs accessed otherwise
        self.written: set = set()
        self.eqns: list = []

    def run(self):
        for eqn in self.body.eqns:
            self._equation(eqn)
        if self.written & self.whole_refs or not self.column_refs:
            raise _Reject
        invars = self.body.invars[: self.num_consts]
        return self.body.replace(invars=invars, eqns=self.eqns, outvars=[], effects=self.body.effects)

    # -- atoms

    def _atom(self, v):
        if isinstance(v, jx.Literal):
            return v
        if v is self.index:
            raise _Reject  # the index used other than as a column start
        return self.subst.get(v, v)

    def _is_lane(self, atom) -> bool:
        return not isinstance(atom, jx.Literal) and atom in self.lane

    def _lane_shape(self, shape) -> tuple:
        if not shape or shape[-1] != self.step:
            raise _Reject
        return (*shape[:-1], self.width)

    def _out(self, old, shape=None):
        """A fresh variable for ``old``'s value (widened to ``shape``)."""
        if isinstance(old, jx.DropVar):
            return old
        aval = old.aval if shape is None else old.aval.update(shape=shape)
        new = jx.Var(aval)
        self.subst[old] = new
        if shape is not None:
            self.lane.add(new)
        return new

    # -- equations

    def _equation(self, eqn):
        prim = eqn.primitive
        if prim in (jx.get_p, jx.swap_p):
            return self._access(eqn)
        if eqn.effects or any(_has_jaxpr(p) for p in eqn.params.values()):
            raise _Reject
        invars = [self._atom(v) for v in eqn.invars]
        if not any(self._is_lane(v) for v in invars):
            # (A literal's too: `jnp.zeros((1, 16))` seeding an accumulator.)
            if prim is lax.broadcast_in_dim_p and np.shape(_value_or_aval(eqn.invars[0])) == ():
                self.splats[eqn.outvars[0]] = (invars[0], eqn)
            outvars = [self._out(v) for v in eqn.outvars]
            self.eqns.append(eqn.replace(invars=invars, outvars=outvars))
            return
        if prim in _ELEMENTWISE:
            return self._elementwise(eqn, invars)
        if prim in _STRUCTURAL:
            return self._structural(eqn, invars)
        raise _Reject

    def _elementwise(self, eqn, invars):
        if any(_is_float(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars)) and eqn.primitive not in _FLOAT_SAFE:
            raise _Reject
        out = eqn.outvars[0]
        shape = self._lane_shape(out.aval.shape)
        if eqn.primitive in (lax.bitcast_convert_type_p, jx.sc_bitcast_p):
            if eqn.invars[0].aval.shape != out.aval.shape:
                raise _Reject  # a bitcast between widths reshapes the columns
        operands = []
        for old, new in zip(eqn.invars, invars):
            if self._is_lane(new):
                if new.aval.shape != shape:
                    raise _Reject
            elif not isinstance(old, jx.Literal) and old.aval.shape != ():
                new = self._wide_splat(old, shape)
            operands.append(new)
        self.eqns.append(eqn.replace(invars=operands, outvars=[self._out(out, shape)]))

    def _wide_splat(self, old, shape):
        """A scalar broadcast of the loop read beside lane values, made as
        wide as they are."""
        if isinstance(old, jx.Literal) or old not in self.splats or old.aval.shape[-1:] != (self.step,):
            raise _Reject
        key = (old, shape)
        new = self.wide_splats.get(key)
        if new is None:
            scalar, eqn = self.splats[old]
            new = jx.Var(old.aval.update(shape=shape))
            dims = eqn.params["broadcast_dimensions"]
            params = dict(eqn.params, shape=shape, broadcast_dimensions=dims)
            self.eqns.append(eqn.replace(invars=[scalar], outvars=[new], params=params))
            self.lane.add(new)
            self.wide_splats[key] = new
        return new

    def _structural(self, eqn, invars):
        prim, p = eqn.primitive, eqn.params
        (operand,) = invars
        src = operand.aval.shape
        out = eqn.outvars[0]
        shape = self._lane_shape(out.aval.shape)
        params = dict(p)
        if prim is lax.broadcast_in_dim_p:
            dims = p["broadcast_dimensions"]
            if not dims or dims[-1] != len(out.aval.shape) - 1 or p.get("sharding") is not None:
                raise _Reject
            params["shape"] = shape
        elif prim is lax.slice_p:
            start, limit, strides = p["start_indices"], p["limit_indices"], p["strides"]
            if start[-1] != 0 or limit[-1] != self.step or (strides is not None and strides[-1] != 1):
                raise _Reject
            params["limit_indices"] = (*limit[:-1], src[-1])
        elif prim is lax.squeeze_p:
            if len(src) - 1 in p["dimensions"]:
                raise _Reject
        self.eqns.append(eqn.replace(invars=[operand], params=params, outvars=[self._out(out, shape)]))

    def _access(self, eqn):
        """A load or store: of the index's columns (widened), or of a ref
        the loop only reads (kept)."""
        store = eqn.primitive is jx.swap_p
        ref = eqn.invars[0]
        leaves = eqn.invars[2:] if store else eqn.invars[1:]
        transforms = eqn.params["tree"].unflatten(list(leaves))
        column = self._column_slice(transforms)
        if column is None:
            invars = [self._atom(v) for v in eqn.invars]
            if any(self._is_lane(v) for v in invars):
                raise _Reject
            (self.written if store else self.whole_refs).add(ref)
            self.whole_refs.add(ref)
            outvars = [self._out(v) for v in eqn.outvars]
            self.eqns.append(eqn.replace(invars=invars, outvars=outvars))
            return
        self.column_refs.add(ref)
        k, d = column
        last = transforms[k]
        indices = list(last.indices)
        start = self.lower if self.lower is not None else self.subst[self.index]
        indices[d] = jx.Slice(start, self.width, 1)
        transforms = (*transforms[:k], jx.replace_indexer(last, tuple(indices)), *transforms[k + 1 :])
        new_leaves, tree = jx.tree_flatten(transforms)
        new_leaves = [self._atom(v) for v in new_leaves]
        if any(self._is_lane(v) for v in new_leaves):
            raise _Reject
        out = eqn.outvars[0]
        shape = self._lane_shape(out.aval.shape)
        params = dict(eqn.params, tree=tree)
        if store:
            self.written.add(ref)
            value = self._atom(eqn.invars[1])
            if not self._is_lane(value) or value.aval.shape != shape:
                raise _Reject
            invars = [ref, value, *new_leaves]
        else:
            invars = [ref, *new_leaves]
        self.eqns.append(eqn.replace(invars=invars, params=params, outvars=[self._out(out, shape)]))

    def _column_slice(self, transforms):
        """``(k, d)``: where the index is a column slice's start (transform k,
        its dimension d); None when the access does not use the index."""
        uses = [
            (k, d)
            for k, t in enumerate(transforms)
            if isinstance(t, jx.NDIndexer)
            for d, idx in enumerate(t.indices)
            if _mentions(idx, self.index)
        ]
        if not any(_mentions(t, self.index) for t in transforms):
            return None
        if len(uses) != 1:
            raise _Reject
        k, d = uses[0]
        if k != len(transforms) - 1 or any(not isinstance(t, jx.NDIndexer) for t in transforms):
            raise _Reject
        t = transforms[k]
        idx = t.indices[d]
        if not isinstance(idx, jx.Slice) or idx.start is not self.index or idx.size != self.step or idx.stride != 1:
            raise _Reject
        if d != len(t.indices) - 1 or t.int_indexer_shape:
            raise _Reject
        # Earlier views keep the last axis whole, so the slice's columns are
        # the buffer's.
        for earlier in transforms[:k]:
            whole = earlier.indices[-1]
            if not (isinstance(whole, jx.Slice) and _is_zero(whole.start) and whole.size == earlier.shape[-1]):
                raise _Reject
            if whole.stride != 1:
                raise _Reject
        return k, d


def _value_or_aval(atom):
    return atom.val if isinstance(atom, jx.Literal) else atom.aval


def _mentions(tree, var) -> bool:
    """Whether ``var`` is a leaf of ``tree`` (an indexer, a transform)."""
    leaves, _ = jx.tree_flatten(tree)
    return any(leaf is var for leaf in leaves)


def _is_zero(x) -> bool:
    if isinstance(x, jx.Literal):
        x = x.val
    return isinstance(x, (int, np.integer)) and int(x) == 0


def _is_float(dtype) -> bool:
    try:
        return np.dtype(dtype).kind in "fc"
    except TypeError:
        return False


def _has_jaxpr(param) -> bool:
    if isinstance(param, (tuple, list)):
        return any(_has_jaxpr(p) for p in param)
    return isinstance(param, jx.Jaxpr) or hasattr(param, "jaxpr")
