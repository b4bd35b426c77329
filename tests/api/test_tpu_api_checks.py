"""Checks `mosaic_rt.tpu` adds before binding: descriptor invariant, priority,
device-id forms, and the report of a descriptor never started or waited; and
that its surface is the installed pltpu's (names, signatures, errors,
deprecations).

Most checks here run on plain Python objects (no kernel trace): they must
fire before anything is bound, so a primitive never sees the bad value.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import logging
import re
import types
import warnings

import jax
import jax.numpy as jnp
import mosaic_rt.tpu as mtpu
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.jax_internals import JAX_VERSION, DeviceIdType, StockAsyncCopyDescriptor

pytestmark = pytest.mark.timeout(120)

# jax 0.12: a local copy may carry a src_sem; a remote one needs both sems.
REMOTE_NEEDS_BOTH_SEMS = JAX_VERSION >= (0, 12)
if REMOTE_NEEDS_BOTH_SEMS:
    INVARIANT = "Both `src_sem` and `dst_sem` (`sem`) must be set when `device_id` is set."
else:
    INVARIANT = "Either both or neither `src_sem` and `device_id` can be set."
# jax 0.12 deprecates `device_id_type` (and pl.DeviceIdType).
TYPE_DEPRECATED = JAX_VERSION >= (0, 12)
MESH, LOGICAL = DeviceIdType.MESH, DeviceIdType.LOGICAL
SRC, DST, SEM, SEND = "src_ref", "dst_ref", "dst_sem", "src_sem"

# Device-id forms by category. The oracle below says what each category gives
# under each id type; it is written from the documented rules, not the code.
FORMS = {
    "int_scalar": [3, np.int32(1), np.int64(0), np.array(2, np.int32), jnp.int32(5)],
    "good_tuple": [(1,), (0, 2), (np.int32(1), jnp.int32(0)), ()],
    "bad_tuple": [(1.5,), (1, "a"), (True,), ((1,),)],
    "good_dict": [{"x": 1}, {"x": 0, "y": np.int32(1)}, {("x", "y"): 3}],
    "bad_dict": [{"x": 1.0}, {"x": None}, {"x": (1,)}],
    "list": [[1], [0, 1]],
    "non_int_scalar": [1.5, True, "x", np.float32(2), np.arange(2), jnp.zeros((), jnp.float32)],
}
ORACLE = {  # category -> (result under MESH, result under LOGICAL)
    "int_scalar": (ValueError, None),
    "good_tuple": (None, ValueError),
    "bad_tuple": (TypeError, ValueError),
    "good_dict": (None, ValueError),
    "bad_dict": (TypeError, ValueError),
    "list": (ValueError, ValueError),
    "non_int_scalar": (ValueError, TypeError),
}
_forms = st.sampled_from([(cat, i) for cat, values in FORMS.items() for i in range(len(values))])


def _breaks_invariant(src_sem, dst_sem, device_id):
    if REMOTE_NEEDS_BOTH_SEMS:
        return device_id is not None and (src_sem is None or dst_sem is None)
    return (src_sem is None) != (device_id is None)


def _expected(src_sem, device, device_id_type, dst_sem=SEM):
    """None when construction succeeds, else the exception type."""
    if _breaks_invariant(src_sem, dst_sem, device):
        return ValueError
    if not isinstance(device_id_type, DeviceIdType):
        return TypeError
    if device is None:
        return None
    mesh_result, logical_result = ORACLE[device[0]]
    return mesh_result if device_id_type is MESH else logical_result


def _construct(src_sem, device_id, device_id_type, dst_sem=SEM):
    return mtpu.AsyncCopyDescriptor(SRC, DST, dst_sem, src_sem, device_id, device_id_type)


@settings(max_examples=300, deadline=None)
@given(
    src_sem=st.sampled_from([None, SEND]),
    dst_sem=st.sampled_from([None, SEM]),
    device=st.one_of(st.none(), _forms),
    device_id_type=st.sampled_from([MESH, LOGICAL, "mesh", None]),
)
def test_every_invariant_combination(src_sem, dst_sem, device, device_id_type):
    device_id = None if device is None else FORMS[device[0]][device[1]]
    expected = _expected(src_sem, device, device_id_type, dst_sem)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mtpu.UnusedAsyncCopyWarning)
        if expected is None:
            copy = _construct(src_sem, device_id, device_id_type, dst_sem)
            assert copy.is_remote == (device_id is not None)
            copy._used = True  # nothing to report for a probe
            return
        with pytest.raises(expected) as info:
            _construct(src_sem, device_id, device_id_type, dst_sem)
    if _breaks_invariant(src_sem, dst_sem, device_id):
        assert str(info.value) == INVARIANT


# jax 0.12 rejects a remote copy without device_id in make_async_remote_copy.
NO_DEVICE_MESSAGE = (
    "`device_id` is required for a remote copy. Use `make_async_copy` for a local one."
    if JAX_VERSION >= (0, 12)
    else INVARIANT
)


@pytest.mark.parametrize("device_id_type", [MESH, LOGICAL])
def test_remote_constructors_check_before_binding(device_id_type):
    # Plain strings as refs: reaching the primitive would fail differently.
    for make in (mtpu.make_async_remote_copy, mtpu.async_remote_copy, pltpu.make_async_remote_copy):
        with pytest.raises(ValueError) as info:
            make(SRC, DST, SEND, SEM, None, device_id_type)
        assert str(info.value) == NO_DEVICE_MESSAGE, make
    wrong_form = 1 if device_id_type is MESH else (1,)
    with pytest.raises(ValueError, match=f"{device_id_type.name} device ids are"):
        mtpu.async_remote_copy(SRC, DST, SEND, SEM, wrong_form, device_id_type)


def test_device_id_messages_say_which_form_is_needed():
    with pytest.raises(ValueError) as info:
        _construct(SEND, 3, MESH)
    # LOGICAL is not suggested where `device_id_type` is deprecated (0.12).
    hint = (
        "Wrap it as (id,) or {axis_name: id}."
        if TYPE_DEPRECATED
        else "Wrap it as (id,) or pass device_id_type=DeviceIdType.LOGICAL for a flat device index."
    )
    assert str(info.value) == (
        f"MESH device ids are tuples of mesh coordinates, e.g. (i, j), or dicts {{axis_name: index}}; got int 3. {hint}"
    )
    with pytest.raises(ValueError) as info:
        _construct(SEND, {"x": 1}, LOGICAL)
    assert str(info.value) == (
        "LOGICAL device ids are scalar integers; got a dict. Pass"
        " device_id_type=DeviceIdType.MESH for mesh coordinates."
    )
    with pytest.raises(TypeError) as info:
        _construct(SEND, (1, 2.5), MESH)
    assert str(info.value) == ("Mesh coordinate 1 of device_id must be an integer scalar, got float 2.5.")
    with pytest.raises(TypeError) as info:
        _construct(SEND, jnp.zeros((2,), jnp.int32), LOGICAL)
    assert str(info.value) == (
        "A LOGICAL device id must be an integer scalar, got ArrayImpl of shape (2,) and dtype int32."
    )
    with pytest.raises(TypeError, match="device_id_type must be DeviceIdType"):
        _construct(None, None, "logical")


@settings(max_examples=100, deadline=None)
@given(device=_forms, device_id_type=st.sampled_from([MESH, LOGICAL]), core_index=st.sampled_from([None, 0, 1.5]))
def test_semaphore_signal_checks_device_id_and_core_index(device, device_id_type, core_index):
    device_id = FORMS[device[0]][device[1]]
    expected = _expected(SEND, device, device_id_type)
    if expected is None and core_index == 1.5:
        expected = TypeError
    if expected is None:
        return  # valid: binds, which needs a kernel (see test_tpu_api_parity.py)
    with pytest.raises(expected):
        mtpu.semaphore_signal(SEM, 1, device_id=device_id, device_id_type=device_id_type, core_index=core_index)


def test_wait_send_on_a_local_copy_fails_as_stock():
    # Stock's type and message: ValueError before jax 0.12, RuntimeError after.
    errors = []
    for make in (mtpu.make_async_copy, pltpu.make_async_copy):
        copy = make(SRC, DST, SEM)
        assert not copy.is_remote
        with pytest.raises(Exception) as info:
            copy.wait_send()
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] is (RuntimeError if JAX_VERSION >= (0, 12) else ValueError)
    assert errors[0][1].startswith("Cannot `wait_send` on a local copy.")


@pytest.mark.skipif(JAX_VERSION < (0, 12), reason="local src_sem: added in jax 0.12")
def test_local_copy_with_src_sem():
    copy = mtpu.make_async_copy(SRC, DST, SEM, src_sem=SEND)
    assert (copy.dst_sem, copy.src_sem, copy.device_id) == (SEM, SEND, None)
    assert not copy.is_remote
    assert callable(copy.wait_read) and callable(copy.wait_write)
    copy._used = True
    with pytest.raises(TypeError, match="too many positional arguments"):
        mtpu.make_async_copy(SRC, DST, SEM, SEND)  # src_sem is keyword-only


@pytest.mark.parametrize(
    "priority, error, message",
    [
        (-1, ValueError, "DMA priority must be non-negative, got -1."),
        (1.0, TypeError, "DMA priority must be a Python int, got float 1.0."),
        (True, TypeError, "DMA priority must be a Python int, got bool True."),
        (jnp.int32(1), TypeError, "DMA priority must be a Python int, got ArrayImpl"),
    ],
)
def test_bad_priority_is_rejected_before_binding(priority, error, message):
    copy = mtpu.make_async_copy(SRC, DST, SEM)
    with pytest.raises(error) as info:
        copy.start(priority=priority)
    assert str(info.value).startswith(message)
    with pytest.raises(error):
        mtpu.async_copy(SRC, DST, SEM, priority=priority)
    with pytest.raises(TypeError, match="`add` must be a bool"):
        copy.start(add=1)


def _collect():
    gc.collect()


def test_unused_descriptor_is_reported_with_its_creation_site():
    line = inspect.currentframe().f_lineno + 2
    with pytest.warns(mtpu.UnusedAsyncCopyWarning) as record:
        copy = mtpu.make_async_copy(SRC, DST, SEM)
        del copy
        _collect()
    (warning,) = record.list
    assert warning.filename == __file__ and warning.lineno == line
    assert str(warning.message) == (
        f"AsyncCopyDescriptor created at {__file__}:{line} was never started or"
        " waited; call `.start()` (and later `.wait()`) on it, or use"
        " async_copy / async_remote_copy."
    )


def test_invalid_descriptor_is_not_reported():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ValueError):
            mtpu.make_async_remote_copy(SRC, DST, SEND, SEM, None)
        _collect()
    assert not [w for w in record if w.category is mtpu.UnusedAsyncCopyWarning]


def _copy_kernel(use):
    def kernel(x_ref, o_ref, sem):
        copy = mtpu.make_async_copy(x_ref, o_ref, sem)
        if use == "start_wait":
            copy.start()
            copy.wait()
        elif use == "wait_only":  # started through another descriptor
            mtpu.make_async_copy(x_ref, o_ref, sem).start()
            copy.wait()
        else:  # forgotten; the copy itself goes through another one
            mtpu.async_copy(x_ref, o_ref, sem).wait()

    return kernel


_ONE_DMA_SEMAPHORE = (pltpu.SemaphoreType.DMA(()),)


def _trace(kernel, scratch=_ONE_DMA_SEMAPHORE):
    # Descriptors live while the kernel is traced: tracing is enough (running
    # is test_tpu_api_parity's job).
    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=list(scratch),
    )
    return jax.make_jaxpr(call)(x)


def _unused_warnings(use):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _trace(_copy_kernel(use))
        _collect()
    return [w for w in record if w.category is mtpu.UnusedAsyncCopyWarning]


def test_descriptor_forgotten_in_a_kernel_is_reported_at_the_kernel_line():
    (warning,) = _unused_warnings("forget")
    source, first = inspect.getsourcelines(_copy_kernel)
    assert warning.filename == __file__
    assert source[warning.lineno - first].strip() == ("copy = mtpu.make_async_copy(x_ref, o_ref, sem)")


@pytest.mark.parametrize("use", ["start_wait", "wait_only"])
def test_used_descriptor_is_not_reported(use):
    assert _unused_warnings(use) == []


def test_public_names():
    assert mtpu.SemaphoreType is pltpu.SemaphoreType
    assert [f.name for f in dataclasses.fields(mtpu.AsyncCopyDescriptor) if f.init] == [
        f.name for f in dataclasses.fields(StockAsyncCopyDescriptor) if f.init
    ]
    assert issubclass(mtpu.AsyncCopyDescriptor, StockAsyncCopyDescriptor)
    local = mtpu.AsyncCopyDescriptor(SRC, DST, SEM, None, None)
    assert local.device_id_type is MESH and not local.is_remote
    local._used = True


@pytest.mark.skipif(TYPE_DEPRECATED, reason="pl.DeviceIdType is deprecated in jax 0.12")
def test_device_id_type_is_stocks():
    assert mtpu.DeviceIdType is pl.DeviceIdType
    assert "DeviceIdType" in mtpu.__all__


@pytest.mark.skipif(not TYPE_DEPRECATED, reason="deprecated in jax 0.12")
def test_device_id_type_is_deprecated_as_in_stock():
    # Both warn once per process: forget earlier accesses.
    mtpu.__getattr__.cache_clear()
    pl.__getattr__.cache_clear()
    with pytest.warns(DeprecationWarning) as ours:
        ours_type = mtpu.DeviceIdType
    with pytest.warns(DeprecationWarning) as stock:
        stock_type = pl.DeviceIdType
    assert ours_type is stock_type is DeviceIdType
    assert str(ours[0].message) == str(stock[0].message)
    assert ours[0].filename == stock[0].filename == __file__
    assert "DeviceIdType" not in mtpu.__all__


# The descriptor and semaphore API: every such name of the installed pltpu /
# pl (a future `async_*` or `semaphore_*` name fails this test until mirrored).
_API_NAME = re.compile(
    r"^((make_)?async_\w+|semaphore_\w+|get_barrier_semaphore|SemaphoreType"
    r"|DeviceIdType|AsyncCopyDescriptor)$"
)


def _stock_api():
    names = {}
    for module in (pltpu, pl):
        for name in dir(module):
            if _API_NAME.match(name):
                names[name] = getattr(module, name)
    return names


def test_all_covers_the_installed_pltpu_api():
    stock = _stock_api()
    assert {
        "make_async_copy",
        "async_copy",
        "make_async_remote_copy",
        "async_remote_copy",
        "get_barrier_semaphore",
        "semaphore_signal",
        "semaphore_wait",
        "semaphore_read",
        "SemaphoreType",
    } <= set(stock)
    assert set(stock) <= set(mtpu.__all__)
    for name in mtpu.__all__:
        assert getattr(mtpu, name) is not None


@pytest.mark.parametrize("name", sorted(n for n, v in _stock_api().items() if inspect.isfunction(v)))
def test_signatures_are_stocks(name):
    assert inspect.signature(getattr(mtpu, name)) == inspect.signature(_stock_api()[name])


def test_descriptor_methods_are_stocks():
    # wait_read / wait_write (jax 0.12) come with the stock class.
    methods = [n for n, v in vars(StockAsyncCopyDescriptor).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert {"start", "wait", "wait_recv", "wait_send"} <= set(methods)
    if JAX_VERSION >= (0, 12):
        assert {"wait_read", "wait_write"} <= set(methods)
    for name in methods:
        ours, stock = getattr(mtpu.AsyncCopyDescriptor, name), getattr(StockAsyncCopyDescriptor, name)
        assert inspect.signature(ours) == inspect.signature(stock), name


def test_bad_arguments_fail_like_a_call_of_stock():
    for args, kwargs in [((SRC,), {}), ((SRC, DST, SEM, SEM), {}), ((SRC, DST, SEM), {"bogus": 1})]:
        with pytest.raises(TypeError):
            pltpu.make_async_copy(*args, **kwargs)
        with pytest.raises(TypeError, match=r"^make_async_copy\(\): "):
            mtpu.make_async_copy(*args, **kwargs)


def test_stock_log_line_is_not_emitted(caplog):
    # Ours replaces stock's "AsyncCopyDescriptor was not used" log with the
    # warning: neither twice nor for a stock descriptor we replaced.
    def kernel(x_ref, o_ref, sem):
        mtpu.make_async_copy(x_ref, o_ref, sem)  # forgotten: warned, not logged
        mtpu.async_copy(x_ref, o_ref, sem).wait()
        copy = mtpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        copy.wait()

    with caplog.at_level(logging.ERROR):
        with pytest.warns(mtpu.UnusedAsyncCopyWarning):
            _trace(kernel)
            _collect()
    assert not [r for r in caplog.records if "was not used" in r.getMessage()]


@pytest.mark.skipif(JAX_VERSION < (0, 11, 2), reason="tag: added in jax 0.11.2")
def test_barrier_tag_must_be_hashable():
    with pytest.raises(TypeError, match="`tag` must be hashable"):
        mtpu.get_barrier_semaphore(tag=["ring"])


@pytest.mark.skipif(JAX_VERSION >= (0, 11, 2), reason="tag: added in jax 0.11.2")
def test_no_barrier_tag_before_0_11_2():
    with pytest.raises(TypeError, match="tag"):
        mtpu.get_barrier_semaphore(tag="ring")


def _remote_kernel(api, use_type, lines):
    def kernel(x_ref, o_ref, send_sem, recv_sem, sem):
        kwargs = {"device_id_type": MESH} if use_type else {}
        lines.append(inspect.currentframe().f_lineno + 1)
        copy = api.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, (0,), **kwargs)
        copy.start()
        copy.wait()
        lines.append(inspect.currentframe().f_lineno + 1)
        api.semaphore_signal(sem, 1, device_id=(0,), **kwargs)
        lines.append(inspect.currentframe().f_lineno + 1)
        api.async_remote_copy(x_ref, o_ref, send_sem, recv_sem, (0,), **kwargs).wait()

    return kernel


def _deprecations(api, use_type):
    lines = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _trace(
            _remote_kernel(api, use_type, lines),
            [pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.REGULAR],
        )
    return lines, [(str(w.message), w.filename, w.lineno) for w in record if w.category is DeprecationWarning]


@pytest.mark.parametrize("use_type", [False, True])
def test_device_id_type_deprecation_as_in_stock(use_type):
    # Same warnings, at the same places (the kernel line; stock's own
    # async_remote_copy points into jax), as a direct call of stock.
    stock_api = dict(
        make_async_remote_copy=pltpu.make_async_remote_copy,
        semaphore_signal=pl.semaphore_signal,
        async_remote_copy=pltpu.async_remote_copy,
    )
    lines, stock = _deprecations(types.SimpleNamespace(**stock_api), use_type)
    _, ours = _deprecations(mtpu, use_type)
    assert ours == stock
    if not (use_type and TYPE_DEPRECATED):
        assert stock == []
        return
    message = "device_id_type is deprecated and will be removed in a future release."
    assert [m for m, _, _ in stock] == [message] * 3
    assert [(f, n) for _, f, n in stock[:2]] == [(__file__, lines[0]), (__file__, lines[1])]
    assert stock[2][1] != __file__  # stock attributes it inside jax


def test_mirrors_the_public_jax_pallas_tpu_namespace_too():
    # jax 0.12.1 made Pallas public as `jax.pallas` / `jax.pallas.tpu`: the
    # same functions as jax.experimental.pallas(.tpu), so mosaic_rt.tpu
    # mirrors both spellings (and a kernel may import either).
    public = pytest.importorskip("jax.pallas.tpu", reason="jax.pallas is public from jax 0.12.1 on")
    import jax.pallas as public_pl

    stock = _stock_api()
    for module in (public, public_pl):
        for name in dir(module):
            if _API_NAME.match(name):
                assert getattr(module, name) is stock[name], name
                assert name in mtpu.__all__, name
