#!/usr/bin/env python3
"""The long run of the differential fuzzer of Pallas TPU kernels (issue 56).

Usage (with the Python of the venv under test: its jax and mosaic_rt):

    python scripts/fuzz.py --minutes 60 --seed 1 [--categories elementwise,dma] [--repro-dir DIR]
    python scripts/fuzz.py --case elementwise:1000042      # one case again (prints its verdict)
    python scripts/fuzz.py --show elementwise:1000042      # one case's source

Cases are generated (tests/support/fuzzing), run under stock
`pltpu.InterpretParams()` and `mosaic_rt.InterpretParams()` with the same
knobs, and compared bit for bit; where they disagree the kernel's meaning
(numpy / eager jax) decides whether stock is the one that is wrong. Case k
of a run is category ``categories[k % len(categories)]`` with seed
``S * 1_000_000 + k``: the same command makes the same kernels (on one jax
version). A mismatch is shrunk to a minimal kernel and written to
``--repro-dir`` (default ``fuzz-repros/``) as a standalone .py file that
compares stock with mosaic_rt when run; its path is printed.

Cases run in a worker process (``--worker``, fed case names on stdin),
``--batch`` at a time: their kernels run in one jitted call per interpreter,
and only a case that does not agree there is judged (and shrunk) on its own
(`runner.run_batch`). The worker is restarted every ``--recycle`` cases,
and killed and restarted when a batch takes longer than ``--case-timeout``
seconds plus 30 per case (its cases count as "timeout").
At the end: counts per category and kind, the mismatches with their repro
files, the cases where stock was shown wrong; ``--json PATH`` writes them.
Exit status 1 when any case is a mismatch, a timeout or a generator error.
Run long runs with ``nice -n 10`` on a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPPORT = os.path.join(ROOT, "tests", "support")
MARK = "@@fuzz@@ "
DEVICES = 16

# Kinds a case may end as (the oracle's, plus the harness's own).
KINDS = (
    "same",
    "both_reject",
    "stock_wrong",
    "stock_rejects",
    "mismatch",
    "timeout",
    "generator_error",
    "meaning_error",
)
FAILING = ("mismatch", "timeout", "generator_error", "meaning_error")


def _setup_jax_env():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}".strip()
    sys.path.insert(0, SUPPORT)


def _parse_case(text: str) -> tuple[str, int]:
    category, _, seed = text.partition(":")
    return category, int(seed)


# -- worker --------------------------------------------------------------


def worker(args) -> int:
    _setup_jax_env()
    import dataclasses

    from fuzzing import case, oracle, runner

    out = sys.stdout
    # Everything else the cases print goes to stderr: stdout carries results.
    sys.stdout = sys.stderr

    def send(obj):
        out.write(MARK + json.dumps(obj) + "\n")
        out.flush()

    # Who runs now: a process killed by a signal is blamed on its last stage.
    oracle.STAGE_HOOK = lambda stage, names: send({"stage": stage, "cases": names})
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "!nostock":  # stock killed the process on this case: judge it without stock
            category, seed = _parse_case(words[1])
            r = runner.run_case(
                category, seed, repro_dir=args.repro_dir, shrink_budget=args.shrink_budget, stock_crashed=True
            )
            send([dataclasses.asdict(r)])
        elif words[0] == "!source":  # mosaic_rt killed the process: the case's source as its repro
            category, seed = _parse_case(words[1])
            text = case.source(runner.generate(category, seed), title=runner.title(category, seed))
            send([{"repro": runner.write_repro(text, args.repro_dir, category, seed)}])
        else:
            cases = [_parse_case(name) for name in words]
            results = runner.run_batch(cases, repro_dir=args.repro_dir, shrink_budget=args.shrink_budget)
            send([dataclasses.asdict(r) for r in results])
    return 0


class Worker:
    def __init__(self, args):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--repro-dir", args.repro_dir]
        cmd += ["--shrink-budget", str(args.shrink_budget)]
        # The cases' own noise (stock's logged tracebacks, XLA's warnings)
        # goes to the log, not the console.
        self.log = open(args.log, "a") if args.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1
        )
        self.done = 0

    def run(self, line: str, timeout: float):
        """``("ok", result dicts)`` of the worker's answer to ``line`` (case
        names judged as one batch: `runner.run_batch`, or a ``!`` command),
        else ``("died", last stage, exit code)`` or ``("timeout", last
        stage, None)`` -- the worker is gone then. A stage is ``(who,
        case names)``: who ran when it happened."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        stage = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(kill=True)
                return "timeout", stage, None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            got = self.proc.stdout.readline()
            if not got:  # the worker died (a signal: a native crash)
                self.close(kill=True)
                return "died", stage, self.proc.returncode
            if got.startswith(MARK):
                msg = json.loads(got[len(MARK) :])
                if isinstance(msg, dict):
                    stage = (msg["stage"], msg["cases"])
                    continue
                self.done += len(line.split())
                return "ok", msg

    def close(self, kill: bool = False):
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not subprocess.DEVNULL:
            self.log.close()


