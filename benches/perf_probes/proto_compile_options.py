"""Compile options on the real emitted programs: default vs cheap (O0 + no expensive LLVM passes + legacy emitters).
Also checks bit-identity of float results under both."""
import os, sys, statistics, itertools, time
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_compilation_cache", False)
from mosaic_rt.bench import cold, measure, lowering
CHEAP = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True,
         "xla_cpu_use_fusion_emitters": False}
measure.warm_up()
variants = cold._family_variants()
sp, op = measure.interpret_params(False)
counter = itertools.count(50)
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
tot = {}
for fam, mk in variants.items():
    res = {}
    for rep in range(reps):
        for side, p in (("stock", sp), ("ours", op)):
            for oname, o in (("default", None), ("cheap", CHEAP)):
                program, args, expected = mk(next(counter))
                f = program(p)
                t0 = time.perf_counter()
                lo = f.trace(*args).lower()
                t1 = time.perf_counter()
                co = lo.compile(o)
                t2 = time.perf_counter()
                out = np.asarray(jax.block_until_ready(co(*args)))
                t3 = time.perf_counter()
                assert out.tobytes() == np.asarray(expected, out.dtype).reshape(out.shape).tobytes()
                res.setdefault((side, oname), []).append((t1 - t0, t2 - t1, t3 - t2))
    line = []
    for key, xs in res.items():
        lower, comp, run = (statistics.median(x[i] for x in xs) for i in range(3))
        tot.setdefault(key, 0.0); tot[key] += lower + comp + run
        line.append(f"{key[0]}/{key[1]} compile {comp*1e3:6.1f} total {(lower+comp+run)*1e3:6.1f}")
    print(f"{fam:15s} " + " | ".join(line), flush=True)
print({f"{k[0]}/{k[1]}": round(v, 3) for k, v in tot.items()})
print("cold ratio stock-default / ours-default", tot[("stock", "default")] / tot[("ours", "default")])
print("cold ratio stock-default / ours-cheap", tot[("stock", "default")] / tot[("ours", "cheap")])
print("cold ratio stock-cheap / ours-cheap", tot[("stock", "cheap")] / tot[("ours", "cheap")])
