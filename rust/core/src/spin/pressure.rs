//! Whether the CPUs are oversubscribed right now, from Linux's pressure
//! stall information (`/proc/pressure/cpu`: the microseconds in which some
//! runnable thread waited for a CPU).
//!
//! Spin outcomes alone cannot tell: with a CPU-bound process beside a
//! 2-device kernel on 2 CPUs, spins still hit now and then, yet every spin
//! keeps a CPU busy that the scheduler would otherwise give to the
//! signaller or to the other process (measured slower than parking at once:
//! benches/PERFORMANCE.md, "Waits: spinning and parking"). Parking lets both
//! device threads share one CPU through futex hand-offs and leaves the other
//! to the competitor.
//!
//! Sampled at most once per [`SAMPLE`] by whichever wait comes first; the
//! verdict holds until the next sample. Without the file (other systems,
//! kernels without PSI) nothing is ever oversubscribed and spinning relies
//! on its hit / miss adaptation alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Shortest time between two samples.
pub const SAMPLE: Duration = Duration::from_millis(2);
/// Oversubscribed: some thread waited for a CPU in at least 1/STALL_SHARE
/// of the last window.
pub const STALL_SHARE: u64 = 10;

/// The cumulative "some" stall time (us) in a `/proc/pressure/cpu` text.
pub fn parse_some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

/// Whether `stalled_us` of stall in a window of `window_us` means the CPUs
/// are oversubscribed.
pub fn is_oversubscribed(stalled_us: u64, window_us: u64) -> bool {
    stalled_us.saturating_mul(STALL_SHARE) >= window_us.max(1)
}

#[cfg(target_os = "linux")]
fn read_some_total() -> Option<u64> {
    use std::os::unix::fs::FileExt;
    // Kept open: a re-read at offset 0 regenerates the text, cheaper than
    // open + read + close (benches/PERFORMANCE.md, "Waits: spinning and
    // parking").
    static FILE: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let file = FILE.get_or_init(|| std::fs::File::open("/proc/pressure/cpu").ok()).as_ref()?;
    let mut buf = [0u8; 256];
    let n = file.read_at(&mut buf, 0).ok()?;
    parse_some_total(std::str::from_utf8(&buf[..n]).ok()?)
}

#[cfg(not(target_os = "linux"))]
fn read_some_total() -> Option<u64> {
    None
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The sampled verdict (one per [`super::AdaptiveSpin`]).
#[derive(Debug, Default)]
pub struct CpuPressure {
    /// When the last sample was taken (us since `epoch()`, plus one; 0: never).
    sampled_at: AtomicU64,
    /// The stall total at that sample.
    stalled: AtomicU64,
    oversubscribed: AtomicBool,
}

impl CpuPressure {
    /// The current verdict, sampling first if the last sample is old.
    pub fn oversubscribed(&self) -> bool {
        let now = u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX - 1) + 1;
        self.sample_at(now, read_some_total)
    }

    /// [`Self::oversubscribed`] at time `now` (us, > 0) with the stall
    /// total read by `read`.
    pub fn sample_at(&self, now: u64, read: impl FnOnce() -> Option<u64>) -> bool {
        let last = self.sampled_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= SAMPLE.as_micros() as u64;
        // One sampler per window: the others keep the verdict they see.
        if due && self.sampled_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            if let Some(total) = read() {
                let before = self.stalled.swap(total, Ordering::Relaxed);
                if last != 0 {
                    let over = is_oversubscribed(total.saturating_sub(before), now - last);
                    self.oversubscribed.store(over, Ordering::Relaxed);
                }
            }
        }
        self.oversubscribed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_total_is_parsed_from_the_psi_text() {
        let text = "some avg10=61.73 avg60=76.27 avg300=86.41 total=5496835446\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_some_total(text), Some(5_496_835_446));
        assert_eq!(parse_some_total("full avg10=0.00 total=7\n"), None);
        assert_eq!(parse_some_total("some avg10=1.00 total=x\n"), None);
        assert_eq!(parse_some_total(""), None);
    }

    #[test]
    fn the_kept_open_file_reads_as_a_fresh_read_does() {
        let fresh = std::fs::read_to_string("/proc/pressure/cpu").ok().and_then(|t| parse_some_total(&t));
        assert_eq!(read_some_total().is_some(), fresh.is_some());
        assert!(read_some_total() >= fresh, "the stall total never decreases");
    }

    #[test]
    fn a_tenth_of_the_window_stalled_is_oversubscribed() {
        assert!(is_oversubscribed(200, 2000));
        assert!(!is_oversubscribed(199, 2000));
        assert!(!is_oversubscribed(0, 0));
    }

    #[test]
    fn samples_compare_stall_growth_with_the_window() {
        let p = CpuPressure::default();
        // The first sample is a baseline only.
        assert!(!p.sample_at(1, || Some(1_000)));
        // 2 ms later, 1 ms more stall: oversubscribed.
        assert!(p.sample_at(2_001, || Some(2_000)));
        // Within the window: no new sample, the verdict holds.
        assert!(p.sample_at(2_500, || panic!("sampled within the window")));
        // 4 ms later, 100 us more: not oversubscribed.
        assert!(!p.sample_at(6_001, || Some(2_100)));
        // No file: the verdict stays as it was.
        assert!(!p.sample_at(9_000, || None));
    }
}
