//! The DMA engine: local and remote copies in eager and on_wait modes,
//! semaphore byte counts, validation.

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{
    Config, DType, DimSel, DmaMode, DmaRequest, ErrorKind, Init, MemorySpace, Region, Runtime, SemKind,
};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

fn runtime(devices: u32, cores: u32, mode: DmaMode) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        cores_per_device: cores,
        dma_mode: mode,
        wait_timeout: Some(Duration::from_secs(120)),
        ..Config::default()
    })
    .unwrap()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn as_f32(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// An f32 buffer of `n` elements on (device, core), filled with `first..`.
fn buffer(rt: &Runtime, device: u32, core: u32, space: MemorySpace, n: usize, first: f32) -> u32 {
    let values: Vec<f32> = (0..n).map(|i| first + i as f32).collect();
    rt.allocate_buffer(
        device,
        Some(core),
        BufferSpec { init: Init::Bytes(&f32_bytes(&values)), ..BufferSpec::new(space, DType::F32, &[n]) },
    )
    .unwrap()
}

/// A zero-filled f32 VMEM buffer of `n` elements on (device, core).
fn zeros(rt: &Runtime, device: u32, core: u32, n: usize) -> u32 {
    rt.allocate_buffer(
        device,
        Some(core),
        BufferSpec { init: Init::Bytes(&vec![0u8; 4 * n]), ..BufferSpec::new(MemorySpace::Vmem, DType::F32, &[n]) },
    )
    .unwrap()
}

fn content(rt: &Runtime, device: u32, core: u32, space: MemorySpace, id: u32) -> Vec<f32> {
    let core = if space.is_shared_by_cores() { 0 } else { core };
    as_f32(&rt.buffer_bytes(mosaic_rt_core::BufferKey { space, id, device, core }).unwrap())
}

fn local(core: u32, src: u32, dst: u32, sem: u32) -> DmaRequest {
    DmaRequest { core, ..common::dma(src, dst, sem) }
}

fn remote(src_device: u32, core: u32, dst_device: u32, src: u32, dst: u32, sems: (u32, u32)) -> DmaRequest {
    DmaRequest { core, ..common::remote_dma(src_device, dst_device, src, dst, sems) }
}

#[test]
fn local_eager_copies_at_start_and_signals_bytes() {
    let rt = runtime(1, 1, DmaMode::Eager);
    let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 8, 1.0);
    let dst = zeros(&rt, 0, 0, 8);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    rt.dma_start(local(0, src, dst, sem)).unwrap();
    assert_eq!(content(&rt, 0, 0, MemorySpace::Vmem, dst), (1..=8).map(|x| x as f32).collect::<Vec<_>>());
    assert_eq!(rt.semaphore_read(0, 0, sem).unwrap(), 32);
    rt.dma_wait(0, 0, sem, 32).unwrap();
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn local_on_wait_copies_when_waited_on() {
    let rt = runtime(1, 2, DmaMode::OnWait);
    let src = buffer(&rt, 0, 1, MemorySpace::Hbm, 6, 10.0);
    let dst = zeros(&rt, 0, 1, 4);
    let sem = rt.allocate_semaphores(0, Some(1), SemKind::Dma, 1).unwrap();
    let mut req = local(1, src, dst, sem);
    req.src_region = Region::new(vec![DimSel::slice(2, 4, 1)]);
    rt.dma_start(req.clone()).unwrap();
    assert_eq!(content(&rt, 0, 1, MemorySpace::Vmem, dst), vec![0.0; 4]);
    assert_eq!(rt.semaphore_read(0, 1, sem).unwrap(), 0);
    rt.dma_wait(0, 1, sem, 16).unwrap();
    assert_eq!(content(&rt, 0, 1, MemorySpace::Vmem, dst), vec![12.0, 13.0, 14.0, 15.0]);
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn strided_region_counts_its_own_bytes() {
    let rt = runtime(1, 1, DmaMode::Eager);
    let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 8, 0.0);
    let dst = buffer(&rt, 0, 0, MemorySpace::Vmem, 3, -1.0);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let mut req = local(0, src, dst, sem);
    req.src_region = Region::new(vec![DimSel::slice(1, 3, 3)]);
    rt.dma_start(req.clone()).unwrap();
    assert_eq!(rt.semaphore_read(0, 0, sem).unwrap(), 12);
    assert_eq!(content(&rt, 0, 0, MemorySpace::Vmem, dst), vec![1.0, 4.0, 7.0]);
}

fn remote_setup(mode: DmaMode) -> (Runtime, DmaRequest) {
    let rt = runtime(2, 2, mode);
    let src = buffer(&rt, 0, 1, MemorySpace::Vmem, 4, 5.0);
    let dst = zeros(&rt, 1, 1, 4);
    let send = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let recv = rt.allocate_semaphores(1, None, SemKind::Dma, 1).unwrap();
    assert_eq!(send, recv);
    let req = remote(0, 1, 1, src, dst, (send, recv));
    (rt, req)
}

#[test]
fn remote_eager_signals_send_on_source_and_recv_on_destination_core() {
    let (rt, req) = remote_setup(DmaMode::Eager);
    rt.dma_start(req.clone()).unwrap();
    let sem = req.dst_sem;
    // Same local core (1) on both devices; nothing on core 0.
    assert_eq!(rt.semaphore_read(0, 1, sem).unwrap(), 16);
    assert_eq!(rt.semaphore_read(1, 1, sem).unwrap(), 16);
    assert_eq!(rt.semaphore_read(0, 0, sem).unwrap(), 0);
    assert_eq!(rt.semaphore_read(1, 0, sem).unwrap(), 0);
    assert_eq!(content(&rt, 1, 1, MemorySpace::Vmem, req.dst_id), vec![5.0, 6.0, 7.0, 8.0]);
    rt.dma_wait(0, 1, sem, 16).unwrap();
    rt.dma_wait(1, 1, sem, 16).unwrap();
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn remote_on_wait_sender_first_reads_then_receiver_writes() {
    let (rt, req) = remote_setup(DmaMode::OnWait);
    rt.dma_start(req.clone()).unwrap();
    assert_eq!(rt.semaphore_read(0, 1, req.dst_sem).unwrap(), 0);
    rt.dma_wait(0, 1, req.src_sem.unwrap(), 16).unwrap();
    // Read done, write not yet.
    assert_eq!(content(&rt, 1, 1, MemorySpace::Vmem, req.dst_id), vec![0.0; 4]);
    assert_eq!(rt.semaphore_read(1, 1, req.dst_sem).unwrap(), 0);
    rt.dma_wait(1, 1, req.dst_sem, 16).unwrap();
    assert_eq!(content(&rt, 1, 1, MemorySpace::Vmem, req.dst_id), vec![5.0, 6.0, 7.0, 8.0]);
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn remote_on_wait_receiver_first_does_both_steps_once() {
    let (rt, req) = remote_setup(DmaMode::OnWait);
    rt.dma_start(req.clone()).unwrap();
    rt.dma_wait(1, 1, req.dst_sem, 16).unwrap();
    assert_eq!(content(&rt, 1, 1, MemorySpace::Vmem, req.dst_id), vec![5.0, 6.0, 7.0, 8.0]);
    // The send semaphore was signalled by the read, exactly once.
    assert_eq!(rt.semaphore_read(0, 1, req.src_sem.unwrap()).unwrap(), 16);
    rt.dma_wait(0, 1, req.src_sem.unwrap(), 16).unwrap();
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn remote_on_wait_across_threads() {
    let (rt, req) = remote_setup(DmaMode::OnWait);
    let rt = Arc::new(rt);
    // The receiver parks before the DMA exists; the enqueue wakes it.
    let receiver = {
        let (rt, sem) = (Arc::clone(&rt), req.dst_sem);
        thread::spawn(move || rt.dma_wait(1, 1, sem, 16))
    };
    thread::sleep(Duration::from_millis(20));
    rt.dma_start(req.clone()).unwrap();
    rt.dma_wait(0, 1, req.src_sem.unwrap(), 16).unwrap();
    receiver.join().unwrap().unwrap();
    assert_eq!(content(&rt, 1, 1, MemorySpace::Vmem, req.dst_id), vec![5.0, 6.0, 7.0, 8.0]);
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn queued_dmas_run_last_in_first_out() {
    let rt = runtime(1, 1, DmaMode::OnWait);
    let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 2, 1.0);
    let a = zeros(&rt, 0, 0, 2);
    let b = zeros(&rt, 0, 0, 2);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    rt.dma_start(local(0, src, a, sem)).unwrap();
    rt.dma_start(local(0, src, b, sem)).unwrap();
    rt.dma_wait(0, 0, sem, 8).unwrap();
    assert_eq!(content(&rt, 0, 0, MemorySpace::Vmem, a), vec![0.0, 0.0]);
    assert_eq!(content(&rt, 0, 0, MemorySpace::Vmem, b), vec![1.0, 2.0]);
    rt.dma_wait(0, 0, sem, 8).unwrap();
    assert_eq!(content(&rt, 0, 0, MemorySpace::Vmem, a), vec![1.0, 2.0]);
}

#[test]
fn descriptor_invariant_has_the_exact_stock_message() {
    let (rt, req) = remote_setup(DmaMode::Eager);
    let msg = "Either both or neither `src_sem` and `device_id` can be set.";
    for bad in [DmaRequest { src_sem: None, ..req.clone() }, DmaRequest { dst_device: None, ..req.clone() }] {
        let e = rt.dma_start(bad.clone()).unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Value, msg));
    }
}

#[test]
fn dtype_or_size_mismatch_names_both_sides() {
    // on_wait checks at start exactly as the eager copy does (same text).
    for (mode, f32_8, f32_4, i32_8) in [
        (DmaMode::OnWait, "float32 (8,)", "float32 (4,)", "int32 (8,)"),
        (DmaMode::Eager, "float32 (8,)", "float32 (4,)", "int32 (8,)"),
    ] {
        let rt = runtime(1, 1, mode);
        let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 8, 1.0);
        let small = zeros(&rt, 0, 0, 4);
        let ints = rt.allocate_buffer(0, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::I32, &[8])).unwrap();
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let e = rt.dma_start(local(0, src, small, sem)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value);
        assert!(e.message.contains(f32_8) && e.message.contains(f32_4), "{}", e.message);
        let e = rt.dma_start(local(0, src, ints, sem)).unwrap_err();
        assert!(e.message.contains(f32_8) && e.message.contains(i32_8), "{}", e.message);
        assert_eq!(rt.semaphore_read(0, 0, sem).unwrap(), 0);
    }
}

