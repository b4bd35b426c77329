"""Multi-device and multi-core Pallas TPU kernel corpus (runs under stock interpret mode).

Every `case_*` function returns a `Case`; `CASES` collects them all. Each
case's `fn(params, *args)` builds one or more `pl.pallas_call`s (or
`pl.kernel`s over a TensorCore mesh) with `interpret=params`, wraps them in
`jax.shard_map` over a prefix of the CPU devices (tests/conftest.py makes 16),
jits and runs them. Inputs are global arrays, sharded along their first axis.

Stock interpret mode pays ~0.5 ms per kernel op on every device, so arrays are
one (8, 128) tile per device and rounds are few.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from core_mesh import core_mesh
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from kernels import Case

_F32 = jnp.float32
_I32 = jnp.int32
_TILE = (8, 128)
_ANY = pl.BlockSpec(memory_space=pl.ANY)
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
_SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
_MESH = pl.DeviceIdType.MESH
_LOGICAL = pl.DeviceIdType.LOGICAL


def _ints(shape, dtype=np.float32, lo=-8, hi=8, seed=0):
    """Small integers (exact in every float dtype we use) as `dtype`."""
    rng = np.random.default_rng(seed)
    return rng.integers(lo, hi, size=shape).astype(dtype)


def _tiles(n, seed, per_device=1):
    """A global (n * per_device * 8, 128) input: `per_device` tiles per device."""
    return _ints((n * per_device * _TILE[0], _TILE[1]), seed=seed)


def _blocks(x, n):
    """Splits a global array into its `n` per-device blocks."""
    return np.split(x, n)


def _sds(shape, dtype=_F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def _mesh(shape, axes):
    devices = jax.devices()[: math.prod(shape)]
    return Mesh(np.array(devices).reshape(shape), axes)


def _run_sharded(body, mesh, args, in_specs, out_specs):
    """jit(shard_map(body)) over `mesh`, inputs placed with their specs."""
    mapped = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, in_specs)]
    return jax.jit(mapped)(*placed)


def _on_ring(body, n, args):
    """Runs `body` on a 1-D ring of `n` devices named "x", rows sharded."""
    specs = tuple(P("x") for _ in args)
    return _run_sharded(body, _mesh((n,), ("x",)), args, specs, P("x"))


def _collective():
    """Compiler params giving the kernel a barrier semaphore."""
    return pltpu.CompilerParams(collective_id=0)


def _neighbour_barrier(n):
    """Signals both ring neighbours' barrier semaphore and waits for theirs.

    Afterwards both neighbours are inside the kernel, so their buffers and
    semaphores exist and may be written remotely.
    """
    me = lax.axis_index("x")
    barrier = pltpu.get_barrier_semaphore()
    for peer in (lax.rem(me + 1, n), lax.rem(me + n - 1, n)):
        pl.semaphore_signal(barrier, 1, device_id=(peer,), device_id_type=_MESH)
    pl.semaphore_wait(barrier, 2)


def _full_barrier(n):
    """Signals every other device's barrier semaphore and waits for all of them."""
    me = lax.axis_index("x")
    barrier = pltpu.get_barrier_semaphore()
    for hop in range(1, n):
        peer = lax.rem(me + hop, n)
        pl.semaphore_signal(barrier, 1, device_id=(peer,), device_id_type=_MESH)
    pl.semaphore_wait(barrier, n - 1)


def _as_tpu():
    """Inside shard_map: the current mesh, but claiming a TPU device kind.

    `emit_pipeline` asks for TPU hardware info, found through the abstract
    mesh's device (the CPU kind is unknown to it).
    """
    mesh = jax.sharding.get_abstract_mesh()
    device = jax.sharding.AbstractDevice("TPU v5e", 1, "tpu")
    return jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh(mesh.axis_sizes, mesh.axis_names, axis_types=mesh.axis_types, abstract_device=device)
    )


def _sized(name, n, default):
    """Case name; a non-default device count is part of it."""
    return name if n == default else f"{name}_{n}dev"


def _ring_positions(n):
    me = lax.axis_index("x")
    return me, lax.rem(me + 1, n), lax.rem(me + n - 1, n)


