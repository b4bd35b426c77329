//! The packed integer attributes of the ops, declared once by field name,
//! offset and width. Handlers read a packed value only through the
//! accessors declared here (no raw masks elsewhere); the binding exports
//! every declaration (`_native.BITFIELDS`), from which the Python wrappers
//! pack by field name (`mosaic_rt/ffi/bitfields.py`).
//!
//! May use: nothing but `core` (plain data).

/// One named field of a packed attribute: `width` bits from bit `shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitField {
    pub name: &'static str,
    pub shift: u32,
    pub width: u32,
}

impl BitField {
    /// The field's bits within the packed value.
    pub const fn mask(self) -> i64 {
        ((1i64 << self.width) - 1) << self.shift
    }

    /// The field's value in `packed`.
    #[inline(always)]
    pub const fn get(self, packed: i64) -> i64 {
        (packed & self.mask()) >> self.shift
    }
}

/// A packed attribute: the op attribute it travels in and its fields.
#[derive(Clone, Copy, Debug)]
pub struct Bitfields {
    pub attr: &'static str,
    pub fields: &'static [BitField],
}

impl Bitfields {
    /// Every declared bit.
    pub const fn mask(&self) -> i64 {
        let mut m = 0;
        let mut i = 0;
        while i < self.fields.len() {
            m |= self.fields[i].mask();
            i += 1;
        }
        m
    }

    /// Whether `packed` sets only declared bits (and is not negative).
    pub const fn fits(&self, packed: i64) -> bool {
        packed >= 0 && packed & !self.mask() == 0
    }

    /// The value with the named fields set (the others 0); panics on an
    /// unknown field or a value that does not fit (for tests and tools:
    /// the wire's values are packed by Python).
    pub fn pack(&self, values: &[(&str, i64)]) -> i64 {
        values.iter().fold(0, |packed, &(name, v)| {
            let f = self.field(name).unwrap_or_else(|| panic!("{}: no field {name}", self.attr));
            assert!((0..1 << f.width).contains(&v), "{}.{name} = {v} does not fit", self.attr);
            packed | v << f.shift
        })
    }

    /// The field `name` (`None`: no such field).
    pub fn field(&self, name: &str) -> Option<BitField> {
        self.fields.iter().copied().find(|f| f.name == name)
    }
}

/// Declares, per packed attribute, a newtype over its `i64` with one
/// accessor per field (`LAYOUT` the declaration itself), and [`BITFIELDS`].
macro_rules! bitfields {
    ($($(#[$doc:meta])* $attr:ident => $ty:ident { $($field:ident: $shift:literal, $width:literal;)* })*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $ty(pub i64);

            #[allow(dead_code)]
            impl $ty {
                pub const LAYOUT: Bitfields = Bitfields {
                    attr: stringify!($attr),
                    fields: &[$(BitField { name: stringify!($field), shift: $shift, width: $width }),*],
                };
                $(
                    #[doc = concat!("Field `", stringify!($field), "`: ", stringify!($width),
                                    " bit(s) from bit ", stringify!($shift), ".")]
                    #[inline(always)]
                    pub const fn $field(self) -> i64 {
                        BitField { name: stringify!($field), shift: $shift, width: $width }.get(self.0)
                    }
                )*
                /// Whether the value sets only declared bits.
                pub const fn fits(self) -> bool {
                    Self::LAYOUT.fits(self.0)
                }
            }
        )*
        /// Every packed attribute of every op.
        pub const BITFIELDS: &[Bitfields] = &[$($ty::LAYOUT),*];

        /// `packed`, a value of attribute `attr`, read field by field
        /// through the accessors the handlers use (`None`: no such packed
        /// attribute, or bits outside its fields). For the binding's drift
        /// test (`_native.unpack_bitfield`).
        pub fn unpack(attr: &str, packed: i64) -> Option<Vec<(&'static str, i64)>> {
            match attr {
                $(stringify!($attr) if $ty(packed).fits() => {
                    Some(vec![$((stringify!($field), $ty(packed).$field())),*])
                })*
                _ => None,
            }
        }
    };
}

