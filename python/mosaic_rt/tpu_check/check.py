"""The TPU compile check: each kernel lowered under mosaic_rt is also
compiled for the target TPU generations by the real Pallas TPU lowering and
Mosaic / XLA:TPU compiler, on CPU (deviceless ahead-of-time compilation
against a libtpu topology; no TPU, no metadata server, the default backend
stays CPU).

Called from `mosaic_rt.interpret.launch.kernel.interpret_pallas_call` with the
pallas_call's own params: the same `pallas_call_p` is bound again with
``interpret=False`` in a `jax.jit` traced for a TPU device of the topology,
so the TPU sees exactly the kernel's jaxpr, grid, block specs, scratch,
scalar prefetch and compiler params. Runs at trace time, once per distinct
kernel and generation (`fingerprint`), never when a compiled program runs.
Answers are cached in the process and on disk (`disk_cache`), so another
process checking the same kernel compiles nothing and, when every answer is
on disk, never starts libtpu. With ``MOSAIC_RT_TPU_CHECK_OVERLAP=1`` the
compiles run on a worker thread while mosaic_rt interprets the kernel
(`start_check`), joined before the lowering returns.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import logging
import math
import os
import sys
import tempfile
import threading
import time
import warnings

from mosaic_rt.errors import TpuCompileError, TpuCompileWarning
from mosaic_rt.tpu_check import targets as _targets


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What compiling one kernel for one generation gave."""

    generation: str
    ok: bool
    stage: str | None = None  # "lowering" (Pallas TPU, Python) or "compile" (Mosaic/XLA)
    error_type: str | None = None
    message: str | None = None  # the compiler's message, in full
    seconds: float = 0.0
    memory: dict | None = None  # what compiled.memory_analysis() reports
    cached: bool = False  # read from the disk cache (seconds: the compile's then)


@dataclasses.dataclass
class Stats:
    compiles: int = 0  # kernels compiled (cache misses)
    hits: int = 0  # checks answered from the in-process cache
    disk_hits: int = 0  # checks answered from the disk cache (`disk_cache`)
    failures: int = 0
    seconds: float = 0.0  # total time in the compiler (misses)
    startup_seconds: float = 0.0  # loading libtpu, making topologies
    # (kernel, source, Outcome) of each compile and disk-cache answer: see `report()`.
    records: list = dataclasses.field(default_factory=list)
    # SparseCore kernels left unchecked: (kernel, source) (see _not_checked)
    sparse_core_skipped: list = dataclasses.field(default_factory=list)


_lock = threading.RLock()
_cache: dict[tuple[str, str], Outcome] = {}
_topologies: dict[tuple[str, int], object] = {}
stats = Stats()


def clear_cache() -> None:
    """Forgets every result cached in the process and resets `stats`
    (topologies stay; the disk cache too: `disk_cache.clear`)."""
    global stats
    with _lock:
        _cache.clear()
        stats = Stats()


# ------------------------------------------------------------------ libtpu


def _import_libtpu():
    """The libtpu package (the test suite replaces this to simulate its absence)."""
    return importlib.import_module("libtpu")


def install_command() -> str:
    """The pip command that installs the libtpu the installed jax pins."""
    from importlib import metadata

    try:
        for req in metadata.requires("jax") or ():
            if req.replace(" ", "").startswith("libtpu") and "tpu" in req.split(";", 1)[-1]:
                spec = req.split(";", 1)[0].strip().replace(" ", "")
                return f'pip install "{spec}"'
    except metadata.PackageNotFoundError:
        pass
    import jax

    return f'pip install "jax[tpu]=={jax.__version__}"'


