#!/usr/bin/env python3
"""Run JAX's own TPU interpret-mode test files, stock vs mosaic_rt, in JAX's
own pytest configuration.

Usage (run with the Python of the venv under test; it runs pytest with the
same interpreter unless --python is given):

    /work/dev311/bin/python scripts/jax_suite.py --backend stock --json stock.json
    /work/dev311/bin/python scripts/jax_suite.py --backend mosaic_rt --json ours.json
    /work/venv-jax011/bin/python scripts/jax_suite.py --compare --json cmp.json
    python scripts/jax_suite.py --compare-json stock.json ours.json   # no rerun

Options: --jax-git DIR (default /work/.mirror/jax-ml+jax/repo), --tag TAG
(default jax-v<installed jax version>; where the repository lacks that tag --
a snapshot older than the newest jax -- the newest release tag not newer
than the installed jax, said in the output and the JSON's tag_note), --files NAME... (default the three
files below), -k EXPR (passed to pytest), --keep (keep the temp dir),
--test-timeout S (a test making no progress for S seconds -- stock
interpret mode can deadlock, see below -- is killed with SIGABRT, its
threads' stacks land in the log, it counts as an error "hung", and pytest
resumes with the file's remaining tests; default 300),
--mosaic-rt-src DIR (import mosaic_rt from DIR instead of the installed one).

What it does: extracts, at --tag, JAX's pyproject.toml and conftest.py and
tests/pallas/{tpu_pallas_interpret_test,tpu_pallas_interpret_thread_map_test,
tpu_pallas_interpret_distributed_test}.py into a temp dir laid out like the
repo (nothing of JAX is written into this repo), and runs pytest there with
``-c <tmp>/pyproject.toml --rootdir <tmp>``, so JAX's [tool.pytest.ini_options]
(filterwarnings = error, --import-mode=importlib, ...) and conftest.py are in
force. Each file runs in a pytest process of its own, as Bazel runs each as
its own target: InterpretTest skips unless there is exactly 1 CPU device,
while the distributed file calls jtu.request_cpu_devices(8) at import, which
in a shared process would make every InterpretTest skip. The harness adds no
device-count flags (and drops --xla_force_host_platform_device_count from
XLA_FLAGS) so each file gets the devices it asks for.

--backend stock: pytest with ``-p no:<name>`` for each of mosaic_rt's
pytest11 entry points (mosaic_rt is never imported).
--backend mosaic_rt: pytest with mosaic_rt's own ``--mosaic-rt
--mosaic-rt-disable=all`` (docs/pytest-flag.md: every kernel runs on
mosaic_rt whatever ``interpret=`` it passes -- a test's
``pltpu.InterpretParams(...)`` keeps the fields it chose, also under
``force_tpu_interpret_mode`` -- and every gate of the simulated chip is
off, so the files see the plain CPU host they want) and ``-p
jax_suite_shim`` (scripts/jax_suite_shim.py: ``mosaic_interpret.races`` is
``mosaic_rt.races``, and a guard counts kernels that reached stock's
interpreter, which must be 0); mosaic_rt's own pytest plugins stay loaded,
as for any user (but one whose module a --mosaic-rt-src snapshot lacks).
tpu_pallas_interpret_thread_map_test.py tests stock's thread_map utility
and runs no kernel: it runs unchanged.

Hangs: on a small machine (2 CPUs) stock interpret mode can deadlock, e.g.
jax 0.10.2's test_reduce_scatter_sum_with_emit_pipeline_example: every
device's io_callback thread blocks in _allocate_buffer (np.array(val)) and the
process sits idle. --test-timeout turns such a test into an error "hung"
(with the CPU seconds the process used while it made no progress) instead of
stalling the run.

Output: per-test outcomes (passed/failed/error/skipped, recorded by
scripts/jax_suite_record.py, a passive plugin loaded for both backends), each
test's time and per-file wall times as JSON (--json; the pytest logs go to
<json>.<backend>.logs/), and a summary. --compare runs
stock then mosaic_rt and prints the counts per backend, the tests that pass on
stock but not on mosaic_rt with the first line of each failure, and the wall
times with their ratio; the tests of EXCLUDED (test_correct_number_of_stores
counts stock's private store callbacks) are outside the must-pass set and
reported on their own, with the reason. Exit status: 0 when every must-pass test passes (--compare /
--compare-json) or the run completed (single backend), else 1.
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

import suite_runner

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
DEFAULT_GIT = "/work/.mirror/jax-ml+jax/repo"
FILES = (
    "tpu_pallas_interpret_test.py",
    "tpu_pallas_interpret_thread_map_test.py",
    "tpu_pallas_interpret_distributed_test.py",
)
SUPPORT = ("pyproject.toml", "conftest.py")
# Tests outside the must-pass set, each with why (reported on their own).
EXCLUDED = {
    "test_correct_number_of_stores": "counts stock's private store callbacks",
}
# (test_that_exception_does_not_cause_dma_to_wait_forever and
# test_that_barrier_does_not_hang_after_exception, which fail a device with an
# out-of-bounds VMEM load, were excluded while the shim built the tests'
# pltpu.InterpretParams() as mosaic_rt's, whose default out_of_bounds_reads
# is the TPU's. Through the flag a test's stock params keep stock's "raise":
# both pass, jax 0.10.2.)
BACKENDS = ("stock", "mosaic_rt")


def _git_show(git_dir: str, tag: str, path: str) -> bytes:
    proc = subprocess.run(["git", "--git-dir", git_dir, "show", f"{tag}:{path}"], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"jax_suite: cannot read {tag}:{path} from {git_dir}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout


def _release(tag: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", tag.removeprefix("jax-v")))


def default_tag(git_dir: str, jax_version: str) -> tuple[str, str | None]:
    """``(tag, note)``: ``jax-v<jax_version>`` when the repository has it,
    else the newest release tag not newer than that jax, with a note saying
    so (a snapshot can lag behind PyPI: tests of the newest jax's own tag
    are then not available)."""
    wanted = f"jax-v{jax_version}"
    proc = subprocess.run(["git", "--git-dir", git_dir, "tag", "--list", "jax-v*"], capture_output=True, text=True)
    tags = [t for t in proc.stdout.split() if re.fullmatch(r"jax-v\d+(\.\d+)+", t)]
    if wanted in tags or not tags:
        return wanted, None
    older = [t for t in tags if _release(t) <= _release(wanted)]
    if not older:
        return wanted, None
    best = max(older, key=_release)
    return best, f"{wanted} is not in {git_dir} (newest there: {max(tags, key=_release)}); using {best}"


def extract(git_dir: str, tag: str, files, dest: str) -> None:
    for path in list(SUPPORT) + [f"tests/pallas/{f}" for f in files]:
        out = os.path.join(dest, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as fh:
            fh.write(_git_show(git_dir, tag, path))


def installed_versions(python: str, src: str | None = None) -> dict:
    code = """
