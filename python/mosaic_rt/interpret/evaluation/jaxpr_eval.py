"""Evaluates a Pallas TPU kernel jaxpr at trace time, emitting ordinary JAX
for compute and one native op (through `mosaic_rt.interpret.evaluation.native_calls`)
per memory, DMA and semaphore operation. A token is threaded through every
native op so XLA keeps the program order of each core.

Refs are represented by their buffer id (int32 scalar); semaphore refs by
int32 arrays of semaphore ids, indexed like the refs they stand for.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import _native
from mosaic_rt import jax_internals as jx
from mosaic_rt.ffi import ops as ffi_ops
from mosaic_rt.interpret.context import Ctx, semaphore_kind
from mosaic_rt.interpret.evaluation import (
    byte_arithmetic,
    device_ids,
    dma_views,
    native_calls,
    packing,
    poison,
    select_refs,
    sites,
    splat,
    stochastic_round,
    views,
)
from mosaic_rt.interpret.evaluation.regions import to_region
from mosaic_rt.interpret.native_compute import scalar_items, scalar_runs, vector_runs
from mosaic_rt.interpret.rewrites import as_evaluated, hoisting, widening
from mosaic_rt.interpret.rewrites.inlining import inline_calls
from mosaic_rt.memory_spaces import code as space_code
from mosaic_rt.memory_spaces import forward_any_to_hbm

# Where a token leaves a straight-line run of ops (control flow, callbacks),
# the ops pending on it are emitted first (`mosaic_rt.ffi.batching`).
materialize = native_calls.materialize

_SEMAPHORE = jx.MemorySpace.SEMAPHORE
_TOKEN_SDS = jax.ShapeDtypeStruct((), jnp.int32)
_HBM = jx.MemorySpace.HBM


def _space_or_raise_if_hbm(aval, primitive_name, message=None):
    space = forward_any_to_hbm(aval.memory_space)
    if space is _HBM:
        raise ValueError(
            message
            or (
                f"{primitive_name}: Buffers with a memory space of HBM or ANY cannot"
                " be referenced directly. Instead, use `pltpu.sync_copy` or"
                " `pltpu.async_copy`."
            )
        )
    return space


def _target(ctx: Ctx, device_id, device_id_type):
    """(logical device, core or None) named by a kernel's device id."""
    return device_ids.to_logical(
        device_id,
        device_id_type,
        axis_sizes=ctx.axis_sizes,
        axis_indices=ctx.axis_indices,
        core_axis_names=jx.mesh_axis_names(ctx.mesh),
    )


def _wrapped(ctx: Ctx, device, core):
    return device_ids.wrap_negative(
        device, core, num_devices=ctx.num_devices, num_cores=ctx.params.num_cores_per_device
    )


def eval_jaxpr(jaxpr: jx.Jaxpr, *args, ctx: Ctx, token, preset=None):
    """Emits `jaxpr` for the core of `ctx`; returns (token, outputs). Its
    rank-0 integer/bool work runs as few native scalar programs as its data
    flow allows (`scalar_runs`), not XLA fusions; `preset` holds what the
    parent computed of it already (hoisted items, by key)."""
    token, outs, _ = _eval_block(jaxpr, args, ctx, token, preset, None)
    return token, outs


def _eval_block(jaxpr, args, ctx: Ctx, token, preset, count):
    """`eval_jaxpr`, also returning the keys its scalar programs computed
    (with `count`: the counter step of a loop of `count` steps)."""
    jaxpr = as_evaluated(jaxpr)
    sentinel = jnp.inf if ctx.params.skip_floating_point_ops else None
    env = jx.JaxprEnv(vars=jaxpr.constvars + jaxpr.invars, values=args, sentinel_for_floating_point_values=sentinel)
    eqns = jaxpr.eqns
    plan = scalar_runs.plan(jaxpr, count)
    vplan = None
    if ctx.params._vector_runs and not ctx.params.skip_floating_point_ops:
        vplan = vector_runs.plan(jaxpr, plan.absorbed)
        env = vector_runs.DeferredEnv(env, jaxpr, vplan)
    ctx = ctx.replace(
        stores=splat.BlockStores(jaxpr, env.read, skip_floats=ctx.params.skip_floating_point_ops),
        lazy_loads=vplan is not None,
        block_refs=[],
    )
    computed = dict(preset or {})
    for key, value in computed.items():
        if not isinstance(key, tuple):
            env.write(key, value)
    merged_until = 0  # equations before it ran inside an earlier one's op
    for i in range(len(eqns) + 1):
        group = plan.groups.get(i)
        if group is not None:
            _emit_group(group, plan.exports[i], env, computed, ctx)
        if i == len(eqns) or i in plan.absorbed or i < merged_until:
            continue
        if vplan is not None and i in vplan.items:
            env.defer(i)
            continue
        eqn = eqns[i]
        eqn_ctx = ctx
        if eqn.primitive in _DMA_OPS:
            waits, merged_until = _trailing_waits(eqns, i, plan, env, computed, ctx)
            if waits:
                eqn_ctx = ctx.replace(then_wait=waits)
        with (
            jx.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack),
            sites.at(eqn.source_info),
        ):
            token, out = _eval_with(eqn, i, env, computed, eqn_ctx, token)
        out = out if eqn.primitive.multiple_results else [out]
        env.write_many(eqn.outvars, out)
    outs = env.read_many(jaxpr.outvars)
    for space, buf in ctx.block_refs:
        token = native_calls.free_buffer(token, ctx.handle, ctx.device_id, ctx.core, space, buf)
    return token, outs, computed


def _trailing_waits(eqns, i, plan, env, computed, ctx):
    """``(waits, end)``: the DMA waits right after equation i (a DMA start,
    or a wait of static size) that its op can run too -- no scalar program
    or other equation between them, static sizes -- and the index after
    them. A remote copy's ``.wait()`` is a send and a receive wait: with its
    start, one custom call instead of three."""

    def nbytes(eqn):
        return _dma_wait_bytes(eqn, env.read_many(eqn.invars))

    if eqns[i].primitive is jx.dma_wait_p and not isinstance(nbytes(eqns[i]), int):
        return (), i + 1
    waits = []
    j = i + 1
    while j < len(eqns) and eqns[j].primitive is jx.dma_wait_p and j not in plan.groups and j not in plan.absorbed:
        size = nbytes(eqns[j])
        if not isinstance(size, int):
            break
        with jx.user_context(eqns[j].source_info.traceback, name_stack=eqns[j].source_info.name_stack):
            sem = _dma_wait_sem(eqns[j], env.read_many(eqns[j].invars), _with_sem_ids(ctx, computed, j))
        waits.append(ffi_ops.TrailingWait(sem, size, sites.site_id(eqns[j].source_info)))
        j += 1
    return tuple(waits), j