def _require_libtpu() -> None:
    if os.environ.get("TPU_LIBRARY_PATH") and os.path.isfile(os.environ["TPU_LIBRARY_PATH"]):
        return
    try:
        _import_libtpu()
    except ImportError as e:
        raise ImportError(
            "mosaic_rt's TPU compile check (tpu_target / MOSAIC_RT_TPU_TARGET /"
            " --mosaic-rt-tpu-target) needs libtpu, the TPU compiler, which is not"
            f" installed ({e}). Install the one your jax pins: {install_command()}"
            " (or `pip install 'mosaic_rt[tpu]'`). No TPU is needed."
        ) from e


def _quietly(fn):
    """Runs ``fn()`` with file descriptors 1 and 2 sent to a temporary file:
    libtpu prints its start-up chatter (accelerator type, worker hostnames,
    "Logging before InitGoogle") straight to them. Returns ``(result,
    captured text)``; on an exception the captured text is added to it."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                result = fn()
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
        except BaseException as e:
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
            if text:
                e.add_note(f"libtpu's output:\n{text}")
            raise
        finally:
            for fd in saved:
                os.close(fd)
        sink.seek(0)
        return result, sink.read().decode(errors="replace")


def topology_name(generation: str, num_chips: int = 1) -> str:
    """libtpu's topology string with at least ``num_chips`` chips: one host's
    worth at least ("v5e:2x2", "v5p:2x2x1"; older libtpu refuses a topology
    smaller than a host), growing by powers of two ("v5e:2x4", ...)."""
    prefix, dims = _targets.GENERATIONS[generation]
    shape = [2, 2] + [1] * (dims - 2)
    i = 0
    while shape[0] * shape[1] * (shape[2] if dims == 3 else 1) < num_chips:
        shape[i % dims if dims == 2 else i % 3] *= 2
        i += 1
    return f"{prefix}:{'x'.join(map(str, shape))}"


def topology(generation: str, num_chips: int = 1):
    """The (cached) libtpu topology of ``num_chips`` chips of a generation."""
    key = (generation, num_chips)
    with _lock:
        topo = _topologies.get(key)
        if topo is not None:
            return topo
        _require_libtpu()
        # No metadata server query; no lock against other processes that
        # load libtpu (we never drive a TPU, only its compiler).
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        from mosaic_rt import jax_internals as jx

        t0 = time.perf_counter()
        name = topology_name(generation, num_chips)
        try:
            topo, _ = _quietly(lambda: jx.tpu_topology(name))
        except Exception as e:
            raise RuntimeError(
                f"mosaic_rt's TPU compile check: libtpu {_libtpu_version()} could not make"
                f" the TPU topology {name!r} ({generation}): {e}"
            ) from e
        stats.startup_seconds += time.perf_counter() - t0
        _topologies[key] = topo
        return topo


# --------------------------------------------------------------- the check


def _where(kernel_params) -> tuple[str, str | None]:
    """(kernel name, its source line 'fn at file.py:12')."""
    info = getattr(kernel_params["jaxpr"], "debug_info", None)
    name = str(kernel_params.get("name") or getattr(info, "func_name", None) or "kernel")
    source = getattr(info, "func_src_info", None) if info is not None else None
    return name, source


def _devices(generation: str, num_devices: int) -> list:
    """``num_devices`` TPU devices of one topology of the generation (a
    chip is one device on v5e / v6e / v5p, two TensorCores on v4 / v7x)."""
    chips = 1
    while True:
        devices = list(topology(generation, chips).devices)
        if len(devices) >= num_devices:
            return devices[:num_devices]
        chips = max(chips * 2, 4 * ((num_devices + len(devices) - 1) // len(devices)))


def _compile(generation: str, request: _Request) -> tuple[Outcome, Exception | None]:
    """(outcome, the compiler's exception or None) for ``request``'s kernel.
    Its ``axis_sizes``: the mesh axes of a kernel under shard_map (``{}``:
    one device); ``x64``: the caller's x64 mode (thread-local, so carried to
    a worker thread)."""
    from mosaic_rt import jax_internals as jx
    from mosaic_rt.tpu_check import tpu_info

    with jx.enable_x64(request.x64), tpu_info.answering_for(generation):
        program, avals = _kernel(request)
        return _compile_for(generation, avals, program, request.axis_sizes)


def _kernel(request: _Request):
    """``(program, avals)``: the function the TPU compiles and the avals of
    its operands. The program is the pallas_call as lowered, or the mpmd_map
    it came from (`pl.kernel`; `core_map` on jax 0.12), which the TPU lowers
    by its own rule -- core axes in device ids, operands of any rank and no
    block specs -- where the CPU lowers the pallas_call jax's fallback makes
    of it.

    Semaphores never cross the program's edge: on a TPU they live in the
    chip's semaphore memory from the kernel that returns them to the one
    that takes them, while a program's operands and results are arrays in
    HBM (XLA:TPU rejects a semaphore operand -- "IsSflagMemorySpace" -- and
    aborts the whole process on a semaphore result, "Unsupported source
    memory space: sflag"). So the program makes the semaphores the kernel
    takes with a kernel of its own, as the TPU would get them, and returns
    only the kernel's other results."""
    from mosaic_rt import jax_internals as jx

    # debug=True prints once, from the interpreter's lowering (see
    # interpret/launch/debug_print.py), not once per generation checked.
    if request.mpmd_params is not None:
        params = {**request.mpmd_params, "interpret": False, "debug": False}
        primitive = jx.mpmd_map_p()
        in_spaces = []
        out_spaces = [jx.memory_space_of(a) for a in params.get("out_avals", ())]
    else:
        params = {**request.kernel_params, "interpret": False, "debug": False}
        primitive = jx.pallas_call_p
        mapping = params["grid_mapping"]
        blocks = [jx.block_memory_space(bm) for bm in mapping.block_mappings]
        n_in = len(blocks) - mapping.num_outputs
        in_spaces = [None] * mapping.num_index_operands + blocks[:n_in]
        out_spaces = blocks[n_in:]
    avals = request.avals
    made = [_is_semaphore(a, space) for a, space in zip(avals, itertools.chain(in_spaces, itertools.repeat(None)))]

    def program(*given):
        given = iter(given)
        semaphores = iter(_semaphores([a for a, m in zip(avals, made) if m]))
        operands = [next(semaphores) if m else next(given) for m in made]
        results = primitive.bind(*operands, **params)
        spaces = itertools.chain(out_spaces, itertools.repeat(None))
        return [r for r, space in zip(results, spaces) if not _is_semaphore(r.aval, space)]

    return program, [a for a, m in zip(avals, made) if not m]


def _is_semaphore(aval, space) -> bool:
    """Whether a kernel's operand or result is semaphores: of a semaphore
    dtype, or an array in SEMAPHORE memory (its aval's space, or its
    block's: ``space``)."""
    from mosaic_rt import jax_internals as jx

    semaphore_memory = jx.MemorySpace.SEMAPHORE
    return jx.is_semaphore_dtype(aval.dtype) or semaphore_memory in (jx.memory_space_of(aval), space)


def _semaphores(avals) -> list:
    """Semaphore arrays of ``avals``, from a kernel that returns them
    untouched (in the TPU's semaphore memory, as a kernel taking them finds
    them)."""
    if not avals:
        return []
    from jax.experimental import pallas as pl

    from mosaic_rt import jax_internals as jx

    space = jx.MemorySpace.SEMAPHORE
    shapes = [space(tuple(a.shape), a.dtype) for a in avals]
    specs = [pl.BlockSpec(memory_space=space) for _ in avals]
    # The TPU's kernel, even where interpret mode is forced around the check.
    forced = jx.interpret_mode_setting.swap_local(None)
    try:
        return list(pl.pallas_call(_untouched, out_shape=shapes, out_specs=specs)())
    finally:
        jx.interpret_mode_setting.set_local(forced)


def _untouched(*refs) -> None:
    pass


def _compile_for(generation: str, avals, kernel, axis_sizes) -> tuple[Outcome, Exception | None]:
    import jax
    import numpy as np

    from mosaic_rt import jax_internals as jx

    num_devices = int(np.prod(list(axis_sizes.values()))) if axis_sizes else 1
    devices = _devices(generation, num_devices)  # a failure here is not the kernel's
    t0 = time.perf_counter()
    stage = "lowering"
    try:
        if axis_sizes:
            # Under shard_map: the same axes over as many TPU devices, each
            # device seeing the kernel's own operand shapes (replicated
            # specs), so remote DMAs and barrier semaphores lower as they do
            # on a pod.
            mesh = jax.sharding.Mesh(np.array(devices).reshape(tuple(axis_sizes.values())), tuple(axis_sizes))
            replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            specs = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype, sharding=replicated) for a in avals]
            spec = jax.sharding.PartitionSpec()
            body = jx.shard_map(kernel, mesh=mesh, in_specs=tuple(spec for _ in avals), out_specs=spec)
            # The context mesh is the CPU one of the shard_map being
            # lowered: make it the TPU mesh's.
            with jx.use_abstract_mesh(mesh.abstract_mesh), jax.default_device(devices[0]):
                lowered = jax.jit(body).trace(*specs).lower()
        else:
            # The lowering of some ops (reshapes, run_scoped in core_map) asks
            # the chip kind of the devices in context, at trace and at
            # lowering time: a one-device mesh of the target gives it.
            mesh = jax.sharding.Mesh(np.array(devices[:1]), ("_mosaic_rt_aot",))
            sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            specs = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype, sharding=sharding) for a in avals]
            with jx.use_abstract_mesh(mesh.abstract_mesh), jax.default_device(devices[0]):
                lowered = jax.jit(kernel).trace(*specs).lower()
        stage = "compile"
        compiled = lowered.compile()
    except ImportError:  # no libtpu: not a verdict on the kernel
        raise
    except Exception as e:  # noqa: BLE001 - the compiler's verdict on the kernel
        return Outcome(generation, False, stage, type(e).__name__, _message(e), time.perf_counter() - t0), e
    memory = None
    try:
        analysis = compiled.memory_analysis()
        if analysis is not None:
            memory = {
                k: getattr(analysis, k)
                for k in dir(analysis)
                if k.endswith("_in_bytes") and isinstance(getattr(analysis, k), int)
            }
    except Exception:  # noqa: BLE001 - not every release reports it
        pass
    return Outcome(generation, True, seconds=time.perf_counter() - t0, memory=memory), None


