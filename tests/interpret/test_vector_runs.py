"""A kernel block's elementwise compute runs as native vector programs
(`interpret/native_compute/vector_runs.py`), not XLA fusions: the results stay stock's bit
for bit -- XLA's fused multiply-adds, its flushing of subnormals, NaNs,
signed zeros, integer wrap-around -- and what the native side cannot match
exactly is left to XLA."""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from lowered_text import native_ops
from mosaic_rt.interpret.native_compute import vector_runs
from parity import assert_bitwise_equal, run_case

pytestmark = pytest.mark.timeout(120)

_SHAPE = (8, 128)
_F32 = np.float32


class _Case:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _elementwise(body, *args, out_dtype=None):
    """A kernel storing ``body(*loaded inputs)`` into its output."""
    out_dtype = out_dtype or args[0].dtype

    def kernel(*refs):
        *ins, o_ref = refs
        o_ref[...] = body(*(r[...] for r in ins))

    def fn(params, *xs):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(_SHAPE, out_dtype), interpret=params)(*xs)

    return fn


def _same_as_stock(fn, *args):
    case = _Case(fn, *args)
    stock = run_case(case, pltpu.InterpretParams())
    ours = run_case(case, mosaic_rt.InterpretParams())
    assert not isinstance(stock, BaseException), stock
    assert not isinstance(ours, BaseException), ours
    assert_bitwise_equal(stock, ours)
    return ours


def _program(fn, *args, params=None):
    """(vector programs in the lowered program, fusions XLA compiled)."""
    params = params or mosaic_rt.InterpretParams()
    lowered = jax.jit(lambda *a: fn(params, *a)).lower(*args)
    text = lowered.as_text()
    hlo = lowered.compile().as_text()
    # A program is a call of its own or a member of a `batch` call.
    return native_ops(text)["vector_program"], len(re.findall(r"= \S+ fusion\(", hlo))


def _special_f32(seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(_SHAPE) * 100).astype(_F32)
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-39, -1e-39, 1e-45, 1.5e-38, 3.4e38, -3.4e38, 1.0, -1.0, 0.5, 2.5, -2.5],
        _F32,
    )
    x.flat[: special.size] = special
    x.flat[special.size : 2 * special.size] = special[::-1]
    return x


_X, _Y, _Z = _special_f32(0), _special_f32(1), _special_f32(2)
_Y = np.roll(_Y, 3)
_Z = np.roll(_Z, 7)


def test_an_add_kernel_compiles_no_fusion():
    fn = _elementwise(lambda x, y: x + y, _X, _Y)
    programs, fusions = _program(fn, _X, _Y)
    assert programs == 1 and fusions == 0, (programs, fusions)
    _same_as_stock(fn, _X, _Y)


@pytest.mark.parametrize(
    "body",
    [
        lambda x, y: x - y,
        lambda x, y: x / y,
        lambda x, y: jnp.abs(x),
        lambda x, y: jnp.maximum(x, y),
        lambda x, y: jnp.minimum(x, y),
        lambda x, y: x * y,
    ],
    ids=["sub", "div", "abs", "max", "min", "mul"],
)
def test_float_ops_are_stocks_bit_for_bit(body):
    """On data full of subnormals, NaNs, infinities and signed zeros."""
    fn = _elementwise(body, _X, _Y)
    programs, fusions = _program(fn, _X, _Y)
    assert programs == 1 and fusions == 0, (programs, fusions)
    _same_as_stock(fn, _X, _Y)


@pytest.mark.parametrize(
    "body",
    [
        lambda x, y, z: jnp.maximum(x, y) - jnp.abs(z) / y,
        lambda x, y, z: (x / y) * jnp.minimum(z, x),
        lambda x, y, z: (x + y).astype(jnp.int32).astype(_F32) - z,
    ],
    ids=["max-abs-div", "quotient-min", "converts"],
)
def test_float_compute_of_loaded_values_compiles_no_fusion(body):
    fn = _elementwise(body, _X, _Y, _Z)
    programs, fusions = _program(fn, _X, _Y, _Z)
    assert programs == 1 and fusions == 0, (programs, fusions)
    _same_as_stock(fn, _X, _Y, _Z)


