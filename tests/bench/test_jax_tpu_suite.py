"""scripts/jax_tpu_suite.py without JAX's repository: rerunning only an
earlier run's failures (``--only-failing``) and reading a compile-checked
run's passes as measured TPU rejections (``--report --checked``)."""

from __future__ import annotations

import os
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "scripts")
sys.path.insert(0, os.path.abspath(SCRIPTS))

import jax_tpu_suite  # noqa: E402
import suite_runner  # noqa: E402

pytestmark = pytest.mark.timeout(60)

ROW, MEGA = "tpu_ops_test.py", "tpu_ops_test.py@v5p"


def _run(outcomes: dict, **extra) -> dict:
    """A run's JSON with one row per ``{row: {test name: outcome}}``."""
    files = {}
    for row, tests in outcomes.items():
        t = {f"{row}::OpsTest::{n}": {"outcome": o, "time": 1.0, "message": extra.get(n, "")} for n, o in tests.items()}
        files[row] = {
            "file": row.split("@")[0],
            "chip": "v5e",
            "collected": len(t),
            "mosaic_rt": {"info": {"collected": len(t), "counts": suite_runner.counts(t)}, "tests": t},
        }
    return {"tag": "jax-v0.10.2", "versions": {"jax": "0.10.2", "python": "3.11"}, "test_timeout": 120, "files": files}


def test_only_failing_keeps_failures_and_errors_per_row_and_nothing_else():
    earlier = _run(
        {
            ROW: {"test_a": "passed", "test_b": "failed", "test_c": "error", "test_d": "skipped"},
            MEGA: {"test_e": "failed", "test_f": "passed"},
        }
    )
    only = jax_tpu_suite.not_passing(earlier)
    assert only == {ROW: {f"{ROW}::OpsTest::test_b", f"{ROW}::OpsTest::test_c"}, MEGA: {f"{MEGA}::OpsTest::test_e"}}
    ids = [f"tests/pallas/{ROW}::OpsTest::test_{x}" for x in "abcdz"]
    assert jax_tpu_suite._only({"only": only}, ROW, ids) == ids[1:3]
    assert jax_tpu_suite._only({"only": None}, ROW, ids) == ids  # without the option: every test
    assert jax_tpu_suite._only({"only": only}, "tpu_info_test.py", ids) == []


def test_report_counts_a_failure_the_checked_run_passes_as_a_measured_rejection(capsys):
    plain = _run(
        {ROW: {"test_raises": "failed", "test_other": "failed", "test_ok": "passed"}},
        test_raises="AssertionError: NotImplementedError not raised",
        test_other="AssertionError: NotImplementedError not raised",
    )
    checked = _run({ROW: {"test_raises": "passed", "test_other": "failed"}})
    without = jax_tpu_suite.report(plain, out=lambda s: None)
    assert without["open"] == [f"{ROW}::OpsTest::test_other", f"{ROW}::OpsTest::test_raises"]
    summary = jax_tpu_suite.report(plain, checked=jax_tpu_suite.passed_tests(checked))
    assert summary["open"] == [f"{ROW}::OpsTest::test_other"]
    assert summary["cpu_limits"] == [f"{ROW}::OpsTest::test_raises"]
    assert "1: " + jax_tpu_suite.TPU_REJECTION_MEASURED in capsys.readouterr().out
    # And --compare-check, over the same pair, names it a gain of the check, no loss.
    assert jax_tpu_suite.compare_check(plain, checked, out=lambda s: None) == {
        "lost": [],
        "won": [(f"{ROW}::OpsTest::test_raises", "AssertionError: NotImplementedError not raised")],
    }
