"""The buffers of one launch, allocated before its grid loop runs.

In HBM: the pallas_call's inputs (padded to whole blocks, as stock) and
outputs (an output aliased to an input is that input's buffer; an output
of a single-device launch that needs no padding is written in place in
XLA's result buffer, see `_direct_output_ok`, and so is an aliased one,
whose buffer XLA gives the input's value); in SMEM:
the scalar-prefetch operands. Then the kernel's own arguments: a buffer per
block operand in its memory space (block operands left in HBM are passed
the HBM buffer itself), scratch buffers and semaphores. Every buffer is
shared by the cores of the device (`core=None`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.context import Ctx, semaphore_kind
from mosaic_rt.interpret.evaluation import native_calls
from mosaic_rt.interpret.launch import input_writes
from mosaic_rt.memory_spaces import code as space_code
from mosaic_rt.memory_spaces import forward_any_to_hbm

_HBM = jx.MemorySpace.HBM
_SMEM = jx.MemorySpace.SMEM
_SEMAPHORE = jx.MemorySpace.SEMAPHORE
pallas_core = jx.pallas_core


@dataclasses.dataclass(frozen=True)
class BlockOperands:
    """The pallas_call's BlockSpec operands, inputs then outputs: what the
    grid loop copies between HBM and the kernel's buffers."""

    mappings: tuple  # their BlockMappings
    shapes: list  # block shapes
    squeezed: list  # per block dim: squeezed out of the kernel's view?
    spaces: list  # the kernel-side memory space (ANY is HBM)
    copied: list  # per operand: are its blocks copied in / out (not HBM, not semaphores, not values)?
    values: list  # per input: does the kernel take it as a value, not a ref (see `of`)?
    in_names: list  # argument names, for errors naming a block
    out_names: list
    n_in: int
    n_out: int

    @classmethod
    def of(cls, jaxpr: jx.Jaxpr, grid_mapping: jx.GridMapping) -> "BlockOperands":
        mappings = grid_mapping.block_mappings
        n_in, n_out = grid_mapping.num_inputs, grid_mapping.num_outputs
        if jaxpr.debug_info.arg_names is not None:
            in_names, out_names = jx.split_list(list(jaxpr.debug_info.arg_names[grid_mapping.slice_block_ops]), [n_in])
        else:
            in_names, out_names = ["unknown"] * n_in, ["unknown"] * n_out
        spaces = [forward_any_to_hbm(jx.block_memory_space(bm)) for bm in mappings]
        # `pl.kernel` / `core_map` (mpmd_map on jax 0.12) pass a scalar the
        # kernel closes over as an operand the kernel reads as a value, not
        # through a ref: no buffer, no block copies.
        block_vars = jaxpr.invars[grid_mapping.slice_block_ops]
        values = [not isinstance(v.aval, jx.AbstractRef) for v in block_vars[:n_in]]
        return cls(
            mappings=mappings,
            shapes=[jx.block_shape(bm) for bm in mappings],
            squeezed=[tuple(isinstance(b, pallas_core.Squeezed) for b in bm.block_shape) for bm in mappings],
            spaces=spaces,
            copied=[s not in (_HBM, _SEMAPHORE) and not (k < n_in and values[k]) for k, s in enumerate(spaces)],
            values=values,
            in_names=in_names,
            out_names=out_names,
            n_in=n_in,
            n_out=n_out,
        )

    def check_hbm_blocks(self, jaxpr: jx.Jaxpr, grid_mapping: jx.GridMapping):
        """A block operand left in HBM is not copied, so its block must be
        the whole operand (stock's error otherwise)."""
        in_vars, out_vars = jx.split_list(jaxpr.invars[grid_mapping.slice_block_ops], [self.n_in])
        for j, var in enumerate(in_vars):
            if self.spaces[j] is _HBM and var.aval.shape != self.shapes[j]:
                raise ValueError(f"Kernel input {j} in HBM but does not have trivial BlockSpec.")
        for j, var in enumerate(out_vars):
            k = self.n_in + j
            if self.spaces[k] is _HBM and var.aval.shape != self.shapes[k]:
                raise ValueError(f"Kernel output {j} in HBM but does not have trivial BlockSpec.")


