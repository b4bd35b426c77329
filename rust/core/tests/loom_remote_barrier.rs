//! Model checks of the device barrier of a launch spanning processes: the
//! other processes' arrivals (the progress thread's `device_barrier_remote`)
//! race the local devices' own, possibly a generation ahead; every
//! generation completes exactly once and no local waiter is left asleep.
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::{Arc, AtomicUsize, Ordering};
use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::Config;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(4);
    builder.check(f);
}

/// Devices 0 and 1 here, device 2 in another process.
fn table() -> Arc<SemTable> {
    let config = Config { num_devices: 3, wait_timeout: None, ..Config::default() };
    let t = SemTable::new(&config);
    t.set_remote(&[true, true, false], false);
    Arc::new(t)
}

#[test]
fn a_remote_arrival_racing_the_local_ones_completes_the_barrier_once() {
    model(|| {
        let t = table();
        let done = Arc::new(AtomicUsize::new(0));
        let local = {
            let (t, done) = (Arc::clone(&t), Arc::clone(&done));
            thread::spawn(move || {
                t.device_barrier(1, &|| {
                    done.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap()
            })
        };
        let remote = {
            let (t, done) = (Arc::clone(&t), Arc::clone(&done));
            thread::spawn(move || {
                t.device_barrier_remote(0, 1, &|| {
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
        };
        t.device_barrier(0, &|| {
            done.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        local.join().unwrap();
        remote.join().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_remote_arrival_a_generation_ahead_waits_for_its_generation() {
    model(|| {
        let t = table();
        let remote = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                t.device_barrier_remote(0, 1, &|| {});
                t.device_barrier_remote(1, 1, &|| {});
            })
        };
        let other = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                t.device_barrier(1, &|| {}).unwrap();
                t.device_barrier(1, &|| {}).unwrap();
            })
        };
        t.device_barrier(0, &|| {}).unwrap();
        t.device_barrier(0, &|| {}).unwrap();
        remote.join().unwrap();
        other.join().unwrap();
    });
}
