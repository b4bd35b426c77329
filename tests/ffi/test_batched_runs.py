"""Straight-line runs of native ops are one `batch` call each
(`mosaic_rt.ffi.batching`): the same ops in the same order, fewer custom
calls, and the same results, errors and reports as one call per op."""

from __future__ import annotations

import dataclasses
import inspect
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from lowered_text import batch_attr, batch_calls, batch_ops, native_ops
from mosaic_rt.bench import collectives
from mosaic_rt.ffi import batching
from mosaic_rt.ffi import ops as ffi_ops

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _all_calls(text: str) -> int:
    return len(re.findall(r"custom_call @mosaic_rt_\w+", text))


@pytest.mark.parametrize("make", [collectives.reduce_scatter, collectives.all_gather])
def test_a_ring_collective_is_the_same_ops_in_fewer_calls(make):
    program, args = make(8, 8)
    batched = program(mosaic_rt.InterpretParams()).lower(*args).as_text()
    # One call per op: the comparison baseline.
    single = program(mosaic_rt.InterpretParams(_batch_runs=False)).lower(*args).as_text()
    assert batch_calls(single) == 0
    assert batch_calls(batched) >= 2
    assert native_ops(batched) == native_ops(single)
    # A ring step's swap, DMA start and waits and the next step's first
    # load are one call: at least a third fewer calls in all.
    assert _all_calls(batched) <= _all_calls(single) * 2 // 3, (_all_calls(batched), _all_calls(single))


@pytest.mark.parametrize("make", [collectives.reduce_scatter, collectives.all_gather])
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
@pytest.mark.parametrize("races", [False, True])
def test_batched_and_unbatched_results_are_bitwise_equal(make, mode, races):
    program, args = make(8, 8)
    params = mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=races)
    batched = np.asarray(program(params)(*args))
    single = np.asarray(program(dataclasses.replace(params, _batch_runs=False))(*args))
    assert batched.tobytes() == single.tobytes()


def _waits_for_a_signal_that_never_comes(batch_runs=True):
    def kernel(x_ref, o_ref, sem):
        o_ref[...] = x_ref[...]
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 2)  # the line the report names
        o_ref[...] = o_ref[...] + 1.0

    x = jnp.ones((8, 128), jnp.float32)
    return jax.jit(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=mosaic_rt.InterpretParams(wait_timeout=30.0, _batch_runs=batch_runs),
        )
    ), x


def _deadlock_text(fn, x) -> str:
    with pytest.raises(mosaic_rt.DeadlockError) as info:
        with mosaic_rt.native_errors():
            jax.block_until_ready(fn(x))
    return str(info.value)


def test_a_member_wait_reports_its_own_line_as_an_op_of_its_own():
    fn, x = _waits_for_a_signal_that_never_comes()
    text = fn.lower(x).as_text()
    assert native_ops(text)["semaphore_wait"] == 1 and native_ops(text)["semaphore_signal"] == 1
    assert batch_calls(text) >= 1
    assert not re.search(r"custom_call @mosaic_rt_semaphore_wait\b", text)  # a member
    batched = _deadlock_text(fn, x)
    lines, first = inspect.getsourcelines(_waits_for_a_signal_that_never_comes)
    wait_line = first + next(i for i, text in enumerate(lines) if "semaphore_wait" in text)
    assert "waits on REGULAR semaphore" in batched
    assert f"test_batched_runs.py:{wait_line}:" in batched, batched
    fn, x = _waits_for_a_signal_that_never_comes(batch_runs=False)
    assert batch_calls(fn.lower(x).as_text()) == 0
    assert _deadlock_text(fn, x) == batched


def test_ops_outside_batched_runs_return_traced_tokens():
    seen = {}

    def body(token):
        handle = jnp.zeros((2,), jnp.uint32)
        seen["plain"] = ffi_ops.semaphore_signal(token, handle, 0, 0, 0, 1)
        with ffi_ops.batched_runs():
            pending = ffi_ops.semaphore_signal(token, handle, 0, 0, 0, 1)
            seen["pending"] = pending
            return ffi_ops.materialize(pending)

    jax.make_jaxpr(body)(jnp.int32(0))
    assert isinstance(seen["pending"], batching.Pending)
    assert not isinstance(seen["plain"], batching.Pending)


