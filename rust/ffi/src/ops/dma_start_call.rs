//! One `dma_start` call frame, decoded in one place into one struct
//! ([`DmaStartCall`]): the call site's static attributes from its plan
//! (`dma_plan`, parsed once per site and thread), then the operands -- the
//! fixed ones, the destination core, the regions' trailing starts and the
//! view maps -- in the order the wire layout (`wire::dma_start`) puts them.
//!
//! Operands: `token, handle, device, core, src_id, src_starts, dst_id,
//! dst_starts, dst_sem, src_sem, dst_device[, dst_core]`, then the trailing
//! waits' semaphores (see [`super::waits::WAITS`]), then the regions'
//! trailing starts (attribute `tail_starts`, see [`super::region`]), then
//! the view maps: per side as its `view_maps` fields say (`wire::ViewMaps`),
//! source first; int32 vectors, see `DmaView`, each ending at its first
//! negative entry. Flags `has_dst_device` / `has_dst_core` say whether a
//! destination device / core is given (then any value is range-checked;
//! without them -1 means "not given"). `src_sem` is -1 for a local copy;
//! it and the destination device are given together (the runtime reports
//! stock's message otherwise). No destination core: the issuing core.

use super::dma_plan::{self, Counts, SideView, StartPlan};
use super::{core_target, region_of, target_arg, Tail, DST_REGION, SRC_REGION};
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::wire::dma_start as start;
use mosaic_rt_core::{DmaRequest, DmaView, Result, RtError, ViewEntries, ViewMap};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Everything one `dma_start` call asks for.
pub struct DmaStartCall {
    pub handle: u64,
    pub req: DmaRequest,
    /// The sides' views (`None`: both are their regions).
    pub view: Option<DmaView>,
    /// The call site's static attributes (its trailing waits).
    pub plan: Rc<StartPlan>,
    /// The first trailing wait's semaphore operand.
    pub waits_from: usize,
}

impl DmaStartCall {
    /// Decodes `c`'s frame, binding the call to its launch first (see
    /// `device_target`).
    pub fn decode(c: &mut Call) -> Result<DmaStartCall> {
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
        let f = &c.frame;
        let waits_from = f.num_args() - k - t - p;
        let mut tail = Tail::before(f, t, p);
        let dst_core = if waits_from > start::arg::dst_core {
            target_arg(f, handle, start::arg::dst_core, plan.has_dst_core, "destination core id")?
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
            dst_device: target_arg(f, handle, start::arg::dst_device, plan.has_dst_device, "destination device id")?,
            dst_core,
        };
        tail.finish(f)?;
        let view = match plan.view.is_none() {
            true => None,
            false => Some(view_maps(f, &plan, f.num_args() - p)?),
        };
        Ok(DmaStartCall { handle, req, view, plan, waits_from })
    }
}

/// The byte maps of a DMA through views, from operand `first` on.
fn view_maps(f: &Frame, plan: &StartPlan, first: usize) -> Result<DmaView> {
    let mut next = first;
    let mut take = |side: SideView, what: &str| -> Result<Option<ViewMap>> {
        let limit = if side == SideView::Rows { MAX_CACHED_PATTERN } else { MAX_CACHED_MAP };
        let map = match side {
            SideView::Region => return Ok(None),
            SideView::Same => return Ok(Some(ViewMap::Same)),
            SideView::Map(_) | SideView::Rows => decoded(f.op, f.arg(next)?.starts()?, what, limit)?,
        };
        next += 1;
        Ok(Some(match side {
            SideView::Map(None) => ViewMap::Bytes(map),
            SideView::Map(Some(layout)) => ViewMap::Units(map, layout),
            _ => {
                let starts = row_starts(f.op, f.arg(next)?.starts()?, what)?;
                next += 1;
                ViewMap::Bytes(Arc::new(ViewEntries::rows(&starts, &map)))
            }
        }))
    };
    let src = take(plan.view.src, "source")?;
    let dst = take(plan.view.dst, "destination")?;
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
