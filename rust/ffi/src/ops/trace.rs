//! The grid-step marker op of timelines (`grid_step`). Writing a launch's
//! trace file is the process-wide service `crate::trace_files`.
//!
//! May use: `crate::dispatch`, `crate::launch`, `super` (operand helpers).

use super::core_target;
use crate::dispatch::Call;
use crate::launch;
use crate::wire::grid_step as wire;
use mosaic_rt_core::{Result, RtError};

/// `grid_step(token, handle, device, core, indices) -> token`: a grid step
/// of (device, core) begins (attribute `phase="begin"`; `indices` are its
/// int32 grid indices) or ends (`phase="end"`). A no-op without tracing.
pub fn grid_step(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, wire::arg::FIXED..=wire::arg::FIXED, 1)?;
    let f = &c.frame;
    let begin = match f.attr_str(wire::attr::phase)? {
        "begin" => true,
        "end" => false,
        p => return Err(RtError::value(format!("grid_step: phase must be 'begin' or 'end', got {p:?}"))),
    };
    launch::with_runtime(handle, |rt| {
        rt.topology().check(device, core)?;
        if let Some(t) = rt.tracer() {
            let indices: Vec<i64> = f.arg(wire::arg::indices)?.i32s()?.iter().map(|&i| i as i64).collect();
            t.grid_step(device, core, &indices, begin);
        }
        Ok(())
    })
}
