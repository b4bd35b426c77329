"""One simulated TPU pod across many processes and hosts, on MPI.

Under ``mpirun -np N python script.py``, each process owns some devices of
a global mesh (multi-controller JAX, CPU collectives over gloo); a
``pallas_call`` / ``core_map`` under ``shard_map`` over that mesh runs
with mosaic_rt in every process, and what its cores do to devices of
other processes (remote DMAs, signals, barrier semaphores, the device
barrier) travels as MPI messages, moved by a native progress thread
(``mosaic_rt_mpi``, resolving MPI with ``dlsym`` in the library mpi4py
loaded: the wheel links no MPI).

::

    import mosaic_rt.distributed
    mosaic_rt.distributed.initialize(local_device_count=8)  # jax.distributed + MPI
    ...  # jax.devices() is now every process's devices

This module is the one place mosaic_rt imports mpi4py, and only when a
launch spanning processes needs it (or `initialize` / `attach` is called):
a single-process run never touches MPI.
"""

from __future__ import annotations

import atexit
import os
import socket

from mosaic_rt import _native
from mosaic_rt.errors import MultiProcessError

INSTALL = 'pip install "mosaic_rt[mpi]"'

# The communicator mosaic_rt's frames travel on (a duplicate of
# COMM_WORLD: the user's own MPI traffic never matches ours). Kept alive
# for the process's life: the native transport holds its handle.
_comm = None


def _mpi(reason: str):
    """mpi4py's MPI module, or a `MultiProcessError` naming the install line."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise MultiProcessError(
            f"{reason}, and the kernel sends DMAs or signals between devices: mosaic_rt carries them "
            f"between processes over MPI, which is not installed ({e}). {INSTALL} and start the "
            "processes with mpirun (see docs/multi-process.md)."
        ) from None
    return MPI


def initialize(*, local_device_count: int | None = None, coordinator_port: int | None = None) -> None:
    """Starts multi-controller JAX over this MPI job and attaches mosaic_rt.

    Call once per process, first thing, under ``mpirun``: rank 0's host
    coordinates ``jax.distributed`` (``coordinator_port``: a free port by
    default), CPU collectives use gloo, and ``local_device_count`` CPU
    devices per process (default: jax's setting)."""
    MPI = _mpi("mosaic_rt.distributed.initialize() was called")
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    address = None
    if rank == 0:
        address = f"{socket.gethostname()}:{coordinator_port or _free_port()}"
    address = world.bcast(address, root=0)
    import jax

    if local_device_count is not None:
        jax.config.update("jax_num_cpu_devices", int(local_device_count))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(address, num_processes=size, process_id=rank)
    attach(reason="mosaic_rt.distributed.initialize() was called")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def attach(*, reason: str = "mosaic_rt.distributed.attach() was called") -> None:
    """Attaches this process to the other processes of its JAX job over MPI
    (idempotent). Collective: every process of the job must call it (a
    launch spanning processes calls it when it first needs it). The MPI
    job's ranks must be the JAX job's processes (start them with mpirun)."""
    global _comm
    if _native.mpi_process() is not None:
        return
    MPI = _mpi(reason)
    import jax

    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise MultiProcessError(
            "MPI was initialised without MPI_THREAD_MULTIPLE; mosaic_rt's progress thread needs it "
            "(leave mpi4py.rc.thread_level at its default, 'multiple')"
        )
    world = MPI.COMM_WORLD
    process, count = jax.process_index(), jax.process_count()
    if world.Get_size() != count:
        raise MultiProcessError(
            f"{reason}, but this MPI job has {world.Get_size()} process(es) and the JAX job {count}: start "
            "every JAX process as a rank of one mpirun (e.g. mpirun -np "
            f"{count} python script.py)"
        )
    comm = world.Dup()
    by_rank = comm.allgather(process)
    if sorted(by_rank) != list(range(count)):
        raise MultiProcessError(f"the MPI ranks name JAX processes {by_rank}, not each of 0..{count - 1} once")
    ranks = [by_rank.index(p) for p in range(count)]
    # mpi4py finalises MPI at exit (its atexit hook, registered at import,
    # runs after ours): the progress thread must be quiet by then.
    atexit.register(_native.mpi_detach)
    _native.mpi_attach(
        MPI.__file__,
        MPI._handleof(comm),
        MPI._handleof(MPI.BYTE),
        MPI.ANY_SOURCE,
        MPI._sizeof(MPI.Status),
        process,
        ranks,
    )
    _comm = comm


def attached() -> bool:
    """Whether this process is attached to the others."""
    return _native.mpi_process() is not None


def is_mpi_job() -> bool:
    """Whether this process was started by an MPI launcher (no MPI loaded)."""
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))
