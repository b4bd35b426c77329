"""Evaluates a Pallas TPU kernel jaxpr at trace time, emitting ordinary JAX
for compute and one native op (`mosaic_rt.interpret.ops`) per memory, DMA
and semaphore operation. A token is threaded through every native op so XLA
keeps the program order of each core.

Refs are represented by their buffer id (int32 scalar); semaphore refs by
int32 arrays of semaphore ids, indexed like the refs they stand for.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import core as jax_core
from jax._src import pjit
from jax._src import source_info_util
from jax._src import state
from jax._src.pallas import core as pallas_core
from jax._src.pallas import primitives
from jax._src.pallas.mosaic import core as mosaic_core
from jax._src.pallas.mosaic import primitives as mosaic_primitives
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as stock
from jax._src.pallas.mosaic.interpret import utils as stock_utils
from jax._src.state import discharge as state_discharge
from jax._src.state import primitives as state_primitives
from jax._src.util import split_list

from mosaic_rt.interpret import ops, views
from mosaic_rt.interpret.params import InterpretParams
from mosaic_rt.interpret.regions import to_region

_SEMAPHORE = mosaic_core.MemorySpace.SEMAPHORE
_HBM = mosaic_core.MemorySpace.HBM
_ANY = pallas_core.MemorySpace.ANY


def space_code(memory_space) -> int:
    """Stock's numbering of memory spaces (ANY is forwarded to HBM)."""
    if memory_space is _ANY:
        memory_space = _HBM
    return stock.TPU_MEMORY_SPACE_IDXS[memory_space]


def forward_any_to_hbm(memory_space):
    return _HBM if memory_space is _ANY else memory_space


def _space_or_raise_if_hbm(aval, primitive_name, message=None):
    space = forward_any_to_hbm(aval.memory_space)
    if space is _HBM:
        raise ValueError(message or (
            f"{primitive_name}: Buffers with a memory space of HBM or ANY cannot"
            " be referenced directly. Instead, use `pltpu.sync_copy` or"
            " `pltpu.async_copy`."))
    return space


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ctx:
    """Trace-time facts about the core whose program is being emitted."""

    handle: Any                 # runtime handle (traced) from `ops.begin`
    device_id: Any              # logical device id (traced int32)
    core: Any                   # local core id (int or traced int32)
    grid_point: Any = None
    grid_mapping: pallas_core.GridMapping
    mesh: Any
    axis_sizes: dict
    axis_indices: dict
    mosaic_params: mosaic_core.CompilerParams
    params: InterpretParams

    def replace(self, **changes) -> "Ctx":
        return dataclasses.replace(self, **changes)


def _logical_device(ctx: Ctx, device_id, device_id_type):
    return stock_utils._device_id_to_logical(
        device_id, device_id_type, ctx.axis_sizes, ctx.axis_indices)


def eval_jaxpr(jaxpr: jax_core.Jaxpr, *args, ctx: Ctx, token):
    """Emits `jaxpr` for the core of `ctx`; returns (token, outputs)."""
    sentinel = jnp.inf if ctx.params.skip_floating_point_ops else None
    env = stock_utils.JaxprEnv(
        vars=jaxpr.constvars + jaxpr.invars, values=args,
        sentinel_for_floating_point_values=sentinel)
    for eqn in jaxpr.eqns:
        with source_info_util.user_context(
                eqn.source_info.traceback, name_stack=eqn.source_info.name_stack):
            token, out = _eval_eqn(eqn, env, ctx, token)
        out = out if eqn.primitive.multiple_results else [out]
        env.write_many(eqn.outvars, out)
    return token, env.read_many(jaxpr.outvars)


_RULES: dict[jax_core.Primitive, Any] = {}


def _rule(*prims):
    def register(fn):
        for p in prims:
            _RULES[p] = fn
        return fn
    return register