import importlib.metadata as m, importlib.util as u, json, sys
names = {d.metadata['Name']: d for d in m.distributions()}
def found(mod):
    try:
        return u.find_spec(mod) is not None
    except ImportError:
        return False
spec = u.find_spec('mosaic_rt')
print(json.dumps({n: (names[n].version if n in names else None)
                  for n in ('jax', 'jaxlib', 'numpy', 'pytest', 'mosaic_rt')}
                 | {'python': sys.version.split()[0]}))
print(json.dumps(spec and spec.origin))
print(json.dumps([(e.name, e.value, found(e.value.split(':')[0]))
                  for e in (names['mosaic_rt'].entry_points if 'mosaic_rt' in names else ())
                  if e.group == 'pytest11']))
"""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    out = subprocess.check_output([python, "-c", code], text=True, env=env).splitlines()
    versions = json.loads(out[0])
    versions["mosaic_rt_from"] = json.loads(out[1])
    # mosaic_rt's pytest plugins (entry points of the installed distribution):
    # [name, module, importable from where mosaic_rt is imported].
    versions["mosaic_rt_plugins"] = json.loads(out[2])
    return versions


def _env(backend: str, stats_path: str, src: str | None = None) -> dict:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_PLUGINS", None)
    flags = env.get("XLA_FLAGS", "")
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", flags).strip()
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    if backend == "mosaic_rt":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SCRIPTS, src, env.get("PYTHONPATH")) if p)
        env["JAX_SUITE_SHIM_STATS"] = stats_path
    return env


# mosaic_rt's plugin of the simulated chip (`--mosaic-rt`).
SIMULATE_PLUGIN = "mosaic_rt_simulate"


def _plugin_flags(backend: str, versions: dict, simulate: bool = True) -> list:
    """stock: none of mosaic_rt's pytest plugins but, with ``simulate``, the
    simulated chip's (a stock side on a simulated chip: scripts/jax_tpu_suite.py;
    without it mosaic_rt is never imported). mosaic_rt: all of them but any
    whose module the imported mosaic_rt lacks (an installed entry point
    newer than a --mosaic-rt-src snapshot)."""
    flags = []
    for name, _module, importable in versions.get("mosaic_rt_plugins", []):
        if not importable or (backend == "stock" and not (simulate and name == SIMULATE_PLUGIN)):
            flags += ["-p", f"no:{name}"]
    if backend == "stock" and not flags:
        flags = ["-p", "no:mosaic_rt"]
    return flags


def _run_file(args, backend, python, src, tmp, file, versions):
    """Runs one test file in its own pytest processes (scripts/suite_runner.py:
    a test making no progress for --test-timeout seconds is killed and counts
    as an error "hung"; pytest resumes with the file's other tests)."""
    log = os.path.join(tmp, f"log-{file}.txt")
    stats = os.path.join(tmp, f"shim-{file}.json")
    record = os.path.join(tmp, f"record-{file}.jsonl")
    env = _env(backend, stats, src)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SCRIPTS, env.get("PYTHONPATH")) if p)
    base = [
        python,
        "-m",
        "pytest",
        "-c",
        os.path.join(tmp, "pyproject.toml"),
        "--rootdir",
        tmp,
        "-p",
        "no:cacheprovider",
        "-p",
        "jax_suite_record",
        "-rfEs",
        "--tb=short",
    ]
    base += _plugin_flags(backend, versions, simulate=False)
    if backend == "mosaic_rt":
        base += ["--mosaic-rt", "--mosaic-rt-disable=all", "-p", "jax_suite_shim"]
    if args.k:
        base += ["-k", args.k]
    info, tests = suite_runner.run_file(
        base,
        [f"tests/pallas/{file}"],
        cwd=tmp,
        env=env,
        record=record,
        log=log,
        file=file,
        test_timeout=args.test_timeout,
        label="jax_suite",
    )
    if os.path.exists(stats):
        with open(stats) as fh:
            info["shim"] = json.load(fh)
    return info, tests