def _emit_group(group, exports, env, computed, ctx):
    """Emits one group of scalar items (`scalar_runs.emit_group`)."""

    def eval_concrete(eqn):
        token, out = _eval_eqn(eqn, env, ctx, None)
        env.write_many(eqn.outvars, out if eqn.primitive.multiple_results else [out])

    first = next((it.eqn for it in group if it.eqn is not None), None)
    info = first.source_info if first is not None else None
    with jx.user_context(info.traceback, name_stack=info.name_stack) if info is not None else contextlib.nullcontext():
        scalar_runs.emit_group(
            group, exports, read=env.read, computed=computed, write=env.write, eval_concrete=eval_concrete
        )


# The roles of `scalar_items`' semaphore lookups ("sem", j, role).
_SEM_ROLES = ("sem", "src", "dst")


def _eval_with(eqn, i, env, computed, ctx, token):
    """Equation i with what the scalar programs computed for it: its
    semaphore ids, its clamped branch index, its branches' hoisted items."""
    if eqn.primitive is lax.cond_p:
        args = env.read_many(eqn.invars[1:])
        branches = eqn.params["branches"]
        presets = [scalar_items.branch_preset(i, k, computed) for k in range(len(branches))]
        clamped = computed.get(("clamp", i))
        if clamped is not None:  # (the index itself may not be emitted at all)
            return _switch(eqn, clamped, args, ctx, token, presets)
        index = env.read(eqn.invars[0])
        if not isinstance(index, jx.Tracer):
            # Known at trace time: emit only the branch taken.
            k = min(max(int(index), 0), len(branches) - 1)
            return eval_closed(branches[k], *args, ctx=ctx, token=token, preset=presets[k])
        return _switch(eqn, scalar_runs.clamp_index(index, len(branches)), args, ctx, token, presets)
    return _eval_eqn(eqn, env, _with_sem_ids(ctx, computed, i), token)


def _with_sem_ids(ctx, computed, i):
    """`ctx` with equation i's semaphore ids the scalar programs computed."""
    # Looked up by key (a scan of `computed` per equation would be quadratic
    # in the block's length at trace time).
    sem_ids = {role: computed[("sem", i, role)] for role in _SEM_ROLES if ("sem", i, role) in computed}
    return ctx.replace(sem_ids=sem_ids) if sem_ids else ctx


def eval_closed(closed, *args, ctx: Ctx, token, preset=None):
    """Emits a closed jaxpr (an eqn param), consts first."""
    jaxpr, consts = jx.closed_jaxpr_parts(closed)
    return eval_jaxpr(jaxpr, *consts, *args, ctx=ctx, token=token, preset=preset)


_RULES: dict[Any, Any] = {}


def _rule(*prims):
    def register(fn):
        for p in prims:
            if p is not None:  # primitives missing from this jax release
                _RULES[p] = fn
        return fn

    return register


def _eval_eqn(eqn, env, ctx: Ctx, token):
    prim = eqn.primitive
    # Inputs are read lazily: with skip_floating_point_ops a skipped eqn must
    # not materialise its (sentinel) inputs.
    read = functools.partial(env.read_many, eqn.invars)
    if prim is jx.swap_p and isinstance(env, vector_runs.DeferredEnv) and prim not in jx.stock_interpret_impls:
        # A plain store takes its value pending in a batch (`batching.Lazy`).
        read = functools.partial(env.read_many, eqn.invars, lazy_at=1)
    if (impl := jx.stock_interpret_impls.get(prim)) is not None:
        invals = read()
        impl_jaxpr = jax.make_jaxpr(functools.partial(impl, **eqn.params))(*invals)
        token, out = eval_closed(impl_jaxpr, *invals, ctx=ctx, token=token)
        return token, (out if prim.multiple_results else out[0])
    if prim in jx.TPU_ONLY_PRIMITIVES:
        raise NotImplementedError(
            f"The TPU primitive `{prim.name}` is not supported in TPU interpret"
            " mode: it drives MXU registers and result FIFOs, which mosaic_rt"
            " does not simulate. Use jnp.dot / lax.dot_general in the kernel."
        )
    rule = _RULES.get(prim)
    if rule is not None:
        result = rule(eqn, read, ctx, token)
        if result is not NotImplemented:
            return result
    if ctx.params.skip_floating_point_ops and all(jx.is_float(v.aval.dtype) for v in eqn.outvars):
        out = [v.aval for v in eqn.outvars]
        return token, (out if prim.multiple_results else out[0])
    return token, prim.bind(*read(), **prim.get_bind_params(eqn.params))


# ------------------------------------------------------------------- memory


def _load_view(token, ctx, space, ref, ref_aval, transforms, aval):
    """(token, the value): with `ctx.lazy_loads` a value straight from
    memory may stay pending in its batch (`vector_runs.DeferredEnv` reads
    it out)."""
    region, rest, base = views.split(transforms, ref_aval)
    if not rest:
        return native_calls.load(
            token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, aval, lazy=ctx.lazy_loads
        )
    token, value = native_calls.load(token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, base)
    return token, views.read(value, rest)


def _swap_view(token, ctx, space, ref, ref_aval, transforms, val, mask, aval, eqn=None):
    """(token, old value); ``val`` may be pending in a batch (a
    `batching.Lazy`): only a plain store of it takes it so."""
    region, rest, base = views.split(transforms, ref_aval)
    if rest or mask is not None:
        val = ffi_ops.realize(val)
    if not rest and mask is None and eqn is not None:
        done = _fill(token, ctx, space, ref, region, eqn, aval)
        if done is not None:
            return done
    if not rest:
        # An unused old value is not read out: the swap has no result but
        # the token, and may join a batch (`mosaic_rt.ffi.batching`).
        used = eqn is None or ctx.stores is None or ctx.stores.is_used(eqn.outvars[0])
        return native_calls.swap(
            token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, val, mask, aval, old=used
        )
    token, value = native_calls.load(token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, base)
    val = jnp.broadcast_to(jnp.asarray(val, aval.dtype), aval.shape)
    old, new = views.write(value, rest, val, mask)
    token = native_calls.store(token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, new)
    return token, old


