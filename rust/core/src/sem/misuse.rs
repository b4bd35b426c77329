//! Misuse checks of semaphore waits that are warnings, not errors: a rule
//! strict enough to be an error would reject legitimate kernels (one wait
//! for the total of several DMAs on one semaphore is a real pattern).
//!
//! A suspect wait is only reported if its semaphore leaks at the kernel's
//! end: waits in another order than the copies were started (a 512-byte
//! wait while a 1024-byte copy is pending, the rest taken by a later wait,
//! as tpu-inference's fused MoE does) are fine on a TPU, and only the end
//! tells them from a descriptor waited with the wrong size.

use super::ids::SemBlock;
use super::{Queued, SemWait};
use crate::reports::{Category, Detail, Report};
use crate::site;

/// A DMA wait `w` (for `w.value` bytes, its site resolved; on block offset
/// `off`, global core `gcore`) that does not complete at once: a suspect (a
/// MisuseWarning if the semaphore leaks, see the module doc) if DMAs are
/// pending on the semaphore and no sum of their sizes (with or without the
/// count already there) makes `value` -- a descriptor waited with a
/// different size than it was started with. A sum, not only one DMA or all
/// of them: kernels share one semaphore between kinds of copies and wait
/// for each kind's total (jax's paged attention waits for its int8 pages,
/// then for their scales, all started on one semaphore).
pub(crate) fn check_dma_wait<T: Queued>(s: &SemBlock<T>, off: u32, gcore: u32, w: SemWait, as_warning: bool) {
    let SemWait { device, core, value, site: wait_site, .. } = w;
    let pending = s.pending_bytes(off, gcore);
    if pending.is_empty() {
        return;
    }
    let count = s.peek(off, gcore);
    if count >= value || selection_adds_up(value, count, pending.iter().map(|p| p.0)) {
        return;
    }
    let sem = s.first + off;
    if !s.note_misuse(off, gcore, value, wait_site) {
        return;
    }
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
    s.suspect(
        off,
        gcore,
        Report {
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
        },
    );
}

/// Multiples of the sizes' common divisor tracked before giving up (and
/// not warning).
const MAX_UNITS: i64 = 1 << 16;

/// Whether `value` (or `value` less the `count` already there) is a sum of
/// the pending `sizes`, each used any number of times -- or it cannot be
/// told cheaply. Any number of times: DMAs not started yet are likely more
/// of the same sizes (a receiver waiting for all its arrivals at once sees
/// only the ones started so far), and a wait they would complete is no
/// misuse.
fn selection_adds_up(value: i64, count: i64, sizes: impl Iterator<Item = i64>) -> bool {
    let mut sizes: Vec<i64> = sizes.filter(|&b| b > 0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let unit = sizes.iter().fold(0, |g, &b| gcd(g, b));
    if unit == 0 {
        return false;
    }
    let targets = [value, value - count.max(0)];
    targets.iter().any(|&t| {
        if t < 0 || t % unit != 0 {
            return false;
        }
        let t = t / unit;
        if t > MAX_UNITS {
            return true;
        }
        // reachable[u]: u units are a sum of the sizes
        let mut reachable = vec![false; t as usize + 1];
        reachable[0] = true;
        for u in 1..=t as usize {
            reachable[u] = sizes.iter().any(|&b| {
                let b = (b / unit) as usize;
                b <= u && reachable[u - b]
            });
        }
        reachable[t as usize]
    })
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::selection_adds_up;

    #[test]
    fn a_kinds_total_among_other_kinds_adds_up() {
        // two int8 pages (2048 each) and their scales (8192 each) on one semaphore
        let pending = [2048, 8192, 2048, 8192];
        assert!(selection_adds_up(4096, 0, pending.into_iter()));
        assert!(selection_adds_up(16384, 0, pending.into_iter()));
        assert!(selection_adds_up(20480, 0, pending.into_iter()));
        assert!(selection_adds_up(2048, 0, pending.into_iter()));
    }

    #[test]
    fn the_count_already_there_counts() {
        assert!(selection_adds_up(3000, 1000, [2000].into_iter()));
        assert!(!selection_adds_up(3100, 1000, [2000, 500].into_iter()));
    }

    #[test]
    fn more_arrivals_of_the_sizes_seen_add_up() {
        // a receiver waits for three tiles; one has been started so far
        assert!(selection_adds_up(3 * 8192, 0, [8192].into_iter()));
    }

    #[test]
    fn a_size_no_sum_reaches_does_not_add_up() {
        assert!(!selection_adds_up(3000, 0, [2048].into_iter()));
        assert!(!selection_adds_up(1024, 0, [2048, 8192].into_iter()));
        assert!(!selection_adds_up(4096 + 100, 0, [2048].into_iter()));
    }

    #[test]
    fn too_many_units_is_no_verdict() {
        // sizes with a common divisor of 1 and a wait of millions of units
        assert!(selection_adds_up(10_000_001, 0, [1_000_003, 999_983].into_iter()));
    }
}
