//! The FastTrack state of one location (an element, or a uniform chunk of
//! elements that all share it) and its read/write transitions.

use super::clock::{Epoch, VectorClock};

/// Marks `Cell::read` as an index into `SharedReads` (not a thread).
const SHARED: u32 = u32::MAX;

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(super) struct Cell {
    pub write: Epoch,
    /// An epoch, or `{thread: SHARED, value: index into SharedReads}`.
    pub read: Epoch,
}

impl Cell {
    /// Whether the reads are a shared vector clock (owned by this cell:
    /// such cells are never copied, only moved or cloned with `fork`).
    pub fn is_shared(self) -> bool {
        self.read.thread == SHARED
    }
}

/// An earlier access that conflicts with the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub earlier: Epoch,
    pub earlier_is_write: bool,
}

/// The vector clocks of read-shared cells; each belongs to one cell, and a
/// slot is reused once its cell is written.
#[derive(Default)]
pub(super) struct SharedReads {
    clocks: Vec<VectorClock>,
    free: Vec<u32>,
}

impl SharedReads {
    fn add(&mut self, vc: VectorClock) -> Epoch {
        let value = match self.free.pop() {
            Some(k) => {
                self.clocks[k as usize] = vc;
                k
            }
            None => {
                self.clocks.push(vc);
                (self.clocks.len() - 1) as u32
            }
        };
        Epoch { thread: SHARED, value }
    }

    fn get(&self, read: Epoch) -> &VectorClock {
        &self.clocks[read.value as usize]
    }

    /// A copy of `cell` with its own shared clock (when it has one).
    pub fn fork(&mut self, cell: Cell) -> Cell {
        if !cell.is_shared() {
            return cell;
        }
        let vc = self.get(cell.read).clone();
        Cell { write: cell.write, read: self.add(vc) }
    }

    /// The reads of `cell` as epochs (for comparing states in tests).
    #[cfg(any(test, feature = "internals", loom))] // tests only
    pub fn reads(&self, cell: Cell) -> Vec<Epoch> {
        if cell.is_shared() {
            self.get(cell.read).epochs().collect()
        } else if cell.read.is_none() {
            Vec::new()
        } else {
            vec![cell.read]
        }
    }

    /// Records a read at epoch `now` by a thread whose clock is `clock`;
    /// returns the unordered earlier write, if any.
    pub fn read(&mut self, cell: &mut Cell, now: Epoch, clock: &VectorClock) -> Option<Conflict> {
        let conflict =
            (!clock.has_seen(cell.write)).then_some(Conflict { earlier: cell.write, earlier_is_write: true });
        let r = cell.read;
        if cell.is_shared() {
            self.clocks[r.value as usize].set(now.thread, now.value);
        } else if r.is_none() || r.thread == now.thread || clock.has_seen(r) {
            cell.read = now;
        } else {
            // Two concurrent reads: keep both in a vector clock.
            let mut vc = VectorClock::default();
            vc.set(r.thread, r.value);
            vc.set(now.thread, now.value);
            cell.read = self.add(vc);
        }
        conflict
    }

    /// Records a write at epoch `now`; returns an unordered earlier write,
    /// else an unordered earlier read, if any.
    pub fn write(&mut self, cell: &mut Cell, now: Epoch, clock: &VectorClock) -> Option<Conflict> {
        let mut conflict =
            (!clock.has_seen(cell.write)).then_some(Conflict { earlier: cell.write, earlier_is_write: true });
        let r = cell.read;
        if conflict.is_none() {
            let unseen_read = if cell.is_shared() {
                self.get(r).epochs().find(|&e| !clock.has_seen(e))
            } else {
                (!clock.has_seen(r)).then_some(r)
            };
            conflict = unseen_read.map(|e| Conflict { earlier: e, earlier_is_write: false });
        }
        if cell.is_shared() {
            self.free.push(r.value);
        }
        // Every read and write so far is now ordered before this write or
        // already reported, so the write alone stands for them.
        *cell = Cell { write: now, read: Epoch::NONE };
        conflict
    }

    /// `read` or `write`.
    pub fn access(&mut self, cell: &mut Cell, now: Epoch, clock: &VectorClock, write: bool) -> Option<Conflict> {
        if write {
            self.write(cell, now, clock)
        } else {
            self.read(cell, now, clock)
        }
    }
}

/// The last transition of one access, reused for other locations in the
/// same state (a block access usually finds its whole block in one state):
/// a compare and a copy instead of the checks.
#[derive(Default)]
pub struct Memo {
    before: Cell,
    after: Cell,
    valid: bool,
}

impl Memo {
    /// Applies the access to `cell` through the memo when it can, else
    /// through `shared` (and remembers that transition). A conflict is
    /// returned at least once per access that has any: a memo hit has the
    /// outcome of the location that made the memo.
    #[inline]
    pub(super) fn apply(
        &mut self,
        shared: &mut SharedReads,
        cell: &mut Cell,
        now: Epoch,
        clock: &VectorClock,
        write: bool,
    ) -> Option<Conflict> {
        let before = *cell;
        if self.valid && before == self.before {
            *cell = self.after;
            return None;
        }
        let conflict = shared.access(cell, now, clock, write);
        // Shared clocks are updated in place and belong to one cell, so
        // those transitions are never copied.
        *self = Memo { before, after: *cell, valid: !before.is_shared() && !cell.is_shared() };
        conflict
    }

    /// Applies the memo to `cell` if it is in the memo's `before` state.
    #[inline]
    pub(super) fn hit(&self, cell: &mut Cell) -> bool {
        let hit = self.valid && *cell == self.before;
        if hit {
            *cell = self.after;
        }
        hit
    }

    /// Applies the memo to the leading cells in its `before` state; returns
    /// how many it did.
    #[inline]
    pub(super) fn apply_prefix(&self, cells: &mut [Cell]) -> usize {
        if !self.valid {
            return 0;
        }
        let mut n = 0;
        for cell in cells {
            if *cell != self.before {
                break;
            }
            *cell = self.after;
            n += 1;
        }
        n
    }
}
