//! A view map's entries, with the facts about them that let a DMA through
//! the view skip work, computed once per map.
//!
//! A map is usually a constant of the kernel's program (the FFI layer keeps
//! decoded maps across calls), while a SparseCore kernel starts hundreds of
//! thousands of small DMAs through it per call: checking the map's bounds,
//! its coverage of the region and its shape on every DMA cost more than
//! moving the bytes.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

/// The entries of a [`super::ViewMap`] (entry n: the offset, in the
/// region's value, of byte -- or unit -- n of the view's value).
#[derive(Debug, Clone)]
pub struct ViewEntries {
    /// Made when first read for a map of rows (the DMA's row path walks
    /// its pattern instead), else given.
    entries: OnceLock<Box<[u32]>>,
    len: usize,
    /// One past the largest entry (0 for an empty map): every DMA checks it.
    end: usize,
    /// Computed when first asked: a large map computed in XLA per DMA (a
    /// gather's) takes the row path, which needs no permutation check.
    permutation: OnceLock<bool>,
    /// The map is aligned runs of `run` consecutive entries (1, 2, 4 or 8):
    /// entry `k * run + j` is `entry[k * run] + j`, a multiple of `run`
    /// plus j. A bitcast moves whole elements, so its map is runs of the
    /// narrower itemsize. Known up front for a map made of rows
    /// ([`ViewEntries::rows`]), else computed when first asked.
    run: OnceLock<usize>,
    /// Where the map is one to four streams interleaved run by run, the
    /// streams' first entries: run r is `streams[r % k] + (r / k) * run`
    /// (a row-packing bitcast of a block: two or four rows in turn; a
    /// plain view of a dense block: one). Computed when first asked.
    streams: OnceLock<Option<Box<[u32]>>>,
    /// How a map made by [`ViewEntries::rows`] was made: the DMA's row
    /// path then walks its pattern per row instead of every entry.
    row_form: Option<RowForm>,
}

/// The starts and pattern of a map made of rows (no start out of bounds).
#[derive(Debug, Clone)]
pub struct RowForm {
    pub starts: Box<[u32]>,
    pub pattern: Arc<ViewEntries>,
}

impl RowForm {
    /// Entry `i * P + k` is `starts[i] + pattern[k]` (a start out of
    /// bounds: its whole row).
    fn entries(&self) -> Box<[u32]> {
        let p = self.pattern.len();
        let mut entries = Vec::with_capacity(self.starts.len() * p);
        for &s in self.starts.iter() {
            match s {
                OUT_OF_BOUNDS => entries.resize(entries.len() + p, OUT_OF_BOUNDS),
                _ => entries.extend(self.pattern.iter().map(|&b| s.saturating_add(b))),
            }
        }
        entries.into_boxed_slice()
    }
}

/// The entry of a row of [`ViewEntries::rows`] whose index was out of
/// bounds (`OUT_OF_BOUNDS` of `dma_views.py`): every entry of the row is
/// this, which no region reaches, so the DMA's bounds check names it.
pub const OUT_OF_BOUNDS: u32 = i32::MAX as u32;

impl ViewEntries {
    pub fn new(entries: impl Into<Box<[u32]>>) -> ViewEntries {
        let entries: Box<[u32]> = entries.into();
        let end = entries.iter().max().map_or(0, |&m| m as usize + 1);
        ViewEntries::given(entries, end)
    }

    /// The entries of an operand before its first negative one (a map
    /// made for the largest size of a slice of traced size holds -1 past
    /// the actual one), converted and measured in one pass: large maps
    /// computed in XLA per DMA are decoded on every DMA.
    pub fn until_negative(raw: &[i32]) -> ViewEntries {
        let mut max = 0u32;
        let mut entries = Vec::with_capacity(raw.len());
        for &b in raw {
            let Ok(b) = u32::try_from(b) else { break };
            max = max.max(b);
            entries.push(b);
        }
        let end = if entries.is_empty() { 0 } else { max as usize + 1 };
        ViewEntries::given(entries.into_boxed_slice(), end)
    }

