//! initcheck (`detect_uninitialized=True`): one bit per element of every
//! kernel-local buffer (VMEM, SMEM, semaphore memory, ...: every space but
//! HBM/ANY), set when something writes the element in this launch -- a
//! store or swap, a DMA or block copy into it, or the buffer's initial
//! value. A read of an element whose bit is clear is an uninitialized read.
//!
//! Bits are only ever set, so they are plain atomics with relaxed ordering:
//! a read that is ordered after a write (program order, a semaphore, a DMA
//! wait) sees its bits, and an unordered pair is a data race the race
//! detector reports. A block access is a handful of word operations: runs of
//! consecutive elements are set and checked a 64-bit word at a time, and a
//! word already full is only loaded.
//!
//! A swap counts as a write only: Pallas lowers every `ref[...] = x` to a
//! swap whose old value is almost always dropped, so checking the swap's
//! read would flag every first store into fresh memory. (An interpreter
//! that knows a swap's result is used can issue a load first.)
//!
//! The hooks are methods of a buffer's [`InitShadow`], given the buffer's
//! shapes; `Buffer` (which owns the shadow, `Some` only when the feature
//! is on) forwards its accesses' hooks here, one call each from
//! `access.rs`. This module knows no `Buffer`.
//!
//! May use: `super::{copy, dims, elements, message, plan}`, `crate::error`,
//! `crate::region`, `crate::site`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::copy::{for_each_element, StridedLayout};
use super::dims::Dims;
use super::elements::Touched;
use super::message::Who;
use super::plan::RegionPlan;
use crate::error::{ErrorKind, Result, RtError};
use crate::region::Region;

/// The initialised-elements bitset of one buffer (allocated shape, C order).
pub(crate) struct InitShadow {
    words: Box<[AtomicU64]>,
    /// Elements (for bounds assertions).
    len: usize,
}

/// Bits `lo..hi` of a word (`lo < hi <= 64`).
#[inline]
fn bits(lo: usize, hi: usize) -> u64 {
    let upper = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

/// The part of a masked access that touches the buffer: the in-bounds
/// `counts` block of a `full`-shaped value, of which only the elements
/// whose byte in `mask` (one per element of `full`) is non-zero count.
#[derive(Clone, Copy)]
pub(crate) struct Masked<'a> {
    pub counts: &'a [usize],
    pub full: &'a [usize],
    pub mask: &'a [u8],
}

impl InitShadow {
    /// A shadow of `len` elements, none initialised (a MemoryError, never
    /// an abort, when the host cannot hold it).
    pub fn new(len: usize) -> Result<InitShadow> {
        let n = len.div_ceil(64);
        let mut words = Vec::new();
        words
            .try_reserve_exact(n)
            .map_err(|_| RtError::memory(format!("cannot allocate the initcheck shadow of {len} elements")))?;
        words.resize_with(n, || AtomicU64::new(0));
        Ok(InitShadow { words: words.into_boxed_slice(), len })
    }

    /// Marks elements `start..start + len` initialised.
    #[inline]
    pub fn mark_range(&self, start: usize, len: usize) {
        if len == 0 {
            return;
        }
        let end = start + len;
        debug_assert!(end <= self.len);
        let (first, last) = (start >> 6, (end - 1) >> 6);
        if first == last {
            self.or(first, bits(start & 63, end - (first << 6)));
            return;
        }
        self.or(first, bits(start & 63, 64));
        for w in &self.words[first + 1..last] {
            // Bits only ever go from 0 to 1: storing a full word loses none.
            if w.load(Ordering::Relaxed) != u64::MAX {
                w.store(u64::MAX, Ordering::Relaxed);
            }
        }
        self.or(last, bits(0, end - (last << 6)));
    }

    #[inline]
    fn or(&self, w: usize, mask: u64) {
        let word = &self.words[w];
        if word.load(Ordering::Relaxed) & mask != mask {
            word.fetch_or(mask, Ordering::Relaxed);
        }
    }

    /// Whether every element of `start..start + len` is initialised.
    #[inline]
    pub fn all_set(&self, start: usize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        let end = start + len;
        debug_assert!(end <= self.len);
        let (first, last) = (start >> 6, (end - 1) >> 6);
        let has = |w: usize, mask: u64| self.words[w].load(Ordering::Relaxed) & mask == mask;
        if first == last {
            return has(first, bits(start & 63, end - (first << 6)));
        }
        has(first, bits(start & 63, 64))
            && self.words[first + 1..last].iter().all(|w| w.load(Ordering::Relaxed) == u64::MAX)
            && has(last, bits(0, end - (last << 6)))
    }

