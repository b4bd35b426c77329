"""What one more op costs a cold call: lowering and XLA compile of a
shard_map (argv[1] == "sm") or plain jit body with N custom calls sharing
an operand, N custom calls each with a constant operand, or N scalar
multiply-adds. Usage: python per_op_compile_cost.py sm|nosm"""
import os, sys, time
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
jax.config.update("jax_enable_compilation_cache", False)
import mosaic_rt
mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
I32 = jax.ShapeDtypeStruct((), jnp.int32)
def mk(N, mode, k, sm=True):
    def body(x):
        t = jnp.int32(k) + x[0, 0].astype(jnp.int32)
        z = jnp.int32(7) * t
        for i in range(N):
            if mode == "shared":
                t = jax.ffi.ffi_call("mosaic_rt_wrap_target", (I32, I32), has_side_effect=True)(t, z, num_cores=1, num_devices=2)[0]
            elif mode == "const":
                t = jax.ffi.ffi_call("mosaic_rt_wrap_target", (I32, I32), has_side_effect=True)(t, 7, num_cores=1, num_devices=2)[0]
            elif mode == "math":
                t = t * 3 + z
        return x + t.astype(jnp.float32)
    if sm:
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    return jax.jit(body)
x = jnp.ones((16, 128), jnp.float32)
mk(1, "math", 0).lower(x).compile()
sm = sys.argv[1] == "sm"
for mode in ("shared", "const", "math"):
    for N in (0, 50, 100):
        ts = []; lts=[]
        for r in range(3):
            f = mk(N, mode, 1000 * N + r + 1 + hash(mode) % 1000, sm)
            t = time.perf_counter(); lo = f.lower(x); t1 = time.perf_counter(); lo.compile(); t2 = time.perf_counter()
            ts.append(t2 - t1); lts.append(t1 - t)
        print(f"{mode:7s} N={N:3d} lower {min(lts)*1e3:5.1f} compile {min(ts)*1e3:5.1f} ms", flush=True)
