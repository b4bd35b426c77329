"""pytest plugin of the simulated chip (registered by installing mosaic_rt):
``pytest --mosaic-rt[=CHIP]`` runs the whole session on a simulated TPU
host (`mosaic_rt.simulate`; docs/pytest-flag.md).

Three spellings turn it on; the first found wins:

* ``--mosaic-rt`` (the default chip) or ``--mosaic-rt=CHIP``;
* the environment: ``MOSAIC_RT_CHIP=CHIP``;
* the ini file: ``mosaic_rt = CHIP``.

``off`` in an earlier spelling turns it off. With it on:
``--mosaic-rt-params`` / ``MOSAIC_RT_PARAMS`` / ini ``mosaic_rt_params``
(``KEY=VALUE ...``: InterpretParams fields for kernels),
``--mosaic-rt-disable`` / ``MOSAIC_RT_DISABLE`` / ini ``mosaic_rt_disable``
(gates to leave off, or ``all``), ``--mosaic-rt-interpreter`` /
``MOSAIC_RT_INTERPRETER`` / ini ``mosaic_rt_interpreter`` (``stock``: jax's
own TPU interpret mode on the same simulated chip). Each test runs inside
`mosaic_rt.native_errors` (a kernel's error arrives as its own Python type);
races, leaks and TPU-check verdicts are reported inside the test that ran
the kernel, by mosaic_rt's other plugins, as without the flag.

With the flag off this module does nothing and imports neither jax nor
mosaic_rt (the chip table it shows in --help is loaded on its own).
"""

from __future__ import annotations

import os

import pytest

from mosaic_rt_pytest import pure_module

chips = pure_module("simulate/chips.py", "chips")  # stdlib only: no jax, no mosaic_rt

_OFF = ("off", "none", "no", "false", "0")
_DEFAULT = "default"


def pytest_addoption(parser):
    group = parser.getgroup("mosaic_rt")
    group.addoption(
        "--mosaic-rt",
        nargs="?",
        const=_DEFAULT,
        default=None,
        metavar="CHIP",
        help=f"mosaic_rt: run on a simulated TPU host: every Pallas TPU kernel in mosaic_rt's TPU interpret mode, "
        f"whatever interpret= it passes, and jax's TPU questions answered for CHIP ({chips.chip_choices()}; "
        f"default {chips.DEFAULT_CHIP}; off: no simulation)",
    )
    group.addoption(
        "--mosaic-rt-params",
        default=None,
        metavar="KEY=VALUE ...",
        help="mosaic_rt: InterpretParams fields for the simulated run's kernels, e.g. "
        "'dma_execution_mode=on_wait detect_races=true'",
    )
    group.addoption(
        "--mosaic-rt-disable",
        default=None,
        metavar="GATES",
        help=f"mosaic_rt: gates of the simulated host to leave off (comma-separated: {', '.join(chips.GATES)}; all)",
    )
    group.addoption(
        "--mosaic-rt-interpreter",
        default=None,
        choices=chips.INTERPRETERS,
        help="mosaic_rt: which TPU interpret mode runs the simulated run's kernels (default mosaic_rt; stock: "
        "jax's own)",
    )
    parser.addini("mosaic_rt", default="", help="mosaic_rt: simulated TPU chip for the run, as --mosaic-rt=CHIP")
    parser.addini("mosaic_rt_params", default="", help="mosaic_rt: as --mosaic-rt-params")
    parser.addini("mosaic_rt_disable", default="", help="mosaic_rt: as --mosaic-rt-disable")
    parser.addini("mosaic_rt_interpreter", default="", help="mosaic_rt: as --mosaic-rt-interpreter")


def pytest_load_initial_conftests(early_config, parser, args):
    """``pytest --mosaic-rt tests/``: argparse would take the path as the
    chip; a following argument that is no chip but names a file or
    directory stays a path."""
    for i, arg in enumerate(args[:-1]):
        if arg == "--mosaic-rt":
            following = args[i + 1]
            if following.startswith("-") or _is_chip(following):
                continue
            if os.path.exists(following.split("::")[0]):
                args[i] = f"--mosaic-rt={_DEFAULT}"


