"""The multi-process bench's measurements, run under mpirun.

`launch(part, np, devices)` starts ``mpirun -np NP python -m
mosaic_rt.bench.multi_process PART`` (the row, `row_multi_process`); each
rank runs `PART` here and rank 0 prints one ``MP-RESULT <json>`` line.
Parts: ``ping`` (a semaphore ping-pong between devices of two processes
vs MPI's own ping-pong of a frame's bytes), ``bandwidth`` (a remote DMA vs
MPI's own transfer of the same bytes), ``permute`` (a right-permute over
every device of every process vs XLA's ppermute: time per hop, peak RSS).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# Largest mesh checked against XLA's own ppermute (gloo) itself.
XLA_REFERENCE_MAX = 64

# A remote signal's frame: header (process, uid, seq, tag) + core, sem, inc.
SIGNAL_FRAME_BYTES = 4 + 8 + 8 + 1 + 4 + 4 + 8


def mpirun() -> str | None:
    here = Path(sys.executable).parent / "mpirun"
    return str(here) if here.exists() else shutil.which("mpirun")


def mpirun_command(run: str, np_: int) -> list[str]:
    """``mpirun -np NP`` with what this MPI's launcher needs to start more
    ranks than CPUs, as root (Open MPI's flags; MPICH's hydra needs none)."""
    cmd = [run, "-np", str(np_)]
    version = subprocess.run([run, "--version"], capture_output=True, text=True, timeout=60)
    if "Open MPI" in version.stdout + version.stderr or "prterun" in version.stdout + version.stderr:
        cmd.append("--oversubscribe")
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd


def launch(part: str, np_: int, devices: int, timeout: float = 900, **env) -> dict:
    """Runs `part` on `np_` ranks of `devices` CPU devices; rank 0's result."""
    run = mpirun()
    if run is None:
        return {"error": 'no mpirun: pip install "mosaic_rt[mpi]"'}
    cmd = [*mpirun_command(run, np_), sys.executable, "-m", "mosaic_rt.bench.multi_process", part]
    e = dict(os.environ, MRT_DEVICES=str(devices), JAX_PLATFORMS="cpu", **{k: str(v) for k, v in env.items()})
    e.pop("XLA_FLAGS", None)
    try:
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{part}: mpirun did not finish in {timeout:.0f}s"}
    for line in p.stdout.splitlines():
        if line.startswith("MP-RESULT "):
            return json.loads(line[len("MP-RESULT ") :])
    return {"error": f"{part}: exit {p.returncode}: {p.stderr[-2000:]}"}


# --------------------------------------------------------- inside mpirun


def _setup():
    import mosaic_rt.distributed

    mosaic_rt.distributed.initialize(local_device_count=int(os.environ.get("MRT_DEVICES", "1")))
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _timed(fn, reps: int, best: bool = False) -> float:
    """Median (or, with `best`, least) seconds of `fn()` (blocked until
    ready) over `reps` calls."""
    import jax

    jax.block_until_ready(fn())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return min(times) if best else sorted(times)[len(times) // 2]


def _shard_call(kernel, out_shape, scratch, x, mesh):
    import jax
    from jax.experimental import pallas as pl
    from jax.sharding import PartitionSpec as P

    import mosaic_rt

    params = mosaic_rt.InterpretParams(dma_execution_mode=os.environ.get("MRT_MODE", "eager"))

    def body(v):
        return pl.pallas_call(kernel, out_shape=out_shape, scratch_shapes=scratch, interpret=params)(v)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))


def _mesh_input(rows: int, cols: int = 128):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("x",))
    n = len(jax.devices())
    full = np.arange(n * rows * cols, dtype=np.float32).reshape(n * rows, cols)
    return mesh, full, jax.make_array_from_callback(full.shape, NamedSharding(mesh, P("x")), lambda i: full[i])


