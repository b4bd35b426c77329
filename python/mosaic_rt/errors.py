"""Exceptions raised by mosaic_rt.

User mistakes keep Python's usual types (``ValueError`` for bad ids, id
collisions, shape/dtype mismatches; ``IndexError`` for out-of-bounds
accesses). Everything that is about the simulated machine itself derives from
:class:`MosaicRuntimeError`.
"""

from __future__ import annotations


class MosaicRuntimeError(RuntimeError):
    """Base class of mosaic_rt's own runtime failures."""

    def __init__(self, message: str = "", *, device: int | None = None, core: int | None = None):
        super().__init__(message)
        self.device = device
        self.core = core


class KernelAborted(MosaicRuntimeError):
    """This core stopped because another core failed first.

    ``root`` holds the exception of the core that failed first (the root
    cause), already converted to its Python type.
    """

    def __init__(
        self,
        message: str = "",
        *,
        root: BaseException | None = None,
        device: int | None = None,
        core: int | None = None,
    ):
        super().__init__(message, device=device, core=core)
        self.root = root


class WaitTimeout(MosaicRuntimeError, TimeoutError):
    """A blocking wait (semaphore, DMA or barrier) exceeded its timeout."""


class DeadlockError(MosaicRuntimeError):
    """Every live core is blocked and nothing pending can wake any of them."""


class SemaphoreLeakError(MosaicRuntimeError):
    """Semaphores were left with a non-zero count when the kernel ended."""


class RaceError(MosaicRuntimeError):
    """A data race (``InterpretParams(detect_races=True, on_race="raise")``):
    the message names both accesses (device, core or DMA, read or write,
    buffer, index ranges, source lines)."""


class RaceWarning(RuntimeWarning):
    """A data race found with ``on_race="warn"``."""


class SemaphoreLeakWarning(RuntimeWarning):
    """A semaphore left non-zero (or a DMA never waited for) at kernel exit,
    with ``on_semaphore_leak="warn"``."""


class MisuseWarning(RuntimeWarning):
    """A suspicious use of semaphores or DMAs that a legitimate kernel could
    also make (e.g. a DMA semaphore waited with a size that matches none of
    the DMAs pending on it)."""


class UninitializedReadError(ValueError):
    """A read of kernel-local memory (VMEM, SMEM, scratch, semaphore
    memory) that nothing wrote in this launch (``detect_uninitialized=True``).
    The message names the buffer, the never-written index range (e.g.
    ``[0:8, 64:128]``) and the region read; ``device`` / ``core`` say where."""


class TpuCompileError(ValueError):
    """A kernel that runs under mosaic_rt does not compile for a TPU
    generation it was checked against (``InterpretParams(tpu_target=...)``,
    ``MOSAIC_RT_TPU_TARGET``, pytest's ``--mosaic-rt-tpu-target``).

    A ``ValueError``, as the Pallas TPU lowering's own rejections of a kernel
    (block shapes, tiling) are on a TPU: it is a mistake in the kernel, not
    a failure of the simulated machine. The message names the kernel, its
    source line, the generation and the compiler's message in full;
    ``kernel``, ``source``, ``generation`` and ``compiler_message`` hold
    them, ``compiler_error`` the compiler's own exception (a ``ValueError``
    or ``NotImplementedError`` from the lowering, a
    ``jax.errors.JaxRuntimeError`` from Mosaic / XLA:TPU) when it was raised
    in this call (``None`` when the answer came from the cache)."""

    def __init__(
        self,
        message: str = "",
        *,
        kernel: str | None = None,
        source: str | None = None,
        generation: str | None = None,
        compiler_message: str | None = None,
    ):
        super().__init__(message)
        self.kernel = kernel
        self.source = source
        self.generation = generation
        self.compiler_message = compiler_message
        self.compiler_error: BaseException | None = None


class TpuCompileWarning(UserWarning):
    """A :class:`TpuCompileError` reported as a warning
    (``InterpretParams(tpu_check="warn")``), or a kernel the TPU compile
    check cannot check yet."""


class JaxVersionError(ImportError):
    """The installed jax lacks a JAX internal mosaic_rt relies on (it moved
    in a jax release newer than mosaic_rt was tested with). The message
    names the jax version and the tested range; ``jax_version`` and
    ``tested`` hold them, ``__cause__`` the original ImportError /
    AttributeError. An ImportError: the fix is installing another jax or
    mosaic_rt, as for any unusable dependency."""

    def __init__(self, message: str = "", *, jax_version: str | None = None, tested: str | None = None):
        super().__init__(message)
        self.jax_version = jax_version
        self.tested = tested


class UntestedJaxWarning(UserWarning):
    """The installed jax is newer than any release this mosaic_rt was tested
    with (issued once, at import)."""


# Names used by the native layer (``ErrorKind::python_type`` in Rust).
_BY_NAME: dict[str, type[BaseException]] = {
    "ValueError": ValueError,
    "IndexError": IndexError,
    "NotImplementedError": NotImplementedError,
    "RuntimeError": RuntimeError,
    "MemoryError": MemoryError,
    "KernelAborted": KernelAborted,
    "WaitTimeout": WaitTimeout,
    "DeadlockError": DeadlockError,
    "SemaphoreLeakError": SemaphoreLeakError,
    "RaceError": RaceError,
    "UninitializedReadError": UninitializedReadError,
    "MosaicRuntimeError": MosaicRuntimeError,
}


def exception_type(name: str) -> type[BaseException]:
    """The exception class for a native error kind name."""
    return _BY_NAME.get(name, MosaicRuntimeError)


def _from_native(
    kind: str, message: str, device: int | None, core: int | None, root: BaseException | None
) -> BaseException:
    """Builds (does not raise) the exception for a native error.

    Called by the native module. Builtin types (ValueError, ...) get
    ``device``/``core`` attributes too, so every error says where it happened.
    """
    cls = exception_type(kind)
    if cls is KernelAborted:
        return KernelAborted(message, root=root, device=device, core=core)
    if issubclass(cls, MosaicRuntimeError):
        return cls(message, device=device, core=core)
    exc = cls(message)
    exc.device = device
    exc.core = core
    return exc


class MultiProcessError(MosaicRuntimeError):
    """A launch spanning processes cannot run: MPI is missing or the job's
    processes do not match (the message says what to install or change)."""
