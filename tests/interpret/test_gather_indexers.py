"""DMAs with a vector of indices: a ref indexed along its first dimension by
an int32 vector (``ref.at[idx]``, ``ref.at[idx, pl.ds(...)]``, also after
``ref.bitcast``), the SparseCore gather (source side) and scatter
(destination side) DMA, and `pl.Indirect` block dims of
`pltpu.emit_pipeline`, which issue such gathers.

Stock interpret mode rejects these ("Advanced indexers are not supported on
TPU"), so every kernel is checked against numpy, bit for bit, in both DMA
execution modes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.ffi.bitfields import pack
from mosaic_rt.jax_internals import bitcast_array as tpu_bitcast

pytestmark = pytest.mark.timeout(180)

MODES = ("eager", "on_wait")
_ANY = pl.BlockSpec(memory_space=pl.ANY)
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def _params(mode):
    return mosaic_rt.InterpretParams(dma_execution_mode=mode, wait_timeout=30.0)


def _bits(x):
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def _assert_same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    np.testing.assert_array_equal(_bits(a), _bits(b))


def _data(shape, dtype, seed=0):
    raw = np.random.RandomState(seed).randint(0, 2**31 - 1, size=shape, dtype=np.int64)
    dtype = np.dtype(dtype)
    return jnp.asarray((raw % (1 << (8 * dtype.itemsize))).astype(f"uint{8 * dtype.itemsize}").view(dtype))


def _indices(n, high, seed=1):
    return jnp.asarray(np.random.RandomState(seed).randint(0, high, size=n), jnp.int32)


def _gather(view, idx, x, out_aval, mode):
    """A kernel copying ``view(x_hbm).at[idx_vector]`` (`view` adds the
    indexers) into VMEM with one DMA, then to the output."""

    def kernel(idx_ref, x_hbm, o_ref, buf, sem):
        pltpu.async_copy(view(x_hbm, idx_ref[...]), buf, sem).wait()
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
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bfloat16, jnp.uint8, jnp.float32])
def test_gather_rows(mode, dtype):
    x = _data((64, 128), dtype)
    idx = _indices(16, 64)
    out = _gather(lambda r, i: r.at[i], idx, x, jax.ShapeDtypeStruct((16, 128), dtype), mode)
    _assert_same_bits(out, np.asarray(x)[np.asarray(idx)])


@pytest.mark.parametrize("mode", MODES)
def test_gather_repeated_indices_and_column_slice(mode):
    x = _data((40, 256), jnp.int32)
    idx = jnp.asarray([3, 3, 0, 39, 17, 3, 39, 0], jnp.int32)
    out = _gather(lambda r, i: r.at[i, pl.ds(128, 64)], idx, x, jax.ShapeDtypeStruct((8, 64), jnp.int32), mode)
    _assert_same_bits(out, np.asarray(x)[np.asarray(idx), 128:192])


@pytest.mark.parametrize("mode", MODES)
def test_gather_rank3_with_scalar_index(mode):
    x = _data((32, 4, 128), jnp.float32)
    idx = _indices(8, 32)
    out = _gather(lambda r, i: r.at[i, 2], idx, x, jax.ShapeDtypeStruct((8, 128), jnp.float32), mode)
    _assert_same_bits(out, np.asarray(x)[np.asarray(idx), 2])
    out = _gather(lambda r, i: r.at[i], idx, x, jax.ShapeDtypeStruct((8, 4, 128), jnp.float32), mode)
    _assert_same_bits(out, np.asarray(x)[np.asarray(idx)])


@pytest.mark.parametrize("mode", MODES)
def test_gather_after_leading_slice(mode):
    x = _data((64, 128), jnp.int32)
    idx = _indices(16, 24)
    out = _gather(lambda r, i: r.at[pl.ds(8, 24)].at[i], idx, x, jax.ShapeDtypeStruct((16, 128), jnp.int32), mode)
    _assert_same_bits(out, np.asarray(x)[8:32][np.asarray(idx)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("src_dtype", "view_dtype", "rows"),
    [
        (jnp.uint8, jnp.int32, 64),
        (jnp.int32, jnp.uint8, 16),
        (jnp.bfloat16, jnp.int32, 32),
        (jnp.int8, jnp.bfloat16, 64),
    ],
)
def test_gather_after_bitcast(mode, src_dtype, view_dtype, rows):
    """``ref.bitcast(t).at[idx, cols]`` (csa_gather's construct): rows of the
    bitcast view, whose bytes are interleaved across rows of the buffer."""
    x = _data((rows, 128), src_dtype)
    view = np.asarray(tpu_bitcast(x, view_dtype))
    idx = _indices(8, view.shape[0])
    out = _gather(
        lambda r, i: r.bitcast(view_dtype).at[i, pl.ds(0, 128)],
        idx,
        x,
        jax.ShapeDtypeStruct((8, 128), view_dtype),
        mode,
    )
    _assert_same_bits(out, view[np.asarray(idx)])


@pytest.mark.parametrize("mode", MODES)
def test_scatter_rows(mode):
    """A destination indexed by a vector: row i of the source lands in row
    idx[i] (a permutation here, so every output row is written once)."""
    x = _data((32, 128), jnp.int32)
    perm = jnp.asarray(np.random.RandomState(3).permutation(32), jnp.int32)

    def kernel(idx_ref, x_ref, o_hbm, sem):
        pltpu.async_copy(x_ref, o_hbm.at[idx_ref[...]], sem).wait()

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((32, 128), jnp.int32),
        in_specs=[_VMEM, _VMEM],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )(perm, x)
    expected = np.empty((32, 128), np.int32)
    expected[np.asarray(perm)] = np.asarray(x)
    _assert_same_bits(out, expected)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_with_repeated_indices_keeps_the_rows_it_misses(mode):
    """As many indices as rows, one repeated: the row nobody names keeps
    its value (the repeated row gets one of its writers' rows)."""
    x = _data((4, 128), jnp.int32)
    idx = jnp.asarray([0, 0, 1, 2], jnp.int32)

    def kernel(idx_ref, x_ref, o_in, o_hbm, sem):
        del o_in
        pltpu.async_copy(x_ref, o_hbm.at[idx_ref[...]], sem).wait()

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((4, 128), jnp.int32),
        in_specs=[_VMEM, _VMEM, _ANY],
        out_specs=_ANY,
        input_output_aliases={2: 0},
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )(idx, x, jnp.full((4, 128), -5, jnp.int32))
    out, x = np.asarray(out), np.asarray(x)
    np.testing.assert_array_equal(out[3], np.full(128, -5, np.int32))
    np.testing.assert_array_equal(out[1:3], x[2:4])
    assert (out[0] == x[0]).all() or (out[0] == x[1]).all()


@pytest.mark.parametrize("mode", MODES)
def test_gather_in_a_loop_with_two_in_flight(mode):
    """Gathers started together and waited later, one per step of a loop,
    with indices loaded from VMEM at each step."""
    x = _data((128, 128), jnp.int32)
    idx = _indices(64, 128)

    def kernel(idx_ref, x_hbm, o_ref, buf, sems):
        def step(s, _):
            copies = [
                pltpu.make_async_copy(x_hbm.at[idx_ref[pl.ds((2 * s + k) * 8, 8)]], buf.at[k], sems.at[k])
                for k in range(2)
            ]
            for c in copies:
                c.start()
            for k, c in enumerate(copies):
                c.wait()
                o_ref[pl.ds((2 * s + k) * 8, 8), :] = buf[k]
            return ()

        jax.lax.fori_loop(0, 4, step, ())

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((64, 128), jnp.int32),
        in_specs=[_VMEM, _ANY],
        out_specs=_VMEM,
        scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.int32), pltpu.SemaphoreType.DMA((2,))],
        interpret=_params(mode),
    )(idx, x)
    _assert_same_bits(out, np.asarray(x)[np.asarray(idx)])


