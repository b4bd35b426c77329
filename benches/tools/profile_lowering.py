"""A cProfile of lowering one bench family's kernel under mosaic_rt: where
the Python of a cold call goes (jax's tracing, our interpreter, jax's MLIR
emission of what it traced), before XLA compiles anything.

    python benches/tools/profile_lowering.py FAMILY [--reps N] [--sort KEY] [--top N] [--all]

Profiles `jit(program).trace(*args).lower()` of N variants of the family's
kernel with shapes of their own (the cold row's variants; persistent cache
off), then prints the top functions by KEY (a `pstats` sort key; default
cumtime, also tottime, ncalls). Without `--all` only functions of mosaic_rt are listed (the
percentages stay relative to the whole profile). Our share of a kernel's
lowering is also a bench row: `python -m mosaic_rt bench --filter lowering`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from _common import median_ms, use_cpu_devices


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family")
    parser.add_argument("--reps", type=int, default=5, help="variants lowered")
    parser.add_argument("--sort", default="cumtime", help="pstats sort key")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--all", action="store_true", help="list jax's functions too")
    opts = parser.parse_args(argv)
    use_cpu_devices(8)
    from mosaic_rt.bench import cold, measure

    cold.disable_persistent_cache()
    measure.warm_up()
    _, ours = measure.interpret_params(False)
    variants = cold._family_variants()
    if opts.family not in variants:
        parser.error(f"unknown family {opts.family!r}; families: {', '.join(variants)}")
    profile = cProfile.Profile()
    walls = []
    for k in range(opts.reps):
        program, args, _ = variants[opts.family](k)
        fn = program(ours)
        start = time.perf_counter()
        profile.enable()
        fn.trace(*args).lower()
        profile.disable()
        walls.append(time.perf_counter() - start)
    print(
        f"{opts.family}: trace + lower median {median_ms(walls):.1f} ms over {opts.reps} variants (under the profiler)"
    )
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out).sort_stats(opts.sort)
    if opts.all:
        stats.print_stats(opts.top)
    else:
        stats.print_stats("mosaic_rt", opts.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
