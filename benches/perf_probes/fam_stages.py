"""Cold stages per bench family: trace / lower / compile / first run.

    python benches/perf_probes/fam_stages.py FAMILY[,FAMILY...]

Per family (names of `mosaic_rt.bench.cold`'s variants, e.g. ping-pong,
matmul), four fresh variants are traced, lowered, compiled and run once
with the compilation cache off; the row is the variant of median total
time. Compare two builds by running it alternately with each venv.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

import jax  # noqa: E402

from mosaic_rt.bench import cold, measure  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)


def main(families: str) -> None:
    measure.warm_up()
    _, ours = measure.interpret_params(False)
    variants = cold._family_variants()
    for family in families.split(","):
        rows = []
        for k in range(3, 7):  # distinct variants: nothing is cached between them
            program, args, _ = variants[family](k)
            fn = program(ours)
            t0 = time.perf_counter()
            traced = fn.trace(*args)
            t1 = time.perf_counter()
            lowered = traced.lower()
            t2 = time.perf_counter()
            compiled = lowered.compile()
            t3 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            t4 = time.perf_counter()
            rows.append((t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3))
        rows.sort()
        total, trace, lower, comp, run = (x * 1e3 for x in rows[len(rows) // 2])
        print(f"{family:15s} total {total:5.1f}: trace {trace:5.1f} lower {lower:5.1f} "
              f"compile {comp:5.1f} run {run:5.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