@pytest.mark.parametrize(
    "body",
    [
        lambda x, y, z: x * 2.0 + 1.0,
        lambda x, y, z: (x * 4.0) * 2.0 - 3.0,
        lambda x, y, z: 1e29 - x * 8.0,
        lambda x, y, z: (x + 3.0) * y,
        lambda x, y, z: x * 1024.0 / (y - 0.25),
        lambda x, y, z: x + 1.0,
    ],
    ids=["x2+1", "scale-chain", "big-minus-8x", "offset-times", "scale-div", "plus-1"],
)
def test_literals_xla_leaves_alone_are_native(body):
    fn = _elementwise(body, _X, _Y, _Z)
    programs, fusions = _program(fn, _X, _Y, _Z)
    assert programs == 1 and fusions == 0, (programs, fusions)
    _same_as_stock(fn, _X, _Y, _Z)


@pytest.mark.parametrize(
    "body",
    [
        lambda x, y, z: x * 3.0 + 1.0,
        lambda x, y, z: x * 0.5 + y,
        lambda x, y, z: x * -2.0 + y,
        lambda x, y, z: x * 1.0 + y,
        lambda x, y, z: (x + 0.0) * y,
        lambda x, y, z: (x - 1.5) + 2.5,
        lambda x, y, z: z - x * 8.0,
        lambda x, y, z: x * 2.0 - 3.4e38,
    ],
    ids=["times-3", "times-half", "times-minus-2", "times-1", "plus-0", "offset-chain", "z-8x", "huge-addend"],
)
def test_literals_xla_may_rewrite_stay_in_xla(body):
    fn = _elementwise(body, _X, _Y, _Z)
    _, fusions = _program(fn, _X, _Y, _Z)
    assert fusions >= 1
    _same_as_stock(fn, _X, _Y, _Z)


@pytest.mark.parametrize(
    "body",
    [
        lambda x, y, z: x * y + z,
        lambda x, y, z: z - x * y,
        lambda x, y, z: x * y - z,
        lambda x, y, z: (x * y) + (x * y) * z,
        lambda x, y, z: -(x * y) + z,
        lambda x, y, z: x - (-y),
        lambda x, y, z: -(x / y) * jnp.minimum(z, x),
        lambda x, y, z: x / 7.0 + y,
        lambda x, y, z: (x + 1.0) + 2.0,
        lambda x, y, z: (x * 3.0) * 5.0 - y,
        lambda x, y, z: jnp.where(x < y, x, y),
        lambda x, y, z: jnp.where(x >= y, y, x) / z,
        lambda x, y, z: jnp.where(x > 0, x * y + z, z - y) * 0.5,
    ],
    ids=[
        "xy+z",
        "z-xy",
        "xy-z",
        "reused-product",
        "neg-product",
        "minus-neg",
        "neg-quotient",
        "div-const",
        "const-chain",
        "mul-const-chain",
        "select-min",
        "select-max",
        "mixed",
    ],
)
def test_float_compute_xla_would_rewrite_stays_in_xla(body):
    """XLA fuses a product into an add, divides by a constant as a product,
    folds constants, turns a select of a comparison into a max or min: such
    compute stays XLA's, and matches stock bit for bit."""
    fn = _elementwise(body, _X, _Y, _Z)
    _, fusions = _program(fn, _X, _Y, _Z)
    assert fusions >= 1
    _same_as_stock(fn, _X, _Y, _Z)


def test_float_to_int_conversions_saturate_as_xla():
    with np.errstate(over="ignore"):  # (infinities wanted: they saturate too)
        y = _Y * np.float32(1e6)
    fn = _elementwise(lambda x, y: (x * y).astype(jnp.int32) + 1, _X, y, out_dtype=jnp.int32)
    assert _program(fn, _X, y) == (1, 0)
    _same_as_stock(fn, _X, y)