    /// Whether element `i` is initialised.
    #[inline]
    pub fn is_set(&self, i: usize) -> bool {
        self.words[i >> 6].load(Ordering::Relaxed) & (1u64 << (i & 63)) != 0
    }

    /// Elements initialised so far (for tests).
    #[cfg(test)]
    pub fn count_set(&self) -> usize {
        self.words.iter().map(|w| w.load(Ordering::Relaxed).count_ones() as usize).sum()
    }
}

/// The elements of a buffer of allocated `shape` a `counts`-shaped block
/// of `plan` touches (counts already clipped to the shape that bounds the
/// access).
fn touched(shape: &[usize], plan: &RegionPlan, counts: &[usize]) -> Touched {
    let mut c = Dims::new();
    counts.iter().for_each(|&n| c.push(n));
    Touched {
        len: 0,
        row: 1,
        counts: Some(c),
        // Itemsize 1: the layout's offsets are element indices.
        at: plan.buffer_layout(shape, 1),
    }
}

// ------------------------------------------------------------------ hooks

/// A buffer's shapes, as the hooks need them: `shape` (allocated: the
/// shadow's elements) and `logical` (what the kernel sees, for messages).
#[derive(Clone, Copy)]
pub(crate) struct Shapes<'a> {
    pub shape: &'a [usize],
    pub logical: &'a [usize],
}

impl InitShadow {
    /// A write of the `counts` block of `plan` landed: its elements are
    /// initialised from now on.
    #[inline]
    pub(crate) fn mark(&self, shapes: Shapes, plan: &RegionPlan, counts: &[usize]) {
        touched(shapes.shape, plan, counts).for_each_run(|start, len| self.mark_range(start, len));
    }

    /// Marks the mask-selected elements of a block written.
    pub(crate) fn mark_masked(&self, shapes: Shapes, plan: &RegionPlan, block: Masked<'_>) {
        let at = plan.buffer_layout(shapes.shape, 1);
        for_each_element(block.counts, &at, &StridedLayout::dense(block.full, 1), |e, m| {
            if block.mask[m] != 0 {
                self.mark_range(e, 1);
            }
        });
    }

    /// Checks a read of the `counts` block of `plan` (`None`: nothing in
    /// bounds, nothing read): an `Uninitialized` error naming the
    /// never-written elements when some are.
    #[inline]
    pub(crate) fn check_read(
        &self,
        shapes: Shapes,
        plan: &RegionPlan,
        counts: Option<&[usize]>,
        who: &Who,
        region: &Region,
    ) -> Result<()> {
        let Some(counts) = counts else { return Ok(()) };
        let mut ok = true;
        touched(shapes.shape, plan, counts).for_each_run(|start, len| ok &= self.all_set(start, len));
        if ok {
            return Ok(());
        }
        Err(uninitialized(shapes, self, plan, counts, None, who, region))
    }

    /// [`InitShadow::check_read`] of a masked load: only the mask-selected
    /// elements of the block are read, and checked.
    pub(crate) fn check_read_masked(
        &self,
        shapes: Shapes,
        plan: &RegionPlan,
        block: Masked<'_>,
        who: &Who,
        region: &Region,
    ) -> Result<()> {
        let at = plan.buffer_layout(shapes.shape, 1);
        let mut ok = true;
        for_each_element(block.counts, &at, &StridedLayout::dense(block.full, 1), |e, m| {
            ok &= block.mask[m] == 0 || self.is_set(e);
        });
        if ok {
            return Ok(());
        }
        Err(uninitialized(shapes, self, plan, block.counts, Some(block), who, region))
    }
}

// ------------------------------------------------------------ the report