@pytest.mark.skipif(
    not hasattr(pl, "Indirect") or not hasattr(jax.sharding, "AbstractDevice"),
    reason="this jax has no pl.Indirect (or no AbstractDevice to name a chip)",
)
@pytest.mark.parametrize("mode", MODES)
def test_emit_pipeline_indirect_block_dim(mode):
    """`pl.Indirect` in a BlockSpec of `pltpu.emit_pipeline`: each step
    gathers the rows its index map names (a vector of indices) -- over a
    bitcast view, as csa_gather does."""
    b, n = 8, 48
    x = _data((256, 128), jnp.uint8)
    view = np.asarray(tpu_bitcast(x, jnp.int32))  # (64, 128)
    idx = _indices(n, view.shape[0])

    def kernel(idx_ref, x_hbm, o_hbm):
        def body(g_ref, o_ref):
            o_ref[...] = g_ref[...] ^ jnp.int32(0x5A5A5A5A)

        pltpu.emit_pipeline(
            body,
            grid=(n // b,),
            in_specs=[pl.BlockSpec((pl.Indirect(b), 128), lambda r: (idx_ref[pl.ds(r * b, b)], 0))],
            out_specs=[pl.BlockSpec((b, 128), lambda r: (r, 0))],
        )(x_hbm.bitcast(jnp.int32), o_hbm)

    # emit_pipeline asks for the chip's tiling through the abstract mesh.
    tpu = jax.sharding.AbstractMesh((), (), abstract_device=jax.sharding.AbstractDevice("TPU v5e", 1, "tpu"))
    with jax.sharding.use_abstract_mesh(tpu):
        out = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((n, 128), jnp.int32),
            in_specs=[_VMEM, _ANY],
            out_specs=_ANY,
            interpret=_params(mode),
        )(idx, x)
    _assert_same_bits(out, view[np.asarray(idx)] ^ np.int32(0x5A5A5A5A))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", [64, -1, 1000])
