//! Model checks of the signal / wait / park protocol and of failure
//! wake-ups (no lost wake-up in any interleaving).
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::Arc;
use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{Config, ErrorKind, RtError};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Bound 5 explores these 2-3 thread models in ~5 s (unbounded: ~5 min).
    builder.preemption_bound = Some(5);
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
