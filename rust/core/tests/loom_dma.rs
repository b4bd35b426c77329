//! Model check of the DMA state machine: the read task (send side) and the
//! read+write task (receive side) racing, with a core parked on the receive
//! semaphore. Each step runs exactly once; each semaphore is signalled once.
#![cfg(loom)]

use loom::thread;
use mosaic_rt_core::internals::sync::{Arc, AtomicUsize, Ordering};
use mosaic_rt_core::internals::DmaMachine;
use mosaic_rt_core::internals::SemTable;
use mosaic_rt_core::SemKind;
use mosaic_rt_core::{Config, Result};

const BYTES: i64 = 16;

struct Model {
    machine: DmaMachine<u32>,
    sems: SemTable,
    sem: u32,
    reads: AtomicUsize,
    writes: AtomicUsize,
}

impl Model {
    fn new() -> Arc<Model> {
        let config = Config { num_devices: 2, wait_timeout: None, ..Config::default() };
        let sems = SemTable::new(&config);
        let sem = sems.allocate(0, None, SemKind::Dma, 1).unwrap();
        Arc::new(Model {
            machine: DmaMachine::new(),
            sems,
            sem,
            reads: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
        })
    }

    /// The read step: produces the data and signals the send semaphore on device 0.
    fn read(&self) -> Result<u32> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.sems.signal(0, 0, self.sem, BYTES, None, None)?;
        Ok(7)
    }

    /// The write step: signals the receive semaphore on device 1.
    fn write(&self, data: &u32) -> Result<()> {
        assert_eq!(*data, 7);
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.sems.signal(0, 0, self.sem, BYTES, Some(1), None)
    }
}

#[test]
fn read_task_and_read_write_task_race() {
    // Small enough to explore exhaustively (no preemption bound), ~1 s.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    builder.check(|| {
        let m = Model::new();
        let sender = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.machine.read(|| m.read()).unwrap())
        };
        let receiver = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.machine.read_write(|| m.write(&m.read()?), |d| m.write(d)).unwrap())
        };
        // Device 1 waits for the bytes (parks until the write signals).
        m.sems.wait(1, 0, m.sem, BYTES, 0, &mut |_| panic!("no queued tasks")).unwrap();
        sender.join().unwrap();
        receiver.join().unwrap();
        assert_eq!(m.reads.load(Ordering::SeqCst), 1);
        assert_eq!(m.writes.load(Ordering::SeqCst), 1);
        assert!(m.machine.is_completed());
        assert_eq!(m.sems.read(0, 0, m.sem).unwrap(), BYTES);
        assert_eq!(m.sems.read(1, 0, m.sem).unwrap(), 0);
    });
}
