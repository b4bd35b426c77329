//! Adaptive spinning before a blocked wait parks.
//!
//! Parking costs the hand-off a futex wake-up and a context switch (a few
//! microseconds), so a waiter whose signaller is running on another CPU
//! does better watching the counter for a moment. But a spinner holds its
//! CPU: when the CPUs are oversubscribed (another process, `pytest -n`, a
//! shared CI runner) the thread it waits for may be queued behind it, and
//! every spin then burns its whole budget before parking lets the signaller
//! run (a 2-device ping-pong beside one CPU-bound process got several times
//! slower: benches/PERFORMANCE.md, "Waits: spinning and parking", has the
//! figures behind this module).
//!
//! So waits park at once while the CPUs are oversubscribed (see
//! `pressure`), and otherwise a spin's outcome decides the next ones (also
//! all there is where the pressure cannot be read):
//! * a spin that lasted far longer than its budget lost its CPU meanwhile
//!   (*preempted*): the CPUs are oversubscribed, waits park at once;
//! * parking, one wait in [`PROBE_EVERY`] spins the whole budget: a *hit*
//!   (the wait satisfied while spinning) resumes spinning;
//! * a spin that runs out (a *miss*) changes nothing. On idle CPUs a miss
//!   costs only a CPU nobody wanted, and learning from misses settles on
//!   parking for good: once both sides of a hand-off park, every wait
//!   outlasts any spin, and a ping-pong ran an order of magnitude slower on
//!   idle CPUs than spinning.
//!
//! Yielding the CPU instead (`sched_yield`) was measured and rejected: with
//! a CPU-bound process on the same run queue the yielder gives that process
//! its whole time slice, not the signaller.
//!
//! The learnt state is shared by every core of a table and, through one
//! `Arc`, by successive launches: contention belongs to the machine, and
//! short kernels have too few waits to learn it each time. Updates are
//! plain loads and stores (a lost update only delays learning); they are
//! std atomics even in loom models, being no part of the park protocol.
//!
//! May use: std only (it sits below `sem` and `config`, which hold it).

mod pressure;

use pressure::CpuPressure;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// While parking, one wait in this many spins (a probe).
pub const PROBE_EVERY: u32 = 16;
/// A spin that took this much longer than its budget lost its CPU.
pub const PREEMPTED_AFTER: Duration = Duration::from_micros(50);

/// What one spin got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The wait was satisfied while spinning.
    Hit,
    /// The budget ran out first.
    Miss,
    /// The spin lasted far longer than its budget: the thread was
    /// descheduled while it spun.
    Preempted,
}

impl Outcome {
    /// Classifies a spin of `budget` that ended after `elapsed`, with the
    /// wait satisfied (`ready`) or not.
    pub fn of(ready: bool, elapsed: Duration, budget: Duration) -> Outcome {
        if elapsed > budget + PREEMPTED_AFTER {
            Outcome::Preempted
        } else if ready {
            Outcome::Hit
        } else {
            Outcome::Miss
        }
    }
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}

/// The budget (ns) after `outcome` of a spin at `budget`: `max` (spin) or
/// 0 (park).
pub fn next_budget(budget: u32, max: u32, outcome: Outcome) -> u32 {
    match outcome {
        Outcome::Hit => max,
        Outcome::Miss => budget,
        Outcome::Preempted => 0,
    }
}

/// The learnt spin budget of the waits that share it (see the module doc).
#[derive(Debug)]
pub struct AdaptiveSpin {
    max: u32,
    /// Current budget (ns): `max`, or 0: park at once, probing now and then.
    budget: AtomicU32,
    /// Waits that parked at once since the budget last was zero (probe clock).
    skipped: AtomicU32,
    /// `None`: learn from spin outcomes only.
    pressure: Option<CpuPressure>,
}

impl AdaptiveSpin {
    /// Spins of at most `max`, starting at `max` (a quiet machine).
    pub fn new(max: Duration) -> Self {
        Self::with_pressure(max, Some(CpuPressure::default()))
    }

    /// Blind to CPU pressure: learns from spin outcomes only (deterministic
    /// tests on a loaded machine).
    #[cfg(any(test, feature = "internals", loom))]
    pub fn outcomes_only(max: Duration) -> Self {
        Self::with_pressure(max, None)
    }

    fn with_pressure(max: Duration, pressure: Option<CpuPressure>) -> Self {
        let max = nanos(max);
        AdaptiveSpin { max, budget: AtomicU32::new(max), skipped: AtomicU32::new(0), pressure }
    }

    /// How long the next wait spins before it parks (`None`: not at all).
    pub fn plan(&self) -> Option<Duration> {
        if self.max == 0 || self.pressure.as_ref().is_some_and(|p| p.oversubscribed()) {
            return None;
        }
        let budget = self.budget.load(Ordering::Relaxed);
        if budget > 0 {
            return Some(Duration::from_nanos(budget.into()));
        }
        let n = self.skipped.fetch_add(1, Ordering::Relaxed);
        (n % PROBE_EVERY == PROBE_EVERY - 1).then_some(Duration::from_nanos(self.max.into()))
    }

