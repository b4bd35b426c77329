"""Where the time of a test (or any stretch of a program) goes, by stage:
what a kernel's first call costs against everything else.

    with mosaic_rt.stages.record() as rec:
        run_my_test()
    print(rec.summary())   # {"kernel_trace": s, "kernel_interpret": s, ...}

A kernel is any `pallas_call` / `core_map` lowered in TPU interpret mode --
mosaic_rt's or stock's (the seam times both, so the split is comparable
side by side). The stages come from jax's own compile-time events
(`jax.monitoring`: jaxpr trace, jaxpr -> MLIR, XLA compile), each naming
the jitted function; a function whose lowering interpreted a kernel is a
*kernel program*, and its three events are the kernel's:

- ``kernel_trace``: jax tracing the jitted function that calls the kernel;
- ``kernel_interpret``: the interpreter walking the kernel's jaxpr (ours
  or stock's), inside that function's lowering;
- ``kernel_lower``: the rest of its lowering to MLIR (jax's emission of
  what the interpreter produced, and of the function around the kernel);
- ``kernel_compile``: XLA compiling it;
- ``other_compile``: trace + lowering + compile of every other jitted
  function -- the test's own jnp (each eager op is a jit of its own);
- ``rest`` (in `summary` with ``total``): everything else -- executing
  kernels and the test's own programs, its numpy work, Python.

Recording costs a listener call per compile event; nothing on the hot path.
"""

from __future__ import annotations

import contextlib
import threading
import time

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"
_EVENTS = {_TRACE: "trace", _LOWER: "lower", _COMPILE: "compile"}
STAGES = ("kernel_trace", "kernel_interpret", "kernel_lower", "kernel_compile", "other_compile")

_lock = threading.Lock()
_active: list = []  # live recorders
_listening = False
_local = threading.local()
_NESTED = "<compiled by the interpreter>"


def _base(name: str) -> str:
    """A jitted function's name as every event gives it (the lowering and
    the compile name it ``jit(<fun>)`` or ``jit_<fun>``, the trace ``<fun>``)."""
    for prefix in ("jit(", "pmap("):
        if name.startswith(prefix) and name.endswith(")"):
            return name[len(prefix) : -1]
    for prefix in ("jit_", "pmap_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


class Recorder:
    """The events of one recording. Use through `record()`."""

    def __init__(self) -> None:
        self.events: list = []  # (stage, function name, seconds)
        self.interpret = 0.0  # seconds inside the interpreter
        self.kernel_functions: set = {_NESTED}
        self.nested = 0.0  # seconds of compile events inside the interpreter
        self.kernels = 0  # kernels interpreted
        self.started = time.perf_counter()
        self.stopped: float | None = None

    def _event(self, stage: str, name: str, seconds: float) -> None:
        if getattr(_local, "depth", 0):
            # Compiled by the interpreter itself (per-core programs): the
            # kernel's, and not interpretation.
            self.events.append((stage, _NESTED, seconds))
            self.nested += seconds
            return
        self.events.append((stage, _base(name), seconds))
        if stage == "lower" and getattr(_local, "kernel_lowered", False):
            _local.kernel_lowered = False
            self.kernel_functions.add(_base(name))

    def summary(self) -> dict:
        """Seconds per stage (`STAGES`), ``total`` (the recording's wall
        time), ``rest`` (total minus the stages) and ``kernels``."""
        out = dict.fromkeys(STAGES, 0.0)
        for stage, name, seconds in self.events:
            if name in self.kernel_functions:
                out[f"kernel_{stage}"] += seconds
            else:
                out["other_compile"] += seconds
        # The interpreter runs inside the kernel program's lowering event.
        out["kernel_lower"] = max(0.0, out["kernel_lower"] - self.interpret)
        out["kernel_interpret"] = self.interpret
        end = self.stopped if self.stopped is not None else time.perf_counter()
        out["total"] = end - self.started
        out["rest"] = max(0.0, out["total"] - sum(out[s] for s in STAGES))
        out["kernels"] = self.kernels
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def _listener(event: str, duration: float, **kwargs) -> None:
    stage = _EVENTS.get(event)
    if stage is None or not _active:
        return
    name = str(kwargs.get("fun_name", ""))
    with _lock:
        for rec in _active:
            rec._event(stage, name, duration)


def _listen() -> None:
    global _listening
    if not _listening:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_listener)
        _listening = True


@contextlib.contextmanager
def record():
    """Records the stages of everything this process compiles and
    interprets until the block ends (recordings may nest or overlap)."""
    rec = Recorder()
    with _lock:
        _listen()
        _active.append(rec)
    try:
        yield rec
    finally:
        rec.stopped = time.perf_counter()
        with _lock:
            _active.remove(rec)


@contextlib.contextmanager
def interpreting():
    """Marks the interpretation of one kernel (the seam wraps ours and
    stock's in it): its time is ``kernel_interpret``, and the jitted
    function being lowered around it is a kernel program."""
    if not _active:
        yield
        return
    nested0 = [rec.nested for rec in _active]
    _local.depth = getattr(_local, "depth", 0) + 1
    t0 = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - t0
        _local.depth -= 1
        _local.kernel_lowered = True
        with _lock:
            for rec, n0 in zip(_active, nested0):
                rec.interpret += seconds - (rec.nested - n0)
                rec.kernels += 1