def _eval_eqn(eqn, env, ctx: Ctx, token):
    prim = eqn.primitive
    # Inputs are read lazily: with skip_floating_point_ops a skipped eqn must
    # not materialise its (sentinel) inputs.
    read = functools.partial(env.read_many, eqn.invars)
    if (impl := stock._interpret_impls.get(prim)) is not None:
        invals = read()
        impl_jaxpr = jax.make_jaxpr(functools.partial(impl, **eqn.params))(*invals)
        token, out = eval_jaxpr(impl_jaxpr.jaxpr, *impl_jaxpr.consts, *invals,
                                ctx=ctx, token=token)
        return token, (out if prim.multiple_results else out[0])
    rule = _RULES.get(prim)
    if rule is not None:
        result = rule(eqn, read, ctx, token)
        if result is not NotImplemented:
            return result
    if ctx.params.skip_floating_point_ops and all(
            stock_utils.is_float(v.aval.dtype) for v in eqn.outvars):
        out = [v.aval for v in eqn.outvars]
        return token, (out if prim.multiple_results else out[0])
    return token, prim.bind(*read(), **prim.get_bind_params(eqn.params))


# ------------------------------------------------------------------- memory

def _load_view(token, ctx, space, ref, ref_aval, transforms, aval):
    region, rest, base = views.split(transforms, ref_aval)
    if not rest:
        return ops.load(token, ctx.handle, ctx.device_id, ctx.core, space_code(space),
                        ref, region, aval)
    token, value = ops.load(token, ctx.handle, ctx.device_id, ctx.core, space_code(space),
                            ref, region, base)
    return token, views.read(value, rest)


def _swap_view(token, ctx, space, ref, ref_aval, transforms, val, mask, aval):
    region, rest, base = views.split(transforms, ref_aval)
    if not rest:
        return ops.swap(token, ctx.handle, ctx.device_id, ctx.core, space_code(space),
                        ref, region, val, mask, aval)
    token, value = ops.load(token, ctx.handle, ctx.device_id, ctx.core, space_code(space),
                            ref, region, base)
    val = jnp.broadcast_to(jnp.asarray(val, aval.dtype), aval.shape)
    old, new = views.write(value, rest, val, mask)
    token = ops.store(token, ctx.handle, ctx.device_id, ctx.core, space_code(space),
                      ref, region, new)
    return token, old


@_rule(primitives.load_p)
def _masked_load(eqn, read, ctx, token):
    ref, transforms, mask, _ = jax.tree.unflatten(eqn.params["args_tree"], read())
    if mask is not None:
        raise NotImplementedError("masked load_p")
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "load_p")
    return _load_view(token, ctx, space, ref, eqn.invars[0].aval, transforms,
                      eqn.outvars[0].aval)


@_rule(primitives.swap_p)
def _masked_swap(eqn, read, ctx, token):
    ref, transforms, val, mask = jax.tree.unflatten(eqn.params["args_tree"], read())
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "swap_p")
    return _swap_view(token, ctx, space, ref, eqn.invars[0].aval, transforms, val, mask,
                      eqn.outvars[0].aval)


@_rule(state_primitives.get_p)
def _get(eqn, read, ctx, token):
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "get_p")
    invals = read()
    transforms = jax.tree.unflatten(eqn.params["tree"], invals[1:])
    return _load_view(token, ctx, space, invals[0], eqn.invars[0].aval, transforms,
                      eqn.outvars[0].aval)


@_rule(state_primitives.swap_p)
def _swap(eqn, read, ctx, token):
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "swap_p")
    invals = read()
    transforms = jax.tree.unflatten(eqn.params["tree"], invals[2:])
    return _swap_view(token, ctx, space, invals[0], eqn.invars[0].aval, transforms,
                      invals[1], None, eqn.outvars[0].aval)


@_rule(primitives.run_scoped_p)
def _run_scoped(eqn, read, ctx, token):
    if eqn.params["collective_axes"]:
        raise NotImplementedError(
            "run_scoped_p with collective axes is not supported")
    body = eqn.params["jaxpr"]
    allocs = []
    for v in body.invars:
        aval = v.aval
        if aval.memory_space is _SEMAPHORE:
            token, ids = ops.allocate_semaphores(
                token, ctx.handle, ctx.device_id, ctx.core, aval.shape,
                kind=semaphore_kind(aval))
            allocs.append(ids)
            continue
        if ctx.params.allow_hbm_allocation_in_run_scoped:
            space = forward_any_to_hbm(aval.memory_space)
        else:
            space = _space_or_raise_if_hbm(
                aval, "run_scoped_p", "Cannot allocate HBM in `run_scoped`.")
        token, buf = ops.allocate_buffer(
            token, handle=ctx.handle, device=ctx.device_id, core=ctx.core,
            space=space_code(space), shape=aval.shape, dtype=aval.dtype,
            params=ctx.params)
        allocs.append(buf)
    token, out = eval_jaxpr(body, *read(), *allocs, ctx=ctx, token=token)
    # Semaphores are not freed (as stock: their ids are never reused).
    for buf, v in zip(allocs, body.invars):
        if v.aval.memory_space is not _SEMAPHORE:
            token = ops.free_buffer(
                token, ctx.handle, ctx.device_id, ctx.core,
                space_code(forward_any_to_hbm(v.aval.memory_space)), buf)
    return token, out