def test_index_out_of_range_is_an_error(mode, bad):
    x = _data((64, 128), jnp.int32)
    idx = jnp.asarray([0, 5, bad, 7, 1, 2, 3, 4], jnp.int32)
    with (
        pytest.raises(ValueError, match="DMA source view reaches outside.*index out of bounds"),
        mosaic_rt.native_errors(),
    ):
        jax.block_until_ready(_gather(lambda r, i: r.at[i], idx, x, jax.ShapeDtypeStruct((8, 128), jnp.int32), mode))


@pytest.mark.parametrize("mode", MODES)
def test_scatter_index_out_of_range_is_an_error(mode):
    def kernel(idx_ref, x_ref, o_hbm, sem):
        pltpu.async_copy(x_ref, o_hbm.at[idx_ref[...]], sem).wait()

    idx = jnp.asarray([0, 1, 2, 3, 4, 5, 6, 32], jnp.int32)
    with pytest.raises(ValueError, match="DMA destination view reaches outside"), mosaic_rt.native_errors():
        jax.block_until_ready(
            pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((32, 128), jnp.int32),
                in_specs=[_VMEM, _VMEM],
                out_specs=_ANY,
                scratch_shapes=[pltpu.SemaphoreType.DMA],
                interpret=_params(mode),
            )(idx, _data((8, 128), jnp.int32))
        )


def test_array_indexer_not_last_is_rejected():
    x = _data((64, 128), jnp.int32)
    idx = _indices(8, 64)
    with pytest.raises(NotImplementedError, match="last transform"):
        _gather(lambda r, i: r.at[i].bitcast(jnp.uint8), idx, x, jax.ShapeDtypeStruct((32, 128), jnp.uint8), "eager")


def _sparse_core():
    try:
        from jax.experimental.pallas import tpu_sc as plsc
    except ImportError:
        return None
    return plsc if hasattr(plsc, "VectorSubcoreMesh") and hasattr(pl, "kernel") else None


