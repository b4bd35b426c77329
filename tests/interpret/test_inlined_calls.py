"""A kernel's `jit` calls (jnp's `where`, `remainder`, `clip`, the user's own
jitted helpers) are inlined into the calling block (`interpret/rewrites/inlining.py`):
the native vector and scalar programs see across them, so a
`load -> shift -> where -> store` row is one program instead of three. The
results stay stock's bit for bit, and a call inside a `pl.when` branch that
names a semaphore or a DMA still reaches the right one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from lowered_text import native_ops
from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.rewrites import inlining
from parity import assert_bitwise_equal, run_case

pytestmark = pytest.mark.timeout(120)

_ROWS, _LANES = 8, 128


class _Case:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _same_as_stock(fn, *args):
    case = _Case(fn, *args)
    stock = run_case(case, pltpu.InterpretParams())
    ours = run_case(case, mosaic_rt.InterpretParams())
    assert not isinstance(stock, BaseException), stock
    assert not isinstance(ours, BaseException), ours
    assert_bitwise_equal(stock, ours)
    return ours


def _vector_programs(fn, *args):
    text = jax.jit(lambda *a: fn(mosaic_rt.InterpretParams(), *a)).lower(*args).as_text()
    return native_ops(text)["vector_program"]  # calls of their own or batch members


def _row_kernel(x_ref, shift_ref, o_ref):
    # Per row, a SparseCore-style unrolled step: load, shift by a per-row
    # amount, mask with jnp.where against the previous row, store.
    previous = None
    for r in range(_ROWS):
        data = x_ref[r, :]
        shift = jnp.remainder(shift_ref[r], 4) * 8
        data = jnp.bitwise_and(jnp.right_shift(data, shift), 0xFF)
        if previous is not None:
            data = jnp.where(data > 100, jnp.bitwise_or(previous, data), data)
        o_ref[r, :] = data
        previous = data


def _rows(params, x, shifts):
    return pl.pallas_call(
        _row_kernel,
        out_shape=jax.ShapeDtypeStruct((_ROWS, _LANES), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.SMEM)],
        interpret=params,
    )(x, shifts)


_X = np.random.default_rng(0).integers(-(2**31), 2**31 - 1, (_ROWS, _LANES), dtype=np.int64).astype(np.int32)
_SHIFTS = np.arange(_ROWS, dtype=np.int32) * 3 - 5


def test_jnp_calls_join_the_callers_vector_program():
    # One program per row (its store reads its value); without inlining the
    # `where` of each row after the first was a program of its own (15).
    assert _vector_programs(_rows, _X, _SHIFTS) == _ROWS
    _same_as_stock(_rows, _X, _SHIFTS)


def test_a_jitted_helper_with_ref_effects_is_inlined():
    @jax.jit
    def scale_into(src_ref, dst_ref, k):
        dst_ref[...] = jnp.where(src_ref[...] > 0, src_ref[...] * k, -src_ref[...])

    def kernel(x_ref, o_ref):
        scale_into(x_ref, o_ref, 3)
        o_ref[...] = jnp.clip(o_ref[...], -1000, 1000)

    def fn(params, x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=params)(x)

    x = (np.arange(_ROWS * _LANES, dtype=np.int32).reshape(_ROWS, _LANES) - 500) * 7
    out = _same_as_stock(fn, x)
    np.testing.assert_array_equal(out, np.clip(np.where(x > 0, x * 3, -x), -1000, 1000))


def test_calls_in_a_branch_name_their_semaphores_and_copies():
    # The branch's semaphore lookups and DMA slices are computed by calls
    # (jnp.where, jnp.remainder); the parent plans the inlined branch by
    # equation position, so a mismatch would signal or copy the wrong one.
    def kernel(flag_ref, x_hbm, o_ref, buf, sems):
        @pl.when(flag_ref[0] > 0)
        def _():
            for k in range(4):
                slot = jnp.remainder(flag_ref[0] + k, 4)
                row = jnp.where(k % 2 == 0, slot * 2, slot * 2 + 1)
                copy = pltpu.make_async_copy(x_hbm.at[pl.ds(row, 1)], buf.at[pl.ds(k, 1)], sems.at[slot])
                copy.start()
                copy.wait()
            o_ref[...] = buf[...]

        @pl.when(flag_ref[0] <= 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

    def fn(params, flag, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((4, _LANES), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.VMEM((4, _LANES), jnp.float32), pltpu.SemaphoreType.DMA((4,))],
            interpret=params,
        )(flag, x)

    x = np.arange(_ROWS * _LANES, dtype=np.float32).reshape(_ROWS, _LANES)
    flag = np.array([3], np.int32)
    out = _same_as_stock(fn, flag, x)
    rows = [((3 + k) % 4) * 2 + (k % 2) for k in range(4)]
    np.testing.assert_array_equal(out, x[rows])
    _same_as_stock(fn, np.array([0], np.int32), x)


def test_a_call_with_closed_over_arrays_is_left_a_call():
    table = jnp.asarray(np.arange(_LANES, dtype=np.int32))

    @jax.jit
    def add_table(v):
        return v + table

    closed = jax.make_jaxpr(lambda v: add_table(v))(np.zeros(_LANES, np.int32))
    inner = closed.jaxpr.eqns[0].params["jaxpr"]
    if inner.consts:  # (whether jax closes over it or passes it in varies)
        assert inlining.inline_calls(closed.jaxpr) is closed.jaxpr

    def kernel(x_ref, o_ref):
        o_ref[...] = add_table(x_ref[...])

    def fn(params, x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=params)(x)

    x = np.arange(_ROWS * _LANES, dtype=np.int32).reshape(_ROWS, _LANES)
    np.testing.assert_array_equal(_same_as_stock(fn, x), x + np.arange(_LANES))


def test_one_call_site_per_use_gets_fresh_variables():
    # jax traces `jnp.where` once per signature and shares that jaxpr: two
    # inlined copies must not define the same variable twice.
    def body(v):
        a = jnp.where(v > 0, v, 1)
        b = jnp.where(a > 5, a, 2)
        return a + b

    closed = jax.make_jaxpr(body)(np.zeros(4, np.int32))
    inlined = inlining.inline_calls(closed.jaxpr)
    assert not any(e.primitive is jx.jit_p for e in inlined.eqns)
    defined = [v for e in inlined.eqns for v in e.outvars]
    assert len(defined) == len(set(defined))
    assert inlining.inline_calls(closed.jaxpr) is inlined  # cached
    v = np.array([-3, 0, 4, 9], np.int32)
    got = jax.core.eval_jaxpr(inlined, closed.consts, v)[0]
    np.testing.assert_array_equal(got, body(v))
