"""Masked loads (`pl.load(..., mask=..., other=...)`, `pltpu.load(ref,
mask=...)`) and non-decrementing semaphore waits
(`pl.semaphore_wait(sem, v, decrement=False)`), which stock interpret mode
and the Mosaic TPU lowering both reject with NotImplementedError.

The semantics checked (see `jaxpr_eval._masked_load_view` and
`_semaphore_wait`):

* a masked load reads only the selected elements; a masked-off element
  holds `other` when given (the discharge rule's `jnp.where(mask, out,
  other)`), else uninitialized memory (`uninitialized_memory`: NaN / the
  integer max, or 0), since `pl.load` promises nothing for it. Masked-off
  elements are never read, so they may lie out of bounds (as a masked swap's
  may, in stock and in the lowering's `tpu.vector_store(mask=...)`): no
  IndexError under `out_of_bounds_reads="raise"`; a SELECTED element out of
  bounds is one.
* a non-decrementing wait blocks until count >= value and leaves the count
  (the discharge rule's and Mosaic GPU's meaning); it is a native wait like
  any other: it parks until signalled, runs DMAs queued on the semaphore,
  is seen by deadlock detection and `wait_timeout`, and orders the waiter
  after the signal for race detection.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from core_mesh import core_mesh
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt.jax_internals import pallas_load

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

MODES = ("on_wait", "eager")
ROWS, COLS = 8, 128
_F32 = jnp.float32
_I32_MAX = np.iinfo(np.int32).max


def _sds(shape, dtype=_F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def _any():
    return pl.BlockSpec(memory_space=pl.ANY)


def _params(mode, **kw):
    return mosaic_rt.InterpretParams(dma_execution_mode=mode, **kw)


def _run(fn):
    with mosaic_rt.native_errors():
        return np.asarray(jax.block_until_ready(fn()))


# ------------------------------------------------------------ masked load


def _col_mask(n):
    return lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 1) < n


def _via_dma(body):
    """A kernel that DMAs x (HBM) into VMEM, then runs ``body(buf, o_ref)``
    (so both DMA modes matter: the load must see the DMA's data)."""

    def kernel(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm, buf, sem).start()
        pltpu.make_async_copy(x_hbm, buf, sem).wait()
        body(buf, o_ref)

    return kernel


def _x(rows=ROWS, dtype=np.float32):
    return np.arange(rows * COLS).reshape(rows, COLS).astype(dtype)


@pytest.mark.parametrize("mode", MODES)
def test_masked_load_with_other(mode):
    def body(buf, o_ref):
        o_ref[...] = pallas_load(buf, (slice(None), slice(None)), mask=_col_mask(100), other=-1.0)

    x = _x()
    call = pl.pallas_call(
        _via_dma(body),
        out_shape=_sds(x.shape),
        in_specs=[_any()],
        scratch_shapes=[pltpu.VMEM(x.shape, _F32), pltpu.SemaphoreType.DMA],
        interpret=_params(mode),
    )
    out = _run(lambda: call(x))
    cols = np.arange(COLS)[None, :]
    np.testing.assert_array_equal(out, np.where(cols < 100, x, -1.0))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fill", ["nan", "zero"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_masked_load_without_other_gives_uninitialized_memory(mode, fill, dtype):
    # pltpu.load: the public masked load (no `other`).
    def body(buf, o_ref):
        o_ref[...] = pltpu.load(buf, mask=_col_mask(37))

    x = _x(dtype=dtype)
    call = pl.pallas_call(
        _via_dma(body),
        out_shape=_sds(x.shape, dtype),
        in_specs=[_any()],
        scratch_shapes=[pltpu.VMEM(x.shape, dtype), pltpu.SemaphoreType.DMA],
        interpret=_params(mode, uninitialized_memory=fill),
    )
    out = _run(lambda: call(x))
    np.testing.assert_array_equal(out[:, :37], x[:, :37])
    if fill == "zero":
        want = 0
    else:
        want = np.nan if dtype == np.float32 else _I32_MAX
    np.testing.assert_array_equal(out[:, 37:], np.full((ROWS, COLS - 37), want, dtype))


def _tail_kernel(*, other, selected_rows):
    """Loads rows [4, 12) of a 10-row VMEM buffer (a dynamic start: rows 10,
    11 are out of bounds), selecting rows < ``selected_rows``."""

    def kernel(x_ref, o_ref, buf):
        buf[...] = x_ref[...]
        start = pl.program_id(0) + 4
        rows = lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 0) + start
        mask = rows < selected_rows
        kw = {} if other is None else {"other": other}
        o_ref[...] = pallas_load(buf, (pl.ds(start, ROWS), slice(None)), mask=mask, **kw)

    return kernel


