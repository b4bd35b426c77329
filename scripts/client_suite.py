#!/usr/bin/env python3
"""Run a third-party Pallas TPU kernel test suite -- vLLM's tpu-inference --
stock vs mosaic_rt, forced into TPU interpret mode on the chip each file asks
for.

    python scripts/client_suite.py                       # every kernel test file, both sides
    python scripts/client_suite.py --quick               # the CI subset (a few minutes)
    python scripts/client_suite.py --files causal_conv1d_test.py -k conv1d0
    python scripts/client_suite.py --tpu-target          # ours also compiles each kernel for the file's chip
    python scripts/client_suite.py --cache DIR           # ours keeps compiled programs in DIR (a 2nd run loads them)
    python scripts/client_suite.py --stock-subset --sample 8   # ours on every test; stock where ours fails + a sample
    python scripts/client_suite.py --report out.json     # print an earlier run's report again

What it does:

1. A venv (``--venv``, default ``.venv-client/`` in the repo; built when
   missing, ``--setup`` rebuilds it) with the client's pinned stack: Python
   3.12, jax / jaxlib 0.11.2 (what tpu-inference 0.32.0 pins; inside
   mosaic_rt's supported range), ``tpu-inference==0.32.0 --no-deps`` (its
   kernels and their tests ship in the wheel: ``tpu_inference/kernels/``,
   ``tests/kernels/``) and what those tests import (flax, absl-py,
   parameterized, hypothesis, jaxtyping, sympy, tokamax, torch, torchax,
   ...; ``--no-torch`` leaves torch out: the files importing it then fail to
   collect; with torch comes vllm itself, ``--no-deps``, for the few test
   files that import more of it), and mosaic_rt from this repo
   (``--mosaic-rt-wheel`` installs a built wheel instead). Without vllm,
   ``scripts/client_stubs/vllm`` stands in for the one thing the kernels
   import of it, its logger (put on PYTHONPATH, never installed). Nothing of
   the client is modified.
2. Every test file under the installed ``tests/kernels/`` (``--files``
   picks some), one pytest process per file and side, stock then ours
   file by file, on the simulated chip the file asks for (the highest TPU
   version its ``jtu.is_device_tpu*`` gates name: 7 -> v7x, else v6e;
   ``CHIP_OF``): mosaic_rt's own ``pytest --mosaic-rt=CHIP
   --mosaic-rt-interpreter=stock|mosaic_rt`` (docs/pytest-flag.md: the
   chip's gates and 8 CPU devices, every kernel in that side's TPU
   interpret mode whatever ``interpret=`` it passes; so the stock side
   imports mosaic_rt too, whose seam leaves stock's kernels to stock), with
   ``scripts/jax_suite_record.py`` recording outcomes. A test making no progress for ``--test-timeout`` seconds
   (default 120) is killed, counts as timed out, and pytest resumes with
   the file's other tests. Files that measure the TPU itself (``HARDWARE``,
   with the reason) are left out unless ``--include-hardware``; ``--param
   KEY=VALUE`` sets an InterpretParams field on both sides.
3. A report per file: collected; passed / failed / timed out per side; the
   tests whose outcome differs; the time on tests passing on both sides and
   its ratio. ``--json PATH`` keeps everything (written after every file;
   ``--resume`` reuses the files a cut-short run finished).

Exit status: 1 when a test that passes on stock does not pass on ours, or,
with ``--quick``, when any test of the subset does not pass on ours or a
file could not run; else 0.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import suite_runner

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(SCRIPTS)
STUBS = os.path.join(SCRIPTS, "client_stubs")
BACKENDS = ("stock", "mosaic_rt")

CLIENT = "tpu-inference==0.32.0"
JAX = "0.11.2"
PYTHON = "3.12"
# What the kernel tests import beyond jax (tpu-inference's own pins where it
# has them); torch separately (a large download, ``--no-torch``).
TEST_DEPS = (
    "flax==0.12.10",
    "absl-py",
    "parameterized",
    "hypothesis==6.151.9",
    "jaxtyping",
    "requests",
    "pytest",
    "pytest-mock",
    "sympy",
    "mpmath<1.4",
)
# tokamax (quantized matmul's tiling) and its imports, without its full
# dependency set (which brings GPU wheels).
NO_DEPS = ("tokamax==0.0.17.dev20261015", "torchax==0.0.13", "qwix==0.1.2", "xprof")
TOKAMAX_DEPS = ("immutabledict", "einshape", "pydantic", "tqdm", "tensorboardx", "fire", "six")
# torch 2.10 goes with the torchvision 0.25 that tpu-inference pins (torchax
# 0.0.13 does not import with torch 2.15). With torch, the real vllm
# (--no-deps) and what its imported modules need: a few test files import
# more of vllm than its logger (tests/test_utils.py, vllm's own mhc kernels,
# tpu_inference.runner); without torch the logger stub stands in.
TORCH = ("torch==2.10.0",)
VLLM = "vllm==0.33.0"
VLLM_DEPS = (
    "regex",
    "cbor2",
    "pyzmq",
    "transformers",
    "aiohttp",
    "openai-harmony",
    "openai",
    "pillow",
    "pybase64",
    "cachetools",
    "msgspec",
    "cloudpickle",
    "py-cpuinfo",
)
# CPU devices per process: what --mosaic-rt gives a v6e or v7x host.
DEVICES = 8
# A file's chip when its gates do not decide it (see chip_of).
CHIP_OF: dict = {}
# Files whose tests measure the TPU itself -- no CPU backend can pass them
# -- with the reason; left out unless ``--include-hardware`` (and never
# counted in the pass rate).
HARDWARE = {
    "mla_tuned_vs_baseline_test.py": "asserts that the tuned MLA kernel's TPU latency (XPlane device timings, "
    "else wall clock) is within 5-15% of the baseline's: a measurement of TPU hardware",
}
QUICK = {
    # file -> -k expression: a CI-sized subset, tests that pass on ours and
    # cover the gaps closed for this suite -- DMA slices of traced size and
    # unpack_elementwise (causal conv1d: stock fails both), DMA views
    # (compress-store: stock fails), and tests passing on both (rope).
    "causal_conv1d_test.py": "multiple_sequences_varying_length or single_token_decode",
    "deepseek_v4/compress_store_test.py": "test_derive_aliases or csa_decode_batch_random",
    "deepseek_v4/rope_test.py": "RopeTest and not QNormRopeTest",
}

# --------------------------------------------------------------------- venv


def _find_python(version: str) -> str:
    out = subprocess.run(
        ["bash", "-c", f"source {SCRIPTS}/_common.sh && find_python {version}"], capture_output=True, text=True
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit(f"client_suite: {out.stderr.strip() or f'Python {version} not found'}")
    return out.stdout.strip()


def _pip(python: str, *args: str) -> None:
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    print("[client_suite] $ " + " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def setup_venv(venv: str, torch: bool) -> str:
    """Builds the client venv (without mosaic_rt); returns its python."""
    python = os.path.join(venv, "bin", "python")
    if os.path.isdir(venv):
        shutil.rmtree(venv)
    subprocess.run([_find_python(PYTHON), "-m", "venv", venv], check=True)
    _pip(python, f"jax=={JAX}", f"jaxlib=={JAX}", *TEST_DEPS)
    _pip(python, "--no-deps", CLIENT, *NO_DEPS)
    _pip(python, *TOKAMAX_DEPS, f"jax=={JAX}", f"jaxlib=={JAX}")
    if torch:
        _pip(python, *TORCH, "mpmath<1.4", *VLLM_DEPS, f"jax=={JAX}", f"jaxlib=={JAX}")
        _pip(python, "--no-deps", VLLM)
    with open(os.path.join(venv, "client_suite.json"), "w") as fh:
        json.dump({"client": CLIENT, "jax": JAX, "torch": torch}, fh)
    return python


def install_mosaic_rt(python: str, wheel: str | None) -> None:
    """mosaic_rt from ``wheel`` or this repo (built by pip: needs cargo),
    keeping the client's pinned jax."""
    _pip(python, "--force-reinstall", "--no-deps", wheel or ROOT)
    _pip(python, f"{wheel or ROOT}", f"jax=={JAX}", f"jaxlib=={JAX}")


