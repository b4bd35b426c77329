//! Shared builders of this crate's integration tests (each test file that
//! uses them declares `mod common;`): the `DmaRequest`s the tests start
//! from, so a new field of a request is given its default here only (tests
//! set what they need with `DmaRequest { field, ..dma(...) }`).
#![allow(dead_code)]

use mosaic_rt_core::{DmaRequest, MemorySpace, Region};

/// A local DMA on device 0, core 0: the whole of HBM buffer `src` into the
/// whole of VMEM buffer `dst`, signalling `sem`.
pub fn dma(src: u32, dst: u32, sem: u32) -> DmaRequest {
    DmaRequest {
        device: 0,
        core: 0,
        src_space: MemorySpace::Hbm,
        src_id: src,
        src_region: Region::full(),
        dst_space: MemorySpace::Vmem,
        dst_id: dst,
        dst_region: Region::full(),
        dst_sem: sem,
        src_sem: None,
        dst_device: None,
        dst_core: None,
    }
}

/// A remote DMA from core 0 of `device` to device `dst_device`: the whole
/// of VMEM buffer `src` into the whole of VMEM buffer `dst`, signalling
/// `send` here and `recv` there.
pub fn remote_dma(device: u32, dst_device: u32, src: u32, dst: u32, (send, recv): (u32, u32)) -> DmaRequest {
    DmaRequest {
        device,
        src_space: MemorySpace::Vmem,
        src_sem: Some(send),
        dst_device: Some(dst_device),
        ..dma(src, dst, recv)
    }
}
