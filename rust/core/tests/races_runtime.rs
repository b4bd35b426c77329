//! Race detection through the public `Runtime` API: cores are just ids, so
//! several cores per device are exercised directly (the interpreter does not
//! run multi-core kernels yet).

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{Config, DType, DimSel, DmaMode, DmaRequest, Init, MemorySpace, Region, Runtime, SemKind};
use std::thread;
use std::time::Duration;

const HBM: MemorySpace = MemorySpace::Hbm;
const VMEM: MemorySpace = MemorySpace::Vmem;

fn runtime(devices: u32, cores: u32, mode: DmaMode, detect_races: bool) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        cores_per_device: cores,
        dma_mode: mode,
        wait_timeout: Some(Duration::from_secs(120)),
        detect_races,
        ..Config::default()
    })
    .unwrap()
}

fn races(devices: u32, cores: u32, mode: DmaMode) -> Runtime {
    runtime(devices, cores, mode, true)
}

/// An f32 buffer of 8 zeros on every core of `device` (HBM: one per device).
fn buffer(rt: &Runtime, device: u32, space: MemorySpace) -> u32 {
    rt.allocate_buffer(
        device,
        None,
        BufferSpec { init: Init::Bytes(&[0u8; 32]), ..BufferSpec::new(space, DType::F32, &[8]) },
    )
    .unwrap()
}

fn slice(start: i64, size: i64) -> Region {
    Region::new(vec![DimSel::slice(start, size, 1)])
}

fn write(rt: &Runtime, device: u32, core: u32, space: MemorySpace, id: u32, region: &Region) {
    let n = rt.region_shape(key(space, id, device, core), region).unwrap().iter().product::<usize>();
    rt.store(MemRef::new(device, core, space, id, region), &vec![1u8; 4 * n]).unwrap();
}

fn read(rt: &Runtime, device: u32, core: u32, space: MemorySpace, id: u32, region: &Region) {
    let n = rt.region_shape(key(space, id, device, core), region).unwrap().iter().product::<usize>();
    rt.load(MemRef::new(device, core, space, id, region), &mut vec![0u8; 4 * n]).unwrap();
}

fn key(space: MemorySpace, id: u32, device: u32, core: u32) -> mosaic_rt_core::BufferKey {
    mosaic_rt_core::BufferKey::for_access(space, id, device, core)
}

fn found(rt: &Runtime) -> bool {
    rt.races().expect("race detection is on").found()
}

fn reports(rt: &Runtime) -> Vec<String> {
    rt.races().unwrap().reports()
}

fn sem(rt: &Runtime, device: u32, kind: SemKind) -> u32 {
    rt.allocate_semaphores(device, None, kind, 1).unwrap()
}

fn local_dma(core: u32, src: (MemorySpace, u32), dst: (MemorySpace, u32), sem: u32) -> DmaRequest {
    DmaRequest { core, src_space: src.0, dst_space: dst.0, ..common::dma(src.1, dst.1, sem) }
}

const MODES: [DmaMode; 2] = [DmaMode::Eager, DmaMode::OnWait];

#[test]
fn off_by_default_and_costs_nothing_visible() {
    let rt = runtime(1, 2, DmaMode::OnWait, false);
    assert!(rt.races().is_none());
    let x = buffer(&rt, 0, HBM);
    write(&rt, 0, 0, HBM, x, &Region::full());
    write(&rt, 0, 1, HBM, x, &Region::full());
    assert!(rt.races().is_none());
}

#[test]
fn two_cores_writing_one_hbm_element_race() {
    let rt = races(1, 2, DmaMode::OnWait);
    let x = buffer(&rt, 0, HBM);
    write(&rt, 0, 0, HBM, x, &slice(3, 1));
    assert!(!found(&rt));
    write(&rt, 0, 1, HBM, x, &slice(3, 1));
    assert!(found(&rt));
    let r = reports(&rt);
    assert_eq!(r.len(), 1, "{r:?}");
    // Both accesses are named: buffer, region, core, kind.
    assert!(r[0].contains("write of hbm buffer 100 of device 0, core 0[3:4] by device 0, core 1"), "{}", r[0]);
    assert!(r[0].contains("earlier write of hbm buffer 100 of device 0, core 0[3:4] by device 0, core 0"), "{}", r[0]);
}

