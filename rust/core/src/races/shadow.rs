//! FastTrack-style shadow state of one buffer: per element, the last write
//! (an epoch) and the reads since it (an epoch while the reads are totally
//! ordered, a vector clock once they are concurrent). Checking an access
//! costs O(1) per element touched (O(readers) for read-shared elements),
//! independent of how many accesses came before.

use super::clock::{Epoch, VectorClock};

/// Marks `Cell::read` as an index into `Shadow::shared` (not a thread).
const SHARED: u32 = u32::MAX;

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Cell {
    write: Epoch,
    /// An epoch, or `{thread: SHARED, value: index into shared}`.
    read: Epoch,
}

/// An earlier access that conflicts with the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub earlier: Epoch,
    pub earlier_is_write: bool,
}

/// The last transition of one access, reused for neighbouring elements in
/// the same state (a block access usually finds its whole block in one
/// state): a compare and a copy per element instead of the checks.
#[derive(Default)]
pub struct Memo {
    before: Cell,
    after: Cell,
    valid: bool,
}

#[derive(Default)]
pub struct Shadow {
    cells: Vec<Cell>,
    shared: Vec<VectorClock>,
}

impl Shadow {
    pub fn new(len: usize) -> Self {
        Shadow { cells: vec![Cell::default(); len], shared: Vec::new() }
    }

    /// Records a read (or write) of element `i` at epoch `now`, like
    /// `read`/`write`, reusing `memo` (one per access). A conflict is
    /// returned at least once per access that has any.
    #[inline]
    pub fn access(
        &mut self,
        i: usize,
        now: Epoch,
        clock: &VectorClock,
        write: bool,
        memo: &mut Memo,
    ) -> Option<Conflict> {
        let before = self.cells[i];
        if memo.valid && before == memo.before {
            // Same state as an element already done: same outcome, and its
            // conflict (if any) was returned then.
            self.cells[i] = memo.after;
            return None;
        }
        let conflict = if write { self.write(i, now, clock) } else { self.read(i, now, clock) };
        let after = self.cells[i];
        // Read-shared vector clocks belong to one element each (they are
        // updated in place), so those transitions are never copied.
        *memo = Memo { before, after, valid: before.read.thread != SHARED && after.read.thread != SHARED };
        conflict
    }

    /// `access` for elements `start..start + len`.
    pub fn access_run(
        &mut self,
        start: usize,
        len: usize,
        now: Epoch,
        clock: &VectorClock,
        write: bool,
        memo: &mut Memo,
    ) -> Option<Conflict> {
        let mut conflict = None;
        let mut i = start;
        let end = start + len;
        while i < end {
            if memo.valid {
                // Tight loop over the elements in the memo's state.
                let (before, after) = (memo.before, memo.after);
                for cell in &mut self.cells[i..end] {
                    if *cell != before {
                        break;
                    }
                    *cell = after;
                    i += 1;
                }
                if i == end {
                    break;
                }
            }
            let c = self.access(i, now, clock, write, memo);
            conflict = conflict.or(c);
            i += 1;
        }
        conflict
    }

    /// Records a read of element `i` at epoch `now` by a thread whose clock
    /// is `clock`; returns the unordered earlier write, if any.
    pub fn read(&mut self, i: usize, now: Epoch, clock: &VectorClock) -> Option<Conflict> {
        let cell = &mut self.cells[i];
        let conflict =
            (!clock.has_seen(cell.write)).then_some(Conflict { earlier: cell.write, earlier_is_write: true });
        let r = cell.read;
        if r.thread == SHARED {
            self.shared[r.value as usize].set(now.thread, now.value);
        } else if r.is_none() || r.thread == now.thread || clock.has_seen(r) {
            cell.read = now;
        } else {
            // Two concurrent reads: keep both in a vector clock.
            let mut vc = VectorClock::default();
            vc.set(r.thread, r.value);
            vc.set(now.thread, now.value);
            cell.read = Epoch { thread: SHARED, value: self.shared.len() as u32 };
            self.shared.push(vc);
        }
        conflict
    }

