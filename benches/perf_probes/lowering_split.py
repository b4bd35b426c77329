"""Splits jit lowering of one kernel into: jax trace, interpreter Python (the seam call), rest (MLIR emission)."""
import os, sys, time, statistics
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax
jax.config.update("jax_enable_compilation_cache", False)
import mosaic_rt
from mosaic_rt import jax_internals as jx
from mosaic_rt.bench import suite, measure
measure.warm_up()
mod, attr = jx.PALLAS_CALL_SEAM
inner = getattr(mod, attr)
spent = [0.0]
def timed(*a, **k):
    t = time.perf_counter()
    try: return inner(*a, **k)
    finally: spent[0] += time.perf_counter() - t
setattr(mod, attr, timed)
names = sys.argv[1:] or [c.name for c in suite.suite(True) if not c.detect_races]
for name in names:
    case = next(c for c in suite.suite(False) if c.name == name)
    rows = {"stock": [], "ours": []}
    for rep in range(4):
        for side, p in zip(("stock", "ours"), measure.interpret_params(False)):
            program, args = case.build()
            f = program(p)
            spent[0] = 0.0
            t0 = time.perf_counter(); tr = f.trace(*args); t1 = time.perf_counter()
            lo = tr.lower(); t2 = time.perf_counter()
            rows[side].append((t1 - t0, spent[0], t2 - t1 - spent[0]))
    out = []
    for side, r in rows.items():
        med = [statistics.median(x[i] for x in r[1:]) * 1e3 for i in range(3)]
        out.append(f"{side}: trace {med[0]:.1f} interp {med[1]:.1f} mlir {med[2]:.1f}")
    print(f"{name:28s}", " | ".join(out), flush=True)
