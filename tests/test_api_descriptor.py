"""Checks `mosaic_rt.tpu` adds before binding: descriptor invariant, priority,
device-id forms, and the report of a descriptor never started or waited.

All checks here run on plain Python objects (no kernel trace): they must fire
before anything is bound, so a primitive never sees the bad value.
"""

from __future__ import annotations

import gc
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import mosaic_rt
import mosaic_rt.tpu as mtpu

pytestmark = pytest.mark.timeout(120)

INVARIANT = "Either both or neither `src_sem` and `device_id` can be set."
MESH, LOGICAL = mtpu.DeviceIdType.MESH, mtpu.DeviceIdType.LOGICAL
SRC, DST, SEM, SEND = "src_ref", "dst_ref", "dst_sem", "src_sem"

# Device-id forms by category. The oracle below says what each category gives
# under each id type; it is written from the documented rules, not the code.
FORMS = {
    "int_scalar": [3, np.int32(1), np.int64(0), np.array(2, np.int32),
                   jnp.int32(5)],
    "good_tuple": [(1,), (0, 2), (np.int32(1), jnp.int32(0)), ()],
    "bad_tuple": [(1.5,), (1, "a"), (True,), ((1,),)],
    "good_dict": [{"x": 1}, {"x": 0, "y": np.int32(1)}, {("x", "y"): 3}],
    "bad_dict": [{"x": 1.0}, {"x": None}, {"x": (1,)}],
    "list": [[1], [0, 1]],
    "non_int_scalar": [1.5, True, "x", np.float32(2), np.arange(2),
                       jnp.zeros((), jnp.float32)],
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
_forms = st.sampled_from([(cat, i) for cat, values in FORMS.items()
                          for i in range(len(values))])


def _expected(src_sem, device, device_id_type):
    """None when construction succeeds, else the exception type."""
    if (src_sem is None) != (device is None):
        return ValueError
    if not isinstance(device_id_type, mtpu.DeviceIdType):
        return TypeError
    if device is None:
        return None
    mesh_result, logical_result = ORACLE[device[0]]
    return mesh_result if device_id_type is MESH else logical_result


def _construct(src_sem, device_id, device_id_type):
    return mtpu.AsyncCopyDescriptor(SRC, DST, SEM, src_sem, device_id,
                                    device_id_type)


@settings(max_examples=300, deadline=None)
@given(src_sem=st.sampled_from([None, SEND]),
       device=st.one_of(st.none(), _forms),
       device_id_type=st.sampled_from([MESH, LOGICAL, "mesh", None]))
def test_every_invariant_combination(src_sem, device, device_id_type):
    device_id = None if device is None else FORMS[device[0]][device[1]]
    expected = _expected(src_sem, device, device_id_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mtpu.UnusedAsyncCopyWarning)
        if expected is None:
            copy = _construct(src_sem, device_id, device_id_type)
            assert copy.is_remote == (src_sem is not None)
            copy._used = True  # nothing to report for a probe
            return
        with pytest.raises(expected) as info:
            _construct(src_sem, device_id, device_id_type)
    if (src_sem is None) != (device_id is None):
        assert str(info.value) == INVARIANT


@pytest.mark.parametrize("device_id_type", [MESH, LOGICAL])
def test_remote_constructors_check_before_binding(device_id_type):
    # Plain strings as refs: reaching the primitive would fail differently.
    with pytest.raises(ValueError) as info:
        mtpu.make_async_remote_copy(SRC, DST, SEND, SEM, None, device_id_type)
    assert str(info.value) == INVARIANT
    with pytest.raises(ValueError) as info:
        mtpu.async_remote_copy(SRC, DST, SEND, SEM, None, device_id_type)
    assert str(info.value) == INVARIANT
    wrong_form = 1 if device_id_type is MESH else (1,)
    with pytest.raises(ValueError, match=f"{device_id_type.name} device ids are"):
        mtpu.async_remote_copy(SRC, DST, SEND, SEM, wrong_form, device_id_type)


def test_device_id_messages_say_which_form_is_needed():
    with pytest.raises(ValueError) as info:
        _construct(SEND, 3, MESH)
    assert str(info.value) == (
        "MESH device ids are tuples of mesh coordinates, e.g. (i, j), or dicts"
        " {axis_name: index}; got int 3. Wrap it as (id,) or pass"
        " device_id_type=DeviceIdType.LOGICAL for a flat device index.")
    with pytest.raises(ValueError) as info:
        _construct(SEND, {"x": 1}, LOGICAL)
    assert str(info.value) == (
        "LOGICAL device ids are scalar integers; got a dict. Pass"
        " device_id_type=DeviceIdType.MESH for mesh coordinates.")
    with pytest.raises(TypeError) as info:
        _construct(SEND, (1, 2.5), MESH)
    assert str(info.value) == (
        "Mesh coordinate 1 of device_id must be an integer scalar, got float 2.5.")
    with pytest.raises(TypeError) as info:
        _construct(SEND, jnp.zeros((2,), jnp.int32), LOGICAL)
    assert str(info.value) == ("A LOGICAL device id must be an integer scalar,"
                               " got ArrayImpl of shape (2,) and dtype int32.")
    with pytest.raises(TypeError, match="device_id_type must be DeviceIdType"):
        _construct(None, None, "logical")


@settings(max_examples=100, deadline=None)
@given(device=_forms, device_id_type=st.sampled_from([MESH, LOGICAL]),
       core_index=st.sampled_from([None, 0, 1.5]))
def test_semaphore_signal_checks_device_id_and_core_index(device, device_id_type,
                                                          core_index):
    device_id = FORMS[device[0]][device[1]]
    expected = _expected(SEND, device, device_id_type)
    if expected is None and core_index == 1.5:
        expected = TypeError
    if expected is None:
        return  # valid: binds, which needs a kernel (see test_api_parity.py)
    with pytest.raises(expected):
        mtpu.semaphore_signal(SEM, 1, device_id=device_id,
                              device_id_type=device_id_type, core_index=core_index)


def test_wait_send_on_a_local_copy():
    copy = mtpu.make_async_copy(SRC, DST, SEM)
    assert not copy.is_remote
    with pytest.raises(ValueError) as info:
        copy.wait_send()
    assert str(info.value) == "Cannot `wait_send` on a local copy."


@pytest.mark.parametrize("priority, error, message", [
    (-1, ValueError, "DMA priority must be non-negative, got -1."),
    (1.0, TypeError, "DMA priority must be a Python int, got float 1.0."),
    (True, TypeError, "DMA priority must be a Python int, got bool True."),
    (jnp.int32(1), TypeError, "DMA priority must be a Python int, got ArrayImpl"),
])
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
        " async_copy / async_remote_copy.")


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


