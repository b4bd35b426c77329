"""`interpret_pallas_call` for `mosaic_rt.InterpretParams`: the program one
device runs for a pallas_call (called by jax's lowering through `seam`).

Same observable behaviour as stock TPU interpret mode (buffers, ids, grid
order, block copies, revisit check), but every memory/DMA/semaphore step is a
native FFI op instead of a Python callback.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret import logging_ops, native_calls, sites
from mosaic_rt.interpret.cores import run_cores_concurrently
from mosaic_rt.interpret.jaxpr_eval import (
    Ctx, eval_jaxpr, forward_any_to_hbm, semaphore_kind, space_code)
from mosaic_rt.interpret.params import InterpretParams
from mosaic_rt.interpret.regions import FULL, TracedRegion, block_region

_HBM = jx.MemorySpace.HBM
_SMEM = jx.MemorySpace.SMEM
_SEMAPHORE = jx.MemorySpace.SEMAPHORE
split_list = jx.split_list
pallas_core = jx.pallas_core
_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)

def _launch_uid(name, jaxpr, grid_mapping, args) -> int:
    """The id the devices of one launch meet under (with the XLA run and
    each device's count of launches of that id). Derived from what the
    kernel is, never from a process-wide counter: the same kernel lowers
    to the same program in every process, so jax's persistent compilation
    cache can serve it. Two different kernels sharing an id still meet
    correctly: their launches are counted apart in program order."""
    where = getattr(jaxpr.debug_info, "func_src_info", None) if jaxpr.debug_info else None
    shapes = ",".join(f"{getattr(a, 'dtype', '?')}{tuple(getattr(a, 'shape', ()))}"
                      for a in args)
    text = f"{name}|{where}|{grid_mapping.grid}|{shapes}"
    return zlib.crc32(text.encode()) & 0x7FFFFFFF or 1


@functools.lru_cache(maxsize=256)
def _grid_coordinates(grid, mosaic_params, seed):
    """Stock's per-dimension visiting order of a static grid (a seeded
    permutation of each "parallel" dimension), computed once on the host:
    emitted inside the kernel it costs dozens of XLA kernels to compile.
    Computed in numpy (the same threefry bits and stable sort as
    `jax.random.permutation`) where jax's PRNG settings allow; else by jax
    (one eager compile per grid, ~0.2-0.4 s)."""
    parallel = jx.parallel_dim_semantics(mosaic_params, len(grid))
    order = _numpy_grid_coordinates(grid, parallel, seed or 0)
    if order is not None:
        return order
    with jax.ensure_compile_time_eval():  # run now, even while tracing a jit
        coords = jax.jit(lambda: jx.randomized_grid_coordinates(grid, mosaic_params, seed))()
        return tuple(np.asarray(c) for c in coords)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 (20 rounds) hash of uint32 arrays, as jax computes it."""
    u32 = np.uint32
    ks = (u32(k1), u32(k2), u32(k1) ^ u32(k2) ^ u32(0x1BD11BDA))
    x = [np.asarray(x1, u32) + ks[0], np.asarray(x2, u32) + ks[1]]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x[0] = x[0] + x[1]
            x[1] = (x[1] << u32(r)) | (x[1] >> u32(32 - r))
            x[1] = x[0] ^ x[1]
        x[0] = x[0] + ks[(i + 1) % 3]
        x[1] = x[1] + ks[(i + 2) % 3] + u32(i + 1)
    return x


def _threefry_bits(key, n):
    """(bits1, bits2) for counts 0..n-1 (jax's partitionable iota)."""
    count = np.arange(n, dtype=np.uint64)
    return _threefry2x32(key[0], key[1], (count >> np.uint64(32)).astype(np.uint32),
                         (count & np.uint64(0xFFFFFFFF)).astype(np.uint32))


def _split(key):
    b1, b2 = _threefry_bits(key, 2)
    return (b1[0], b2[0]), (b1[1], b2[1])


