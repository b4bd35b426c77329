"""The "tpu check" row: what the TPU compile check costs a first call.

Each measurement is a fresh process (so libtpu's start is counted) that
first-calls a few representative kernels (jit + trace + lower + compile +
run), jax's persistent compilation cache off:

* ``off``: no check;
* ``cold``: checked for v5e, nothing on disk yet (the run stores its answers);
* ``warm``: checked again with the answers ``cold`` stored (a second pytest
  process): no compile, libtpu not started;
* ``overlap``: as ``cold``, the compiles on a worker thread
  (``MOSAIC_RT_TPU_CHECK_OVERLAP=1``), full runs only.

Each repetition starts with another mode; medians per mode. Per kernel:
its first call in each mode and the seconds the compiler took for it.
Wall and CPU time of this process (CPU time moves less when other programs
load the machine; a worker thread's overlap shows only in wall time). Needs
libtpu: without it the row says so and measures nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

GENERATION = "v5e"
MODES_QUICK = ("off", "cold", "warm")
MODES_FULL = ("off", "cold", "warm", "overlap")


# -- the child: one process, the kernels' first calls ---------------------------------


def _kernels():
    """(name, call, args) of the representative kernels, each new to the process."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    import mosaic_rt

    params = mosaic_rt.InterpretParams()

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    elementwise = pl.pallas_call(
        add_one,
        out_shape=jax.ShapeDtypeStruct((256, 128), jnp.float32),
        grid=(4,),
        in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
        interpret=params,
    )

    def matmul(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    b = 128
    mm = pl.pallas_call(
        matmul,
        out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
        grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((b, b), lambda i, j, k: (i, k)), pl.BlockSpec((b, b), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((b, b), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((b, b), jnp.float32)],
        interpret=params,
    )

    def gather(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)),
    )
    prefetch = pl.pallas_call(
        gather, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid_spec=spec, interpret=params
    )

    x = np.ones((256, 128), np.float32)
    m = np.ones((256, 256), np.float32)
    return [
        ("elementwise", elementwise, (x,)),
        ("matmul", mm, (m, m)),
        ("prefetch gather", prefetch, (np.array([3, 2, 1, 0], np.int32), x[:32])),
    ]


def child() -> dict:
    import jax

    from mosaic_rt import jax_internals as jx
    from mosaic_rt.bench import cold
    from mosaic_rt.tpu_check import check

    cold.disable_persistent_cache()
    jax.block_until_ready(jax.numpy.zeros(4) + 1)  # the CPU backend up: not the check's cost
    kernels = []
    for name, call, args in _kernels():
        before = len(check.stats.records)
        start, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(call(*args))
        first, cpu = time.perf_counter() - start, time.process_time() - cpu
        compile_s = sum(o.seconds for _, _, o in check.stats.records[before:] if not o.cached)
        kernels.append({"name": name, "first_call_s": first, "first_call_cpu_s": cpu, "check_compile_s": compile_s})
    s = check.stats
    return {
        "kernels": kernels,
        "compiles": s.compiles,
        "disk_hits": s.disk_hits,
        "failures": s.failures,
        "libtpu_start_s": s.startup_seconds,
        "libtpu_started": jx.tpu_compiler_loaded(),
    }


# -- the parent ----------------------------------------------------------------------


def _spawn(mode: str, cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOSAIC_RT_TPU", "JAX_NUM_CPU_DEVICES"))}
    env["JAX_PLATFORMS"] = "cpu"
    if mode != "off":
        env["MOSAIC_RT_TPU_TARGET"] = GENERATION
        env["MOSAIC_RT_TPU_CACHE_DIR"] = cache_dir
    if mode == "overlap":
        env["MOSAIC_RT_TPU_CHECK_OVERLAP"] = "1"
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "mosaic_rt.bench.tpu_check"], env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"tpu check child ({mode}) failed: {run.stderr[-600:]}")
    out = json.loads(run.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    out["first_calls_s"] = sum(k["first_call_s"] for k in out["kernels"])
    out["first_calls_cpu_s"] = sum(k["first_call_cpu_s"] for k in out["kernels"])
    return out


def _has_libtpu() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


def run_tpu_check(budget) -> dict:
    from mosaic_rt.bench import measure

    if not _has_libtpu():
        from mosaic_rt.tpu_check import check

        return {"ok": True, "skipped": f"libtpu not installed ({check.install_command()})"}
    quick = budget == measure.QUICK
    modes = MODES_QUICK if quick else MODES_FULL
    reps = 1 if quick else 5
    runs: dict[str, list] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="mosaic_rt_tpu_bench_") as tmp:
        stored = None  # the directory the last cold run stored its answers in
        for rep in range(reps):
            # Each repetition starts with another mode (the machine's load
            # drifts); warm reads what the latest cold run stored.
            order = modes[rep % len(modes) :] + modes[: rep % len(modes)] if stored else modes
            for mode in order:
                cache = os.path.join(tmp, f"rep{rep}-{mode}")
                if mode == "warm":
                    cache = stored
                runs[mode].append(_spawn(mode, cache))
                if mode == "cold":
                    stored = cache
    return summarize(runs, reps)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: dict, reps: int) -> dict:
    modes = {}
    for mode, rs in runs.items():
        modes[mode] = {
            "first_calls_s": _median([r["first_calls_s"] for r in rs]),
            "first_calls_cpu_s": _median([r["first_calls_cpu_s"] for r in rs]),
            "process_s": _median([r["process_s"] for r in rs]),
            "compiles": rs[-1]["compiles"],
            "disk_hits": rs[-1]["disk_hits"],
            "libtpu_started": rs[-1]["libtpu_started"],
            "libtpu_start_s": _median([r["libtpu_start_s"] for r in rs]),
        }
    names = [k["name"] for k in runs["off"][0]["kernels"]]
    kernels = []
    for i, name in enumerate(names):
        row = {"name": name}
        for mode, rs in runs.items():
            row[f"{mode}_first_call_s"] = _median([r["kernels"][i]["first_call_s"] for r in rs])
        row["check_compile_s"] = _median([r["kernels"][i]["check_compile_s"] for r in runs["cold"]])
        kernels.append(row)
    off = modes["off"]["first_calls_s"]
    d = {
        "generation": GENERATION,
        "reps": reps,
        "modes": modes,
        "kernels": kernels,
        "cold_over_off": modes["cold"]["first_calls_s"] / off,
        "warm_over_off": modes["warm"]["first_calls_s"] / off,
        "warm_compiles": modes["warm"]["compiles"],
        "ok": modes["warm"]["compiles"] == 0
        and not modes["warm"]["libtpu_started"]
        and all(m["compiles"] + m["disk_hits"] == len(names) for k, m in modes.items() if k != "off"),
    }
    if "overlap" in modes:
        d["overlap_over_cold"] = modes["overlap"]["first_calls_s"] / modes["cold"]["first_calls_s"]
    return d


if __name__ == "__main__":
    print(json.dumps(child()))
