"""How a native op is emitted: the one place that binds XLA's ``ffi_call``
primitive (`_bind`), threads the token, joins straight-line runs into one
``batch`` call (`batched`, `materialize`; encoding in
:mod:`mosaic_rt.ffi.batching`), encodes regions (:class:`TracedRegion`,
`_region_parts`, `_with_tail`) and lays operands and attributes out by the
op's wire layout, which the native side states (``_native.OP_LAYOUTS``,
``rust/ffi/src/wire.rs``): `_args` orders a wrapper's named operands by it,
`_checked` checks its attribute names. The typed wrappers, one per op, are
in :mod:`mosaic_rt.ffi.ops`.

Regions (``load``/``store``/``swap``/``dma_start``/``copy_block``) are
:class:`TracedRegion`s: ``sizes``, ``strides`` and ``squeezed`` (static, one
entry per leading buffer dimension; remaining dimensions are taken whole) and
``starts`` (int32 scalars or one int32 vector, traced or not), or ``None``
for the whole buffer. The handler rebuilds the core's ``Region`` from the
op's attributes and start operand (for load / store / swap / dma_start,
several dynamic scalar starts: the first there, the others as trailing
operands, see `_with_tail`).

May use: jax, numpy, ``mosaic_rt._native``, ``mosaic_rt.jax_internals``,
``mosaic_rt.memory_spaces``, ``mosaic_rt._dtypes``,
``mosaic_rt.ffi.batching``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import _native, memory_spaces
from mosaic_rt import jax_internals as jx
from mosaic_rt._dtypes import dtype_name
from mosaic_rt.ffi import batching

_I32 = jax.ShapeDtypeStruct((), jnp.int32)
# A region's `fixed` start taken from the operand (the native sentinel).
_DYNAMIC_START = _native.DYNAMIC_START
# A region's size taken from the operand, after its dynamic starts.
_DYNAMIC_SIZE = _native.DYNAMIC_SIZE
_HANDLE = jax.ShapeDtypeStruct((2,), jnp.uint32)

# The core's spellings and codes, exported by the binding (one source).
MEMORY_SPACES = _native.MEMORY_SPACES
SEMAPHORE_KINDS = _native.SEMAPHORE_KINDS


@dataclasses.dataclass(frozen=True)
class _Layout:
    """One op's wire layout, as the native side states it."""

    operands: tuple[str, ...]
    optional_operands: tuple[str, ...]
    rest: str
    attrs: frozenset
    allowed: frozenset  # attrs and optional attrs


LAYOUTS = {
    target.removeprefix("mosaic_rt_"): _Layout(o, oo, rest, frozenset(a), frozenset(a + oa))
    for target, (o, oo, rest, a, oa) in _native.OP_LAYOUTS.items()
}


class WireLayoutError(AssertionError):
    """A wrapper emitted an op against its wire layout (a bug in mosaic_rt)."""


def _args(op: str, rest=(), /, **values) -> list:
    """Op ``op``'s operands laid out as its layout states: the fixed ones
    in order, then the optional ones given (not None), then ``rest`` (its
    variadic operands). A missing or unknown name is a `WireLayoutError`
    naming the op."""
    layout = LAYOUTS[op]
    try:
        out = [values.pop(n) for n in layout.operands]
    except KeyError as e:
        raise WireLayoutError(f"mosaic_rt_{op}: operand {e.args[0]!r} not given") from None
    for n in layout.optional_operands:
        v = values.pop(n, None)
        if v is not None:
            out.append(v)
    if values:
        raise WireLayoutError(f"mosaic_rt_{op}: no operand(s) {sorted(values)} in its layout")
    if rest:
        if not layout.rest:
            raise WireLayoutError(f"mosaic_rt_{op}: takes no operands after {layout.operands}")
        out.extend(rest)
    return out


def _checked(op: str, attrs: dict) -> dict:
    """``attrs``, checked against op ``op``'s layout: every required
    attribute given, none unknown (else a `WireLayoutError`)."""
    layout = LAYOUTS[op]
    names = attrs.keys()
    if not (layout.attrs <= names and names <= layout.allowed):
        missing = sorted(layout.attrs - names)
        extra = sorted(names - layout.allowed)
        raise WireLayoutError(f"mosaic_rt_{op}: attributes missing {missing}, not in its layout {extra}")
    return attrs


