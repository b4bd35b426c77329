"""Rank-0 integer/bool arithmetic of a kernel runs as native scalar programs
(`mosaic_rt.interpret.native_compute.scalar_runs`), not XLA fusions. It must stay
bit-identical to XLA: random expressions over every integer dtype and
their edge values (0, -1, MIN, MAX, shifts by >= the width, division by
zero) are computed inside a kernel under mosaic_rt and by plain XLA on the
same inputs, and compared bit for bit; a few against stock interpret mode
too. Also: the optimized HLO of the bench's DMA kernels keeps (almost) no
fusions, so the win cannot silently regress.
"""

from __future__ import annotations

import contextlib
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.bench import collectives, local

INT_TYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
X64_TYPES = ("int64", "uint64")
ROWS = 24  # input tuples per kernel launch (one compile checks them all)
LEAVES = 3  # scalar inputs per tuple


@contextlib.contextmanager
def _x64(on: bool):
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", on)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def _edge_values(dtype: np.dtype, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` values of `dtype`, most of them edge cases."""
    info = np.iinfo(dtype)
    bits = info.bits
    special = [
        v
        for v in (
            0,
            1,
            -1,
            2,
            -2,
            7,
            -7,
            info.min,
            info.max,
            info.min + 1,
            info.max - 1,
            bits - 1,
            bits,
            bits + 1,
            2 * bits,
        )
        if info.min <= v <= info.max
    ]
    edges = np.array([special[c] for c in rng.integers(0, len(special), n)], dtype)
    randoms = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
    return np.where(rng.random(n) < 0.6, edges, randoms).astype(dtype)


# An expression is a list of steps; step k makes value LEAVES + k from
# earlier values. The same steps build the kernel's and the oracle's.
_BINARY = {
    "add": lax.add,
    "sub": lax.sub,
    "mul": lax.mul,
    "div": lax.div,
    "rem": lax.rem,
    "max": lax.max,
    "min": lax.min,
    "and": lax.bitwise_and,
    "or": lax.bitwise_or,
    "xor": lax.bitwise_xor,
    "shl": lax.shift_left,
    "sra": lax.shift_right_arithmetic,
    "srl": lax.shift_right_logical,
    "jnp_mod": jnp.remainder,
    "jnp_floordiv": jnp.floor_divide,
}
_COMPARE = {"lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge, "eq": lax.eq, "ne": lax.ne}
_UNARY = {
    "neg": lax.neg,
    "not": lax.bitwise_not,
    "sign": lax.sign,
    "pow0": lambda x: lax.integer_pow(x, 0),
    "pow3": lambda x: lax.integer_pow(x, 3),
    "abs": lax.abs,
}


def _step_strategy(n_values: int):
    ref = st.integers(0, n_values - 1)
    return st.one_of(
        st.tuples(st.just("binary"), st.sampled_from(sorted(_BINARY)), ref, ref),
        st.tuples(st.just("select"), st.sampled_from(sorted(_COMPARE)), ref, ref, ref, ref),
        st.tuples(st.just("unary"), st.sampled_from(sorted(_UNARY)), ref),
        st.tuples(st.just("roundtrip"), st.sampled_from(INT_TYPES + ("bool",)), ref),
        st.tuples(st.just("clamp"), ref, ref, ref),
        st.tuples(st.just("select_n"), ref, ref, ref, ref),
    )


@st.composite
def _expressions(draw, dtypes):
    dtype = draw(st.sampled_from(dtypes))
    steps = []
    for k in range(draw(st.integers(1, 8))):
        steps.append(draw(_step_strategy(LEAVES + k)))
    return dtype, steps


def _evaluate(steps, leaves, dtype):
    """Every value of the expression (leaves first) as jax scalars."""
    vals = list(leaves)
    signed = np.issubdtype(dtype, np.signedinteger)
    for step in steps:
        kind = step[0]
        if kind == "binary":
            vals.append(_BINARY[step[1]](vals[step[2]], vals[step[3]]))
        elif kind == "select":
            pred = _COMPARE[step[1]](vals[step[2]], vals[step[3]])
            vals.append(jnp.where(pred, vals[step[4]], vals[step[5]]))
        elif kind == "unary":
            name = step[1]
            if name == "abs" and not signed:
                name = "neg"  # jax has no abs of unsigned ints
            vals.append(_UNARY[name](vals[step[2]]))
        elif kind == "roundtrip":
            vals.append(vals[step[2]].astype(step[1]).astype(dtype))
        elif kind == "clamp":
            vals.append(lax.clamp(vals[step[1]], vals[step[2]], vals[step[3]]))
        else:  # select_n on an int32 index (clamped), three cases
            which = vals[step[1]].astype(jnp.int32) % 5 - 1
            vals.append(lax.select_n(which, vals[step[2]], vals[step[3]], vals[step[4]]))
    return vals


def _kernel_results(steps, x: np.ndarray, interpret):
    """Every value of the expression, per input row, computed in a kernel
    (inputs and outputs in SMEM, a fori_loop over the rows)."""
    n_out = LEAVES + len(steps)

    def kernel(x_ref, o_ref):
        def row(r, carry):
            leaves = [x_ref[r, k] for k in range(LEAVES)]
            for k, v in enumerate(_evaluate(steps, leaves, x.dtype)):
                o_ref[r, k] = v
            return carry

        lax.fori_loop(0, x.shape[0], row, 0)

    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((x.shape[0], n_out), x.dtype),
        in_specs=[smem],
        out_specs=smem,
        interpret=interpret,
    )
    return np.asarray(jax.jit(call)(x))