def _fill(token, ctx, space, ref, region, eqn, aval):
    """The unmasked swap `eqn` as a native fill when its value is a
    broadcast scalar (`splat`); None otherwise. The old value is read only
    when the swap's result is used."""
    if eqn.primitive is jx.masked_swap_p:
        stored = jax.tree.unflatten(eqn.params["args_tree"], eqn.invars)[2]
    else:
        stored = eqn.invars[1]
    scalar = ctx.stores.fill_value(stored, aval.dtype) if ctx.stores is not None else None
    if scalar is None:
        return None
    used = ctx.stores.is_used(eqn.outvars[0])
    token, old = native_calls.fill(
        token,
        ctx.handle,
        ctx.device_id,
        ctx.core,
        space_code(space),
        ref,
        region,
        jnp.asarray(scalar, aval.dtype),
        aval if used else None,
    )
    return token, (old if used else aval)


def _ref_aval(value, var):
    """The aval of the buffer a ref operand addresses: a view's buffer's
    (`jx.view_base_aval`), else its variable's."""
    return jx.view_base_aval(value) or var.aval


def _with_ref_transforms(ref, transforms):
    """A ref operand may itself carry transforms (a `TransformedRef` rebuilt
    from a pytree): they apply before the op's own."""
    ref, ref_transforms = jx.ref_and_transforms(ref)
    return ref, (*ref_transforms, *(transforms or ()))


@_rule(jx.load_p)
def _masked_load(eqn, read, ctx, token):
    ref, transforms, mask, other = jx.unflatten_refs(eqn.params["args_tree"], read())
    ref_aval = _ref_aval(ref, eqn.invars[0])
    ref, transforms = _with_ref_transforms(ref, transforms)
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "load_p")
    aval = eqn.outvars[0].aval
    if mask is None:
        # (`other` without a mask selects nothing: stock's discharge rule
        # applies it only with a mask.)
        return _load_view(token, ctx, space, ref, ref_aval, transforms, aval)
    mask, other = _load_mask_and_other(mask, other, aval)
    token, value = _masked_load_view(token, ctx, space, ref, ref_aval, transforms, aval, mask)
    if other is not None:
        value = jnp.where(mask, value, other)
    return token, value


def _load_mask_and_other(mask, other, aval):
    """`pl.load`'s mask broadcast to the loaded value's shape, and `other`
    (None or cast to its dtype); a TypeError / ValueError for values no
    kernel can mean."""
    mask_dtype = jnp.result_type(mask)
    if mask_dtype != jnp.bool_:
        raise TypeError(
            f"pl.load: the mask must be a boolean array, got dtype {mask_dtype} (compare, e.g. `mask = idx < n`)."
        )
    try:
        mask = jnp.broadcast_to(mask, aval.shape)
    except ValueError:
        raise ValueError(
            f"pl.load: cannot broadcast the mask of shape {jnp.shape(mask)} to the loaded shape {aval.shape}."
        ) from None
    if other is None:
        return mask, None
    if jnp.result_type(aval.dtype, other) != aval.dtype:
        raise TypeError(
            f"pl.load: `other` of dtype {jnp.result_type(other)} does not fit the"
            f" loaded dtype {aval.dtype}; pass a Python scalar or an array of dtype"
            f" {aval.dtype}."
        )
    try:
        other = jnp.broadcast_to(jnp.asarray(other, aval.dtype), aval.shape)
    except ValueError:
        raise ValueError(
            f"pl.load: cannot broadcast `other` of shape {jnp.shape(other)} to the loaded shape {aval.shape}."
        ) from None
    return mask, other


def _masked_load_view(token, ctx, space, ref, ref_aval, transforms, aval, mask):
    """A masked load (`mask`: the value's shape). Masked-off elements hold
    uninitialized memory (`uninitialized_memory`'s value) and are not read,
    so they may lie out of bounds. Under a reshape / transpose view the mask
    is carried back to the leading region; under a bitcast view the whole
    leading region is read."""
    region, rest, base = views.split(transforms, ref_aval)
    if not rest:
        return native_calls.load(
            token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, aval, mask=mask
        )
    if not any(isinstance(t, jx.BitcastTransform) for t in rest):
        # Views map elements one to one: the base elements the mask selects.
        _, base_mask = views.write(jnp.zeros(base.shape, jnp.bool_), rest, mask)
        token, value = native_calls.load(
            token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, base, mask=base_mask
        )
        return token, views.read(value, rest)
    token, value = native_calls.load(token, ctx.handle, ctx.device_id, ctx.core, space_code(space), ref, region, base)
    fill = jx.uninitialized_value(aval.dtype, ctx.params.uninitialized_memory)
    return token, jnp.where(mask, views.read(value, rest), jnp.asarray(fill, aval.dtype))


@_rule(jx.masked_swap_p)
def _masked_swap(eqn, read, ctx, token):
    ref, transforms, val, mask = jx.unflatten_refs(eqn.params["args_tree"], read())
    ref_aval = _ref_aval(ref, eqn.invars[0])
    ref, transforms = _with_ref_transforms(ref, transforms)
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "swap_p")
    return _swap_view(token, ctx, space, ref, ref_aval, transforms, val, mask, eqn.outvars[0].aval, eqn)


@_rule(jx.get_p)
def _get(eqn, read, ctx, token):
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "get_p")
    invals = read()
    ref, transforms = _with_ref_transforms(invals[0], jx.unflatten_refs(eqn.params["tree"], invals[1:]))
    return _load_view(token, ctx, space, ref, _ref_aval(invals[0], eqn.invars[0]), transforms, eqn.outvars[0].aval)


@_rule(jx.swap_p)
def _swap(eqn, read, ctx, token):
    space = _space_or_raise_if_hbm(eqn.invars[0].aval, "swap_p")
    invals = read()
    ref, transforms = _with_ref_transforms(invals[0], jx.unflatten_refs(eqn.params["tree"], invals[2:]))
    ref_aval = _ref_aval(invals[0], eqn.invars[0])
    return _swap_view(token, ctx, space, ref, ref_aval, transforms, invals[1], None, eqn.outvars[0].aval, eqn)