# --------------------------------------------------------------------------
# The distributed-guide collectives, in our own words
# --------------------------------------------------------------------------


def case_right_permute(n=8):
    # Every device DMAs its block straight into its right neighbour's output.
    x = _tiles(n, seed=1)

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        _, right, _ = _ring_positions(n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,), device_id_type=_MESH)
        copy.start()
        copy.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds(_TILE),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            interpret=params,
        )
        return _on_ring(call, n, (x,))

    return Case(
        _sized("right_permute", n, 8), fn, (x,), reference=lambda x: np.concatenate(np.roll(_blocks(x, n), 1, axis=0))
    )


def case_all_gather_ring(n=4):
    # Ring all-gather: at step s each device forwards the block it received at
    # step s-1 (its own at s=0) into the same slot of its right neighbour.
    # Every slot is written exactly once, so no buffer is ever reused.
    x = _tiles(n, seed=2)

    def kernel(x_ref, o_ref, local_sem, send_sem, recv_sems):
        me, right, _ = _ring_positions(n)
        own = pltpu.make_async_copy(x_ref, o_ref.at[me], local_sem)
        own.start()
        own.wait()
        _neighbour_barrier(n)
        for step in range(n - 1):
            slot = lax.rem(me + n - step, n)
            # One receive semaphore per step: DMA semaphores only count
            # bytes, so with a shared one a later step's arrival could
            # satisfy this step's wait (stock "on_wait" really does that).
            hop = pltpu.make_async_remote_copy(
                o_ref.at[slot], o_ref.at[slot], send_sem, recv_sems.at[step], device_id=(right,), device_id_type=_MESH
            )
            hop.start()
            hop.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((n, *_TILE)),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,))],
            compiler_params=_collective(),
            interpret=params,
        )
        return _on_ring(lambda b: call(b)[None], n, (x,))

    def ref(x):
        return np.stack([np.stack(_blocks(x, n))] * n)

    return Case(_sized("all_gather_ring", n, 4), fn, (x,), reference=ref)


def case_all_reduce_sum(n=4):
    # One-shot all-reduce: every device sends its block to slot `me` of every
    # other device's VMEM staging buffer, waits for n-1 arrivals, then sums
    # the slots in a fixed order (so the float result is deterministic).
    x = _tiles(n, seed=3)

    def kernel(x_ref, o_ref, stage, send_sem, recv_sem):
        me = lax.axis_index("x")
        stage[me] = x_ref[...]
        _full_barrier(n)
        copies = []
        for hop in range(1, n):
            peer = lax.rem(me + hop, n)
            copy = pltpu.make_async_remote_copy(
                x_ref, stage.at[me], send_sem, recv_sem, device_id=(peer,), device_id_type=_MESH
            )
            copy.start()
            copies.append(copy)
        for copy in copies:
            copy.wait_send()
        for copy in copies:
            copy.wait_recv()  # each arrival is one block of bytes
        total = stage[0]
        for slot in range(1, n):
            total = total + stage[slot]
        o_ref[...] = total

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds(_TILE),
            in_specs=[_VMEM],
            out_specs=_VMEM,
            scratch_shapes=[pltpu.VMEM((n, *_TILE), _F32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=_collective(),
            interpret=params,
        )
        return _on_ring(call, n, (x,))

    def ref(x):
        total = sum(_blocks(x, n))
        return np.concatenate([total] * n)

    return Case(_sized("all_reduce_sum", n, 4), fn, (x,), reference=ref)


def _reduce_scatter_ring(n, x_ref, buf, ready, send_sem, recv_sem):
    """Ring reduce-scatter into `buf`; returns the slot holding the result.

    At step s device i sends its partial sum of block (i-s-1) mod n to its
    right neighbour, which adds its own copy of that block. After n-1 steps
    device i holds the full sum of block i. `buf` is double-buffered; before
    writing into a neighbour's slot a device waits for that neighbour's
    `ready` signal, i.e. until the neighbour no longer reads the slot.
    """
    me, right, left = _ring_positions(n)
    buf[0] = x_ref[lax.rem(me + n - 1, n)]
    for step in range(n - 1):
        src, dst = step % 2, (step + 1) % 2
        # My slot `dst` was last read by my own send of step-1 (finished).
        pl.semaphore_signal(ready, 1, device_id=(left,), device_id_type=_MESH)
        pl.semaphore_wait(ready, 1)
        hop = pltpu.make_async_remote_copy(
            buf.at[src], buf.at[dst], send_sem, recv_sem, device_id=(right,), device_id_type=_MESH
        )
        hop.start()
        hop.wait()
        block = lax.rem(me + 2 * n - step - 2, n)
        buf[dst] = buf[dst] + x_ref[block]
    return (n - 1) % 2


def case_reduce_scatter_sum(n=4):
    x = _tiles(n, seed=4, per_device=n)

    def kernel(x_ref, o_ref, buf, ready, send_sem, recv_sem):
        _neighbour_barrier(n)
        slot = _reduce_scatter_ring(n, x_ref, buf, ready, send_sem, recv_sem)
        o_ref[...] = buf[slot]

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds(_TILE),
            in_specs=[_VMEM],
            out_specs=_VMEM,
            scratch_shapes=[
                pltpu.VMEM((2, *_TILE), _F32),
                pltpu.SemaphoreType.REGULAR,
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
            ],
            compiler_params=_collective(),
            interpret=params,
        )
        return _on_ring(lambda b: call(b.reshape(n, *_TILE)), n, (x,))

    def ref(x):
        per_device = [b.reshape(n, *_TILE) for b in _blocks(x, n)]
        return np.concatenate([sum(d[i] for d in per_device) for i in range(n)])

    return Case(_sized("reduce_scatter_sum", n, 4), fn, (x,), reference=ref)


