"""Prototype lowering fixes by monkeypatching (scratch only):
  L1 `_i32` / `_opt_i32` keep Python / numpy ints as numpy int32 constants (no convert_element_type binds)
  L2 `TracedRegion.start_vector` builds a numpy constant when every start is static
  L3 `wrap_negative` with lax primitives (no jnp/pjit wrappers)
  F1 randomized grid coordinates computed at trace time (constants)
Measures interpreter Python, MLIR emission, XLA compile and kernels for base vs patched, interleaved."""
import os, sys, statistics, itertools
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax, jax.numpy as jnp, numpy as np
from jax import lax
jax.config.update("jax_enable_compilation_cache", False)
import mosaic_rt
from mosaic_rt import jax_internals as jx
from mosaic_rt.ffi import ops as fops
from mosaic_rt.interpret import native_calls as iops, device_ids, jaxpr_eval
from mosaic_rt.bench import lowering, local, collectives, measure, cold

orig = dict(i32=fops._i32, opt=fops._opt_i32, sv=fops.TracedRegion.start_vector, wrap=device_ids.wrap_negative,
            coords=jx.randomized_grid_coordinates)
def _static(x): return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
def i32(x): return np.int32(x) if _static(x) else orig["i32"](x)
def opt_i32(x): return np.int32(-1) if x is None else i32(x)
def sv(self):
    st = self.starts
    if isinstance(st, (tuple, list)) and all(_static(s) for s in st):
        return np.asarray(st, np.int32)
    return orig["sv"](self)
def wrap_lax(device, core, *, num_devices, num_cores):
    if _static(device) and _static(core) and device >= 0 and core >= 0:
        return device, core
    device = lax.convert_element_type(device, jnp.int32); core = lax.convert_element_type(core, jnp.int32)
    g = device * num_cores + core; w = g + num_devices * num_cores
    neg = lax.bitwise_and(lax.lt(g, np.int32(0)), lax.ge(w, np.int32(0)))
    return lax.select(neg, lax.div(w, np.int32(num_cores)), device), lax.select(neg, lax.rem(w, np.int32(num_cores)), core)
def wrap(device, core, *, num_devices, num_cores):
    if "N" in WHICH:   # the native side wraps negative ids (prototype: emit nothing)
        return device, core
    return wrap_lax(device, core, num_devices=num_devices, num_cores=num_cores)
def coords(grid, mosaic_params, random_seed):
    with jax.ensure_compile_time_eval():
        out = orig["coords"](tuple(int(g) for g in grid), mosaic_params, random_seed)
    return tuple(jnp.asarray(np.asarray(c)) for c in out)

def patch(on, which):
    fops._i32 = i32 if on and "L1" in which else orig["i32"]; iops._i32 = fops._i32
    fops._opt_i32 = opt_i32 if on and "L1" in which else orig["opt"]
    fops.TracedRegion.start_vector = sv if on and "L2" in which else orig["sv"]
    device_ids.wrap_negative = wrap if on and "L3" in which else orig["wrap"]
    jx.randomized_grid_coordinates = coords if on and "F1" in which else orig["coords"]

def kernels():
    return {
        "blockspec-add grid=8": lambda k: local.blockspec_add(8, 24 + 8 * k),
        "dma-pipeline chunks=8": lambda k: local.dma_pipeline(8, 24 + 8 * k),
        "matmul grid=2^3": lambda k: local.blocked_matmul(2, 136 + 8 * k),
        "reduce-scatter 8dev": lambda k: collectives.reduce_scatter(8, cold._COLLECTIVE_ROWS[k % 14]),
        "all-gather 8dev": lambda k: collectives.all_gather(8, cold._COLLECTIVE_ROWS[k % 14]),
    }
which = sys.argv[1] if len(sys.argv) > 1 else "L1L2L3F1"
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""
WHICH = which
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
measure.warm_up()
_, ours = measure.interpret_params(False)
patch(True, which); fn, a = local.blocked_matmul(2, 128); jax.block_until_ready(fn(ours)(*a)); patch(False, which)  # warm eager paths
counter = itertools.count()
with lowering._SeamTimer() as timer:
    for name, mk in [(n, m) for n, m in kernels().items() if ONLY in n]:
        res = {"base": [], "patched": []}
        for rep in range(reps):
            for v in (("base", "patched") if rep % 2 == 0 else ("patched", "base")):
                patch(v == "patched", which)
                fn, args = mk(next(counter))
                res[v].append(lowering._stages(fn(ours), args, timer))
        patch(False, which)
        line = []
        for v, xs in res.items():
            m = {k: statistics.median(x[k] for x in xs) for k in xs[0]}
            line.append(f"{v}: interp {m['interp_s']*1e3:5.1f} mlir {m['mlir_s']*1e3:5.1f} compile {m['compile_s']*1e3:6.1f} kernels {int(m['kernels']):3d}")
        print(f"{name:22s} [{which}] " + " | ".join(line), flush=True)
