//! The map of one side of a DMA through a ref view ([`ViewMap`]) and the
//! unit layout of a sub-byte one ([`UnitLayout`]): the types the view
//! engine (`view.rs`) and its direct stream copy (`view_direct.rs`) share,
//! kept below both.

use super::view_entries::ViewEntries;
use crate::error::{Result, RtError};
use mosaic_rt_wire::DType;
use std::sync::Arc;

/// How one side's view sees its region's value.
#[derive(Clone, Debug)]
pub enum ViewMap {
    /// Its bytes in order, in another shape (a reshape of a dense value):
    /// only the byte counts of the two sides must agree.
    Same,
    /// Byte n of the view is byte `map[n]` of the region's value.
    Bytes(Arc<ViewEntries>),
    /// Unit n of the view is unit `map[n]` of the region's value, units as
    /// the layout says (a view with a sub-byte type in its chain).
    Units(Arc<ViewEntries>, UnitLayout),
}

impl ViewMap {
    /// A byte map.
    pub fn bytes(map: impl Into<ViewEntries>) -> ViewMap {
        ViewMap::Bytes(Arc::new(map.into()))
    }

    /// A unit map of `layout`.
    pub fn units(map: impl Into<ViewEntries>, layout: UnitLayout) -> ViewMap {
        ViewMap::Units(Arc::new(map.into()), layout)
    }
}

/// The units of a [`ViewMap::Units`] map: `unit` bits each (1, 2 or 4);
/// `region` / `view`: the bits of the region's / view's value one stored
/// byte holds (8, or the bits of a sub-byte element, stored one per byte
/// in its low bits). Unit `k` of a value is bits `(k % per) * unit ..` of
/// stored byte `k / per`, `per = bits / unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitLayout {
    pub unit: u8,
    pub region: u8,
    pub view: u8,
}

impl UnitLayout {
    /// Byte maps as unit maps (the layout every engine loop is written for).
    pub(super) const BYTES: UnitLayout = UnitLayout { unit: 8, region: 8, view: 8 };

    pub(super) fn check(self) -> Result<()> {
        let ok = |b: u8| matches!(b, 1 | 2 | 4 | 8) && b >= self.unit;
        if !matches!(self.unit, 1 | 2 | 4) || !ok(self.region) || !ok(self.view) {
            return Err(RtError::internal(format!("DMA view map with a bad unit layout {self:?}")));
        }
        Ok(())
    }

    /// Units per stored byte of the region's value (a power of two).
    pub(super) fn region_per_byte(self) -> usize {
        (self.region / self.unit) as usize
    }

    pub(super) fn view_per_byte(self) -> usize {
        (self.view / self.unit) as usize
    }

    /// Whether the map was made for a region of `dtype` (a mismatch is our
    /// bug: the trace-time map and the buffer disagree).
    pub(super) fn check_region(self, dtype: DType) -> Result<()> {
        if dtype.bits().min(8) != self.region as usize {
            return Err(RtError::internal(format!(
                "DMA view map made for {} bits per stored byte, but its region is {}",
                self.region,
                dtype.name()
            )));
        }
        Ok(())
    }
}
