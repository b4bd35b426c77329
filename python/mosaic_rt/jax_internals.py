"""Every private JAX name mosaic_rt uses, and the differences between the
jax releases it supports.

The rest of the package imports JAX internals only from here, the way
`jax/experimental/pallas/tpu.py` re-exports Mosaic's internals from one
place. Porting to a new jax release is a change in this module: primitive
params that were renamed, the jaxpr types (`ClosedJaxpr` merged into
`Jaxpr` in 0.12), mesh types, the pallas_call seam.

Which releases: `mosaic_rt.jax_version` (a moved internal imported here
becomes a `JaxVersionError` through its `internals_guard`, which
`mosaic_rt/__init__.py` puts around this import).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

try:
    import jax
except ImportError as e:  # e.g. jaxlib 0.10.2 under numpy >= 2.4
    raise ImportError(
        f"mosaic_rt needs jax, which failed to import: {e}. Supported: jax and"
        " jaxlib >= 0.10.2; jaxlib 0.10.2 needs numpy < 2.4"
        f" (found numpy {np.__version__})."
    ) from e

from mosaic_rt import jax_version

JAX_VERSION = jax_version.release(jax.__version__)
jax_version.check_supported(jax.__version__)

# ruff: noqa: E402  (the version check must run before the internal imports)
from jax._src import callback, effects, pjit, source_info_util, state, tree_util
from jax._src import config as jax_config
from jax._src import core as jax_core
from jax._src import ffi as jax_ffi
from jax._src.export import _export as jax_export_impl
from jax._src.hashable_array import HashableArray
from jax._src.lib.mlir.dialects import hlo
from jax._src.pallas import core as pallas_core
from jax._src.pallas import primitives as pallas_primitives
from jax._src.pallas.mosaic import core as mosaic_core
from jax._src.pallas.mosaic import pipeline as mosaic_pipeline
from jax._src.pallas.mosaic import primitives as mosaic_primitives
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as stock_interpreter
from jax._src.pallas.mosaic.interpret import utils as stock_utils
from jax._src.pallas.mosaic.interpret.params import InterpretParams as StockInterpretParams
from jax._src.pallas.mosaic.interpret.params import LoggingMode
from jax._src.random import threefry2x32 as jax_threefry2x32
from jax._src.sharding_impls import SPMDAxisContext
from jax._src.state import discharge as state_discharge
from jax._src.state import indexing
from jax._src.state import primitives as state_primitives
from jax._src.state import types as state_types
from jax._src.state.utils import bitcast as bitcast_array
from jax._src.util import split_list
from jax.extend import core as jax_extend_core
from jax.interpreters import mlir

try:
    from jax._src.lax.control_flow.conditionals import _switch_internal
except ImportError:  # a jax without it: lax.switch (one clamp more)
    _switch_internal = None

# --------------------------------------------------------------- names

Jaxpr = jax_core.Jaxpr
Literal = jax_core.Literal
Var = jax_core.Var
DropVar = jax_core.DropVar
Tracer = jax_core.Tracer
MemorySpace = mosaic_core.MemorySpace
AnyMemorySpace = pallas_core.MemorySpace.ANY
CompilerParams = mosaic_core.CompilerParams
SideEffectType = getattr(mosaic_core, "SideEffectType", None)
TensorCoreMesh = mosaic_core.TensorCoreMesh
SemaphoreType = mosaic_core.SemaphoreType
DeviceIdType = pallas_primitives.DeviceIdType
GridMapping = pallas_core.GridMapping
NDIndexer = indexing.NDIndexer
Slice = indexing.Slice
TransformedRef = state.TransformedRef
AbstractRef = state.AbstractRef
BitcastTransform = state_types.BitcastTransform
ReshapeTransform = state_types.ReshapeTransform
TransposeTransform = state_types.TransposeTransform
# `pl.select_ref` (jax 0.10.2 has it too): a ref chosen among several at run time.
SelectTransform = getattr(state_types, "SelectTransform", None)
# Ref transforms that only annotate (`pltpu.annotate`, jax 0.12): no effect
# on what an access touches.
ANNOTATION_TRANSFORMS = tuple(t for t in (getattr(mosaic_core, "AccessAssumptionTransform", None),) if t is not None)

io_callback = callback.io_callback
eval_jaxpr = jax_core.eval_jaxpr
user_context = source_info_util.user_context
register_source_exclusion = source_info_util.register_exclusion
tracing_registry = tree_util.tracing_registry
tree_flatten = tree_util.tree_flatten
transform_type = state.transform_type
transform_array = state_discharge.transform_array
no_effects = effects.no_effects

# Primitives the interpreter gives rules to.
jit_p = pjit.jit_p
# `jax.empty_ref(type, memory_space)` / `jax.new_ref(value, memory_space=)`
# inside a kernel: memory of the kernel, as the Mosaic lowering allocates it.
empty_ref_p = getattr(jax_core, "empty_ref_p", None)
new_ref_p = getattr(jax_core, "ref_p", None)
load_p = pallas_primitives.load_p
masked_swap_p = pallas_primitives.swap_p
get_p = state_primitives.get_p
swap_p = state_primitives.swap_p
run_scoped_p = pallas_primitives.run_scoped_p
delay_p = pallas_primitives.delay_p
semaphore_signal_p = pallas_primitives.semaphore_signal_p
semaphore_wait_p = pallas_primitives.semaphore_wait_p
# `pl.load` with `mask=` and `other=` (public only as `pltpu.load(ref,
# mask=...)`, which has no `other`); the same signature in 0.10.2 .. 0.12.x.
pallas_load = pallas_primitives.load
semaphore_read_p = pallas_primitives.semaphore_read_p
dma_start_p = mosaic_primitives.dma_start_p
dma_wait_p = mosaic_primitives.dma_wait_p
get_barrier_semaphore_p = mosaic_primitives.get_barrier_semaphore_p
prng_seed_p = mosaic_primitives.prng_seed_p
prng_random_bits_p = mosaic_primitives.prng_random_bits_p
# jax.random's Threefry-2x32 hash (jax's PRNG kernels call it in the body).
threefry2x32_p = jax_threefry2x32.threefry2x32_p
emit_pipeline_p = getattr(mosaic_pipeline, "emit_pipeline_p", None)
pipeline_body_p = getattr(mosaic_pipeline, "pipeline_body_p", None)
# Added in 0.12 (None before).
trace_value_p = getattr(mosaic_primitives, "trace_value_p", None)
has_memory_space_p = getattr(mosaic_primitives, "has_memory_space_p", None)

# Host callbacks a kernel may contain (jax.debug.print/callback,
# io_callback, pure_callback): the interpreter runs them guarded.
from jax._src import debugging as _debugging

io_callback_p = callback.io_callback_p
pure_callback_p = callback.pure_callback_p
debug_callback_p = _debugging.debug_callback_p


def summarize_source(source_info) -> str:
    """`file.py:12:4 (fn)` of the user's innermost frame, as stock prints it."""
    return source_info_util.summarize(source_info)


