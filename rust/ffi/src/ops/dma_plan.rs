//! A `dma_start`'s static attributes, parsed once per call site and thread.
//!
//! A SparseCore kernel starts hundreds of thousands of DMAs per call from a
//! few hundred call sites, and reading some twenty attributes by name per
//! DMA cost about as much as the rest of the op's parsing together. Every
//! call of one site has the same attributes, so the Python side gives each
//! `dma_start` the attribute `plan_key`: a 128-bit hash of all its other
//! attributes (but the site id, which the plan does not hold). The plan
//! parsed from them is kept per thread under that key; a later call with
//! the key reads only its operands. Keying by content (not by the frame's
//! address, which a later executable may reuse) makes a hit mean "the
//! same attributes"; a call without the key is parsed every time.

use super::waits::{trailing_count, trailing_waits};
use super::{space_attr, tail_len, StaticRegion, DST_REGION, SRC_REGION};
use crate::frame::Frame;
use crate::wire::{dma_start as start, RegionAttrs, ViewMaps, ViewUnits};
use mosaic_rt_core::{MemorySpace, Result, RtError, UnitLayout};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

/// Plans kept per thread before the table starts over: a kernel has at
/// most a few hundred DMA sites, and a test suite runs many kernels on
/// long-lived threads (a plan is ~0.5 KiB; starting over costs a parse).
const MAX_PLANS: usize = 2048;

/// The counts of a call's variable operands, read leniently before the
/// arity check (a malformed attribute counts 0; [`StartPlan::parse`]
/// reports it once the call is bound to its launch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Trailing waits (their semaphores).
    pub waits: usize,
    /// The regions' trailing starts.
    pub tail: usize,
    /// The view maps' operands.
    pub maps: usize,
}

impl Counts {
    pub fn read(f: &Frame) -> Counts {
        Counts { waits: trailing_count(f), tail: tail_len(f), maps: map_operands(lenient_maps(f)) }
    }
}

/// The `view_maps` bits, a malformed attribute read as 0 (no maps).
fn lenient_maps(f: &Frame) -> ViewMaps {
    ViewMaps(f.attr_i64_opt(start::attr::view_maps).ok().flatten().unwrap_or(0))
}

/// Operands the `view_maps` bits stand for: one per side with a map, one
/// more per side given as rows.
fn map_operands(maps: ViewMaps) -> usize {
    (maps.src_map() + maps.dst_map() + maps.src_rows() + maps.dst_rows()) as usize
}

/// How one side of a DMA is seen (decoded from its `view_maps` and
/// `view_units` fields, see `wire::ViewMaps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideView {
    /// Its region, no view.
    Region,
    /// Its region's bytes in order (no operand).
    Same,
    /// A map operand: in bytes (`None`) or in sub-byte units.
    Map(Option<UnitLayout>),
    /// A byte map given as rows: a pattern operand, then the rows' starts.
    Rows,
}

impl SideView {
    /// One side's fields: `map`, `same`, `rows` flags and the unit layout
    /// (`unit`, `region`, `view`; all 0 for bytes). `what` names the side.
    fn decode(op: &str, flags: [i64; 3], units: [i64; 3], what: &str) -> Result<SideView> {
        let [map, same, rows] = flags.map(|b| b != 0);
        let layout = (units != [0; 3]).then(|| {
            let [unit, region, view] = units.map(|u| u as u8);
            UnitLayout { unit, region, view }
        });
        if layout.is_some() && !map {
            return Err(RtError::value(format!("{op}: a {what} unit layout without a {what} map")));
        }
        Ok(match (map, same, rows) {
            (false, false, false) => SideView::Region,
            (false, true, false) => SideView::Same,
            (true, false, false) => SideView::Map(layout),
            (true, false, true) if layout.is_none() => SideView::Rows,
            (true, false, true) => {
                return Err(RtError::value(format!("{op}: a {what} map of rows in sub-byte units")));
            }
            _ => unreachable!("checked by ViewPlan::decode"),
        })
    }

    /// How many operands the side's map takes.
    pub fn operands(self) -> usize {
        match self {
            SideView::Region | SideView::Same => 0,
            SideView::Map(_) => 1,
            SideView::Rows => 2,
        }
    }
}

/// Both sides' views of a `dma_start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewPlan {
    pub src: SideView,
    pub dst: SideView,
}

impl ViewPlan {
    pub const NONE: ViewPlan = ViewPlan { src: SideView::Region, dst: SideView::Region };

