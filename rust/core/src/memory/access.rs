//! Loads, stores, swaps and buffer-to-buffer copies, with stock interpret
//! mode's bounds rules: reads are clipped to the ALLOCATED shape (and raise
//! or return fill values when clipped), writes must lie within the allocated
//! shape and only the part within the LOGICAL shape is written.

use std::sync::Arc;

use super::buffer::Buffer;
use super::copy::{contiguous_offset, copy_block, fill_pattern, for_each_element, StridedLayout};
use super::init_shadow::Masked;
use super::message::{self, Who};
use super::plan::RegionPlan;
use super::smem_scalar;
use super::{Access, MemRef, MemorySpace, MemoryTable, Stored};
use crate::config::OobReads;
use crate::error::{Result, RtError};

/// What a read does with the part of its region outside the buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OobRule {
    /// Fails with an out-of-bounds error (stock's "raise").
    Raise,
    /// Reads the fill value there (stock's "uninitialized").
    Fill,
    /// Reads the fill value there and reports the load once per source
    /// line: a TPU does not bounds-check vector or scalar loads, and
    /// kernels rely on it (a software-pipelined loop that prefetches one
    /// row past the end on its last trip and never uses it).
    FillAndReport,
}

/// A region resolved and checked for an access ([`MemoryTable::checked`]).
pub struct CheckedAccess<'r> {
    r: MemRef<'r>,
    res: Resolved,
}

impl CheckedAccess<'_> {
    /// The bytes of the region's value.
    pub fn bytes(&self) -> usize {
        self.res.bytes
    }
}

/// One access resolved: the buffer, the plan and the result shape.
pub(super) struct Resolved {
    pub(super) who: Who,
    pub(super) buf: Arc<Buffer>,
    pub(super) plan: RegionPlan,
    pub(super) full: super::dims::Dims<usize>,
    /// Bytes of a full-shape value.
    pub(super) bytes: usize,
}

impl Resolved {
    fn check_len(&self, what: &str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(message::wrong_len(&self.who, what, got, &self.full, want));
        }
        Ok(())
    }
    pub(super) fn itemsize(&self) -> usize {
        self.buf.dtype.itemsize()
    }
    fn dense(&self) -> StridedLayout {
        StridedLayout::dense(&self.full, self.itemsize())
    }
}

impl MemoryTable {
    pub(super) fn resolve(&self, r: MemRef<'_>, action: &str) -> Result<Resolved> {
        self.topo.check(r.device, r.core)?;
        let key = r.key();
        let buf = self.get(key, action)?;
        let plan = RegionPlan::new(r.region, &buf.logical_shape)?;
        let full = plan.full_shape();
        let who = Who { device: r.device, core: r.core, space: r.space, id: r.id };
        let bytes = full
            .iter()
            .try_fold(buf.dtype.itemsize(), |acc, &n| acc.checked_mul(n))
            .ok_or_else(|| RtError::value(format!("region {} of {who} is too large", r.region.python_repr())))?;
        Ok(Resolved { who, buf, plan, full, bytes })
    }

    /// Reads `r` into `out` (C order, exactly the region's size), as a DMA
    /// reads its source.
    pub fn load(&self, r: MemRef<'_>, out: &mut [u8]) -> Result<()> {
        self.read_into(r, out, Access::Read)
    }

    /// A kernel's own load of `r` (`ref[...]`): [`Self::load`], but under
    /// out-of-bounds reads "tpu" a VMEM or SMEM region outside its buffer
    /// reads as on a TPU (see [`OobRule`]).
    pub fn kernel_load(&self, r: MemRef<'_>, out: &mut [u8]) -> Result<()> {
        self.read_into(r, out, Access::Load)
    }

    /// What a read of `space` by `access` (`Read` or `Load`) does outside
    /// its buffer.
    fn oob_rule(&self, space: MemorySpace, access: Access) -> OobRule {
        match self.oob_reads {
            OobReads::Raise => OobRule::Raise,
            OobReads::Uninitialized => OobRule::Fill,
            OobReads::Tpu if access == Access::Load && matches!(space, MemorySpace::Vmem | MemorySpace::Smem) => {
                OobRule::FillAndReport
            }
            OobReads::Tpu => OobRule::Raise,
        }
    }

