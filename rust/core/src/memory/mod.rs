//! Simulated memory: buffers keyed (memory space, buffer id, device, core).
//!
//! OWNER: memory helper. Implement `MemoryTable`; keep the signatures used by
//! `runtime.rs` (adjust them there too if you must).

use crate::config::{Config, Topology};
use crate::dtype::DType;
use crate::error::Result;
use crate::region::Region;

/// TPU memory spaces, numbered as stock interpret mode numbers them
/// (`mosaic_core.MemorySpace` order, then pallas `ANY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemorySpace {
    Vmem = 0,
    VmemShared = 1,
    Smem = 2,
    Cmem = 3,
    Semaphore = 4,
    Hbm = 5,
    Any = 6,
}

impl MemorySpace {
    pub fn from_code(code: i64) -> Result<MemorySpace> {
        use MemorySpace::*;
        Ok(match code {
            0 => Vmem,
            1 => VmemShared,
            2 => Smem,
            3 => Cmem,
            4 => Semaphore,
            5 => Hbm,
            6 => Any,
            _ => {
                return Err(crate::error::RtError::value(format!("unknown memory space code {code}")))
            }
        })
    }
    /// Stock's name (used in error messages).
    pub fn name(self) -> &'static str {
        use MemorySpace::*;
        match self {
            Vmem => "vmem",
            VmemShared => "vmem_shared",
            Smem => "smem",
            Cmem => "cmem",
            Semaphore => "semaphore_mem",
            Hbm => "hbm",
            Any => "any",
        }
    }
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

pub struct MemoryTable {
    // TODO(memory helper)
}

#[allow(unused_variables, clippy::too_many_arguments)]
impl MemoryTable {
    pub fn new(config: &Config) -> Self {
        todo!()
    }
    pub fn allocate(
        &self,
        topo: &Topology,
        device: u32,
        core: Option<u32>,
        space: MemorySpace,
        dtype: DType,
        shape: &[usize],
        logical_shape: Option<&[usize]>,
        init: Init<'_>,
    ) -> Result<u32> {
        todo!()
    }
    pub fn free(&self, topo: &Topology, device: u32, core: u32, space: MemorySpace, id: u32) -> Result<()> {
        todo!()
    }
    pub fn info(&self, key: BufferKey) -> Result<BufferInfo> {
        todo!()
    }
    pub fn content(&self, key: BufferKey) -> Result<Vec<u8>> {
        todo!()
    }
    pub fn region_shape(&self, key: BufferKey, region: &Region) -> Result<Vec<usize>> {
        todo!()
    }
    pub fn load(
        &self,
        topo: &Topology,
        device: u32,
        core: u32,
        space: MemorySpace,
        id: u32,
        region: &Region,
        out: &mut [u8],
    ) -> Result<()> {
        todo!()
    }
    pub fn store(
        &self,
        topo: &Topology,
        device: u32,
        core: u32,
        space: MemorySpace,
        id: u32,
        region: &Region,
        data: &[u8],
    ) -> Result<()> {
        todo!()
    }
    pub fn swap(
        &self,
        topo: &Topology,
        device: u32,
        core: u32,
        space: MemorySpace,
        id: u32,
        region: &Region,
        data: &[u8],
        mask: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<()> {
        todo!()
    }
}
