//! The state machine of one DMA: Started -> Read -> Completed, each step
//! exactly once, whichever core runs it (the issuer in eager mode, or the
//! cores waiting on the send / receive semaphores in on_wait mode).
//!
//! Kept free of memory and semaphores so loom can model-check it alone; the
//! production DMA drives it with closures that touch both.
//!
//! Those closures signal semaphores, so the step lock is held while other
//! locks (the semaphore table's) are taken. Observers that already hold a
//! semaphore-table lock (leak and misuse checks walking a queue) must
//! therefore never take the step lock: they read `progress`, an atomic
//! mirror of the stage, which may lag a step in progress by that step.

use crate::sync::{lock, AtomicU32, Mutex, Ordering};

const STARTED: u32 = 0;
const READ: u32 = 1;
const COMPLETED: u32 = 2;

enum Stage<T> {
    Started,
    /// Holds the data read from the source.
    Read(T),
    Completed,
}

pub struct DmaMachine<T> {
    // Steps run under this lock, as stock does, so a racing core waits for
    // the step in progress instead of repeating it.
    stage: Mutex<Stage<T>>,
    /// The stage's number, written under `stage` after each transition.
    progress: AtomicU32,
}

impl<T> Default for DmaMachine<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DmaMachine<T> {
    pub fn new() -> Self {
        DmaMachine { stage: Mutex::new(Stage::Started), progress: AtomicU32::new(STARTED) }
    }

    /// Runs the read step unless it has run. `read` returns the data (and
    /// signals the send semaphore); on error the DMA stays Started.
    pub fn read<E>(&self, read: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
        let mut stage = lock(&self.stage);
        if let Stage::Started = *stage {
            *stage = Stage::Read(read()?);
            self.progress.store(READ, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Completes the DMA: from Started by `both` (read and write in one go,
    /// with both semaphore signals), from Read by `write` on the held data;
    /// nothing if already completed. On error the stage is unchanged.
    pub fn read_write<E>(
        &self,
        both: impl FnOnce() -> Result<(), E>,
        write: impl FnOnce(&T) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut stage = lock(&self.stage);
        match &*stage {
            Stage::Started => both()?,
            Stage::Read(data) => write(data)?,
            Stage::Completed => return Ok(()),
        }
        *stage = Stage::Completed; // drops the data
        self.progress.store(COMPLETED, Ordering::SeqCst);
        Ok(())
    }

    /// Nothing has run yet (or the first step is running now). Lock-free:
    /// see the module doc.
    pub fn is_started(&self) -> bool {
        self.progress.load(Ordering::SeqCst) == STARTED
    }

    /// Both steps have run. Lock-free: see the module doc.
    pub fn is_completed(&self) -> bool {
        self.progress.load(Ordering::SeqCst) == COMPLETED
    }
}
