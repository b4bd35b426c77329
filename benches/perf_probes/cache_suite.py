import os, sys, time
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax
if sys.argv[1] != "off":
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
else:
    jax.config.update("jax_enable_compilation_cache", False)
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
import numpy as np
from mosaic_rt.bench import zoo, measure
side = 1 if sys.argv[2] == "ours" else 0
measure.warm_up()
t = time.perf_counter()
for k in zoo.kernels(1):
    program, args, exp = k.build()
    out = np.asarray(jax.block_until_ready(program(k.params()[side])(*args)))
    assert np.array_equal(out.reshape(exp.shape), exp), k.name
print(sys.argv[2], sys.argv[1], f"total {(time.perf_counter()-t):.2f} s", {e.split('/')[-1]: events.count(e) for e in sorted(set(events)) if "cache_" in e})