#[test]
fn unknown_semaphore_device_or_buffer_is_rejected() {
    let (rt, req) = remote_setup(DmaMode::Eager);
    let e = rt.dma_start(DmaRequest { dst_sem: 4242, ..req.clone() }).unwrap_err();
    assert!(e.message.contains("4242"), "{}", e.message);
    let e = rt.dma_start(DmaRequest { src_sem: Some(4243), ..req.clone() }).unwrap_err();
    assert!(e.message.contains("4243"), "{}", e.message);
    assert_eq!(rt.dma_start(DmaRequest { dst_device: Some(2), ..req.clone() }).unwrap_err().kind, ErrorKind::Value);
    assert!(rt.dma_start(DmaRequest { src_id: 999, ..req.clone() }).is_err());
    assert_eq!(content(&rt, 1, 1, MemorySpace::Vmem, req.dst_id), vec![0.0; 4]);
}

#[test]
fn failing_queued_dma_returns_its_error_to_the_waiter() {
    let rt = runtime(1, 1, DmaMode::OnWait);
    let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 2, 1.0);
    let dst = zeros(&rt, 0, 0, 2);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    rt.dma_start(local(0, src, dst, sem)).unwrap();
    rt.free_buffer(0, 0, MemorySpace::Vmem, dst).unwrap();
    let e = rt.dma_wait(0, 0, sem, 8).unwrap_err();
    assert_ne!(e.kind, ErrorKind::Timeout);
}

