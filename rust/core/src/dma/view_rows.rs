//! A view that touches a small part of its region, moved by the region
//! rows it touches instead of through a copy of the whole region.
//!
//! A SparseCore gather (`cache.bitcast(i32).at[idx]`) is a view of its
//! whole region -- a 100 MiB cache -- of which a DMA moves a few rows. The
//! dense path of [`super::view`] reads or writes the whole region per DMA;
//! here the region's value is cut into rows along its first dimension of
//! more than one element, the rows the map touches are grouped into runs of
//! consecutive rows, and each run is one ordinary load or masked store of a
//! sub-region. Bounds, initcheck and races then see only those rows (the
//! dense path's race records named the whole region).

use super::view_entries::{self, RowForm, ViewEntries};
use crate::error::Result;
use crate::memory::{MemRef, MemoryTable, Stored};
use crate::region::{DimSel, Region};

/// How a region's value splits into rows: along buffer dim `dim` (every
/// earlier dim of the value has one element), `rows` rows of `row_bytes`.
pub(crate) struct Rows {
    dim: usize,
    rows: usize,
    row_bytes: usize,
    itemsize: usize,
    /// The region's selections, one per buffer dim.
    dims: Vec<DimSel>,
}

impl Rows {
    /// The row split of `region` of a buffer of `logical` shape and
    /// `itemsize`, or `None` when its value is a single element.
    pub(crate) fn of(region: &Region, logical: &[usize], itemsize: usize) -> Option<Rows> {
        let mut dims = region.dims.clone();
        for &n in &logical[dims.len().min(logical.len())..] {
            dims.push(DimSel::slice(0, n as i64, 1));
        }
        let dim = dims.iter().position(|d| !d.squeezed && d.size != 1)?;
        let row_elems: usize = dims[dim + 1..].iter().filter(|d| !d.squeezed).map(|d| d.size as usize).product();
        Some(Rows { dim, rows: dims[dim].size as usize, row_bytes: row_elems * itemsize, itemsize, dims })
    }

    /// The sub-region of rows `[a, b)`, bytes `cols` of each (a `window`).
    fn sub(&self, a: usize, b: usize, cols: (usize, usize)) -> Region {
        let mut dims = self.dims.clone();
        let d = dims[self.dim];
        dims[self.dim] = DimSel::slice(d.start + a as i64 * d.stride, (b - a) as i64, d.stride);
        if cols != (0, self.row_bytes) {
            let c = self.column_dim().expect("a narrower window only where `window` found the row's dim");
            let (d, isz) = (dims[c], self.itemsize as i64);
            let (lo, hi) = (cols.0 as i64 / isz, cols.1 as i64 / isz);
            dims[c] = DimSel::slice(d.start + lo * d.stride, hi - lo, d.stride);
        }
        Region::new(dims)
    }

    /// The buffer dim a row spans when it is one dim (every other dim after
    /// the rows' of one element).
    fn column_dim(&self) -> Option<usize> {
        let mut wide = (self.dim + 1..self.dims.len()).filter(|&c| !self.dims[c].squeezed && self.dims[c].size != 1);
        let c = wide.next()?;
        wide.next().is_none().then_some(c)
    }

    /// The bytes `[lo, hi)` of each row that a DMA moves, widened to whole
    /// elements: a gather of a column chunk moves that chunk of its rows,
    /// not the whole rows (three times the bytes for tpu-inference's
    /// gather-reduce). The whole row unless a row is one dim.
    fn window(&self, (lo, hi): (usize, usize)) -> (usize, usize) {
        let isz = self.itemsize.max(1);
        if (lo, hi) == (0, self.row_bytes) || self.column_dim().is_none() {
            return (0, self.row_bytes);
        }
        (lo / isz * isz, hi.div_ceil(isz) * isz)
    }

    /// The touched rows of `walk`'s map (offsets into the region's value),
    /// sorted and distinct, and their runs of consecutive rows `(first, end)`.
    fn touched(&self, walk: &Walk) -> (Vec<usize>, Vec<(usize, usize)>) {
        let mut rows = walk.rows(self.row_bytes.max(1));
        rows.sort_unstable();
        rows.dedup();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &r in &rows {
            match runs.last_mut() {
                Some(run) if run.1 == r => run.1 = r + 1,
                _ => runs.push((r, r + 1)),
            }
        }
        (rows, runs)
    }

    /// The map's run length (see `ViewEntries::run`) when its runs never
    /// cross a row (rows are whole runs: runs are aligned), else 1.
    fn run_in_rows(&self, map: &ViewEntries) -> usize {
        let run = map.run();
        if self.row_bytes % run == 0 {
            run
        } else {
            1
        }
    }

    /// Whether moving `map`'s bytes by rows beats copying the whole region.
    pub(crate) fn pays(&self, map_len: usize) -> bool {
        self.row_bytes > 0 && self.rows > 1 && map_len.saturating_mul(2) < self.rows * self.row_bytes
    }
}

