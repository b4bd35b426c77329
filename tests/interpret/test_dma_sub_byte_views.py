"""DMAs (and loads / stores) through views of sub-byte arrays: an int4 /
uint4 / int2 / float4_e2m1fn ref seen as int32 or int8 through
``ref.bitcast`` (the SparseCore's row packing: on TPU 8 int4 rows share one
32-bit word, row k in bits 4k..4k+3), both directions, with indexers and index vectors after
the view, eager and on_wait, local and remote.

Stock interpret mode fails on these views, so the oracle is numpy: `_pack`
and `_unpack` below state the TPU's row packing on raw bit patterns
(independently of jax's `bitcast` helper, which is checked against them
too). Plain sub-byte DMAs, which stock runs, are compared with stock bit for
bit.
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
from mosaic_rt.jax_internals import itemsize_bits

pytestmark = pytest.mark.timeout(180)

MODES = ("eager", "on_wait")
_ANY = pl.BlockSpec(memory_space=pl.ANY)
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
SUB_BYTE = (jnp.int4, jnp.uint4, jnp.int2, jnp.float4_e2m1fn)


def _params(mode, **knobs):
    return mosaic_rt.InterpretParams(dma_execution_mode=mode, wait_timeout=30.0, **knobs)


# ------------------------------------------------------------ the oracle


def _raw(x) -> np.ndarray:
    """The bit patterns of `x`'s elements, as uint64 (a sub-byte element
    is stored one per byte by numpy, in the low bits)."""
    x = np.asarray(x)
    bits = itemsize_bits(x.dtype)
    raw = x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize]).astype(np.uint64)
    return raw & np.uint64((1 << bits) - 1)


def _cook(raw, dtype) -> np.ndarray:
    """The array of `dtype` with these bit patterns."""
    size = np.dtype(dtype).itemsize
    return np.asarray(raw).astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[size]).view(dtype)


def _pack(x, dtype) -> np.ndarray:
    """The TPU's view of `x` (rank 2, narrower elements) as wider `dtype`:
    r = wide / narrow consecutive rows make one row, row k of a group in
    bits k*narrow.. of each element."""
    narrow, wide = itemsize_bits(x.dtype), itemsize_bits(dtype)
    r = wide // narrow
    raw = _raw(x)
    m, n = raw.shape
    groups = raw.reshape(m // r, r, n)
    out = sum(groups[:, k, :] << np.uint64(k * narrow) for k in range(r))
    return _cook(out, dtype)


def _unpack(w, dtype) -> np.ndarray:
    """The inverse: each row of `w` splits into wide / narrow rows of `dtype`."""
    wide, narrow = itemsize_bits(w.dtype), itemsize_bits(dtype)
    r = wide // narrow
    raw = _raw(w)
    m, n = raw.shape
    mask = np.uint64((1 << narrow) - 1)
    out = np.stack([(raw >> np.uint64(k * narrow)) & mask for k in range(r)], axis=1).reshape(m * r, n)
    return _cook(out, dtype)


def _data(shape, dtype, seed=0):
    """Random bit patterns of `dtype` (every value, the sign bit included)."""
    raw = np.random.RandomState(seed).randint(0, 1 << itemsize_bits(dtype), size=shape, dtype=np.int64)
    return jnp.asarray(_cook(raw, dtype))


def _assert_same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    np.testing.assert_array_equal(_raw(a), _raw(b))


def test_the_oracle_is_jaxs_bitcast():
    x = _data((64, 128), jnp.int4)
    _assert_same_bits(_pack(x, jnp.int32), tpu_bitcast(x, jnp.int32))
    _assert_same_bits(_pack(x, jnp.int8), tpu_bitcast(x, jnp.int8))
    w = _data((8, 128), jnp.int32)
    _assert_same_bits(_unpack(w, jnp.uint4), tpu_bitcast(w, jnp.uint4))
    _assert_same_bits(_unpack(_pack(x, jnp.int32), jnp.int4), x)


# ------------------------------------------------------------ kernels


def _dma(src, dst, sem):
    pltpu.async_copy(src, dst, sem).wait()


def _assign(src, dst, sem):
    del sem
    dst[...] = src[...]


def _call(body, x, out_aval, scratch=(), *, mode, dma=True, grid=(), **knobs):
    """`body(move, x_ref, o_ref, *scratch, sem)`; `move` a DMA (operands in
    HBM) or a load and a store through the same views (all in VMEM)."""

    def whole(shape):
        return pl.BlockSpec(shape, lambda *_: (0,) * len(shape)) if grid else _VMEM

    spec, out_spec = (_ANY, _ANY) if dma else (whole(x.shape), whole(out_aval.shape))
    return pl.pallas_call(
        functools.partial(body, _dma if dma else _assign),
        out_shape=out_aval,
        grid=grid,
        in_specs=[spec],
        out_specs=out_spec,
        scratch_shapes=[*scratch, pltpu.SemaphoreType.DMA],
        interpret=_params(mode, **knobs),
    )(x)


def _check(body, x, out_aval, scratch=(), *, mode, want, grid=(), **knobs):
    """The DMA kernel, and the same with loads and stores, give `want`."""
    got = _call(body, x, out_aval, scratch, mode=mode, grid=grid, **knobs)
    _assert_same_bits(got, want)
    _assert_same_bits(_call(body, x, out_aval, scratch, mode=mode, dma=False, grid=grid), want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SUB_BYTE, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("view", [jnp.int32, jnp.int8, jnp.uint16], ids=lambda d: np.dtype(d).name)
def test_source_packs_rows(mode, dtype, view):
    x = _data((64, 128), dtype)
    want = _pack(x, view)
    scratch = [pltpu.VMEM(want.shape, view)]

    def body(move, x_ref, o_ref, buf, sem):
        move(x_ref.bitcast(view), buf, sem)
        move(buf, o_ref, sem)

    _check(body, x, jax.ShapeDtypeStruct(want.shape, view), scratch, mode=mode, want=want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SUB_BYTE, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("view", [jnp.int32, jnp.int8], ids=lambda d: np.dtype(d).name)
def test_destination_unpacks_words(mode, dtype, view):
    w = _data((64 * itemsize_bits(dtype) // itemsize_bits(view), 128), view, seed=2)
    want = _unpack(w, dtype)

    def body(move, w_ref, o_ref, buf, sem):
        move(w_ref, buf, sem)
        move(buf, o_ref.bitcast(view), sem)

    _check(body, w, jax.ShapeDtypeStruct(want.shape, dtype), [pltpu.VMEM(w.shape, view)], mode=mode, want=want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("src", "dtype"), [(jnp.int32, jnp.int4), (jnp.int8, jnp.uint4), (jnp.int8, jnp.int2)])
def test_source_view_of_words_as_sub_byte_rows(mode, src, dtype):
    w = _data((8, 128), src, seed=18)
    want = _unpack(w, dtype)

    def body(move, w_ref, o_ref, buf, sem):
        move(w_ref.bitcast(dtype), buf, sem)
        move(buf, o_ref, sem)

    _check(body, w, jax.ShapeDtypeStruct(want.shape, dtype), [pltpu.VMEM(want.shape, dtype)], mode=mode, want=want)


@pytest.mark.parametrize("mode", MODES)
def test_both_sides_through_views_with_races_detected(mode):
    # int4 HBM -> (int32 view) -> int8 VMEM seen as int32 -> int4 output. Its
    # load/store twin chains int4 -> int32 -> int8 bitcasts, which XLA's own
    # bitcast-convert folding rejects (views.py computes them by shifts).
    x = _data((64, 128), jnp.int4, seed=3)

    def body(move, x_ref, o_ref, buf, sem):
        move(x_ref.bitcast(jnp.int32), buf.bitcast(jnp.int32), sem)
        move(buf.bitcast(jnp.int32), o_ref.bitcast(jnp.int32), sem)

    scratch = [pltpu.VMEM((32, 128), jnp.int8)]
    _check(body, x, jax.ShapeDtypeStruct(x.shape, jnp.int4), scratch, mode=mode, want=x, detect_races=True)


@pytest.mark.parametrize("mode", MODES)
def test_indexers_before_and_after_the_view(mode):
    """A leading slice (native region), then rows of the int32 view picked
    by the grid step (a traced index: the map is made in XLA)."""
    x = _data((64, 256), jnp.int4, seed=4)
    words = _pack(np.asarray(x)[16:48], jnp.int32)  # (4, 256)

    def body(move, x_ref, o_ref, sem):
        i = pl.program_id(0)
        move(x_ref.at[pl.ds(16, 32)].bitcast(jnp.int32).at[pl.ds(i, 1), pl.ds(128, 128)], o_ref.at[pl.ds(i, 1)], sem)

    out = jax.ShapeDtypeStruct((4, 128), jnp.int32)
    _assert_same_bits(_call(body, x, out, mode=mode, grid=(4,)), words[:, 128:])


@pytest.mark.parametrize("mode", MODES)
def test_destination_rows_keep_the_rest_of_the_output(mode):
    """Rows of an int4 output written through its int32 view one DMA at a
    time, in a grid: the other rows (written at other steps) stay."""
    w = _data((4, 128), jnp.int32, seed=5)

    def body(move, w_ref, o_ref, sem):
        i = pl.program_id(0)
        move(w_ref.at[pl.ds(3 - i, 1)], o_ref.bitcast(jnp.int32).at[pl.ds(3 - i, 1)], sem)

    got = _call(body, w, jax.ShapeDtypeStruct((32, 128), jnp.int4), mode=mode, grid=(4,))
    _assert_same_bits(got, _unpack(w, jnp.int4))


@pytest.mark.parametrize("mode", MODES)
def test_nibble_rows_of_a_word_buffer(mode):
    """An int32 buffer seen as int4 rows (nibble planes): writing some of
    them changes those nibbles of every word and keeps the others."""
    w = _data((2, 128), jnp.int32, seed=6)
    rows = _data((5, 128), jnp.int4, seed=7)

    def kernel(w_hbm, r_hbm, o_hbm, sem):
        _dma(w_hbm, o_hbm, sem)
        _dma(r_hbm, o_hbm.bitcast(jnp.int4).at[pl.ds(3, 5)], sem)  # nibbles 3..7 of word row 0
        _dma(o_hbm.bitcast(jnp.int4).at[pl.ds(10, 2)], o_hbm.bitcast(jnp.int4).at[pl.ds(14, 2)], sem)

    nibbles = np.asarray(_unpack(w, jnp.int4)).copy()
    nibbles[3:8] = np.asarray(rows)
    nibbles[14:16] = nibbles[10:12]
    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(w.shape, jnp.int32),
        in_specs=[_ANY, _ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )(w, rows)
    _assert_same_bits(got, _pack(nibbles, jnp.int32))


@pytest.mark.parametrize("mode", MODES)
def test_traced_index_out_of_bounds_after_the_view_is_an_error(mode):
    x = _data((64, 128), jnp.int4)

    def kernel(n_ref, x_hbm, o_hbm, sem):
        _dma(x_hbm.bitcast(jnp.int32).at[pl.ds(n_ref[0], 2)], o_hbm, sem)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), _ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )
    _assert_same_bits(call(jnp.asarray([6], jnp.int32), x), _pack(x, jnp.int32)[6:])
    # The rows after the bitcast are rows 56..72 of the int4 region: read as
    # such (the map covers only them), they are an out-of-bounds read of it.
    with pytest.raises(IndexError, match=r"Out-of-bounds read .*slice\(56, 72, 1\)"), mosaic_rt.native_errors():
        jax.block_until_ready(call(jnp.asarray([7], jnp.int32), x))


# ------------------------------------------------------------ index vectors


def _gather(view, idx, x, out_aval, mode):
    """``view(x_hbm, idx)`` (an index vector after the view) DMA'd into VMEM."""

    def kernel(idx_ref, x_hbm, o_ref, buf, sem):
        _dma(view(x_hbm, idx_ref[...]), buf, sem)
        o_ref[...] = buf[...]

    return pl.pallas_call(
        kernel,
        out_shape=out_aval,
        in_specs=[_VMEM, _ANY],
        out_specs=_VMEM,
        scratch_shapes=[pltpu.VMEM(out_aval.shape, out_aval.dtype), pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )(idx, x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [jnp.int4, jnp.int2], ids=lambda d: np.dtype(d).name)
def test_gather_packed_rows(mode, dtype):
    """SparseCore row gather: rows of the int32 view (8 int4 rows each)
    picked by a vector of indices, repeats included, a column window."""
    x = _data((256, 256), dtype, seed=8)
    words = _pack(x, jnp.int32)
    idx = jnp.asarray(np.random.RandomState(9).randint(0, words.shape[0], size=16), jnp.int32).at[3].set(0)
    out_aval = jax.ShapeDtypeStruct((16, 128), jnp.int32)
    out = _gather(lambda r, i: r.bitcast(jnp.int32).at[i, pl.ds(128, 128)], idx, x, out_aval, mode)
    _assert_same_bits(out, words[np.asarray(idx), 128:])


@pytest.mark.parametrize("mode", MODES)
def test_scatter_packed_rows(mode):
    """A destination int4 output indexed, through its int32 view, by a
    permutation of its packed rows."""
    w = _data((8, 128), jnp.int32, seed=10)
    perm = jnp.asarray(np.random.RandomState(11).permutation(8), jnp.int32)

    def kernel(idx_ref, w_ref, o_hbm, sem):
        _dma(w_ref, o_hbm.bitcast(jnp.int32).at[idx_ref[...]], sem)

    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((64, 128), jnp.int4),
        in_specs=[_VMEM, _VMEM],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )(perm, w)
    words = np.empty((8, 128), np.int32)
    words[np.asarray(perm)] = np.asarray(w)
    _assert_same_bits(got, _unpack(words, jnp.int4))


