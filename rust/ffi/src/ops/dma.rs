//! DMAs: start and wait.

use super::dma_plan::{self, Counts, StartPlan};
use super::waits::{run_waits, trailing_count, trailing_waits, wait_bytes, Waits};
use super::{core_target, region_of, Tail, DST_REGION, SRC_REGION};
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire::{dma_start as start, dma_wait as wait};
use mosaic_rt_core::{DmaRequest, DmaView, Result, RtError, UnitLayout, ViewEntries, ViewMap};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// `dma_start(token, handle, device, core, src_id, src_starts, dst_id,
/// dst_starts, dst_sem, src_sem, dst_device[, dst_core], waits..., tail...)
/// -> token`.
///
/// Attributes: `src_space`, `src_sizes`, `src_strides`, `src_squeezed` and
/// the same with `dst_`; optional flags `has_dst_device` and `has_dst_core`
/// (0 or 1) say whether a destination device / core is given: then any value is
/// range-checked; without them -1 means "not given". `src_sem` is -1 for a
/// local copy; it and the destination device are given together (the
/// runtime reports stock's message otherwise). No destination core: the
/// issuing core. Optional trailing waits: see [`super::waits::WAITS`]; then the regions'
/// trailing starts (attribute `tail_starts`, see [`super::region`]). Last,
/// a DMA through ref views has its byte maps (attribute `view_maps`: 1 for
/// a source map, 2 for a destination map, in that order; int32 vectors,
/// see `DmaView`, each ending at its first negative entry; 4 and 8: the
/// source / destination view is its region's bytes in order, no operand;
/// 16 and 32, with 1 and 2: that side's map is given as rows, two operands
/// in its place, a pattern and the rows' starts, see `ViewEntries::rows`).
/// Bits combine. A map of sub-byte units (int4 views) has its
/// `UnitLayout` in attribute `view_units`: bits 0..12 for the source,
/// 16..28 for the destination, each `unit | region << 4 | view << 8`
/// (0: a byte map). Optional `plan_key`: a hash of the other attributes
/// but `site`, under which they are parsed once per thread (`dma_plan`).
pub fn dma_start(c: &mut Call) -> Result<()> {
    let key = dma_plan::key(&c.frame);
    let known = key.and_then(dma_plan::cached);
    let counts = known.as_ref().map_or_else(|| Counts::read(&c.frame), |p| p.counts);
    let (k, t, p) = (counts.waits, counts.tail, counts.maps);
    let fixed = start::arg::FIXED + k + t + p;
    let (handle, device, core) = core_target(c, fixed..=fixed + start::LAYOUT.optional_operands.len(), 1)?;
    let plan = match known {
        Some(plan) => plan,
        None => {
            let plan = Rc::new(StartPlan::parse(&c.frame, counts)?);
            if let Some(key) = key {
                dma_plan::remember(key, Rc::clone(&plan));
            }
            plan
        }
    };
    let _site = c.enter_site();
    let f = &c.frame;
    let base = f.num_args() - k - t - p;
    let mut tail = Tail::before(f, t, p);
    let dst_core = if base > start::arg::dst_core {
        super::target_arg(f, handle, start::arg::dst_core, plan.has_dst_core, "destination core id")?
    } else {
        None
    };
    let req = DmaRequest {
        device,
        core,
        src_space: plan.src_space,
        src_id: f.arg_id(start::arg::src_id, "source buffer id")?,
        src_region: region_of(f, &SRC_REGION, plan.src.as_static(), start::arg::src_starts, &mut tail)?,
        dst_space: plan.dst_space,
        dst_id: f.arg_id(start::arg::dst_id, "destination buffer id")?,
        dst_region: region_of(f, &DST_REGION, plan.dst.as_static(), start::arg::dst_starts, &mut tail)?,
        dst_sem: f.arg_id(start::arg::dst_sem, "destination semaphore id")?,
        src_sem: f.arg_opt_id(start::arg::src_sem, "source semaphore id")?,
        dst_device: super::target_arg(f, handle, start::arg::dst_device, plan.has_dst_device, "destination device id")?,
        dst_core,
    };
    tail.finish(f)?;
    let view = (plan.maps != 0).then(|| view_maps(f, plan.maps, plan.units, f.num_args() - p)).transpose()?;
    launch::with_runtime(handle, move |rt| match view {
        None => rt.dma_start(req),
        Some(v) => rt.dma_start_view(req, v),
    })?;
    match &plan.waits {
        Some(w) => run_waits(&c.frame, handle, device, core, base, Waits { bytes: &w.bytes, sites: &w.sites }),
        None => Ok(()),
    }
}

/// The byte maps of a DMA through views, from operand `first` on
/// (`maps`, `units`: the `view_maps` and `view_units` attributes, checked
/// by `StartPlan::parse`).
fn view_maps(f: &Frame, maps: i64, units: i64, first: usize) -> Result<DmaView> {
    let mut next = first;
    let mut take = |present: bool, same: bool, rows: bool, code: i64, what: &str| -> Result<Option<ViewMap>> {
        if code != 0 && !present {
            return Err(RtError::value(format!("{}: a {what} unit layout without a {what} map", f.op)));
        }
        if same {
            return Ok(Some(ViewMap::Same));
        }
        if !present {
            return Ok(None);
        }
        let limit = if rows { MAX_CACHED_PATTERN } else { MAX_CACHED_MAP };
        let m = decoded(f.op, f.arg(next)?.starts()?, what, limit)?;
        next += 1;
        let m = match rows {
            false => m,
            true => {
                if code != 0 {
                    return Err(RtError::value(format!("{}: a {what} map of rows in sub-byte units", f.op)));
                }
                let starts = row_starts(f.op, f.arg(next)?.starts()?, what)?;
                next += 1;
                Arc::new(ViewEntries::rows(&starts, &m))
            }
        };
        if code == 0 {
            return Ok(Some(ViewMap::Bytes(m)));
        }
        let layout = UnitLayout { unit: (code & 15) as u8, region: ((code >> 4) & 15) as u8, view: (code >> 8) as u8 };
        Ok(Some(ViewMap::Units(m, layout)))
    };
    let src = take(maps & 1 != 0, maps & 4 != 0, maps & 16 != 0, units & 0xfff, "source")?;
    let dst = take(maps & 2 != 0, maps & 8 != 0, maps & 32 != 0, units >> 16, "destination")?;
    Ok(DmaView { src, dst })
}

