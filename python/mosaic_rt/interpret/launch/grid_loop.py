"""The grid loop of a launch: on each core of the device, every grid point
the core owns, in the visiting order -- block copies in, the kernel body,
block copies out.

Its bookkeeping (which blocks moved, their copies, the revisit check, the
next point) runs natively (`grid_begin` / `grid_copy_in` / `grid_copy_out`)
when the visiting order is static (dynamic bounds of "arbitrary" dims are
operands of `grid_begin`); else -- a dynamic "parallel" dim, and memory
logging, which logs every block copy -- it is emitted as XLA the way stock
emits it. Both visit the same points and copy the same blocks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.context import Ctx
from mosaic_rt.interpret.evaluation import logging_ops, native_calls
from mosaic_rt.interpret.evaluation.jaxpr_eval import eval_jaxpr
from mosaic_rt.interpret.evaluation.regions import block_region
from mosaic_rt.interpret.launch.buffers import BlockOperands, LaunchBuffers
from mosaic_rt.interpret.launch.cores import run_cores_concurrently
from mosaic_rt.interpret.launch.visiting_order import static_order, visiting_order
from mosaic_rt.memory_spaces import code as space_code

materialize = native_calls.materialize


def _settled(branch):
    """A `lax.cond` branch on the token whose ops are emitted inside it."""
    return lambda token: materialize(branch(token))


pallas_core = jx.pallas_core
_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)


@dataclasses.dataclass(frozen=True)
class NativePlan:
    """What `grid_begin` is given: the static visiting order, each core's
    share of the iterations, and the blocks it copies."""

    order: tuple  # per grid dim its visiting order (empty: identity)
    grid: tuple  # per dim its size: an int, or a traced bound
    num_iterations: int  # 0 when the grid has a dynamic bound
    iters_per_core: int  # 0 when the grid has a dynamic bound
    parallel_subgrid: int  # the product of the parallel dims (static)
    cores: int
    tracked: list  # block operands not in HBM (copied): inputs, reloaded outputs, outputs
    blocks: list  # a native_calls.GridBlock per tracked operand
    revisit: list  # per output: its index in `blocks` if revisits fail, else -1
    n_tracked_in: int  # how many of `blocks` are inputs


@dataclasses.dataclass(frozen=True)
class GridLoop:
    """One launch's grid loop, as every core of the device runs it."""

    ctx: Ctx  # the launch's; `core` is set per core
    jaxpr: jx.Jaxpr  # the kernel body
    grid: tuple  # static ints, or traced bounds
    randomized: Any  # per grid dim its visiting order
    num_iterations: Any  # int or traced
    iters_per_core: Any
    cores: int
    blocks: BlockOperands
    buffers: LaunchBuffers
    native: NativePlan | None  # None: the bookkeeping is XLA


