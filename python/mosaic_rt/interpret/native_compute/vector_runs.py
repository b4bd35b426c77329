"""A kernel block's elementwise array compute as native vector programs
(`mosaic_rt.ffi.ops.vector_program`, `mosaic_rt_programs::vector`) instead of
XLA fusions: XLA:CPU compiles each fusion with LLVM, while a native call
has next to nothing to compile (benches/PERFORMANCE.md, "Native compute
instead of XLA fusions").

Results must stay bit-identical to XLA's (the oracle runs the same compute
in XLA). Integer and bool ops are exact, whatever XLA rewrites. Float
arithmetic is not: XLA:CPU contracts a multiply into an add (one rounding),
turns a division by a constant into a multiplication by its reciprocal, a
select of a comparison into a max or min, and (jax 0.10) reassociates
constants (all measured). So a float equation is taken only where none of
that can happen -- the native side then matches XLA per op, subnormal
flushing and NaNs included:

* ops `_FLOAT_OPS` (no float select, comparison or negation), constant
  operands only as `_constants_ok` allows (a literal XLA leaves alone; a
  broadcast constant is not taken), no two literal adds in a row;
* float operands made where XLA cannot see into them (`_OPAQUE`: memory
  reads, control flow) or by another equation taken here, and float
  results read only by equations taken here, stores or control flow (XLA
  computing with them would see another graph than stock's, and fuse,
  share or contract differently);
* no multiply whose result an add, subtract or negate reads (XLA fuses
  those pairs), unless it scales by a power of two (exact either way).

Equations are *deferred*: an eligible equation is not emitted where it
stands but joins the block's pending group (one shape at a time); the
group is emitted as one program when something else reads one of its
values (`DeferredEnv.read`), when an equation of another shape comes, or
at the block's end. Values read only inside the group are never
materialized.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray

from mosaic_rt import _native
from mosaic_rt import jax_internals as jx
from mosaic_rt.ffi import ops as ffi_ops
from mosaic_rt.interpret.native_compute.scalar_program import canonical

_TYPES = {np.dtype(name): code for name, code in _native.VECTOR_TYPES.items()}
_CODES = _native.VECTOR_OPS
_FORMAT = _native.VECTOR_FORMAT
_MAX_VALUES = _native.VECTOR_MAX_VALUES

# Arrays larger than this are left to XLA. A native program runs one
# instruction at a time over cache-sized chunks (loads and a store per op);
# XLA's fused loop keeps every intermediate in registers, so past some size
# XLA's fusion runs faster per call. Up to that crossover native is as fast
# per call and also spares the fusion's LLVM compile. The measured
# crossover: benches/PERFORMANCE.md, "Vector programs: where native stops".
NATIVE_MAX_ELEMENTS = 16384

_BINARY = {
    lax.add_p: "add",
    lax.sub_p: "sub",
    lax.mul_p: "mul",
    lax.div_p: "div",
    lax.rem_p: "rem",
    lax.max_p: "max",
    lax.min_p: "min",
    lax.and_p: "and",
    lax.or_p: "or",
    lax.xor_p: "xor",
    lax.shift_left_p: "shift_left",
    lax.shift_right_arithmetic_p: "shift_right_arithmetic",
    lax.shift_right_logical_p: "shift_right_logical",
    lax.eq_p: "eq",
    lax.ne_p: "ne",
    lax.lt_p: "lt",
    lax.le_p: "le",
    lax.gt_p: "gt",
    lax.ge_p: "ge",
}
_UNARY = {lax.neg_p: "neg", lax.abs_p: "abs", lax.not_p: "not"}
# Iotas taken natively: the 32-bit integers (never wrapping at these sizes).
_IOTA_TYPES = (np.dtype(np.int32), np.dtype(np.uint32))
# Equations with a float operand or result taken natively (see the doc).
# Not `neg`: XLA moves negations into their neighbours (`-(x / y) * z`
# came out with a NaN's sign other than negating the quotient's).
_FLOAT_OPS = {
    lax.add_p,
    lax.sub_p,
    lax.mul_p,
    lax.div_p,
    lax.max_p,
    lax.min_p,
    lax.abs_p,
    lax.convert_element_type_p,
    lax.broadcast_in_dim_p,
}
# Readers of a float product that XLA may fuse with it.
_CONTRACTING = {lax.add_p, lax.sub_p, lax.neg_p}
# Producers of values XLA's simplifier cannot look into.
_OPAQUE = {
    p for p in (jx.get_p, jx.swap_p, jx.load_p, jx.masked_swap_p, lax.cond_p, lax.while_p, lax.scan_p) if p is not None
}

# Readers of a value XLA's simplifier cannot look through (stores, control flow).
_OPAQUE_READERS = {p for p in (jx.swap_p, jx.masked_swap_p, lax.cond_p, lax.while_p, lax.scan_p) if p is not None}


def _is_float(dtype) -> bool:
    return np.dtype(dtype).kind in "fc"


def _vector_dtype(aval) -> bool:
    try:
        return isinstance(aval, ShapedArray) and np.dtype(aval.dtype) in _TYPES
    except TypeError:  # extended dtypes (semaphores, PRNG keys)
        return False


def _single(shape) -> bool:
    """A shape of one element (`()`, `(1, 1)`, ...): a program scalar. Pallas
    TPU kernels broadcast `(1, 1)` operands implicitly (jax's PRNG kernels
    keep their keys so), and such a value computes as a scalar does."""
    return math.prod(shape) == 1


def _has_float(eqn) -> bool:
    return any(isinstance(v.aval, ShapedArray) and _is_float(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars))


def _eligible(eqn) -> bool:
    """Whether the native side computes `eqn` as XLA does on its own (its
    neighbours aside: see `_plan`)."""
    if len(eqn.outvars) != 1 or 1 + len(eqn.invars) > _MAX_VALUES:  # (a program's limit)
        return False
    out = eqn.outvars[0].aval
    if not _vector_dtype(out) or not 0 < math.prod(out.shape) <= NATIVE_MAX_ELEMENTS:
        return False
    for v in eqn.invars:
        if not _vector_dtype(v.aval) or not (v.aval.shape == out.shape or _single(v.aval.shape)):
            return False
    prim = eqn.primitive
    if _has_float(eqn) and (prim not in _FLOAT_OPS or not _constants_ok(eqn)):
        return False
    if prim is lax.broadcast_in_dim_p:
        return _single(eqn.invars[0].aval.shape) and eqn.params.get("sharding") is None
    if prim is lax.convert_element_type_p:
        return eqn.params.get("sharding") is None
    if prim is lax.iota_p:  # a mask's row or column index (else a fusion of its own)
        return np.dtype(out.dtype) in _IOTA_TYPES and eqn.params.get("sharding") is None and len(out.shape) >= 1
    return prim is lax.select_n_p or prim in _BINARY or prim in _UNARY


def _constant(eqn):
    """The float value of `eqn`'s literal operand (None if it has none)."""
    lits = [v for v in eqn.invars if isinstance(v, jx.Literal)]
    return float(np.asarray(lits[0].val, lits[0].aval.dtype)) if lits else None