def ping(comm) -> dict:
    """Round trip of a signal between the first and last device (two
    processes), marginal over the number of rounds, vs mpi4py ping-pong."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    mesh, _, x = _mesh_input(8)
    n = len(jax.devices())

    def make(rounds):
        def kernel(x_ref, o_ref, sem):
            me = jax.lax.axis_index("x")
            o_ref[...] = x_ref[...]

            @pl.when(me == 0)
            def _():
                @pl.loop(0, rounds)
                def _(i):
                    pl.semaphore_signal(sem, 1, device_id=(n - 1,))
                    pl.semaphore_wait(sem, 1)

            @pl.when(me == n - 1)
            def _():
                @pl.loop(0, rounds)
                def _(i):
                    pl.semaphore_wait(sem, 1)
                    pl.semaphore_signal(sem, 1, device_id=(0,))

        f = _shard_call(kernel, jax.ShapeDtypeStruct((8, 128), jnp.float32), [pltpu.SemaphoreType.REGULAR], x, mesh)
        return lambda: f(x)

    # Best of several, as MPI's own is measured: both see the same machine
    # (other processes' load moves both).
    small, big = 10, 2010
    t_small, t_big = _timed(make(small), 5, best=True), _timed(make(big), 5, best=True)
    ours = (t_big - t_small) / (big - small)
    if comm.Get_size() == 1:  # the same kernel with both devices in one process
        return {"ours_us": ours * 1e6, "rounds": big - small}
    mpi = _mpi_ping(comm, SIGNAL_FRAME_BYTES, 20000)
    return {"ours_us": ours * 1e6, "mpi_us": mpi * 1e6, "ratio": ours / mpi, "rounds": big - small}


def _mpi_ping(comm, nbytes: int, rounds: int) -> float:
    """Seconds per round trip of `nbytes` between ranks 0 and last (mpi4py)."""
    import numpy as np

    buf = np.zeros(nbytes, np.uint8)
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    comm.Barrier()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(rounds):
            if rank == 0:
                comm.Send(buf, dest=last)
                comm.Recv(buf, source=last)
            elif rank == last:
                comm.Recv(buf, source=0)
                comm.Send(buf, dest=0)
        best = min(best, (time.perf_counter() - t) / rounds)
        comm.Barrier()
    return best


def bandwidth(comm) -> dict:
    """A remote DMA of `MRT_MIB` MiB from the first to the last device
    (another process), marginal over the number of DMAs, vs MPI sending
    the same bytes (mpi4py, one way, acknowledged at the end)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    mib = float(os.environ.get("MRT_MIB", "8"))
    rows = int(mib * 1024 * 1024 / (128 * 4))
    mesh, _, x = _mesh_input(rows)
    n = len(jax.devices())

    def make(k):
        def kernel(x_ref, o_ref, send, recv):
            me = jax.lax.axis_index("x")

            @pl.when(me == 0)
            def _():
                @pl.loop(0, k)
                def _(i):
                    c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(n - 1,))
                    c.start()
                    c.wait_send()

            @pl.when(me == n - 1)
            def _():
                @pl.loop(0, k)
                def _(i):
                    pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(0,)).wait_recv()

        scratch = [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA]
        f = _shard_call(kernel, jax.ShapeDtypeStruct((rows, 128), jnp.float32), scratch, x, mesh)
        return lambda: f(x)

    # Best of several, as MPI's own is measured (other processes' load moves both).
    t1, t9 = _timed(make(1), 5, best=True), _timed(make(9), 5, best=True)
    per_dma = (t9 - t1) / 8
    nbytes = rows * 128 * 4
    mpi = _mpi_stream(comm, nbytes, 8)
    return {
        "mib": nbytes / 2**20,
        "ours_gbps": nbytes / per_dma / 1e9,
        "mpi_gbps": nbytes / mpi / 1e9,
        "ratio": per_dma / mpi,
    }


def _mpi_stream(comm, nbytes: int, count: int) -> float:
    """Seconds per message of `nbytes` streamed from rank 0 to the last."""
    import numpy as np

    buf = np.ones(nbytes, np.uint8)
    ack = np.zeros(1, np.uint8)
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    best = float("inf")
    for _ in range(3):
        comm.Barrier()
        t = time.perf_counter()
        if rank == 0:
            for _ in range(count):
                comm.Send(buf, dest=last)
            comm.Recv(ack, source=last)
        elif rank == last:
            for _ in range(count):
                comm.Recv(buf, source=0)
            comm.Send(ack, dest=0)
        best = min(best, (time.perf_counter() - t) / count)
    return best


def permute(comm) -> dict:
    """A right-permute over every device (one remote DMA each), checked
    against XLA's ppermute; time per launch, per hop, peak RSS per process."""
    import resource

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import PartitionSpec as P

    mesh, full, x = _mesh_input(8)
    n = len(jax.devices())

    def kernel(x_ref, o_ref, send, recv):
        me = jax.lax.axis_index("x")
        c = pltpu.make_async_remote_copy(
            x_ref,
            o_ref,
            send,
            recv,
            device_id=(jax.lax.rem(me + 1, n),),
        )
        c.start()
        c.wait()

    scratch = [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA]
    t0 = time.perf_counter()
    f = _shard_call(kernel, jax.ShapeDtypeStruct((8, 128), jnp.float32), scratch, x, mesh)
    y = jax.block_until_ready(f(x))
    first = time.perf_counter() - t0
    steady = _timed(lambda: f(x), 3)
    mine = {s.index[0].start or 0: np.asarray(s.data) for s in y.addressable_shards}
    if n <= XLA_REFERENCE_MAX:
        perm = [(i, (i + 1) % n) for i in range(n)]
        ppermute = jax.shard_map(lambda v: jax.lax.ppermute(v, "x", perm), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
        want = {s.index[0].start or 0: np.asarray(s.data) for s in jax.jit(ppermute)(x).addressable_shards}
        reference = "XLA's ppermute"
    else:
        # XLA's gloo ppermute over this many devices aborts here (gloo opens
        # a connection per device pair: "Connection refused"); its result
        # is this roll of the input.
        rolled = np.roll(full, 8, axis=0)
        want = {k: rolled[k : k + 8] for k in mine}
        reference = "the input rolled by one device (XLA's gloo ppermute aborts at this size)"
    ok = all(np.array_equal(mine[k], want[k]) for k in want)
    ok = comm.allreduce(int(ok), op=__import__("mpi4py").MPI.MIN) == 1
    rss = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, root=0)
    return {
        "chips": n,
        "processes": comm.Get_size(),
        "ok": ok,
        "reference": reference,
        "first_call_s": first,
        "steady_s": steady,
        "us_per_hop": steady / n * 1e6,
        "peak_rss_mib": rss,
    }


def main(part: str) -> None:
    comm = _setup()
    result = globals()[part](comm)
    if comm.Get_rank() == 0:
        print("MP-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