def installed_versions(python: str) -> dict:
    code = """
import importlib.metadata as m, json, sys, os
names = ('jax', 'jaxlib', 'numpy', 'pytest', 'mosaic_rt', 'tpu-inference', 'torch', 'flax', 'vllm')
out = {}
for n in names:
    try:
        out[n] = m.version(n)
    except m.PackageNotFoundError:
        out[n] = None
out['python'] = sys.version.split()[0]
import importlib.util as u
spec = u.find_spec('tests')
out['tests_dir'] = os.path.dirname(spec.origin) if spec and spec.origin else None
out['site'] = os.path.dirname(out['tests_dir']) if out['tests_dir'] else None
spec = u.find_spec('mosaic_rt')
out['mosaic_rt_from'] = spec.origin if spec else None
print(json.dumps(out))
"""
    return json.loads(subprocess.check_output([python, "-c", code], text=True, cwd=tempfile.gettempdir()))


# -------------------------------------------------------------------- files


def test_files(tests_dir: str) -> list:
    """Every kernel test file, relative to ``tests/kernels``."""
    base = os.path.join(tests_dir, "kernels")
    found = set()
    for pattern in ("**/*_test.py", "**/test_*.py"):
        for path in glob.glob(os.path.join(base, pattern), recursive=True):
            found.add(os.path.relpath(path, base))
    return sorted(found)


