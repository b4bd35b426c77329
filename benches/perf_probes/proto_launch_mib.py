"""Per-MiB launch cost split: a kernel that only copies its input into native HBM and its
output back out (no DMAs, no compute) vs the full DMA pipeline, vs numpy copies.
Everything interleaved; slopes over 0.25..8 MiB."""
import time, statistics, numpy as np, jax, jax.numpy as jnp
import mosaic_rt
from mosaic_rt import ffi
from mosaic_rt.bench import local
def io_only():
    def f(x):
        with ffi.kernel(ffi.new_token(), jnp.int32(0), uid=1, num_devices=1) as k:
            k.token, src = ffi.allocate_buffer(k.token, k.handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape, init=x)
            k.token, dst = ffi.allocate_buffer(k.token, k.handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape)
            k.token, out = ffi.load(k.token, k.handle, 0, 0, dst, None, space="hbm", shape=x.shape, dtype=x.dtype)
        return out, k.token
    return jax.jit(f)
def out_alloc_only():
    def f(x):
        with ffi.kernel(ffi.new_token(), jnp.int32(0), uid=1, num_devices=1) as k:
            k.token, dst = ffi.allocate_buffer(k.token, k.handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape)
        return k.token
    return jax.jit(f)
def init_then_load():
    def f(x):
        with ffi.kernel(ffi.new_token(), jnp.int32(0), uid=1, num_devices=1) as k:
            k.token, src = ffi.allocate_buffer(k.token, k.handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape, init=x)
            k.token, out = ffi.load(k.token, k.handle, 0, 0, src, None, space="hbm", shape=x.shape, dtype=x.dtype)
        return out, k.token
    return jax.jit(f)
def in_only():
    def f(x):
        with ffi.kernel(ffi.new_token(), jnp.int32(0), uid=1, num_devices=1) as k:
            k.token, src = ffi.allocate_buffer(k.token, k.handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape, init=x)
        return k.token
    return jax.jit(f)
p = mosaic_rt.InterpretParams()
rows = {}
for mib in (0.25, 0.5, 1, 2, 4, 8):
    chunks = int(mib * 2**20 / (128 * 128 * 4))
    fn, (x,) = local.dma_pipeline(chunks, 128)
    pipe, io, inn, oa, il = fn(p), io_only(), in_only(), out_alloc_only(), init_then_load()
    src = np.asarray(x)
    for f in (pipe, io, inn, oa, il): jax.block_until_ready(f(x))
    t = {"pipeline": [], "alloc+load (io only)": [], "alloc with init (input only)": [], "numpy copy": [], "uninit alloc": [], "init+load": []}
    for _ in range(15):
        for name, f in (("pipeline", lambda: jax.block_until_ready(pipe(x))), ("alloc+load (io only)", lambda: jax.block_until_ready(io(x))),
                        ("alloc with init (input only)", lambda: jax.block_until_ready(inn(x))), ("numpy copy", src.copy),
                        ("uninit alloc", lambda: jax.block_until_ready(oa(x))), ("init+load", lambda: jax.block_until_ready(il(x)))):
            s = time.perf_counter(); f(); t[name].append(time.perf_counter() - s)
    rows[mib] = {k: statistics.median(v) * 1e3 for k, v in t.items()}
    print(f"{mib:5} MiB " + "  ".join(f"{k} {v:.3f} ms" for k, v in rows[mib].items()), flush=True)
mibs = list(rows)
for k in rows[mibs[0]]:
    print(f"slope {k}: {np.polyfit(mibs, [rows[m][k] for m in mibs], 1)[0]:.3f} ms/MiB")