def _tail_call(mode, oob, *, other=None, selected_rows=10):
    x = _x(10)
    call = pl.pallas_call(
        _tail_kernel(other=other, selected_rows=selected_rows),
        grid=(1,),
        out_shape=_sds((ROWS, COLS)),
        scratch_shapes=[pltpu.VMEM((10, COLS), _F32)],
        interpret=_params(mode, out_of_bounds_reads=oob),
    )
    return x, lambda: call(x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("oob", ["raise", "uninitialized"])
@pytest.mark.parametrize("other", [None, 7.0])
def test_masked_off_out_of_bounds_rows_are_not_read(mode, oob, other):
    x, run = _tail_call(mode, oob, other=other)
    out = _run(run)  # no IndexError: rows 10, 11 are masked off
    np.testing.assert_array_equal(out[:6], x[4:10])
    want = np.nan if other is None else other
    np.testing.assert_array_equal(out[6:], np.full((2, COLS), want, np.float32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("selected_rows", [10, 7])
def test_masked_load_with_other_matches_the_discharge_rule(mode, selected_rows):
    # `interpret=True` runs the kernel through the primitives' discharge
    # rules (`jnp.where(mask, out, other)`): with `other` every element is
    # defined, so the two must agree bit for bit.
    def kernel(x_ref, o_ref):
        start = pl.program_id(0) + 4
        rows = lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 0) + start
        cols = lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 1)
        mask = (rows < selected_rows) & (cols % 3 != 0)
        o_ref[...] = pallas_load(x_ref, (pl.ds(start, ROWS), slice(None)), mask=mask, other=-0.5)

    x = _x(10)

    def call(interpret):
        return pl.pallas_call(
            kernel,
            grid=(1,),
            out_shape=_sds((ROWS, COLS)),
            in_specs=[pl.BlockSpec((10, COLS), lambda i: (0, 0))],
            interpret=interpret,
        )(x)

    ours = _run(lambda: call(_params(mode, out_of_bounds_reads="raise")))
    np.testing.assert_array_equal(ours, np.asarray(call(True)))


@pytest.mark.parametrize("mode", MODES)
def test_selected_out_of_bounds_element_raises_index_error(mode):
    _, run = _tail_call(mode, "raise", selected_rows=11)  # row 10 selected
    with pytest.raises(IndexError, match=r"Out-of-bounds masked read .*shape \(10, 128\)"):
        _run(run)


@pytest.mark.parametrize("mode", MODES)
def test_selected_out_of_bounds_element_reads_fill_when_uninitialized(mode):
    x, run = _tail_call(mode, "uninitialized", other=3.0, selected_rows=12)
    out = _run(run)
    np.testing.assert_array_equal(out[:6], x[4:10])
    # Selected but out of bounds: the fill value, as an unmasked read's.
    assert np.isnan(out[6:]).all()


@pytest.mark.parametrize("mode", MODES)
def test_masked_load_from_a_reshaped_view(mode):
    # A view the native region cannot express: the mask is carried back to
    # the buffer through the reshape.
    def kernel(x_ref, o_ref, buf):
        buf[...] = x_ref[...]
        view = buf.reshape(ROWS * 2, COLS // 2)
        mask = lax.broadcasted_iota(jnp.int32, (ROWS * 2, COLS // 2), 0) % 2 == 0
        o_ref[...] = pallas_load(view, (slice(None), slice(None)), mask=mask, other=-2.0)

    x = _x()
    try:
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((ROWS * 2, COLS // 2)),
            scratch_shapes=[pltpu.VMEM(x.shape, _F32)],
            interpret=_params(mode),
        )
        out = _run(lambda: call(x))
    except (AttributeError, NotImplementedError) as e:  # no ref.reshape in this jax
        pytest.skip(f"ref.reshape is not usable in jax {jax.__version__}: {e}")
    view = x.reshape(ROWS * 2, COLS // 2)
    rows = np.arange(ROWS * 2)[:, None]
    np.testing.assert_array_equal(out, np.where(rows % 2 == 0, view, -2.0))


def test_masked_off_elements_are_not_checked_by_initcheck():
    def kernel(o_ref, buf):
        buf[:, 0:64] = jnp.ones((ROWS, 64), _F32)  # columns 64: never written
        o_ref[...] = pallas_load(buf, (slice(None), slice(None)), mask=_col_mask(64), other=0.0)

    call = pl.pallas_call(
        kernel,
        out_shape=_sds((ROWS, COLS)),
        scratch_shapes=[pltpu.VMEM((ROWS, COLS), _F32)],
        interpret=mosaic_rt.InterpretParams(detect_uninitialized=True),
    )
    out = _run(call)
    np.testing.assert_array_equal(out, np.where(np.arange(COLS) < 64, 1.0, 0.0)[None].repeat(8, 0))

    def reads_unwritten(o_ref, buf):
        buf[:, 0:64] = jnp.ones((ROWS, 64), _F32)
        o_ref[...] = pallas_load(buf, (slice(None), slice(None)), mask=_col_mask(65), other=0.0)

    call = pl.pallas_call(
        reads_unwritten,
        out_shape=_sds((ROWS, COLS)),
        scratch_shapes=[pltpu.VMEM((ROWS, COLS), _F32)],
        interpret=mosaic_rt.InterpretParams(detect_uninitialized=True),
    )
    with pytest.raises(mosaic_rt.UninitializedReadError, match=r"8 of the 520 element"):
        _run(call)


def _simple(kernel):
    x = _x()
    return pl.pallas_call(kernel, out_shape=_sds(x.shape), interpret=mosaic_rt.InterpretParams())(x)


def test_a_non_boolean_mask_is_a_type_error():
    def kernel(x_ref, o_ref):
        o_ref[...] = pallas_load(x_ref, (slice(None), slice(None)), mask=_col_mask(3).astype(jnp.int32))

    with pytest.raises(TypeError, match="mask must be a boolean array, got dtype int32"):
        _simple(kernel)


def test_other_of_a_wider_dtype_is_a_type_error():
    def kernel(x_ref, o_ref):
        o_ref[...] = pallas_load(
            x_ref, (slice(None), slice(None)), mask=_col_mask(3), other=jnp.zeros((ROWS, COLS), jnp.int32)
        )

    x = _x().astype(np.int16)
    call = pl.pallas_call(kernel, out_shape=_sds(x.shape, jnp.int16), interpret=mosaic_rt.InterpretParams())
    with pytest.raises(TypeError, match="`other` of dtype int32 does not fit the loaded dtype"):
        call(x)


def test_other_of_a_wrong_shape_is_a_value_error():
    def kernel(x_ref, o_ref):
        o_ref[...] = pallas_load(x_ref, (slice(None), slice(None)), mask=_col_mask(3), other=jnp.zeros((3,), _F32))

    with pytest.raises(ValueError, match=r"cannot broadcast `other` of shape \(3,\)"):
        _simple(kernel)


# ---------------------------------------------- non-decrementing waits


@pytest.mark.parametrize("interpret", [*MODES, "discharge"])
def test_non_decrementing_wait_leaves_the_count(interpret):
    # "discharge": `interpret=True`, the primitives' discharge rules (a
    # non-decrementing wait leaves the semaphore's value).
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 3)
        pl.semaphore_wait(sem, 2, decrement=False)
        pl.semaphore_wait(sem, 3, decrement=False)  # still 3: not taken
        after = pl.semaphore_read(sem)
        pl.semaphore_wait(sem, 3)  # a normal wait takes it
        o_ref[...] = x_ref[...] * 0 + after.astype(_F32) * 10 + pl.semaphore_read(sem)

    x = _x()
    call = pl.pallas_call(
        kernel,
        out_shape=_sds(x.shape),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=True if interpret == "discharge" else _params(interpret),
    )
    np.testing.assert_array_equal(_run(lambda: call(x)), np.full(x.shape, 30.0, np.float32))


def _mesh(n):
    return Mesh(np.array(jax.devices()[:n]), ("x",))


@pytest.mark.parametrize("mode", MODES)
def test_non_decrementing_wait_across_devices(mode):
    # Every device reports to device 0 (barrier semaphore); once all have,
    # device 0 raises a flag on every device (a broadcast "go"). Each device
    # waits for the flag twice without taking it (a decrementing second wait
    # would never return), then takes it down, then DMAs its block to its
    # right neighbour -- who, the flag says, is running.
    n = 4

    def kernel(x_ref, o_ref, flag, send, recv):
        me = lax.axis_index("x")
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(0,), device_id_type=pl.DeviceIdType.MESH)

        @pl.when(me == 0)
        def _():
            pl.semaphore_wait(barrier, n)
            for d in range(n):
                pl.semaphore_signal(flag, 1, device_id=(d,), device_id_type=pl.DeviceIdType.MESH)

        pl.semaphore_wait(flag, 1, decrement=False)
        pl.semaphore_wait(flag, 1, decrement=False)
        seen = pl.semaphore_read(flag)
        pl.semaphore_wait(flag, 1)
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref, send, recv, device_id=(lax.rem(me + 1, n),), device_id_type=pl.DeviceIdType.MESH
        )
        copy.start()
        copy.wait()
        o_ref[0:1, :] = o_ref[0:1, :] + (seen - 1).astype(_F32)  # seen == 1

    def body(b):
        return pl.pallas_call(
            kernel,
            out_shape=_sds(b.shape),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=_params(mode, wait_timeout=60.0),
        )(b)

    mesh = _mesh(n)
    x = _x(n * ROWS)
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    out = _run(lambda: fn(jax.device_put(x, NamedSharding(mesh, P("x")))))
    np.testing.assert_array_equal(out, np.roll(x, ROWS, axis=0))


def test_non_decrementing_wait_nobody_signals_is_a_deadlock():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1, decrement=False)
        o_ref[...] = x_ref[...]

    x = _x()
    call = pl.pallas_call(
        kernel,
        out_shape=_sds(x.shape),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=mosaic_rt.InterpretParams(wait_timeout=30.0),
    )
    with pytest.raises(mosaic_rt.DeadlockError, match="waits on REGULAR semaphore"):
        _run(lambda: call(x))


def test_non_decrementing_wait_times_out():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 2, decrement=False)
        o_ref[...] = x_ref[...]

    x = _x()
    call = pl.pallas_call(
        kernel,
        out_shape=_sds(x.shape),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=mosaic_rt.InterpretParams(wait_timeout=0.3, detect_deadlocks=False),
    )
    with pytest.raises(mosaic_rt.WaitTimeout, match=r"waited 0.3s for count >= 2; count is 1"):
        _run(lambda: call(x))


def _two_cores(*, wait: bool):
    # Each TensorCore copies its block of x into the output, signals the
    # other core, waits (non-decrementing) for the other's signal, then
    # copies the OTHER core's block: ordered by the wait -- or not.
    cores = 2
    rows = 8

    def fn(interpret, x):
        mesh = core_mesh(cores)

        @pl.kernel(out_type=jax.ShapeDtypeStruct((2 * cores, rows, COLS), x.dtype), mesh=mesh, interpret=interpret)
        def run(x_hbm, o_hbm):
            c = lax.axis_index("core")

            def body(sem, copy_sem):
                pltpu.async_copy(x_hbm.at[c], o_hbm.at[cores + c], copy_sem).wait()
                pl.semaphore_signal(sem, 1, core_index=1 - c)
                if wait:
                    pl.semaphore_wait(sem, 1, decrement=False)
                pltpu.async_copy(o_hbm.at[cores + 1 - c], o_hbm.at[c], copy_sem).wait()
                # Take the count down (a leftover count is a leak).
                pl.semaphore_wait(sem, 1)

            pl.run_scoped(body, pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA(()))

        return run(x.reshape(cores, rows, COLS)).reshape(-1, COLS)

    return fn


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wait", [True, False], ids=["ordered", "unordered"])
def test_non_decrementing_wait_orders_cores_for_race_detection(mode, wait):
    x = _x(2 * ROWS)
    params = mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn")
    out = _run(lambda: _two_cores(wait=wait)(params, x))
    assert mosaic_rt.races.races_found == (not wait), mosaic_rt.races.reports()
    if wait:
        np.testing.assert_array_equal(out[: 2 * ROWS], np.concatenate([x[ROWS:], x[:ROWS]]))
        np.testing.assert_array_equal(out[2 * ROWS :], x)


def test_a_traced_decrement_is_a_type_error():
    from jax import tree_util
    from mosaic_rt.jax_internals import semaphore_wait_p

    def kernel(x_ref, o_ref, sem):
        flat, tree = tree_util.tree_flatten([sem, [], jnp.int32(1), x_ref[0, 0] > 0])
        semaphore_wait_p.bind(*flat, args_tree=tree)
        o_ref[...] = x_ref[...]

    x = _x()
    call = pl.pallas_call(
        kernel,
        out_shape=_sds(x.shape),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=mosaic_rt.InterpretParams(),
    )
    with pytest.raises(TypeError, match="`decrement` must be a Python bool"):
        call(x)


# ------------------------------------------- beyond stock (was a parity case)


def _stock_masked_load(params):
    x = np.arange(ROWS * COLS, dtype=np.int32).reshape(ROWS, COLS)

    def kernel(x_ref, o_ref):
        mask = lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 0) < 4
        o_ref[...] = pltpu.load(x_ref, mask=mask)

    return x, lambda: pl.pallas_call(kernel, out_shape=_sds(x.shape, jnp.int32), interpret=params)(x)


