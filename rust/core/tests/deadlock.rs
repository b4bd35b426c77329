//! Deadlock detection on real threads: each case is a small "kernel" whose
//! cores are threads; a deadlock must end every blocked wait at once with
//! `ErrorKind::Deadlock` naming the blocked cores, and correct programs with
//! long waits must never be reported.

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::CoreState;
use mosaic_rt_core::{
    Config, DType, DmaMode, DmaRequest, ErrorKind, Init, LaunchRegistry, MemorySpace, Region, RtError, Runtime, SemKind,
};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn config(devices: u32, cores: u32) -> Config {
    Config {
        num_devices: devices,
        cores_per_device: cores,
        // Far beyond any detection delay: a deadlock shows as ErrorKind::Deadlock,
        // a missed one as ErrorKind::Timeout (never a race with the clock).
        wait_timeout: Some(Duration::from_secs(120)),
        detect_deadlocks: true,
        deadlock_idle: Some(Duration::from_millis(200)),
        ..Config::default()
    }
}

fn runtime(devices: u32, cores: u32) -> Arc<Runtime> {
    Arc::new(Runtime::new(config(devices, cores)).unwrap())
}

fn sem(rt: &Runtime, kind: SemKind) -> u32 {
    let n = rt.topology().num_devices;
    (0..n).map(|d| rt.allocate_semaphores(d, None, kind, 1).unwrap()).last().unwrap()
}

