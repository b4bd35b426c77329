//! dma_execution_mode "tpu": a copy within a core runs at its start; a copy
//! to another core reads its source at its start and lands at the
//! destination core's next synchronisation point, on that core's thread.

mod common;

use mosaic_rt_core::{
    BufferKey, BufferSpec, Config, DType, DimSel, DmaMode, DmaRequest, ErrorKind, Init, MemRef, MemorySpace, Region,
    Runtime, SemKind,
};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

fn runtime(devices: u32, cores: u32) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        cores_per_device: cores,
        dma_mode: DmaMode::Tpu,
        wait_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    })
    .unwrap()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A VMEM f32 buffer of (device, core) holding `values`.
fn vmem(rt: &Runtime, device: u32, core: u32, values: &[f32]) -> u32 {
    let shape = [values.len()];
    let spec =
        BufferSpec { init: Init::Bytes(&f32_bytes(values)), ..BufferSpec::new(MemorySpace::Vmem, DType::F32, &shape) };
    rt.allocate_buffer(device, Some(core), spec).unwrap()
}

fn content(rt: &Runtime, device: u32, core: u32, id: u32) -> Vec<f32> {
    let bytes = rt.buffer_bytes(BufferKey { space: MemorySpace::Vmem, id, device, core }).unwrap();
    bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn store(rt: &Runtime, device: u32, core: u32, id: u32, values: &[f32]) {
    let region = Region::full();
    rt.store(MemRef::new(device, core, MemorySpace::Vmem, id, &region), &f32_bytes(values)).unwrap();
}

/// A copy from (device, core) to the same core of `dst_device` (remote).
fn remote(device: u32, dst_device: u32, src: u32, dst: u32, (send, recv): (u32, u32)) -> DmaRequest {
    common::remote_dma(device, dst_device, src, dst, (send, recv))
}

/// Two devices, each with a source [1, 2, 3, 4] + 10 * device, a zeroed
/// destination and (send, recv) DMA semaphores.
fn two_devices() -> (Runtime, u32, u32, (u32, u32)) {
    let rt = runtime(2, 1);
    let mut ids = (0, 0);
    for d in 0..2 {
        let base = 10.0 * d as f32;
        ids = (vmem(&rt, d, 0, &[base + 1.0, base + 2.0, base + 3.0, base + 4.0]), vmem(&rt, d, 0, &[0.0; 4]));
    }
    let send = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    rt.allocate_semaphores(1, None, SemKind::Dma, 2).unwrap();
    (rt, ids.0, ids.1, (send, send + 1))
}

#[test]
fn a_remote_copy_reads_at_its_start_and_lands_at_the_destinations_wait() {
    let (rt, src, dst, sems) = two_devices();
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    // Read: the send semaphore counts the bytes at once.
    assert_eq!(rt.semaphore_read(0, 0, sems.0).unwrap(), 16);
    // Not landed: the destination has not synchronised since.
    assert_eq!(content(&rt, 1, 0, dst), [0.0; 4]);
    assert_eq!(rt.incoming_dmas(1, 0).unwrap().len(), 1);
    // The source changes after the start: the old bytes went out.
    store(&rt, 0, 0, src, &[-1.0; 4]);
    // The destination zeroes its block (a store is no synchronisation
    // point), then waits: the copy lands after the store.
    store(&rt, 1, 0, dst, &[0.5; 4]);
    rt.dma_wait(1, 0, sems.1, 16).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    assert!(rt.incoming_dmas(1, 0).unwrap().is_empty());
    rt.dma_wait(0, 0, sems.0, 16).unwrap();
    assert!(rt.leaks(None).unwrap().is_empty());
}

#[test]
fn a_copy_within_a_core_runs_at_its_start() {
    let rt = runtime(1, 1);
    let src = vmem(&rt, 0, 0, &[1.0, 2.0]);
    let dst = vmem(&rt, 0, 0, &[0.0, 0.0]);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let req = DmaRequest { src_sem: None, dst_device: None, ..remote(0, 0, src, dst, (sem, sem)) };
    rt.dma_start(req).unwrap();
    assert_eq!(content(&rt, 0, 0, dst), [1.0, 2.0]);
    assert_eq!(rt.semaphore_read(0, 0, sem).unwrap(), 8);
    // A remote copy to itself too (its destination is the issuing core).
    let sems = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    store(&rt, 0, 0, src, &[5.0, 6.0]);
    rt.dma_start(remote(0, 0, src, dst, (sems, sems + 1))).unwrap();
    assert_eq!(content(&rt, 0, 0, dst), [5.0, 6.0]);
}

#[test]
fn a_semaphore_read_a_wait_on_another_semaphore_and_a_free_are_synchronisation_points() {
    let (rt, src, dst, sems) = two_devices();
    let other = rt.allocate_semaphores(1, None, SemKind::Regular, 1).unwrap();
    rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    // A read lands what is on its way (a kernel may poll the count).
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    assert_eq!(rt.semaphore_read(1, 0, sems.1).unwrap(), 16);
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    // A wait on any semaphore lands it first (here one already signalled).
    store(&rt, 0, 0, src, &[7.0; 4]);
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    rt.semaphore_signal(1, 0, other, 1, None, None).unwrap();
    rt.semaphore_wait(1, 0, other, 1).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [7.0; 4]);
    // A free lands copies first: none writes a freed buffer.
    let scoped = vmem(&rt, 1, 0, &[0.0; 4]);
    rt.dma_start(remote(0, 1, src, scoped, sems)).unwrap();
    rt.free_buffer(1, 0, MemorySpace::Vmem, scoped).unwrap();
    assert!(rt.incoming_dmas(1, 0).unwrap().is_empty());
    assert_eq!(rt.semaphore_read(1, 0, sems.1).unwrap(), 48);
}