# `pltpu.conv` (0.12): a TPU convolution, run with lax's on CPU.
conv_p = getattr(mosaic_primitives, "conv_p", None)
# `pltpu.pack_elementwise` / `unpack_elementwise`: sub-word values packed
# into wider words and back (no CPU lowering and no stock rule; None where
# the release lacks them).
pack_elementwise_p = getattr(mosaic_primitives, "pack_elementwise_p", None)
unpack_elementwise_p = getattr(mosaic_primitives, "unpack_elementwise_p", None)
# `pltpu.stochastic_round`: no CPU lowering and no stock rule either.
stochastic_round_p = getattr(mosaic_primitives, "stochastic_round_p", None)
# SparseCore's `plsc.parallel_loop`: operands (lower, upper, step, consts,
# carry) flattened by param `tree`; param `jaxpr` takes (*consts, index,
# *carry) once its constvars are made invars (convert_constvars_jaxpr).
try:
    from jax._src.pallas.mosaic import sc_primitives as _sc_primitives
except ImportError:  # pragma: no cover - every supported jax has it
    _sc_primitives = None
parallel_loop_p = getattr(_sc_primitives, "parallel_loop_p", None)
# SparseCore's `plsc.bitcast` (to 0.11: its own primitive, with no CPU
# lowering; 0.12 binds `pltpu.bitcast(dim=-1)`, which has one): the minor
# dimension reinterpreted at another element width.
sc_bitcast_p = getattr(_sc_primitives, "bitcast_p", None)


def convert_constvars_jaxpr(jaxpr):
    from jax._src.interpreters import partial_eval

    return partial_eval.convert_constvars_jaxpr(jaxpr)


# TPU-only primitives: they drive MXU registers and result FIFOs, have no CPU
# lowering and no stock interpret rule. The interpreter raises
# NotImplementedError naming them instead of letting XLA fail to lower.
TPU_ONLY_PRIMITIVES = tuple(
    p
    for p in (
        getattr(mosaic_primitives, name, None)
        for name in ("matmul_push_rhs_p", "matmul_acc_lhs_p", "matmul_pop_p", "matmul_lhs_fifo_p", "matmul_pop_fifo_p")
    )
    if p is not None
)

# --------------------------------------------------- stock interpret mode

# Stock's helpers whose behaviour we must reproduce exactly (grid order,
# padding, parallel split), used as they are.
pad_to_block_dimension = stock_utils.pad_to_block_dimension
# The value of uninitialized memory for a dtype under
# `InterpretParams.uninitialized_memory` ("nan": NaN / the integer max / True;
# "zero": 0), the same in jax 0.10.2 .. 0.12.x.
uninitialized_value = stock_utils.get_uninitialized_value
next_grid_indices = stock_utils.get_next_indices
grid_indices = stock_utils.get_indices
JaxprEnv = stock_utils.JaxprEnv
is_float = stock_utils.is_float
padded_shape = stock_interpreter._get_padded_shape
randomized_grid_coordinates = stock_interpreter._get_randomized_grid_coordinates
grid_point = stock_interpreter._get_grid_point
parallel_dim_semantics = stock_interpreter._get_parallel_dim_semantics
parallel_subgrid_size = stock_interpreter._get_parallel_subgrid_size
# User-registered interpret rules (`register_tpu_interpret_impl`).
stock_interpret_impls = stock_interpreter._interpret_impls


