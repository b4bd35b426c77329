"""Where races, semaphore leaks and misuse reports go.

Defaults are stock's, per jax version: printed or logged, never a Python
warning, so a suite configured with ``filterwarnings = error`` has the same
outcome on stock and on mosaic_rt. Asked for (``python_warnings=True``,
``MOSAIC_RT_WARNINGS=1``, ``--mosaic-rt-warnings``, ini
``mosaic_rt_warnings``), they are Python warnings issued before the
kernel's results are ready, in the caller's warning context, and never in a
later test.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt.ffi import reports
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE

# The kernels, shared by the in-process tests and the suites run by pytest
# in a subprocess (kept as source so both use the very same text).
KERNELS = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    ANY = pl.BlockSpec(memory_space=pl.ANY)

    def racy_kernel(x_ref, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_ref, buf, sem)
        copy.start()
        early = buf[0:1, :]              # races with the DMA's write of buf
        copy.wait()
        o_ref[...] = buf[...] + jnp.where(jnp.isnan(early[0, 0]), 0.0, 0.0)

    def leaky_kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 3)      # never waited for
        o_ref[...] = x_ref[...] + 1.0

    def misusing_kernel(x_ref, o_ref, buf, sem):
        pltpu.make_async_copy(x_ref, buf, sem).start()
        # waited with a descriptor of half the size it was started with, so
        # half the count is left at the end (a leak, reported with it)
        pltpu.make_async_copy(x_ref.at[0:4], buf.at[0:4], sem).wait()
        o_ref[...] = buf[...]

    def clean_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def run(name, interpret):
        x = jnp.ones((8, 128), jnp.float32)
        kernel = globals()[name + "_kernel"]
        scratch = {
            "racy": [pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
            "leaky": [pltpu.SemaphoreType.REGULAR],
            "misusing": [pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
            "clean": [],
        }[name]
        specs = {"in_specs": [ANY]} if name in ("racy", "misusing") else {}
        f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           scratch_shapes=scratch, interpret=interpret, **specs)
        return jax.block_until_ready(f(x))
""")
_ns: dict = {}
exec(compile(KERNELS, "report_kernels.py", "exec"), _ns)  # our own text above
run = _ns["run"]

# Race detection that reports instead of failing, on every jax: on_race is
# a stock field (default "raise") only from jax 0.12 on.
RACES = {"detect_races": True, **({"on_race": "warn"} if STOCK_HAS_ON_RACE else {})}


# A wait is only checked when it has to wait: with copies deferred to it.
MISUSE = {"dma_execution_mode": "on_wait"}


def _ours(**kw):
    return mosaic_rt.InterpretParams(**kw)


# ------------------------------------------------ defaults: stock's channels


def test_default_issues_no_python_warning_and_prints_leaks_like_stock(capsys):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run("leaky", _ours())
    assert got == []
    out = capsys.readouterr().out
    assert "semaphore leak at kernel exit on device 0: REGULAR semaphore" in out
    assert "has count 3" in out


def test_default_reports_races_like_stock(capsys, caplog):
    with warnings.catch_warnings(record=True) as got, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        run("racy", _ours(**RACES))
    assert got == []
    assert mosaic_rt.races.races_found
    printed = capsys.readouterr().out
    logged = [r for r in caplog.records if r.name == "mosaic_rt.races"]
    if STOCK_HAS_ON_RACE:  # jax 0.12 logs races of on_race="warn"
        assert logged and "RACE DETECTED" in logged[0].getMessage()
        assert "RACE DETECTED" not in printed
    else:  # older jax prints them
        assert not logged
        assert "RACE DETECTED" in printed


def test_default_logs_misuse(caplog):
    with warnings.catch_warnings(record=True) as got, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        out = run("misusing", _ours(**MISUSE))
    assert got == []
    np.testing.assert_array_equal(np.asarray(out), np.ones((8, 128), np.float32))
    texts = [r.getMessage() for r in caplog.records if r.name == "mosaic_rt"]
    assert any("waits for 2048 bytes on DMA semaphore" in t for t in texts), texts


# ------------------------------------------- asked for: Python warnings, now


def test_pytest_warns_sees_a_leak_warning_around_the_call():
    with pytest.warns(mosaic_rt.SemaphoreLeakWarning, match="has count 3") as got:
        run("leaky", _ours(python_warnings=True))
    # attributed to the kernel's source line (where the semaphore was made)
    assert got[0].filename == "report_kernels.py"


def test_pytest_warns_sees_a_race_warning_around_the_call():
    with pytest.warns(mosaic_rt.RaceWarning, match="RACE DETECTED"):
        run("racy", _ours(python_warnings=True, **RACES))


def test_pytest_warns_sees_a_misuse_warning_around_the_call():
    with pytest.warns(mosaic_rt.MisuseWarning, match="waits for 2048 bytes"):
        run("misusing", _ours(python_warnings=True, **MISUSE))


def test_catch_warnings_records_them_before_block_until_ready_returns():
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run("leaky", _ours(python_warnings=True))
        kinds = [w.category for w in got]
    assert kinds == [mosaic_rt.SemaphoreLeakWarning]
    assert reports.pending() == 0


def test_every_device_of_a_shard_map_launch_reports_before_the_results():
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, lax.axis_index("x") + 1)
        o_ref[...] = x_ref[...]

    def body(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=_ours(python_warnings=True),
        )(x)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jax.device_put(jnp.ones((16, 128), jnp.float32), NamedSharding(mesh, P("x")))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        jax.block_until_ready(f(x))
        texts = sorted(str(w.message) for w in got)
    assert len(texts) == 2, texts
    assert "device 0" in texts[0] and "has count 1" in texts[0]
    assert "device 1" in texts[1] and "has count 2" in texts[1]