class Pool:
    """The worker, restarted when it dies, hangs or served ``--recycle``
    cases; `judge` isolates a case that takes the process down."""

    def __init__(self, args):
        self.args, self.w, self.timeout = args, None, args.case_timeout

    def _run(self, line: str, timeout: float):
        if self.w is None or self.w.done >= self.args.recycle or self.w.proc.poll() is not None:
            self.close()
            self.w = Worker(self.args)
        got = self.w.run(line, timeout)
        if got[0] != "ok":
            self.w = None
        return got

    def close(self):
        if self.w is not None:
            self.w.close()
            self.w = None

    def judge(self, names: list) -> list:
        got = self._run(" ".join(names), self.timeout)
        if got[0] == "ok":
            return got[1]
        if len(names) > 1:  # someone in the batch took the process down: one by one
            return [self.judge([name])[0] for name in names]
        return [self._lost(names[0], *got)]

    def _lost(self, name: str, how: str, stage, code) -> dict:
        """The verdict on a case whose process died or hung (``how``) while
        ``stage`` ran."""
        what = f"killed by signal {-code}" if how == "died" and code and code < 0 else how
        who = stage[0] if stage else None
        if who == "stock":
            # Stock's failure: judge mosaic_rt alone, by the meaning.
            got = self._run(f"!nostock {name}", self.args.case_timeout)
            if got[0] == "ok":
                r = got[1][0]
                r["detail"] = f"stock: the process was {what}; " + (r.get("detail") or "")
                return r
            how2, stage, code = got
            what2 = f"killed by signal {-code}" if how2 == "died" and code and code < 0 else how2
            if stage and stage[0] == "ours" and how2 == how == "died":
                # Both take the process down the same way (jaxlib 0.10.2's XLA
                # folds an integer division by a constant zero with SIGFPE, in
                # any jitted program): a case both reject, not a mismatch.
                return {"kind": "both_reject", "detail": f"stock: the process was {what}; mosaic_rt: {what2}"}
            how, what, who = how2, what2, stage[0] if stage else None
        if who == "ours":
            got = self._run(f"!source {name}", 300)
            repro = got[1][0]["repro"] if got[0] == "ok" else None
            detail = f"mosaic_rt: the process was {what} running this kernel"
            return {"kind": "mismatch" if how == "died" else "timeout", "detail": detail, "repro": repro}
        kind = "timeout" if how == "timeout" else "generator_error"
        return {"kind": kind, "detail": f"the worker was {what} (last stage: {stage})"}


# -- parent --------------------------------------------------------------


