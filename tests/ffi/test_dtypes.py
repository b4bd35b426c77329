"""Every dtype jax can give a Pallas TPU kernel, through every layer.

Layers: ``mosaic_rt.Runtime`` (numpy arrays into Rust), the FFI wrappers in
a jitted program (XLA hands sub-byte types to the handlers *packed*), and
whole kernels under our interpreter compared bit for bit with stock
``pltpu.InterpretParams()`` (BlockSpec copy, a DMA, reads of uninitialised
scratch with ``uninitialized_memory`` "nan" and "zero").

Facts these tests pin down (measured on jax/jaxlib 0.10.2 and 0.12.0.1):

* numpy / ml_dtypes keep int4, uint4, int2, uint2 and float4_e2m1fn one per
  byte (itemsize 1, value in the low bits); XLA's CPU runtime packs them in
  FFI buffers (2 or 4 per byte, element 0 in the low bits, dense over the
  whole array). Simulated memory is numpy's layout, and DMA semaphores count
  ``elements * itemsize`` bytes, like stock.
* stock's fill values are ``np.nan`` / max int / True / 0 converted to the
  dtype: float4_e2m1fn (no NaN) gets -0.0 (0x8) in "nan" mode and
  float8_e8m0fnu (no zero) gets its NaN 0xff in "zero" mode.
* stock has no fill rule for complex dtypes in "nan" mode (it raises
  NotImplementedError); ours fills NaN + 0j.
* int1/uint1 and float6_* cannot run on jax's CPU backend at all (XLA
  rejects int1 arguments; float6 has no FFI dtype, and stock on 0.12 aborts
  the process), so ours rejects them with a ValueError naming them.
"""

from __future__ import annotations

import dataclasses

import ffi_support
import jax
import jax.numpy as jnp
import ml_dtypes
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import fresh_uid
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt.jax_internals import stock_utils
from parity import assert_bitwise_equal, run_case

# Every dtype simulated memory holds, by numpy / ml_dtypes name.
SUB_BYTE = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "float4_e2m1fn": 4}
FLOAT8 = (
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e4m3b11fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3fnuz",
    "float8_e4m3",
    "float8_e3m4",
    "float8_e8m0fnu",
)
DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    *SUB_BYTE,
    *FLOAT8,
    "complex64",
    "complex128",
)
# What jax runs with x64 off (64-bit types become 32-bit ones in jax arrays).
JAX_DTYPES = tuple(d for d in DTYPES if d not in ("int64", "uint64", "float64", "complex128"))
FILLS = ("nan", "zero")


def np_dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def sample(name: str, shape, seed: int = 0) -> np.ndarray:
    """Deterministic values of every bit pattern the dtype has (NaNs, -0.0
    and infinities included): copies must keep bits exactly."""
    dt = np_dtype(name)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    if name in SUB_BYTE:
        raw &= (1 << SUB_BYTE[name]) - 1
    return raw.view(dt).reshape(shape)


def stock_fill(name: str, mode: str, shape) -> np.ndarray:
    """What stock interpret mode stores in fresh memory (its own rule), or
    ours where stock has none (complex in "nan" mode: NaN + 0j)."""
    dt = np_dtype(name)
    if mode == "nan" and name.startswith("complex"):
        return np.full(shape, complex(np.nan, 0.0), dt)
    return np.full(shape, stock_utils.get_uninitialized_value(dt, mode), dt)


def raw_bytes(a) -> bytes:
    return np.ascontiguousarray(np.asarray(a)).tobytes()


# ----------------------------------------------------------------- facts


def test_one_dtype_table():
    """The dtype codes are one table (rust/wire's ``DType``): Python's names
    are it, in code order, and every program type has its dtype's code."""
    from mosaic_rt import _dtypes, _native

    assert tuple(sorted(_native.DTYPES, key=_native.DTYPES.get)) == DTYPES == _dtypes.NAMES
    assert sorted(_native.DTYPES.values()) == list(range(len(DTYPES)))
    for table in (_native.SCALAR_TYPES, _native.VECTOR_TYPES):
        assert {name: _native.DTYPES[name] for name in table} == table
    assert set(_native.VECTOR_TYPES) == set(_native.SCALAR_TYPES) | {"float32", "float64"}


