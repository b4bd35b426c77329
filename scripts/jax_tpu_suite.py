#!/usr/bin/env python3
"""Run JAX's TPU-only Pallas test files, unmodified, on a simulated TPU chip in
TPU interpret mode: stock's and mosaic_rt's, side by side.

    python scripts/jax_tpu_suite.py --json tpu.json            # every file, both sides (hours)
    python scripts/jax_tpu_suite.py --quick                    # the CI subset (about a minute)
    python scripts/jax_tpu_suite.py --files tpu_pallas_async_test.py -k semaphore
    python scripts/jax_tpu_suite.py --tpu-target --backends mosaic_rt --json checked.json
    python scripts/jax_tpu_suite.py --compare-check plain.json checked.json
    python scripts/jax_tpu_suite.py --report tpu.json          # print an earlier run's report again

Run it with the Python of the venv under test (jax, jaxlib, mosaic_rt and
pytest installed; ``--python`` picks another). The full run at both ends of
mosaic_rt's jax range is:

    /work/venvs/py311/bin/python scripts/jax_tpu_suite.py --tag jax-v0.10.2 --json tpu-0.10.2.json
    /work/venvs/py312/bin/python scripts/jax_tpu_suite.py --json tpu-0.12.1.json   # tag jax-v0.11.0

What it does:

1. Extracts, at ``--tag`` (default: ``jax-v<installed jax>``, else the
   newest release tag of ``--jax-git`` not newer than it), JAX's
   pyproject.toml, conftest.py and every ``tests/pallas/tpu_*_test.py``
   but the three interpret-mode files (scripts/jax_suite.py runs those)
   into a temp dir laid out like the repository (nothing of JAX is
   written into this repo), and runs pytest there in JAX's own pytest
   configuration (``filterwarnings = error``, ...).
2. Each file runs in pytest processes of its own (scripts/suite_runner.py:
   a test making no progress for ``--test-timeout`` seconds is killed,
   counts as an error "hung", and pytest resumes with the file's other
   tests), with ``--devices`` CPU devices and the simulated chip the file
   needs (``CHIP_OF``; v5e by default, v7x -- SparseCores -- for the
   SparseCore files), through mosaic_rt's own flag (``pytest
   --mosaic-rt=CHIP --mosaic-rt-interpreter=stock|mosaic_rt``,
   docs/pytest-flag.md): jax's ``jax_test_dut`` flag, the jtu chip gates,
   ``pltpu.get_tpu_info()``, the devices' attributes and
   ``jax.default_backend()`` answer for the chip, and every pallas_call /
   core_map of the process runs in that side's TPU interpret mode
   whatever ``interpret=`` it passes. Tests a file skips on the single-core chip because they need
   two TensorCores (``MEGACORE_SKIP``) run again on a megacore chip
   (``MEGACORE``: v5p) as a row of their own, ``<file>@v5p``.
3. Large files are sampled (``SAMPLE``: every k-th collected test;
   ``--sample FILE=K`` overrides, ``--sample all=1`` runs everything), the
   same tests on both sides. ``--stock-subset`` runs stock only on the
   tests ours did not pass plus every ``--stock-sample``-th (enough to
   show that nothing passing on stock fails on ours, and to time).
4. A report: per file the collected / run counts and passed / failed /
   errors / timed out / skipped per side; the tests whose outcome differs;
   the time on tests passing on both and its ratio; the tests outside the
   pass rate (``EXCLUDED``: they inspect compiled TPU artefacts or measure
   the TPU), and the pass rate of ours over the tests that ran. ``--json``
   keeps everything (written after every file; ``--resume`` keeps the
   files a cut-short run finished).

When the tag is older than the installed jax (the newest jax on PyPI is
newer than the snapshot's newest tag), DeprecationWarnings are not errors:
the tag's tests call APIs the installed jax deprecates since.

``--tpu-target``: ours also compiles every kernel for the file's chip with
the real TPU compiler (``MOSAIC_RT_TPU_TARGET``; needs libtpu), so tests
expecting the TPU to reject a kernel see its error; ``--compare-check
PLAIN CHECKED`` lists the tests the check changes. ``--only-failing
PLAIN`` runs only the tests ours did not pass in an earlier run's JSON
(rows as there, no sampling): with ``--tpu-target``, it shows in minutes
which of them the real compiler's rejection makes pass.

Exit status: 1 when a test passing on stock does not pass on ours, or with
``--quick`` when a test of the subset does not pass on ours; else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import client_suite
import jax_suite
import suite_runner

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("stock", "mosaic_rt")
DEFAULT_GIT = jax_suite.DEFAULT_GIT
# scripts/jax_suite.py runs these (stock's own interpret-mode tests).
INTERPRET_FILES = set(jax_suite.FILES)
DEVICES = 4
DEFAULT_CHIP = "v5e"
# SparseCore kernels need a chip with SparseCores; v7x is the newest.
CHIP_OF = {
    "tpu_sparsecore_pallas_test.py": "v7x",
    "tpu_sparsecore_pallas_distributed_test.py": "v7x",
    "tpu_sparsecore_pallas_debug_check_test.py": "v7x",
    "tpu_pallas_mpmd_test.py": "v7x",
}
# Tests skipped on a one-core chip with one of these reasons run again on
# a two-TensorCore chip (v5p), on 2 devices ("Testing single device two
# cores" wants at most two).
MEGACORE = ("v5p", 2)
MEGACORE_SKIP = re.compile(r"megacore|two cores|2 cores", re.I)
# file -> every k-th collected test (the rest are left out, on both sides).
SAMPLE = {
    "tpu_pallas_test.py": 5,
    "tpu_pallas_pipeline_test.py": 2,
    "tpu_sparsecore_pallas_test.py": 3,
}
# Tests outside the pass rate: they inspect what only the TPU's compiler
# produces (the TPU custom call in the lowered / compiled module, XLA:TPU's
# analyses of the executable), so no CPU backend can pass them. A name
# matches itself and its parameterized variants (name0, name_x, ...).
_COLORS = "reads the memory-space colors of the TPU custom call in the compiled / lowered module"
_NAMES = "reads the TPU custom call's names / metadata in the compiled HLO"
EXCLUDED: dict = {
    "test_basic_input_memory_space_constraint": _COLORS,
    "test_basic_output_memory_space_constraint": _COLORS,
    "test_tuple_output_memory_space_constraint": _COLORS,
    "test_kernel_with_output_memory_space": _COLORS,
    "test_basic_ref_memory_space_constraint": _COLORS,
    "test_two_input_vadd": "reads XLA:TPU's scoped VMEM usage (used_scoped_memory_configs) of the compiled executable",
    "test_cost_analysis": "reads the kernel's cost estimate back from XLA's cost analysis of the compiled executable "
    "(XLA:TPU takes it from the TPU custom call; XLA:CPU cannot be told a custom call's cost)",
    "test_custom_call_name": _NAMES,
    "test_parameter_names": _NAMES,
    "test_metadata_is_preserved": _NAMES,
    "test_mesh_axes_metadata_is_preserved": _NAMES,
    "test_allow_input_fusion": "looks for XLA:TPU's input fusion into the TPU custom call in the compiled HLO",
    "test_sequential_collectives_auto_allocated_ids": "reads the collective ids XLA:TPU assigns in the lowered "
    "TPU custom calls (a compile-only test: JAX skips it in interpret mode)",
    "test_side_effecting_dce": "counts the TPU custom calls left in the compiled HLO after XLA's DCE (XLA removes "
    "a dead side-effecting custom call only for the tpu_custom_call target; ours stay side-effecting so that each "
    "device runs its launches in program order)",
    "test_auto_assigned_barrier_semaphores_no_data_corruption": "counts the barrier semaphores XLA:TPU assigns "
    "in the compiled HLO (its values are right on ours: checked with that assertion moved last)",
}
# Tests no CPU backend passes for a reason outside the kernel (stock fails
# them too): counted in the pass rate, listed with the reason.
_ORDER = (
    "compares the kernel's K-blocked f32 sums with one XLA:CPU dot of the test's jnp reference at a TPU "
    "tolerance: f32 summation order (on a TPU both sum in the MXU's order); stock fails it too"
)
_DEFAULT_PRECISION = (
    "on a TPU the reference's f32 dots at DEFAULT precision round their operands to bf16 too; "
    "XLA:CPU computes them exactly; stock fails it too"
)
CPU_LIMITS: dict = {
    "test_matmul_out_transpose": "the test's jnp reference (outside the kernel) hits XLA:CPU's missing "
    "BF16 x BF16 = F32 dot with a transposed result ('Unsupported element type for DotThunk::Execute')",
    "test_dot_dot_fusion": "its jnp reference keeps the first product in f32 where the fused kernel takes it "
    "in bf16: " + _DEFAULT_PRECISION,
    "test_paged_attention": "the f32 variants: the kernel rounds K and V to bf16 (its dequantize step's "
    "default dtype) where the test's jnp reference keeps them f32: " + _DEFAULT_PRECISION,
    "test_dot_transpose_dot_fusion": _ORDER,
    "test_matmul": _ORDER,
    "test_matmul_out_custom_vjp_bwd": _ORDER,
    "test_matmul_out_custom_vjp_fwd": _ORDER,
    "test_matmul_plus_iota_custom_fusion": _ORDER,
    "test_matmul_with_activation": _ORDER,
    "test_matmul_with_bias": _ORDER,
    "test_matmul_with_dynamic_slice": _ORDER,
    "test_matmul_with_mixed_slices": _ORDER,
    "test_matmul_with_multi_slice": _ORDER,
    "test_matmul_with_multiple_dynamic_slices": _ORDER,
    "test_matmul_with_multiple_mixed_slices_and_bias": _ORDER,
    "test_matmul_with_multiple_slices": _ORDER,
    "test_matmul_with_slice": _ORDER,
    "test_megacore_splitting": _ORDER,
    "test_bool_transpose_last_two_dims": "the (8, 5, 8, 10) variant: XLA:CPU (jaxlib 0.12.1) compiles the test's "
    "own jax.random.bernoulli input for over 5 minutes (the kernel runs in 0.1 s); stock times out too",
}
# The CI subset: file -> -k expression (tests that pass on ours, covering
# what was closed for this suite: semaphores as kernel operands and
# results, local and remote; typed PRNG keys in refs; views handed to
# nested pipelines with a kernel-allocated scratch), run on ours only by
# --quick.
QUICK = {
    "tpu_pallas_async_test.py": "test_basic_async_copy or test_basic_remote_copy",
    "tpu_pallas_random_test.py": "test_fold_in or test_key_data",
    "tpu_pallas_pipeline_test.py": "test_transformed_refs_as_inputs_nested_hbm_passthrough0",
}


# ------------------------------------------------------------------- files


def test_files(git_dir: str, tag: str) -> list:
    """JAX's TPU-only Pallas test files at ``tag`` (not the interpret-mode ones)."""
    proc = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "--name-only", f"{tag}:tests/pallas"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"jax_tpu_suite: cannot list {tag}:tests/pallas in {git_dir}: {proc.stderr.strip()}")
    names = [n for n in proc.stdout.split() if re.fullmatch(r"tpu_\w+_test\.py", n)]
    return sorted(n for n in names if n not in INTERPRET_FILES)


