//! DMAs: start and wait.

use super::{core_target, region, space_attr, DST_REGION, SRC_REGION};
use crate::dispatch::Call;
use crate::launch;
use mosaic_rt_core::{DmaRequest, Result, RtError};

/// `dma_start(token, handle, device, core, src_id, src_starts, dst_id,
/// dst_starts, dst_sem, src_sem, dst_device[, dst_core]) -> token`.
///
/// Attributes: `src_space`, `src_sizes`, `src_strides`, `src_squeezed` and
/// the same with `dst_`; optional flags `has_dst_device` and `has_dst_core`
/// (0 or 1) say whether a destination device / core is given: then any value is
/// range-checked; without them -1 means "not given". `src_sem` is -1 for a
/// local copy; it and the destination device are given together (the
/// runtime reports stock's message otherwise). No destination core: the
/// issuing core.
pub fn dma_start(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, 11..=12, 1)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let [has_device, has_core] = f.attrs_i64_opt(["has_dst_device", "has_dst_core"]);
    let dst_core =
        if f.num_args() == 12 { super::target_arg(f, handle, 11, has_core, "destination core id")? } else { None };
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
        dst_device: super::target_arg(f, handle, 10, has_device, "destination device id")?,
        dst_core,
    };
    launch::with_runtime(handle, move |rt| rt.dma_start(req))
}

/// `dma_wait(token, handle, device, core, sem) -> token`; attribute `bytes`
/// (the size of the transferred region, known at trace time).
pub fn dma_wait(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, 5..=5, 1)?;
    let sem = c.frame.arg_id(4, "semaphore id")?;
    let bytes = c.frame.attr_i64("bytes")?;
    if bytes < 0 {
        return Err(RtError::value(format!("dma_wait: bytes must be >= 0, got {bytes}")));
    }
    let site = c.site();
    launch::with_runtime(handle, |rt| rt.dma_wait_at(device, core, sem, bytes, site))
}
