//! Borrowed input buffers (XLA's operand memory, read-only for a launch)
//! and the reuse of large allocations across launches.

mod common;
mod memory_support;

use memory_support::*;
use mosaic_rt_core::internals::MemoryTable;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{
    BufferKey, Config, DType, DmaMode, DmaRequest, ErrorKind, FillMode, Init, MemRef, MemorySpace, OobReads, Region,
    Runtime, SemKind,
};

const HBM: MemorySpace = MemorySpace::Hbm;

fn hbm(id: u32, device: u32) -> BufferKey {
    BufferKey { space: HBM, id, device, core: 0 }
}

fn runtime_on_wait(devices: u32) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        cores_per_device: 1,
        dma_mode: DmaMode::OnWait,
        wait_timeout: Some(std::time::Duration::from_secs(10)),
        ..Config::default()
    })
    .unwrap()
}

fn runtime(devices: u32) -> Runtime {
    Runtime::new(Config { num_devices: devices, cores_per_device: 1, fill: FillMode::Nan, ..Config::default() })
        .unwrap()
}

#[test]
fn a_borrowed_input_is_read_in_place_and_never_written() {
    let mem = table(1, 2, OobReads::Raise, FillMode::Zero);
    let data: Vec<u8> = (0..64).collect();
    // SAFETY: `data` outlives `mem` and is not modified while it lives.
    let id = unsafe { mem.allocate_borrowed(0, DType::U8, &[8, 8], &data) }.unwrap();
    assert!(mem.is_borrowed(hbm(id, 0)).unwrap());
    assert_eq!(mem.info(hbm(id, 0)).unwrap().ref_count, 2, "shared by both cores");
    assert_eq!(mem.content(hbm(id, 0)).unwrap(), data);
    let region = Region::full();
    let mut out = [0u8; 64];
    mem.load(MemRef::new(0, 1, HBM, id, &region), &mut out).unwrap();
    assert_eq!(out[..], data[..]);

    let other = mem.allocate(0, None, BufferSpec::new(HBM, DType::U8, &[8, 8])).unwrap();
    let fails = [
        mem.store(MemRef::new(0, 0, HBM, id, &region), &[1; 64]).unwrap_err(),
        mem.swap(MemRef::new(0, 0, HBM, id, &region), &[1; 64], None, &mut [0; 64]).unwrap_err(),
        mem.copy(MemRef::new(0, 0, HBM, other, &region), MemRef::new(0, 0, HBM, id, &region)).unwrap_err(),
    ];
    for e in fails {
        assert_eq!(e.kind, ErrorKind::Internal, "{e}");
        assert!(e.message.contains("borrowed read-only"), "{e}");
    }
    assert_eq!(mem.content(hbm(id, 0)).unwrap(), data, "nothing was written");
    // Reading from it into our own buffer is fine.
    mem.copy(MemRef::new(0, 0, HBM, id, &region), MemRef::new(0, 0, HBM, other, &region)).unwrap();
    assert_eq!(mem.content(hbm(other, 0)).unwrap(), data);
}

#[test]
fn a_borrow_has_the_operand_size() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Zero);
    let data = [0u8; 12];
    // SAFETY: `data` outlives `mem`; the call fails before borrowing anyway.
    let e = unsafe { mem.allocate_borrowed(0, DType::F32, &[4], &data) }.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
}

#[test]
fn leaving_a_single_device_launch_ends_the_borrow() {
    let rt = runtime(1);
    let data = vec![3u8; 16];
    // SAFETY: `data` outlives `rt` and is not modified while it lives.
    let id = unsafe { rt.allocate_borrowed_buffer(0, DType::U8, &[16], &data) }.unwrap();
    rt.leave_device(0).unwrap();
    let mut out = [0u8; 16];
    let e = rt.load(MemRef::new(0, 0, HBM, id, &Region::full()), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
    assert!(e.message.contains("after its device left the launch"), "{e}");
}

/// Device 0 starts an on_wait DMA of its borrowed input (32 bytes) to a
/// fresh VMEM buffer of device 1: (input, destination, send sem, receive sem).
fn queue_remote_dma_of_input(rt: &Runtime, data: &[u8]) -> (u32, u32, u32, u32) {
    // SAFETY: the callers keep `data` unmodified and alive until device 0
    // has left (`leave_device` runs `release_borrowed`).
    let id = unsafe { rt.allocate_borrowed_buffer(0, DType::U8, &[32], data) }.unwrap();
    let dst = rt.allocate_buffer(1, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::U8, &[32])).unwrap();
    let send = rt.allocate_semaphores(0, Some(0), SemKind::Dma, 1).unwrap();
    let recv = rt.allocate_semaphores(1, Some(0), SemKind::Dma, 1).unwrap();
    let full = Region::full();
    rt.dma_start(DmaRequest {
        src_space: HBM,
        src_region: full.clone(),
        dst_region: full,
        ..common::remote_dma(0, 1, id, dst, (send, recv))
    })
    .unwrap();
    (id, dst, send, recv)
}

