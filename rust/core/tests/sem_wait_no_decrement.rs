//! Non-decrementing waits (`pl.semaphore_wait(sem, v, decrement=False)`):
//! block until count >= v and leave the count; park until a signal, time
//! out, fail with the launch and count for deadlock detection like a
//! decrementing wait.

use mosaic_rt_core::internals::{SemTable, SemWait};
use mosaic_rt_core::{Config, ErrorKind, Runtime, SemKind};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn table(devices: u32, timeout: Option<Duration>, deadlocks: bool) -> Arc<SemTable> {
    let config =
        Config { num_devices: devices, wait_timeout: timeout, detect_deadlocks: deadlocks, ..Config::default() };
    Arc::new(SemTable::new(&config))
}

fn no_tasks<T>(_: T) -> mosaic_rt_core::Result<()> {
    panic!("no tasks are queued in these tests")
}

fn wait_nodec(t: &SemTable, device: u32, sem: u32, value: i64) -> mosaic_rt_core::Result<()> {
    t.wait_with(SemWait { device, core: 0, sem, value, decrement: false, site: 0 }, &mut no_tasks)
}

fn until_parked(t: &SemTable, device: u32) {
    let end = Instant::now() + Duration::from_secs(120);
    while t.waiting_on(device, 0).unwrap().is_none() {
        assert!(Instant::now() < end, "core never parked");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_non_decrementing_wait_leaves_the_count() {
    let t = table(1, None, false);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    t.signal(0, 0, s, 3, None, None).unwrap();
    wait_nodec(&t, 0, s, 2).unwrap();
    wait_nodec(&t, 0, s, 3).unwrap();
    wait_nodec(&t, 0, s, 0).unwrap();
    assert_eq!(t.read(0, 0, s).unwrap(), 3);
    // The decrementing flag of `wait_with` is the normal wait.
    t.wait_with(SemWait { device: 0, core: 0, sem: s, value: 2, decrement: true, site: 0 }, &mut no_tasks).unwrap();
    assert_eq!(t.read(0, 0, s).unwrap(), 1);
}

#[test]
fn bad_values_are_value_errors() {
    let t = table(1, None, false);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let e = wait_nodec(&t, 0, s, -1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("-1"), "{}", e.message);
    assert_eq!(wait_nodec(&t, 0, s + 7, 0).unwrap_err().kind, ErrorKind::Value);
}

#[test]
fn a_parked_non_decrementing_waiter_is_woken_by_a_signal() {
    let t = table(2, Some(Duration::from_secs(120)), false);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || wait_nodec(&t2, 0, s, 2));
    until_parked(&t, 0);
    t.signal(1, 0, s, 1, Some(0), None).unwrap();
    t.signal(1, 0, s, 1, Some(0), None).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(t.read(0, 0, s).unwrap(), 2, "the count is left");
}

#[test]
fn a_non_decrementing_waiter_waits_again_on_the_same_signal() {
    // A flag: one signal releases any number of waits, since none takes
    // the count.
    let t = table(1, Some(Duration::from_secs(120)), false);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || {
        wait_nodec(&t2, 0, s, 1)?;
        wait_nodec(&t2, 0, s, 1)
    });
    until_parked(&t, 0);
    t.signal(0, 0, s, 1, None, None).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(t.read(0, 0, s).unwrap(), 1);
}

#[test]
fn a_non_decrementing_wait_times_out_with_the_count() {
    let t = table(1, Some(Duration::from_millis(50)), false);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    t.signal(0, 0, s, 1, None, None).unwrap();
    let e = wait_nodec(&t, 0, s, 2).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.message.contains("count >= 2; count is 1"), "{}", e.message);
    assert_eq!(t.read(0, 0, s).unwrap(), 1);
}

#[test]
fn a_non_decrementing_wait_nobody_signals_is_a_deadlock() {
    let rt = Runtime::new(Config {
        num_devices: 1,
        wait_timeout: Some(Duration::from_secs(60)),
        detect_deadlocks: true,
        deadlock_idle: Some(Duration::from_millis(20)),
        ..Config::default()
    })
    .unwrap();
    let s = rt.allocate_semaphores(0, Some(0), SemKind::Regular, 1).unwrap();
    let e = rt.semaphore_wait_no_decrement_at(0, 0, s, 1, 0).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Deadlock, "{}", e.message);
    assert!(e.message.contains("waits on REGULAR semaphore"), "{}", e.message);
}

#[test]
fn runtime_non_decrementing_wait_across_threads() {
    let rt = Arc::new(
        Runtime::new(Config { num_devices: 2, wait_timeout: Some(Duration::from_secs(120)), ..Config::default() })
            .unwrap(),
    );
    let s = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    rt.allocate_semaphores(1, None, SemKind::Regular, 1).unwrap();
    let rt2 = Arc::clone(&rt);
    let waiter = thread::spawn(move || rt2.semaphore_wait_no_decrement_at(1, 0, s, 4, 0));
    rt.semaphore_signal(0, 0, s, 4, Some(1), None).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(rt.semaphore_read(1, 0, s).unwrap(), 4);
    rt.semaphore_wait(1, 0, s, 4).unwrap();
    assert_eq!(rt.semaphore_read(1, 0, s).unwrap(), 0);
}
