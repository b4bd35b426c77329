//! DMAs: start and wait. A start's call frame is decoded by
//! `dma_start_call` (its static attributes kept per call site by
//! `dma_plan`); a wait's is small enough to read here.

use super::core_target;
use super::dma_start_call::DmaStartCall;
use super::waits::{run_waits, trailing_count, trailing_waits, wait_bytes, Waits};
use crate::dispatch::Call;
use crate::launch;
use crate::wire::dma_wait as wait;
use mosaic_rt_core::Result;

/// `dma_start(token, handle, device, core, src_id, src_starts, dst_id,
/// dst_starts, dst_sem, src_sem, dst_device[, dst_core], waits..., tail...,
/// maps...) -> token` (the operands and attributes: see `dma_start_call`).
/// Starts the DMA, then runs its trailing waits.
pub fn dma_start(c: &mut Call) -> Result<()> {
    let DmaStartCall { handle, req, view, plan, waits_from } = DmaStartCall::decode(c)?;
    let (device, core) = (req.device, req.core);
    let _site = c.enter_site();
    launch::with_runtime(handle, move |rt| match view {
        None => rt.dma_start(req),
        Some(v) => rt.dma_start_view(req, v),
    })?;
    match &plan.waits {
        Some(w) => run_waits(&c.frame, handle, device, core, waits_from, Waits { bytes: &w.bytes, sites: &w.sites }),
        None => Ok(()),
    }
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
