//! `Runtime::semaphore_take`: the whole count of a semaphore a kernel
//! returns, after the DMAs queued on it have run; the semaphore is left at 0
//! (no leak), in both DMA modes, locally and across devices.

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{Config, DType, DmaMode, DmaRequest, Init, MemorySpace, Runtime, SemKind};
use std::time::Duration;

fn runtime(devices: u32, mode: DmaMode) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        cores_per_device: 1,
        dma_mode: mode,
        wait_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    })
    .unwrap()
}

fn buffer(rt: &Runtime, device: u32, values: &[f32]) -> u32 {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let shape = [values.len()];
    let spec = BufferSpec { init: Init::Bytes(&bytes), ..BufferSpec::new(MemorySpace::Hbm, DType::F32, &shape) };
    rt.allocate_buffer(device, Some(0), spec).unwrap()
}

fn content(rt: &Runtime, device: u32, id: u32) -> Vec<f32> {
    let key = mosaic_rt_core::BufferKey { space: MemorySpace::Hbm, id, device, core: 0 };
    rt.buffer_bytes(key).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn copy(device: u32, src: u32, dst: u32, sems: (Option<u32>, u32), dst_device: Option<u32>) -> DmaRequest {
    DmaRequest { device, dst_space: MemorySpace::Hbm, src_sem: sems.0, dst_device, ..common::dma(src, dst, sems.1) }
}

#[test]
fn take_runs_a_queued_local_copy_and_returns_its_bytes() {
    for mode in [DmaMode::Tpu, DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(1, mode);
        let src = buffer(&rt, 0, &[1.0, 2.0, 3.0]);
        let dst = buffer(&rt, 0, &[0.0; 3]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        rt.dma_start(copy(0, src, dst, (None, sem), None)).unwrap();
        assert_eq!(rt.semaphore_take(0, 0, sem).unwrap(), 12, "{mode:?}");
        assert_eq!(content(&rt, 0, dst), vec![1.0, 2.0, 3.0], "{mode:?}");
        assert_eq!(rt.semaphore_read(0, 0, sem).unwrap(), 0);
        assert!(rt.leaks(None).unwrap().is_empty(), "{mode:?}");
    }
}

#[test]
fn take_of_two_copies_on_one_semaphore_counts_both() {
    let rt = runtime(1, DmaMode::OnWait);
    let src = buffer(&rt, 0, &[4.0, 5.0]);
    let a = buffer(&rt, 0, &[0.0; 2]);
    let b = buffer(&rt, 0, &[0.0; 2]);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    rt.dma_start(copy(0, src, a, (None, sem), None)).unwrap();
    rt.dma_start(copy(0, src, b, (None, sem), None)).unwrap();
    assert_eq!(rt.semaphore_take(0, 0, sem).unwrap(), 16);
    assert_eq!(content(&rt, 0, a), vec![4.0, 5.0]);
    assert_eq!(content(&rt, 0, b), vec![4.0, 5.0]);
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn take_of_a_regular_semaphore_is_its_signals() {
    let rt = runtime(1, DmaMode::OnWait);
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 2).unwrap();
    rt.semaphore_signal(0, 0, sem + 1, 5, None, None).unwrap();
    rt.semaphore_signal(0, 0, sem + 1, 2, None, None).unwrap();
    assert_eq!(rt.semaphore_take(0, 0, sem).unwrap(), 0);
    assert_eq!(rt.semaphore_take(0, 0, sem + 1).unwrap(), 7);
    assert_eq!(rt.semaphore_take(0, 0, sem + 1).unwrap(), 0);
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn remote_copy_taken_on_both_ends() {
    for mode in [DmaMode::Tpu, DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(2, mode);
        let src = buffer(&rt, 0, &[7.0, 8.0]);
        let dst = buffer(&rt, 1, &[0.0; 2]);
        let send = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let recv = rt.allocate_semaphores(1, None, SemKind::Dma, 1).unwrap();
        assert_eq!(send, recv);
        rt.dma_start(copy(0, src, dst, (Some(send), recv), Some(1))).unwrap();
        // The receiver first: it runs the whole copy (the read signals the
        // sender's semaphore).
        assert_eq!(rt.semaphore_take(1, 0, recv).unwrap(), 8, "{mode:?}");
        assert_eq!(content(&rt, 1, dst), vec![7.0, 8.0], "{mode:?}");
        assert_eq!(rt.semaphore_take(0, 0, send).unwrap(), 8, "{mode:?}");
        assert!(rt.leaks(None).unwrap().is_empty(), "{mode:?}");
    }
}

#[test]
fn take_of_an_unknown_semaphore_is_an_error() {
    let rt = runtime(1, DmaMode::Eager);
    let err = rt.semaphore_take(0, 0, 4321).unwrap_err();
    assert!(err.to_string().contains("4321"), "{err}");
}