def test_numpy_keeps_sub_byte_types_one_per_byte():
    for name, bits in SUB_BYTE.items():
        dt = np_dtype(name)
        assert dt.itemsize == 1
        # -1 (or the max) in the low bits, the high bits clear.
        top = np.array([(1 << bits) - 1], np.uint8).view(dt)
        assert raw_bytes(top) == bytes([(1 << bits) - 1])


@pytest.mark.parametrize("mode", FILLS)
def test_fill_patterns_are_stocks(mode):
    want_nan = {
        "int4": 0x7,
        "uint4": 0xF,
        "int2": 0x1,
        "uint2": 0x3,
        "float4_e2m1fn": 0x8,
        "float8_e5m2": 0x7E,
        "float8_e4m3fn": 0x7F,
        "float8_e4m3b11fnuz": 0x80,
        "float8_e5m2fnuz": 0x80,
        "float8_e4m3fnuz": 0x80,
        "float8_e4m3": 0x7C,
        "float8_e3m4": 0x78,
        "float8_e8m0fnu": 0xFF,
    }
    rt = mosaic_rt.Runtime(uninitialized_memory=mode)
    for name in DTYPES:
        b = rt.allocate_buffer(0, 0, "vmem", shape=(3,), dtype=np_dtype(name))
        got = rt.load(0, 0, "vmem", b)
        assert raw_bytes(got) == raw_bytes(stock_fill(name, mode, (3,))), name
        if name in want_nan:
            byte = want_nan[name] if mode == "nan" else (0xFF if name == "float8_e8m0fnu" else 0)
            assert raw_bytes(got) == bytes([byte] * 3), name


# --------------------------------------------------------------- Runtime


@pytest.mark.parametrize("name", DTYPES)
def test_runtime_round_trip(name):
    dt = np_dtype(name)
    x = sample(name, (4, 6), seed=1)
    rt = mosaic_rt.Runtime(2, 1, dma_execution_mode="on_wait")
    src = rt.allocate_buffer(0, 0, "hbm", x)
    info = rt.buffer_info(0, 0, "hbm", src)
    assert info.dtype == dt and info.shape == (4, 6)
    assert raw_bytes(rt.load(0, 0, "hbm", src)) == raw_bytes(x)
    assert raw_bytes(rt.buffer_content(0, 0, "hbm", src)) == raw_bytes(x)

    # Strided store and load.
    y = sample(name, (2, 3), seed=2)
    rt.store(0, 0, "hbm", src, y, [(1, 2), (0, 3, 2)])
    x[1:3, 0:6:2] = y
    assert raw_bytes(rt.load(0, 0, "hbm", src)) == raw_bytes(x)
    assert raw_bytes(rt.load(0, 0, "hbm", src, [3, (1, 2)])) == raw_bytes(x[3, 1:3])

    # Masked swap.
    mask = np.array([True, False, True, False, True, False])
    new = sample(name, (6,), seed=3)
    old = rt.swap(0, 0, "hbm", src, new, [2], mask=mask)
    assert raw_bytes(old) == raw_bytes(np.where(mask, x[2], new))
    x[2][mask] = new[mask]
    assert raw_bytes(rt.load(0, 0, "hbm", src)) == raw_bytes(x)

    # Local DMA of a strided window; the semaphore counts itemsize bytes per element.
    dst = rt.allocate_buffer(0, 0, "vmem", shape=(2, 3), dtype=dt)
    sem = rt.allocate_semaphores(0, 0, kind="dma")
    rt.dma_start(0, 0, ("hbm", src, [(0, 2, 2), (1, 3, 2)]), ("vmem", dst), sem)
    rt.dma_wait(0, 0, sem, 6 * dt.itemsize)
    assert rt.read(0, 0, sem) == 0
    assert raw_bytes(rt.load(0, 0, "vmem", dst)) == raw_bytes(x[0:4:2, 1:6:2])

    # Remote DMA to device 1 (waited by both sides).
    far = rt.allocate_buffer(1, 0, "vmem", shape=(4, 6), dtype=dt)
    send = rt.allocate_semaphores(0, 0, kind="dma")
    recv = rt.allocate_semaphores(1, 0, kind="dma")
    rt.dma_start(0, 0, ("hbm", src), ("vmem", far), recv, src_sem=send, dst_device=1)
    rt.dma_wait(0, 0, send, x.size * dt.itemsize)
    rt.dma_wait(1, 0, recv, x.size * dt.itemsize)
    assert raw_bytes(rt.load(1, 0, "vmem", far)) == raw_bytes(x)