@dataclasses.dataclass(frozen=True)
class TracedRegion:
    """A region of a buffer as an op is emitted with, at trace time (see the
    module doc): per leading dimension a static stride and squeezed flag, a
    start that may be traced, and a size that is static but for DMA
    regions (``pl.ds(start, n)`` of traced ``n``)."""

    sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    squeezed: tuple[bool, ...] = ()
    starts: Any = ()

    def start_vector(self):
        """The starts as one int32 vector (the op's dynamic operand): a
        numpy constant when every start is a Python/numpy int."""
        starts = self.starts
        if not isinstance(starts, (tuple, list)):
            if isinstance(starts, (np.ndarray, np.generic, int)):
                return np.asarray(starts, np.int32).reshape(-1)
            starts = _as_i32(starts)
            return starts if starts.ndim == 1 else lax.reshape(starts, (math.prod(starts.shape),))
        if all(isinstance(s, _STATIC_INTS) for s in starts):
            return np.asarray(starts, np.int32).reshape(-1)
        return lax.concatenate(
            [
                np.asarray([s], np.int32) if isinstance(s, _STATIC_INTS) else lax.reshape(_as_i32(s), (1,))
                for s in starts
            ],
            0,
        )

    @staticmethod
    def index(*indices) -> "TracedRegion":
        """Integer indices of the leading dimensions (dropped from the value)."""
        k = len(indices)
        return TracedRegion((1,) * k, (1,) * k, (True,) * k, tuple(indices))

    @staticmethod
    def slices(*dims) -> "TracedRegion":
        """``(start, size[, stride])`` per leading dimension."""
        dims = [tuple(d) + (1,) * (3 - len(d)) for d in dims]
        return TracedRegion(
            tuple(d[1] for d in dims), tuple(d[2] for d in dims), (False,) * len(dims), tuple(d[0] for d in dims)
        )


_NO_STARTS_OF = threading.local()


def no_starts():
    """An empty int32 vector (a region with no dynamic start), made in the
    program, not a numpy constant (jax would hoist that into a shard_map
    body as an operand of its own, which sdy rejects when the body reads no
    input, and a loop body would carry it as a loop variable). One per
    trace: every op of a kernel body shares it (a fresh one per op was two
    HLO ops each: ~60 in a ring reduce-scatter)."""
    cached = getattr(_NO_STARTS_OF, "value", None)
    trace = jx.current_trace()
    if cached is not None and cached[0]() is trace:
        return cached[1]
    value = jnp.zeros((0,), jnp.int32)
    # A weak reference: the trace (and all it built) is not kept alive.
    _NO_STARTS_OF.value = (weakref.ref(trace), value)
    return value


def new_token():
    """A fresh token (int32 scalar) to start a chain of ops with."""
    return jnp.zeros((), jnp.int32)


_STATIC_INTS = (int, np.integer)


def _as_i32(x):
    """A traced (or concrete) value as an int32 array, without a convert
    when it already is one."""
    if getattr(x, "dtype", None) == np.int32:
        return x
    return lax.convert_element_type(x, np.int32)


def _i32(x):
    """An int32 scalar operand: a numpy constant for a static int."""
    if isinstance(x, _STATIC_INTS) and not isinstance(x, bool):
        return np.int32(x)
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x, np.int32)
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return _as_i32(x)
    return jnp.asarray(x, jnp.int32)


def _opt_i32(x):
    return _i32(-1 if x is None else x)


_space = memory_spaces.code


def _dtype(dtype, op: str) -> np.dtype:
    """``dtype`` as a numpy dtype, checked at trace time: a ``ValueError``
    naming it when simulated memory cannot hold it (instead of a runtime
    error from the native side)."""
    return np.dtype(dtype_name(dtype, f"dtype for mosaic_rt.ffi.{op}"))


def _ints(xs) -> np.ndarray:
    return np.asarray(tuple(int(x) for x in xs), np.int64)