    fn given(entries: Box<[u32]>, end: usize) -> ViewEntries {
        let len = entries.len();
        ViewEntries {
            entries: OnceLock::from(entries),
            len,
            end,
            permutation: OnceLock::new(),
            run: OnceLock::new(),
            streams: OnceLock::new(),
            row_form: None,
        }
    }

    /// The map of a gather / scatter through a view: row `i` of the view
    /// is `pattern` shifted by `starts[i]` (entry `i * P + k` is
    /// `starts[i] + pattern[k]`, `P = pattern.len()`); a start of
    /// [`OUT_OF_BOUNDS`] makes its whole row that. XLA computes only the
    /// starts per DMA (a few per row) instead of every entry, and the
    /// facts come from the pattern's, known once.
    pub fn rows(starts: &[u32], pattern: &Arc<ViewEntries>) -> ViewEntries {
        let p = pattern.len();
        let mut end = 0usize;
        for &s in starts {
            // Past u32 the entries saturate, and `end` (exact) fails the
            // bounds check.
            end = end.max(match s {
                OUT_OF_BOUNDS => OUT_OF_BOUNDS as usize + 1,
                _ if p == 0 => 0,
                _ => s as usize + pattern.end(),
            });
        }
        let run = OnceLock::new();
        let r = pattern.run();
        if starts.iter().all(|&s| s as usize % r == 0) {
            let _ = run.set(r);
        }
        let form = RowForm { starts: starts.into(), pattern: Arc::clone(pattern) };
        let entries = OnceLock::new();
        let row_form = match starts.contains(&OUT_OF_BOUNDS) {
            true => {
                let _ = entries.set(form.entries());
                None
            }
            false => Some(form),
        };
        let len = starts.len() * p;
        ViewEntries { entries, len, end, permutation: OnceLock::new(), run, streams: OnceLock::new(), row_form }
    }

    /// The number of entries (known without making them).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn entries(&self) -> &[u32] {
        self.entries.get_or_init(|| match &self.row_form {
            Some(form) => form.entries(),
            None => Box::default(), // unreachable: given maps have their entries
        })
    }

    /// The starts and pattern of a map made by [`ViewEntries::rows`].
    pub fn row_form(&self) -> Option<&RowForm> {
        self.row_form.as_ref()
    }

    /// One past the largest entry (0 for an empty map).
    pub fn end(&self) -> usize {
        self.end
    }

    /// Whether the map moves every unit of `0..len` exactly once.
    pub fn is_permutation(&self) -> bool {
        *self.permutation.get_or_init(|| self.end == self.len && all_distinct(self.entries()))
    }

    /// The length of the map's aligned runs of consecutive entries.
    pub fn run(&self) -> usize {
        *self.run.get_or_init(|| [8, 4, 2].into_iter().find(|&k| is_runs_of(self.entries(), k)).unwrap_or(1))
    }

    /// The first entries of the map's streams, if it is one to four
    /// streams interleaved run by run (see the field).
    pub fn streams(&self) -> Option<&[u32]> {
        self.streams.get_or_init(|| find_streams(self.entries(), self.run())).as_deref()
    }
}

/// The streams of `m` (runs of `run`): the fewest k in 1..=4 with run r
/// at `m[(r % k) * run] + (r / k) * run` for every r.
fn find_streams(m: &[u32], run: usize) -> Option<Box<[u32]>> {
    let runs = m.len() / run;
    (1..=4usize).filter(|&k| runs > 0 && runs % k == 0).find_map(|k| {
        let exact = (0..runs).all(|r| m[r * run] as usize == m[(r % k) * run] as usize + (r / k) * run);
        exact.then(|| (0..k).map(|h| m[h * run]).collect())
    })
}

impl PartialEq for ViewEntries {
    fn eq(&self, other: &ViewEntries) -> bool {
        self.entries() == other.entries()
    }
}

impl Eq for ViewEntries {}

