"""``pytest --mosaic-rt[=CHIP]``: a test run on a simulated TPU host.

Each case runs pytest in a fresh process (the simulation patches jax's
device class and picks the CPU device count before jax starts) on a small
suite written here: the gates open, kernels passing ``interpret=False`` /
``True`` / a stock ``pltpu.InterpretParams`` / ``pl.kernel`` all reach
mosaic_rt's interpreter with the expected params, a gate can be left off,
and every spelling of the switch and its errors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

# Records the params every kernel reached mosaic_rt's interpreter with.
_CONFTEST = textwrap.dedent("""
    import mosaic_rt.interpret.launch.kernel as _kernel

    SEEN = []
    _real = _kernel.interpret_pallas_call

    def _spy(*args, interpret_params, **kwargs):
        SEEN.append(interpret_params)
        return _real(*args, interpret_params=interpret_params, **kwargs)

    _kernel.interpret_pallas_call = _spy
""")

_SUITE = textwrap.dedent("""
    import jax, jax.numpy as jnp
    import pytest
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax._src import test_util as jtu
    import mosaic_rt
    import conftest

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def run(interpret):
        x = jnp.zeros((8, 128), jnp.float32)
        before = len(conftest.SEEN)
        y = pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)
        assert (y == 1).all()
        assert len(conftest.SEEN) == before + 1, "the kernel did not run on mosaic_rt"
        return conftest.SEEN[-1]

    def test_interpret_false_runs_on_mosaic_rt():
        params = run(False)
        assert isinstance(params, mosaic_rt.InterpretParams)
        assert params.wait_timeout == 30 and params.dma_execution_mode == "on_wait"  # the run's params

    def test_interpret_true_runs_on_mosaic_rt():
        assert isinstance(run(True), mosaic_rt.InterpretParams)

    def test_stock_params_keep_their_fields_on_mosaic_rt():
        params = run(pltpu.InterpretParams(dma_execution_mode="eager", detect_races=True))
        assert isinstance(params, mosaic_rt.InterpretParams)
        assert params.dma_execution_mode == "eager" and params.detect_races  # the kernel's choice wins
        assert params.out_of_bounds_reads == "raise"  # stock's default, as the kernel asked for stock's
        assert params.wait_timeout == 30  # the run's, where the kernel said nothing

    def test_mosaic_rt_params_are_used_as_they_are():
        assert run(mosaic_rt.InterpretParams(wait_timeout=7)).wait_timeout == 7

    def test_pl_kernel_on_two_cores_runs_on_mosaic_rt():
        if hasattr(pltpu, "TensorCoreMesh"):
            mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)
        else:
            mesh = pltpu.create_tensorcore_mesh("core", num_cores=2)
        x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
        before = len(conftest.SEEN)

        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)
        def copy(x_hbm, o_hbm):
            c = jax.lax.axis_index("core")
            pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])

        assert (copy(x) == x).all()
        assert len(conftest.SEEN) > before

    def test_debug_output_reaches_jtu_capture_stdout():
        # jtu binds the stream at import, which the simulation does before
        # pytest captures output: jax's TPU tests read debug=True's Mosaic
        # module through it.
        with jtu.capture_stdout() as get_output:
            pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), debug=True)(
                jnp.zeros((8, 128), jnp.float32)
            )
        assert "The Mosaic module for pallas_call add_one" in get_output()

    def test_the_host_is_the_chips(request):
        chip = request.config.getoption("--chip-expected")
        kind, devices, version, vmem, coords1 = {
            "v7x": ("TPU7x", 8, 7, 64 << 20, (0, 0, 0)),
            "v5e": ("TPU v5 lite", 8, 5, 128 << 20, (1, 0, 0)),
            "v4": ("TPU v4", 4, 4, 16 << 20, (1, 0, 0)),
        }[chip]
        d = jax.devices()
        assert d[0].platform == "cpu" and len(d) == devices
        assert d[0].device_kind == kind and d[0].num_cores >= 1
        assert d[1].coords == coords1 and d[1].core_on_chip == (1 if chip == "v7x" else 0)
        assert jax.default_backend() == "tpu"
        assert pltpu.get_tpu_info().vmem_capacity_bytes == vmem
        assert jtu.device_under_test() == "tpu" and jtu.test_device_matches(["tpu"])
        assert jtu.get_tpu_version() == version and jtu.is_device_tpu_at_least(version)
        assert not jtu.is_device_tpu_at_least(version=version + 1)  # suites pass keywords
        assert jtu.is_device_tpu(version, chip[2:]) and not jtu.is_device_tpu(version=version, variant="q")
