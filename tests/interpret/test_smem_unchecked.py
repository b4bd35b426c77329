"""Scalar reads of SMEM outside the buffer follow the TPU: no bounds check.

A TPU's scalar core loads the word at the computed address; kernels read
past an SMEM array's ends and discard the value (tpu-inference's fused MoE
reads ``sizes[e - 2]`` at e = 0 under a select). Ours returns the
uninitialized-memory value, reports the read once per source line as
misuse, and the kernel's result is the TPU's; stock's bounds check fails
such a kernel. DMAs keep their bounds checks (the TPU checks DMAs);
``out_of_bounds_reads="raise"`` keeps stock's check for these reads too, and
vector loads follow ``out_of_bounds_reads`` (test_unchecked_loads.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _masked_lookback(params, shift, dtype=jnp.int32):
    # out[i] = sizes[r, i - shift] where that index exists, else 0: the
    # read happens for every i, the select discards the outside ones.
    def kernel(sizes_ref, o_ref):
        for r in range(2):
            for i in range(8):
                j = jnp.int32(i) - shift
                v = sizes_ref[r, j]
                o_ref[r, i] = lax.select(jnp.logical_and(j >= 0, j < 8), v, jnp.zeros((), dtype))

    sizes = (jnp.arange(16, dtype=jnp.int32).reshape(2, 8) + 1).astype(dtype)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 8), dtype),
        in_specs=[_SMEM],
        out_specs=_SMEM,
        interpret=params,
    )(sizes)
    return np.asarray(out), np.asarray(sizes)


def _expected(sizes, shift):
    out = np.zeros_like(sizes)
    for i in range(8):
        j = i - shift
        if 0 <= j < 8:
            out[:, i] = sizes[:, j]
    return out


@pytest.mark.parametrize("shift", [2, -3])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.float32])
def test_a_discarded_read_outside_an_smem_array_runs_as_on_a_tpu(shift, dtype):
    with pytest.warns(mosaic_rt.MisuseWarning, match=r"scalar read of SMEM buffer .* outside its shape \(2, 8\)"):
        out, sizes = _masked_lookback(mosaic_rt.InterpretParams(python_warnings=True), shift, dtype)
    np.testing.assert_array_equal(out, _expected(sizes, shift))


def test_the_read_returns_the_uninitialized_memory_value():
    def kernel(s_ref, o_ref):
        o_ref[0] = s_ref[jnp.int32(-1)]
        o_ref[1] = s_ref[jnp.int32(4)]
        o_ref[2] = s_ref[jnp.int32(3)]

    def run(fill):
        params = mosaic_rt.InterpretParams(uninitialized_memory=fill, python_warnings=True)
        with pytest.warns(mosaic_rt.MisuseWarning):
            return pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((3,), jnp.int32),
                in_specs=[_SMEM],
                out_specs=_SMEM,
                interpret=params,
            )(jnp.array([5, 6, 7, 8], jnp.int32))

    assert np.asarray(run("nan")).tolist() == [np.iinfo(np.int32).max, np.iinfo(np.int32).max, 8]
    assert np.asarray(run("zero")).tolist() == [0, 0, 8]


def test_one_report_per_source_line():
    params = mosaic_rt.InterpretParams(python_warnings=True)
    with pytest.warns(mosaic_rt.MisuseWarning) as record:
        _masked_lookback(params, 2)
    smem = [w for w in record if "scalar read of SMEM" in str(w.message)]
    # 16 reads outside (2 rows x 2 at each end... shift 2: i = 0, 1 per row),
    # all from one line of the kernel.
    assert len(smem) == 1, [str(w.message) for w in smem]
    assert "test_smem_unchecked.py:" in str(smem[0].message)


def test_vector_reads_outside_keep_the_bounds_check_under_raise():
    def kernel(s_ref, o_ref):
        o_ref[...] = s_ref[pl.ds(jnp.int32(6), 4)]

    with pytest.raises(IndexError, match="Out-of-bounds read"):
        with mosaic_rt.native_errors():
            out = pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((4,), jnp.int32),
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                interpret=mosaic_rt.InterpretParams(out_of_bounds_reads="raise"),
            )(jnp.arange(8, dtype=jnp.int32))
            jax.block_until_ready(out)


@pytest.mark.parametrize("shift", [2, -3])
def test_raise_makes_the_scalar_read_outside_an_error(shift):
    # Asked for explicitly, stock's bounds check holds at both ends (JAX's
    # own test_out_of_bounds_read_index passes "raise" and expects it).
    with pytest.raises(IndexError, match=r"Out-of-bounds read of \(0 0 smem \d+\)"):
        with mosaic_rt.native_errors():
            out, _ = _masked_lookback(mosaic_rt.InterpretParams(out_of_bounds_reads="raise"), shift)
            jax.block_until_ready(out)


def test_stock_fails_the_kernel_the_tpu_runs_past_the_end():
    # Stock's bounds check rejects reads past the end (before the start, it
    # wraps around like a numpy index).
    with pytest.raises(Exception, match=r"Out-of-bounds read of \(0 0 smem \d+\): reading \[\(0, 8\)\]"):
        out, _ = _masked_lookback(pltpu.InterpretParams(), -3)
        jax.block_until_ready(out)