def _table(counts: dict, cats: list) -> str:
    cols = ["cases", *KINDS, "off_meaning"]
    rows = [["category", *cols]]
    total = collections.Counter()
    for c in cats:
        row = counts.get(c, collections.Counter())
        total.update(row)
        rows.append([c, *(str(row.get(k, 0)) for k in cols)])
    rows.append(["total", *(str(total.get(k, 0)) for k in cols)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(r, widths))) for r in rows
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--categories", default="", help="comma-separated (default: every category)")
    ap.add_argument("--max-cases", type=int, default=0, help="stop after this many cases (0: time only)")
    ap.add_argument("--repro-dir", default=os.path.join(os.getcwd(), "fuzz-repros"))
    ap.add_argument("--case-timeout", type=float, default=900.0)
    ap.add_argument("--shrink-budget", type=int, default=120)
    ap.add_argument("--recycle", type=int, default=200, help="restart the worker after this many cases")
    ap.add_argument("--batch", type=int, default=8, help="cases judged together (one jitted call per interpreter)")
    ap.add_argument("--log", default=None, help="append the worker's stderr here (default: dropped)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--case", default=None, help="CATEGORY:SEED: judge this one case in this process")
    ap.add_argument("--show", default=None, help="CATEGORY:SEED: print this case's source")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.repro_dir = os.path.abspath(args.repro_dir)
    if args.worker:
        return worker(args)
    if args.case or args.show:
        _setup_jax_env()
        from fuzzing import case, runner

        category, seed = _parse_case(args.case or args.show)
        if args.show:
            print(case.source(runner.generate(category, seed), title=runner.title(category, seed)))
            return 0
        r = runner.run_case(category, seed, repro_dir=args.repro_dir, shrink_budget=args.shrink_budget)
        print(f"{category}:{seed}: {r.kind} ({r.seconds:.1f} s){' ' + r.detail if r.detail else ''}")
        if r.repro:
            print(f"repro: {r.repro}")
        return 1 if r.kind in FAILING else 0

    sys.path.insert(0, SUPPORT)
    from fuzzing import categories

    cats = [c for c in args.categories.split(",") if c] or list(categories.NAMES)
    unknown = [c for c in cats if c not in categories.NAMES]
    if unknown:
        ap.error(f"unknown categories {unknown}; known: {', '.join(categories.NAMES)}")
    versions = subprocess.run(
        [sys.executable, "-c", "import jax, mosaic_rt; print(jax.__version__, mosaic_rt.__file__)"],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    ).stdout.strip()
    print(f"fuzz: seed {args.seed}, {args.minutes} min, categories {','.join(cats)}; jax, mosaic_rt: {versions}")
    counts: dict = collections.defaultdict(collections.Counter)
    notable: list = []
    t_start = time.monotonic()
    t_end = t_start + args.minutes * 60
    pool = Pool(args)
    k = 0
    stop = []
    # SIGTERM / SIGINT end the run after the batch in flight, with the summary.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))

    def dump():
        if args.json:
            with open(args.json, "w") as f:
                summary = {"seed": args.seed, "cases": k, "versions": versions, "counts": counts, "notable": notable}
                json.dump(summary, f, indent=1)

    try:
        while not stop and time.monotonic() < t_end and (not args.max_cases or k < args.max_cases):
            n = max(1, args.batch) if not args.max_cases else max(1, min(args.batch, args.max_cases - k))
            batch = [(cats[(k + j) % len(cats)], args.seed * 1_000_000 + k + j) for j in range(n)]
            k += n
            pool.timeout = args.case_timeout + 30 * n
            got = pool.judge([f"{c}:{s}" for c, s in batch])
            for (category, seed), r in zip(batch, got):
                kind = r["kind"]
                counts[category]["cases"] += 1
                counts[category][kind] += 1
                if r.get("off_meaning"):
                    counts[category]["off_meaning"] += 1
                if kind not in ("same", "both_reject") or r.get("off_meaning"):
                    notable.append({**r, "category": category, "seed": seed})
                if kind not in ("same", "both_reject"):
                    repro = f" -> {r['repro']}" if r.get("repro") else ""
                    first = (r.get("detail") or "").splitlines()[0][:300] if r.get("detail") else ""
                    print(f"[{k}] {category}:{seed}: {kind}{repro}  {first}", flush=True)
            if k % 200 < n:
                print(f"... {k} cases, {time.monotonic() - t_start:.0f} s", flush=True)
                dump()
    finally:
        pool.close()
    print()
    print(_table(counts, cats))
    bad = [n for n in notable if n["kind"] in FAILING]
    print(f"\n{k} cases, {len(bad)} failing (mismatch / timeout / generator error)")
    for n in bad:
        print(f"  {n['category']}:{n['seed']} {n['kind']}: {n.get('repro') or ''}")
    wrong = [n for n in notable if n["kind"] == "stock_wrong"]
    if wrong:
        print(f"stock shown wrong (ours is the kernel's meaning) in {len(wrong)} case(s):")
        for n in wrong:
            print(f"  {n['category']}:{n['seed']}: {(n.get('detail') or '')[:200]}")
    dump()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
