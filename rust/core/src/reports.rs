//! Reports of policy "warn" (races, leaks, misuse): queued process-wide
//! until Python drains them (`_native.take_reports()`) and issues them as
//! warnings. Nothing is printed here: pytest can capture warnings, not
//! stderr lines written by native code.

use crate::sync::IgnorePoison;
use mosaic_rt_wire::wire_enum;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Undelivered reports kept; older ones are dropped beyond this (and
/// counted in [`dropped`]).
pub const MAX_QUEUED: usize = 1024;

wire_enum! {
    /// The kind of a report; Python sees `name()` (`mosaic_rt.ffi.reports`
    /// maps it to a warning class).
    pub enum Category as setting "report category" {
        Race = 0 => "race",
        Leak = 1 => "leak",
        Misuse = 2 => "misuse",
    }
}

/// A value of a report's details.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    Int(i64),
    Str(String),
    None,
}

impl From<u32> for Detail {
    fn from(v: u32) -> Self {
        Detail::Int(v as i64)
    }
}
impl From<i64> for Detail {
    fn from(v: i64) -> Self {
        Detail::Int(v)
    }
}
impl From<String> for Detail {
    fn from(v: String) -> Self {
        Detail::Str(v)
    }
}
impl From<&str> for Detail {
    fn from(v: &str) -> Self {
        Detail::Str(v.to_string())
    }
}
impl<T: Into<Detail>> From<Option<T>> for Detail {
    fn from(v: Option<T>) -> Self {
        v.map_or(Detail::None, Into::into)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub category: Category,
    /// The full text (the warning's message).
    pub text: String,
    /// Structured fields (device, core, semaphore, sites, ...).
    pub details: Vec<(&'static str, Detail)>,
    /// Issue as a Python warning (else as stock reports it; see
    /// `Config::report_as_warnings`).
    pub as_warning: bool,
}

struct Queue {
    reports: VecDeque<Report>,
    dropped: u64,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue { reports: VecDeque::new(), dropped: 0 });

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().ignore_poison()
}

/// Queues a report.
pub fn push(report: Report) {
    let mut q = queue();
    if q.reports.len() >= MAX_QUEUED {
        q.reports.pop_front();
        q.dropped += 1;
    }
    q.reports.push_back(report);
}

/// Takes every queued report, oldest first.
pub fn take_all() -> Vec<Report> {
    queue().reports.drain(..).collect()
}

/// Reports waiting to be taken.
pub fn pending() -> usize {
    queue().reports.len()
}

/// Reports dropped because the queue was full.
pub fn dropped() -> u64 {
    queue().dropped
}
