"""``jax_pallas_poison_buffers``: buffers a kernel allocates start poisoned
(NaN, the integer minimum of the element's width, True), as the TPU
lowering fills them; stock ignores the flag (a README difference)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


@pytest.fixture
def poisoned():
    before = jax.config.jax_pallas_poison_buffers
    jax.config.update("jax_pallas_poison_buffers", True)
    yield
    jax.config.update("jax_pallas_poison_buffers", before)


def _read_scratch_unwritten(dtype, params):
    """A run_scoped VMEM scratch read before anything writes it."""

    def kernel(o_ref):
        def body(scratch):
            o_ref[...] = scratch[...]

        pl.run_scoped(body, pltpu.VMEM((8, 128), dtype))

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), dtype), interpret=params)()


POISON = [
    (jnp.float32, np.nan),
    (jnp.bfloat16, np.nan),
    (jnp.int32, -(2**31)),
    (jnp.int16, -(2**15)),
    (jnp.int8, -128),
    (jnp.uint8, 128),
    (jnp.uint32, 2**31),
    (jnp.bool_, True),
]


@pytest.mark.parametrize(("dtype", "want"), POISON, ids=lambda x: getattr(x, "__name__", str(x)))
def test_run_scoped_scratch_starts_poisoned(poisoned, dtype, want):
    out = np.asarray(_read_scratch_unwritten(dtype, mosaic_rt.InterpretParams()))
    if isinstance(want, float) and np.isnan(want):
        assert np.isnan(out.astype(np.float32)).all()
    else:
        assert (out == np.asarray(want).astype(out.dtype)).all(), out[0, :4]


def test_without_the_flag_scratch_holds_the_uninitialized_value():
    assert not jax.config.jax_pallas_poison_buffers
    zero = np.asarray(_read_scratch_unwritten(jnp.int32, mosaic_rt.InterpretParams(uninitialized_memory="zero")))
    assert (zero == 0).all()
    nan = np.asarray(_read_scratch_unwritten(jnp.float32, mosaic_rt.InterpretParams()))
    assert np.isnan(nan).all()


def test_written_scratch_is_not_poisoned(poisoned):
    def kernel(x_ref, o_ref):
        def body(scratch):
            scratch[...] = x_ref[...] * 2
            o_ref[...] = scratch[...]

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.int32))

    x = jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128)
    params = mosaic_rt.InterpretParams()
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=params)(x)
    np.testing.assert_array_equal(out, x * 2)


@pytest.fixture
def v5e():
    # emit_pipeline sizes its buffers by the chip (pltpu.get_tpu_info()).
    with mosaic_rt.simulate_tpu("v5e", disable=("devices",)):
        yield


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.int8])
def test_a_pipeline_block_written_in_part_keeps_the_poison_elsewhere(poisoned, v5e, dtype):
    def step(x_ref, o_ref):
        o_ref[:4, :] = x_ref[:4, :]

    def kernel(x_hbm, o_hbm):
        pltpu.emit_pipeline(
            step,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        )(x_hbm, o_hbm)

    x = jnp.ones((16, 128), dtype)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=mosaic_rt.InterpretParams(),
    )(x)
    out = np.asarray(out).reshape(2, 8, 128)
    np.testing.assert_array_equal(out[:, :4], 1)
    rest = out[:, 4:]
    if jnp.issubdtype(dtype, jnp.floating):
        assert np.isnan(rest).all()
    else:
        assert (rest == jnp.iinfo(dtype).min).all()


@pytest.mark.skipif(not hasattr(jax, "empty_ref"), reason="jax.empty_ref is newer than this jax")
def test_an_empty_ref_in_a_kernel_starts_poisoned(poisoned):
    def kernel(o_ref):
        scratch = jax.empty_ref(jax.ShapeDtypeStruct((8, 128), jnp.int32), memory_space=pltpu.VMEM)
        o_ref[...] = scratch[...]

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32), interpret=mosaic_rt.InterpretParams()
    )()
    assert (np.asarray(out) == -(2**31)).all()


def test_stock_ignores_the_flag(poisoned):
    # The difference from stock the README lists: stock's scratch holds its
    # uninitialized value (the integer maximum) with the flag on.
    out = np.asarray(_read_scratch_unwritten(jnp.int32, pltpu.InterpretParams()))
    assert (out == 2**31 - 1).all()