@dataclasses.dataclass(frozen=True)
class LaunchBuffers:
    """Buffer ids (traced int32) of a launch, per operand. As `plan` returns
    it, every id (and `direct` entry) is the index of its allocation in the
    prologue instead; `resolved` puts in the allocations' results."""

    input_ids: list  # HBM buffer of each input
    output_ids: list  # HBM buffer of each output
    output_avals: list  # each output as the pallas_call returns it
    out_alias: dict  # output index -> the input it aliases
    scalar_ids: list  # SMEM buffer of each scalar-prefetch operand
    kernel_args: list  # the kernel jaxpr's arguments (scalars, blocks, scratch)
    kernel_in_ids: list  # the kernel's buffer of each input block
    kernel_out_ids: list  # the kernel's buffer of each output block
    borrowed: list  # inputs whose HBM buffer borrows their memory (kept alive to kernel_end)
    direct: list  # per output: XLA's buffer it is written in (to kernel_end), or None
    direct_order: tuple  # the outputs with a `direct` buffer, in allocation order (kernel_end's)
    sem_inputs: dict  # input index -> its semaphores' ids (a semaphore operand, `semaphore_operands`)
    sem_outputs: dict  # output index -> its semaphores' ids (a semaphore result)

    def resolved(self, id_of) -> "LaunchBuffers":
        """The buffers with ``id_of(k)`` (see `prologue_ids`) in place of
        allocation indices ``k``."""
        ids = functools.partial(map, lambda k: None if k is None else k.value if isinstance(k, _Value) else id_of(k))
        return dataclasses.replace(
            self,
            input_ids=list(ids(self.input_ids)),
            output_ids=list(ids(self.output_ids)),
            scalar_ids=list(ids(self.scalar_ids)),
            kernel_args=list(ids(self.kernel_args)),
            kernel_in_ids=list(ids(self.kernel_in_ids)),
            kernel_out_ids=list(ids(self.kernel_out_ids)),
            direct=[None if k is None else id_of(k, out=True) for k in self.direct],
            sem_inputs={i: id_of(k) for i, k in self.sem_inputs.items()},
            sem_outputs={j: id_of(k) for j, k in self.sem_outputs.items()},
        )


@dataclasses.dataclass(frozen=True)
class _Value:
    """A kernel argument that is an operand's value, not a buffer (see
    `BlockOperands.values`)."""

    value: object


def prologue_ids(allocations, results):
    """``id_of(k, out=False)``: the id of allocation ``k`` from the
    prologue's ``results`` (`native_calls.launch_begin`); with ``out`` a direct
    buffer's XLA output instead."""

    def id_of(k, out=False):
        if getattr(allocations[k], "direct", False):
            return results[k][1 if out else 0]
        return results[k]

    return id_of


