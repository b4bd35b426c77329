//! Multi-thread stress: semaphore rings and remote-copy rings in both DMA
//! modes, one thread per simulated core. The work is a fixed number of
//! rounds; a hang is detected by lack of progress (`run_watched`), never by
//! how long the run took, so a slow or loaded machine cannot fail them.

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{Config, DType, DmaMode, DmaRequest, Init, MemorySpace, Region, Runtime, SemKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// How long no thread may finish a round before the run counts as hung:
/// far beyond any scheduling delay of a loaded machine, so only a true hang
/// (a lock cycle, a lost wake-up) trips it.
const STALL: Duration = Duration::from_secs(90);

fn runtime(devices: u32, cores: u32, mode: DmaMode) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(Config {
            num_devices: devices,
            cores_per_device: cores,
            dma_mode: mode,
            // A backstop only: `run_watched` reports a hang long before.
            wait_timeout: Some(3 * STALL),
            ..Config::default()
        })
        .unwrap(),
    )
}

/// Sends the thread's index when it ends, returning or unwinding.
struct Ended(mpsc::Sender<usize>, usize);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// Runs `body(i, progress)` on threads `i` in `0..n`; each body bumps
/// `progress` once per round. Re-raises the first panic of a thread; fails
/// if no thread has finished a round for `STALL` (a hang). The total run
/// time is not bounded.
fn run_watched(what: &str, n: u32, body: impl Fn(u32, &AtomicU64) + Send + Sync + 'static) {
    let body = Arc::new(body);
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let mut threads: Vec<_> = (0..n)
        .map(|i| {
            let (body, progress, tx) = (Arc::clone(&body), Arc::clone(&progress), tx.clone());
            Some(thread::spawn(move || {
                let _ended = Ended(tx, i as usize);
                body(i, &progress);
            }))
        })
        .collect();
    drop(tx);
    let (mut seen, mut since) = (progress.load(Ordering::SeqCst), Instant::now());
    let mut running = n;
    while running > 0 {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(i) => {
                running -= 1;
                if let Err(panic) = threads[i].take().unwrap().join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = progress.load(Ordering::SeqCst);
                if now != seen {
                    (seen, since) = (now, Instant::now());
                } else if since.elapsed() >= STALL {
                    panic!(
                        "{what}: no thread finished a round for {} s ({now} rounds done): \
                         hung (a lock cycle or a lost wake-up)",
                        STALL.as_secs()
                    );
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("every thread reports its end"),
        }
    }
}

/// Each of 8 devices x 2 cores signals the same core of the next device and
/// waits for its own signal, many times; all counts end at zero.
#[test]
fn semaphore_ring_of_16_cores() {
    const ROUNDS: i64 = 3000;
    let rt = runtime(8, 2, DmaMode::OnWait);
    let sem = same_semaphore_on_every_device(&rt, 8);
    let shared = Arc::clone(&rt);
    run_watched("semaphore ring", 16, move |g, progress| {
        let (device, core) = (g / 2, g % 2);
        for _ in 0..ROUNDS {
            shared.semaphore_signal(device, core, sem, 1, Some((device + 1) % 8), Some(core)).unwrap();
            shared.semaphore_wait(device, core, sem, 1).unwrap();
            progress.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(rt.leaks(None).unwrap().is_empty());
}

/// Waiters wanting several units from several signallers at once.
#[test]
fn many_signallers_one_waiter_per_device() {
    const ROUNDS: i64 = 2000;
    let rt = runtime(12, 1, DmaMode::OnWait);
    let sem = same_semaphore_on_every_device(&rt, 12);
    let shared = Arc::clone(&rt);
    run_watched("many signallers", 12, move |d, progress| {
        for _ in 0..ROUNDS {
            // Device d signals every other device once per round...
            for other in (0..12).filter(|&o| o != d) {
                shared.semaphore_signal(d, 0, sem, 1, Some(other), None).unwrap();
            }
            // ...and waits for one signal from each of the 11 others.
            shared.semaphore_wait(d, 0, sem, 11).unwrap();
            progress.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(rt.leaks(None).unwrap().is_empty());
}

/// Device `d` copies its whole `src` into `dst` of device `next`, signalling
/// `sems` (send) and `sems + 1` (receive, on `next`).
fn ring_copy(d: u32, next: u32, src: u32, dst: u32, sems: u32) -> DmaRequest {
    common::remote_dma(d, next, src, dst, (sems, sems + 1))
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
        let alloc = |init| {
            rt.allocate_buffer(d, None, BufferSpec { init, ..BufferSpec::new(MemorySpace::Vmem, DType::F32, &[N]) })
                .unwrap()
        };
        let (src, dst) = (alloc(Init::Fill), alloc(Init::Fill));
        let dma = rt.allocate_semaphores(d, None, SemKind::Dma, 2).unwrap();
        let credit = rt.allocate_semaphores(d, None, SemKind::Regular, 1).unwrap();
        ids = (src, dst, dma, credit);
        rt.semaphore_signal(d, 0, credit, 1, None, None).unwrap(); // dst starts free
    }
    let (src, dst, dma_sem, credit) = ids;
    let shared = Arc::clone(&rt);
    run_watched("remote copy ring", DEVICES, move |d, progress| {
        let rt = &shared;
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
            progress.fetch_add(1, Ordering::Relaxed);
        }
    });
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
/// is not checked: rounds overlap); the run must finish: a lock cycle hangs
/// it, which `run_watched` reports as rounds that stopped. With the cycle
/// back (the core before 8dcc0b0) every thread stopped after 1,500 to
/// 35,000 rounds in all; 8,000 rounds per thread (64,000) hung 5 of 5 runs
/// and take ~3 s in a debug build (20,000 took ~30 s and crossed a 30 s
/// bound on a loaded machine).
#[test]
fn dma_steps_misuse_checks_and_allocations_never_deadlock() {
    const DEVICES: u32 = 8;
    const ROUNDS: u32 = 8_000;
    const N: usize = 256;
    let rt = runtime(DEVICES, 1, DmaMode::OnWait);
    let mut ids = (0, 0, 0);
    for d in 0..DEVICES {
        let alloc = |init| {
            rt.allocate_buffer(d, None, BufferSpec { init, ..BufferSpec::new(MemorySpace::Vmem, DType::F32, &[N]) })
                .unwrap()
        };
        let (src, dst) = (alloc(Init::Fill), alloc(Init::Fill));
        let dma = rt.allocate_semaphores(d, None, SemKind::Dma, 2).unwrap();
        ids = (src, dst, dma);
    }
    let (src, dst, dma_sem) = ids;
    run_watched("DMA steps, misuse checks and allocations", DEVICES, move |d, progress| {
        let req = ring_copy(d, (d + 1) % DEVICES, src, dst, dma_sem);
        let bytes = (N * 4) as i64;
        for _ in 0..ROUNDS {
            rt.dma_start(req.clone()).unwrap();
            rt.allocate_semaphores(d, None, SemKind::Regular, 1).unwrap();
            rt.dma_wait(d, 0, dma_sem + 1, bytes).unwrap();
            rt.dma_wait(d, 0, dma_sem, bytes).unwrap();
            progress.fetch_add(1, Ordering::Relaxed);
        }
    });
}