def case_reduce_scatter_emit_pipeline():
    # One-shot reduce-scatter: device i sends block j of its HBM input to slot
    # i of device j's HBM staging buffer; then `emit_pipeline` streams the n
    # staged blocks through VMEM into an accumulator. Stock interpret mode
    # has no HBM scratch, so the staging buffer is a second (dropped) output.
    n = 4
    x = _tiles(n, seed=5, per_device=n)

    def kernel(x_hbm, o_hbm, stage_hbm, acc, local_sem, send_sem, recv_sem):
        me = lax.axis_index("x")
        own = pltpu.make_async_copy(x_hbm.at[me], stage_hbm.at[me], local_sem)
        own.start()
        _full_barrier(n)
        copies = []
        for hop in range(1, n):
            peer = lax.rem(me + hop, n)
            copy = pltpu.make_async_remote_copy(
                x_hbm.at[peer], stage_hbm.at[me], send_sem, recv_sem, device_id=(peer,), device_id_type=_MESH
            )
            copy.start()
            copies.append(copy)
        own.wait()
        for copy in copies:
            copy.wait_send()
        for copy in copies:
            copy.wait_recv()
        acc[...] = jnp.zeros(_TILE, _F32)

        def accumulate(block_ref):
            acc[...] += block_ref[0]

        pltpu.emit_pipeline(accumulate, grid=(n,), in_specs=[pl.BlockSpec((1, *_TILE), lambda k: (k, 0, 0))])(stage_hbm)
        done = pltpu.make_async_copy(acc, o_hbm, local_sem)
        done.start()
        done.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=(_sds(_TILE), _sds((n, *_TILE))),
            in_specs=[_ANY],
            out_specs=(_ANY, _ANY),
            scratch_shapes=[
                pltpu.VMEM(_TILE, _F32),
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
            ],
            compiler_params=_collective(),
            interpret=params,
        )

        def per_device(b):
            b = b.reshape(n, *_TILE)
            with _as_tpu():  # only the kernel trace needs the TPU kind
                return call(b)[0]

        return _on_ring(per_device, n, (x,))

    def ref(x):
        per_device = [b.reshape(n, *_TILE) for b in _blocks(x, n)]
        return np.concatenate([sum(d[i] for d in per_device) for i in range(n)])

    return Case("reduce_scatter_emit_pipeline", fn, (x,), reference=ref)


