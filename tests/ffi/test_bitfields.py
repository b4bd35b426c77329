"""The packed attributes' fields hold across the two languages: the native
side declares each packed attribute once, by field name, offset and width
(rust/ffi/src/wire/bitfields.rs, exported as `_native.BITFIELDS`); the
Python side packs by those names (mosaic_rt/ffi/bitfields.py) and the
wrappers name the fields they set. Checked here: every name the wrappers
use exists natively with the width its values need, and a value packed in
Python reads back field for field through the handlers' own accessors
(`_native.unpack_bitfield`)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mosaic_rt import _native
from mosaic_rt.ffi import bitfields
from mosaic_rt.ffi import ops as F

_VMEM = _native.MEMORY_SPACES["vmem"]

# The fields each wrapper sets and the largest value it puts in each (a
# sub-byte unit layout's bit counts are at most 8).
_USED = {
    "view_maps": {f"{side}_{what}": 1 for side in ("src", "dst") for what in ("map", "same", "rows")},
    "view_units": {f"{side}_{what}": 8 for side in ("src", "dst") for what in ("unit", "region", "view")},
}


def test_the_python_table_is_the_native_one():
    assert set(bitfields.FIELDS) == set(_native.BITFIELDS) == set(_USED)
    for attr, fields in _native.BITFIELDS.items():
        assert bitfields.FIELDS[attr] == {name: (shift, width) for name, shift, width in fields}


@pytest.mark.parametrize("attr", sorted(_USED))
def test_every_field_the_wrappers_set_is_declared_wide_enough(attr):
    declared = bitfields.FIELDS[attr]
    assert set(_USED[attr]) == set(declared), "a field named on one side only"
    for name, largest in _USED[attr].items():
        _, width = declared[name]
        assert largest < 2**width, f"{attr}.{name}: {largest} needs more than {width} bit(s)"


@pytest.mark.parametrize("attr", sorted(_USED))
def test_a_packed_value_reads_back_through_the_native_accessors(attr):
    names = sorted(bitfields.FIELDS[attr])
    rng = np.random.default_rng(0)
    for _ in range(50):
        values = {n: int(rng.integers(0, 2 ** bitfields.FIELDS[attr][n][1])) for n in names}
        packed = bitfields.pack(attr, **values)
        assert _native.unpack_bitfield(attr, packed) == values
        assert bitfields.unpack(attr, packed) == values
    for name in names:  # each field alone: its bits and no other's
        one = bitfields.pack(attr, **{name: 1})
        assert _native.unpack_bitfield(attr, one) == {n: int(n == name) for n in names}


def test_values_outside_the_declaration_are_refused_on_both_sides():
    with pytest.raises(ValueError, match="has no field 'src_maps'"):
        bitfields.pack("view_maps", src_maps=1)
    with pytest.raises(ValueError, match=r"view_units.src_unit = 16 does not fit in its 4 bit"):
        bitfields.pack("view_units", src_unit=16)
    undeclared = max(shift + width for _, shift, width in _native.BITFIELDS["view_maps"])
    with pytest.raises(ValueError, match="sets bits outside its fields"):
        _native.unpack_bitfield("view_maps", 1 << undeclared)
    with pytest.raises(ValueError, match="not a packed attribute"):
        _native.unpack_bitfield("no_such_attribute", 0)


_VIEWS = {
    "none": None,
    "bytes": np.arange(8, dtype=np.int32),
    "same": F.SAME_BYTES,
    "units": F.UnitMap(np.arange(16, dtype=np.int32), unit=4, region=4, view=8),
    "rows": F.RowMap(starts=np.arange(2, dtype=np.int32), pattern=np.arange(4, dtype=np.int32)),
}


def _dma_attrs(src_view, dst_view):
    """The attributes of the `dma_start` call a request with these views emits."""

    def fn(t):
        request = F.DmaStart(F.DmaSide(_VMEM, 1, None, src_view), F.DmaSide(_VMEM, 2, None, dst_view), 3)
        return F.dma_start(t, jnp.zeros((2,), jnp.uint32), 0, 0, request)

    eqns = jax.make_jaxpr(fn)(jnp.int32(0)).jaxpr.eqns
    (eqn,) = [e for e in eqns if e.params.get("target_name") == "mosaic_rt_dma_start"]
    return {k: int(np.asarray(getattr(v, "val", v))) for k, v in eqn.params["attributes"] if k.startswith("view_")}


@pytest.mark.parametrize("src, dst", list(itertools.product(_VIEWS, repeat=2)))
def test_a_dma_requests_views_travel_as_their_named_fields(src, dst):
    attrs = _dma_attrs(_VIEWS[src], _VIEWS[dst])
    if src == dst == "none":
        assert attrs == {}, "a DMA without views is emitted as it always was"
        return
    maps = _native.unpack_bitfield("view_maps", attrs["view_maps"])
    units = _native.unpack_bitfield("view_units", attrs.get("view_units", 0))
    for side, kind in (("src", src), ("dst", dst)):
        view = _VIEWS[kind]
        assert maps[f"{side}_map"] == int(kind in ("bytes", "units", "rows")), side
        assert maps[f"{side}_same"] == int(kind == "same"), side
        assert maps[f"{side}_rows"] == int(kind == "rows"), side
        layout = (view.unit, view.region, view.view) if kind == "units" else (0, 0, 0)
        assert (units[f"{side}_unit"], units[f"{side}_region"], units[f"{side}_view"]) == layout, side
