"""The items of scalar programs (see `scalar_runs`): each a pure scalar
computation with its keys (what it computes), deps (what it reads) and how
it adds itself to a `ProgramBuilder`.

Keys are jaxpr vars for equations; the others are tuples, unique within one
evaluation of one jaxpr:

* ``("sem", j, role)``: the semaphore id that equation j's semaphore
  operand `role` ("dst"/"src" of a DMA start, else "sem") names;
* ``("clamp", j)``: the branch index of `cond` equation j, clamped;
* ``("branch", j, k, key)``: item `key` of branch k of `cond` equation j,
  hoisted out of the branch;
* ``COUNTER`` (an input, given by the loop) and ``COUNT_NEXT`` /
  ``COUNT_GO``: a counted loop's counter step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np
from jax import lax
from jax.core import ShapedArray

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.native_compute.scalar_program import MAX_VALUES, ProgramBuilder, is_scalar_type
from mosaic_rt.interpret.rewrites import as_evaluated

COUNTER = ("counter",)
COUNT_NEXT = ("count", "next")
COUNT_GO = ("count", "go")

# Primitive -> scalar-program op (the same semantics on rank-0 ints/bools).
_OPS = {
    lax.add_p: "add",
    lax.sub_p: "sub",
    lax.mul_p: "mul",
    lax.div_p: "div",
    lax.rem_p: "rem",
    lax.neg_p: "neg",
    lax.abs_p: "abs",
    lax.sign_p: "sign",
    lax.max_p: "max",
    lax.min_p: "min",
    lax.clamp_p: "clamp",
    lax.and_p: "and",
    lax.or_p: "or",
    lax.xor_p: "xor",
    lax.not_p: "not",
    lax.shift_left_p: "shift_left",
    lax.shift_right_arithmetic_p: "shift_right_arithmetic",
    lax.shift_right_logical_p: "shift_right_logical",
    lax.eq_p: "eq",
    lax.ne_p: "ne",
    lax.lt_p: "lt",
    lax.le_p: "le",
    lax.gt_p: "gt",
    lax.ge_p: "ge",
    lax.select_n_p: "select_n",
    lax.convert_element_type_p: "convert_element_type",
    lax.integer_pow_p: "integer_pow",
}
_I32 = np.dtype(np.int32)


def _always(values) -> bool:
    return True


@dataclasses.dataclass(frozen=True, eq=False)
class Item:
    keys: tuple
    deps: tuple  # jaxpr vars / literals of the block, or keys
    weight: int  # most values it adds to a program
    origin: int  # index of the equation it serves
    # (builder, refs of deps, values of deps -- None when computed in the
    # same program) -> refs of keys
    build: Callable[[ProgramBuilder, list, list], list]
    exported: bool = False  # read by equation `origin` (not through a var)
    eqn: Any = None  # the equation it computes, if any
    local: bool = False  # `eqn` is an equation of this very jaxpr
    native_ok: Callable[[list], bool] = _always


# ------------------------------------------------------------- equations


def _scalar_aval(aval) -> bool:
    return isinstance(aval, ShapedArray) and aval.shape == () and is_scalar_type(aval.dtype)


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


def of_eqn(eqn, j: int) -> Item | None:
    """The item of an eligible equation of the jaxpr, else None."""
    w = _weight(eqn)
    if w is None or w > MAX_VALUES - 8:
        return None
    return Item(
        tuple(eqn.outvars),
        tuple(eqn.invars),
        w,
        j,
        lambda b, refs, values: _emit_eqn(b, eqn, refs),
        eqn=eqn,
        local=True,
    )


def _emit_eqn(b: ProgramBuilder, eqn, args) -> list:
    """Refs of `eqn`'s results from the refs of its operands."""
    prim = eqn.primitive
    if prim is jx.jit_p:
        inner, consts = jx.closed_jaxpr_parts(eqn.params["jaxpr"])
        local = dict(zip(inner.invars, args))
        local.update((c, b.const(x, c.aval.dtype)) for c, x in zip(inner.constvars, consts))

        def ref(v):
            return b.const(v.val, v.aval.dtype) if isinstance(v, jx.Literal) else local[v]

        for e in inner.eqns:
            local.update(zip(e.outvars, _emit_eqn(b, e, [ref(v) for v in e.invars])))
        return [ref(v) for v in inner.outvars]
    imm = eqn.params["y"] if prim is lax.integer_pow_p else 0
    return [b.op(_OPS[prim], eqn.outvars[0].aval.dtype, args, imm)]


# ------------------------------------------- around a non-scalar equation


def around(eqn, j: int, plan) -> list[Item]:
    """Items serving a non-scalar equation j: its semaphore lookups, the
    clamped index of a `cond` and its branches' hoistable items (`plan`
    plans a branch)."""
    items = [_lookup(j, role, sem, indices) for role, sem, indices in _sem_operands(eqn)]
    if eqn.primitive is lax.cond_p:
        items += _cond_items(eqn, j, plan)
    return items


def clamps(eqn) -> bool:
    """Whether `eqn` is a `cond` whose index an item clamps."""
    if eqn.primitive is not lax.cond_p:
        return False
    index = eqn.invars[0]
    return not isinstance(index, jx.Literal) and index.aval.dtype == _I32