    /// Checks and decodes the packed `view_maps` and `view_units` (the
    /// latter read only when there are maps) of op `op`.
    pub fn decode(op: &str, maps: ViewMaps, units: ViewUnits) -> Result<ViewPlan> {
        let map_and_same = maps.src_map() + maps.src_same() > 1 || maps.dst_map() + maps.dst_same() > 1;
        let rows_without_map = maps.src_rows() > maps.src_map() || maps.dst_rows() > maps.dst_map();
        if !maps.fits() || map_and_same || rows_without_map {
            return Err(RtError::value(format!("{op}: bad view_maps {}", maps.0)));
        }
        if maps.0 == 0 {
            return Ok(ViewPlan::NONE);
        }
        if !units.fits() {
            return Err(RtError::value(format!("{op}: bad view_units {}", units.0)));
        }
        let src = [maps.src_map(), maps.src_same(), maps.src_rows()];
        let dst = [maps.dst_map(), maps.dst_same(), maps.dst_rows()];
        Ok(ViewPlan {
            src: SideView::decode(op, src, [units.src_unit(), units.src_region(), units.src_view()], "source")?,
            dst: SideView::decode(op, dst, [units.dst_unit(), units.dst_region(), units.dst_view()], "destination")?,
        })
    }

    pub fn is_none(&self) -> bool {
        *self == ViewPlan::NONE
    }
}

/// One region's static attributes, owned.
#[derive(Debug)]
pub struct KeptRegion {
    sizes: Box<[i64]>,
    strides: Box<[i64]>,
    squeezed: Box<[i64]>,
    fixed: Option<Box<[i64]>>,
}

impl KeptRegion {
    fn read(f: &Frame, names: &RegionAttrs) -> Result<KeptRegion> {
        let s = StaticRegion::read(f, names)?;
        Ok(KeptRegion {
            sizes: s.sizes.into(),
            strides: s.strides.into(),
            squeezed: s.squeezed.into(),
            fixed: s.fixed.map(Into::into),
        })
    }

    pub fn as_static(&self) -> StaticRegion<'_> {
        StaticRegion {
            sizes: &self.sizes,
            strides: &self.strides,
            squeezed: &self.squeezed,
            fixed: self.fixed.as_deref(),
        }
    }
}

/// The trailing waits' sizes and sites (see `waits::WAITS`).
#[derive(Debug)]
pub struct TrailingWaits {
    pub bytes: Box<[i64]>,
    pub sites: Box<[i64]>,
}

/// Everything static about one `dma_start` call site.
#[derive(Debug)]
pub struct StartPlan {
    pub counts: Counts,
    pub waits: Option<TrailingWaits>,
    pub has_dst_device: Option<i64>,
    pub has_dst_core: Option<i64>,
    /// The sides' views (`view_maps`, `view_units`).
    pub view: ViewPlan,
    pub src_space: MemorySpace,
    pub dst_space: MemorySpace,
    pub src: KeptRegion,
    pub dst: KeptRegion,
}

impl StartPlan {
    /// Reads and checks the static attributes of `f` (a call already bound
    /// to its launch, its arity checked with `counts`).
    pub fn parse(f: &Frame, counts: Counts) -> Result<StartPlan> {
        let waits = trailing_waits(f)?.map(|w| TrailingWaits { bytes: w.bytes.into(), sites: w.sites.into() });
        let [has_dst_device, has_dst_core] = f.attrs_i64_opt([start::attr::has_dst_device, start::attr::has_dst_core]);
        let units = ViewUnits(f.attr_i64_opt(start::attr::view_units)?.unwrap_or(0));
        let view = ViewPlan::decode(f.op, lenient_maps(f), units)?;
        debug_assert_eq!(view.src.operands() + view.dst.operands(), counts.maps, "counted from the same fields");
        Ok(StartPlan {
            counts,
            waits,
            has_dst_device,
            has_dst_core,
            view,
            src_space: space_attr(f, start::attr::src_space)?,
            dst_space: space_attr(f, start::attr::dst_space)?,
            src: KeptRegion::read(f, &SRC_REGION)?,
            dst: KeptRegion::read(f, &DST_REGION)?,
        })
    }
}

/// The call's `plan_key` (two int64s), if it has a well-formed one (a
/// malformed key is no key: the call is parsed as one without).
pub fn key(f: &Frame) -> Option<u128> {
    match f.attr_i64s_opt(start::attr::plan_key) {
        Ok(Some(&[hi, lo])) => Some(u128::from(hi as u64) << 64 | u128::from(lo as u64)),
        _ => None,
    }
}

/// The keys are hashes already: their low bits are the map's hash.
#[derive(Default)]
struct KeyBits(u64);

