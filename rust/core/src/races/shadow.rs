//! FastTrack-style shadow state of one buffer: per element, the last write
//! (an epoch) and the reads since it (an epoch while the reads are totally
//! ordered, a vector clock once they are concurrent).
//!
//! Kernels access whole blocks, so the elements are kept in fixed chunks: a
//! chunk whose elements all have one state stores it once, and an access
//! that covers the whole chunk checks and updates it once. A chunk is split
//! into per-element states only when an access covers part of it, and it
//! becomes uniform again when a later access covers it whole and leaves
//! every element in one state. Exactly the per-element checks, at a cost
//! per chunk in the common case.

use super::cell::{Cell, Conflict, Memo, SharedReads};
use super::clock::{Epoch, VectorClock};

/// Largest chunk (elements): 64 states of 16 bytes when split.
pub const MAX_CHUNK: usize = 64;

enum Chunk {
    Uniform(Cell),
    Split(Box<[Cell]>),
}

pub struct Shadow {
    len: usize,
    /// Elements per chunk, a power of two (`1 << shift`: no divisions on
    /// the per-run path).
    chunk: usize,
    shift: u32,
    chunks: Vec<Chunk>,
    shared: SharedReads,
}

impl Shadow {
    /// The shadow of a buffer of `len` elements whose rows (innermost dim)
    /// have `row` elements: chunks tile the rows when they can, so block
    /// accesses cover whole chunks.
    pub fn new(len: usize, row: usize) -> Self {
        Self::with_chunk(len, chunk_for_row(row))
    }

    /// A shadow with chunks of `chunk` elements, a power of two (tests use
    /// small ones).
    pub fn with_chunk(len: usize, chunk: usize) -> Self {
        assert!(chunk.is_power_of_two(), "shadow chunk {chunk} is not a power of two");
        let chunks = (0..len.div_ceil(chunk)).map(|_| Chunk::Uniform(Cell::default())).collect();
        Shadow { len, chunk, shift: chunk.trailing_zeros(), chunks, shared: SharedReads::default() }
    }

    /// Records a read (or write) of elements `start..start + len` at epoch
    /// `now` by a thread whose clock is `clock`, reusing `memo` (one per
    /// access). Returns the first conflict in element order.
    pub fn access_run(
        &mut self,
        start: usize,
        len: usize,
        now: Epoch,
        clock: &VectorClock,
        write: bool,
        memo: &mut Memo,
    ) -> Option<Conflict> {
        let end = start + len;
        assert!(end <= self.len, "access {start}..{end} outside a shadow of {} elements", self.len);
        let mut conflict = None;
        // Whole chunks first..last, with partial ones at either end.
        let mut first = (start + self.chunk - 1) >> self.shift;
        let last = if end == self.len { self.chunks.len() } else { end >> self.shift };
        if first > last {
            // Inside one chunk, touching neither of its ends.
            let c = start >> self.shift;
            let base = c << self.shift;
            return self.part_chunk(c, start - base, end - base, now, clock, write, memo);
        }
        if start & (self.chunk - 1) != 0 {
            let c = start >> self.shift;
            let base = c << self.shift;
            let to = self.chunk.min(self.len - base);
            conflict = self.part_chunk(c, start - base, to, now, clock, write, memo);
        }
        while first < last {
            // Uniform chunks in the memo's state: a compare and a copy each.
            first += memo_over_uniform(memo, &mut self.chunks[first..last]);
            if first < last {
                conflict = conflict.or(self.whole_chunk(first, now, clock, write, memo));
                first += 1;
            }
        }
        if last < self.chunks.len() && end > last << self.shift {
            let base = last << self.shift;
            conflict = conflict.or(self.part_chunk(last, 0, end - base, now, clock, write, memo));
        }
        conflict
    }

    fn whole_chunk(
        &mut self,
        c: usize,
        now: Epoch,
        clock: &VectorClock,
        write: bool,
        memo: &mut Memo,
    ) -> Option<Conflict> {
        let shared = &mut self.shared;
        match &mut self.chunks[c] {
            Chunk::Uniform(cell) => memo.apply(shared, cell, now, clock, write),
            Chunk::Split(cells) => {
                let conflict = each_cell(shared, cells, now, clock, write, memo);
                let one = cells[0];
                if !one.is_shared() && cells.iter().all(|&x| x == one) {
                    self.chunks[c] = Chunk::Uniform(one);
                }
                conflict
            }
        }
    }