#[test]
fn a_peer_still_reads_an_input_its_device_left_unread() {
    let rt = runtime_on_wait(2);
    let mut data = vec![7u8; 32];
    let (id, dst, _, recv) = queue_remote_dma_of_input(&rt, &data);
    // Device 0 leaves without waiting: its DMA's read is still to come.
    rt.leave_device(0).unwrap();
    data.fill(0); // XLA may reuse the memory now
    assert!(!rt.is_borrowed(hbm(id, 0)).unwrap());
    // Device 1's wait runs the whole DMA, reading device 0's input.
    rt.dma_wait(1, 0, recv, 32).unwrap();
    let key = BufferKey { space: MemorySpace::Vmem, id: dst, device: 1, core: 0 };
    assert_eq!(rt.buffer_bytes(key).unwrap(), vec![7u8; 32], "the bytes as they were at the borrow's end");
    drop(data);
}

#[test]
fn an_input_whose_dmas_were_all_read_is_dropped_not_copied() {
    let rt = runtime_on_wait(2);
    let data = vec![7u8; 32];
    let (id, dst, send, recv) = queue_remote_dma_of_input(&rt, &data);
    rt.dma_wait(0, 0, send, 32).unwrap(); // the send side reads the source
    rt.leave_device(0).unwrap();
    // Nothing can read device 0's memory any more: no copy was kept.
    let mut out = [0u8; 32];
    let e = rt.load(MemRef::new(0, 0, HBM, id, &Region::full()), &mut out).unwrap_err();
    assert!(e.message.contains("after its device left the launch"), "{e}");
    rt.dma_wait(1, 0, recv, 32).unwrap();
    let key = BufferKey { space: MemorySpace::Vmem, id: dst, device: 1, core: 0 };
    assert_eq!(rt.buffer_bytes(key).unwrap(), data, "the DMA delivered what it read");
}

#[test]
fn reused_allocations_are_filled_again() {
    // A large buffer dropped with the table parks its allocation; the next
    // one of that size (from any table, any device) must not see old bytes.
    let n = 1 << 20;
    for fill in [FillMode::Nan, FillMode::Zero] {
        for round in 0..3u8 {
            let mem: MemoryTable = table(2, 1, OobReads::Raise, fill);
            let device = u32::from(round % 2);
            let id = mem.allocate(device, None, BufferSpec::new(HBM, DType::U8, &[n])).unwrap();
            let want = if fill == FillMode::Nan { u8::MAX } else { 0 };
            assert!(mem.content(hbm(id, device)).unwrap().iter().all(|&b| b == want), "{fill:?} {round}");
            mem.store(MemRef::new(device, 0, HBM, id, &Region::full()), &vec![round + 1; n]).unwrap();
            let given = mem
                .allocate(
                    device,
                    None,
                    BufferSpec { init: Init::Bytes(&vec![9; n]), ..BufferSpec::new(HBM, DType::U8, &[n / 2, 2]) },
                )
                .unwrap();
            assert!(mem.content(hbm(given, device)).unwrap().iter().all(|&b| b == 9));
        }
    }
    assert!(mosaic_rt_core::pooled_bytes() <= 256 << 20);
}

#[test]
fn a_reused_allocation_shows_only_fill_values_or_what_was_written() {
    let n = 1 << 19;
    let region = |start: i64, size: i64| Region::new(vec![mosaic_rt_core::DimSel::slice(start, size, 1)]);
    for round in 0..4u8 {
        // Leave old bytes (round + 1) in four parked allocations of this size.
        {
            let mem = table(1, 1, OobReads::Raise, FillMode::Nan);
            for _ in 0..4 {
                let id = mem.allocate(0, None, BufferSpec::new(HBM, DType::U8, &[n])).unwrap();
                mem.store(MemRef::new(0, 0, HBM, id, &Region::full()), &vec![round + 1; n]).unwrap();
            }
        }
        let mem = table(1, 1, OobReads::Raise, FillMode::Nan);
        let alloc = || mem.allocate(0, None, BufferSpec::new(HBM, DType::U8, &[n])).unwrap();
        let (partial, whole, by_dma, src) = (alloc(), alloc(), alloc(), alloc());
        // A partial write: the rest holds fill values, never old bytes.
        mem.store(MemRef::new(0, 0, HBM, partial, &region(8, 8)), &[7; 8]).unwrap();
        let got = mem.content(hbm(partial, 0)).unwrap();
        assert!(got[8..16].iter().all(|&b| b == 7) && got[..8].iter().chain(&got[16..]).all(|&b| b == u8::MAX));
        // Whole writes (a store, a DMA) replace every byte.
        mem.store(MemRef::new(0, 0, HBM, whole, &region(0, n as i64)), &vec![3; n]).unwrap();
        assert!(mem.content(hbm(whole, 0)).unwrap().iter().all(|&b| b == 3));
        let full = Region::full();
        mem.copy(MemRef::new(0, 0, HBM, whole, &full), MemRef::new(0, 0, HBM, by_dma, &full)).unwrap();
        assert!(mem.content(hbm(by_dma, 0)).unwrap().iter().all(|&b| b == 3));
        // Never written: fill values.
        assert!(mem.content(hbm(src, 0)).unwrap().iter().all(|&b| b == u8::MAX), "round {round}");
    }
}