def plan(ctx: Ctx, jaxpr: jx.Jaxpr, blocks: BlockOperands, scalars, inputs, input_output_aliases, resident=None):
    """``(allocations, LaunchBuffers)``: every buffer of the launch (see the
    module doc), as the prologue allocates them in order, and the launch's
    buffers by allocation index (see `LaunchBuffers.resolved`).
    ``resident``: the TPU memory space each input's and each output's
    array names (see `_shared_resident`)."""
    allocations = []

    def alloc(space, **kw) -> int:
        allocations.append(native_calls.launch_buffer(space, ctx.params, **kw))
        return len(allocations) - 1

    unpadded = inputs
    # A semaphore operand has no HBM buffer: its counts go to the kernel's
    # semaphores (`semaphore_operands`); nor has an operand the kernel
    # takes as a value.
    is_sem = [blocks.spaces[i] is _SEMAPHORE for i in range(blocks.n_in)]
    unbuffered = [sem or value for sem, value in zip(is_sem, blocks.values)]
    inputs = [
        a if sem else _padded_input(a, bs, ctx.params.uninitialized_memory)
        for a, bs, sem in zip(inputs, blocks.shapes[: blocks.n_in], is_sem)
    ]
    out_alias = {o: i - len(scalars) for i, o in input_output_aliases}
    if any(i < 0 for i in out_alias.values()):
        raise ValueError("Aliasing of scalar prefetch arguments is not currently supported in TPU interpret mode.")
    borrow = _borrowable_inputs(ctx, jaxpr, blocks, set(out_alias.values()))
    # An input aliased to an output, unpadded, is written in place in
    # XLA's buffer of that output (which XLA gives the input's value).
    in_place = {
        i
        for i in out_alias.values()
        if not unbuffered[i] and inputs[i].shape == unpadded[i].shape and _direct_output_ok(ctx, inputs[i])
    }
    input_ids = [
        None if none else alloc(space_code(_HBM), init=a, borrow=b, direct=i in in_place)
        for i, (a, b, none) in enumerate(zip(inputs, borrow, unbuffered))
    ]
    borrowed = [a for a, b, none in zip(inputs, borrow, unbuffered) if b and not none]
    output_ids, output_avals, direct = _plan_outputs(alloc, allocations, ctx, blocks, inputs, input_ids, out_alias)
    scalar_ids = [alloc(space_code(_SMEM), init=s) for s in scalars]
    shared = _shared_resident(
        ctx, blocks, out_alias, resident or ([None] * blocks.n_in, [None] * blocks.n_out), unpadded
    )
    # Per input: its buffer, or the value itself (`BlockOperands.values`).
    in_args = [_Value(a) if value else k for a, k, value in zip(unpadded, input_ids, blocks.values)]
    kernel_args = _plan_kernel_args(
        alloc, allocations, ctx, jaxpr, blocks, in_args, output_ids, scalar_ids, out_alias, shared
    )
    _, kernel_in_ids, kernel_out_ids, _ = jx.split_list(
        kernel_args, [ctx.grid_mapping.num_index_operands, blocks.n_in, blocks.n_out]
    )
    n_out = blocks.n_out
    return allocations, LaunchBuffers(
        input_ids=input_ids,
        output_ids=output_ids,
        output_avals=output_avals,
        out_alias=out_alias,
        scalar_ids=scalar_ids,
        kernel_args=kernel_args,
        kernel_in_ids=kernel_in_ids,
        kernel_out_ids=kernel_out_ids,
        borrowed=borrowed,
        direct=direct,
        direct_order=tuple(sorted((j for j, k in enumerate(direct) if k is not None), key=lambda j: direct[j])),
        sem_inputs={i: kernel_in_ids[i] for i in range(blocks.n_in) if is_sem[i]},
        sem_outputs={j: kernel_out_ids[j] for j in range(n_out) if blocks.spaces[blocks.n_in + j] is _SEMAPHORE},
    )


def _padded_input(value, block_shape, fill):
    """An input padded to whole blocks (as stock); typed PRNG keys as their
    key data (the block covers the leading, logical dims)."""
    if jx.is_key_dtype(value.dtype):
        data = jx.key_data(value)
        return jx.pad_to_block_dimension(data, tuple(block_shape) + data.shape[value.ndim :], fill)
    return jx.pad_to_block_dimension(value, block_shape, fill)


def _borrowable_inputs(ctx: Ctx, jaxpr: jx.Jaxpr, blocks: BlockOperands, aliased) -> list[bool]:
    """Per input, whether its HBM buffer may borrow XLA's operand memory
    instead of a copy: never aliased to an output and never written by the
    kernel (`input_writes`; an input in VMEM/SMEM blocks is only read, by
    the block copies). Several cores per device borrow too: their grid
    loops run inside the device program's call that `kernel_end` follows."""
    in_vars = jaxpr.invars[ctx.grid_mapping.num_index_operands :][: blocks.n_in]
    unwritten = input_writes.never_written(jaxpr, in_vars)
    return [
        j not in aliased and blocks.spaces[j] is not _SEMAPHORE and (blocks.spaces[j] is not _HBM or unwritten[j])
        for j in range(blocks.n_in)
    ]


