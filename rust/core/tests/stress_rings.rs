//! Multi-thread stress: semaphore rings and remote-copy rings in both DMA
//! modes, one thread per simulated core. Bounded by the wait timeout.

use mosaic_rt_core::MemRef;
use mosaic_rt_core::{Config, DType, DmaMode, DmaRequest, Init, MemorySpace, Region, Runtime, SemKind};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn runtime(devices: u32, cores: u32, mode: DmaMode) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(Config {
            num_devices: devices,
            cores_per_device: cores,
            dma_mode: mode,
            wait_timeout: Some(Duration::from_secs(8)),
            ..Config::default()
        })
        .unwrap(),
    )
}

/// Each of 8 devices x 2 cores signals the same core of the next device and
/// waits for its own signal, many times; all counts end at zero.
#[test]
fn semaphore_ring_of_16_cores() {
    const ROUNDS: i64 = 3000;
    let rt = runtime(8, 2, DmaMode::OnWait);
    let sem = same_semaphore_on_every_device(&rt, 8);
    let start = Instant::now();
    let threads: Vec<_> = (0..16u32)
        .map(|g| {
            let rt = Arc::clone(&rt);
            thread::spawn(move || {
                let (device, core) = (g / 2, g % 2);
                for _ in 0..ROUNDS {
                    rt.semaphore_signal(device, core, sem, 1, Some((device + 1) % 8), Some(core)).unwrap();
                    rt.semaphore_wait(device, core, sem, 1).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(rt.leaks(None).unwrap().is_empty());
}

/// Waiters wanting several units from several signallers at once.
#[test]
fn many_signallers_one_waiter_per_device() {
    const ROUNDS: i64 = 2000;
    let rt = runtime(12, 1, DmaMode::OnWait);
    let sem = same_semaphore_on_every_device(&rt, 12);
    let threads: Vec<_> = (0..12u32)
        .map(|d| {
            let rt = Arc::clone(&rt);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    // Device d signals every other device once per round...
                    for other in (0..12).filter(|&o| o != d) {
                        rt.semaphore_signal(d, 0, sem, 1, Some(other), None).unwrap();
                    }
                    // ...and waits for one signal from each of the 11 others.
                    rt.semaphore_wait(d, 0, sem, 11).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(rt.leaks(None).unwrap().is_empty());
}

/// Device `d` copies its whole `src` into `dst` of device `next`, signalling
/// `sems` (send) and `sems + 1` (receive, on `next`).
fn ring_copy(d: u32, next: u32, src: u32, dst: u32, sems: u32) -> DmaRequest {
    DmaRequest {
        device: d,
        core: 0,
        src_space: MemorySpace::Vmem,
        src_id: src,
        src_region: Region::full(),
        dst_space: MemorySpace::Vmem,
        dst_id: dst,
        dst_region: Region::full(),
        dst_sem: sems + 1,
        src_sem: Some(sems),
        dst_device: Some(next),
        dst_core: None,
    }
}

fn f32_bytes(v: f32, n: usize) -> Vec<u8> {
    (0..n).flat_map(|_| v.to_le_bytes()).collect()
}

/// 8 devices pass a buffer to the next device every round with a remote
/// DMA; a credit semaphore keeps a sender from overwriting a destination the
/// receiver has not checked yet.
fn copy_ring(mode: DmaMode) {
    const DEVICES: u32 = 8;
    const ROUNDS: u32 = 300;
    const N: usize = 64;
    let rt = runtime(DEVICES, 1, mode);
    let mut ids = (0, 0, 0, 0);
    for d in 0..DEVICES {
        let alloc = |init| rt.allocate_buffer(d, None, MemorySpace::Vmem, DType::F32, &[N], None, init).unwrap();
        let (src, dst) = (alloc(Init::Fill), alloc(Init::Fill));
        let dma = rt.allocate_semaphores(d, None, SemKind::Dma, 2).unwrap();
        let credit = rt.allocate_semaphores(d, None, SemKind::Regular, 1).unwrap();
        ids = (src, dst, dma, credit);
        rt.semaphore_signal(d, 0, credit, 1, None, None).unwrap(); // dst starts free
    }
    let (src, dst, dma_sem, credit) = ids;
    let start = Instant::now();
    let threads: Vec<_> = (0..DEVICES)
        .map(|d| {
            let rt = Arc::clone(&rt);
            thread::spawn(move || {
                let next = (d + 1) % DEVICES;
                let prev = (d + DEVICES - 1) % DEVICES;
                let req = ring_copy(d, next, src, dst, dma_sem);
                let bytes = (N * 4) as i64;
                let mut out = vec![0u8; N * 4];
                for round in 0..ROUNDS {
                    let value = (d * 10_000 + round) as f32;
                    rt.store(MemRef::new(d, 0, MemorySpace::Vmem, src, &Region::full()), &f32_bytes(value, N)).unwrap();
                    // The next device's dst is free once it handed us a credit.
                    rt.semaphore_wait(d, 0, credit, 1).unwrap();
                    rt.dma_start(req.clone()).unwrap();
                    rt.dma_wait(d, 0, dma_sem, bytes).unwrap(); // sent: src reusable
                    rt.dma_wait(d, 0, dma_sem + 1, bytes).unwrap(); // received from prev
                    rt.load(MemRef::new(d, 0, MemorySpace::Vmem, dst, &Region::full()), &mut out).unwrap();
                    assert_eq!(out, f32_bytes((prev * 10_000 + round) as f32, N), "device {d} round {round}");
                    rt.semaphore_signal(d, 0, credit, 1, Some(prev), None).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(10));
    // Only the final credits remain.
    let leaks = rt.leaks(None).unwrap();
    assert_eq!(leaks.len(), DEVICES as usize);
    assert!(leaks.iter().all(|l| l.sem == credit && l.count == 1));
}

#[test]
fn remote_copy_ring_eager() {
    copy_ring(DmaMode::Eager);
}

#[test]
fn remote_copy_ring_on_wait() {
    copy_ring(DmaMode::OnWait);
}

/// Allocates one regular semaphore on every device (the ids agree) and returns its id.
fn same_semaphore_on_every_device(rt: &Runtime, devices: u32) -> u32 {
    let ids: Vec<u32> = (0..devices).map(|d| rt.allocate_semaphores(d, None, SemKind::Regular, 1).unwrap()).collect();
    assert!(ids.iter().all(|&id| id == ids[0]));
    ids[0]
}

/// Regression: a core checking a DMA wait for misuse (walking the queue of
/// its semaphore) while another core ran a queued DMA step (holding the
/// step's lock, signalling) and a third allocated semaphores (the table's
/// write lock) deadlocked on locks -- the 8-device right-permute bench hung.
/// Ring of on_wait remote copies with an allocation every round (the data
/// is not checked: rounds overlap); the run must finish (a lock cycle would
/// hang it: bounded by a channel timeout).
#[test]
fn dma_steps_misuse_checks_and_allocations_never_deadlock() {
    const DEVICES: u32 = 8;
    const ROUNDS: u32 = 20_000;
    const N: usize = 256;
    let rt = runtime(DEVICES, 1, DmaMode::OnWait);
    let mut ids = (0, 0, 0);
    for d in 0..DEVICES {
        let alloc = |init| rt.allocate_buffer(d, None, MemorySpace::Vmem, DType::F32, &[N], None, init).unwrap();
        let (src, dst) = (alloc(Init::Fill), alloc(Init::Fill));
        let dma = rt.allocate_semaphores(d, None, SemKind::Dma, 2).unwrap();
        ids = (src, dst, dma);
    }
    let (src, dst, dma_sem) = ids;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for d in 0..DEVICES {
        let rt = Arc::clone(&rt);
        let done = done_tx.clone();
        thread::spawn(move || {
            let req = ring_copy(d, (d + 1) % DEVICES, src, dst, dma_sem);
            let bytes = (N * 4) as i64;
            for _ in 0..ROUNDS {
                rt.dma_start(req.clone()).unwrap();
                rt.allocate_semaphores(d, None, SemKind::Regular, 1).unwrap();
                rt.dma_wait(d, 0, dma_sem + 1, bytes).unwrap();
                rt.dma_wait(d, 0, dma_sem, bytes).unwrap();
            }
            done.send(d).unwrap();
        });
    }
    for _ in 0..DEVICES {
        done_rx.recv_timeout(Duration::from_secs(30)).expect("a lock cycle hung the ring");
    }
}