    #[allow(clippy::too_many_arguments)] // the chunk, the element range and the access
    fn part_chunk(
        &mut self,
        c: usize,
        from: usize,
        to: usize,
        now: Epoch,
        clock: &VectorClock,
        write: bool,
        memo: &mut Memo,
    ) -> Option<Conflict> {
        if let Chunk::Uniform(cell) = self.chunks[c] {
            let n = self.chunk.min(self.len - c * self.chunk);
            // Element 0 keeps the chunk's shared clock (if any), the others
            // get copies: shared clocks are updated in place per element.
            let cells: Box<[Cell]> = (0..n).map(|k| if k == 0 { cell } else { self.shared.fork(cell) }).collect();
            self.chunks[c] = Chunk::Split(cells);
        }
        let Chunk::Split(cells) = &mut self.chunks[c] else { unreachable!() };
        each_cell(&mut self.shared, &mut cells[from..to], now, clock, write, memo)
    }

    /// The state of element `i`: its last write and its reads since then.
    #[cfg(any(test, feature = "internals", loom))] // tests only
    pub fn state(&self, i: usize) -> (Epoch, Vec<Epoch>) {
        let cell = match &self.chunks[i / self.chunk] {
            Chunk::Uniform(cell) => *cell,
            Chunk::Split(cells) => cells[i % self.chunk],
        };
        let mut reads = self.shared.reads(cell);
        reads.sort_by_key(|e| (e.thread, e.value));
        (cell.write, reads)
    }

    /// Chunks kept per element (for tests: uniform blocks stay uniform).
    #[cfg(any(test, feature = "internals", loom))] // tests only
    pub fn split_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| matches!(c, Chunk::Split(_))).count()
    }
}

/// Applies `memo` to the leading uniform chunks in its `before` state;
/// returns how many it did.
#[inline]
fn memo_over_uniform(memo: &Memo, chunks: &mut [Chunk]) -> usize {
    let mut n = 0;
    for chunk in chunks {
        let Chunk::Uniform(cell) = chunk else { break };
        if !memo.hit(cell) {
            break;
        }
        n += 1;
    }
    n
}

/// The access applied to each of `cells` in order; the first conflict.
fn each_cell(
    shared: &mut SharedReads,
    cells: &mut [Cell],
    now: Epoch,
    clock: &VectorClock,
    write: bool,
    memo: &mut Memo,
) -> Option<Conflict> {
    let mut conflict = None;
    let mut i = 0;
    while i < cells.len() {
        // Tight loop over the cells in the memo's state.
        i += memo.apply_prefix(&mut cells[i..]);
        if i < cells.len() {
            conflict = conflict.or(memo.apply(shared, &mut cells[i], now, clock, write));
            i += 1;
        }
    }
    conflict
}

