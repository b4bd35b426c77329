"""Packed integer attributes, packed by field name.

The fields of every packed attribute (e.g. ``dma_start``'s ``view_maps``
and ``view_units``) are declared once, natively
(``rust/ffi/src/wire/bitfields.rs``, exported as ``_native.BITFIELDS``);
the wrappers of :mod:`mosaic_rt.ffi.ops` name the fields they set and
:func:`pack` places them, so no offset is written twice
(``tests/ffi/test_bitfields.py`` checks the round trip through the
handlers' accessors).

May use: ``mosaic_rt._native``.
"""

from __future__ import annotations

from mosaic_rt import _native

# {attribute: {field: (shift, width)}}
FIELDS: dict[str, dict[str, tuple[int, int]]] = {
    attr: {name: (shift, width) for name, shift, width in fields} for attr, fields in _native.BITFIELDS.items()
}


def pack(attr: str, **values: int) -> int:
    """The value of packed attribute ``attr`` with the given fields set (the
    others 0). An unknown field, or a value that does not fit its field, is
    a ``ValueError`` (our bug: the wrappers compute every value)."""
    fields = FIELDS[attr]
    packed = 0
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"packed attribute {attr!r} has no field {name!r}; its fields: {sorted(fields)}")
        shift, width = fields[name]
        value = int(value)
        if not 0 <= value < 2**width:
            raise ValueError(f"{attr}.{name} = {value} does not fit in its {width} bit(s)")
        packed |= value << shift
    return packed


def unpack(attr: str, packed: int) -> dict[str, int]:
    """``{field: value}`` of ``packed`` (the Python side's reading; the
    native one is ``_native.unpack_bitfield``)."""
    return {name: (int(packed) >> shift) & (2**width - 1) for name, (shift, width) in FIELDS[attr].items()}