#[test]
fn the_end_of_a_cores_program_lands_what_is_on_its_way_and_later_copies_land_at_once() {
    let (rt, src, dst, sems) = two_devices();
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    rt.end_device_dmas(1).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    // Never waited for: the count is left over, for the leak report.
    assert_eq!(rt.leaks(Some(1)).unwrap()[0].count, 16);
    store(&rt, 0, 0, src, &[9.0; 4]);
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [9.0; 4]);
    assert!(rt.incoming_dmas(1, 0).unwrap().is_empty());
}

#[test]
fn a_destination_not_allocated_yet_is_checked_when_the_copy_lands() {
    let rt = runtime(2, 1);
    let src = vmem(&rt, 0, 0, &[1.0, 2.0, 3.0, 4.0]);
    let sems = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    rt.allocate_semaphores(1, None, SemKind::Dma, 2).unwrap();
    // Device 1 has not allocated its buffers yet (a sender may run ahead
    // of a destination that has not reached the kernel).
    rt.dma_start(remote(0, 1, src, 100, (sems, sems + 1))).unwrap();
    let dst = vmem(&rt, 1, 0, &[0.0; 4]);
    assert_eq!(dst, 100);
    rt.dma_wait(1, 0, sems + 1, 16).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    // One never allocated fails where it lands, naming the buffer.
    rt.dma_start(remote(0, 1, src, 107, (sems, sems + 1))).unwrap();
    let e = rt.dma_wait(1, 0, sems + 1, 16).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("vmem buffer 107 of device 1") && e.message.contains("no such buffer"), "{e}");
}

#[test]
fn eager_lands_a_copy_to_a_destination_not_allocated_yet_as_tpu_does() {
    // "eager" copies at the start when it can; a remote destination that
    // does not exist yet (its device has not reached the kernel: jax's
    // barrier-semaphore ring sends right after its left neighbour's
    // signal) lands at that core's next synchronisation point instead of
    // failing, and a destination that exists is still written at once.
    let rt = Runtime::new(Config {
        num_devices: 2,
        cores_per_device: 1,
        dma_mode: DmaMode::Eager,
        wait_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    })
    .unwrap();
    let src = vmem(&rt, 0, 0, &[1.0, 2.0, 3.0, 4.0]);
    let sems = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    rt.allocate_semaphores(1, None, SemKind::Dma, 2).unwrap();
    rt.dma_start(remote(0, 1, src, 100, (sems, sems + 1))).unwrap();
    assert_eq!(rt.incoming_dmas(1, 0).unwrap().len(), 1);
    rt.dma_wait(0, 0, sems, 16).unwrap(); // the send side: read at the start
    let dst = vmem(&rt, 1, 0, &[0.0; 4]);
    assert_eq!(dst, 100);
    rt.dma_wait(1, 0, sems + 1, 16).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    // Now that it exists: written at the start, nothing left to land.
    store(&rt, 0, 0, src, &[5.0; 4]);
    rt.dma_start(remote(0, 1, src, dst, (sems, sems + 1))).unwrap();
    assert!(rt.incoming_dmas(1, 0).unwrap().is_empty());
    assert_eq!(content(&rt, 1, 0, dst), [5.0; 4]);
    rt.dma_wait(1, 0, sems + 1, 16).unwrap();
    rt.dma_wait(0, 0, sems, 16).unwrap();
}