def test_a_pending_token_is_extended_or_emitted_once():
    def body(token):
        handle = jnp.zeros((2,), jnp.uint32)
        with ffi_ops.batched_runs():
            pending = ffi_ops.semaphore_signal(token, handle, 0, 0, 0, 1)
            ffi_ops.semaphore_signal(pending, handle, 0, 0, 0, 1)  # extends it
            with pytest.raises(AssertionError, match="extended twice"):
                ffi_ops.semaphore_signal(pending, handle, 0, 0, 0, 1)
            with pytest.raises(AssertionError, match="emitted after a later op joined"):
                ffi_ops.materialize(pending)
            other = ffi_ops.semaphore_signal(token, handle, 0, 0, 0, 1)
            first = ffi_ops.materialize(other)
            assert ffi_ops.materialize(other) is first  # emitted once
            inner = ffi_ops.semaphore_signal(token, handle, 0, 0, 0, 1)
            with pytest.raises(AssertionError, match="crossed into another trace"):
                jax.make_jaxpr(lambda: ffi_ops.materialize(inner))()
        return first

    jax.make_jaxpr(body)(jnp.int32(0))


def test_a_run_longer_than_a_batch_holds_is_split_and_keeps_its_order():
    """More token-only ops in a row than one batch takes (its member and
    attribute limits): several batch calls, in order, same results."""
    n = batching.MAX_MEMBERS + 10

    def kernel(x_ref, o_ref, sem):
        for _ in range(n):
            pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, n)  # only if every signal ran before it
        for k in range(8):
            o_ref[k, :] = x_ref[k, :] + float(k)  # stores of a traced value

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    fn = jax.jit(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=mosaic_rt.InterpretParams(wait_timeout=30.0),
        )
    )
    text = fn.lower(x).as_text()
    assert native_ops(text)["semaphore_signal"] == n
    assert batch_calls(text) >= 2
    for line in text.splitlines():
        if "mosaic_rt_batch" in line:
            assert len(batch_ops(line)) <= batching.MAX_MEMBERS
    with mosaic_rt.native_errors():
        out = np.asarray(fn(x))
    np.testing.assert_array_equal(out, np.asarray(x) + np.arange(8, dtype=np.float32)[:, None])


def test_an_op_too_big_for_a_batch_is_emitted_on_its_own():
    """An op with more operands than a batch member takes (a wait with many
    trailing waits: a 16-device all-reduce) is its own call, and ends the
    run before it."""
    many = [(0, 4, 0)] * batching.MAX_MEMBER_ARGS
    seen = {}

    def body(token):
        handle = jnp.zeros((2,), jnp.uint32)
        with ffi_ops.batched_runs():
            pending = ffi_ops.semaphore_signal(token, handle, 0, 0, 0, 1)
            big = ffi_ops.dma_wait(pending, handle, 0, 0, ffi_ops.DmaWait(0, 4, then_wait=many))
            small = ffi_ops.dma_wait(big, handle, 0, 0, ffi_ops.DmaWait(0, 4))
            seen.update(pending=pending, big=big, small=small)
            return ffi_ops.materialize(small)

    text = jax.jit(body).lower(jnp.int32(0)).as_text()
    assert isinstance(seen["pending"], batching.Pending)
    assert not isinstance(seen["big"], batching.Pending)
    assert isinstance(seen["small"], batching.Pending)
    assert native_ops(text) == {"semaphore_signal": 1, "dma_wait": 2}
    assert len(re.findall(r"custom_call @mosaic_rt_dma_wait\b", text)) == 2


