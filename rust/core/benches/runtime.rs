//! Hot-path timings of the runtime (plain std::time; prints a table).
//! Run: cargo bench -p mosaic_rt_core

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{AdaptiveSpin, Config, DType, DmaMode, DmaRequest, MemorySpace, Region, Runtime, SemKind};
use std::hint::black_box;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn runtime(devices: u32, mode: DmaMode) -> Arc<Runtime> {
    runtime_with(devices, mode, None)
}

/// `spin`: the spin-then-park policy kernels get when every simulated core
/// has a CPU (`None`: park at once).
fn runtime_with(devices: u32, mode: DmaMode, spin: Option<Arc<AdaptiveSpin>>) -> Arc<Runtime> {
    let config = Config {
        spin_before_park: spin,
        num_devices: devices,
        dma_mode: mode,
        wait_timeout: Some(Duration::from_secs(30)),
        // MOSAIC_RT_BENCH_DEADLOCKS=1: with deadlock detection (as kernels run).
        detect_deadlocks: std::env::var_os("MOSAIC_RT_BENCH_DEADLOCKS").is_some_and(|v| v == "1"),
        ..Config::default()
    };
    Arc::new(Runtime::new(config).unwrap())
}

/// Best of 5 runs of `iters` calls of `f`, in ns per call.
fn time(iters: u64, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn row(name: &str, ns: f64, target: &str) {
    let shown = if ns >= 10_000.0 { format!("{:.1} us", ns / 1000.0) } else { format!("{ns:.1} ns") };
    println!("| {name:<34} | {shown:>12} | {target:<10} |");
}

/// Round trip of a semaphore bounced between two threads. Parking at once,
/// it is the OS's futex hand-off floor: what any wait pays once the CPUs
/// are oversubscribed (run it beside a CPU-bound process to see it).
fn ping_pong(iters: u64, spin: Option<Arc<AdaptiveSpin>>) -> f64 {
    let rt = runtime_with(2, DmaMode::OnWait, spin);
    let sem = same_semaphore_on_every_device(&rt, 2);
    let peer = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || {
            for _ in 0..iters * 5 + 1000 {
                rt.semaphore_wait(1, 0, sem, 1).unwrap();
                rt.semaphore_signal(1, 0, sem, 1, Some(0), None).unwrap();
            }
        })
    };
    let hop = || {
        rt.semaphore_signal(0, 0, sem, 1, Some(1), None).unwrap();
        rt.semaphore_wait(0, 0, sem, 1).unwrap();
    };
    for _ in 0..1000 {
        hop(); // warm-up
    }
    let ns = time(iters, hop);
    peer.join().unwrap();
    ns
}

fn dma(bytes: usize, iters: u64, mode: DmaMode) -> (f64, f64) {
    let rt = runtime(1, mode);
    let n = bytes / 4;
    let alloc = |space| rt.allocate_buffer(0, Some(0), BufferSpec::new(space, DType::F32, &[n])).unwrap();
    let (src, dst) = (alloc(MemorySpace::Hbm), alloc(MemorySpace::Vmem));
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let req = DmaRequest {
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
    };
    let dma_ns = time(iters, || {
        rt.dma_start(req.clone()).unwrap();
        rt.dma_wait(0, 0, sem, bytes as i64).unwrap();
    });
    let from = vec![1u8; bytes];
    let mut to = vec![0u8; bytes];
    let copy_ns = time(iters, || {
        to.copy_from_slice(black_box(&from));
        black_box(&mut to);
    });
    (dma_ns, copy_ns)
}

fn main() {
    let rt = runtime(1, DmaMode::OnWait);
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();

    println!("| {:<34} | {:>12} | {:<10} |", "operation", "time/op", "target");
    println!("|{:-<36}|{:->14}|{:-<12}|", "", "", "");
    row(
        "semaphore_signal (uncontended)",
        time(2_000_000, || rt.semaphore_signal(0, 0, sem, 1, None, None).unwrap()),
        "<= 100 ns",
    );
    rt.semaphore_wait(0, 0, sem, rt.semaphore_read(0, 0, sem).unwrap()).unwrap();
    row(
        "signal + wait pair",
        time(2_000_000, || {
            rt.semaphore_signal(0, 0, sem, 1, None, None).unwrap();
            rt.semaphore_wait(0, 0, sem, 1).unwrap();
        }),
        "<= 300 ns",
    );
    row("2-thread ping-pong, parking", ping_pong(20_000, None), "<= 10 us");
    let spin = Arc::new(AdaptiveSpin::new(Duration::from_micros(20)));
    row("2-thread ping-pong, spin 20 us", ping_pong(20_000, Some(spin)), "");
    for (label, bytes, iters) in [("1 KiB", 1024, 200_000), ("1 MiB", 1 << 20, 300)] {
        let (eager_ns, copy_ns) = dma(bytes, iters, DmaMode::Eager);
        let (on_wait_ns, _) = dma(bytes, iters, DmaMode::OnWait);
        row(&format!("DMA {label} local eager start+wait"), eager_ns, "");
        row(&format!("DMA {label} local on_wait start+wait"), on_wait_ns, "");
        row(&format!("memcpy {label}"), copy_ns, "");
    }
}

/// Allocates one regular semaphore on every device (the ids agree) and returns its id.
fn same_semaphore_on_every_device(rt: &Runtime, devices: u32) -> u32 {
    let ids: Vec<u32> = (0..devices).map(|d| rt.allocate_semaphores(d, None, SemKind::Regular, 1).unwrap()).collect();
    assert!(ids.iter().all(|&id| id == ids[0]));
    ids[0]
}