@pytest.mark.skipif(
    not hasattr(pl, "Indirect") or not hasattr(jax.sharding, "AbstractDevice"),
    reason="this jax has no pl.Indirect (or no AbstractDevice to name a chip)",
)
@pytest.mark.parametrize("mode", MODES)
def test_emit_pipeline_gathers_packed_int4_rows(mode):
    """`pl.Indirect` rows of an int4 input's int32 view, each step's rows
    named by a vector of indices, written to an int4 output's int32 view."""
    b, n = 8, 32
    x = _data((512, 128), jnp.int4, seed=12)
    words = _pack(x, jnp.int32)  # (64, 128)
    idx = jnp.asarray(np.random.RandomState(13).randint(0, 64, size=n), jnp.int32)

    def kernel(idx_ref, x_hbm, o_hbm):
        def body(g_ref, o_ref):
            o_ref[...] = g_ref[...]

        pltpu.emit_pipeline(
            body,
            grid=(n // b,),
            in_specs=[pl.BlockSpec((pl.Indirect(b), 128), lambda r: (idx_ref[pl.ds(r * b, b)], 0))],
            out_specs=[pl.BlockSpec((b, 128), lambda r: (r, 0))],
        )(x_hbm.bitcast(jnp.int32), o_hbm.bitcast(jnp.int32))

    tpu = jax.sharding.AbstractMesh((), (), abstract_device=jax.sharding.AbstractDevice("TPU v5e", 1, "tpu"))
    with jax.sharding.use_abstract_mesh(tpu):
        out = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8 * n, 128), jnp.int4),
            in_specs=[_VMEM, _ANY],
            out_specs=_ANY,
            interpret=_params(mode),
        )(idx, x)
    _assert_same_bits(out, _unpack(words[np.asarray(idx)], jnp.int4))