def _stock_non_decrementing_wait(params):
    def kernel(o_ref):
        def body(sem):
            pl.semaphore_signal(sem, 1)
            pl.semaphore_wait(sem, 1, decrement=False)
            pl.semaphore_wait(sem, 1)
            o_ref[0] = 1

        pl.run_scoped(body, pltpu.SemaphoreType.REGULAR)

    return lambda: pl.pallas_call(
        kernel, out_shape=_sds((1,), jnp.int32), out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=params
    )()


@pytest.mark.parametrize("mode", MODES)
def test_stock_rejects_what_ours_runs(mode):
    # Stock interpret mode raises NotImplementedError for both (as the
    # Mosaic TPU lowering does); ours runs them with the semantics above.
    stock = pltpu.InterpretParams(dma_execution_mode=mode)
    _, run = _stock_masked_load(stock)
    with pytest.raises(Exception, match="masked load_p"):
        jax.block_until_ready(run())
    with pytest.raises(Exception, match="Non-decrementing wait is not supported"):
        jax.block_until_ready(_stock_non_decrementing_wait(stock)())

    ours = _params(mode)
    x, run = _stock_masked_load(ours)
    out = _run(run)
    np.testing.assert_array_equal(out[:4], x[:4])
    np.testing.assert_array_equal(out[4:], np.full((4, COLS), _I32_MAX, np.int32))
    np.testing.assert_array_equal(_run(_stock_non_decrementing_wait(ours)), [1])
