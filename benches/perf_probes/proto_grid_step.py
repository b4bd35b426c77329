"""Compile-time prototypes of the program emitted for a BlockSpec add (grid=G).

Variants (all compile-only except 'ours'; custom-call targets exist but the
prototypes pass operands the handlers would reject, so they are never run):
  ours      the real interpreter (today)
  A_nocond  per-input copy call takes `changed` as an operand (no lax.cond),
            block indices / grid point as scalar operands (no stacking)
  B_step    one native call per grid step for all block copies + revisit check
            (affine index maps as attributes): body = copy-in call, 2 loads,
            add, swap, copy-out call, it+1
  C_loop    B_step plus the loop counter / condition kept natively (a pred
            result of the last call): only the kernel's own compute is a kernel
  jnp       the same blocked add written in jnp (fori_loop of dynamic slices)
"""
import os, sys, time, statistics, re
import jax, jax.numpy as jnp, numpy as np
from jax import lax
jax.config.update("jax_enable_compilation_cache", False)
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import mosaic_rt
from mosaic_rt.ffi.ops import _call, _I32, _HANDLE

I32 = lambda v: jnp.asarray(v, jnp.int32)

def ours(G, R, L):
    spec = pl.BlockSpec((R, L), lambda i: (i, 0))
    return jax.jit(pl.pallas_call(lambda x, y, o: o.__setitem__(..., x[...] + y[...]),
        out_shape=jax.ShapeDtypeStruct((G * R, L), jnp.float32), grid=(G,),
        in_specs=[spec, spec], out_specs=spec, interpret=mosaic_rt.InterpretParams()))

def _prologue(x, y):
    t = I32(0)
    t, h = _call("kernel_begin", (_HANDLE,), (t, I32(0)), uid=1)
    t, bx = _call("allocate_buffer", (_I32,), (t, h, I32(0), I32(-1), x), space=5)
    t, by = _call("allocate_buffer", (_I32,), (t, h, I32(0), I32(-1), y), space=5)
    t, bo = _call("allocate_buffer", (_I32,), (t, h, I32(0), I32(-1)), space=5)
    t, vx = _call("allocate_buffer", (_I32,), (t, h, I32(0), I32(-1)), space=0)
    t, vy = _call("allocate_buffer", (_I32,), (t, h, I32(0), I32(-1)), space=0)
    t, vo = _call("allocate_buffer", (_I32,), (t, h, I32(0), I32(-1)), space=0)
    return t, h, (bx, by, bo, vx, vy, vo)

def _epilogue(t, h, bo, shape):
    t, out = _call("load", (jax.ShapeDtypeStruct(shape, jnp.float32),), (t, h, I32(0), I32(0), bo, jnp.zeros((0,), jnp.int32)), space=5)
    _call("kernel_end", (), (t, h, I32(0)))
    return out

def A_nocond(G, R, L):
    def f(x, y):
        t, h, (bx, by, bo, vx, vy, vo) = _prologue(x, y)
        def body(c):
            it, prev, t = c
            nxt = jnp.where(it + 1 < G, it + 1, 0)
            cur = it  # index map i -> (i, 0): block start i*R
            first = it == 0
            for src, dst in ((bx, vx), (by, vy)):
                changed = first | (cur != prev)
                t = _call("copy_block", (), (t, h, I32(0), I32(0), src, cur * R, I32(0), dst, changed.astype(jnp.int32), it), src_sizes=np.array([R, L]))
            t, a = _call("load", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vx, jnp.zeros((0,), jnp.int32)), space=0)
            t, b = _call("load", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vy, jnp.zeros((0,), jnp.int32)), space=0)
            t, _ = _call("swap", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vo, jnp.zeros((0,), jnp.int32), a + b), space=0)
            changed = (it + 1 == G) | (cur != nxt)
            t = _call("copy_block", (), (t, h, I32(0), I32(0), vo, I32(0), cur * R, bo, changed.astype(jnp.int32), it), dst_sizes=np.array([R, L]))
            t = _call("check_revisit", (), (t, h, I32(0), I32(0), it, cur * R))
            return it + 1, cur, t
        t = lax.while_loop(lambda c: c[0] < G, body, (I32(0), I32(-1), t))[-1]
        return _epilogue(t, h, bo, x.shape)
    return jax.jit(f)

