//! Signal / wait counts, target rules, argument checks, timeouts, failure.

use mosaic_rt_core::internals::{SemTable, WaitRecord};
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{Config, ErrorKind, RtError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn table(devices: u32, cores: u32, timeout: Option<Duration>) -> Arc<SemTable> {
    let config = Config { num_devices: devices, cores_per_device: cores, wait_timeout: timeout, ..Config::default() };
    Arc::new(SemTable::new(&config))
}

fn wait(t: &SemTable, device: u32, core: u32, sem: u32, value: i64) -> mosaic_rt_core::Result<()> {
    t.wait(device, core, sem, value, 0, &mut |_| panic!("no tasks are queued in these tests"))
}

/// Polls until `device, core` is parked (bounded only against a true hang:
/// a loaded machine may take long to start the thread).
fn until_parked(t: &SemTable, device: u32, core: u32) -> WaitRecord {
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(r) = t.waiting_on(device, core).unwrap() {
            return r;
        }
        assert!(Instant::now() < end, "core never parked");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn wait_subtracts_and_leaves_the_rest() {
    let t = table(1, 1, None);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    t.signal(0, 0, s, 3, None, None).unwrap();
    t.signal(0, 0, s, 4, None, None).unwrap();
    wait(&t, 0, 0, s, 5).unwrap();
    assert_eq!(t.read(0, 0, s).unwrap(), 2);
    wait(&t, 0, 0, s, 0).unwrap();
    wait(&t, 0, 0, s, 2).unwrap();
    assert_eq!(t.read(0, 0, s).unwrap(), 0);
}

#[test]
fn signal_targets_default_to_own_device_and_core_zero() {
    let t = table(2, 2, None);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    t.allocate(1, None, SemKind::Regular, 1).unwrap();
    // From device 1 core 1 without target: device 1, core 0 (stock rule).
    t.signal(1, 1, s, 1, None, None).unwrap();
    assert_eq!(t.read(1, 0, s).unwrap(), 1);
    assert_eq!(t.read(1, 1, s).unwrap(), 0);
    t.signal(1, 1, s, 2, Some(0), Some(1)).unwrap();
    assert_eq!(t.read(0, 1, s).unwrap(), 2);
    t.signal(0, 0, s, 4, None, Some(1)).unwrap();
    assert_eq!(t.read(0, 1, s).unwrap(), 6);
}

#[test]
fn bad_values_and_targets_are_value_errors() {
    let t = table(2, 1, None);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let e = t.signal(0, 0, s, -1, None, None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("-1"), "{}", e.message);
    let e = wait(&t, 0, 0, s, -3).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("-3"), "{}", e.message);
    assert_eq!(t.signal(0, 0, s, 1, Some(2), None).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(t.signal(0, 0, s, 1, None, Some(1)).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(wait(&t, 0, 1, s, 1).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(t.read(0, 0, s).unwrap(), 0);
}

#[test]
fn parked_waiter_is_woken_by_a_signal_from_another_thread() {
    let t = table(2, 1, Some(Duration::from_secs(120)));
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || wait(&t2, 1, 0, s, 3));
    assert_eq!(until_parked(&t, 1, 0), WaitRecord { sem: s, value: 3 });
    t.signal(0, 0, s, 2, Some(1), None).unwrap();
    t.signal(0, 0, s, 2, Some(1), None).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(t.read(1, 0, s).unwrap(), 1);
    assert_eq!(t.waiting_on(1, 0).unwrap(), None);
}

#[test]
fn wait_times_out_with_a_clear_message() {
    let t = table(2, 2, Some(Duration::from_millis(50)));
    let s = t.allocate(1, None, SemKind::Regular, 1).unwrap();
    t.signal(1, 1, s, 1, None, Some(1)).unwrap();
    let start = Instant::now();
    let e = wait(&t, 1, 1, s, 4).unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert_eq!(e.message, format!("semaphore {s} on device 1, core 1 waited 0.05s for count >= 4; count is 1"));
    // The count is untouched by the failed wait.
    assert_eq!(t.read(1, 1, s).unwrap(), 1);
}

#[test]
fn failure_wakes_a_parked_waiter_with_the_root_cause() {
    let t = table(2, 1, None);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let t2 = Arc::clone(&t);
    let waiter = thread::spawn(move || wait(&t2, 0, 0, s, 1));
    until_parked(&t, 0, 0);
    let root = RtError::index("out of bounds read").at(1, 0);
    assert_eq!(t.fail(root.clone()), root);
    let e = waiter.join().unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Aborted);
    assert_eq!(e.root.as_deref(), Some(&root));
    assert_eq!((e.device, e.core), (Some(0), Some(0)));
    assert!(e.message.contains("device 1, core 0 failed first with IndexError: out of bounds read"), "{}", e.message);
}

#[test]
fn only_the_first_failure_is_recorded() {
    let t = table(1, 1, None);
    assert!(t.failure().is_none());
    let first = RtError::value("first");
    assert_eq!(t.fail(first.clone()), first);
    assert_eq!(t.fail(RtError::value("second")), first);
    // An abort passed in is reduced to its root cause.
    let t2 = table(1, 1, None);
    let abort = RtError::aborted(&first.clone().at(0, 0), 0, 0);
    assert_eq!(t2.fail(abort), first.clone().at(0, 0));
    assert_eq!(t.failure(), Some(first));
}

#[test]
fn wait_after_failure_aborts_even_if_the_count_is_there() {
    let t = table(1, 1, None);
    let s = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    t.signal(0, 0, s, 1, None, None).unwrap();
    t.fail(RtError::value("boom"));
    assert_eq!(wait(&t, 0, 0, s, 1).unwrap_err().kind, ErrorKind::Aborted);
}

#[test]
fn leaks_list_nonzero_counts_sorted_and_filtered_by_device() {
    let t = table(2, 2, None);
    let a = t.allocate(0, None, SemKind::Dma, 2).unwrap();
    t.allocate(1, None, SemKind::Dma, 2).unwrap();
    let b = t.barrier_semaphore(5).unwrap();
    t.signal(0, 0, a + 1, 8, Some(1), Some(1)).unwrap();
    t.signal(0, 0, a, 3, Some(1), Some(1)).unwrap();
    t.signal(0, 0, b, 1, None, None).unwrap();
    t.signal(0, 0, a, 1, None, Some(1)).unwrap();
    wait(&t, 0, 1, a, 1).unwrap(); // back to zero: not a leak
    let all = t.leaks(None).unwrap();
    let summary: Vec<_> = all.iter().map(|l| (l.device, l.core, l.sem, l.kind, l.count)).collect();
    assert_eq!(
        summary,
        vec![(0, 0, b, SemKind::Barrier, 1), (1, 1, a, SemKind::Dma, 3), (1, 1, a + 1, SemKind::Dma, 8),]
    );
    assert_eq!(t.leaks(Some(1)).unwrap().len(), 2);
    assert_eq!(t.leaks(Some(0)).unwrap().len(), 1);
}
