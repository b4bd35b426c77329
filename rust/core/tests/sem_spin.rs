//! Waits that spin before they park: same results as parking at once, and
//! the shared budget learns from what the spins get.

use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::{AdaptiveSpin, Config, ErrorKind, RtError, SemKind};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const MAX: Duration = Duration::from_micros(20);

fn table(spin: &Arc<AdaptiveSpin>, timeout: Option<Duration>) -> Arc<SemTable> {
    let config =
        Config { num_devices: 2, wait_timeout: timeout, spin_before_park: Some(Arc::clone(spin)), ..Config::default() };
    Arc::new(SemTable::new(&config))
}

fn wait(t: &SemTable, device: u32, sem: u32, value: i64) -> mosaic_rt_core::Result<()> {
    t.wait(device, 0, sem, value, 0, &mut |_| panic!("no tasks are queued in these tests"))
}

fn until_parked(t: &SemTable, device: u32) {
    let end = Instant::now() + Duration::from_secs(120);
    while t.waiting_on(device, 0).unwrap().is_none() {
        assert!(Instant::now() < end, "core never parked");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_spinning_ping_pong_keeps_every_count() {
    let spin = Arc::new(AdaptiveSpin::new(MAX));
    let t = table(&spin, Some(Duration::from_secs(120)));
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let rounds = 2000;
    let t2 = Arc::clone(&t);
    let pong = thread::spawn(move || {
        for _ in 0..rounds {
            wait(&t2, 1, s, 1).unwrap();
            t2.signal(1, 0, s, 1, Some(0), None).unwrap();
        }
    });
    for _ in 0..rounds {
        t.signal(0, 0, s, 1, Some(1), None).unwrap();
        wait(&t, 0, s, 1).unwrap();
    }
    pong.join().unwrap();
    assert_eq!((t.read(0, 0, s).unwrap(), t.read(1, 0, s).unwrap()), (0, 0));
    assert!(spin.budget() <= MAX);
}

#[test]
fn a_wait_that_had_to_park_keeps_spinning() {
    // The signal comes only once the waiter is parked: its spin got nothing,
    // which on idle CPUs cost nothing either.
    let spin = Arc::new(AdaptiveSpin::outcomes_only(MAX));
    let t = table(&spin, Some(Duration::from_secs(120)));
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || wait(&t2, 1, s, 1));
    until_parked(&t, 1);
    t.signal(0, 0, s, 1, Some(1), None).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(spin.budget(), MAX);
}

#[test]
fn a_spinning_wait_still_times_out_and_still_sees_failure() {
    let spin = Arc::new(AdaptiveSpin::outcomes_only(MAX));
    let t = table(&spin, Some(Duration::from_millis(30)));
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    assert_eq!(wait(&t, 0, s, 1).unwrap_err().kind, ErrorKind::Timeout);

    let t = table(&spin, None);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || wait(&t2, 1, s, 1));
    until_parked(&t, 1);
    t.fail(RtError::value("root"));
    let err = waiter.join().unwrap().unwrap_err();
    assert_eq!((err.kind, err.root.unwrap().message), (ErrorKind::Aborted, "root".to_string()));
}