    fn read_into(&self, r: MemRef<'_>, out: &mut [u8], access: Access) -> Result<()> {
        // Scalar SMEM reads outside the array follow the TPU (`smem_scalar`)
        // unless the rule says raise (`out_of_bounds_reads="raise"`, or a
        // DMA's read): a negative index before `resolve` (which rejects
        // it), one past the end where reads leave the buffer below.
        if smem_scalar::is_scalar_smem(&r) && smem_scalar::has_negative_index(&r) {
            let buf = self.get(r.key(), "read")?;
            if self.oob_rule(r.space, access) == OobRule::Raise {
                let who = Who { device: r.device, core: r.core, space: r.space, id: r.id };
                return Err(message::oob_read(&who, r.region, &buf.logical_shape));
            }
            if self.read_outside_smem(r, &buf, out) {
                return Ok(());
            }
        }
        let res = self.resolve(r, "read")?;
        res.check_len("out", out.len(), res.bytes)?;
        self.read_resolved(r, &res, out, access)
    }

    /// The read of [`Self::read_into`] once `r` is resolved to `res` (and
    /// `out` checked to be its size).
    fn read_resolved(&self, mem_ref: MemRef<'_>, r: &Resolved, out: &mut [u8], access: Access) -> Result<()> {
        let region = mem_ref.region;
        let itemsize = r.itemsize();
        let in_bounds = r.plan.clip(&r.buf.shape);
        if in_bounds.as_deref() == Some(&*r.full) {
            r.buf.check_initialized(&r.plan, in_bounds.as_deref(), &r.who, region)?;
            let src = r.plan.buffer_layout(&r.buf.shape, itemsize);
            copy_block(&r.buf.read(&r.who)?, &src, out, &r.dense(), &r.full, itemsize);
            return Ok(());
        }
        let rule = self.oob_rule(mem_ref.space, access);
        if rule != OobRule::Raise
            && smem_scalar::is_scalar_smem(&mem_ref)
            && self.read_outside_smem(mem_ref, &r.buf, out)
        {
            return Ok(());
        }
        if rule == OobRule::Raise {
            return Err(message::oob_read(&r.who, region, &r.buf.logical_shape));
        }
        r.buf.check_initialized(&r.plan, in_bounds.as_deref(), &r.who, region)?;
        if rule == OobRule::FillAndReport {
            self.report_unchecked_load(&r.who, region, &r.buf.logical_shape, false);
        }
        // "uninitialized": fill values, with the in-bounds part in the low corner.
        fill_pattern(out, &self.fill.bytes_of(r.buf.dtype));
        if let Some(counts) = in_bounds {
            let src = r.plan.buffer_layout(&r.buf.shape, itemsize);
            copy_block(&r.buf.read(&r.who)?, &src, out, &r.dense(), &counts, itemsize);
        }
        Ok(())
    }

    /// A masked load (`pl.load(ref, mask=...)`): reads the elements of `r`
    /// where `mask` (one byte per element of the value, non-zero = true) is
    /// set into `out` and gives every masked-off element the fill value
    /// (uninitialized memory: `Config::fill`). Masked-off elements are
    /// never read: they may lie out of bounds, are not checked by
    /// initcheck, and are not read. A selected element out of bounds is an
    /// error with `out_of_bounds_reads="raise"`, else it reads the fill
    /// value too (as an unmasked out-of-bounds read does).
    pub fn load_masked(&self, r: MemRef<'_>, mask: &[u8], out: &mut [u8]) -> Result<()> {
        let region = r.region;
        let r = self.resolve(r, "read")?;
        r.check_len("out", out.len(), r.bytes)?;
        let itemsize = r.itemsize();
        r.check_len("mask", mask.len(), r.bytes / itemsize)?;
        let selected = mask.iter().filter(|&&m| m != 0).count();
        let in_bounds = r.plan.clip(&r.buf.shape);
        let mask_layout = StridedLayout::dense(&r.full, 1);
        let mut selected_in_bounds = 0usize;
        if let Some(counts) = &in_bounds {
            for_each_element(counts, &mask_layout, &mask_layout, |m, _| {
                selected_in_bounds += (mask[m] != 0) as usize;
            });
        }
        if selected_in_bounds != selected {
            match self.oob_rule(r.who.space, Access::Load) {
                OobRule::Raise => return Err(message::oob_masked_read(&r.who, region, &r.buf.logical_shape)),
                OobRule::FillAndReport => self.report_unchecked_load(&r.who, region, &r.buf.logical_shape, true),
                OobRule::Fill => {}
            }
        }
        fill_pattern(out, &self.fill.bytes_of(r.buf.dtype));
        let Some(counts) = in_bounds else { return Ok(()) };
        if selected_in_bounds == 0 {
            return Ok(());
        }
        let block = Masked { counts: &counts, full: &r.full, mask };
        r.buf.check_initialized_masked(&r.plan, block, &r.who, region)?;
        let content = r.buf.read(&r.who)?;
        let at = r.plan.buffer_layout(&r.buf.shape, itemsize);
        for_each_element(&counts, &at, &r.dense(), |a, d| {
            if mask[d / itemsize] != 0 {
                out[d..d + itemsize].copy_from_slice(&content[a..a + itemsize]);
            }
        });
        Ok(())
    }