@pytest.mark.parametrize("name", sorted(SUB_BYTE))
def test_runtime_canonicalises_sub_byte_values(name):
    bits = SUB_BYTE[name]
    dt = np_dtype(name)
    # numpy reads only the low bits; memory keeps them with the high bits clear.
    dirty = np.frombuffer(bytes([0xF0 | 1, 0xA0 | 2, 0xFF]), dt)
    rt = mosaic_rt.Runtime()
    b = rt.allocate_buffer(0, 0, "vmem", dirty)
    mask = (1 << bits) - 1
    clean = bytes([1 & mask, 2 & mask, 0xFF & mask])
    assert raw_bytes(rt.buffer_content(0, 0, "vmem", b)) == clean
    rt.store(0, 0, "vmem", b, dirty[::-1].copy())
    assert raw_bytes(rt.load(0, 0, "vmem", b)) == clean[::-1]


def test_native_binding_takes_ml_dtypes_arrays_and_numpy_dtypes():
    rt = mosaic_rt.Runtime()
    native = rt.native
    x = sample("float8_e4m3fn", (2, 3), seed=4)
    b = native.allocate_buffer(0, 0, "vmem", x.dtype, (2, 3), data=x)
    assert raw_bytes(rt.load(0, 0, "vmem", b)) == raw_bytes(x)
    out = np.empty((2, 3), x.dtype)
    native.load(0, 0, "vmem", b, None, out)  # an ml_dtypes array as `out`
    assert raw_bytes(out) == raw_bytes(x)
    scalar = np.array(3, ml_dtypes.bfloat16)  # 0-d ml_dtypes array
    b = native.allocate_buffer(0, 0, "smem", ml_dtypes.bfloat16, (), data=scalar)
    assert rt.load(0, 0, "smem", b) == 3
    for spelling in ("int4", ml_dtypes.int4, np.dtype(ml_dtypes.int4), jnp.int4):
        b = native.allocate_buffer(0, 0, "vmem", spelling, (5,))
        assert rt.buffer_info(0, 0, "vmem", b).dtype == np_dtype("int4")
    b = native.allocate_buffer(0, 0, "vmem", "f4", (1,))
    assert rt.buffer_info(0, 0, "vmem", b).dtype == np.float32
    with pytest.raises(ValueError, match="must be C-contiguous"):
        native.load(0, 0, "vmem", b, None, np.empty((2, 2), ml_dtypes.bfloat16)[:, :1])


@pytest.mark.parametrize("bad", ["float6_e2m3fn", "float6_e3m2fn", "int1", "uint1"])
def test_unsupported_dtypes_are_value_errors_naming_them(bad):
    dt = getattr(ml_dtypes, bad, None) or getattr(jnp, bad)
    rt = mosaic_rt.Runtime()
    with pytest.raises(ValueError, match=f"unsupported dtype {bad}"):
        rt.allocate_buffer(0, 0, "vmem", shape=(2,), dtype=dt)
    with pytest.raises(ValueError, match=f"unsupported dtype {bad}"):
        rt.allocate_buffer(0, 0, "vmem", np.zeros(2, dt))
    with pytest.raises(ValueError, match=f'unsupported dtype "{bad}"'):
        rt.native.allocate_buffer(0, 0, "vmem", bad, (2,))
    with pytest.raises(ValueError, match=bad):
        rt.native.allocate_buffer(0, 0, "vmem", dt, (2,))
    with pytest.raises(ValueError, match=bad):
        F.allocate_buffer(F.new_token(), jnp.zeros(2, jnp.uint32), 0, 0, space="vmem", dtype=dt, shape=(2,))
    with pytest.raises(ValueError, match=bad):
        F.load(F.new_token(), jnp.zeros(2, jnp.uint32), 0, 0, 100, None, space="vmem", shape=(2,), dtype=dt)


