"""`dma_start`'s ``plan_key``: the native side parses a call site's static
attributes once per thread and keeps the result under this key
(rust/ffi/src/ops/dma_plan.rs), so the key must change with every
attribute and be the same for equal ones (and across processes: it is part
of the program, which jax's persistent cache keys)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mosaic_rt import _native
from mosaic_rt.ffi import ops as F

_VMEM = _native.MEMORY_SPACES["vmem"]
_BASE = dict(
    src_space=_VMEM,
    dst_space=_VMEM,
    has_dst_device=0,
    has_dst_core=0,
    src_sizes=np.asarray([8, 128], np.int64),
    src_strides=np.asarray([1, 1], np.int64),
    src_squeezed=np.asarray([0, 0], np.int64),
    dst_sizes=np.asarray([8, 128], np.int64),
    dst_strides=np.asarray([1, 1], np.int64),
    dst_squeezed=np.asarray([0, 0], np.int64),
)


def test_equal_attributes_give_equal_keys():
    a = F.plan_key(dict(_BASE))
    b = F.plan_key({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in reversed(_BASE.items())})
    assert a.dtype == np.int64 and a.shape == (2,)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "change",
    [
        dict(src_space=_VMEM + 1),
        dict(has_dst_core=1),
        dict(src_sizes=np.asarray([8, 64], np.int64)),
        dict(dst_strides=np.asarray([1, 2], np.int64)),
        dict(src_squeezed=np.asarray([1, 0], np.int64)),
        dict(src_fixed=np.asarray([0, np.iinfo(np.int64).min], np.int64)),
        dict(view_maps=1),
        dict(then_wait_bytes=np.asarray([4096], np.int64), then_wait_sites=np.asarray([0], np.int64)),
    ],
)
def test_any_changed_attribute_changes_the_key(change):
    assert not np.array_equal(F.plan_key(_BASE), F.plan_key({**_BASE, **change}))


def test_values_are_not_confused_across_names_or_lengths():
    # The same numbers moved from one attribute to the next, or split
    # differently between two arrays, are other attributes.
    one = {"a": np.asarray([1, 2], np.int64), "b": np.asarray([3], np.int64)}
    two = {"a": np.asarray([1], np.int64), "b": np.asarray([2, 3], np.int64)}
    assert not np.array_equal(F.plan_key(one), F.plan_key(two))
    assert not np.array_equal(F.plan_key({"ab": 1}), F.plan_key({"a": 1, "b": 0}))


def test_the_key_is_the_same_in_another_process():
    code = (
        "import numpy as np; from mosaic_rt.ffi import ops as F; "
        "print([int(x) for x in F.plan_key({'src_space': 1, 'src_sizes': np.asarray([8, 128], np.int64)})])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    here = F.plan_key({"src_space": 1, "src_sizes": np.asarray([8, 128], np.int64)})
    assert out.stdout.strip() == str([int(x) for x in here])


def test_every_dma_start_carries_the_key_of_its_other_attributes():
    def fn(t, s):
        region = F.TracedRegion(sizes=(8,), strides=(1,), squeezed=(False,), starts=(s,))
        t = F.dma_start(
            t,
            jnp.zeros((2,), jnp.uint32),
            0,
            0,
            F.DmaStart(F.DmaSide(_VMEM, 1, region), F.DmaSide(_VMEM, 2, region), 3, site=7),
        )
        return F.dma_start(
            t,
            jnp.zeros((2,), jnp.uint32),
            0,
            0,
            F.DmaStart(F.DmaSide(_VMEM, 1, region), F.DmaSide(_VMEM, 2, region), 3, site=9),
        )

    jaxpr = jax.make_jaxpr(fn)(jnp.int32(0), jnp.int32(1))
    calls = [
        {k: np.asarray(getattr(v, "val", v)) for k, v in e.params["attributes"]}
        for e in jaxpr.jaxpr.eqns
        if e.params.get("target_name") == "mosaic_rt_dma_start"
    ]
    assert len(calls) == 2
    for attrs in calls:
        others = {k: v for k, v in attrs.items() if k not in ("plan_key", "site")}
        np.testing.assert_array_equal(attrs["plan_key"], F.plan_key(others))
    # Two sites of the same DMA share a plan (the site is not part of it).
    np.testing.assert_array_equal(calls[0]["plan_key"], calls[1]["plan_key"])
