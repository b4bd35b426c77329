"""Command line: `python -m mosaic_rt demo [...]`, `python -m mosaic_rt bench [...]` and
`python -m mosaic_rt trace TRACE.json [--png PNG] [--check]`
(`trace --merge OUT T0.json T1.json ...`: one timeline of a launch's processes)."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mosaic_rt")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="ring exchange of remote DMAs between simulated devices")
    demo.add_argument("--devices", type=int, default=8)
    demo.add_argument("--rounds", type=int, default=200)
    demo.add_argument("--elems", type=int, default=16384, help="float32 elements per block")
    bench = sub.add_parser("bench", help="time real kernels: stock interpret mode vs mosaic_rt")
    from mosaic_rt.bench.cli import add_arguments as add_bench_arguments

    add_bench_arguments(bench)
    trace = sub.add_parser("trace", help="summarise, check or draw a kernel's timeline file")
    trace.add_argument(
        "path", nargs="+", help="Chrome trace-event JSON written by a kernel (trace_path=...); with --merge, several"
    )
    trace.add_argument(
        "--merge",
        metavar="OUT",
        help="join the traces of a launch's processes (trace.p0.json trace.p1.json ...) into one timeline OUT",
    )
    trace.add_argument(
        "--png", metavar="PNG", help="draw the timeline into this PNG (needs matplotlib: pip install 'mosaic_rt[plot]')"
    )
    trace.add_argument("--check", action="store_true", help="validate the file's structure; exit 1 on a problem")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.command == "trace":
        return _trace(args)
    if args.command == "bench":
        from mosaic_rt.bench.cli import run as bench_run

        return bench_run(args, argv[argv.index("bench") + 1 :])
    if args.command == "demo":
        if args.devices < 2 or args.rounds < 1 or args.elems < 1:
            parser.error("need --devices >= 2, --rounds >= 1, --elems >= 1")
        from mosaic_rt.demo import main as demo_main

        return demo_main(args.devices, args.rounds, args.elems)
    return 2


def _trace(args) -> int:
    from mosaic_rt import timeline

    if args.png:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("error: --png needs matplotlib: pip install 'mosaic_rt[plot]'", file=sys.stderr)
            return 2
    try:
        loaded = [timeline.load(p) for p in args.path]
    except (OSError, ValueError) as e:
        print(f"error: cannot read {e}", file=sys.stderr)
        return 2
    if args.merge:
        data = timeline.merge(loaded)
        with open(args.merge, "w", encoding="utf-8") as f:
            json.dump(data, f)
        print(f"wrote {args.merge} ({len(loaded)} traces)")
        name = args.merge
    elif len(loaded) > 1:
        print("error: several traces need --merge OUT", file=sys.stderr)
        return 2
    else:
        data, name = loaded[0], args.path[0]
    print(f"{name}: {timeline.summary(data)}")
    status = 0
    if args.check:
        problems = timeline.check(data)
        for p in problems:
            print(f"problem: {p}")
        print("structure: ok" if not problems else f"structure: {len(problems)} problem(s)")
        status = 1 if problems else 0
    if args.png:
        timeline.render_png(data, args.png)
        print(f"wrote {args.png}")
    return status


if __name__ == "__main__":
    sys.exit(main())