def memory_space_name(memory_space) -> str:
    """The core's spelling of a memory space (a key of
    ``mosaic_rt._native.MEMORY_SPACES``): pallas' and pltpu's enums carry it
    as their value; stock treats DEFAULT as VMEM."""
    name = getattr(memory_space, "value", None)
    if name == "default":
        return "vmem"
    if not isinstance(name, str):
        raise NotImplementedError(f"memory space {memory_space!r} is not supported by TPU interpret mode")
    return name


# The pallas_call seam (see mosaic_rt.interpret.launch.seam): pallas_call's
# lowering looks this module attribute up at lowering time.
PALLAS_CALL_SEAM = (stock_interpreter, "interpret_pallas_call")
# The effects pallas_call gives a kernel in interpret mode.
INTERPRET_EFFECTS_SEAM = (pallas_core, "get_interpret_effects")
# jax.export's check of a lowered module (custom-call targets without a
# compatibility guarantee are refused there; jax 0.10.2 .. 0.12).
EXPORT_CHECK_SEAM = (jax_export_impl, "_check_module")
# pallas_call's lowering rule, registered for every platform
# (`jax/_src/pallas/pallas_call.py`, `_pallas_call_lowering`, jax 0.10.2 ..
# 0.12): in interpret mode it imports the GPU interpreter (a cost paid once
# per process, where it imports) before it looks at the params.
lower_fun = mlir.lower_fun


def pallas_call_lowering():
    """``(rule, inline)``: pallas_call's registered common lowering."""
    from jax._src.interpreters import mlir as _mlir
    from jax._src.pallas import pallas_call as _pallas_call

    entry = _mlir._lowerings[_pallas_call.pallas_call_p]
    return entry.rule, entry.inline


def set_pallas_call_lowering(rule, inline: bool) -> None:
    from jax._src.pallas import pallas_call as _pallas_call

    mlir.register_lowering(_pallas_call.pallas_call_p, rule, inline=inline)


# `pltpu.force_tpu_interpret_mode`'s setting.
interpret_mode_setting = jax_config.pallas_tpu_interpret_mode_context_manager

# InterpretParams fields stock has in this release (on_race: 0.11+).
STOCK_HAS_ON_RACE = "on_race" in getattr(StockInterpretParams, "__dataclass_fields__", {})


# ---------------------------------------------------- version differences


def switch_on_clamped_index(index, branches, operands):
    """``lax.switch`` for an int32 ``index`` already clamped to the branches:
    binds the conditional without switch's own convert and clamp (two XLA
    fusions per `pl.when`). Falls back to ``lax.switch`` where jax lacks
    the internal entry point."""
    if _switch_internal is None:
        return jax.lax.switch(index, branches, *operands)
    return _switch_internal(index, branches, operands, branches_platforms=None)


def replace_indexer(indexer, indices: tuple):
    """An `NDIndexer` of the same ref shape with other ``indices`` (of the
    same kinds per dimension: its integer-indexer shape stays)."""
    return dataclasses.replace(indexer, indices=tuple(indices))


def closed_jaxpr_parts(closed) -> tuple[Jaxpr, list]:
    """(jaxpr, consts) of a closed jaxpr: a `ClosedJaxpr` before 0.12, a
    `Jaxpr` carrying its consts after. Evaluate with the consts first."""
    return closed.jaxpr, list(closed.consts)


def scan_operands(params, values) -> tuple[list, list, list]:
    """(consts, initial carry, xs) of a `scan_p` equation's operands."""
    if "num_consts" in params:  # jax < 0.11
        consts, carry, xs = split_list(values, [params["num_consts"], params["num_carry"]])
        return consts, carry, xs
    consts, carry, xs = params["ft_in"].update(list(values)).unpack()
    return list(consts), list(carry), list(xs)


def scan_body_results(params, values) -> tuple[list, list]:
    """(carry, ys) of what a `scan_p` body returns."""
    if "num_carry" in params:  # jax < 0.11
        carry, ys = split_list(values, [params["num_carry"]])
        return carry, ys
    carry, ys = params["ft_out"].update(list(values)).unpack()
    return list(carry), list(ys)


def tensorcore_mesh_cores(mesh) -> int:
    """Cores per device of a `TensorCoreMesh` (`.devices` before 0.11)."""
    if hasattr(mesh, "num_cores"):
        return int(mesh.num_cores)
    return int(mesh.devices.shape[0])


def _sparse_core_meshes() -> tuple:
    try:
        from jax._src.pallas.mosaic import sc_core
    except ImportError:  # pragma: no cover - every supported jax has it
        return ()
    return tuple(getattr(sc_core, n) for n in ("VectorSubcoreMesh", "ScalarSubcoreMesh") if hasattr(sc_core, n))


SPARSE_CORE_MESHES = _sparse_core_meshes()


