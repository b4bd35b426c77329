//! Where one evaluation keeps each value, and how many elements a chunk
//! has (`eval` runs every instruction over one chunk, then the next).

use super::program::{VectorLayout, MAX_VALUES};
use super::simplify::Rewrite;
use super::view::words_for;

/// Scratch bytes that one chunk's array values may take in all: small
/// enough that a value stays in the core's L2 cache (512 KiB to 1 MiB on
/// current x86) from the instruction that writes it to the ones that read
/// it, large enough that per-chunk dispatch stays small. Measured with
/// `benches/vector.rs` (benches/PERFORMANCE.md, "Vector programs: where
/// native stops"): a wide range of chunk sizes is flat, smaller ones lose.
pub(super) const CHUNK_BYTES: usize = 128 << 10;
/// A chunk is a whole number of these elements (whole SIMD loops, and
/// array slots of whole 64-byte lines).
pub(super) const CHUNK_QUANTUM: usize = 64;

/// Where a value's elements are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Loc {
    /// In place in input operand `i` (all n elements).
    Input(usize),
    /// At this word offset of the scratch (one chunk, or one element of a
    /// scalar).
    At(usize),
}

/// Where one evaluation keeps each value, and its chunk length.
pub(super) struct EvalPlan {
    pub locs: [Loc; MAX_VALUES],
    /// Elements per chunk (the last chunk may have fewer); n if n is at
    /// most one chunk.
    pub chunk: usize,
    /// Scratch words of one chunk's values.
    pub words: usize,
}

/// Elements per chunk of an n-element program whose array values in
/// scratch take `bytes_per_element` bytes per element in all.
pub(super) fn chunk_len(n: usize, bytes_per_element: usize) -> usize {
    let fit = CHUNK_BYTES / bytes_per_element.max(1) / CHUNK_QUANTUM * CHUNK_QUANTUM;
    n.min(fit.max(CHUNK_QUANTUM))
}

impl VectorLayout {
    /// The plan of one evaluation: an input that `in_place` says is
    /// aligned is read where it is, an alias where its value is, every
    /// other value gets a scratch slot of its own. `chunk`: elements per
    /// chunk (at least 1), else chosen by [`chunk_len`].
    pub(super) fn plan(&self, in_place: &[bool], chunk: Option<usize>) -> EvalPlan {
        let slot = |v: usize| match self.rewrites[v] {
            _ if v < self.n_inputs => !in_place[v],
            Rewrite::Alias(_) => false,
            _ => true,
        };
        let per_element: usize =
            (0..self.n_values).filter(|&v| slot(v) && !self.meta[v].scalar).map(|v| self.meta[v].ty.size()).sum();
        let chunk = match chunk {
            Some(c) => c.clamp(1, self.n.max(1)),
            None => chunk_len(self.n, per_element),
        };
        let mut locs = [Loc::At(0); MAX_VALUES];
        let mut words = 0usize;
        for v in 0..self.n_values {
            let m = self.meta[v];
            locs[v] = match self.rewrites[v] {
                _ if slot(v) => {
                    let at = words;
                    words += words_for(if m.scalar { 1 } else { chunk }, m.ty.size());
                    Loc::At(at)
                }
                Rewrite::Alias(a) => locs[a as usize],
                _ => Loc::Input(v),
            };
        }
        EvalPlan { locs, chunk, words }
    }
}