#[test]
fn dma_start_after_failure_aborts() {
    let rt = runtime(1, 1, DmaMode::Eager);
    let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 2, 1.0);
    let dst = zeros(&rt, 0, 0, 2);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    rt.fail(mosaic_rt_core::RtError::value("boom"));
    assert_eq!(rt.dma_start(local(0, src, dst, sem)).unwrap_err().kind, ErrorKind::Aborted);
}

/// A 2-D f32 VMEM buffer of `shape` on (device, core), zero-filled.
fn zeros_2d(rt: &Runtime, device: u32, shape: [usize; 2]) -> u32 {
    let bytes = vec![0u8; 4 * shape[0] * shape[1]];
    rt.allocate_buffer(
        device,
        Some(0),
        BufferSpec { init: Init::Bytes(&bytes), ..BufferSpec::new(MemorySpace::Vmem, DType::F32, &shape) },
    )
    .unwrap()
}

#[test]
fn remote_dma_with_mismatched_shapes_fails_at_start_in_both_modes_with_one_message() {
    // (8,128) -> (16,64) has the same element count; on_wait must still
    // reject it rather than copy reshaped data.
    let mut messages = Vec::new();
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(2, 1, mode);
        let src = zeros_2d(&rt, 0, [8, 128]);
        let dst = zeros_2d(&rt, 1, [16, 64]);
        let send = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let recv = rt.allocate_semaphores(1, None, SemKind::Dma, 1).unwrap();
        assert_eq!(send, recv);
        let e = rt.dma_start(remote(0, 0, 1, src, dst, (send, recv))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value, "{mode:?}: {e}");
        assert!(e.message.contains("(8, 128)") && e.message.contains("(16, 64)"), "{e}");
        // Nothing was queued or signalled.
        assert!(rt.leaks(None).unwrap().is_empty());
        messages.push(e.message);
    }
    assert_eq!(messages[0], messages[1]);
}