/// The row starts of a map given as rows: offsets, or `i32::MAX`
/// for a row whose index was out of bounds.
fn row_starts(op: &str, raw: &[i32], what: &str) -> Result<Vec<u32>> {
    raw.iter()
        .map(|&s| u32::try_from(s).map_err(|_| RtError::value(format!("{op}: {what} view row start {s} is negative"))))
        .collect()
}

/// Maps decoded lately on this thread: `(operand address, its entries as
/// given, decoded)`. A map is usually a constant of the program, the same
/// operand on every call, and a SparseCore kernel starts hundreds of
/// thousands of DMAs through a few maps per call; decoding one (and the
/// facts `ViewEntries` keeps) cost more than the DMA's copy. A hit is
/// checked by content, so a map computed in XLA into a reused buffer is
/// never mistaken for an earlier one.
struct DecodedMaps {
    slots: [Option<DecodedMap>; 4],
    next: usize,
}

/// Larger maps are decoded per DMA: their DMAs move as many bytes as
/// decoding reads, and a map computed in XLA per DMA would be copied into
/// the cache on every miss.
const MAX_CACHED_MAP: usize = 4096;

/// The pattern of a map given as rows is a constant of the program (only
/// the starts are computed per DMA): cached up to this many entries.
const MAX_CACHED_PATTERN: usize = 1 << 20;

/// `(operand address, its entries as given, decoded)`.
type DecodedMap = (usize, Box<[i32]>, Arc<ViewEntries>);

thread_local! {
    static DECODED: RefCell<DecodedMaps> = const { RefCell::new(DecodedMaps { slots: [None, None, None, None], next: 0 }) };
}

/// The entries of a view map operand (`raw`) of op `op`, from the cache or
/// decoded (and cached if it has at most `limit` entries).
fn decoded(op: &str, raw: &[i32], what: &str, limit: usize) -> Result<Arc<ViewEntries>> {
    let at = raw.as_ptr() as usize;
    let hit = DECODED.with(|d| {
        let d = d.borrow();
        d.slots.iter().flatten().find(|(a, r, _)| *a == at && **r == *raw).map(|(_, _, m)| Arc::clone(m))
    });
    if let Some(m) = hit {
        return Ok(m);
    }
    // A map ends at its first negative entry: made for the largest size
    // of a slice of traced size, it holds -1 past the actual one.
    let m = Arc::new(ViewEntries::until_negative(raw));
    if raw[m.len()..].iter().any(|&b| b >= 0) {
        return Err(RtError::value(format!("{op}: {what} view map has offsets after its end")));
    }
    if raw.len() > limit {
        return Ok(m);
    }
    DECODED.with(|d| {
        let mut d = d.borrow_mut();
        let k = d.next;
        d.slots[k] = Some((at, raw.into(), Arc::clone(&m)));
        d.next = (k + 1) % d.slots.len();
    });
    Ok(m)
}

/// `dma_wait(token, handle, device, core, sem) -> token`; attribute `bytes`
/// (the size of the transferred region, known at trace time). Optional
/// trailing waits: see [`super::waits::WAITS`].
pub fn dma_wait(c: &mut Call) -> Result<()> {
    let k = trailing_count(&c.frame);
    let n = wait::arg::FIXED + k;
    let (handle, device, core) = core_target(c, n..=n, 1)?;
    let waits = trailing_waits(&c.frame)?;
    let sem = c.frame.arg_id(wait::arg::sem, "semaphore id")?;
    let bytes = wait_bytes(&c.frame, c.frame.attr_i64(wait::attr::bytes)?)?;
    let site = c.site();
    launch::with_runtime(handle, |rt| rt.dma_wait_at(device, core, sem, bytes, site))?;
    match waits {
        Some(w) => run_waits(&c.frame, handle, device, core, wait::arg::FIXED, w),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_operand_reused_with_other_entries_is_decoded_again() {
        let mut raw = vec![3, 2, 1, 0, -1];
        let first = decoded("op", &raw, "source", MAX_CACHED_MAP).unwrap();
        assert_eq!(&first[..], [3, 2, 1, 0]);
        assert!(
            Arc::ptr_eq(&first, &decoded("op", &raw, "source", MAX_CACHED_MAP).unwrap()),
            "the same entries: cached"
        );
        // XLA reuses the buffer for a map computed per DMA.
        raw[..4].copy_from_slice(&[0, 1, 2, 3]);
        assert_eq!(&decoded("op", &raw, "source", MAX_CACHED_MAP).unwrap()[..], [0, 1, 2, 3]);
        raw[3..].copy_from_slice(&[-1, 7]);
        let err = decoded("op", &raw, "source", MAX_CACHED_MAP).unwrap_err();
        assert!(err.message.contains("op: source view map has offsets after its end"), "{}", err.message);
    }
}
