import os, time, statistics, dataclasses
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax, numpy as np
from mosaic_rt.bench import collectives, measure
import mosaic_rt
_, ours = measure.interpret_params(False)
for name, build, native in (("right-permute 64KiB", lambda: collectives.right_permute(8, 128), lambda: collectives.native_right_permute(8)),
                            ("all-gather 8KiB", lambda: collectives.all_gather(8, 16), lambda: collectives.native_all_gather(8)),
                            ("reduce-scatter 8KiB", lambda: collectives.reduce_scatter(8, 16), lambda: collectives.native_reduce_scatter(8, 16))):
    fn, args = build()
    fs = {"ours on_wait": fn(ours), "ours eager": fn(dataclasses.replace(ours, dma_execution_mode="eager")), "native": native()}
    for f in fs.values(): jax.block_until_ready(f(*args))
    t = {k: [] for k in fs}
    for i in range(200):
        for k, f in (fs.items() if i % 2 else reversed(list(fs.items()))):
            s = time.perf_counter(); jax.block_until_ready(f(*args)); t[k].append(time.perf_counter() - s)
    med = {k: statistics.median(v) for k, v in t.items()}
    print(name, "  ".join(f"{k} {v*1e6:.0f} us ({v/med['native']:.2f}x native)" for k, v in med.items()))
