"""The pytest plugin installed with mosaic_rt: with `--mosaic-rt-warnings`
a kernel's race and leak reports become warnings of the test that ran it,
so `-W error::mosaic_rt.RaceWarning` fails a racy test; without it they are
printed as stock prints them (see also tests/api/test_report_delivery.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_RACY_TEST = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    import mosaic_rt

    def kernel(x_ref, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_ref, buf, sem)
        copy.start()
        early = buf[0:1, :]              # races with the DMA's write
        copy.wait()
        o_ref[...] = buf[...] + jnp.where(jnp.isnan(early[0, 0]), 0.0, 0.0)

    def test_racy_kernel():
        x = jnp.ones((8, 128), jnp.float32)
        out = pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
            interpret=mosaic_rt.InterpretParams(detect_races=True, on_race="warn"))(x)
        assert float(out.sum()) == 8 * 128
""")


def _pytest(tmp_path, *args):
    test = tmp_path / "test_racy.py"
    test.write_text(_RACY_TEST)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--mosaic-rt-warnings", str(test), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )


@pytest.mark.timeout(300)
def test_a_race_is_a_warning_of_the_test(tmp_path):
    run = _pytest(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "RaceWarning: RACE DETECTED" in run.stdout, run.stdout
    assert "test_racy.py::test_racy_kernel" in run.stdout, run.stdout


@pytest.mark.timeout(300)
def test_minus_w_error_fails_the_racy_test(tmp_path):
    run = _pytest(tmp_path, "-W", "error::mosaic_rt.RaceWarning")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout and "RaceWarning" in run.stdout, run.stdout
