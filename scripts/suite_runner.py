"""Running one test file in pytest processes of its own, for the suite
harnesses (scripts/jax_suite.py, scripts/client_suite.py): a test that makes
no progress for a while is killed and pytest resumes with the file's other
tests, and every test's outcome is read back from the record that
scripts/jax_suite_record.py (a passive plugin, ``-p jax_suite_record``)
writes as JSON lines.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

OUTCOMES = ("passed", "failed", "error", "skipped")
# Before the record's first line (interpreter start, imports, collection)
# a process gets at least this long.
STARTUP_TIMEOUT = 600.0


_EMBEDDED = re.compile(r"^\s*(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)$")


def first_line(text: str | None) -> str:
    """The failure's one-line summary: its first line -- or, when that only
    says a host callback failed (stock interpret mode's errors arrive as a
    JaxRuntimeError quoting the callback's traceback), the last
    ``SomeError: message`` line quoted in it, the root cause."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    if "CpuCallback error" in lines[0] or "Error dispatching computation" in lines[0]:
        for line in reversed(lines[1:]):
            m = _EMBEDDED.match(line)
            if m:
                return f"{lines[0][:60]}... {m.group(1)}: {m.group(2)}"[:300]
    return lines[0][:300]


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def read_record(path: str, stages: dict | None = None):
    """``(collected ids or None, started ids, phase reports)`` of a record;
    each test's time by stage into ``stages`` (node id -> dict) if given."""
    collected, started, reports = None, [], []
    if os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                if "collected" in obj:
                    collected = collected or obj["collected"]
                elif "start" in obj:
                    started.append(obj["start"])
                elif "stages" in obj:
                    if stages is not None:
                        stages[obj.pop("stages")] = obj
                else:
                    reports.append(obj)
    return collected, started, reports


def test_id(nodeid: str, file: str) -> str:
    """``file::Class::test`` whatever path pytest gave the file."""
    parts = nodeid.split("::")
    return "::".join([file] + parts[1:])


def outcomes(reports, file: str) -> dict:
    """Per-test outcome from the phase reports: a failed call is "failed", a
    failed setup/teardown "error", a skip "skipped", else "passed"."""
    tests: dict = {}
    for r in reports:
        tid = test_id(r["nodeid"], file)
        t = tests.setdefault(tid, {"outcome": "passed", "time": 0.0})
        t["time"] = round(t["time"] + r.get("duration", 0.0), 3)
        if r["outcome"] == "failed":
            new = "failed" if r["when"] == "call" else "error"
            if t["outcome"] not in ("failed", "error"):
                t["outcome"] = new
                t["message"] = first_line(r.get("message"))
                if r.get("detail"):
                    t["detail"] = r["detail"]
                t["phase"] = r["when"]
        elif r["outcome"] == "skipped" and t["outcome"] == "passed":
            t["outcome"] = "skipped"
            t["message"] = first_line(r.get("message"))
        if r["when"] == "call":
            t["called"] = True
    for t in tests.values():
        # A setup that passed and no call report: the process ended inside
        # the test (killed, or died). Never a pass.
        if not t.pop("called", False) and t["outcome"] == "passed":
            t["outcome"] = "error"
            t["message"] = "did not finish: no report of its call (the process ended in it)"
    return tests


def counts(tests: dict) -> dict:
    c = dict.fromkeys(OUTCOMES, 0)
    for t in tests.values():
        c[t["outcome"]] += 1
    c["total"] = len(tests)
    c["timed_out"] = sum(1 for t in tests.values() if "hung" in t)
    return c


def run_file(base_cmd, targets, *, cwd, env, record, log, file, test_timeout, label="suite"):
    """Runs ``base_cmd + targets`` (a pytest command line that loads
    ``jax_suite_record``) until every collected test has a result. When the
    record does not grow for ``test_timeout`` seconds (``STARTUP_TIMEOUT``
    before its first line), the process gets
    SIGABRT (pytest's faulthandler writes every thread's stack to the log),
    the running test counts as an error with ``"hung"`` set, and pytest
    starts again with the tests already done deselected. A process that
    dies by itself in a test (a signal: the kernel's OOM killer, a native
    crash) blames that test the same way (``"crashed"``) and the file
    resumes too.

    Returns ``(info, tests)``: wall time, return codes, hung ids and counts;
    per-test outcome, time and first line of the failure."""
    env = dict(env)
    env["JAX_SUITE_RECORD"] = record
    skip_file = record + ".skip"
    env["JAX_SUITE_SKIP"] = skip_file
    hung: dict = {}
    crashed: dict = {}
    rcs = []
    wall = 0.0
    t_start = time.perf_counter()
    with open(log, "w") as fh:
        while True:
            collected, _started, reports = read_record(record)
            done = {r["nodeid"] for r in reports if r["when"] == "teardown"}
            skip = sorted(done | set(hung) | set(crashed))
            if collected is not None and not (set(collected) - set(skip)):
                break
            # Done tests are deselected by exact node id through the record
            # plugin ($JAX_SUITE_SKIP): pytest's --deselect matches prefixes.
            with open(skip_file, "w") as sf:
                sf.write("".join(n + "\n" for n in skip))
            cmd = list(base_cmd) + list(targets)
            fh.write(f"$ {' '.join(cmd)}  # skipping {len(skip)} test(s) done\n")
            fh.flush()
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
            last_progress, last_len, cpu0 = time.perf_counter(), -1, 0.0
            killed = None
            while proc.poll() is None:
                time.sleep(0.2)
                size = os.path.getsize(record) if os.path.exists(record) else 0
                now = time.perf_counter()
                if size != last_len:
                    last_len, last_progress, cpu0 = size, now, cpu_seconds(proc.pid)
                elif now - last_progress > (test_timeout if size else max(test_timeout, STARTUP_TIMEOUT)):
                    _, started_now, reports_now = read_record(record)
                    finished = {r["nodeid"] for r in reports_now if r["when"] == "teardown"}
                    running = [n for n in started_now if n not in finished]
                    cpu = cpu_seconds(proc.pid) - cpu0
                    killed = running[-1] if running else None
                    fh.write(
                        f"\n[{label}] no progress for {test_timeout:.0f}s in "
                        f"{killed} (process CPU in that time: {cpu:.1f}s): SIGABRT\n"
                    )
                    fh.flush()
                    proc.send_signal(signal.SIGABRT)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                    if killed is not None:
                        hung[killed] = {"after": test_timeout, "cpu": round(cpu, 1)}
                    break
            rcs.append(proc.returncode)
            wall += time.perf_counter() - t0
            if killed is None:
                blamed = _running_test(record) if proc.returncode < 0 else None
                if blamed is None:
                    break  # ended by itself (or no test to blame): do not loop
                crashed[blamed] = proc.returncode
                fh.write(f"\n[{label}] pytest died in {blamed} ({_signal_name(proc.returncode)}): resuming\n")
                fh.flush()
        by_stage: dict = {}
        collected, _started, reports = read_record(record, by_stage)
    tests = outcomes(reports, file)
    for nodeid, split in by_stage.items():
        if test_id(nodeid, file) in tests:
            tests[test_id(nodeid, file)]["stages"] = split
    for nodeid, h in hung.items():
        tests[test_id(nodeid, file)] = {
            "outcome": "error",
            "time": h["after"],
            "hung": h,
            "message": f"hung: no progress for {h['after']:.0f}s (process CPU in that time {h['cpu']}s); killed",
        }
    for nodeid, rc in crashed.items():
        tests[test_id(nodeid, file)] = {
            "outcome": "error",
            "time": 0.0,
            "crashed": rc,
            "message": f"crashed: the pytest process died in this test ({_signal_name(rc)}; SIGKILL is "
            "usually the kernel's out-of-memory killer); killed",
        }
    with open(log) as fh:
        tail = fh.read().splitlines()[-3:]
    info = {
        "wall": round(wall, 2),
        "elapsed": round(time.perf_counter() - t_start, 2),
        "returncodes": rcs,
        "log": log,
        "hung": sorted(hung),
        "collected": len(collected or ()),
        "summary_line": tail[-1] if tail else "",
    }
    bad = [rc for rc in rcs if rc not in (0, 1, 5) and rc != -signal.SIGABRT]
    for rc in crashed.values():  # blamed on a test already (SIGABRT is not in `bad`)
        if rc in bad:
            bad.remove(rc)
    if bad or (collected is None and 5 not in rcs):
        tests[f"{file}::<file>"] = {
            "outcome": "error",
            "time": wall,
            "message": f"pytest exited with {rcs}: {' | '.join(tail)}",
        }
    info["counts"] = counts(tests)
    return info, tests


def _running_test(record: str) -> str | None:
    """The test that started and did not finish, per the record."""
    _, started, reports = read_record(record)
    finished = {r["nodeid"] for r in reports if r["when"] == "teardown"}
    running = [n for n in started if n not in finished]
    return running[-1] if running else None


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"exit {rc}"


STAGES = ("kernel_trace", "kernel_interpret", "kernel_lower", "kernel_compile", "other_compile", "rest")


def stage_totals(tests: dict, ids) -> dict | None:
    """Seconds per stage (`mosaic_rt.stages`) summed over the tests ``ids``,
    or None when any of them has no split (recorded without mosaic_rt)."""
    splits = [tests[t].get("stages") for t in ids]
    if not splits or any(s is None for s in splits):
        return None
    out = {k: round(sum(s.get(k, 0.0) for s in splits), 2) for k in STAGES}
    out["kernels"] = sum(s.get("kernels", 0) for s in splits)
    return out


def format_stages(label: str, totals: dict) -> str:
    kernel = sum(totals[k] for k in STAGES[:4])
    parts = " ".join(f"{k.replace('kernel_', 'k.')} {totals[k]:.1f}" for k in STAGES)
    return f"{label}: {totals['kernels']} kernels; kernel first calls {kernel:.1f}s ({parts})"
