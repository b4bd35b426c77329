"""What users feel: cold first calls and a suite-like workload, stock vs ours.

Cold first call: one kernel never seen before, end to end (jit, trace,
lower, compile, run, block), per family. Every measurement gets shapes (or
a constant) of its own, so nothing compiled earlier in the process can be
reused by either interpreter, and jax's persistent compilation cache is off
for the run (`persistent_cache_hits()` counts its hits so a report can
prove it). Stock and ours alternate which goes first.

Suite workload: the 44 kernels of `zoo`, each run once per pass, stock and
ours alternating kernel by kernel, the totals compared.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from typing import Callable

import jax
import numpy as np

from mosaic_rt.bench import collectives, local, zoo

# -- persistent compilation cache ------------------------------------------------------

_events: dict[str, int] = {}
_listening = False


def _listen() -> None:
    global _listening
    if not _listening:
        jax.monitoring.register_event_listener(lambda name, **kw: _events.__setitem__(name, _events.get(name, 0) + 1))
        _listening = True


def persistent_cache_hits() -> int:
    return _events.get("/jax/compilation_cache/cache_hits", 0)


def disable_persistent_cache() -> None:
    """Turns jax's persistent compilation cache off for this process.

    jax decides once per process whether the cache is used (at the first
    compile), so this must run before anything compiles; the cold rows also
    count cache hits while they run and report them, so a cache left on by
    an embedding program shows up in the results instead of passing silently.
    """
    _listen()
    jax.config.update("jax_enable_compilation_cache", False)


# -- one cold call ------------------------------------------------------------------


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    b = np.asarray(b, dtype=a.dtype)
    return a.size == b.size and a.tobytes() == b.reshape(a.shape).tobytes()


def cold_call(program: Callable, args, params) -> tuple[float, np.ndarray]:
    """Seconds from building the jitted program to its blocked-on result."""
    start = time.perf_counter()
    out = jax.block_until_ready(program(params)(*args))
    return time.perf_counter() - start, np.asarray(out)


# -- cold first call per family -------------------------------------------------------

# Shapes never used by the steady-state cases (which compile first in the same
# process): 8-device collectives stay <= 64 KiB per buffer (stock deadlocks
# at ~128 KiB), so their rows cycle through 1..16 without 8 and 16.
_COLLECTIVE_ROWS = [r for r in range(1, 17) if r not in (8, 16)]


def _family_variants() -> dict[str, Callable[[int], tuple]]:
    """family -> variant(k) -> (program, args, expected); distinct shapes per k."""

    def ping_pong(k):
        rounds = 11 + k
        fn, (x,) = collectives.ping_pong(rounds, rows=8 * (2 + k % 8))
        return fn, (x,), np.asarray(x) + rounds

    def right_permute(k):
        rows = 9 + k  # 9..127 rows (the cases use 8 and 128)
        fn, (x,) = collectives.right_permute(8, rows)
        return fn, (x,), zoo._roll_blocks(np.asarray(x), 8, rows)

    def all_gather(k):
        rows = _COLLECTIVE_ROWS[k % len(_COLLECTIVE_ROWS)]
        fn, (x,) = collectives.all_gather(8, rows)
        return fn, (x,), zoo._gathered(np.asarray(x), 8, rows)

    def reduce_scatter(k):
        rows = _COLLECTIVE_ROWS[k % len(_COLLECTIVE_ROWS)]
        fn, (x,) = collectives.reduce_scatter(8, rows)
        return fn, (x,), zoo._scattered(np.asarray(x), 8, rows)

    def dma_pipeline(k):
        fn, (x,) = local.dma_pipeline(8, rows=16 + 8 * k)
        return fn, (x,), np.asarray(x) * 2 + 1

    def blockspec_add(k):
        fn, (x, y) = local.blockspec_add(8, rows=16 + 8 * k)
        return fn, (x, y), np.asarray(x) + np.asarray(y)

    def matmul(k):
        fn, (a, b) = local.blocked_matmul(2, tile=136 + 8 * k)
        return fn, (a, b), np.asarray(a) @ np.asarray(b)

    def semaphores(k):
        iters = 101 + k
        fn, (x,) = local.semaphore_loop(iters, rows=16 + 8 * (k % 8))
        return fn, (x,), np.asarray(x) + iters

    return {
        "ping-pong": ping_pong,
        "right-permute": right_permute,
        "all-gather": all_gather,
        "reduce-scatter": reduce_scatter,
        "dma-pipeline": dma_pipeline,
        "blockspec-add": blockspec_add,
        "matmul": matmul,
        "semaphores": semaphores,
    }


def _family_floors() -> dict[str, Callable[[int], tuple]]:
    """family -> floor(k) -> (jitted program, args, expected): the same math
    as the family's kernel at variant k written as a plain jax program (the
    kernel's loop kept as a loop, collectives as XLA's own). Its cold call
    is what jax itself takes to trace, compile and run that math, the floor
    under any interpreter's cold call."""
    variants = _family_variants()

    def counted(n):
        return jax.lax.fori_loop(0, n, lambda i, c: c + 1, jax.numpy.int32(0))

    def ping_pong(k):
        _, (x,), expected = variants["ping-pong"](k)
        rounds = 11 + k
        mesh = collectives._mesh(2)
        fn = collectives._shard_map(lambda x: x + counted(rounds).astype(x.dtype), mesh)
        return fn, (x,), expected

    def semaphores(k):
        _, (x,), expected = variants["semaphores"](k)
        iters = 101 + k
        return jax.jit(lambda x: x + counted(iters).astype(x.dtype)), (x,), expected

    def dma_pipeline(k):
        _, (x,), expected = variants["dma-pipeline"](k)

        def chunks(x):
            def step(i, out):
                return out.at[i].set(x[i] * 2 + 1)

            return jax.lax.fori_loop(0, x.shape[0], step, jax.numpy.zeros_like(x))

        return jax.jit(chunks), (x,), expected

    def native(family, make):
        def floor(k):
            _, (x,), expected = variants[family](k)
            return make(x), (x,), expected

        return floor

    def binary(family, op):
        def floor(k):
            _, args, expected = variants[family](k)
            return jax.jit(op), args, expected

        return floor

    rows = lambda x: x.shape[0] // 8  # noqa: E731 - the per-device rows of an 8-device input
    return {
        "ping-pong": ping_pong,
        "right-permute": native("right-permute", lambda x: collectives.native_right_permute(8)),
        "all-gather": native("all-gather", lambda x: collectives.native_all_gather(8)),
        "reduce-scatter": native("reduce-scatter", lambda x: collectives.native_reduce_scatter(8, rows(x) // 8)),
        "dma-pipeline": dma_pipeline,
        "blockspec-add": binary("blockspec-add", lambda x, y: x + y),
        "matmul": binary("matmul", lambda a, b: a @ b),
        "semaphores": semaphores,
    }


COLD_DEVICES = {"ping-pong": 2, "right-permute": 8, "all-gather": 8, "reduce-scatter": 8}


@dataclasses.dataclass
class ColdFamily:
    family: str
    stock_s: list[float]
    ours_s: list[float]
    ok: bool
    error: str | None = None
    floor_s: list[float] = dataclasses.field(default_factory=list)
    floor_ok: bool = True

    @property
    def ratio(self) -> float | None:
        if self.stock_s and self.ours_s:
            return statistics.median(self.stock_s) / statistics.median(self.ours_s)
        return None


def run_cold(reps: int, families: list[str] | None = None, with_floor: bool = True) -> dict:
    """Cold first calls, `reps` per side per family, interleaved; with
    `with_floor`, each rep also times the family's plain-jax floor."""
    from mosaic_rt.bench.measure import interpret_params

    variants = _family_variants()
    floors = _family_floors() if with_floor else None
    names = families or list(variants)
    counters = {f: itertools.count() for f in names}
    hits_before = persistent_cache_hits()
    rows = {f: ColdFamily(f, [], [], True) for f in names}
    stock_params, our_params = interpret_params(False)
    for rep in range(reps):
        for f in names:
            row = rows[f]
            if row.error:
                continue
            sides = [("stock", stock_params, row.stock_s), ("ours", our_params, row.ours_s)]
            if rep % 2:
                sides.reverse()
            for _, params, times in sides:
                try:
                    program, args, expected = variants[f](next(counters[f]))
                    dt, out = cold_call(program, args, params)
                except Exception as e:  # noqa: BLE001 - reported, the row goes on
                    row.error = f"{type(e).__name__}: {str(e)[:300]}"
                    row.ok = False
                    break
                times.append(dt)
                row.ok = row.ok and _same(out, expected)
            if floors is not None and not row.error:
                program, args, expected = floors[f](next(counters[f]))
                dt, out = cold_call(lambda _: program, args, None)  # noqa: B023 - called at once
                row.floor_s.append(dt)
                row.floor_ok = row.floor_ok and np.allclose(
                    np.asarray(out).reshape(-1), np.asarray(expected).reshape(-1)
                )
    fams = list(rows.values())
    done = [r for r in fams if r.stock_s and r.ours_s]
    stock_total = sum(statistics.median(r.stock_s) for r in done)
    ours_total = sum(statistics.median(r.ours_s) for r in done)
    return {
        "reps_per_side": reps,
        "families": [
            dataclasses.asdict(r)
            | {
                "ratio": r.ratio,
                "stock_median_s": _med(r.stock_s),
                "ours_median_s": _med(r.ours_s),
                "floor_median_s": _med(r.floor_s),
                "ours_over_floor": _over(r.ours_s, r.floor_s),
            }
            for r in fams
        ],
        "stock_total_s": stock_total,
        "ours_total_s": ours_total,
        "ratio": stock_total / ours_total if ours_total else None,
        "persistent_cache_hits": persistent_cache_hits() - hits_before,
        "ok": all(r.ok for r in fams),
    }


def _med(xs):
    return statistics.median(xs) if xs else None


def _over(xs, ys):
    return statistics.median(xs) / statistics.median(ys) if xs and ys else None


# -- the suite-like workload ------------------------------------------------------------


def run_suite(passes: int, first_salt: int = 1, only: set[str] | None = None) -> dict:
    """Every zoo kernel (or those named in `only`) once per side per pass;
    pass p uses salt first_salt + p."""
    hits_before = persistent_cache_hits()
    kernels_out, per_pass = [], []
    flip = itertools.cycle([False, True])
    for p in range(passes):
        totals = {"stock": 0.0, "ours": 0.0}
        for kernel in zoo.kernels(first_salt + p):
            if only is not None and kernel.name not in only:
                continue
            stock_params, our_params = kernel.params()
            sides = [("stock", stock_params), ("ours", our_params)]
            if next(flip):
                sides.reverse()
            entry = {"name": kernel.name, "family": kernel.family, "devices": kernel.devices, "pass": p, "error": None}
            outs, expected = {}, None
            for side, params in sides:
                try:
                    program, args, expected = kernel.build()
                    entry[f"{side}_s"], outs[side] = cold_call(program, args, params)
                    totals[side] += entry[f"{side}_s"]
                except Exception as e:  # noqa: BLE001 - reported, the row goes on
                    entry["error"] = f"{side}: {type(e).__name__}: {str(e)[:300]}"
            entry["equal"] = len(outs) == 2 and outs["stock"].tobytes() == outs["ours"].tobytes()
            entry["correct"] = "ours" in outs and _same(outs["ours"], expected)
            entry["ok"] = entry["error"] is None and entry["equal"] and entry["correct"]
            kernels_out.append(entry)
        per_pass.append(
            {
                "pass": p,
                "stock_s": totals["stock"],
                "ours_s": totals["ours"],
                "ratio": totals["stock"] / totals["ours"] if totals["ours"] else None,
            }
        )
    stock_total = sum(p["stock_s"] for p in per_pass)
    ours_total = sum(p["ours_s"] for p in per_pass)
    by_family: dict[str, dict] = {}
    for k in kernels_out:
        f = by_family.setdefault(k["family"], {"kernels": 0, "stock_s": 0.0, "ours_s": 0.0})
        f["kernels"] += 1
        f["stock_s"] += k.get("stock_s", 0.0)
        f["ours_s"] += k.get("ours_s", 0.0)
    for f in by_family.values():
        f["ratio"] = f["stock_s"] / f["ours_s"] if f["ours_s"] else None
    return {
        "passes": per_pass,
        "distinct_kernels": len({k["name"] for k in kernels_out}),
        "kernels": kernels_out,
        "families": by_family,
        "stock_total_s": stock_total,
        "ours_total_s": ours_total,
        "ratio": stock_total / ours_total if ours_total else None,
        "persistent_cache_hits": persistent_cache_hits() - hits_before,
        "ok": all(k["ok"] for k in kernels_out),
    }
