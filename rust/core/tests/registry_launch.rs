//! Launch registry: pairing of joins, teardown, eviction, config checks.

use mosaic_rt_core::internals::MAX_FAILED_INSTANCES;
use mosaic_rt_core::{Config, DmaMode, ErrorKind, LaunchRegistry, RtError};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The error of a join (the runtime has no Debug, so no `unwrap_err`).
fn join_err(reg: &LaunchRegistry, uid: u64, device: u32, config: &Config) -> RtError {
    match reg.join(uid, 0, device, config) {
        Ok(_) => panic!("join succeeded"),
        Err(e) => e,
    }
}

fn config(devices: u32) -> Config {
    Config { num_devices: devices, ..Config::default() }
}

#[test]
fn devices_of_one_launch_share_one_runtime() {
    let reg = LaunchRegistry::new();
    let (h0, rt0) = reg.join(7, 1, 0, &config(2)).unwrap();
    let (h1, rt1) = reg.join(7, 1, 1, &config(2)).unwrap();
    assert_eq!(h0, h1);
    assert!(Arc::ptr_eq(&rt0, &rt1));
    assert!(Arc::ptr_eq(&reg.get(h0).unwrap(), &rt0));
    assert_eq!(reg.len(), 1);
    // Other uid or run id: other instances.
    let (h2, _) = reg.join(8, 1, 0, &config(2)).unwrap();
    let (h3, _) = reg.join(7, 2, 0, &config(2)).unwrap();
    assert_eq!(HashSet::from([h0, h2, h3]).len(), 3);
    assert_eq!(reg.len(), 3);
}

#[test]
fn kth_join_of_a_device_joins_the_kth_instance() {
    let reg = LaunchRegistry::new();
    // Device 0 runs ahead two launches of the same kernel.
    let (a0, _) = reg.join(1, 0, 0, &config(2)).unwrap();
    let (b0, _) = reg.join(1, 0, 0, &config(2)).unwrap();
    assert_ne!(a0, b0);
    let (a1, _) = reg.join(1, 0, 1, &config(2)).unwrap();
    let (b1, _) = reg.join(1, 0, 1, &config(2)).unwrap();
    assert_eq!((a0, b0), (a1, b1));
}

#[test]
fn instance_is_removed_when_every_device_left_and_counters_pruned() {
    let reg = LaunchRegistry::new();
    let (h, _) = reg.join(1, 0, 0, &config(2)).unwrap();
    reg.join(1, 0, 1, &config(2)).unwrap();
    reg.leave(h, 0);
    assert_eq!(reg.len(), 1);
    assert!(reg.get(h).is_some());
    reg.leave(h, 1);
    assert_eq!(reg.len(), 0);
    assert_eq!(reg.launches_tracked(), 0);
    assert!(reg.get(h).is_none());
    // The next launch is a new instance with a new handle.
    let (h2, _) = reg.join(1, 0, 0, &config(2)).unwrap();
    assert_ne!(h2, h);
    // Leaving twice / unknown handles are ignored.
    reg.leave(h, 0);
    reg.abandon(12345, 0);
    assert_eq!(reg.len(), 1);
}

#[test]
fn abandon_counts_like_leave_for_teardown() {
    let reg = LaunchRegistry::new();
    let (h, rt) = reg.join(3, 0, 0, &config(2)).unwrap();
    reg.join(3, 0, 1, &config(2)).unwrap();
    rt.fail(RtError::value("boom").at(0, 0));
    reg.abandon(h, 0);
    reg.leave(h, 1);
    assert_eq!(reg.len(), 0);
}

#[test]
fn failed_instances_never_completed_are_capped_oldest_first() {
    let reg = LaunchRegistry::new();
    let mut handles = Vec::new();
    // Device 1 never joins: each instance is abandoned by device 0 only.
    for uid in 0..(MAX_FAILED_INSTANCES as u64 + 10) {
        let (h, _) = reg.join(uid, 0, 0, &config(2)).unwrap();
        reg.abandon(h, 0);
        handles.push(h);
    }
    assert_eq!(reg.len(), MAX_FAILED_INSTANCES);
    assert_eq!(reg.launches_tracked(), MAX_FAILED_INSTANCES);
    assert!(reg.get(handles[0]).is_none());
    assert!(reg.get(handles[9]).is_none());
    assert!(reg.get(handles[10]).is_some());
    // A healthy instance waiting for a device is not evicted.
    let (live, _) = reg.join(999, 0, 0, &config(2)).unwrap();
    for uid in 1000..1000 + MAX_FAILED_INSTANCES as u64 {
        let (h, _) = reg.join(uid, 0, 0, &config(2)).unwrap();
        reg.abandon(h, 0);
    }
    assert!(reg.get(live).is_some());
}

#[test]
fn a_device_leaving_a_failed_runtime_marks_it_failed() {
    let reg = LaunchRegistry::new();
    for uid in 0..(MAX_FAILED_INSTANCES as u64 + 1) {
        let (h, rt) = reg.join(uid, 0, 0, &config(2)).unwrap();
        rt.fail(RtError::value("boom"));
        reg.leave(h, 0);
    }
    assert_eq!(reg.len(), MAX_FAILED_INSTANCES);
}

#[test]
fn config_mismatch_is_value_error_naming_the_field() {
    let reg = LaunchRegistry::new();
    let (h0, _) = reg.join(1, 0, 0, &config(2)).unwrap();
    let other = Config { dma_mode: DmaMode::Eager, ..config(2) };
    let e = join_err(&reg, 1, 1, &other);
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("dma_mode"), "{}", e.message);
    let other = Config { wait_timeout: Some(Duration::from_secs(1)), ..config(2) };
    assert!(join_err(&reg, 1, 1, &other).message.contains("wait_timeout"));
    let e = join_err(&reg, 1, 1, &config(3));
    assert!(e.message.contains("num_devices"), "{}", e.message);
    // The failed joins did not consume device 1's turn.
    assert_eq!(reg.join(1, 0, 1, &config(2)).unwrap().0, h0);
}

#[test]
fn bad_device_or_config_is_value_error() {
    let reg = LaunchRegistry::new();
    assert_eq!(join_err(&reg, 1, 2, &config(2)).kind, ErrorKind::Value);
    assert_eq!(join_err(&reg, 1, 0, &config(0)).kind, ErrorKind::Value);
    assert!(reg.is_empty());
}

#[test]
fn handles_are_unique_nonzero_across_threads() {
    let reg = Arc::new(LaunchRegistry::new());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let reg = Arc::clone(&reg);
            std::thread::spawn(move || {
                (0..200u64)
                    .map(|i| {
                        let (h, _) = reg.join(t * 1000 + i, 0, 0, &config(1)).unwrap();
                        reg.leave(h, 0);
                        h
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert_eq!(all.len(), 800);
    assert!(all.iter().all(|&h| h != 0));
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), 800);
    assert!(reg.is_empty());
}