def plan(ctx: Ctx, jaxpr: jx.Jaxpr, grid, blocks: BlockOperands, buffers: LaunchBuffers) -> GridLoop:
    """The grid loop of a launch: its visiting order, how the iterations are
    split between the cores (stock's split), native or XLA bookkeeping."""
    params, mosaic_params = ctx.params, ctx.mosaic_params
    num_iterations = functools.reduce(jnp.multiply, grid) if grid else 1
    if jx.core_mesh_cores(ctx.mesh) is not None:
        # core_map: a fixed division of the grid between cores (as stock).
        # Empty orders (the index itself) as host constants, so the native
        # loop takes them: a traced one would force the XLA loop, whose
        # per-core bounds cost three scalar fusions to compile.
        randomized = (np.zeros((0,), np.int32),) * len(grid)
    else:
        randomized = visiting_order(grid, mosaic_params, params.random_seed)
    parallel = jx.parallel_dim_semantics(mosaic_params, len(grid))
    subgrid = jx.parallel_subgrid_size(parallel, grid)
    cores = params.num_cores_per_device
    iters_per_core = ((subgrid + cores - 1) // cores) * (num_iterations // subgrid)
    return GridLoop(
        ctx=ctx,
        jaxpr=jaxpr,
        grid=grid,
        randomized=randomized,
        num_iterations=num_iterations,
        iters_per_core=iters_per_core,
        cores=cores,
        blocks=blocks,
        buffers=buffers,
        native=_native_plan(grid, randomized, subgrid, cores, blocks, buffers),
    )


def _native_plan(grid, randomized, subgrid, cores, blocks: BlockOperands, buffers: LaunchBuffers) -> NativePlan | None:
    """The native loop's plan, or None when the bookkeeping must be XLA
    (a traced visiting order, an empty static grid, memory logging).
    Dynamic bounds (of dims in the identity order) are native-loop
    operands: the loop's counts are computed from them at run time."""
    order = static_order(randomized)
    static_grid = all(isinstance(g, (int, np.integer)) for g in grid)
    n_static = math.prod(int(g) for g in grid) if static_grid else 0
    if (
        order is None
        or (static_grid and n_static <= 0)
        or not isinstance(subgrid, (int, np.integer))
        or logging_ops.enabled(logging_ops.SHARED_MEMORY)
    ):
        return None
    sub = int(subgrid)
    n_in, n_out = blocks.n_in, blocks.n_out
    reloaded = reloaded_outputs(blocks, buffers)
    # An output block revisited at any step is copied in too (from the
    # output's HBM buffer, where its last visit left it): listed among the
    # inputs a second time.
    tracked_in = [k for k in range(n_in) if blocks.copied[k]] + [n_in + j for j in reloaded]
    tracked_out = [k for k in range(n_in, n_in + n_out) if blocks.copied[k]]
    tracked = tracked_in + tracked_out
    grid_blocks = [
        native_calls.GridBlock(
            output=at >= len(tracked_in),
            space=space_code(blocks.spaces[k]),
            hbm_id=buffers.input_ids[k] if k < n_in else buffers.output_ids[k - n_in],
            kernel_id=(buffers.kernel_in_ids[k] if k < n_in else buffers.kernel_out_ids[k - n_in]),
            sizes=tuple(int(x) for x in blocks.shapes[k]),
            squeezed=blocks.squeezed[k],
            factors=_block_factors(blocks.mappings[k]),
            name=blocks.in_names[k] if k < n_in else blocks.out_names[k - n_in],
        )
        for at, k in enumerate(tracked)
    ]
    # An output aliased to an input, or reloaded, is not checked for revisits.
    revisit = [
        len(tracked_in) + tracked_out.index(n_in + j)
        if (n_in + j in tracked_out and j not in buffers.out_alias and j not in reloaded)
        else -1
        for j in range(n_out)
    ]
    return NativePlan(
        order=order,
        grid=tuple(int(g) if isinstance(g, (int, np.integer)) else g for g in grid),
        num_iterations=n_static,
        iters_per_core=((sub + cores - 1) // cores) * (n_static // sub),
        parallel_subgrid=sub,
        cores=cores,
        tracked=tracked,
        blocks=grid_blocks,
        revisit=revisit,
        n_tracked_in=len(tracked_in),
    )


def reloaded_outputs(blocks: BlockOperands, buffers: LaunchBuffers) -> tuple:
    """The outputs whose blocks may be revisited at any step
    (``pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY)``): the TPU
    pipeline restores such a block from HBM when it comes back to it, so
    each visit starts from what the last one wrote back. (Without it only
    a revisit at the very next step keeps the block, and any other revisit
    is an error.) An output aliased to an input is left as it is."""
    any_mode = getattr(getattr(pallas_core, "RevisitMode", None), "ANY", None)
    if any_mode is None:
        return ()
    return tuple(
        j
        for j in range(blocks.n_out)
        if blocks.copied[blocks.n_in + j]
        and j not in buffers.out_alias
        and getattr(blocks.mappings[blocks.n_in + j].pipeline_mode, "revisit", None) is any_mode
    )


def prologue_grid_begin(loop: GridLoop) -> dict | None:
    """`grid_begin`'s arguments for the launch's prologue call when it
    begins the grid loop too (one core, native bookkeeping), else None.
    The blocks name their buffers as `loop.buffers` does (by allocation
    index, see `buffers.plan`)."""
    if loop.native is None or loop.cores != 1:
        return None
    return _grid_begin_args(loop.native)


def _grid_begin_args(native: NativePlan) -> dict:
    return dict(
        grid=native.grid,
        order=native.order,
        iters_per_core=native.iters_per_core,
        num_iterations=native.num_iterations,
        blocks=native.blocks,
        revisit=native.revisit,
        parallel_subgrid=native.parallel_subgrid,
        num_cores=native.cores,
    )


def launched(loop: GridLoop, ctx: Ctx, buffers: LaunchBuffers, id_of) -> GridLoop:
    """`loop` (planned on allocation indices) with the launch's context and
    buffers (`id_of`: allocation index -> id)."""
    native = loop.native
    if native is not None:
        native = dataclasses.replace(
            native,
            blocks=[
                dataclasses.replace(b, hbm_id=id_of(b.hbm_id), kernel_id=id_of(b.kernel_id)) for b in native.blocks
            ],
        )
    return dataclasses.replace(loop, ctx=ctx, buffers=buffers, native=native)


def run_cores(loop: GridLoop, token, first_step=None):
    """Runs the grid loop on every core of the device: inline for one core,
    else each core's program on a thread of its own (`interpret/launch/cores.py`).
    ``first_step``: `grid_begin`'s ``(go, p0, p1)`` when the prologue began
    the loop (see `prologue_grid_begin`)."""
    run_core = functools.partial(_run_core_native if loop.native is not None else _run_core_xla, loop)
    if loop.cores == 1:
        if first_step is not None:
            return run_core(jnp.int32(0), token, first_step=first_step)
        return run_core(jnp.int32(0), token)
    ctx = loop.ctx
    # Race detection: the cores start from, and end in, one shared past
    # (so core 0's read of the outputs is ordered after every core).
    sync = ctx.params.detect_races
    if sync:
        token = native_calls.sync_device_cores(token, ctx.handle, ctx.device_id)
    token = run_cores_concurrently(run_core, loop.cores, token, device=ctx.device_id, num_devices=ctx.num_devices)
    if sync:
        token = native_calls.sync_device_cores(token, ctx.handle, ctx.device_id)
    return token


# ------------------------------------------------------------- native loop


def _run_core_native(loop: GridLoop, core, token, first_step=None):
    """The grid loop of `core` with native bookkeeping: `grid_begin` (or
    the launch's prologue, `first_step`) gives the first two points; each
    step copies in the input blocks that moved, runs the body, and
    `grid_copy_out` writes back the output blocks the next step leaves and
    says whether another step runs."""
    ctx, native = loop.ctx.replace(core=core), loop.native
    handle, device, n_in = ctx.handle, ctx.device_id, native.n_tracked_in
    if first_step is not None:
        go, p0, p1 = first_step
    else:
        token, go, p0, p1 = native_calls.grid_begin(token, handle, device, core, **_grid_begin_args(native))
    with pallas_core.grid_env(_local_grid_env(loop, p0)):
        token, idx0 = _tracked_indices(loop, p0, ctx, token)

    # Only block indices that are neither a grid index nor a constant are
    # carried: every carried scalar costs XLA a copy per step.
    sources = _index_sources(loop)

    def body(carry):
        # `idx`: the tracked blocks' indices at `point`. Those at
        # `next_point` are evaluated before the body (as in the XLA loop):
        # grid_copy_out compares the two.
        token, go, point, next_point, carried = carry
        idx = _rebuild_indices(sources, point, carried, idx0)
        cctx = ctx.replace(grid_point=point)
        token = _begin_step(loop, core, point, token, stack_point=True)
        with pallas_core.grid_env(_local_grid_env(loop, point)):
            token, next_idx = _tracked_indices(loop, next_point, cctx, token)
            token = native_calls.grid_copy_in(token, handle, device, core, [i for b in idx[:n_in] for i in b])
            token, _ = eval_jaxpr(loop.jaxpr, *loop.buffers.kernel_args, ctx=cctx, token=token)
            token, go, after = native_calls.grid_copy_out(
                token,
                handle,
                device,
                core,
                [i for b in idx[n_in:] for i in b],
                [i for b in next_idx[n_in:] for i in b],
                ndim=len(loop.grid),
            )
            token = _end_step(loop, core, token)
        return (materialize(token), go, next_point, after, _carried_indices(sources, next_idx))

    carry = (materialize(token), go, p0, p1, _carried_indices(sources, idx0))
    if native.num_iterations == 1 and loop.cores == 1:
        # One step, which always runs: straight-line code. A loop XLA cannot
        # see through (its condition is native) costs compile time in every
        # grid-less kernel for nothing.
        token = body(carry)[0]
    else:
        token = lax.while_loop(lambda c: c[1], body, carry)[0]
    return _core_done(loop, core, token)


def _index_sources(loop: GridLoop):
    """Per tracked block, per block index, where a step takes it from (the
    same at every point, read off the index map): ``("point", d)`` when the
    map returns grid index `d` itself, ``("const",)`` for a literal, else
    ``("carry",)`` (computed the step before and carried)."""
    sources = []
    for k in loop.native.tracked:
        jaxpr = loop.blocks.mappings[k].index_map_jaxpr.jaxpr
        grid_vars = jaxpr.invars[: len(loop.grid)]
        defined = {id(v) for v in jaxpr.constvars + jaxpr.invars}
        defined |= {id(v) for eqn in jaxpr.eqns for v in eqn.outvars}
        block = []
        for v in jaxpr.outvars:
            point_dim = next((d for d, g in enumerate(grid_vars) if v is g), None)
            if point_dim is not None:
                block.append(("point", point_dim))
            elif id(v) not in defined:
                block.append(("const",))
            else:
                block.append(("carry",))
        sources.append(tuple(block))
    return tuple(sources)


def _carried_indices(sources, idx):
    """The entries of `idx` (per tracked block its indices) that are carried."""
    return tuple(i for src, b in zip(sources, idx) for s, i in zip(src, b) if s[0] == "carry")


def _rebuild_indices(sources, point, carried, consts):
    """The tracked blocks' indices at `point` from their sources; literals
    are taken from `consts` (the indices at the first point)."""
    carried = iter(carried)
    idx = []
    for src, const_block in zip(sources, consts):
        idx.append(
            tuple(
                point[s[1]] if s[0] == "point" else const_block[d] if s[0] == "const" else next(carried)
                for d, s in enumerate(src)
            )
        )
    return idx


def _tracked_indices(loop: GridLoop, point, ctx: Ctx, token):
    """Evaluates every index map at `point`; the block indices of the
    tracked blocks, flattened (inputs first)."""
    indices = {}
    for k, bm in enumerate(loop.blocks.mappings):
        token, bi = _block_indices(loop, bm, point, ctx, token)
        indices[k] = tuple(_idx32(i) for i in bi)
    return token, [indices[k] for k in loop.native.tracked]


def _block_factor(b):
    """Block dim `b`'s element start per block index (stock's starts): None
    when the index is the start itself (Squeezed, Element)."""
    if isinstance(b, (pallas_core.Squeezed, pallas_core.Element)):
        return None
    if isinstance(b, pallas_core.Blocked):
        return b.block_size
    raise ValueError(f"Unsupported block dim type: {type(b)}")


def _block_factors(bm):
    """Per block dim: block index -> element start factor."""
    return tuple(1 if f is None else int(f) for f in map(_block_factor, bm.block_shape))


def _idx32(x):
    """A block index as an int32 scalar (a numpy constant when static)."""
    if isinstance(x, (int, np.integer)):
        return np.int32(x)
    x = jnp.asarray(x)
    return x if x.dtype == jnp.int32 else lax.convert_element_type(x, jnp.int32)


# ---------------------------------------------------------------- XLA loop


class _Step(NamedTuple):
    """One step of the XLA loop: iteration, grid point, and every block
    operand's block indices and element starts there."""

    core: Any
    it: Any
    point: Any
    idx: tuple
    starts: tuple


def _run_core_xla(loop: GridLoop, core, token):
    """The grid loop of `core` with its bookkeeping in XLA, as stock emits
    it: each step computes the next point's block starts, copies in the
    input blocks that moved, runs the body, writes back the output blocks
    that move next, and checks for revisited output blocks."""
    ctx = loop.ctx.replace(core=core)
    # Host orders as constants: the loop indexes them with traced indices.
    randomized = tuple(jnp.asarray(c) for c in loop.randomized)
    first_iter = core * loop.iters_per_core
    loop_bound = jnp.minimum((core + 1) * loop.iters_per_core, loop.num_iterations)

    def body(carry):
        it, loop_idx, point, prev_starts, cur_idx, cur_starts, token = carry
        step = _Step(core, it, point, cur_idx, cur_starts)
        cctx = ctx.replace(grid_point=point)
        token = _begin_step(loop, core, point, token, stack_point=False)
        with pallas_core.grid_env(_local_grid_env(loop, point)):
            next_loop_idx = jx.next_grid_indices(loop.grid, loop_idx)
            next_point = jx.grid_point(next_loop_idx, randomized)
            token, next_idx, next_starts = _all_block_starts(loop, next_point, cctx, token)
            token = _copy_in_moved_blocks(loop, step, first_iter, prev_starts, token)
            token, _ = eval_jaxpr(loop.jaxpr, *loop.buffers.kernel_args, ctx=cctx, token=token)
            token, out_regions = _copy_out_moving_blocks(loop, step, loop_bound, next_starts, token)
            token = native_calls.check_revisit(token, ctx.handle, ctx.device_id, core, loop_idx, out_regions)
            token = _end_step(loop, core, token)
        return (it + 1, next_loop_idx, next_point, cur_starts, next_idx, next_starts, materialize(token))

    init_loop_idx = jx.grid_indices(loop.grid, first_iter)
    init_point = jx.grid_point(init_loop_idx, randomized)
    with pallas_core.grid_env(_local_grid_env(loop, init_point)):
        token, init_idx, init_starts = _all_block_starts(loop, init_point, ctx, token)
    carry = (first_iter, init_loop_idx, init_point, init_starts, init_idx, init_starts, materialize(token))
    token = lax.while_loop(lambda c: c[0] < loop_bound, body, carry)[-1]
    return _core_done(loop, core, token)


def _copy_in_moved_blocks(loop: GridLoop, step: _Step, first_iter, prev_starts, token):
    """Copies in each input block whose start moved since the previous step
    (every one on the core's first step)."""
    ctx, blocks, buffers = loop.ctx, loop.blocks, loop.buffers
    for j in range(blocks.n_in):
        if not blocks.copied[j]:
            continue
        changed = (step.it == first_iter) | jnp.any(step.starts[j] != prev_starts[j])
        copy_in = functools.partial(
            native_calls.copy_block_in,
            handle=ctx.handle,
            device=ctx.device_id,
            core=step.core,
            src=buffers.input_ids[j],
            src_region=block_region(step.starts[j], blocks.shapes[j], blocks.squeezed[j]),
            dst_space=space_code(blocks.spaces[j]),
            dst=buffers.kernel_in_ids[j],
            name=blocks.in_names[j],
            block_indices=step.idx[j],
            grid_point=step.point,
        )
        token = lax.cond(changed, _settled(copy_in), lambda t: t, materialize(token))
    for j in reloaded_outputs(blocks, buffers):
        k = blocks.n_in + j
        changed = (step.it == first_iter) | jnp.any(step.starts[k] != prev_starts[k])
        reload = functools.partial(
            native_calls.copy_block_in,
            handle=ctx.handle,
            device=ctx.device_id,
            core=step.core,
            src=buffers.output_ids[j],
            src_region=block_region(step.starts[k], blocks.shapes[k], blocks.squeezed[k]),
            dst_space=space_code(blocks.spaces[k]),
            dst=buffers.kernel_out_ids[j],
            name=blocks.out_names[j],
            block_indices=step.idx[k],
            grid_point=step.point,
        )
        token = lax.cond(changed, _settled(reload), lambda t: t, materialize(token))
    return token


def _copy_out_moving_blocks(loop: GridLoop, step: _Step, loop_bound, next_starts, token):
    """Writes back each output block the next step moves away from (every
    one on the core's last step). Returns ``(token, regions)``: per output
    its block's region for the revisit check (None: not checked)."""
    ctx, blocks, buffers = loop.ctx, loop.blocks, loop.buffers
    reloaded = reloaded_outputs(blocks, buffers)
    out_regions = []
    for j in range(blocks.n_out):
        k = blocks.n_in + j
        if not blocks.copied[k]:
            out_regions.append(None)
            continue
        region = block_region(step.starts[k], blocks.shapes[k], blocks.squeezed[k])
        # An output aliased to an input, or reloaded, is not checked for revisits.
        out_regions.append(None if j in buffers.out_alias or j in reloaded else region)
        changed = (step.it + 1 == loop_bound) | jnp.any(step.starts[k] != next_starts[k])
        copy_out = functools.partial(
            native_calls.copy_block_out,
            handle=ctx.handle,
            device=ctx.device_id,
            core=step.core,
            src_space=space_code(blocks.spaces[k]),
            src=buffers.kernel_out_ids[j],
            dst=buffers.output_ids[j],
            dst_region=region,
            name=blocks.out_names[j],
            block_indices=step.idx[k],
            grid_point=step.point,
        )
        token = lax.cond(changed, _settled(copy_out), lambda t: t, materialize(token))
    return token, out_regions


def _all_block_starts(loop: GridLoop, point, ctx: Ctx, token):
    """``(token, indices, starts)``: every block operand's block indices
    at `point` and its block's element starts (an int32 vector)."""
    idxs, starts = [], []
    for bm in loop.blocks.mappings:
        token, block_idx = _block_indices(loop, bm, point, ctx, token)
        starts.append(jnp.array([_element_start(i, b) for i, b in zip(block_idx, bm.block_shape)], dtype=jnp.int32))
        idxs.append(tuple(block_idx))
    return token, tuple(idxs), tuple(starts)


def _element_start(i, b):
    """The element start of block index `i` along block dim `b`."""
    factor = _block_factor(b)
    return i if factor is None else i * factor


# ---------------------------------------------------------------- both loops


def _block_indices(loop: GridLoop, bm, point, ctx: Ctx, token):
    """``(token, block indices)``: block mapping `bm`'s index map at `point`
    (it may read the scalar-prefetch operands)."""
    return eval_jaxpr(
        bm.index_map_jaxpr.jaxpr, *bm.index_map_jaxpr.consts, *point, *loop.buffers.scalar_ids, ctx=ctx, token=token
    )


def _local_grid_env(loop: GridLoop, point):
    """The grid environment (`pl.program_id` / `pl.num_programs`) at `point`."""
    grid_mapping, grid = loop.ctx.grid_mapping, loop.grid
    if grid_mapping.local_grid_env is not None:
        return grid_mapping.local_grid_env(point, grid)
    return tuple(
        pallas_core.GridAxis(idx, b)
        for dim, (idx, b) in enumerate(zip(point, grid))
        if dim not in grid_mapping.vmapped_dims
    )


def _begin_step(loop: GridLoop, core, point, token, *, stack_point: bool):
    """A step's start on the timeline and for `grid_point_recorder` (which
    gets the point as one vector: `stack_point` when it is a tuple)."""
    ctx, params = loop.ctx, loop.ctx.params
    if params.trace_path is not None:
        token = native_calls.grid_step(token, ctx.handle, ctx.device_id, core, point, phase="begin")
    if params.grid_point_recorder is not None:
        if stack_point:
            point = jnp.stack(point) if point else jnp.zeros((0,), jnp.int32)
        token = jx.io_callback(params.grid_point_recorder, _TOKEN, materialize(token), point, core)
    return token


def _end_step(loop: GridLoop, core, token):
    """A step's end on the timeline."""
    if loop.ctx.params.trace_path is not None:
        token = native_calls.grid_step(token, loop.ctx.handle, loop.ctx.device_id, core, (), phase="end")
    return token


def _core_done(loop: GridLoop, core, token):
    """With several cores, deadlock detection learns at once that this
    core's program is done."""
    if loop.cores > 1:
        token = native_calls.core_end(token, loop.ctx.handle, loop.ctx.device_id, core)
    return token
