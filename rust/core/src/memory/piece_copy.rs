//! A copy between two regions without temporaries, as byte pieces.
//!
//! The common DMA through a view (the u32 view of bf16 or int8 rows that
//! SparseCore kernels take with `ref.bitcast(jnp.uint32)`) reads a few
//! whole rows of its source as streams and writes one contiguous piece, or
//! the reverse. The general path stages the source region and the view's
//! value in two temporaries; here each piece is found where it lies in its
//! buffer and the caller moves the bytes between the two buffers, both
//! locked in address order as [`MemoryTable::copy`] locks them.
//!
//! Only the plain case is taken: two different buffers, both regions wholly
//! inside them (the destination inside its logical shape), each piece one
//! contiguous run of its buffer. Anything else returns `false` before a
//! byte is read or written, and the caller's general path runs with its
//! bounds rules, fill values and messages.

use super::copy::StridedLayout;
use super::{MemRef, MemoryTable};
use crate::error::Result;
use std::sync::Arc;

/// The most pieces one side of a [`MemoryTable::copy_pieces`] may have.
pub(crate) const MAX_PIECES: usize = 4;

/// A byte range of a region's value: `(offset, len)`.
pub(crate) type Piece = (usize, usize);

/// Moves the bytes: the source pieces' bytes in, the destination pieces' out.
pub(crate) type MovePieces<'a> = dyn FnMut(&[&[u8]], &mut [&mut [u8]]) + 'a;

impl MemoryTable {
    /// Moves the `len` bytes of `src` to `dst`, both regions of exactly
    /// `len` bytes: `mv` gets the bytes of the source's pieces and of the
    /// destination's (each side's [`Piece`]s of its region's value, in the
    /// order given; the destination's must be its whole region, each byte
    /// once) and must write every byte of the destination's. Returns
    /// whether it ran (see the module doc for when it does not); errors are
    /// the general path's own (initcheck of the source, a released buffer).
    pub(crate) fn copy_pieces(
        &self,
        src: MemRef<'_>,
        dst: MemRef<'_>,
        len: usize,
        src_pieces: &[Piece],
        dst_pieces: &[Piece],
        mv: &mut MovePieces<'_>,
    ) -> Result<bool> {
        let (Ok(s), Ok(d)) = (self.resolve(src, "read"), self.resolve(dst, "write")) else {
            return Ok(false);
        };
        if len == 0 || s.bytes != len || d.bytes != len || Arc::ptr_eq(&s.buf, &d.buf) {
            return Ok(false);
        }
        let whole = |counts: Option<super::dims::Dims<usize>>, full: &[usize]| counts.as_deref() == Some(full);
        if !whole(s.plan.clip(&s.buf.shape), &s.full)
            || d.plan.any_out_of(&d.buf.shape)
            || !whole(d.plan.clip(&d.buf.logical_shape), &d.full)
        {
            return Ok(false);
        }
        let from = s.plan.buffer_layout(&s.buf.shape, s.itemsize());
        let to = d.plan.buffer_layout(&d.buf.shape, d.itemsize());
        let (Some(src_at), Some(dst_at)) =
            (locate(&from, &s.full, s.itemsize(), src_pieces), locate(&to, &d.full, d.itemsize(), dst_pieces))
        else {
            return Ok(false);
        };
        let (src_at, dst_at) = (&src_at[..src_pieces.len()], &dst_at[..dst_pieces.len()]);
        // The destination's pieces are its whole region, each byte once.
        if !disjoint(dst_at) || dst_at.iter().map(|&(_, n)| n).sum::<usize>() != len {
            return Ok(false);
        }
        s.buf.check_initialized(&s.plan, Some(&s.full), &s.who, src.region)?;
        // Every byte of the destination region is written, and `mv` cannot fail.
        let covers = d.buf.covered_by(&d.plan);
        {
            let (src_bytes, mut dst_bytes);
            if Arc::as_ptr(&s.buf) < Arc::as_ptr(&d.buf) {
                src_bytes = s.buf.read(&s.who)?;
                dst_bytes = d.buf.write(&d.who, covers)?;
            } else {
                dst_bytes = d.buf.write(&d.who, covers)?;
                src_bytes = s.buf.read(&s.who)?;
            }
            let mut srcs: [&[u8]; MAX_PIECES] = [&[]; MAX_PIECES];
            for (slot, &(at, n)) in srcs.iter_mut().zip(src_at) {
                *slot = &src_bytes[at..at + n];
            }
            let mut dsts = split(&mut dst_bytes, dst_at);
            mv(&srcs[..src_at.len()], &mut dsts[..dst_at.len()]);
        }
        d.buf.mark_initialized(&d.plan, &d.full);
        Ok(true)
    }
}

