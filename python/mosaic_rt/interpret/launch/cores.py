"""Several TPU cores per device, running truly concurrently.

XLA runs one device's program on one thread, but the cores of a TPU device
run at the same time and may wait on each other. So each core's grid loop
is traced into its own XLA computation, and one host callback per kernel
launch (not per op) runs those computations, one thread per core. Every
memory/DMA/semaphore op inside them is still a native FFI call; the cores
meet in the same native runtime through the launch handle they are passed.

Where the core programs run matters. jax's CPU client runs programs on a
thread pool sized to the number of devices (2 threads on a 2-CPU machine
with one device), and a core parked in a native wait keeps its thread: with
more cores than pool threads, the cores that would wake the parked ones
never get a thread (measured: 4 cores on 2 CPUs hung). So the core programs
are compiled for a private CPU client that executes on the calling thread,
and every core gets a thread of its own. That client's worker pool (for
thunks XLA chooses to run in parallel) is sized so that every core of every
running launch could park one worker.
"""

from __future__ import annotations

import functools
import threading
from concurrent import futures

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.evaluation.native_calls import materialize

_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)
# PjRt admits at most this many executions in flight per CPU device.
_PER_DEVICE = 32
_MIN_DEVICES = 64


class _PrivateClient:
    """The process's private CPU client, grown when a launch needs more."""

    def __init__(self):
        self._lock = threading.Lock()
        self._client = None
        self._size = 0
        self._compiled: dict = {}

    def _ensure(self, slots: int):
        need = max(_MIN_DEVICES, -(-slots // _PER_DEVICE), slots)
        if self._client is None or self._size < need:
            size = 1 << (need - 1).bit_length()
            self._client = jx.make_private_cpu_client(size)
            self._size = size
            self._compiled = {}
        return self._client

    def program(self, key, lower, slot: int, slots: int):
        """(executable, device) for the core at `slot` of a launch with
        `slots` cores in all; `lower()` gives the jit-lowered program."""
        with self._lock:
            client = self._ensure(slots)
            device = client.devices()[slot // _PER_DEVICE]
            entry = self._compiled.get((key, device.id))
            if entry is None:
                entry = jx.compile_on_client(client, lower(), device)
                self._compiled[(key, device.id)] = entry
                if len(self._compiled) > 256:  # a bounded cache
                    self._compiled.pop(next(iter(self._compiled)))
            return entry, device


_CLIENT = _PrivateClient()


@functools.lru_cache(maxsize=64)
def _lowered_core_program(jaxpr, const_types):
    def program(core, *consts):
        return jx.eval_jaxpr(jaxpr, consts, core)

    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in const_types]
    return jax.jit(program).lower(jax.ShapeDtypeStruct((), np.int32), *args)


class _PlacedConsts:
    """A launch's constants on each private device that needs them, put
    there once: every core of that device reads the same buffers (XLA never
    writes an input it was not donated), not a copy per core (16 per launch
    on a SparseCore vector-subcore mesh)."""

    def __init__(self, consts):
        self._consts = consts
        self._lock = threading.Lock()
        self._on: dict = {}

    def on(self, device) -> list:
        with self._lock:
            placed = self._on.get(device.id)
            if placed is None:
                placed = self._on[device.id] = [jax.device_put(c, device) for c in self._consts]
            return placed


def _run_core(jaxpr, const_types, consts: _PlacedConsts, core: int, slot: int, slots: int):
    # The jaxpr itself is the key: it stays alive as long as its entry.
    loaded, device = _CLIENT.program(
        (jaxpr, const_types), lambda: _lowered_core_program(jaxpr, const_types), slot, slots
    )
    args = [jax.device_put(np.int32(core), device), *consts.on(device)]
    jax.block_until_ready(jx.execute_on_client(loaded, args))


def _run_all(jaxpr, num_cores, num_devices, token, device, *consts):
    consts = [np.asarray(c) for c in consts]
    first = int(device) * num_cores  # this device's cores among the launch's
    const_types = tuple((tuple(c.shape), np.dtype(c.dtype)) for c in consts)
    placed = _PlacedConsts(consts)
    with futures.ThreadPoolExecutor(max_workers=num_cores, thread_name_prefix="mosaic_rt-core") as pool:
        runs = [
            pool.submit(_run_core, jaxpr, const_types, placed, i, first + i, num_cores * num_devices)
            for i in range(num_cores)
        ]
        errors = []
        for run in runs:
            try:
                run.result()
            except Exception as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
    if errors:
        # Every failed core reports the launch's root cause (the native layer
        # sees to that), so the first error is as good as any.
        raise errors[0]
    return token


# Compiles core programs ahead of their first launch (see `_prefetch`).
_PREFETCH = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mosaic_rt-compile")


def _prefetch(jaxpr, const_types, slots: int) -> None:
    """Lowers and compiles the core program in the background while the
    caller's own program is still being lowered and compiled, so the first
    launch finds it ready (XLA compiles with the GIL released). Failures are
    left for the launch itself to raise, where they belong."""

    def compile_for(slot):
        try:
            _CLIENT.program((jaxpr, const_types), lambda: _lowered_core_program(jaxpr, const_types), slot, slots)
        except Exception:  # noqa: BLE001 - the launch compiles again and reports
            pass

    for slot in range(0, slots, _PER_DEVICE):  # one program per private device
        _PREFETCH.submit(compile_for, slot)


def run_cores_concurrently(run_core, num_cores: int, token, *, device, num_devices: int):
    """Emits a launch of `run_core(core, token)` on `num_cores` threads of
    logical device `device` (traced) of `num_devices`."""
    closed = jax.make_jaxpr(lambda core: materialize(run_core(core, jnp.zeros((), jnp.int32))))(jnp.int32(0))
    jaxpr, consts = jx.closed_jaxpr_parts(closed)
    const_types = tuple((tuple(c.shape), np.dtype(c.dtype)) for c in consts)
    _prefetch(jaxpr, const_types, num_cores * num_devices)
    return jx.io_callback(
        functools.partial(_run_all, jaxpr, num_cores, num_devices), _TOKEN, materialize(token), device, *consts
    )