def _is_chip(text: str) -> bool:
    if text.strip().lower() in _OFF or text == _DEFAULT:
        return True
    try:
        chips.normalize_chip(text)
    except ValueError:
        return False
    return True


def _setting(config, option: str, env: str, ini: str) -> tuple[str | None, str]:
    """``(value, where it came from)``: the command line, else the
    environment, else the ini file; ``(None, "")`` when none sets it."""
    value = config.getoption(option, None)
    if value is not None:
        return value, f"--{option.replace('_', '-')}"
    value = os.environ.get(env, "").strip()
    if value:
        return value, env
    value = str(config.getini(ini)).strip()
    if value:
        return value, f"ini {ini}"
    return None, ""


def _chip(config) -> str | None:
    value, where = _setting(config, "mosaic_rt", chips.ENV_CHIP, "mosaic_rt")
    if value is None or value.strip().lower() in _OFF:
        return None
    if value == _DEFAULT:
        return chips.DEFAULT_CHIP
    try:
        return chips.normalize_chip(value, where)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def _options(config) -> dict:
    params, where_params = _setting(config, "mosaic_rt_params", chips.ENV_PARAMS, "mosaic_rt_params")
    disable, where_disable = _setting(config, "mosaic_rt_disable", chips.ENV_DISABLE, "mosaic_rt_disable")
    interpreter, where_interp = _setting(
        config, "mosaic_rt_interpreter", chips.ENV_INTERPRETER, "mosaic_rt_interpreter"
    )
    try:
        return {
            "params": chips.parse_params(params, where_params),
            "disable": chips.parse_gates(disable, where_disable),
            "interpreter": chips.normalize_interpreter(interpreter or "mosaic_rt", where_interp or "interpreter"),
        }
    except (TypeError, ValueError) as e:
        raise pytest.UsageError(str(e)) from None


def pytest_configure(config):
    chip = _chip(config)
    if chip is None:
        return
    options = _options(config)
    import warnings

    import mosaic_rt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            simulation = mosaic_rt.set_simulated_tpu(chip, **options)
        except (TypeError, ValueError) as e:  # a bad params field, with its own message
            raise pytest.UsageError(f"mosaic_rt params {options['params']}: {e}") from None
        except RuntimeError as e:  # jax is not on the CPU
            raise pytest.UsageError(str(e)) from None
    config._mosaic_rt_simulation = simulation
    # Notes go to the header and the summary, not through warnings: suites
    # configured with filterwarnings = error would stop at startup.
    for w in caught:  # anything else said while starting (e.g. jax's own)
        if not str(w.message).startswith("mosaic_rt.simulate_tpu("):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def pytest_unconfigure(config):
    if getattr(config, "_mosaic_rt_simulation", None) is not None:
        import mosaic_rt

        mosaic_rt.set_simulated_tpu(None)
        config._mosaic_rt_simulation = None


def pytest_report_header(config):
    simulation = getattr(config, "_mosaic_rt_simulation", None)
    if simulation is None:
        return None
    off = sorted(set(chips.GATES) - simulation.gates)
    params = " ".join(f"{k}={v}" for k, v in simulation.params.items())
    header = (
        f"mosaic_rt: simulated TPU {simulation.chip.name} ({simulation.chip.device_kind}), kernels on "
        f"{simulation.interpreter}'s TPU interpret mode"
        + (f", params {params}" if params else "")
        + (f", gates off: {', '.join(off)}" if off else "")
    )
    return [header] + [f"mosaic_rt NOTE: {note}" for note in simulation.notes]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    simulation = getattr(config, "_mosaic_rt_simulation", None)
    if simulation is not None and simulation.notes:
        terminalreporter.write_sep("-", "mosaic_rt simulated TPU")
        for note in simulation.notes:
            terminalreporter.write_line(f"NOTE: {note}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    simulation = getattr(item.config, "_mosaic_rt_simulation", None)
    if simulation is None or simulation.interpreter != "mosaic_rt":
        return (yield)
    from mosaic_rt.ffi import native_errors

    with native_errors():
        return (yield)