#[test]
fn on_wait_dma_never_waited_is_reported_as_a_leak_naming_it() {
    // A started on_wait DMA nobody waits for never moves its
    // data; it must show up in the leak report like eager's count does.
    let rt = runtime(2, 1, DmaMode::OnWait);
    let src = buffer(&rt, 0, 0, MemorySpace::Vmem, 8, 1.0);
    let dst = zeros(&rt, 1, 0, 8);
    let sems = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    rt.allocate_semaphores(1, None, SemKind::Dma, 2).unwrap();
    let (send, recv) = (sems, sems + 1);
    rt.dma_start(remote(0, 0, 1, src, dst, (send, recv))).unwrap();
    let leaks = rt.leaks(None).unwrap();
    assert_eq!(leaks.len(), 2, "{leaks:?}");
    let (on_sender, on_receiver) = (&leaks[0], &leaks[1]);
    assert_eq!((on_sender.device, on_sender.core, on_sender.sem, on_sender.count), (0, 0, send, 0));
    assert_eq!((on_receiver.device, on_receiver.core, on_receiver.sem, on_receiver.count), (1, 0, recv, 0));
    let text = on_receiver.describe();
    for part in [
        "vmem buffer 100 of device 0, core 0",
        "vmem buffer 100 of device 1, core 0",
        &format!("send semaphore {send} on device 0"),
        &format!("receive semaphore {recv} on device 1"),
        "32 bytes",
        "never waited",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    assert_eq!(rt.leaks(Some(1)).unwrap().len(), 1);
    // The receiver waits: the whole DMA runs (read and write), the send
    // count is left (the sender never waited for it), nothing is pending.
    rt.dma_wait(1, 0, recv, 32).unwrap();
    let leaks = rt.leaks(None).unwrap();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert_eq!((leaks[0].device, leaks[0].sem, leaks[0].count), (0, send, 32));
    assert!(leaks[0].pending_dmas.is_empty(), "{leaks:?}");
    rt.dma_wait(0, 0, send, 32).unwrap();
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn local_on_wait_dma_never_waited_is_a_leak_and_eager_leaves_the_count() {
    for mode in [DmaMode::OnWait, DmaMode::Eager] {
        let rt = runtime(1, 1, mode);
        let src = buffer(&rt, 0, 0, MemorySpace::Hbm, 4, 1.0);
        let dst = zeros(&rt, 0, 0, 4);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        rt.dma_start(local(0, src, dst, sem)).unwrap();
        let leaks = rt.leaks(Some(0)).unwrap();
        assert_eq!(leaks.len(), 1, "{mode:?}");
        match mode {
            DmaMode::OnWait => {
                assert_eq!(leaks[0].count, 0);
                assert_eq!(leaks[0].pending_dmas.len(), 1);
                assert!(leaks[0].pending_dmas[0].contains(&format!("(semaphore {sem})")), "{leaks:?}");
            }
            DmaMode::Eager | DmaMode::Tpu => assert_eq!((leaks[0].count, leaks[0].pending_dmas.len()), (16, 0)),
        }
    }
}

#[test]
fn leaks_of_a_device_out_of_range_is_an_error() {
    let rt = runtime(2, 1, DmaMode::OnWait);
    let e = rt.leaks(Some(99)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("device id 99 out of range") && e.message.contains("valid ids 0 to 1"), "{e}");
}

#[test]
fn huge_out_of_bounds_dma_regions_are_errors_not_aborts() {
    // Found by tests/runtime/test_runtime_fuzz.py: a copy going through a temporary
    // allocated the whole (4 TiB) region before checking bounds, and the
    // failed allocation aborted the process.
    let huge = Region::new(vec![DimSel::slice(0, 1 << 40, 1)]);
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(2, 1, mode);
        let src = buffer(&rt, 0, 0, MemorySpace::Vmem, 8, 1.0);
        let dst = zeros(&rt, 0, 0, 8);
        let far = zeros(&rt, 1, 0, 8);
        let sems = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
        rt.allocate_semaphores(1, None, SemKind::Dma, 2).unwrap();
        let local = DmaRequest { src_region: huge.clone(), dst_region: huge.clone(), ..local(0, src, dst, sems) };
        let local = DmaRequest { src_space: MemorySpace::Vmem, ..local };
        let remote = DmaRequest {
            src_region: huge.clone(),
            dst_region: huge.clone(),
            ..remote(0, 0, 1, src, far, (sems, sems + 1))
        };
        for (req, wait_on) in [(local, (0, sems)), (remote, (1, sems + 1))] {
            let e = match rt.dma_start(req.clone()) {
                Err(e) => e,
                Ok(()) => rt.dma_wait(wait_on.0, 0, wait_on.1, 1).unwrap_err(),
            };
            assert_eq!(e.kind, ErrorKind::Index, "{mode:?}: {e}");
            assert!(e.message.contains("Out-of-bounds read"), "{e}");
        }
    }
}
