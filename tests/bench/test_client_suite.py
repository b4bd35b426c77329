"""scripts/client_suite.py without a client venv: which chip a file asks
for, the comparison and report of two sides' outcomes, and the shared
per-file runner (scripts/suite_runner.py) on a tiny pytest file of its own,
with a hanging test killed and the file resumed."""

from __future__ import annotations

import json
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


def test_each_side_runs_through_mosaic_rts_own_flag(monkeypatch):
    flags = client_suite.simulate_flags("stock", "v7x", True, {"dma_execution_mode": "on_wait", "detect_races": True})
    assert flags == [
        "--mosaic-rt=v7x",
        "--mosaic-rt-interpreter=stock",
        '--mosaic-rt-params=dma_execution_mode="on_wait" detect_races=true',
    ]  # the compile check is ours' only
    assert "--mosaic-rt-tpu-target=v6e" in client_suite.simulate_flags("mosaic_rt", "v6e", True)
    # What would steer a run past its command line stays out of its environment.
    monkeypatch.setenv("MOSAIC_RT_CHIP", "v4")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-8")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3 --xla_dump_to=/tmp/x")
    env = client_suite._env(stubs=True)
    assert "MOSAIC_RT_CHIP" not in env and "TPU_ACCELERATOR_TYPE" not in env
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"
    assert client_suite.STUBS in env["PYTHONPATH"].split(os.pathsep)


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


def test_report_of_a_one_sided_run_counts_its_side(capsys):
    """`--backends mosaic_rt` alone: the file's row and the pass rate come
    from ours; nothing is compared."""
    ours = _side({"g.py::a": "passed", "g.py::b": "failed", "g.py::c": "skipped"}, 3)
    result = {
        "versions": {"jax": "0.11.2", "python": "3.12"},
        "test_timeout": 120.0,
        "files": {"g.py": {"chip": "v7x", "mosaic_rt": ours}},
    }
    summary = client_suite.report(result)
    assert summary["collected"] == 3 and summary["both_passed"] == 0 and summary["regressions"] == []
    assert summary["totals"]["mosaic_rt"]["passed"] == 1
    out = capsys.readouterr().out
    assert "g.py" in out and "ours passes 1 of the 2 tests that ran" in out


def test_runner_kills_a_hanging_test_and_resumes_the_file(tmp_path):
    test = tmp_path / "sample_test.py"
    test.write_text(
        textwrap.dedent(
            """
            import time

            def test_fast():
                pass

            def test_n1():  # done before the hang: skipped when the file resumes
                pass

            def test_hangs():
                time.sleep(600)

            def test_after():
                assert 1 + 1 == 3

            def test_n10():  # still runs: done tests are skipped by exact id, not prefix
                pass
            """
        )
    )
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "jax_suite_record", "-q"]
    # Loading any of mosaic_rt's plugins imports mosaic_rt, and so jax: seconds,
    # more than this test's 3 s without progress on a busy machine.
    base += ["-p", "no:mosaic_rt", "-p", "no:mosaic_rt_tpu", "-p", "no:mosaic_rt_simulate"]
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
    assert tests["sample_test.py::test_n1"]["outcome"] == "passed"
    assert tests["sample_test.py::test_n10"]["outcome"] == "passed"
    assert info["counts"]["timed_out"] == 1 and info["collected"] == 5
    assert len(info["returncodes"]) == 2  # killed once, resumed once