#[test]
fn disjoint_writes_and_concurrent_reads_do_not_race() {
    let rt = races(1, 2, DmaMode::OnWait);
    let x = buffer(&rt, 0, HBM);
    write(&rt, 0, 0, HBM, x, &slice(0, 4));
    write(&rt, 0, 1, HBM, x, &slice(4, 4));
    let y = buffer(&rt, 0, HBM);
    read(&rt, 0, 0, HBM, y, &Region::full());
    read(&rt, 0, 1, HBM, y, &Region::full());
    assert!(!found(&rt), "{:?}", reports(&rt));
    // A write after two unordered reads races with both; one report.
    write(&rt, 0, 0, HBM, y, &slice(2, 1));
    assert!(found(&rt));
    assert!(reports(&rt)[0].contains("earlier read"), "{:?}", reports(&rt));
}

#[test]
fn a_cores_own_accesses_and_private_vmem_never_race() {
    let rt = races(1, 2, DmaMode::OnWait);
    let v = buffer(&rt, 0, VMEM); // one buffer per core
    for _ in 0..3 {
        for core in 0..2 {
            write(&rt, 0, core, VMEM, v, &Region::full());
            read(&rt, 0, core, VMEM, v, &slice(1, 2));
        }
    }
    assert!(!found(&rt), "{:?}", reports(&rt));
}

#[test]
fn a_signal_and_wait_order_two_cores() {
    let rt = races(1, 2, DmaMode::OnWait);
    let x = buffer(&rt, 0, HBM);
    let s = sem(&rt, 0, SemKind::Regular);
    // Real threads: core 1 blocks until core 0 has written and signalled.
    thread::scope(|scope| {
        scope.spawn(|| {
            write(&rt, 0, 0, HBM, x, &Region::full());
            rt.semaphore_signal(0, 0, s, 1, None, Some(1)).unwrap();
        });
        scope.spawn(|| {
            rt.semaphore_wait(0, 1, s, 1).unwrap();
            write(&rt, 0, 1, HBM, x, &Region::full());
            read(&rt, 0, 1, HBM, x, &Region::full());
        });
    });
    assert!(!found(&rt), "{:?}", reports(&rt));
    // Core 0 writes again without waiting for anything from core 1: a race.
    write(&rt, 0, 0, HBM, x, &slice(0, 1));
    assert!(found(&rt));
}

#[test]
fn a_signal_after_the_access_does_not_order_later_accesses() {
    let rt = races(1, 2, DmaMode::OnWait);
    let x = buffer(&rt, 0, HBM);
    let s = sem(&rt, 0, SemKind::Regular);
    rt.semaphore_signal(0, 0, s, 1, None, Some(1)).unwrap();
    write(&rt, 0, 0, HBM, x, &Region::full()); // after the signal
    rt.semaphore_wait(0, 1, s, 1).unwrap();
    read(&rt, 0, 1, HBM, x, &Region::full());
    assert!(found(&rt));
}

#[test]
fn dma_write_vs_local_read_before_and_after_the_wait() {
    for mode in MODES {
        // Read of the destination before dma_wait: a race.
        let rt = races(1, 1, mode);
        let (src, dst) = (buffer(&rt, 0, HBM), buffer(&rt, 0, VMEM));
        let s = sem(&rt, 0, SemKind::Dma);
        rt.dma_start(local_dma(0, (HBM, src), (VMEM, dst), s)).unwrap();
        read(&rt, 0, 0, VMEM, dst, &slice(0, 1));
        rt.dma_wait(0, 0, s, 32).unwrap();
        assert!(found(&rt), "{mode:?}");
        let r = reports(&rt);
        assert!(r[0].contains("DMA #0 (started by device 0, core 0)"), "{r:?}");
        assert!(r[0].contains("read of vmem buffer 101"), "{r:?}");

        // After dma_wait: ordered.
        let rt = races(1, 1, mode);
        let (src, dst) = (buffer(&rt, 0, HBM), buffer(&rt, 0, VMEM));
        let s = sem(&rt, 0, SemKind::Dma);
        write(&rt, 0, 0, HBM, src, &Region::full()); // before the start: ordered too
        rt.dma_start(local_dma(0, (HBM, src), (VMEM, dst), s)).unwrap();
        rt.dma_wait(0, 0, s, 32).unwrap();
        read(&rt, 0, 0, VMEM, dst, &Region::full());
        write(&rt, 0, 0, HBM, src, &Region::full());
        assert!(!found(&rt), "{mode:?}: {:?}", reports(&rt));
    }
}