#[test]
fn a_destination_that_exists_is_checked_at_the_start() {
    let (rt, src, _, sems) = two_devices();
    let small = vmem(&rt, 1, 0, &[0.0; 2]);
    let e = rt.dma_start(remote(0, 1, src, small, sems)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("dtypes or shapes differ"), "{e}");
    assert!(rt.incoming_dmas(1, 0).unwrap().is_empty());
    // A bad source fails at the start whether or not the destination exists.
    let mut req = remote(0, 1, src, 200, sems);
    req.src_region = Region::new(vec![DimSel::slice(2, 4, 1)]);
    let e = rt.dma_start(req).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index);
    assert!(e.message.contains("Out-of-bounds read"), "{e}");
}

#[test]
fn a_copy_to_another_core_of_the_device_lands_there() {
    let rt = runtime(1, 2);
    let src = vmem(&rt, 0, 0, &[3.0, 4.0]);
    let dst = vmem(&rt, 0, 1, &[0.0, 0.0]);
    let send = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    let req = DmaRequest { dst_core: Some(1), ..remote(0, 0, src, dst, (send, send + 1)) };
    rt.dma_start(req).unwrap();
    assert_eq!(rt.incoming_dmas(0, 1).unwrap().len(), 1);
    assert_eq!(content(&rt, 0, 1, dst), [0.0, 0.0]);
    rt.dma_wait(0, 1, send + 1, 8).unwrap();
    assert_eq!(content(&rt, 0, 1, dst), [3.0, 4.0]);
}

#[test]
fn a_core_parked_on_any_semaphore_wakes_to_land_a_copy() {
    // Device 1 waits on its receive semaphore before device 0 starts the
    // copy: the start wakes it, and it lands the copy on its own thread.
    let (rt, src, dst, sems) = two_devices();
    let rt = Arc::new(rt);
    let waiter = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || rt.dma_wait(1, 0, sems.1, 16))
    };
    thread::sleep(Duration::from_millis(50));
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    // Parked on another semaphore: it lands the copy and parks again.
    let other = rt.allocate_semaphores(1, None, SemKind::Regular, 1).unwrap();
    rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    let waiter = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || rt.semaphore_wait(1, 0, other, 1))
    };
    thread::sleep(Duration::from_millis(50));
    store(&rt, 0, 0, src, &[8.0; 4]);
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while content(&rt, 1, 0, dst) != [8.0; 4] && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(content(&rt, 1, 0, dst), [8.0; 4]);
    assert!(!waiter.is_finished());
    rt.semaphore_signal(0, 0, other, 1, Some(1), None).unwrap();
    waiter.join().unwrap().unwrap();
}

#[test]
fn on_wait_also_checks_a_destination_not_allocated_yet_when_it_is_written() {
    // As stock, which checks a queued DMA only when it runs.
    let rt = Runtime::new(Config {
        num_devices: 2,
        dma_mode: DmaMode::OnWait,
        wait_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    })
    .unwrap();
    let src = vmem(&rt, 0, 0, &[1.0, 2.0]);
    let sems = rt.allocate_semaphores(0, None, SemKind::Dma, 2).unwrap();
    rt.allocate_semaphores(1, None, SemKind::Dma, 2).unwrap();
    rt.dma_start(remote(0, 1, src, 100, (sems, sems + 1))).unwrap();
    let dst = vmem(&rt, 1, 0, &[0.0, 0.0]);
    rt.dma_wait(1, 0, sems + 1, 8).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0]);
    // A local one to a buffer that does not exist still fails at its start.
    let req = DmaRequest { src_sem: None, dst_device: None, ..remote(0, 0, src, 150, (sems, sems)) };
    let e = rt.dma_start(req).unwrap_err();
    assert!(e.message.contains("no such buffer"), "{e}");
}

#[test]
fn a_device_that_leaves_lands_what_is_on_its_way() {
    let (rt, src, dst, sems) = two_devices();
    rt.dma_start(remote(0, 1, src, dst, sems)).unwrap();
    rt.leave_device(1).unwrap();
    assert_eq!(content(&rt, 1, 0, dst), [1.0, 2.0, 3.0, 4.0]);
    assert!(rt.incoming_dmas(1, 0).unwrap().is_empty());
}
