//! Model checks of the signal / wait / park protocol and of failure
//! wake-ups (no lost wake-up in any interleaving).
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::Arc;
use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{AdaptiveSpin, Config, ErrorKind, RtError};

fn model(f: impl Fn() + Sync + Send + 'static) {
    // Bound 5 keeps these 2-3 thread models to seconds; unbounded they take
    // minutes (benches/PERFORMANCE.md, "Bench harness and test runs").
    model_bounded(5, f);
}

/// Three threads that each park or wake: bound 3 keeps them to seconds.
fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

/// A table on `devices` x 1 cores with one regular semaphore, no timeout.
fn table(devices: u32) -> (Arc<SemTable>, u32) {
    let config = Config { num_devices: devices, wait_timeout: None, ..Config::default() };
    let table = SemTable::new(&config);
    let sem = table.allocate(0, None, SemKind::Regular, 1).unwrap();
    (Arc::new(table), sem)
}

fn wait(t: &SemTable, device: u32, sem: u32, value: i64) -> mosaic_rt_core::Result<()> {
    t.wait(device, 0, sem, value, 0, &mut |_| panic!("no tasks in this model"))
}

#[test]
fn signal_wakes_a_parked_waiter() {
    model(|| {
        let (t, sem) = table(2);
        let t2 = Arc::clone(&t);
        let signaller = thread::spawn(move || t2.signal(1, 0, sem, 1, Some(0), None).unwrap());
        wait(&t, 0, sem, 1).unwrap();
        signaller.join().unwrap();
        assert_eq!(t.read(0, 0, sem).unwrap(), 0);
    });
}

#[test]
fn two_signallers_one_waiter_for_the_sum() {
    model(|| {
        let (t, sem) = table(1);
        let signallers: Vec<_> = (0..2)
            .map(|_| {
                let t = Arc::clone(&t);
                thread::spawn(move || t.signal(0, 0, sem, 1, None, None).unwrap())
            })
            .collect();
        wait(&t, 0, sem, 2).unwrap();
        for s in signallers {
            s.join().unwrap();
        }
        assert_eq!(t.read(0, 0, sem).unwrap(), 0);
    });
}

#[test]
fn two_waiters_on_one_core_each_take_their_share() {
    model(|| {
        let (t, sem) = table(1);
        let t2 = Arc::clone(&t);
        let other = thread::spawn(move || wait(&t2, 0, sem, 1).unwrap());
        t.signal(0, 0, sem, 2, None, None).unwrap();
        wait(&t, 0, sem, 1).unwrap();
        other.join().unwrap();
        assert_eq!(t.read(0, 0, sem).unwrap(), 0);
    });
}

#[test]
fn failure_wakes_a_parked_waiter_with_the_root_cause() {
    model(|| {
        let (t, sem) = table(1);
        let t2 = Arc::clone(&t);
        let failer = thread::spawn(move || t2.fail(RtError::value("root").at(0, 0)));
        let err = wait(&t, 0, sem, 1).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Aborted);
        assert_eq!(err.root.unwrap().message, "root");
        failer.join().unwrap();
    });
}

#[test]
fn barrier_of_two_devices_and_failure() {
    model(|| {
        let (t, _) = table(2);
        let t2 = Arc::clone(&t);
        let other = thread::spawn(move || t2.device_barrier(1, &|| {}).unwrap());
        t.device_barrier(0, &|| {}).unwrap();
        other.join().unwrap();
    });
    model(|| {
        let (t, _) = table(2);
        let t2 = Arc::clone(&t);
        let failer = thread::spawn(move || {
            t2.fail(RtError::value("device 1 died"));
        });
        assert_eq!(t.device_barrier(0, &|| {}).unwrap_err().kind, ErrorKind::Aborted);
        failer.join().unwrap();
    });
}

/// A table on `devices` x 1 cores with two regular semaphores, no timeout.
fn table_of_two(devices: u32) -> (Arc<SemTable>, u32, u32) {
    let config = Config { num_devices: devices, wait_timeout: None, ..Config::default() };
    let table = SemTable::new(&config);
    let first = table.allocate(0, None, SemKind::Regular, 2).unwrap();
    (Arc::new(table), first, first + 1)
}

