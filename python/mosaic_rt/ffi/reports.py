"""Reports that do not fail a kernel -- races (``on_race="warn"``), semaphore
leaks (``on_semaphore_leak="warn"``), misuse -- and where they go.

The native side never prints: it queues each report (process-wide,
bounded), marked by its launch's ``python_warnings`` setting. When a
device's program ends, its ``kernel_end`` hands the queue to
:func:`deliver_from_launch` with the GIL, on the XLA thread, before the
device's outputs are ready (a native sink, not a host callback in the
program, so compiled kernels stay cacheable). So whoever waits for the
results -- ``block_until_ready`` inside ``pytest.warns`` or
``warnings.catch_warnings`` -- has seen every report of the launch.

Each report goes one of two ways:

* as a Python warning (``python_warnings`` on): ``mosaic_rt.RaceWarning``,
  ``SemaphoreLeakWarning``, ``MisuseWarning``, attributed to the kernel's
  source line; Python's default filter shows each distinct text once.
* as the installed jax's stock interpreter reports the same event (the
  default): races printed to ``sys.stdout`` (jax < 0.12) or logged as
  warnings (jax >= 0.12, logger ``mosaic_rt.races``), leaks printed,
  misuse -- which stock does not detect -- logged (logger ``mosaic_rt``).
  A suite run with ``-W error`` keeps its outcome.

Reports of a launch that failed before its end, and of a
``mosaic_rt.Runtime`` driven from Python threads, stay queued: the pytest
plugin delivers them at the end of the test phase, elsewhere a background
thread within ~0.2 s, :func:`deliver` at once, and interpreter exit
whatever is left.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
import time
import warnings

from mosaic_rt import _native
from mosaic_rt.errors import MisuseWarning, RaceWarning, SemaphoreLeakWarning
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE

#: Native report category -> warning class.
CATEGORIES: dict[str, type[Warning]] = {
    "race": RaceWarning,
    "leak": SemaphoreLeakWarning,
    "misuse": MisuseWarning,
}

#: Environment variable turning Python warnings on for the whole process.
ENV_VAR = "MOSAIC_RT_WARNINGS"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

race_logger = logging.getLogger("mosaic_rt.races")
misuse_logger = logging.getLogger("mosaic_rt")

# The process setting a launch with python_warnings=None uses; None: the
# environment decides (the pytest plugin sets it from its option / ini key).
_process_default: dict[str, bool | None] = {"value": None}


def set_default(value: bool | None) -> None:
    """Sets the process-wide default of ``InterpretParams.python_warnings``
    (``None``: back to the environment variable)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"the python_warnings default must be a bool or None, got {value!r}")
    _process_default["value"] = value


def as_warnings(python_warnings: bool | None) -> bool:
    """Whether a launch with this ``InterpretParams.python_warnings`` issues
    Python warnings: the value itself, else the process default, else
    ``MOSAIC_RT_WARNINGS``."""
    if python_warnings is not None:
        return python_warnings
    if _process_default["value"] is not None:
        return _process_default["value"]
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{ENV_VAR} must be 1/true/yes/on or 0/false/no/off, got {raw!r}")


def take() -> list[tuple[str, str, dict, bool]]:
    """Drains the native queue: ``(category, text, details, as_warning)``
    per report, oldest first (nothing issued)."""
    return list(_native.take_reports())


def pending() -> int:
    """Reports queued and not yet taken."""
    return int(_native.pending_reports())


_SITE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::\d+)?(?: \(.*\))?$")
# The registry of our warnings (what Python's "default" action has shown),
# one for every report, as a module's __warningregistry__ would be.
_registry: dict = {}


def _warn(category: str, text: str, details: dict) -> None:
    cls = CATEGORIES.get(category, MisuseWarning)
    m = _SITE.match(str(details.get("site") or ""))
    if m is None:
        warnings.warn_explicit(text, cls, "<mosaic_rt kernel>", 0, registry=_registry)
    else:
        warnings.warn_explicit(text, cls, m["file"], int(m["line"]), registry=_registry)


def _like_stock(category: str, text: str) -> None:
    if category == "race":
        if STOCK_HAS_ON_RACE:  # jax >= 0.12 logs races of on_race="warn"
            race_logger.warning(text)
        else:  # older jax prints them
            print(text, file=sys.stdout, flush=True)
    elif category == "leak":  # every jax prints leaks
        print(text, file=sys.stdout, flush=True)
    else:  # stock has no such report
        misuse_logger.warning(text)


def issue(items) -> int:
    """Issues each ``(category, text, details, as_warning)`` report its way
    (see the module docstring); how many. A warning a filter turns into an
    error propagates (the rest of ``items`` is then dropped)."""
    n = 0
    for category, text, details, as_warning in items:
        if as_warning:
            _warn(category, text, details)
        else:
            _like_stock(category, text)
        n += 1
    return n


def deliver(*_args, **_kwargs) -> int:
    """Drains the queue and issues each report its way. Returns how many
    were issued. Arguments are ignored (it can serve as a callback)."""
    return issue(take())


def deliver_from_launch(handle: int, device: int):
    """The native sink: called by ``kernel_end`` of (launch ``handle``,
    ``device``) with the GIL when reports are queued. Returns ``None``, or
    for an exception raised while issuing them (a warning filter set to
    "error") ``(key, type name, message)`` for the launch to fail with, so
    that ``native_errors`` re-raises that very exception."""
    try:
        issue(take())
    except BaseException as exc:  # noqa: BLE001 -- handed to the launch as its root cause
        from mosaic_rt.ffi.errors import register_exception

        return register_exception(exc), type(exc).__name__, str(exc)
    return None


_background = {"started": False, "disabled": False}
_lock = threading.Lock()


def deliver_in_background(period: float = 0.2) -> None:
    """Starts (once per process) a daemon thread delivering what is left
    queued (a failed launch's reports, a ``Runtime``'s) every ``period``
    seconds; a no-op once disabled."""
    if "mosaic_rt_pytest.reports_and_cache" in sys.modules:  # pytest: the plugin delivers
        _background["disabled"] = True
    with _lock:
        if _background["started"] or _background["disabled"]:
            return
        _background["started"] = True

    def run():
        while not _background["disabled"]:
            time.sleep(period)
            if not _background["disabled"] and pending():
                deliver()

    threading.Thread(target=run, name="mosaic_rt-reports", daemon=True).start()


# Whatever is still queued when the process ends is shown, not lost.
atexit.register(deliver)
