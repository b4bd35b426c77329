"""Generating, judging and shrinking cases: what `scripts/fuzz.py` and the
quick pytest sample share.

A case is named by its category and seed; ``generate(category, seed)``
always makes the same spec from them on one jax version (a statement's type
is traced, so another jax may draw another kernel from the same seed).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import traceback

import jax

from fuzzing import case, categories, oracle
from fuzzing.shrink import shrink


def generate(category: str, seed: int):
    rng = random.Random(f"{category}:{seed}")
    return categories.GENERATORS[category](rng)


def title(category: str, seed: int, note: str = "") -> str:
    return f"category={category} seed={seed} jax={jax.__version__}{note}"


def judge_spec(
    spec, name: str, check_meaning: bool = False, stock_crashed: bool = False, case_id: str = "?"
) -> tuple[oracle.Verdict, str]:
    text = case.source(spec, title=name)
    ns = case.load(text, name)
    ns["CASE"] = case_id
    try:
        return oracle.judge(ns, check_meaning, stock_crashed), text
    finally:
        case.forget(ns)


def write_repro(text: str, repro_dir: str, category: str, seed: int) -> str:
    os.makedirs(repro_dir, exist_ok=True)
    path = os.path.join(repro_dir, f"repro_{category}_{seed}.py")
    with open(path, "w") as f:
        f.write(text)
    return path


MEANING_SAMPLE = 8
# Categories never batched into one jitted call with others: shard_map
# programs beside single-device io_callbacks fail XLA's SPMD partitioner
# (stock's callbacks get a replicated sharding).
SOLO = frozenset({"multi_device"})


@dataclasses.dataclass
class Result:
    category: str
    seed: int
    kind: str  # an oracle kind, or "generator_error"
    detail: str = ""
    off_meaning: bool = False
    seconds: float = 0.0
    repro: str | None = None  # path of the minimal repro written
    shrink_runs: int = 0


def run_case(
    category: str, seed: int, *, repro_dir: str | None = None, shrink_budget: int = 120, stock_crashed: bool = False
) -> Result:
    """Generates and judges one case; a mismatch is shrunk and, with
    ``repro_dir``, written there as a standalone repro file.
    ``stock_crashed``: stock killed the process on this case before: judge
    mosaic_rt by the meaning alone (`oracle.StockCrashed`)."""
    t0 = time.perf_counter()
    try:
        spec = generate(category, seed)
    except Exception:  # noqa: BLE001 - a generator bug is a result of its own
        return Result(category, seed, "generator_error", traceback.format_exc(limit=8))
    name = title(category, seed)
    # Where both agree, one case in MEANING_SAMPLE is checked against its
    # meaning too (`oracle.judge`).
    cid = f"{category}:{seed}"
    verdict, text = judge_spec(spec, name, seed % MEANING_SAMPLE == 0, stock_crashed, cid)
    result = Result(category, seed, verdict.kind, verdict.detail, verdict.off_meaning)
    if verdict.kind == oracle.MISMATCH:

        def still_fails(candidate) -> bool:
            v, _ = judge_spec(candidate, name + " (shrinking)", False, stock_crashed, cid)
            return v.kind == oracle.MISMATCH and v.signature == verdict.signature

        small, result.shrink_runs = shrink(spec, still_fails, shrink_budget) if shrink_budget else (spec, 0)
        v, text = judge_spec(small, title(category, seed, ", shrunk"), False, stock_crashed, cid)
        if v.kind == oracle.MISMATCH:
            result.detail = v.detail
        if repro_dir:
            result.repro = write_repro(text, repro_dir, category, seed)
    result.seconds = time.perf_counter() - t0
    return result


def run_batch(cases, *, repro_dir: str | None = None, shrink_budget: int = 120) -> list[Result]:
    """`run_case` of each ``(category, seed)``, fast where all agree: every
    case's kernels run in one jitted call per interpreter (one XLA compile
    instead of one per case: about half of stock's time per kernel goes to
    compiling). Cases whose outputs are bit-identical there are `SAME` (the
    sampled meaning check as in `run_case`); any other case is judged on
    its own by `run_case` (`_agreeing` bisects a batch whose call raised)."""
    t0 = time.perf_counter()
    loaded, results = [], {}
    for category, seed in cases:
        if category in SOLO:
            continue
        try:
            spec = generate(category, seed)
        except Exception:  # noqa: BLE001 - a generator bug is a result of its own
            results[(category, seed)] = Result(category, seed, "generator_error", traceback.format_exc(limit=8))
            continue
        name = title(category, seed)
        loaded.append((category, seed, case.load(case.source(spec, title=name), name)))
    names = [f"{c}:{s}" for c, s, _ in loaded]
    try:
        if len(loaded) > 1:
            agreed = _agreeing(loaded, names)
        else:
            agreed = set()
        share = (time.perf_counter() - t0) / max(1, len(loaded))
        for category, seed, ns in loaded:
            if (category, seed) not in agreed:
                continue
            r = Result(category, seed, oracle.SAME, seconds=share)
            if seed % MEANING_SAMPLE == 0:
                try:
                    r.off_meaning = oracle.off_meaning(ns)
                except oracle.MeaningFailed as exc:
                    r.kind, r.detail = oracle.MEANING_ERROR, f"the case's meaning() raised {exc}"
            results[(category, seed)] = r
    finally:
        for _, _, ns in loaded:
            case.forget(ns)
    for category, seed in cases:
        if (category, seed) not in results:
            results[(category, seed)] = run_case(category, seed, repro_dir=repro_dir, shrink_budget=shrink_budget)
    return [results[c] for c in cases]


def _agreeing(loaded, names) -> set:
    """The ``(category, seed)`` of the loaded cases whose outputs are
    bit-identical when they run in one jitted call per interpreter. When a
    call raises (a kernel one interpreter rejects: about one case in ten),
    each half is tried again, so that one case costs a few more calls
    rather than sending the whole batch to `run_case`; a case that raises
    alone is left out."""

    def all_runs(make_params):
        def f():
            return [ns["run"](make_params(ns)) for _, _, ns in loaded]

        return lambda: jax.jit(f)()

    def halves() -> set:
        if len(loaded) == 1:
            return set()
        mid = len(loaded) // 2
        return _agreeing(loaded[:mid], names[:mid]) | _agreeing(loaded[mid:], names[mid:])

    oracle.announce("stock", names)
    stock = oracle.attempt_nested(all_runs(oracle.stock_params))
    if isinstance(stock, Exception):
        oracle.reset_stock()
        return halves()
    oracle.announce("ours", names)
    ours = oracle.attempt_nested(all_runs(oracle.our_params))
    if isinstance(ours, Exception):
        return halves()
    return {(c, s) for (c, s, _), a, b in zip(loaded, stock, ours) if oracle.identical(a, b)}
