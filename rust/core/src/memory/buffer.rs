//! One simulated buffer: its shapes, dtype and bytes behind their own lock,
//! so accesses to different buffers never contend. The bytes are our own
//! allocation (pooled, see `pool.rs`) or, for an input the kernel provably
//! never writes, XLA's operand memory borrowed read-only, or for an output,
//! XLA's result buffer written in place (see `content.rs`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLock;

use super::content::{Content, ContentRead, ContentWrite};
use super::copy::extend_with_pattern;
use super::init_shadow::{InitShadow, Masked, Shapes};
use super::message::{shape_repr, Who};
use super::plan::RegionPlan;
use super::BufferInfo;
use crate::error::{Result, RtError};
use crate::region::Region;
use crate::sync::IgnorePoison;
use mosaic_rt_wire::DType;

pub(crate) struct Buffer {
    pub dtype: DType,
    /// Allocated (possibly padded) shape.
    pub shape: Vec<usize>,
    pub logical_shape: Vec<usize>,
    /// Changed only under the owning table shard's write lock.
    pub ref_count: AtomicU32,
    content: RwLock<Content>,
    /// initcheck: which elements were written (only with detection on).
    init: Option<InitShadow>,
}

/// Number of elements of `shape`, or a ValueError on overflow.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| RtError::value(format!("shape {} is too large", shape_repr(shape))))
}

impl Buffer {
    /// A buffer of `shape` filled with `fill` (one element's bytes), with
    /// `init` (C-order bytes of `logical_shape`) placed in the low corner.
    /// With `track_init` (initcheck), the elements `init` gives are marked
    /// written and all others not.
    pub fn new(
        dtype: DType,
        shape: &[usize],
        logical_shape: &[usize],
        fill: &[u8],
        init: Option<&[u8]>,
        ref_count: u32,
        track_init: bool,
    ) -> Result<Buffer> {
        let bytes = element_count(shape)?
            .checked_mul(dtype.itemsize())
            .ok_or_else(|| RtError::value(format!("shape {} is too large", shape_repr(shape))))?;
        let mut content = super::pool::take(bytes);
        if init.is_none() && content.len() >= bytes && bytes > 0 {
            // A reused allocation: its old bytes stand in until the first
            // access, which fills them unless it overwrites them all.
            content.truncate(bytes);
            return Ok(Buffer::with_content(
                dtype,
                shape,
                logical_shape,
                Content::Unfilled { v: content, pattern: fill.to_vec() },
                ref_count,
                track_init.then(|| InitShadow::new(element_count(shape)?)).transpose()?,
            ));
        }
        content.clear();
        content.try_reserve_exact(bytes).map_err(|_| {
            RtError::value(format!(
                "cannot allocate {bytes} bytes for a {} buffer of shape {}",
                dtype.name(),
                shape_repr(shape)
            ))
        })?;
        match init {
            // The whole content given: one pass, no fill.
            Some(init) if shape == logical_shape && init.len() == bytes => content.extend_from_slice(init),
            _ => {
                if init.is_none() || shape != logical_shape {
                    extend_with_pattern(&mut content, bytes, fill);
                } else {
                    content.resize(bytes, 0);
                }
                if let Some(init) = init {
                    let itemsize = dtype.itemsize();
                    let full = super::copy::StridedLayout::dense(logical_shape, itemsize);
                    let dst = super::copy::StridedLayout::dense(shape, itemsize);
                    super::copy::copy_block(init, &full, &mut content, &dst, logical_shape, itemsize);
                }
            }
        }
        let init_shadow = match track_init {
            false => None,
            true => {
                let shadow = InitShadow::new(element_count(shape)?)?;
                if init.is_some() {
                    let logical = super::copy::StridedLayout::dense(shape, 1);
                    let mut c = super::dims::Dims::new();
                    logical_shape.iter().for_each(|&n| c.push(n));
                    super::elements::Touched { len: 0, row: 1, counts: Some(c), at: logical }
                        .for_each_run(|start, len| shadow.mark_range(start, len));
                }
                Some(shadow)
            }
        };
        Ok(Buffer::with_content(dtype, shape, logical_shape, Content::Owned(content), ref_count, init_shadow))
    }