impl Deref for ViewEntries {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        self.entries()
    }
}

impl From<&[u32]> for ViewEntries {
    fn from(m: &[u32]) -> ViewEntries {
        ViewEntries::new(m)
    }
}

impl From<Vec<u32>> for ViewEntries {
    fn from(m: Vec<u32>) -> ViewEntries {
        ViewEntries::new(m)
    }
}

/// Entries below their length, each at most once (`end == len` checked by
/// the caller, so every entry indexes the bitmap).
fn all_distinct(m: &[u32]) -> bool {
    let mut seen = vec![0u64; m.len().div_ceil(64)];
    for &b in m {
        let (word, bit) = (b as usize / 64, 1u64 << (b % 64));
        if seen[word] & bit != 0 {
            return false;
        }
        seen[word] |= bit;
    }
    true
}

fn is_runs_of(m: &[u32], k: usize) -> bool {
    !m.is_empty()
        && m.len() % k == 0
        && m.chunks_exact(k)
            .all(|c| c[0] as usize % k == 0 && c.iter().enumerate().all(|(j, &b)| b.wrapping_sub(c[0]) as usize == j))
}

/// The view's bytes: byte n is `region[map[n]]` (entries within `region`,
/// checked by the caller), copied a stream or a run at a time.
pub(crate) fn gather(region: &[u8], map: &ViewEntries) -> Vec<u8> {
    let mut out = vec![0u8; map.len()];
    if let Some(bases) = map.streams() {
        let n = out.len() / bases.len();
        let mut streams: [&[u8]; 4] = [&[]; 4];
        for (s, &b) in streams.iter_mut().zip(bases) {
            *s = &region[b as usize..b as usize + n];
        }
        interleave_streams(map.run(), &mut out, &streams[..bases.len()]);
        return out;
    }
    match map.run() {
        8 => gather_runs::<8>(region, map, &mut out),
        4 => gather_runs::<4>(region, map, &mut out),
        2 => gather_runs::<2>(region, map, &mut out),
        _ => gather_runs::<1>(region, map, &mut out),
    }
    out
}

fn gather_runs<const K: usize>(region: &[u8], map: &[u32], out: &mut [u8]) {
    for (o, &b) in out.chunks_exact_mut(K).zip(map.iter().step_by(K)) {
        let b = b as usize;
        o.copy_from_slice(&region[b..b + K]);
    }
}

/// [`interleave_runs`] of one to four streams (one: a plain copy).
pub(crate) fn interleave_streams(run: usize, dst: &mut [u8], streams: &[&[u8]]) {
    match *streams {
        [a] => dst.copy_from_slice(a),
        [a, b] => interleave_runs(run, dst, [a, b]),
        [a, b, c] => interleave_runs(run, dst, [a, b, c]),
        [a, b, c, e] => interleave_runs(run, dst, [a, b, c, e]),
        _ => unreachable!("a map has one to four streams"),
    }
}

/// `dst` = runs of `run` bytes (1, 2, 4 or 8) taken from each of the S
/// `streams` in turn (each `dst.len() / S` bytes).
fn interleave_runs<const S: usize>(run: usize, dst: &mut [u8], streams: [&[u8]; S]) {
    match run {
        8 => interleave::<8, S>(dst, streams),
        4 => interleave::<4, S>(dst, streams),
        2 => interleave::<2, S>(dst, streams),
        _ => interleave::<1, S>(dst, streams),
    }
}

/// (A pair of zipped streams and a pass per stream each beat one loop over
/// both: benches/PERFORMANCE.md, "Scalar and view copies".)
#[inline(always)]
fn interleave<const K: usize, const S: usize>(dst: &mut [u8], streams: [&[u8]; S]) {
    if let [a, b] = streams.as_slice() {
        for (o, (a, b)) in dst.chunks_exact_mut(2 * K).zip(a.chunks_exact(K).zip(b.chunks_exact(K))) {
            o[..K].copy_from_slice(a);
            o[K..].copy_from_slice(b);
        }
        return;
    }
    for (h, stream) in streams.iter().enumerate() {
        for (o, run) in dst.chunks_exact_mut(K * S).zip(stream.chunks_exact(K)) {
            o[h * K..h * K + K].copy_from_slice(run);
        }
    }
}

