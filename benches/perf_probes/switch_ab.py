"""The cold row's families with one of this round's switches on and off,
interleaved in one process (A/B/A/B over fresh shapes, cache off): `batch`
(ffi.ops.BATCH_RUNS: straight-line runs of native ops as one call) or
`vector` (interpret.vector_runs.ENABLED: elementwise compute natively).
Usage: python switch_ab.py batch|vector [FAMILY,...]"""
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax

jax.config.update("jax_enable_compilation_cache", False)
from mosaic_rt.bench import cold, measure
from mosaic_rt.ffi import ops as ffi_ops
from mosaic_rt.interpret import vector_runs

module, attr = {"batch": (ffi_ops, "BATCH_RUNS"), "vector": (vector_runs, "ENABLED")}[sys.argv[1]]
measure.warm_up()
_, ours = measure.interpret_params(False)
variants = cold._family_variants()
families = sys.argv[2].split(",") if len(sys.argv) > 2 else list(variants)
k = 10
for family in families:
    runs = {True: [], False: []}
    for _ in range(4):
        for flag in (True, False):
            setattr(module, attr, flag)
            program, args, _ = variants[family](k)
            k += 1
            fn = program(ours)
            t0 = time.perf_counter()
            lowered = fn.trace(*args).lower()
            t1 = time.perf_counter()
            compiled = lowered.compile()
            t2 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            t3 = time.perf_counter()
            runs[flag].append((t3 - t0, t1 - t0, t2 - t1))

    def med(flag, i):
        return statistics.median(r[i] for r in runs[flag]) * 1e3

    print(f"{family:15s} on: total {med(True, 0):5.1f} lower {med(True, 1):5.1f} compile "
          f"{med(True, 2):5.1f} | off: total {med(False, 0):5.1f} lower {med(False, 1):5.1f} "
          f"compile {med(False, 2):5.1f} ms", flush=True)
