//! Whether, and how long, the semaphore waits of an XLA launch spin before
//! they park.
//!
//! Waking a parked thread costs a few microseconds of OS scheduling, which
//! is most of a cross-device round trip; when every simulated core can have
//! a CPU of its own, watching the counter for a short while is cheaper. With
//! more simulated cores than CPUs, spinning steals the CPU the signaller
//! needs (an 8-device ring on 2 CPUs got many times slower: see
//! benches/PERFORMANCE.md, "Waits: spinning and parking"), so then waits
//! park at once. Within that limit the budget adapts (see
//! `AdaptiveSpin`): other processes can oversubscribe the CPUs too. All
//! launches of the process share what it learns: contention is the
//! machine's, and one short kernel has too few waits to learn it alone.

use mosaic_rt_core::AdaptiveSpin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Longest spin before parking.
const BUDGET: Duration = Duration::from_micros(20);

fn cpus() -> u32 {
    static CPUS: OnceLock<u32> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}

fn shared() -> &'static Arc<AdaptiveSpin> {
    static SHARED: OnceLock<Arc<AdaptiveSpin>> = OnceLock::new();
    SHARED.get_or_init(|| Arc::new(AdaptiveSpin::new(BUDGET)))
}

/// The spin policy of a launch of `devices` x `cores` simulated cores
/// (`None`: park at once).
pub fn policy(devices: u32, cores: u32) -> Option<Arc<AdaptiveSpin>> {
    (devices.saturating_mul(cores) <= cpus()).then(|| Arc::clone(shared()))
}
