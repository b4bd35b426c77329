"""The pytest plugin installed with mosaic_rt: with `--mosaic-rt-warnings`
a kernel's race and leak reports become warnings of the test that ran it,
so `-W error::mosaic_rt.RaceWarning` fails a racy test; without it they are
printed as stock prints them (see also tests/api/test_report_delivery.py)."""

from __future__ import annotations

import os
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


def test_a_race_is_a_warning_of_the_test(tmp_path):
    run = _pytest(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "RaceWarning: RACE DETECTED" in run.stdout, run.stdout
    assert "test_racy.py::test_racy_kernel" in run.stdout, run.stdout


def test_minus_w_error_fails_the_racy_test(tmp_path):
    run = _pytest(tmp_path, "-W", "error::mosaic_rt.RaceWarning")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout and "RaceWarning" in run.stdout, run.stdout


_CACHED_TEST = textwrap.dedent("""
    import os
    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl
    import mosaic_rt

    HITS = []
    jax.monitoring.register_event_listener(
        lambda name, **kw: HITS.append(name) if name == "/jax/compilation_cache/cache_hits" else None)

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def test_kernel_and_report_cache_hits():
        x = jnp.zeros((8, 128), jnp.float32)
        f = jax.jit(pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                   interpret=mosaic_rt.InterpretParams()))
        before = len(HITS)
        assert (f(x) == 1).all()
        with open(os.environ["HITS_FILE"], "a") as fh:
            fh.write(f"{len(HITS) - before}\\n")
""")


@pytest.mark.parametrize("how", ["option", "ini", "ini, jax imported by conftest"])
def test_mosaic_rt_cache_keeps_kernels_for_the_next_run(tmp_path, how):
    (tmp_path / "test_cached.py").write_text(_CACHED_TEST)
    cache = tmp_path / "cache"
    args = ["--mosaic-rt-cache", str(cache)] if how == "option" else []
    if how.startswith("ini"):
        (tmp_path / "pytest.ini").write_text(f"[pytest]\nmosaic_rt_cache_dir = {cache}\n")
    if "conftest" in how:
        (tmp_path / "conftest.py").write_text("import jax\n")
    hits = tmp_path / "hits.txt"
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_cached.py", *args],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
            env={**os.environ, "HITS_FILE": str(hits)},
        )
        assert run.returncode == 0, run.stdout + run.stderr
    first, second = (int(n) for n in hits.read_text().split())
    assert first == 0 and second >= 1, (first, second)  # the kernel's program came from the cache
    assert any(cache.iterdir())


@pytest.mark.timeout(120)
def test_mosaic_rt_cache_directory_that_cannot_be_made_is_a_usage_error(tmp_path):
    (tmp_path / "blocker").write_text("a file, not a directory")
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--mosaic-rt-cache",
            str(tmp_path / "blocker" / "cache"),
            "test_nothing.py",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
    )
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert "mosaic_rt cache directory" in run.stderr


_IMPORTS_TEST = textwrap.dedent("""
    import sys

    def test_nothing_imported_jax_or_mosaic_rt():
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "mosaic_rt"))
        assert not heavy, heavy
""")


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--mosaic-rt=off"],
        ["--mosaic-rt-warnings"],
        ["--mosaic-rt-cache", "cache"],
        ["--mosaic-rt-params", "detect_races=true"],  # params without the flag: nothing to do
    ],
)
def test_loading_the_plugins_imports_neither_jax_nor_mosaic_rt(tmp_path, flags):
    # pytest loads every installed plugin at every start: ours must cost
    # nothing (no jax import, seconds) and must not import jax before the
    # suite's conftest sets JAX_PLATFORMS / XLA_FLAGS.
    (tmp_path / "test_imports.py").write_text(_IMPORTS_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOSAIC_RT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags, "test_imports.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    ).stdout
    for option in ("--mosaic-rt=[CHIP]", "--mosaic-rt-tpu-target", "--mosaic-rt-warnings", "--mosaic-rt-cache"):
        assert option in out, option
    assert "v4, v5e, v5p, v6e, v7x" in out  # the chip table, loaded without mosaic_rt