@pytest.mark.skipif(_sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)")
@pytest.mark.parametrize("mode", MODES)
def test_sparse_core_subcores_each_gather_their_rows(mode):
    """csa_gather's shape of work: a kernel over a VectorSubcoreMesh, every
    subcore (a core of its own, ``axis_index((core, subcore))``) gathering
    the rows its window of the indices names."""
    from mosaic_rt.tpu_check.tpu_info import answering_for

    plsc = _sparse_core()
    cores, subcores, b = 2, 4, 8
    x = _data((96, 128), jnp.int32)
    idx = _indices(cores * subcores * b, 96)

    def kernel(idx_hbm, x_hbm, o_hbm):
        w = jax.lax.axis_index(("core", "subcore"))

        def scoped(idx_v, buf, sem):
            pltpu.sync_copy(idx_hbm.at[pl.ds(w * b, b)], idx_v)
            pltpu.async_copy(x_hbm.at[idx_v[...]], buf, sem).wait()
            pltpu.sync_copy(buf, o_hbm.at[pl.ds(w * b, b)])

        pl.run_scoped(scoped, pltpu.VMEM((b,), jnp.int32), pltpu.VMEM((b, 128), jnp.int32), pltpu.SemaphoreType.DMA)

    with answering_for("v6e"):
        mesh = plsc.VectorSubcoreMesh(
            core_axis_name="core", subcore_axis_name="subcore", num_cores=cores, num_subcores=subcores
        )
        with mosaic_rt.force_interpret_mode(_params(mode)):
            out = pl.kernel(kernel, out_type=jax.ShapeDtypeStruct((len(idx), 128), jnp.int32), mesh=mesh)(idx, x)
            out = jax.block_until_ready(out)
    _assert_same_bits(out, np.asarray(x)[np.asarray(idx)])


def _subcore_kernel(kernel, out_type, mode, cores=2, subcores=4):
    from mosaic_rt.tpu_check.tpu_info import answering_for

    plsc = _sparse_core()
    with answering_for("v6e"):
        mesh = plsc.VectorSubcoreMesh(
            core_axis_name="core", subcore_axis_name="subcore", num_cores=cores, num_subcores=subcores
        )
        with mosaic_rt.force_interpret_mode(_params(mode)):
            return jax.block_until_ready(pl.kernel(kernel, out_type=out_type, mesh=mesh))


@pytest.mark.skipif(_sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)")
@pytest.mark.parametrize("mode", MODES)
def test_subcores_write_their_rows_of_one_output_through_a_bitcast_view(mode):
    """ragged_gather_v2's shape of work: every subcore DMAs its rows into
    the same output through ``out.bitcast(...)`` -- each a write of part of
    the view's region, all at once: no subcore's write may undo another's
    (a whole-region read-modify-write lost rows in eager mode)."""
    cores, subcores, b = 2, 16, 8
    x = _data((cores * subcores * b, 512), jnp.float32)

    def kernel(x_hbm, o_hbm):
        w = jax.lax.axis_index(("core", "subcore"))
        out_i32 = o_hbm.bitcast(jnp.int32)

        def scoped(buf):
            pltpu.sync_copy(x_hbm.bitcast(jnp.int32).at[pl.ds(w * b, b)], buf)
            # one row per DMA, several times over: 32 subcores overlap
            for _ in range(4):
                for r in range(b):
                    pltpu.sync_copy(buf.at[pl.ds(r, 1)], out_i32.at[pl.ds(w * b + r, 1)])

        pl.run_scoped(scoped, pltpu.VMEM((b, 512), jnp.int32))

    for _ in range(3):
        out = _subcore_kernel(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), mode, cores, subcores)(x)
        _assert_same_bits(out, x)