def _call(name: str, results, operands, *, site: int = 0, lazy: bool = False, aliases=((0, 0),), **attrs):
    """One side-effecting, token-threaded op (operand 0 -> result 0).
    ``site``: the source-site id (``_native.intern_site``) the native side
    names in reports and errors; 0 (unknown) adds no attribute.

    Inside `batched_runs`, an op that may join a batch (`batching.fits`:
    its kind, its operand and attribute counts) and has no result but the
    token is not emitted yet: it returns a pending token, and the
    straight-line run it starts or extends is emitted as one call by the op
    with results that ends it, or by `materialize`
    (`mosaic_rt.ffi.batching`). With ``lazy`` (the caller takes
    placeholders), an op with results stays pending too: it returns the
    pending token and a `batching.Lazy` per result. ``aliases``: sorted
    ``(operand, result)`` pairs XLA aliases (more than the token's: the op
    is its own call, never a batch member)."""
    if site:
        attrs["site"] = int(site)
    _checked(name, attrs)
    if tuple(aliases) != ((0, 0),):
        out = _bind(f"mosaic_rt_{name}", (_I32, *results), operands, attrs, aliases=tuple(aliases))
        return out[0] if not results else tuple(out)
    member = batching.Member(f"mosaic_rt_{name}", tuple(results), tuple(operands[1:]), attrs)
    if _BATCHED.get() and batching.fits((), member):
        base, members, extended = _joinable(operands[0], member)
        if not results or lazy:
            lazies = tuple(batching.Lazy(r.shape, r.dtype) for r in results)
            if lazies:
                member = dataclasses.replace(member, lazy=lazies)
            token = batching.Pending(base, (*members, member), jx.current_trace())
            if extended is not None:
                extended.successor = token
            for x in lazies:
                x.pending = token
            return token if not results else (token, *lazies)
        out = _emit(base, (*members, member))
    else:  # (`_bind` emits a run pending on the token first)
        out = _emit(operands[0], (member,))
    return out[0] if not results else tuple(out)


def join_pure(target: str, results, operands, attrs):
    """The `batching.Lazy` results of the pure op ``target`` joining, as a
    member without a token, the pending run that made its `Lazy` operands
    (so it reads them inside that call); None when it cannot (no pending
    operand, not batched, over the limits): emit it on its own then."""
    waiting = [x for x in operands if isinstance(x, batching.Lazy) and x.value is None]
    if not waiting or not _BATCHED.get():
        return None
    run = waiting[0].pending.latest()
    if not run.is_open() or any(x.pending.latest() is not run for x in waiting):
        return None
    member = batching.Member(target, tuple(results), tuple(operands), attrs, tokenless=True)
    if not batching.fits(run.members, member):
        return None
    lazies = tuple(batching.Lazy(r.shape, r.dtype) for r in results)
    token = run.extend_silently(dataclasses.replace(member, lazy=lazies))
    for x in lazies:
        x.pending = token
    return list(lazies)


def realize(x):
    """``x``'s traced value: a `batching.Lazy`'s run is emitted first."""
    if not isinstance(x, batching.Lazy):
        return x
    if x.value is None:
        materialize(x.pending.latest())
        if x.value is None:
            raise AssertionError(f"mosaic_rt internal error: emitting its run left {x!r} without a value")
    return x.value


_BATCHED = contextvars.ContextVar("mosaic_rt_batched_runs", default=False)


@contextlib.contextmanager
def batched(enabled: bool = True):
    """Within (when ``enabled``): ops with no result but the token may return
    a pending token (see `_call`); whoever takes the token out of the chain
    of ops (into control flow, a callback) calls `materialize` first
    (`mosaic_rt.ffi.ops.batched_runs` is the switch the interpreter uses)."""
    reset = _BATCHED.set(enabled)
    try:
        yield
    finally:
        _BATCHED.reset(reset)


def _joinable(token, member):
    """``(base token, members, extended)`` that ``member`` follows: the run
    pending on ``token`` when ``member`` may join it (``extended``: that
    pending token), else the emitted token."""
    if not isinstance(token, batching.Pending):
        return token, (), None
    token = token.forwarded()
    if not batching.fits(token.members, member):
        return materialize(token), (), None
    real = token.claim_for_extension()
    return (real, (), None) if real is not None else (token.base, token.members, token)