    /// Writes `data` (C order, exactly the region's size) into `r`.
    pub fn store(&self, r: MemRef<'_>, data: &[u8]) -> Result<()> {
        let res = self.resolve(r, "write")?;
        res.check_len("data", data.len(), res.bytes)?;
        if res.plan.any_out_of(&res.buf.shape) {
            return Err(message::oob_write(&res.who, r.region, &res.buf.logical_shape));
        }
        self.store_resolved(&res, data)
    }

    /// A DMA's read of a region checked by [`Self::checked`] for
    /// [`Access::Read`]: [`Self::load`] without resolving it again.
    pub fn load_checked(&self, c: &CheckedAccess<'_>, out: &mut [u8]) -> Result<()> {
        c.res.check_len("out", out.len(), c.res.bytes)?;
        self.read_resolved(c.r, &c.res, out, Access::Read)
    }

    /// A DMA's write of a region checked by [`Self::checked`] for
    /// [`Access::Write`]: [`Self::store`] without resolving it again.
    pub fn store_checked(&self, c: &CheckedAccess<'_>, data: &[u8]) -> Result<()> {
        c.res.check_len("data", data.len(), c.res.bytes)?;
        self.store_resolved(&c.res, data)
    }

    /// The write of a checked store.
    fn store_resolved(&self, r: &Resolved, data: &[u8]) -> Result<()> {
        // Only the part within the logical shape is written (from data's low corner).
        if let Some(counts) = r.plan.clip(&r.buf.logical_shape) {
            let itemsize = r.itemsize();
            let dst = r.plan.buffer_layout(&r.buf.shape, itemsize);
            copy_block(data, &r.dense(), &mut r.buf.write(&r.who, r.buf.covered_by(&r.plan))?, &dst, &counts, itemsize);
            r.buf.mark_initialized(&r.plan, &counts);
        }
        Ok(())
    }

    /// [`Self::store`] of the `len` bytes `fill` produces. A region that
    /// is one contiguous run within the logical shape is filled in place
    /// (a DMA arriving from another process lands without a staging
    /// copy); any other is staged and stored. `fill` is called at most
    /// once, and not at all when the store fails first.
    pub fn store_from(&self, r: MemRef<'_>, len: usize, fill: &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()> {
        let region = r.region;
        let res = self.resolve(r, "write")?;
        res.check_len("data", len, res.bytes)?;
        if res.plan.any_out_of(&res.buf.shape) {
            return Err(message::oob_write(&res.who, region, &res.buf.logical_shape));
        }
        let itemsize = res.itemsize();
        let counts = res.plan.clip(&res.buf.logical_shape);
        let whole = counts.as_ref().is_some_and(|c| c[..] == res.full[..]);
        if let (true, Some(counts)) = (whole, &counts) {
            let layout = res.plan.buffer_layout(&res.buf.shape, itemsize);
            if let Some(at) = contiguous_offset(&layout, counts, itemsize) {
                // Not `covers_all`: `fill` may fail part-way.
                let mut bytes = res.buf.write(&res.who, false)?;
                fill(&mut bytes[at..at + len])?;
                drop(bytes);
                res.buf.mark_initialized(&res.plan, counts);
                return Ok(());
            }
        }
        let mut staged = vec![0u8; len];
        fill(&mut staged)?;
        self.store(r, &staged)
    }

    /// Writes `data` into `r` where `mask` is set (everywhere without one)
    /// and puts the previous values into `out`.
    pub fn swap(&self, r: MemRef<'_>, data: &[u8], mask: Option<&[u8]>, out: &mut [u8]) -> Result<()> {
        self.swap_value(r, Stored::Dense(data), mask, Some(out))
    }