def test_dtype_errors_have_the_right_types():
    rt = mosaic_rt.Runtime()
    with pytest.raises(TypeError, match="dtype"):
        rt.allocate_buffer(0, 0, "vmem", shape=(2,), dtype="no_such_type")
    with pytest.raises(TypeError, match="a dtype is a name"):
        rt.native.allocate_buffer(0, 0, "vmem", object(), (2,))
    with pytest.raises(ValueError, match='unsupported dtype "no_such_type"'):
        rt.native.allocate_buffer(0, 0, "vmem", "no_such_type", (2,))
    b = rt.allocate_buffer(0, 0, "vmem", shape=(2,), dtype=ml_dtypes.int4)
    with pytest.raises(ValueError, match="value has dtype uint4 but the buffer holds int4"):
        rt.store(0, 0, "vmem", b, np.zeros(2, ml_dtypes.uint4))
    with pytest.raises(ValueError, match="cannot convert value to float8_e4m3fn"):
        b8 = rt.allocate_buffer(0, 0, "vmem", shape=(2,), dtype=ml_dtypes.float8_e4m3fn)
        rt.store(0, 0, "vmem", b8, "text")


# ------------------------------------------------ FFI wrappers in XLA


def _single_device(body, *args):
    """Runs ``body(*args)`` jitted on device 0; translates native errors."""
    with F.native_errors():
        return jax.tree.map(np.asarray, jax.jit(body)(*args))


@pytest.mark.parametrize("name", JAX_DTYPES)
def test_ffi_ops_move_every_dtype_through_xla(name):
    # Odd sizes leave a partly used last byte for the packed types.
    dt = np_dtype(name)
    x = sample(name, (3, 5), seed=5)
    v = sample(name, (2, 3), seed=6)
    row = sample(name, (5,), seed=7)
    uid = fresh_uid()

    # No XLA op touches the values: XLA's own slices and concatenations may
    # rewrite float8 NaN payloads (jaxlib 0.12 canonicalises float8_e5m2 NaNs
    # in a slice; both versions in a concatenate).
    def body(xin, vin, rin):
        with ffi_support.kernel(F.new_token(), 0, uid=uid, num_devices=1, uninitialized_memory="nan") as k:
            h, t = k.handle, k.token
            t, b = F.allocate_buffer(t, h, 0, 0, space="vmem", dtype=dt, shape=(3, 5), init=xin)
            t, fresh = F.allocate_buffer(t, h, 0, 0, space="vmem", dtype=dt, shape=(3, 5))
            win = F.TracedRegion.slices((1, 2), (0, 3, 2))
            t, got = F.load(t, h, 0, 0, b, win, space="vmem", shape=(2, 3), dtype=dt)
            t = F.store(t, h, 0, 0, fresh, win, vin, space="vmem")
            t, old = F.swap(t, h, 0, 0, b, F.TracedRegion.index(2), rin, jnp.array([1, 0, 1, 0, 1], bool), space="vmem")
            t, whole = F.load(t, h, 0, 0, b, None, space="vmem", shape=(3, 5), dtype=dt)
            t, filled = F.load(t, h, 0, 0, fresh, None, space="vmem", shape=(3, 5), dtype=dt)
            k.token = t
        return got, old, whole, filled, k.token

    got, old, whole, filled, _ = _single_device(body, x, v, row)
    assert raw_bytes(got) == raw_bytes(x[1:3, 0:5:2])
    mask = np.array([1, 0, 1, 0, 1], bool)
    assert raw_bytes(old) == raw_bytes(np.where(mask, x[2], row))
    expect = x.copy()
    expect[2][mask] = row[mask]
    assert raw_bytes(whole) == raw_bytes(expect)
    fill = stock_fill(name, "nan", (3, 5))
    fill[1:3, 0:5:2] = v
    assert raw_bytes(filled) == raw_bytes(fill)


