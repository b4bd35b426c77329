"""A kernel's own loads of VMEM outside the buffer, as on a TPU (default
``out_of_bounds_reads="tpu"``).

A TPU's load units do not bounds-check: a software-pipelined loop that
loads the row after the current one as the next trip's operand reads one
row past the end on its last trip and never uses it (tpu-inference's MLA v2
kernel does). The TPU runs such a kernel; stock's bounds check fails it.
Ours reads the part outside as uninitialized memory, reports the load once
per source line as misuse, and fails it under ``out_of_bounds_reads="raise"``
(stock's default); a DMA reading outside its source fails either way, as
the TPU's DMA engine checks.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.jax_internals import pallas_load

ROWS, COLS = 8, 128
MODES = ("eager", "on_wait")


def _x(rows=ROWS):
    return np.arange(rows * COLS, dtype=np.float32).reshape(rows, COLS) / 7


def _prefetch_next_row(interpret):
    # out[i] = 2 * x[i], with x[i + 1] loaded a trip ahead: the last trip
    # loads row ROWS (past the end) and the loop's result drops it.
    def kernel(x_ref, o_ref):
        def body(i, nxt):
            cur = nxt
            nxt = x_ref[pl.ds(i + 1, 1), :]
            o_ref[pl.ds(i, 1), :] = cur * 2.0
            return nxt

        lax.fori_loop(0, ROWS, body, x_ref[pl.ds(0, 1), :])

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=interpret,
    )(_x())


@pytest.mark.parametrize("mode", MODES)
def test_a_discarded_load_past_the_end_runs_as_on_a_tpu(mode):
    params = mosaic_rt.InterpretParams(dma_execution_mode=mode, python_warnings=True)
    with pytest.warns(mosaic_rt.MisuseWarning) as record:
        out = np.asarray(jax.block_until_ready(_prefetch_next_row(params)))
    np.testing.assert_array_equal(out, _x() * 2.0)
    loads = [str(w.message) for w in record if "load of VMEM buffer" in str(w.message)]
    assert len(loads) == 1, loads  # ROWS trips, one source line: one report
    assert "reading [(slice(8, 9, 1), slice(0, 128, 1))] outside its shape (8, 128)" in loads[0], loads[0]
    assert "test_unchecked_loads.py:" in loads[0], loads[0]


def test_raise_keeps_the_bounds_check_and_stock_has_it():
    with pytest.raises(IndexError, match=r"Out-of-bounds read of \(0 0 vmem \d+\): reading \[\(slice\(8, 9, 1\)"):
        with mosaic_rt.native_errors():
            jax.block_until_ready(_prefetch_next_row(mosaic_rt.InterpretParams(out_of_bounds_reads="raise")))
    with pytest.raises(Exception, match="Out-of-bounds read"):
        jax.block_until_ready(_prefetch_next_row(pltpu.InterpretParams()))


def _read_rows(start, params, *, dtype=jnp.float32):
    def kernel(off_ref, x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(off_ref[0], 8), :]

    x = (np.arange(16 * COLS).reshape(16, COLS) % 100).astype(dtype)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, COLS), dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        interpret=params,
    )(jnp.array([start], jnp.int32), x)
    return np.asarray(jax.block_until_ready(out)), x


@pytest.mark.parametrize(
    "fill, dtype, want",
    [("nan", jnp.float32, np.nan), ("zero", jnp.float32, 0.0), ("nan", jnp.int32, np.iinfo(np.int32).max)],
)
def test_the_part_outside_reads_as_uninitialized_memory(fill, dtype, want):
    params = mosaic_rt.InterpretParams(uninitialized_memory=fill, python_warnings=True)
    with pytest.warns(mosaic_rt.MisuseWarning, match=r"load of VMEM buffer .* outside its shape \(16, 128\)"):
        out, x = _read_rows(12, params, dtype=dtype)
    np.testing.assert_array_equal(out[:4], x[12:])  # rows 12..15 are read
    np.testing.assert_array_equal(out[4:], np.full((4, COLS), want, out.dtype))


def test_in_bounds_loads_report_nothing():
    params = mosaic_rt.InterpretParams(python_warnings=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mosaic_rt.MisuseWarning)
        out, x = _read_rows(8, params)
    np.testing.assert_array_equal(out, x[8:])


def test_a_selected_masked_element_outside_reads_as_uninitialized_memory():
    def kernel(x_ref, o_ref):
        start = pl.program_id(0) + 4  # dynamic: jax rejects a static slice outside
        rows = lax.broadcasted_iota(jnp.int32, (ROWS, COLS), 0) + start
        # Rows 4..11 of a 10-row buffer, every one selected: 10 and 11 lie outside.
        o_ref[...] = pallas_load(x_ref, (pl.ds(start, ROWS), slice(None)), mask=rows >= 0)

    x = _x(10)
    params = mosaic_rt.InterpretParams(uninitialized_memory="zero", python_warnings=True)
    with pytest.warns(mosaic_rt.MisuseWarning, match=r"masked load of VMEM buffer .* outside its shape \(10, 128\)"):
        out = pl.pallas_call(
            kernel,
            grid=(1,),
            out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32),
            in_specs=[pl.BlockSpec((10, COLS), lambda i: (0, 0))],
            interpret=params,
        )(x)
        out = np.asarray(jax.block_until_ready(out))
    np.testing.assert_array_equal(out[:6], x[4:])
    np.testing.assert_array_equal(out[6:], np.zeros((2, COLS), np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_a_dma_reading_past_its_source_still_fails(mode):
    # The TPU's DMA engine checks bounds: an unchecked load is no licence
    # for a DMA.
    def kernel(off_ref, x_ref, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(off_ref[0], 8)], buf, sem)
        copy.start()
        copy.wait()
        o_ref[...] = buf[...]

    with pytest.raises(IndexError, match=r"Out-of-bounds read of \(0 0 vmem \d+\)"):
        with mosaic_rt.native_errors():
            out = pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((8, COLS), jnp.float32),
                in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
                scratch_shapes=[pltpu.VMEM((8, COLS), jnp.float32), pltpu.SemaphoreType.DMA(())],
                interpret=mosaic_rt.InterpretParams(dma_execution_mode=mode),
            )(jnp.array([12], jnp.int32), _x(16))
            jax.block_until_ready(out)


def test_the_raw_runtime_error_names_the_kernel_line():
    # Outside `native_errors` the error is jax's JaxRuntimeError; its text
    # still says which line of the kernel failed.
    with pytest.raises(
        jax.errors.JaxRuntimeError,
        match=r"Out-of-bounds read(.|\n)*raised by the kernel op at .*test_unchecked_loads.py:\d+",
    ):
        _read_rows(12, mosaic_rt.InterpretParams(out_of_bounds_reads="raise"))
