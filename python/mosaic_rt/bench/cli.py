"""`python -m mosaic_rt bench` / `mosaic-rt-bench`: options, device set-up, the run."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import threading

# Set in the environment of a re-executed child so it never re-executes again.
_CHILD_FLAG = "MOSAIC_RT_BENCH_CHILD"
PLOT_INSTALL = "pip install 'mosaic_rt[plot]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mosaic_rt.bench.rows import ROWS

    parser.add_argument("--quick", action="store_true", help="fewer, smaller cases and short budgets (about 2 minutes)")
    parser.add_argument(
        "--filter",
        metavar="REGEX",
        action="append",
        default=[],
        help=f"run only cases and rows ({', '.join(r.name for r in ROWS)}) whose name matches "
        "REGEX, case-insensitive search: a plain substring works "
        "(repeatable, any match)",
    )
    parser.add_argument("--json", metavar="PATH", help="write machine-readable results here")
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help=f"write a PNG bar chart of the ratios (needs matplotlib: {PLOT_INSTALL})",
    )
    parser.add_argument(
        "--markdown", metavar="PATH", help="write the result tables as Markdown (as in benches/RESULTS.md)"
    )
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--strict", action="store_true", help="also exit non-zero when a speed target is missed")
    parser.add_argument(
        "--contention",
        metavar="N",
        type=_burner_count,
        default=0,
        help="run with N CPU-bound processes alive (targets judged on busy "
        "CPUs), then time each case's ours in alternating quiet and "
        "contended blocks: target contended <= 2x quiet",
    )


def _burner_count(text: str) -> int:
    from mosaic_rt.bench.contention import burner_count

    return burner_count(text)


def _select(quick: bool, filters: list[str]):
    from mosaic_rt.bench.suite import suite

    cases = suite(quick)
    if filters:
        patterns = [re.compile(f, re.IGNORECASE) for f in filters]
        cases = [c for c in cases if any(p.search(c.name) for p in patterns)]
    return cases


def _select_rows(filters: list[str]):
    from mosaic_rt.bench import rows

    return rows.select(filters)


def _ensure_devices(needed: int, argv: list[str]) -> int | None:
    """Makes jax see >= `needed` CPU devices.

    Returns None when this process can run the cases, or the exit code of a
    child process that ran them (when jax was already initialised with fewer
    devices, the only way is a fresh interpreter).
    """
    import jax

    from mosaic_rt import jax_internals

    if not jax_internals.backends_are_initialized():
        if jax.config.jax_num_cpu_devices < needed:
            jax.config.update("jax_num_cpu_devices", needed)
        if jax.device_count() >= needed:
            return None
    elif jax.device_count() >= needed:
        return None
    if os.environ.get(_CHILD_FLAG):
        raise RuntimeError(f"need {needed} CPU devices but jax has {jax.device_count()}")
    env = dict(os.environ, JAX_NUM_CPU_DEVICES=str(needed), **{_CHILD_FLAG: "1"})
    return subprocess.run([sys.executable, "-m", "mosaic_rt", "bench", *argv], env=env).returncode


@contextlib.contextmanager
def _watchdog(name: str, seconds: float):
    """Ends the process if one case runs longer than `seconds`.

    A hung interpreter (stock polls its semaphores forever; an XLA computation
    cannot be cancelled) must not hang the harness: print every thread's stack
    and exit with code 4.
    """

    def expire():
        sys.stderr.write(
            f"\nmosaic_rt bench: case {name!r} still running after {seconds:g} s;"
            " it is hung. Thread stacks follow; exiting with code 4.\n"
        )
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(4)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _one_line(result) -> str:
    """What a finished case printed above the progress bar."""
    from mosaic_rt.bench.console import escape

    if result.error:  # escaped: error text may hold "[...]" that is not a style
        return f"[bold red]ERROR[/] {escape(result.case.name)}: {escape(result.error)}"
    status = "[green]equal[/]" if result.ok else "[bold red]MISMATCH[/]"
    return (
        f"{escape(result.case.name)}: stock {result.stock.median_s * 1e3:.2f} ms, "
        f"ours {result.ours.median_s * 1e3:.3f} ms, {result.ratio:,.1f}x, {status}"
    )


def _run_row(row, budget, console) -> dict:
    """The row's data, or its error: one failing row must not stop the run."""
    from mosaic_rt.bench.console import escape

    with _watchdog(row.name, budget.row_timeout_s):
        try:
            d = row.run(budget)
            console.print(row.summary(d))
        except Exception as e:  # noqa: BLE001
            d = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
            console.print(f"[bold red]ERROR[/] {escape(row.name)}: {escape(d['error'])}")
    return d


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from mosaic_rt.bench.console import escape, make_console, make_progress

    console = make_console()
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            console.print(f"[bold red]--plot needs matplotlib:[/] {escape(PLOT_INSTALL)}")
            return 2
    try:
        cases = _select(args.quick, args.filter)
        extra = _select_rows(args.filter)
    except re.error as e:
        console.print(f"[bold red]bad --filter pattern:[/] {escape(str(e))}")
        return 2
    if not cases and not extra:
        shown = escape(" ".join(repr(f) for f in args.filter))
        console.print(f"[bold red]no case matches --filter {shown}[/]; use --list to see the names")
        return 2
    if args.list:
        for c in cases:
            console.print(escape(f"{c.name}  ({c.family}, {c.devices} device(s))"))
        for r in extra:
            console.print(escape(f"{r.name}  (row, {r.devices} device(s))"))
        return 0
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID` prints every thread's stack
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    child_code = _ensure_devices(max(x.devices for x in [*cases, *extra]), argv)
    if child_code is not None:
        return child_code

    from mosaic_rt.bench import cold, contention, measure, report
    from mosaic_rt.bench import rows as rows_mod

    # First calls must compile: no executable may come from an on-disk cache.
    cold.disable_persistent_cache()
    budget = measure.QUICK if args.quick else measure.FULL
    results, rows, contended = [], {}, []
    with contention.burners(args.contention), make_progress(console) as progress:
        task = progress.add_task("warming up", total=len(cases) + len(extra))
        measure.warm_up()
        for case in cases:
            progress.update(task, description=escape(case.name))
            with _watchdog(case.name, budget.case_timeout_s):
                result = measure.run_case(case, budget)
            results.append(result)
            progress.console.print(_one_line(result))
            progress.advance(task)
        for row in extra:
            progress.update(task, description=escape(row.name))
            rows[row.key] = _run_row(row, budget, progress.console)
            progress.advance(task)
        progress.update(task, description="done")
    if args.contention:
        with make_progress(console) as progress:
            task = progress.add_task("quiet vs contended", total=len(cases))
            for case in cases:
                progress.update(task, description=escape(f"{case.name} quiet vs contended"))
                with _watchdog(case.name, budget.case_timeout_s):
                    contended.append(contention.time_case(case, budget, args.contention))
                progress.console.print(contention.summary(contended[-1]))
                progress.advance(task)

    good_rows = {k: v for k, v in rows.items() if "error" not in v}
    found = (
        report.verdicts(results)
        + rows_mod.verdicts(good_rows)
        + report.native_verdicts(results)
        + contention.verdicts(contended)
    )
    report.render(console, results, found, good_rows)
    bad = [r for r in results if not r.ok]
    for r in bad:
        why = r.error or (
            "outputs differ between stock and mosaic_rt"
            if not r.equal
            else "both outputs differ from the numpy reference"
            if not r.correct
            else "XLA native output differs from the reference"
        )
        console.print(f"[bold red]FAILED[/] {escape(r.case.name)}: {escape(why)}")
    bad_rows = [k for k, v in rows.items() if not v.get("ok", True)]
    for k in bad_rows:
        why = rows[k].get("error") or "an output differs (see its table)"
        console.print(f"[bold red]FAILED[/] row {escape(k)}: {escape(why)}")
    settings = {
        "quick": args.quick,
        "filter": args.filter,
        "argv": argv,
        "budget": dataclasses.asdict(budget),
        "contention": args.contention,
    }
    data = report.to_json(results, found, settings, rows)
    if contended:
        data["contention"] = contention.to_json(contended)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
        console.print(escape(f"results written to {args.json}"))
    if args.markdown:
        from mosaic_rt.bench import markdown

        with open(args.markdown, "w") as f:
            f.write(markdown.render(data))
        console.print(escape(f"markdown written to {args.markdown}"))
    if args.plot:
        report.plot(results, args.plot)
        console.print(escape(f"plot written to {args.plot}"))
    if bad or bad_rows:
        return 1
    if args.strict and not all(v.passed for v in found):
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `mosaic-rt-bench` console script."""
    parser = argparse.ArgumentParser(
        prog="mosaic-rt-bench", description="Time real Pallas TPU kernels under stock interpret mode and mosaic_rt."
    )
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    return run(parser.parse_args(argv), argv)