def materialize(token):
    """The token as a traced value: a pending run of ops (see `_call`) is
    emitted first. Call it before a token leaves the chain of ops: into
    control flow, out of a loop or branch body, into a host callback."""
    if not isinstance(token, batching.Pending):
        return token
    token = token.forwarded()
    real = token.claim_for_emission()
    if real is None:
        real = _emit(token.base, token.members)[0]
        token.emitted(real)
    return real


def _emit(token, members):
    """The results ``(token, *values)`` of ``members`` run after ``token``:
    one op's own call, or one `batch` call; the last member's values are
    returned, the others' fill their `batching.Lazy` placeholders."""
    if len(members) == 1 and not members[0].tokenless:
        m = members[0]
        out = _bind(m.target, (_I32, *m.results), (token, *m.operands), m.attrs)
        for x, value in zip(m.lazy, out[1:]):
            x.value = value
        return out
    token, results = batch(token, members)
    for m, values in zip(members, results):
        for x, value in zip(m.lazy, values):
            x.value = value
    return (token, *results[-1])


def batch(token, members):
    """``(token, results)``: the ops ``members`` (`batching.Member`s, each
    without its token) run in order after ``token`` in one native call;
    ``results[k]`` holds member k's results. A member reads an earlier
    member's result through its `batching.Lazy`."""
    operands, results, attrs, slices = batching.encode(tuple(members))
    out = _bind("mosaic_rt_batch", (_I32, *results), (token, *operands), attrs)
    values = out[1:]
    return out[0], [tuple(values[s]) for s in slices]


# Minor-to-major order of a row-major array of each rank (what the FFI
# lowering asks XLA for).
_ROW_MAJOR = tuple(tuple(range(n - 1, -1, -1)) for n in range(33))


@functools.lru_cache(maxsize=1024)
def _result_signature(results: tuple) -> tuple:
    """``(avals, layouts)`` of a call's results, ``results`` as ``(shape,
    dtype)`` pairs."""
    avals = jx.ffi_result_avals([jax.ShapeDtypeStruct(s, d) for s, d in results])
    return avals, tuple(_ROW_MAJOR[len(s)] for s, _ in results)


def _bind(target: str, results, operands, attrs, *, side_effect: bool = True, aliases=((0, 0),)):
    """The results of one custom call of ``target``: what
    ``jax.ffi.ffi_call(target, results, has_side_effect=side_effect,
    input_output_aliases=dict(aliases))(*operands, **attrs)`` emits, with the
    parts that depend only on the call's signature cached (the public wrapper
    re-derives them on every call; ops are emitted thousands of times per
    test suite). ``aliases``: sorted ``(operand, result)`` pairs."""
    avals, out_layouts = _result_signature(tuple((tuple(r.shape), np.dtype(r.dtype)) for r in results))
    operands = jx.auto_insert_reshard(
        *(materialize(x) if isinstance(x, batching.Pending) else realize(x) for x in operands)
    )
    return jx.ffi_call_p.bind(
        *operands,
        result_avals=avals,
        vmap_method=None,
        target_name=target,
        has_side_effect=side_effect,
        input_layouts=tuple(_ROW_MAJOR[np.ndim(x)] for x in operands),
        output_layouts=out_layouts,
        input_output_aliases=tuple(aliases),
        custom_call_api_version=4,
        legacy_backend_config=None,
        attributes=tuple((k, jx.ffi_attribute(attrs[k])) for k in sorted(attrs)),
    )


def _starts_operand(starts, tail=None):
    """A region's dynamic starts as the op's operand: one int32 scalar as it
    is (the handler takes a scalar as one start: no reshape in the
    program), several as one vector -- or, given ``tail`` (a list), the
    first as the operand and the others appended to ``tail``, when all are
    scalars: the op passes them as trailing scalar operands (see
    `_with_tail`), so the program builds no vector of them (XLA:CPU
    compiles each such concatenate as a fusion of its own: see
    benches/PERFORMANCE.md, "Native compute instead of XLA fusions")."""
    if isinstance(starts, (tuple, list)) and not starts:
        return no_starts()
    if isinstance(starts, (tuple, list)) and len(starts) == 1:
        start = starts[0]
        if not isinstance(start, _STATIC_INTS) and getattr(start, "shape", None) == ():
            return _as_i32(start)
    if (
        tail is not None
        and isinstance(starts, (tuple, list))
        and all(not isinstance(s, _STATIC_INTS) and getattr(s, "shape", None) == () for s in starts)
    ):
        tail.extend(_as_i32(s) for s in starts[1:])
        return _as_i32(starts[0])
    return TracedRegion(starts=starts).start_vector()


