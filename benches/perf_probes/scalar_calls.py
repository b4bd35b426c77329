"""Steady state and structure of the dma-pipeline kernel's scalar programs.

    python benches/perf_probes/scalar_calls.py [chunks ...]   (default 8 64)

Per chunk count: the number of `mosaic_rt_scalar_program` custom calls and
of fusions in the optimized HLO, the lowering time (min of 5) and the
steady-state time per call (7 repeats x 50 calls: min and median). Compare
two builds by running it alternately with PYTHONPATH pointing at each.
"""

from __future__ import annotations

import re
import statistics
import sys
import time

import jax

from mosaic_rt.bench import local, measure

_FUSION = re.compile(r"= \S+ fusion\(")
_SCALAR = re.compile(r'custom_call_target="mosaic_rt_scalar_program"')


def probe(chunks: int) -> str:
    _, params = measure.interpret_params(False)
    build, (x,) = local.dma_pipeline(chunks)
    f = build(params)
    lowering = []
    for _ in range(5):
        start = time.perf_counter()
        lowered = build(params).lower(x)
        lowering.append(time.perf_counter() - start)
    hlo = lowered.compile().as_text()
    calls = sum(bool(_SCALAR.search(ln)) for ln in hlo.splitlines())
    fusions = sum(bool(_FUSION.search(ln)) for ln in hlo.splitlines())
    jax.block_until_ready(f(x))
    per_call = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(50):
            out = f(x)
        jax.block_until_ready(out)
        per_call.append((time.perf_counter() - start) / 50)
    return (f"chunks={chunks}: scalar_program calls {calls}, fusions {fusions}, "
            f"lowering min {min(lowering) * 1e3:.2f} ms, steady min "
            f"{min(per_call) * 1e3:.3f} ms median {statistics.median(per_call) * 1e3:.3f} ms")


if __name__ == "__main__":
    for n in [int(a) for a in sys.argv[1:]] or [8, 64]:
        print(probe(n), flush=True)
