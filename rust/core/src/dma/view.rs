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
//! on_wait), at the cost of a temporary per side.

use super::view_rows;
use crate::error::{Result, RtError};
use crate::memory::{Access, MemRef, MemoryTable};
use std::sync::Arc;

/// How one side's view sees its region's value.
#[derive(Clone, Debug)]
pub enum ViewMap {
    /// Its bytes in order, in another shape (a reshape of a dense value):
    /// only the byte counts of the two sides must agree.
    Same,
    /// Byte n of the view is byte `map[n]` of the region's value.
    Bytes(Arc<[u32]>),
}

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

    /// The source view's value (reads the source region).
    pub(crate) fn load(&self, memory: &MemoryTable, src: MemRef<'_>) -> Result<Vec<u8>> {
        // Bounds first: a huge out-of-bounds region fails without allocating.
        let n = memory.check_access(src, Access::Read)?;
        if let Some(ViewMap::Bytes(m)) = &self.src {
            if let Some(split) = sparse(memory, src, m.len())? {
                side(&self.src, n, "source")?;
                return view_rows::load(memory, src, &split, m);
            }
        }
        let mut region = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
        side(&self.src, n, "source")?;
        memory.load(src, &mut region)?;
        Ok(match &self.src {
            None | Some(ViewMap::Same) => region,
            Some(ViewMap::Bytes(m)) => m.iter().map(|&b| region[b as usize]).collect(),
        })
    }

    /// Writes `data`, the destination view's value, into the destination.
    pub(crate) fn store(&self, memory: &MemoryTable, dst: MemRef<'_>, data: &[u8]) -> Result<()> {
        let Some(ViewMap::Bytes(m)) = &self.dst else { return memory.store(dst, data) };
        let n = memory.check_access(dst, Access::Write)?;
        let view = side(&self.dst, n, "destination")?;
        if view != data.len() {
            return Err(RtError::value(format!("DMA destination view has {view} bytes, its data {}", data.len())));
        }
        if let Some(split) = sparse(memory, dst, m.len())? {
            let itemsize = memory.info(dst.key())?.dtype.itemsize();
            return view_rows::store(memory, dst, &split, m, data, itemsize);
        }
        let mut region = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
        if m.len() == n {
            for (&b, &v) in m.iter().zip(data) {
                region[b as usize] = v;
            }
            return memory.store(dst, &region);
        }
        // A view that covers only part of its region (an indexer after it):
        // a masked write of the elements it covers, under the buffer's lock,
        // so that other cores writing the rest of the region at the same
        // time (SparseCore subcores gathering rows into one output) keep
        // their bytes. An element the view covers only in part keeps its
        // other bytes as they were read just before.
        let itemsize = memory.info(dst.key())?.dtype.itemsize().max(1);
        let mut covered = vec![0u8; n];
        for &b in m.iter() {
            covered[b as usize] = 1;
        }
        let mask: Vec<u8> = covered.chunks(itemsize).map(|c| c.iter().any(|&x| x != 0) as u8).collect();
        let partial = covered.chunks(itemsize).any(|c| c.iter().any(|&x| x != 0) && !c.iter().all(|&x| x != 0));
        if partial {
            memory.load(dst, &mut region)?;
        }
        for (&b, &v) in m.iter().zip(data) {
            region[b as usize] = v;
        }
        memory.swap_value(dst, crate::memory::Stored::Dense(&region), Some(&mask), None)
    }

    /// The whole copy (load, then store); returns the bytes moved.
    pub(crate) fn copy(&self, memory: &MemoryTable, src: MemRef<'_>, dst: MemRef<'_>) -> Result<usize> {
        let data = self.load(memory, src)?;
        self.store(memory, dst, &data)?;
        Ok(data.len())
    }
}

/// The row split of `r`'s region when a map of `map_len` bytes touches
/// little enough of it that moving just the touched rows pays.
fn sparse(memory: &MemoryTable, r: MemRef<'_>, map_len: usize) -> Result<Option<view_rows::Rows>> {
    let info = memory.info(r.key())?;
    let split = view_rows::Rows::of(r.region, &info.logical_shape, info.dtype.itemsize());
    Ok(split.filter(|s| s.pays(map_len)))
}

/// The bytes of one side's view (its region's without a map), after
/// checking that its map stays within its region of `region` bytes.
fn side(map: &Option<ViewMap>, region: usize, what: &str) -> Result<usize> {
    let Some(ViewMap::Bytes(m)) = map else { return Ok(region) };
    if let Some(&bad) = m.iter().find(|&&b| b as usize >= region) {
        // i32::MAX: an index out of bounds after the view (see dma_views.py).
        let why = if bad == i32::MAX as u32 { "an index out of bounds".to_string() } else { format!("byte {bad}") };
        return Err(RtError::value(format!("DMA {what} view reaches outside its region of {region} bytes ({why})")));
    }
    Ok(m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_counts_view_bytes_and_rejects_bad_maps() {
        let v = DmaView { src: Some(ViewMap::Bytes(Arc::from(vec![3u32, 2, 1, 0]))), dst: None };
        assert_eq!(v.check(8, 4).unwrap(), 4);
        assert!(v.check(8, 6).unwrap_err().message.contains("4 bytes but its destination view 6"));
        assert!(v.check(3, 4).unwrap_err().message.contains("outside its region of 3 bytes (byte 3)"));
        let oob = DmaView { src: Some(ViewMap::Bytes(Arc::from(vec![i32::MAX as u32]))), dst: Some(ViewMap::Same) };
        assert!(oob.check(8, 1).unwrap_err().message.contains("(an index out of bounds)"));
    }
}