def _scales_exactly(eqn) -> bool:
    """A multiply by a literal 2, 4, 8, ...: its product is exact, never
    subnormal (inputs are flushed), or beyond every finite value by at
    least 2**128 - max (f32)."""
    c = _constant(eqn)
    return eqn.primitive is lax.mul_p and c is not None and math.isfinite(c) and c >= 2 and math.frexp(c)[0] == 0.5


# An addend below this cannot bring an overflowed exact product of
# `_scales_exactly` back into range (2**128 - f32 max is 2**104).
_SMALL_ADDEND = 2.0**100


def _fuses_alike(mul, add) -> bool:
    """Whether XLA fusing `mul` into its reader `add` (one rounding) gives
    what two ops give: an exact scaling plus a small literal."""
    c = _constant(add)
    return _scales_exactly(mul) and c is not None and abs(c) < _SMALL_ADDEND


def _constants_ok(eqn) -> bool:
    """A float equation's literal operand is one XLA leaves alone: at most
    one, finite, in an add or subtract and not 0 (`x + 0` is dropped, and
    would not flush a subnormal), or a multiply that scales exactly (a
    division by a constant becomes a product by its reciprocal)."""
    lits = [v for v in eqn.invars if isinstance(v, jx.Literal)]
    if not lits:
        return True
    c = _constant(eqn)
    if len(lits) > 1 or not math.isfinite(c):
        return False
    return eqn.primitive in (lax.add_p, lax.sub_p) and c != 0 or _scales_exactly(eqn)