def chosen_files(names: list, tests_dir: str) -> list:
    """``--files`` as test files under ``tests/kernels``: a directory stands
    for the test files in it; a name that is neither is an error."""
    base = os.path.join(tests_dir, "kernels")
    everything = test_files(tests_dir)
    out = []
    for name in names:
        name = name.rstrip("/")
        inside = [f for f in everything if f.startswith(name + "/")]
        if os.path.isfile(os.path.join(base, name)):
            out.append(name)
        elif inside:
            out.extend(inside)
        else:
            raise SystemExit(f"client_suite: no test file or directory {name!r} under {base}")
    return out


def chip_of(path: str, rel: str) -> str:
    """The chip a file asks for: the highest TPU version its gates name."""
    if rel in CHIP_OF:
        return CHIP_OF[rel]
    with open(path) as fh:
        text = fh.read()
    versions = [int(v) for v in re.findall(r"is_device_tpu(?:_at_least)?\(\s*(?:version\s*=\s*)?(\d+)", text)]
    return "v7x" if versions and max(versions) >= 7 else "v6e"


# ---------------------------------------------------------------------- run


def parse_params(items) -> dict:
    """``--param KEY=VALUE`` pairs as InterpretParams fields (VALUE as JSON
    when it parses, e.g. ``true`` / ``3``, else the string)."""
    params = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"client_suite: --param {item!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


# Variables that would steer a run past its command line.
_STEERING = (
    *("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "JAX_TEST_DUT", "JAX_NUM_CPU_DEVICES", "MOSAIC_RT_TPU_TARGET"),
    *("MOSAIC_RT_CHIP", "MOSAIC_RT_PARAMS", "MOSAIC_RT_DISABLE", "MOSAIC_RT_INTERPRETER"),
    *("CLIENT_SUITE_CHIP", "CLIENT_SUITE_BACKEND", "CLIENT_SUITE_PARAMS"),
    *("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID"),
)


def _env(stubs: bool) -> dict:
    """The environment of a pytest process: the caller's, less what would
    steer the run past its command line (the simulated chip, its CPU
    devices and a TPU VM's variables are the flag's: ``simulate_flags``)."""
    env = {k: v for k, v in os.environ.items() if k not in _STEERING}
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", "")).strip()
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SCRIPTS, STUBS if stubs else None, env.get("PYTHONPATH")) if p)
    return env


def simulate_flags(backend: str, chip: str, tpu_target: bool, params: dict | None = None) -> list:
    """pytest's own options for one side: the simulated chip (``--mosaic-rt``:
    its gates, its host's CPU devices, every kernel in ``backend``'s TPU
    interpret mode whatever ``interpret=`` it passes), the params, and ours'
    TPU compile check."""
    flags = [f"--mosaic-rt={chip}", f"--mosaic-rt-interpreter={backend}"]
    if params:
        flags.append("--mosaic-rt-params=" + " ".join(f"{k}={json.dumps(v)}" for k, v in params.items()))
    if tpu_target and backend == "mosaic_rt":
        flags.append(f"--mosaic-rt-tpu-target={chip}")
    return flags


