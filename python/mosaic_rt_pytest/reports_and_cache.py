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

* ``--mosaic-rt-cache DIR`` (or ini ``mosaic_rt_cache_dir = DIR``; off
  unless asked): jax's persistent compilation cache in DIR, with its
  thresholds lowered so that every program is kept -- mosaic_rt's kernels
  compile in well under jax's default minimum of a second, and the suite's
  own small jnp programs are worth keeping too. A later run loads every
  program it compiled before (stock interpret mode's programs hold Python
  callbacks, which jax never caches). Kernels of several cores per device
  compile for a private client and are not cached.

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

    parser.addoption(
        "--mosaic-rt-cache",
        metavar="DIR",
        default=None,
        help="mosaic_rt: keep every compiled program (kernels included) in jax's persistent compilation cache in DIR",
    )
    parser.addini(
        "mosaic_rt_cache_dir",
        default="",
        help="mosaic_rt: directory of jax's persistent compilation cache for the run, as --mosaic-rt-cache",
    )


# jax's persistent-cache settings for --mosaic-rt-cache: the directory, and
# thresholds that keep every program (defaults: compiles of >= 1 s only).
_CACHE_SETTINGS = (
    ("jax_compilation_cache_dir", "JAX_COMPILATION_CACHE_DIR", None),
    ("jax_persistent_cache_min_compile_time_secs", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", 0),
    ("jax_persistent_cache_min_entry_size_bytes", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", -1),
)


def _configure_cache(config) -> None:
    directory = config.getoption("mosaic_rt_cache", None) or str(config.getini("mosaic_rt_cache_dir")).strip()
    if not directory:
        return
    directory = os.path.abspath(os.path.expanduser(directory))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"mosaic_rt cache directory {directory!r}: {exc}") from None
    jax = sys.modules.get("jax")  # a conftest may have imported it already
    for name, env, value in _CACHE_SETTINGS:
        value = directory if value is None else value
        if jax is not None:
            jax.config.update(name, value)
        else:  # read when jax is imported
            _saved.setdefault(env, os.environ.get(env))
            os.environ[env] = str(value)


def pytest_configure(config):
    _configure_cache(config)
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
    for name, old in list(_saved.items()):
        del _saved[name]
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


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