/// Writes `data`, the view's bytes, into `region` through the map, a
/// stream or a run at a time, in the map's order (entries within
/// `region`, checked by the caller; a later run wins where two meet).
pub(crate) fn scatter(region: &mut [u8], map: &ViewEntries, data: &[u8]) {
    if let Some(bases) = map.streams().filter(|b| disjoint(b, data.len() / b.len())) {
        if let [b] = *bases {
            region[b as usize..b as usize + data.len()].copy_from_slice(data);
            return;
        }
        match map.run() {
            8 => deinterleave::<8>(region, bases, data),
            4 => deinterleave::<4>(region, bases, data),
            2 => deinterleave::<2>(region, bases, data),
            _ => deinterleave::<1>(region, bases, data),
        }
        return;
    }
    match map.run() {
        8 => scatter_runs::<8>(region, map, data),
        4 => scatter_runs::<4>(region, map, data),
        2 => scatter_runs::<2>(region, map, data),
        _ => scatter_runs::<1>(region, map, data),
    }
}

fn scatter_runs<const K: usize>(region: &mut [u8], map: &[u32], data: &[u8]) {
    for (d, &b) in data.chunks_exact(K).zip(map.iter().step_by(K)) {
        let b = b as usize;
        region[b..b + K].copy_from_slice(d);
    }
}

/// Whether streams of `n` bytes from `bases` meet nowhere (then the order
/// runs are written in does not matter).
fn disjoint(bases: &[u32], n: usize) -> bool {
    bases
        .iter()
        .enumerate()
        .all(|(i, &a)| bases[i + 1..].iter().all(|&b| a as usize + n <= b as usize || b as usize + n <= a as usize))
}

/// Stream h (data's runs `t * S + h`) to `bases[h]..`, a pass per stream
/// (streams disjoint).
fn deinterleave<const K: usize>(region: &mut [u8], bases: &[u32], data: &[u8]) {
    let s = bases.len();
    let n = data.len() / s;
    for (h, &b) in bases.iter().enumerate() {
        let b = b as usize;
        unzip::<K>(&mut region[b..b + n], h, s, data);
    }
}

/// `data`'s runs of `run` bytes (1, 2, 4 or 8) dealt to the S `streams` in
/// turn (each `data.len() / S` bytes): [`interleave_runs`] undone.
pub(crate) fn deinterleave_runs(run: usize, data: &[u8], streams: &mut [&mut [u8]]) {
    let s = streams.len();
    match streams {
        [out] => out.copy_from_slice(data),
        [a, b] => match run {
            8 => unzip_pair::<8>(a, b, data),
            4 => unzip_pair::<4>(a, b, data),
            2 => unzip_pair::<2>(a, b, data),
            _ => unzip_pair::<1>(a, b, data),
        },
        _ => {
            for (h, out) in streams.iter_mut().enumerate() {
                match run {
                    8 => unzip::<8>(out, h, s, data),
                    4 => unzip::<4>(out, h, s, data),
                    2 => unzip::<2>(out, h, s, data),
                    _ => unzip::<1>(out, h, s, data),
                }
            }
        }
    }
}

/// Two streams filled in one pass, as [`interleave`] zips two (faster than
/// a pass per stream: benches/PERFORMANCE.md, "Scalar and view copies").
#[inline(always)]
fn unzip_pair<const K: usize>(a: &mut [u8], b: &mut [u8], data: &[u8]) {
    for (d, (a, b)) in data.chunks_exact(2 * K).zip(a.chunks_exact_mut(K).zip(b.chunks_exact_mut(K))) {
        a.copy_from_slice(&d[..K]);
        b.copy_from_slice(&d[K..]);
    }
}