def run_file(args, python, versions, backend, rel, tmp, ours_tests=None) -> tuple:
    """One file on one side; with ``ours_tests`` (the mosaic_rt side's
    results of this file) only the tests they did not pass (`_subset`)."""
    tests_dir = versions["tests_dir"]
    path = os.path.join(tests_dir, "kernels", rel)
    chip = chip_of(path, rel)
    tag = rel.replace("/", "__")
    base = [
        python,
        "-m",
        "pytest",
        "-c",
        os.devnull,
        "--rootdir",
        versions["site"],
        "-p",
        "no:cacheprovider",
        "-p",
        "jax_suite_record",
        "-rfEs",
        "--tb=short",
        "-q",
        *simulate_flags(backend, chip, args.tpu_target, parse_params(args.param)),
    ]
    if backend == "stock":
        base += ["-p", "no:mosaic_rt", "-p", "no:mosaic_rt_tpu"]
    elif args.cache:
        base += ["--mosaic-rt-cache", os.path.abspath(args.cache)]
    k = args.k or (QUICK.get(rel) if args.quick else None)
    if k:
        base += ["-k", k]
    env = _env(stubs=versions.get("vllm") is None)
    targets, subset = [path], None
    done = _done_tests(args.missing_from, rel, backend)
    if args.sample and args.sample > 1 or ours_tests is not None or done is not None:
        ids = _collect(base, path, tmp, env)
        keep = set(ids[:: args.sample]) if args.sample and args.sample > 1 and len(ids) > 40 else set(ids)
        if ours_tests is not None:
            keep, subset = _subset(ids, rel, ours_tests, args.sample)
        if done is not None:  # finish a cut-short run: only the tests it did not reach
            keep = {n for n in keep if f"{rel}::" + n.split("::", 1)[1] not in done}
            subset = {"whole": False, "missing_from": os.path.basename(args.missing_from), "ran": len(keep)}
        if not keep:  # nothing of this file to run on this side
            info = {"wall": 0.0, "elapsed": 0.0, "returncodes": [], "log": None, "hung": [], "collected": 0}
            info.update(counts=suite_runner.counts({}), chip=chip, subset=subset)
            return info, {}
        if keep != set(ids):
            targets = [os.path.join(versions["site"], n) for n in ids if n in keep]
    info, tests = suite_runner.run_file(
        base,
        targets,
        cwd=tmp,
        env=env,
        record=os.path.join(tmp, f"record-{backend}-{tag}.jsonl"),
        log=os.path.join(tmp, f"log-{backend}-{tag}.txt"),
        file=rel,
        test_timeout=args.test_timeout,
        label="client_suite",
    )
    info["chip"] = chip
    if not subset and (k or targets != [path]):  # -k or --sample: part of the file, compared on it
        subset = {"whole": False, "k": k} if k else {"whole": False, "sample": args.sample}
    if subset:
        info["subset"] = subset
    return info, tests


def _subset(ids: list, rel: str, ours: dict, sample: int | None) -> tuple:
    """The tests of ``ids`` (node ids) that ``ours`` (the mosaic_rt side's
    results of file ``rel``) did not pass, plus every ``sample``-th test for
    timing; and what was chosen. A file ours did not cover, or could not
    run, runs whole."""
    if not ours or f"{rel}::<file>" in ours:
        return set(ids), {"whole": True}
    by_id = {n: f"{rel}::" + n.split("::", 1)[1] for n in ids}
    not_passed = {n for n, t in by_id.items() if ours.get(t, {}).get("outcome") not in ("passed", "skipped")}
    sampled = set(ids[::sample]) if sample and sample > 1 else set()
    return not_passed | sampled, {"not_passed": len(not_passed), "sampled": len(sampled - not_passed)}