    fn with_content(
        dtype: DType,
        shape: &[usize],
        logical_shape: &[usize],
        content: Content,
        ref_count: u32,
        init: Option<InitShadow>,
    ) -> Buffer {
        Buffer {
            dtype,
            shape: shape.to_vec(),
            logical_shape: logical_shape.to_vec(),
            ref_count: AtomicU32::new(ref_count),
            content: RwLock::new(content),
            init,
        }
    }

    /// A buffer whose bytes are `len` bytes at `ptr`, borrowed read-only:
    /// every write fails (see [`Buffer::write`]). No fill and no initcheck
    /// shadow (the whole logical shape is the initial value).
    ///
    /// # Safety
    /// `ptr` must point to `len` readable bytes (`len` = the element count
    /// of `shape` times the itemsize; any pointer if `len` is 0) that stay
    /// valid and unmodified until [`Buffer::release_borrowed`] has run on
    /// this buffer or the buffer is dropped, whichever comes first.
    pub unsafe fn borrowed(
        dtype: DType,
        shape: &[usize],
        ptr: *const u8,
        len: usize,
        ref_count: u32,
    ) -> Result<Buffer> {
        let want = element_count(shape)?.checked_mul(dtype.itemsize());
        if want != Some(len) {
            return Err(RtError::internal(format!(
                "a borrowed {} buffer of shape {} needs {want:?} bytes, got {len}",
                dtype.name(),
                shape_repr(shape)
            )));
        }
        Ok(Buffer {
            dtype,
            shape: shape.to_vec(),
            logical_shape: shape.to_vec(),
            ref_count: AtomicU32::new(ref_count),
            // SAFETY: the caller's contract is `Content::borrowed`'s.
            content: RwLock::new(unsafe { Content::borrowed(ptr, len) }),
            init: None,
        })
    }

    /// A buffer whose bytes are XLA's result memory of an output (`len`
    /// bytes at `ptr`), written in place: it holds the fill values `fill`
    /// until written (lazily, as `Unfilled`), or with `fill` None the bytes
    /// already there (an input aliased to the output). No initcheck shadow
    /// (HBM).
    ///
    /// # Safety
    /// `ptr` must point to `len` writable bytes (`len` = the element count
    /// of `shape` times the itemsize, > 0) that nothing else reads or
    /// writes until [`Buffer::release_borrowed`] has run on this buffer or
    /// the buffer is dropped, whichever comes first.
    pub unsafe fn direct(
        dtype: DType,
        shape: &[usize],
        ptr: *mut u8,
        len: usize,
        fill: Option<&[u8]>,
        ref_count: u32,
    ) -> Result<Buffer> {
        let want = element_count(shape)?.checked_mul(dtype.itemsize());
        if want != Some(len) || len == 0 || ptr.is_null() {
            return Err(RtError::internal(format!(
                "a direct {} output buffer of shape {} needs {want:?} bytes at a non-null address, got {len}",
                dtype.name(),
                shape_repr(shape)
            )));
        }
        // SAFETY: the caller's contract is `Content::direct`'s.
        let content = unsafe { Content::direct(ptr, len, fill) };
        Ok(Buffer::with_content(dtype, shape, shape, content, ref_count, None))
    }

    /// XLA's result memory this buffer writes in place, as (address,
    /// length), while it does.
    pub fn direct_range(&self) -> Option<(usize, usize)> {
        self.content.read().ignore_poison().direct_range()
    }

    /// Ends a borrow (no-op for our own bytes): with `keep`, the bytes are
    /// copied into our own allocation (another thread may still read them);
    /// without, any later access fails (and XLA's result memory of a direct
    /// output is not written again). Waits for accesses in progress (the
    /// content's write lock), so once this returns nothing refers to the
    /// borrowed memory.
    pub fn release_borrowed(&self, keep: bool) {
        self.content.write().ignore_poison().release_borrowed(keep);
    }

    /// Ends a direct output's borrow at kernel end, writing its pending
    /// fill values into XLA's result memory first (see
    /// `Content::finish_direct`); waits for accesses in progress.
    pub fn finish_direct(&self) {
        self.content.write().ignore_poison().finish_direct();
    }

