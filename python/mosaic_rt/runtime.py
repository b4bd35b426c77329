"""Python API of the native runtime (one simulated running kernel).

This wraps ``mosaic_rt._native.Runtime`` and does the numpy side: dtypes
(every numpy dtype jax uses plus ml_dtypes' bfloat16, int4/uint4/int2/uint2,
float4_e2m1fn and float8 types; see :mod:`mosaic_rt._dtypes`), allocating
result arrays, making inputs contiguous (a copy only when they are not).
Contiguous data is handed to Rust through the buffer protocol without copies.

Regions select, per leading dimension, either an int (an index; the dimension
is dropped from the result) or ``(start, size)`` / ``(start, size, stride)``;
dimensions not listed are taken whole, and ``None`` means the whole buffer.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from mosaic_rt import _native
from mosaic_rt._dtypes import DTYPES as _DTYPES
from mosaic_rt._dtypes import canonical_bytes, dtype_name, numpy_dtype
from mosaic_rt.ffi.requests import DmaSide, DmaStart

__all__ = ["BufferInfo", "Leak", "Runtime", "numpy_dtype"]

# Python's spelling of a region (see the module doc), which the binding
# converts (its `RegionArg`) into the core's `Region`.
RegionSpec = Sequence[Any] | None
# (memory space, buffer id) or (memory space, buffer id, region)
BufferRef = tuple


class BufferInfo(NamedTuple):
    dtype: np.dtype
    shape: tuple[int, ...]  # allocated (padded) shape
    logical_shape: tuple[int, ...]
    ref_count: int


class Leak(NamedTuple):
    """A semaphore left with a non-zero count, or with DMAs started and never
    waited for (``on_wait`` mode: their data never moved)."""

    sem: int
    kind: str
    device: int
    core: int
    count: int
    pending_dmas: tuple[str, ...] = ()


def _raw(arr: np.ndarray) -> np.ndarray:
    """Input data as a C-contiguous array numpy can export through the
    buffer protocol (sub-byte elements canonical)."""
    return canonical_bytes(np.ascontiguousarray(arr))


def _as_value(value: Any, dtype: np.dtype, shape: tuple[int, ...], what: str = "value") -> np.ndarray:
    """`value` as a contiguous array of exactly `dtype` and `shape`."""
    if isinstance(value, np.ndarray):
        if value.dtype != dtype:
            raise ValueError(f"{what} has dtype {value.dtype.name} but the buffer holds {dtype.name}")
        arr = value
    else:
        try:
            arr = np.asarray(value, dtype=dtype)
        except (OverflowError, TypeError, ValueError) as e:
            raise ValueError(f"cannot convert {what} to {dtype.name}: {e}") from None
    if arr.shape != tuple(shape):
        try:
            arr = np.broadcast_to(arr, shape)
        except ValueError:
            raise ValueError(f"{what} of shape {arr.shape} does not fit a region of shape {tuple(shape)}") from None
    return _raw(arr)


class Runtime:
    """One simulated running kernel: ``num_devices x cores_per_device`` cores,
    their semaphores, DMA engine and memory.

    Every method that blocks (``wait``, ``dma_wait``, ``device_barrier``)
    releases the GIL, so Python threads can play the cores. Errors are raised
    as ``ValueError`` (bad ids/shapes/dtypes), ``IndexError`` (out of
    bounds), ``KernelAborted`` (another core failed first; ``.root`` is that
    failure), ``WaitTimeout``, or another ``MosaicRuntimeError``.

    ``detect_uninitialized=True`` (initcheck): a read of kernel-local memory
    (every space but HBM/ANY) that nothing wrote since it was allocated --
    by a store, swap, DMA, block copy or its initial value -- raises
    ``UninitializedReadError`` naming the never-written range.
    ``trace=True`` records a timeline: see :meth:`trace_json`.
    ``dma_execution_mode``: ``"on_wait"`` (default), ``"eager"`` or
    ``"tpu"`` (see ``mosaic_rt.InterpretParams``; under ``"tpu"`` a copy to
    another core lands when the thread playing that core waits, reads a
    semaphore or frees a buffer, or when its device ``leave``-s).
    """

    def __init__(
        self,
        num_devices: int = 1,
        cores_per_device: int = 1,
        *,
        dma_execution_mode: str = "on_wait",
        out_of_bounds_reads: str = "raise",
        uninitialized_memory: str = "nan",
        wait_timeout: float | None = 120.0,
        detect_races: bool = False,
        detect_deadlocks: bool = False,
        detect_uninitialized: bool = False,
        trace: bool = False,
    ):
        # detect_deadlocks: each thread acts as the (device, core) it names;
        # when every core is blocked (or its device has `leave`-d) and none
        # can continue, every blocked call raises DeadlockError at once.
        self._rt = _native.Runtime(
            num_devices,
            cores_per_device,
            dma_execution_mode,
            out_of_bounds_reads,
            uninitialized_memory,
            wait_timeout,
            bool(detect_races),
            bool(detect_deadlocks),
            bool(detect_uninitialized),
            bool(trace),
        )

    @property
    def native(self) -> _native.Runtime:
        """The underlying native runtime."""
        return self._rt

    num_devices = property(lambda self: self._rt.num_devices)
    cores_per_device = property(lambda self: self._rt.cores_per_device)
    dma_execution_mode = property(lambda self: self._rt.dma_execution_mode)
    out_of_bounds_reads = property(lambda self: self._rt.out_of_bounds_reads)
    uninitialized_memory = property(lambda self: self._rt.uninitialized_memory)
    wait_timeout = property(lambda self: self._rt.wait_timeout)
    detect_uninitialized = property(lambda self: self._rt.detect_uninitialized)

    def __repr__(self) -> str:
        return repr(self._rt)

    # ------------------------------------------------------------- memory

    def allocate_buffer(
        self,
        device: int,
        core: int | None,
        space: str | int,
        array: Any = None,
        *,
        shape: Sequence[int] | None = None,
        dtype: Any = None,
        padded_shape: Sequence[int] | None = None,
    ) -> int:
        """Allocates a buffer and returns its id.

        Give either ``array`` (its content, dtype and shape) or ``shape`` and
        ``dtype`` (filled with the configured fill value). ``padded_shape`` is
        the allocated shape when larger than the logical one; padding gets the
        fill value. ``core=None`` allocates on every core of the device.
        """
        if array is not None:
            if shape is not None or dtype is not None:
                raise ValueError("give either array or shape and dtype, not both")
            arr = np.asarray(array)
            name = dtype_name(arr.dtype)
            logical = arr.shape
            data = _raw(arr)
        else:
            if shape is None or dtype is None:
                raise ValueError("allocate_buffer needs an array, or shape and dtype")
            name = dtype_name(dtype)
            logical = tuple(shape)
            data = None
        alloc_shape = logical if padded_shape is None else tuple(padded_shape)
        return self._rt.allocate_buffer(device, core, space, name, alloc_shape, logical, data)

    def free_buffer(self, device: int, core: int, space: str | int, buffer_id: int) -> None:
        self._rt.free_buffer(device, core, space, buffer_id)

    def buffer_info(self, device: int, core: int, space: str | int, buffer_id: int) -> BufferInfo:
        name, shape, logical, refs = self._rt.buffer_info(device, core, space, buffer_id)
        return BufferInfo(_DTYPES[name], tuple(shape), tuple(logical), refs)

    def buffer_content(self, device: int, core: int, space: str | int, buffer_id: int) -> np.ndarray:
        """A copy of the whole allocated buffer (padding included)."""
        info = self.buffer_info(device, core, space, buffer_id)
        raw = self._rt.buffer_content(device, core, space, buffer_id)
        return np.frombuffer(raw, dtype=info.dtype).reshape(info.shape)

    def load(self, device: int, core: int, space: str | int, buffer_id: int, region: RegionSpec = None) -> np.ndarray:
        name, shape = self._rt.region_layout(device, core, space, buffer_id, region, "read")
        raw = self._rt.load(device, core, space, buffer_id, region)
        return np.frombuffer(raw, dtype=_DTYPES[name]).reshape(shape)

    def store(
        self, device: int, core: int, space: str | int, buffer_id: int, value: Any, region: RegionSpec = None
    ) -> None:
        """Writes ``value`` (broadcast to the region's shape; same dtype)."""
        # Bounds are checked before the value is broadcast to the region.
        name, shape = self._rt.region_layout(device, core, space, buffer_id, region, "write")
        data = _as_value(value, _DTYPES[name], tuple(shape))
        self._rt.store(device, core, space, buffer_id, region, data)

    def swap(
        self,
        device: int,
        core: int,
        space: str | int,
        buffer_id: int,
        value: Any,
        region: RegionSpec = None,
        mask: Any = None,
    ) -> np.ndarray:
        """Stores ``value`` where ``mask`` is true (everywhere without a mask)
        and returns the previous contents (masked-off elements: ``value``)."""
        name, shape = self._rt.region_layout(device, core, space, buffer_id, region, "swap" if mask is None else None)
        dtype, shape = _DTYPES[name], tuple(shape)
        data = _as_value(value, dtype, shape)
        raw_mask = None if mask is None else _as_value(np.asarray(mask, dtype=bool), np.dtype(bool), shape, "mask")
        raw = self._rt.swap(device, core, space, buffer_id, region, data, None, raw_mask)
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    # --------------------------------------------------------- semaphores

    def allocate_semaphores(self, device: int, core: int | None = None, kind: str = "regular", count: int = 1) -> int:
        """Allocates ``count`` consecutive semaphores; returns the first id."""
        return self._rt.allocate_semaphores(device, core, kind, count)

    def barrier_semaphore(self, device: int, collective_id: int) -> int:
        return self._rt.barrier_semaphore(device, collective_id)

    def signal(
        self,
        device: int,
        core: int,
        sem: int,
        inc: int = 1,
        *,
        target_device: int | None = None,
        target_core: int | None = None,
    ) -> None:
        self._rt.signal(device, core, sem, inc, target_device, target_core)

    def wait(self, device: int, core: int, sem: int, value: int = 1) -> None:
        """Blocks (GIL released) until the count reaches ``value``; subtracts it."""
        self._rt.wait(device, core, sem, value)

    def read(self, device: int, core: int, sem: int) -> int:
        return self._rt.read(device, core, sem)

    def dma_start(
        self,
        device: int,
        core: int,
        src: BufferRef,
        dst: BufferRef,
        dst_sem: int,
        *,
        src_sem: int | None = None,
        dst_device: int | None = None,
    ) -> None:
        """Copies ``src`` to ``dst``, each ``(space, buffer_id[, region])``.

        A remote copy sets both ``src_sem`` and ``dst_device``; it lands on
        the same local core of ``dst_device``.
        """
        request = DmaStart(_buffer_ref(src, "src"), _buffer_ref(dst, "dst"), dst_sem, src_sem, dst_device)
        self._rt.dma_start(device, core, request)

    def dma_wait(self, device: int, core: int, sem: int, nbytes: int) -> None:
        self._rt.dma_wait(device, core, sem, nbytes)

    def device_barrier(self, device: int) -> None:
        self._rt.device_barrier(device)

    def leaks(self, device: int | None = None) -> list[Leak]:
        """Semaphores with a non-zero count, or with DMAs started and never
        waited for, on ``device`` (every device for None)."""
        return [Leak(*leak[:5], tuple(leak[5])) for leak in self._rt.leaks(device)]

    def leave(self, device: int) -> None:
        """Device ``device``'s program is done (with ``detect_deadlocks``:
        its cores can no longer signal anyone)."""
        self._rt.leave(device)

    # ----------------------------------------------------------- timeline

    def trace_json(self) -> str:
        """The timeline so far as Chrome trace-event JSON (see
        :mod:`mosaic_rt.timeline`); needs ``Runtime(trace=True)``."""
        text = self._rt.trace_json()
        if text is None:
            raise ValueError("this runtime does not trace: create it with Runtime(trace=True)")
        return text

    def write_trace(self, path) -> None:
        """Writes :meth:`trace_json` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.trace_json())

    # ------------------------------------------------------------ failure

    def fail(self, message: str, device: int, core: int, kind: str = "MosaicRuntimeError") -> BaseException:
        """Simulates a failure of (device, core): wakes every parked waiter
        (they raise ``KernelAborted``). Returns the recorded root cause."""
        return self._rt.fail(message, device, core, kind)

    def failure(self) -> BaseException | None:
        return self._rt.failure()


def _buffer_ref(ref: BufferRef, what: str) -> DmaSide:
    if not isinstance(ref, (tuple, list)) or len(ref) not in (2, 3):
        raise TypeError(f"{what} must be (space, buffer_id) or (space, buffer_id, region)")
    return DmaSide(*ref)