def _done_tests(path: str | None, rel: str, backend: str) -> set | None:
    """The tests of ``rel`` an earlier --json (``--missing-from``) has for
    ``backend``, or None without one."""
    if not path:
        return None
    with open(path) as fh:
        return set(json.load(fh)["files"].get(rel, {}).get(backend, {}).get("tests") or {})


def _ours_tests(args, entry: dict, rel: str, backend: str):
    """The mosaic_rt side's results a stock run is cut down to (see
    --stock-subset / --subset-from), or None for a whole run."""
    if backend != "stock":
        return None
    if args.stock_subset:
        return entry.get("mosaic_rt", {}).get("tests") or {}
    if args.subset_from:
        with open(args.subset_from) as fh:
            return json.load(fh)["files"].get(rel, {}).get("mosaic_rt", {}).get("tests") or {}
    return None


def _collect(base, path, tmp, env) -> list:
    out = subprocess.run(base + ["--collect-only", path], cwd=tmp, env=env, capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if "::" in line]


# ------------------------------------------------------------------- report


def _passing_time(tests: dict, ids) -> float:
    return round(sum(tests[t]["time"] for t in ids), 2)


def compare_file(stock: dict, ours: dict) -> dict:
    st, ot = stock["tests"], ours["tests"]
    ids = sorted(set(st) | set(ot))
    # A side that ran a subset (--subset-from) is compared on that subset.
    for side in (stock, ours):
        if side["info"].get("subset") and not side["info"]["subset"].get("whole"):
            ids = [t for t in ids if t in side["tests"]]
    both = [t for t in ids if st.get(t, {}).get("outcome") == "passed" and ot.get(t, {}).get("outcome") == "passed"]
    differ = [
        {
            "test": t,
            "stock": st.get(t, {}).get("outcome", "missing"),
            "mosaic_rt": ot.get(t, {}).get("outcome", "missing"),
            "stock_message": st.get(t, {}).get("message", ""),
            "mosaic_rt_message": ot.get(t, {}).get("message", ""),
        }
        for t in ids
        if st.get(t, {}).get("outcome") != ot.get(t, {}).get("outcome")
    ]
    ts, to = _passing_time(st, both), _passing_time(ot, both)
    stages = {b: suite_runner.stage_totals(side["tests"], both) for b, side in zip(BACKENDS, (stock, ours))}
    return {
        "stages_both": stages,
        "collected": max(stock["info"]["collected"], ours["info"]["collected"]),
        "both_passed": len(both),
        "time_both": {"stock": ts, "mosaic_rt": to, "ratio": round(ts / to, 2) if to else None},
        "regressions": [d for d in differ if d["stock"] == "passed"],
        "differ": differ,
    }


def _side(c: dict) -> str:
    return f"{c['passed']:4d} {c['failed']:4d} {c['error'] - c['timed_out']:4d} {c['timed_out']:4d} {c['skipped']:4d}"


