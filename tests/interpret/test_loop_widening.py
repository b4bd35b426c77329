"""A SparseCore `parallel_loop` over disjoint column chunks runs as one pass
over all its columns (`interpret/rewrites/widening.py`): ragged gather /
scatter kernels' column loops stop paying native calls per 8 or 16 lanes.
Every result is the loop's bit for bit (float chains included), and loops
whose iterations could see each other's work keep their iterations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.interpret.rewrites import widening

pytestmark = pytest.mark.timeout(180)

_ROWS, _COLS, _LANES = 8, 64, 16


def _sparse_core():
    try:
        from jax.experimental.pallas import tpu_sc as plsc
    except ImportError:
        return None
    return plsc if hasattr(plsc, "VectorSubcoreMesh") and hasattr(pl, "kernel") else None


needs_sparse_core = pytest.mark.skipif(
    _sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)"
)


def _run(kernel, out_shape, *args, widen: bool, monkeypatch, mode="eager"):
    """``(output, [widened?] per parallel_loop traced)``."""
    from mosaic_rt.tpu_check.tpu_info import answering_for

    plsc = _sparse_core()
    seen = []
    real = widening.widen

    def spy(*a):
        result = real(*a) if widen else None
        seen.append(result is not None)
        return result

    monkeypatch.setattr(widening, "widen", spy)
    with answering_for("v6e"):
        mesh = plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore", num_cores=2, num_subcores=2)
        params = mosaic_rt.InterpretParams(dma_execution_mode=mode, wait_timeout=30.0)
        with mosaic_rt.force_interpret_mode(params):
            out = pl.kernel(kernel, out_type=out_shape, mesh=mesh)(*args)
            out = jax.block_until_ready(out)
    return np.asarray(out), seen


def _both(kernel, out_shape, *args, monkeypatch, mode="eager"):
    """The kernel's output widened and not, checked bit for bit equal;
    returns the widened output and whether each loop was widened."""
    wide, seen = _run(kernel, out_shape, *args, widen=True, monkeypatch=monkeypatch, mode=mode)
    loop, _ = _run(kernel, out_shape, *args, widen=False, monkeypatch=monkeypatch, mode=mode)
    np.testing.assert_array_equal(wide.view(np.uint8), loop.view(np.uint8))
    return wide, seen


@needs_sparse_core
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_gather_reduce_column_loop_runs_as_one_pass(mode, monkeypatch):
    """ragged_gather_reduce's column loop: per row a u32 load, a shift and
    mask by a per-row scalar, a bitcast to f32, a scale by a per-row
    weight, a running sum restarted where the destination changes (a float
    select), a store; the carry row is read and written at the same
    columns."""
    plsc = _sparse_core()
    rng = np.random.default_rng(7)
    # Random bits: NaNs, infinities and subnormals among the floats made of them.
    words = rng.integers(0, 2**32, (4 * _ROWS, _COLS), dtype=np.uint64).astype(np.uint32)
    weights = rng.standard_normal(_ROWS).astype(np.float32)
    dst = np.array([0, 0, 1, 1, 1, 2, 3, 3], np.int32)
    src = np.array([3, 8, 5, 0, 11, 6, 1, 4], np.int32)

    def kernel(w_hbm, dst_hbm, src_hbm, x_hbm, o_hbm):
        me = jax.lax.axis_index(("core", "subcore"))

        def scoped(w_v, dst_v, src_v, buf, out, carry):
            pltpu.sync_copy(w_hbm, w_v)
            pltpu.sync_copy(dst_hbm, dst_v)
            pltpu.sync_copy(src_hbm, src_v)
            pltpu.sync_copy(x_hbm.at[pl.ds(me * _ROWS, _ROWS)], buf)
            carry[...] = jnp.zeros_like(carry)
            w, d, s = w_v[...], dst_v[...], src_v[...]

            @plsc.parallel_loop(0, _COLS, step=_LANES)
            def _(c):
                cols = pl.ds(c, _LANES)
                acc = carry[0, cols]
                for r in range(_ROWS):
                    shift = jnp.where(jnp.bitwise_and(s[r], 1) == 0, 16, 0).astype(jnp.uint32)
                    bits = jnp.bitwise_and(jnp.left_shift(buf[r, cols], shift), jnp.uint32(0xFFFF0000))
                    data = lax.bitcast_convert_type(bits, jnp.float32) * w[r]
                    same = d[r] == (d[r - 1] if r else -1)
                    acc = jnp.where(same, acc + data, data)
                    out[r, cols] = acc
                carry[0, cols] = acc

            pltpu.sync_copy(out, o_hbm.at[pl.ds(me * _ROWS, _ROWS)])

        pl.run_scoped(
            scoped,
            pltpu.VMEM((_ROWS,), jnp.float32),
            pltpu.VMEM((_ROWS,), jnp.int32),
            pltpu.VMEM((_ROWS,), jnp.int32),
            pltpu.VMEM((_ROWS, _COLS), jnp.uint32),
            pltpu.VMEM((_ROWS, _COLS), jnp.float32),
            pltpu.VMEM((1, _COLS), jnp.float32),
        )

    shape = jax.ShapeDtypeStruct(words.shape, jnp.float32)
    out, seen = _both(kernel, shape, weights, dst, src, words, monkeypatch=monkeypatch, mode=mode)
    assert seen and all(seen), seen
    # Row 0 starts a group: data * weight, checked against numpy where
    # neither side is subnormal (XLA:CPU flushes those to zero, numpy not).
    shifts = np.where(src % 2 == 0, 16, 0).astype(np.uint32)
    bits = (words[:_ROWS] << shifts[:, None]) & np.uint32(0xFFFF0000)
    data = bits[0].view(np.float32)
    with np.errstate(all="ignore"):
        first = data * weights[0]
        tiny = np.finfo(np.float32).tiny
        normal = (np.abs(data) >= tiny) & (np.abs(first) >= tiny) & np.isfinite(first) & (abs(weights[0]) >= tiny)
    assert normal.sum() > _COLS // 2
    np.testing.assert_array_equal(out[0][normal].view(np.uint32), first[normal].view(np.uint32))


@needs_sparse_core
def test_two_row_loads_sliced_and_squeezed_widen(monkeypatch):
    """dense_gather_reduce's shape: `ref[pl.ds(2r, 2), cols]` (two rows),
    one picked by a per-row scalar (`row[0]` / `row[1]`), summed over rows."""
    plsc = _sparse_core()
    rng = np.random.default_rng(3)
    x = rng.integers(-(2**20), 2**20, (4 * 2 * _ROWS, _COLS)).astype(np.int32)
    pick = np.array([0, 1, 1, 0, 1, 0, 0, 1], np.int32)

    def kernel(pick_hbm, x_hbm, o_hbm):
        me = jax.lax.axis_index(("core", "subcore"))

        def scoped(pick_v, buf, out):
            pltpu.sync_copy(pick_hbm, pick_v)
            pltpu.sync_copy(x_hbm.at[pl.ds(me * 2 * _ROWS, 2 * _ROWS)], buf)
            p = pick_v[...]

            @plsc.parallel_loop(0, _COLS, step=_LANES)
            def _(c):
                cols = pl.ds(c, _LANES)
                total = None
                for r in range(_ROWS):
                    two = buf[pl.ds(2 * r, 2), cols]
                    row = jnp.where(p[r] == 0, two[0], two[1])
                    total = row if total is None else total + row
                out[0, cols] = total

            pltpu.sync_copy(out, o_hbm.at[pl.ds(me, 1)])

        pl.run_scoped(
            scoped,
            pltpu.VMEM((_ROWS,), jnp.int32),
            pltpu.VMEM((2 * _ROWS, _COLS), jnp.int32),
            pltpu.VMEM((1, _COLS), jnp.int32),
        )

    out, seen = _both(kernel, jax.ShapeDtypeStruct((4, _COLS), jnp.int32), pick, x, monkeypatch=monkeypatch)
    assert seen and all(seen), seen
    blocks = x.reshape(4, _ROWS, 2, _COLS)
    expected = np.take_along_axis(blocks, pick[None, :, None, None], axis=2)[:, :, 0].sum(axis=1, dtype=np.int32)
    np.testing.assert_array_equal(out, expected)


def _shift_kernel(body):
    """A kernel running ``body(c, buf, out)`` in a column loop over one
    block per subcore; it returns ``out``."""
    plsc = _sparse_core()

    def kernel(x_hbm, o_hbm):
        me = jax.lax.axis_index(("core", "subcore"))

        def scoped(buf, out, sem):
            pltpu.sync_copy(x_hbm.at[pl.ds(me * _ROWS, _ROWS)], buf)
            out[...] = jnp.zeros_like(out)

            @plsc.parallel_loop(0, _COLS, step=_LANES)
            def _(c):
                body(c, buf, out, sem)

            pltpu.sync_copy(out, o_hbm.at[pl.ds(me * _ROWS, _ROWS)])

        pl.run_scoped(
            scoped,
            pltpu.VMEM((_ROWS, _COLS), jnp.int32),
            pltpu.VMEM((_ROWS, _COLS + _LANES), jnp.int32),
            pltpu.SemaphoreType.DMA,
        )

    return kernel


def _index_in_arithmetic(c, buf, out, sem):
    out[0, pl.ds(c, _LANES)] = buf[0, pl.ds(c, _LANES)] + c


def _whole_row_read_of_a_written_ref(c, buf, out, sem):
    out[0, pl.ds(c, _LANES)] = buf[0, pl.ds(c, _LANES)] + out[1, pl.ds(0, _LANES)]


def _slice_narrower_than_step(c, buf, out, sem):
    out[0, pl.ds(c, _LANES // 2)] = buf[0, pl.ds(c, _LANES // 2)] * 3


def _dma_inside(c, buf, out, sem):
    copy = pltpu.make_async_copy(buf.at[0, pl.ds(c, _LANES)], out.at[2, pl.ds(c, _LANES)], sem)
    copy.start()
    copy.wait()


def _float_transcendental(c, buf, out, sem):
    x = buf[0, pl.ds(c, _LANES)].astype(jnp.float32) * 1e-6
    out[0, pl.ds(c, _LANES)] = lax.bitcast_convert_type(jnp.exp(x), jnp.int32)


@needs_sparse_core
@pytest.mark.parametrize(
    "body",
    [
        _index_in_arithmetic,
        _whole_row_read_of_a_written_ref,
        _slice_narrower_than_step,
        _dma_inside,
        _float_transcendental,
    ],
)
def test_loops_that_may_see_other_iterations_keep_them(body, monkeypatch):
    x = np.random.default_rng(5).integers(-(2**20), 2**20, (4 * _ROWS, _COLS)).astype(np.int32)
    shape = jax.ShapeDtypeStruct((4 * _ROWS, _COLS + _LANES), jnp.int32)
    wide, seen = _run(_shift_kernel(body), shape, x, widen=True, monkeypatch=monkeypatch)
    loop, _ = _run(_shift_kernel(body), shape, x, widen=False, monkeypatch=monkeypatch)
    assert seen and not any(seen), seen
    np.testing.assert_array_equal(wide, loop)


@needs_sparse_core
def test_reads_of_a_read_only_ref_and_of_own_columns_widen(monkeypatch):
    """Reading the same columns of several rows, an element of a ref the
    loop never writes, and columns the iteration itself just stored, is
    safe: every iteration still touches only its own columns of what the
    loop writes."""

    def body(c, buf, out, sem):
        cols = pl.ds(c, _LANES)
        out[3, cols] = buf[1, cols] - buf[2, cols] + buf[4, 5]
        out[5, cols] = out[3, cols] * 2
        acc = jnp.zeros((_LANES,), jnp.int32)  # a broadcast literal beside lane values
        out[6, cols] = acc | buf[6, cols]

    x = np.random.default_rng(9).integers(-(2**20), 2**20, (4 * _ROWS, _COLS)).astype(np.int32)
    shape = jax.ShapeDtypeStruct((4 * _ROWS, _COLS + _LANES), jnp.int32)
    wide, seen = _run(_shift_kernel(body), shape, x, widen=True, monkeypatch=monkeypatch)
    assert seen and all(seen), seen
    blocks = x.reshape(4, _ROWS, _COLS)
    expected = blocks[:, 1] - blocks[:, 2] + blocks[:, 4, 5:6]
    got = wide.reshape(4, _ROWS, -1)
    np.testing.assert_array_equal(got[:, 3, :_COLS], expected)
    np.testing.assert_array_equal(got[:, 5, :_COLS], expected * 2)
    np.testing.assert_array_equal(got[:, 6, :_COLS], blocks[:, 6])