/// The error for a read that found never-written elements: the bounding
/// box of those elements and the region read, in slice notation.
#[cold]
#[inline(never)]
/// With `mask` (the value's full shape, one byte per element): only the
/// selected elements count as read (a masked load).
fn uninitialized(
    shapes: Shapes,
    shadow: &InitShadow,
    plan: &RegionPlan,
    counts: &[usize],
    mask: Option<Masked<'_>>,
    who: &Who,
    region: &Region,
) -> RtError {
    let shape = shapes.shape;
    let rank = shape.len();
    let (mut lo, mut hi) = (vec![usize::MAX; rank], vec![0usize; rank]);
    let (mut read, mut missing) = (0usize, 0usize);
    let at = plan.buffer_layout(shape, 1);
    let (mask_layout, mask) = match mask {
        Some(block) => (StridedLayout::dense(block.full, 1), Some(block.mask)),
        None => (at.clone(), None),
    };
    for_each_element(counts, &at, &mask_layout, |e, m| {
        if mask.is_some_and(|mask| mask[m] == 0) {
            return;
        }
        read += 1;
        if shadow.is_set(e) {
            return;
        }
        missing += 1;
        let mut rest = e;
        for k in (0..rank).rev() {
            let i = rest % shape[k].max(1);
            rest /= shape[k].max(1);
            lo[k] = lo[k].min(i);
            hi[k] = hi[k].max(i + 1);
        }
    });
    let bbox: Vec<String> = (0..rank)
        .map(|k| if hi[k] == lo[k] + 1 { lo[k].to_string() } else { format!("{}:{}", lo[k], hi[k]) })
        .collect();
    let key = super::BufferKey::for_access(who.space, who.id, who.device, who.core);
    let site = match crate::site::current() {
        0 => String::new(),
        s => format!("; read{}", crate::site::at(s)),
    };
    RtError::new(
        ErrorKind::Uninitialized,
        format!(
            "Uninitialized read of {key} at [{}]: {missing} of the {read} element(s) read ({}) \
             were never written in this launch (no store, DMA, block copy or initial value \
             wrote them){site}",
            bbox.join(", "),
            slice_notation(region, shapes.logical),
        ),
    )
    .at(who.device, who.core)
}

/// `region` of a buffer of `logical` shape in slice notation over every
/// dim: `[0:8, 3, 0:128]` (strides as `a:b:s`).
pub fn slice_notation(region: &Region, logical: &[usize]) -> String {
    let mut parts: Vec<String> = region
        .dims
        .iter()
        .map(|d| {
            if d.squeezed {
                return d.start.to_string();
            }
            let stop = d.start.saturating_add(d.size.saturating_mul(d.stride).saturating_sub(d.stride - 1));
            let stop = stop.max(d.start);
            if d.stride == 1 {
                format!("{}:{}", d.start, stop)
            } else {
                format!("{}:{}:{}", d.start, stop, d.stride)
            }
        })
        .collect();
    parts.extend(logical.iter().skip(region.dims.len()).map(|n| format!("0:{n}")));
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::DimSel;

    #[test]
    fn ranges_set_and_check_across_words() {
        let s = InitShadow::new(300).unwrap();
        assert!(s.all_set(0, 0));
        assert!(!s.all_set(0, 1));
        s.mark_range(3, 5);
        assert!(s.all_set(3, 5) && !s.all_set(2, 2) && !s.all_set(7, 2));
        s.mark_range(60, 150); // word 0 tail, words 1-2, word 3 head
        assert!(s.all_set(60, 150) && !s.all_set(59, 2) && !s.all_set(209, 2));
        assert_eq!(s.count_set(), 155);
        s.mark_range(0, 300);
        assert!(s.all_set(0, 300));
        assert_eq!(s.count_set(), 300);
        s.mark_range(64, 64); // a full word again: unchanged
        assert_eq!(s.count_set(), 300);
    }

    #[test]
    fn single_bits_agree_with_ranges() {
        let s = InitShadow::new(130).unwrap();
        for i in (0..130).step_by(3) {
            s.mark_range(i, 1);
        }
        for i in 0..130 {
            assert_eq!(s.is_set(i), i % 3 == 0, "{i}");
            assert_eq!(s.all_set(i, 1), i % 3 == 0, "{i}");
        }
        for start in 0..130 {
            for len in 0..(130 - start).min(70) {
                let want = (start..start + len).all(|i| i % 3 == 0);
                assert_eq!(s.all_set(start, len), want, "{start}+{len}");
            }
        }
    }

    #[test]
    fn slice_notation_of_regions() {
        let r = Region::new(vec![DimSel::slice(0, 8, 1)]);
        assert_eq!(slice_notation(&r, &[16, 128]), "[0:8, 0:128]");
        let r = Region::new(vec![DimSel::index(3), DimSel::slice(2, 3, 2)]);
        assert_eq!(slice_notation(&r, &[4, 16]), "[3, 2:7:2]");
        assert_eq!(slice_notation(&Region::full(), &[]), "[]");
    }
}
