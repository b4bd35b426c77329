"""Runs of a kernel jaxpr's rank-0 integer/bool equations, computed by one
native scalar program each instead of XLA fusions (see `scalar_program`).

`plan(jaxpr)` finds the runs: maximal stretches of *consecutive* eligible
equations (an eligible primitive, or a `jit` whose whole body is eligible,
as jnp's `remainder` / `where`), every operand and result a rank-0 int or
bool. A run's program reads the values it takes from outside the run
(trace-time constants become literals) and returns those used after it.
A run whose operands are all constants is left to XLA (constant folding).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax import lax
from jax.core import ShapedArray

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.scalar_program import MAX_VALUES, ProgramBuilder, is_scalar_type

# Primitive -> scalar-program op (the same semantics on rank-0 ints/bools).
_OPS = {
    lax.add_p: "add", lax.sub_p: "sub", lax.mul_p: "mul", lax.div_p: "div",
    lax.rem_p: "rem", lax.neg_p: "neg", lax.abs_p: "abs", lax.sign_p: "sign",
    lax.max_p: "max", lax.min_p: "min", lax.clamp_p: "clamp",
    lax.and_p: "and", lax.or_p: "or", lax.xor_p: "xor", lax.not_p: "not",
    lax.shift_left_p: "shift_left",
    lax.shift_right_arithmetic_p: "shift_right_arithmetic",
    lax.shift_right_logical_p: "shift_right_logical",
    lax.eq_p: "eq", lax.ne_p: "ne", lax.lt_p: "lt", lax.le_p: "le", lax.gt_p: "gt",
    lax.ge_p: "ge", lax.select_n_p: "select_n",
    lax.convert_element_type_p: "convert_element_type",
    lax.integer_pow_p: "integer_pow",
}
_I32 = np.dtype(np.int32)


@dataclasses.dataclass(frozen=True)
class Run:
    end: int                 # index of the first equation after the run
    outputs: tuple           # vars defined in the run and read after it
    # (index var, number of branches) when a `cond` on a value of the run
    # follows it: the run also returns the index clamped to the branches.
    cond_index: tuple | None = None


def _scalar_aval(aval) -> bool:
    return (isinstance(aval, ShapedArray) and aval.shape == ()
            and is_scalar_type(aval.dtype))


def _weight(eqn) -> int | None:
    """An upper bound of the values `eqn` adds to a program, or None when
    it cannot run natively."""
    if not all(_scalar_aval(v.aval) for v in (*eqn.invars, *eqn.outvars)):
        return None
    prim = eqn.primitive
    if prim is jx.jit_p:
        inner, consts = jx.closed_jaxpr_parts(eqn.params["jaxpr"])
        weights = [_weight(e) for e in inner.eqns]
        if None in weights:
            return None
        return sum(weights) + len(consts)
    if prim not in _OPS:
        return None
    if prim is lax.integer_pow_p and eqn.params["y"] < 0:
        return None
    return 1 + len(eqn.invars)


def plan(jaxpr) -> dict[int, Run]:
    """The runs of `jaxpr`, by the index of their first equation."""
    eqns = jaxpr.eqns
    n = len(eqns)
    weights = [_weight(e) for e in eqns]
    if not any(w is not None for w in weights):
        return {}
    last_use = {}
    for k, e in enumerate(eqns):
        for v in e.invars:
            if not isinstance(v, jx.Literal):
                last_use[v] = k
    for v in jaxpr.outvars:
        if not isinstance(v, jx.Literal):
            last_use[v] = n
    runs = {}
    i = 0
    while i < n:
        if weights[i] is None or weights[i] > MAX_VALUES - 8:
            i += 1
            continue
        start, total = i, 0
        while i < n and weights[i] is not None and total + weights[i] <= MAX_VALUES - 8:
            total += weights[i]
            i += 1
        defined = {v for e in eqns[start:i] for v in e.outvars}
        outputs = tuple(v for e in eqns[start:i] for v in e.outvars
                        if last_use.get(v, -1) >= i)
        runs[start] = Run(i, outputs, _cond_index(eqns[i] if i < n else None, defined))
    return runs


def _cond_index(eqn, defined):
    if eqn is None or eqn.primitive is not lax.cond_p:
        return None
    index = eqn.invars[0]
    if isinstance(index, jx.Literal) or index not in defined or index.aval.dtype != _I32:
        return None
    return index, len(eqn.params["branches"])


def emit(eqns, run: Run, read):
    """Emits the run's equations as one native program. Returns
    ``(values of run.outputs, clamped cond index or None)``, or None when
    every operand is a trace-time constant (left to XLA)."""
    b = ProgramBuilder()
    refs: dict = {}

    def ref(v):
        if isinstance(v, jx.Literal):
            return b.const(v.val, v.aval.dtype)
        r = refs.get(v)
        if r is None:
            value = read(v)
            if isinstance(value, jx.Tracer):
                r = b.input(value, v.aval.dtype)
            else:
                r = b.const(value, v.aval.dtype)
            refs[v] = r
        return r

    for e in eqns:
        refs.update(zip(e.outvars, _emit_eqn(b, e, ref)))
    if b.num_inputs == 0:
        return None
    outs = [refs[v] for v in run.outputs]
    clamped = None
    if run.cond_index is not None:
        var, branches = run.cond_index
        outs.append(b.clamp_i32(refs[var], 0, branches - 1))
    values = b.emit(outs)
    if run.cond_index is not None:
        clamped = values.pop()
    return values, clamped


def _emit_eqn(b: ProgramBuilder, eqn, ref) -> list:
    """Refs of `eqn`'s results; `ref` gives the refs of its operands."""
    prim = eqn.primitive
    if prim is jx.jit_p:
        inner, consts = jx.closed_jaxpr_parts(eqn.params["jaxpr"])
        local = dict(zip(inner.invars, (ref(v) for v in eqn.invars)))
        local.update((c, b.const(x, c.aval.dtype)) for c, x in zip(inner.constvars, consts))

        def inner_ref(v):
            return b.const(v.val, v.aval.dtype) if isinstance(v, jx.Literal) else local[v]

        for e in inner.eqns:
            local.update(zip(e.outvars, _emit_eqn(b, e, inner_ref)))
        return [inner_ref(v) for v in inner.outvars]
    dtype = eqn.outvars[0].aval.dtype
    args = [ref(v) for v in eqn.invars]
    imm = eqn.params["y"] if prim is lax.integer_pow_p else 0
    return [b.op(_OPS[prim], dtype, args, imm)]


