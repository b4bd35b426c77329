"""Asynchronous (local and remote) copies: descriptors that bind Mosaic's
`dma_start` / `dma_wait` primitives exactly as `jax.experimental.pallas.tpu`
does, so TPU lowering and both interpreters see the same program. Our extra
checks all run before anything is bound.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from jax._src import source_info_util
from jax._src import tree_util
from jax._src.pallas.mosaic.primitives import dma_start_p, dma_wait_p
from jax._src.pallas.primitives import DeviceIdType

from mosaic_rt.tpu._device_ids import check_device_id

_INVARIANT_MESSAGE = "Either both or neither `src_sem` and `device_id` can be set."


class UnusedAsyncCopyWarning(UserWarning):
    """An AsyncCopyDescriptor was collected without being started or waited."""


def _flatten_operands(src_ref, dst_ref, dst_sem, src_sem, device_id):
    # The eqn's `tree` param must be the treedef Mosaic's rules unflatten
    # with: the tracing registry's flattening of this 5-tuple.
    return tree_util.tracing_registry.flatten(
        (src_ref, dst_ref, dst_sem, src_sem, device_id))


def _check_priority(priority: Any) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(
            f"DMA priority must be a Python int, got {type(priority).__name__}"
            f" {priority!r}.")
    if priority < 0:
        raise ValueError(f"DMA priority must be non-negative, got {priority}.")


def _creation_site() -> tuple[str, int] | None:
    # The dataclass-generated __init__ lives in "<string>": not the user's.
    frames = source_info_util.user_frames(source_info_util.current().traceback)
    for frame in frames:
        generated = (frame.file_name == "<string>"
                     and frame.function_name.endswith("__init__"))
        if not generated:
            return frame.file_name, frame.start_line
    return None


@dataclasses.dataclass(eq=False)
class AsyncCopyDescriptor:
    """One DMA from `src_ref` to `dst_ref`, completion counted on `dst_sem`.

    A remote copy (to device `device_id`) also signals `src_sem` on the
    sending device once the data has left it.
    """

    src_ref: Any
    dst_ref: Any
    dst_sem: Any
    src_sem: Any | None
    device_id: Any | None
    device_id_type: DeviceIdType = DeviceIdType.MESH
    _used: bool = dataclasses.field(default=False, init=False, repr=False)
    _site: tuple[str, int] | None = dataclasses.field(
        default=None, init=False, repr=False)

    def __post_init__(self):
        if (self.src_sem is None) != (self.device_id is None):
            raise ValueError(_INVARIANT_MESSAGE)
        check_device_id(self.device_id, self.device_id_type)
        # Only a fully valid descriptor can be "forgotten"; set last.
        self._site = _creation_site() or ("<unknown>", 0)

    @property
    def is_remote(self) -> bool:
        return self.src_sem is not None

    def start(self, priority: int = 0, *, add: bool = False) -> None:
        self._used = True  # a failed start is reported by its error already
        _check_priority(priority)
        if not isinstance(add, bool):
            raise TypeError(f"`add` must be a bool, got {add!r}.")
        flat, tree = _flatten_operands(self.src_ref, self.dst_ref, self.dst_sem,
                                       self.src_sem, self.device_id)
        dma_start_p.bind(*flat, tree=tree, device_id_type=self.device_id_type,
                         priority=priority, add=add)

    def wait(self) -> None:
        """Waits for the whole copy: the send side first when remote."""
        if self.is_remote:
            self.wait_send()
        self.wait_recv()

    def wait_recv(self) -> None:
        self._used = True
        flat, tree = _flatten_operands(self.src_ref, self.dst_ref, self.dst_sem,
                                       self.src_sem, self.device_id)
        dma_wait_p.bind(*flat, tree=tree, device_id_type=self.device_id_type,
                        insert_dummy_device=False)

    def wait_send(self) -> None:
        self._used = True
        if not self.is_remote:
            raise ValueError("Cannot `wait_send` on a local copy.")
        # dma_wait waits on the third operand, so the send wait swaps the
        # roles: it waits on src_sem for the bytes of dst_ref's shape.
        flat, tree = _flatten_operands(self.dst_ref, self.src_ref, self.src_sem,
                                       self.dst_sem, self.device_id)
        dma_wait_p.bind(*flat, tree=tree, device_id_type=self.device_id_type,
                        insert_dummy_device=True)

    def __del__(self):
        if self._used or self._site is None:
            return
        file_name, line = self._site
        try:
            warnings.warn_explicit(
                f"AsyncCopyDescriptor created at {file_name}:{line} was never"
                " started or waited; call `.start()` (and later `.wait()`) on it,"
                " or use async_copy / async_remote_copy.",
                UnusedAsyncCopyWarning, file_name, line)
        except Exception:  # interpreter shutdown: nothing left to report to
            pass


def make_async_copy(src_ref, dst_ref, sem) -> AsyncCopyDescriptor:
    """Describes a copy within this device; nothing happens until `.start()`."""
    return AsyncCopyDescriptor(src_ref, dst_ref, sem, None, None,
                               DeviceIdType.MESH)


def async_copy(src_ref, dst_ref, sem, *, priority: int = 0,
               add: bool = False) -> AsyncCopyDescriptor:
    """Starts a local copy and returns its descriptor (to `.wait()` on)."""
    copy = make_async_copy(src_ref, dst_ref, sem)
    copy.start(priority=priority, add=add)
    return copy


def make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id,
                           device_id_type: DeviceIdType = DeviceIdType.MESH,
                           ) -> AsyncCopyDescriptor:
    """Describes a copy from this device's `src_ref` to `dst_ref` on `device_id`.

    `send_sem` (here) and `recv_sem` (on the target) count the bytes sent and
    received. MESH ids are tuples of coordinates or {axis: index} dicts;
    LOGICAL ids are scalar device indices.
    """
    return AsyncCopyDescriptor(src_ref, dst_ref, recv_sem, send_sem, device_id,
                               device_id_type)


def async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id,
                      device_id_type: DeviceIdType = DeviceIdType.MESH,
                      ) -> AsyncCopyDescriptor:
    """Starts a remote copy and returns its descriptor."""
    copy = make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem,
                                  device_id, device_id_type)
    copy.start()
    return copy
