"""Cold first call of each bench family split into jit trace / lowering /
XLA compile / first run (median of 4 fresh shapes), plus the program's op
counts. Usage: python family_stages.py [family,family,...]"""
import os, re, sys, time, collections
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax
jax.config.update("jax_enable_compilation_cache", False)
from mosaic_rt.bench import cold, measure

measure.warm_up()
_, ours = measure.interpret_params(False)
variants = cold._family_variants()
families = sys.argv[1].split(",") if len(sys.argv) > 1 else list(variants)
for family in families:
    rows = []
    for k in range(3, 7):
        program, args, _ = variants[family](k)
        fn = program(ours)
        t0 = time.perf_counter(); traced = fn.trace(*args)
        t1 = time.perf_counter(); lowered = traced.lower()
        t2 = time.perf_counter(); compiled = lowered.compile()
        t3 = time.perf_counter(); jax.block_until_ready(compiled(*args))
        t4 = time.perf_counter()
        rows.append((t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3))
    rows.sort()
    total, trace, lower, comp, run = (x * 1e3 for x in rows[len(rows) // 2])
    text = lowered.as_text()
    calls = collections.Counter(re.findall(r"custom_call @mosaic_rt_(\w+)", text))
    ops = len(re.findall(r"= stablehlo\.", text))
    print(f"{family:15s} total {total:5.1f} ms: trace {trace:5.1f} lower {lower:5.1f} "
          f"compile {comp:5.1f} run {run:4.1f} | {sum(calls.values())} custom calls, "
          f"{ops} ops in all", flush=True)
