//! Semaphore id namespaces: internal ids per core from 2000, fixed ids,
//! collisions at allocation and lookup.

use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{Config, ErrorKind};

fn table(devices: u32, cores: u32) -> SemTable {
    let config = Config { num_devices: devices, cores_per_device: cores, ..Config::default() };
    SemTable::new(&config)
}

#[test]
fn internal_ids_start_at_2000_and_advance_per_core() {
    let t = table(2, 2);
    assert_eq!(t.allocate(0, Some(0), SemKind::Regular, 3).unwrap(), 2000);
    assert_eq!(t.allocate(0, Some(0), SemKind::Dma, 1).unwrap(), 2003);
    // Another core has its own counter.
    assert_eq!(t.allocate(0, Some(1), SemKind::Regular, 1).unwrap(), 2000);
    assert_eq!(t.allocate(1, Some(1), SemKind::Regular, 2).unwrap(), 2000);
    // Zero semaphores: the next id, nothing consumed.
    assert_eq!(t.allocate(1, Some(1), SemKind::Regular, 0).unwrap(), 2002);
    assert_eq!(t.allocate(1, Some(1), SemKind::Regular, 1).unwrap(), 2002);
}

#[test]
fn allocation_on_every_core_keeps_ids_in_sync() {
    let t = table(1, 3);
    assert_eq!(t.allocate(0, None, SemKind::Dma, 2).unwrap(), 2000);
    for core in 0..3 {
        assert_eq!(t.allocate(0, Some(core), SemKind::Regular, 1).unwrap(), 2002);
    }
    assert_eq!(t.allocate(0, None, SemKind::Regular, 1).unwrap(), 2003);
}

#[test]
fn allocation_on_every_core_with_diverged_ids_is_internal_error() {
    let t = table(1, 2);
    t.allocate(0, Some(1), SemKind::Regular, 1).unwrap();
    let err = t.allocate(0, None, SemKind::Regular, 1).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Internal);
    assert!(err.message.contains("out of sync"), "{}", err.message);
}

#[test]
fn allocation_on_bad_device_or_core_is_value_error() {
    let t = table(2, 1);
    assert_eq!(t.allocate(2, None, SemKind::Regular, 1).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(t.allocate(0, Some(1), SemKind::Regular, 1).unwrap_err().kind, ErrorKind::Value);
}

#[test]
fn semaphores_are_shared_across_cores_with_one_counter_each() {
    let t = table(2, 1);
    let a = t.allocate(0, None, SemKind::Regular, 1).unwrap();
    let b = t.allocate(1, None, SemKind::Regular, 1).unwrap();
    assert_eq!(a, b);
    t.signal(0, 0, a, 5, Some(1), None).unwrap();
    assert_eq!(t.read(0, 0, a).unwrap(), 0);
    assert_eq!(t.read(1, 0, a).unwrap(), 5);
}

#[test]
fn barrier_semaphore_has_the_collective_id_and_is_created_once() {
    let t = table(1, 1);
    assert_eq!(t.barrier_semaphore(7).unwrap(), 7);
    t.signal(0, 0, 7, 2, None, None).unwrap();
    assert_eq!(t.barrier_semaphore(7).unwrap(), 7);
    assert_eq!(t.read(0, 0, 7).unwrap(), 2);
}

#[test]
fn unknown_semaphore_is_value_error_naming_it() {
    let t = table(1, 1);
    let err = t.signal(0, 0, 2345, 1, None, None).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert!(err.message.contains("2345"), "{}", err.message);
    assert!(t.read(0, 0, 2345).unwrap_err().message.contains("2345"));
}

const LOOKUP: &str = "Semaphore 2000 occurs as both fixed-id and internal.";

#[test]
fn fixed_then_internal_collision_is_reported_at_allocation_and_lookup() {
    let t = table(1, 2);
    assert_eq!(t.barrier_semaphore(2000).unwrap(), 2000);
    let err = t.allocate(0, Some(1), SemKind::Regular, 1).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "Semaphore 2000 occurs as both fixed-id and internal. Fixed-id owner: barrier semaphore \
         of collective_id 2000; internal owner: semaphore allocated on device 0, core 1."
    );
    for err in [
        t.signal(0, 0, 2000, 1, None, None).unwrap_err(),
        t.read(0, 0, 2000).unwrap_err(),
        t.wait(0, 0, 2000, 0, 0, &mut |_| unreachable!()).unwrap_err(),
        t.barrier_semaphore(2000).unwrap_err(),
    ] {
        assert_eq!(err.kind, ErrorKind::Value);
        assert!(err.message.starts_with(LOOKUP), "{}", err.message);
    }
    assert_eq!(t.signal(0, 0, 2000, 1, None, None).unwrap_err().message, LOOKUP);
}

#[test]
fn internal_then_fixed_collision_is_reported_at_allocation() {
    let t = table(1, 1);
    t.allocate(0, None, SemKind::Dma, 1).unwrap();
    let err = t.barrier_semaphore(2000).unwrap_err();
    assert_eq!(
        err.message,
        "Semaphore 2000 occurs as both fixed-id and internal. Fixed-id owner: barrier semaphore \
         of collective_id 2000; internal owner: semaphore allocated on device 0, every core."
    );
    assert_eq!(t.read(0, 0, 2000).unwrap_err().message, LOOKUP);
}
