"""jax.export of a program with mosaic_rt kernels: refused with a message
saying why and what to do, or exported on request (a round trip in this
process); programs without our kernels export exactly as without
mosaic_rt."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import export
from jax.experimental import pallas as pl


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def _kernel(interpret):
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=interpret)


def _x():
    return jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)


def test_exporting_our_kernel_says_why_not_and_what_to_do():
    with pytest.raises(ValueError) as info:
        export.export(jax.jit(_kernel(mosaic_rt.InterpretParams())))(_x())
    text = str(info.value)
    assert "mosaic_rt's TPU interpret mode" in text
    assert "mosaic_rt_launch_begin" in text
    assert "disabled_checks=mosaic_rt.export_disabled_checks()" in text
    assert "stablehlo" not in text  # not jax's dump of the module


def test_exporting_our_kernel_on_request_round_trips_in_this_process():
    fn = jax.jit(_kernel(mosaic_rt.InterpretParams()))
    exported = export.export(fn, disabled_checks=mosaic_rt.export_disabled_checks())(_x())
    np.testing.assert_array_equal(np.asarray(exported.call(_x())), np.asarray(fn(_x())))


def test_disabling_only_some_of_our_targets_names_the_rest():
    some = mosaic_rt.export_disabled_checks()
    kept = [c for c in some if c.is_custom_call() != "mosaic_rt_launch_begin"]
    with pytest.raises(ValueError, match=r"runtime \(mosaic_rt_launch_begin\)"):
        export.export(jax.jit(_kernel(mosaic_rt.InterpretParams())), disabled_checks=kept)(_x())


def test_a_program_without_our_kernels_exports_as_without_mosaic_rt():
    exported = export.export(jax.jit(lambda x: jnp.sin(x) * 2.0))(_x())
    np.testing.assert_allclose(np.asarray(exported.call(_x())), np.sin(np.asarray(_x())) * 2.0, rtol=1e-6)


def test_the_tpu_kernel_exports_for_a_tpu_with_mosaic_rt_imported():
    # The TPU lowering's custom call is stable: mosaic_rt changes nothing.
    exported = export.export(jax.jit(_kernel(False)), platforms=["tpu"])(_x())
    assert "tpu_custom_call" in exported.mlir_module()
    assert "@mosaic_rt_" not in exported.mlir_module()