def _sparse_core():
    try:
        from jax.experimental.pallas import tpu_sc as plsc
    except ImportError:
        return None
    return plsc if hasattr(plsc, "VectorSubcoreMesh") and hasattr(pl, "kernel") else None


@pytest.mark.skipif(_sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)")
@pytest.mark.parametrize("mode", MODES)
def test_subcores_gather_and_write_packed_rows_of_one_int4_output(mode):
    """ragged_gather_v2's int4 shape of work: every subcore gathers packed
    rows of an int4 input through its int32 view and writes them, a row per
    DMA, into its rows of one int4 output's int32 view, all at once."""
    from mosaic_rt.tpu_check.tpu_info import answering_for

    plsc = _sparse_core()
    cores, subcores, b = 2, 4, 4
    x = _data((8 * 64, 256), jnp.int4, seed=14)
    words = _pack(x, jnp.int32)  # (64, 256)
    idx = jnp.asarray(np.random.RandomState(15).randint(0, 64, size=cores * subcores * b), jnp.int32)

    def kernel(idx_hbm, x_hbm, o_hbm):
        w = jax.lax.axis_index(("core", "subcore"))

        def scoped(idx_v, buf, sem):
            pltpu.sync_copy(idx_hbm.at[pl.ds(w * b, b)], idx_v)
            pltpu.async_copy(x_hbm.bitcast(jnp.int32).at[idx_v[...]], buf, sem).wait()
            for r in range(b):
                pltpu.sync_copy(buf.at[pl.ds(r, 1)], o_hbm.bitcast(jnp.int32).at[pl.ds(w * b + r, 1)])

        pl.run_scoped(scoped, pltpu.VMEM((b,), jnp.int32), pltpu.VMEM((b, 256), jnp.int32), pltpu.SemaphoreType.DMA)

    with answering_for("v6e"):
        mesh = plsc.VectorSubcoreMesh(
            core_axis_name="core", subcore_axis_name="subcore", num_cores=cores, num_subcores=subcores
        )
        with mosaic_rt.force_interpret_mode(_params(mode)):
            out_type = jax.ShapeDtypeStruct((8 * len(idx), 256), jnp.int4)
            out = jax.block_until_ready(pl.kernel(kernel, out_type=out_type, mesh=mesh)(idx, x))
    _assert_same_bits(out, _unpack(words[np.asarray(idx)], jnp.int4))