def _trace(use):
    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(
        _copy_kernel(use), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
        interpret=mosaic_rt.InterpretParams())
    return call(x)


def _unused_warnings(use):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = _trace(use)
        _collect()
    np.testing.assert_array_equal(np.asarray(out), 1.0)
    return [w for w in record if w.category is mtpu.UnusedAsyncCopyWarning]


def test_descriptor_forgotten_in_a_kernel_is_reported_at_the_kernel_line():
    (warning,) = _unused_warnings("forget")
    source, first = inspect.getsourcelines(_copy_kernel)
    assert warning.filename == __file__
    assert source[warning.lineno - first].strip() == (
        "copy = mtpu.make_async_copy(x_ref, o_ref, sem)")


@pytest.mark.parametrize("use", ["start_wait", "wait_only"])
def test_used_descriptor_is_not_reported(use):
    assert _unused_warnings(use) == []


def test_public_names():
    assert mtpu.DeviceIdType is pl.DeviceIdType
    assert mtpu.SemaphoreType is pltpu.SemaphoreType
    assert set(mtpu.__all__) >= {
        "AsyncCopyDescriptor", "make_async_copy", "async_copy",
        "make_async_remote_copy", "async_remote_copy", "semaphore_signal",
        "semaphore_wait", "semaphore_read", "get_barrier_semaphore",
        "DeviceIdType", "SemaphoreType"}
    assert [f.name for f in mtpu.AsyncCopyDescriptor.__dataclass_fields__.values()
            if f.init] == ["src_ref", "dst_ref", "dst_sem", "src_sem", "device_id",
                           "device_id_type"]
    local = mtpu.AsyncCopyDescriptor(SRC, DST, SEM, None, None)
    assert local.device_id_type is MESH and not local.is_remote
    local._used = True