def _offsets(eqn) -> bool:
    """An add or subtract of a literal (XLA on jax 0.10 folds two in a row:
    `(x + 1) + 2` became `x + 3`)."""
    return eqn.primitive in (lax.add_p, lax.sub_p) and _constant(eqn) is not None


@dataclasses.dataclass(frozen=True)
class Plan:
    items: frozenset  # equations emitted natively (in a group)
    uses: dict  # var -> how many reads in the block (outvars count)


_PLANS: dict = {}


def plan(jaxpr, absorbed) -> Plan:
    """The vector plan of `jaxpr` (cached per jaxpr and scalar plan);
    `absorbed`: the equations scalar programs compute already."""
    key = (id(jaxpr), id(absorbed))
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is jaxpr and hit[1] is absorbed:
        return hit[2]
    result = _plan(jaxpr, absorbed)
    if len(_PLANS) > 512:  # plans of jaxprs traced long ago (they hold the jaxprs)
        _PLANS.clear()
    _PLANS[key] = (jaxpr, absorbed, result)
    return result


def _plan(jaxpr, absorbed) -> Plan:
    eqns = jaxpr.eqns
    uses: dict = {}
    readers: dict = {}
    producer = {}
    for i, eqn in enumerate(eqns):
        for v in eqn.invars:
            if not isinstance(v, jx.Literal):
                uses[v] = uses.get(v, 0) + 1
                readers.setdefault(v, []).append(eqn)
        for v in eqn.outvars:
            producer[v] = i
    for v in jaxpr.outvars:
        if not isinstance(v, jx.Literal):
            uses[v] = uses.get(v, 0) + 1
    items = {i for i, e in enumerate(eqns) if i not in absorbed and _eligible(e)}

    outvars = {v for v in jaxpr.outvars if not isinstance(v, jx.Literal)}

    def unsafe(i) -> bool:
        eqn = eqns[i]
        if not _has_float(eqn):
            return False
        for v in eqn.invars:  # a float operand XLA computes (or a block input)
            if not isinstance(v, jx.Literal) and _is_float(v.aval.dtype):
                j = producer.get(v)
                if j is None or (j not in items and eqns[j].primitive not in _OPAQUE):
                    return True
        if _offsets(eqn) and any(
            _offsets(eqns[producer[v]]) for v in eqn.invars if not isinstance(v, jx.Literal) and v in producer
        ):
            return True
        out = eqn.outvars[0]
        if out in outvars:  # the parent may compute with it
            return True
        for r in readers.get(out, ()):
            if r.primitive in _CONTRACTING and eqn.primitive is lax.mul_p and not _fuses_alike(eqn, r):
                return True
            if _offsets(eqn) and _offsets(r):
                return True
            # XLA computing with it would see a different graph than stock's
            # (its fusions, common subexpressions and contractions differ).
            if r.primitive not in _OPAQUE_READERS and id(r) not in item_ids:
                return True
        return False

    # Dropping one equation may expose its neighbours: to a fixed point.
    while True:
        item_ids = {id(eqns[i]) for i in items}
        dropped = {i for i in items if unsafe(i)}
        if not dropped:
            break
        items -= dropped
    return Plan(frozenset(items), uses)


