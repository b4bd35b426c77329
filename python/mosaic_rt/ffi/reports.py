"""Reports of policy "warn" -- races, semaphore leaks, misuse -- as Python
warnings.

The native side never prints: it queues each report (process-wide,
bounded). :func:`deliver` drains the queue and issues every report with
``warnings.warn`` under its own category (``mosaic_rt.RaceWarning``,
``SemaphoreLeakWarning``, ``MisuseWarning``); Python's default filter then
shows each distinct text once, and ``pytest -W error::mosaic_rt.RaceWarning``
turns them into errors. The interpreter emits a ``pending_reports`` op at
kernel end and, when it is non-zero, a host callback that calls
:func:`deliver`.
"""

from __future__ import annotations

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