# --------------------------------------------- kernels: parity with stock


def _stock(**knobs):
    return dataclasses.replace(pltpu.InterpretParams(), **knobs)


def _ours(**knobs):
    return dataclasses.replace(mosaic_rt.InterpretParams(), **knobs)


def _copy_dma_uninit(params, x):
    """BlockSpec copy through a DMA into scratch, plus a read of never
    written scratch, over a grid of two blocks."""
    shape, dt = x.shape, x.dtype
    block = (shape[0] // 2, shape[1])

    def kernel(x_ref, o_ref, u_ref, scratch, uninit, sem):
        copy = pltpu.make_async_copy(x_ref, scratch, sem)
        copy.start()
        copy.wait()
        o_ref[...] = scratch[...]
        u_ref[...] = uninit[...]

    spec = pl.BlockSpec(block, lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(shape, dt),) * 2,
        grid=(2,),
        in_specs=[spec],
        out_specs=(spec, spec),
        scratch_shapes=[pltpu.VMEM(block, dt), pltpu.VMEM(block, dt), pltpu.SemaphoreType.DMA],
        interpret=params,
    )(x)


def _windows(params, x):
    """Odd shapes and sub-windows: a DMA of rows 1..2 into a partly written
    scratch, and a (2, 3) window stored into an output whose other
    elements are never written."""
    dt = x.dtype

    def kernel(x_ref, o_ref, w_ref, scratch, sem):
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(1, 2)], scratch.at[pl.ds(0, 2)], sem)
        copy.start()
        copy.wait()
        o_ref[...] = scratch[...]
        w_ref[pl.ds(0, 2), pl.ds(2, 3)] = x_ref[pl.ds(1, 2), pl.ds(1, 3)]

    return pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, dt),) * 2,
        scratch_shapes=[pltpu.VMEM(x.shape, dt), pltpu.SemaphoreType.DMA],
        interpret=params,
    )(x)


@dataclasses.dataclass(frozen=True)
class _Case:
    fn: object
    args: tuple


def _reference_copy_dma_uninit(name, mode, x):
    return x, stock_fill(name, mode, x.shape)


@pytest.mark.parametrize("mode", FILLS)
@pytest.mark.parametrize("name", JAX_DTYPES)
def test_kernel_copy_dma_uninitialised_matches_stock(name, mode):
    x = sample(name, (16, 128), seed=7)
    case = _Case(_copy_dma_uninit, (x,))
    ours = run_case(case, _ours(uninitialized_memory=mode))
    assert not isinstance(ours, Exception), f"ours failed: {ours!r}"
    stock = run_case(case, _stock(uninitialized_memory=mode))
    if name.startswith("complex") and mode == "nan":
        # Stock has no NaN fill rule for complex types; ours fills NaN + 0j.
        assert isinstance(stock, NotImplementedError), stock
        want = _reference_copy_dma_uninit(name, mode, x)
        assert_bitwise_equal(tuple(ours), want, where=f"{name}/{mode} vs numpy")
        return
    assert not isinstance(stock, Exception), f"stock failed: {stock!r}"
    assert_bitwise_equal(stock, ours, where=f"{name}/{mode}")
    # And both are right.
    assert_bitwise_equal(tuple(ours), _reference_copy_dma_uninit(name, mode, x), where=f"{name}/{mode} vs numpy")