_REGION_KEYS = _native.REGION_KEYS  # {prefix: (sizes, strides, squeezed, fixed)}


def _region_parts(region, prefix: str = "", tail=None):
    """(int32 start operand, attributes) of a region; with ``tail`` (a
    list) several dynamic scalar starts leave all but the first there (see
    `_starts_operand`)."""
    fixed = None
    if region is None:
        sizes = strides = squeezed = ()
        starts = no_starts()
    elif not all(isinstance(s, _STATIC_INTS) for s in region.sizes):
        return _dynamic_size_parts(region, prefix, tail)
    else:
        sizes, strides, squeezed = region.sizes, region.strides, region.squeezed
        parts = region.starts
        static = [isinstance(s, _STATIC_INTS) for s in parts] if isinstance(parts, (tuple, list)) else []
        if any(static):
            # Static starts as an attribute, only the dynamic ones as the
            # operand: no concatenate of constants and scalars to compile
            # (nor, when all are static, a broadcast of a constant vector,
            # which XLA compiles as a fusion).
            fixed = np.asarray([int(s) if st else _DYNAMIC_START for s, st in zip(parts, static)], np.int64)
            dynamic = tuple(s for s, st in zip(parts, static) if not st)
            starts = _starts_operand(dynamic, tail) if dynamic else no_starts()
        else:
            starts = _starts_operand(parts, tail)
    k_sizes, k_strides, k_squeezed, k_fixed = _REGION_KEYS[prefix]
    attrs = {
        k_sizes: _ints(sizes),
        k_strides: _ints(strides),
        k_squeezed: _ints(int(bool(s)) for s in squeezed),
    }
    if fixed is not None:
        attrs[k_fixed] = fixed
    return starts, attrs


def _dynamic_size_parts(region, prefix: str, tail=None):
    """`_region_parts` of a region with traced sizes: the sizes attribute
    marks them (``DYNAMIC_SIZE``), the static starts are the ``fixed``
    attribute, and the operand is one vector of the dynamic starts, then the
    dynamic sizes (``rust/ffi/src/wire.rs``) -- or, with ``tail``, the first
    of them with the others as trailing scalar operands (no concatenate to
    compile: fused MoE's DMAs of traced size built ~2,000 of them)."""
    parts = region.starts
    if not isinstance(parts, (tuple, list)):
        raise NotImplementedError("a region with traced sizes needs its starts given per dimension")
    static = [isinstance(s, _STATIC_INTS) for s in parts]
    fixed = np.asarray([int(s) if st else _DYNAMIC_START for s, st in zip(parts, static)], np.int64)
    dynamic = [s for s, st in zip(parts, static) if not st]
    dynamic += [s for s in region.sizes if not isinstance(s, _STATIC_INTS)]
    sizes = [int(s) if isinstance(s, _STATIC_INTS) else _DYNAMIC_SIZE for s in region.sizes]
    k_sizes, k_strides, k_squeezed, k_fixed = _REGION_KEYS[prefix]
    attrs = {
        k_sizes: np.asarray(sizes, np.int64),
        k_strides: _ints(region.strides),
        k_squeezed: _ints(int(bool(s)) for s in region.squeezed),
        k_fixed: fixed,
    }
    return _starts_operand(tuple(dynamic), tail), attrs


def _with_tail(operands, attrs, tail):
    """``(operands, attrs)`` with a region's trailing scalar starts (from
    `_region_parts`) appended as the last operands, counted by attribute
    ``tail_starts`` (the handler takes them off the end, region after
    region in operand order)."""
    if not tail:
        return operands, attrs
    return [*operands, *tail], dict(attrs, **{_native.TAIL_STARTS: len(tail)})


def _i32_vector(xs):
    """Ints or int32 scalars (static or traced) as one int32 vector operand."""
    return TracedRegion(starts=tuple(xs)).start_vector()


def _scalars(xs):
    """int32 scalar operands: numpy constants for Python ints."""
    return [_i32(x) for x in xs]