@pytest.mark.parametrize(
    "body, all_native",
    [
        (lambda a, b: a + b * 3, True),
        (lambda a, b: a * b - (a >> 3), True),
        (lambda a, b: jnp.where(a > b, a // jnp.maximum(b, 1), a % 7) ^ (b << 2), False),
        (lambda a, b: (a & b) | ~a, True),
    ],
    ids=["add-mul", "mul-shift", "div-rem-select", "bits"],
)
def test_int32_ops_are_stocks_bit_for_bit(body, all_native):
    rng = np.random.default_rng(3)
    a = rng.integers(-(2**31), 2**31, _SHAPE, dtype=np.int64).astype(np.int32)
    b = rng.integers(-(2**31), 2**31, _SHAPE, dtype=np.int64).astype(np.int32)
    a.flat[:4] = [np.iinfo(np.int32).min, -1, 0, np.iinfo(np.int32).max]
    b.flat[:4] = [-1, 0, 0, 1]
    fn = _elementwise(body, a, b)
    if all_native:  # integer compute is exact: all native (jnp's // and % use sign)
        assert _program(fn, a, b)[1] == 0
    _same_as_stock(fn, a, b)


def test_results_match_xlas_own_fusions():
    fn = _elementwise(lambda x, y, z: jnp.maximum(x + y, z) / (y - z), _X, _Y, _Z)
    assert _program(fn, _X, _Y, _Z) == (1, 0)
    ours = _same_as_stock(fn, _X, _Y, _Z)
    in_xla = mosaic_rt.InterpretParams(_vector_runs=False)  # XLA's own fusions instead
    programs, fusions = _program(fn, _X, _Y, _Z, params=in_xla)
    assert programs == 0 and fusions >= 1
    assert_bitwise_equal(run_case(_Case(fn, _X, _Y, _Z), in_xla), ours)


def test_a_long_chain_is_split_into_programs_within_the_native_limit():
    """More values than one program holds (`VECTOR_MAX_VALUES`): several
    programs, each within the limit, the same results."""
    a = np.arange(8 * 128, dtype=np.int32).reshape(_SHAPE)

    def body(x):
        for k in range(3 * vector_runs._MAX_VALUES // 2):
            x = x * 3 + k  # a new constant and two instructions per step
        return x

    fn = _elementwise(body, a)
    programs, fusions = _program(fn, a)
    assert programs >= 4 and fusions == 0, (programs, fusions)
    _same_as_stock(fn, a)


def test_a_select_of_more_cases_than_a_program_holds_stays_in_xla():
    a = np.arange(8 * 128, dtype=np.int32).reshape(_SHAPE)
    n = vector_runs._MAX_VALUES + 1

    def body(x):
        return jax.lax.select_n(x % n, *[x + k for k in range(n)])

    fn = _elementwise(body, a)
    programs, fusions = _program(fn, a)
    assert fusions >= 1  # the select
    _same_as_stock(fn, a)


def test_a_program_with_several_outputs_lowers_the_same_every_time():
    """The words of a group read in several places do not depend on set
    order: equal kernels lower to equal programs (else the compilation
    cache misses)."""
    a = np.arange(8 * 128, dtype=np.int32).reshape(_SHAPE)
    s = jax.ShapeDtypeStruct(_SHAPE, jnp.int32)

    def text():
        def kernel(x_ref, o1, o2, o3, o4):  # new each time: traced anew
            x = x_ref[...]
            o1[...], o2[...], o3[...], o4[...] = x + 1, x * 3, x ^ 5, x - 7

        fn = pl.pallas_call(kernel, out_shape=(s,) * 4, interpret=mosaic_rt.InterpretParams())
        lowered = jax.jit(fn).lower(a).as_text()
        # (A call's attribute `program`, or a batch member's `m{k}_program`.)
        programs = re.findall(r"program = dense<\[([^\]]*)\]", lowered)
        assert len(programs) == 1
        return programs[0]

    assert len({text() for _ in range(6)}) == 1


def test_one_element_values_are_program_scalars():
    """A `(1, 1)` value (a key read from SMEM, as jax's PRNG kernels keep
    theirs) joins its block's program as a scalar: one program, no fusion,
    stock's bits -- also where it is read outside the program."""
    a = np.arange(8 * 128, dtype=np.uint32).reshape(_SHAPE) * np.uint32(2654435761)
    key = np.array([[0x1234567, 0x89ABCDE]], np.uint32)

    def kernel(key_ref, x_ref, o_ref, k_ref):
        k = jnp.reshape(key_ref[0, 0], (1, 1))
        x = x_ref[...]
        for i in range(4):
            k = k + jnp.uint32(0x9E3779B9 + i)
            x = (x ^ k) * jnp.uint32(3) + (x >> 5)
        k = k * jnp.uint32(5)
        o_ref[...] = x
        k_ref[...] = k

    def fn(params, key, x):
        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct(_SHAPE, jnp.uint32), jax.ShapeDtypeStruct((1, 1), jnp.uint32)),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(_SHAPE, lambda: (0, 0))],
            interpret=params,
        )(key, x)

    assert _program(fn, key, a) == (1, 0)
    _same_as_stock(fn, key, a)


