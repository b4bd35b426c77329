//! Limits of semaphores: overflowing counts, huge semaphore arrays (cheap
//! until used, clear errors past the limits), timeouts too long to have a
//! deadline, range checks of device and core ids.

use mosaic_rt_core::{timeout_from_secs, Config, ErrorKind, RtError, Runtime, SemKind, MAX_COUNT};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

fn runtime(devices: u32, cores: u32, timeout: Option<Duration>) -> Runtime {
    Runtime::new(Config { num_devices: devices, cores_per_device: cores, wait_timeout: timeout, ..Config::default() })
        .unwrap()
}

#[test]
fn a_count_that_would_overflow_is_an_error_naming_everything_and_is_left_unchanged() {
    // Three signals of 2**62 must not wrap to a negative count.
    let rt = runtime(2, 2, None);
    let sem = rt.allocate_semaphores(1, None, SemKind::Regular, 1).unwrap();
    rt.semaphore_signal(0, 0, sem, 1 << 62, Some(1), Some(1)).unwrap();
    let e = rt.semaphore_signal(0, 0, sem, 1 << 62, Some(1), Some(1)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    for part in [
        format!("semaphore {sem}"),
        "device 1, core 1".to_string(),
        format!("count {}", 1i64 << 62),
        format!("increment {}", 1i64 << 62),
        "overflows".to_string(),
    ] {
        assert!(e.message.contains(&part), "{part:?} not in {e}");
    }
    assert_eq!(rt.semaphore_read(1, 1, sem).unwrap(), 1 << 62);
    assert_eq!(MAX_COUNT, 1 << 62);
    assert!(rt.semaphore_signal(0, 0, sem, 1, Some(1), Some(1)).is_err());
    assert!(rt.semaphore_signal(0, 0, sem, i64::MAX, Some(1), Some(1)).is_err());
    assert_eq!(rt.semaphore_read(1, 1, sem).unwrap(), MAX_COUNT);
    // A wait can never ask for more than the largest count.
    let e = rt.semaphore_wait(1, 1, sem, MAX_COUNT + 1).unwrap_err();
    assert!(e.message.contains("needs a value in [0, 4611686018427387904]"), "{e}");
    rt.semaphore_wait(1, 1, sem, MAX_COUNT).unwrap();
    assert_eq!(rt.semaphore_read(1, 1, sem).unwrap(), 0);
}

/// `threads` threads add `inc` at once to a count of `start`; returns how
/// many succeeded and the final count.
fn race_adds(start: i64, inc: i64, threads: usize) -> (usize, i64) {
    let rt = Arc::new(runtime(1, 1, None));
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    if start > 0 {
        rt.semaphore_signal(0, 0, sem, start, None, None).unwrap();
    }
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let rt = Arc::clone(&rt);
            thread::spawn(move || (0..100).filter(|_| rt.semaphore_signal(0, 0, sem, inc, None, None).is_ok()).count())
        })
        .collect();
    let ok = handles.into_iter().map(|h| h.join().unwrap()).sum();
    (ok, rt.semaphore_read(0, 0, sem).unwrap())
}

#[test]
fn concurrent_signals_near_the_limit_are_exact() {
    // Slow path (big increments): exactly two fit.
    let inc = MAX_COUNT / 3 + 1;
    assert_eq!(race_adds(0, inc, 6), (2, 2 * inc));
    // Fast path (small increments) racing at the limit: exactly 50 fit,
    // never a wrapped or over-limit count.
    assert_eq!(race_adds(MAX_COUNT - 50, 1, 4), (50, MAX_COUNT));
    assert_eq!(race_adds(MAX_COUNT - 1000, 7, 4), (142, MAX_COUNT - 1000 + 142 * 7));
}