@_rule(jx.run_scoped_p)
def _run_scoped(eqn, read, ctx, token):
    if eqn.params["collective_axes"]:
        raise NotImplementedError("run_scoped_p with collective axes is not supported")
    # Body variables: the closed-over operands (`constvars`), then one per
    # allocation (`invars`).
    body = eqn.params["jaxpr"]
    allocs = []
    for v in body.invars:
        aval = v.aval
        if aval.memory_space is _SEMAPHORE:
            token, ids = native_calls.allocate_semaphores(
                token, ctx.handle, ctx.device_id, ctx.core, aval.shape, kind=semaphore_kind(aval)
            )
            allocs.append(ids)
            continue
        if ctx.params.allow_hbm_allocation_in_run_scoped:
            space = forward_any_to_hbm(aval.memory_space)
        else:
            space = _space_or_raise_if_hbm(aval, "run_scoped_p", "Cannot allocate HBM in `run_scoped`.")
        poisoned = poison.initial_value(aval.shape, aval.dtype)
        token, buf = native_calls.allocate_buffer(
            token,
            handle=ctx.handle,
            device=ctx.device_id,
            core=ctx.core,
            space=space_code(space),
            params=ctx.params,
            **({"shape": aval.shape, "dtype": aval.dtype} if poisoned is None else {"init": poisoned}),
        )
        allocs.append(buf)
    token, out = eval_jaxpr(body, *read(), *allocs, ctx=ctx, token=token)
    # Semaphores are not freed (as stock: their ids are never reused).
    for buf, v in zip(allocs, body.invars):
        if v.aval.memory_space is not _SEMAPHORE:
            token = native_calls.free_buffer(
                token, ctx.handle, ctx.device_id, ctx.core, space_code(forward_any_to_hbm(v.aval.memory_space)), buf
            )
    return token, out


@_rule(jx.empty_ref_p, jx.new_ref_p)
def _kernel_ref(eqn, read, ctx, token):
    """`jax.empty_ref(type, memory_space)` / `jax.new_ref(value,
    memory_space=)` inside a kernel: a buffer of the kernel's memory (VMEM
    unless the type names another space), uninitialised (or poisoned, see
    `poison`) or holding the value, freed when the enclosing block ends (as
    a run_scoped one)."""
    aval = eqn.outvars[0].aval
    if ctx.block_refs is None:
        return NotImplemented
    space = forward_any_to_hbm(aval.memory_space) or jx.MemorySpace.VMEM
    if space is _SEMAPHORE:
        raise NotImplementedError("jax.empty_ref of semaphores in a kernel: use pltpu.SemaphoreType in scratch_shapes")
    if space is _HBM and not ctx.params.allow_hbm_allocation_in_run_scoped:
        raise ValueError(f"{eqn.primitive.name} in HBM inside a kernel is not supported: allocate VMEM or SMEM")
    inner = aval.inner_aval
    if eqn.primitive is jx.new_ref_p:
        init = jnp.broadcast_to(read()[0], inner.shape).astype(inner.dtype)
    else:
        init = poison.initial_value(inner.shape, inner.dtype)
    token, buf = native_calls.allocate_buffer(
        token,
        handle=ctx.handle,
        device=ctx.device_id,
        core=ctx.core,
        space=space_code(space),
        params=ctx.params,
        **({"shape": inner.shape, "dtype": inner.dtype} if init is None else {"init": init}),
    )
    ctx.block_refs.append((space_code(space), buf))
    return token, buf


# ------------------------------------------------------------ control flow


@_rule(lax.cond_p)
def _cond(eqn, read, ctx, token):
    index, *args = read()
    branches = len(eqn.params["branches"])
    if not isinstance(index, jx.Tracer):
        # Known at trace time: emit only the branch taken.
        chosen = eqn.params["branches"][min(max(int(index), 0), branches - 1)]
        return eval_closed(chosen, *args, ctx=ctx, token=token)
    return _switch(eqn, scalar_runs.clamp_index(index, branches), args, ctx, token)


def _switch(eqn, index, args, ctx, token, presets=None):
    """The conditional of a `cond` equation on an int32 index already
    clamped to its branches (as lax.switch clamps, but natively). The
    branches' hoisted scalar values (`presets`) are extra operands."""
    branches = eqn.params["branches"]
    presets = presets or [{}] * len(branches)
    keys = [list(p) for p in presets]
    extra = [v for p in presets for v in p.values()]
    nargs = len(args)

    def branch(k, closed):
        start = nargs + sum(len(ks) for ks in keys[:k])

        def run(tok, *a):
            preset = dict(zip(keys[k], a[start : start + len(keys[k])]))
            tok, out = eval_closed(closed, *a[:nargs], ctx=ctx, token=tok, preset=preset)
            return materialize(tok), out

        return run

    return jx.switch_on_clamped_index(
        index, [branch(k, b) for k, b in enumerate(branches)], (materialize(token), *args, *extra)
    )


@_rule(lax.scan_p)
def _scan(eqn, read, ctx, token):
    p = eqn.params
    consts, init, xs = jx.scan_operands(p, read())
    length = p.get("length")
    if not xs and _scan_has_no_ys(p, len(init)) and length:
        return _counted_loop(p, consts, init, length, ctx, token)

    def body(carry, x):
        tok, c = carry
        tok, res = eval_closed(p["jaxpr"], *consts, *c, *x, ctx=ctx, token=tok)
        c, ys = jx.scan_body_results(p, res)
        return (materialize(tok), c), ys

    (token, carry), ys = lax.scan(
        body, (materialize(token), init), xs=xs, length=length, reverse=p["reverse"], unroll=p.get("unroll", 1)
    )
    return token, carry + ys


def _scan_has_no_ys(params, num_carry: int) -> bool:
    closed = params["jaxpr"]
    jaxpr, _ = jx.closed_jaxpr_parts(closed)
    return len(jaxpr.outvars) == num_carry


