"""Kernels run under ``mpirun -np N python scenarios.py NAME [MODE]``: each
rank prints one ``RESULT <rank> <json>`` line (tests/distributed/
test_mpirun.py starts them and reads the lines).

Every scenario is one global mesh spanning the processes
(`mosaic_rt.distributed.initialize`, ``MRT_DEVICES`` CPU devices each).
"""

from __future__ import annotations

import json
import os
import sys
import time

import mosaic_rt.distributed

if os.environ.get("MRT_NO_MPI"):
    # Processes started by hand (no mpirun) where mpi4py cannot be imported.
    sys.modules["mpi4py"] = None
    import jax

    jax.config.update("jax_num_cpu_devices", int(os.environ.get("MRT_DEVICES", "2")))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        os.environ["MRT_COORDINATOR"],
        num_processes=int(os.environ["MRT_NPROC"]),
        process_id=int(os.environ["MRT_RANK"]),
    )
else:
    devices = int(os.environ.get("MRT_DEVICES", "2"))
    if os.environ.get("MRT_UNEVEN"):  # rank r owns devices + r devices
        devices += int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    mosaic_rt.distributed.initialize(local_device_count=devices)

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

RANK = jax.process_index()
N = jax.device_count()
MESH = Mesh(np.array(jax.devices()), ("x",))


def report(**fields) -> None:
    # A file per rank when asked: launchers may interleave the ranks' stdout.
    where = os.environ.get("MRT_RESULTS")
    if where:
        with open(os.path.join(where, f"{RANK}.json"), "w") as f:
            json.dump(fields, f)
    print(f"RESULT {RANK} {json.dumps(fields)}", flush=True)


def global_array(shape, dtype=np.float32):
    full = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    return full, jax.make_array_from_callback(shape, NamedSharding(MESH, P("x")), lambda idx: full[idx])


def local_parts(y) -> dict:
    return {int(s.index[0].start or 0): np.asarray(s.data) for s in y.addressable_shards}


def run(kernel, x, out_shape, scratch, params, **kw):
    def body(v):
        return pl.pallas_call(
            kernel,
            out_shape=out_shape,
            scratch_shapes=scratch,
            interpret=params,
            **kw,
        )(v)

    return jax.jit(jax.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


def params(**kw):
    return mosaic_rt.InterpretParams(dma_execution_mode=os.environ.get("MRT_MODE", "eager"), **kw)


# ------------------------------------------------------------- scenarios


def all_gather():
    """Ring all-gather: N-1 hops, each a remote DMA to the right neighbour;
    equal to XLA's own all_gather. MRT_ROWS rows of 128 f32 per device
    (256: 128 KiB hops, whose data travels apart from its header)."""
    rows = int(os.environ.get("MRT_ROWS", "8"))
    full, x = global_array((N * rows, 128))

    def kernel(x_ref, o_ref, send, recv, ready):
        me = jax.lax.axis_index("x")
        right = jax.lax.rem(me + 1, N)
        left = jax.lax.rem(me + N - 1, N)
        o_ref[pl.ds(me * rows, rows)] = x_ref[...]
        for hop in range(N - 1):
            slot = jax.lax.rem(me + N - hop, N)
            # The right neighbour says it is ready for this hop.
            pl.semaphore_signal(ready, 1, device_id=(left,))
            pl.semaphore_wait(ready, 1)
            c = pltpu.make_async_remote_copy(
                o_ref.at[pl.ds(slot * rows, rows)],
                o_ref.at[pl.ds(slot * rows, rows)],
                send,
                recv,
                device_id=(right,),
            )
            c.start()
            c.wait()

    out = jax.ShapeDtypeStruct((N * rows, 128), jnp.float32)
    y = run(kernel, x, out, [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR], params())
    # N copies of the whole array, one per device.
    ok = all(np.array_equal(v, full) for v in local_parts(y).values())
    xla = jax.jit(
        jax.shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True), mesh=MESH, in_specs=P("x"), out_specs=P("x"))
    )(x)
    same_as_xla = all(np.array_equal(local_parts(y)[k], v) for k, v in local_parts(xla).items())
    report(ok=bool(ok and same_as_xla), digest=float(sum(float(v.sum()) for v in local_parts(y).values())))


def ping_pong():
    """Devices 0 and N-1 (different processes) bounce a signal 200 times."""
    full, x = global_array((N * 8, 128))
    rounds = 200

    def kernel(x_ref, o_ref, sem):
        me = jax.lax.axis_index("x")
        o_ref[...] = x_ref[...]

        @pl.when(me == 0)
        def _():
            @pl.loop(0, rounds)
            def _(i):
                pl.semaphore_signal(sem, 1, device_id=(N - 1,))
                pl.semaphore_wait(sem, 1)

        @pl.when(me == N - 1)
        def _():
            @pl.loop(0, rounds)
            def _(i):
                pl.semaphore_wait(sem, 1)
                pl.semaphore_signal(sem, 1, device_id=(0,))

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    y = run(kernel, x, out, [pltpu.SemaphoreType.REGULAR], params())
    jax.block_until_ready(y)
    t = time.perf_counter()
    jax.block_until_ready(run(kernel, x, out, [pltpu.SemaphoreType.REGULAR], params()))
    per_round = (time.perf_counter() - t) / rounds
    ok = all(np.array_equal(v, full[k : k + 8]) for k, v in local_parts(y).items())
    report(ok=bool(ok), us_per_round_trip=per_round * 1e6)


