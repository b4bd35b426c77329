//! What scalar and vector programs share: a cursor over a program's words
//! ([`Reader`]), a decoded layout owned or borrowed ([`LayoutRef`]), and
//! decoded programs by their words ([`LayoutCache`]): a kernel runs the
//! same few programs every loop step, and decoding (checking) one costs
//! more than running it. Cache entries match by content, so a reused
//! address of other words never matches wrongly; when full, the oldest
//! entry goes.

use crate::error::{Result, RtError};

/// Programs a [`LayoutCache`] keeps.
pub const CACHED_PROGRAMS: usize = 32;

/// The multiplier of [`fingerprint`] (odd: every power is distinct mod 2^64).
const FINGERPRINT_BASE: u64 = 0x9E37_79B9_7F4A_7C15;

/// `sum(words[i] * B^(i+1)) mod 2^64` (`mosaic_rt.ffi.ops` computes the
/// same with numpy and passes it with the words).
pub fn fingerprint(words: &[i64]) -> u64 {
    let (mut h, mut p) = (0u64, FINGERPRINT_BASE);
    for &w in words {
        h = h.wrapping_add((w as u64).wrapping_mul(p));
        p = p.wrapping_mul(FINGERPRINT_BASE);
    }
    h
}

/// A cursor over a program's words, failing clearly at the end; `bad`
/// makes the program kind's error of a message.
pub struct Reader<'a> {
    pub words: &'a [i64],
    pub pos: usize,
    pub bad: fn(String) -> RtError,
}

impl Reader<'_> {
    pub fn next(&mut self, what: &str) -> Result<i64> {
        let Some(&w) = self.words.get(self.pos) else {
            return Err((self.bad)(format!("truncated at word {} ({what})", self.pos)));
        };
        self.pos += 1;
        Ok(w)
    }

    /// The next word as a count in `0..=max`.
    pub fn count(&mut self, what: &str, max: usize) -> Result<usize> {
        let n = self.next(what)?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| (self.bad)(format!("{what} {n} out of range 0..={max}")))
    }
}

/// A program's layout: its own (decoded just now) or a cache's (no copy
/// of the table on the hot path).
pub enum LayoutRef<'a, L> {
    Owned(Box<L>),
    Cached(&'a L),
}

impl<L> std::ops::Deref for LayoutRef<'_, L> {
    type Target = L;
    #[inline]
    fn deref(&self) -> &L {
        match self {
            LayoutRef::Owned(l) => l,
            LayoutRef::Cached(l) => l,
        }
    }
}

/// Decoded layouts `L` by program words.
pub struct LayoutCache<L> {
    entries: Vec<Entry<L>>,
    oldest: usize,
}

struct Entry<L> {
    words: Vec<i64>,
    layout: L,
    /// [`fingerprint`] of `words`, and the address they were last seen at:
    /// a call at that address with that fingerprint and length is this
    /// program without comparing every word (which costs more than the
    /// program's evaluation).
    fingerprint: u64,
    seen_at: usize,
}

impl<L> LayoutCache<L> {
    pub const fn new() -> LayoutCache<L> {
        LayoutCache { entries: Vec::new(), oldest: 0 }
    }

    /// How many programs are cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The layout of `words`, `decode`d unless cached (bad programs are
    /// not cached).
    pub fn get(&mut self, words: &[i64], decode: impl FnOnce(&[i64]) -> Result<L>) -> Result<&L> {
        let k = self.find_or_decode(words, decode)?;
        Ok(&self.entries[k].layout)
    }

    /// [`LayoutCache::get`] of words whose [`fingerprint`] the caller
    /// states: when the same words were seen at the same address, no word
    /// is compared. A wrong fingerprint is `bad`'s error.
    pub fn get_fingerprinted(
        &mut self,
        words: &[i64],
        stated: u64,
        decode: impl FnOnce(&[i64]) -> Result<L>,
        bad: impl FnOnce(String) -> RtError,
    ) -> Result<&L> {
        let at = words.as_ptr() as usize;
        let hit = self
            .entries
            .iter()
            .position(|e| e.seen_at == at && e.fingerprint == stated && e.words.len() == words.len());
        let k = match hit {
            Some(k) => k,
            None => {
                if fingerprint(words) != stated {
                    return Err(bad(format!(
                        "fingerprint {stated:#x} does not match its words (a mosaic_rt build mismatch)"
                    )));
                }
                let k = self.find_or_decode(words, decode)?;
                self.entries[k].seen_at = at;
                k
            }
        };
        Ok(&self.entries[k].layout)
    }

    fn find_or_decode(&mut self, words: &[i64], decode: impl FnOnce(&[i64]) -> Result<L>) -> Result<usize> {
        if let Some(k) = self.entries.iter().position(|e| e.words.as_slice() == words) {
            return Ok(k);
        }
        let layout = decode(words)?;
        let entry = Entry { words: words.to_vec(), layout, fingerprint: fingerprint(words), seen_at: 0 };
        if self.entries.len() < CACHED_PROGRAMS {
            self.entries.push(entry);
            return Ok(self.entries.len() - 1);
        }
        let k = self.oldest;
        self.entries[k] = entry;
        self.oldest = (k + 1) % CACHED_PROGRAMS;
        Ok(k)
    }
}

impl<L> Default for LayoutCache<L> {
    fn default() -> Self {
        LayoutCache::new()
    }
}
