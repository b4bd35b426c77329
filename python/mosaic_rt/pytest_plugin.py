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

It imports neither jax nor mosaic_rt: the option is passed on as
``MOSAIC_RT_WARNINGS`` (which the suite's kernels read when traced), and
the hooks only act once the suite itself has imported mosaic_rt.
"""

from __future__ import annotations

import os
import sys

import pytest

_ENV = "MOSAIC_RT_WARNINGS"  # mosaic_rt.ffi.reports.ENV_VAR
_saved: dict[str, str | None] = {}


def pytest_addoption(parser):
    parser.addoption(
        "--mosaic-rt-warnings",
        action="store_true",
        default=None,
        help="mosaic_rt: issue kernel races, semaphore leaks and misuse as Python warnings "
        "(RaceWarning, SemaphoreLeakWarning, MisuseWarning) instead of printing or "
        "logging them as stock interpret mode does",
    )
    parser.addini(
        "mosaic_rt_warnings",
        default="",
        help="mosaic_rt: true/false, as --mosaic-rt-warnings (unset: MOSAIC_RT_WARNINGS decides)",
    )


def pytest_configure(config):
    value = config.getoption("mosaic_rt_warnings", None)
    if value is None:
        raw = str(config.getini("mosaic_rt_warnings")).strip().lower()
        if raw in ("1", "true", "yes", "on"):
            value = True
        elif raw in ("0", "false", "no", "off"):
            value = False
        elif raw:
            raise pytest.UsageError(f"ini option mosaic_rt_warnings must be true or false, got {raw!r}")
    if value is not None:
        _saved[_ENV] = os.environ.get(_ENV)
        os.environ[_ENV] = "1" if value else "0"


def pytest_unconfigure(config):
    if _ENV in _saved:
        old = _saved.pop(_ENV)
        if old is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = old


def _deliver():
    reports = sys.modules.get("mosaic_rt.ffi.reports")
    if reports is None:  # the suite never imported mosaic_rt
        return
    # (The background thread never starts while this module is loaded.)
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