def chip_of(file: str) -> str:
    return CHIP_OF.get(file, DEFAULT_CHIP)


def parse_samples(items) -> dict:
    """``--sample FILE=K`` (``all=K`` for every file) over ``SAMPLE``."""
    out = dict(SAMPLE)
    for item in items or ():
        name, sep, k = item.partition("=")
        if not sep or not k.isdigit() or int(k) < 1:
            raise SystemExit(f"jax_tpu_suite: --sample {item!r}: expected FILE=K with K >= 1")
        if name == "all":
            out = {"all": int(k)}
        else:
            out[name] = int(k)
    return out


def sample_of(samples: dict, file: str) -> int:
    return samples.get(file, samples.get("all", 1))


def _matching(table: dict, tid: str) -> str | None:
    name = tid.rsplit("::", 1)[-1]
    for e, why in table.items():
        if name == e or re.fullmatch(re.escape(e) + r"(\d+|_\w+)", name):
            return why
    return None


# A test asserting that the TPU's compiler rejects the kernel: only the
# real compiler says so (``--tpu-target`` runs it; an interpreter runs the
# kernel).
_REJECTION = re.compile(r"^AssertionError: (MosaicError|VerificationError|JaxRuntimeError|Exception) not raised")
TPU_REJECTION = "expects the TPU compiler's rejection of the kernel: passes under --tpu-target (the real compiler)"


