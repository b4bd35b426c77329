"""The TPU compile check's rejection is also an instance of what the TPU's
compiler raised for the kernel -- the Pallas TPU lowering's ValueError or
NotImplementedError, Mosaic's `MosaicError`, XLA:TPU's `JaxRuntimeError` --
fresh or answered from the cache, so a test expecting the TPU's rejection
(``assertRaises(MosaicError)``) holds under the check. Needs libtpu (skips
without it, fails in CI)."""

import os

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax._src.pallas.mosaic import error_handling
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.tpu_check import check, targets


@pytest.fixture(autouse=True)
def libtpu(monkeypatch):
    try:
        import libtpu  # noqa: F401
    except ImportError:
        message = f"libtpu is not installed ({check.install_command()})"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must install it (scripts/test.sh)")
        pytest.skip(message)
    monkeypatch.delenv(targets.ENV_TARGET, raising=False)
    monkeypatch.setenv("MOSAIC_RT_TPU_CACHE_DIR", "off")
    check.clear_cache()
    yield
    check.clear_cache()


def _scalar_add(dtype, target="v5e"):
    def kernel(x_ref, y_ref):
        y_ref[0] = x_ref[0] + x_ref[0]

    x = jnp.asarray([3], dtype=dtype)
    return pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        out_shape=jax.ShapeDtypeStruct(x.shape, dtype),
        interpret=mosaic_rt.InterpretParams(tpu_target=target),
    ), x


def test_mosaics_rejection_is_a_mosaic_error_fresh_and_cached():
    call, x = _scalar_add(jnp.int16)
    for _ in range(2):  # compiled, then answered from the cache
        with pytest.raises(error_handling.MosaicError, match="Only i32") as info:
            call(x)
        assert isinstance(info.value, mosaic_rt.TpuCompileError) and isinstance(info.value, ValueError)
        assert "does not compile for TPU v5e" in str(info.value)
    assert check.stats.compiles == 1 and check.stats.hits == 1
    # The kernel itself runs (the check is a verdict, not the interpreter).
    with pytest.raises(error_handling.MosaicError):
        call(x)


def test_a_kernel_that_compiles_is_not_rejected():
    call, x = _scalar_add(jnp.int32)
    np.testing.assert_array_equal(call(x), [6])


def test_vmem_overflow_is_a_jax_runtime_error():
    def kernel(x_ref, o_ref, s_ref):
        s_ref[0:8, :] = x_ref[...]
        o_ref[...] = s_ref[0:8, :]

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((64 * 1024, 128), jnp.float32)],  # 32 MiB, over v4's 16
        interpret=mosaic_rt.InterpretParams(tpu_target="v4"),
    )
    with pytest.raises(jax.errors.JaxRuntimeError, match="exceed memory") as info:
        call(jnp.zeros((8, 128), jnp.float32))
    assert isinstance(info.value, mosaic_rt.TpuCompileError)


def test_lowering_rejection_keeps_the_lowerings_type():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(4,),
        in_specs=[pl.BlockSpec((4, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((4, 128), lambda i: (i, 0)),
        interpret=mosaic_rt.InterpretParams(tpu_target="v5e"),
    )
    with pytest.raises(mosaic_rt.TpuCompileError, match="divisible by 8 and 128") as info:
        call(jnp.zeros((16, 128), jnp.float32))
    assert type(info.value.compiler_error) in type(info.value).__mro__ or info.value.compiler_error is None


def test_blended_types_are_made_once_and_keep_the_attributes():
    cls = check._error_class("MosaicError", None)
    assert cls is check._error_class("MosaicError", None)
    assert issubclass(cls, mosaic_rt.TpuCompileError) and issubclass(cls, error_handling.MosaicError)
    e = cls("boom", kernel="k", generation="v5e", compiler_message="m")
    assert (e.kernel, e.generation, e.compiler_message, str(e)) == ("k", "v5e", "m", "boom")
    assert check._error_class("NoSuchError", None) is mosaic_rt.TpuCompileError
    assert check._error_class("ValueError", None) is mosaic_rt.TpuCompileError  # it is one already
