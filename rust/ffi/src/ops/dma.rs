//! DMAs: start and wait.

use super::{core_target, region, space_attr, DST_REGION, SRC_REGION};
use crate::dispatch::Call;
use crate::launch;
use mosaic_rt_core::{DmaRequest, Result, RtError};

/// `dma_start(token, handle, device, core, src_id, src_starts, dst_id,
/// dst_starts, dst_sem, src_sem, dst_device) -> token`.
/// `src_sem` and `dst_device` are -1 for a local copy (both or neither must
/// be set; the runtime reports stock's message otherwise). Attributes:
/// `src_space`, `src_sizes`, `src_strides`, `src_squeezed` and the same
/// with `dst_`.
pub fn dma_start(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, 11..=11, 1)?;
    let f = &c.frame;
    let req = DmaRequest {
        device,
        core,
        src_space: space_attr(f, "src_space")?,
        src_id: f.arg_id(4, "source buffer id")?,
        src_region: region(f, &SRC_REGION, 5)?,
        dst_space: space_attr(f, "dst_space")?,
        dst_id: f.arg_id(6, "destination buffer id")?,
        dst_region: region(f, &DST_REGION, 7)?,
        dst_sem: f.arg_id(8, "destination semaphore id")?,
        src_sem: f.arg_opt_id(9, "source semaphore id")?,
        dst_device: f.arg_opt_id(10, "destination device id")?,
    };
    launch::with_runtime(handle, |rt| rt.dma_start(&req))
}

/// `dma_wait(token, handle, device, core, sem) -> token`; attribute `bytes`
/// (the size of the transferred region, known at trace time).
pub fn dma_wait(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, 5..=5, 1)?;
    let sem = c.frame.arg_id(4, "semaphore id")?;
    let bytes = c.frame.attr_i64("bytes")?;
    if bytes < 0 {
        return Err(RtError::value(format!(
            "dma_wait: bytes must be >= 0, got {bytes}"
        )));
    }
    launch::with_runtime(handle, |rt| rt.dma_wait(device, core, sem, bytes))
}
