"""Command line: `python -m mosaic_rt demo [...]` and `python -m mosaic_rt bench [...]`."""

from __future__ import annotations

import argparse
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
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.command == "bench":
        from mosaic_rt.bench.cli import run as bench_run
        return bench_run(args, argv[argv.index("bench") + 1:])
    if args.command == "demo":
        if args.devices < 2 or args.rounds < 1 or args.elems < 1:
            parser.error("need --devices >= 2, --rounds >= 1, --elems >= 1")
        from mosaic_rt.demo import main as demo_main
        return demo_main(args.devices, args.rounds, args.elems)
    return 2


if __name__ == "__main__":
    sys.exit(main())