/// Where each of `pieces` (of a region's value: `full` elements of
/// `itemsize` at `layout` in its buffer) lies in the buffer, as `(offset,
/// len)`: `None` unless every piece is one contiguous run there.
fn locate(layout: &StridedLayout, full: &[usize], itemsize: usize, pieces: &[Piece]) -> Option<[Piece; MAX_PIECES]> {
    if pieces.len() > MAX_PIECES {
        return None;
    }
    // The region's innermost dims that are contiguous in the buffer (from
    // dim `inner` on): a piece within one such chunk is contiguous there
    // too, and only the dims before `inner` place the chunk.
    let (mut chunk, mut inner) = (itemsize, full.len());
    for (k, &n) in full.iter().enumerate().rev() {
        if n != 1 && layout.strides[k] != chunk {
            break;
        }
        (chunk, inner) = (chunk * n, k);
    }
    let total = full.iter().product::<usize>() * itemsize;
    let mut out = [(0, 0); MAX_PIECES];
    for (o, &(off, len)) in out.iter_mut().zip(pieces) {
        if off.checked_add(len)? > total || off % chunk + len > chunk {
            return None;
        }
        let (mut q, mut at) = (off / chunk, layout.offset + off % chunk);
        for k in (1..inner).rev() {
            at += q % full[k] * layout.strides[k];
            q /= full[k];
        }
        // The outermost dim needs no wrap: `off` lies within the region.
        if inner > 0 {
            at += q * layout.strides[0];
        }
        *o = (at, len);
    }
    Some(out)
}

/// Whether no two of `pieces` share a byte.
fn disjoint(pieces: &[Piece]) -> bool {
    pieces.iter().enumerate().all(|(i, &(a, n))| pieces[i + 1..].iter().all(|&(b, m)| a + n <= b || b + m <= a))
}

/// `bytes` cut into `pieces` (disjoint, within `bytes`), in their order.
fn split<'a>(bytes: &'a mut [u8], pieces: &[Piece]) -> [&'a mut [u8]; MAX_PIECES] {
    let mut order = [0, 1, 2, 3];
    let order = &mut order[..pieces.len()];
    order.sort_unstable_by_key(|&i| pieces[i].0);
    let mut out: [&mut [u8]; MAX_PIECES] = Default::default();
    let (mut rest, mut base) = (bytes, 0);
    for &i in order.iter() {
        let (at, n) = pieces[i];
        let (piece, after) = std::mem::take(&mut rest)[at - base..].split_at_mut(n);
        (out[i], rest, base) = (piece, after, at + n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(offset: usize, strides: &[usize]) -> StridedLayout {
        let mut s = super::super::dims::Dims::new();
        strides.iter().for_each(|&x| s.push(x));
        StridedLayout { offset, strides: s }
    }

    #[test]
    fn pieces_are_found_within_contiguous_rows_only() {
        // Two rows of 4 bf16 (8 bytes each) out of rows of 12 bytes, starting at byte 6.
        let l = layout(6, &[12, 2]);
        let at = locate(&l, &[2, 4], 2, &[(0, 8), (8, 8), (9, 3)]).unwrap();
        assert_eq!(at[..3], [(6, 8), (18, 8), (19, 3)]);
        assert!(locate(&l, &[2, 4], 2, &[(4, 8)]).is_none(), "crosses a row");
        assert!(locate(&l, &[2, 4], 2, &[(12, 8)]).is_none(), "past the region");
        // A dense region is one chunk; a size-1 dim's stride does not matter.
        let at = locate(&layout(100, &[999, 8, 2]), &[1, 2, 4], 2, &[(3, 13)]).unwrap();
        assert_eq!(at[0], (103, 13));
        assert!(locate(&l, &[2, 4], 2, &[(0, 1); 5]).is_none(), "too many pieces");
    }

    #[test]
    fn disjoint_pieces_are_cut_out_in_their_order() {
        let mut bytes: Vec<u8> = (0..20).collect();
        assert!(disjoint(&[(10, 4), (0, 2), (4, 6)]));
        assert!(!disjoint(&[(10, 4), (0, 11)]));
        let pieces = split(&mut bytes, &[(10, 4), (0, 2), (4, 6)]);
        assert_eq!(pieces[0], [10, 11, 12, 13]);
        assert_eq!(pieces[1], [0, 1]);
        assert_eq!(pieces[2], [4, 5, 6, 7, 8, 9]);
        assert!(pieces[3].is_empty());
    }
}
