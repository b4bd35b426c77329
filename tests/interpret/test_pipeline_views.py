"""Kernels that hand views of refs to nested `pltpu.emit_pipeline`s and
allocate refs in the kernel body (`jax.empty_ref` / `jax.new_ref`), with
and without the emit_pipeline primitive: a pipeline's window of a view is
a view of a view (composed, the outer first), a bitcast view in the chain
addresses the buffer underneath, and index arithmetic of mixed integer
types holds under strict dtype promotion. numpy is the oracle.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax._src import config as jax_config
from jax._src.state import utils as state_utils
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

PARAMS = mosaic_rt.InterpretParams()
PRIMITIVE = [pytest.param(False, id="traced"), pytest.param(True, id="primitive")]


@pytest.fixture(autouse=True, scope="module")
def _tpu():
    with mosaic_rt.simulate_tpu("v5e", disable=("devices",)):
        yield


def _kernel_call(body, out_shape, n_in):
    return pl.pallas_call(
        body,
        out_shape=out_shape,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * n_in,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=PARAMS,
    )


@pytest.mark.parametrize("primitive", PRIMITIVE)
def test_nested_pipelines_over_a_view_with_a_kernel_allocated_scratch(primitive):
    def kernel(x_ref, y_ref, o_ref):
        x_view = x_ref.at[1]  # (16, 2048) of (2, 16, 2048)
        scratch = jax.empty_ref(jax.ShapeDtypeStruct((16, 256), jnp.float32), pltpu.VMEM)

        def outer(outer_x, outer_o):
            pltpu.sync_copy(y_ref, scratch)

            def inner(x, o):
                o[...] = x[...] * 2.0 + scratch[...]

            spec = pl.BlockSpec((16, 256), lambda i: (0, i))
            pltpu.emit_pipeline(inner, grid=(2,), in_specs=[spec], out_specs=[spec])(outer_x, outer_o)

        spec = pl.BlockSpec((16, 512), lambda i: (0, i))
        pltpu.emit_pipeline(outer, grid=(4,), in_specs=[spec], out_specs=[spec])(x_view, o_ref)

    x = jnp.arange(2 * 16 * 2048, dtype=jnp.float32).reshape(2, 16, 2048)
    y = jnp.full((16, 256), 0.5, jnp.float32)
    with jax_config.use_emit_pipeline_primitive(primitive):
        out = jax.jit(_kernel_call(kernel, jax.ShapeDtypeStruct((16, 2048), jnp.float32), 2))(x, y)
    np.testing.assert_array_equal(out, np.asarray(x[1]) * np.float32(2.0) + np.float32(0.5))


@pytest.mark.parametrize("primitive", PRIMITIVE)
def test_window_of_a_bitcast_view_addresses_the_buffer_underneath(primitive):
    def kernel(x_ref, o_ref):
        def outer(outer_x, outer_o):
            src = outer_x.at[0:32, :].bitcast(jnp.int16)  # (64, 128) int16
            dst = outer_o.bitcast(jnp.int16)  # (64, 128) int16

            def inner(x, o):
                o[...] = x[...]

            spec = pl.BlockSpec((16, 128), lambda i: (i, 0))
            pltpu.emit_pipeline(inner, grid=(4,), in_specs=[spec], out_specs=[spec])(src, dst)

        pltpu.emit_pipeline(
            outer,
            grid=(2,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
            out_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
        )(x_ref, o_ref)

    x = jnp.arange(128 * 128, dtype=jnp.float32).reshape(128, 128)
    with jax_config.use_emit_pipeline_primitive(primitive):
        out = jax.jit(_kernel_call(kernel, jax.ShapeDtypeStruct((64, 128), jnp.float32), 1))(x)
    # Rows 0:32 of each 64-row input block, bit for bit.
    expected = np.concatenate([np.asarray(x)[0:32], np.asarray(x)[64:96]])
    np.testing.assert_array_equal(np.asarray(state_utils.bitcast(out, jnp.int32)), expected.view(np.int32))


def test_new_ref_in_a_kernel_holds_its_value_and_is_written_through():
    def kernel(x_ref, o_ref):
        acc = jax.new_ref(jnp.full((8, 128), 3.0, jnp.float32), memory_space=pltpu.VMEM)
        acc[...] += x_ref[...]
        o_ref[...] = acc[...]

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    out = jax.jit(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=PARAMS))(x)
    np.testing.assert_array_equal(out, np.asarray(x) + np.float32(3.0))


def test_views_indexed_with_uint32_under_strict_dtype_promotion():
    def kernel(x_ref, o_ref):
        start = jnp.uint32(8)
        view = x_ref.at[pl.ds(start, 16)]
        o_ref[...] = view.at[pl.ds(jnp.int32(4), 8)][...]

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    with jax.numpy_dtype_promotion("strict"):
        out = jax.jit(
            pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                interpret=PARAMS,
            )
        )(x)
    np.testing.assert_array_equal(out, np.asarray(x)[12:20])