def _counted_loop(p, consts, init, length: int, ctx, token):
    """A scan without xs or ys (a fori_loop) as a while loop whose counter
    and condition are computed by the body's first scalar program (lax.scan's
    own counter would be two XLA fusions: add, compare)."""

    jaxpr, body_consts = jx.closed_jaxpr_parts(p["jaxpr"])
    token, jaxpr, extra = _hoist_invariants(jaxpr, [*body_consts, *consts], len(consts), ctx, token)
    consts = [*consts, *extra]

    def step(carry):
        tok, i, c, _ = carry
        tok, res, computed = _eval_block(
            jaxpr, (*body_consts, *consts, *c), ctx, tok, {scalar_items.COUNTER: i}, length
        )
        c, _ = jx.scan_body_results(p, res)
        return (materialize(tok), computed[scalar_items.COUNT_NEXT], c, computed[scalar_items.COUNT_GO])

    token, _, carry, _ = lax.while_loop(
        lambda c: c[3], step, (materialize(token), np.int32(0), list(init), np.bool_(True))
    )
    return token, list(carry)


def _hoist_invariants(jaxpr, invariant, num_consts: int, ctx, token):
    """``(token, body, extra)``: a loop body that runs at least once, its
    loop-invariant integer work computed here, once (`rewrites.hoisting`);
    the body takes ``extra`` right after its ``num_consts`` constants.
    ``invariant``: the values of its constvars and those constants."""
    # Unrolled copies widened first: each copy's own invariants would be
    # hoisted apart, and the copies would no longer look alike.
    hoisted = hoisting.hoist(as_evaluated(jaxpr), num_consts)
    if hoisted is None:
        return token, jaxpr, []
    token, extra = eval_jaxpr(hoisted.prelude, *(invariant[k] for k in hoisted.inputs), ctx=ctx, token=token)
    return token, hoisted.body, list(extra)


@_rule(lax.while_p)
def _while(eqn, read, ctx, token):
    p = eqn.params
    cond_consts, body_consts, init = jx.split_list(read(), [p["cond_nconsts"], p["body_nconsts"]])
    cond, body = p["cond_jaxpr"], p["body_jaxpr"]
    # The condition may touch refs too, so it is evaluated inside the loop
    # body with the token and its result carried along.
    token, first = eval_closed(cond, *cond_consts, *init, ctx=ctx, token=token)

    def step(carry):
        tok, val, _ = carry
        tok, val = eval_closed(body, *body_consts, *val, ctx=ctx, token=tok)
        tok, c = eval_closed(cond, *cond_consts, *val, ctx=ctx, token=tok)
        return materialize(tok), val, c[0]

    token, out, _ = lax.while_loop(lambda c: c[2], step, (materialize(token), init, first[0]))
    return token, out


@_rule(jx.parallel_loop_p)
def _parallel_loop(eqn, read, ctx, token):
    # Iterations may run in any order or at once on a SparseCore (the
    # kernel promises they are independent): in order is one of those.
    p = eqn.params
    lower, upper, step, consts, init = jx.unflatten_refs(p["tree"], read())
    body = jx.convert_constvars_jaxpr(p["jaxpr"])
    if not init and _runs_at_least_once(lower, upper, step):
        # Iterations over disjoint columns: all of them as one (`widening`).
        bounds = (int(np.asarray(b)) for b in (lower, upper, step))
        wide = widening.widen(inline_calls(body), len(consts), *bounds)
        if wide is not None:
            token, _ = eval_jaxpr(wide, *consts, ctx=ctx, token=token)
            return token, []
    if _runs_at_least_once(lower, upper, step):
        token, body, extra = _hoist_invariants(body, list(consts), len(consts), ctx, token)
        consts = [*consts, *extra]
    index_type = jnp.int32

    def step_fn(carry):
        tok, i, vals = carry
        tok, out = eval_jaxpr(body, *consts, i, *vals, ctx=ctx, token=tok)
        return materialize(tok), i + jnp.asarray(step, index_type), list(out)

    token, _, out = lax.while_loop(
        lambda c: c[1] < jnp.asarray(upper, index_type),
        step_fn,
        (materialize(token), jnp.asarray(lower, index_type), list(init)),
    )
    return token, out


def _runs_at_least_once(lower, upper, step) -> bool:
    bounds = (lower, upper, step)
    if any(isinstance(b, jx.Tracer) for b in bounds):
        return False
    lower, upper, step = (int(np.asarray(b)) for b in bounds)
    return step > 0 and upper > lower


@_rule(jx.jit_p)
def _jit(eqn, read, ctx, token):
    return eval_closed(eqn.params["jaxpr"], *read(), ctx=ctx, token=token)