# ------------------------------------------------------------ remote


@pytest.mark.parametrize("mode", (*MODES, "tpu"))
def test_remote_dma_packs_on_one_device_and_unpacks_on_the_other(mode):
    if len(jax.devices()) < 2:
        pytest.skip("needs 2 devices")
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))

    def kernel(x_hbm, o_hbm, w_hbm, send, recv):
        peer = 1 - jax.lax.axis_index("x")
        # int4 rows 8..24 (two words' worth) as int32 words into the peer's int32 output ...
        copy = pltpu.make_async_remote_copy(
            x_hbm.bitcast(jnp.int32).at[pl.ds(1, 2)], w_hbm, send, recv, device_id=(peer,)
        )
        copy.start()
        copy.wait()
        # ... and the whole int4 input into the peer's int4 output, through both int32 views.
        copy = pltpu.make_async_remote_copy(
            x_hbm.bitcast(jnp.int32), o_hbm.bitcast(jnp.int32), send, recv, device_id=(peer,)
        )
        copy.start()
        copy.wait()

    call = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((32, 128), jnp.int4), jax.ShapeDtypeStruct((2, 128), jnp.int32)),
        in_specs=[_ANY],
        out_specs=(_ANY, _ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        interpret=_params(mode),
    )
    x = _data((64, 128), jnp.int4, seed=16)  # 2 x (32, 128)
    spec = P("x")
    run = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=(spec, spec), check_vma=False))
    got, words = run(jax.device_put(x, NamedSharding(mesh, spec)))
    for dev in range(2):
        peer = np.asarray(x)[32 * (1 - dev) : 32 * (2 - dev)]
        _assert_same_bits(np.asarray(got)[32 * dev : 32 * (dev + 1)], peer)
        _assert_same_bits(np.asarray(words)[2 * dev : 2 * dev + 2], _pack(peer, jnp.int32)[1:3])


