# Hand-kept stubs of the native module (rust/python). Keep in sync with
# rust/python/src/runtime.rs. Buffers are C-contiguous objects exporting the
# buffer protocol, or numpy arrays of ml_dtypes' types (bfloat16, int4,
# float8_*, ...), which are read through a uint8 view. Sub-byte types are
# one element per byte, as numpy stores them.
from typing import Any, Sequence

from typing_extensions import Buffer

from mosaic_rt.ffi.requests import DmaStart

Space = str | int  # "vmem", "vmem_shared", "smem", "cmem", "semaphore_mem", "hbm", "any" or 0-6
RegionEntry = int | tuple[int, int] | tuple[int, int, int]
RegionSpec = Sequence[RegionEntry] | None  # the binding's RegionArg

class Runtime:
    def __init__(
        self,
        num_devices: int = 1,
        cores_per_device: int = 1,
        dma_execution_mode: str = "on_wait",
        out_of_bounds_reads: str = "raise",
        uninitialized_memory: str = "nan",
        wait_timeout: float | None = 120.0,
        detect_races: bool = False,
        detect_deadlocks: bool = False,
        detect_uninitialized: bool = False,
        trace: bool = False,
    ) -> None: ...
    @property
    def num_devices(self) -> int: ...
    @property
    def cores_per_device(self) -> int: ...
    @property
    def dma_execution_mode(self) -> str: ...
    @property
    def out_of_bounds_reads(self) -> str: ...
    @property
    def uninitialized_memory(self) -> str: ...
    @property
    def wait_timeout(self) -> float | None: ...
    @property
    def detect_uninitialized(self) -> bool: ...
    # memory
    def allocate_buffer(
        self,
        device: int,
        core: int | None,
        space: Space,
        dtype: str | Any,  # a name ("float8_e4m3fn") or anything numpy.dtype() takes
        shape: Sequence[int],
        logical_shape: Sequence[int] | None = None,
        data: Buffer | None = None,
    ) -> int: ...
    def free_buffer(self, device: int, core: int, space: Space, id: int) -> None: ...
    def buffer_info(self, device: int, core: int, space: Space, id: int) -> tuple[str, list[int], list[int], int]: ...
    def buffer_content(self, device: int, core: int, space: Space, id: int) -> bytearray: ...
    def region_layout(
        self,
        device: int,
        core: int,
        space: Space,
        id: int,
        region: RegionSpec = None,
        access: str | None = None,  # "read" | "write" | "swap": check bounds first
    ) -> tuple[str, list[int]]: ...
    # Without `out`, load/swap return the bytes in a new bytearray.
    def load(
        self, device: int, core: int, space: Space, id: int, region: RegionSpec = None, out: Buffer | None = None
    ) -> bytearray | None: ...
    def store(self, device: int, core: int, space: Space, id: int, region: RegionSpec, data: Buffer) -> None: ...
    def swap(
        self,
        device: int,
        core: int,
        space: Space,
        id: int,
        region: RegionSpec,
        data: Buffer,
        out: Buffer | None = None,
        mask: Buffer | None = None,
    ) -> bytearray | None: ...
    # semaphores
    def allocate_semaphores(
        self, device: int, core: int | None = None, kind: str = "regular", count: int = 1
    ) -> int: ...
    def barrier_semaphore(self, device: int, collective_id: int) -> int: ...
    def signal(
        self,
        device: int,
        core: int,
        sem: int,
        inc: int = 1,
        target_device: int | None = None,
        target_core: int | None = None,
    ) -> None: ...
    def wait(self, device: int, core: int, sem: int, value: int = 1) -> None: ...
    def read(self, device: int, core: int, sem: int) -> int: ...
    def dma_start(self, device: int, core: int, request: DmaStart) -> None: ...  # fields read by name
    def dma_wait(self, device: int, core: int, sem: int, nbytes: int) -> None: ...
    def device_barrier(self, device: int) -> None: ...
    def leaks(
        self, device: int | None = None
    ) -> list[tuple[int, str, int, int, int, list[str]]]: ...  # (sem, kind, device, core, count, pending DMAs)
    def semaphore_pages_in_use(self) -> int: ...
    # failure
    def fail(self, message: str, device: int, core: int, kind: str = "MosaicRuntimeError") -> BaseException: ...
    def failure(self) -> BaseException | None: ...
    def leave(self, device: int) -> None: ...
    # Chrome trace-event JSON of the timeline so far; None without trace=True.
    def trace_json(self) -> str | None: ...

