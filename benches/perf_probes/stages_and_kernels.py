import os, sys, time, glob, re, json
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax, jax.numpy as jnp
jax.config.update("jax_enable_compilation_cache", False)
from jax.experimental.pallas import tpu as pltpu
import mosaic_rt
from mosaic_rt.bench import suite, measure

def count_kernels(hlo):
    # instructions in the optimized module that XLA CPU turns into compiled kernels
    fus = len(re.findall(r"= \S+ fusion\(", hlo))
    cc = len(re.findall(r"custom-call\(", hlo))
    whiles = len(re.findall(r" while\(", hlo))
    conds = len(re.findall(r" conditional\(", hlo))
    lines = len(hlo.splitlines())
    return dict(fusions=fus, custom_calls=cc, whiles=whiles, conds=conds, lines=lines)

def stages(f, args):
    t0 = time.perf_counter(); tr = f.trace(*args); t1 = time.perf_counter()
    lo = tr.lower(); t2 = time.perf_counter()
    co = lo.compile(); t3 = time.perf_counter()
    jax.block_until_ready(co(*args)); t4 = time.perf_counter()
    d = dict(trace=t1-t0, lower=t2-t1, compile=t3-t2, run=t4-t3)
    d.update(count_kernels(co.as_text()))
    return d

measure.warm_up()
pat = re.compile(sys.argv[1] if len(sys.argv) > 1 else ".")
for case in suite.suite(True):
    if not pat.search(case.name): continue
    program, args = case.build()
    sp, op = measure.interpret_params(case.detect_races)
    for side, p in (("stock", sp), ("ours", op)):
        d = stages(program(p), args)
        print(f"{case.name:32s} {side:5s} " + " ".join(f"{k}={v*1e3:.0f}ms" if isinstance(v, float) else f"{k}={v}" for k, v in d.items()), flush=True)