def _message(e: BaseException) -> str:
    text = str(e).strip()
    for note in getattr(e, "__notes__", ()) or ():
        if "removed its internal frames" not in str(note):  # jax's traceback hint
            text += "\n" + str(note)
    return text.split("\n--------------------\nFor simplicity, JAX", 1)[0].rstrip()


# The compiler's exception types a rejection may carry, by name (a cached
# answer keeps only the name): besides builtins, jax's and Pallas'.
def _compiler_error_types() -> dict:
    import builtins

    import jax

    from mosaic_rt import jax_internals as jx

    types = {
        name: getattr(builtins, name)
        for name in ("ValueError", "TypeError", "NotImplementedError", "IndexError", "RuntimeError", "KeyError")
    }
    types["JaxRuntimeError"] = jax.errors.JaxRuntimeError
    types.update(jx.mosaic_error_types())
    return types


_blended: dict = {}


def _message_str(self) -> str:
    return str(self.args[0]) if self.args else ""


def _error_class(error_type: str | None, cause: BaseException | None) -> type:
    """`TpuCompileError`, also an instance of the compiler's own exception
    type (``cause``'s, or the one named ``error_type`` of a cached answer):
    code expecting the TPU's rejection (``assertRaises(MosaicError)``,
    ``NotImplementedError``, ``JaxRuntimeError``) sees it under the check."""
    kind = type(cause) if cause is not None else _compiler_error_types().get(error_type or "")
    if kind is None or not issubclass(kind, Exception) or issubclass(TpuCompileError, kind):
        return TpuCompileError
    if kind not in _blended:
        try:
            _blended[kind] = type(
                f"TpuCompileError[{kind.__name__}]",
                (TpuCompileError, kind),
                # The message is ours (the compiler's types may keep theirs
                # elsewhere, jax's JaxRuntimeError in C++ state).
                {"__module__": TpuCompileError.__module__, "__doc__": TpuCompileError.__doc__, "__str__": _message_str},
            )
        except TypeError:  # a type that cannot be a base with ValueError
            _blended[kind] = TpuCompileError
    return _blended[kind]


