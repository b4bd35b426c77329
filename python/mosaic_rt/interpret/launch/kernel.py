"""`interpret_pallas_call` for `mosaic_rt.InterpretParams`: the program one
device runs for a pallas_call (called by jax's lowering through `seam`).

Same observable behaviour as stock TPU interpret mode (buffers, ids, grid
order, block copies, revisit check), but every memory/DMA/semaphore step is a
native FFI op instead of a Python callback. The phases of a launch: join it
(`kernel_begin`), allocate its buffers (`buffers`), run the grid loop on
every core (`grid_loop`), read the outputs back, leave it (`kernel_end`,
which returns the outputs written in place in XLA's result buffers).
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import jax.numpy as jnp

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.context import Ctx
from mosaic_rt.interpret.evaluation import device_ids, logging_ops, native_calls, sites
from mosaic_rt.interpret.evaluation.regions import FULL, TracedRegion
from mosaic_rt.interpret.launch import buffers, grid_loop, processes, semaphore_operands
from mosaic_rt.interpret.launch.buffers import BlockOperands
from mosaic_rt.interpret.params import InterpretParams, launch_config
from mosaic_rt.memory_spaces import code as space_code

_HBM = jx.MemorySpace.HBM
pallas_core = jx.pallas_core


def interpret_pallas_call(*args, interpret_params: InterpretParams, **kwargs):
    # Ops outside the kernel body (scratch allocations, block copies, the
    # leak check) carry the kernel function's line.
    # Straight-line runs of native ops become one call each (`batched_runs`).
    with (
        logging_ops.tracing_with(interpret_params.logging_mode),
        sites.at_kernel(kwargs.get("jaxpr")),
        native_calls.batched_runs(interpret_params._batch_runs),
    ):
        return _interpret_pallas_call(*args, interpret_params=interpret_params, **kwargs)


def _interpret_pallas_call(
    *args,
    jaxpr: jx.Jaxpr,
    debug: bool,
    input_output_aliases,
    grid_mapping: jx.GridMapping,
    mesh,
    compiler_params,
    cost_estimate,
    out_avals,
    interpret_params: InterpretParams,
    metadata,
    name,
):
    del debug, cost_estimate, metadata
    params, mosaic_params = _launch_params(interpret_params, compiler_params, mesh, grid_mapping)
    # The TPU memory space an operand's array lives in (None: HBM).
    resident = [jx.memory_space_of(jx.get_aval(a)) for a in args]
    args = [a if semaphore_operands.is_semaphore(a) else jx.strip_memory_space_p.bind(a) for a in args]
    dyn_grid, scalars, inputs = jx.split_list(
        args, [grid_mapping.num_dynamic_grid_bounds, grid_mapping.num_index_operands]
    )
    # A dynamic bound may come as a one-element array (grid=(n,) with n of
    # shape (1,): the TPU takes it): the loop counts with scalars.
    dyn_iter = iter(jnp.reshape(g, ()) if jnp.shape(g) != () else g for g in dyn_grid)
    grid = tuple(next(dyn_iter) if isinstance(g, pallas_core.DynamicGridDim) else g for g in grid_mapping.grid)
    axis_sizes, axis_indices, num_devices, device_id = _this_device()

    ctx = Ctx(
        handle=None,
        device_id=device_id,
        core=None,
        grid_mapping=grid_mapping,
        mesh=mesh,
        axis_sizes=axis_sizes,
        axis_indices=axis_indices,
        mosaic_params=mosaic_params,
        params=params,
        num_devices=num_devices,
    )
    blocks = BlockOperands.of(jaxpr, grid_mapping)
    resident = (resident[len(resident) - len(inputs) :], [jx.memory_space_of(a) for a in out_avals])
    allocations, bufs = buffers.plan(ctx, jaxpr, blocks, scalars, inputs, input_output_aliases, resident)
    blocks.check_hbm_blocks(jaxpr, grid_mapping)
    loop = grid_loop.plan(ctx, jaxpr, grid, blocks, bufs)
    owners = processes.device_processes(num_devices, jaxpr)
    config = launch_config(params, num_devices=num_devices, device_processes=owners)
    if owners is not None and config.trace_path:
        # One trace per process (`python -m mosaic_rt trace --merge` joins them).
        config = dataclasses.replace(config, trace_path=processes.per_process_path(config.trace_path))
    # The prologue is one native call (each custom call costs compile and
    # tracing time): join, allocate, without a barrier semaphore of its own
    # wait for all devices to start together, and begin the grid loop of a
    # single core.
    token, handle, results, first_step = native_calls.launch_begin(
        jnp.zeros((), jnp.int32),
        device_id,
        uid=_launch_uid(name, jaxpr, grid_mapping, args),
        config=config,
        allocations=allocations,
        barrier=mosaic_params.collective_id is None,
        grid=grid_loop.prologue_grid_begin(loop),
    )
    ctx = ctx.replace(handle=handle)
    id_of = buffers.prologue_ids(allocations, results)
    bufs = bufs.resolved(id_of)
    loop = grid_loop.launched(loop, ctx, bufs, id_of)
    for i, ids in sorted(bufs.sem_inputs.items()):
        token = semaphore_operands.restore(token, ctx, ids, inputs[i])
    token = grid_loop.run_cores(loop, token, first_step)

    token, carried = semaphore_operands.take_all(
        token, ctx, {j: (ids, bufs.output_avals[j]) for j, ids in bufs.sem_outputs.items()}
    )
    token, results = _read_outputs(token, ctx, bufs)
    for j, value in carried.items():
        results[j] = value
    direct = [bufs.direct[j] for j in bufs.direct_order]
    ended = native_calls.kernel_end(
        token, handle, device_id, on_leak=params.on_semaphore_leak, keep_alive=bufs.borrowed, outputs=direct
    )
    if not direct:
        return results
    # Outputs written in place come back from kernel_end (it aliases them).
    for j, out in zip(bufs.direct_order, ended[1]):
        results[j] = out
    return results


def _launch_params(params: InterpretParams, compiler_params, mesh, grid_mapping):
    """``(InterpretParams, CompilerParams)`` of the launch: `core_map` over
    a TensorCoreMesh fixes the cores per device, its grid split between
    them; under `jax.vmap` the user's dimension semantics cover the user's
    grid, and each vmapped grid dimension is "parallel" (as the TPU lowering
    has it; stock zips the user's semantics with the whole grid and fails)."""
    mosaic_params = compiler_params or jx.CompilerParams()
    if not isinstance(mosaic_params, jx.CompilerParams):
        raise ValueError(f"TPU interpret mode needs pltpu.CompilerParams, got {type(mosaic_params).__name__}")
    _check_side_effects(getattr(mosaic_params, "has_side_effects", False))
    semantics, vmapped = mosaic_params.dimension_semantics, tuple(grid_mapping.vmapped_dims)
    if semantics is not None and vmapped and len(semantics) + len(vmapped) == len(grid_mapping.grid):
        user = iter(semantics)
        full = tuple("parallel" if d in vmapped else next(user) for d in range(len(grid_mapping.grid)))
        mosaic_params = mosaic_params.replace(dimension_semantics=full)
    cores = jx.core_mesh_cores(mesh)
    if cores is not None:
        # core_map over a TensorCoreMesh (or a SparseCore mesh, each of
        # whose subcores is a core): the mesh fixes the cores per device.
        params = dataclasses.replace(params, num_cores_or_threads=cores)
        if params.num_cores_per_device > 1:
            mosaic_params = mosaic_params.replace(dimension_semantics=("parallel",) * len(mesh.shape))
    return params, mosaic_params


def _check_side_effects(value) -> None:
    """``CompilerParams.has_side_effects`` is a bool or a ``SideEffectType``:
    the TPU lowering raises this ValueError for anything else (stock
    accepts it)."""
    if isinstance(value, bool) or (jx.SideEffectType is not None and isinstance(value, jx.SideEffectType)):
        return
    raise ValueError(f"Invalid side effect type: {value}")


def _this_device():
    """``(axis_sizes, axis_indices, num_devices, device_id)`` of the device
    being traced: the mesh axes in scope and its logical id (its mesh
    coordinates, the last axis fastest)."""
    axis_sizes = jx.axis_sizes()
    num_devices = math.prod(axis_sizes.values()) if axis_sizes else 1
    axis_indices, device_id = device_ids.this_device(axis_sizes)
    return axis_sizes, axis_indices, num_devices, device_id


def _launch_uid(name, jaxpr, grid_mapping, args) -> int:
    """The id the devices of one launch meet under (with the XLA run and
    each device's count of launches of that id). Derived from what the
    kernel is, never from a process-wide counter: the same kernel lowers
    to the same program in every process, so jax's persistent compilation
    cache can serve it. Two different kernels sharing an id still meet
    correctly: their launches are counted apart in program order."""
    where = getattr(jaxpr.debug_info, "func_src_info", None) if jaxpr.debug_info else None
    shapes = ",".join(f"{getattr(a, 'dtype', '?')}{tuple(getattr(a, 'shape', ()))}" for a in args)
    text = f"{name}|{where}|{grid_mapping.grid}|{shapes}"
    return zlib.crc32(text.encode()) & 0x7FFFFFFF or 1


def _read_outputs(token, ctx: Ctx, bufs: buffers.LaunchBuffers):
    """``(token, outputs)``: each output read back from its HBM buffer by
    core 0 (without the padding to whole blocks); ``None`` for an output
    written in place (its value is `kernel_end`'s result)."""
    results = []
    for buf, aval, direct in zip(bufs.output_ids, bufs.output_avals, bufs.direct):
        if direct is not None or buf is None:  # written in place / a semaphore result
            results.append(None)
            continue
        region = TracedRegion(
            sizes=tuple(aval.shape),
            strides=(1,) * len(aval.shape),
            squeezed=(False,) * len(aval.shape),
            starts=(0,) * len(aval.shape),
        )
        token, r = native_calls.load(
            token, ctx.handle, ctx.device_id, 0, space_code(_HBM), buf, region if aval.shape else FULL, aval
        )
        results.append(r)
    return token, results
