"""Where a production kernel's first call goes: stock, ours and the op's
plain-jnp reference, split into jit trace, lowering, XLA compile and first
run, with the optimized program's fusions -- the profile behind the bench's
"production kernels" first-call targets.

    python benches/tools/production_stages.py [KERNEL ...] [--reps N] [--sides stock,ours,reference]

KERNEL names (or part of a name) a kernel of the bench's production family
(`mosaic_rt.bench.production.KERNELS`; default: all of them). Each
measurement runs in a fresh interpreter that first runs another kernel
(threefry_2x32_count, or philox_4x32_count for threefry itself) on the same
side, so the process's one-time costs (imports, jax's first lowering of
each construct, our interpreter's modules) land outside it, as they do for
every kernel but the first in a test suite; jax's persistent compilation
cache is off. Each stage is the median over N processes.

For megablox gmm it also times `make_group_metadata` alone (jax's own code
outside the kernel, traced and compiled inside the op's jit on every side):
a floor under any interpreter's first call of that op.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SIDES = ("stock", "ours", "reference")

_CHILD = r"""
import contextlib, gc, json, sys, time
from _common import program_counts, use_cpu_devices
use_cpu_devices(8)
import jax
jax.config.update("jax_enable_compilation_cache", False)
from jax.experimental.pallas import tpu as pltpu
import mosaic_rt
from mosaic_rt.bench import production as P

name, side, warm = sys.argv[1:4]
ctx = {
    "stock": lambda: pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()),
    "ours": lambda: mosaic_rt.force_interpret_mode(mosaic_rt.InterpretParams()),
    "reference": contextlib.nullcontext,
}[side]


def program(name):
    op, ref, args = P.KERNELS[name][0]()
    fn = ref() if side == "reference" else op()
    return (fn if hasattr(fn, "trace") else jax.jit(fn)), args


fn, args = program(warm)
with ctx():
    jax.block_until_ready(fn(*args))
fn, args = program(name)
with ctx():
    gc.collect()
    t0 = time.perf_counter()
    traced = fn.trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
counts = program_counts(compiled.as_text())
print(json.dumps({"trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2, "run": t4 - t3,
                  "fusions": counts["fusions"], "custom_calls": sum(counts["custom_calls"].values())}))
"""

_METADATA = r"""
import gc, importlib, json, time
from _common import use_cpu_devices
use_cpu_devices(8)
import jax, jax.numpy as jnp
jax.config.update("jax_enable_compilation_cache", False)
gmm = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
from mosaic_rt.bench import production as P

_, _, (lhs, rhs, groups) = P.KERNELS["megablox gmm"][0]()
jax.block_until_ready(jax.jit(lambda g: g * 2)(groups))  # the process's first jit
f = jax.jit(lambda g: gmm.make_group_metadata(group_sizes=g, m=lhs.shape[0], tm=128,
            start_group=jnp.int32(0), num_nonzero_groups=rhs.shape[0], visit_empty_groups=False))
gc.collect()
t0 = time.perf_counter()
compiled = f.trace(groups).lower().compile()
jax.block_until_ready(compiled(groups))
print(json.dumps({"total": time.perf_counter() - t0}))
"""


def _run(code: str, *argv: str) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring {argv}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main(argv=None) -> None:
    from mosaic_rt.bench import production

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels", nargs="*", help="kernel names or parts of them (default: all)")
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per side and kernel")
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset of stock,ours,reference")
    args = parser.parse_args(argv)
    sides = [s for s in args.sides.split(",") if s]
    if unknown := [s for s in sides if s not in SIDES]:
        parser.error(f"unknown sides {unknown}; choose from {list(SIDES)}")
    names = [n for n in production.KERNELS if not args.kernels or any(k in n for k in args.kernels)]
    if not names:
        parser.error(f"no production kernel matches {args.kernels}; kernels: {list(production.KERNELS)}")
    print(f"median of {args.reps} fresh processes each, ms (after one other kernel on the same side)")
    for name in names:
        warm = "philox_4x32_count" if name == "threefry_2x32_count" else "threefry_2x32_count"
        totals = {}
        for side in sides:
            m = _median([_run(_CHILD, name, side, warm) for _ in range(args.reps)])
            totals[side] = sum(m[k] for k in ("trace", "lower", "compile", "run"))
            print(
                f"{name:28s} {side:9s} total {1e3 * totals[side]:6.0f} = trace {1e3 * m['trace']:5.0f}"
                f" + lower {1e3 * m['lower']:5.0f} + compile {1e3 * m['compile']:5.0f} + run {1e3 * m['run']:5.0f}"
                f" | fusions {m['fusions']:.0f}, our custom calls {m['custom_calls']:.0f}"
            )
        if "stock" in totals and "ours" in totals:
            print(f"{name:28s} stock/ours {totals['stock'] / totals['ours']:.1f}x")
        if name == "megablox gmm":
            meta = statistics.median(_run(_METADATA)["total"] for _ in range(args.reps))
            line = f"{name:28s} make_group_metadata alone {1e3 * meta:.0f} ms (outside the kernel, every side)"
            if "stock" in totals:
                line += f": stock/ours <= {totals['stock'] / meta:.1f}x even if the kernel cost nothing"
            print(line)


if __name__ == "__main__":
    main()