def semaphore_kind(aval) -> str:
    dtype = getattr(aval, "dtype", None)
    try:
        if jnp.issubdtype(dtype, mosaic_core.dma_semaphore):
            return "dma"
        if jnp.issubdtype(dtype, pallas_core.barrier_semaphore):
            return "barrier"
    except TypeError:
        pass
    return "regular"


# ------------------------------------------------------------ control flow

@_rule(lax.cond_p)
def _cond(eqn, read, ctx, token):
    index, *args = read()

    def branch(jaxpr):
        return lambda tok, *a: eval_jaxpr(jaxpr, *a, ctx=ctx, token=tok)

    return lax.switch(index, [branch(b.jaxpr) for b in eqn.params["branches"]],
                      token, *args)


@_rule(lax.scan_p)
def _scan(eqn, read, ctx, token):
    p = eqn.params
    consts, init, xs = split_list(read(), [p["num_consts"], p["num_carry"]])

    def body(carry, x):
        tok, c = carry
        tok, res = eval_jaxpr(p["jaxpr"].jaxpr, *consts, *c, *x, ctx=ctx, token=tok)
        c, ys = split_list(res, [p["num_carry"]])
        return (tok, c), ys

    (token, carry), ys = lax.scan(body, (token, init), xs=xs,
                                  length=p.get("length"), reverse=p["reverse"],
                                  unroll=p.get("unroll", 1))
    return token, carry + ys


@_rule(lax.while_p)
def _while(eqn, read, ctx, token):
    p = eqn.params
    cond_consts, body_consts, init = split_list(
        read(), [p["cond_nconsts"], p["body_nconsts"]])
    cond_jaxpr, body_jaxpr = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
    # The condition may touch refs too, so it is evaluated inside the loop
    # body with the token and its result carried along.
    token, first = eval_jaxpr(cond_jaxpr, *cond_consts, *init, ctx=ctx, token=token)

    def body(carry):
        tok, val, _ = carry
        tok, val = eval_jaxpr(body_jaxpr, *body_consts, *val, ctx=ctx, token=tok)
        tok, c = eval_jaxpr(cond_jaxpr, *cond_consts, *val, ctx=ctx, token=tok)
        return tok, val, c[0]

    token, out, _ = lax.while_loop(lambda c: c[2], body, (token, init, first[0]))
    return token, out


@_rule(pjit.jit_p)
def _jit(eqn, read, ctx, token):
    closed = eqn.params["jaxpr"]
    return eval_jaxpr(closed.jaxpr, *closed.consts, *read(), ctx=ctx, token=token)


@_rule(lax.axis_index_p)
def _axis_index(eqn, read, ctx, token):
    name = eqn.params["axis_name"]
    if ctx.mesh is not None and name in ctx.mesh.shape:
        return token, ctx.core  # core_map: our index along the core axis
    if name in ctx.axis_indices:
        return token, ctx.axis_indices[name]
    grid_names = ctx.grid_mapping.grid_names or ()
    if name in grid_names:
        return token, ctx.grid_point[grid_names.index(name)]
    return NotImplemented


# --------------------------------------------------------------------- misc

@_rule(primitives.delay_p)
def _delay(eqn, read, ctx, token):
    return token, []


@_rule(mosaic_primitives.prng_seed_p)
def _prng_seed(eqn, read, ctx, token):
    return ops.prng_seed(token, ctx.handle, ctx.device_id, ctx.core, read()), []


@_rule(mosaic_primitives.prng_random_bits_p)
def _prng_random_bits(eqn, read, ctx, token):
    return ops.prng_random_bits(token, ctx.handle, ctx.device_id, ctx.core,
                                eqn.outvars[0].aval)


