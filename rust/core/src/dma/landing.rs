//! `dma_execution_mode="tpu"`: a DMA to another core (a remote copy, or a
//! copy to another core of the device) reads its source at its start and
//! lands -- writes its destination and signals its receive semaphore --
//! at the destination core's next synchronisation point, run on that
//! core's own thread (`sem::inbox`).
//!
//! Why this is the TPU's order: a core runs its straight-line code (loads,
//! stores, compute) without waiting, while a copy to another core crosses
//! the interconnect; so a copy never lands between two stores of the
//! destination, only where the destination can let time pass -- a wait, a
//! semaphore read, the block copies between grid steps (the pipeline's DMA
//! waits on a TPU), a buffer free, the end of its program. A destination
//! that zeroes its output block and then waits therefore keeps what a
//! neighbour sends (jax's remote-DMA ppermute tests), as on a TPU. The
//! source is read at the start, as the DMA engine reads it once issued, so
//! a buffer reused after the start sends its old bytes (tpu-inference's
//! GDN kernels rely on that for local copies, which stay eager).
//!
//! For a kernel without races (by Pallas's rules) this is one more legal
//! schedule: its results are those of `eager` and `on_wait`. The race
//! detector still names both lines of a racing pair.
//!
//! Under "eager" a copy to another core lands here too when its
//! destination buffer does not exist yet (`dma::lands_later`).
//!
//! A destination buffer that does not exist yet (the destination core has
//! not reached the kernel: a sender may run ahead of it) is checked when
//! the copy lands; one that exists is checked at the start, as in the
//! other modes.

use super::{note_started, trace_begin, DmaEnv, DmaMachine, DmaRequest, DmaRoute, DmaStep, DmaView, QueuedDma};
use crate::error::{Result, RtError};
use crate::memory::MemRef;
use crate::site;
use crate::sync::Arc;

/// Starts `req`, a DMA whose destination core is not the issuing core.
pub(super) fn start(env: &DmaEnv, req: DmaRequest, view: Option<DmaView>, plan: DmaRoute) -> Result<()> {
    let bytes = checked_bytes(env, &req, view.as_ref(), &plan)?;
    let bytes = i64::try_from(bytes).map_err(|_| RtError::value(format!("DMA of {bytes} bytes is too large")))?;
    let plan = DmaRoute { bytes, ..plan };
    let race = env.races.map(|races| races.dma_begin(req.device, req.core));
    let trace = trace_begin(env, &req);
    let dma = Arc::new(QueuedDma { req, view, plan, machine: DmaMachine::new(), race, site: site::current(), trace });
    // The read now (it signals the send semaphore of a remote copy).
    dma.machine.read(|| dma.load_source(env))?;
    note_started(env, &dma.req, &plan, bytes);
    if let Some(step) = env.sems.send_to_core(plan.dst_gcore, DmaStep::Write(dma)) {
        // The destination's program has ended: nothing of it can observe
        // the order any more, so the copy lands now.
        step.run(env)?;
    }
    Ok(())
}

/// The bytes the DMA moves, after the checks made at its start (both sides
/// exist, same dtype and shape) -- of the source alone while a destination
/// on another core does not exist yet (on_wait checks the same way).
pub(super) fn checked_bytes(env: &DmaEnv, req: &DmaRequest, view: Option<&DmaView>, plan: &DmaRoute) -> Result<usize> {
    let (src, dst) = (req.src(), req.dst(plan));
    let checked = match view {
        None => env.memory.check_copy(src, dst),
        Some(v) => {
            let region_bytes = |m: MemRef<'_>| env.memory.check_region_bytes(m);
            region_bytes(dst).and_then(|d| v.check(region_bytes(src)?, d))
        }
    };
    match checked {
        Err(_) if plan.dst_gcore != plan.src_gcore && env.memory.info(dst.key()).is_err() => {
            let src_bytes = env.memory.check_region_bytes(src)?;
            match view {
                None => Ok(src_bytes),
                Some(v) => v.source_bytes(src_bytes),
            }
        }
        other => other,
    }
}
