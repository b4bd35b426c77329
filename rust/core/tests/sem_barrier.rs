//! The device barrier: rendezvous, reuse across generations, abort, timeout.

use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::{Config, ErrorKind, RtError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn table(devices: u32, timeout: Option<Duration>) -> Arc<SemTable> {
    let config = Config { num_devices: devices, wait_timeout: timeout, ..Config::default() };
    Arc::new(SemTable::new(&config))
}

#[test]
fn single_device_barrier_passes_at_once() {
    let t = table(1, None);
    t.device_barrier(0, &|| {}).unwrap();
    t.device_barrier(0, &|| {}).unwrap();
}

#[test]
fn barrier_is_reusable_and_nobody_passes_early() {
    const DEVICES: u32 = 4;
    const ROUNDS: u32 = 50;
    let t = table(DEVICES, Some(Duration::from_secs(120)));
    let arrived = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..DEVICES)
        .map(|d| {
            let (t, arrived) = (Arc::clone(&t), Arc::clone(&arrived));
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    t.device_barrier(d, &|| {}).unwrap();
                    // Everyone of this round arrived before anyone passed.
                    assert!(arrived.load(Ordering::SeqCst) >= (round + 1) * DEVICES);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
}

#[test]
fn failure_aborts_a_waiting_device() {
    let t = table(2, None);
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || t2.device_barrier(0, &|| {}));
    thread::sleep(Duration::from_millis(20));
    t.fail(RtError::value("device 1 died").at(1, 0));
    let e = waiter.join().unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Aborted);
    assert_eq!(e.root.unwrap().message, "device 1 died");
    // After a failure the barrier refuses at once.
    assert_eq!(t.device_barrier(1, &|| {}).unwrap_err().kind, ErrorKind::Aborted);
}

#[test]
fn barrier_times_out_naming_the_arrivals() {
    let t = table(3, Some(Duration::from_millis(30)));
    let start = Instant::now();
    let e = t.device_barrier(2, &|| {}).unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert_eq!(e.message, "device barrier on device 2 waited 0.03s; 1 of 3 devices arrived");
    // The timed-out arrival was taken back: two more arrivals don't complete it.
    let t2 = Arc::clone(&t);
    let a = thread::spawn(move || t2.device_barrier(0, &|| {}));
    let b = t.device_barrier(1, &|| {});
    assert_eq!(b.unwrap_err().kind, ErrorKind::Timeout);
    assert_eq!(a.join().unwrap().unwrap_err().kind, ErrorKind::Timeout);
}

#[test]
fn bad_device_is_value_error() {
    let t = table(2, None);
    assert_eq!(t.device_barrier(2, &|| {}).unwrap_err().kind, ErrorKind::Value);
}