# ------------------------------------------------------------ stock parity


@pytest.mark.parametrize("dtype", SUB_BYTE, ids=lambda d: np.dtype(d).name)
def test_plain_sub_byte_dmas_match_stock(dtype):
    """What stock runs: sub-byte DMAs without views (slices, HBM <-> VMEM),
    the memory the views above read and write. Bit for bit."""
    x = _data((64, 128), dtype, seed=17)

    def kernel(x_hbm, o_hbm, buf, sem):
        pltpu.async_copy(x_hbm.at[pl.ds(8, 16)], buf.at[pl.ds(0, 16)], sem).wait()
        pltpu.async_copy(x_hbm.at[pl.ds(40, 16)], buf.at[pl.ds(16, 16)], sem).wait()
        pltpu.async_copy(buf, o_hbm.at[pl.ds(16, 32)], sem).wait()
        pltpu.async_copy(x_hbm.at[pl.ds(0, 16)], o_hbm.at[pl.ds(0, 16)], sem).wait()
        pltpu.async_copy(x_hbm.at[pl.ds(48, 16)], o_hbm.at[pl.ds(48, 16)], sem).wait()

    def run(params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, dtype),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.VMEM((32, 128), dtype), pltpu.SemaphoreType.DMA],
            interpret=params,
        )(x)

    ours = run(_params("on_wait"))
    _assert_same_bits(ours, run(pltpu.InterpretParams()))
    want = np.asarray(x).copy()
    want[16:32], want[32:48] = np.asarray(x)[8:24], np.asarray(x)[40:56]
    _assert_same_bits(ours, want)


