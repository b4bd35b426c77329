"""The benchmark harness: CLI, JSON structure, device set-up, mismatch detection."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
from mosaic_rt.bench import measure, report, suite

_ENV_KEYS = {
    "jax",
    "jaxlib",
    "numpy",
    "python",
    "mosaic_rt",
    "commit",
    "cpu_count",
    "machine",
    "platform",
    "jax_devices",
    "timestamp_utc",
}
_CASE_KEYS = {
    "name",
    "family",
    "devices",
    "detect_races",
    "ops",
    "unit",
    "stock",
    "ours",
    "ratio",
    "first_call_ratio",
    "per_op_stock_s",
    "per_op_ours_s",
    "equal",
    "correct",
    "error",
    "ok",
}
_SIDE_KEYS = {"first_call_s", "median_s", "min_s", "reps", "times_s"}


def _bench(args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "mosaic_rt", "bench", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


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
    done = _bench(["--quick", "--filter", "^semaphores iters=100$", "--json", str(out), "--markdown", str(md)])
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
    code = (
        "import sys, jax; assert jax.device_count() == 1; "
        "from mosaic_rt.bench.cli import main; "
        f"sys.exit(main(['--quick', '--filter', '^ping-pong r=10$', '--json', {str(out)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
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
    budget = measure.Budget(seconds_per_side=0.0, min_reps=2, max_reps_stock=2, max_reps_ours=2, case_timeout_s=60)
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
    code = (
        "import time\nfrom mosaic_rt.bench.cli import _watchdog\n"
        "with _watchdog('stuck case', 0.5):\n    time.sleep(30)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 4
    assert "case 'stuck case' still running after 0.5 s" in done.stderr
    assert "Thread" in done.stderr  # the stacks of every thread


# -- the rows beyond the per-kernel cases (cold calls, suite, launch, lowering) ------------

from mosaic_rt.bench import cold, row_cold_first_call, row_suite_workload, rows, zoo  # noqa: E402
from mosaic_rt.bench.fmt import fmt_target  # noqa: E402


def test_rows_are_listed_and_selected_by_filter():
    listed = _bench(["--quick", "--list"])
    assert listed.returncode == 0
    for row in rows.ROWS:
        assert f"{row.name}  (row" in listed.stdout
    assert [r.key for r in rows.select(["cold"])] == ["cold_first_call"]
    assert rows.select(["^semaphores iters=100$"]) == []
    assert len(rows.select([])) == len(rows.ROWS)


def test_each_row_is_one_object_in_a_module_of_its_own():
    from mosaic_rt.bench.row import Row

    assert len({r.key for r in rows.ROWS}) == len({r.name for r in rows.ROWS}) == len(rows.ROWS)
    for row in rows.ROWS:
        assert isinstance(row, Row)
        assert type(row).__module__ == f"mosaic_rt.bench.row_{row.key}", row.key


def test_lowering_and_launch_rows_write_json(tmp_path):
    out, md = tmp_path / "out.json", tmp_path / "out.md"
    done = _bench(
        [
            "--quick",
            "--filter",
            "lowering and compile",
            "--filter",
            "launch per MiB",
            "--json",
            str(out),
            "--markdown",
            str(md),
        ],
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert data["cases"] == [] and set(data["rows"]) == {"lowering", "launch_per_mib"}
    low = data["rows"]["lowering"]
    assert [k["name"] for k in low["kernels"]] == ["blockspec-add grid=8", "dma-pipeline chunks=8", "matmul grid=2^3"]
    for k in low["kernels"]:
        for side in ("stock", "ours", "jnp"):
            s = k[side]
            # (ours may compile no XLA kernel at all: its compute runs natively)
            assert s["compile_s"] > 0 and s["reps"] == measure.QUICK.lowering_reps
            assert s["kernels"] >= (0 if side == "ours" else 1)
        assert k["ours"]["interp_s"] > 0 and k["jnp"]["interp_s"] == 0
        assert k["ours_compile_over_jnp"] == k["ours"]["compile_s"] / k["jnp"]["compile_s"]
    launch = data["rows"]["launch_per_mib"]
    assert launch["ok"] and [p["mib"] for p in launch["points"]] == list(measure.QUICK.launch_mib)
    assert all(launch["ms_per_mib"][k] is not None for k in ("stock", "ours", "memcpy_fresh", "memcpy_warm"))
    over = launch["overhead"]
    assert over["ok"] and [p["mib"] for p in over["points"]] == list(measure.QUICK.launch_mib)
    slopes = over["ms_per_mib"]
    for side in ("stock", "ours"):
        assert over["overhead_ms_per_mib"][side] == slopes[side] - slopes["memcpy_fresh"]
    assert over["ours_over_memcpy"] == over["overhead_ms_per_mib"]["ours"] / slopes["memcpy_fresh"]
    subjects = {t["subject"]: t for t in data["targets"]}
    assert set(subjects) == {
        "launch per MiB",
        "launch overhead per MiB",
        "lowering (our Python)",
        "compile vs plain jnp",
    }
    assert subjects["launch overhead per MiB"]["kind"] == "max"
    assert subjects["launch overhead per MiB"]["measured"] == over["ours_over_memcpy"]
    assert subjects["lowering (our Python)"]["kind"] == "seconds"
    assert subjects["launch per MiB"]["kind"] == "max"
    table = md.read_text()
    assert "Launch cost per MiB" in table and "Lowering and compile" in table
    assert "Launch overhead per MiB" in table and "| overhead (ms/MiB) |" in table
    assert "| lowering (our Python) | <= 10.00 ms |" in table


def test_collectives_have_an_xla_native_column(tmp_path):
    out = tmp_path / "out.json"
    done = _bench(["--quick", "--filter", "^right-permute 8dev 4KiB$", "--json", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    case = json.loads(out.read_text())["cases"][0]
    _check_case(case, "right-permute 8dev 4KiB", 8)
    assert case["native_correct"] is True
    assert case["native"]["reps"] == case["ours"]["reps"]
    assert case["ours_over_native"] == case["ours"]["median_s"] / case["native"]["median_s"]
    targets = {t["subject"]: t for t in json.loads(out.read_text())["targets"]}
    assert targets["right-permute vs XLA native"]["kind"] == "max"
    assert "XLA native" in done.stdout


def test_cold_row_sees_fresh_shapes_and_no_persistent_cache():
    cold.disable_persistent_cache()
    data = cold.run_cold(2, families=["blockspec-add", "semaphores"])
    assert data["ok"] and data["persistent_cache_hits"] == 0
    assert [f["family"] for f in data["families"]] == ["blockspec-add", "semaphores"]
    for f in data["families"]:
        assert len(f["stock_s"]) == len(f["ours_s"]) == 2 and f["error"] is None
    assert data["ratio"] == data["stock_total_s"] / data["ours_total_s"]
    # every measurement gets a kernel of its own (shape or constant)
    variants = cold._family_variants()
    for family, variant in variants.items():
        if family in ("ping-pong", "right-permute", "all-gather", "reduce-scatter"):
            continue  # need 2..8 devices (covered by the bench's own runs)
        keys = set()
        for k in range(4):
            _, args, _ = variant(k)
            keys.add(tuple(np.shape(a) for a in args))
        assert len(keys) == 4 or family == "semaphores"  # semaphores: iters changes too
    for f in data["families"]:
        assert len(f["floor_s"]) == 2 and f["floor_ok"]
        assert f["ours_over_floor"] == f["ours_median_s"] / f["floor_median_s"]
    found = {v.subject: v for v in rows.verdicts({"cold_first_call": data})}
    assert found["cold first call"].target == row_cold_first_call.TARGET
    assert found["cold first call semaphores"].target == row_cold_first_call.FAMILY_TARGET


def test_cold_floors_compute_what_each_familys_kernel_computes():
    floors = cold._family_floors()
    assert set(floors) == set(cold._family_variants())
    for family, floor in floors.items():
        program, args, expected = floor(1)
        out = np.asarray(jax.block_until_ready(program(*args)))
        np.testing.assert_allclose(out.reshape(-1), np.asarray(expected).reshape(-1), rtol=1e-5, err_msg=family)


def test_suite_workload_has_40_distinct_kernels_over_every_family():
    kernels = zoo.kernels(1)
    assert len(kernels) >= 40 and len({k.name for k in kernels}) == len(kernels)
    families = {k.family for k in kernels}
    assert families >= {"grid", "scratch", "local dma", "remote dma", "semaphores", "barrier", "races", "cores"}
    assert any(dict(k.knobs).get("num_cores_or_threads", 1) > 1 for k in kernels)
    assert any(k.name.startswith("core_map") for k in kernels)
    assert max(k.devices for k in kernels) == 8
    # another salt gives other shapes for the same kernels
    a = {k.name: k.build()[1] for k in zoo.kernels(1) if k.devices == 1}
    b = {k.name: k.build()[1] for k in zoo.kernels(2) if k.devices == 1}
    assert all(tuple(map(np.shape, a[n])) != tuple(map(np.shape, b[n])) for n in a)


def test_suite_workload_runs_a_subset_and_checks_results():
    names = {
        "add grid=2",
        "dma-roundtrip large",
        "right-permute 2dev",
        "core_map 2 cores small",
        "semaphores iters=8 races",
    }
    data = cold.run_suite(1, only=names)
    assert {k["name"] for k in data["kernels"]} == names
    assert data["ok"], [k for k in data["kernels"] if not k["ok"]]
    assert data["distinct_kernels"] == len(names) and len(data["passes"]) == 1
    assert np.isclose(data["stock_total_s"], sum(k["stock_s"] for k in data["kernels"]))
    found = {v.subject: v for v in rows.verdicts({"suite_workload": data})}
    assert found["suite workload"].target == row_suite_workload.TARGET


def test_verdict_kinds_format_as_bounds():
    from mosaic_rt.bench.targets import Verdict

    assert fmt_target(Verdict("x", 1.5, 2.0, "", False, kind="max"), "target") == "<= 1.5x"
    assert fmt_target({"target": 0.01, "measured": 0.02, "kind": "seconds"}, "measured") == "20.00 ms"
    assert fmt_target({"target": 5.0, "measured": None, "kind": "min"}, "target") == "5.0x"


def test_memory_row_measures_both_sides_in_fresh_processes():
    from mosaic_rt.bench import memory, rows
    from mosaic_rt.bench.row_memory_suite import ROW

    data = memory.run_memory(2)
    assert data["kernels"] == 2
    for side in ("stock", "ours"):
        d = data[side]
        assert len(d["samples_mib"]) == 2
        # a fresh interpreter per side: jax and the first kernel cost memory
        assert 0 < d["start_mib"] < d["first_mib"]
        assert d["end_mib"] == d["samples_mib"][-1]
    found = {v.subject: v for v in rows.verdicts({"memory_suite": data})}
    assert found["memory growth per kernel"].kind == "max"
    assert "stock" in ROW.summary(data) and "ours" in ROW.summary(data)


def test_production_targets_judge_the_worst_kernel_and_the_median():
    from mosaic_rt.bench.row_production_kernels import ROW

    def kernel(name, first, steady, ref_first):
        return {"name": name, "first_call_ratio": first, "ratio": steady, "ours_over_reference_first": ref_first}

    d = {
        "ok": True,
        "kernels": [kernel("a", 6.0, 150.0, 2.0), kernel("b", 2.5, 8.0, 3.5), kernel("c", 7.0, 120.0, 1.0)],
        "median_first_call_ratio": 6.0,
        "median_ratio": 120.0,
    }
    found = {v.subject: v for v in ROW.verdicts(d)}
    assert found["production first call"].passed
    assert found["production steady"].passed
    for subject in (
        "production first call, every kernel",
        "production steady, every kernel",
        "production first call vs reference",
    ):
        assert not found[subject].passed and "(b)" in found[subject].how, found[subject]
    assert found["production first call vs reference"].kind == "max"
    d["ok"] = False  # a mismatch fails every target
    assert not any(v.passed for v in ROW.verdicts(d))