def run_backend(args, backend: str) -> dict:
    python = args.python or sys.executable
    src = args.mosaic_rt_src if backend == "mosaic_rt" else None
    versions = installed_versions(python, src)
    tag, note = (args.tag, None) if args.tag else default_tag(args.jax_git, versions["jax"])
    if note:
        print(f"[jax_suite] {note}", flush=True)
    tmp = tempfile.mkdtemp(prefix=f"jax_suite_{backend}_")
    extract(args.jax_git, tag, args.files, tmp)
    result = {
        "backend": backend,
        "tag": tag,
        "tag_note": note,
        "versions": versions,
        "python": python,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "tmpdir": tmp,
        "files": {},
        "tests": {},
    }
    print(f"[jax_suite] {backend}: {tag}, jax {versions['jax']}, python {versions['python']}, in {tmp}", flush=True)
    total_wall = 0.0
    for file in args.files:
        info, tests = _run_file(args, backend, python, src, tmp, file, versions)
        total_wall += info["wall"]
        result["files"][file] = info
        result["tests"].update(tests)
        c = info["counts"]
        hung = f", {len(info['hung'])} hung (killed after {args.test_timeout:.0f}s)" if info["hung"] else ""
        print(
            f"[jax_suite] {backend} {file}: {c['passed']} passed, {c['failed']} failed, "
            f"{c['error']} error, {c['skipped']} skipped in {info['wall']:.1f}s{hung} "
            f"(rc {info['returncodes']})",
            flush=True,
        )
        if info.get("shim", {}).get("kernels_on_stock"):
            print(
                f"[jax_suite] WARNING: {info['shim']['kernels_on_stock']} of {info['shim']['kernels']} "
                "kernels ran on stock's interpreter under mosaic_rt"
            )
    result["wall"] = round(total_wall, 2)
    result["counts"] = suite_runner.counts(result["tests"])
    if not args.keep:
        # Keep the logs next to the JSON when one is asked for; drop the rest.
        if args.json:
            logdir = os.path.splitext(args.json)[0] + f".{backend}.logs"
            os.makedirs(logdir, exist_ok=True)
            for file, info in result["files"].items():
                dst = os.path.join(logdir, os.path.basename(info["log"]))
                shutil.copy(info["log"], dst)
                info["log"] = dst
                rec = os.path.join(tmp, f"record-{file}.jsonl")
                if os.path.exists(rec):
                    shutil.copy(rec, logdir)
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _exclusion(tid: str) -> str | None:
    """Why `tid` is outside the must-pass set (None: it is in it)."""
    name = tid.rsplit("::", 1)[-1]
    for e, why in EXCLUDED.items():
        if name == e or name.startswith(e + "_") or re.fullmatch(re.escape(e) + r"\d*", name):
            return why
    return None