/// Runs `f(device)` on one thread per device; returns the results.
fn on_devices<T: Send + 'static>(rt: &Arc<Runtime>, f: impl Fn(&Runtime, u32) -> T + Send + Sync + 'static) -> Vec<T> {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..rt.topology().num_devices)
        .map(|d| {
            let (rt, f) = (Arc::clone(rt), Arc::clone(&f));
            thread::spawn(move || f(&rt, d))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn deadlock(r: mosaic_rt_core::Result<()>) -> String {
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
    e.message
}

#[test]
fn a_self_wait_with_nothing_to_signal_it_fails_at_once() {
    let rt = runtime(1, 1);
    let s = sem(&rt, SemKind::Regular);
    // At once: reported by the wait itself (not by a timeout, and not by the
    // idle detector, whose report says the process used no CPU time).
    let msg = deadlock(rt.semaphore_wait(0, 0, s, 2));
    assert!(msg.starts_with("deadlock: every core of the launch (1 device(s) x 1 core(s)) is blocked"), "{msg}");
    assert!(msg.contains("device 0, core 0: waits on REGULAR semaphore 2000 for 2 (count is 0)"), "{msg}");
}

#[test]
fn two_devices_each_waiting_for_the_other_both_fail() {
    let rt = runtime(2, 1);
    let s = sem(&rt, SemKind::Regular);
    let results = on_devices(&rt, move |rt, d| {
        rt.semaphore_wait(d, 0, s, 1)?;
        rt.semaphore_signal(d, 0, s, 1, Some(1 - d), None)
    });
    for r in results {
        let msg = deadlock(r);
        assert!(msg.contains("device 0, core 0: waits") && msg.contains("device 1, core 0: waits"), "{msg}");
    }
}

#[test]
fn a_ping_pong_bug_reports_the_cycle() {
    let rt = runtime(2, 1);
    let s = sem(&rt, SemKind::Regular);
    let results = on_devices(&rt, move |rt, d| {
        rt.semaphore_signal(d, 0, s, 1, Some(1 - d), None)?;
        rt.semaphore_wait(d, 0, s, 1)?;
        rt.semaphore_wait(d, 0, s, 1)
    });
    let msg = deadlock(results.into_iter().next().unwrap());
    assert!(msg.contains("device 0, core 0 -> device 1, core 0 -> device 0, core 0"), "{msg}");
}

#[test]
fn a_correct_ring_with_many_parks_is_never_reported() {
    let rt = runtime(4, 1);
    let s = sem(&rt, SemKind::Regular);
    let results = on_devices(&rt, move |rt, d| {
        for _ in 0..500 {
            rt.semaphore_signal(d, 0, s, 1, Some((d + 1) % 4), None)?;
            rt.semaphore_wait(d, 0, s, 1)?;
        }
        rt.leave_device(d)
    });
    for r in results {
        r.unwrap();
    }
    assert!(rt.failure().is_none());
}

#[test]
fn a_slow_signaller_is_not_a_deadlock() {
    let rt = runtime(2, 1);
    let s = sem(&rt, SemKind::Regular);
    let results = on_devices(&rt, move |rt, d| {
        if d == 1 {
            // Busy, not blocked: no transition says "blocked".
            let start = Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(400) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            rt.semaphore_signal(1, 0, s, 1, Some(0), None)
        } else {
            rt.semaphore_wait(0, 0, s, 1)
        }
    });
    for r in results {
        r.unwrap();
    }
}

#[test]
fn a_device_that_ended_early_is_named() {
    let rt = runtime(2, 1);
    let s = sem(&rt, SemKind::Regular);
    let results = on_devices(&rt, move |rt, d| if d == 0 { rt.semaphore_wait(0, 0, s, 1) } else { rt.leave_device(1) });
    let mut it = results.into_iter();
    let msg = deadlock(it.next().unwrap());
    assert!(msg.contains("device 1, core 0: finished (its program left the launch)"), "{msg}");
    it.next().unwrap().unwrap();
}

#[test]
fn a_barrier_a_finished_device_never_reaches() {
    let rt = runtime(3, 1);
    let results = on_devices(&rt, |rt, d| if d == 2 { rt.leave_device(2) } else { rt.device_barrier(d) });
    let mut it = results.into_iter();
    let msg = deadlock(it.next().unwrap());
    assert!(msg.contains("waits in the device barrier for device(s) 2 to arrive"), "{msg}");
    assert_eq!(deadlock(it.next().unwrap()), msg);
}

#[test]
fn a_signal_to_the_wrong_core_is_hinted() {
    let rt = runtime(1, 2);
    let s = sem(&rt, SemKind::Regular);
    rt.semaphore_signal(0, 1, s, 1, None, Some(1)).unwrap(); // meant core 0
    rt.finish_core(0, 1).unwrap();
    let msg = deadlock(rt.semaphore_wait(0, 0, s, 1));
    assert!(msg.contains("semaphore 2000 has count 1 on device 0, core 1 while device 0, core 0 waits"), "{msg}");
}

fn dma_runtime(mode: DmaMode) -> (Arc<Runtime>, u32, u32, u32) {
    let rt = Arc::new(Runtime::new(Config { dma_mode: mode, ..config(1, 1) }).unwrap());
    let data = [0u8; 64];
    let src = rt
        .allocate_buffer(
            0,
            None,
            BufferSpec { init: Init::Bytes(&data), ..BufferSpec::new(MemorySpace::Hbm, DType::F32, &[16]) },
        )
        .unwrap();
    let dst = rt.allocate_buffer(0, None, BufferSpec::new(MemorySpace::Vmem, DType::F32, &[16])).unwrap();
    let s = sem(&rt, SemKind::Dma);
    (rt, src, dst, s)
}

#[test]
fn a_dma_wait_whose_dma_was_never_started() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let (rt, _, _, s) = dma_runtime(mode);
        let msg = deadlock(rt.dma_wait(0, 0, s, 64));
        assert!(msg.contains("waits on DMA semaphore 2000 for 64 bytes (count is 0)"), "{msg}");
        assert!(msg.contains("waiting for 64 bytes on DMA semaphore 2000: no DMA was started on it"), "{msg}");
    }
}