    /// [`Self::swap`] of a value that may be a splat; without `out` the
    /// previous values are not copied out (a swap whose result is unused).
    pub fn swap_value(
        &self,
        r: MemRef<'_>,
        value: Stored<'_>,
        mask: Option<&[u8]>,
        out: Option<&mut [u8]>,
    ) -> Result<()> {
        let region = r.region;
        let r = self.resolve(r, "swap")?;
        let itemsize = r.itemsize();
        r.check_len("data", value.bytes().len(), value.expected_len(r.bytes, itemsize))?;
        if let Some(out) = &out {
            r.check_len("out", out.len(), r.bytes)?;
        }
        if let Some(mask) = mask {
            r.check_len("mask", mask.len(), r.bytes / itemsize)?;
        }
        let logical = &r.buf.logical_shape;
        let oob = || match mask {
            None => message::oob_swap(&r.who, region, logical),
            Some(_) => message::oob_masked_swap(&r.who, region, logical),
        };
        let mut content = r.buf.write(&r.who, false)?;
        let in_bounds = r.plan.clip(&r.buf.shape).ok_or_else(oob)?;
        let at = r.plan.buffer_layout(&r.buf.shape, itemsize);
        let dense = r.dense();
        let write_counts = r.plan.clip(logical);
        let Some(mask) = mask else {
            if *in_bounds != *r.full {
                return Err(oob());
            }
            if let Some(out) = out {
                copy_block(&content, &at, out, &dense, &r.full, itemsize);
            }
            if let Some(counts) = write_counts {
                let (data, from) = value.source(&r.full, itemsize)?;
                copy_block(&data, &from, &mut content, &at, &counts, itemsize);
                r.buf.mark_initialized(&r.plan, &counts);
            }
            return Ok(());
        };
        // Every selected (mask-true) element must be in bounds.
        let mask_layout = StridedLayout::dense(&r.full, 1);
        let mut selected_in_bounds = 0usize;
        for_each_element(&in_bounds, &mask_layout, &mask_layout, |m, _| {
            selected_in_bounds += (mask[m] != 0) as usize;
        });
        if selected_in_bounds != mask.iter().filter(|&&m| m != 0).count() {
            return Err(oob());
        }
        // out = where(mask, old, data); then content = where(mask, data, old)
        // within the logical shape.
        let data = value.dense(r.bytes)?;
        if let Some(out) = out {
            out.copy_from_slice(&data);
            for_each_element(&in_bounds, &at, &dense, |a, d| {
                if mask[d / itemsize] != 0 {
                    out[d..d + itemsize].copy_from_slice(&content[a..a + itemsize]);
                }
            });
        }
        if let Some(counts) = write_counts {
            for_each_element(&counts, &at, &dense, |a, d| {
                if mask[d / itemsize] != 0 {
                    content[a..a + itemsize].copy_from_slice(&data[d..d + itemsize]);
                }
            });
            r.buf.mark_initialized_masked(&r.plan, Masked { counts: &counts, full: &r.full, mask });
        }
        Ok(())
    }

    /// Checks `r` for `access` as the access itself would (same errors:
    /// bad ids, bad regions, out-of-bounds reads when they raise,
    /// out-of-bounds writes and unmasked swaps) without moving data, and
    /// returns the bytes of the value. Lets callers refuse a huge region
    /// before allocating room for it.
    pub fn check_access(&self, r: MemRef<'_>, access: Access) -> Result<usize> {
        self.checked(r, access).map(|c| c.bytes())
    }