@pytest.mark.parametrize(("sig", "name"), [(9, "SIGKILL"), (6, "SIGABRT")])
def test_runner_blames_a_test_that_kills_pytest_and_resumes_the_file(tmp_path, sig, name):
    """A test whose process dies (SIGKILL as from the OOM killer; SIGABRT as
    from a C++ check failure, libtpu's compiling a kernel it cannot) is an
    error of its own; the tests after it still run."""
    test = tmp_path / "crash_test.py"
    test.write_text(
        textwrap.dedent(
            f"""
            import os, signal

            def test_before():
                pass

            def test_dies():
                os.kill(os.getpid(), {sig})

            def test_after():
                pass
            """
        )
    )
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "jax_suite_record", "-q"]
    base += ["-p", "no:mosaic_rt", "-p", "no:mosaic_rt_tpu", "-p", "no:mosaic_rt_simulate"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(SCRIPTS), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    info, tests = suite_runner.run_file(
        base,
        [str(test)],
        cwd=str(tmp_path),
        env=env,
        record=str(tmp_path / "record.jsonl"),
        log=str(tmp_path / "log.txt"),
        file="crash_test.py",
        test_timeout=60.0,
    )
    dies = tests["crash_test.py::test_dies"]
    assert dies["outcome"] == "error" and dies["crashed"] == -sig and name in dies["message"]
    assert tests["crash_test.py::test_before"]["outcome"] == "passed"
    assert tests["crash_test.py::test_after"]["outcome"] == "passed"
    assert "crash_test.py::<file>" not in tests
    assert info["returncodes"] == [-sig, 0] and info["counts"]["error"] == 1


def test_subset_keeps_what_ours_did_not_pass_plus_the_sample():
    ours = _side({"f.py::T::a": "passed", "f.py::T::b": "failed", "f.py::T::c": "error", "f.py::T::d": "skipped"}, 4)[
        "tests"
    ]
    ids = [f"tests/kernels/f.py::T::{n}" for n in "abcd"]
    keep, info = client_suite._subset(ids, "f.py", ours, None)
    assert keep == {ids[1], ids[2]} and info["not_passed"] == 2
    keep, info = client_suite._subset(ids, "f.py", ours, 4)
    assert keep == {ids[0], ids[1], ids[2]} and info["sampled"] == 1
    # A file ours did not cover, or could not run, runs whole.
    keep, info = client_suite._subset(ids, "f.py", {}, None)
    assert keep == set(ids) and info["whole"]
    keep, info = client_suite._subset(ids, "f.py", {"f.py::<file>": {"outcome": "error"}}, None)
    assert keep == set(ids) and info["whole"]


def test_ours_results_a_stock_run_is_cut_to(tmp_path):
    ours = {"f.py::T::a": {"outcome": "failed"}}
    path = tmp_path / "ours.json"
    path.write_text(json.dumps({"files": {"f.py": {"mosaic_rt": {"tests": ours}}}}))
    args = client_suite.argparse.Namespace(stock_subset=False, subset_from=str(path))
    assert client_suite._ours_tests(args, {}, "f.py", "stock") == ours
    assert client_suite._ours_tests(args, {}, "f.py", "mosaic_rt") is None
    args = client_suite.argparse.Namespace(stock_subset=True, subset_from=None)
    assert client_suite._ours_tests(args, {"mosaic_rt": {"tests": ours}}, "f.py", "stock") == ours
    args = client_suite.argparse.Namespace(stock_subset=False, subset_from=None)
    assert client_suite._ours_tests(args, {}, "f.py", "stock") is None


def test_a_subset_side_is_compared_on_its_subset_only():
    stock = _side({"f.py::b": "passed", "f.py::c": "failed"}, 2)
    stock["info"]["subset"] = {"not_passed": 2}
    ours = _side({"f.py::a": "passed", "f.py::b": "failed", "f.py::c": "failed"}, 3)
    cmp = client_suite.compare_file(stock, ours)
    assert [d["test"] for d in cmp["regressions"]] == ["f.py::b"]
    assert [d["test"] for d in cmp["differ"]] == ["f.py::b"]  # f.py::a: not run on stock, not a difference
    assert cmp["collected"] == 3


def test_stage_totals_sum_the_split_of_the_given_tests():
    split = dict.fromkeys(suite_runner.STAGES, 1.0) | {"kernels": 2}
    tests = {"a": {"stages": split}, "b": {"stages": split}, "c": {}}
    totals = suite_runner.stage_totals(tests, ["a", "b"])
    assert totals["kernel_compile"] == 2.0 and totals["kernels"] == 4
    assert suite_runner.stage_totals(tests, ["a", "c"]) is None  # c has no split
    assert "4 kernels; kernel first calls 8.0s" in suite_runner.format_stages("ours", totals)


def test_the_record_plugin_writes_each_tests_stages(tmp_path):
    test = tmp_path / "sample_test.py"
    test.write_text(
        textwrap.dedent(
            """
            import jax, jax.numpy as jnp
            from jax.experimental import pallas as pl
            import mosaic_rt

            def test_kernel():
                def add(x_ref, o_ref):
                    o_ref[...] = x_ref[...] + 1.0
                x = jnp.zeros((8, 128), jnp.float32)
                f = pl.pallas_call(add, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                   interpret=mosaic_rt.InterpretParams())
                assert (jax.jit(f)(x) == 1).all()
            """
        )
    )
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "jax_suite_record", "-q"]
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
        test_timeout=120.0,
    )
    split = tests["sample_test.py::test_kernel"]["stages"]
    assert tests["sample_test.py::test_kernel"]["outcome"] == "passed"
    assert split["kernels"] == 1 and split["kernel_interpret"] > 0 and split["kernel_compile"] > 0
    assert split["total"] + 1e-3 >= sum(split[k] for k in suite_runner.STAGES)  # each rounded


