//! Model check of the failure broadcast: when a core fails, EVERY parked
//! waiter wakes with the root cause -- waiters on different cores, on the
//! same core, and on the device barrier -- in every interleaving.
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::Arc;
use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{Config, ErrorKind, RtError};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Three threads: bound 3 keeps each model to a few seconds.
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// A table on `devices` x `cores` with one regular semaphore, no timeout.
fn table(devices: u32, cores: u32) -> (Arc<SemTable>, u32) {
    let config = Config { num_devices: devices, cores_per_device: cores, wait_timeout: None, ..Config::default() };
    let table = SemTable::new(&config);
    let sem = (0..devices).map(|d| table.allocate(d, None, SemKind::Regular, 1).unwrap()).last().unwrap();
    (Arc::new(table), sem)
}

fn assert_aborted_by_root(result: mosaic_rt_core::Result<()>) {
    let err = result.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Aborted);
    let root = err.root.expect("an abort carries its root cause");
    assert_eq!((root.message.as_str(), root.device, root.core), ("core died", Some(1), Some(0)));
}

fn spawn_wait(t: &Arc<SemTable>, device: u32, core: u32, sem: u32) -> thread::JoinHandle<()> {
    let t = Arc::clone(t);
    thread::spawn(move || {
        assert_aborted_by_root(t.wait(device, core, sem, 1, 0, &mut |_| panic!("no tasks in this model")))
    })
}

#[test]
fn failure_wakes_parked_waiters_on_two_cores() {
    model(|| {
        let (t, sem) = table(2, 1);
        let a = spawn_wait(&t, 0, 0, sem);
        let b = spawn_wait(&t, 1, 0, sem);
        t.fail(RtError::value("core died").at(1, 0));
        a.join().unwrap();
        b.join().unwrap();
    });
}

#[test]
fn failure_wakes_two_waiters_parked_on_one_core() {
    model(|| {
        let (t, sem) = table(1, 1);
        let a = spawn_wait(&t, 0, 0, sem);
        let b = spawn_wait(&t, 0, 0, sem);
        t.fail(RtError::value("core died").at(1, 0));
        a.join().unwrap();
        b.join().unwrap();
    });
}

#[test]
fn failure_wakes_a_semaphore_waiter_and_a_barrier_waiter() {
    model(|| {
        let (t, sem) = table(2, 1);
        let a = spawn_wait(&t, 0, 0, sem);
        let b = {
            let t = Arc::clone(&t);
            thread::spawn(move || assert_aborted_by_root(t.device_barrier(1, &|| {})))
        };
        t.fail(RtError::value("core died").at(1, 0));
        a.join().unwrap();
        b.join().unwrap();
    });
}

#[test]
fn the_first_failure_is_the_root_for_everyone() {
    model(|| {
        let (t, sem) = table(2, 1);
        let second = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.fail(RtError::value("second").at(0, 0)))
        };
        let first = t.fail(RtError::value("core died").at(1, 0));
        let other = second.join().unwrap();
        // Both callers get the same recorded root, whichever came first.
        assert_eq!(first, other);
        let err = t.wait(0, 0, sem, 1, 0, &mut |_| panic!("no tasks")).unwrap_err();
        assert_eq!(err.root.unwrap().message, first.message);
    });
}