    /// The borrowed memory as (address, length), if borrowed.
    pub fn borrowed_range(&self) -> Option<(usize, usize)> {
        self.content.read().ignore_poison().borrowed_range()
    }

    /// Whether the bytes are borrowed (tests, diagnostics).
    pub fn is_borrowed(&self) -> bool {
        self.content.read().ignore_poison().is_borrowed()
    }

    /// The buffer's shapes, for its initcheck shadow's hooks.
    #[inline]
    fn shapes(&self) -> Shapes<'_> {
        Shapes { shape: &self.shape, logical: &self.logical_shape }
    }

    /// initcheck (a no-op unless `detect_uninitialized`): the `counts`
    /// block of `plan` was written ([`InitShadow::mark`]).
    #[inline]
    pub(crate) fn mark_initialized(&self, plan: &RegionPlan, counts: &[usize]) {
        if let Some(shadow) = &self.init {
            shadow.mark(self.shapes(), plan, counts);
        }
    }

    /// initcheck: the mask-selected elements of a block were written
    /// ([`InitShadow::mark_masked`]).
    pub(crate) fn mark_initialized_masked(&self, plan: &RegionPlan, block: Masked<'_>) {
        if let Some(shadow) = &self.init {
            shadow.mark_masked(self.shapes(), plan, block);
        }
    }

    /// initcheck: a read of the `counts` block of `plan` found every
    /// element written, else the error ([`InitShadow::check_read`]).
    #[inline]
    pub(crate) fn check_initialized(
        &self,
        plan: &RegionPlan,
        counts: Option<&[usize]>,
        who: &Who,
        region: &Region,
    ) -> Result<()> {
        match &self.init {
            Some(shadow) => shadow.check_read(self.shapes(), plan, counts, who, region),
            None => Ok(()),
        }
    }

    /// initcheck of a masked load ([`InitShadow::check_read_masked`]).
    pub(crate) fn check_initialized_masked(
        &self,
        plan: &RegionPlan,
        block: Masked<'_>,
        who: &Who,
        region: &Region,
    ) -> Result<()> {
        match &self.init {
            Some(shadow) => shadow.check_read_masked(self.shapes(), plan, block, who, region),
            None => Ok(()),
        }
    }

    pub fn info(&self) -> BufferInfo {
        BufferInfo {
            dtype: self.dtype,
            shape: self.shape.clone(),
            logical_shape: self.logical_shape.clone(),
            ref_count: self.ref_count.load(Ordering::Relaxed),
        }
    }

    /// Read access to the bytes (`who` names the buffer in the error of a
    /// borrow that has ended). Poisoning is ignored: a panic elsewhere is
    /// reported at the FFI boundary and must not wedge every other core.
    pub fn read(&self, who: &dyn std::fmt::Display) -> Result<ContentRead<'_>> {
        {
            let guard = self.content.read().ignore_poison();
            if !guard.fill_is_pending() {
                return ContentRead::new(guard, who);
            }
        }
        // Once filled a buffer stays filled, so the read below sees bytes.
        self.content.write().ignore_poison().fill_pending();
        ContentRead::new(self.content.read().ignore_poison(), who)
    }

    /// Write access to the bytes; an internal error for borrowed ones.
    /// `covers_all`: the caller overwrites every byte and cannot fail
    /// before it has (pending fill values are then skipped).
    pub fn write(&self, who: &dyn std::fmt::Display, covers_all: bool) -> Result<ContentWrite<'_>> {
        let mut guard = self.content.write().ignore_poison();
        guard.prepare_write(covers_all);
        ContentWrite::new(guard, who)
    }

    /// Whether a write through `plan` replaces every byte of this buffer.
    pub(crate) fn covered_by(&self, plan: &super::plan::RegionPlan) -> bool {
        self.shape == self.logical_shape && plan.covers(&self.shape)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let content = std::mem::replace(self.content.get_mut().ignore_poison(), Content::Released);
        if let Some(v) = content.into_allocation() {
            super::pool::give(v);
        }
    }
}