def test_merge_unions_tests_later_runs_replacing_earlier_ones(tmp_path, capsys):
    """A full ours run, a rerun of one test after a fix, and a stock subset
    merge into one report: the rerun's outcome wins, stock is compared on
    the tests it ran."""
    ours = _side({"f.py::a": "passed", "f.py::b": "failed", "f.py::c": "passed"}, 3)
    rerun = _side({"f.py::b": "passed"}, 3)
    stock = _side({"f.py::b": "failed", "f.py::c": "passed"}, 3)
    stock["info"]["subset"] = {"whole": False}
    base = {"versions": {"jax": "0.11.2", "python": "3.12"}, "test_timeout": 300.0}
    runs = [
        {**base, "files": {"f.py": {"chip": "v6e", "mosaic_rt": ours}}},
        {**base, "files": {"f.py": {"chip": "v6e", "mosaic_rt": rerun}}},
        {**base, "files": {"f.py": {"chip": "v6e", "stock": stock}}},
    ]
    paths = []
    for i, r in enumerate(runs):
        paths.append(str(tmp_path / f"r{i}.json"))
        with open(paths[-1], "w") as fh:
            json.dump(r, fh)
    out = tmp_path / "merged.json"
    assert client_suite.main(["--merge", *paths, "--json", str(out)]) == 0
    merged = json.loads(out.read_text())["files"]["f.py"]
    assert merged["mosaic_rt"]["tests"]["f.py::b"]["outcome"] == "passed"
    assert merged["mosaic_rt"]["info"]["counts"]["passed"] == 3 and "subset" not in merged["mosaic_rt"]["info"]
    assert merged["stock"]["info"]["subset"] == {"whole": False}
    printed = capsys.readouterr().out
    assert "ours passes 3 of the 3 tests that ran" in printed
    assert "pass on stock, not on ours: 0" in printed and "pass on ours, not on stock: 1" in printed


def test_merge_a_run_of_the_whole_file_replaces_a_crashed_one():
    crashed = _side({"f.py::a": "passed", "f.py::<file>": "error"}, 3)
    whole = _side({"f.py::a": "passed", "f.py::b": "passed", "f.py::c": "failed"}, 3)
    part = _side({"f.py::c": "passed"}, 1)
    part["info"]["subset"] = {"whole": False, "k": "c"}
    base = {"versions": {"jax": "0.11.2", "python": "3.12"}, "test_timeout": 300.0}
    runs = [{**base, "files": {"f.py": {"chip": "v6e", "mosaic_rt": s}}} for s in (crashed, whole, part)]
    merged = client_suite.merge(runs)["files"]["f.py"]["mosaic_rt"]
    assert sorted(merged["tests"]) == ["f.py::a", "f.py::b", "f.py::c"]  # the stale <file> error is gone
    assert merged["info"]["counts"]["passed"] == 3 and "subset" not in merged["info"]


def test_a_test_with_no_call_report_did_not_pass():
    # The process ended inside the test (a record read after a killed run):
    # its passed setup is not a pass.
    rep = [
        {"nodeid": "k.py::test_a", "when": "setup", "outcome": "passed", "duration": 0.1},
        {"nodeid": "k.py::test_a", "when": "call", "outcome": "passed", "duration": 2.0},
        {"nodeid": "k.py::test_a", "when": "teardown", "outcome": "passed", "duration": 0.0},
        {"nodeid": "k.py::test_b", "when": "setup", "outcome": "passed", "duration": 0.1},
        {"nodeid": "k.py::test_c", "when": "setup", "outcome": "skipped", "duration": 0.0, "message": "gated"},
    ]
    tests = suite_runner.outcomes(rep, "k.py")
    assert tests["k.py::test_a"]["outcome"] == "passed"
    assert tests["k.py::test_b"]["outcome"] == "error" and "no report of its call" in tests["k.py::test_b"]["message"]
    assert tests["k.py::test_c"]["outcome"] == "skipped"


def test_files_named_by_directory_expand_and_unknown_names_fail(tmp_path):
    kernels = tmp_path / "kernels"
    (kernels / "deepseek_v4").mkdir(parents=True)
    for rel in ("a_test.py", "deepseek_v4/rope_test.py", "deepseek_v4/o_projection_test.py"):
        (kernels / rel).write_text("")
    (kernels / "deepseek_v4" / "helpers.py").write_text("")
    got = client_suite.chosen_files(["a_test.py", "deepseek_v4/"], str(tmp_path))
    assert got == ["a_test.py", "deepseek_v4/o_projection_test.py", "deepseek_v4/rope_test.py"]
    with pytest.raises(SystemExit, match="no test file or directory 'nope_test.py'"):
        client_suite.chosen_files(["nope_test.py"], str(tmp_path))
