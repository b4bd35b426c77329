"""One typed wrapper per native op; each emits a single XLA FFI custom call.

Every wrapper takes the token first and returns the new token first. Call
them while tracing (inside ``jit`` / ``shard_map``); Python does not run at
execution time. A wrapper names its operands and attributes; their layout
is the native side's (``_native.OP_LAYOUTS``, ``rust/ffi/src/wire.rs``),
applied by :mod:`mosaic_rt.ffi.emit`, which emits the call (token
threading, batching, regions: see there). No other module emits a native
op.

A wrapper of an op with many fields takes one request of
:mod:`mosaic_rt.ffi.requests` (``dma_start``: a `DmaStart`) and encodes it
here, packed fields by name (:mod:`mosaic_rt.ffi.bitfields`).

May use: jax, numpy, ``mosaic_rt._native``, ``mosaic_rt._dtypes``,
``mosaic_rt.ffi.emit``, ``mosaic_rt.ffi.bitfields``,
``mosaic_rt.ffi.requests``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt import _native
from mosaic_rt.ffi import bitfields, emit
from mosaic_rt.ffi.batching import Lazy
from mosaic_rt.ffi.emit import (  # noqa: F401 (TracedRegion .. batch: re-exported)
    _HANDLE,
    _I32,
    _STATIC_INTS,
    MEMORY_SPACES,
    SEMAPHORE_KINDS,
    TracedRegion,
    _args,
    _bind,
    _call,
    _checked,
    _dtype,
    _i32,
    _i32_vector,
    _ints,
    _opt_i32,
    _region_parts,
    _scalars,
    _space,
    _with_tail,
    batch,
    join_pure,
    materialize,
    new_token,
    no_starts,
    realize,
)
from mosaic_rt.ffi.launch_config import LaunchConfig
from mosaic_rt.ffi.requests import (  # noqa: F401 (DmaSide .. UnitMap: re-exported)
    SAME_BYTES,
    DmaSide,
    DmaStart,
    DmaWait,
    RowMap,
    TrailingWait,
    UnitMap,
)


def batched_runs(enabled: bool = True):
    """Within (when ``enabled``): straight-line runs of ops become one
    `batch` call each -- ops with no result but the token may return a
    pending token (see `mosaic_rt.ffi.emit._call`); whoever takes the token
    out of the chain of ops (into control flow, a callback) calls
    `materialize` first. The interpreter emits kernels this way (unless
    `InterpretParams._batch_runs` is False, to compare); outside, every
    wrapper emits its call at once."""
    return emit.batched(enabled)


# ------------------------------------------------------------------ launches


def kernel_begin(token, device, *, uid: int, config: LaunchConfig, site: int = 0):
    """Joins launch ``uid`` of the running XLA execution as ``device``, a
    launch that runs as ``config`` says.

    Every device of one execution that calls this with the same ``uid``
    shares one native runtime (the k-th call by a device joins the k-th
    launch). Returns ``(token, handle)``. With ``config.device_ordinals``
    the native side checks that ``device`` runs where the mesh puts it;
    with ``config.trace_path`` the launch's timeline is written when it
    ends (see :mod:`mosaic_rt.timeline` for the file names); reports of
    policy "warn" (races, leaks, misuse) are issued as ``python_warnings``
    says (see :mod:`mosaic_rt.ffi.reports`).
    """
    return _call(
        "kernel_begin",
        (_HANDLE,),
        _args("kernel_begin", token=token, device=_i32(device)),
        **config.attrs(),
        uid=int(uid),
        site=site,
    )


def kernel_end(token, handle, device, *, keep_alive=(), outputs=(), leak_policy=None, site: int = 0):
    """Leaves the launch (the last device out frees it). Fails with the root
    cause if the launch failed on another device. ``keep_alive``: the
    device's ``allocate_buffer(..., borrow=True)`` inputs (XLA keeps them
    unmodified until this call, which ends their borrow). ``outputs``: the
    device's ``allocate_buffer(..., direct=True)`` results, in allocation
    order; returns ``token`` without them, else ``(token, outputs)``: the
    same buffers, now holding the kernel's outputs. ``leak_policy`` (not
    None): first reports leaks as :func:`leak_report` with that policy
    does (one call instead of two)."""
    operands = _args("kernel_end", (*keep_alive, *outputs), token=token, handle=handle, device=_i32(device))
    attrs = {} if leak_policy is None else {"leak_policy": _leak_policy(leak_policy)}
    if not outputs:
        return _call("kernel_end", (), operands, site=site, **attrs)
    first = len(operands) - len(outputs)
    # Each output operand aliased to its result: XLA hands the result the
    # operand's memory, the one the kernel wrote (checked natively).
    aliases = ((0, 0), *((first + k, 1 + k) for k in range(len(outputs))))
    results = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outputs]
    out = _bind(
        "mosaic_rt_kernel_end",
        (_I32, *results),
        operands,
        _checked("kernel_end", dict(attrs, **({"site": int(site)} if site else {}))),
        aliases=aliases,
    )
    return out[0], list(out[1:])


def _leak_policy(policy: str) -> str:
    if policy not in ("ignore", "warn", "raise"):
        raise ValueError(f"leak policy must be 'ignore', 'warn' or 'raise', got {policy!r}")
    return policy


@dataclasses.dataclass(frozen=True)
class LaunchBuffer:
    """A buffer :func:`launch_begin` allocates on every core of the device,
    as :func:`allocate_buffer` with ``core=None`` and these arguments."""

    space: Any
    dtype: Any
    shape: tuple
    logical_shape: tuple | None = None
    init: Any = None
    borrow: bool = False
    direct: bool = False


@dataclasses.dataclass(frozen=True)
class LaunchSemaphores:
    """A semaphore array :func:`launch_begin` allocates on every core of the
    device: ``prod(shape)`` (at least one) consecutive semaphores of ``kind``."""

    shape: tuple
    kind: str = "regular"


# `launch_begin`'s item kinds and buffer flags (see rust/ffi/src/ops/launch_begin.rs).
_ITEM_BUFFER, _ITEM_SEMAPHORES = 0, 1
_HAS_INIT, _BORROW, _DIRECT, _HAS_LOGICAL = 1, 2, 4, 8


def launch_begin(
    token, device, *, uid: int, config: LaunchConfig, allocations=(), barrier: bool = False, grid=None, site: int = 0
):
    """:func:`kernel_begin` (``uid``, ``config`` as there), then each of
    ``allocations`` (:class:`LaunchBuffer` / :class:`LaunchSemaphores`, in
    order), then with ``barrier`` a :func:`device_barrier`, then with
    ``grid`` (a dict of :func:`grid_begin`'s keyword arguments whose blocks
    name their buffers by allocation index) core 0's :func:`grid_begin`:
    the same native steps in one call. Returns ``(token, handle, results,
    step)``: per allocation its buffer id, ``(id, out)`` for a direct
    buffer (see :func:`allocate_buffer`), or a semaphore array's int32 ids
    (its shape); ``step`` is ``(go, p0, p1)`` as :func:`grid_begin`
    returns them (None without ``grid``)."""
    kinds, flags, spaces, ranks, shapes, logical, types = [], [], [], [], [], [], []
    inits, results = [], []
    init_aliases = []  # (index in inits, result) of a direct buffer's init
    for a in allocations:
        if isinstance(a, LaunchSemaphores):
            _check_semaphore_kind(a.kind)
            kinds.append(_ITEM_SEMAPHORES)
            flags.append(0)
            spaces.append(0)
            types.append(a.kind)
            ranks.append(len(a.shape))
            shapes += a.shape
            results.append(jax.ShapeDtypeStruct(tuple(a.shape), jnp.int32))
            continue
        dtype = _dtype(a.dtype, "allocate_buffer")
        flag = 0
        if a.direct:
            if a.borrow:
                raise ValueError("launch_begin: a direct buffer cannot borrow its init value")
            flag |= _DIRECT
        if a.borrow:
            _check_borrow_init("launch_begin", a.init)
            flag |= _BORROW
        if a.init is not None:
            flag |= _HAS_INIT
            inits.append(jnp.asarray(a.init, dtype))
        if a.logical_shape is not None:
            flag |= _HAS_LOGICAL
            logical += a.logical_shape
        kinds.append(_ITEM_BUFFER)
        flags.append(flag)
        spaces.append(_space(a.space))
        types.append(dtype.name)
        ranks.append(len(a.shape))
        shapes += a.shape
        results.append(_I32)
        if a.direct:
            results.append(jax.ShapeDtypeStruct(tuple(a.shape), dtype))
            if a.init is not None:
                # XLA puts the input in the result's memory (in place when
                # the input dies here), where the kernel writes its output.
                init_aliases.append((len(inits) - 1, 1 + len(results)))  # after token, handle
    grid_attrs = {}
    if grid is not None:
        grid_attrs = _grid_attrs(**grid)
        grid_attrs["block_items"] = _ints(k for b in grid["blocks"] for k in (b.hbm_id, b.kernel_id))
        inits += _dynamic_dims(grid["grid"])
        results += _grid_results(grid["grid"])
    operands = _args("launch_begin", inits, token=token, device=_i32(device))
    first_init = len(operands) - len(inits)
    out = _call(
        "launch_begin",
        (_HANDLE, *results),
        operands,
        site=site,
        aliases=((0, 0), *((first_init + i, r) for i, r in init_aliases)),
        **config.attrs(),
        uid=int(uid),
        **grid_attrs,
        item_kinds=_ints(kinds),
        item_flags=_ints(flags),
        item_spaces=_ints(spaces),
        item_ranks=_ints(ranks),
        item_shapes=_ints(shapes),
        item_logical=_ints(logical),
        item_types="\x1f".join(types),
        barrier=int(bool(barrier)),
    )
    token, handle, *flat = out
    flat = iter(flat)
    per_item = [(next(flat), next(flat)) if getattr(a, "direct", False) else next(flat) for a in allocations]
    step = None
    if grid is not None:
        nd = len(grid["grid"])
        go, *points = flat
        step = (go, tuple(points[:nd]), tuple(points[nd:]))
    return token, handle, per_item, step


def leak_report(token, handle, device, *, policy: str = "ignore", site: int = 0):
    """``(token, count)``: (semaphore, core) pairs of ``device`` left non-zero.
    ``policy="raise"`` fails the launch with ``SemaphoreLeakError`` naming them;
    ``"warn"`` queues one ``SemaphoreLeakWarning`` report per leak (see
    :func:`pending_reports` and :mod:`mosaic_rt.ffi.reports`)."""
    return _call(
        "leak_report",
        (_I32,),
        _args("leak_report", token=token, handle=handle, device=_i32(device)),
        policy=policy,
        site=site,
    )


def device_barrier(token, handle, device, *, site: int = 0):
    """Rendezvous of every device of the launch."""
    return _call(
        "device_barrier", (), _args("device_barrier", token=token, handle=handle, device=_i32(device)), site=site
    )


def sync_device_cores(token, handle, device, *, site: int = 0):
    """Makes the cores of ``device`` see each other's past (for race
    detection, before and after a multi-core grid; a no-op without it)."""
    return _call(
        "sync_device_cores", (), _args("sync_device_cores", token=token, handle=handle, device=_i32(device)), site=site
    )


def pending_reports(token):
    """``(token, count)``: reports ("warn" policy: races, leaks, misuse)
    queued in this process and not yet delivered (``kernel_end`` hands
    them to :mod:`mosaic_rt.ffi.reports`)."""
    return _call("pending_reports", (_I32,), _args("pending_reports", token=token))


def core_end(token, handle, device, core, *, site: int = 0):
    """The program of core (device, core) is done (several cores per device:
    emit at the end of each core's program so deadlock detection knows it
    will not signal anyone any more)."""
    return _call(
        "core_end", (), _args("core_end", token=token, handle=handle, device=_i32(device), core=_i32(core)), site=site
    )


def launch_info(token):
    """``(token, int32[3])``: XLA run id (low, high 32 bits) and device ordinal."""
    return _call("launch_info", (jax.ShapeDtypeStruct((3,), jnp.int32),), _args("launch_info", token=token))


# -------------------------------------------------------------------- memory


def allocate_buffer(
    token,
    handle,
    device,
    core,
    *,
    space,
    dtype,
    shape,
    logical_shape=None,
    init=None,
    borrow: bool = False,
    direct: bool = False,
    site: int = 0,
):
    """``(token, buffer_id)``. ``core=None`` allocates on every core of the
    device. ``init`` (logical shape, ``dtype``) gives the contents; without it
    the buffer holds the fill value. ``borrow=True``: the buffer reads
    ``init``'s memory instead of a copy and every write to it fails (an
    unpadded HBM buffer on every core; otherwise a copy as usual); the
    caller must pass the same ``init`` to this device's :func:`kernel_end`
    as ``keep_alive``. ``direct=True`` (an unpadded HBM output buffer on
    every core, no ``init``, a byte-sized dtype): returns ``(token,
    buffer_id, out)``, where ``out`` is XLA's buffer the kernel writes in
    place; the caller must pass ``out`` to this device's :func:`kernel_end`
    as one of its ``outputs`` and use it nowhere else (the kernel's output
    is ``kernel_end``'s result)."""
    dtype = _dtype(dtype, "allocate_buffer")
    attrs = dict(space=_space(space), dtype=dtype.name, shape=_ints(shape))
    if direct:
        if init is not None or borrow or core is not None:
            raise ValueError("allocate_buffer: direct=True needs core=None and no init/borrow")
        attrs["direct"] = 1
        if logical_shape is not None:
            attrs["logical_shape"] = _ints(logical_shape)
        out = jax.ShapeDtypeStruct(tuple(shape), dtype)
        return _call(
            "allocate_buffer",
            (_I32, out),
            _args("allocate_buffer", token=token, handle=handle, device=_i32(device), core=_opt_i32(core)),
            site=site,
            **attrs,
        )
    if borrow:
        _check_borrow_init("allocate_buffer", init)
        attrs["borrow"] = 1
    if logical_shape is not None:
        attrs["logical_shape"] = _ints(logical_shape)
    operands = _args(
        "allocate_buffer",
        token=token,
        handle=handle,
        device=_i32(device),
        core=_opt_i32(core),
        init=None if init is None else jnp.asarray(init, dtype),
    )
    return _call("allocate_buffer", (_I32,), operands, site=site, **attrs)


def free_buffer(token, handle, device, core, buffer_id, *, space, site: int = 0):
    """Drops one reference of the buffer (freed at zero)."""
    return _call(
        "free_buffer",
        (),
        _args(
            "free_buffer", token=token, handle=handle, device=_i32(device), core=_i32(core), buffer_id=_i32(buffer_id)
        ),
        space=_space(space),
        site=site,
    )


def load(token, handle, device, core, buffer_id, region, *, space, shape, dtype, mask=None, site: int = 0, lazy=False):
    """``(token, value)``: ``region`` of the buffer; ``shape``/``dtype`` are
    the value's (squeezed dims dropped). With ``mask`` (bool, the value's
    shape) a masked load: only the selected elements are read; masked-off
    ones hold the fill value (uninitialized memory) and may lie out of
    bounds. With ``lazy``, inside `batched_runs`, the value may come back
    as a `batching.Lazy` (see `emit.realize`)."""
    tail = []
    starts, attrs = _region_parts(region, tail=tail)
    out = jax.ShapeDtypeStruct(tuple(shape), _dtype(dtype, "load"))
    operands = _args(
        "load",
        token=token,
        handle=handle,
        device=_i32(device),
        core=_i32(core),
        buffer_id=_i32(buffer_id),
        starts=starts,
        mask=None if mask is None else jnp.asarray(mask, jnp.bool_),
    )
    operands, attrs = _with_tail(operands, attrs, tail)
    return _call("load", (out,), operands, space=_space(space), site=site, lazy=lazy, **attrs)


def store(token, handle, device, core, buffer_id, region, value, *, space, site: int = 0):
    """Writes ``value`` into ``region`` of the buffer."""
    _dtype(value.dtype if isinstance(value, Lazy) else jnp.result_type(value), "store")
    tail = []
    starts, attrs = _region_parts(region, tail=tail)
    operands, attrs = _with_tail(
        _args(
            "store",
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            buffer_id=_i32(buffer_id),
            starts=starts,
            value=value,
        ),
        attrs,
        tail,
    )
    return _call("store", (), operands, space=_space(space), site=site, **attrs)


def swap(token, handle, device, core, buffer_id, region, value, mask=None, *, space, old: bool = True, site: int = 0):
    """``(token, old)``: writes ``value`` (where ``mask``) and returns the
    previous contents (masked-off elements give ``value``'s); with
    ``old=False`` only the token (nothing is copied out)."""
    tail = []
    starts, attrs = _region_parts(region, tail=tail)
    if not isinstance(value, Lazy):  # (a pending member's result: see `emit.join_pure`)
        value = jnp.asarray(value)
    _dtype(value.dtype, "swap")
    operands = _args(
        "swap",
        token=token,
        handle=handle,
        device=_i32(device),
        core=_i32(core),
        buffer_id=_i32(buffer_id),
        starts=starts,
        value=value,
        mask=None if mask is None else jnp.asarray(mask, jnp.bool_),
    )
    operands, attrs = _with_tail(operands, attrs, tail)
    results = (jax.ShapeDtypeStruct(value.shape, value.dtype),) if old else ()
    return _call("swap", results, operands, space=_space(space), site=site, **attrs)


def fill(token, handle, device, core, buffer_id, region, scalar, *, space, old_shape=None, site: int = 0):
    """A swap of the rank-0 ``scalar`` broadcast over ``region``, with no
    region-sized value: ``token``, or with ``old_shape`` (the region's value
    shape) ``(token, previous contents)``."""
    scalar = jnp.asarray(scalar)
    if scalar.shape != ():
        raise ValueError(f"fill: the value must be rank 0, got shape {scalar.shape}")
    _dtype(scalar.dtype, "fill")
    tail = []
    starts, attrs = _region_parts(region, tail=tail)
    operands, attrs = _with_tail(
        _args(
            "swap",
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            buffer_id=_i32(buffer_id),
            starts=starts,
            value=scalar,
        ),
        attrs,
        tail,
    )
    old = () if old_shape is None else (jax.ShapeDtypeStruct(tuple(old_shape), scalar.dtype),)
    return _call("swap", old, operands, space=_space(space), site=site, splat=1, **attrs)


def _check_borrow_init(op: str, init) -> None:
    if init is None:
        raise ValueError(f"{op}: borrow=True needs an init value to borrow")


# ---------------------------------------------------------------- semaphores


def _check_semaphore_kind(kind: str) -> None:
    if kind not in SEMAPHORE_KINDS:
        raise ValueError(f"semaphore kind must be one of {SEMAPHORE_KINDS}, got {kind!r}")


def allocate_semaphores(token, handle, device, core, *, kind: str = "regular", count: int = 1, site: int = 0):
    """``(token, first_id)`` of ``count`` consecutive internal semaphores;
    ``core=None`` allocates on every core of the device."""
    _check_semaphore_kind(kind)
    return _call(
        "allocate_semaphores",
        (_I32,),
        _args("allocate_semaphores", token=token, handle=handle, device=_i32(device), core=_opt_i32(core)),
        kind=kind,
        count=int(count),
        site=site,
    )


def barrier_semaphore(token, handle, device, *, collective_id: int, site: int = 0):
    """``(token, id)`` of the barrier semaphore of ``collective_id``."""
    return _call(
        "barrier_semaphore",
        (_I32,),
        _args("barrier_semaphore", token=token, handle=handle, device=_i32(device)),
        collective_id=int(collective_id),
        site=site,
    )


def semaphore_signal(
    token,
    handle,
    device,
    core,
    sem,
    inc,
    *,
    target_device=None,
    target_core=None,
    wrap_negative: bool = False,
    site: int = 0,
):
    """Adds ``inc`` to ``sem`` on (target_device, target_core); defaults: the
    signalling device, core 0 (stock's rule). A given target (any traced or
    concrete int, negative ones included) is range-checked natively: whether
    a target is given is a static attribute, not a -1 sentinel.
    ``wrap_negative``: first apply stock's wrap of a negative target (as
    :func:`wrap_target`); needs both target ids."""
    attrs = {}
    if wrap_negative:
        if target_device is None or target_core is None:
            raise ValueError("wrap_negative needs both target_device and target_core")
        attrs["wrap_negative"] = 1
    return _call(
        "semaphore_signal",
        (),
        _args(
            "semaphore_signal",
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            sem=_i32(sem),
            inc=_i32(inc),
            target_device=_opt_i32(target_device),
            target_core=_opt_i32(target_core),
        ),
        has_target_device=int(target_device is not None),
        has_target_core=int(target_core is not None),
        site=site,
        **attrs,
    )


def semaphore_wait(token, handle, device, core, sem, value, *, decrement: bool = True, site: int = 0):
    """Blocks until ``sem`` reaches ``value`` on (device, core), then
    subtracts it (with ``decrement=False`` leaves the count as it is). Ends
    on failure elsewhere or after the launch's timeout."""
    attrs = {} if decrement else {"decrement": 0}
    return _call(
        "semaphore_wait",
        (),
        _args(
            "semaphore_wait",
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            sem=_i32(sem),
            value=_i32(value),
        ),
        site=site,
        **attrs,
    )


def semaphore_read(token, handle, device, core, sem, *, take: bool = False, site: int = 0):
    """``(token, count)`` of ``sem`` on (device, core). With ``take`` the
    DMAs queued on it run first and its count is left 0 (a semaphore the
    kernel returns, see `interpret.launch.semaphore_operands`)."""
    return _call(
        "semaphore_read",
        (_I32,),
        _args("semaphore_read", token=token, handle=handle, device=_i32(device), core=_i32(core), sem=_i32(sem)),
        site=site,
        **({"take": 1} if take else {}),
    )


# ---------------------------------------------------------------------- DMAs


def dma_start(token, handle, device, core, request: DmaStart):
    """Starts the DMA ``request`` asks for, issued by (device, core), and
    runs its trailing waits. A side seen through a view sends its map
    operands last (after the trailing waits and the regions' trailing
    starts), which the packed ``view_maps`` / ``view_units`` fields
    describe."""
    r = request
    if (r.src_sem is None) != (r.dst_device is None):
        raise ValueError("Either both or neither `src_sem` and `device_id` can be set.")
    tail = []
    src_starts, src_attrs = _region_parts(r.src.region, "src_", tail)
    dst_starts, dst_attrs = _region_parts(r.dst.region, "dst_", tail)
    wait_sems, wait_attrs = _trailing_waits(r.then_wait)
    operands = _args(
        "dma_start",
        wait_sems,
        token=token,
        handle=handle,
        device=_i32(device),
        core=_i32(core),
        src_id=_i32(r.src.id),
        src_starts=src_starts,
        dst_id=_i32(r.dst.id),
        dst_starts=dst_starts,
        dst_sem=_i32(r.dst_sem),
        src_sem=_opt_i32(r.src_sem),
        dst_device=_opt_i32(r.dst_device),
        dst_core=None if r.dst_core is None else _i32(r.dst_core),
    )
    operands, wait_attrs = _with_tail(operands, wait_attrs, tail)
    view_attrs = {}
    if r.src.view is not None or r.dst.view is not None:  # a DMA without views is emitted as it always was
        operands = [*operands, *_map_operands(r.src.view), *_map_operands(r.dst.view)]
        view_attrs = _view_attrs(r.src.view, r.dst.view)
    attrs = dict(
        src_space=_space(r.src.space),
        dst_space=_space(r.dst.space),
        has_dst_device=int(r.dst_device is not None),
        has_dst_core=int(r.dst_core is not None),
        **src_attrs,
        **dst_attrs,
        **wait_attrs,
        **view_attrs,
    )
    return _call("dma_start", (), operands, site=r.site, plan_key=plan_key(attrs), **attrs)


def plan_key(attrs: dict) -> np.ndarray:
    """The ``plan_key`` attribute of an op with attributes ``attrs``: a
    128-bit hash of their names and values, as two int64s. The native side
    parses a call site's attributes once per thread and keeps the result
    under this key (``rust/ffi/src/ops/dma_plan.rs``), so equal keys must
    mean equal attributes: every name and value goes into the hash, each
    value as its int64 bytes with its length."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(attrs):
        value = np.asarray(attrs[name], np.int64).reshape(-1)
        h.update(name.encode())
        h.update(len(value).to_bytes(8, "little"))
        h.update(value.tobytes())
    return np.frombuffer(h.digest(), "<i8").copy()


def _map_operands(view) -> tuple:
    """The operands of a side's view: none for no view or `SAME_BYTES`."""
    if view is None or view is SAME_BYTES:
        return ()
    if isinstance(view, UnitMap):
        return (view.offsets,)
    if isinstance(view, RowMap):
        return (view.pattern, view.starts)
    return (view,)


def _view_attrs(src_view, dst_view) -> dict:
    """The packed ``view_maps`` (and, for a map in sub-byte units,
    ``view_units``) of a DMA's two views, by field name (``bitfields``)."""
    maps, units = {}, {}
    for side, view in (("src", src_view), ("dst", dst_view)):
        if view is None:
            continue
        if view is SAME_BYTES:
            maps[f"{side}_same"] = 1
            continue
        maps[f"{side}_map"] = 1
        if isinstance(view, RowMap):
            maps[f"{side}_rows"] = 1
        if isinstance(view, UnitMap):
            units.update({f"{side}_unit": view.unit, f"{side}_region": view.region, f"{side}_view": view.view})
    attrs = {"view_maps": bitfields.pack("view_maps", **maps)}
    if units:
        attrs["view_units"] = bitfields.pack("view_units", **units)
    return attrs


def dma_wait(token, handle, device, core, request: DmaWait):
    """Waits as ``request`` says, on (device, core)."""
    wait_sems, wait_attrs = _trailing_waits(request.then_wait)
    return _call(
        "dma_wait",
        (),
        _args(
            "dma_wait",
            wait_sems,
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            sem=_i32(request.sem),
        ),
        bytes=int(request.nbytes),
        site=request.site,
        **wait_attrs,
    )


def _trailing_waits(waits):
    """(semaphore operands, attributes) of an op's trailing waits
    (`TrailingWait`s)."""
    if not waits:
        return (), {}
    waits = [TrailingWait(*w) for w in waits]
    bytes_key, sites_key = _native.THEN_WAIT_ATTRS
    return [_i32(w.sem) for w in waits], {
        bytes_key: _ints(w.nbytes for w in waits),
        sites_key: _ints(w.site for w in waits),
    }


# ------------------------------------------- block copies, revisits, PRNG


def copy_block(
    token,
    handle,
    device,
    core,
    src_id,
    src_region,
    dst_id,
    dst_region,
    *,
    src_space,
    dst_space,
    direction: str,
    name,
    block_indices,
    grid_point,
    site: int = 0,
):
    """Copies one BlockSpec block: ``direction="input"`` from its HBM buffer
    into the kernel's buffer, ``"output"`` back (the grid loop in XLA; the
    native loop copies in :func:`grid_copy_in` / :func:`grid_copy_out`).
    ``name`` (the pallas_call argument), ``block_indices`` and
    ``grid_point`` only name the block when it is out of bounds (stock's
    ``IndexError``)."""
    src_starts, src_attrs = _region_parts(src_region, "src_")
    dst_starts, dst_attrs = _region_parts(dst_region, "dst_")
    return _call(
        "copy_block",
        (),
        _args(
            "copy_block",
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            src_id=_i32(src_id),
            src_starts=src_starts,
            dst_id=_i32(dst_id),
            dst_starts=dst_starts,
            block_indices=_i32_vector(block_indices),
            grid_point=jnp.asarray(grid_point, jnp.int32).reshape(-1),
        ),
        src_space=_space(src_space),
        dst_space=_space(dst_space),
        direction=direction,
        arg_name=str(name),
        site=site,
        **src_attrs,
        **dst_attrs,
    )


def check_revisit(token, handle, device, core, loop_idx, regions, *, site: int = 0):
    """Fails if an output block is written again after (device, core) moved
    on to another block of that output. ``loop_idx``: the grid indices of
    this step; ``regions``: per pallas_call output the :class:`TracedRegion` of
    this step's block, or None for an output that is not checked. Emits
    nothing when no output is checked."""
    ranks, sizes, strides, squeezed, starts = [], [], [], [], []
    for r in regions:
        if r is None:
            ranks.append(-1)
            continue
        ranks.append(len(r.sizes))
        sizes += r.sizes
        strides += r.strides
        squeezed += r.squeezed
        starts.append(r.start_vector())
    if all(r < 0 for r in ranks):
        return token
    # One region of every checked block's dimensions, split again by `ranks`.
    merged = TracedRegion(
        tuple(sizes), tuple(strides), tuple(squeezed), jnp.concatenate(starts) if starts else no_starts()
    )
    start_vec, attrs = _region_parts(merged)
    return _call(
        "check_revisit",
        (),
        _args(
            "check_revisit",
            token=token,
            handle=handle,
            device=_i32(device),
            core=_i32(core),
            loop_idx=_i32_vector(loop_idx),
            starts=start_vec,
        ),
        ranks=np.asarray(ranks, np.int64),
        site=site,
        **attrs,
    )


def prng_seed(token, handle, device, core, seeds):
    """Seeds the PRNG of (device, core) with ``seeds`` (ints or int32
    scalars), as ``pltpu.prng_seed``."""
    return _call(
        "prng_seed",
        (),
        _args("prng_seed", token=token, handle=handle, device=_i32(device), core=_i32(core), seeds=_i32_vector(seeds)),
    )


def prng_random_bits(token, handle, device, core, *, shape, dtype):
    """``(token, bits)``: an array of ``shape`` and ``dtype`` (int32 or
    uint32) of random words from the PRNG of (device, core)."""
    return _call(
        "prng_random_bits",
        (jax.ShapeDtypeStruct(tuple(shape), dtype),),
        _args("prng_random_bits", token=token, handle=handle, device=_i32(device), core=_i32(core)),
    )


# ------------------------------------------------------------------ timeline


def grid_step(token, handle, device, core, indices=(), *, phase: str = "begin"):
    """Marks the start (``phase="begin"``, with the step's grid ``indices``)
    or the end (``phase="end"``) of a grid step of (device, core) on the
    launch's timeline (see :mod:`mosaic_rt.timeline`). A no-op unless the
    launch traces (``trace_path``); emit it only then, it still costs one
    custom call per step."""
    if phase not in ("begin", "end"):
        raise ValueError(f"phase must be 'begin' or 'end', got {phase!r}")
    if isinstance(indices, (tuple, list)):
        idx = jnp.stack([_i32(i).reshape(()) for i in indices]) if indices else no_starts()
    else:
        idx = jnp.asarray(indices, jnp.int32).reshape(-1)
    return _call(
        "grid_step",
        (),
        _args("grid_step", token=token, handle=handle, device=_i32(device), core=_i32(core), indices=idx),
        phase=phase,
    )


# ---------------------------------------------------------------- grid loop

_PRED = jax.ShapeDtypeStruct((), jnp.bool_)


@dataclasses.dataclass(frozen=True)
class GridBlock:
    """One BlockSpec block the native grid loop copies: an input (HBM
    buffer ``hbm_id`` -> kernel buffer ``kernel_id`` in ``space``) or an
    output (the other way). ``factors``: per block dimension, block index ->
    element start (the block size for blocked dims, else 1)."""

    output: bool
    space: Any
    hbm_id: Any
    kernel_id: Any
    sizes: tuple[int, ...]
    squeezed: tuple[bool, ...]
    factors: tuple[int, ...]
    name: str = "unknown"


def grid_begin(
    token,
    handle,
    device,
    core,
    *,
    grid,
    order,
    iters_per_core,
    num_iterations,
    blocks,
    revisit,
    site: int = 0,
    parallel_subgrid: int = 1,
    num_cores: int = 1,
):
    """Starts the native grid loop of (device, core) (see ``grid_copy_in``).

    ``grid``: per dim a static size (>= 1) or an int32 scalar (a dynamic
    bound, >= 0, of a dim whose ``order`` is the identity); ``order``: per
    dim its visiting order (a permutation, or empty for the identity); the
    core runs iterations ``core * iters_per_core`` up to ``min(.. +
    iters_per_core, num_iterations)``. With dynamic bounds both counts are
    computed natively from the bounds (``parallel_subgrid``: the product
    of the parallel dims, split between ``num_cores`` as stock splits it).
    ``blocks``: the :class:`GridBlock` s copied per step (inputs first);
    ``revisit``: per pallas_call output the index of its block in
    ``blocks`` whose revisits are errors, or -1. Returns
    ``(token, go, p0, p1)``: whether the first iteration runs, its grid
    point and the next one (tuples of int32 scalars)."""
    nd = len(grid)
    rest = []
    for b in blocks:
        rest += _scalars((b.hbm_id, b.kernel_id))
    rest += _dynamic_dims(grid)
    operands = _args("grid_begin", rest, token=token, handle=handle, device=_i32(device), core=_i32(core))
    out = _call(
        "grid_begin",
        _grid_results(grid),
        operands,
        site=site,
        **_grid_attrs(
            grid=grid,
            order=order,
            iters_per_core=iters_per_core,
            num_iterations=num_iterations,
            blocks=blocks,
            revisit=revisit,
            parallel_subgrid=parallel_subgrid,
            num_cores=num_cores,
        ),
    )
    token, go, *points = out
    return token, go, tuple(points[:nd]), tuple(points[nd:])


def _grid_results(grid):
    """`grid_begin`'s results after the token: go, then two grid points."""
    return (_PRED,) + (_I32,) * (2 * len(grid))


def _is_static(g) -> bool:
    return isinstance(g, _STATIC_INTS) and not isinstance(g, bool)


def _dynamic_dims(grid) -> list:
    """The dynamic grid bounds, as int32 scalar operands (after the others)."""
    return [_i32(g) for g in grid if not _is_static(g)]


def _grid_attrs(
    *, grid, order, iters_per_core, num_iterations, blocks, revisit, parallel_subgrid: int = 1, num_cores: int = 1
) -> dict:
    """`grid_begin`'s attributes (also `launch_begin`'s, for core 0's).
    A dynamic dim is -1 in ``grid``; then the iteration counts are
    computed natively (from ``parallel_subgrid`` and ``num_cores``)."""
    names = [str(b.name) for b in blocks]
    if any("\x1f" in n for n in names):
        names = [n.replace("\x1f", " ") for n in names]
    if all(_is_static(g) for g in grid):
        counts = dict(iters_per_core=int(iters_per_core), num_iterations=int(num_iterations))
    else:
        counts = dict(parallel_subgrid=int(parallel_subgrid), grid_cores=int(num_cores))
    return dict(
        grid=_ints(g if _is_static(g) else -1 for g in grid),
        order=_ints(i for o in order for i in o),
        order_lens=_ints(len(o) for o in order),
        **counts,
        block_outputs=_ints(int(b.output) for b in blocks),
        block_spaces=_ints(_space(b.space) for b in blocks),
        block_ranks=_ints(len(b.sizes) for b in blocks),
        block_sizes=_ints(s for b in blocks for s in b.sizes),
        block_squeezed=_ints(int(bool(s)) for b in blocks for s in b.squeezed),
        block_factors=_ints(f for b in blocks for f in b.factors),
        block_names="\x1f".join(names),
        revisit=_ints(revisit),
    )


def grid_copy_in(token, handle, device, core, indices, *, site: int = 0):
    """Copies in this step's input blocks that moved since the previous step
    (all on the first): ``indices`` are the block indices of every input
    block of ``grid_begin``, block after block."""
    return _call(
        "grid_copy_in",
        (),
        _args("grid_copy_in", _scalars(indices), token=token, handle=handle, device=_i32(device), core=_i32(core)),
        site=site,
    )


def grid_copy_out(token, handle, device, core, indices, next_indices, *, ndim: int, site: int = 0):
    """Copies out this step's output blocks the next step does not write
    (all on the last step), checks for revisited output blocks, and moves
    the loop on. ``indices`` / ``next_indices``: the output blocks' indices
    in this and the next step. Returns ``(token, go, point)``: whether the
    next step runs and the grid point of the step after it."""
    cur, nxt = _scalars(indices), _scalars(next_indices)
    token, go, *point = _call(
        "grid_copy_out",
        (_PRED,) + (_I32,) * ndim,
        _args("grid_copy_out", (*cur, *nxt), token=token, handle=handle, device=_i32(device), core=_i32(core)),
        site=site,
    )
    return token, go, tuple(point)


def wrap_target(device, core, *, num_devices: int, num_cores: int):
    """``(device, core)`` of a signal target after stock's wrap of negative
    ids through the global core id ``device * num_cores + core`` (wraps once;
    other ids unchanged). One pure native call (no token)."""
    d, c = _bind(
        "mosaic_rt_wrap_target",
        (_I32, _I32),
        _args("wrap_target", device=_i32(device), core=_i32(core)),
        _checked("wrap_target", {"num_devices": int(num_devices), "num_cores": int(num_cores)}),
        side_effect=False,
        aliases=(),
    )
    return d, c


def iota_ids(first, shape):
    """``first + arange(prod(shape)).reshape(shape)`` as int32, by one pure
    native call (the ids of a semaphore array allocated in one run)."""
    (out,) = _bind(
        "mosaic_rt_iota_ids",
        (jax.ShapeDtypeStruct(tuple(shape), jnp.int32),),
        _args("iota_ids", first=_i32(first)),
        _checked("iota_ids", {}),
        side_effect=False,
        aliases=(),
    )
    return out


def scalar_program(program, operands, result_dtypes):
    """The outputs of a scalar program (``mosaic_rt_programs::scalar``'s int64
    wire format, as :mod:`mosaic_rt.interpret.native_compute.scalar_program` builds it)
    over ``operands`` (rank-0 integers/bools, and int vectors it indexes),
    by one pure native call (no token: XLA may CSE or drop it). Returns one
    rank-0 array per entry of ``result_dtypes``."""
    results = tuple(jax.ShapeDtypeStruct((), d) for d in result_dtypes)
    words = np.asarray(program, np.int64)
    return list(
        _bind(
            "mosaic_rt_scalar_program",
            results,
            _args("scalar_program", operands),
            _checked("scalar_program", {"program": words, "fingerprint": _fingerprint(words)}),
            side_effect=False,
            aliases=(),
        )
    )


def vector_program(program, operands, result_dtypes, shapes):
    """The outputs of a vector program (``mosaic_rt_programs::vector``'s int64
    wire format: elementwise instructions over arrays of ``n`` elements and
    rank-0 scalars) over ``operands``, by one pure native call (no token:
    XLA may CSE or drop it). Returns one array per entry of
    ``result_dtypes``, of the shape at the same position of ``shapes``
    (``n`` elements, or ``()`` for an output the program computes as a
    scalar). Given a pending `batching.Lazy` operand, the program joins its
    batch and its outputs are `Lazy` too (`emit.join_pure`)."""
    results = tuple(jax.ShapeDtypeStruct(tuple(s), d) for s, d in zip(shapes, result_dtypes))
    words = np.asarray(program, np.int64)
    operands = _args("vector_program", operands)
    attrs = _checked("vector_program", {"program": words, "fingerprint": _fingerprint(words)})
    # Reading pending loads: run inside their batch call (values stay lazy).
    joined = join_pure("mosaic_rt_vector_program", results, operands, attrs)
    if joined is not None:
        return joined
    return list(_bind("mosaic_rt_vector_program", results, operands, attrs, side_effect=False, aliases=()))


def threefry2x32(k0, k1, x0, x1, shape):
    """``jax.random``'s Threefry-2x32 hash of the uint32 counters ``(x0,
    x1)`` under the key ``(k0, k1)``, by one pure native call: two uint32
    arrays of ``shape``. Each operand is one element or ``shape``."""
    results = (jax.ShapeDtypeStruct(tuple(shape), np.uint32),) * 2
    return list(
        _bind(
            "mosaic_rt_threefry2x32",
            results,
            _args("threefry2x32", k0=k0, k1=k1, x0=x0, x1=x1),
            _checked("threefry2x32", {}),
            side_effect=False,
            aliases=(),
        )
    )


# `mosaic_rt_programs::scalar::fingerprint`: sum(words[i] * B^(i+1)) mod 2^64.
# With it the handler knows a program it ran before at the same address
# without comparing every word.
_FINGERPRINT_BASE = np.uint64(0x9E3779B97F4A7C15)


def _fingerprint(words: np.ndarray) -> np.int64:
    with np.errstate(over="ignore"):  # wrapping mod 2^64 is the point
        powers = np.cumprod(np.full(len(words), _FINGERPRINT_BASE, np.uint64), dtype=np.uint64)
        return np.sum(words.view(np.uint64) * powers, dtype=np.uint64).view(np.int64)