def _row_shifter(rows: int, float_tail: bool = False):
    """A SparseCore-style row loop on the TensorCore: per row, a load, an
    integer shift / mask / merge with the previous row's result, a store
    (with ``float_tail``, XLA float work reads the last row's value too)."""

    def kernel(s_ref, x_ref, o_ref, buf):
        # Per-row scalars first (as SparseCore kernels load their indices).
        shifts = [s_ref[r] for r in range(rows)]
        buf[...] = x_ref[...]
        prev = None
        for r in range(rows):
            v = buf[r, :]
            v = jnp.bitwise_and(jnp.right_shift(v, shifts[r]), 0xFFFF)
            v = v if prev is None else jnp.where(shifts[r] == shifts[r - 1], jnp.bitwise_or(prev, v), v)
            buf[r, :] = v
            prev = v
        if float_tail:
            buf[0, :] = lax.bitcast_convert_type(lax.bitcast_convert_type(prev, jnp.float32) * 0.5, jnp.int32)
        o_ref[...] = buf[...]

    def fn(params, s, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
            scratch_shapes=[pltpu.VMEM(x.shape, x.dtype)],
            interpret=params,
        )(s, x)

    rng = np.random.default_rng(4)
    s = rng.integers(0, 3, rows).astype(np.int32)
    x = rng.integers(-(2**31), 2**31 - 1, (rows, 128), dtype=np.int64).astype(np.int32)
    return fn, s, x


def test_a_rows_load_program_and_store_are_members_of_one_call():
    """Each row's vector program reads its load's value inside the batch
    (operand `-j`: the batch's result j), and the store reads the program's.
    (The scalar program comparing the rows' shifts reads the SMEM loads and
    so ends the first batch: the program pending then is a call of its own.)"""
    fn, s, x = _row_shifter(16)
    text = jax.jit(lambda s, x: fn(mosaic_rt.InterpretParams(), s, x)).lower(s, x).as_text()
    ops = native_ops(text)
    assert ops["vector_program"] >= 16, ops
    assert len(re.findall(r"custom_call @mosaic_rt_vector_program\b", text)) <= 1
    assert batch_calls(text) <= 2, batch_calls(text)
    batches = [line for line in text.splitlines() if "custom_call @mosaic_rt_batch" in line]
    assert any(min(batch_attr(line, "args")) < 0 for line in batches), "no member reads an earlier member's result"


@pytest.mark.parametrize("float_tail", [False, True])
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
@pytest.mark.parametrize("races", [False, True])
def test_values_read_inside_a_batch_match_stock(float_tail, mode, races):
    fn, s, x = _row_shifter(16, float_tail)
    stock = fn(pltpu.InterpretParams(dma_execution_mode=mode, detect_races=races), s, x)
    ours = fn(mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=races), s, x)
    single = fn(mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=races, _batch_runs=False), s, x)
    assert np.asarray(ours).tobytes() == np.asarray(stock).tobytes()
    assert np.asarray(single).tobytes() == np.asarray(stock).tobytes()


def test_a_pending_value_read_by_xla_ends_its_batch_first():
    """A placeholder never reaches XLA: a float op reading the last row's
    value emits the batch (and takes its result) before it."""
    fn, s, x = _row_shifter(4, float_tail=True)
    text = jax.jit(lambda s, x: fn(mosaic_rt.InterpretParams(), s, x)).lower(s, x).as_text()
    assert "multiply" in text
    stock = fn(pltpu.InterpretParams(), s, x)
    assert np.asarray(fn(mosaic_rt.InterpretParams(), s, x)).tobytes() == np.asarray(stock).tobytes()


def test_lazy_placeholders_keep_their_books():
    lazy = batching.Lazy((8, 128), np.int32)
    assert (lazy.shape, lazy.dtype, lazy.ndim) == ((8, 128), np.dtype(np.int32), 2)
    assert "pending" in repr(lazy)
    member = batching.Member("mosaic_rt_store", (), (lazy,), {})
    # A placeholder no earlier member made is an internal error, not a call.
    with pytest.raises(AssertionError, match="no earlier member"):
        batching.encode((member,))
