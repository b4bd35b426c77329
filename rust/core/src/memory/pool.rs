//! A process-wide pool of large buffer allocations.
//!
//! A launch's buffers die with its runtime. Allocations of a few MiB are
//! mmapped by malloc and unmapped on free, so the next launch of the same
//! kernel faulted in every page again (page faults were more than half of
//! the per-MiB launch cost). Dropped buffers of at least [`MIN_POOLED`]
//! bytes park their allocation here and the next allocation of a similar
//! size takes it, old bytes included (initialized memory a buffer may keep
//! until it is filled, see `content.rs`). Only the allocation is reused:
//! every buffer is written whole (initial value or fill pattern) before
//! anyone reads it, so nothing crosses from one launch or device to another.
//!
//! Bounded: at most [`MAX_BYTES`] parked (the oldest go first), and an
//! allocation parked for longer than [`MAX_IDLE`] is freed at the next pool
//! operation.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::IgnorePoison;

/// Smaller allocations come from malloc's arenas without faults.
pub const MIN_POOLED: usize = 256 << 10;
/// Bytes parked at most.
pub const MAX_BYTES: usize = 256 << 20;
/// Parked allocations unused this long are freed.
pub const MAX_IDLE: Duration = Duration::from_secs(2);

struct Parked {
    v: Vec<u8>,
    since: Instant,
}

/// The parked allocations, oldest first.
pub(crate) struct Pool {
    parked: Vec<Parked>,
    bytes: usize,
    max_bytes: usize,
    max_idle: Duration,
}

static POOL: Mutex<Pool> = Mutex::new(Pool::new(MAX_BYTES, MAX_IDLE));

impl Pool {
    pub(crate) const fn new(max_bytes: usize, max_idle: Duration) -> Pool {
        Pool { parked: Vec::new(), bytes: 0, max_bytes, max_idle }
    }

    /// A vector with room for `bytes`: a parked one (whose capacity is at
    /// most a quarter larger, still holding its old bytes), else a new empty
    /// one.
    pub(crate) fn take(&mut self, bytes: usize, now: Instant) -> Vec<u8> {
        self.expire(now);
        if bytes >= MIN_POOLED {
            let fits = |p: &Parked| p.v.capacity() >= bytes && p.v.capacity() - bytes <= bytes / 4;
            let best = self.parked.iter().enumerate().filter(|(_, p)| fits(p)).min_by_key(|(_, p)| p.v.capacity());
            if let Some((i, _)) = best {
                let p = self.parked.remove(i);
                self.bytes -= p.v.capacity();
                return p.v;
            }
        }
        Vec::new()
    }

    /// Parks `v`'s allocation (or frees it: too small, or larger than the
    /// whole pool).
    pub(crate) fn give(&mut self, v: Vec<u8>, now: Instant) {
        self.expire(now);
        let cap = v.capacity();
        if cap < MIN_POOLED || cap > self.max_bytes {
            return;
        }
        while self.bytes + cap > self.max_bytes {
            let old = self.parked.remove(0);
            self.bytes -= old.v.capacity();
        }
        self.bytes += cap;
        self.parked.push(Parked { v, since: now });
    }

    fn expire(&mut self, now: Instant) {
        let max_idle = self.max_idle;
        let before = self.parked.len();
        self.parked.retain(|p| now.saturating_duration_since(p.since) <= max_idle);
        if self.parked.len() != before {
            self.bytes = self.parked.iter().map(|p| p.v.capacity()).sum();
        }
    }

    /// Bytes parked now.
    pub(crate) fn parked_bytes(&self) -> usize {
        self.bytes
    }
}

/// A vector with room for `bytes`, from the process pool if it has one (its
/// old bytes still in it: clear it unless you mean to keep them).
pub(crate) fn take(bytes: usize) -> Vec<u8> {
    if bytes < MIN_POOLED {
        return Vec::new();
    }
    POOL.lock().ignore_poison().take(bytes, Instant::now())
}

/// Returns `v`'s allocation to the process pool.
pub(crate) fn give(v: Vec<u8>) {
    if v.capacity() < MIN_POOLED {
        return;
    }
    POOL.lock().ignore_poison().give(v, Instant::now())
}

/// Bytes parked in the process pool (tests, diagnostics).
pub fn pooled_bytes() -> usize {
    POOL.lock().ignore_poison().parked_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn vec_of(cap: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(cap);
        v.resize(cap, 7);
        v
    }

    #[test]
    fn reuses_an_allocation_of_the_same_size() {
        let now = Instant::now();
        let mut pool = Pool::new(64 * MIB, MAX_IDLE);
        let v = vec_of(4 * MIB);
        let ptr = v.as_ptr();
        pool.give(v, now);
        assert_eq!(pool.parked_bytes(), 4 * MIB);
        let again = pool.take(4 * MIB, now);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again.len(), 4 * MIB, "old bytes kept: initialized memory to overwrite");
        assert_eq!(pool.parked_bytes(), 0);
    }

    #[test]
    fn sizes_far_apart_and_small_ones_are_not_reused() {
        let now = Instant::now();
        let mut pool = Pool::new(64 * MIB, MAX_IDLE);
        pool.give(vec_of(8 * MIB), now);
        assert_eq!(pool.take(4 * MIB, now).capacity(), 0, "twice the size is too wasteful");
        assert_eq!(pool.take(9 * MIB, now).capacity(), 0, "too small");
        pool.give(vec_of(MIN_POOLED - 1), now);
        assert_eq!(pool.parked_bytes(), 8 * MIB, "small allocations go back to malloc");
        assert_eq!(pool.take(7 * MIB, now).capacity(), 8 * MIB, "within a quarter");
    }

    #[test]
    fn takes_the_tightest_fit() {
        let now = Instant::now();
        let mut pool = Pool::new(64 * MIB, MAX_IDLE);
        pool.give(vec_of(5 * MIB), now);
        pool.give(vec_of(4 * MIB), now);
        assert_eq!(pool.take(4 * MIB, now).capacity(), 4 * MIB);
    }

    #[test]
    fn stays_under_its_cap_dropping_the_oldest() {
        let now = Instant::now();
        let mut pool = Pool::new(10 * MIB, MAX_IDLE);
        for _ in 0..100 {
            pool.give(vec_of(4 * MIB), now);
            assert!(pool.parked_bytes() <= 10 * MIB);
        }
        assert_eq!(pool.parked_bytes(), 8 * MIB);
        pool.give(vec_of(11 * MIB), now);
        assert_eq!(pool.parked_bytes(), 8 * MIB, "larger than the cap: freed at once");
    }

    #[test]
    fn idle_allocations_are_freed() {
        let t0 = Instant::now();
        let mut pool = Pool::new(64 * MIB, Duration::from_millis(10));
        pool.give(vec_of(MIB), t0);
        pool.give(vec_of(2 * MIB), t0 + Duration::from_millis(8));
        assert_eq!(pool.take(3 * MIB, t0 + Duration::from_millis(15)).capacity(), 0);
        assert_eq!(pool.parked_bytes(), 2 * MIB, "the first expired, the second not yet");
        assert_eq!(pool.take(3 * MIB, t0 + Duration::from_millis(30)).capacity(), 0);
        assert_eq!(pool.parked_bytes(), 0);
    }
}
