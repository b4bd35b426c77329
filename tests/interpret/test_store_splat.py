"""Stores of a broadcast scalar (`acc_ref[...] = jnp.zeros_like(acc_ref)`,
`jnp.full(shape, -inf)`, ...) run as native fills (`interpret/evaluation/splat.py`):
no broadcast is left for XLA to compile, and the results are stock's bit
for bit (dtypes, -0.0, NaN payloads), races included."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import stock_interpreter as stock_ipc
from parity import assert_bitwise_equal, assert_same_error, run_case

_SPLAT_ATTR = re.compile(r"splat\s*=\s*1")


class _Case:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _same(fn, *args, **knobs):
    # In both DMA modes (the defaults differ: a racy kernel's result too).
    case = _Case(fn, *args)
    for mode in ("on_wait", "eager"):
        knobs_in_mode = {"dma_execution_mode": mode, **knobs}
        stock = run_case(case, pltpu.InterpretParams(**knobs_in_mode))
        ours = run_case(case, mosaic_rt.InterpretParams(**knobs_in_mode))
        assert not isinstance(stock, BaseException), stock
        assert not isinstance(ours, BaseException), ours
        assert_bitwise_equal(stock, ours)
    return ours


def _fills(fn, *args) -> int:
    """How many native fills our program of `fn` makes."""
    hlo = jax.jit(lambda *a: fn(mosaic_rt.InterpretParams(), *a)).lower(*args).as_text()
    return len(_SPLAT_ATTR.findall(hlo))


def _fusion_ops(hlo: str) -> list[set[str]]:
    """Per fusion of an optimized HLO module, the ops of its body."""
    bodies, current = {}, None
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        if m:
            current = bodies.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    ops = []
    for lines in bodies.values():
        for line in lines:
            m = re.search(r"= \S+ fusion\(.*calls=%([\w.\-]+)", line)
            if m:
                body = bodies.get(m.group(1), [])
                found = {o.group(1) for o in (re.search(r"= \S+ ([a-z\-]+)\(", b) for b in body) if o}
                ops.append(found - {"parameter", "constant", "bitcast"})
    return ops


def test_matmul_accumulator_init_leaves_no_broadcast_fusion():
    from mosaic_rt.bench import cold

    program, args, expected = cold._family_variants()["matmul"](3)
    compiled = program(mosaic_rt.InterpretParams()).lower(*args).compile()
    fusions = _fusion_ops(compiled.as_text())
    assert fusions, "the dot is still a fusion"
    assert all(ops != {"broadcast"} for ops in fusions), fusions
    np.testing.assert_array_equal(np.asarray(compiled(*args)), expected)


def _nan_with_payload():
    return np.array([0x7FC0_1234], np.uint32).view(np.float32)[0]


# (dtype, literal fill value): literal fills, incl. -0.0, NaN payloads, bool.
_LITERALS = [
    (jnp.float32, -0.0),
    (jnp.float32, -np.inf),
    (jnp.float32, _nan_with_payload()),
    (jnp.bfloat16, -1.5),
    (jnp.float16, np.inf),
    (jnp.int8, -7),
    (jnp.uint8, 250),
    (jnp.int32, -(2**31)),
    (jnp.bool_, True),
]


@pytest.mark.parametrize("dtype,value", _LITERALS, ids=lambda x: str(x))
def test_literal_fills_of_every_dtype_are_stocks(dtype, value):
    def fn(params, x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]
            o_ref[2:5, :] = jnp.full((3, 128), value, dtype)  # part of the block
            o_ref[7] = jnp.full((128,), value, dtype)  # a squeezed row

        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=params)(x)

    x = jnp.asarray(np.arange(8 * 128).reshape(8, 128) % 2).astype(dtype)
    _same(fn, x)
    assert _fills(fn, x) == 2


def test_fills_of_a_traced_scalar_are_stocks_including_nan_payloads():
    bits = np.array([0x7FC0_0001, 0xFFA0_0042, 0x8000_0000, 0x3F80_0000], np.uint32)

    def fn(params, x):
        def kernel(x_ref, o_ref, b_ref):
            o_ref[...] = jnp.zeros_like(o_ref)
            for r in range(4):
                o_ref[r] = jnp.full((128,), x_ref[0, r])  # NaN payload, -0.0
            b_ref[...] = jnp.full(b_ref.shape, x_ref[0, 3], jnp.bfloat16)  # converted scalar
            b_ref[4:, :] = jnp.full((4, 128), x_ref[0, 0]).astype(jnp.bfloat16)

        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((8, 128), jnp.bfloat16)),
            interpret=params,
        )(x)

    x = jnp.asarray(np.resize(bits, (8, 128)).view(np.float32))
    _same(fn, x)
    # The convert after the broadcast (a dtype change) stays a plain store.
    assert _fills(fn, x) == 6


def test_swap_returns_the_old_value_when_it_is_used():
    def fn(params, x):
        def kernel(x_ref, o_ref, acc_ref):
            acc_ref[...] = x_ref[...] * 2
            old = acc_ref.swap(jnp.full(acc_ref.shape, -0.0))
            o_ref[...] = old + acc_ref[...]

        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch_shapes=[pltpu.VMEM(x.shape, x.dtype)],
            interpret=params,
        )(x)

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    out = _same(fn, x)
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert _fills(fn, x) == 1


def test_a_broadcast_also_used_elsewhere_is_still_computed():
    def fn(params, x):
        def kernel(x_ref, o_ref, p_ref):
            z = jnp.full(x_ref.shape, 3.0, jnp.float32)
            o_ref[...] = z
            p_ref[...] = z * x_ref[...]

        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(kernel, out_shape=(shape, shape), interpret=params)(x)

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    out = _same(fn, x)
    np.testing.assert_array_equal(out[1], 3 * np.asarray(x))
    assert _fills(fn, x) == 1


def test_skip_floating_point_ops_keeps_stocks_sentinel():
    def fn(params, x):
        def kernel(x_ref, o_ref, i_ref):
            o_ref[...] = jnp.zeros_like(o_ref)
            i_ref[...] = jnp.full(i_ref.shape, 5, jnp.int32)

        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, jnp.int32)),
            interpret=params,
        )(x)

    x = jnp.ones((8, 128), jnp.float32)
    _same(fn, x, skip_floating_point_ops=True)


def test_an_out_of_bounds_fill_is_stocks_swap_error():
    def fn(params, x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]
            o_ref[pl.ds(pl.program_id(0) + 6, 4), :] = jnp.zeros((4, 128), jnp.float32)

        spec = pl.BlockSpec(x.shape, lambda i: (0, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,),
            in_specs=[spec],
            out_specs=spec,
            interpret=params,
        )(x)

    x = jnp.ones((8, 128), jnp.float32)
    case = _Case(fn, x)
    stock = run_case(case, pltpu.InterpretParams())
    ours = run_case(case, mosaic_rt.InterpretParams())
    assert isinstance(stock, BaseException) and isinstance(ours, BaseException), (stock, ours)
    # The swap's message (not a store's), as an unsplatted value gets.
    assert "Out-of-bounds swap" in str(ours), ours
    if "Out-of-bounds" in str(stock):  # (jax < 0.11 stock fails a bare assert)
        assert_same_error(stock, ours)
    assert _fills(fn, x) == 1


def _fill_during_dma(x_ref, o_ref, buf, sem):
    buf[...] = x_ref[...]
    copy = pltpu.make_async_copy(buf, o_ref, sem)
    copy.start()
    buf[0:1, :] = jnp.zeros((1, 128), jnp.float32)  # races with the DMA's read
    copy.wait()


def _fill_after_wait(x_ref, o_ref, buf, sem):
    buf[...] = x_ref[...]
    copy = pltpu.make_async_copy(buf, o_ref, sem)
    copy.start()
    copy.wait()
    buf[0:1, :] = jnp.zeros((1, 128), jnp.float32)


def _dma_kernel(kernel):
    def fn(params, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(x.shape, lambda: (0, 0))],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())],
            interpret=params,
        )(x)

    return fn


@pytest.mark.parametrize(
    "kernel,race", [(_fill_during_dma, True), (_fill_after_wait, False)], ids=["during-dma", "after-wait"]
)
def test_a_fill_is_the_same_write_to_race_detection(kernel, race):
    fn = _dma_kernel(kernel)
    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    assert _fills(fn, x) == 1
    ours = jax.block_until_ready(fn(mosaic_rt.InterpretParams(detect_races=True, on_race="warn"), x))
    assert mosaic_rt.races.races_found == race, mosaic_rt.races.reports()
    report = {"on_race": "warn"} if STOCK_HAS_ON_RACE else {}
    stock = jax.block_until_ready(fn(pltpu.InterpretParams(detect_races=True, **report), x))
    assert stock_ipc.races.races_found == race
    if not race:
        assert_bitwise_equal(np.asarray(stock), np.asarray(ours))
    _same(fn, x)  # races off