def report(result: dict) -> dict:
    lines = []
    p = lines.append
    v = result["versions"]
    p(
        f"\n=== {CLIENT} kernel tests, TPU interpret mode: stock vs mosaic_rt (jax {v['jax']}, python {v['python']}, "
        f"{DEVICES} CPU devices, timeout {result['test_timeout']:.0f}s/test) ==="
    )
    p(
        f"{'file':58s} {'chip':4s} {'coll':>4s} | stock: pass fail  err  t/o skip "
        "| ours:  pass fail  err  t/o skip | both  time s/o"
    )
    totals = {b: dict.fromkeys(("passed", "failed", "error", "skipped", "timed_out", "total"), 0) for b in BACKENDS}
    regressions, both_n, ts, to, collected = [], 0, 0.0, 0.0, 0
    for rel, f in result["files"].items():
        sides = [b for b in BACKENDS if b in f]
        if not sides:
            continue
        for b in sides:
            for key, n in f[b]["info"]["counts"].items():
                totals[b][key] += n
        cols = {b: _side(f[b]["info"]["counts"]) if b in f else f"{'--':>24s}" for b in BACKENDS}
        if len(sides) < len(BACKENDS):  # a one-sided run: its counts, no comparison
            n = max(f[b]["info"].get("collected") or f[b]["info"]["counts"]["total"] for b in sides)
            collected += n
            p(f"{rel[:58]:58s} {f['chip']:4s} {n:4d} |        {cols['stock']} |       {cols['mosaic_rt']} |   --")
            continue
        cmp = compare_file(f["stock"], f["mosaic_rt"])
        f["comparison"] = cmp
        collected += cmp["collected"]
        both_n += cmp["both_passed"]
        ts += cmp["time_both"]["stock"]
        to += cmp["time_both"]["mosaic_rt"]
        regressions += cmp["regressions"]
        r = cmp["time_both"]["ratio"]
        p(
            f"{rel[:58]:58s} {f['chip']:4s} {cmp['collected']:4d} |        {cols['stock']} |"
            f"       {cols['mosaic_rt']} | {cmp['both_passed']:4d} "
            f"{cmp['time_both']['stock']:.1f}/{cmp['time_both']['mosaic_rt']:.1f}" + (f" ({r:.2f}x)" if r else "")
        )
    p(
        f"{'total':58s} {'':4s} {collected:4d} |        {_side(totals['stock'])} "
        f"|       {_side(totals['mosaic_rt'])} | "
        f"{both_n:4d} {ts:.1f}/{to:.1f}" + (f" ({ts / to:.2f}x)" if to else "")
    )
    _print_stages(result, p)
    ran = collected - totals["mosaic_rt"]["skipped"]
    p(
        f"ours passes {totals['mosaic_rt']['passed']} of the {ran} tests that ran (collected minus skipped)"
        + (f": {100 * totals['mosaic_rt']['passed'] / ran:.1f}%" if ran else "")
        + f"; stock passes {totals['stock']['passed']}"
    )
    for rel, why in result.get("left_out", {}).items():
        p(f"left out {rel}: {why}")
    if result.get("params"):
        p(f"InterpretParams on both sides: {result['params']}")
    p(f"pass on stock, not on ours: {len(regressions)}")
    for d in regressions:
        p(f"  {d['mosaic_rt']:7s} {d['test']}: {d['mosaic_rt_message']}")
    gained = [d for f in result["files"].values() if "comparison" in f for d in f["comparison"]["differ"]]
    gained = [d for d in gained if d["mosaic_rt"] == "passed"]
    p(f"pass on ours, not on stock: {len(gained)}")
    for d in gained:
        p(f"  stock {d['stock']:7s} {d['test']}: {d['stock_message']}")
    print("\n".join(lines), flush=True)
    return {
        "collected": collected,
        "totals": totals,
        "both_passed": both_n,
        "time_both": {"stock": round(ts, 2), "mosaic_rt": round(to, 2), "ratio": round(ts / to, 2) if to else None},
        "regressions": regressions,
        "gained": gained,
    }


def merge(results: list) -> dict:
    """One result of several `--json` results of the same client: per file
    and side, the union of their tests, a later result's outcome replacing
    an earlier one's for the same test (a rerun after a fix, a `-k` rerun
    of some tests, a stock subset). A side is compared on its tests only
    (a subset) unless some result ran it whole."""
    out = {k: v for k, v in results[-1].items() if k not in ("files", "summary", "elapsed")}
    out["files"] = {}
    whole: dict = {}
    for r in results:
        for rel, entry in r.get("files", {}).items():
            merged = out["files"].setdefault(rel, {"chip": entry.get("chip")})
            for b in (b for b in BACKENDS if b in entry):
                side = entry[b]
                subset = side["info"].get("subset")
                # A run of every test of the file replaces what came before
                # (a stale "<file>" error of a crashed run included); a
                # partial one (-k, a subset, a run cut short) adds to it.
                covers = not subset and len(side["tests"]) >= (side["info"].get("collected") or 0)
                have = merged.setdefault(b, {"info": dict(side["info"]), "tests": {}})
                if covers:
                    have["tests"] = dict(side["tests"])
                else:
                    have["tests"].update(side["tests"])
                info = have["info"]
                # At least the tests with an outcome: a run cut short counted
                # only what it reached, the run finishing it the rest.
                info["collected"] = max(
                    info.get("collected") or 0, side["info"].get("collected") or 0, len(have["tests"])
                )
                whole[rel, b] = whole.get((rel, b), False) or not subset or bool(subset.get("whole"))
                info.pop("subset", None)
                if not whole[rel, b]:
                    info["subset"] = {"whole": False}
                info["counts"] = suite_runner.counts(have["tests"])
    return out


