"""Ring/permute steady state vs XLA's collectives, for A/B runs of two builds.

One process measures one build: `python collectives_ab.py [VARIANTS] [CALLS]`
(VARIANTS: comma-separated `base`, `nodl` = detect_deadlocks off, `eager` =
dma_execution_mode="eager", combinable as `eager+nodl`). Ours and native
alternate call by call; each line is the median (and min) per variant and
its ratio to native in this process. For an A/B of two builds run this
alternately with PYTHONPATH pointing at each build's `python/` (a copy of
the package with the other build's `_native.abi3.so`), several processes
each, and compare the per-process ratios.
"""
import dataclasses
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax  # noqa: E402

from mosaic_rt.bench import collectives, measure  # noqa: E402

_, ours = measure.interpret_params(False)
variants = sys.argv[1].split(",") if len(sys.argv) > 1 else ["base"]
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
cases = (
    ("right-permute 64KiB", lambda: collectives.right_permute(8, 128), lambda: collectives.native_right_permute(8)),
    ("all-gather 8KiB", lambda: collectives.all_gather(8, 16), lambda: collectives.native_all_gather(8)),
    ("reduce-scatter 8KiB", lambda: collectives.reduce_scatter(8, 16),
     lambda: collectives.native_reduce_scatter(8, 16)),
)


def params(variant):
    p = ours
    if "nodl" in variant:
        p = dataclasses.replace(p, detect_deadlocks=False)
    if "eager" in variant:
        p = dataclasses.replace(p, dma_execution_mode="eager")
    return p


for name, build, native in cases:
    fn, args = build()
    fs = {v: fn(params(v)) for v in variants}
    fs["native"] = native()
    for f in fs.values():
        jax.block_until_ready(f(*args))
    t = {k: [] for k in fs}
    for i in range(calls):
        for k, f in (fs.items() if i % 2 else reversed(list(fs.items()))):
            s = time.perf_counter()
            jax.block_until_ready(f(*args))
            t[k].append(time.perf_counter() - s)
    med = {k: statistics.median(v) for k, v in t.items()}
    print(name, "  ".join(f"{k} {v * 1e6:.0f} us ({v / med['native']:.2f}x, min {min(t[k]) * 1e6:.0f})"
                          for k, v in med.items()), flush=True)
