"""`pallas_call(..., debug=True)` prints what it prints on a TPU: the
kernel's jaxpr and its Mosaic module (jax's Pallas TPU lowering, run for
the TPU platform without a TPU); stock interpret mode prints nothing.
jax's own tests read that output (`test_arg_name_locs`,
`test_fori_loop_unroll_partial_*`, `PallasCallTraceTest`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def _call(kernel, debug, **kw):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        debug=debug,
        interpret=mosaic_rt.InterpretParams(),
        **kw,
    )


def test_debug_prints_the_jaxpr_and_the_mosaic_module(capsys):
    out = _call(_add_one, True)(jnp.ones((8, 128), jnp.float32))
    np.testing.assert_array_equal(np.asarray(out), 2.0)
    text = capsys.readouterr().out
    assert "The kernel jaxpr for pallas_call _add_one" in text
    assert "The Mosaic module for pallas_call _add_one" in text
    assert "func.func" in text and "arith.addf" in text


def test_a_loop_partly_unrolled_stays_a_loop_in_the_module(capsys):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        def body(i, carry):
            o_ref[...] += i.astype(jnp.float32)
            return carry

        lax.fori_loop(0, 6, body, None, unroll=2)

    out = _call(kernel, True)(jnp.zeros((8, 128), jnp.float32))
    np.testing.assert_array_equal(np.asarray(out), 15.0)
    assert "scf.for" in capsys.readouterr().out


def test_without_debug_nothing_is_printed(capsys):
    _call(_add_one, False)(jnp.ones((8, 128), jnp.float32))
    assert capsys.readouterr().out == ""


def test_a_kernel_under_shard_map_with_a_remote_copy(capsys):
    def kernel(x_ref, o_ref, send, recv):
        n, i = lax.axis_size("x"), lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=((i + 1) % n,))
        copy.start()
        copy.wait()

    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    call = _call(kernel, True, scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    np.testing.assert_array_equal(np.asarray(f(x)), np.concatenate([x[8:], x[:8]]))
    text = capsys.readouterr().out
    assert "The Mosaic module for pallas_call kernel" in text and "tpu.enqueue_dma" in text


def test_a_kernel_the_tpu_lowering_rejects_still_runs_with_a_note(capsys):
    # The Pallas TPU lowering has no rule for an FFT; the interpreter runs it.
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.real(jnp.fft.fft(x_ref[...].astype(jnp.complex64))).astype(jnp.float32)

    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) % 5
    out = _call(kernel, True)(x)
    np.testing.assert_allclose(np.asarray(out), np.real(np.fft.fft(x)), rtol=1e-4, atol=1e-3)
    text = capsys.readouterr().out
    assert "debug=True: the Pallas TPU lowering of this kernel failed" in text