TPU_REJECTION_MEASURED = "expects the TPU compiler's rejection of the kernel: passed under --tpu-target (measured)"


def _matching_failure(tid: str, test: dict, checked: frozenset = frozenset()) -> str | None:
    """Why ``test`` (ours' outcome of ``tid``) fails on any CPU
    interpreter without the compile check, or None. ``checked``: the tests
    a run with the compile check passed (`--checked`)."""
    why = cpu_limit(tid)
    if why is None and tid in checked:
        why = TPU_REJECTION_MEASURED
    if why is None and _REJECTION.match(test.get("message", "")):
        why = TPU_REJECTION
    return why


def exclusion(tid: str) -> str | None:
    """Why test ``tid`` is outside the pass rate (None: it is in it)."""
    return _matching(EXCLUDED, tid)


def cpu_limit(tid: str) -> str | None:
    """Why no CPU backend passes test ``tid`` (None: not known so)."""
    return _matching(CPU_LIMITS, tid)


# JAX's test-only helpers its wheels leave out (scripts/jax_test_support.py
# makes those the installed jax lacks importable).
TEST_SUPPORT = re.compile(r"jax/_src/(hypothesis_test_util|pallas/(\w+/)*\w*test_util)\.py")


def extract_support(git_dir: str, tag: str, dest: str) -> list:
    proc = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", tag, "jax/_src"], capture_output=True, text=True
    )
    paths = [p for p in proc.stdout.split() if TEST_SUPPORT.fullmatch(p)]
    for path in paths:
        out = os.path.join(dest, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as fh:
            fh.write(jax_suite._git_show(git_dir, tag, path))
    return paths


# --------------------------------------------------------------------- run


# The environment spellings of mosaic_rt's flag and of the compile check:
# the command line says everything for each side.
_STEERING = (
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    "JAX_TEST_DUT",
    "MOSAIC_RT_CHIP",
    "MOSAIC_RT_INTERPRETER",
    "MOSAIC_RT_PARAMS",
    "MOSAIC_RT_DISABLE",
    "MOSAIC_RT_TPU_TARGET",
)


def _env(devices: int, support: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _STEERING and not k.startswith("CLIENT_SUITE_")}
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["TPU_SKIP_MDS_QUERY"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SCRIPTS, env.get("PYTHONPATH")) if p)
    env["JAX_TEST_SUPPORT"] = support
    return env


