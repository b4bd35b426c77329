//! DMAs through ref views (`ref.bitcast`, `ref.reshape`, transposes and
//! indexers after them): an endpoint is a plain region plus a byte map.
//!
//! A view is not a strided region of its buffer (a bitcast that changes
//! the bitwidth interleaves rows, a reshape after a slice is not strided),
//! but each byte of the view's value is some byte of its region's dense
//! C-order value. The map, computed at trace time (or in XLA, for traced
//! indices after the view), says which: `map[n]` is the offset, in the
//! region's value, of byte `n` of the view's value. The copy then stays
//! native (bounds, initcheck, races and semaphores on the regions, eager or
//! on_wait), at the cost of a temporary per side -- except for an eager
//! copy through whole streams of rows, which moves them buffer to buffer
//! (`view_direct.rs`).
//!
//! Views of sub-byte types (int4 rows packed 8 to an int32 by
//! `ref.bitcast(jnp.int32)`) move nibbles, not bytes, and simulated memory
//! keeps one sub-byte element per byte (see `mosaic_rt_wire::DType`), so their maps
//! count *units* of 4 (or 2, 1) bits instead ([`ViewMap::Units`],
//! [`UnitLayout`]): a value's units are its elements' bits, little-endian,
//! and each stored byte holds `min(8, element bits)` of them.

use super::view_entries::{self, ViewEntries};
use super::view_map::{UnitLayout, ViewMap};
use super::{view_direct, view_rows};
use crate::error::{Result, RtError};
use crate::memory::{Access, MemRef, MemoryTable};

/// The views of a DMA's two sides (`None`: the side is its region).
#[derive(Clone, Debug, Default)]
pub struct DmaView {
    pub src: Option<ViewMap>,
    pub dst: Option<ViewMap>,
}

impl DmaView {
    /// Checks the maps against the two regions (`src_bytes`, `dst_bytes`:
    /// the bytes of their values) and returns the bytes the DMA moves.
    pub(crate) fn check(&self, src_bytes: usize, dst_bytes: usize) -> Result<usize> {
        let s = side(&self.src, src_bytes, "source")?;
        let d = side(&self.dst, dst_bytes, "destination")?;
        if s != d {
            return Err(RtError::value(format!(
                "DMA source view has {s} bytes but its destination view {d}: shapes or dtypes differ"
            )));
        }
        Ok(s)
    }

    /// The bytes the source view moves (`src_bytes`: the bytes of its
    /// region's value), for a DMA whose destination is checked later.
    pub(crate) fn source_bytes(&self, src_bytes: usize) -> Result<usize> {
        side(&self.src, src_bytes, "source")
    }

    /// The source view's value (reads the source region).
    pub(crate) fn load(&self, memory: &MemoryTable, src: MemRef<'_>) -> Result<Vec<u8>> {
        // Bounds first: a huge out-of-bounds region fails without allocating.
        let checked = memory.checked(src, Access::Read)?;
        let n = checked.bytes();
        if let Some(ViewMap::Bytes(m)) = &self.src {
            if let Some(split) = sparse(memory, src, n, m.len())? {
                side(&self.src, n, "source")?;
                return view_rows::load(memory, src, &split, m);
            }
        }
        let mut region = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
        side(&self.src, n, "source")?;
        memory.load_checked(&checked, &mut region)?;
        Ok(match &self.src {
            None | Some(ViewMap::Same) => region,
            Some(ViewMap::Bytes(m)) => view_entries::gather(&region, m),
            Some(ViewMap::Units(m, layout)) => {
                layout.check_region(memory.info(src.key())?.dtype)?;
                gather_units(&region, m, *layout)
            }
        })
    }

    /// Writes `data`, the destination view's value, into the destination.
    pub(crate) fn store(&self, memory: &MemoryTable, dst: MemRef<'_>, data: &[u8]) -> Result<()> {
        let (m, layout) = match &self.dst {
            Some(ViewMap::Bytes(m)) => (m, UnitLayout::BYTES),
            Some(ViewMap::Units(m, layout)) => (m, *layout),
            None | Some(ViewMap::Same) => return memory.store(dst, data),
        };
        let checked = memory.checked(dst, Access::Write)?;
        let n = checked.bytes();
        let view = side(&self.dst, n, "destination")?;
        if view != data.len() {
            return Err(RtError::value(format!("DMA destination view has {view} bytes, its data {}", data.len())));
        }
        let bytes = layout == UnitLayout::BYTES;
        if bytes && m.len() == n && m.is_permutation() {
            // Every byte of the region written once: a plain store.
            let mut region = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
            view_entries::scatter(&mut region, m, data);
            return memory.store_checked(&checked, &region);
        }
        if let Some(split) = if bytes { sparse(memory, dst, n, m.len())? } else { None } {
            let itemsize = memory.info(dst.key())?.dtype.itemsize();
            return view_rows::store(memory, dst, &split, m, data, itemsize);
        }
        let mut region = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
        // Coverage is counted, not inferred from the map's length: a scatter
        // with repeated indices has a full-length map that misses rows.
        let dtype = memory.info(dst.key())?.dtype;
        if layout != UnitLayout::BYTES {
            layout.check_region(dtype)?;
        }
        // A view that covers only part of its region (an indexer after it,
        // or some of the nibbles of wider elements): a masked write of the
        // elements it covers, under the buffer's lock, so that other cores
        // writing the rest of the region at the same time (SparseCore
        // subcores gathering rows into one output) keep their bytes. An
        // element the view covers only in part keeps its other bits as they
        // were read just before.
        let per_elem = dtype.itemsize().max(1) * layout.region_per_byte();
        let mut covered = vec![false; n * layout.region_per_byte()];
        for &k in m.iter() {
            covered[k as usize] = true;
        }
        let (mut all, mut partial) = (true, false);
        let mask: Vec<u8> = covered
            .chunks(per_elem)
            .map(|c| {
                let (any, every) = (c.iter().any(|&x| x), c.iter().all(|&x| x));
                all &= every;
                partial |= any && !every;
                any as u8
            })
            .collect();
        if partial {
            memory.load(dst, &mut region)?;
        }
        scatter_units(&mut region, m, layout, data);
        if all {
            return memory.store_checked(&checked, &region);
        }
        memory.swap_value(dst, crate::memory::Stored::Dense(&region), Some(&mask), None)
    }