def _print_stages(result: dict, p) -> None:
    """Where the time on tests passing on both sides goes, per side, over
    the files whose tests carry a stage split on both."""
    totals = {b: None for b in BACKENDS}
    for f in result["files"].values():
        stages = f.get("comparison", {}).get("stages_both") or {}
        if not all(stages.get(b) for b in BACKENDS):
            continue
        for b in BACKENDS:
            t = totals[b] or dict.fromkeys((*suite_runner.STAGES, "kernels"), 0)
            totals[b] = {k: round(t[k] + stages[b][k], 2) for k in t}
    if all(totals.values()):
        p("time by stage on tests passing on both (files with a split on both sides; s):")
        for b in BACKENDS:
            p("  " + suite_runner.format_stages(b, totals[b]))
        # The tests' own work plus ours' (small) kernel execution: an upper
        # bound on the time of these tests with the kernel calls removed.
        floor = totals["mosaic_rt"]["rest"] + totals["mosaic_rt"]["other_compile"]
        p(f"  floor (the tests without their kernels' first-call stages, ours' execution included): {floor:.1f}")


def failure_classes(result: dict, backend: str = "mosaic_rt", top: int = 30) -> None:
    """The most common first lines of failures on one side."""
    seen: dict = {}
    for f in result["files"].values():
        for tid, t in f.get(backend, {}).get("tests", {}).items():
            if t["outcome"] in ("failed", "error"):
                key = re.sub(r"\d+", "N", t.get("message", ""))[:160]
                seen.setdefault(key, []).append(tid)
    print(f"\nfailure classes on {backend}:")
    for key, ids in sorted(seen.items(), key=lambda kv: -len(kv[1]))[:top]:
        print(f"  {len(ids):4d}  {key}  (e.g. {ids[0]})")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-client"))
    ap.add_argument("--setup", action="store_true", help="(re)build the venv, even if it exists")
    ap.add_argument("--setup-only", action="store_true", help="build the venv (or install --mosaic-rt-wheel) and stop")
    ap.add_argument("--no-torch", action="store_true", help="build the venv without torch (its files fail to collect)")
    ap.add_argument("--mosaic-rt-wheel", help="install this mosaic_rt wheel (default: build the repo into a new venv)")
    ap.add_argument("--files", nargs="+", help="files under tests/kernels (default: all)")
    ap.add_argument("-k", help="pytest -k expression for every file")
    ap.add_argument("--quick", action="store_true", help="the CI subset (QUICK)")
    ap.add_argument("--sample", type=int, metavar="K", help="files of more than 40 tests: every K-th test only")
    ap.add_argument(
        "--stock-subset",
        action="store_true",
        help="per file, ours first, then stock on just the tests ours did not pass (plus every --sample K-th, for "
        "timing): shows that no test passing on stock fails on ours without running stock on every test",
    )
    ap.add_argument(
        "--subset-from",
        metavar="JSON",
        help="as --stock-subset, with ours' results taken from this earlier --json (run with --backends stock)",
    )
    ap.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    ap.add_argument(
        "--missing-from",
        metavar="JSON",
        help="run only the tests of each file this earlier --json does not have (finish a cut-short run; "
        "--merge the two)",
    )
    ap.add_argument("--tpu-target", action="store_true", help="ours: MOSAIC_RT_TPU_TARGET = the file's chip")
    ap.add_argument(
        "--cache",
        metavar="DIR",
        help="ours: jax's persistent compilation cache in DIR (pytest --mosaic-rt-cache); run twice to time a "
        "second run",
    )
    ap.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="an InterpretParams field for both sides, e.g. dma_execution_mode=on_wait (repeatable)",
    )
    ap.add_argument(
        "--include-hardware", action="store_true", help="also run the files of HARDWARE (they measure the TPU)"
    )
    ap.add_argument("--test-timeout", type=float, default=120.0)
    ap.add_argument("--json", help="write the results here (after every file)")
    ap.add_argument("--resume", action="store_true", help="with --json: keep the files it already has")
    ap.add_argument("--report", metavar="JSON", help="print the report of an earlier --json and stop")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir of logs and records")
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="with --json OUT: merge earlier --json results (reruns, stock subsets, -k runs) into OUT, "
        "later files replacing earlier ones test by test, then report it",
    )
    return ap


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)

    if args.merge:
        if not args.json:
            ap.error("--merge needs --json OUT")
        results = []
        for path in args.merge:
            with open(path) as fh:
                results.append(json.load(fh))
        result = merge(results)
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        args.report = args.json

    if args.report:
        with open(args.report) as fh:
            result = json.load(fh)
        summary = report(result)
        failure_classes(result)
        return 1 if summary["regressions"] else 0

    python = os.path.join(args.venv, "bin", "python")
    fresh = args.setup or not os.path.exists(python)
    if fresh:
        setup_venv(args.venv, torch=not args.no_torch)
    if fresh or args.mosaic_rt_wheel:
        install_mosaic_rt(python, args.mosaic_rt_wheel)
    if args.setup_only:
        return 0
    versions = installed_versions(python)
    if not versions.get("tests_dir") or versions.get("tpu-inference") is None:
        raise SystemExit(f"client_suite: {args.venv} has no tpu-inference tests; run with --setup")
    if args.files:
        files = chosen_files(args.files, versions["tests_dir"])
    else:
        files = sorted(QUICK) if args.quick else test_files(versions["tests_dir"])
    if not (args.files or args.include_hardware):
        for rel in sorted(set(files) & set(HARDWARE)):
            print(f"[client_suite] left out {rel}: {HARDWARE[rel]} (--include-hardware runs it)")
        files = [f for f in files if f not in HARDWARE]
    result = {
        "client": CLIENT,
        "params": parse_params(args.param),
        # Ours compiled every kernel for the file's chip too (MOSAIC_RT_TPU_TARGET).
        "tpu_target": bool(args.tpu_target),
        "left_out": {f: HARDWARE[f] for f in HARDWARE if f not in files},
        "versions": versions,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "test_timeout": args.test_timeout,
        "files": {},
    }
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as fh:
            result["files"] = json.load(fh).get("files", {})
    tmp = tempfile.mkdtemp(prefix="client_suite_")
    logdir = (os.path.splitext(args.json)[0] + ".logs") if args.json else None
    print(f"[client_suite] {CLIENT}, jax {versions['jax']}, mosaic_rt from {versions['mosaic_rt_from']}; logs in {tmp}")
    t0 = time.perf_counter()
    for rel in files:
        entry = result["files"].setdefault(rel, {})
        # With --stock-subset ours runs first: stock runs what ours did not pass.
        for backend in sorted(args.backends, key=lambda b: b != "mosaic_rt") if args.stock_subset else args.backends:
            if backend in entry:
                continue
            info, tests = run_file(args, python, versions, backend, rel, tmp, _ours_tests(args, entry, rel, backend))
            entry["chip"] = info["chip"]
            entry[backend] = {"info": info, "tests": tests}
            c = info["counts"]
            print(
                f"[client_suite] {backend:9s} {rel} ({info['chip']}): {c['passed']} passed, {c['failed']} failed, "
                f"{c['error']} error ({c['timed_out']} timed out), {c['skipped']} skipped of {info['collected']} "
                f"in {info['wall']:.0f}s",
                flush=True,
            )
            if logdir and info["log"]:
                os.makedirs(logdir, exist_ok=True)
                shutil.copy(info["log"], logdir)
                info["log"] = os.path.join(logdir, os.path.basename(info["log"]))
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(result, fh, indent=1)
    result["elapsed"] = round(time.perf_counter() - t0, 1)
    summary = report(result) if len(args.backends) == 2 else {"regressions": []}
    failure_classes(result, args.backends[-1])
    result["summary"] = summary
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"[client_suite] wrote {args.json}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    broken = [
        rel for rel, f in result["files"].items() for b in BACKENDS if f"{rel}::<file>" in f.get(b, {}).get("tests", {})
    ]
    return 1 if summary["regressions"] or (broken and args.quick) else 0


if __name__ == "__main__":
    sys.exit(main())
