"""The interpreter's public surface: params, the routing seam, modes,
leak policies and several cores per device."""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from core_mesh import core_mesh
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

pytestmark = pytest.mark.timeout(180)


def _add_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _add_call(interpret=False):
    return pl.pallas_call(
        _add_kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=interpret,
    )


X = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)


def _lowered(f):
    return jax.jit(f).lower(X).as_text()


# Defaults that follow the TPU instead of stock (README, "Where we follow
# the TPU"): DMAs move their bytes when started.
_TPU_DEFAULTS = {"dma_execution_mode": ("on_wait", "tpu"), "out_of_bounds_reads": ("raise", "tpu")}


def test_params_accept_every_stock_field_with_stock_defaults():
    stock = pltpu.InterpretParams()
    ours = mosaic_rt.InterpretParams()
    for field in dataclasses.fields(stock):
        if field.name in _TPU_DEFAULTS:
            assert (getattr(stock, field.name), getattr(ours, field.name)) == _TPU_DEFAULTS[field.name]
        else:
            assert getattr(ours, field.name) == getattr(stock, field.name), field.name
    # Stock's default stays one argument away.
    assert mosaic_rt.InterpretParams(dma_execution_mode="on_wait").dma_execution_mode == "on_wait"
    assert mosaic_rt.InterpretParams(out_of_bounds_reads="raise").out_of_bounds_reads == "raise"
    assert isinstance(ours, pltpu.InterpretParams)
    with pytest.raises(TypeError):
        mosaic_rt.InterpretParams(True)  # keyword-only
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.detect_races = True


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_cores_or_threads=0), "Number of cores or threads must be at least 1"),
        (dict(vector_clock_size=0), "Vector clock size must be at least 1"),
        (dict(dma_execution_mode="lazy"), "dma_execution_mode must be 'eager', 'on_wait' or 'tpu'"),
        (dict(out_of_bounds_reads="clip"), "out_of_bounds_reads must be"),
        (dict(uninitialized_memory="ones"), "uninitialized_memory must be"),
        (dict(buffer_bounds="tight"), "buffer_bounds must be"),
        (dict(wait_timeout=0), "wait_timeout must be a positive number"),
        (dict(on_semaphore_leak="shout"), "on_semaphore_leak must be"),
    ],
)
def test_params_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mosaic_rt.InterpretParams(**kwargs)


def test_ours_lowers_to_native_calls_and_stock_keeps_callbacks():
    ours = _lowered(_add_call(mosaic_rt.InterpretParams()))
    assert "mosaic_rt_" in ours and "callback" not in ours
    stock = _lowered(_add_call(pltpu.InterpretParams()))
    assert "mosaic_rt_" not in stock and "callback" in stock


def test_force_interpret_mode_routes_every_pallas_call():
    with mosaic_rt.force_interpret_mode(mosaic_rt.InterpretParams()):
        text = _lowered(_add_call())
        out = jax.jit(_add_call())(X)
    assert "mosaic_rt_" in text
    np.testing.assert_array_equal(np.asarray(out), np.asarray(X) + 1)
    with pytest.raises(TypeError, match="expected mosaic_rt.InterpretParams"):
        with mosaic_rt.force_interpret_mode(pltpu.InterpretParams()):
            pass


def test_set_interpret_mode_is_process_wide_and_can_be_turned_off():
    try:
        mosaic_rt.set_interpret_mode()
        assert "mosaic_rt_" in _lowered(_add_call())
    finally:
        mosaic_rt.set_interpret_mode(None)
    with pytest.raises(ValueError, match="Only interpret mode is supported"):
        _lowered(_add_call())


def _leaky(params):
    def kernel(o_ref, sem):
        pl.semaphore_signal(sem, 3)
        o_ref[...] = jnp.zeros_like(o_ref)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=params,
    )()


