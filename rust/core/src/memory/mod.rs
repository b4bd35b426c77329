//! Simulated memory: buffers keyed (memory space, buffer id, device, core).
//!
//! Semantics follow stock interpret mode (`shared_memory.Buffer`,
//! `interpret_pallas_call.get/store/swap`): see `table.rs` (allocation,
//! lookup) and `access.rs` (load, store, swap, copy).

mod access;
mod buffer;
mod content;
mod copy;
mod dims;
mod elements;
mod fill;
mod init_shadow;
mod message;
mod piece_copy;
mod plan;
mod pool;
mod recent;
mod smem_scalar;
mod stored;
pub(crate) mod table;
mod unchecked_load;

pub(crate) use access::zeroed;
pub use fill::FillBytes;
pub(crate) use init_shadow::slice_notation;
pub(crate) use piece_copy::{Piece, MAX_PIECES};
pub use pool::pooled_bytes;
pub use stored::Stored;
pub(crate) use table::MemoryTable;

use crate::region::Region;
use mosaic_rt_wire::wire_enum;
use mosaic_rt_wire::DType;

wire_enum! {
    /// TPU memory spaces, numbered as stock interpret mode numbers them
    /// (`mosaic_core.MemorySpace` order, then pallas `ANY`): the code is the
    /// declaration index, and the one table of codes that Python uses
    /// (`_native.MEMORY_SPACES`). The spelling is stock's (error messages).
    pub enum MemorySpace as setting "memory space" {
        Vmem = 0 => "vmem",
        VmemShared = 1 => "vmem_shared",
        Smem = 2 => "smem",
        Cmem = 3 => "cmem",
        Semaphore = 4 => "semaphore_mem",
        Hbm = 5 => "hbm",
        Any = 6 => "any",
    }
}

impl MemorySpace {
    /// HBM/ANY buffers are shared by the cores of a device (key core 0).
    pub fn is_shared_by_cores(self) -> bool {
        matches!(self, MemorySpace::Hbm | MemorySpace::Any)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferKey {
    pub space: MemorySpace,
    pub id: u32,
    pub device: u32,
    /// 0 for HBM/ANY.
    pub core: u32,
}

impl BufferKey {
    /// The key of buffer (space, id) as seen from (device, core): HBM/ANY
    /// buffers are shared by the cores of a device and keyed with core 0.
    pub fn for_access(space: MemorySpace, id: u32, device: u32, core: u32) -> BufferKey {
        let core = if space.is_shared_by_cores() { 0 } else { core };
        BufferKey { space, id, device, core }
    }
}

impl std::fmt::Display for BufferKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} buffer {} of device {}, core {}", self.space.name(), self.id, self.device, self.core)
    }
}

wire_enum! {
    /// The kind of access `Runtime::check_access` checks.
    pub enum Access as setting "access" {
        /// A DMA's read (bounds always checked unless out-of-bounds reads
        /// are "uninitialized").
        Read = 0 => "read",
        /// A kernel's own load (`ref[...]`): unchecked in VMEM and SMEM under
        /// out-of-bounds reads "tpu".
        Load = 1 => "load",
        Write = 2 => "write",
        /// An unmasked swap (every element read and written).
        Swap = 3 => "swap",
    }
}

/// A region of buffer (space, id) accessed from (device, core): what every
/// load, store, swap and copy names.
#[derive(Clone, Copy, Debug)]
pub struct MemRef<'a> {
    pub device: u32,
    pub core: u32,
    pub space: MemorySpace,
    pub id: u32,
    pub region: &'a Region,
}

impl<'a> MemRef<'a> {
    pub fn new(device: u32, core: u32, space: MemorySpace, id: u32, region: &'a Region) -> Self {
        MemRef { device, core, space, id, region }
    }

    /// The key of the buffer it names (see [`BufferKey::for_access`]).
    #[inline]
    pub fn key(&self) -> BufferKey {
        BufferKey::for_access(self.space, self.id, self.device, self.core)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferInfo {
    pub dtype: DType,
    /// Allocated (possibly padded) shape.
    pub shape: Vec<usize>,
    pub logical_shape: Vec<usize>,
    pub ref_count: u32,
}

/// Initial contents of a new buffer.
#[derive(Clone, Copy, Debug)]
pub enum Init<'a> {
    /// The configured fill value (NaN / int max / zero).
    Fill,
    /// C-order bytes of the logical shape; padding gets the fill value.
    Bytes(&'a [u8]),
}

/// What buffer to allocate (where -- device, core -- is the caller's other
/// argument): its memory space, dtype, allocated (possibly padded) shape,
/// user-visible shape (`None`: the allocated one) and initial contents.
#[derive(Clone, Copy, Debug)]
pub struct BufferSpec<'a> {
    pub space: MemorySpace,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub logical_shape: Option<&'a [usize]>,
    pub init: Init<'a>,
}

impl<'a> BufferSpec<'a> {
    /// An unpadded buffer holding the fill value.
    pub fn new(space: MemorySpace, dtype: DType, shape: &'a [usize]) -> Self {
        BufferSpec { space, dtype, shape, logical_shape: None, init: Init::Fill }
    }
}
