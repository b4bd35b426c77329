"""`pltpu.emit_pipeline` as a primitive (jax's `jax_use_emit_pipeline_primitive`)
on every supported jax: jax 0.12 expands the primitive itself; before 0.12
only its TPU lowering rule did, and mosaic_rt builds the same pipeline from
the equation. The primitive form gives the bits of the traced form and of
numpy, with the pipeline's own grid position inside the body.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax._src import config as jax_config
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

PARAMS = mosaic_rt.InterpretParams()


@pytest.fixture(autouse=True, scope="module")
def _tpu():
    # emit_pipeline sizes its buffers from the chip's TPU info.
    with mosaic_rt.simulate_tpu("v5e", disable=("devices",)):
        yield


def _both(call, *args):
    """The kernel's result with the primitive off and on."""
    out = []
    for primitive in (False, True):
        with jax_config.use_emit_pipeline_primitive(primitive):
            out.append(np.asarray(jax.jit(call)(*args)))
    return out


def _hbm_call(kernel, out_shape, n_in):
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * n_in,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=PARAMS,
    )


def test_elementwise_pipeline_sees_its_step_in_program_id():
    def kernel(x_hbm, o_hbm):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0 + (10 * pl.program_id(0) + pl.program_id(1)).astype(jnp.float32)

        spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
        pltpu.emit_pipeline(body, grid=(3, 2), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)

    x = jnp.asarray(np.random.default_rng(0).standard_normal((24, 256), dtype=np.float32))
    off, on = _both(_hbm_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), 1), x)
    steps = (10 * np.repeat(np.arange(3), 8)[:, None] + np.repeat(np.arange(2), 128)[None, :]).astype(np.float32)
    np.testing.assert_array_equal(off, np.asarray(x) * np.float32(2.0) + steps)
    np.testing.assert_array_equal(on, off)


def test_matmul_pipeline_accumulates_over_its_reduction_axis():
    m, k, n, bm, bk, bn = 32, 256, 256, 16, 128, 128

    def kernel(x_hbm, y_hbm, o_hbm):
        def body(x_ref, y_ref, o_ref):
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)

            o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        pltpu.emit_pipeline(
            body,
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=[pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))],
        )(x_hbm, y_hbm, o_hbm)

    rng = np.random.default_rng(1)
    # Small integers: every partial sum is exact in f32, whatever the order.
    x = jnp.asarray(rng.integers(-4, 5, (m, k)).astype(np.float32))
    y = jnp.asarray(rng.integers(-4, 5, (k, n)).astype(np.float32))
    off, on = _both(_hbm_call(kernel, jax.ShapeDtypeStruct((m, n), jnp.float32), 2), x, y)
    np.testing.assert_array_equal(off, np.asarray(x) @ np.asarray(y))
    np.testing.assert_array_equal(on, off)


def test_pipeline_inside_a_kernel_grid_uses_the_outer_step_outside_the_body():
    def kernel(x_hbm, o_hbm):
        outer = pl.program_id(0)

        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] + (100 * outer + pl.program_id(0)).astype(jnp.float32)

        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        half = x_hbm.shape[0] // 2
        rows = pl.ds(pl.multiple_of(outer * half, 8), half)
        pltpu.emit_pipeline(body, grid=(half // 8,), in_specs=[spec], out_specs=[spec])(x_hbm.at[rows], o_hbm.at[rows])

    x = jnp.zeros((32, 128), jnp.float32)
    call = pl.pallas_call(
        kernel,
        grid=(2,),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=PARAMS,
    )
    off, on = _both(call, x)
    expected = np.repeat(100 * np.repeat(np.arange(2), 2) + np.tile(np.arange(2), 2), 8)[:, None]
    np.testing.assert_array_equal(off, np.broadcast_to(expected, x.shape).astype(np.float32))
    np.testing.assert_array_equal(on, off)
