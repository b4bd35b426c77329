//! What scalar and vector programs share: a cursor over a program's words
//! ([`Reader`]), a decoded layout owned or borrowed ([`LayoutRef`]),
//! decoded programs by their words ([`DecodeCache`], generic over the
//! [`ProgramKind`]) and a thread's state between evaluations
//! ([`ProgramState`]): a kernel runs the same few programs every loop
//! step, and decoding (checking) one costs more than running it. Cache
//! entries match by content, so a reused address of other words never
//! matches wrongly; when full, the oldest entry goes.
//!
//! May use: `crate::error`.

use crate::error::{ProgramError, ProgramResult};

/// Programs a [`DecodeCache`] keeps.
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
    pub bad: fn(String) -> ProgramError,
}

impl Reader<'_> {
    pub fn next(&mut self, what: &str) -> ProgramResult<i64> {
        let Some(&w) = self.words.get(self.pos) else {
            return Err((self.bad)(format!("truncated at word {} ({what})", self.pos)));
        };
        self.pos += 1;
        Ok(w)
    }

    /// The next word as a count in `0..=max`.
    pub fn count(&mut self, what: &str, max: usize) -> ProgramResult<usize> {
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

/// A kind of program (scalar, vector): how its words decode, what a
/// decoded program is, and the scratch its evaluations reuse.
pub trait ProgramKind {
    /// What decoding learns of a program's words (what the cache keeps).
    type Layout;
    /// A checked program over its words.
    type Program<'a>;
    /// What a thread reuses from one evaluation to the next.
    type Scratch;
    /// Parses and checks `words`.
    fn decode_layout(words: &[i64]) -> ProgramResult<Self::Layout>;
    /// The kind's error of a message (`"<kind> program: ..."`).
    fn bad(message: String) -> ProgramError;
    fn program<'a>(words: &'a [i64], layout: LayoutRef<'a, Self::Layout>) -> Self::Program<'a>;
}

/// Decoded programs of kind `K` by their words.
pub struct DecodeCache<K: ProgramKind> {
    entries: Vec<Entry<K::Layout>>,
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

impl<K: ProgramKind> DecodeCache<K> {
    pub const fn new() -> DecodeCache<K> {
        DecodeCache { entries: Vec::new(), oldest: 0 }
    }

    /// How many programs are cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The program of `words`, decoded unless cached (bad programs are
    /// not cached).
    pub fn decode<'a>(&'a mut self, words: &'a [i64]) -> ProgramResult<K::Program<'a>> {
        let k = self.find_or_decode(words)?;
        Ok(K::program(words, LayoutRef::Cached(&self.entries[k].layout)))
    }

    /// [`DecodeCache::decode`] of words whose [`fingerprint`] the caller
    /// states: when the same words were seen at the same address, no word
    /// is compared. A wrong fingerprint is the kind's error.
    pub fn decode_fingerprinted<'a>(&'a mut self, words: &'a [i64], stated: u64) -> ProgramResult<K::Program<'a>> {
        let at = words.as_ptr() as usize;
        let hit = self
            .entries
            .iter()
            .position(|e| e.seen_at == at && e.fingerprint == stated && e.words.len() == words.len());
        let k = match hit {
            Some(k) => k,
            None => {
                if fingerprint(words) != stated {
                    return Err(K::bad(format!(
                        "fingerprint {stated:#x} does not match its words (a mosaic_rt build mismatch)"
                    )));
                }
                let k = self.find_or_decode(words)?;
                self.entries[k].seen_at = at;
                k
            }
        };
        Ok(K::program(words, LayoutRef::Cached(&self.entries[k].layout)))
    }

    /// [`DecodeCache::decode_fingerprinted`] when a fingerprint is stated,
    /// else [`DecodeCache::decode`].
    pub fn decode_stated<'a>(
        &'a mut self,
        words: &'a [i64],
        fingerprint: Option<u64>,
    ) -> ProgramResult<K::Program<'a>> {
        match fingerprint {
            Some(fp) => self.decode_fingerprinted(words, fp),
            None => self.decode(words),
        }
    }

    fn find_or_decode(&mut self, words: &[i64]) -> ProgramResult<usize> {
        if let Some(k) = self.entries.iter().position(|e| e.words.as_slice() == words) {
            return Ok(k);
        }
        let layout = K::decode_layout(words)?;
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

impl<K: ProgramKind> Default for DecodeCache<K> {
    fn default() -> Self {
        DecodeCache::new()
    }
}

/// What a thread keeps between evaluations of programs of kind `K`: its
/// recently run programs and its scratch (in a `thread_local!` of the
/// handler that runs them).
pub struct ProgramState<K: ProgramKind> {
    cache: DecodeCache<K>,
    scratch: K::Scratch,
}

impl<K: ProgramKind> ProgramState<K> {
    pub const fn new(scratch: K::Scratch) -> ProgramState<K> {
        ProgramState { cache: DecodeCache::new(), scratch }
    }

    /// `run`s the program of `words` (with its stated fingerprint, if any:
    /// [`DecodeCache::decode_stated`]) with this thread's scratch. `run`'s
    /// error type is the caller's (a decoding error converts into it).
    pub fn run<R, E: From<ProgramError>>(
        &mut self,
        words: &[i64],
        fingerprint: Option<u64>,
        run: impl FnOnce(&K::Program<'_>, &mut K::Scratch) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let program = self.cache.decode_stated(words, fingerprint)?;
        run(&program, &mut self.scratch)
    }
}
