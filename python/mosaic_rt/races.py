"""Results of race detection (``mosaic_rt.InterpretParams(detect_races=True)``).

Like stock's ``interpret_pallas_call.races.races_found``, ``races_found``
tells whether the most recent kernel launch that ran with race detection
found a data race: two accesses to overlapping elements of one buffer, at
least one a write, not ordered by happens-before (program order, semaphore
signal -> wait, DMA start -> its read -> its write -> its signals, the device
barrier). The state is reset when such a launch begins; launches without
race detection leave it alone. A ``mosaic_rt.Runtime(detect_races=True)``
counts as a launch too.

Detection is exact (every running DMA is its own thread, unlike stock's
random shared virtual ids) and costs time proportional to the elements
each access touches, not to the kernel's history. What a race does
depends on ``on_race``: ``"raise"`` fails the launch with
``mosaic_rt.RaceError`` at the racing access, ``"warn"`` queues a
``mosaic_rt.RaceWarning`` (see :mod:`mosaic_rt.ffi.reports`), and without
it the first race is printed to stderr. Each report names both accesses:
read or write, buffer, index ranges (``[0:8, 0:128]``), device and core or
DMA, and the source line of each (a DMA's: its start). :func:`reports`
returns the first ones in full.
"""

from __future__ import annotations

from mosaic_rt import _native

__all__ = ["races_found", "reports", "count"]  # noqa: F822 - races_found: module __getattr__


def _latest():
    return _native.race_results() or (False, 0, [])


def reports() -> list[str]:
    """Readable reports of the first races of the most recent launch with
    race detection (at most 32); each names both accesses: buffer, region,
    device and core or DMA, read or write."""
    return list(_latest()[2])


def count() -> int:
    """How many accesses of that launch raced with an earlier one."""
    return int(_latest()[1])


def __getattr__(name: str):
    # `races_found` is read live from the native side (PEP 562).
    if name == "races_found":
        return bool(_latest()[0])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
