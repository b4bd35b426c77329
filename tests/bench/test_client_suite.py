"""scripts/client_suite.py without a client venv: which chip a file asks
for, the comparison and report of two sides' outcomes, and the shared
per-file runner (scripts/suite_runner.py) on a tiny pytest file of its own,
with a hanging test killed and the file resumed."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "scripts")
sys.path.insert(0, os.path.abspath(SCRIPTS))

import client_suite  # noqa: E402
import suite_runner  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("text", "chip"),
    [
        ("if not jtu.is_device_tpu_at_least(version=7): skip", "v7x"),
        ("jtu.is_device_tpu_at_least(6) or jtu.is_device_tpu_at_least(version=7)", "v7x"),
        ("if not jtu.is_device_tpu_at_least(version=4): skip", "v6e"),
        ("jtu.is_device_tpu(7, 'x')", "v7x"),
        ("no gate at all", "v6e"),
    ],
)
def test_chip_of_takes_the_highest_gated_version(tmp_path, text, chip):
    path = tmp_path / "x_test.py"
    path.write_text(text)
    assert client_suite.chip_of(str(path), "x_test.py") == chip


def _side(outcomes: dict, collected: int) -> dict:
    tests = {t: {"outcome": o, "time": 1.0} for t, o in outcomes.items()}
    return {"info": {"collected": collected, "counts": suite_runner.counts(tests)}, "tests": tests}


def test_report_counts_regressions_gains_and_time_on_both(capsys):
    stock = _side({"f.py::a": "passed", "f.py::b": "passed", "f.py::c": "failed", "f.py::d": "skipped"}, 4)
    ours = _side({"f.py::a": "passed", "f.py::b": "failed", "f.py::c": "passed", "f.py::d": "skipped"}, 4)
    ours["tests"]["f.py::b"]["message"] = "ValueError: boom"
    ours["tests"]["f.py::a"]["time"] = 0.25
    result = {
        "versions": {"jax": "0.11.2", "python": "3.12"},
        "test_timeout": 120.0,
        "files": {"f.py": {"chip": "v6e", "stock": stock, "mosaic_rt": ours}},
    }
    summary = client_suite.report(result)
    assert [d["test"] for d in summary["regressions"]] == ["f.py::b"]
    assert [d["test"] for d in summary["gained"]] == ["f.py::c"]
    assert summary["both_passed"] == 1
    assert summary["time_both"] == {"stock": 1.0, "mosaic_rt": 0.25, "ratio": 4.0}
    out = capsys.readouterr().out
    assert "pass on stock, not on ours: 1" in out and "ValueError: boom" in out
    assert "ours passes 2 of the 3 tests that ran" in out


def test_runner_kills_a_hanging_test_and_resumes_the_file(tmp_path):
    test = tmp_path / "sample_test.py"
    test.write_text(
        textwrap.dedent(
            """
            import time

            def test_fast():
                pass

            def test_hangs():
                time.sleep(600)

            def test_after():
                assert 1 + 1 == 3
            """
        )
    )
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "jax_suite_record", "-q"]
    base += ["-p", "no:mosaic_rt", "-p", "no:mosaic_rt_tpu"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(SCRIPTS), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    info, tests = suite_runner.run_file(
        base,
        [str(test)],
        cwd=str(tmp_path),
        env=env,
        record=str(tmp_path / "record.jsonl"),
        log=str(tmp_path / "log.txt"),
        file="sample_test.py",
        test_timeout=3.0,
    )
    assert tests["sample_test.py::test_fast"]["outcome"] == "passed"
    assert tests["sample_test.py::test_hangs"]["outcome"] == "error"
    assert "hung" in tests["sample_test.py::test_hangs"]
    assert tests["sample_test.py::test_after"]["outcome"] == "failed"
    assert info["counts"]["timed_out"] == 1 and info["collected"] == 3
    assert len(info["returncodes"]) == 2  # killed once, resumed once
