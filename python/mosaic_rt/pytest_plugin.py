"""pytest plugin (registered by installing mosaic_rt): race, leak and misuse
reports of policy "warn" become warnings of the test that caused them.

Kernels run without Python; their reports wait in a native queue. After
each phase (setup, call, teardown) of a test this drains the queue and
issues them as ``mosaic_rt.RaceWarning`` / ``SemaphoreLeakWarning`` /
``MisuseWarning`` inside pytest's warning capture, so they show in the
test's warnings summary and ``-W error::mosaic_rt.RaceWarning`` fails the
test.
"""

from __future__ import annotations

import pytest

from mosaic_rt.ffi import reports


def pytest_configure(config):
    # Deliver in the test's thread, never from the background thread.
    reports.disable_background_delivery()


def _deliver():
    if reports.pending():
        reports.deliver(stacklevel=3)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    result = yield
    _deliver()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    _deliver()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    _deliver()
    return result
