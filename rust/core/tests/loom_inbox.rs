//! Model checks of a core's inbox (dma_execution_mode "tpu": a copy to
//! another core lands there at that core's next synchronisation point):
//! a handed-over task wakes its core wherever it is parked, runs exactly
//! once -- on the core, or on the sender once the core's program has ended
//! -- and none is lost to a close.
//! Run: RUSTFLAGS="--cfg loom" cargo test -p mosaic_rt_core --release --test 'loom_*'
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::{Arc, AtomicUsize, Ordering};
use mosaic_rt_core::internals::{Queued, SemTable};
use mosaic_rt_core::{Config, Result, SemKind};

/// A copy landing on device 1: signals `sem` there by `bytes`.
struct ModelLanding {
    sem: u32,
    bytes: i64,
}

impl Queued for ModelLanding {
    fn pending(&self) -> Option<String> {
        Some(format!("{} bytes to semaphore {}", self.bytes, self.sem))
    }
}

struct InboxModel {
    t: SemTable<ModelLanding>,
    /// Two semaphores of every core.
    sems: u32,
    /// Tasks run, by anyone.
    landed: AtomicUsize,
}

impl InboxModel {
    fn new() -> Arc<InboxModel> {
        let config = Config { num_devices: 2, wait_timeout: None, ..Config::default() };
        let t = SemTable::with_devices_joined(&config, true);
        let sems = t.allocate(0, None, SemKind::Dma, 2).unwrap();
        t.allocate(1, None, SemKind::Dma, 2).unwrap();
        Arc::new(InboxModel { t, sems, landed: AtomicUsize::new(0) })
    }

    /// Runs a landing on device 1 (its semaphore's signal).
    fn land(&self, l: ModelLanding) -> Result<()> {
        self.landed.fetch_add(1, Ordering::SeqCst);
        self.t.signal(1, 0, l.sem, l.bytes, None, None)
    }

    /// Device 0 hands a landing of `sem` to device 1 (global core 1); runs
    /// it itself if device 1's program has ended.
    fn send(&self, sem: u32) -> Result<()> {
        match self.t.send_to_core(1, ModelLanding { sem, bytes: 4 }) {
            Some(l) => self.land(l),
            None => Ok(()),
        }
    }

    fn wait_on_1(&self, sem: u32, value: i64) -> Result<()> {
        self.t.wait(1, 0, sem, value, 0, &mut |l| self.land(l))
    }
}

fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

#[test]
fn a_landing_wakes_the_core_parked_on_its_semaphore() {
    model(8, || {
        let m = InboxModel::new();
        let sender = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.send(m.sems).unwrap())
        };
        m.wait_on_1(m.sems, 4).unwrap();
        sender.join().unwrap();
        assert_eq!(m.landed.load(Ordering::SeqCst), 1);
        assert_eq!(m.t.read(1, 0, m.sems).unwrap(), 0);
    });
}

#[test]
fn a_core_parked_on_another_semaphore_lands_the_copy_first() {
    // Device 1 waits on `b`; device 0 hands it a landing of `a` and then
    // signals `b`. The landing runs on device 1 before its wait returns.
    model(8, || {
        let m = InboxModel::new();
        let (a, b) = (m.sems, m.sems + 1);
        let sender = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                m.send(a).unwrap();
                m.t.signal(0, 0, b, 1, Some(1), None).unwrap();
            })
        };
        m.wait_on_1(b, 1).unwrap();
        assert_eq!(m.landed.load(Ordering::SeqCst), 1);
        assert_eq!(m.t.read(1, 0, a).unwrap(), 4);
        sender.join().unwrap();
        assert!(!m.t.inbox_has_work(1, 0).unwrap());
    });
}

#[test]
fn a_close_racing_a_send_runs_every_landing_exactly_once() {
    model(8, || {
        let m = InboxModel::new();
        let sender = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                m.send(m.sems).unwrap();
                m.send(m.sems).unwrap();
            })
        };
        m.t.close_inbox(1, 0, &mut |l| m.land(l)).unwrap();
        sender.join().unwrap();
        // What the close found ran on device 1, the rest on the sender.
        assert_eq!(m.landed.load(Ordering::SeqCst), 2);
        assert_eq!(m.t.read(1, 0, m.sems).unwrap(), 8);
        assert!(!m.t.inbox_has_work(1, 0).unwrap());
    });
}