""")

_OPTION = textwrap.dedent("""
    def pytest_addoption(parser):
        parser.addoption("--chip-expected", default="v6e")
""")


def _env(**extra) -> dict:
    env = dict(os.environ)
    # The suite's 16 devices (tests/conftest.py) must not reach the run.
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = flags
    for name in ("PYTEST_ADDOPTS", "MOSAIC_RT_CHIP", "MOSAIC_RT_PARAMS", "MOSAIC_RT_DISABLE", "MOSAIC_RT_INTERPRETER"):
        env.pop(name, None)
    for name in ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID"):
        env.pop(name, None)
    env.update(extra)
    return env


def _pytest(tmp_path, *args, env=None, suite=_SUITE, ini=None):
    (tmp_path / "conftest.py").write_text(_CONFTEST + _OPTION)
    (tmp_path / "test_suite.py").write_text(suite)
    if ini is not None:
        (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", *args],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env=env or _env(),
    )


def _passed(run, n: int) -> None:
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    assert f"{n} passed" in run.stdout, run.stdout[-3000:]


def test_the_flag_opens_every_gate_and_routes_every_kernel(tmp_path):
    run = _pytest(
        tmp_path,
        "--mosaic-rt=v7x",
        "--chip-expected=v7x",
        "--mosaic-rt-params",
        "wait_timeout=30 dma_execution_mode=on_wait",
        "test_suite.py",
    )
    _passed(run, 7)


def test_ini_spelling_with_ini_params(tmp_path):
    ini = "mosaic_rt = v5e\nmosaic_rt_params = wait_timeout=30, dma_execution_mode=on_wait\n"
    run = _pytest(tmp_path, "--chip-expected=v5e", "test_suite.py", ini=ini)
    _passed(run, 7)
    assert "mosaic_rt: simulated TPU v5e (TPU v5 lite)" in run.stdout


def test_environment_spelling_and_a_path_after_the_bare_flag(tmp_path):
    env = _env(MOSAIC_RT_CHIP="v4", MOSAIC_RT_PARAMS="wait_timeout=30 dma_execution_mode=on_wait")
    run = _pytest(tmp_path, "--chip-expected=v4", "test_suite.py", "-k", "host or false", env=env)
    _passed(run, 2)
    # The bare flag takes the default chip; the path after it stays a path.
    run = _pytest(tmp_path, "--mosaic-rt", "test_suite.py", "-k", "true_runs", env=env)
    _passed(run, 1)
    assert "simulated TPU v6e" in run.stdout  # the command line wins over MOSAIC_RT_CHIP


_GATES_OFF = textwrap.dedent("""
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from jax._src import test_util as jtu

    def test_gates_left_off_stay_cpu():
        assert jax.default_backend() == "cpu"
        assert jax.devices()[0].device_kind == "cpu" and not hasattr(jax.devices()[0], "coords")
        assert len(jax.devices()) == 1
        assert jtu.device_under_test() == "cpu" and not jtu.test_device_matches(["tpu"])
        assert jtu.get_tpu_version() == 6  # the jtu gate alone still answers
        # The TPU info gate alone: jax finds the chip through the CPU's registry entry.
        assert pltpu.get_tpu_info().vmem_capacity_bytes == 128 << 20
""")


def test_a_gate_left_off_stays_as_on_cpu(tmp_path):
    off = "default_backend,device_kind,topology,devices,test_dut"
    run = _pytest(tmp_path, "--mosaic-rt=v6e", f"--mosaic-rt-disable={off}", suite=_GATES_OFF)
    _passed(run, 1)
    assert "gates off: default_backend, device_kind, devices, test_dut, topology" in run.stdout


_NO_FLAG = textwrap.dedent("""
    import jax

    def test_nothing_is_simulated():
        assert jax.default_backend() == "cpu" and jax.devices()[0].device_kind == "cpu"