# -------------------------------------------------------------- semaphores

def _sem_ids(sem, transforms):
    return state_discharge.transform_array(sem, transforms)


@_rule(mosaic_primitives.dma_start_p)
def _dma_start(eqn, read, ctx, token):
    tree = eqn.params["tree"]
    src, dst, dst_sem, src_sem, target = jax.tree.unflatten(tree, read())
    src, src_transforms = mosaic_primitives._get_ref_and_transforms(src)
    dst, dst_transforms = mosaic_primitives._get_ref_and_transforms(dst)
    dst_sem, dst_sem_t = mosaic_primitives._get_ref_and_transforms(dst_sem)
    src_sem, src_sem_t = mosaic_primitives._get_ref_and_transforms(src_sem)
    target = _logical_device(ctx, target, eqn.params["device_id_type"])
    orig_src, orig_dst, *_ = jax.tree.unflatten(tree, eqn.invars)
    # Refs whose memory space is unknown are HBM refs (stock does the same).
    src_space = forward_any_to_hbm(getattr(orig_src.aval, "memory_space", None)) or _HBM
    dst_space = forward_any_to_hbm(getattr(orig_dst.aval, "memory_space", None)) or _HBM
    token = ops.dma_start(
        token, ctx.handle, ctx.device_id, ctx.core,
        src_space=space_code(src_space), src=src, src_region=to_region(src_transforms),
        dst_space=space_code(dst_space), dst=dst, dst_region=to_region(dst_transforms),
        dst_sem=_sem_ids(dst_sem, dst_sem_t),
        src_sem=None if src_sem is None else _sem_ids(src_sem, src_sem_t),
        dst_device=target)
    return token, []


@_rule(mosaic_primitives.dma_wait_p)
def _dma_wait(eqn, read, ctx, token):
    src, _, sem, _, _ = jax.tree.unflatten(eqn.params["tree"], read())
    _, src_transforms = mosaic_primitives._get_ref_and_transforms(src)
    sem, sem_t = mosaic_primitives._get_ref_and_transforms(sem)
    src_aval = state.transform_type(src_transforms, eqn.invars[0].aval)
    nbytes = math.prod(src_aval.shape) * src_aval.dtype.itemsize
    token = ops.semaphore_wait(token, ctx.handle, ctx.device_id, ctx.core,
                               _sem_ids(sem, sem_t), nbytes)
    return token, []


@_rule(mosaic_primitives.get_barrier_semaphore_p)
def _barrier_semaphore(eqn, read, ctx, token):
    if ctx.mosaic_params.collective_id is None:
        raise ValueError(
            "get_barrier_semaphore requires a collective_id: pass"
            " compiler_params=pltpu.CompilerParams(collective_id=...) to the"
            " pallas_call.")
    return ops.barrier_semaphore(token, ctx.handle, ctx.device_id,
                                 ctx.mosaic_params.collective_id)


@_rule(primitives.semaphore_signal_p)
def _semaphore_signal(eqn, read, ctx, token):
    sem, sem_t, inc, target, core_index = jax.tree.unflatten(
        eqn.params["args_tree"], read())
    target = _logical_device(ctx, target, eqn.params["device_id_type"])
    token = ops.semaphore_signal(token, ctx.handle, ctx.device_id, ctx.core,
                                 _sem_ids(sem, sem_t), inc, target, core_index)
    return token, []


@_rule(primitives.semaphore_wait_p)
def _semaphore_wait(eqn, read, ctx, token):
    sem, sem_t, value, decrement = jax.tree.unflatten(
        eqn.params["args_tree"], read())
    if not decrement:
        raise NotImplementedError("Non-decrementing wait is not supported.")
    token = ops.semaphore_wait(token, ctx.handle, ctx.device_id, ctx.core,
                               _sem_ids(sem, sem_t), value)
    return token, []


@_rule(primitives.semaphore_read_p)
def _semaphore_read(eqn, read, ctx, token):
    sem, sem_t = jax.tree.unflatten(eqn.params["args_tree"], read())
    return ops.semaphore_read(token, ctx.handle, ctx.device_id, ctx.core,
                              _sem_ids(sem, sem_t))
