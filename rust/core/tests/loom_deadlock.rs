//! Model check of deadlock detection against the park protocol: a signal
//! that races a park never yields a false deadlock, and a real deadlock is
//! always reported (every blocked waiter wakes with it) -- in every
//! interleaving of waiters, signallers and finishing devices.
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::Arc;
use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{Config, ErrorKind};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// `devices` x 1 cores, deadlock detection on, one regular semaphore.
fn table(devices: u32) -> (Arc<SemTable>, u32) {
    let config = Config {
        num_devices: devices,
        wait_timeout: None,
        detect_deadlocks: true,
        deadlock_idle: None,
        ..Config::default()
    };
    let table = SemTable::new(&config);
    let sem = (0..devices).map(|d| table.allocate(d, None, SemKind::Regular, 1).unwrap()).last().unwrap();
    (Arc::new(table), sem)
}

fn wait(t: &SemTable, device: u32, sem: u32) -> mosaic_rt_core::Result<()> {
    t.wait(device, 0, sem, 1, 0, &mut |_| panic!("no tasks in this model"))
}

#[test]
fn a_signal_racing_a_park_is_never_a_deadlock() {
    // Device 0 waits; device 1 signals it, then waits for device 0's
    // answer; device 0 answers. Correct in every interleaving.
    model(|| {
        let (t, sem) = table(2);
        let t1 = Arc::clone(&t);
        let peer = thread::spawn(move || {
            t1.signal(1, 0, sem, 1, Some(0), None).unwrap();
            wait(&t1, 1, sem).unwrap();
        });
        wait(&t, 0, sem).unwrap();
        t.signal(0, 0, sem, 1, Some(1), None).unwrap();
        peer.join().unwrap();
    });
}

#[test]
fn a_signal_then_finish_racing_a_park_is_never_a_deadlock() {
    // Device 1 signals device 0 and leaves: whenever device 0 parks (before
    // or after either step), it must get its count, never a deadlock.
    model(|| {
        let (t, sem) = table(2);
        let t1 = Arc::clone(&t);
        let peer = thread::spawn(move || {
            t1.signal(1, 0, sem, 1, Some(0), None).unwrap();
            t1.finish_device(1).unwrap();
        });
        wait(&t, 0, sem).unwrap();
        peer.join().unwrap();
        assert!(t.failure().is_none());
    });
}

#[test]
fn a_finish_without_signal_is_always_reported() {
    // Device 1 leaves without signalling: device 0's wait ends with the
    // deadlock in every interleaving (loom fails a model that hangs).
    model(|| {
        let (t, sem) = table(2);
        let t1 = Arc::clone(&t);
        let peer = thread::spawn(move || {
            t1.finish_device(1).unwrap();
        });
        let e = wait(&t, 0, sem).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deadlock);
        peer.join().unwrap();
    });
}

#[test]
fn two_crossed_waits_both_end_with_the_deadlock() {
    model(|| {
        let (t, sem) = table(2);
        let t1 = Arc::clone(&t);
        let peer = thread::spawn(move || wait(&t1, 1, sem).unwrap_err().kind);
        let mine = wait(&t, 0, sem).unwrap_err().kind;
        assert_eq!(mine, ErrorKind::Deadlock);
        assert_eq!(peer.join().unwrap(), ErrorKind::Deadlock);
    });
}
