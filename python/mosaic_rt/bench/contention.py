"""`--contention N`: the bench on busy CPUs.

Shared CI runners and `pytest -n` run other CPU-bound work beside a test.
With `--contention N` the whole selected bench runs with N CPU-bound
processes alive (so every target is judged on busy CPUs), and afterwards
each selected case is timed again in alternating quiet and contended
blocks, ours only, to judge **contended <= 2x quiet** from paired
medians (other load on the machine shifts both modes alike).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import subprocess
import sys
import time

# Busy until the parent is gone: a burner never outlives a harness that
# was killed (the hang watchdog ends the process with os._exit).
_BURN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(100000): pass\n"

TARGET = 2.0  # contended median <= 2x the quiet median
BLOCKS = 3  # pairs of (quiet, contended) blocks per case


def burner_count(text: str) -> int:
    """argparse type of `--contention`: a process count >= 0."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 64:
        import argparse

        raise argparse.ArgumentTypeError(
            f"--contention takes a number of CPU-bound processes from 0 to 64, got {text!r}"
        )
    return n


@contextlib.contextmanager
def burners(n: int):
    """`n` CPU-bound processes (their `Popen`s), alive inside the block."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _BURN, str(os.getpid())], stdin=subprocess.DEVNULL) for _ in range(n)
    ]
    try:
        if procs:
            time.sleep(0.2)  # interpreters started and spinning
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@dataclasses.dataclass
class Contended:
    name: str
    processes: int
    quiet_s: list[float]  # one median per quiet block
    contended_s: list[float]  # one median per contended block
    error: str | None = None

    @property
    def quiet(self) -> float | None:
        return statistics.median(self.quiet_s) if self.quiet_s else None

    @property
    def contended(self) -> float | None:
        return statistics.median(self.contended_s) if self.contended_s else None

    @property
    def ratio(self) -> float | None:
        q, c = self.quiet, self.contended
        return c / q if q and c else None


def _block(fn, args, seconds: float, max_reps: int) -> float:
    import jax

    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < seconds and len(times) < max_reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def time_case(case, budget, processes: int, blocks: int = BLOCKS) -> Contended:
    """Ours on `case`: `blocks` quiet and contended blocks, alternating
    which comes first, each a median over `budget.seconds_per_side`."""
    from mosaic_rt.bench import measure

    out = Contended(case.name, processes, [], [])
    try:
        program, args = case.build()
        fn = program(measure.interpret_params(case.detect_races)[1])
        _block(fn, args, 0.0, 3)  # compile and warm up
        for k in range(blocks):
            for busy in (False, True) if k % 2 == 0 else (True, False):
                with burners(processes if busy else 0):
                    t = _block(fn, args, budget.seconds_per_side, budget.max_reps_ours)
                (out.contended_s if busy else out.quiet_s).append(t)
    except Exception as e:  # noqa: BLE001 - one failing case must not stop the others
        out.error = f"{type(e).__name__}: {e}"[:400]
    return out


def verdicts(found: list[Contended]) -> list:
    from mosaic_rt.bench.fmt import fmt_time
    from mosaic_rt.bench.targets import Verdict

    return [
        Verdict(
            f"{c.name} contended/quiet",
            TARGET,
            c.ratio,
            f"ours, median of {len(c.contended_s)} blocks with {c.processes} CPU-bound "
            f"process(es) / median of {len(c.quiet_s)} quiet blocks, alternating "
            f"({fmt_time(c.contended)} / {fmt_time(c.quiet)})" + (f"; {c.error}" if c.error else ""),
            c.error is None and c.ratio is not None and c.ratio <= TARGET,
            kind="max",
        )
        for c in found
    ]


def summary(c: Contended) -> str:
    from mosaic_rt.bench.console import escape
    from mosaic_rt.bench.fmt import fmt_ratio, fmt_time

    if c.error:
        return f"[bold red]ERROR[/] {escape(c.name)} (contended): {escape(c.error)}"
    return (
        f"{escape(c.name)}: ours quiet {fmt_time(c.quiet)}, with {c.processes} CPU-bound "
        f"process(es) {fmt_time(c.contended)}, {fmt_ratio(c.ratio)}"
    )


def to_json(found: list[Contended]) -> dict:
    return {
        "processes": found[0].processes if found else 0,
        "target": TARGET,
        "cases": [
            {
                "name": c.name,
                "quiet_s": c.quiet,
                "contended_s": c.contended,
                "ratio": c.ratio,
                "quiet_blocks_s": c.quiet_s,
                "contended_blocks_s": c.contended_s,
                "error": c.error,
            }
            for c in found
        ],
    }