def _xla_results(steps, x: np.ndarray):
    """The same values by plain XLA, a scalar computation per row (lax.map)."""

    def row(leaves):
        return jnp.stack(_evaluate(steps, list(leaves), x.dtype))

    return np.asarray(jax.jit(lambda x: lax.map(row, x))(x))


def _check(dtype_name, steps, seed):
    dtype = np.dtype(dtype_name)
    rng = np.random.default_rng(seed)
    x = _edge_values(dtype, rng, ROWS * LEAVES).reshape(ROWS, LEAVES)
    ours = _kernel_results(steps, x, mosaic_rt.InterpretParams())
    want = _xla_results(steps, x)
    assert ours.dtype == want.dtype == dtype
    np.testing.assert_array_equal(ours.view(np.uint8), want.view(np.uint8), err_msg=f"{dtype_name} {steps}")


_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@_SETTINGS
@given(_expressions(INT_TYPES), st.integers(0, 2**32 - 1))
def test_random_scalar_expressions_match_xla_bit_for_bit(expr, seed):
    _check(*expr, seed)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_expressions(X64_TYPES), st.integers(0, 2**32 - 1))
def test_random_int64_expressions_match_xla_with_x64(expr, seed):
    with _x64(True):
        _check(*expr, seed)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int16"])
def test_scalar_arithmetic_matches_stock_interpret_mode(dtype):
    steps = [
        ("binary", "jnp_mod", 0, 1),
        ("binary", "div", 1, 2),
        ("binary", "shl", 0, 2),
        ("select", "lt", 0, 1, 3, 4),
        ("unary", "sign", 6),
        ("roundtrip", "bool", 5),
        ("clamp", 1, 0, 2),
        ("select_n", 0, 3, 4, 5),
        ("binary", "sra", 0, 1),
    ]
    x = _edge_values(np.dtype(dtype), np.random.default_rng(5), 8 * LEAVES).reshape(8, LEAVES)
    ours = _kernel_results(steps, x, mosaic_rt.InterpretParams())
    stock = _kernel_results(steps, x, pltpu.InterpretParams())
    np.testing.assert_array_equal(ours, stock)


def test_semaphore_array_index_counts_negative_indices_from_the_end():
    """`sems.at[i]` with a traced (negative, out-of-range) i picks the id
    that stock's dynamic_slice picks: the native lookup must agree, or the
    DMA below would signal another semaphore and the wait would fail."""

    def kernel(idx_ref, x_ref, o_ref, buf, sems):
        i = idx_ref[0]
        copy = pltpu.make_async_copy(x_ref, buf, sems.at[i])
        copy.start()
        pltpu.make_async_copy(x_ref, buf, sems.at[idx_ref[1]]).wait()
        o_ref[...] = buf[...] + 1

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    for first, second in [(-1, 2), (1, -2), (0, -3), (5, 2)]:  # 5 clamps to 2
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA((3,))],
            interpret=mosaic_rt.InterpretParams(),
        )
        out = jax.jit(call)(jnp.asarray([first, second], jnp.int32), x)
        np.testing.assert_array_equal(out, x + 1)


# ------------------------------------------------------- structural guard