# --------------------------------------------------------------------------
# Point-to-point patterns
# --------------------------------------------------------------------------


def case_semaphore_ping_pong():
    # Two devices bounce a REGULAR semaphore signal back and forth; each
    # records how many rounds it saw. No data moves, only semaphores.
    n, rounds = 2, 3

    def kernel(o_ref, sem):
        me = lax.axis_index("x")
        other = 1 - me
        _neighbour_barrier(n)

        @pl.when(me == 0)
        def _():
            for _ in range(rounds):
                pl.semaphore_signal(sem, 1, device_id=(other,), device_id_type=_MESH)
                pl.semaphore_wait(sem, 1)

        @pl.when(me == 1)
        def _():
            for _ in range(rounds):
                pl.semaphore_wait(sem, 1)
                pl.semaphore_signal(sem, 1, device_id=(other,), device_id_type=_MESH)

        o_ref[0] = me * 100 + rounds

    def fn(params):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((1,), _I32),
            out_specs=_SMEM,
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            compiler_params=_collective(),
            interpret=params,
        )
        mesh = _mesh((n,), ("x",))
        return _run_sharded(call, mesh, (), (), P("x"))

    return Case("semaphore_ping_pong", fn, (), reference=lambda: np.array([rounds, 100 + rounds], np.int32))


def case_ring_exchange_rounds(n=4):
    # Several rounds around a ring: in round r each device adds 1 to what it
    # received in round r-1 (its own block in round 0) and DMAs the result
    # into slot r of its right neighbour's output.
    rounds = 3
    x = _tiles(n, seed=6)

    def kernel(x_ref, o_ref, stage, send_sem, recv_sems):
        _, right, _ = _ring_positions(n)
        _neighbour_barrier(n)
        for r in range(rounds):
            stage[r] = (x_ref[...] if r == 0 else o_ref[r - 1]) + 1.0
            # A receive semaphore per round (see all_gather_ring).
            hop = pltpu.make_async_remote_copy(
                stage.at[r], o_ref.at[r], send_sem, recv_sems.at[r], device_id=(right,), device_id_type=_MESH
            )
            hop.start()
            hop.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((rounds, *_TILE)),
            in_specs=[_VMEM],
            out_specs=_VMEM,
            scratch_shapes=[
                pltpu.VMEM((rounds, *_TILE), _F32),
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA((rounds,)),
            ],
            compiler_params=_collective(),
            interpret=params,
        )
        return _on_ring(lambda b: call(b)[None], n, (x,))

    def ref(x):
        b = _blocks(x, n)
        return np.stack([np.stack([b[(i - r - 1) % n] + r + 1 for r in range(rounds)]) for i in range(n)])

    return Case(_sized("ring_exchange_rounds", n, 4), fn, (x,), reference=ref)


def case_all_to_all(n=4):
    # Device i sends block j of its input to slot i of device j's output
    # (a transpose of the device x block matrix). All DMAs are in flight at
    # once; the receiver waits for n-1 arrivals.
    x = _tiles(n, seed=7, per_device=n)

    def kernel(x_ref, o_ref, local_sem, send_sem, recv_sem):
        me = lax.axis_index("x")
        _full_barrier(n)
        own = pltpu.make_async_copy(x_ref.at[me], o_ref.at[me], local_sem)
        own.start()
        copies = []
        for hop in range(1, n):
            peer = lax.rem(me + hop, n)
            copy = pltpu.make_async_remote_copy(
                x_ref.at[peer], o_ref.at[me], send_sem, recv_sem, device_id=(peer,), device_id_type=_MESH
            )
            copy.start()
            copies.append(copy)
        own.wait()
        for copy in copies:
            copy.wait_send()
        for copy in copies:
            copy.wait_recv()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((n, *_TILE)),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 3,
            compiler_params=_collective(),
            interpret=params,
        )
        return _on_ring(lambda b: call(b.reshape(n, *_TILE)).reshape(-1, _TILE[1]), n, (x,))

    def ref(x):
        per_device = [b.reshape(n, *_TILE) for b in _blocks(x, n)]
        return np.concatenate([np.concatenate([per_device[j][i] for j in range(n)]) for i in range(n)])

    return Case(_sized("all_to_all", n, 4), fn, (x,), reference=ref)