def _error(name, source, outcome: Outcome, cause: BaseException | None = None) -> TpuCompileError:
    import jax

    who = f"kernel {name!r}" + (f" ({source})" if source else "")
    stage = "the Pallas TPU lowering" if outcome.stage == "lowering" else "the Mosaic / XLA:TPU compiler"
    libtpu = _libtpu_version()
    versions = f"jax {jax.__version__}" + (f", libtpu {libtpu}" if libtpu else "")
    body = "\n".join("  " + line for line in (outcome.message or "").splitlines())
    message = (
        f"{who} does not compile for TPU {outcome.generation} ({versions});"
        f" {stage} says ({outcome.error_type}):\n{body}"
    )
    return _error_class(outcome.error_type, cause)(
        message, kernel=name, source=source, generation=outcome.generation, compiler_message=outcome.message
    )


def _libtpu_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------ answers and caches

ENV_OVERLAP = "MOSAIC_RT_TPU_CHECK_OVERLAP"


def overlap_enabled() -> bool:
    """Whether a kernel's compiles run on a worker thread while mosaic_rt
    interprets it (``MOSAIC_RT_TPU_CHECK_OVERLAP=1``; off by default: on a
    2-CPU machine it did not pay, see the bench row "tpu check")."""
    return os.environ.get(ENV_OVERLAP, "").strip().lower() in ("1", "on", "true", "yes")