#[test]
fn writing_a_dma_source_before_the_wait_races_with_its_read() {
    for mode in MODES {
        let rt = races(1, 1, mode);
        let (src, dst) = (buffer(&rt, 0, HBM), buffer(&rt, 0, VMEM));
        let s = sem(&rt, 0, SemKind::Dma);
        rt.dma_start(local_dma(0, (HBM, src), (VMEM, dst), s)).unwrap();
        write(&rt, 0, 0, HBM, src, &slice(7, 1));
        rt.dma_wait(0, 0, s, 32).unwrap();
        assert!(found(&rt), "{mode:?}");
    }
}

/// Device 0 sends its VMEM buffer to device 1, which reads it after (or
/// before) waiting on the receive semaphore; device 0 waits on the send one.
fn remote_copy(mode: DmaMode, read_before_wait: bool) -> Runtime {
    let rt = races(2, 1, mode);
    let bufs: Vec<(u32, u32)> = (0..2).map(|d| (buffer(&rt, d, VMEM), buffer(&rt, d, VMEM))).collect();
    assert_eq!(bufs[0], bufs[1], "ids are in sync across devices");
    let (src, dst) = bufs[0];
    // Semaphore ids are in sync across devices: allocate each on both.
    let send = sem(&rt, 0, SemKind::Dma);
    assert_eq!(sem(&rt, 1, SemKind::Dma), send);
    let recv = sem(&rt, 0, SemKind::Dma);
    assert_eq!(sem(&rt, 1, SemKind::Dma), recv);
    thread::scope(|scope| {
        scope.spawn(|| {
            write(&rt, 0, 0, VMEM, src, &Region::full());
            rt.dma_start(common::remote_dma(0, 1, src, dst, (send, recv))).unwrap();
            rt.dma_wait(0, 0, send, 32).unwrap();
            // The source may be reused once the send semaphore says it was read.
            write(&rt, 0, 0, VMEM, src, &Region::full());
        });
        scope.spawn(|| {
            if read_before_wait {
                read(&rt, 1, 0, VMEM, dst, &Region::full());
            }
            rt.dma_wait(1, 0, recv, 32).unwrap();
            read(&rt, 1, 0, VMEM, dst, &Region::full());
        });
    });
    rt
}

#[test]
fn remote_dma_read_by_the_receiver_after_the_wait_does_not_race() {
    for mode in MODES {
        let rt = remote_copy(mode, false);
        assert!(!found(&rt), "{mode:?}: {:?}", reports(&rt));
        let rt = remote_copy(mode, true);
        assert!(found(&rt), "{mode:?}");
    }
}

#[test]
fn the_device_barrier_orders_everything_before_it() {
    for with_barrier in [true, false] {
        let rt = races(2, 1, DmaMode::Eager);
        let x = buffer(&rt, 0, HBM);
        buffer(&rt, 1, HBM);
        let s = sem(&rt, 0, SemKind::Dma);
        sem(&rt, 1, SemKind::Dma);
        thread::scope(|scope| {
            scope.spawn(|| {
                read(&rt, 0, 0, HBM, x, &Region::full());
                if with_barrier {
                    rt.device_barrier(0).unwrap();
                }
            });
            scope.spawn(|| {
                if with_barrier {
                    rt.device_barrier(1).unwrap();
                } else {
                    thread::sleep(Duration::from_millis(20));
                }
                // Device 1 overwrites device 0's buffer with a remote DMA.
                rt.dma_start(DmaRequest { src_space: HBM, dst_space: HBM, ..common::remote_dma(1, 0, x, x, (s, s)) })
                    .unwrap();
                rt.dma_wait(1, 0, s, 32).unwrap();
            });
        });
        assert_eq!(found(&rt), !with_barrier, "barrier: {with_barrier}: {:?}", reports(&rt));
    }
}