@_rule(lax.axis_index_p)
def _axis_index(eqn, read, ctx, token):
    name = eqn.params["axis_name"]
    if ctx.mesh is not None and name in ctx.mesh.shape:
        # core_map: our index along that axis of the mesh (the core is the
        # mesh position, the last axis fastest: SparseCore subcores).
        sizes = list(ctx.mesh.shape.values())
        if len(sizes) == 1:
            return token, ctx.core
        k = list(ctx.mesh.shape).index(name)
        inner = math.prod(sizes[k + 1 :])
        return token, (ctx.core // inner) % sizes[k]
    if name in ctx.axis_indices:
        return token, ctx.axis_indices[name]
    grid_names = ctx.grid_mapping.grid_names or ()
    if name in grid_names:
        return token, ctx.grid_point[grid_names.index(name)]
    return NotImplemented


@_rule(jx.emit_pipeline_p)
def _emit_pipeline(eqn, read, ctx, token):
    # The primitive form of pltpu.emit_pipeline (jax's
    # `use_emit_pipeline_primitive`): expanded into the pipeline it stands
    # for (jax's own expansion from 0.12; ours of the same before).
    expand = jx.emit_pipeline_to_jaxpr()
    closed = expand(
        [v.aval for v in eqn.invars],
        grid_names=ctx.grid_mapping.grid_names,
        grid_sizes=ctx.grid_mapping.grid,
        **eqn.params,
    )
    token, _ = eval_closed(closed, *read(), ctx=ctx, token=token)
    return token, []


@_rule(jx.pipeline_body_p)
def _pipeline_body(eqn, read, ctx, token):
    p = eqn.params
    indices, body_consts, refs = jx.unflatten_refs(p["in_tree"], read())
    # A window made here of a plain buffer addresses its variable's buffer.
    var_refs = p["in_tree"].unflatten(list(eqn.invars))[2]
    refs = tuple(
        jx.with_base_aval(r, jx.view_base_aval(r) or jx.ref_and_transforms(v)[0].aval) for r, v in zip(refs, var_refs)
    )
    jaxpr = jx.pipeline_body_jaxpr(p["jaxpr"])
    # A body traced with the step as an argument (jax 0.12: the
    # PipelineStep and the local grid sizes) takes its leaves after the
    # consts; one traced without (jax < 0.12) does not.
    leaves = jax.tree.leaves(indices)
    takes_step = len(jaxpr.invars) == len(body_consts) + len(leaves) + len(refs)
    body_args = (*body_consts, *leaves, *refs) if takes_step else (*body_consts, *refs)
    # The body sees the pipeline's own grid position in place of the
    # kernel's leading grid axes.
    position = jx.pipeline_step_indices(indices)
    outer = jx.pallas_core.current_grid_env() or ()
    env = tuple(
        jx.pallas_core.GridAxis(i, outer[k].size if k < len(outer) else 0) for k, i in enumerate(position)
    ) + tuple(outer[len(position) :])
    with jx.pallas_core.grid_env(env):
        token, _ = eval_jaxpr(jaxpr, *body_args, ctx=ctx, token=token)
    return token, []


# ---------------------------------------------------------- host callbacks


def _guarded(call, num_results):
    """`call` (a host callback of the kernel) run so that the launch knows:
    while it runs the core is busy in user code (never a deadlock), and if
    it raises, the launch fails with that exception as its root cause, so
    every other core's wait ends at once."""
    from mosaic_rt.ffi import errors as ffi_errors

    def run(token, handle, device, core, *args):
        parts = np.asarray(handle, np.uint64)
        h, d, c = int(parts[0]) | (int(parts[1]) << 32), int(device), int(core)
        _native.callback_state(h, d, c, True)
        try:
            out = call(*args)
        except Exception as exc:
            root = ffi_errors.fail_launch(h, d, c, exc)
            if root is None:
                raise
            # Whichever device XLA reports, the error carries the launch's
            # root cause (this exception: native_errors() re-raises it).
            raise RuntimeError(root) from exc
        finally:
            _native.callback_state(h, d, c, False)
        results = list(out) if num_results else []
        return (np.asarray(token, np.int32), *results)

    return run


@_rule(jx.io_callback_p, jx.pure_callback_p, jx.debug_callback_p)
def _host_callback(eqn, read, ctx, token):
    # Threaded on the token (program order with the native ops around it)
    # and guarded (see _guarded); results as the original callback's.
    results = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.outvars]
    outs = jx.io_callback(
        _guarded(eqn.params["callback"], len(results)),
        (_TOKEN_SDS, *results),
        materialize(token),
        ctx.handle,
        ctx.device_id,
        ctx.core,
        *read(),
    )
    token, *values = outs
    return token, (values if eqn.primitive.multiple_results else values[0])


# --------------------------------------------------------------------- misc


@_rule(jx.delay_p, jx.trace_value_p)
def _no_op(eqn, read, ctx, token):
    # delay: time is not simulated; trace_value: only annotates TPU traces.
    return token, []


@_rule(jx.has_memory_space_p)
def _has_memory_space(eqn, read, ctx, token):
    # pl.ANY refs live in HBM in interpret mode (as stock places them).
    return token, jnp.asarray(eqn.params["memory_space"] is _HBM)


@_rule(jx.conv_p)
def _conv(eqn, read, ctx, token):
    # pltpu.conv: lhs (*) rhs, added to `acc` when given (its shape and
    # dtype are the result's).
    p = eqn.params
    lhs, rhs, *acc = read()
    dn = p["dimension_numbers"]
    if p.get("window_reversal"):
        spatial = [d for d, rev in zip(dn.rhs_spec[2:], p["window_reversal"]) if rev]
        rhs = lax.rev(rhs, spatial)
    out_aval = eqn.outvars[0].aval
    out = lax.conv_general_dilated(
        lhs,
        rhs,
        window_strides=p["window_strides"],
        padding=p["padding"],
        lhs_dilation=p["lhs_dilation"],
        rhs_dilation=p["rhs_dilation"],
        dimension_numbers=dn,
        feature_group_count=p["feature_group_count"],
        batch_group_count=p["batch_group_count"],
        precision=p["precision"],
        preferred_element_type=p["preferred_element_type"] or out_aval.dtype,
    )
    if acc:
        out = acc[0] + out.astype(acc[0].dtype)
    return token, out.astype(out_aval.dtype)


@_rule(lax.add_p, lax.sub_p, lax.mul_p, lax.neg_p)
def _byte_arithmetic(eqn, read, ctx, token):
    if not byte_arithmetic.needs_widening(eqn.outvars[0].aval.dtype):
        return NotImplemented
    return token, byte_arithmetic.wrapping(eqn.primitive, read())


@_rule(jx.pack_elementwise_p)
def _pack_elementwise(eqn, read, ctx, token):
    return token, packing.pack(read(), eqn.params["packed_dtype"])


@_rule(jx.unpack_elementwise_p)
def _unpack_elementwise(eqn, read, ctx, token):
    p = eqn.params
    (x,) = read()
    return token, packing.unpack(x, p["index"], p["packed_dtype"], p["unpacked_dtype"])


@_rule(jx.stochastic_round_p)
def _stochastic_round(eqn, read, ctx, token):
    x, bits = read()
    target = eqn.params["target_dtype"]
    stochastic_round.check(eqn.invars[0].aval.dtype, target)
    return token, stochastic_round.stochastic_round(x, bits, target)


@_rule(jx.sc_bitcast_p)
def _sc_bitcast(eqn, read, ctx, token):
    (x,) = read()
    return token, packing.bitcast_minor(x, eqn.params["dtype"])


@_rule(jx.threefry2x32_p)
def _threefry2x32(eqn, read, ctx, token):
    """One native call instead of XLA's 20 unrolled rounds (fusions). An
    operand of one element goes as it is, one of the result's shape too;
    other broadcasts are made by XLA first."""
    shape = eqn.outvars[0].aval.shape
    args = [
        jnp.reshape(x, ()) if math.prod(np.shape(x)) == 1 else x if np.shape(x) == shape else jnp.broadcast_to(x, shape)
        for x in read()
    ]
    return token, ffi_ops.threefry2x32(*args, shape)


