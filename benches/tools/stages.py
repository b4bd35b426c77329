"""Where a cold first call goes, per bench family: jit trace, lowering
(our interpreter plus jax's MLIR emission), XLA compile and first run, and
what the optimized program is made of.

    python benches/tools/stages.py [FAMILY ...] [--reps N] [--stock] [--fusions]

FAMILY is a family of the bench's "cold first call" row (default: all of
them: ping-pong, right-permute, all-gather, reduce-scatter, dma-pipeline,
blockspec-add, matmul, semaphores). Every rep builds a variant of the
family's kernel with shapes of its own (the cold row's variants) and jax's
persistent compilation cache is off, so nothing compiled before helps; each
stage is the median over the reps. After the times come the counts of the
last variant's optimized HLO: fusions (each one is LLVM-compiled machine
code, the dominant compile cost), our custom calls by target, and while
loops. `--stock` measures stock interpret mode beside ours; `--fusions`
lists every fusion with the ops inside it and the jax ops it came from.
"""

from __future__ import annotations

import argparse
import itertools
import time

from _common import fusions, median_ms, program_counts, use_cpu_devices


def measure(program, args) -> tuple[dict, str]:
    """Stage times (s) of one never-seen program, and its optimized HLO."""
    import jax

    t0 = time.perf_counter()
    traced = program.trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
    return {
        "total": t4 - t0,
        "trace": t1 - t0,
        "lower": t2 - t1,
        "compile": t3 - t2,
        "run": t4 - t3,
    }, compiled.as_text()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*")
    parser.add_argument("--reps", type=int, default=4, help="fresh variants per family and side")
    parser.add_argument("--stock", action="store_true", help="stock interpret mode too")
    parser.add_argument("--fusions", action="store_true", help="list the fusions")
    opts = parser.parse_args(argv)
    use_cpu_devices(8)
    import jax
    from mosaic_rt.bench import cold
    from mosaic_rt.bench import measure as bench_measure

    cold.disable_persistent_cache()
    bench_measure.warm_up()
    stock, ours = bench_measure.interpret_params(False)
    sides = [("stock", stock), ("ours", ours)] if opts.stock else [("ours", ours)]
    variants = cold._family_variants()
    unknown = set(opts.families) - set(variants)
    if unknown:
        parser.error(f"unknown families {sorted(unknown)}; families: {', '.join(variants)}")
    print(f"jax {jax.__version__}; median of {opts.reps} fresh variants, ms")
    for family in opts.families or list(variants):
        salt = itertools.count()  # the cold row's own variants, in its order
        for side, params in sides:
            times, hlo = [], ""
            for _ in range(opts.reps):
                program, args, _ = variants[family](next(salt))
                stage_times, hlo = measure(program(params), args)
                times.append(stage_times)
            med = {k: median_ms([t[k] for t in times]) for k in times[0]}
            counts = program_counts(hlo)
            calls = ", ".join(f"{k} {v}" for k, v in sorted(counts["custom_calls"].items()))
            print(
                f"{family:15s} {side:5s} total {med['total']:6.1f} = trace {med['trace']:5.1f}"
                f" + lower {med['lower']:5.1f} + compile {med['compile']:6.1f} + run {med['run']:5.1f}"
                f" | fusions {counts['fusions']}, whiles {counts['whiles']},"
                f" custom calls {sum(counts['custom_calls'].values())} ({calls or 'none'})",
                flush=True,
            )
            if opts.fusions:
                for name, ops, origin in fusions(hlo):
                    print(f"    fusion {name}: {ops} <- {origin}")


if __name__ == "__main__":
    main()