def _numpy_grid_coordinates(grid, parallel, seed):
    """Stock's `_get_randomized_grid_coordinates` in numpy, or None when
    jax's PRNG is configured differently from what this reproduces."""
    try:
        if (not jax.config.jax_threefry_partitionable
                or str(jax.config.jax_default_prng_impl) != "threefry2x32"
                or not 0 <= int(seed) < 2**31):
            return None
    except AttributeError:
        return None
    with np.errstate(over="ignore"):
        key = (np.uint32(0), np.uint32(seed))
        out = []
        for size, par in zip(grid, parallel):
            if not par:
                out.append(np.zeros((0,), np.int32))
                continue
            key, sub = _split(key)
            x = np.arange(size, dtype=np.int32)
            rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
            for _ in range(rounds):
                sub, bits_key = _split(sub)
                b1, b2 = _threefry_bits(bits_key, size)
                x = x[np.argsort(b1 ^ b2, kind="stable")]
            out.append(x)
        return tuple(out)


def interpret_pallas_call(*args, interpret_params: InterpretParams, **kwargs):
    # Ops outside the kernel body (scratch allocations, block copies, the
    # leak check) carry the kernel function's line.
    with logging_ops.tracing_with(interpret_params.logging_mode), \
            sites.at_kernel(kwargs.get("jaxpr")):
        return _interpret_pallas_call(*args, interpret_params=interpret_params, **kwargs)


def _visiting_order(grid, mosaic_params, seed):
    """Per grid dim its visiting order (empty: the identity); numpy arrays
    when the grid is static."""
    parallel = jx.parallel_dim_semantics(mosaic_params, len(grid))
    if not any(parallel):
        return (np.zeros((0,), np.int32),) * len(grid)
    static = all(isinstance(g, (int, np.integer)) for g in grid)
    try:
        if static:
            return _grid_coordinates(tuple(int(g) for g in grid), mosaic_params, seed)
    except TypeError:  # unhashable params: no cache, same result
        pass
    return jx.randomized_grid_coordinates(grid, mosaic_params, seed)


def _static_order(randomized):
    """The visiting orders as tuples of ints, or None if any is traced."""
    try:
        return tuple(tuple(int(i) for i in np.asarray(c).reshape(-1)) for c in randomized)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None


def _block_factors(bm):
    """Per block dim: block index -> element start factor (stock's starts)."""
    out = []
    for b in bm.block_shape:
        if isinstance(b, (pallas_core.Squeezed, pallas_core.Element)):
            out.append(1)
        elif isinstance(b, pallas_core.Blocked):
            out.append(int(b.block_size))
        else:
            raise ValueError(f"Unsupported block dim type: {type(b)}")
    return tuple(out)


