"""Per-kernel XLA:CPU compile cost and bit-identity for compile options (interleaved, one process)."""
import sys, time, statistics
import jax, jax.numpy as jnp, numpy as np, jaxlib
from jax import lax
jax.config.update("jax_enable_compilation_cache", False)
import mosaic_rt
from mosaic_rt.ffi.ops import _call
OLD = jaxlib.__version__.startswith("0.10")
opts = {"default": None, "O1": {"xla_backend_optimization_level": 1}, "O2": {"xla_backend_optimization_level": 2},
        "O0": {"xla_backend_optimization_level": 0},
        "noexp": {"xla_llvm_disable_expensive_passes": True},
        "noslp+nounroll": {"xla_cpu_disable_slp_vectorizer": True, "xla_cpu_disable_loop_unrolling": True} if "slp" in " ".join(sys.argv) else None,
        }
if OLD: opts["nofe"] = {"xla_cpu_use_fusion_emitters": False}; opts["noexp+nofe"] = {"xla_llvm_disable_expensive_passes": True, "xla_cpu_use_fusion_emitters": False}
opts = {k: v for k, v in opts.items() if v is not None or k == "default"}
def prog(n):
    def f(x):
        t = jnp.zeros((), jnp.int32)
        for i in range(n):
            x = x * 2.0 + float(i)
            t, x = _call("swap", (jax.ShapeDtypeStruct(x.shape, x.dtype),), (t, x))
        return x
    return jax.jit(f)
res = {}
k = 0
for rep in range(4):
    for n in (1, 9):
        for oname, o in opts.items():
            k += 1
            x = jnp.ones((8, 128 + k), jnp.float32)
            lo = prog(n).trace(x).lower()
            c = time.process_time(); lo.compile(o); c = time.process_time() - c
            res.setdefault(oname, {}).setdefault(n, []).append(c * 1e3)
rng = np.random.default_rng(0)
x, y, z = (rng.standard_normal((64, 1024)).astype(np.float32) for _ in range(3))
fns = {"fma": lambda x, y, z: x * y + z, "tanh": lambda x, y, z: jnp.tanh(x), "log1p": lambda x, y, z: jnp.log1p(jnp.abs(x)),
       "rsqrt": lambda x, y, z: jax.lax.rsqrt(jnp.abs(x) + 1), "exp": lambda x, y, z: jnp.exp(x), "sm": lambda x, y, z: jax.nn.softmax(x, axis=-1)}
refs = {name: np.asarray(jax.jit(f).lower(x, y, z).compile()(x, y, z)) for name, f in fns.items()}
print("jaxlib", jaxlib.__version__)
for oname, d in res.items():
    meds = {n: statistics.median(v[1:]) for n, v in d.items()}
    per = (meds[9] - meds[1]) / 8
    diff = [name for name, f in fns.items() if np.asarray(jax.jit(f).lower(x, y, z).compile(opts[oname])(x, y, z)).tobytes() != refs[name].tobytes()]
    print(f"{oname:15s} 1 kernel {meds[1]:6.1f} ms, per extra kernel {per:5.1f} ms; results differ from default for: {diff or 'none'}")