def _cached(generation: str, key: str) -> Outcome | None:
    """The answer of the in-process cache, else of the disk cache (then
    kept in the process), else None. Holds `_lock`."""
    from mosaic_rt.tpu_check import disk_cache

    outcome = _cache.get((generation, key))
    if outcome is not None:
        stats.hits += 1
        return outcome
    entry = disk_cache.load(disk_cache.entry_key(key, generation))
    if entry is None:
        return None
    try:
        outcome = _outcome_from_json(entry["outcome"], generation)
    except (KeyError, TypeError, ValueError):  # a damaged entry: compile again
        return None
    _cache[(generation, key)] = outcome
    stats.disk_hits += 1
    stats.records.append((entry.get("kernel"), entry.get("source"), outcome))
    return outcome


def _outcome_from_json(d: dict, generation: str) -> Outcome:
    if d["generation"] != generation or not isinstance(d["ok"], bool):
        raise ValueError("not this generation's answer")
    memory = d.get("memory")
    if memory is not None and not (isinstance(memory, dict) and all(isinstance(v, int) for v in memory.values())):
        raise ValueError("bad memory record")
    text = {k: d.get(k) for k in ("stage", "error_type", "message")}
    if any(v is not None and not isinstance(v, str) for v in text.values()):
        raise ValueError("bad failure record")
    if not d["ok"] and text["message"] is None:
        raise ValueError("a failure without its message")
    return Outcome(generation, d["ok"], seconds=float(d.get("seconds", 0.0)), memory=memory, cached=True, **text)