def test_lowered_maps_count_nibbles_and_reshapes_need_none():
    def kernel(x_hbm, o_hbm, w_hbm, sem):
        _dma(x_hbm.reshape(8, 8, 128).reshape(64, 128), o_hbm, sem)  # its bytes in order: no map
        _dma(x_hbm.bitcast(jnp.int32), w_hbm, sem)

    call = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((64, 128), jnp.int4), jax.ShapeDtypeStruct((8, 128), jnp.int32)),
        in_specs=[_ANY],
        out_specs=(_ANY, _ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params("eager"),
    )
    text = jax.jit(call).lower(_data((64, 128), jnp.int4)).as_text()
    want = [str(pack("view_maps", src_same=1)), str(pack("view_maps", src_map=1))]
    assert re.findall(r"view_maps = (\d+)", text) == want, re.findall(r"view_maps = \d+", text)
    # The source's layout: 4-bit units, an int4 element per stored byte, an int32 view.
    assert re.findall(r"view_units = (\d+)", text) == [str(pack("view_units", src_unit=4, src_region=4, src_view=8))]


@pytest.mark.parametrize("dtype", [jnp.int4, jnp.int2])
def test_loads_and_stores_through_views_under_rank_promotion_raise(dtype):
    # JAX's own TPU tests run with jax_numpy_rank_promotion="raise": the
    # views' shifts must broadcast explicitly (they failed with "Operands
    # could not be broadcast together for left_shift").
    x = _data((64, 128), dtype, seed=21)

    def kernel(x_ref, o_ref, back_ref):
        o_ref[...] = x_ref.bitcast(jnp.int32)[...]  # rows pack into words
        back_ref.bitcast(jnp.int32)[...] = o_ref[...]  # and split again

    words = 64 * itemsize_bits(dtype) // 32
    with jax.numpy_rank_promotion("raise"):
        packed, back = pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((words, 128), jnp.int32), jax.ShapeDtypeStruct(x.shape, dtype)),
            in_specs=[_VMEM],
            out_specs=(_VMEM, _VMEM),
            interpret=_params("eager"),
        )(x)
    _assert_same_bits(packed, _pack(x, jnp.int32))
    _assert_same_bits(back, x)
