//! Model check of launch join/leave: the devices of a launch share one
//! runtime, and a new launch of the same kernel (same uid and run id) never
//! sees the state of an old one -- not its counts, not its failure -- in any
//! interleaving of the devices' joins and leaves.
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::Arc;
use mosaic_rt_core::{Config, LaunchRegistry, RtError, SemKind};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Bound 4: ~12k interleavings per model, under a second.
    builder.preemption_bound = Some(4);
    builder.check(f);
}

fn config() -> Config {
    Config { num_devices: 2, wait_timeout: None, ..Config::default() }
}

/// Device `device` runs two launches of kernel (uid 7, run 0). In the first
/// it allocates a semaphore and signals it (and device 0 fails when
/// `fail_first`); it returns the two handles.
fn device(reg: &LaunchRegistry, device: u32, fail_first: bool) -> (u64, u64) {
    let (h1, rt1) = reg.join(7, 0, device, &config()).unwrap();
    let sem = rt1.allocate_semaphores(device, None, SemKind::Regular, 1).unwrap();
    rt1.semaphore_signal(device, 0, sem, 1, None, None).unwrap();
    if fail_first && device == 0 {
        rt1.fail(RtError::value("launch 1 failed").at(0, 0));
        reg.abandon(h1, device);
    } else {
        reg.leave(h1, device);
    }
    drop(rt1);
    let (h2, rt2) = reg.join(7, 0, device, &config()).unwrap();
    // A fresh runtime: no failure, no semaphore, no count.
    assert!(rt2.failure().is_none());
    assert!(rt2.semaphore_read(device, 0, sem).is_err());
    assert!(rt2.leaks(None).unwrap().is_empty());
    reg.leave(h2, device);
    (h1, h2)
}

fn two_devices(fail_first: bool) {
    let reg = Arc::new(LaunchRegistry::new());
    let other = {
        let reg = Arc::clone(&reg);
        thread::spawn(move || device(&reg, 1, fail_first))
    };
    let (a1, a2) = device(&reg, 0, fail_first);
    let (b1, b2) = other.join().unwrap();
    // The same launch is the same instance for both devices; the two
    // launches are different instances.
    assert_eq!((a1, a2), (b1, b2));
    assert_ne!(a1, a2);
    // Everything is torn down.
    assert!(reg.is_empty());
    assert_eq!(reg.launches_tracked(), 0);
}

#[test]
fn a_new_launch_never_sees_the_old_one() {
    model(|| two_devices(false));
}

#[test]
fn a_new_launch_never_sees_the_old_ones_failure() {
    model(|| two_devices(true));
}