def core_mesh_cores(mesh) -> int | None:
    """Cores per device a `core_map` mesh runs on (a `TensorCoreMesh`'s
    cores; a SparseCore mesh's cores x subcores, each its own core), or None
    for any other mesh."""
    if isinstance(mesh, TensorCoreMesh):
        return tensorcore_mesh_cores(mesh)
    if SPARSE_CORE_MESHES and isinstance(mesh, SPARSE_CORE_MESHES):
        return int(mesh.size)
    return None


def mesh_axis_names(mesh) -> tuple:
    """Names of a pallas mesh's axes (the core axis of a core_map)."""
    return tuple(mesh.shape.keys()) if mesh is not None else ()


def axis_sizes() -> dict:
    """Sizes of the named axes in scope (shard_map / pmap), in mesh order."""
    return dict(jax_core.get_axis_env().axis_sizes)


def shard_map_axes(ctx) -> tuple[dict, tuple] | None:
    """``({mesh axis: size}, manual axes)`` when the lowering context ``ctx``
    is inside a shard_map (manual over every mesh axis, `partition-id` is
    the device's row-major mesh position, the last axis fastest); None
    otherwise (pmap, no mesh). Both in mesh order."""
    axis_ctx = ctx.module_context.axis_context
    if not isinstance(axis_ctx, SPMDAxisContext):
        return None
    mesh = axis_ctx.mesh
    axes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    manual = axis_ctx.manual_axes or frozenset(axes)
    return axes, tuple(n for n in axes if n in manual)


def mesh_processes(ctx) -> tuple[int, ...] | None:
    """The process index of each device of the mesh the lowering context
    ``ctx`` is inside (its row-major device order, the partition ids), or
    None outside a concrete shard_map mesh."""
    axis_ctx = ctx.module_context.axis_context
    mesh = getattr(axis_ctx, "mesh", None)
    if not isinstance(axis_ctx, SPMDAxisContext) or mesh is None or isinstance(mesh, jax.sharding.AbstractMesh):
        return None  # an AbstractMesh has no devices (its `.devices` raises)
    devices = getattr(mesh, "devices", None)
    if devices is None:
        return None
    return tuple(int(d.process_index) for d in np.asarray(devices).flat)