def clamp_index(index, branches: int):
    """A traced int32 branch index clamped to ``0..branches`` natively."""
    b = ProgramBuilder()
    return b.emit([b.clamp_i32(b.input(index, _I32), 0, branches - 1)])[0]


def count_step(i, length: int):
    """``(i + 1, i + 1 < length)`` of a traced int32 loop counter, natively."""
    b = ProgramBuilder()
    nxt = b.op("add", _I32, (b.input(i, _I32), b.const(1, _I32)))
    go = b.op("lt", np.bool_, (nxt, b.const(length, _I32)))
    return tuple(b.emit([nxt, go]))


def index_vector(vec, indices):
    """``vec[indices]`` (one int index per dimension) as `transform_array`
    computes it -- each index cast to int32, a negative one counted from
    the end, then clamped into its dimension as `dynamic_slice` clamps --
    by one native call. None when not applicable (so the caller uses XLA)."""
    shape = tuple(np.shape(vec))
    if (not shape or len(indices) != len(shape) or not isinstance(vec, jx.Tracer)
            or not is_scalar_type(vec.dtype)
            or not all(np.shape(i) == () and is_scalar_type(_dtype_of(i)) for i in indices)):
        return None
    b = ProgramBuilder()
    args = [b.input(vec, vec.dtype)]
    for i, dim in zip(indices, shape):
        dtype = _dtype_of(i)
        r = b.input(i, dtype) if isinstance(i, jx.Tracer) else b.const(i, dtype)
        if dtype != _I32:
            r = b.op("convert_element_type", _I32, (r,))
        zero = b.const(0, _I32)
        negative = b.op("lt", np.bool_, (r, zero))
        wrapped = b.op("add", _I32, (r, b.const(dim, _I32)))
        args.append(b.op("select_n", _I32, (negative, r, wrapped)))
    return b.emit([b.op("index", vec.dtype, args)])[0]


def _dtype_of(x) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    if dtype is None:  # a Python int: jax's default int
        return np.dtype(np.int32) if isinstance(x, int) and not isinstance(x, bool) else np.dtype(object)
    return np.dtype(dtype)
