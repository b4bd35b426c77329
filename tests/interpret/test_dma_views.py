"""DMAs whose source or destination is a ref view: `ref.bitcast(...)`,
`ref.reshape(...)`, with indexers (static and traced) before and after them.

Stock interpret mode cannot run these, so each kernel is checked against
the same kernel moving the data with a load and a store through the same
views (`dst_view[...] = src_view[...]`, which mosaic_rt already runs),
bit for bit, and against numpy where the semantics are obvious.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt.ffi.bitfields import pack
from mosaic_rt.jax_internals import bitcast_array as tpu_bitcast

pytestmark = pytest.mark.timeout(180)

MODES = ("eager", "on_wait")
_ANY = pl.BlockSpec(memory_space=pl.ANY)
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def _params(mode, **knobs):
    return mosaic_rt.InterpretParams(dma_execution_mode=mode, wait_timeout=30.0, **knobs)


def _dma(src, dst, sem):
    pltpu.async_copy(src, dst, sem).wait()


def _assign(src, dst, sem):
    del sem
    dst[...] = src[...]


def _bits(x):
    """A bit-exact view of an array (NaN payloads compare too)."""
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def _assert_same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    np.testing.assert_array_equal(_bits(a), _bits(b))


def _run(body, x, out_shape, scratch, *, dma, params, grid=()):
    """`body(move, x_ref, o_ref, *scratch)` with `move` a DMA (inputs and
    outputs in HBM) or a load and a store (everything in VMEM)."""

    def whole(shape):  # the oracle's operands: all of it in VMEM
        return pl.BlockSpec(shape, lambda *_: (0,) * len(shape)) if grid else _VMEM

    spec, out_spec = (_ANY, _ANY) if dma else (whole(x.shape), whole(out_shape.shape))
    return pl.pallas_call(
        functools.partial(body, _dma if dma else _assign),
        out_shape=out_shape,
        grid=grid,
        in_specs=[spec],
        out_specs=out_spec,
        scratch_shapes=[*scratch, pltpu.SemaphoreType.DMA],
        interpret=params,
    )(x)


def _check(body, x, out_shape, scratch=(), *, mode, want=None, grid=(), **knobs):
    got = _run(body, x, out_shape, scratch, dma=True, params=_params(mode, **knobs), grid=grid)
    oracle = _run(body, x, out_shape, scratch, dma=False, params=_params(mode), grid=grid)
    _assert_same_bits(got, oracle)
    if want is not None:
        _assert_same_bits(got, want)
    return got


X_BF16 = (jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128) * 0.37 - 100).astype(jnp.bfloat16)
X_F32 = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128) * 1.5 - 7
X_I8 = (jnp.arange(32 * 128, dtype=jnp.int32).reshape(32, 128) % 251 - 125).astype(jnp.int8)
_HASHED = np.arange(8 * 128, dtype=np.int64).reshape(8, 128) * 2654435761 % 2**32
X_I32 = jnp.asarray(_HASHED.astype(np.uint32).view(np.int32))


# ------------------------------------------------------------ HBM -> VMEM


@pytest.mark.parametrize("mode", MODES)
def test_bitcast_bf16_source_to_int32(mode):
    def body(move, x_hbm, o_ref, buf, sem):
        move(x_hbm.bitcast(jnp.int32), buf, sem)
        move(buf, o_ref, sem)

    want = tpu_bitcast(X_BF16, jnp.int32)
    out = jax.ShapeDtypeStruct((8, 128), jnp.int32)
    _check(body, X_BF16, out, [pltpu.VMEM((8, 128), jnp.int32)], mode=mode, want=want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("x", "dtype"),
    [(X_I8, jnp.int32), (X_I32, jnp.int8), (X_I32, jnp.bfloat16), (X_BF16, jnp.uint32), (X_F32, jnp.uint32)],
    ids=["i8-i32", "i32-i8", "i32-bf16", "bf16-u32", "f32-u32"],
)
def test_bitcast_source_views(mode, x, dtype):
    view = jax.eval_shape(lambda a: tpu_bitcast(a, dtype), x)

    def body(move, x_ref, o_ref, sem):
        move(x_ref.bitcast(dtype), o_ref, sem)

    _check(body, x, view, mode=mode, want=tpu_bitcast(x, dtype))


@pytest.mark.parametrize("mode", MODES)
def test_reshape_with_indexers_before_and_after(mode):
    def body(move, x_ref, o_ref, sem):
        move(x_ref.at[2:6].reshape(2, 2, 128).at[1], o_ref.at[0:2], sem)
        move(x_ref.reshape(4, 2, 128).at[3, 1], o_ref.at[2], sem)
        move(x_ref.at[:, 0:64].reshape(16, 32).at[pl.ds(3, 5, stride=2)], o_ref.at[3:8, 0:32], sem)
        move(x_ref.at[0:1, 64:128], o_ref.at[3:4, 64:128], sem)  # a plain one in between
        move(x_ref.at[4:8].reshape(2, 256).at[:, 128:256], o_ref.at[4:6].reshape(1, 256).reshape(2, 128), sem)

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    got = np.asarray(_check(body, X_F32, out, mode=mode))
    x = np.asarray(X_F32)
    np.testing.assert_array_equal(got[0:2], x[2:6].reshape(2, 2, 128)[1])
    np.testing.assert_array_equal(got[2], x.reshape(4, 2, 128)[3, 1])
    # (rows 4 and 5 are then overwritten by the last copy)
    np.testing.assert_array_equal(got[[3, 6, 7], 0:32], x[:, 0:64].reshape(16, 32)[[3, 9, 11]])
    np.testing.assert_array_equal(got[3, 64:128], x[0, 64:128])
    np.testing.assert_array_equal(got[4:6], x[4:8].reshape(2, 256)[:, 128:256])


# ------------------------------------------------------------ VMEM -> HBM


@pytest.mark.parametrize("mode", MODES)
def test_bitcast_and_reshape_destinations(mode):
    def body(move, x_ref, o_ref, sem):
        # bf16 output written as int32 words, through a reshape, then a slice.
        move(x_ref.at[0:4], o_ref.bitcast(jnp.int32).at[0:4], sem)
        move(x_ref.at[4:8].reshape(2, 2, 128), o_ref.bitcast(jnp.int32).reshape(4, 2, 128).at[2:4], sem)

    out = jax.ShapeDtypeStruct((16, 128), jnp.bfloat16)
    _check(body, X_I32, out, mode=mode, want=tpu_bitcast(X_I32, jnp.bfloat16))


@pytest.mark.parametrize("mode", MODES)
def test_traced_indices_after_the_views(mode):
    # A grid step's index after a reshape / bitcast on both sides: the byte
    # maps are computed in XLA. The destination view covers part of its
    # region (the rest of which must survive).
    def body(move, x_ref, o_ref, sem):
        i = pl.program_id(0)
        move(x_ref.reshape(4, 2, 128).at[3 - i], o_ref.reshape(4, 2, 128).at[i], sem)
        move(x_ref.bitcast(jnp.int8).at[pl.ds(8 * i, 8)], o_ref.bitcast(jnp.int8).at[pl.ds(24 - 8 * i, 8)], sem)

    got = _check(body, X_I32, jax.ShapeDtypeStruct((8, 128), jnp.int32), mode=mode, grid=(4,))
    x = np.asarray(X_I32)
    x8 = np.asarray(tpu_bitcast(X_I32, jnp.int8))
    want = np.zeros_like(x)
    for i in range(4):
        want.reshape(4, 2, 128)[i] = x.reshape(4, 2, 128)[3 - i]
        want8 = np.asarray(tpu_bitcast(want, jnp.int8)).copy()
        want8[24 - 8 * i : 32 - 8 * i] = x8[8 * i : 8 * i + 8]
        want = np.asarray(tpu_bitcast(want8, jnp.int32)).copy()
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("mode", MODES)
def test_slices_of_traced_size_after_the_views(mode):
    # `pl.ds(start, n)` of traced n on the first dimension of a view (the
    # load / store oracle cannot take such a slice: numpy only).
    def kernel(x_hbm, o_hbm, sem):
        i = pl.program_id(0)
        n = i + 1
        _dma(x_hbm.reshape(4, 2, 128).at[pl.ds(3 - i, n)], o_hbm.reshape(4, 2, 128).at[pl.ds(0, n)], sem)
        _dma(x_hbm.bitcast(jnp.int8).at[pl.ds(16, 4 * n)], o_hbm.bitcast(jnp.int8).at[pl.ds(20, 4 * n)], sem)

    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        grid=(3,),
        in_specs=[_ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )(X_I32)
    x = np.asarray(X_I32)
    want = np.zeros_like(x)
    for i in range(3):
        want.reshape(4, 2, 128)[0 : i + 1] = x.reshape(4, 2, 128)[3 - i : 4]
        want8 = np.asarray(tpu_bitcast(want, jnp.int8)).copy()
        want8[20 : 24 + 4 * i] = np.asarray(tpu_bitcast(X_I32, jnp.int8))[16 : 20 + 4 * i]
        want = np.asarray(tpu_bitcast(want8, jnp.int32)).copy()
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("view", "error"),
    [
        # rows of a reshape are rows of the region: the region's own bounds check
        (lambda x, i: x.reshape(4, 2, 128).at[i + 3], "Out-of-bounds read.*slice\\(8, 10, 1\\)"),
        # a byte map: its out-of-bounds entries
        (lambda x, i: x.bitcast(jnp.int8).at[pl.ds(i * 24, 16)], "source view reaches outside.*index out of bounds"),
    ],
    ids=["reshape", "bitcast"],
)
def test_a_traced_index_out_of_bounds_after_a_view_is_an_error(mode, view, error):
    def kernel(x_hbm, o_hbm, sem):
        src = view(x_hbm, pl.program_id(0))
        _dma(src, o_hbm.bitcast(src.dtype).at[0 : src.shape[0]], sem)

    with pytest.raises(Exception, match=error):
        jax.block_until_ready(
            pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
                grid=(2,),
                in_specs=[_ANY],
                out_specs=_ANY,
                scratch_shapes=[pltpu.SemaphoreType.DMA],
                interpret=_params(mode),
            )(X_I32)
        )


@pytest.mark.parametrize("mode", MODES)
def test_vmem_to_vmem_and_back_with_races_detected(mode):
    def body(move, x_ref, o_ref, a, b, sem):
        move(x_ref, a, sem)
        move(a.bitcast(jnp.int32), b.reshape(4, 2, 128).reshape(8, 128), sem)
        move(b.reshape(2, 4, 128), o_ref.bitcast(jnp.int32).reshape(2, 4, 128), sem)

    scratch = [pltpu.VMEM((16, 128), jnp.bfloat16), pltpu.VMEM((8, 128), jnp.int32)]
    out = jax.ShapeDtypeStruct((16, 128), jnp.bfloat16)
    _check(body, X_BF16, out, scratch, mode=mode, want=X_BF16, detect_races=True)


def test_mismatched_views_are_a_clear_error():
    def kernel(x_hbm, o_hbm, sem):
        pltpu.async_copy(x_hbm.bitcast(jnp.int32), o_hbm.reshape(8, 128), sem).wait()

    with pytest.raises(ValueError, match="DMA source and destination views differ"):
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA],
            interpret=_params("eager"),
        )(X_BF16)


# ------------------------------------------------------------ remote


@pytest.mark.parametrize("mode", (*MODES, "tpu"))
def test_remote_dma_through_views(mode):
    if len(jax.devices()) < 2:
        pytest.skip("needs 2 devices")
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))

    def kernel(x_hbm, o_hbm, send, recv):
        peer = 1 - jax.lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(
            x_hbm.bitcast(jnp.int32).at[pl.ds(2, 4)],
            o_hbm.reshape(2, 4, 128).at[1],
            send,
            recv,
            device_id=(peer,),  # a mesh position (the default device id type)
        )
        copy.start()
        copy.wait()

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        in_specs=[_ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        interpret=_params(mode),
    )
    x = jnp.concatenate([X_BF16, (X_BF16.astype(jnp.float32) * -3).astype(jnp.bfloat16)])  # 2 x (16, 128)
    run = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    got = np.asarray(run(jax.device_put(x, NamedSharding(mesh, P("x")))))
    for dev in range(2):
        peer_words = np.asarray(tpu_bitcast(x[16 * (1 - dev) : 16 * (2 - dev)], jnp.int32))
        np.testing.assert_array_equal(got[8 * dev + 4 : 8 * dev + 8], peer_words[2:6])


def test_rows_of_a_reshape_need_no_byte_map():
    # `reshape(...).at[rows]` keeping whole rows is rows of the region before
    # it: the DMA carries no map (a map costs a pass over the whole region).
    def kernel(x_hbm, o_hbm, sem):
        i = pl.program_id(0)
        _dma(x_hbm.reshape(4, 2, 128).at[i], o_hbm.at[pl.ds(2 * i, 2)], sem)
        _dma(x_hbm.bitcast(jnp.int8).at[pl.ds(4 * i, 4)], o_hbm.bitcast(jnp.int8).at[pl.ds(4 * i + 8, 4)], sem)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        grid=(2,),
        in_specs=[_ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params("eager"),
    )
    text = jax.jit(call).lower(X_I32).as_text()
    # The reshape: its source bytes in order; the bitcast: two maps.
    want = [str(pack("view_maps", src_same=1)), str(pack("view_maps", src_map=1, dst_map=1))]
    assert re.findall(r"view_maps = (\d+)", text) == want, re.findall(r"view_maps = \d+", text)


X_BF16_WIDE = (jnp.arange(16 * 256, dtype=jnp.float32).reshape(16, 256) * 0.37 - 100).astype(jnp.bfloat16)
X_I32_WIDE = jnp.asarray((np.arange(8 * 256, dtype=np.int64) * 2654435761 % 2**32).astype(np.uint32).view(np.int32))
X_I32_WIDE = X_I32_WIDE.reshape(8, 256)


@pytest.mark.parametrize("mode", MODES)
def test_a_box_after_a_width_changing_bitcast_maps_only_the_box(mode):
    # tpu-inference's ragged scatter: one row of a bf16 array seen as uint32
    # per DMA, at a traced row. The bitcast regroups rows of the second-minor
    # dim only, so the DMA reads / writes the few region rows under the box
    # and its map covers them, not the whole region (a pass over all of it
    # per DMA, in XLA temporaries of 4x its bytes).
    def body(move, x_hbm, o_hbm, sem):
        i = pl.program_id(0)
        src = x_hbm.bitcast(jnp.uint32).at[7 - i, pl.ds(128, 128)]  # widens: 2 bf16 rows per row
        move(src, o_hbm.bitcast(jnp.uint32).at[i, pl.ds(0, 128)], sem)
        move(
            x_hbm.bitcast(jnp.uint32).at[pl.ds(7 - i, 1), pl.ds(0, 128)],
            o_hbm.bitcast(jnp.uint32).at[pl.ds(i, 1), pl.ds(128, 128)],
            sem,
        )

    out = jax.ShapeDtypeStruct((16, 256), jnp.bfloat16)
    got = _check(body, X_BF16_WIDE, out, mode=mode, grid=(8,))
    words = np.asarray(tpu_bitcast(X_BF16_WIDE, jnp.uint32))
    want = np.concatenate([words[::-1, 128:], words[::-1, :128]], axis=1)
    _assert_same_bits(tpu_bitcast(got, jnp.uint32), want)

    def narrow(move, x_hbm, o_hbm, sem):
        i = pl.program_id(0)  # splits: 4 int8 rows per int32 row; row 4i + 1 is piece 1 of row i
        move(
            x_hbm.bitcast(jnp.int8).at[4 * i + 1, pl.ds(0, 128)],
            o_hbm.bitcast(jnp.int8).at[31 - 4 * i, pl.ds(128, 128)],
            sem,
        )

    got = _check(narrow, X_I32_WIDE, jax.ShapeDtypeStruct((8, 256), jnp.int32), mode=mode, grid=(8,))
    b = np.asarray(tpu_bitcast(X_I32_WIDE, jnp.int8))
    w = np.asarray(tpu_bitcast(got, jnp.int8))
    for i in range(8):
        np.testing.assert_array_equal(w[31 - 4 * i, 128:], b[4 * i + 1, :128])
    # No map of the whole region: (16 x 256 bf16 = 8192 bytes; int32: 8192).
    call = pl.pallas_call(
        functools.partial(body, _dma),
        out_shape=out,
        grid=(8,),
        in_specs=[_ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )
    text = jax.jit(call).lower(X_BF16_WIDE).as_text()
    assert "8192xi32" not in text and "view_maps" in text
