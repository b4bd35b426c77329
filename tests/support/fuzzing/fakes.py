"""A kernel's meaning without any interpreter: its own Python function run
over numpy-backed refs, with eager jax (op by op) for its compute.

This whole file is copied into every case's source that uses it (see
`fuzzing.case`), so it must stay self-contained (no ``from __future__``, no
imports of this package). `meaning_call(kernel, ...)` runs a kernel's code
with ``pl`` / ``pltpu`` replaced by the shims below: refs are `FakeRef`s
over numpy arrays (views through ``.at[...]``, ``.bitcast``, ``.reshape``
read and write through to the array underneath), a DMA copies at its start
(generated kernels never read a destination before its wait), semaphores
are counters. A grid runs point by point in row-major order, copying blocks
in when their index changes and out when it changes or at the end, as the
TPU's pipeline does.
"""

import itertools
import types

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _np_dtype(dtype):
    return np.dtype(jnp.dtype(dtype))


def _width_bits(dtype):
    d = _np_dtype(dtype)
    return 4 if d.name in ("int4", "uint4") else 1 if d == np.bool_ else d.itemsize * 8


def _uint(bits):
    return {4: ml_dtypes.uint4, 8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]


def _bitcast_array(x, dtype):
    """A ref bitcast: same width elementwise; a width change folds or splits
    the second-to-last dimension, the narrow pieces of a wide element in
    consecutive rows, least significant first."""
    src, dst = _width_bits(x.dtype), _width_bits(dtype)
    dtype = _np_dtype(dtype)
    raw = x.view(_uint(src)) if src >= 8 else x.astype(np.int64).astype(np.uint8) & 0xF
    raw = raw.astype(np.uint64)
    if src == dst:
        out = raw
    elif src > dst:  # each element -> r rows
        r = src // dst
        *lead, m, n = x.shape
        parts = [(raw >> np.uint64(k * dst)) & np.uint64((1 << dst) - 1) for k in range(r)]
        out = np.stack(parts, axis=-2).reshape(*lead, m * r, n)
    else:  # r rows -> one row
        r = dst // src
        *lead, m, n = x.shape
        grouped = raw.reshape(*lead, m // r, r, n)
        out = np.zeros((*lead, m // r, n), np.uint64)
        for k in range(r):
            out |= grouped[..., k, :] << np.uint64(k * src)
    out = out.astype(_uint(dst) if dst >= 8 else np.uint8)
    if dst >= 8:
        return out.view(dtype)
    signed = np.where(out >= 8, out.astype(np.int64) - 16, out) if dtype.name == "int4" else out
    return signed.astype(dtype)


def _index(idx, ndim):
    """A ref indexer (ints, slices, `pl.ds`, traced scalars) as numpy's."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    out = []
    for i in idx:
        if i is Ellipsis:
            out.extend([slice(None)] * (ndim - (len(idx) - 1)))
        elif isinstance(i, pl.Slice):
            start, size, stride = int(i.start), int(i.size), int(getattr(i, "stride", 1))
            out.append(slice(start, start + size * stride, stride) if size else slice(start, start))
        elif isinstance(i, slice):
            out.append(i)
        else:
            out.append(int(np.asarray(i)))
    return tuple(out)


class FakeRef:
    """A ref over a numpy array: ``get()`` its current value, ``put(v)``
    writes a whole new value (through every view to the array underneath)."""

    def __init__(self, get, put, shape, dtype):
        self.get, self.put = get, put
        self.shape, self.dtype = tuple(shape), _np_dtype(dtype)

    @classmethod
    def of(cls, array):
        def put(v):
            array[...] = v

        return cls(lambda: array, put, array.shape, array.dtype)

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, idx):
        return jnp.asarray(self.get()[_index(idx, self.ndim)])

    def __setitem__(self, idx, value):
        a = np.array(self.get())
        a[_index(idx, self.ndim)] = np.asarray(value).astype(a.dtype)
        self.put(a)

    @property
    def at(self):
        ref = self

        class _At:
            def __getitem__(self, idx):
                np_idx = _index(idx, ref.ndim)
                shape = np.empty(ref.shape, np.bool_)[np_idx].shape

                def put(v):
                    a = np.array(ref.get())
                    a[np_idx] = v
                    ref.put(a)

                return FakeRef(lambda: ref.get()[np_idx], put, shape, ref.dtype)

        return _At()

    def bitcast(self, dtype):
        probe = _bitcast_array(np.zeros(self.shape, self.dtype), dtype)
        return FakeRef(
            lambda: _bitcast_array(np.asarray(self.get()), dtype),
            lambda v: self.put(_bitcast_array(np.asarray(v), self.dtype)),
            probe.shape,
            dtype,
        )

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return FakeRef(
            lambda: np.asarray(self.get()).reshape(shape),
            lambda v: self.put(np.asarray(v).reshape(self.shape)),
            shape,
            self.dtype,
        )


class FakeSemaphore:
    def __init__(self, shape=()):
        self.count = np.zeros(shape, np.int64)

    @property
    def at(self):
        sem = self

        class _At:
            def __getitem__(self, idx):
                sub = FakeSemaphore()
                sub.count = sem.count[idx] if isinstance(idx, tuple) else sem.count[int(np.asarray(idx))]
                sub.parent, sub.idx = sem, idx
                return sub

        return _At()

    def add(self, n):
        if getattr(self, "parent", None) is not None:
            i = self.idx if isinstance(self.idx, tuple) else int(np.asarray(self.idx))
            self.parent.count[i] += n
        else:
            self.count = self.count + n


class _Copy:
    def __init__(self, src, dst, sem):
        self.src, self.dst, self.sem = src, dst, sem

    def start(self, **kwargs):
        self.dst.put(np.array(self.src.get()).astype(self.dst.dtype))

    def wait(self, **kwargs):
        pass

    def wait_send(self):
        pass

    def wait_recv(self):
        pass

    def wait_read(self):
        pass

    def wait_write(self):
        pass


_STATE = {"program_id": (), "grid": ()}


def _program_id(axis):
    return jnp.int32(_STATE["program_id"][axis])


def _num_programs(axis):
    return jnp.int32(_STATE["grid"][axis])


def _when(cond):
    def deco(f):
        if bool(np.asarray(cond)):
            f()
        return f

    return deco


def _alloc(t):
    """A scratch ref / semaphore of a `pltpu.VMEM(...)` / `SMEM` /
    `SemaphoreType` allocation request."""
    if isinstance(t, (list, tuple)):
        return type(t)(_alloc(x) for x in t)
    shape = getattr(t, "shape", None)
    dtype = getattr(t, "dtype", None)
    if dtype is not None and shape is not None and "sem" not in str(dtype).lower():
        return FakeRef.of(np.zeros(shape, _np_dtype(dtype)))
    return FakeSemaphore(tuple(shape) if shape else ())


def _run_scoped(f, *types_, **kwtypes):
    return f(*[_alloc(t) for t in types_], **{k: _alloc(t) for k, t in kwtypes.items()})


def _signal(sem, inc=1, **kwargs):
    sem.add(int(np.asarray(inc)))


def _wait(sem, value=1, **kwargs):
    sem.add(-int(np.asarray(value)))


def _masked_load(ref, mask=None):
    v = ref[...]
    return v if mask is None else jnp.where(mask, v, jnp.zeros_like(v))


def _masked_store(ref, val, mask=None):
    old = ref[...]
    ref[...] = val if mask is None else jnp.where(mask, val, old)


class _Shim(types.SimpleNamespace):
    """A module whose named attributes are replaced; the rest is the real one's."""

    def __init__(self, real, **overrides):
        super().__init__(**overrides)
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)


FAKE_PL = _Shim(
    pl,
    program_id=_program_id,
    num_programs=_num_programs,
    when=_when,
    run_scoped=_run_scoped,
    semaphore_signal=_signal,
    semaphore_wait=_wait,
    multiple_of=lambda x, m: x,
)
FAKE_PLTPU = _Shim(
    pltpu,
    load=_masked_load,
    store=_masked_store,
    roll=lambda x, shift, axis: jnp.roll(x, shift, axis),
    make_async_copy=lambda src, dst, sem: _Copy(src, dst, sem),
    async_copy=lambda src, dst, sem: _Copy(src, dst, sem).start() or _Copy(src, dst, sem),
    sync_copy=lambda src, dst: _Copy(src, dst, None).start(),
    semaphore_signal=_signal,
    semaphore_wait=_wait,
)


def _fori_loop(lower, upper, body, init, **kwargs):
    # Eagerly (`jax.disable_jit`) the loop index is a Python int; in a
    # kernel it is an int32 array (with its methods: `.astype`, ...).
    return jax.lax.fori_loop(lower, upper, lambda i, c: body(jnp.asarray(i, jnp.int32), c), init, **kwargs)


FAKE_LAX = _Shim(jax.lax, fori_loop=_fori_loop)


def faked(fn, replace=None):
    """``fn`` with its globals' ``pl`` / ``pltpu`` / ``lax`` replaced by the
    shims (and the globals named in ``replace`` by their values there)."""
    g = dict(fn.__globals__)
    g.update(pl=FAKE_PL, pltpu=FAKE_PLTPU, lax=FAKE_LAX, **(replace or {}))
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def _block_slices(block_shape, block_index, array_shape):
    """numpy indexers of one block (a None or `pl.Squeezed()` dim: one
    squeezed element; a `pl.Element` dim: its index is an element offset)."""
    out = []
    for b, i, n in zip(block_shape, block_index, array_shape):
        i = int(np.asarray(i))
        if b is None or type(b).__name__ == "Squeezed":
            out.append(i)
        elif isinstance(b, pl.Element):
            out.append(slice(i, i + b.block_size))
        else:
            out.append(slice(i * b, min((i + 1) * b, n)))
    return tuple(out)


def meaning_call(
    kernel,
    args,
    out_shapes,
    *,
    grid=(),
    in_specs=None,
    out_specs=None,
    scratch=(),
    prefetch=0,
    replace=None,
    reload_outputs=False,
):
    """The outputs (numpy) of a pallas_call of ``kernel`` over ``args``:
    ``in_specs`` / ``out_specs`` as (block_shape, index_map) or None (whole
    array), ``scratch`` allocation requests, the first ``prefetch`` args
    scalar-prefetch operands (SMEM refs passed to index maps and kernel);
    ``replace``: globals of the kernel to replace (its compute's version
    outside a kernel); ``reload_outputs``: an output block the grid comes
    back to starts from what its last visit wrote (RevisitMode.ANY), not
    from zeros."""
    body = faked(kernel, replace)
    args = [np.array(a) for a in args]
    outs = [np.zeros(s.shape, _np_dtype(s.dtype)) for s in out_shapes]
    pre = [FakeRef.of(a) for a in args[:prefetch]]
    ins = args[prefetch:]
    in_specs = in_specs or [None] * len(ins)
    out_specs = out_specs or [None] * len(outs)
    scratch_refs = [_alloc(t) for t in scratch]
    grid = tuple(grid)
    _STATE["grid"] = grid
    in_bufs, out_bufs = [None] * len(ins), [None] * len(outs)
    in_at, out_at = [None] * len(ins), [None] * len(outs)
    with jax.disable_jit():
        for point in itertools.product(*[range(g) for g in grid]) if grid else [()]:
            _STATE["program_id"] = point
            for k, (a, spec) in enumerate(zip(ins, in_specs)):
                if spec is None:
                    in_bufs[k] = in_bufs[k] or FakeRef.of(a)
                    continue
                bi = tuple(int(np.asarray(i)) for i in spec[1](*point, *pre))
                if bi != in_at[k]:
                    block = np.array(a[_block_slices(spec[0], bi, a.shape)])
                    in_bufs[k], in_at[k] = FakeRef.of(block), bi
            for k, (o, spec) in enumerate(zip(outs, out_specs)):
                if spec is None:
                    out_bufs[k] = out_bufs[k] or FakeRef.of(o)
                    continue
                bi = tuple(int(np.asarray(i)) for i in spec[1](*point, *pre))
                if bi != out_at[k]:
                    if out_at[k] is not None:
                        o[_block_slices(spec[0], out_at[k], o.shape)] = out_bufs[k].get()
                    here = _block_slices(spec[0], bi, o.shape)
                    block = (
                        np.array(o[here])
                        if reload_outputs
                        else np.zeros(np.empty(o.shape, np.bool_)[here].shape, o.dtype)
                    )
                    out_bufs[k], out_at[k] = FakeRef.of(block), bi
            body(*pre, *in_bufs, *out_bufs, *scratch_refs)
        for k, (o, spec) in enumerate(zip(outs, out_specs)):
            if spec is not None and out_at[k] is not None:
                o[_block_slices(spec[0], out_at[k], o.shape)] = out_bufs[k].get()
    return outs