def case_routed_wait_traced_size():
    # A routing table in SMEM says where each device sends its tile (slot =
    # sender id). A receiver does not know statically how many tiles come:
    # it waits once, on a descriptor whose leading slice has a traced size
    # (the arrival count), i.e. for count tiles' worth of bytes. Devices
    # nobody sends to skip the wait. Unused slots keep the zeros aliased in.
    n = 4
    route = np.array([1, 2, 1, 1], np.int32)  # device 1 gets 3 tiles, 2 gets 1
    x = _tiles(n, seed=12)

    def kernel(route_ref, x_ref, _, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        _full_barrier(n)
        target = route_ref[me]
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref.at[me], send_sem, recv_sem, device_id=(target,), device_id_type=_MESH
        )
        copy.start()
        copy.wait_send()
        count = jnp.int32(0)
        for i in range(n):
            count += jnp.where(route_ref[i] == me, 1, 0)

        @pl.when(count > 0)
        def _():
            all_arrivals = pltpu.make_async_remote_copy(
                o_ref.at[pl.ds(0, count)],
                o_ref.at[pl.ds(0, count)],
                send_sem,
                recv_sem,
                device_id=(me,),
                device_id_type=_MESH,
            )
            all_arrivals.wait_recv()

    def fn(params, route, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((n, *_TILE)),
            in_specs=[_SMEM, _ANY, _ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            input_output_aliases={2: 0},
            compiler_params=_collective(),
            interpret=params,
        )

        def body(route, b):
            zeros = jnp.zeros((n, *_TILE), b.dtype)
            return call(route, b, zeros).reshape(-1, _TILE[1])

        mesh = _mesh((n,), ("x",))
        return _run_sharded(body, mesh, (route, x), (P(), P("x")), P("x"))

    def ref(route, x):
        out = np.zeros((n, n, *_TILE), np.float32)
        for sender, block in enumerate(_blocks(x, n)):
            out[route[sender], sender] = block
        return out.reshape(-1, _TILE[1])

    return Case("routed_wait_traced_size", fn, (route, x), reference=ref)


def _mesh_2d_case(name, target, seed):
    """A 2x2 ("x", "y") mesh where each device sends its block to `target`.

    `target(x_idx, y_idx)` -> (device_id, device_id_type, (tx, ty)) where
    (tx, ty) are the target's mesh coordinates (used by the reference).
    """
    shape = (2, 2)
    x = _ints((4 * _TILE[0], _TILE[1]), seed=seed)

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        xi, yi = lax.axis_index("x"), lax.axis_index("y")
        device_id, id_type, _ = target(xi, yi)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=device_id, device_id_type=id_type)
        pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref, send_sem, recv_sem, device_id=device_id, device_id_type=id_type
        )
        copy.start()
        copy.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds(_TILE),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            compiler_params=_collective(),
            interpret=params,
        )
        spec = P(("x", "y"))
        return _run_sharded(call, _mesh(shape, ("x", "y")), (x,), (spec,), spec)

    def ref(x):
        blocks = _blocks(x, 4)
        out = [None] * 4
        for xi in range(2):
            for yi in range(2):
                tx, ty = target(xi, yi)[2]
                out[tx * 2 + ty] = blocks[xi * 2 + yi]
        return np.concatenate(out)

    return Case(name, fn, (x,), reference=ref)


def case_mesh_2d_tuple_ids():
    # Swap along "y": the target is (x, 1 - y) as a MESH tuple.
    return _mesh_2d_case("mesh_2d_tuple_ids", lambda xi, yi: ((xi, 1 - yi), _MESH, (xi, 1 - yi)), seed=8)


def case_mesh_2d_dict_ids():
    # Swap along "x" naming only that axis: {"x": 1 - x}; "y" stays ours.
    return _mesh_2d_case("mesh_2d_dict_ids", lambda xi, yi: ({"x": 1 - xi}, _MESH, (1 - xi, yi)), seed=9)