def _idx32(x):
    """A block index as an int32 scalar (a numpy constant when static)."""
    if isinstance(x, (int, np.integer)):
        return np.int32(x)
    x = jnp.asarray(x)
    return x if x.dtype == jnp.int32 else lax.convert_element_type(x, jnp.int32)


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
    del debug, cost_estimate, out_avals, metadata
    params = interpret_params
    mosaic_params = compiler_params or jx.CompilerParams()
    if not isinstance(mosaic_params, jx.CompilerParams):
        raise ValueError(
            f"TPU interpret mode needs pltpu.CompilerParams, got {type(mosaic_params).__name__}")
    if isinstance(mesh, jx.TensorCoreMesh):
        # core_map over a TensorCoreMesh: the mesh fixes the cores per device.
        params = dataclasses.replace(params, num_cores_or_threads=jx.tensorcore_mesh_cores(mesh))
        if params.num_cores_per_device > 1:
            mosaic_params = mosaic_params.replace(dimension_semantics=("parallel",))

    args = [jx.remove_memory_space_p.bind(a) for a in args]
    dyn_grid, scalars, inputs = split_list(
        args, [grid_mapping.num_dynamic_grid_bounds, grid_mapping.num_index_operands])
    dyn_iter = iter(dyn_grid)
    grid = tuple(next(dyn_iter) if isinstance(g, pallas_core.DynamicGridDim) else g
                 for g in grid_mapping.grid)

    axis_sizes = jx.axis_sizes()
    num_devices = math.prod(axis_sizes.values()) if axis_sizes else 1
    axis_indices = {k: lax.axis_index(k) for k in axis_sizes}
    # This device's logical id: its mesh coordinates, the last axis fastest.
    device_id = jnp.zeros((), jnp.int32)
    for name, size in axis_sizes.items():
        device_id = device_id * size + jnp.asarray(axis_indices[name], jnp.int32)

    token = jnp.zeros((), jnp.int32)
    uid = _launch_uid(name, jaxpr, grid_mapping, args)
    token, handle = native_calls.begin(token, device_id, uid=uid,
                                       num_devices=num_devices, params=params,
                                       name=name or "kernel")
    alloc = functools.partial(native_calls.allocate_buffer, handle=handle, device=device_id,
                              params=params)

    # Inputs live in HBM, padded to whole blocks (as stock).
    block_mappings = grid_mapping.block_mappings
    squeezed = [tuple(isinstance(b, pallas_core.Squeezed) for b in bm.block_shape)
                for bm in block_mappings]
    block_shapes = [jx.block_shape(bm) for bm in block_mappings]
    n_in, n_out = grid_mapping.num_inputs, grid_mapping.num_outputs
    inputs = [jx.pad_to_block_dimension(a, bs, params.uninitialized_memory)
              for a, bs in zip(inputs, block_shapes[:n_in])]
    input_ids = []
    for a in inputs:
        token, buf = alloc(token, core=None, space=space_code(_HBM), init=a)
        input_ids.append(buf)

    out_alias = {o: i - len(scalars) for i, o in input_output_aliases}
    if any(i < 0 for i in out_alias.values()):
        raise ValueError("Aliasing of scalar prefetch arguments is not currently "
                         "supported in TPU interpret mode.")
    output_ids, output_shapes, output_avals = [], [], []
    for j, bm in enumerate(grid_mapping.block_mappings_output):
        if j in out_alias:
            output_ids.append(input_ids[out_alias[j]])
            output_shapes.append(inputs[out_alias[j]].shape)
            output_avals.append(jax.ShapeDtypeStruct(inputs[out_alias[j]].shape,
                                                     inputs[out_alias[j]].dtype))
            continue
        aval = bm.array_aval
        padded = tuple(-(-d // b) * b for d, b in zip(aval.shape, block_shapes[n_in + j]))
        token, buf = alloc(token, core=None, space=space_code(_HBM),
                           shape=padded, dtype=aval.dtype)
        output_ids.append(buf)
        output_shapes.append(padded)
        output_avals.append(jax.ShapeDtypeStruct(aval.shape, aval.dtype))

    scalar_ids = []
    for s in scalars:
        token, buf = alloc(token, core=None, space=space_code(_SMEM), init=s)
        scalar_ids.append(buf)

    # Kernel arguments: block buffers, scratch, semaphores.
    kernel_args = list(scalar_ids)
    for i, var in enumerate(jaxpr.invars[grid_mapping.num_index_operands:]):
        out_j = i - n_in
        is_in, is_out = i < n_in, 0 <= out_j < n_out
        if is_in or is_out:
            space = forward_any_to_hbm(block_mappings[i].transformed_block_aval.memory_space)
        else:
            space = forward_any_to_hbm(var.aval.memory_space)
        if space is _SEMAPHORE:
            token, ids = native_calls.allocate_semaphores(
                token, handle, device_id, None, var.aval.shape, kind=semaphore_kind(var.aval))
            kernel_args.append(ids)
        elif space is _HBM:
            kernel_args.append(input_ids[i] if is_in else output_ids[out_j])
        else:
            token, buf = alloc(token, core=None, space=space_code(space),
                               shape=var.aval.shape, dtype=var.aval.dtype)
            kernel_args.append(buf)

    if mosaic_params.collective_id is None:
        # No barrier semaphore of its own: all devices start together.
        token = native_calls.device_barrier(token, handle, device_id)

    _, kernel_in_ids, kernel_out_ids, _ = split_list(
        kernel_args, [grid_mapping.num_index_operands, n_in, n_out])
    in_vars, out_vars = split_list(jaxpr.invars[grid_mapping.slice_block_ops], [n_in])
    spaces = [forward_any_to_hbm(bm.transformed_block_aval.memory_space)
              for bm in block_mappings]
    if jaxpr.debug_info.arg_names is not None:
        input_names, output_names = split_list(
            list(jaxpr.debug_info.arg_names[grid_mapping.slice_block_ops]), [n_in])
    else:
        input_names, output_names = ["unknown"] * n_in, ["unknown"] * n_out

    for j, var in enumerate(in_vars):
        if spaces[j] is _HBM and var.aval.shape != block_shapes[j]:
            raise ValueError(f"Kernel input {j} in HBM but does not have trivial BlockSpec.")
    for j, var in enumerate(out_vars):
        if spaces[n_in + j] is _HBM and var.aval.shape != block_shapes[n_in + j]:
            raise ValueError(f"Kernel output {j} in HBM but does not have trivial BlockSpec.")

    num_iterations = functools.reduce(jnp.multiply, grid) if grid else 1
    if isinstance(mesh, jx.TensorCoreMesh):
        # core_map: a fixed division of the grid between cores (as stock).
        randomized = (jnp.array((), dtype=jnp.int32),) * len(grid)
    else:
        randomized = _visiting_order(grid, mosaic_params, params.random_seed)
    parallel = jx.parallel_dim_semantics(mosaic_params, len(grid))
    subgrid = jx.parallel_subgrid_size(parallel, grid)
    cores = params.num_cores_per_device
    iters_per_core = ((subgrid + cores - 1) // cores) * (num_iterations // subgrid)

    def local_grid_env(point):
        if grid_mapping.local_grid_env is not None:
            return grid_mapping.local_grid_env(point, grid)
        return tuple(pallas_core.GridAxis(idx, b)
                     for dim, (idx, b) in enumerate(zip(point, grid))
                     if dim not in grid_mapping.vmapped_dims)

    def block_starts(bm, point, ctx, token):
        token, block_idx = eval_jaxpr(bm.index_map_jaxpr.jaxpr, *bm.index_map_jaxpr.consts,
                                      *point, *scalar_ids, ctx=ctx, token=token)

        def start(i, b):
            if isinstance(b, (pallas_core.Squeezed, pallas_core.Element)):
                return i
            if isinstance(b, pallas_core.Blocked):
                return i * b.block_size
            raise ValueError(f"Unsupported block dim type: {type(b)}")

        starts = jnp.array([start(i, b) for i, b in zip(block_idx, bm.block_shape)],
                           dtype=jnp.int32)
        return token, tuple(block_idx), starts

    def all_block_starts(point, ctx, token):
        idxs, starts = [], []
        for bm in block_mappings:
            token, bi, st = block_starts(bm, point, ctx, token)
            idxs.append(bi)
            starts.append(st)
        return token, tuple(idxs), tuple(starts)

    # The grid loop's bookkeeping runs natively (native_calls.grid_*) when
    # the grid and visiting order are static; else (dynamic grids, memory
    # logging) it is emitted as XLA, as stock does.
    order = _static_order(randomized)
    static_grid = all(isinstance(g, (int, np.integer)) for g in grid)
    n_static = math.prod(int(g) for g in grid) if static_grid else 0
    native_grid = (order is not None and n_static > 0
                   and not logging_ops.enabled(logging_ops.SHARED_MEMORY))
    tracked, blocks, revisit, n_tracked_in = [], [], [], 0
    if native_grid:
        sub = int(subgrid)
        per_core_static = ((sub + cores - 1) // cores) * (n_static // sub)
        tracked = [k for k in range(n_in + n_out) if spaces[k] is not _HBM]
        blocks = [native_calls.GridBlock(
            output=k >= n_in, space=space_code(spaces[k]),
            hbm_id=input_ids[k] if k < n_in else output_ids[k - n_in],
            kernel_id=kernel_in_ids[k] if k < n_in else kernel_out_ids[k - n_in],
            sizes=tuple(int(x) for x in block_shapes[k]), squeezed=squeezed[k],
            factors=_block_factors(block_mappings[k]),
            name=input_names[k] if k < n_in else output_names[k - n_in]) for k in tracked]
        revisit = [tracked.index(n_in + j) if (n_in + j in tracked and j not in out_alias)
                   else -1 for j in range(n_out)]
        n_tracked_in = sum(1 for k in tracked if k < n_in)

    def tracked_indices(point, ctx, token):
        """Evaluates every index map at `point`; the block indices of the
        tracked blocks, flattened (inputs first)."""
        flat = []
        for k, bm in enumerate(block_mappings):
            token, bi = eval_jaxpr(bm.index_map_jaxpr.jaxpr, *bm.index_map_jaxpr.consts,
                                   *point, *scalar_ids, ctx=ctx, token=token)
            if k in tracked:
                flat.append(tuple(_idx32(i) for i in bi))
        return token, flat

    def run_core_native(core, token):
        ctx = Ctx(handle=handle, device_id=device_id, core=core,
                  grid_mapping=grid_mapping, mesh=mesh, axis_sizes=axis_sizes,
                  axis_indices=axis_indices, mosaic_params=mosaic_params, params=params,
                  num_devices=num_devices)
        token, go, p0, p1 = native_calls.grid_begin(
            token, handle, device_id, core, grid=tuple(int(g) for g in grid), order=order,
            iters_per_core=per_core_static, num_iterations=n_static,
            blocks=blocks, revisit=revisit)
        with pallas_core.grid_env(local_grid_env(p0)):
            token, idx0 = tracked_indices(p0, ctx, token)

        def body(carry):
            token, go, point, next_point, idx = carry
            cctx = ctx.replace(grid_point=point)
            if params.trace_path is not None:
                token = native_calls.grid_step(token, handle, device_id, core, point,
                                               phase="begin")
            if params.grid_point_recorder is not None:
                vec = (jnp.stack(point) if point else jnp.zeros((0,), jnp.int32))
                token = jx.io_callback(params.grid_point_recorder, _TOKEN, token, vec, core)
            with pallas_core.grid_env(local_grid_env(point)):
                token, next_idx = tracked_indices(next_point, cctx, token)
                token = native_calls.grid_copy_in(token, handle, device_id, core,
                                                  [i for b in idx[:n_tracked_in] for i in b])
                token, _ = eval_jaxpr(jaxpr, *kernel_args, ctx=cctx, token=token)
                token, go, after = native_calls.grid_copy_out(
                    token, handle, device_id, core,
                    [i for b in idx[n_tracked_in:] for i in b],
                    [i for b in next_idx[n_tracked_in:] for i in b], ndim=len(grid))
                if params.trace_path is not None:
                    token = native_calls.grid_step(token, handle, device_id, core, (), phase="end")
            return (token, go, next_point, after, tuple(next_idx))

        carry = (token, go, p0, p1, tuple(idx0))
        token = lax.while_loop(lambda c: c[1], body, carry)[0]
        if cores > 1:
            token = native_calls.core_end(token, handle, device_id, core)
        return token

    def run_core_xla(core, token):
        ctx = Ctx(handle=handle, device_id=device_id, core=core,
                  grid_mapping=grid_mapping, mesh=mesh, axis_sizes=axis_sizes,
                  axis_indices=axis_indices, mosaic_params=mosaic_params, params=params,
                  num_devices=num_devices)
        first_iter = core * iters_per_core
        loop_bound = jnp.minimum((core + 1) * iters_per_core, num_iterations)

        def body(carry):
            it, loop_idx, point, prev_starts, cur_idx, cur_starts, token = carry
            cctx = ctx.replace(grid_point=point)
            if params.trace_path is not None:
                token = native_calls.grid_step(token, handle, device_id, core, point,
                                               phase="begin")
            if params.grid_point_recorder is not None:
                token = jx.io_callback(params.grid_point_recorder, _TOKEN,
                                             token, point, core)
            with pallas_core.grid_env(local_grid_env(point)):
                next_loop_idx = jx.next_grid_indices(grid, loop_idx)
                next_point = jx.grid_point(next_loop_idx, randomized)
                token, next_idx, next_starts = all_block_starts(next_point, cctx, token)

                for j in range(n_in):
                    if spaces[j] is _HBM:
                        continue
                    changed = (it == first_iter) | jnp.any(cur_starts[j] != prev_starts[j])
                    copy_in = functools.partial(
                        native_calls.copy_block_in, handle=handle, device=device_id, core=core,
                        src=input_ids[j],
                        src_region=block_region(cur_starts[j], block_shapes[j], squeezed[j]),
                        dst_space=space_code(spaces[j]), dst=kernel_in_ids[j],
                        name=input_names[j], block_indices=cur_idx[j], grid_point=point)
                    token = lax.cond(changed, copy_in, lambda t: t, token)

                token, _ = eval_jaxpr(jaxpr, *kernel_args, ctx=cctx, token=token)

                out_regions = []
                for j in range(n_out):
                    k = n_in + j
                    if spaces[k] is _HBM:
                        out_regions.append(None)
                        continue
                    region = block_region(cur_starts[k], block_shapes[k], squeezed[k])
                    out_regions.append(None if j in out_alias else region)
                    changed = (it + 1 == loop_bound) | jnp.any(cur_starts[k] != next_starts[k])
                    copy_out = functools.partial(
                        native_calls.copy_block_out, handle=handle, device=device_id, core=core,
                        src_space=space_code(spaces[k]), src=kernel_out_ids[j],
                        dst=output_ids[j], dst_region=region,
                        name=output_names[j], block_indices=cur_idx[k], grid_point=point)
                    token = lax.cond(changed, copy_out, lambda t: t, token)
                token = native_calls.check_revisit(token, handle, device_id, core, loop_idx,
                                                   out_regions)
                if params.trace_path is not None:
                    token = native_calls.grid_step(token, handle, device_id, core, (), phase="end")
            return (it + 1, next_loop_idx, next_point, cur_starts, next_idx, next_starts, token)

        init_loop_idx = jx.grid_indices(grid, first_iter)
        init_point = jx.grid_point(init_loop_idx, randomized)
        with pallas_core.grid_env(local_grid_env(init_point)):
            token, init_idx, init_starts = all_block_starts(init_point, ctx, token)
        carry = (first_iter, init_loop_idx, init_point, init_starts, init_idx, init_starts, token)
        token = lax.while_loop(lambda c: c[0] < loop_bound, body, carry)[-1]
        if cores > 1:
            # Deadlock detection learns at once that this core is done.
            token = native_calls.core_end(token, handle, device_id, core)
        return token

    run_core = run_core_native if native_grid else run_core_xla

    if cores == 1:
        token = run_core(jnp.int32(0), token)
    else:
        # Race detection: the cores start from, and end in, one shared past
        # (so core 0's read of the outputs is ordered after every core).
        sync = params.detect_races
        if sync:
            token = native_calls.sync_device_cores(token, handle, device_id)
        token = run_cores_concurrently(run_core, cores, token, device=device_id,
                                       num_devices=num_devices)
        if sync:
            token = native_calls.sync_device_cores(token, handle, device_id)

    results = []
    for buf, shape, aval in zip(output_ids, output_shapes, output_avals):
        region = TracedRegion(sizes=tuple(aval.shape), strides=(1,) * len(aval.shape),
                        squeezed=(False,) * len(aval.shape), starts=(0,) * len(aval.shape))
        token, r = native_calls.load(token, handle, device_id, 0, space_code(_HBM), buf,
                                     region if aval.shape else FULL, aval)
        results.append(r)
    native_calls.end(token, handle, device_id, on_leak=params.on_semaphore_leak)
    return results
