//! DMAs through ref views (`DmaView`): byte maps on either side, in eager
//! and on_wait modes; semaphores count the view's bytes; bad maps are
//! value errors at the start.

use mosaic_rt_core::{
    BufferKey, BufferSpec, Config, DType, DmaMode, DmaRequest, DmaView, ErrorKind, Init, MemorySpace, Region, Runtime,
    SemKind, ViewMap,
};
use std::sync::Arc;
use std::time::Duration;

fn runtime(mode: DmaMode) -> Runtime {
    Runtime::new(Config { dma_mode: mode, wait_timeout: Some(Duration::from_secs(60)), ..Config::default() }).unwrap()
}

/// A u8 buffer of `bytes` in `space` of device 0, core 0.
fn buffer(rt: &Runtime, space: MemorySpace, bytes: &[u8]) -> u32 {
    let spec =
        BufferSpec { space, dtype: DType::U8, shape: &[bytes.len()], logical_shape: None, init: Init::Bytes(bytes) };
    rt.allocate_buffer(0, Some(0), spec).unwrap()
}

fn bytes(rt: &Runtime, space: MemorySpace, id: u32) -> Vec<u8> {
    rt.buffer_bytes(BufferKey { space, id, device: 0, core: 0 }).unwrap()
}

fn request(src: u32, dst: u32, sem: u32) -> DmaRequest {
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

fn map(m: &[u32]) -> Option<ViewMap> {
    Some(ViewMap::Bytes(Arc::from(m)))
}

#[test]
fn maps_gather_the_source_and_scatter_into_the_destination() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[10, 11, 12, 13, 14, 15]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 5]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        // 3 bytes: source bytes 5, 0, 2 into destination bytes 4, 1, 3 (0 and 2 keep theirs).
        let view = DmaView { src: map(&[5, 0, 2]), dst: map(&[4, 1, 3]) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 3).unwrap();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), [0, 10, 0, 12, 15], "{mode:?}");
        assert!(rt.leaks(None).unwrap().is_empty(), "{mode:?}: the semaphore counted the view's 3 bytes");
    }
}

#[test]
fn same_bytes_views_only_need_equal_byte_counts() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: Some(ViewMap::Same), dst: map(&[3, 2, 1, 0]) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 4).unwrap();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), [4, 3, 2, 1], "{mode:?}");
    }
}

#[test]
fn bad_maps_fail_at_the_start() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let outside = DmaView { src: map(&[0, 9]), dst: map(&[0, 1]) };
        let e = rt.dma_start_view(request(src, dst, sem), outside).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value, "{mode:?}");
        assert!(e.message.contains("source view reaches outside its region of 4 bytes (byte 9)"), "{}", e.message);
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let sizes = DmaView { src: map(&[0, 1]), dst: Some(ViewMap::Same) };
        let e = rt.dma_start_view(request(src, dst, sem), sizes).unwrap_err();
        assert!(e.message.contains("2 bytes") && e.message.contains("4"), "{mode:?}: {}", e.message);
    }
}

#[test]
fn a_full_length_map_with_repeats_keeps_the_bytes_it_misses() {
    // A scatter with a repeated index: as long as the region, yet byte 3 is
    // not written and must keep its value (a length shortcut zeroed it).
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[9; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: None, dst: map(&[0, 0, 1, 2]) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 4).unwrap();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), [2, 3, 4, 9], "{mode:?}");
    }
}