@_rule(jx.prng_seed_p)
def _prng_seed(eqn, read, ctx, token):
    # A typed key seeds with the words of its key data, in order
    # (`pltpu.prng_seed(key_ref[...])`), as the TPU lowering unwraps it.
    seeds = []
    for x in read():
        words = jnp.reshape(jx.key_data(x), (-1,)) if jnp.ndim(jx.key_data(x)) else [x]
        seeds.extend(words[k] for k in range(len(words)))
    return native_calls.prng_seed(token, ctx.handle, ctx.device_id, ctx.core, seeds), []


@_rule(jx.random_bits_p, jx.random_fold_in_p, jx.random_split_p)
def _pallas_prng(eqn, read, ctx, token):
    """A key primitive of a Pallas PRNG impl: its impl's functions of the
    keys (they seed the core's PRNG and draw from it), interpreted; any
    other impl lowers as jax lowers it."""
    in_avals = [v.aval for v in eqn.invars]
    expand = jx.pallas_prng_expansion(eqn.primitive, eqn.params, in_avals)
    if expand is None:
        return NotImplemented
    args = read()
    closed = jax.make_jaxpr(expand)(*args)
    token, outs = eval_closed(closed, *args, ctx=ctx, token=token)
    outs = [_as_result(o, v.aval) for o, v in zip(outs, eqn.outvars)]
    return token, (outs if eqn.primitive.multiple_results else outs[0])


def _as_result(value, aval):
    """An expanded key primitive's result as the equation's: keys wrapped;
    the core's int32 random words as the uint32 bits they are."""
    if jx.is_key_dtype(aval.dtype):
        return value if jx.is_key_dtype(value.dtype) else jx.wrap_key_data(value, aval.dtype)
    if value.dtype != aval.dtype and value.dtype.itemsize == jnp.dtype(aval.dtype).itemsize:
        return lax.bitcast_convert_type(value, aval.dtype)
    return value


@_rule(jx.split_key_p)
def _split_key(eqn, read, ctx, token):
    # `unwrap_pallas_seed`: a (1, N) Pallas key's N words.
    (key,) = read()
    data = jnp.reshape(jx.key_data(key), (-1,))
    return token, [data[k] for k in range(len(eqn.outvars))]


@_rule(jx.join_key_p)
def _join_key(eqn, read, ctx, token):
    # `wrap_pallas_seed`: N words -> a (1, N) Pallas key.
    words = jnp.stack([jnp.asarray(w, jnp.uint32) for w in read()]).reshape(1, -1)
    return token, jx.wrap_key_data(words, eqn.outvars[0].aval.dtype)


@_rule(jx.prng_random_bits_p)
def _prng_random_bits(eqn, read, ctx, token):
    return native_calls.prng_random_bits(token, ctx.handle, ctx.device_id, ctx.core, eqn.outvars[0].aval)


# -------------------------------------------------------------- semaphores


def _sem_ids(ctx, role, sem, transforms):
    """The ids a (transformed) semaphore ref names: one integer index per
    dimension of an id array is a native lookup (no dynamic-slice fusion),
    usually done by a scalar program of the block already (`ctx.sem_ids`)."""
    if ctx.sem_ids is not None and role in ctx.sem_ids:
        return ctx.sem_ids[role]
    transforms = [t for t in (transforms or ()) if t is not None]
    if len(transforms) == 1 and isinstance(transforms[0], jx.NDIndexer):
        indices = transforms[0].indices
        if not any(isinstance(i, jx.Slice) for i in indices):
            ids = scalar_runs.index_vector(sem, tuple(indices))
            if ids is not None:
                return ids
    return jx.transform_array(sem, transforms)


@_rule(jx.dma_start_p)
def _dma_start(eqn, read, ctx, token):
    tree = eqn.params["tree"]
    src_view, dst_view, dst_sem, src_sem, target = jx.unflatten_refs(tree, read())
    src_view, dst_view, dst_sem, src_sem = map(select_refs.resolve, (src_view, dst_view, dst_sem, src_sem))
    src, src_transforms = jx.ref_and_transforms(src_view)
    dst, dst_transforms = jx.ref_and_transforms(dst_view)
    dst_sem, dst_sem_t = jx.ref_and_transforms(dst_sem)
    src_sem, src_sem_t = jx.ref_and_transforms(src_sem)
    if dst_sem is None:
        raise ValueError("TPU interpret mode needs a destination semaphore (`sem`) for every DMA.")
    # A negative or too large target is an error (as in stock, which fails
    # to find the buffer); the runtime names the id and the valid range.
    target, target_core = _target(ctx, target, eqn.params["device_id_type"])
    if target is None and target_core is not None:
        target = ctx.device_id  # a core axis only: another core of this device
    elif target is None and src_sem is not None:
        # A local copy that also counts its read on src_sem (jax 0.12): the
        # runtime's two-semaphore copy, to this very device.
        target = ctx.device_id
    orig_src, orig_dst = map(select_refs.first_candidate, jax.tree.unflatten(tree, eqn.invars)[:2])
    # Refs whose memory space is unknown are HBM refs (stock does the same).
    src_space = forward_any_to_hbm(getattr(orig_src.aval, "memory_space", None)) or _HBM
    dst_space = forward_any_to_hbm(getattr(orig_dst.aval, "memory_space", None)) or _HBM
    for space, side in ((src_space, "from"), (dst_space, "into")):
        if space is jx.MemorySpace.SEMAPHORE:
            # The interpreter keeps SEMAPHORE memory as semaphores (counts
            # and waiters), not as bytes a copy could move.
            raise NotImplementedError(
                f"a DMA {side} an array in SEMAPHORE memory is not supported in TPU interpret mode"
                " (signal or wait on its semaphores instead)"
            )
    src_base = jx.view_base_aval(src_view) or jx.ref_and_transforms(orig_src)[0].aval
    dst_base = jx.view_base_aval(dst_view) or jx.ref_and_transforms(orig_dst)[0].aval
    (src_region, src_map), (dst_region, dst_map) = _dma_sides((src_transforms, src_base), (dst_transforms, dst_base))
    request = ffi_ops.DmaStart(
        src=ffi_ops.DmaSide(space_code(src_space), src, src_region, src_map),
        dst=ffi_ops.DmaSide(space_code(dst_space), dst, dst_region, dst_map),
        dst_sem=_sem_ids(ctx, "dst", dst_sem, dst_sem_t),
        src_sem=None if src_sem is None else _sem_ids(ctx, "src", src_sem, src_sem_t),
        dst_device=target,
        dst_core=target_core,
        then_wait=ctx.then_wait,
        site=sites.current(),
    )
    token = native_calls.dma_start(token, ctx.handle, ctx.device_id, ctx.core, request)
    return token, []