impl Hasher for KeyBits {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Plans = HashMap<u128, Rc<StartPlan>, BuildHasherDefault<KeyBits>>;

thread_local! {
    static PLANS: RefCell<Plans> = const { RefCell::new(HashMap::with_hasher(BuildHasherDefault::new())) };
}

/// The plan kept under `key` on this thread.
pub fn cached(key: u128) -> Option<Rc<StartPlan>> {
    PLANS.with(|p| p.borrow().get(&key).cloned())
}

/// Keeps `plan` under `key` on this thread.
pub fn remember(key: u128, plan: Rc<StartPlan>) {
    PLANS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() >= MAX_PLANS {
            p.clear();
        }
        p.insert(key, plan);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_operands_count_one_per_map_and_one_more_per_map_of_rows() {
        assert_eq!(map_operands(ViewMaps(0)), 0);
        assert_eq!(map_operands(ViewMaps(1)), 1);
        assert_eq!(map_operands(ViewMaps(1 | 2)), 2);
        assert_eq!(map_operands(ViewMaps(1 | 16 | 2 | 32)), 4);
        assert_eq!(map_operands(ViewMaps(4 | 2)), 1, "a side of its region's bytes has no operand");
    }

    #[test]
    fn view_plans_decode_each_side_and_count_its_operands() {
        let maps =
            |fields: &[&str]| ViewMaps(ViewMaps::LAYOUT.pack(&fields.iter().map(|&f| (f, 1)).collect::<Vec<_>>()));
        let units = |side: &str| {
            let [unit, region, view] = ["unit", "region", "view"].map(|f| format!("{side}_{f}"));
            ViewUnits(ViewUnits::LAYOUT.pack(&[(&unit, 4), (&region, 4), (&view, 8)]))
        };
        let rows_and_same = maps(&["src_map", "src_rows", "dst_same"]);
        let plan = ViewPlan::decode("op", rows_and_same, ViewUnits(0)).unwrap();
        assert_eq!(plan, ViewPlan { src: SideView::Rows, dst: SideView::Same });
        assert_eq!(plan.src.operands() + plan.dst.operands(), map_operands(rows_and_same));
        let nibbles = UnitLayout { unit: 4, region: 4, view: 8 };
        let plan = ViewPlan::decode("op", maps(&["src_map", "dst_map"]), units("dst")).unwrap();
        assert_eq!(plan, ViewPlan { src: SideView::Map(None), dst: SideView::Map(Some(nibbles)) });
        assert!(ViewPlan::decode("op", ViewMaps(0), ViewUnits(-1)).unwrap().is_none(), "no maps: units unread");
        let undeclared = ViewMaps(ViewMaps::LAYOUT.mask() + 1);
        for (m, u, message) in [
            (undeclared, ViewUnits(0), "bad view_maps 64"),
            (maps(&["src_map", "src_same"]), ViewUnits(0), "bad view_maps 5"),
            (maps(&["dst_rows"]), ViewUnits(0), "bad view_maps 32"),
            (maps(&["src_map"]), ViewUnits(-1), "bad view_units -1"),
            (maps(&["dst_map"]), units("src"), "a source unit layout without a source map"),
            (maps(&["src_map", "src_rows"]), units("src"), "a source map of rows in sub-byte units"),
        ] {
            let e = ViewPlan::decode("op", m, u).unwrap_err();
            assert!(e.message.contains(message), "{m:?} {u:?}: {}", e.message);
        }
    }

    #[test]
    fn the_table_keeps_plans_by_key_and_starts_over_when_full() {
        let plan = |n: usize| {
            Rc::new(StartPlan {
                counts: Counts { waits: n, tail: 0, maps: 0 },
                waits: None,
                has_dst_device: None,
                has_dst_core: None,
                view: ViewPlan::NONE,
                src_space: MemorySpace::Vmem,
                dst_space: MemorySpace::Vmem,
                src: KeptRegion { sizes: [].into(), strides: [].into(), squeezed: [].into(), fixed: None },
                dst: KeptRegion { sizes: [].into(), strides: [].into(), squeezed: [].into(), fixed: None },
            })
        };
        let high = 7u128 << 64;
        remember(high | 1, plan(1));
        remember(1, plan(2));
        assert_eq!(cached(high | 1).unwrap().counts.waits, 1, "keys differing only in the high bits are apart");
        assert_eq!(cached(1).unwrap().counts.waits, 2);
        assert!(cached(3).is_none());
        for k in 0..MAX_PLANS as u128 {
            remember(1000 + k, plan(0));
        }
        assert!(cached(high | 1).is_none(), "a full table starts over");
        assert!(cached(1000 + MAX_PLANS as u128 - 1).is_some());
    }
}
