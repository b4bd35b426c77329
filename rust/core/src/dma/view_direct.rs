//! The common eager DMA through a view, moved between the two buffers
//! without staging: one side's map is one to four whole streams
//! ([`ViewEntries::streams`]: the u32 view of bf16 or int8 rows that
//! SparseCore kernels DMA through, 512 bytes at a time), the other side is
//! its plain region. The general path ([`DmaView::load`] then `store`)
//! copies the source region into a temporary, gathers the view's value
//! into a second and stores that; here each stream is read from, or
//! written into, the buffer where it lies ([`MemoryTable::copy_pieces`],
//! which declines all but the plain case: then the general path runs).
//!
//! [`DmaView::load`]: super::view::DmaView

use super::view_entries::{self, ViewEntries};
use super::view_map::ViewMap;
use crate::error::Result;
use crate::memory::{MemRef, MemoryTable, Piece, MAX_PIECES};

/// Runs the DMA of `src` to `dst` through these maps if it is a plain
/// stream copy; the bytes moved, or `None` (nothing done).
pub(super) fn copy(
    src_map: &Option<ViewMap>,
    dst_map: &Option<ViewMap>,
    memory: &MemoryTable,
    src: MemRef<'_>,
    dst: MemRef<'_>,
) -> Result<Option<usize>> {
    let plain = |m: &Option<ViewMap>| matches!(m, None | Some(ViewMap::Same));
    match (src_map, dst_map) {
        (Some(ViewMap::Bytes(m)), d) if plain(d) => gather(memory, src, dst, m),
        (s, Some(ViewMap::Bytes(m))) if plain(s) => scatter(memory, src, dst, m),
        _ => Ok(None),
    }
}

/// The source's streams, interleaved run by run, into the destination.
fn gather(memory: &MemoryTable, src: MemRef<'_>, dst: MemRef<'_>, m: &ViewEntries) -> Result<Option<usize>> {
    let Some(bases) = m.streams() else {
        return Ok(None);
    };
    let (len, run) = (m.len(), m.run());
    let streams = pieces(bases, len);
    let mut mv = |s: &[&[u8]], d: &mut [&mut [u8]]| view_entries::interleave_streams(run, d[0], s);
    let done = memory.copy_pieces(src, dst, len, &streams[..bases.len()], &[(0, len)], &mut mv)?;
    Ok(done.then_some(len))
}

/// The source's bytes dealt run by run into the destination's streams.
fn scatter(memory: &MemoryTable, src: MemRef<'_>, dst: MemRef<'_>, m: &ViewEntries) -> Result<Option<usize>> {
    // The general path writes a map as a plain store only when it moves
    // every byte of its region once (streams that meet, or miss bytes,
    // take its ordered or masked writes).
    let Some(bases) = m.streams().filter(|_| m.is_permutation()) else {
        return Ok(None);
    };
    let (len, run) = (m.len(), m.run());
    let streams = pieces(bases, len);
    let mut mv = |s: &[&[u8]], d: &mut [&mut [u8]]| view_entries::deinterleave_runs(run, s[0], d);
    let done = memory.copy_pieces(src, dst, len, &[(0, len)], &streams[..bases.len()], &mut mv)?;
    Ok(done.then_some(len))
}

/// Each stream as a piece of its region's value: `len / k` bytes from its base.
fn pieces(bases: &[u32], len: usize) -> [Piece; MAX_PIECES] {
    let mut out = [(0, 0); MAX_PIECES];
    for (p, &b) in out.iter_mut().zip(bases) {
        *p = (b as usize, len / bases.len());
    }
    out
}
