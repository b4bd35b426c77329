//! A launch spanning processes, simulated in one process: each "process"
//! is a registry of its own, attached to a loopback hub. Checks remote
//! signals, remote DMAs in both modes, the device barrier, failure
//! propagation and deadlock detection across processes.

mod common;

use mosaic_rt_core::remote::LoopbackHub;
use mosaic_rt_core::{
    BufferKey, BufferSpec, Config, DType, DimSel, DmaMode, DmaRequest, ErrorKind, Init, LaunchRegistry, MemRef,
    MemorySpace, Region, RtError, Runtime, SemKind,
};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// `n` registries attached to one hub, one device each.
fn job(n: u32) -> Vec<&'static LaunchRegistry> {
    let hub = LoopbackHub::new(n);
    (0..n)
        .map(|p| {
            let reg: &'static LaunchRegistry = Box::leak(Box::new(LaunchRegistry::new()));
            reg.attach(hub.endpoint(p)).unwrap();
            reg
        })
        .collect()
}

fn config(n: u32, mode: DmaMode) -> Config {
    Config {
        num_devices: n,
        dma_mode: mode,
        wait_timeout: Some(Duration::from_secs(30)),
        detect_deadlocks: true,
        owners: Some((0..n).collect::<Vec<u32>>().into()),
        ..Config::default()
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Device `d`'s program of a right-permute: its HBM buffer of 4 values
/// `d*10..` goes to device `d+1`'s output; returns the output.
fn permute(reg: &LaunchRegistry, d: u32, n: u32, mode: DmaMode) -> Result<Vec<u8>, RtError> {
    permute_zeroing(reg, d, n, mode, false)
}

/// [`permute`]; with `zero`, each device zeroes its output after starting
/// its own copy and before waiting (racing the copy it receives).
fn permute_zeroing(reg: &LaunchRegistry, d: u32, n: u32, mode: DmaMode, zero: bool) -> Result<Vec<u8>, RtError> {
    let (h, rt) = reg.join(5, 0, d, &config(n, mode))?;
    let values: Vec<f32> = (0..4).map(|i| (d * 10 + i) as f32).collect();
    let bytes = f32_bytes(&values);
    let spec = |init| BufferSpec { init, ..BufferSpec::new(MemorySpace::Hbm, DType::F32, &[4]) };
    let result = (|| {
        let src = rt.allocate_buffer(d, None, spec(Init::Bytes(&bytes)))?;
        let dst = rt.allocate_buffer(d, None, spec(Init::Fill))?;
        let sems = rt.allocate_semaphores(d, None, SemKind::Dma, 2)?;
        rt.device_barrier(d)?;
        rt.dma_start(DmaRequest {
            src_space: MemorySpace::Hbm,
            dst_space: MemorySpace::Hbm,
            ..common::remote_dma(d, (d + 1) % n, src, dst, (sems, sems + 1))
        })?;
        if zero {
            // Give the neighbour's copy time to arrive first.
            thread::sleep(Duration::from_millis(20));
            let full = Region::full();
            rt.store(MemRef::new(d, 0, MemorySpace::Hbm, dst, &full), &[0u8; 16])?;
        }
        rt.dma_wait(d, 0, sems, 16)?;
        rt.dma_wait(d, 0, sems + 1, 16)?;
        rt.device_barrier(d)?;
        rt.buffer_bytes(BufferKey::for_access(MemorySpace::Hbm, dst, d, 0))
    })();
    finish(reg, h, &rt, d, result)
}

fn finish<T>(reg: &LaunchRegistry, h: u64, rt: &Runtime, d: u32, r: Result<T, RtError>) -> Result<T, RtError> {
    match r {
        Ok(v) => {
            reg.leave(h, d);
            Ok(v)
        }
        Err(e) => {
            let root = rt.fail(e);
            reg.abandon(h, d);
            Err(root)
        }
    }
}

fn run_all<T: Send + 'static>(n: u32, f: impl Fn(&'static LaunchRegistry, u32) -> T + Send + Sync + 'static) -> Vec<T> {
    let regs = job(n);
    let f = Arc::new(f);
    let threads: Vec<_> = regs
        .into_iter()
        .enumerate()
        .map(|(p, reg)| {
            let f = Arc::clone(&f);
            thread::spawn(move || f(reg, p as u32))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn remote_dmas_cross_processes_in_every_mode() {
    for mode in [DmaMode::Eager, DmaMode::OnWait, DmaMode::Tpu] {
        let out = run_all(3, move |reg, p| permute(reg, p, 3, mode).unwrap());
        for (d, bytes) in out.iter().enumerate() {
            let from = (d as u32 + 2) % 3;
            let want: Vec<f32> = (0..4).map(|i| (from * 10 + i) as f32).collect();
            assert_eq!(bytes, &f32_bytes(&want), "{mode:?} device {d}");
        }
    }
}

#[test]
fn under_tpu_a_copy_from_another_process_lands_at_the_destinations_wait() {
    // The copy arrives while the destination stores to its output: it lands
    // at the destination's wait, after the store, never before it.
    let out = run_all(2, move |reg, p| permute_zeroing(reg, p, 2, DmaMode::Tpu, true).unwrap());
    for (d, bytes) in out.iter().enumerate() {
        let from = (d as u32 + 1) % 2;
        let want: Vec<f32> = (0..4).map(|i| (from * 10 + i) as f32).collect();
        assert_eq!(bytes, &f32_bytes(&want), "device {d}");
    }
}

#[test]
fn remote_signals_ping_pong() {
    let out = run_all(2, |reg, d| {
        let (h, rt) = reg.join(9, 0, d, &config(2, DmaMode::Eager)).unwrap();
        let r = (|| {
            let sem = rt.allocate_semaphores(d, None, SemKind::Regular, 1)?;
            rt.device_barrier(d)?;
            for _ in 0..200 {
                if d == 0 {
                    rt.semaphore_signal(0, 0, sem, 1, Some(1), None)?;
                    rt.semaphore_wait(0, 0, sem, 1)?;
                } else {
                    rt.semaphore_wait(1, 0, sem, 1)?;
                    rt.semaphore_signal(1, 0, sem, 1, Some(0), None)?;
                }
            }
            Ok(())
        })();
        finish(reg, h, &rt, d, r)
    });
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
}

#[test]
fn a_failure_in_one_process_ends_waits_in_all() {
    let out = run_all(2, |reg, d| {
        let (h, rt) = reg.join(11, 0, d, &config(2, DmaMode::Eager)).unwrap();
        let r = (|| {
            let sem = rt.allocate_semaphores(d, None, SemKind::Regular, 1)?;
            if d == 1 {
                thread::sleep(Duration::from_millis(50));
                return Err(RtError::value("boom in process 1"));
            }
            rt.semaphore_wait(0, 0, sem, 1)
        })();
        finish(reg, h, &rt, d, r)
    });
    for r in &out {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.root_cause().kind, ErrorKind::Value, "{e:?}");
        assert!(e.root_cause().message.contains("boom in process 1"), "{e:?}");
    }
}

#[test]
fn a_deadlock_across_processes_is_reported_in_every_process() {
    let started = Instant::now();
    let out = run_all(2, |reg, d| {
        let (h, rt) = reg.join(13, 0, d, &config(2, DmaMode::Eager)).unwrap();
        let r = (|| {
            let sem = rt.allocate_semaphores(d, None, SemKind::Regular, 1)?;
            rt.device_barrier(d)?;
            // Both wait for a signal nobody sends.
            rt.semaphore_wait(d, 0, sem, 1)
        })();
        finish(reg, h, &rt, d, r)
    });
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    for r in &out {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deadlock, "{e:?}");
        assert!(e.message.contains("process 0:") && e.message.contains("process 1:"), "{}", e.message);
        assert!(e.message.contains("device 0, core 0") && e.message.contains("device 1, core 0"), "{}", e.message);
    }
}

#[test]
fn without_a_transport_only_what_stays_in_the_process_runs() {
    let reg = LaunchRegistry::new();
    let (h, rt) = reg.join(1, 0, 0, &config(2, DmaMode::Eager)).unwrap();
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    rt.device_barrier(0).unwrap(); // the other process's device is not waited for
    rt.semaphore_signal(0, 0, sem, 1, Some(0), None).unwrap();
    let e = rt.semaphore_signal(0, 0, sem, 1, Some(1), None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Runtime);
    assert!(e.message.contains("mosaic_rt[mpi]"), "{}", e.message);
    reg.leave(h, 0);
}

#[allow(dead_code)]
fn _runtime_is_send_sync(rt: Arc<Runtime>) -> impl Send + Sync {
    rt
}

#[test]
fn a_process_that_never_joins_is_named() {
    let regs = job(2);
    let reg = regs[0];
    let (h, rt) = reg.join(17, 0, 0, &config(2, DmaMode::Eager)).unwrap();
    let r = (|| {
        rt.allocate_semaphores(0, None, SemKind::Regular, 1)?;
        rt.device_barrier(0)
    })();
    let e = finish(reg, h, &rt, 0, r).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Deadlock, "{e:?}");
    assert!(e.message.contains("process 1: device(s) 1 never joined this launch"), "{}", e.message);
}