def _compiled(request: _Request, generation: str) -> tuple[Outcome, Exception | None]:
    """Compiles for one generation, records the answer in both caches.
    Holds `_lock` (one compile at a time: libtpu's compiler is not known to
    be thread-safe, and a second thread wanting the same answer waits for it)."""
    from mosaic_rt.tpu_check import disk_cache

    outcome, cause = _compile(generation, request)
    _cache[(generation, request.key)] = outcome
    stats.compiles += 1
    stats.seconds += outcome.seconds
    stats.failures += not outcome.ok
    stats.records.append((request.name, request.source, outcome))
    entry = {
        "kernel": request.name,
        "source": request.source,
        "outcome": dataclasses.asdict(dataclasses.replace(outcome, cached=False)),
    }
    disk_cache.store(disk_cache.entry_key(request.key, generation), entry)
    return outcome, cause


@dataclasses.dataclass
class _Request:
    """One kernel's check, captured in the caller's thread (trace state such
    as the axis env and the x64 mode is thread-local)."""

    name: str
    source: str | None
    avals: list
    kernel_params: dict
    axis_sizes: dict
    x64: bool
    key: str
    generations: tuple
    mode: str
    mpmd_params: dict | None = None


class Pending:
    """A kernel's check, started by `start_check`: `finish` (in the
    caller's thread) waits for it and raises `TpuCompileError` or warns."""

    def __init__(self, request: _Request):
        self._request = request
        self._answers: dict[str, tuple[Outcome, Exception | None]] = {}
        self._thread: threading.Thread | None = None
        self._crash: BaseException | None = None

    def _answer(self, generation: str) -> tuple[Outcome, Exception | None]:
        with _lock:
            outcome = _cached(generation, self._request.key)
            if outcome is not None:
                return outcome, None
            return _compiled(self._request, generation)

    def _missing(self) -> list[str]:
        """The generations the caches do not answer (the others' answers kept)."""
        missing = []
        with _lock:
            for generation in self._request.generations:
                outcome = _cached(generation, self._request.key)
                if outcome is None:
                    missing.append(generation)
                    continue
                self._answers[generation] = (outcome, None)
                if not outcome.ok and self._request.mode == "raise":
                    break  # the call's answer: later generations are not asked
        return missing

    def start_in_background(self) -> None:
        """Compiles what the caches do not answer on a worker thread. The
        topologies are made first, here: libtpu's start-up output is
        silenced by redirecting the process's stdout / stderr, which must
        not swallow what the caller prints meanwhile."""
        missing = self._missing()
        if not missing:
            return
        request = self._request
        num_devices = math.prod(int(v) for v in request.axis_sizes.values())
        for generation in missing:
            _devices(generation, num_devices)

        def work():
            try:
                for generation in missing:
                    self._answers[generation] = answer = self._answer(generation)
                    if not answer[0].ok and request.mode == "raise":
                        return  # the first failure is the call's answer
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                self._crash = e

        self._thread = threading.Thread(target=work, name="mosaic_rt-tpu-check", daemon=True)
        self._thread.start()

    def finish(self, stacklevel: int = 1) -> None:
        """Waits for the background compiles (if any), then raises or warns
        for the first generation the kernel does not compile for (the
        warning's ``stacklevel`` counted from the caller of `finish`)."""
        if self._thread is not None:
            self._thread.join()  # ends when the compile ends, as a serial one would
            self._thread = None
            if self._crash is not None:
                raise self._crash
        request = self._request
        for generation in request.generations:
            outcome, cause = self._answers.pop(generation, None) or self._answer(generation)
            if outcome.ok:
                continue
            error = _error(request.name, request.source, outcome, cause)
            if request.mode == "warn":
                warnings.warn(TpuCompileWarning(str(error)), stacklevel=stacklevel + 1)
                continue
            # The message holds the compiler's in full; its own exception
            # (with jax's internal frames) stays reachable as `compiler_error`.
            error.compiler_error = cause
            raise error from None