    /// [`Self::check_access`], keeping the resolved region for the access
    /// itself ([`Self::load_checked`], [`Self::store_checked`]): a small
    /// DMA through a view otherwise looked its buffer up and planned its
    /// region twice per side.
    pub fn checked<'r>(&self, r: MemRef<'r>, access: Access) -> Result<CheckedAccess<'r>> {
        let res = self.resolve(r, access.name())?;
        let in_bounds = || res.plan.clip(&res.buf.shape).as_deref() == Some(&*res.full);
        match access {
            Access::Read | Access::Load if self.oob_rule(r.space, access) == OobRule::Raise && !in_bounds() => {
                Err(message::oob_read(&res.who, r.region, &res.buf.logical_shape))
            }
            Access::Write if res.plan.any_out_of(&res.buf.shape) => {
                Err(message::oob_write(&res.who, r.region, &res.buf.logical_shape))
            }
            Access::Swap if !in_bounds() => Err(message::oob_swap(&res.who, r.region, &res.buf.logical_shape)),
            _ => Ok(CheckedAccess { r, res }),
        }
    }

    /// The bytes of `r`'s value, checked as [`Self::check_copy`] checks
    /// each side (ids, region; no bounds).
    pub fn check_region_bytes(&self, r: MemRef<'_>) -> Result<usize> {
        Ok(self.resolve(r, "access")?.bytes)
    }

    /// Checks that `src` can be copied to `dst` (both exist, the regions are
    /// valid, same dtype and shape: the checks and messages of [`Self::copy`])
    /// and returns the bytes a copy would move. Bounds are not checked: a
    /// queued DMA reports them when it runs, as an eager one would.
    pub fn check_copy(&self, src: MemRef<'_>, dst: MemRef<'_>) -> Result<usize> {
        let s = self.resolve(src, "read")?;
        let d = self.resolve(dst, "write")?;
        same_dtype_and_shape(&s, &d)?;
        Ok(s.bytes)
    }

    /// Copies `src` to `dst` with load-then-store semantics (the read's
    /// bounds errors first, then the write's) and returns the bytes moved
    /// (the full region size, as DMA semaphores count). When the read is in
    /// bounds, bytes go buffer to buffer with no intermediate copy.
    pub fn copy(&self, src: MemRef<'_>, dst: MemRef<'_>) -> Result<usize> {
        let s = self.resolve(src, "read")?;
        let d = self.resolve(dst, "write")?;
        same_dtype_and_shape(&s, &d)?;
        if s.bytes == 0 {
            // An empty copy (a slice of size 0) touches nothing, wherever it
            // starts: a DMA of 0 bytes at the end of an array runs on a TPU.
            return Ok(0);
        }
        let read_in_bounds = s.plan.clip(&s.buf.shape).as_deref() == Some(&*s.full);
        if !read_in_bounds || Arc::ptr_eq(&s.buf, &d.buf) {
            // Rare paths (padding fill, copies within one buffer): go through a
            // temporary -- after the checks the load and the store would make,
            // so that a huge out-of-bounds region fails without allocating.
            if !read_in_bounds && self.oob_rule(src.space, Access::Read) == OobRule::Raise {
                return Err(message::oob_read(&s.who, src.region, &s.buf.logical_shape));
            }
            if d.plan.any_out_of(&d.buf.shape) {
                return Err(message::oob_write(&d.who, dst.region, &d.buf.logical_shape));
            }
            let mut tmp = zeroed(s.bytes, || format!("a copy of {} of {}", src.region.python_repr(), s.who))?;
            self.load(src, &mut tmp)?;
            self.store(dst, &tmp)?;
            return Ok(s.bytes);
        }
        if d.plan.any_out_of(&d.buf.shape) {
            return Err(message::oob_write(&d.who, dst.region, &d.buf.logical_shape));
        }
        s.buf.check_initialized(&s.plan, Some(&s.full), &s.who, src.region)?;
        let Some(counts) = d.plan.clip(&d.buf.logical_shape) else {
            return Ok(s.bytes);
        };
        let itemsize = s.itemsize();
        let from = s.plan.buffer_layout(&s.buf.shape, itemsize);
        let to = d.plan.buffer_layout(&d.buf.shape, itemsize);
        // Lock in address order so two opposite copies cannot deadlock.
        let (src_bytes, mut dst_bytes);
        if Arc::as_ptr(&s.buf) < Arc::as_ptr(&d.buf) {
            src_bytes = s.buf.read(&s.who)?;
            dst_bytes = d.buf.write(&d.who, d.buf.covered_by(&d.plan))?;
        } else {
            dst_bytes = d.buf.write(&d.who, d.buf.covered_by(&d.plan))?;
            src_bytes = s.buf.read(&s.who)?;
        }
        copy_block(&src_bytes, &from, &mut dst_bytes, &to, &counts, itemsize);
        d.buf.mark_initialized(&d.plan, &counts);
        Ok(s.bytes)
    }
}

/// The two sides of a copy must agree in dtype and shape.
fn same_dtype_and_shape(s: &Resolved, d: &Resolved) -> Result<()> {
    if s.buf.dtype != d.buf.dtype || *s.full != *d.full {
        return Err(RtError::value(format!(
            "cannot copy {} {} of {} into {} {} of {}: dtypes or shapes differ",
            s.buf.dtype.name(),
            message::shape_repr(&s.full),
            s.who,
            d.buf.dtype.name(),
            message::shape_repr(&d.full),
            d.who
        )));
    }
    Ok(())
}

/// `n` zero bytes, or a MemoryError naming `what` (never an abort).
pub(crate) fn zeroed(n: usize, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    if v.try_reserve_exact(n).is_err() {
        return Err(RtError::memory(format!("cannot allocate {n} bytes for {}", what())));
    }
    v.resize(n, 0);
    Ok(v)
}