def _cond_items(eqn, j, plan) -> list[Item]:
    index = eqn.invars[0]
    items = []
    if clamps(eqn):
        top = len(eqn.params["branches"]) - 1
        items.append(
            Item((("clamp", j),), (index,), 3, j, lambda b, refs, values: [b.clamp_i32(refs[0], 0, top)], exported=True)
        )
    operands = eqn.invars[1:]
    for k, closed in enumerate(eqn.params["branches"]):
        # As the branch will be evaluated: its calls inlined, unrolled
        # column copies widened (keys name its equations by position).
        inner = as_evaluated(jx.closed_jaxpr_parts(closed)[0])
        inner_plan = plan(inner)
        outer = dict(zip(inner.invars, operands))

        def dep(d, k=k, outer=outer):
            if isinstance(d, tuple) or d not in outer:  # a key of another entry item
                return ("branch", j, k, d)
            return outer[d]

        for it in inner_plan.entry:
            items.append(
                dataclasses.replace(
                    it,
                    keys=tuple(("branch", j, k, key) for key in it.keys),
                    deps=tuple(d if isinstance(d, jx.Literal) else dep(d) for d in it.deps),
                    origin=j,
                    exported=bool(inner_plan.entry_needed & set(it.keys)),
                    local=False,
                )
            )
    return items


def branch_preset(j: int, k: int, computed: dict) -> dict:
    """What the parent computed of branch k of `cond` equation j (by the
    branch's own keys)."""
    return {
        key[3]: v
        for key, v in computed.items()
        if isinstance(key, tuple) and len(key) == 4 and key[0] == "branch" and key[1] == j and key[2] == k
    }


def counter(length: int, n: int) -> Item:
    """``(i + 1, i + 1 < length)`` of the loop counter `COUNTER`."""

    def build(b, refs, values):
        nxt = b.op("add", _I32, (refs[0], b.const(1, _I32)))
        return [nxt, b.op("lt", np.bool_, (nxt, b.const(length, _I32)))]

    return Item((COUNT_NEXT, COUNT_GO), (COUNTER,), 4, n, build, exported=True)


# ------------------------------------------------------ semaphore lookups


def _sem_operands(eqn):
    """(role, semaphore ref var, index vars) of each semaphore operand of
    `eqn` indexed by one integer per dimension (`sems.at[i]`)."""
    prim = eqn.primitive
    if prim is jx.dma_start_p:
        _, _, dst_sem, src_sem, _ = jax.tree.unflatten(eqn.params["tree"], eqn.invars)
        operands = [("dst", *jx.ref_and_transforms(dst_sem))]
        if src_sem is not None:
            operands.append(("src", *jx.ref_and_transforms(src_sem)))
    elif prim is jx.dma_wait_p:
        _, _, sem, _, _ = jax.tree.unflatten(eqn.params["tree"], eqn.invars)
        operands = [("sem", *jx.ref_and_transforms(sem))]
    elif prim in (jx.semaphore_signal_p, jx.semaphore_wait_p, jx.semaphore_read_p):
        sem, transforms, *_ = jax.tree.unflatten(eqn.params["args_tree"], eqn.invars)
        operands = [("sem", sem, transforms)]
    else:
        return []
    found = []
    for role, sem, transforms in operands:
        indices = scalar_indices(sem, transforms)
        if indices is not None:
            found.append((role, sem, indices))
    return found


def scalar_indices(sem, transforms):
    """The indices when `transforms` is one integer index per dimension of
    `sem`'s id array, else None."""
    transforms = [t for t in (transforms or ()) if t is not None]
    if len(transforms) != 1 or not isinstance(transforms[0], jx.NDIndexer):
        return None
    indices = tuple(transforms[0].indices)
    shape = getattr(getattr(sem, "aval", None), "shape", None)
    if not shape or len(indices) != len(shape):
        return None
    for i in indices:
        if isinstance(i, jx.Slice) or not hasattr(i, "aval"):  # not a var / literal
            return None
        if i.aval.shape != () or not is_scalar_type(i.aval.dtype):
            return None
    return indices


def _lookup(j, role, sem, indices) -> Item:
    def build(b, refs, values):
        return [
            add_index(
                b, refs[0], np.shape(values[0]), values[0].dtype, [(r, d.aval.dtype) for r, d in zip(refs[1:], indices)]
            )
        ]

    def native_ok(values):  # the ids are an XLA value (not a constant array)
        return isinstance(values[0], jx.Tracer) and is_scalar_type(values[0].dtype)

    return Item(
        (("sem", j, role),), (sem, *indices), 2 + 5 * len(indices), j, build, exported=True, native_ok=native_ok
    )


def add_index(b: ProgramBuilder, vec, shape, vec_dtype, indices):
    """``vec[indices]`` (refs with their dtypes, one per dimension) as
    `transform_array` computes it -- each index cast to int32, a negative
    one counted from the end, then clamped into its dimension as
    `dynamic_slice` clamps."""
    args = [vec]
    for (r, dtype), dim in zip(indices, shape):
        if np.dtype(dtype) != _I32:
            r = b.op("convert_element_type", _I32, (r,))
        negative = b.op("lt", np.bool_, (r, b.const(0, _I32)))
        wrapped = b.op("add", _I32, (r, b.const(dim, _I32)))
        args.append(b.op("select_n", _I32, (negative, r, wrapped)))
    return b.op("index", vec_dtype, args)