#[test]
fn sync_device_cores_orders_the_cores_of_one_device() {
    let rt = races(1, 2, DmaMode::OnWait);
    let x = buffer(&rt, 0, HBM);
    write(&rt, 0, 1, HBM, x, &Region::full());
    rt.sync_device_cores(0).unwrap();
    read(&rt, 0, 0, HBM, x, &Region::full());
    assert!(!found(&rt), "{:?}", reports(&rt));
}

#[test]
fn dma_clock_components_are_reused_once_seen() {
    for mode in MODES {
        let rt = races(1, 1, mode);
        let (src, dst) = (buffer(&rt, 0, HBM), buffer(&rt, 0, VMEM));
        let s = sem(&rt, 0, SemKind::Dma);
        // Double buffering: two DMAs in flight, each waited before reuse.
        for _ in 0..50 {
            rt.dma_start(local_dma(0, (HBM, src), (VMEM, dst), s)).unwrap();
            rt.dma_wait(0, 0, s, 32).unwrap();
            read(&rt, 0, 0, VMEM, dst, &Region::full());
        }
        assert!(!found(&rt), "{:?}", reports(&rt));
        assert!(rt_threads(&rt) <= 3, "{mode:?}: {} clock components", rt_threads(&rt));
    }
}

fn rt_threads(rt: &Runtime) -> usize {
    rt.race_clock_components().unwrap()
}

#[test]
fn reused_components_still_catch_races_of_the_previous_dma() {
    for mode in MODES {
        let rt = races(1, 2, mode);
        let (src, dst) = (buffer(&rt, 0, HBM), buffer(&rt, 0, HBM));
        let s = sem(&rt, 0, SemKind::Dma);
        // Core 0's DMA writes dst; core 1 never synchronises with it.
        rt.dma_start(local_dma(0, (HBM, src), (HBM, dst), s)).unwrap();
        rt.dma_wait(0, 0, s, 32).unwrap();
        // A second DMA of core 0 reuses the component...
        rt.dma_start(local_dma(0, (HBM, src), (HBM, src), s)).unwrap();
        rt.dma_wait(0, 0, s, 32).unwrap();
        assert_eq!(rt_threads(&rt), 3, "2 cores + 1 DMA component");
        assert!(!found(&rt), "{:?}", reports(&rt));
        // ...and core 1's read of dst still races with the first DMA's write.
        read(&rt, 0, 1, HBM, dst, &slice(0, 1));
        assert!(found(&rt), "{mode:?}");
    }
}

#[test]
fn outputs_are_the_same_with_races_on_and_off() {
    for mode in MODES {
        let run = |detect: bool| {
            let rt = runtime(1, 1, mode, detect);
            let (src, dst) = (buffer(&rt, 0, HBM), buffer(&rt, 0, VMEM));
            let s = sem(&rt, 0, SemKind::Dma);
            rt.store(MemRef::new(0, 0, HBM, src, &slice(2, 2)), &[7u8; 8]).unwrap();
            rt.dma_start(local_dma(0, (HBM, src), (VMEM, dst), s)).unwrap();
            rt.dma_wait(0, 0, s, 32).unwrap();
            rt.buffer_bytes(key(VMEM, dst, 0, 0)).unwrap()
        };
        assert_eq!(run(true), run(false));
    }
}