/// Device `d` sends its (256, 128) f32 HBM buffer to device `1 - d` three
/// ways: into the right half of a (256, 256) buffer (a strided
/// destination: staged), into a (256, 128) buffer (landed in place, the
/// data following its header apart) and its first 8 rows whole (a small
/// DMA: one frame). `dst_row`: the first row of the in-place destination
/// (past the end: that DMA fails at the destination). Returns the three
/// destinations' bytes.
fn large_dmas(reg: &LaunchRegistry, uid: u64, d: u32, dst_row: i64) -> Result<[Vec<u8>; 3], RtError> {
    let (h, rt) = reg.join(uid, 0, d, &config(2, DmaMode::Eager))?;
    let values: Vec<f32> = (0..256 * 128).map(|i| (d * 1_000_000 + i) as f32).collect();
    let bytes = f32_bytes(&values);
    let spec =
        |shape: &'static [usize], init| BufferSpec { init, ..BufferSpec::new(MemorySpace::Hbm, DType::F32, shape) };
    let result = (|| {
        let src = rt.allocate_buffer(d, None, spec(&[256, 128], Init::Bytes(&bytes)))?;
        let wide = rt.allocate_buffer(d, None, spec(&[256, 256], Init::Fill))?;
        let full = rt.allocate_buffer(d, None, spec(&[256, 128], Init::Fill))?;
        let small = rt.allocate_buffer(d, None, spec(&[8, 128], Init::Fill))?;
        let sems = rt.allocate_semaphores(d, None, SemKind::Dma, 2)?;
        rt.device_barrier(d)?;
        let rows = |start, n| DimSel::slice(start, n, 1);
        let dmas = [
            (Region::full(), wide, Region::new(vec![rows(0, 256), rows(128, 128)])),
            (Region::full(), full, Region::new(vec![rows(dst_row, 256), rows(0, 128)])),
            (Region::new(vec![rows(0, 8)]), small, Region::full()),
        ];
        let mut total = 0;
        for (src_region, dst_id, dst_region) in dmas {
            let n = if dst_id == small { 8 * 128 * 4 } else { 256 * 128 * 4 };
            total += n;
            rt.dma_start(DmaRequest {
                src_space: MemorySpace::Hbm,
                src_region,
                dst_space: MemorySpace::Hbm,
                dst_region,
                ..common::remote_dma(d, 1 - d, src, dst_id, (sems, sems + 1))
            })?;
        }
        rt.dma_wait(d, 0, sems, total)?;
        rt.dma_wait(d, 0, sems + 1, total)?;
        rt.device_barrier(d)?;
        let read = |id| rt.buffer_bytes(BufferKey::for_access(MemorySpace::Hbm, id, d, 0));
        Ok([read(wide)?, read(full)?, read(small)?])
    })();
    finish(reg, h, &rt, d, result)
}

#[test]
fn large_remote_dmas_land_in_place_staged_or_whole_and_a_failed_one_keeps_the_stream_in_step() {
    let out = run_all(2, |reg, d| {
        // Launch 1: the in-place DMA's destination starts past the end.
        let failed = large_dmas(reg, 21, d, 300).unwrap_err();
        // Launch 2 finds its own data behind each header.
        (failed, large_dmas(reg, 22, d, 0).unwrap())
    });
    for (d, (failed, [wide, full, small])) in out.iter().enumerate() {
        assert!(format!("{failed:?}").contains("Out-of-bounds write"), "{failed:?}");
        let from = 1 - d as u32;
        let sent: Vec<f32> = (0..256 * 128).map(|i| (from * 1_000_000 + i) as f32).collect();
        assert_eq!(full, &f32_bytes(&sent), "device {d}: in place");
        assert_eq!(small, &f32_bytes(&sent[..8 * 128]), "device {d}: small");
        let right: Vec<u8> = wide.chunks(256 * 4).flat_map(|row| row[128 * 4..].to_vec()).collect();
        assert_eq!(right, f32_bytes(&sent), "device {d}: staged");
    }
}
