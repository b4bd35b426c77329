"""Per zoo kernel (ours only): fusions of the optimized HLO, native fills
(stores of a broadcast scalar, `interpret/splat.py`), lower / compile / run
/ first-call seconds, one JSON line each.

    python splat_stores_ab.py SALT [REGEX] [off]

`off` disables the fills in this very build (A/B without a second build):
run `off` and on processes interleaved, same salt for both sides."""
import os, sys, time, re, json
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax
jax.config.update("jax_enable_compilation_cache", False)
from mosaic_rt.bench import zoo, measure
if len(sys.argv) > 3 and sys.argv[3] == "off":  # the same build with the fills disabled
    from mosaic_rt.interpret import splat
    splat.BlockStores.fill_value = lambda self, var, dtype: None
measure.warm_up()
salt = int(sys.argv[1]); pat = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
for k in zoo.kernels(salt):
    if not pat.search(k.name): continue
    program, args, exp = k.build()
    stock, ours = k.params()
    f = program(ours)
    t0 = time.perf_counter(); lo = f.lower(*args); t1 = time.perf_counter()
    co = lo.compile(); t2 = time.perf_counter()
    jax.block_until_ready(co(*args)); t3 = time.perf_counter()
    hlo = co.as_text()
    print(json.dumps(dict(name=k.name, fusions=len(re.findall(r"= \S+ fusion\(", hlo)),
                          fills=len(re.findall(r"splat\s*=\s*1", lo.as_text())),
                          lower=t1 - t0, compile=t2 - t1, run=t3 - t2, total=t3 - t0)), flush=True)