    /// The whole copy, returning the bytes moved: a plain stream copy
    /// straight between the buffers (`view_direct.rs`), else load, then store.
    pub(crate) fn copy(&self, memory: &MemoryTable, src: MemRef<'_>, dst: MemRef<'_>) -> Result<usize> {
        if let Some(bytes) = view_direct::copy(&self.src, &self.dst, memory, src, dst)? {
            return Ok(bytes);
        }
        let data = self.load(memory, src)?;
        self.store(memory, dst, &data)?;
        Ok(data.len())
    }
}

/// The view's stored bytes: unit `n` of them is unit `map[n]` of `region`.
fn gather_units(region: &[u8], map: &[u32], layout: UnitLayout) -> Vec<u8> {
    let (unit, rp, vp) = (layout.unit as u32, layout.region_per_byte(), layout.view_per_byte());
    let (rs, vs) = (rp.trailing_zeros(), vp.trailing_zeros());
    let mask = ((1u16 << unit) - 1) as u8;
    let mut out = vec![0u8; map.len() / vp];
    for (n, &k) in map.iter().enumerate() {
        let k = k as usize;
        let bits = (region[k >> rs] >> ((k & (rp - 1)) as u32 * unit)) & mask;
        out[n >> vs] |= bits << ((n & (vp - 1)) as u32 * unit);
    }
    out
}

/// Writes `data`, the view's stored bytes, into `region` through `map`
/// (the other bits of a touched byte stay as they are).
fn scatter_units(region: &mut [u8], map: &ViewEntries, layout: UnitLayout, data: &[u8]) {
    if layout == UnitLayout::BYTES {
        view_entries::scatter(region, map, data);
        return;
    }
    let (unit, rp, vp) = (layout.unit as u32, layout.region_per_byte(), layout.view_per_byte());
    let (rs, vs) = (rp.trailing_zeros(), vp.trailing_zeros());
    let mask = ((1u16 << unit) - 1) as u8;
    for (n, &k) in map.iter().enumerate() {
        let k = k as usize;
        let bits = (data[n >> vs] >> ((n & (vp - 1)) as u32 * unit)) & mask;
        let shift = (k & (rp - 1)) as u32 * unit;
        let byte = &mut region[k >> rs];
        *byte = (*byte & !(mask << shift)) | (bits << shift);
    }
}

/// The row split of `r`'s region (of `region_bytes`) when a map of
/// `map_len` bytes touches little enough of it that moving just the
/// touched rows pays.
fn sparse(memory: &MemoryTable, r: MemRef<'_>, region_bytes: usize, map_len: usize) -> Result<Option<view_rows::Rows>> {
    // The rows of a split hold the region's bytes: a map of half of them
    // or more never pays (and most maps are their whole region).
    if map_len.saturating_mul(2) >= region_bytes {
        return Ok(None);
    }
    let info = memory.info(r.key())?;
    let split = view_rows::Rows::of(r.region, &info.logical_shape, info.dtype.itemsize());
    Ok(split.filter(|s| s.pays(map_len)))
}

/// The bytes of one side's view (its region's without a map), after
/// checking that its map stays within its region of `region` bytes.
fn side(map: &Option<ViewMap>, region: usize, what: &str) -> Result<usize> {
    let (m, layout) = match map {
        Some(ViewMap::Bytes(m)) => (m, UnitLayout::BYTES),
        Some(ViewMap::Units(m, layout)) => {
            layout.check()?;
            (m, *layout)
        }
        None | Some(ViewMap::Same) => return Ok(region),
    };
    let units = region * layout.region_per_byte();
    if m.end() > units {
        let bad = m.iter().copied().find(|&b| b as usize >= units).unwrap_or(0);
        // The sentinel of an index out of bounds after the view (dma_views.py).
        let why = match bad {
            view_entries::OUT_OF_BOUNDS => "an index out of bounds".to_string(),
            _ if layout == UnitLayout::BYTES => format!("byte {bad}"),
            _ => format!("{}-bit unit {bad}", layout.unit),
        };
        return Err(RtError::value(format!("DMA {what} view reaches outside its region of {region} bytes ({why})")));
    }
    let per = layout.view_per_byte();
    if m.len() % per != 0 {
        return Err(RtError::internal(format!(
            "DMA {what} view map of {} {}-bit units is not whole bytes of its view",
            m.len(),
            layout.unit
        )));
    }
    Ok(m.len() / per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_counts_view_bytes_and_rejects_bad_maps() {
        let v = DmaView { src: Some(ViewMap::bytes(vec![3u32, 2, 1, 0])), dst: None };
        assert_eq!(v.check(8, 4).unwrap(), 4);
        assert!(v.check(8, 6).unwrap_err().message.contains("4 bytes but its destination view 6"));
        assert!(v.check(3, 4).unwrap_err().message.contains("outside its region of 3 bytes (byte 3)"));
        let oob = DmaView { src: Some(ViewMap::bytes(vec![i32::MAX as u32])), dst: Some(ViewMap::Same) };
        assert!(oob.check(8, 1).unwrap_err().message.contains("(an index out of bounds)"));
    }
}