def _base(args, ctx, backend: str, chip: str) -> list:
    """One side's pytest command: JAX's pytest config, the record, JAX's
    test helpers, and mosaic_rt's flag (``--mosaic-rt=CHIP
    --mosaic-rt-interpreter=stock|mosaic_rt``: the simulated chip, every
    kernel in that side's TPU interpret mode; ours' compile check)."""
    tmp = ctx["tmp"]
    cmd = [ctx["python"], "-m", "pytest", "-c", os.path.join(tmp, "pyproject.toml"), "--rootdir", tmp]
    cmd += ["-p", "no:cacheprovider", "-p", "jax_suite_record", "-p", "jax_test_support", "-rfEs", "--tb=short", "-q"]
    cmd += jax_suite._plugin_flags(backend, ctx["versions"])
    cmd += client_suite.simulate_flags(backend, chip, args.tpu_target, ctx["params"])
    # The harness sets the CPU device count (--devices); the flag's notice
    # that a host of the chip has more would be an error under JAX's
    # filterwarnings = error.
    cmd += ["-W", "ignore::pytest.PytestConfigWarning"]
    if ctx["skew"]:
        # Tests of an older tag than the installed jax call APIs it has
        # since deprecated (jax 0.12's `pl.core_map`): under JAX's
        # filterwarnings = error a test of the tag's own API would fail on
        # the deprecation alone, on both sides.
        cmd += ["-W", "ignore::DeprecationWarning"]
    return cmd + (["-k", args.k] if args.k else [])