def test_a_stored_broadcast_of_a_converted_scalar():
    """`full_like(o_ref, s)` of an SMEM int: the conversion and the
    broadcast are one program, and the store fills the block from the
    scalar -- which the program must still return."""

    def kernel(s_ref, o_ref):
        s = s_ref[0]
        s_ref[0] = s + 1
        o_ref[...] = jax.lax.full_like(o_ref, s)

    def fn(params, s):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32),
            grid=(2, 2),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
            interpret=params,
        )(s)

    ours = _same_as_stock(fn, np.array([3], np.int32))
    np.testing.assert_array_equal(
        np.asarray(ours).reshape(2, 8, 2, 128)[:, 0, :, 0].ravel(), np.arange(3, 7, dtype=np.float32)
    )


@pytest.mark.parametrize("rows", [vector_runs.NATIVE_MAX_ELEMENTS // 128, 2 * vector_runs.NATIVE_MAX_ELEMENTS // 128])
def test_blocks_beyond_the_crossover_are_left_to_xla(rows):
    """Native programs only up to `NATIVE_MAX_ELEMENTS` per array: beyond
    it XLA's fused loop is faster per call; the bits are stock's either way."""
    a = np.arange(rows * 128, dtype=np.uint32).reshape(rows, 128) * np.uint32(2654435761)

    def kernel(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = ((x ^ (x >> 7)) * jnp.uint32(0x9E3779B1)) | jnp.uint32(3)

    def fn(params, x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=params)(x)

    programs, fusions = _program(fn, a)
    if rows * 128 <= vector_runs.NATIVE_MAX_ELEMENTS:
        assert (programs, fusions) == (1, 0)
    else:
        assert programs == 0 and fusions >= 1
    _same_as_stock(fn, a)


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint32])
def test_iotas_are_native(dtype):
    """Row and column indices (a mask's iotas) are program instructions,
    not fusions of their own; 3-D too."""
    shape = (2, 8, 128)
    a = np.arange(math.prod(shape), dtype=dtype).reshape(shape)

    def kernel(x_ref, o_ref, m_ref):
        rows = jax.lax.broadcasted_iota(dtype, shape, 1)
        cols = jax.lax.broadcasted_iota(dtype, shape, 2)
        first = jax.lax.broadcasted_iota(dtype, shape, 0)
        out = x_ref[...] * 3 + rows * 1000 + cols + first * 7
        mask = (rows >= cols).astype(jnp.int32)
        o_ref[...], m_ref[...] = out, mask

    def fn(params, x):
        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct(shape, dtype), jax.ShapeDtypeStruct(shape, jnp.int32)),
            interpret=params,
        )(x)

    assert _program(fn, a) == (1, 0)
    ours = _same_as_stock(fn, a)
    np.testing.assert_array_equal(np.asarray(ours[1])[0], np.tril(np.ones((8, 128), np.int32)))