bitfields! {
    /// `dma_start`'s `view_maps`: per side, whether it is seen through a
    /// view and how. `*_map`: a map operand follows (int32 offsets, see
    /// `DmaView`); `*_same`: the view is its region's bytes in order (no
    /// operand; excludes `*_map`); `*_rows`: with `*_map`, the map is given
    /// as rows, two operands in its place (a pattern, then the rows'
    /// starts, see `ViewEntries::rows`). Operands come source first.
    view_maps => ViewMaps {
        src_map: 0, 1;
        dst_map: 1, 1;
        src_same: 2, 1;
        dst_same: 3, 1;
        src_rows: 4, 1;
        dst_rows: 5, 1;
    }
    /// `dma_start`'s `view_units`: per side, the `UnitLayout` of a map in
    /// sub-byte units (int4 views): the unit's bits, and how many bits of
    /// the region's / view's value one stored byte holds. All 0: a byte map.
    view_units => ViewUnits {
        src_unit: 0, 4;
        src_region: 4, 4;
        src_view: 8, 4;
        dst_unit: 16, 4;
        dst_region: 20, 4;
        dst_view: 24, 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_overlap_and_fit_in_an_i32() {
        for b in BITFIELDS {
            let mut seen = 0i64;
            for f in b.fields {
                assert!(f.width > 0 && f.shift + f.width <= 31, "{}.{}", b.attr, f.name);
                assert_eq!(seen & f.mask(), 0, "{}.{} overlaps", b.attr, f.name);
                seen |= f.mask();
            }
        }
    }

    #[test]
    fn every_packed_attribute_is_an_attribute_of_an_op() {
        for b in BITFIELDS {
            let owners = super::super::LAYOUTS
                .iter()
                .filter(|l| l.attrs.contains(&b.attr) || l.optional_attrs.contains(&b.attr));
            assert!(owners.count() > 0, "{}", b.attr);
        }
    }

    #[test]
    fn accessors_read_their_declared_bits() {
        let fields = [("src_unit", 4), ("src_region", 8), ("src_view", 2), ("dst_unit", 3), ("dst_region", 1)];
        let u = ViewUnits(ViewUnits::LAYOUT.pack(&[fields.as_slice(), &[("dst_view", 15)]].concat()));
        assert_eq!((u.src_unit(), u.src_region(), u.src_view()), (4, 8, 2));
        assert_eq!((u.dst_unit(), u.dst_region(), u.dst_view()), (3, 1, 15));
        assert!(u.fits());
        let (src_view, dst_view) =
            (ViewUnits::LAYOUT.field("src_view").unwrap(), ViewUnits::LAYOUT.field("dst_view").unwrap());
        assert!(!ViewUnits(1 << (src_view.shift + src_view.width)).fits(), "a bit between the sides");
        assert!(!ViewUnits(1 << (dst_view.shift + dst_view.width)).fits() && !ViewUnits(-1).fits());
        let m = ViewMaps(ViewMaps::LAYOUT.pack(&[("src_map", 1), ("dst_rows", 1)]));
        assert_eq!((m.src_map(), m.dst_rows(), m.dst_map()), (1, 1, 0));
        assert!(!ViewMaps(64).fits());
        assert_eq!(ViewMaps::LAYOUT.field("dst_same"), Some(BitField { name: "dst_same", shift: 3, width: 1 }));
    }

    #[test]
    fn unpack_reads_every_field_by_its_accessor() {
        let fields = unpack("view_units", ViewUnits::LAYOUT.pack(&[("src_unit", 4), ("dst_view", 8)])).unwrap();
        let names: Vec<_> = fields.iter().map(|(n, _)| *n).collect();
        let declared: Vec<_> = ViewUnits::LAYOUT.fields.iter().map(|f| f.name).collect();
        assert_eq!(names, declared);
        assert_eq!(fields[0], ("src_unit", 4));
        assert_eq!(fields[5], ("dst_view", 8));
        assert!(unpack("view_units", -1).is_none());
        assert!(unpack("no_such_attribute", 0).is_none());
    }
}