def test_a_warning_turned_into_an_error_fails_the_call_with_that_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", mosaic_rt.SemaphoreLeakWarning)
        with pytest.raises(mosaic_rt.SemaphoreLeakWarning, match="has count 3"):
            with mosaic_rt.native_errors():
                run("leaky", _ours(python_warnings=True))
    # nothing is left behind: the next kernel runs
    np.testing.assert_array_equal(np.asarray(run("clean", _ours())), 2.0)


def test_environment_variable_turns_warnings_on(monkeypatch):
    monkeypatch.setenv("MOSAIC_RT_WARNINGS", "1")
    with pytest.warns(mosaic_rt.SemaphoreLeakWarning):
        run("leaky", _ours())
    # an explicit value wins over the environment
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run("leaky", _ours(python_warnings=False))
    assert got == []


def test_bad_settings_are_clear_errors(monkeypatch):
    with pytest.raises(TypeError, match="python_warnings must be a bool or None"):
        _ours(python_warnings="yes")
    monkeypatch.setenv("MOSAIC_RT_WARNINGS", "maybe")
    with pytest.raises(ValueError, match="MOSAIC_RT_WARNINGS must be"):
        reports.as_warnings(None)
    with pytest.raises(TypeError):
        reports.set_default("yes")


# ------------------------------ whole suites, in their own pytest configuration

_SUITE = textwrap.dedent("""
    import os
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu
    import mosaic_rt
    from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE, stock_interpreter
    from report_kernels import run

    STOCK = os.environ["REPORT_BACKEND"] == "stock"
    Params = pltpu.InterpretParams if STOCK else mosaic_rt.InterpretParams
    RACES = {"detect_races": True, **({"on_race": "warn"} if STOCK_HAS_ON_RACE else {})}

    def races_found():
        return (stock_interpreter.races.races_found if STOCK
                else mosaic_rt.races.races_found)

    def test_racy():
        run("racy", Params(**RACES))
        assert races_found()

    def test_leaky():
        np.testing.assert_array_equal(np.asarray(run("leaky", Params())), 2.0)

    def test_misusing():
        np.testing.assert_array_equal(np.asarray(run("misusing", Params())), 1.0)

    def test_clean():
        np.testing.assert_array_equal(np.asarray(run("clean", Params())), 2.0)
""")

_PHASES = textwrap.dedent("""
    import warnings
    import mosaic_rt
    from report_kernels import run

    def test_a_leaks():
        run("leaky", mosaic_rt.InterpretParams())

    def test_b_gets_nothing_of_a(recwarn):
        run("clean", mosaic_rt.InterpretParams())
        assert [str(w.message) for w in recwarn] == []
""")


def _pytest(tmp_path, suite: str, *args, ini: str = "", env: dict | None = None):
    (tmp_path / "report_kernels.py").write_text(KERNELS)
    (tmp_path / "test_suite.py").write_text(suite)
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n" + ini)
    environ = {k: v for k, v in os.environ.items() if k != "MOSAIC_RT_WARNINGS"}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env=environ,
    )


def _outcomes(run) -> dict[str, str]:
    got = {}
    for line in run.stdout.splitlines():
        for word in ("PASSED", "FAILED", "ERROR"):
            if line.startswith(word + " "):
                got[line.split()[1].split("::")[-1]] = word
    return got


def test_filterwarnings_error_suite_has_the_same_outcome_on_stock_and_ours(tmp_path):
    stock = _pytest(tmp_path, _SUITE, env={"REPORT_BACKEND": "stock"})
    ours = _pytest(tmp_path, _SUITE, env={"REPORT_BACKEND": "ours"})
    want = {t: "PASSED" for t in ("test_racy", "test_leaky", "test_misusing", "test_clean")}
    assert _outcomes(stock) == want, stock.stdout + stock.stderr
    assert _outcomes(ours) == want, ours.stdout + ours.stderr
    # both print the leak (in the captured output of the test that leaked)
    assert "has non-zero count" in stock.stdout
    assert "semaphore leak at kernel exit" in ours.stdout


def test_option_warnings_land_in_their_own_test(tmp_path):
    run = _pytest(tmp_path, _PHASES, "--mosaic-rt-warnings")
    assert _outcomes(run) == {"test_a_leaks": "FAILED", "test_b_gets_nothing_of_a": "PASSED"}, run.stdout + run.stderr
    assert "SemaphoreLeakWarning" in run.stdout


def test_ini_key_and_environment_turn_warnings_on(tmp_path):
    ini = _pytest(tmp_path, _PHASES, ini="mosaic_rt_warnings = true\n")
    env = _pytest(tmp_path, _PHASES, env={"MOSAIC_RT_WARNINGS": "1"})
    off = _pytest(tmp_path, _PHASES, ini="mosaic_rt_warnings = false\n", env={"MOSAIC_RT_WARNINGS": "1"})
    for run in (ini, env):
        assert _outcomes(run) == {"test_a_leaks": "FAILED", "test_b_gets_nothing_of_a": "PASSED"}, (
            run.stdout + run.stderr
        )
    # the ini key wins over the environment
    assert _outcomes(off) == {"test_a_leaks": "PASSED", "test_b_gets_nothing_of_a": "PASSED"}, off.stdout + off.stderr