class _Builder:
    """One vector program under construction (wire format: the core's
    `vector` module). A value is a ref: inputs first, then instructions."""

    def __init__(self):
        self.operands: list = []
        self._inputs: dict = {}  # id(value) -> ref
        self._input_words: list = []
        self._instrs: list = []
        self._consts: dict = {}
        self.scalars: set = set()  # refs of rank-0 values (the core's `Meta::scalar`)

    def input(self, value, dtype) -> tuple:
        ref = self._inputs.get(id(value))
        if ref is None:
            ref = ("in", len(self.operands))
            self._inputs[id(value)] = ref
            # A one-element operand of any shape is a scalar of the program
            # (as it is, even a pending batch member's `Lazy` result).
            single = _single(np.shape(value))
            self.operands.append(value)
            self._input_words += [_TYPES[np.dtype(dtype)], int(single)]
            if single:
                self.scalars.add(ref)
        return ref

    def const(self, value, dtype) -> tuple:
        dtype = np.dtype(dtype)
        if dtype.kind == "f":  # the value's bit pattern
            word = int(np.asarray(value, dtype).view(np.uint32 if dtype.itemsize == 4 else np.int64))
        else:
            word = canonical(value, dtype)
        key = (dtype, word)
        if key not in self._consts:
            self._consts[key] = self.op("const", dtype, (), word)
        return self._consts[key]

    def op(self, name: str, dtype, args, imm: int = 0) -> tuple:
        self._instrs.append((_CODES[name], _TYPES[np.dtype(dtype)], tuple(args), int(imm)))
        ref = ("op", len(self._instrs) - 1)
        if name != "iota" and all(a in self.scalars for a in args):
            self.scalars.add(ref)
        return ref

    def words(self, n: int, outputs) -> np.ndarray:
        n_in = len(self.operands)

        def number(ref):
            return ref[1] if ref[0] == "in" else n_in + ref[1]

        words = [_FORMAT, n, n_in, len(self._instrs), len(outputs), *self._input_words]
        for code, ty, args, imm in self._instrs:
            words += [code, ty, len(args), *map(number, args), imm]
        words += [number(r) for r in outputs]
        return np.asarray(words, np.int64)


