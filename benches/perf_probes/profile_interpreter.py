import os, sys, cProfile, pstats, time
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax
jax.config.update("jax_enable_compilation_cache", False)
from mosaic_rt import jax_internals as jx
from mosaic_rt.bench import suite, measure
measure.warm_up()
mod, attr = jx.PALLAS_CALL_SEAM
inner = getattr(mod, attr)
pr = cProfile.Profile()
def timed(*a, **k):
    pr.enable()
    try: return inner(*a, **k)
    finally: pr.disable()
setattr(mod, attr, timed)
case = next(c for c in suite.suite(False) if c.name == sys.argv[1])
for k in range(5):
    program, args = case.build()
    program(measure.interpret_params(False)[1]).trace(*args).lower()
st = pstats.Stats(pr); st.sort_stats(sys.argv[2] if len(sys.argv) > 2 else "tottime").print_stats(40)