_FUSION = re.compile(r"= \S+ fusion\(")  # a fusion of the optimized HLO: LLVM-compiled code


def _fusions(fn, args) -> tuple[int, list[str]]:
    hlo = fn.lower(*args).compile().as_text()
    lines = [ln.strip() for ln in hlo.splitlines() if _FUSION.search(ln)]
    return len(lines), lines


# Left after the native scalar runs: the kernel's own vector compute and
# the device's axis index (a convert of XLA's partition id).
@pytest.mark.parametrize("case,most", [("dma-pipeline", 2), ("all-gather", 2)])
def test_dma_kernels_compile_almost_no_fusions(case, most):
    if case == "dma-pipeline":
        program, args = local.dma_pipeline(8)
    else:
        program, args = collectives.all_gather(8, 8)
    count, lines = _fusions(program(mosaic_rt.InterpretParams()), args)
    assert count <= most, "\n".join(lines)
    # The same kernels under stock interpret mode compile many more (the
    # comparison keeps this test meaningful should XLA change its fusion).
    stock, _ = _fusions(program(pltpu.InterpretParams()), args)
    assert stock > count + 8, (stock, count)


# ------------------------------------------------- folded scalar programs

_SCALAR_CALL = re.compile(r'custom_call_target="mosaic_rt_scalar_program"')


def _scalar_calls(fn, args) -> int:
    hlo = fn.lower(*args).compile().as_text()
    return sum(bool(_SCALAR_CALL.search(ln)) for ln in hlo.splitlines())


def test_pipeline_scalar_work_is_one_program_per_loop_step():
    """The double-buffered pipeline's index math, semaphore lookups (also
    those inside its `pl.when`s), branch clamps and loop counter are folded
    into one program per loop step, plus one for the lookups before the
    loop (they were 12 calls, 9 of them per step)."""
    program, args = local.dma_pipeline(8)
    assert _scalar_calls(program(mosaic_rt.InterpretParams()), args) == 2


_signal = getattr(pl, "semaphore_signal", None) or pltpu.semaphore_signal
_wait = getattr(pl, "semaphore_wait", None) or pltpu.semaphore_wait


def _folding_kernel(idx_ref, x_hbm, o_ref, buf, sems, flags):
    """Semaphore lookups at computed, loaded, negative and out-of-range
    indices, in a loop, in (nested) `pl.when`s and next to a loaded index:
    every one a scalar item some group folds."""
    n = x_hbm.shape[0]

    def step(i, acc):
        slot = i % 3
        k = (i * 5 + 1) % 3
        copy = pltpu.make_async_copy(x_hbm.at[i], buf.at[slot], sems.at[slot])
        copy.start()

        @pl.when(i % 2 == 0)
        def _():
            _signal(flags.at[k % 2], 1)
            _wait(flags.at[(k + 2) % 2], 1)

        @pl.when(i % 2 == 1)
        def _():
            @pl.when(i > 2)
            def _():
                _signal(flags.at[1 - k % 2], 2)
                _wait(flags.at[-1 - k % 2 + 2 - 2], 2)  # negative: from the end

        j = idx_ref[i]  # an index known only after a load
        _signal(flags.at[j], 3)
        _wait(flags.at[j - 2 * (j // 2)], 3)
        copy.wait()
        o_ref[i] = buf[slot] * 2.0 + acc.astype(jnp.float32)
        return acc + slot + k * (i < 5).astype(jnp.int32)

    lax.fori_loop(0, n, step, jnp.int32(0))


@pytest.mark.parametrize("detect_races", [False, True])
def test_folded_lookups_and_loops_match_stock(detect_races):
    n = 7
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n, 8, 128)
    idx = jnp.asarray([0, 1, 1, 0, 1, 0, 0], jnp.int32)

    def run(params):
        call = pl.pallas_call(
            _folding_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[
                pltpu.VMEM((3, 8, 128), jnp.float32),
                pltpu.SemaphoreType.DMA((3,)),
                pltpu.SemaphoreType.REGULAR((2,)),
            ],
            interpret=params,
        )
        return np.asarray(jax.jit(call)(idx, x))

    ours = run(mosaic_rt.InterpretParams(detect_races=detect_races))
    stock = run(pltpu.InterpretParams(detect_races=detect_races))
    np.testing.assert_array_equal(ours.view(np.uint8), stock.view(np.uint8))