    /// Learns from the outcome of a spin [`Self::plan`] asked for.
    pub fn record(&self, outcome: Outcome) {
        let budget = self.budget.load(Ordering::Relaxed);
        let next = next_budget(budget, self.max, outcome);
        if next != budget {
            self.budget.store(next, Ordering::Relaxed);
        }
    }

    /// The current budget (diagnostics and tests).
    pub fn budget(&self) -> Duration {
        Duration::from_nanos(self.budget.load(Ordering::Relaxed).into())
    }
}

/// Busy-waits until `ready()` or `budget` has passed.
#[cfg(not(loom))]
pub(crate) fn spin(budget: Duration, ready: impl Fn() -> bool) -> Outcome {
    let start = std::time::Instant::now();
    loop {
        // The clock is read once per 32 checks: a check is tens of ns.
        for _ in 0..32 {
            if ready() {
                return Outcome::of(true, start.elapsed(), budget);
            }
            std::hint::spin_loop();
        }
        let elapsed = start.elapsed();
        if elapsed > budget {
            return Outcome::of(false, elapsed, budget);
        }
    }
}

/// Loom cannot model time: a spin is a couple of checks with a yield in
/// between (enough to explore a waiter that spins, misses, then parks).
#[cfg(loom)]
pub(crate) fn spin(_budget: Duration, ready: impl Fn() -> bool) -> Outcome {
    for _ in 0..2 {
        if ready() {
            return Outcome::Hit;
        }
        loom::thread::yield_now();
    }
    Outcome::Miss
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u32 = 1000;

    #[test]
    fn a_hit_spins_the_whole_budget_again() {
        assert_eq!(next_budget(0, 20 * US, Outcome::Hit), 20 * US);
        assert_eq!(next_budget(20 * US, 20 * US, Outcome::Hit), 20 * US);
    }

    #[test]
    fn a_miss_changes_nothing() {
        assert_eq!(next_budget(20 * US, 20 * US, Outcome::Miss), 20 * US);
        assert_eq!(next_budget(0, 20 * US, Outcome::Miss), 0);
    }

    #[test]
    fn a_preempted_spin_stops_spinning_at_once() {
        assert_eq!(next_budget(20 * US, 20 * US, Outcome::Preempted), 0);
    }

    #[test]
    fn outcomes_are_classified_by_readiness_and_overrun() {
        let b = Duration::from_micros(20);
        assert_eq!(Outcome::of(true, Duration::from_micros(3), b), Outcome::Hit);
        assert_eq!(Outcome::of(false, Duration::from_micros(21), b), Outcome::Miss);
        assert_eq!(Outcome::of(true, b + PREEMPTED_AFTER + Duration::from_micros(1), b), Outcome::Preempted);
        assert_eq!(Outcome::of(false, Duration::from_millis(3), b), Outcome::Preempted);
    }

    #[test]
    fn only_preemption_stops_spinning() {
        let run = |pattern: &[Outcome]| {
            let mut b = 20 * US;
            for _ in 0..50 {
                for &o in pattern {
                    b = next_budget(b, 20 * US, o);
                }
            }
            b
        };
        use Outcome::{Hit, Miss, Preempted};
        assert_eq!(run(&[Miss]), 20 * US);
        assert_eq!(run(&[Hit, Miss, Miss, Miss]), 20 * US);
        assert_eq!(run(&[Hit, Preempted]), 0);
    }

    #[test]
    fn at_zero_one_wait_in_probe_every_spins() {
        let s = AdaptiveSpin::outcomes_only(Duration::from_micros(20));
        assert_eq!(s.plan(), Some(Duration::from_micros(20)));
        s.record(Outcome::Preempted);
        assert_eq!(s.budget(), Duration::ZERO);
        let plans: Vec<_> = (0..2 * PROBE_EVERY).map(|_| s.plan()).collect();
        let probes: Vec<usize> = plans.iter().enumerate().filter(|(_, p)| p.is_some()).map(|(i, _)| i).collect();
        assert_eq!(probes, vec![PROBE_EVERY as usize - 1, 2 * PROBE_EVERY as usize - 1]);
        assert!(plans.iter().flatten().all(|&p| p == Duration::from_micros(20)));
        // A probe that misses keeps parking; one that hits resumes spinning.
        s.record(Outcome::Miss);
        assert_eq!(s.budget(), Duration::ZERO);
        s.record(Outcome::Hit);
        assert_eq!(s.plan(), Some(Duration::from_micros(20)));
    }

    #[test]
    fn a_zero_cap_never_spins() {
        let s = AdaptiveSpin::outcomes_only(Duration::ZERO);
        assert!((0..3 * PROBE_EVERY).all(|_| s.plan().is_none()));
    }

    #[test]
    fn a_spin_that_sees_readiness_hits() {
        assert_eq!(spin(Duration::from_secs(3600), || true), Outcome::Hit);
    }
}