def case_mesh_2d_logical_ids():
    # Diagonal swap by LOGICAL id (row-major over ("x", "y")).
    return _mesh_2d_case(
        "mesh_2d_logical_ids", lambda xi, yi: ((1 - xi) * 2 + (1 - yi), _LOGICAL, (1 - xi, 1 - yi)), seed=10
    )


# --------------------------------------------------------------------------
# Semaphore-only kernels
# --------------------------------------------------------------------------


def case_barrier_only(n=8):
    # Three back-to-back neighbour barriers on the barrier semaphore; the
    # output only proves every device got through all of them. (The semaphore
    # only counts, so a fast neighbour's next-round signal may count towards
    # this round; every device still gets and consumes exactly 2 per round.)
    rounds = 3

    def kernel(o_ref):
        for _ in range(rounds):
            _neighbour_barrier(n)
        o_ref[0] = lax.axis_index("x") * 10 + rounds

    def fn(params):
        call = pl.pallas_call(
            kernel, out_shape=_sds((1,), _I32), out_specs=_SMEM, compiler_params=_collective(), interpret=params
        )
        return _run_sharded(call, _mesh((n,), ("x",)), (), (), P("x"))

    return Case(_sized("barrier_only", n, 8), fn, (), reference=lambda: np.arange(n, dtype=np.int32) * 10 + rounds)


def case_remote_semaphore_signal():
    # Each device adds (its id + 1) to its right neighbour's REGULAR
    # semaphore, then waits for exactly its left neighbour's amount.
    n = 4

    def kernel(o_ref, sem):
        me, right, left = _ring_positions(n)
        _neighbour_barrier(n)
        pl.semaphore_signal(sem, me + 1, device_id=(right,), device_id_type=_MESH)
        pl.semaphore_wait(sem, left + 1)
        o_ref[0] = left

    def fn(params):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((1,), _I32),
            out_specs=_SMEM,
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            compiler_params=_collective(),
            interpret=params,
        )
        return _run_sharded(call, _mesh((n,), ("x",)), (), (), P("x"))

    def ref():
        return np.array([(i - 1) % n for i in range(n)], np.int32)

    return Case("remote_semaphore_signal", fn, (), reference=ref)


def case_two_kernels_one_jit():
    # Two collective kernels back to back in one jitted program: a shift by
    # one, then a shift by two of its result. The second must not start
    # writing into a device that is still running the first.
    n = 4
    x = _tiles(n, seed=11)

    def shift_kernel(by):
        def kernel(x_ref, o_ref, send_sem, recv_sem):
            me = lax.axis_index("x")
            # Every device, not only ring neighbours: the target of a shift
            # by two must have entered this kernel before we write into it.
            _full_barrier(n)
            copy = pltpu.make_async_remote_copy(
                x_ref, o_ref, send_sem, recv_sem, device_id=(lax.rem(me + by, n),), device_id_type=_MESH
            )
            copy.start()
            copy.wait()

        return kernel

    def fn(params, x):
        def shift(by):
            return pl.pallas_call(
                shift_kernel(by),
                out_shape=_sds(_TILE),
                in_specs=[_ANY],
                out_specs=_ANY,
                scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
                compiler_params=_collective(),
                interpret=params,
            )

        return _on_ring(lambda b: shift(2)(shift(1)(b) * 2.0), n, (x,))

    return Case(
        "two_kernels_one_jit", fn, (x,), reference=lambda x: np.concatenate(np.roll(_blocks(x, n), 3, axis=0)) * 2
    )


# --------------------------------------------------------------------------
# Several cores per device
# --------------------------------------------------------------------------


def _core_mesh(cores):
    return core_mesh(cores)