class DeferredEnv:
    """A block's jaxpr environment whose eligible equations are deferred
    into one pending group (see the module doc). Reads of a pending value
    emit the group first; the interpreter reads through this object only."""

    def __init__(self, env, jaxpr, vplan: Plan):
        self._env = env
        self._eqns = jaxpr.eqns
        self._plan = vplan
        self._shape = ()
        self._members: list = []
        self._pending: set = set()
        # An upper bound of the pending program's values: each member adds
        # an instruction and at most one input or constant per operand.
        self._values = 0

    # The JaxprEnv interface the interpreter uses. Values may be pending
    # in a batch (a load's, a program's that joined it: `batching.Lazy`);
    # a read takes them out of it, except at ``lazy_at`` (the position of a
    # store's value, which joins the batch too).
    def read(self, v):
        if self._pending and not isinstance(v, jx.Literal) and v in self._pending:
            self.flush()
        return ffi_ops.realize(self._env.read(v))

    def read_many(self, vs, lazy_at=None):
        if self._pending and any(not isinstance(v, jx.Literal) and v in self._pending for v in vs):
            self.flush()
        values = self._env.read_many(vs)
        return [x if k == lazy_at else ffi_ops.realize(x) for k, x in enumerate(values)]

    def write(self, v, value):
        self._env.write(v, value)

    def write_many(self, vs, values):
        self._env.write_many(vs, values)

    def defer(self, i: int):
        """Equation i (in the plan's items) joins the pending group."""
        eqn = self._eqns[i]
        shape = eqn.outvars[0].aval.shape
        values = 1 + len(eqn.invars)
        # A one-element result is a scalar of the program whatever its
        # group's shape (the key schedule of a PRNG kernel beside its rounds).
        fits = _single(shape) or _single(self._shape) or shape == self._shape
        if self._members and (not fits or self._values + values > _MAX_VALUES):
            self.flush()
        if not self._members or not _single(shape):
            self._shape = shape
        self._members.append(i)
        self._pending.add(eqn.outvars[0])
        self._values += values

    def flush(self):
        """Emits the pending group as one program; its values read outside
        it are written to the environment."""
        members, self._members = self._members, []
        self._pending = set()
        self._values = 0
        if not members:
            return
        eqns, vplan = self._eqns, self._plan
        inside: dict = {}
        for i in members:
            for v in eqns[i].invars:
                if not isinstance(v, jx.Literal):
                    inside[v] = inside.get(v, 0) + 1
        b = _Builder()
        refs: dict = {}

        def ref(v):
            if isinstance(v, jx.Literal):
                return b.const(v.val, v.aval.dtype)
            r = refs.get(v)
            if r is None:
                r = refs[v] = b.input(self._env.read(v), v.aval.dtype)
            return r

        for i in members:
            eqn = eqns[i]
            refs[eqn.outvars[0]] = _instruction(b, eqn, ref)
        # In program order: the words (an attribute of the call) must not
        # depend on a set's order, or equal kernels lower to different
        # programs and miss the compilation cache.
        # A broadcast's scalar operand is an output too: a store of the
        # broadcast fills its block from the scalar (`splat`), reading it.
        splatted = {
            eqns[i].invars[0]
            for i in members
            if eqns[i].primitive is lax.broadcast_in_dim_p and not isinstance(eqns[i].invars[0], jx.Literal)
        }
        outputs = [
            v for v in (eqns[i].outvars[0] for i in members) if vplan.uses.get(v, 0) > inside.get(v, 0) or v in splatted
        ]
        if not outputs:
            return
        n = math.prod(self._shape)
        program = b.words(n, [refs[v] for v in outputs])
        # A scalar of the program comes back rank-0 (n elements otherwise).
        shapes = [() if refs[v] in b.scalars and _single(v.aval.shape) else self._shape for v in outputs]
        values = ffi_ops.vector_program(program, b.operands, [np.dtype(v.aval.dtype) for v in outputs], shapes)
        for v, value in zip(outputs, values):
            if value.shape != v.aval.shape:
                value = jnp.reshape(ffi_ops.realize(value), v.aval.shape)
            self._env.write(v, value)


def _instruction(b: _Builder, eqn, ref):
    """The ref of `eqn`'s result, its instruction added to `b`."""
    prim, dtype = eqn.primitive, eqn.outvars[0].aval.dtype
    if prim is lax.broadcast_in_dim_p:
        return ref(eqn.invars[0])  # a scalar value broadcasts by itself
    if prim is lax.convert_element_type_p:
        return b.op("convert_element_type", dtype, (ref(eqn.invars[0]),))
    if prim is lax.select_n_p:
        return b.op("select_n", dtype, tuple(ref(v) for v in eqn.invars))
    if prim is lax.iota_p:
        shape, d = eqn.params["shape"], eqn.params["dimension"]
        if _single(shape):
            # Its one index is 0: a scalar of the program like any other
            # one-element value, whatever the group's shape (an `iota`
            # instruction counts along the group's n elements).
            return b.const(0, dtype)
        stride = math.prod(shape[d + 1 :])
        return b.op("iota", dtype, (), stride | shape[d] << 32)
    name = _BINARY.get(prim) or _UNARY[prim]
    return b.op(name, dtype, tuple(ref(v) for v in eqn.invars))
