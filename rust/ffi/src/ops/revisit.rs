//! The interpreter's output-revisit check: coming back to an output block
//! after moving on is an error, as in stock interpret mode. The runtime
//! keeps each output's history; this op only reads the step's blocks.

use super::{core_target, region, Tail};
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire::check_revisit as revisit;
use mosaic_rt_core::{DimSel, Region, Result, RtError};

/// `check_revisit(token, handle, device, core, loop_idx, starts) -> token`.
///
/// Attributes: `ranks` (per output: its block rank, or -1 when the output is
/// not tracked) and the concatenated `sizes`/`strides`/`squeezed` of the
/// tracked outputs, whose starts are concatenated in operand `starts`.
pub fn check_revisit(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, revisit::arg::FIXED..=revisit::arg::FIXED, 1)?;
    let f = &c.frame;
    let loop_idx: Vec<i64> = f.arg(revisit::arg::loop_idx)?.i32s()?.iter().map(|&i| i as i64).collect();
    let all = region(f, &super::REGION, revisit::arg::starts, &mut Tail::none())?;
    let blocks = split_blocks(f, all)?;
    launch::with_runtime(handle, |rt| rt.check_revisit(device, core, &loop_idx, &blocks))
}

fn split_blocks(f: &Frame, all: Region) -> Result<Vec<Option<Region>>> {
    let mut dims = all.dims.into_iter();
    let mut blocks = Vec::new();
    for &rank in f.attr_i64s(revisit::attr::ranks)? {
        if rank < 0 {
            blocks.push(None);
            continue;
        }
        let part: Vec<DimSel> = dims.by_ref().take(rank as usize).collect();
        if part.len() != rank as usize {
            return Err(RtError::value("check_revisit: ranks exceed the given dimensions"));
        }
        blocks.push(Some(Region::new(part)));
    }
    if dims.next().is_some() {
        return Err(RtError::value("check_revisit: more dimensions than ranks account for"));
    }
    Ok(blocks)
}
