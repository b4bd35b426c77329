"""pytest plugin (registered by installing mosaic_rt).

* ``--mosaic-rt-warnings`` (or ini ``mosaic_rt_warnings = true``): every
  mosaic_rt kernel of the run issues races, semaphore leaks and misuse as
  Python warnings (``InterpretParams(python_warnings=None)`` follows it;
  see :mod:`mosaic_rt.ffi.reports`). Without it they are printed or logged
  as the installed jax's stock interpreter does, so a suite configured with
  ``filterwarnings = error`` keeps its outcome when it switches backends.
* A kernel's reports are issued when it ends, inside the test that ran it.
  Reports still queued after a test phase (a launch that failed before its
  end, a ``mosaic_rt.Runtime`` driven from threads) are issued right after
  that phase, inside pytest's warning capture, never in a later test.
"""

from __future__ import annotations

import pytest

from mosaic_rt.ffi import reports


def pytest_addoption(parser):
    parser.addoption(
        "--mosaic-rt-warnings", action="store_true", default=None,
        help="mosaic_rt: issue kernel races, semaphore leaks and misuse as Python warnings "
             "(RaceWarning, SemaphoreLeakWarning, MisuseWarning) instead of printing or "
             "logging them as stock interpret mode does")
    parser.addini(
        "mosaic_rt_warnings", default="",
        help="mosaic_rt: true/false, as --mosaic-rt-warnings (unset: MOSAIC_RT_WARNINGS decides)")


def pytest_configure(config):
    # Deliver in the test's thread, never from the background thread.
    reports.disable_background_delivery()
    value = config.getoption("mosaic_rt_warnings", None)
    if value is None:
        raw = str(config.getini("mosaic_rt_warnings")).strip().lower()
        if raw in ("1", "true", "yes", "on"):
            value = True
        elif raw in ("0", "false", "no", "off"):
            value = False
        elif raw:
            raise pytest.UsageError(
                f"ini option mosaic_rt_warnings must be true or false, got {raw!r}")
    if value is not None:
        reports.set_default(value)


def pytest_unconfigure(config):
    reports.set_default(None)


def _deliver():
    if reports.pending():
        reports.deliver()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    try:
        return (yield)
    finally:
        _deliver()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        _deliver()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _deliver()