def case_core_map_shared_hbm():
    # pl.kernel over a 2-core TensorCore mesh on each of 2 devices: core c
    # copies row block c of the shared HBM input through its own VMEM, adds
    # (c + 1) and writes row block c of the shared HBM output.
    n, cores = 2, 2
    x = _tiles(n, seed=12, per_device=cores)

    def fn(params, x):
        def per_device(b):
            @pl.kernel(
                out_type=_sds((cores, *_TILE)),
                mesh=_core_mesh(cores),
                scratch_types=[pltpu.VMEM(_TILE, _F32)],
                interpret=params,
            )
            def run(x_hbm, o_hbm, tile):
                c = lax.axis_index("core")
                pltpu.sync_copy(x_hbm.at[c], tile)
                tile[...] = tile[...] + (c + 1).astype(_F32)
                pltpu.sync_copy(tile, o_hbm.at[c])

            return run(b.reshape(cores, *_TILE)).reshape(-1, _TILE[1])

        return _on_ring(per_device, n, (x,))

    def ref(x):
        out = x.reshape(n, cores, *_TILE).copy()
        out += np.arange(1, cores + 1, dtype=np.float32)[None, :, None, None]
        return out.reshape(x.shape)

    return Case("core_map_shared_hbm", fn, (x,), reference=ref)


def _grid_split_case(name, cores, seed):
    # A "parallel" leading grid axis split across `cores` cores per device
    # (num_cores_or_threads), on 2 devices; the second axis is "arbitrary".
    n = 2
    rows = 4 * _TILE[0]
    x = _ints((n * rows, 2 * _TILE[1]), seed=seed)
    y = _ints((n * rows, 2 * _TILE[1]), seed=seed + 100)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * y_ref[...] + 1.0

    def fn(params, x, y):
        spec = pl.BlockSpec(_TILE, lambda i, j: (i, j))
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((rows, 2 * _TILE[1])),
            grid=(4, 2),
            in_specs=[spec, spec],
            out_specs=spec,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
            interpret=dataclasses.replace(params, num_cores_or_threads=cores),
        )
        return _on_ring(call, n, (x, y))

    return Case(name, fn, (x, y), reference=lambda x, y: x * y + 1)


def case_grid_split_2_cores():
    return _grid_split_case("grid_split_2_cores", 2, seed=13)


def case_grid_split_4_cores():
    return _grid_split_case("grid_split_4_cores", 4, seed=14)


def case_cores_wait_on_each_other():
    # The two cores of a device swap halves through shared HBM: core c stages
    # its block in HBM, signals the other core's semaphore (core_index) and
    # waits for the other's signal before reading the other's staged block.
    n, cores = 2, 2
    x = _tiles(n, seed=15, per_device=cores)

    def fn(params, x):
        def per_device(b):
            @pl.kernel(out_type=_sds((2 * cores, *_TILE)), mesh=_core_mesh(cores), interpret=params)
            def run(x_hbm, o_hbm):
                c = lax.axis_index("core")

                def body(sem):
                    pltpu.sync_copy(x_hbm.at[c], o_hbm.at[cores + c])
                    pl.semaphore_signal(sem, 1, core_index=1 - c)
                    pl.semaphore_wait(sem, 1)
                    pltpu.sync_copy(o_hbm.at[cores + 1 - c], o_hbm.at[c])

                pl.run_scoped(body, pltpu.SemaphoreType.REGULAR)

            return run(b.reshape(cores, *_TILE)).reshape(-1, _TILE[1])

        return _on_ring(per_device, n, (x,))

    def ref(x):
        out = []
        for b in _blocks(x, n):
            b0, b1 = np.split(b, 2)
            out += [b1, b0, b0, b1]
        return np.concatenate(out)

    return Case("cores_wait_on_each_other", fn, (x,), reference=ref)


# --------------------------------------------------------------------------

CASES: list[Case] = [obj() for name, obj in sorted(globals().items()) if name.startswith("case_") and callable(obj)]
CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
assert len(CASES_BY_NAME) == len(CASES), "duplicate case names"
# The ring cases again on all 16 devices (a bigger, slower sweep).
SWEEP_16_DEVICES: list[Case] = [
    build(16)
    for build in (
        case_right_permute,
        case_all_gather_ring,
        case_all_reduce_sum,
        case_reduce_scatter_sum,
        case_ring_exchange_rounds,
        case_all_to_all,
        case_barrier_only,
    )
]
MULTI_CORE = frozenset({"core_map_shared_hbm", "grid_split_2_cores", "grid_split_4_cores", "cores_wait_on_each_other"})