def _excluded(tid: str) -> bool:
    return _exclusion(tid) is not None


def summarize(result: dict) -> None:
    c = result["counts"]
    print(
        f"\n{result['backend']} at {result['tag']} (jax {result['versions']['jax']}): "
        f"{c['passed']} passed, {c['failed']} failed, {c['error']} error, "
        f"{c['skipped']} skipped of {c['total']}; wall {result['wall']:.1f}s"
    )
    for tid, t in sorted(result["tests"].items()):
        if t["outcome"] in ("failed", "error"):
            print(f"  {t['outcome']:7s} {tid}: {t.get('message', '')}")


def compare(stock: dict, ours: dict) -> dict:
    lines = []
    p = lines.append
    p(f"\n=== JAX interpret-mode test files at {stock['tag']}: stock vs mosaic_rt ===")
    p(
        f"jax {stock['versions']['jax']} / jaxlib {stock['versions']['jaxlib']}, "
        f"python {stock['versions']['python']}, pytest {stock['versions']['pytest']}, "
        f"mosaic_rt {ours['versions'].get('mosaic_rt')} from "
        f"{ours['versions'].get('mosaic_rt_from', 'the installed package')}"
    )
    if ours["tag"] != stock["tag"]:
        p(f"WARNING: different tags: stock {stock['tag']}, ours {ours['tag']}")
    p(f"{'backend':10s} {'passed':>6s} {'failed':>6s} {'error':>6s} {'skipped':>7s} {'total':>5s} {'wall s':>8s}")
    for r in (stock, ours):
        c = r["counts"]
        p(
            f"{r['backend']:10s} {c['passed']:6d} {c['failed']:6d} {c['error']:6d} "
            f"{c['skipped']:7d} {c['total']:5d} {r['wall']:8.1f}"
        )
    ratio = stock["wall"] / ours["wall"] if ours["wall"] else float("inf")
    p(f"wall time: stock {stock['wall']:.1f}s, mosaic_rt {ours['wall']:.1f}s, ratio stock/ours {ratio:.2f}x")
    hung_s = {r["backend"]: sum(t["hung"]["after"] for t in r["tests"].values() if "hung" in t) for r in (stock, ours)}
    if any(hung_s.values()):
        sw, ow = stock["wall"] - hung_s["stock"], ours["wall"] - hung_s["mosaic_rt"]
        p(
            f"  without the time spent in hung tests before they were killed: stock {sw:.1f}s, "
            f"mosaic_rt {ow:.1f}s, ratio {sw / ow if ow else float('inf'):.2f}x"
        )
    per_file = {}
    for file, info in stock["files"].items():
        o = ours["files"].get(file)
        if o:
            r = info["wall"] / o["wall"] if o["wall"] else float("inf")
            per_file[file] = {"stock": info["wall"], "mosaic_rt": o["wall"], "ratio": round(r, 2)}
            p(f"  {file}: stock {info['wall']:.1f}s, ours {o['wall']:.1f}s, {r:.2f}x")
    both = [
        t
        for t, v in stock["tests"].items()
        if v["outcome"] == "passed" and ours["tests"].get(t, {}).get("outcome") == "passed"
    ]
    splits = {r["backend"]: suite_runner.stage_totals(r["tests"], both) for r in (stock, ours)}
    if all(splits.values()):
        p(f"time by stage on the {len(both)} tests passing on both (s):")
        for backend, totals in splits.items():
            p("  " + suite_runner.format_stages(backend, totals))
    must = sorted(t for t, v in stock["tests"].items() if v["outcome"] == "passed" and not _excluded(t))
    not_passing = [t for t in must if ours["tests"].get(t, {}).get("outcome") != "passed"]
    p(
        f"must-pass (passed on stock, {len(EXCLUDED)} tests excluded, below): {len(must)}; "
        f"pass on mosaic_rt: {len(must) - len(not_passing)}; not: {len(not_passing)}"
    )
    for t in not_passing:
        o = ours["tests"].get(t, {"outcome": "missing"})
        p(f"  {o['outcome']:7s} {t}: {o.get('message', '')}")
    extra = sorted(
        t
        for t, v in ours["tests"].items()
        if v["outcome"] == "passed" and stock["tests"].get(t, {}).get("outcome") != "passed" and not _excluded(t)
    )
    if extra:
        p(f"pass on mosaic_rt but not on stock: {len(extra)}")
        for t in extra:
            s = stock["tests"].get(t, {"outcome": "missing"})
            p(f"  stock {s['outcome']:7s} {t}: {s.get('message', '')}")
    excluded = sorted(set(t for r in (stock, ours) for t in r["tests"] if _excluded(t)))
    for t in excluded:
        s, o = stock["tests"].get(t, {}), ours["tests"].get(t, {})
        p(
            f"excluded {t} ({_exclusion(t)}): stock {s.get('outcome', 'missing')}, mosaic_rt "
            f"{o.get('outcome', 'missing')}{': ' + o['message'] if o.get('message') else ''}"
        )
    for file, info in ours["files"].items():
        shim = info.get("shim")
        if shim and shim.get("kernels_on_stock"):
            p(f"WARNING {file}: {shim['kernels_on_stock']} of {shim['kernels']} kernels ran on stock's interpreter")
    print("\n".join(lines))
    return {
        "must_pass": len(must),
        "not_passing_on_ours": not_passing,
        "pass_on_ours_not_stock": extra,
        "excluded": excluded,
        "wall": {
            "stock": stock["wall"],
            "mosaic_rt": ours["wall"],
            "ratio": round(ratio, 2),
            "hung_seconds": hung_s,
            "per_file": per_file,
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jax-git", default=DEFAULT_GIT)
    ap.add_argument(
        "--tag",
        default=None,
        help="default: jax-v<installed jax version>, else the newest release tag of --jax-git not newer than it",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--backend", choices=BACKENDS)
    mode.add_argument("--compare", action="store_true", help="run stock, then mosaic_rt")
    mode.add_argument(
        "--compare-json",
        nargs=2,
        metavar=("STOCK_JSON", "OURS_JSON"),
        help="compare two earlier --backend --json results",
    )
    ap.add_argument("--json", help="write per-test outcomes and wall times here")
    ap.add_argument("--files", nargs="+", default=list(FILES))
    ap.add_argument("-k", help="pytest -k expression")
    ap.add_argument("--python", help="interpreter that runs pytest (default: this one)")
    ap.add_argument(
        "--mosaic-rt-src",
        metavar="DIR",
        help="for the mosaic_rt backend, import mosaic_rt from DIR (put first on "
        "PYTHONPATH; e.g. the python/ dir of a built snapshot)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument(
        "--test-timeout",
        type=float,
        default=300.0,
        help="a test with no progress for this long is killed and counted as "
        "an error (hung); the file's other tests still run (default 300)",
    )
    args = ap.parse_args(argv)

    if args.compare_json:
        with open(args.compare_json[0]) as fh:
            stock = json.load(fh)
        with open(args.compare_json[1]) as fh:
            ours = json.load(fh)
        cmp = compare(stock, ours)
        out = {"stock": stock, "mosaic_rt": ours, "comparison": cmp}
    elif args.compare:
        stock = run_backend(args, "stock")
        ours = run_backend(args, "mosaic_rt")
        summarize(stock)
        summarize(ours)
        cmp = compare(stock, ours)
        out = {"stock": stock, "mosaic_rt": ours, "comparison": cmp}
    else:
        backend = args.backend or "mosaic_rt"
        out = run_backend(args, backend)
        summarize(out)
        cmp = None
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"[jax_suite] wrote {args.json}")
    if cmp is not None:
        return 1 if cmp["not_passing_on_ours"] else 0
    return 0 if not any(t.endswith("::<file>") for t in out["tests"]) else 1


if __name__ == "__main__":
    sys.exit(main())