    /// Records a write of element `i` at epoch `now`; returns an unordered
    /// earlier write, else an unordered earlier read, if any.
    pub fn write(&mut self, i: usize, now: Epoch, clock: &VectorClock) -> Option<Conflict> {
        let cell = &mut self.cells[i];
        let mut conflict =
            (!clock.has_seen(cell.write)).then_some(Conflict { earlier: cell.write, earlier_is_write: true });
        let r = cell.read;
        if conflict.is_none() {
            let unseen_read = if r.thread == SHARED {
                self.shared[r.value as usize].epochs().find(|&e| !clock.has_seen(e))
            } else {
                (!clock.has_seen(r)).then_some(r)
            };
            conflict = unseen_read.map(|e| Conflict { earlier: e, earlier_is_write: false });
        }
        // Every read and write so far is now ordered before this write or
        // already reported, so the write alone stands for them.
        cell.write = now;
        cell.read = Epoch::NONE;
        conflict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(pairs: &[(u32, u32)]) -> VectorClock {
        let mut c = VectorClock::default();
        for &(t, v) in pairs {
            c.set(t, v);
        }
        c
    }

    #[test]
    fn ordered_accesses_do_not_conflict() {
        let mut s = Shadow::new(4);
        let w = Epoch { thread: 0, value: 1 };
        assert_eq!(s.write(2, w, &clock(&[(0, 1)])), None);
        // Thread 1 has seen thread 0's first access.
        let r = Epoch { thread: 1, value: 1 };
        assert_eq!(s.read(2, r, &clock(&[(0, 1), (1, 1)])), None);
        let w2 = Epoch { thread: 0, value: 2 };
        assert_eq!(s.write(2, w2, &clock(&[(0, 2), (1, 1)])), None);
    }

    #[test]
    fn unordered_write_write_and_write_read() {
        let mut s = Shadow::new(1);
        let w0 = Epoch { thread: 0, value: 1 };
        s.write(0, w0, &clock(&[(0, 1)]));
        let w1 = Epoch { thread: 1, value: 1 };
        assert_eq!(s.write(0, w1, &clock(&[(1, 1)])), Some(Conflict { earlier: w0, earlier_is_write: true }));
        let r2 = Epoch { thread: 2, value: 1 };
        assert_eq!(s.read(0, r2, &clock(&[(2, 1)])), Some(Conflict { earlier: w1, earlier_is_write: true }));
    }

    #[test]
    fn concurrent_reads_become_shared_and_a_later_write_finds_the_unseen_one() {
        let mut s = Shadow::new(1);
        let ra = Epoch { thread: 0, value: 1 };
        let rb = Epoch { thread: 1, value: 1 };
        assert_eq!(s.read(0, ra, &clock(&[(0, 1)])), None);
        assert_eq!(s.read(0, rb, &clock(&[(1, 1)])), None, "read-read is no race");
        // Thread 2 has seen thread 0's read but not thread 1's.
        let w = Epoch { thread: 2, value: 1 };
        assert_eq!(
            s.write(0, w, &clock(&[(0, 1), (2, 1)])),
            Some(Conflict { earlier: rb, earlier_is_write: false })
        );
        // After both reads are seen, a write is clean.
        let mut s = Shadow::new(1);
        s.read(0, ra, &clock(&[(0, 1)]));
        s.read(0, rb, &clock(&[(1, 1)]));
        assert_eq!(s.write(0, w, &clock(&[(0, 1), (1, 1), (2, 1)])), None);
    }

    #[test]
    fn the_memo_gives_the_same_states_and_conflicts_as_the_plain_checks() {
        // Thread 0 writes [0, 4); thread 1 reads [2, 6) unordered; thread 2,
        // having seen thread 0 only, writes [0, 6).
        let (mut plain, mut memo, mut runs) = (Shadow::new(6), Shadow::new(6), Shadow::new(6));
        let steps: [(Epoch, VectorClock, bool, std::ops::Range<usize>); 3] = [
            (Epoch { thread: 0, value: 1 }, clock(&[(0, 1)]), true, 0..4),
            (Epoch { thread: 1, value: 1 }, clock(&[(1, 1)]), false, 2..6),
            (Epoch { thread: 2, value: 1 }, clock(&[(0, 1), (2, 1)]), true, 0..6),
        ];
        for (now, c, write, range) in steps {
            let mut m = Memo::default();
            let mut first_plain = None;
            let mut first_memo = None;
            let run = runs.access_run(range.start, range.len(), now, &c, write, &mut Memo::default());
            for i in range {
                let p = if write { plain.write(i, now, &c) } else { plain.read(i, now, &c) };
                first_plain = first_plain.or(p);
                first_memo = first_memo.or(memo.access(i, now, &c, write, &mut m));
            }
            assert_eq!(first_plain, first_memo);
            assert_eq!(first_plain, run);
            assert!(plain.cells == memo.cells && plain.cells == runs.cells);
        }
    }

    #[test]
    fn a_threads_own_accesses_never_conflict() {
        let mut s = Shadow::new(1);
        let mut c = VectorClock::default();
        for _ in 0..3 {
            let e = c.tick(4);
            assert_eq!(s.read(0, e, &c), None);
            let e = c.tick(4);
            assert_eq!(s.write(0, e, &c), None);
        }
    }
}