@pytest.mark.parametrize("mode", FILLS)
@pytest.mark.parametrize("name", [*SUB_BYTE, "float8_e4m3fn", "float8_e8m0fnu", "bool"])
def test_kernel_odd_windows_match_stock(name, mode):
    x = sample(name, (3, 5), seed=8)
    case = _Case(_windows, (x,))
    stock = run_case(case, _stock(uninitialized_memory=mode, dma_execution_mode="eager"))
    ours = run_case(case, _ours(uninitialized_memory=mode, dma_execution_mode="eager"))
    assert not isinstance(stock, Exception), f"stock failed: {stock!r}"
    assert not isinstance(ours, Exception), f"ours failed: {ours!r}"
    assert_bitwise_equal(stock, ours, where=f"{name}/{mode}")
    o, w = ours
    assert raw_bytes(o[:2]) == raw_bytes(x[1:3])
    assert raw_bytes(o[2]) == raw_bytes(stock_fill(name, mode, (5,)))
    assert raw_bytes(w[0:2, 2:5]) == raw_bytes(x[1:3, 1:4])


def _remote_right(params, x):
    """Each of 2 devices DMAs its block into the other's output."""
    n = 2
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def kernel(x_ref, o_ref, send, recv):
        other = 1 - jax.lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref, send, recv, device_id=(other,), device_id_type=pl.DeviceIdType.MESH
        )
        copy.start()
        copy.wait()

    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    block = (x.shape[0] // n, *x.shape[1:])
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(block, x.dtype),
        in_specs=[any_spec],
        out_specs=any_spec,
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        interpret=params,
    )
    mapped = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return jax.jit(mapped)(jax.device_put(x, NamedSharding(mesh, P("x"))))


@pytest.mark.parametrize("name", ["int4", "uint2", "float4_e2m1fn", "float8_e5m2fnuz"])
def test_kernel_remote_dma_matches_stock(name):
    x = sample(name, (2 * 8, 128), seed=9)
    case = _Case(_remote_right, (x,))
    stock = run_case(case, _stock())
    ours = run_case(case, _ours())
    assert not isinstance(stock, Exception), f"stock failed: {stock!r}"
    assert not isinstance(ours, Exception), f"ours failed: {ours!r}"
    assert_bitwise_equal(stock, ours, where=name)
    assert raw_bytes(ours) == raw_bytes(np.concatenate([x[8:], x[:8]]))


@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn"])
def test_kernel_with_float6_scratch_is_a_clear_error(name):
    # Stock cannot run these on CPU either (0.10.2: XLA rejects the type;
    # 0.12: the process aborts), so only ours is run.
    dt = getattr(jnp, name)

    def kernel(o_ref, scratch):
        o_ref[...] = jnp.zeros_like(o_ref)

    with pytest.raises(ValueError, match=name):
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            scratch_shapes=[pltpu.VMEM((8, 128), dt)],
            interpret=_ours(),
        )()


def _nibbles_to_rows(u8: np.ndarray, dtype) -> np.ndarray:
    """numpy model of a TPU bitcast of an 8-bit (R, C) array to a 4-bit
    dtype: byte (r, c) becomes rows 2r (low nibble) and 2r+1 (high nibble)."""
    lo, hi = u8 & 0xF, u8 >> 4
    rows = np.stack([lo, hi], axis=1).reshape(2 * u8.shape[0], u8.shape[1])
    return rows.astype(np.uint8).view(dtype)


@pytest.mark.parametrize("name", ["int4", "uint4", "float4_e2m1fn"])
def test_kernel_sub_byte_bitcast_views(name):
    # Stock cannot run ref.bitcast (its ranges assume indexers only); ours
    # is checked against the numpy model of the TPU bitcast.
    dt = np_dtype(name)
    x = sample("int8", (16, 128), seed=10)

    def read_view(x_ref, o_ref):
        o_ref[...] = x_ref.bitcast(dt)[...]

    out = pl.pallas_call(read_view, out_shape=jax.ShapeDtypeStruct((32, 128), dt), interpret=_ours())(x)
    assert raw_bytes(out) == raw_bytes(_nibbles_to_rows(x.view(np.uint8), dt))

    y = _nibbles_to_rows(sample("uint8", (16, 128), seed=11), dt)

    def write_view(y_ref, o_ref):
        o_ref.bitcast(dt)[...] = y_ref[...]

    out = pl.pallas_call(write_view, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int8), interpret=_ours())(y)
    assert raw_bytes(_nibbles_to_rows(np.asarray(out).view(np.uint8), dt)) == raw_bytes(y)