def start_check(
    args, kernel_params: dict, interpret_params, overlap: bool | None = None, mpmd_params: dict | None = None
) -> Pending | None:
    """The check of a pallas_call being lowered under mosaic_rt, or None
    when its params (and the process) ask for no generation. ``args``: its
    operands (tracers) as the lowering got them; ``kernel_params``: its
    params without ``interpret``; ``mpmd_params``: those of the mpmd_map
    it was made from, if any (see `_kernel`). With ``overlap`` (default:
    `overlap_enabled()`) the compiles the caches do not answer start on a
    worker thread; else `Pending.finish` runs them."""
    generations, mode = _targets.resolve(interpret_params)
    if not generations:
        return None
    from mosaic_rt import jax_internals as jx
    from mosaic_rt.tpu_check import fingerprint

    name, source = _where(kernel_params)
    if jx.SPARSE_CORE_MESHES and isinstance(kernel_params.get("mesh"), jx.SPARSE_CORE_MESHES):
        _not_checked(name, source, generations)
        return None
    axis_sizes = dict(jx.axis_sizes())
    avals = [jx.get_aval(a) for a in args]
    x64 = jx.x64_enabled()
    compiled = kernel_params if mpmd_params is None else {"mpmd_map": mpmd_params}
    key = fingerprint.of_kernel(avals, compiled, axis_sizes, (name, source), x64)
    request = _Request(name, source, avals, kernel_params, axis_sizes, x64, key, generations, mode, mpmd_params)
    pending = Pending(request)
    if overlap_enabled() if overlap is None else overlap:
        pending.start_in_background()
    return pending


def _not_checked(name: str, source: str | None, generations) -> None:
    """Notes (once per kernel, on logger ``mosaic_rt``) a SparseCore kernel
    the check leaves alone. jax lowers a SparseCore `core_map` through its
    own path (`mpmd_map`), not the pallas_call the interpreter receives;
    compiling that pallas_call runs the TensorCore lowering, which rejects
    SparseCore ops (`parallel_loop`, vector-indexed DMAs) the SparseCore
    compiles: a false positive on every such kernel."""
    with _lock:
        if (name, source) in stats.sparse_core_skipped:
            return
        stats.sparse_core_skipped.append((name, source))
    where = f" ({source})" if source else ""
    logging.getLogger("mosaic_rt").info(
        "TPU compile check: SparseCore kernel %r%s not compiled for %s (only TensorCore kernels are checked)",
        name,
        where,
        ", ".join(generations),
    )


def check_kernel(args, kernel_params: dict, interpret_params) -> None:
    """`start_check` and `Pending.finish` at once: compiles the kernel for
    each generation asked for; raises `TpuCompileError` (or warns) for the
    first one it does not compile for."""
    pending = start_check(args, kernel_params, interpret_params, overlap=False)
    if pending is not None:
        pending.finish(stacklevel=2)


# ------------------------------------------------------------------ report


def report() -> list[dict]:
    """What the check found in this process: one row per kernel and
    generation compiled (or answered from the disk cache), in order:
    ``kernel``, ``source`` (its function's line), ``generation``, ``ok``,
    ``seconds`` (in the compiler), ``cached`` (from the disk cache: the
    seconds are those of the compile that stored it), ``memory`` (what the
    compiler reports for a kernel that compiles: ``memory_analysis()``'s
    HBM-side byte counts, e.g. ``argument_size_in_bytes``,
    ``temp_size_in_bytes``, ``generated_code_size_in_bytes``; None for a
    failure), and for a failure ``stage`` ("lowering" / "compile"),
    ``error_type`` and ``message``. The kernel's VMEM / SMEM use is not
    among what libtpu reports for a kernel that compiles (its
    ``used_scoped_memory_configs`` stay the same for a 2 MiB and a 32 MiB
    scratch): it shows only in an overflow's message."""
    with _lock:
        records = list(stats.records)
    return [
        {
            "kernel": kernel,
            "source": source,
            "generation": o.generation,
            "ok": o.ok,
            "seconds": o.seconds,
            "cached": o.cached,
            "memory": o.memory,
            "stage": o.stage,
            "error_type": o.error_type,
            "message": o.message,
        }
        for kernel, source, o in records
    ]
