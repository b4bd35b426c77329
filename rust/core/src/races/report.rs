//! What a race report says, and where the most recent launch's reports are
//! kept for Python (`mosaic_rt.races`).

use crate::memory::BufferKey;
use crate::region::Region;
use crate::reports::Detail;
use crate::site::SiteId;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
// std, not crate::sync: race detection is not part of the loom models.
use crate::sync::IgnorePoison;
use std::sync::{Arc, Mutex};

/// Reports kept per launch; further races are only counted.
pub const MAX_REPORTS: usize = 32;

/// Who made an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    Core {
        device: u32,
        core: u32,
    },
    /// DMA number `id` (per launch, from 0), started by (device, core) at
    /// `site`.
    Dma {
        id: u64,
        device: u32,
        core: u32,
        site: SiteId,
    },
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Actor::Core { device, core } => write!(f, "device {device}, core {core}"),
            Actor::Dma { id, device, core, site } => {
                write!(f, "DMA #{id} (started by device {device}, core {core}{})", crate::site::at(site))
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
    /// Where a core's access comes from (a DMA's: its start site).
    pub site: SiteId,
}

impl AccessRecord {
    /// `write of vmem buffer 103 of device 0, core 0[0:8, 0:128] by device
    /// 0, core 1 at kernel.py:12:4 (k)` (`shape`: the buffer's).
    pub fn describe(&self, shape: &[usize]) -> String {
        let what = if self.write { "write" } else { "read" };
        let at = match self.actor {
            Actor::Core { .. } => crate::site::at(self.site),
            Actor::Dma { .. } => String::new(), // the actor names its start site
        };
        format!("{what} of {}{} by {}{at}", self.key, self.region.slice_repr_in(shape), self.actor)
    }
}

/// The text of one race: the current access and the earlier one it is not
/// ordered with.
pub fn describe(now: &AccessRecord, earlier: Option<&AccessRecord>, shape: &[usize]) -> String {
    match earlier {
        Some(e) => {
            format!("RACE DETECTED: {} is not ordered with the earlier {}", now.describe(shape), e.describe(shape))
        }
        None => format!("RACE DETECTED: {} is not ordered with an earlier access", now.describe(shape)),
    }
}

/// Structured fields of a race report (`mosaic_rt.races` / warnings).
pub fn details(now: &AccessRecord, earlier: Option<&AccessRecord>, shape: &[usize]) -> Vec<(&'static str, Detail)> {
    fn side(prefix: bool, r: &AccessRecord, shape: &[usize], out: &mut Vec<(&'static str, Detail)>) {
        let names: [&'static str; 7] = if prefix {
            [
                "earlier_device",
                "earlier_core",
                "earlier_dma",
                "earlier_access",
                "earlier_region",
                "earlier_site",
                "earlier_text",
            ]
        } else {
            ["device", "core", "dma", "access", "region", "site", "text"]
        };
        let (device, core, dma) = match r.actor {
            Actor::Core { device, core } => (device, core, None),
            Actor::Dma { id, device, core, .. } => (device, core, Some(id as i64)),
        };
        let site = match r.actor {
            Actor::Dma { site, .. } => site,
            Actor::Core { .. } => r.site,
        };
        out.push((names[0], device.into()));
        out.push((names[1], core.into()));
        out.push((names[2], dma.into()));
        out.push((names[3], Detail::from(if r.write { "write" } else { "read" })));
        out.push((names[4], r.region.slice_repr_in(shape).into()));
        out.push((names[5], crate::site::text(site).into()));
        out.push((names[6], r.describe(shape).into()));
    }
    let mut out = vec![
        ("space", Detail::from(now.key.space.name())),
        ("buffer", now.key.id.into()),
        ("buffer_device", now.key.device.into()),
        ("buffer_core", now.key.core.into()),
    ];
    side(false, now, shape, &mut out);
    if let Some(e) = earlier {
        side(true, e, shape, &mut out);
    }
    out
}

/// The races of one launch.
#[derive(Default)]
pub struct RaceLog {
    found: AtomicBool,
    count: AtomicU64,
    reports: Mutex<Vec<String>>,
}

impl RaceLog {
    /// Records a race; `print`: the launch's first one goes to stderr
    /// (as stock prints it).
    pub fn record(&self, report: String, print: bool) {
        let first = !self.found.swap(true, Ordering::SeqCst);
        self.count.fetch_add(1, Ordering::SeqCst);
        if first && print {
            // One line, like stock's print; the rest via `reports()`.
            eprintln!("{report}");
        }
        let mut reports = self.reports.lock().ignore_poison();
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
        self.reports.lock().ignore_poison().clone()
    }
}

static LATEST: Mutex<Option<Arc<RaceLog>>> = Mutex::new(None);

/// A fresh log that becomes the "most recent launch with race detection".
pub(crate) fn begin_launch() -> Arc<RaceLog> {
    let log = Arc::new(RaceLog::default());
    *LATEST.lock().ignore_poison() = Some(Arc::clone(&log));
    log
}

/// The log of the most recent runtime created with race detection on.
pub fn latest_race_log() -> Option<Arc<RaceLog>> {
    LATEST.lock().ignore_poison().clone()
}