/// Timing, not a check: `cargo test --release --test races_runtime -- --ignored --nocapture`.
#[test]
#[ignore]
fn cost_of_race_detection_per_element() {
    // The whole buffer, and 128x128 blocks of it (runs of 128, like BlockSpec tiles).
    let block = |i: i64, j: i64| Region::new(vec![DimSel::slice(i, 128, 1), DimSel::slice(j, 128, 1)]);
    let cases = [
        ("whole 256x256", vec![Region::full()]),
        ("128x128 blocks", vec![block(0, 0), block(0, 128), block(128, 0), block(128, 128)]),
    ];
    for (name, regions) in cases {
        for detect in [false, true] {
            let rt = runtime(1, 1, DmaMode::OnWait, detect);
            let n = 256 * 256;
            let x = rt
                .allocate_buffer(
                    0,
                    None,
                    BufferSpec {
                        init: Init::Bytes(&vec![0u8; 4 * n]),
                        ..BufferSpec::new(VMEM, DType::F32, &[256, 256])
                    },
                )
                .unwrap();
            let per = n / regions.len();
            let data = vec![0u8; 4 * per];
            let mut out = vec![0u8; 4 * per];
            let reps = 50;
            // Best of 5 (the machine is shared).
            let ns = (0..5)
                .map(|_| {
                    let start = std::time::Instant::now();
                    for _ in 0..reps {
                        for r in &regions {
                            rt.store(MemRef::new(0, 0, VMEM, x, r), &data).unwrap();
                            rt.load(MemRef::new(0, 0, VMEM, x, r), &mut out).unwrap();
                        }
                    }
                    start.elapsed().as_nanos() as f64 / (2 * reps * n) as f64
                })
                .fold(f64::INFINITY, f64::min);
            println!("{name}, detect_races={detect}: {ns:.3} ns per element accessed");
        }
    }
}

#[test]
fn freed_buffers_drop_their_shadow_state() {
    let rt = races(1, 2, DmaMode::OnWait);
    for _ in 0..10 {
        // Like run_scoped scratch inside a grid loop: a fresh id each time.
        let v = buffer(&rt, 0, VMEM);
        for core in 0..2 {
            write(&rt, 0, core, VMEM, v, &Region::full());
            rt.free_buffer(0, core, VMEM, v).unwrap();
        }
    }
    let x = buffer(&rt, 0, HBM);
    write(&rt, 0, 0, HBM, x, &Region::full());
    rt.free_buffer(0, 0, HBM, x).unwrap();
    assert_eq!(rt.race_shadowed_buffers(), Some(1), "HBM is still referenced by core 1");
    rt.free_buffer(0, 1, HBM, x).unwrap();
    assert_eq!(rt.race_shadowed_buffers(), Some(0));
    assert!(!found(&rt));
}

#[test]
fn blocks_of_a_2d_buffer_race_exactly_where_they_overlap() {
    // (16, 256) in HBM; cores 0 and 1 never synchronise.
    let block = |rows: (i64, i64), cols: (i64, i64)| {
        Region::new(vec![DimSel::slice(rows.0, rows.1, 1), DimSel::slice(cols.0, cols.1, 1)])
    };
    let fresh = || {
        let rt = races(1, 2, DmaMode::OnWait);
        let x = rt
            .allocate_buffer(
                0,
                None,
                BufferSpec {
                    init: Init::Bytes(&vec![0u8; 4 * 16 * 256]),
                    ..BufferSpec::new(HBM, DType::F32, &[16, 256])
                },
            )
            .unwrap();
        (rt, x)
    };
    // Disjoint column blocks (whole chunks), a whole-buffer read by one
    // core after its own write, and the same rows in halves: no race.
    let (rt, x) = fresh();
    write(&rt, 0, 0, HBM, x, &block((0, 16), (0, 128)));
    write(&rt, 0, 1, HBM, x, &block((0, 16), (128, 128)));
    read(&rt, 0, 0, HBM, x, &block((0, 16), (0, 100)));
    read(&rt, 0, 1, HBM, x, &block((8, 8), (130, 126)));
    assert!(!found(&rt), "{:?}", reports(&rt));
    // One element of overlap, inside a chunk, in the last row only.
    let (rt, x) = fresh();
    write(&rt, 0, 0, HBM, x, &block((0, 16), (0, 128)));
    write(&rt, 0, 1, HBM, x, &block((15, 1), (127, 129)));
    assert_eq!(rt.races().unwrap().count(), 1);
    // Concurrent reads of a whole block, then a write to a corner by core 0
    // that has seen only its own read.
    let (rt, x) = fresh();
    read(&rt, 0, 0, HBM, x, &Region::full());
    read(&rt, 0, 1, HBM, x, &Region::full());
    write(&rt, 0, 0, HBM, x, &block((3, 1), (200, 1)));
    let r = reports(&rt);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].contains("read of") && r[0].contains("device 0, core 1"), "{r:?}");
}
