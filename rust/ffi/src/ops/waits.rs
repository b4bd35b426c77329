//! Trailing waits: the DMA waits a `dma_start` or `dma_wait` carries
//! after itself, read by the op (`dma.rs`) and by its cached plan
//! (`dma_plan.rs`), so they sit below both.

use crate::frame::Frame;
use crate::launch;
use crate::wire;
use mosaic_rt_core::{Result, RtError};

/// Trailing waits: a DMA start or wait followed in the kernel by more waits
/// (`.wait()` of a remote copy is a send wait and a receive wait) carries
/// them, so the pair or triple is one custom call instead of two or three
/// (each call costs XLA compile time and a thunk dispatch per launch).
/// Attributes `then_wait_bytes` and `then_wait_sites` (one entry per wait,
/// in program order); the waits' semaphores are the last operands. They run
/// after the op itself, exactly as separate `dma_wait`s would.
pub const WAITS: (&str, &str) = (wire::THEN_WAIT_BYTES, wire::THEN_WAIT_SITES);

#[derive(Clone, Copy)]
pub(super) struct Waits<'a> {
    pub(super) bytes: &'a [i64],
    pub(super) sites: &'a [i64],
}

/// How many trailing waits an op has (read before the arity check, which
/// needs it; malformed attributes are reported by [`trailing_waits`] once
/// the call is bound to its launch, see `device_target`).
pub(super) fn trailing_count(f: &Frame) -> usize {
    f.attr_i64s_opt(WAITS.0).ok().flatten().map_or(0, <[i64]>::len)
}

pub(super) fn trailing_waits<'a>(f: &Frame<'a>) -> Result<Option<Waits<'a>>> {
    let Some(bytes) = f.attr_i64s_opt(WAITS.0)? else { return Ok(None) };
    let sites = f.attr_i64s(WAITS.1)?;
    if sites.len() != bytes.len() {
        return Err(RtError::value(format!("{}: {} trailing wait sizes but {} sites", f.op, bytes.len(), sites.len())));
    }
    Ok(Some(Waits { bytes, sites }))
}

/// A wait's byte count (`bytes` attribute or trailing entry), never negative.
pub(super) fn wait_bytes(f: &Frame, bytes: i64) -> Result<i64> {
    if bytes < 0 {
        return Err(RtError::value(format!("{}: bytes must be >= 0, got {bytes}", f.op)));
    }
    Ok(bytes)
}

/// The trailing waits, their semaphores from operand `first` on.
pub(super) fn run_waits(f: &Frame, handle: u64, device: u32, core: u32, first: usize, w: Waits) -> Result<()> {
    for (k, (&bytes, &site)) in w.bytes.iter().zip(w.sites).enumerate() {
        let sem = f.arg_id(first + k, "semaphore id")?;
        let bytes = wait_bytes(f, bytes)?;
        let site = u32::try_from(site).unwrap_or(0);
        launch::with_runtime(handle, |rt| rt.dma_wait_at(device, core, sem, bytes, site))?;
    }
    Ok(())
}