#[test]
fn huge_semaphore_arrays_are_cheap_until_used() {
    // REGULAR((50_000_000,)) must not cost memory per semaphore and core
    // up front (~270 bytes each would abort the process when that fails).
    let rt = runtime(2, 2, None);
    let first = rt.allocate_semaphores(0, None, SemKind::Regular, 50_000_000).unwrap();
    assert_eq!(rt.semaphore_pages_in_use(), 0);
    let last = first + 50_000_000 - 1;
    rt.semaphore_signal(0, 1, last, 3, None, Some(1)).unwrap();
    rt.semaphore_signal(0, 1, first, 1, Some(1), Some(1)).unwrap();
    assert_eq!(rt.semaphore_pages_in_use(), 2);
    assert_eq!(rt.semaphore_read(0, 1, last).unwrap(), 3);
    assert_eq!(rt.semaphore_read(0, 0, last).unwrap(), 0);
    let leaks: Vec<_> = rt.leaks(None).unwrap().iter().map(|l| (l.device, l.core, l.sem, l.count)).collect();
    assert_eq!(leaks, vec![(0, 1, last, 3), (1, 1, first, 1)]);
    rt.semaphore_wait(0, 1, last, 3).unwrap();
    rt.semaphore_wait(1, 1, first, 1).unwrap();
    assert!(rt.leaks(None).unwrap().is_empty());
    // Ids after the array keep counting.
    assert_eq!(rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap(), last + 1);
}

#[test]
fn semaphore_ids_past_int32_are_a_value_error_naming_the_size() {
    let rt = runtime(1, 1, None);
    let e = rt.allocate_semaphores(0, None, SemKind::Regular, 1 << 31).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("2147483648 semaphores") && e.message.contains("int32"), "{e}");
    // Nothing was consumed: the next allocation still starts at 2000.
    assert_eq!(rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap(), 2000);
    // The largest possible allocation still works (lazily).
    let n = i32::MAX as u32 - 2000;
    assert_eq!(rt.allocate_semaphores(0, None, SemKind::Regular, n).unwrap(), 2001);
    assert!(rt.allocate_semaphores(0, None, SemKind::Regular, 1).is_err());
}

#[test]
fn too_many_counters_for_the_cores_is_a_value_error_naming_the_size() {
    let rt = runtime(256, 256, None);
    let e = rt.allocate_semaphores(0, None, SemKind::Regular, 2_000_000).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("2000000 semaphores x 65536 cores"), "{e}");
}

#[test]
fn huge_timeouts_mean_no_timeout_and_never_panic() {
    // A 1e19 s timeout must not panic computing its deadline.
    for secs in [1e19, 1e300, f64::INFINITY, f64::MAX] {
        assert_eq!(timeout_from_secs(secs).unwrap(), None, "{secs}");
    }
    assert_eq!(timeout_from_secs(0.0).unwrap(), Some(Duration::ZERO));
    assert_eq!(timeout_from_secs(1.5).unwrap(), Some(Duration::from_millis(1500)));
    for bad in [-1.0, f64::NAN, -f64::INFINITY] {
        assert_eq!(timeout_from_secs(bad).unwrap_err().kind, ErrorKind::Value, "{bad}");
    }
    // A Config built in Rust with an absurd timeout waits without panicking.
    let rt = Arc::new(runtime(2, 1, Some(Duration::MAX)));
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    let peer = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            rt.semaphore_signal(1, 0, sem, 1, Some(0), None).unwrap();
            rt.device_barrier(1).unwrap();
        })
    };
    rt.semaphore_wait(0, 0, sem, 1).unwrap();
    rt.device_barrier(0).unwrap();
    peer.join().unwrap();
}

#[test]
fn zero_timeout_times_out_at_once() {
    let rt = runtime(1, 1, Some(Duration::ZERO));
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    assert_eq!(rt.semaphore_wait(0, 0, sem, 1).unwrap_err().kind, ErrorKind::Timeout);
}

#[test]
fn every_device_and_core_argument_is_range_checked() {
    let rt = runtime(2, 2, Some(Duration::ZERO));
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    let errors: Vec<RtError> = vec![
        rt.leaks(Some(2)).unwrap_err(),
        rt.barrier_semaphore(2, 1).unwrap_err(),
        rt.semaphore_signal(2, 0, sem, 1, None, None).unwrap_err(),
        rt.semaphore_signal(0, 0, sem, 1, Some(5), None).unwrap_err(),
        rt.semaphore_signal(0, 0, sem, 1, None, Some(2)).unwrap_err(),
        rt.semaphore_wait(0, 2, sem, 1).unwrap_err(),
        rt.semaphore_read(9, 0, sem).unwrap_err(),
        rt.device_barrier(2).unwrap_err(),
        rt.sync_device_cores(3).unwrap_err(),
        rt.allocate_semaphores(0, Some(2), SemKind::Regular, 1).unwrap_err(),
        rt.prng_seed(0, 7, &[1]).unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind, ErrorKind::Value, "{e}");
        assert!(e.message.contains("out of range") && e.message.contains("valid ids 0 to 1"), "{e}");
    }
}