def collect(base: list, target: str, tmp: str, env: dict) -> list:
    """The node ids pytest collects of ``target`` (with the chip's gates)."""
    out = subprocess.run(base + ["--collect-only", target], cwd=tmp, env=env, capture_output=True, text=True)
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if out.returncode not in (0, 5):
        tail = " | ".join((out.stdout + out.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"collection failed (exit {out.returncode}): {tail}")
    return ids


def run_side(args, ctx, backend: str, row: str, file: str, chip: str, devices: int, ids: list) -> dict:
    """One side of one row: the tests ``ids`` of ``file`` on ``chip``."""
    env = _env(devices, ctx["support"])
    tag = re.sub(r"\W", "_", row)
    info, tests = suite_runner.run_file(
        _base(args, ctx, backend, chip),
        ids,
        cwd=ctx["tmp"],
        env=env,
        record=os.path.join(ctx["tmp"], f"record-{backend}-{tag}.jsonl"),
        log=os.path.join(ctx["tmp"], f"log-{backend}-{tag}.txt"),
        file=row,
        test_timeout=args.test_timeout,
        label="jax_tpu_suite",
    )
    info["chip"], info["devices"] = chip, devices
    if ctx["logdir"]:
        os.makedirs(ctx["logdir"], exist_ok=True)
        shutil.copy(info["log"], ctx["logdir"])
        info["log"] = os.path.join(ctx["logdir"], os.path.basename(info["log"]))
    c = info["counts"]
    print(
        f"[jax_tpu_suite] {backend:9s} {row} ({chip}, {devices} devices): {c['passed']} passed, {c['failed']} "
        f"failed, {c['error']} error ({c['timed_out']} timed out), {c['skipped']} skipped of {len(ids)} "
        f"in {info['wall']:.0f}s",
        flush=True,
    )
    return {"info": info, "tests": tests}


def _stock_ids(args, ids: list, row: str, ours: dict) -> list:
    """With --stock-subset: the tests ours did not pass, plus every
    --stock-sample-th (for timing); else all of ``ids``."""
    if not args.stock_subset or not ours or f"{row}::<file>" in ours["tests"]:
        return ids
    keep = set(ids[:: args.stock_sample]) if args.stock_sample else set()
    for n in ids:
        if ours["tests"].get(suite_runner.test_id(n, row), {}).get("outcome") not in ("passed", "skipped"):
            keep.add(n)
    return [n for n in ids if n in keep]


def run_row(args, ctx, result, row, file, chip, devices, ids, backends) -> dict:
    """Both sides of one row (ours first, so --stock-subset can cut
    stock down), kept in ``result`` and written after each side."""
    entry = result["files"].setdefault(row, {"file": file, "chip": chip, "devices": devices})
    for backend in sorted(backends, key=lambda b: b != "mosaic_rt"):
        if backend in entry:
            continue
        side_ids = _stock_ids(args, ids, row, entry.get("mosaic_rt")) if backend == "stock" else ids
        if not side_ids:
            continue
        entry[backend] = run_side(args, ctx, backend, row, file, chip, devices, side_ids)
        entry[backend]["info"]["collected"] = entry.get("collected", len(ids))
        if len(side_ids) < len(ids):
            entry[backend]["info"]["subset"] = {"whole": False, "ran": len(side_ids)}
        _save(args, result)
    return entry


def not_passing(earlier: dict) -> dict:
    """Row -> the tests ours ran and did not pass in an earlier run's JSON."""
    return {
        row: {t for t, v in f.get("mosaic_rt", {}).get("tests", {}).items() if v["outcome"] in ("failed", "error")}
        for row, f in earlier.get("files", {}).items()
    }


def _only(ctx, row: str, ids: list) -> list:
    """``ids`` cut to ``--only-failing``'s tests of ``row`` (all without it)."""
    if ctx["only"] is None:
        return ids
    keep = ctx["only"].get(row, set())
    return [n for n in ids if suite_runner.test_id(n, row) in keep]


def run_file(args, ctx, result, file: str) -> None:
    chip = chip_of(file)
    target = f"tests/pallas/{file}"
    if ctx["only"] is not None and not any(ctx["only"].get(r) for r in (file, f"{file}@{MEGACORE[0]}")):
        return
    if file not in result["files"] or not all(b in result["files"][file] for b in args.backends):
        env = _env(args.devices, ctx["support"])
        base = _base(args, ctx, "mosaic_rt", chip)
        try:
            ids = collect(base, target, ctx["tmp"], env)
        except RuntimeError as e:
            # Not one test of the file can run: a row of one error per side.
            print(f"[jax_tpu_suite] {file}: {e}", flush=True)
            ids = [target]
        k = sample_of(ctx["samples"], file)
        entry = result["files"].setdefault(file, {"file": file, "chip": chip, "devices": args.devices})
        entry["collected"] = len(ids)
        if k > 1 and len(ids) > 40 and ctx["only"] is None:
            entry["sample"] = k
            ids = ids[::k]
        ids = _only(ctx, file, ids)
        run_row(args, ctx, result, file, file, chip, args.devices, ids, args.backends)
    _megacore_row(args, ctx, result, file)


def _wants_two_cores(test: dict) -> bool:
    return test["outcome"] == "skipped" and bool(MEGACORE_SKIP.search(test.get("message", "")))


def _megacore_row(args, ctx, result, file: str) -> None:
    """The tests the single-core run skipped for wanting two cores, on v5p."""
    if chip_of(file) != DEFAULT_CHIP or args.no_megacore:
        return
    chip, devices = MEGACORE
    row = f"{file}@{chip}"
    if ctx["only"] is not None:
        skipped = sorted(ctx["only"].get(row, ()))
    else:
        ours = result["files"].get(file, {}).get("mosaic_rt", {}).get("tests", {})
        skipped = [t for t, v in ours.items() if _wants_two_cores(v)]
    if not skipped:
        return
    ids = [f"tests/pallas/{file}::" + t.split("::", 1)[1] for t in skipped]
    result["files"].setdefault(row, {"file": file, "chip": chip, "devices": devices, "collected": len(ids)})
    run_row(args, ctx, result, row, file, chip, devices, ids, args.backends)


def _save(args, result) -> None:
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


# ------------------------------------------------------------------ report


def _counts(side: dict, must: bool = False) -> dict:
    tests = {t: v for t, v in side["tests"].items() if not (must and exclusion(t))}
    return suite_runner.counts(tests)


def _cols(c: dict | None) -> str:
    if c is None:
        return f"{'--':>24s}"
    return f"{c['passed']:4d} {c['failed']:4d} {c['error'] - c['timed_out']:4d} {c['timed_out']:4d} {c['skipped']:4d}"


def passed_tests(result: dict) -> frozenset:
    """The tests ours passed in a run's JSON."""
    return frozenset(
        t
        for f in result.get("files", {}).values()
        for t, v in f.get("mosaic_rt", {}).get("tests", {}).items()
        if v["outcome"] == "passed"
    )


def report(result: dict, out=print, checked: frozenset = frozenset()) -> dict:
    """The per-file table, the differing tests and the pass rate;
    ``checked``: the tests ours passed with the compile check (their
    failures without it are the TPU's rejections, measured)."""
    v = result["versions"]
    lines = []
    p = lines.append
    p(
        f"\n=== JAX's TPU-only Pallas tests at {result['tag']}, TPU interpret mode on a simulated chip: stock vs "
        f"mosaic_rt (jax {v['jax']}, python {v['python']}, timeout {result['test_timeout']:.0f}s/test"
        + (", ours with the TPU compile check" if result.get("tpu_target") else "")
        + ") ==="
    )
    p(
        f"{'file':52s} {'chip':4s} {'coll':>4s} {'ran':>4s} | stock: pass fail  err  t/o skip "
        "| ours:  pass fail  err  t/o skip | both  time s/o"
    )
    totals = {b: dict.fromkeys(("passed", "failed", "error", "skipped", "timed_out", "total"), 0) for b in BACKENDS}
    regressions, gained, both_n, ts, to, excluded = [], [], 0, 0.0, 0.0, []
    for row, f in result["files"].items():
        sides = {b: f[b] for b in BACKENDS if b in f}
        if not sides:
            continue
        for b, side in sides.items():
            for key, n in _counts(side, must=True).items():
                totals[b][key] += n
        excluded += sorted({t for side in sides.values() for t in side["tests"] if exclusion(t)})
        ran = max(len(side["tests"]) for side in sides.values())
        cols = {b: _cols(_counts(sides[b]) if b in sides else None) for b in BACKENDS}
        head = f"{row[:52]:52s} {f.get('chip', ''):4s} {f.get('collected', ran):4d} {ran:4d}"
        if len(sides) < 2:
            p(f"{head} |        {cols['stock']} |       {cols['mosaic_rt']} |   --")
            continue
        cmp = client_suite.compare_file(sides["stock"], sides["mosaic_rt"])
        f["comparison"] = cmp
        both_n += cmp["both_passed"]
        ts += cmp["time_both"]["stock"]
        to += cmp["time_both"]["mosaic_rt"]
        regressions += [d for d in cmp["regressions"] if not exclusion(d["test"])]
        gained += [d for d in cmp["differ"] if d["mosaic_rt"] == "passed"]
        r = cmp["time_both"]["ratio"]
        p(
            f"{head} |        {cols['stock']} |       {cols['mosaic_rt']} | {cmp['both_passed']:4d} "
            f"{cmp['time_both']['stock']:.1f}/{cmp['time_both']['mosaic_rt']:.1f}" + (f" ({r:.2f}x)" if r else "")
        )
    p(
        f"{'total (excluded tests left out)':52s} {'':4s} {'':4s} {'':4s} |        {_cols(totals['stock'])} "
        f"|       {_cols(totals['mosaic_rt'])} | {both_n:4d} {ts:.1f}/{to:.1f}" + (f" ({ts / to:.2f}x)" if to else "")
    )
    samples = [f"{row} every {f['sample']}th" for row, f in result["files"].items() if f.get("sample")]
    if samples:
        p(f"sampled: {', '.join(samples)} (the same tests on both sides)")
    rates = {}
    for b in BACKENDS:
        t = totals[b]
        ran = t["total"] - t["skipped"]
        rates[b] = round(100 * t["passed"] / ran, 1) if ran else None
        if t["total"]:
            p(
                f"{b}: passes {t['passed']} of the {ran} tests that ran (run minus skipped minus excluded)"
                + (f": {rates[b]}%" if ran else "")
            )
    p(f"pass on stock, not on ours: {len(regressions)}")
    for d in regressions:
        p(f"  {d['mosaic_rt']:7s} {d['test']}: {d['mosaic_rt_message']}")
    p(f"pass on ours, not on stock: {len(gained)}")
    for d in gained:
        p(f"  stock {d['stock']:7s} {d['test']}: {d['stock_message'][:200]}")
    if excluded:
        p(f"excluded from the pass rate: {len(excluded)}")
        for t in excluded:
            outcome = {b: result["files"][t.split("::")[0]].get(b, {}).get("tests", {}).get(t, {}) for b in BACKENDS}
            p(
                f"  {t}: {exclusion(t)} (stock {outcome['stock'].get('outcome', '--')}, "
                f"ours {outcome['mosaic_rt'].get('outcome', '--')})"
            )
    failing = sorted(
        (t, v)
        for f in result["files"].values()
        for t, v in f.get("mosaic_rt", {}).get("tests", {}).items()
        if v["outcome"] in ("failed", "error") and not exclusion(t)
    )
    reasons = {t: _matching_failure(t, v, checked) for t, v in failing}
    limited = [(t, v) for t, v in failing if reasons[t]]
    open_ = [(t, v) for t, v in failing if not reasons[t]]
    if limited:
        p(f"not passing on ours, nor on any CPU interpreter (CPU_LIMITS, TPU rejections): {len(limited)}")
        for why in sorted({reasons[t] for t, _ in limited}):
            names = [t for t, _ in limited if reasons[t] == why]
            p(f"  {len(names)}: {why} (e.g. {names[0]})")
    p(f"not passing on ours, open: {len(open_)}")
    for t, v in open_:
        p(f"  {v['outcome']:7s} {t}: {v.get('message', '')[:200]}")
    out("\n".join(lines))
    return {
        "totals": totals,
        "open": [t for t, _ in open_],
        "cpu_limits": [t for t, _ in limited],
        "pass_rate": rates,
        "both_passed": both_n,
        "time_both": {"stock": round(ts, 2), "mosaic_rt": round(to, 2), "ratio": round(ts / to, 2) if to else None},
        "regressions": regressions,
        "gained": gained,
        "excluded": excluded,
    }


def compare_check(plain: dict, checked: dict, out=print) -> dict:
    """Ours without and with the TPU compile check, test by test: the check
    must fail no test that passes without it."""
    lost, won = [], []
    for row, f in checked["files"].items():
        before = plain["files"].get(row, {}).get("mosaic_rt", {}).get("tests", {})
        for t, v in f.get("mosaic_rt", {}).get("tests", {}).items():
            was = before.get(t, {}).get("outcome")
            if was == "passed" and v["outcome"] != "passed":
                lost.append((t, v["outcome"], v.get("message", "")))
            elif was in ("failed", "error") and v["outcome"] == "passed":
                won.append((t, before[t].get("message", "")))
    out(f"\n=== the TPU compile check: {len(lost)} tests passing without it fail with it ===")
    for t, o, m in lost:
        out(f"  {o:7s} {t}: {m}")
    out(f"=== pass only with it (the TPU's own rejection expected): {len(won)} ===")
    for t, m in won:
        out(f"  {t}: without: {m[:200]}")
    return {"lost": lost, "won": won}


# -------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jax-git", default=DEFAULT_GIT)
    ap.add_argument("--tag", help="default: jax-v<installed jax>, else the newest release tag not newer than it")
    ap.add_argument("--files", nargs="+", help="test files under tests/pallas (default: every TPU-only one)")
    ap.add_argument("-k", help="pytest -k expression for every file")
    ap.add_argument("--quick", action="store_true", help="the CI subset (QUICK), ours only unless --backends")
    ap.add_argument("--backends", nargs="+", choices=BACKENDS)
    ap.add_argument("--sample", action="append", metavar="FILE=K", help="every K-th test of FILE (all=K: every file)")
    ap.add_argument("--stock-subset", action="store_true", help="stock only where ours did not pass (+ a sample)")
    ap.add_argument("--stock-sample", type=int, default=10, metavar="K", help="with --stock-subset (default 10)")
    ap.add_argument("--no-megacore", action="store_true", help="no second run of two-core tests on v5p")
    ap.add_argument("--devices", type=int, default=DEVICES, help=f"CPU devices (default {DEVICES})")
    ap.add_argument("--tpu-target", action="store_true", help="ours: also compile every kernel for the file's chip")
    ap.add_argument("--param", action="append", metavar="KEY=VALUE", help="an InterpretParams field on both sides")
    ap.add_argument("--test-timeout", type=float, default=120.0)
    ap.add_argument("--python", help="interpreter that runs pytest (default: this one)")
    ap.add_argument("--json", help="write the results here (after every file)")
    ap.add_argument("--resume", action="store_true", help="with --json: keep the files it already has")
    ap.add_argument("--report", metavar="JSON", help="print the report of an earlier --json and stop")
    ap.add_argument("--checked", metavar="JSON", help="with --report: a --tpu-target run of the same tests")
    ap.add_argument("--only-failing", metavar="JSON", help="only the tests ours did not pass in this earlier run")
    ap.add_argument("--compare-check", nargs=2, metavar=("PLAIN", "CHECKED"), help="ours without / with --tpu-target")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.report:
        with open(args.report) as fh:
            result = json.load(fh)
        checked = frozenset()
        if args.checked:
            with open(args.checked) as fh:
                checked = passed_tests(json.load(fh))
        summary = report(result, checked=checked)
        client_suite.failure_classes(result)
        return 1 if summary["regressions"] else 0
    if args.compare_check:
        with open(args.compare_check[0]) as fh, open(args.compare_check[1]) as gh:
            return 1 if compare_check(json.load(fh), json.load(gh))["lost"] else 0
    python = args.python or sys.executable
    versions = jax_suite.installed_versions(python)
    if args.tag:
        tag, note = args.tag, None
    else:
        tag, note = jax_suite.default_tag(args.jax_git, versions["jax"])
    backends = args.backends or (["mosaic_rt"] if args.quick else list(BACKENDS))
    args.backends = backends
    every = test_files(args.jax_git, tag)
    files = args.files or (sorted(QUICK) if args.quick else every)
    unknown = [f for f in files if f not in every]
    if unknown:
        raise SystemExit(f"jax_tpu_suite: not a TPU-only test file at {tag}: {unknown} (there: {every})")
    if args.quick and not args.k:
        args.sample = ["all=1"]
    tmp = tempfile.mkdtemp(prefix="jax_tpu_suite_")
    jax_suite.extract(args.jax_git, tag, files, tmp)
    support = os.path.join(tmp, "_jax_test_support")
    extract_support(args.jax_git, tag, support)
    result = {
        "tag": tag,
        "tag_note": note,
        "versions": versions,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "test_timeout": args.test_timeout,
        "tpu_target": bool(args.tpu_target),
        "params": client_suite.parse_params(args.param),
        "files": {},
    }
    only = None
    if args.only_failing:
        with open(args.only_failing) as fh:
            only = not_passing(json.load(fh))
        result["only_failing"] = os.path.basename(args.only_failing)
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as fh:
            result["files"] = json.load(fh).get("files", {})
    ctx = {
        "only": only,
        "python": python,
        "versions": versions,
        "tmp": tmp,
        "params": result["params"],
        "support": support,
        "skew": tag != f"jax-v{versions['jax']}",
        "samples": parse_samples(args.sample),
        "logdir": (os.path.splitext(args.json)[0] + ".logs") if args.json else None,
    }
    print(
        f"[jax_tpu_suite] {tag}{' (' + note + ')' if note else ''}, jax {versions['jax']}, python "
        f"{versions['python']}, mosaic_rt from {versions['mosaic_rt_from']}; {len(files)} files; work dir {tmp}",
        flush=True,
    )
    t0 = time.perf_counter()
    for file in files:
        k_saved = args.k
        if args.quick and not args.k:
            args.k = QUICK.get(file)
        try:
            run_file(args, ctx, result, file)
        finally:
            args.k = k_saved
    result["elapsed"] = round(time.perf_counter() - t0, 1)
    summary = report(result)
    client_suite.failure_classes(result, backends[-1] if len(backends) == 1 else "mosaic_rt")
    result["summary"] = summary
    _save(args, result)
    if args.json:
        print(f"[jax_tpu_suite] wrote {args.json}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.quick:
        bad = [
            t
            for f in result["files"].values()
            for t, v in f.get("mosaic_rt", {}).get("tests", {}).items()
            if v["outcome"] != "passed"
        ]
        return 1 if bad or summary["regressions"] else 0
    return 1 if summary["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
