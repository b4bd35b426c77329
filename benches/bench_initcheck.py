"""Cost of initcheck (``detect_uninitialized``) and of tracing on real kernels.

Times the same kernels -- a BlockSpec elementwise add and a double-buffered
DMA pipeline, both from :mod:`mosaic_rt.bench.local` -- with detection off,
with initcheck on, and with a timeline recorded (``trace_path``), and prints
steady-state medians and the ratios (target for initcheck: within 2x).
Not a test; run after ``pip install .`` (a release build):

    python benches/bench_initcheck.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import jax
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
from mosaic_rt.bench.local import blockspec_add, dma_pipeline


def median_seconds(call, args, budget: float, min_runs: int = 5) -> tuple[float, int]:
    jax.block_until_ready(call(*args))  # compile + first run
    times = []
    t_end = time.perf_counter() + budget
    while len(times) < min_runs or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        jax.block_until_ready(call(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes, shorter budget")
    args = parser.parse_args()
    budget = 0.5 if args.quick else 2.0
    cases = [
        ("BlockSpec add, grid", blockspec_add, (8, 64) if args.quick else (8, 64, 256)),
        ("DMA pipeline, chunks", dma_pipeline, (8, 64) if args.quick else (8, 64, 256)),
    ]
    tmp = tempfile.mkdtemp(prefix="mosaic_rt_bench_")
    modes = [
        ("off", {}),
        ("initcheck", {"detect_uninitialized": True}),
        ("trace", {"trace_path": os.path.join(tmp, "trace.json")}),
    ]
    print(
        f"jax {jax.__version__}, mosaic_rt {mosaic_rt.__version__}, {os.cpu_count()} CPUs; steady-state median per call"
    )
    print(f"| {'kernel':<26} | {'off':>10} | {'initcheck':>10} | {'ratio':>6} | {'trace':>10} | {'ratio':>6} |")
    print(f"|{'-' * 28}|{'-' * 12}|{'-' * 12}|{'-' * 8}|{'-' * 12}|{'-' * 8}|")
    for label, make, sizes in cases:
        for n in sizes:
            got = {}
            outs = {}
            for name, extra in modes:
                fn, inputs = make(n)
                call = fn(mosaic_rt.InterpretParams(**extra))
                # A traced launch writes a file per call: fewer of them.
                with F.native_errors():
                    got[name], _ = median_seconds(call, inputs, budget / 4 if name == "trace" else budget)
                    outs[name] = np.asarray(call(*inputs))
            for name in outs:
                np.testing.assert_array_equal(outs[name], outs["off"])
            us = {k: v * 1e6 for k, v in got.items()}
            print(
                f"| {label + ' ' + str(n):<26} | {us['off']:>8.0f}us | {us['initcheck']:>8.0f}us | "
                f"{us['initcheck'] / us['off']:>5.2f}x | {us['trace']:>8.0f}us | "
                f"{us['trace'] / us['off']:>5.2f}x |"
            )
    written = [p for p in mosaic_rt.timeline.trace_files() if p.startswith(tmp)]
    for p in written:
        os.remove(p)
    os.rmdir(tmp)
    print(f"(trace: {len(written)} launches traced, each writing its file)")
    return 0


if __name__ == "__main__":
    import mosaic_rt.timeline

    raise SystemExit(main())
