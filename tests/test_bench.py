"""The benchmark harness: CLI, JSON structure, device set-up, mismatch detection."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import mosaic_rt
from mosaic_rt.bench import measure, report, suite

_ENV_KEYS = {"jax", "jaxlib", "numpy", "python", "mosaic_rt", "commit", "cpu_count",
             "machine", "platform", "jax_devices", "timestamp_utc"}
_CASE_KEYS = {"name", "family", "devices", "detect_races", "ops", "unit", "stock", "ours",
              "ratio", "first_call_ratio", "per_op_stock_s", "per_op_ours_s", "equal",
              "correct", "error", "ok"}
_SIDE_KEYS = {"first_call_s", "median_s", "min_s", "reps", "times_s"}


def _bench(args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "mosaic_rt", "bench", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def _check_case(case, name, devices):
    assert set(case) >= _CASE_KEYS
    assert case["name"] == name and case["devices"] == devices
    assert case["ok"] and case["equal"] and case["correct"] and case["error"] is None
    for side in ("stock", "ours"):
        assert set(case[side]) >= _SIDE_KEYS
        assert case[side]["reps"] == len(case[side]["times_s"]) >= measure.QUICK.min_reps
        assert 0 < case[side]["min_s"] <= case[side]["median_s"]
        assert case[side]["first_call_s"] > 0
    assert case["ratio"] == case["stock"]["median_s"] / case["ours"]["median_s"]
    assert case["per_op_ours_s"] == case["ours"]["median_s"] / case["ops"]


def test_quick_single_case_writes_json(tmp_path):
    out, md = tmp_path / "out.json", tmp_path / "out.md"
    done = _bench(["--quick", "--filter", "^semaphores iters=100$", "--json", str(out),
                   "--markdown", str(md)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "semaphores iters=100" in done.stdout and "targets" in done.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == 1
    assert set(data["environment"]) >= _ENV_KEYS
    assert data["environment"]["jax"] == jax.__version__
    assert data["settings"]["quick"] is True
    assert [c["name"] for c in data["cases"]] == ["semaphores iters=100"]
    _check_case(data["cases"][0], "semaphores iters=100", 1)
    assert data["all_equal"] is True
    subjects = {t["subject"] for t in data["targets"]}
    assert subjects == {"semaphores", "first call"}
    table = md.read_text()
    assert "| semaphores iters=100 | 1 |" in table and "| semaphores | 100.0x |" in table
    assert "--filter ^semaphores iters=100$" in table


def test_multi_device_case_gets_its_devices_even_after_jax_started(tmp_path):
    """jax already initialised with 1 CPU device: the harness must re-run itself
    with 2 devices rather than run the 2-device case on fewer."""
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    code = ("import sys, jax; assert jax.device_count() == 1; "
            "from mosaic_rt.bench.cli import main; "
            f"sys.exit(main(['--quick', '--filter', '^ping-pong r=10$', '--json', {str(out)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert data["environment"]["jax_devices"] >= 2
    _check_case(data["cases"][0], "ping-pong r=10", 2)


def test_list_and_bad_filters():
    listed = _bench(["--quick", "--list"])
    assert listed.returncode == 0
    names = [c.name for c in suite.suite(quick=True)]
    assert all(n in listed.stdout for n in names)
    none = _bench(["--quick", "--filter", "no such kernel"])
    assert none.returncode == 2 and "no case matches" in none.stdout
    bad = _bench(["--quick", "--filter", "(unclosed"])
    assert bad.returncode == 2 and "bad --filter pattern" in bad.stdout


def test_suite_covers_every_family_and_races():
    for quick in (True, False):
        cases = suite.suite(quick)
        assert {c.family for c in cases} == set(suite.FAMILIES)
        raced = {c.name.removesuffix(" races") for c in cases if c.detect_races}
        assert len(raced) == len(suite.FAMILIES) - 1  # every family but "races" itself
        assert len({c.name for c in cases}) == len(cases)
        for family in ("ping-pong", "dma-pipeline", "blockspec-add", "matmul"):
            sizes = {c.ops for c in cases if c.family == family}
            assert len(sizes) >= 2, f"{family} needs a sweep"


def _fake_case(ours_offset):
    """A case whose output differs by `ours_offset` under mosaic_rt's params."""
    def build():
        def program(interpret):
            bump = ours_offset if isinstance(interpret, mosaic_rt.InterpretParams) else 0
            return lambda x: x + bump
        return program, (jnp.arange(4, dtype=jnp.float32),)
    return suite.Case("fake", "semaphores", 1, 1, build, lambda x: x)


def test_mismatch_is_reported_not_hidden():
    budget = measure.Budget(seconds_per_side=0.0, min_reps=2, max_reps_stock=2, max_reps_ours=2,
                            case_timeout_s=60)
    good = measure.run_case(_fake_case(0), budget)
    assert good.ok and good.equal and good.correct
    bad = measure.run_case(_fake_case(1), budget)
    assert not bad.ok and bad.equal is False and bad.correct is True
    found = report.verdicts([bad])
    assert not next(v for v in found if v.subject == "semaphores").passed


def test_marginal_cost_is_the_sweep_slope():
    slope = report._slope([(10, 1.0 + 10 * 2e-3), (100, 1.0 + 100 * 2e-3), (50, 1.1)])
    assert np.isclose(slope, 2e-3, rtol=1e-9)
    assert report._slope([(10, 1.0)]) is None


def test_a_hung_case_ends_the_run_with_code_4():
    code = ("import time\nfrom mosaic_rt.bench.cli import _watchdog\n"
            "with _watchdog('stuck case', 0.5):\n    time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 4
    assert "case 'stuck case' still running after 0.5 s" in done.stderr
    assert "Thread" in done.stderr  # the stacks of every thread