def all_equations(jaxpr):
    """Every equation of ``jaxpr`` (open or closed) and of its sub-jaxprs,
    depth first."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from all_equations(sub)


def make_primitive(name: str, *, multiple_results: bool, abstract_eval, lowering):
    """A primitive of ours that only ever lowers (bound while interpreting
    inside pallas_call's lowering, so no transformation rules are needed)."""
    prim = jax_extend_core.Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_abstract_eval(abstract_eval)
    mlir.register_lowering(prim, lowering)
    return prim


lower_fun = mlir.lower_fun
ShapedArray = jax_core.ShapedArray
# The device's partition id (uint32), as jax's own axis_index lowering reads it.
partition_id_p = make_primitive(
    "mosaic_rt_partition_id",
    multiple_results=False,
    abstract_eval=lambda: ShapedArray((), np.dtype(np.uint32)),
    lowering=lambda ctx: [hlo.partition_id()],
)


# ------------------------------ operands placed in a TPU memory space
# A pallas_call operand or result may carry a TPU memory space in its
# aval (``pltpu.with_memory_space_constraint(x, pltpu.VMEM)``, an
# ``out_shape`` of ``pltpu.VMEM(shape, dtype)``): the array lives there on
# a TPU. Stock's `remove_memory_space_p` accepts only HBM / ANY; the
# interpreter strips any of them (an identity in XLA).


def memory_space_of(aval):
    """The TPU memory space an operand's aval carries, or None (none, or
    jax's own device / host spaces)."""
    space = getattr(aval, "memory_space", None)
    if space is None or isinstance(space, jax_core.MemorySpace) or space is pallas_core.MemorySpace.ANY:
        return None
    return space


def _strip_memory_space(x):
    if isinstance(x, jax_core.ShapedArray) and memory_space_of(x) is not None:
        return jax_core.ShapedArray(x.shape, x.dtype)
    return x


strip_memory_space_p = make_primitive(
    "mosaic_rt_strip_memory_space",
    multiple_results=False,
    abstract_eval=_strip_memory_space,
    lowering=lambda ctx, x: [x],
)


# -------------------------------------------------- PRNG keys in kernels
# A key-typed array (``key<pl>``, ``key<fry>``: jax.random's typed keys,
# `pltpu.to_pallas_key`) lives in memory as its key data, as on a TPU (the
# Mosaic lowering physicalizes key refs): its shape plus the impl's key
# shape, uint32. Key-consuming primitives whose impl is a Pallas one (their
# bits come from the core's PRNG: `prng_seed` / `prng_random_bits`) are
# expanded into that impl's functions of the key data.
from jax._src.random import prng as _jax_prng

random_bits_p = _jax_prng.random_bits_p
random_fold_in_p = _jax_prng.random_fold_in_p
random_split_p = _jax_prng.random_split_p
# `unwrap_pallas_seed` / `wrap_pallas_seed` (TPU-only: no CPU lowering).
split_key_p = getattr(mosaic_primitives, "split_key_p", None)
join_key_p = getattr(mosaic_primitives, "join_key_p", None)


def poison_buffers_enabled() -> bool:
    """Whether kernels lowered now poison the buffers they allocate
    (``jax_pallas_poison_buffers``)."""
    return bool(pallas_core.poison_buffers_enabled())


def is_key_dtype(dtype) -> bool:
    try:
        return bool(jax.numpy.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        return False


def key_physical(shape, dtype) -> tuple[tuple, np.dtype]:
    """(shape, dtype) of the key data of keys of ``shape`` and ``dtype``."""
    element = jax_core.physical_element_aval(dtype)
    return tuple(shape) + tuple(element.shape), np.dtype(element.dtype)


def key_data(keys):
    """The key data (uint32) of typed keys (a no-op on key data)."""
    return _jax_prng.random_unwrap(keys) if is_key_dtype(getattr(keys, "dtype", None)) else keys


def wrap_key_data(data, dtype):
    """Typed keys of ``dtype`` from their key data."""
    return _jax_prng.random_wrap(data, impl=dtype._impl)


def is_pallas_prng_impl(impl) -> bool:
    from jax._src.pallas.mosaic import random as pallas_random

    return bool(pallas_random.is_pallas_impl(impl))


def pallas_prng_expansion(prim, params: dict, in_avals):
    """For a key primitive (`random_bits`, `random_fold_in`, `random_split`;
    `random_seed` lowers as it is) of a Pallas PRNG impl: a function of its operands
    returning its results (a list), from the impl's own functions applied
    to the typed keys, as the Mosaic lowering applies them (Pallas keys are
    never made key data there); None for any other primitive or impl."""
    key_avals = [a for a in in_avals if is_key_dtype(getattr(a, "dtype", None))]
    impl = params.get("impl") or (key_avals[0].dtype._impl if key_avals else None)
    if impl is None or not is_pallas_prng_impl(impl):
        return None
    if key_avals and key_avals[0].shape != ():
        raise NotImplementedError(
            f"{prim.name} of an array of Pallas PRNG keys (shape {key_avals[0].shape}): a TPU kernel uses one key "
            "at a time (index the key ref, e.g. key_ref[0])"
        )
    if prim is random_bits_p:
        if params.get("num_streams", 1) != 1:
            raise NotImplementedError("Pallas PRNG only supports num_streams=1.")
        return lambda key: [impl.random_bits(key, params["bit_width"], params["shape"])]
    if prim is random_fold_in_p:
        return lambda key, msgs: [impl.fold_in(key, msgs)]
    if prim is random_split_p:
        return lambda key: [impl.split(key, params["shape"])]
    return None


# ------------------------- semaphores as pallas_call operands and results
# A semaphore array a pallas_call returns (``out_shape=pltpu.SemaphoreType.DMA(
# shape)``, ``out_specs`` in SEMAPHORE) or takes is an array of an extended
# dtype whose physical type is int32 (`physical_element_aval`). The
# interpreter carries each semaphore's count in it from kernel to kernel.
# jax 0.10.2 has no conversion to or from such a dtype, so these two
# primitives view the int32 counts as the semaphore dtype and back (an
# identity in XLA).


def is_semaphore_dtype(dtype) -> bool:
    try:
        return bool(jax.numpy.issubdtype(dtype, pallas_core.semaphore_dtype))
    except TypeError:
        return False


semaphore_counts_p = make_primitive(
    "mosaic_rt_semaphore_counts",
    multiple_results=False,
    abstract_eval=lambda x: ShapedArray(x.shape, np.dtype(np.int32)),
    lowering=lambda ctx, x: [x],
)
counts_as_semaphores_p = make_primitive(
    "mosaic_rt_counts_as_semaphores",
    multiple_results=False,
    abstract_eval=lambda x, *, dtype: ShapedArray(x.shape, dtype),
    lowering=lambda ctx, x, *, dtype: [x],
)


# `jax.ffi.ffi_call`'s primitive, bound directly by `mosaic_rt.ffi.ops` with
# params it caches per call signature (the public wrapper re-derives avals,
# layouts and alias checks on every call: most of a call's tracing time).
ffi_call_p = jax_ffi.ffi_call_p
auto_insert_reshard = jax_core.auto_insert_reshard
ffi_result_avals = jax_ffi._result_avals


def ffi_attribute(value):
    """An ffi_call attribute as the primitive's params hold it (hashable)."""
    return HashableArray(value) if isinstance(value, np.ndarray) else value


def current_trace():
    """The trace values are being emitted into (one per jaxpr being built:
    the kernel's, each branch's, each loop body's)."""
    return jax_core.trace_ctx.trace


def block_shape(block_mapping) -> tuple[int, ...]:
    return pallas_core._get_block_shape(block_mapping.block_shape)


def block_memory_space(block_mapping):
    """The memory space a kernel sees a block operand in: the transformed
    block aval's before 0.12.1 (`transformed_block_aval`), the block aval's
    from 0.12.1 (BlockMapping lost its transforms)."""
    aval = getattr(block_mapping, "transformed_block_aval", None) or block_mapping.block_aval
    return aval.memory_space


class _ViewLeaf:
    """Stands for a leaf that is a view (`TransformedRef`) while a tree is
    unflattened (see `unflatten_refs`)."""

    __slots__ = ("view",)

    def __init__(self, view):
        self.view = view


def unflatten_refs(tree, leaves):
    """``tree.unflatten(leaves)`` where leaves may be views themselves (the
    interpreter holds a view of a ref as a `TransformedRef` of its buffer):
    a view placed in a `TransformedRef` node composes with it, the leaf's
    transforms first (jax 0.12 refuses a `TransformedRef` of one), and
    keeps the leaf's `view_base_aval`."""
    if not any(isinstance(x, TransformedRef) for x in leaves):
        return tree.unflatten(list(leaves))
    out = tree.unflatten([_ViewLeaf(x) if isinstance(x, TransformedRef) else x for x in leaves])

    def resolve(x):
        if isinstance(x, _ViewLeaf):
            return x.view
        if isinstance(x, TransformedRef) and isinstance(x.ref, _ViewLeaf):
            inner = x.ref.view
            return with_base_aval(TransformedRef(inner.ref, (*inner.transforms, *x.transforms)), view_base_aval(inner))
        return x

    registry = tracing_registry
    flat, shape = registry.flatten(out, lambda x: isinstance(x, (TransformedRef, _ViewLeaf)))
    return shape.unflatten([resolve(x) for x in flat])


def with_base_aval(view, aval):
    """``view`` (a `TransformedRef`) noting the aval of the buffer it
    addresses (a variable holding a view has the view's aval, not its
    buffer's, which views through a bitcast or reshape need)."""
    if aval is not None and isinstance(view, TransformedRef):
        object.__setattr__(view, "_mosaic_rt_base_aval", aval)
    return view


def view_base_aval(value):
    """The aval of the buffer a view addresses (see `with_base_aval`), or
    None."""
    return getattr(value, "_mosaic_rt_base_aval", None) if isinstance(value, TransformedRef) else None


def ref_and_transforms(ref):
    """(base ref, transforms) of a possibly transformed ref operand; a
    transformed ref of a transformed ref (pipelines nested over views)
    composes, the inner view's transforms first."""
    ref, transforms = mosaic_primitives._get_ref_and_transforms(ref)
    if isinstance(ref, TransformedRef):
        inner, first = ref_and_transforms(ref)
        return inner, (*first, *transforms)
    return ref, transforms


def emit_pipeline_to_jaxpr():
    """The expansion of an `emit_pipeline_p` equation into the pipeline it
    stands for, called ``(avals_in, grid_names=, grid_sizes=, **params)``:
    jax's own from 0.12, `_emit_pipeline_jaxpr_before_0_12` before."""
    return getattr(mosaic_pipeline, "emit_pipeline_to_jaxpr", None) or _emit_pipeline_jaxpr_before_0_12


def _emit_pipeline_jaxpr_before_0_12(
    avals_in,
    *,
    grid_names,
    grid_sizes,
    grid_mapping,
    body_jaxpr,
    body_consts_len,
    args_tree,
    _num_extra_dynamic,
    _static_grid_offsets,
    **params,
):
    """jax < 0.12 has no expansion of `emit_pipeline_p` outside its TPU
    lowering rule, which builds the pipeline from its lowering context.
    This builds the same pipeline from the equation's params and the
    kernel's grid: the operands are the block index maps' consts, the
    dynamic grid bounds and offsets, the body's consts and the flattened
    refs; `_emit_pipeline` runs the body with explicit indices, each step's
    body a `pipeline_body_p` taking (indices, body consts, window refs).
    Returns a closed jaxpr of the operands."""
    from jax._src import api_util
    from jax._src import linear_util as lu
    from jax._src.interpreters import partial_eval as pe

    counts = [len(bm.index_map_jaxpr.consts) for bm in grid_mapping.block_mappings]
    n_dynamic = grid_mapping.num_dynamic_grid_bounds + _num_extra_dynamic
    is_ref = mosaic_pipeline.is_transformed_ref

    def pipeline(*operands):
        map_consts, dynamic, body_consts, refs = split_list(operands, [sum(counts), n_dynamic, body_consts_len])
        mappings = [
            bm.replace(index_map_jaxpr=jax_core.ClosedJaxpr(bm.index_map_jaxpr.jaxpr, consts))
            for bm, consts in zip(grid_mapping.block_mappings, split_list(map_consts, counts))
        ]
        gm = dataclasses.replace(grid_mapping, block_mappings=mappings)
        refs, _ = tracing_registry.flatten(args_tree.unflatten(refs), is_ref)
        values = iter(dynamic)
        grid = tuple(next(values) if pallas_core.is_dynamic_dim(d) else d for d in gm.grid)
        offsets = tuple(next(values) if pallas_core.is_dynamic_dim(d) else d for d in _static_grid_offsets)
        specs = [bm.to_block_spec() for bm in gm.block_mappings]

        def step(indices, *window_refs):
            user = tuple(i for k, i in enumerate(indices) if k not in gm.vmapped_dims)
            flat, tree = tracing_registry.flatten((user, tuple(body_consts), window_refs))
            return pipeline_body_p.bind(*flat, jaxpr=body_jaxpr, in_tree=tree, num_inputs=gm.num_inputs)

        names = grid_names if grid_names is not None else (None,) * len(grid_sizes)
        axes = [(n, size) for n, size in zip(names, grid_sizes) if n is not None and isinstance(size, int)]
        user_grid = tuple(d for k, d in enumerate(gm.grid) if k not in gm.vmapped_dims)
        with jax_core.extend_axis_env_nd(axes), pallas_core.tracing_grid_env(user_grid, ()):
            run = mosaic_pipeline._emit_pipeline(
                step,
                grid=grid,
                in_specs=specs[: gm.num_inputs],
                out_specs=specs[gm.num_inputs :],
                _grid_offsets=offsets,
                _explicit_indices=True,
                **params,
            )
            run(*refs)
        return ()

    debug = api_util.debug_info("emit_pipeline (mosaic_rt)", pipeline, tuple(avals_in), {})
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(pipeline, debug_info=debug), list(avals_in))
    return jax_core.ClosedJaxpr(jaxpr, consts)


def pipeline_step_indices(indices) -> tuple:
    """The pipeline's grid position from the first part of a
    `pipeline_body_p` operand tree: a `PipelineStep` (0.11), a pair of one
    and the local grid sizes (0.12), or (0.10) the indices themselves."""
    step_type = getattr(mosaic_pipeline, "PipelineStep", None)
    if step_type is not None and isinstance(indices, step_type):
        return tuple(indices.index)
    if step_type is not None and isinstance(indices, tuple) and indices and isinstance(indices[0], step_type):
        return tuple(indices[0].index)
    return tuple(indices)


def pipeline_body_jaxpr(jaxpr):
    """The open jaxpr of a `pipeline_body_p` body taking its consts as its
    first arguments: the body's consts are the equation's operands (as the
    TPU lowering binds them), whatever the jaxpr carries."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr (jax < 0.12)
    if not jaxpr.constvars:
        return jaxpr
    from jax._src.interpreters import partial_eval as pe

    return pe.convert_constvars_jaxpr(jaxpr)


def backends_are_initialized() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def output_runtime_tokens():
    """The runtime tokens jax keeps for ordered effects (to block on them)."""
    from jax._src import dispatch

    return dispatch.runtime_tokens.output_runtime_tokens


# ------------------------------------- mosaic_rt.tpu: the pltpu mirror
# mosaic_rt.tpu delegates binding to the installed pltpu / pl functions and
# only needs these private names on top of the public API.

# pltpu's descriptor class; ours subclasses it, so start/wait bind exactly
# what stock binds on every release.
StockAsyncCopyDescriptor = mosaic_primitives.AsyncCopyDescriptor


def descriptor_used(descriptor) -> bool:
    """Whether a descriptor was started or waited (stock's `_used` flag)."""
    return bool(getattr(descriptor, "_used", False))


def mark_descriptor_used(descriptor) -> None:
    """Silences stock's "AsyncCopyDescriptor was not used" log for a stock
    descriptor we replaced by ours."""
    descriptor._used = True


def user_source_frames():
    """The user's frames of the current call stack, innermost first, with
    jax's and other registered exclusions left out."""
    traceback = source_info_util.current().traceback
    if traceback is None:
        return []
    return [frame for frame in source_info_util.user_frames(traceback) if frame.file_name != __file__]


def stock_deprecation(module, name: str) -> str | None:
    """The message of a public jax module's deprecated attribute `name`, or
    None when this release does not deprecate it."""
    entry = getattr(module, "_deprecations", {}).get(name)
    return None if entry is None or entry[1] is None else entry[0]


# ------------------------------------ private synchronous CPU client (cores)


def make_private_cpu_client(num_devices: int):
    """A CPU client of our own that runs executions on the calling thread.

    jax's client runs programs on a pool sized to its devices; a multi-core
    kernel runs one program per core and they wait on each other, so it
    needs a thread per core that nothing else can take (see
    mosaic_rt.interpret.launch.cores). Our FFI targets are registered process-wide,
    so programs compiled here call the same native runtime.
    """
    from jax._src.lib import xla_client

    return xla_client.make_cpu_client(asynchronous=False, num_devices=num_devices)


def compile_on_client(client, lowered, device):
    """Compiles a `jax.jit(...).lower(...)` result for one device of `client`.

    Returns (executable, indices of the arguments it takes): jit drops
    arguments the program does not use."""
    from jax._src.lib import xla_client

    module = lowered.compiler_ir("stablehlo")
    options = xla_client.CompileOptions()
    build = options.executable_build_options
    build.num_replicas = 1
    build.num_partitions = 1
    build.device_assignment = xla_client.DeviceAssignment.create(np.array([[device.id]]))
    # Host callbacks in the program (e.g. a grid_point_recorder) must be
    # handed to the executable, which keeps them alive and wires them up.
    compile_args = lowered._lowering.compile_args
    host_callbacks = list(compile_args.get("host_callbacks", ()))
    kept = compile_args.get("kept_var_idx")
    loaded = client.compile_and_load(module, xla_client.DeviceList((device,)), options, host_callbacks)
    return loaded, (None if kept is None else tuple(sorted(kept)))


def execute_on_client(program, args) -> list:
    """Runs a `compile_on_client` program on arrays already on its device;
    returns its outputs as jax arrays."""
    loaded, kept = program
    if kept is not None:
        args = [args[i] for i in kept]
    results = loaded.execute_sharded(list(args))
    return [shards[0] for shards in results.disassemble_into_single_device_arrays()]


# ------------------------------------------ mosaic_rt.tpu_check (deviceless)
# The TPU compile check binds pallas_call's own primitive again with
# ``interpret=False`` and lowers it for a TPU device of a libtpu topology.


def _pallas_call_p():
    from jax._src.pallas import pallas_call as _pallas_call

    return _pallas_call.pallas_call_p


pallas_call_p = _pallas_call_p()
get_aval = jax_core.typeof  # the abstract value of a tracer or array
use_abstract_mesh = jax.sharding.use_abstract_mesh
enable_x64 = jax_config.enable_x64  # ``with enable_x64(flag):`` (thread-local)


def x64_enabled() -> bool:
    """The x64 mode of this thread (a compile on a worker thread must get
    its caller's)."""
    return bool(jax_config.enable_x64.value)


def shard_map(f, *, mesh, in_specs, out_specs):
    """`jax.shard_map` without the varying-axes check (the kernel's outputs
    are per device whatever its specs say)."""
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def pallas_tpu_info():
    """Pallas' TPU info module (`get_tpu_info`, `registry`; a re-export of
    `jax._src.tpu_info` on 0.12), the same path on 0.10.2 .. 0.12."""
    from jax._src.pallas.mosaic import tpu_info

    return tpu_info


def clear_tpu_info_cache() -> None:
    """Forgets `get_tpu_info`'s cached answers (jax caches it per trace
    context)."""
    clear = getattr(pallas_tpu_info().get_tpu_info, "cache_clear", None)
    if clear is not None:
        clear()


def mosaic_error_types() -> dict:
    """Pallas' exceptions for Mosaic's rejections of a kernel, by name
    (`MosaicError`, `VerificationError`)."""
    from jax._src.pallas.mosaic import error_handling

    return {n: getattr(error_handling, n) for n in ("MosaicError", "VerificationError") if hasattr(error_handling, n)}


def tpu_compiler_loaded() -> bool:
    """Whether this process has started libtpu (its PJRT plugin)."""
    from jax._src.lib import xla_client

    return bool(xla_client.pjrt_plugin_loaded("tpu"))


def tpu_topology(name: str):
    """libtpu's topology ``name`` ("v5e:2x2") as compile-only TPU devices
    (loads libtpu on first use: never at import)."""
    from jax.experimental import topologies

    return topologies.get_topology_desc(name, "tpu")


def itemsize_bits(dtype) -> int:
    """Bits per element of `dtype` (4 for int4; public in newer jax)."""
    from jax._src import dtypes

    return int(dtypes.itemsize_bits(dtype))


# ------------------------------------- mosaic_rt.simulate (a simulated host)
# What code under test asks of a TPU host, answered for a simulated chip
# (`mosaic_rt.simulate.gates`), and mpmd_map's lowering (`pl.kernel`,
# `core_map` on 0.12), which the kernel routing wraps like pallas_call's.


def test_util():
    """jax's test helpers (`jtu`), or None where they do not import (they
    need absl-py): then the code under test cannot use them either."""
    try:
        from jax._src import test_util as jtu
    except ImportError:
        return None
    return jtu


def test_dut(jtu) -> str:
    """jax's ``jax_test_dut`` flag (defined by `jtu` when it is imported)."""
    return jtu._TEST_DUT.value


def device_class():
    """The class of every jax device (CPU and TPU alike)."""
    from jax._src.lib import xla_client

    return xla_client.Device


def abstract_device_class():
    """The class of a mesh's abstract device (what jax reads a device's
    kind and cores from inside `shard_map`)."""
    from jax._src import mesh

    return mesh.AbstractDevice


def num_cpu_devices_setting() -> int:
    """``jax_num_cpu_devices`` (-1: not set)."""
    from jax._src import xla_bridge

    return int(xla_bridge.num_cpu_devices.value)


def mpmd_map_p():
    """mpmd_map's primitive (`pl.kernel`; `core_map` on jax 0.12), or None."""
    try:
        from jax._src.pallas import mpmd
    except ImportError:
        return None
    return getattr(mpmd, "mpmd_map_p", None)


def mpmd_map_lowering():
    """``(rule, inline)``: mpmd_map's registered lowering, or None on a jax
    without it. On CPU it lowers through pallas_call's lowering function
    directly, not the registered rule."""
    from jax._src.interpreters import mlir as _mlir

    prim = mpmd_map_p()
    entry = None if prim is None else _mlir._lowerings.get(prim)
    return None if entry is None else (entry.rule, entry.inline)


def set_mpmd_map_lowering(rule, inline: bool) -> None:
    mlir.register_lowering(mpmd_map_p(), rule, inline=inline)