def _dma_sides(src, dst):
    """((region, byte map or None) of the source, the same of the
    destination): a side seen through a bitcast / reshape / transpose gets a
    byte map (`dma_views`); without one, both are plain regions, as always."""
    (src_t, src_aval), (dst_t, dst_aval) = src, dst
    if not (dma_views.has_view(src_t) or dma_views.has_view(dst_t)):
        return (to_region(src_t), None), (to_region(dst_t), None)
    src_view, dst_view = jx.transform_type(src_t, src_aval), jx.transform_type(dst_t, dst_aval)
    if not dma_views.same_shape(src_view.shape, dst_view.shape) or src_view.dtype != dst_view.dtype:
        raise ValueError(
            f"DMA source and destination views differ: {src_view.dtype}{list(src_view.shape)}"
            f" -> {dst_view.dtype}{list(dst_view.shape)}"
        )

    def side(t, aval, what):
        return dma_views.endpoint(t, aval, what) if dma_views.has_view(t) else (to_region(t), None)

    return side(src_t, src_aval, "source of a DMA"), side(dst_t, dst_aval, "destination of a DMA")


# Waits on the third operand for the bytes of the first one's region: a
# read-side wait (wait_send / wait_read) binds its operands swapped.


def _dma_wait_bytes(eqn, invals):
    """The bytes a DMA wait equation waits for (traced for a slice of traced
    size: known at run time only)."""
    src = select_refs.resolve(jx.unflatten_refs(eqn.params["tree"], invals)[0])
    _, src_transforms = jx.ref_and_transforms(src)
    src_aval = jx.transform_type(src_transforms, jx.view_base_aval(src) or eqn.invars[0].aval)
    if jx.is_key_dtype(src_aval.dtype):  # typed PRNG keys move as their key data
        shape, dtype = jx.key_physical(src_aval.shape, src_aval.dtype)
        return math.prod(shape) * dtype.itemsize
    return math.prod(src_aval.shape) * src_aval.dtype.itemsize


def _dma_wait_sem(eqn, invals, ctx):
    """The semaphore id a DMA wait equation waits on."""
    sem = select_refs.resolve(jx.unflatten_refs(eqn.params["tree"], invals)[2])
    sem, sem_t = jx.ref_and_transforms(sem)
    return _sem_ids(ctx, "sem", sem, sem_t)


@_rule(jx.dma_wait_p)
def _dma_wait(eqn, read, ctx, token):
    invals = read()
    nbytes = _dma_wait_bytes(eqn, invals)
    sem = _dma_wait_sem(eqn, invals, ctx)
    if isinstance(nbytes, int):
        request = ffi_ops.DmaWait(sem, nbytes, then_wait=ctx.then_wait, site=sites.current())
        token = native_calls.dma_wait(token, ctx.handle, ctx.device_id, ctx.core, request)
    else:  # a slice of traced size: the byte count is known at run time only
        token = native_calls.semaphore_wait(token, ctx.handle, ctx.device_id, ctx.core, sem, nbytes)
    return token, []


_DMA_OPS = (jx.dma_start_p, jx.dma_wait_p)


@_rule(jx.get_barrier_semaphore_p)
def _barrier_semaphore(eqn, read, ctx, token):
    # Without a collective_id the TPU's compiler allocates one for the
    # kernel (jax 0.12: from 7000); within a launch any id names the
    # launch's one barrier semaphore.
    collective_id = ctx.mosaic_params.collective_id
    if collective_id is None:
        collective_id = _AUTO_COLLECTIVE_ID
    return native_calls.barrier_semaphore(token, ctx.handle, ctx.device_id, collective_id)


_AUTO_COLLECTIVE_ID = 7000


@_rule(jx.semaphore_signal_p)
def _semaphore_signal(eqn, read, ctx, token):
    sem, sem_t, inc, target, core_index = jx.unflatten_refs(eqn.params["args_tree"], read())
    target, axis_core = _target(ctx, target, eqn.params["device_id_type"])
    if axis_core is not None:
        if core_index is not None:
            raise ValueError("Cannot specify both core_index and a core axis in device_id.")
        core_index = axis_core
    wrap = False
    if target is not None or core_index is not None:
        target = ctx.device_id if target is None else target
        core_index = 0 if core_index is None else core_index
        wrap = native_calls.signal_wraps_target(target, core_index)
        if not wrap:
            target, core_index = _wrapped(ctx, target, core_index)
    token = native_calls.semaphore_signal(
        token,
        ctx.handle,
        ctx.device_id,
        ctx.core,
        _sem_ids(ctx, "sem", sem, sem_t),
        inc,
        target,
        core_index,
        wrap_negative=wrap,
    )
    return token, []


@_rule(jx.semaphore_wait_p)
def _semaphore_wait(eqn, read, ctx, token):
    sem, sem_t, value, decrement = jx.unflatten_refs(eqn.params["args_tree"], read())
    # decrement=False (no Mosaic TPU lowering yet; Mosaic GPU's and the
    # discharge rule's meaning): block until the count is >= value, leave
    # the count unchanged -- a native wait like any other (parks, runs
    # queued DMAs, deadlock detection, wait_timeout, race happens-before).
    if isinstance(decrement, jx.Tracer) or np.shape(decrement) != ():
        raise TypeError(
            f"semaphore_wait: `decrement` must be a Python bool (known when the kernel is traced), got {decrement!r}."
        )
    token = native_calls.semaphore_wait(
        token, ctx.handle, ctx.device_id, ctx.core, _sem_ids(ctx, "sem", sem, sem_t), value, decrement=bool(decrement)
    )
    return token, []


@_rule(jx.semaphore_read_p)
def _semaphore_read(eqn, read, ctx, token):
    sem, sem_t = jx.unflatten_refs(eqn.params["args_tree"], read())
    return native_calls.semaphore_read(token, ctx.handle, ctx.device_id, ctx.core, _sem_ids(ctx, "sem", sem, sem_t))