#[test]
fn a_dma_wait_for_more_than_the_started_dmas_deliver() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let (rt, src, dst, s) = dma_runtime(mode);
        let half = Region::new(vec![mosaic_rt_core::DimSel::slice(0, 8, 1)]);
        let req = DmaRequest { src_region: half.clone(), dst_region: half, ..common::dma(src, dst, s) };
        rt.dma_start(req.clone()).unwrap();
        let msg = deadlock(rt.dma_wait(0, 0, s, 64));
        assert!(
            msg.contains("the 1 DMA(s) started on it have all delivered, 32 bytes in all (last"),
            "{mode:?}: {msg}"
        );
    }
}

#[test]
fn a_device_that_never_joins_is_found_once_the_process_is_idle() {
    let rt = Arc::new(Runtime::new_launch(config(2, 1)).unwrap());
    rt.join_device(0).unwrap();
    let s = sem(&rt, SemKind::Regular);
    let waiter = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || rt.semaphore_wait(0, 0, s, 1))
    };
    while rt.core_state(0, 0).unwrap() == CoreState::Running {
        thread::sleep(Duration::from_millis(5));
    }
    // Not yet: the process has not been idle for the window.
    let now = Instant::now();
    rt.sems_tick(Some(now), now);
    assert!(rt.failure().is_none());
    // Idle since long before the window: device 1 counts as stuck.
    rt.sems_tick(Some(now - Duration::from_secs(5)), now + Duration::from_secs(1));
    let msg = deadlock(waiter.join().unwrap());
    assert!(msg.contains("device 1: never joined this launch"), "{msg}");
    assert!(msg.contains("the process used no CPU time for"), "{msg}");
}

#[test]
fn a_core_inside_a_host_callback_is_never_reported() {
    let rt = runtime(2, 1);
    let s = sem(&rt, SemKind::Regular);
    rt.callback_state(1, 0, true).unwrap();
    let waiter = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || rt.semaphore_wait(0, 0, s, 1))
    };
    while rt.core_state(0, 0).unwrap() == CoreState::Running {
        thread::sleep(Duration::from_millis(5));
    }
    let now = Instant::now();
    rt.sems_tick(Some(now - Duration::from_secs(5)), now + Duration::from_secs(1));
    assert!(rt.failure().is_none(), "a core in a host callback may still signal");
    rt.callback_state(1, 0, false).unwrap();
    rt.semaphore_signal(1, 0, s, 1, Some(0), None).unwrap();
    waiter.join().unwrap().unwrap();
}

#[test]
fn the_detector_thread_finds_a_device_that_never_joins() {
    // End to end through the registry and the real detector thread (the
    // test process is idle while the waiter is parked).
    let reg = LaunchRegistry::new();
    let (handle, rt) = reg.join(77, 1, 0, &config(2, 1)).unwrap();
    let s = sem(&rt, SemKind::Regular);
    // Found by the detector (ErrorKind::Deadlock), not ended by the wait
    // timeout; how soon depends on the process going idle (the other tests
    // of this binary run at the same time), so no bound on the time.
    let msg = deadlock(rt.semaphore_wait(0, 0, s, 1));
    assert!(msg.contains("device 1: never joined"), "{msg}");
    reg.abandon(handle, 0);
}

#[test]
fn without_detection_a_wait_times_out() {
    let rt = Arc::new(
        Runtime::new(Config { detect_deadlocks: false, wait_timeout: Some(Duration::from_millis(50)), ..config(1, 1) })
            .unwrap(),
    );
    let s = sem(&rt, SemKind::Regular);
    assert_eq!(rt.semaphore_wait(0, 0, s, 1).unwrap_err().kind, ErrorKind::Timeout);
}

#[test]
fn a_freed_failed_launch_leaves_a_tombstone() {
    let reg = LaunchRegistry::new();
    let (handle, rt) = reg.join(78, 1, 0, &config(1, 1)).unwrap();
    rt.fail(RtError::value("the root cause").at(0, 0));
    reg.abandon(handle, 0);
    assert!(reg.get(handle).is_none());
    let root = reg.tombstone(handle).expect("a tombstone");
    assert_eq!(root.message, "the root cause");
    assert!(reg.tombstone(handle + 1000).is_none());
}