/// Stream h of S: data's runs `t * S + h` (of K bytes) into `out`.
#[inline(always)]
fn unzip<const K: usize>(out: &mut [u8], h: usize, s: usize, data: &[u8]) {
    for (o, d) in out.chunks_exact_mut(K).zip(data.chunks_exact(K * s)) {
        o.copy_from_slice(&d[h * K..h * K + K]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_of_a_row_packing_bitcast_map() {
        // A (2, 4) bf16 region seen as (1, 4) u32: word j is row 0's
        // element j, then row 1's (bytes 2j, 2j+1, 8+2j, 8+2j+1).
        let m: Vec<u32> = (0..16).map(|n| (n / 2 % 2) * 8 + (n / 4) * 2 + n % 2).collect();
        let e = ViewEntries::new(m.clone());
        assert_eq!((e.end(), e.is_permutation(), e.run()), (16, true, 2));
        let region: Vec<u8> = (0..16).collect();
        let view = gather(&region, &e);
        assert_eq!(view, m.iter().map(|&b| b as u8).collect::<Vec<_>>());
        let mut back = vec![0u8; 16];
        scatter(&mut back, &e, &view);
        assert_eq!(back, region);
    }

    /// Byte n of the view is `region[map[n]]`, one entry at a time.
    fn gather_by_entries(region: &[u8], map: &[u32]) -> Vec<u8> {
        map.iter().map(|&b| region[b as usize]).collect()
    }

    fn scatter_by_entries(region: &mut [u8], map: &[u32], data: &[u8]) {
        for (&b, &d) in map.iter().zip(data) {
            region[b as usize] = d;
        }
    }

    #[test]
    fn maps_of_interleaved_streams_move_what_their_entries_say() {
        let bf16_words: Vec<u32> = (0..32).map(|n| (n / 2 % 2) * 64 + (n / 4) * 2 + n % 2 + 6).collect();
        let int8_words: Vec<u32> = (0..32).map(|n| (n % 4) * 16 + n / 4).collect();
        let three: Vec<u32> = (0..24).map(|n| (n / 4 % 3) * 40 + (n / 12) * 4 + n % 4).collect();
        let plain: Vec<u32> = (10..42).collect();
        let f32_rows: Vec<u32> = (0..32).map(|n| (n / 8 % 2) * 32 + (n / 16) * 8 + n % 8).collect();
        let cases: [(&[u32], Option<&[u32]>); 5] = [
            (&bf16_words, Some(&[6, 70])),
            (&int8_words, Some(&[0, 16, 32, 48])),
            (&three, Some(&[0, 40, 80])),
            (&plain, Some(&[10])),
            (&f32_rows, Some(&[0, 32])),
        ];
        let region: Vec<u8> = (0..128).map(|b| (b * 7 + 3) as u8).collect();
        for (m, want) in cases {
            let e = ViewEntries::new(m.to_vec());
            assert_eq!(e.streams(), want, "{m:?}");
            assert_eq!(gather(&region, &e), gather_by_entries(&region, m), "gather {m:?}");
            let data: Vec<u8> = (0..m.len()).map(|n| (n * 13 + 1) as u8).collect();
            let (mut got, mut expect) = (region.clone(), region.clone());
            scatter(&mut got, &e, &data);
            scatter_by_entries(&mut expect, m, &data);
            assert_eq!(got, expect, "scatter {m:?}");
        }
    }

    #[test]
    fn maps_that_are_not_streams_are_moved_run_by_run() {
        let region: Vec<u8> = (0..64).collect();
        // Runs backwards; five rows in turn; streams of unequal length.
        let backwards: Vec<u32> = (0..16).map(|n| 14 - n / 2 * 2 + n % 2).collect();
        let cases: [&[u32]; 3] = [&backwards, &[0, 8, 16, 24, 32, 1, 9, 17, 25, 33], &[0, 8, 1, 9, 2]];
        for m in cases {
            let e = ViewEntries::new(m.to_vec());
            assert_eq!(e.streams(), None, "{m:?}");
            assert_eq!(gather(&region, &e), gather_by_entries(&region, m));
        }
        // Streams that meet (a scatter's repeated rows): in the map's
        // order, the later run wins, as entry by entry.
        let overlap: Vec<u32> = vec![0, 1, 2, 3, 2, 3, 4, 5];
        let e = ViewEntries::new(overlap.clone());
        assert_eq!(e.streams(), Some(&[0, 2][..]));
        let data: Vec<u8> = (100..108).collect();
        let (mut got, mut expect) = (vec![0u8; 8], vec![0u8; 8]);
        scatter(&mut got, &e, &data);
        scatter_by_entries(&mut expect, &overlap, &data);
        assert_eq!(got, expect);
    }

    #[test]
    fn a_map_of_rows_is_its_pattern_shifted_per_row() {
        // Two bytes of each of two region rows of 8 bytes, per view row.
        let pattern = Arc::new(ViewEntries::new(vec![2, 3, 10, 11]));
        assert_eq!(pattern.run(), 2);
        let m = ViewEntries::rows(&[16, 0], &pattern);
        assert_eq!(&m[..], [18, 19, 26, 27, 2, 3, 10, 11]);
        assert_eq!((m.end(), m.run(), m.is_permutation()), (28, 2, false));
        assert_eq!(m, ViewEntries::new(m.to_vec()), "the same entries as the map made whole");
        // An odd start breaks the runs: the map is then asked, not told.
        let odd = ViewEntries::rows(&[1], &pattern);
        assert_eq!((&odd[..], odd.run()), (&[3u32, 4, 11, 12][..], 1));
        // A row out of bounds is all sentinel; the bounds check names it.
        let oob = ViewEntries::rows(&[0, OUT_OF_BOUNDS], &pattern);
        assert_eq!(&oob[4..], [OUT_OF_BOUNDS; 4]);
        assert!(oob.row_form().is_none() && m.row_form().is_some());
        assert_eq!(oob.end(), OUT_OF_BOUNDS as usize + 1);
        // Past u32: saturated entries, an exact end past any region.
        let far = ViewEntries::rows(&[u32::MAX - 2], &pattern);
        assert_eq!(far.end(), u32::MAX as usize - 2 + 12);
        let none = ViewEntries::rows(&[], &pattern);
        assert_eq!((none.len(), none.end()), (0, 0));
        let empty = ViewEntries::rows(&[5, 7], &Arc::new(ViewEntries::new(Vec::new())));
        assert_eq!((empty.len(), empty.end()), (0, 0));
    }

    #[test]
    fn entries_from_an_operand() {
        let e = ViewEntries::until_negative(&[5, 0, 2]);
        assert_eq!((&e[..], e.end()), (&[5u32, 0, 2][..], 6));
        assert_eq!(ViewEntries::until_negative(&[]).end(), 0);
        let cut = ViewEntries::until_negative(&[3, 1, -1, 9, -1]);
        assert_eq!((&cut[..], cut.end()), (&[3u32, 1][..], 4));
        assert_eq!(ViewEntries::until_negative(&[-1, 2]).end(), 0);
    }

    #[test]
    fn facts_of_maps_that_repeat_miss_or_break_runs() {
        let repeat = ViewEntries::new(vec![0, 1, 0, 1]);
        assert_eq!((repeat.end(), repeat.is_permutation(), repeat.run()), (2, false, 2));
        let part = ViewEntries::new(vec![4, 5, 6, 7]);
        assert_eq!((part.end(), part.is_permutation(), part.run()), (8, false, 4));
        // Consecutive but not aligned: copied byte by byte.
        let unaligned = ViewEntries::new(vec![1, 2, 3, 0]);
        assert_eq!((unaligned.is_permutation(), unaligned.run()), (true, 1));
        let empty = ViewEntries::new(Vec::new());
        assert_eq!((empty.end(), empty.is_permutation(), empty.run()), (0, true, 1));
    }
}