/// The largest power of two in `8..=MAX_CHUNK` that divides `row` (so
/// chunks tile rows and column blocks), else `MAX_CHUNK` (partly covered
/// chunks then fall back to per-element states, still exact).
fn chunk_for_row(row: usize) -> usize {
    let fits = 1usize << row.trailing_zeros().min(MAX_CHUNK.trailing_zeros());
    if row == 0 || fits < 8 {
        MAX_CHUNK
    } else {
        fits
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

    fn one(s: &mut Shadow, i: usize, now: Epoch, c: &VectorClock, write: bool) -> Option<Conflict> {
        s.access_run(i, 1, now, c, write, &mut Memo::default())
    }

    #[test]
    fn ordered_accesses_do_not_conflict() {
        let mut s = Shadow::with_chunk(4, 2);
        let w = Epoch { thread: 0, value: 1 };
        assert_eq!(one(&mut s, 2, w, &clock(&[(0, 1)]), true), None);
        // Thread 1 has seen thread 0's first access.
        let r = Epoch { thread: 1, value: 1 };
        assert_eq!(one(&mut s, 2, r, &clock(&[(0, 1), (1, 1)]), false), None);
        let w2 = Epoch { thread: 0, value: 2 };
        assert_eq!(one(&mut s, 2, w2, &clock(&[(0, 2), (1, 1)]), true), None);
    }

    #[test]
    fn unordered_write_write_and_write_read() {
        let mut s = Shadow::with_chunk(1, 8);
        let w0 = Epoch { thread: 0, value: 1 };
        one(&mut s, 0, w0, &clock(&[(0, 1)]), true);
        let w1 = Epoch { thread: 1, value: 1 };
        let after = |earlier| Some(Conflict { earlier, earlier_is_write: true });
        assert_eq!(one(&mut s, 0, w1, &clock(&[(1, 1)]), true), after(w0));
        let r2 = Epoch { thread: 2, value: 1 };
        assert_eq!(one(&mut s, 0, r2, &clock(&[(2, 1)]), false), after(w1));
    }

    #[test]
    fn concurrent_reads_become_shared_and_a_later_write_finds_the_unseen_one() {
        let ra = Epoch { thread: 0, value: 1 };
        let rb = Epoch { thread: 1, value: 1 };
        // Thread 2 has seen thread 0's read but not thread 1's.
        let w = Epoch { thread: 2, value: 1 };
        let mut s = Shadow::with_chunk(4, 4);
        assert_eq!(s.access_run(0, 4, ra, &clock(&[(0, 1)]), false, &mut Memo::default()), None);
        assert_eq!(s.access_run(0, 4, rb, &clock(&[(1, 1)]), false, &mut Memo::default()), None, "read-read");
        assert_eq!(s.state(3), (Epoch::NONE, vec![ra, rb]));
        // A write to part of the shared chunk splits it: each element keeps both reads.
        assert_eq!(
            one(&mut s, 1, w, &clock(&[(0, 1), (2, 1)]), true),
            Some(Conflict { earlier: rb, earlier_is_write: false })
        );
        assert_eq!(s.state(0), (Epoch::NONE, vec![ra, rb]));
        assert_eq!(s.state(1), (w, vec![]));
        assert_eq!(s.state(2), (Epoch::NONE, vec![ra, rb]));
        // After both reads are seen, a write is clean.
        assert_eq!(one(&mut s, 2, w, &clock(&[(0, 1), (1, 1), (2, 1)]), true), None);
    }

    #[test]
    fn whole_chunk_accesses_keep_chunks_uniform_and_rejoin_split_ones() {
        let mut s = Shadow::with_chunk(256, 64);
        let mut c = VectorClock::default();
        let e = c.tick(0);
        s.access_run(0, 256, e, &c, true, &mut Memo::default());
        assert_eq!(s.split_chunks(), 0);
        let e = c.tick(0);
        s.access_run(10, 100, e, &c, false, &mut Memo::default());
        assert_eq!(s.split_chunks(), 2, "chunks 0 and 1 are partly read");
        let e = c.tick(0);
        s.access_run(0, 128, e, &c, true, &mut Memo::default());
        assert_eq!(s.split_chunks(), 0, "a whole write makes them uniform again");
        assert_eq!(s.state(127), (e, vec![]));
    }

    #[test]
    fn a_threads_own_accesses_never_conflict() {
        let mut s = Shadow::with_chunk(3, 2);
        let mut c = VectorClock::default();
        for _ in 0..3 {
            let e = c.tick(4);
            assert_eq!(s.access_run(0, 3, e, &c, false, &mut Memo::default()), None);
            let e = c.tick(4);
            assert_eq!(s.access_run(1, 2, e, &c, true, &mut Memo::default()), None);
        }
    }

    #[test]
    fn chunks_tile_rows() {
        assert_eq!(chunk_for_row(128), 64);
        assert_eq!(chunk_for_row(96), 32);
        assert_eq!(chunk_for_row(100), 64);
        assert_eq!(chunk_for_row(8), 8);
        assert_eq!(chunk_for_row(7), 64);
        assert_eq!(chunk_for_row(1), 64);
    }
}