def B_step(G, R, L):
    def f(x, y):
        t, h, (bx, by, bo, vx, vy, vo) = _prologue(x, y)
        def body(c):
            it, t = c
            t = _call("copy_block", (), (t, h, it), phase="in", affine=np.array([R, 0]))
            t, a = _call("load", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vx, jnp.zeros((0,), jnp.int32)), space=0)
            t, b = _call("load", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vy, jnp.zeros((0,), jnp.int32)), space=0)
            t, _ = _call("swap", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vo, jnp.zeros((0,), jnp.int32), a + b), space=0)
            t = _call("copy_block", (), (t, h, it), phase="out", affine=np.array([R, 0]))
            return it + 1, t
        t = lax.while_loop(lambda c: c[0] < G, body, (I32(0), t))[-1]
        return _epilogue(t, h, bo, x.shape)
    return jax.jit(f)

def C_native_loop(G, R, L):
    """B_step plus the loop counter and loop condition kept natively: only the kernel's compute is a kernel."""
    def f(x, y):
        t, h, (bx, by, bo, vx, vy, vo) = _prologue(x, y)
        t, go = _call("semaphore_read", (jax.ShapeDtypeStruct((), jnp.bool_),), (t, h))
        def body(c):
            go, t = c
            t = _call("copy_block", (), (t, h), phase="in", affine=np.array([R, 0]))
            t, a = _call("load", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vx, jnp.zeros((0,), jnp.int32)), space=0)
            t, b = _call("load", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vy, jnp.zeros((0,), jnp.int32)), space=0)
            t, _ = _call("swap", (jax.ShapeDtypeStruct((R, L), jnp.float32),), (t, h, I32(0), I32(0), vo, jnp.zeros((0,), jnp.int32), a + b), space=0)
            t, go = _call("copy_block", (jax.ShapeDtypeStruct((), jnp.bool_),), (t, h), phase="out", affine=np.array([R, 0]))
            return go, t
        t = lax.while_loop(lambda c: c[0], body, (go, t))[-1]
        return _epilogue(t, h, bo, x.shape)
    return jax.jit(f)

def jnp_ref(G, R, L):
    def f(x, y):
        def body(i, o):
            xs = lax.dynamic_slice_in_dim(x, i * R, R); ys = lax.dynamic_slice_in_dim(y, i * R, R)
            return lax.dynamic_update_slice_in_dim(o, xs + ys, i * R, 0)
        return lax.fori_loop(0, G, body, jnp.zeros_like(x))
    return jax.jit(f)

def nkernels(txt):
    return len(re.findall(r"= \S+ fusion\(", txt))

if __name__ == "__main__":
    variants = {"ours": ours, "A_nocond": A_nocond, "B_step": B_step, "C_loop": C_native_loop,
                "jnp": jnp_ref}
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    res = {k: [] for k in variants}
    k = 0
    # warm (imports, first-compile costs)
    for name, mk in variants.items():
        x = jnp.ones((8 * 8, 128), jnp.float32); mk(8, 8, 128).trace(x, x).lower().compile()
    for rep in range(reps):
        for name, mk in variants.items():
            k += 1
            L = 128 * (1 + k % 7); G = 8 + k % 5
            x = jnp.ones((G * 8, L), jnp.float32)
            lo = mk(G, 8, L).trace(x, x).lower()
            t, c = time.perf_counter(), time.process_time()
            co = lo.compile()
            res[name].append(((time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3, nkernels(co.as_text())))
    base = statistics.median(r[1] for r in res["ours"])
    for name, r in res.items():
        w = statistics.median(x[0] for x in r); c = statistics.median(x[1] for x in r)
        print(f"{name:9s} kernels {r[0][2]:3d}  compile wall {w:6.1f} ms [{min(x[0] for x in r):.1f}-{max(x[0] for x in r):.1f}]  cpu {c:6.1f} ms  vs ours(cpu) {c/base:.2f}")
