//! What a race report says, and where the most recent launch's reports are
//! kept for Python (`mosaic_rt.races`).

use crate::memory::BufferKey;
use crate::region::Region;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
// std, not crate::sync: race detection is not part of the loom models.
use std::sync::{Arc, Mutex, MutexGuard};

/// Reports kept per launch; further races are only counted.
pub const MAX_REPORTS: usize = 32;

/// Who made an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    Core {
        device: u32,
        core: u32,
    },
    /// DMA number `id` (per launch, from 0), started by (device, core).
    Dma {
        id: u64,
        device: u32,
        core: u32,
    },
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Actor::Core { device, core } => write!(f, "device {device}, core {core}"),
            Actor::Dma { id, device, core } => {
                write!(f, "DMA #{id} (started by device {device}, core {core})")
            }
        }
    }
}

/// One recorded access (kept so a later conflicting access can name it).
#[derive(Clone, Debug)]
pub struct AccessRecord {
    pub actor: Actor,
    pub write: bool,
    pub key: BufferKey,
    pub region: Region,
}

impl std::fmt::Display for AccessRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.write { "write" } else { "read" };
        write!(f, "{what} of {}[{}] by {}", self.key, self.region.python_repr(), self.actor)
    }
}

/// The text of one race: the current access and the earlier one it is not
/// ordered with.
pub fn describe(now: &AccessRecord, earlier: Option<&AccessRecord>) -> String {
    match earlier {
        Some(e) => format!("RACE DETECTED: {now} is not ordered with the earlier {e}"),
        None => format!("RACE DETECTED: {now} is not ordered with an earlier access"),
    }
}

/// The races of one launch.
#[derive(Default)]
pub struct RaceLog {
    found: AtomicBool,
    count: AtomicU64,
    reports: Mutex<Vec<String>>,
}

impl RaceLog {
    pub fn record(&self, report: String) {
        let first = !self.found.swap(true, Ordering::SeqCst);
        self.count.fetch_add(1, Ordering::SeqCst);
        if first {
            // One line, like stock's print; the rest via `reports()`.
            eprintln!("{report}");
        }
        let mut reports = lock(&self.reports);
        if reports.len() < MAX_REPORTS {
            reports.push(report);
        }
    }

    pub fn found(&self) -> bool {
        self.found.load(Ordering::SeqCst)
    }

    /// Races found (each access that conflicts counts once).
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// The first `MAX_REPORTS` reports.
    pub fn reports(&self) -> Vec<String> {
        lock(&self.reports).clone()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

static LATEST: Mutex<Option<Arc<RaceLog>>> = Mutex::new(None);

/// A fresh log that becomes the "most recent launch with race detection".
pub(crate) fn begin_launch() -> Arc<RaceLog> {
    let log = Arc::new(RaceLog::default());
    *lock(&LATEST) = Some(Arc::clone(&log));
    log
}

/// The log of the most recent runtime created with race detection on.
pub fn latest() -> Option<Arc<RaceLog>> {
    lock(&LATEST).clone()
}