@pytest.mark.skipif(_sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("step", [1, 32])
def test_parallel_loop_runs_every_iteration_with_its_carry(mode, step):
    """``plsc.parallel_loop``: a loop whose iterations the SparseCore may run
    in any order or at once (the kernel promises they are independent):
    every index from lower to upper by step, the carry threaded through."""
    plsc = _sparse_core()
    b = 8

    def kernel(x_hbm, o_hbm, n_hbm):
        w = jax.lax.axis_index(("core", "subcore"))

        def scoped(buf, count):
            pltpu.sync_copy(x_hbm.at[pl.ds(w * b, b)], buf)

            def body(i, n):
                cols = pl.ds(i, step)
                buf[:, cols] = buf[:, cols] * 2 + i
                return n + 1

            count[0] = plsc.parallel_loop(0, 128, step=step, carry=jnp.int32(0))(body)
            pltpu.sync_copy(buf, o_hbm.at[pl.ds(w * b, b)])
            pltpu.sync_copy(count, n_hbm.at[pl.ds(w, 1)])

        pl.run_scoped(scoped, pltpu.VMEM((b, 128), jnp.int32), pltpu.VMEM((1,), jnp.int32))

    x = _data((8 * b, 128), jnp.int32) % 1000
    out, n = _subcore_kernel(
        kernel, (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((8,), jnp.int32)), mode
    )(x)
    starts = (np.arange(128) // step) * step
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) * 2 + starts[None, :])
    np.testing.assert_array_equal(np.asarray(n), np.full(8, 128 // step, np.int32))


def _gather_at(view, idx, start, x, out_aval, mode):
    """`_gather` with a traced scalar `start` (read from SMEM) for `view`."""

    def kernel(idx_ref, start_ref, x_hbm, o_ref, buf, sem):
        pltpu.async_copy(view(x_hbm, idx_ref[...], start_ref[0]), buf, sem).wait()
        o_ref[...] = buf[...]

    return pl.pallas_call(
        kernel,
        out_shape=out_aval,
        in_specs=[_VMEM, pl.BlockSpec(memory_space=pltpu.SMEM), _ANY],
        out_specs=_VMEM,
        scratch_shapes=[pltpu.VMEM(out_aval.shape, out_aval.dtype), pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("src_dtype", "view_dtype"), [(jnp.bfloat16, jnp.uint32), (jnp.int32, jnp.int32)])
def test_gather_with_a_traced_column_start(mode, src_dtype, view_dtype):
    """``x.bitcast(u32).at[idx, pl.ds(c, n)]`` with `c` known at run time
    only (tpu-inference's ragged gather-reduce: its column chunk is the
    pipeline step's): the map comes as rows, shifted by `c`."""
    x = _data((64, 384), src_dtype)
    view = np.asarray(tpu_bitcast(x, view_dtype))
    idx = _indices(16, view.shape[0])
    call = _gather_at(
        lambda r, i, c: r.bitcast(view_dtype).at[i, pl.ds(c, 128)],
        idx,
        None,
        x,
        jax.ShapeDtypeStruct((16, 128), view_dtype),
        mode,
    )
    fn = jax.jit(call)
    for c in (0, 100, 256):
        out = fn(idx, jnp.asarray([c], jnp.int32), x)
        _assert_same_bits(out, view[np.asarray(idx), c : c + 128])
    # Only the rows' starts are computed per DMA: the map is sent as rows
    # (`view_maps`: a source map, of rows).
    rows = pack("view_maps", src_map=1, src_rows=1)
    assert f"view_maps = {rows}" in fn.lower(idx, jnp.asarray([0], jnp.int32), x).as_text()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("c", [-1, 257, 1 << 20])
def test_gather_with_a_traced_column_start_out_of_range_is_an_error(mode, c):
    x = _data((64, 384), jnp.int32)
    idx = _indices(8, 64)
    call = _gather_at(
        lambda r, i, s: r.at[i, pl.ds(s, 128)], idx, None, x, jax.ShapeDtypeStruct((8, 128), jnp.int32), mode
    )
    with (
        pytest.raises(ValueError, match="DMA source view reaches outside.*index out of bounds"),
        mosaic_rt.native_errors(),
    ):
        jax.block_until_ready(call(idx, jnp.asarray([c], jnp.int32), x))
