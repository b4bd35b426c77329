"""Constructing runtimes and rejecting bad arguments with the right types."""

import mosaic_rt
import pytest
from mosaic_rt import Runtime


def test_defaults_and_properties():
    rt = Runtime()
    assert (rt.num_devices, rt.cores_per_device) == (1, 1)
    assert rt.dma_execution_mode == "on_wait"
    assert rt.out_of_bounds_reads == "raise"
    assert rt.uninitialized_memory == "nan"
    assert rt.wait_timeout == 120.0
    assert "num_devices=1" in repr(rt)


def test_all_options_round_trip():
    rt = Runtime(
        4,
        2,
        dma_execution_mode="eager",
        out_of_bounds_reads="uninitialized",
        uninitialized_memory="zero",
        wait_timeout=None,
    )
    assert (rt.num_devices, rt.cores_per_device) == (4, 2)
    assert rt.dma_execution_mode == "eager"
    assert rt.out_of_bounds_reads == "uninitialized"
    assert rt.uninitialized_memory == "zero"
    assert rt.wait_timeout is None
    assert Runtime(wait_timeout=float("inf")).wait_timeout is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_devices=0), "at least one device"),
        (dict(cores_per_device=0), "at least one device"),
        (dict(num_devices=-1), r"\[0, 4294967295\], got -1"),
        (dict(num_devices=2**70), "out of range"),
        (dict(num_devices=1 << 20, cores_per_device=1 << 20), "too many cores"),
        (dict(dma_execution_mode="later"), "dma_execution_mode"),
        (dict(out_of_bounds_reads="ignore"), "out_of_bounds_reads"),
        (dict(uninitialized_memory="garbage"), "uninitialized_memory"),
        (dict(wait_timeout=-1.0), "wait_timeout"),
        (dict(wait_timeout=float("nan")), "wait_timeout"),
    ],
)
def test_bad_configuration_is_a_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Runtime(**kwargs)


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError):
        Runtime("two")
    with pytest.raises(TypeError):
        Runtime(dma_execution_mode=1)


def test_two_runtimes_are_independent():
    a, b = Runtime(2, 1, wait_timeout=5), Runtime(2, 1, wait_timeout=5)
    sa, sb = a.allocate_semaphores(0), b.allocate_semaphores(0)
    assert sa == sb == 2000
    a.signal(0, 0, sa, 3)
    assert (a.read(0, 0, sa), b.read(0, 0, sb)) == (3, 0)
    a.fail("a broke", 0, 0)
    assert isinstance(a.failure(), mosaic_rt.MosaicRuntimeError)
    assert b.failure() is None
    b.signal(0, 0, sb, 1)
    b.wait(0, 0, sb, 1)
    assert b.leaks() == []


def test_error_types_are_exported():
    assert issubclass(mosaic_rt.WaitTimeout, mosaic_rt.MosaicRuntimeError)
    assert issubclass(mosaic_rt.KernelAborted, mosaic_rt.MosaicRuntimeError)