def test_leaked_semaphore_is_printed_by_default_like_stock(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(np.asarray(_leaky(mosaic_rt.InterpretParams())), 0)
    assert re.search(
        r"REGULAR semaphore 2000 \(allocated at .*test_params_and_modes.py:\d+"
        r".*\) on core 0 has count 3",
        capsys.readouterr().out,
    )


def test_leaked_semaphore_warns_when_asked():
    # A Python warning naming the semaphore, its kind, core, count and the
    # line that allocated it (the kernel's scratch).
    with pytest.warns(
        mosaic_rt.SemaphoreLeakWarning,
        match=r"REGULAR semaphore 2000 \(allocated at .*test_params_and_modes.py:\d+"
        r".*\) on core 0 has count 3",
    ):
        with mosaic_rt.native_errors():
            out = _leaky(mosaic_rt.InterpretParams(python_warnings=True))
            np.testing.assert_array_equal(np.asarray(out), 0)


def test_leaked_semaphore_raises_when_asked():
    with pytest.raises(mosaic_rt.SemaphoreLeakError, match="semaphore 2000 .* has count 3"):
        with mosaic_rt.native_errors():
            _leaky(mosaic_rt.InterpretParams(on_semaphore_leak="raise"))
    # The next kernel runs without any reset.
    np.testing.assert_array_equal(np.asarray(jax.jit(_add_call(mosaic_rt.InterpretParams()))(X)), np.asarray(X) + 1)


def test_leak_ignore_is_silent(capfd):
    # (python_warnings=True: "ignore" must silence the warning too)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _leaky(mosaic_rt.InterpretParams(on_semaphore_leak="ignore", python_warnings=True))
        _leaky(mosaic_rt.InterpretParams(on_semaphore_leak="ignore"))
        mosaic_rt.deliver_reports()
    captured = capfd.readouterr()
    assert "semaphore leak" not in captured.out + captured.err


# ------------------------------------------------------ several cores


def _parallel_grid(params):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * (pl.program_id(0) + 1)

    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(8,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=params,
    )(x)


@pytest.mark.parametrize("cores", [2, 4])
def test_grid_split_across_cores_matches_stock(cores):
    points = {"stock": [], "ours": []}

    def recorder(which):
        def record(token, point, core):
            points[which].append((tuple(int(p) for p in point), int(core)))
            return token

        return record

    stock = _parallel_grid(
        pltpu.InterpretParams(num_cores_or_threads=cores, random_seed=3, grid_point_recorder=recorder("stock"))
    )
    ours = _parallel_grid(
        mosaic_rt.InterpretParams(num_cores_or_threads=cores, random_seed=3, grid_point_recorder=recorder("ours"))
    )
    np.testing.assert_array_equal(np.asarray(stock), np.asarray(ours))
    assert sorted(points["stock"]) == sorted(points["ours"])
    assert {c for _, c in points["ours"]} == set(range(cores))


def _cores_wait_on_each_other(params):
    mesh = core_mesh(2)
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)

    @functools.partial(
        pl.kernel,
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=mesh,
        scratch_types=[pltpu.SemaphoreType.REGULAR],
        interpret=params,
    )
    def kernel(x_hbm, o_hbm, sem):
        c = jax.lax.axis_index("core")
        pl.semaphore_signal(sem, 1, core_index=1 - c)
        pl.semaphore_wait(sem, 1)
        pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])

    return kernel(x)


def test_two_cores_waiting_on_each_other_finish():
    ours = _cores_wait_on_each_other(mosaic_rt.InterpretParams(wait_timeout=30))
    stock = _cores_wait_on_each_other(pltpu.InterpretParams())
    np.testing.assert_array_equal(np.asarray(stock), np.asarray(ours))


def test_logging_mode_logs_memory_and_semaphore_ops(caplog):
    from mosaic_rt.jax_internals import LoggingMode

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] * 2

    def run(mode):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=mosaic_rt.InterpretParams(logging_mode=mode),
        )(X[:8])

    with caplog.at_level("INFO", logger="mosaic_rt.interpret"):
        out = run(LoggingMode.SHARED_MEMORY | LoggingMode.SEMAPHORE)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(X[:8]) * 2)
    text = caplog.text
    for op in ("allocate_buffer", "get_buffer_content", "swap_buffer_content", "`signal`", "`wait`"):
        assert op in text, op
    assert "Device 0, core 0:" in text
    caplog.clear()
    with caplog.at_level("INFO", logger="mosaic_rt.interpret"):
        run(LoggingMode.SEMAPHORE)
    assert "`signal`" in caplog.text and "get_buffer_content" not in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="mosaic_rt.interpret"):
        run(None)
    assert caplog.text == ""


def test_lowering_our_kernels_skips_the_gpu_interpreter_import():
    """pallas_call's own interpret lowering imports the GPU interpreter
    (a third of a second, once per process) before it looks at the params;
    ours never needs it. In a fresh process, so nothing else imported it."""
    import subprocess
    import sys

    code = (
        "import sys, jax, jax.numpy as jnp\n"
        "from jax.experimental import pallas as pl\n"
        "import mosaic_rt\n"
        "x = jnp.ones((8, 128), jnp.float32)\n"
        "def kernel(x_ref, o_ref):\n"
        "    o_ref[...] = x_ref[...] + 1\n"
        "out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
        "                     interpret=mosaic_rt.InterpretParams())(x)\n"
        "assert float(out.sum()) == 2 * 8 * 128\n"
        "print('jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def _copy_with_side_effects(value, params):
    def kernel(x_ref, o_ref):
        pltpu.sync_copy(x_ref, o_ref)

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(has_side_effects=value),
        interpret=params,
    )
    return np.asarray(jax.jit(f)(x)), np.asarray(x)


@pytest.mark.parametrize("value", [True, False, *pltpu.SideEffectType])
def test_every_side_effect_type_runs(value):
    got, x = _copy_with_side_effects(value, mosaic_rt.InterpretParams())
    np.testing.assert_array_equal(got, x)


def test_an_invalid_side_effect_type_is_the_tpu_lowerings_value_error():
    # The TPU lowering refuses it (jax's tpu_side_effects_test); stock runs it.
    with pytest.raises(ValueError, match="Invalid side effect type: invalid"):
        _copy_with_side_effects("invalid", mosaic_rt.InterpretParams())