# The core's spellings and codes (one source; Python keeps no table of its own).
DTYPES: dict[str, int]  # the one dtype table: codes by numpy name ("bool": 0, ..., "complex128": 27)
SETTINGS: dict[str, tuple[str, ...]]  # string launch options: {"dma_execution_mode": ("eager", "on_wait"), ...}
MEMORY_SPACES: dict[str, int]  # {"vmem": 0, "vmem_shared": 1, ..., "hbm": 5, "any": 6}
SEMAPHORE_KINDS: tuple[str, ...]  # ("regular", "dma", "barrier")
LEAK_POLICIES: tuple[str, ...]  # ("ignore", "warn", "raise")
SCALAR_OPS: dict[str, int]  # scalar-program op codes by name ("add": 1, ..., "index": 28)
SCALAR_TYPES: dict[str, int]  # scalar-program types: their DTYPES codes ("bool": 0, "int8": 1, ..., "uint64": 8)
SCALAR_FORMAT: int  # the scalar-program wire format version
SCALAR_MAX_VALUES: int  # most values (inputs + instructions) in one scalar program
VECTOR_OPS: dict[str, int]  # vector-program op codes by jax primitive name ("const": 0, "add": 1, ..., "fma": 25)
VECTOR_TYPES: dict[str, int]  # vector-program types: their DTYPES codes ("bool": 0, ..., "float32": 11, "float64": 12)
VECTOR_FORMAT: int  # the vector-program wire format version
VECTOR_MAX_VALUES: int  # most values (inputs + instructions) in one vector program
BATCH_OPS: tuple[str, ...]  # target names a `batch` call may hold, by op code
BATCH_LIMITS: tuple[int, int, int, int]  # most members, member operands, member results, attributes
# Each op's wire layout (rust/ffi/src/wire.rs): {target: (operands, optional
# operands, rest -- the variadic operands described, "" for none --,
# attributes, optional attributes)}.
OP_LAYOUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...], tuple[str, ...]]]
REGION_KEYS: dict[str, tuple[str, str, str, str]]  # {prefix: (sizes, strides, squeezed, fixed)}
DYNAMIC_START: int  # in a region's `fixed` starts: "take this start from the operand"
DYNAMIC_SIZE: int  # in a region's `sizes`: "take this size from the operand, after the starts"
TAIL_STARTS: str  # attribute: how many trailing start operands an op has
THEN_WAIT_ATTRS: tuple[str, str]  # attributes of trailing waits: (bytes, sites)
BITFIELDS: dict[str, tuple[tuple[str, int, int], ...]]  # {packed attribute: ((field, shift, width), ...)}

def unpack_bitfield(attr: str, packed: int) -> dict[str, int]: ...  # as the handlers read it
def race_results() -> tuple[bool, int, list[str]] | None: ...
def take_error_ex(n: int) -> tuple[str, str, int | None, int | None, int | None, str | None] | None: ...

# Source sites: a process-wide table text <-> id (from 1; 0 = unknown).
def intern_site(text: str) -> int: ...
def site_text(id: int) -> str | None: ...

# Reports of policy "warn": (category "race" | "leak" | "misuse", text, details).
def take_reports() -> list[tuple[str, str, dict[str, int | str | None]]]: ...
def pending_reports() -> int: ...

# Failures outside mosaic_rt's ops (user host callbacks) and callback marking.
# Returns the launch's root cause as a "[mosaic_rt#N] Type: message" text
# (None if the launch is unknown).
def fail_launch(handle: int, device: int, core: int, exc_key: int, type_name: str, message: str) -> str | None: ...
def callback_state(handle: int, device: int, core: int, inside: bool) -> None: ...
def ffi_targets() -> dict[str, Any]: ...

# Diagnostics: runtimes alive now (unfinished launches, Runtime objects) and
# bytes of finished launches' allocations parked for reuse.
def live_runtimes() -> int: ...
def pooled_bytes() -> int: ...

# Trace files written by kernel launches of this process, oldest first.
def trace_files() -> list[str]: ...

# Multi-process jobs (mosaic_rt.distributed; rust/python/src/mpi.rs).
def mpi_attach(
    library: str, comm: int, byte: int, any_source: int, status_size: int, process: int, ranks: list[int]
) -> None: ...
def mpi_process() -> int | None: ...
def mpi_detach() -> None: ...
def __getattr__(name: str) -> Any: ...  # FFI entry points (rust/python/src/ffi.rs)