def barrier():
    """get_barrier_semaphore with a collective_id: each device signals both
    neighbours and waits for both, then a remote DMA."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, send, recv):
        me = jax.lax.axis_index("x")
        right, left = jax.lax.rem(me + 1, N), jax.lax.rem(me + N - 1, N)
        b = pltpu.get_barrier_semaphore()
        for n in (left, right):
            pl.semaphore_signal(b, 1, device_id=(n,))
        pl.semaphore_wait(b, 2)
        c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,))
        c.start()
        c.wait()

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    y = run(
        kernel,
        x,
        out,
        [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        params(),
        compiler_params=pltpu.CompilerParams(collective_id=7),
    )
    want = np.roll(full, 8, axis=0)
    ok = all(np.array_equal(v, want[k : k + 8]) for k, v in local_parts(y).items())
    report(ok=bool(ok))


def _expect_error(fn):
    try:
        with mosaic_rt.native_errors():
            jax.block_until_ready(fn())
    except Exception as e:  # noqa: BLE001 - the scenario reports what it got
        root = getattr(e, "root", None) or e
        report(ok=False, type=type(root).__name__, outer=type(e).__name__, message=str(root)[:4000])
        return
    report(ok=True)


def failure():
    """The last device reads out of bounds; every other one waits for a
    signal from it: every process ends with the IndexError."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, sem):
        me = jax.lax.axis_index("x")

        @pl.when(me == N - 1)
        def _():
            o_ref[...] = x_ref[pl.ds(me * 1000, 8)]

        @pl.when(me != N - 1)
        def _():
            pl.semaphore_wait(sem, 1)

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    _expect_error(lambda: run(kernel, x, out, [pltpu.SemaphoreType.REGULAR], params(out_of_bounds_reads="raise")))


def deadlock():
    """Every device waits for a signal nobody sends."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    t = time.perf_counter()
    _expect_error(lambda: run(kernel, x, out, [pltpu.SemaphoreType.REGULAR], params()))
    print(f"RESULT-TIME {RANK} {time.perf_counter() - t:.2f}", flush=True)


def local_only():
    """A kernel that stays on each device (no device ids): runs without MPI."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    y = run(kernel, x, jax.ShapeDtypeStruct((8, 128), jnp.float32), [], params())
    ok = all(np.array_equal(v, full[k : k + 8] * 2.0) for k, v in local_parts(y).items())
    report(ok=bool(ok))


def remote_without_mpi():
    """A remote DMA with processes that have no MPI: a clear error at once."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, send, recv):
        me = jax.lax.axis_index("x")
        pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(jax.lax.rem(me + 1, N),)).start()

    t = time.perf_counter()
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    _expect_error(lambda: run(kernel, x, out, [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA], params()))
    print(f"RESULT-TIME {RANK} {time.perf_counter() - t:.2f}", flush=True)


def skip():
    """The last process never calls the kernel (it sleeps instead): the
    others report it by name instead of hanging."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1, device_id=(jax.lax.rem(jax.lax.axis_index("x") + 1, N),))
        pl.semaphore_wait(sem, 1)

    if RANK == jax.process_count() - 1:
        time.sleep(8)
        report(ok=True, skipped=True)
        return
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    _expect_error(lambda: run(kernel, x, out, [pltpu.SemaphoreType.REGULAR], params()))


def killed():
    """The last process is killed (SIGKILL) while the others wait for it
    inside the kernel: the job ends, no process is left running."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)

    if RANK == jax.process_count() - 1:
        time.sleep(1)
        os.kill(os.getpid(), 9)
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    _expect_error(lambda: run(kernel, x, out, [pltpu.SemaphoreType.REGULAR], params()))
    time.sleep(30)  # mpirun ends this process once it notices the killed one


def race():
    """Each device DMAs into its right neighbour's output (another process
    for one of them) while that neighbour writes the same output without
    waiting: a race across processes, reported with both source lines."""
    full, x = global_array((N * 8, 128))

    def kernel(x_ref, o_ref, send, recv):
        me = jax.lax.axis_index("x")
        c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(jax.lax.rem(me + 1, N),))
        c.start()  # RACE-DMA
        o_ref[...] = jnp.zeros_like(x_ref)  # RACE-STORE
        c.wait()

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    scratch = [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA]
    _expect_error(lambda: run(kernel, x, out, scratch, params(detect_races=True, on_race="raise")))


if __name__ == "__main__":
    globals()[sys.argv[1]]()
