//! The DMA engine. OWNER: semaphore/DMA helper.

use crate::error::Result;
use crate::memory::MemorySpace;
use crate::runtime::Runtime;
use crate::region::Region;

/// A DMA from a region of a buffer of (device, core) to a region of a buffer
/// of (dst_device, core): remote copies land on the same local core of the
/// target device.
#[derive(Clone, Debug)]
pub struct DmaRequest {
    pub device: u32,
    pub core: u32,
    pub src_space: MemorySpace,
    pub src_id: u32,
    pub src_region: Region,
    pub dst_space: MemorySpace,
    pub dst_id: u32,
    pub dst_region: Region,
    pub dst_sem: u32,
    /// Set exactly for remote copies (with `dst_device`).
    pub src_sem: Option<u32>,
    pub dst_device: Option<u32>,
}

/// Starts `req` on `rt` (eager: copies now; on_wait: queues the work).
pub fn start(rt: &Runtime, req: &DmaRequest) -> Result<()> {
    let _ = (rt, req);
    todo!()
}
