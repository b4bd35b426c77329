"""Reports of policy "warn" -- races, semaphore leaks, misuse -- as Python
warnings.

The native side never prints: it queues each report (process-wide,
bounded). :func:`deliver` drains the queue and issues every report with
``warnings.warn`` under its own category (``mosaic_rt.RaceWarning``,
``SemaphoreLeakWarning``, ``MisuseWarning``); Python's default filter then
shows each distinct text once, and ``pytest -W error::mosaic_rt.RaceWarning``
turns them into errors. Who calls :func:`deliver`: under pytest, mosaic_rt's plugin after each
test phase (the warnings belong to the test that ran the kernel);
elsewhere a background thread within ~0.2 s of the kernel's end (started
by the first kernel launch, see :func:`deliver_in_background`); and at
interpreter exit whatever is left. A host callback inside every kernel
program would deliver at once, but it would keep jax from caching the
compiled kernels.
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings

from mosaic_rt import _native
from mosaic_rt.errors import MisuseWarning, RaceWarning, SemaphoreLeakWarning

#: Native report category -> warning class.
CATEGORIES: dict[str, type[Warning]] = {
    "race": RaceWarning,
    "leak": SemaphoreLeakWarning,
    "misuse": MisuseWarning,
}


def take() -> list[tuple[str, str, dict]]:
    """Drains the native queue: ``(category, text, details)`` per report,
    oldest first (no warning issued)."""
    return list(_native.take_reports())


def pending() -> int:
    """Reports queued and not yet taken."""
    return int(_native.pending_reports())


def deliver(*_args, stacklevel: int = 2) -> int:
    """Drains the queue and issues each report as a warning of its
    category. Returns how many were issued. Extra positional arguments are
    ignored, so it can serve as a host callback directly."""
    reports = take()
    for category, text, _details in reports:
        warnings.warn(text, CATEGORIES.get(category, MisuseWarning), stacklevel=stacklevel)
    return len(reports)


_background = {"started": False, "disabled": False}
_lock = threading.Lock()


def disable_background_delivery() -> None:
    """Reports wait for an explicit :func:`deliver` (the pytest plugin does
    this: it delivers in the test's own thread)."""
    _background["disabled"] = True


def deliver_in_background(period: float = 0.2) -> None:
    """Starts (once per process) a daemon thread delivering queued reports
    every ``period`` seconds; a no-op once disabled."""
    with _lock:
        if _background["started"] or _background["disabled"]:
            return
        _background["started"] = True

    def run():
        while not _background["disabled"]:
            time.sleep(period)
            if not _background["disabled"] and pending():
                deliver(stacklevel=2)

    threading.Thread(target=run, name="mosaic_rt-reports", daemon=True).start()


# Whatever is still queued when the process ends is shown, not lost.
atexit.register(deliver)