""")


def test_without_the_flag_nothing_is_simulated(tmp_path):
    _passed(_pytest(tmp_path, suite=_NO_FLAG), 1)
    # An earlier spelling's "off" wins over a later one.
    _passed(_pytest(tmp_path, "--mosaic-rt=off", suite=_NO_FLAG, ini="mosaic_rt = v7x\n"), 1)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--mosaic-rt=v9"], {}, "--mosaic-rt: unknown TPU chip 'v9'; choose one of v4, v5e, v5p, v6e, v7x"),
        ([], {"MOSAIC_RT_CHIP": "tpu9"}, "MOSAIC_RT_CHIP: unknown TPU chip 'tpu9'; choose one of v4, v5e"),
        (["--mosaic-rt", "--mosaic-rt-params=dma_execution_mode"], {}, "'dma_execution_mode' is not KEY=VALUE"),
        (["--mosaic-rt", "--mosaic-rt-params=no_such_field=1"], {}, "no_such_field"),
        (["--mosaic-rt", "--mosaic-rt-params=dma_execution_mode=sometimes"], {}, "dma_execution_mode must be"),
        (["--mosaic-rt", "--mosaic-rt-params=wait_timeout=1 wait_timeout=2"], {}, "wait_timeout is given twice"),
        (["--mosaic-rt", "--mosaic-rt-disable=tpu_info,gpu"], {}, "unknown gate 'gpu'; gates: tpu_info"),
        (
            ["--mosaic-rt", "--mosaic-rt-interpreter=stock", "--mosaic-rt-params=wait_timeout=3"],
            {},
            "wait_timeout",
        ),
    ],
)
def test_usage_errors_name_what_is_wrong(tmp_path, args, env, message):
    run = _pytest(tmp_path, *args, suite=_NO_FLAG, env=_env(**env))
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]  # pytest's usage error
    assert message in run.stderr, run.stderr


def test_a_bad_ini_value_is_a_usage_error(tmp_path):
    run = _pytest(tmp_path, suite=_NO_FLAG, ini="mosaic_rt = v6e\nmosaic_rt_disable = everything\n")
    assert run.returncode == 4 and "ini mosaic_rt_disable: unknown gate 'everything'" in run.stderr, run.stderr


_EARLY_JAX = "import jax\njax.devices()\n"


def test_jax_started_with_fewer_devices_is_said_at_startup(tmp_path):
    """A note in the header and the summary, not a warning: a suite with
    ``filterwarnings = error`` still runs."""
    (tmp_path / "conftest.py").write_text(_EARLY_JAX)
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "test_suite.py").write_text(_NO_FLAG.replace('== "cpu" and', '== "tpu" and not'))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mosaic-rt=v6e"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env=_env(),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    note = "jax was initialised with 1 CPU device(s) before the simulation started; a v6e host has 8"
    assert run.stdout.count(note) == 2, run.stdout  # header and summary


def test_a_device_count_the_user_set_stands(tmp_path):
    (tmp_path / "test_suite.py").write_text("import jax\n\ndef test_four():\n    assert len(jax.devices()) == 4\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mosaic-rt=v6e"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env=env,
    )
    _passed(run, 1)


_STOCK = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    import conftest

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def test_kernels_run_on_stock_with_the_simulated_chip():
        x = jnp.zeros((8, 128), jnp.float32)
        for interpret in (False, True):
            y = pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)
            assert (y == 1).all()
        assert conftest.SEEN == []  # never mosaic_rt's interpreter
        assert jax.devices()[0].device_kind == "TPU v6 lite"
""")


def test_stock_interpreter_on_the_same_chip(tmp_path):
    run = _pytest(tmp_path, "--mosaic-rt", "--mosaic-rt-interpreter=stock", suite=_STOCK)
    _passed(run, 1)
    assert "kernels on stock's TPU interpret mode" in run.stdout


_RACY = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_ref, buf, sem)
        copy.start()
        early = buf[0:1, :]              # races with the DMA's write
        copy.wait()
        o_ref[...] = buf[...] + jnp.where(jnp.isnan(early[0, 0]), 0.0, 0.0)

    def test_racy_kernel_written_for_a_tpu():
        x = jnp.ones((8, 128), jnp.float32)
        out = pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA])(x)
        assert float(out.sum()) == 8 * 128

    def test_clean():
        pass
""")


def test_a_race_in_a_kernel_written_for_a_tpu_fails_its_own_test(tmp_path):
    params = "--mosaic-rt-params=detect_races=true on_race=warn"
    run = _pytest(
        tmp_path, "--mosaic-rt", params, "--mosaic-rt-warnings", "-W", "error::mosaic_rt.RaceWarning", suite=_RACY
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 failed, 1 passed" in run.stdout and "RaceWarning" in run.stdout, run.stdout[-3000:]
    assert "FAILED test_suite.py::test_racy_kernel_written_for_a_tpu" in run.stdout
