"""pytest plugin for scripts/jax_suite.py (both backends; load with
``-p jax_suite_record``, scripts/ on sys.path): appends, as JSON lines to
$JAX_SUITE_RECORD, the collected test ids, each test's start, and each
phase's report (outcome, duration, one-line message), flushing every line,
so the harness knows which test was running when a pytest process hangs or
dies; with mosaic_rt importable, also each test's time by stage
(`mosaic_rt.stages`: kernel trace / interpretation / lowering / compile,
the test's own compiles, the rest), for either interpreter. Observes only.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

_fh = None


def _write(obj):
    if _fh is not None:
        _fh.write(json.dumps(obj) + "\n")
        _fh.flush()


def pytest_configure(config):
    global _fh
    path = os.environ.get("JAX_SUITE_RECORD")
    if path:
        _fh = open(path, "a")


def pytest_collection_finish(session):
    _write({"collected": [item.nodeid for item in session.items]})


def pytest_runtest_logstart(nodeid, location):
    _write({"start": nodeid})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if "jax" not in sys.modules:  # no kernel can run (and no import to pay here)
        return (yield)
    try:
        from mosaic_rt import stages
    except Exception:  # noqa: BLE001 - observing must never cost a test its record
        return (yield)
    with stages.record() as rec:
        result = yield
    try:
        _write({"stages": item.nodeid, **rec.summary()})
    except Exception:  # noqa: BLE001
        pass
    return result


def _message(report):
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skip: (path, lineno, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return crash.message
    return str(longrepr)


def pytest_runtest_logreport(report):
    entry = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": round(report.duration, 3),
    }
    if report.outcome != "passed":
        message = _message(report)
        # Head and tail: a JaxRuntimeError quoting a callback's traceback
        # names the root cause at its end.
        entry["message"] = message if len(message) <= 4000 else message[:1000] + "\n...\n" + message[-3000:]
        if report.failed:
            entry["detail"] = (report.longreprtext or "")[-6000:]
    _write(entry)


def pytest_unconfigure(config):
    global _fh
    if _fh is not None:
        _fh.close()
        _fh = None