/// How to walk a map's runs: entry by entry, or, for a map made of rows
/// (a gather's, [`ViewEntries::rows`]), its pattern once per row shift and
/// then per row (a 128 KiB gather walked 64 Ki runs to find its 32 rows).
pub(crate) enum Walk<'a> {
    Entries { map: &'a ViewEntries, run: usize },
    Rows { form: &'a RowForm, run: usize, shifts: Vec<Shift> },
}

/// A row map's pattern shifted by `m` (a start's offset in its row): per
/// run, `(row after the start's row, offset in that row)`, and the
/// distinct rows it reaches.
pub(crate) struct Shift {
    m: usize,
    places: Vec<(u32, u32)>,
    rels: Vec<u32>,
    /// The places as interleaved streams, when they are (see [`Streams`]).
    streams: Option<Streams>,
}

impl Shift {
    /// `at[rel]`: where row `base + rel` (each of `rels`) starts in the
    /// compact buffer of `rows` (sorted, every touched row), `w` bytes each.
    fn row_table(&self, base: usize, rows: &[usize], w: usize, at: &mut Vec<usize>) {
        at.clear();
        at.resize(self.rels.last().map_or(0, |&r| r as usize + 1), 0);
        for &rel in &self.rels {
            at[rel as usize] = rows.binary_search(&(base + rel as usize)).unwrap_or(0) * w;
        }
    }
}

/// Places that take one run from each of `rels.len()` rows in turn, each
/// row's runs consecutive from column `col`: `places[j] = (rels[j % k],
/// col + (j / k) * run)`. A row-packing bitcast's pattern is two (bf16) or
/// four (int8) rows interleaved run by run; a plain row's is one stream.
/// Each stream is then one slice of the compact buffer, and the view's
/// bytes for a start are the streams interleaved: no per-run lookups.
struct Streams {
    rels: Vec<u32>,
    col: usize,
}

impl Streams {
    /// Streams that are `places` exactly (at most four, of `run`-byte runs).
    fn of(places: &[(u32, u32)], run: usize) -> Option<Streams> {
        let first = places.first()?;
        let k = places.iter().take_while(|p| p.1 == first.1).count();
        if k > 4 || places.len() % k != 0 {
            return None;
        }
        let rels: Vec<u32> = places[..k].iter().map(|p| p.0).collect();
        let col = first.1 as usize;
        let exact = places.iter().enumerate().all(|(j, p)| p.0 == rels[j % k] && p.1 as usize == col + (j / k) * run);
        exact.then_some(Streams { rels, col })
    }
}

impl<'a> Walk<'a> {
    /// The walk of `map` over rows of `rb` bytes, a run of `run` entries
    /// at a time (runs never cross a row: see `Rows::run_in_rows`).
    pub(crate) fn of(map: &'a ViewEntries, run: usize, rb: usize) -> Walk<'a> {
        let Some(form) = map.row_form() else { return Walk::Entries { map, run } };
        // Each row's pattern must be whole runs, each in one row: runs of
        // the pattern, shifted by starts that keep them aligned.
        let whole_runs = form.pattern.len() % run == 0 && form.pattern.run() % run == 0;
        if !whole_runs || form.starts.iter().any(|&s| s as usize % run != 0) {
            return Walk::Entries { map, run };
        }
        let mut shifts: Vec<Shift> = Vec::new();
        for &s in form.starts.iter() {
            let m = s as usize % rb;
            if shifts.iter().any(|sh| sh.m == m) {
                continue;
            }
            let places: Vec<(u32, u32)> = form
                .pattern
                .iter()
                .step_by(run)
                .map(|&b| {
                    let t = m + b as usize;
                    ((t / rb) as u32, (t % rb) as u32)
                })
                .collect();
            // Rows after the start's: few, counted in a table, not sorted.
            let mut seen = vec![false; places.iter().map(|p| p.0 as usize + 1).max().unwrap_or(0)];
            for p in &places {
                seen[p.0 as usize] = true;
            }
            let rels: Vec<u32> = (0..seen.len() as u32).filter(|&r| seen[r as usize]).collect();
            let streams = Streams::of(&places, run);
            shifts.push(Shift { m, places, rels, streams });
        }
        Walk::Rows { form, run, shifts }
    }

    /// The bytes of a row the map touches, `[lo, hi)` (a whole row of `rb`
    /// for a map walked entry by entry).
    fn columns(&self, rb: usize) -> (usize, usize) {
        match self {
            Walk::Entries { .. } => (0, rb),
            Walk::Rows { run, shifts, .. } => {
                let cols = || shifts.iter().flat_map(|sh| sh.places.iter().map(|p| p.1 as usize));
                match (cols().min(), cols().max()) {
                    (Some(lo), Some(hi)) => (lo, hi + run),
                    _ => (0, rb),
                }
            }
        }
    }

    fn run(&self) -> usize {
        match self {
            Walk::Entries { run, .. } | Walk::Rows { run, .. } => *run,
        }
    }

    fn shift(shifts: &[Shift], s: u32, rb: usize) -> &Shift {
        let m = s as usize % rb;
        shifts.iter().find(|sh| sh.m == m).expect("every start's shift was made by `Walk::of`")
    }

    /// The rows the map touches (in any order, repeats allowed).
    fn rows(&self, rb: usize) -> Vec<usize> {
        match self {
            Walk::Entries { map, run } => {
                let mut rows = Vec::new();
                let mut recent = Recent::new(rb);
                // A run lies in one row: its first byte names the row.
                for &b in map.iter().step_by(*run) {
                    let b = b as usize;
                    if recent.at(b).is_none() {
                        let r = b / rb;
                        rows.push(r);
                        recent.remember(r, 0);
                    }
                }
                rows
            }
            Walk::Rows { form, shifts, .. } => form
                .starts
                .iter()
                .flat_map(|&s| Walk::shift(shifts, s, rb).rels.iter().map(move |&rel| s as usize / rb + rel as usize))
                .collect(),
        }
    }

    /// Calls `f(view offset, offset in the compact buffer of `rows`)` for
    /// every run of the map, in view order (`rows`: sorted, every touched
    /// row; the buffer holds bytes `cols` of each, see `columns`).
    #[inline(always)]
    fn for_each(&self, rows: &[usize], rb: usize, cols: (usize, usize), mut f: impl FnMut(usize, usize)) {
        let (lo, w) = (cols.0, cols.1 - cols.0);
        match self {
            Walk::Entries { map, run } => {
                debug_assert_eq!(cols, (0, rb), "a map walked by entries moves whole rows");
                let mut recent = Recent::new(rb);
                for (j, &b) in map.iter().step_by(*run).enumerate() {
                    f(j * run, recent.place(b as usize, rows));
                }
            }
            Walk::Rows { form, run, shifts } => {
                let p = form.pattern.len();
                let mut at: Vec<usize> = Vec::new();
                for (i, &s) in form.starts.iter().enumerate() {
                    let sh = Walk::shift(shifts, s, rb);
                    sh.row_table(s as usize / rb, rows, w, &mut at);
                    for (j, &(rel, col)) in sh.places.iter().enumerate() {
                        f(i * p + j * run, at[rel as usize] + col as usize - lo);
                    }
                }
            }
        }
    }
}

/// The last few rows a map touched, as byte ranges of the region's value
/// with where each starts in a buffer of just the touched rows: maps walk
/// a few interleaved rows at a time (a row-packing bitcast alternates two
/// rows every word), so most bytes need no division or search (a 128 KiB
/// gather sorted and divided per byte for its 8 rows).
struct Recent {
    row_bytes: usize,
    /// `(first byte, end byte, start in the compact buffer)`.
    slots: [(usize, usize, usize); 4],
    next: usize,
}

impl Recent {
    fn new(row_bytes: usize) -> Recent {
        Recent { row_bytes, slots: [(1, 0, 0); 4], next: 0 }
    }

    /// Byte `b`'s place in the compact buffer if its row is a recent one.
    #[inline(always)]
    fn at(&self, b: usize) -> Option<usize> {
        self.slots.iter().find(|s| b >= s.0 && b < s.1).map(|s| s.2 + (b - s.0))
    }

    fn remember(&mut self, row: usize, start: usize) {
        let lo = row * self.row_bytes;
        self.slots[self.next] = (lo, lo + self.row_bytes, start);
        self.next = (self.next + 1) % self.slots.len();
    }

    /// Byte `b`'s place in the compact buffer of `rows` (sorted; `b`'s row
    /// is among them: `touched` collected every row of the map).
    #[inline(always)]
    fn place(&mut self, b: usize, rows: &[usize]) -> usize {
        if let Some(at) = self.at(b) {
            return at;
        }
        let row = b / self.row_bytes;
        let start = rows.binary_search(&row).unwrap_or(0) * self.row_bytes;
        self.remember(row, start);
        start + b % self.row_bytes
    }
}

/// The view's value: byte n is byte `map[n]` of the region's value.
pub(crate) fn load(memory: &MemoryTable, src: MemRef<'_>, split: &Rows, map: &ViewEntries) -> Result<Vec<u8>> {
    let rb = split.row_bytes;
    let walk = Walk::of(map, split.run_in_rows(map), rb.max(1));
    let (rows, runs) = split.touched(&walk);
    let cols = split.window(walk.columns(rb));
    let w = cols.1 - cols.0;
    let mut compact = crate::memory::zeroed(rows.len() * w, || format!("a DMA of {} rows", rows.len()))?;
    let mut at = 0;
    for &(a, b) in &runs {
        let region = split.sub(a, b, cols);
        memory.load(MemRef { region: &region, ..src }, &mut compact[at..at + (b - a) * w])?;
        at += (b - a) * w;
    }
    let mut out = crate::memory::zeroed(map.len(), || format!("a DMA of {} bytes", map.len()))?;
    match walk.run() {
        8 => gather_runs::<8>(&compact, &walk, &rows, rb, cols, &mut out),
        4 => gather_runs::<4>(&compact, &walk, &rows, rb, cols, &mut out),
        2 => gather_runs::<2>(&compact, &walk, &rows, rb, cols, &mut out),
        _ => gather_runs::<1>(&compact, &walk, &rows, rb, cols, &mut out),
    }
    Ok(out)
}

/// Writes the view's runs of K bytes from `compact` (bytes `cols` of the
/// touched `rows` of `rb` bytes) into `out`, through the map's walk: a
/// start whose shift is streams interleaves them, the rest run by run.
fn gather_runs<const K: usize>(
    compact: &[u8],
    walk: &Walk,
    rows: &[usize],
    rb: usize,
    cols: (usize, usize),
    out: &mut [u8],
) {
    let Walk::Rows { form, shifts, .. } = walk else {
        walk.for_each(rows, rb, cols, |v, c| out[v..v + K].copy_from_slice(&compact[c..c + K]));
        return;
    };
    let (lo, w) = (cols.0, cols.1 - cols.0);
    let p = form.pattern.len();
    let mut at: Vec<usize> = Vec::new();
    for (i, &s) in form.starts.iter().enumerate() {
        let sh = Walk::shift(shifts, s, rb);
        let dst = &mut out[i * p..(i + 1) * p];
        let base = s as usize / rb;
        let row_at = |rel: u32| rows.binary_search(&(base + rel as usize)).unwrap_or(0) * w;
        let Some(st) = &sh.streams else {
            sh.row_table(base, rows, w, &mut at);
            for (j, &(rel, col)) in sh.places.iter().enumerate() {
                let c = at[rel as usize] + col as usize - lo;
                dst[j * K..j * K + K].copy_from_slice(&compact[c..c + K]);
            }
            continue;
        };
        // Stream h: its row's bytes in the compact buffer from its column.
        let n = p / st.rels.len();
        let stream = |rel: u32| {
            let o = row_at(rel) + st.col - lo;
            &compact[o..o + n]
        };
        let mut streams: [&[u8]; 4] = [&[]; 4];
        for (s, &rel) in streams.iter_mut().zip(&st.rels) {
            *s = stream(rel);
        }
        view_entries::interleave_streams(K, dst, &streams[..st.rels.len()]);
    }
}

/// Writes `data`, the view's value, into the region rows it covers: per
/// run a masked store of the elements the view covers (other cores may be
/// writing the rest of the region); an element covered in part keeps its
/// other bytes as they were read just before.
pub(crate) fn store(
    memory: &MemoryTable,
    dst: MemRef<'_>,
    split: &Rows,
    map: &ViewEntries,
    data: &[u8],
    itemsize: usize,
) -> Result<()> {
    let rb = split.row_bytes;
    let walk = Walk::of(map, split.run_in_rows(map), rb.max(1));
    let (rows, runs) = split.touched(&walk);
    let cols = split.window(walk.columns(rb));
    let w = cols.1 - cols.0;
    let mut compact = crate::memory::zeroed(rows.len() * w, || format!("a DMA of {} rows", rows.len()))?;
    let mut covered = vec![0u8; compact.len()];
    let k = walk.run();
    walk.for_each(&rows, rb, cols, |v, at| {
        compact[at..at + k].copy_from_slice(&data[v..v + k]);
        covered[at..at + k].fill(1);
    });
    let itemsize = itemsize.max(1);
    let mut at = 0;
    for &(a, b) in &runs {
        let len = (b - a) * w;
        let (value, cover) = (&mut compact[at..at + len], &covered[at..at + len]);
        let mask: Vec<u8> = cover.chunks(itemsize).map(|c| c.iter().any(|&x| x != 0) as u8).collect();
        let partial = cover.chunks(itemsize).any(|c| c.iter().any(|&x| x != 0) && !c.iter().all(|&x| x != 0));
        let region = split.sub(a, b, cols);
        let sub = MemRef { region: &region, ..dst };
        if partial {
            let mut old = vec![0u8; len];
            memory.load(sub, &mut old)?;
            for ((v, &c), o) in value.iter_mut().zip(cover).zip(old) {
                if c == 0 {
                    *v = o;
                }
            }
        }
        memory.swap_value(sub, Stored::Dense(value), Some(&mask), None)?;
        at += len;
    }
    Ok(())
}