def _plan_outputs(alloc, allocations, ctx: Ctx, blocks, inputs, input_ids, out_alias):
    """``(ids, avals, direct)``: the outputs' HBM buffers, padded to whole
    blocks; an aliased output is its (padded) input. ``direct[j]``: the
    allocation of output j that is written in place in XLA's buffer (or
    None: read back at the end)."""
    output_ids, output_avals, direct = [], [], []
    for j, bm in enumerate(ctx.grid_mapping.block_mappings_output):
        if blocks.spaces[blocks.n_in + j] is _SEMAPHORE:
            # No HBM buffer: its value is the semaphores' counts at the end.
            output_ids.append(None)
            output_avals.append(bm.array_aval)
            direct.append(None)
            continue
        if j in out_alias:
            aliased = inputs[out_alias[j]]
            buf = input_ids[out_alias[j]]
            output_ids.append(buf)
            output_avals.append(jax.ShapeDtypeStruct(aliased.shape, aliased.dtype))
            direct.append(buf if allocations[buf].direct else None)
            continue
        aval = bm.array_aval
        block = blocks.shapes[blocks.n_in + j]
        padded = tuple(-(-d // b) * b for d, b in zip(aval.shape, block))
        want_direct = padded == tuple(aval.shape) and _direct_output_ok(ctx, aval)
        buf = alloc(space_code(_HBM), shape=padded, dtype=aval.dtype, direct=want_direct)
        output_ids.append(buf)
        output_avals.append(jax.ShapeDtypeStruct(aval.shape, aval.dtype))
        # `buffer_bounds` padding makes it an ordinary buffer.
        direct.append(buf if allocations[buf].direct else None)
    return output_ids, output_avals, direct


def _direct_output_ok(ctx: Ctx, aval) -> bool:
    """Whether an unpadded output (or the input aliased to it) may be
    written in place in XLA's result buffer instead of read back at kernel
    end. Only in a
    launch of one device: there the device's own program is the only
    writer and is done at `kernel_end` (its cores' programs run inside one
    call before it; with peers, a remote DMA may still write after this
    device left). Not for empty outputs (no memory) or
    sub-byte dtypes (XLA packs them, simulated memory does not)."""
    return (
        ctx.num_devices == 1
        and not jx.is_key_dtype(aval.dtype)
        and math.prod(aval.shape) > 0
        and jax.dtypes.itemsize_bits(aval.dtype) == 8 * jnp.dtype(aval.dtype).itemsize
    )


def _shared_resident(ctx: Ctx, blocks: BlockOperands, out_alias: dict, resident: tuple, inputs) -> set:
    """The outputs whose kernel buffer is their aliased input's: an array
    that lives in VMEM / SMEM on the TPU, seen whole by the kernel in that
    same memory space on both sides, is not copied into a block buffer
    there -- the kernel's input and output refs are the one array (a
    kernel that only DMAs into it, or writes part of it, leaves the rest as
    it was). ``resident``: (per input, per output) the memory space the
    array's aval names (None: HBM); an aliased pair lives where either
    names, as the TPU lowering resolves it."""
    in_spaces, out_spaces = resident
    shared = set()
    for j, i in out_alias.items():
        space = blocks.spaces[i]
        k = blocks.n_in + j
        lives = in_spaces[i] or out_spaces[j]
        if (
            lives is space
            and blocks.spaces[k] is space
            and blocks.copied[i]
            and tuple(blocks.shapes[i]) == tuple(inputs[i].shape) == tuple(blocks.shapes[k])
            and not any(blocks.squeezed[i])
            and not any(blocks.squeezed[k])
        ):
            shared.add(j)
    return shared


def _plan_kernel_args(alloc, allocations, ctx, jaxpr, blocks, in_args, output_ids, scalar_ids, out_alias, shared):
    """The kernel jaxpr's arguments: scalar-prefetch buffers, then per block
    operand and scratch operand a buffer (or semaphore ids) of its own, or
    an input the kernel takes as a value (``in_args``: per input, its HBM
    buffer or that value). A
    semaphore result aliased to a semaphore operand is that operand's
    semaphores (the same memory, as on a TPU), and so is a ``shared``
    result's buffer its input's (`_shared_resident`)."""
    kernel_args = list(scalar_ids)
    n_in, n_out = blocks.n_in, blocks.n_out
    first = ctx.grid_mapping.num_index_operands
    for i, var in enumerate(jaxpr.invars[first:]):
        out_j = i - n_in
        is_in, is_out = i < n_in, 0 <= out_j < n_out
        space = blocks.spaces[i] if is_in or is_out else forward_any_to_hbm(var.aval.memory_space)
        if is_in and blocks.values[i]:
            kernel_args.append(in_args[i])
        elif (
            is_out
            and out_j in out_alias
            and (out_j in shared or (space is _SEMAPHORE and blocks.spaces[out_alias[out_j]] is _SEMAPHORE))
        ):
            kernel_args.append(kernel_args[len(scalar_ids) + out_alias[out_j]])
        elif space is _SEMAPHORE:
            allocations.append(native_calls.launch_semaphores(var.aval.shape, kind=semaphore_kind(var.aval)))
            kernel_args.append(len(allocations) - 1)
        elif space is _HBM:
            kernel_args.append(in_args[i] if is_in else output_ids[out_j])
        else:
            kernel_args.append(alloc(space_code(space), shape=var.aval.shape, dtype=var.aval.dtype))
    return kernel_args