#[test]
fn a_signal_of_another_semaphore_does_not_hide_the_awaited_one() {
    // Wakers skip a parked core that waits on another semaphore: the skip
    // must never swallow the wake-up of the awaited one.
    model(|| {
        let (t, a, b) = table_of_two(2);
        let t2 = Arc::clone(&t);
        let signaller = thread::spawn(move || {
            t2.signal(1, 0, b, 1, Some(0), None).unwrap();
            t2.signal(1, 0, a, 1, Some(0), None).unwrap();
        });
        wait(&t, 0, a, 1).unwrap();
        signaller.join().unwrap();
        assert_eq!(t.read(0, 0, a).unwrap(), 0);
        assert_eq!(t.read(0, 0, b).unwrap(), 1);
    });
}

#[test]
fn racing_signals_of_both_semaphores_wake_the_waiter() {
    // One waker may skip because a notify is pending (`notified`) or because
    // its semaphore is not awaited, while the other's wake-up is in flight.
    model_bounded(3, || {
        let (t, a, b) = table_of_two(3);
        let signallers: Vec<_> = [(1, b), (2, a)]
            .into_iter()
            .map(|(device, sem)| {
                let t = Arc::clone(&t);
                thread::spawn(move || t.signal(device, 0, sem, 1, Some(0), None).unwrap())
            })
            .collect();
        wait(&t, 0, a, 1).unwrap();
        for s in signallers {
            s.join().unwrap();
        }
        assert_eq!(t.read(0, 0, a).unwrap(), 0);
    });
}

#[test]
fn two_waiters_on_one_core_wait_on_different_semaphores() {
    // Only the record of one sleeper is kept: with two the wake-up must
    // never be skipped (here the one for `a` is the only one coming).
    model_bounded(3, || {
        let (t, a, b) = table_of_two(1);
        let t2 = Arc::clone(&t);
        let other = thread::spawn(move || wait(&t2, 0, b, 1).unwrap());
        let t3 = Arc::clone(&t);
        let signaller = thread::spawn(move || t3.signal(0, 0, a, 1, None, None).unwrap());
        wait(&t, 0, a, 1).unwrap();
        t.signal(0, 0, b, 1, None, None).unwrap();
        other.join().unwrap();
        signaller.join().unwrap();
        assert_eq!((t.read(0, 0, a).unwrap(), t.read(0, 0, b).unwrap()), (0, 0));
    });
}

/// A 2-device table whose waits spin before they park (in loom a spin is a
/// few checks with yields: it can miss, then the wait parks).
fn spinning_table() -> (Arc<SemTable>, u32) {
    let spin = std::sync::Arc::new(AdaptiveSpin::outcomes_only(std::time::Duration::from_micros(20)));
    let config = Config { num_devices: 2, wait_timeout: None, spin_before_park: Some(spin), ..Config::default() };
    let table = SemTable::new(&config);
    let sem = table.allocate(0, None, SemKind::Regular, 1).unwrap();
    (Arc::new(table), sem)
}

#[test]
fn a_waiter_that_spins_then_parks_is_woken() {
    model(|| {
        let (t, sem) = spinning_table();
        let t2 = Arc::clone(&t);
        let signaller = thread::spawn(move || t2.signal(1, 0, sem, 1, Some(0), None).unwrap());
        wait(&t, 0, sem, 1).unwrap();
        signaller.join().unwrap();
        assert_eq!(t.read(0, 0, sem).unwrap(), 0);
    });
}

#[test]
fn a_spinning_ping_pong_round_completes() {
    // Both sides wait in turn, each spinning (hit or miss) before parking.
    model_bounded(3, || {
        let (t, sem) = spinning_table();
        let t2 = Arc::clone(&t);
        let pong = thread::spawn(move || {
            wait(&t2, 1, sem, 1).unwrap();
            t2.signal(1, 0, sem, 1, Some(0), None).unwrap();
        });
        t.signal(0, 0, sem, 1, Some(1), None).unwrap();
        wait(&t, 0, sem, 1).unwrap();
        pong.join().unwrap();
        assert_eq!((t.read(0, 0, sem).unwrap(), t.read(1, 0, sem).unwrap()), (0, 0));
    });
}
