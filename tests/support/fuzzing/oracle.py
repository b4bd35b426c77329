"""The verdict on one case: stock interpret mode is the oracle, bit for bit.

Both interpreters run the case with the same ``KNOBS``. Where they agree
(same bits, or both reject the kernel) nothing more is asked. Where they
disagree the kernel's meaning decides (``meaning()`` of the case: numpy, or
eager jax op by op, with the TPU's wrapping integer rules): a case where
mosaic_rt gives the meaning and stock does not is *stock's* error, listed as
such, not counted against mosaic_rt. A case only mosaic_rt rejects is always
a mismatch; one only stock rejects is listed apart (stock's limitation when
mosaic_rt gives the meaning).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import re
import warnings

import jax
import ml_dtypes
import mosaic_rt
import numpy as np
from jax.experimental.pallas import tpu as pltpu

# Bounds every blocking wait of ours: a generated kernel that would hang fails.
OUR_WAIT_TIMEOUT = 60.0

SAME = "same"  # both ran, identical bits
BOTH_REJECT = "both_reject"  # both raised (not a mismatch)
STOCK_WRONG = "stock_wrong"  # outputs differ, ours is the meaning, stock is not
STOCK_REJECTS = "stock_rejects"  # only stock raised; ours runs (and gives the meaning where known)
MISMATCH = "mismatch"  # ours rejects what stock runs, or differs where stock is not shown wrong
MEANING_ERROR = "meaning_error"  # the generator's model of the kernel raised (a fuzzer bug)

KINDS = (SAME, BOTH_REJECT, STOCK_WRONG, STOCK_REJECTS, MISMATCH, MEANING_ERROR)


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: str
    # For mismatches, what the shrinker keeps: ("ours_rejects", exception
    # type) or ("differs", "") or ("ours_wrong", "") (only stock rejects and
    # ours is not the meaning).
    signature: tuple = ()
    detail: str = ""
    # Both ran and agree, but not with the generator's model of the kernel
    # (float fusion, or a model to fix): counted, never a mismatch.
    off_meaning: bool = False


class _Quiet(logging.Filter):
    def filter(self, record):
        return False


@contextlib.contextmanager
def _quiet():
    """No warnings, prints or logged tracebacks (stock logs every failing
    io_callback's) while a case runs."""
    loggers = [logging.getLogger(name) for name in ("jax._src.callback", "jax._src.pallas.mosaic.interpret")]
    quiet = _Quiet()
    for lg in loggers:
        lg.addFilter(quiet)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg in loggers:
            lg.removeFilter(quiet)


def attempt(fn):
    """``fn()``'s outputs as a list of numpy arrays, or the exception it raised."""
    try:
        with _quiet():
            out = jax.block_until_ready(fn())
            return [np.asarray(x) for x in jax.tree.leaves(out)]
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        return exc


def attempt_nested(fn):
    """Like `attempt` for ``fn()`` returning one output pytree per case: a
    list (per case) of lists of numpy arrays, or the exception."""
    try:
        with _quiet():
            out = jax.block_until_ready(fn())
            return [[np.asarray(x) for x in jax.tree.leaves(o)] for o in out]
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        return exc


def reset_stock():
    """Stock keeps global state that an exception leaves broken."""
    pltpu.reset_tpu_interpret_mode_state()


def off_meaning(ns) -> bool:
    """Whether ours (run again) is not the case's meaning (None: no model).
    Raises `MeaningFailed`."""
    want = _meaning(ns)
    if want is None:
        return False
    ours = attempt(lambda: ns["run"](our_params(ns)))
    return isinstance(ours, Exception) or not matches_meaning(ours, want)


def _bits(x: np.ndarray):
    return x.dtype.str, x.shape, x.tobytes()


def identical(a: list, b: list) -> bool:
    return len(a) == len(b) and all(_bits(x) == _bits(y) for x, y in zip(a, b))


def _close_to_meaning(x: np.ndarray, want) -> bool:
    """Bit for bit, but any NaN equals any NaN (eager jax and numpy pick
    their own NaN payloads)."""
    want = np.asarray(want)
    if want.dtype != x.dtype:
        try:
            want = want.astype(x.dtype)
        except (TypeError, ValueError):
            return False
    if x.shape != want.shape:
        return False
    if x.tobytes() == want.tobytes():
        return True
    if x.dtype.kind not in "fcV" and "float" not in x.dtype.name:
        return False
    xf, wf = x.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(xf) & np.isnan(wf)
    same = x.reshape(-1).view(np.uint8).reshape(x.size, -1) == want.reshape(-1).view(np.uint8).reshape(x.size, -1)
    return bool(np.all(same.all(axis=-1) | both_nan.reshape(-1)))


def matches_meaning(outs: list, want) -> bool:
    if want is None:
        return False
    want = [np.asarray(w) for w in jax.tree.leaves(want)]
    return len(outs) == len(want) and all(_close_to_meaning(x, w) for x, w in zip(outs, want))


def _first_difference(a: list, b: list) -> str:
    if len(a) != len(b):
        return f"{len(a)} outputs vs {len(b)}"
    for k, (x, y) in enumerate(zip(a, b)):
        if (x.dtype, x.shape) != (y.dtype, y.shape):
            return f"output {k}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if x.tobytes() != y.tobytes():
            xb = x.reshape(-1).view(np.uint8).reshape(x.size, -1)
            yb = y.reshape(-1).view(np.uint8).reshape(y.size, -1)
            bad = np.nonzero(np.any(xb != yb, axis=-1))[0]
            at = tuple(int(i) for i in np.unravel_index(bad[0], x.shape))
            return f"output {k}: {bad.size} of {x.size} differ, first at {at}: stock {x[at]!r}, mosaic_rt {y[at]!r}"
    return "no difference"


def _without_excess_precision(ns):
    """Ours again, in a program XLA compiles without excess precision (every
    bf16 / f16 op rounded, as the meaning does); an exception if it raises."""
    return attempt(lambda: jax.jit(lambda: ns["run"](our_params(ns)), compiler_options=_NO_EXCESS)())


_NO_EXCESS = {"xla_allow_excess_precision": False}


def _xla_explains(ns, ours: list, want) -> bool:
    """Where stock rejects a kernel and ours is not the eager meaning:
    whether the difference is XLA's compiling, not our interpreting --
    stock's programs are XLA-compiled too, so either makes ours right:
    - compiled without excess precision, ours is the meaning (XLA:CPU's
      fusions keep bf16 / f16 intermediates in f32, eager jax rounds each op);
    - ours is the meaning but for subnormals where the meaning has zeros:
      XLA folds constants without flushing (``where(m, x, 0) + 1e-40`` keeps
      1e-40 where ``m`` is false), while its compiled ops, eager jax and a
      TPU flush them;
    - ours is the case's ``compiled_meaning()`` (the meaning's program under
      `jax.jit`, where a case has one): XLA rewrites some ops it compiles, as
      ``x / c`` into ``x * (1 / c)`` for a constant ``c``, which eager jax
      runs as written."""
    rounded = _without_excess_precision(ns)
    if not isinstance(rounded, Exception) and matches_meaning(rounded, want):
        return True
    if matches_meaning(_flushed(ours), _flushed(jax.tree.leaves(want))):
        return True
    compiled = ns.get("compiled_meaning")
    if compiled is None:
        return False
    try:
        with _quiet():
            got = compiled()
    except Exception as exc:
        raise MeaningFailed(f"compiled_meaning: {type(exc).__name__}: {exc}") from exc
    return matches_meaning(ours, got)


def _flushed(arrays: list) -> list:
    """``arrays`` with every float subnormal made a zero of its sign."""
    out = []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f" or "float" in a.dtype.name:
            wide = a.astype(np.float64)
            tiny = float(ml_dtypes.finfo(a.dtype).tiny)
            a = np.where((wide != 0) & (np.abs(wide) < tiny), np.copysign(0.0, wide), wide).astype(a.dtype)
        out.append(a)
    return out


class MeaningFailed(Exception):
    """The case's meaning raised: a generator's model to fix (it would
    otherwise hide the very disagreements it is there to judge)."""


def _meaning(ns):
    """The case's meaning, None where it has none; `MeaningFailed` when it raises."""
    try:
        with _quiet():
            return ns["meaning"]()
    except Exception as exc:
        raise MeaningFailed(f"{type(exc).__name__}: {exc}") from exc


def stock_params(ns: dict):
    """Stock's params for a loaded case: its ``KNOBS``."""
    return pltpu.InterpretParams(**ns["KNOBS"])


def our_params(ns: dict):
    """mosaic_rt's params for a loaded case: its ``KNOBS`` and ``OURS_KNOBS``
    (fields stock lacks, such as ``dma_execution_mode="tpu"``)."""
    knobs = {**ns["KNOBS"], **ns.get("OURS_KNOBS", {})}
    return mosaic_rt.InterpretParams(**knobs, wait_timeout=OUR_WAIT_TIMEOUT)


def judge(ns: dict, check_meaning: bool = True, stock_crashed: bool = False) -> Verdict:
    """Runs a loaded case (`fuzzing.case.load`) on both interpreters.
    ``check_meaning``: where they agree, compare with the meaning too (to
    find models to fix: `Verdict.off_meaning`); eager jax op by op costs as
    much as stock's run, so long runs do it for a sample."""
    try:
        return _judge(ns, check_meaning, stock_crashed)
    except MeaningFailed as exc:
        return Verdict(MEANING_ERROR, ("meaning_error", ""), f"the case's meaning() raised {exc}")


class StockCrashed(Exception):
    """Stock took the process down on this case (jax 0.10.2's XLA folds an
    integer division by a constant zero with a SIGFPE): found by the long
    run's parent (`scripts/fuzz.py`), which judges the case again without
    stock."""


# Called with (stage, case names) before each interpreter runs (the long
# run's worker reports it, so a process killed by a signal names who ran).
STAGE_HOOK = None


def announce(stage: str, names) -> None:
    if STAGE_HOOK is not None:
        STAGE_HOOK(stage, list(names))


def _judge(ns: dict, check_meaning: bool, stock_crashed: bool = False) -> Verdict:
    names = [ns.get("CASE", "?")]
    if stock_crashed:
        stock = StockCrashed("stock interpret mode killed the process running this kernel (a signal)")
    else:
        announce("stock", names)
        stock = attempt(lambda: ns["run"](stock_params(ns)))
    if isinstance(stock, Exception) and not stock_crashed:
        # Stock keeps global state that an exception leaves broken.
        pltpu.reset_tpu_interpret_mode_state()
    announce("ours", names)
    ours = attempt(lambda: ns["run"](our_params(ns)))
    s_err, o_err = isinstance(stock, Exception), isinstance(ours, Exception)
    if s_err and o_err:
        return Verdict(BOTH_REJECT, detail=f"stock: {_describe(stock)}\nmosaic_rt: {_describe(ours)}")
    if o_err:
        return Verdict(MISMATCH, ("ours_rejects", type(ours).__name__), f"only mosaic_rt rejects it: {_describe(ours)}")
    if s_err:
        want = _meaning(ns)
        if want is not None and not matches_meaning(ours, want):
            if _xla_explains(ns, ours, want):
                return Verdict(STOCK_REJECTS, detail=f"stock: {_describe(stock)}", off_meaning=True)
            return Verdict(
                MISMATCH, ("ours_wrong", ""), f"only stock rejects it ({_describe(stock)}); ours is not the meaning"
            )
        return Verdict(STOCK_REJECTS, detail=f"stock: {_describe(stock)}")
    if identical(stock, ours):
        want = _meaning(ns) if check_meaning else None
        return Verdict(SAME, off_meaning=want is not None and not matches_meaning(ours, want))
    diff = _first_difference(stock, ours)
    want = _meaning(ns)
    if matches_meaning(ours, want) and not matches_meaning(stock, want):
        return Verdict(STOCK_WRONG, detail=f"stock is not the meaning; ours is: {diff}")
    return Verdict(MISMATCH, ("differs", ""), f"outputs differ: {diff}")


# "ValueError: msg" lines inside an error's text (stock's io_callback errors
# quote the traceback of the root cause; its last such line is the cause).
_EMBEDDED = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$", re.M)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    found = _EMBEDDED.findall(text)
    if found:
        name, msg = found[-1]
        return f"{type(exc).__name__} ({name}: {msg.strip()[:400]})"
    return f"{type(exc).__name__}: {' | '.join(text.splitlines()[:6])[:600]}"
