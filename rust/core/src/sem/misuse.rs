//! Misuse checks of semaphore waits that are warnings, not errors: a rule
//! strict enough to be an error would reject legitimate kernels (one wait
//! for the total of several DMAs on one semaphore is a real pattern).

use super::ids::SemBlock;
use super::Queued;
use crate::config::Topology;
use crate::reports::{self, Category, Detail, Report};
use crate::site::{self, SiteId};

/// A DMA wait for `value` bytes on (block offset `off`, `gcore`) that does
/// not complete at once: warns (MisuseWarning) if DMAs are pending on the
/// semaphore and `value` matches none of them, nor their total, nor their
/// total plus the count already there -- a descriptor waited with a
/// different size than it was started with.
pub(crate) fn check_dma_wait<T: Queued>(
    s: &SemBlock<T>,
    off: u32,
    gcore: u32,
    value: i64,
    topo: Topology,
    wait_site: SiteId,
    as_warning: bool,
) {
    let pending = s.pending_bytes(off, gcore);
    if pending.is_empty() {
        return;
    }
    let count = s.peek(off, gcore);
    let total: i64 = pending.iter().map(|p| p.0).sum();
    if count >= value || pending.iter().any(|p| p.0 == value) || value == total || value == count + total {
        return;
    }
    let sem = s.first + off;
    if !s.note_misuse(off, gcore, value, wait_site) {
        return;
    }
    let (device, core) = (gcore / topo.cores_per_device, gcore % topo.cores_per_device);
    let sizes: Vec<String> = pending
        .iter()
        .map(|&(b, st)| match site::text(st) {
            Some(t) => format!("{b} bytes (started at {t})"),
            None => format!("{b} bytes"),
        })
        .collect();
    let where_ = match site::text(wait_site) {
        Some(t) => format!("dma_wait at {t}"),
        None => "a dma_wait".to_string(),
    };
    let text = format!(
        "{where_} on device {device}, core {core} waits for {value} bytes on DMA semaphore {sem}, but \
         the DMA(s) pending on it move {}: no started DMA (nor all of them together) matches the \
         waited size -- was the descriptor waited with a different size than it was started with?",
        sizes.join(", ")
    );
    reports::push(Report {
        category: Category::Misuse,
        text,
        details: vec![
            ("kind", Detail::from("dma_wait_size")),
            ("device", device.into()),
            ("core", core.into()),
            ("semaphore", sem.into()),
            ("bytes", value.into()),
            ("pending_bytes", Detail::Str(pending.iter().map(|p| p.0.to_string()).collect::<Vec<_>>().join(","))),
            ("site", site::text(wait_site).into()),
        ],
        as_warning,
    });
}
