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

use super::view_entries::ViewEntries;
use crate::error::Result;
use crate::memory::{MemRef, MemoryTable, Stored};
use crate::region::{DimSel, Region};

/// How a region's value splits into rows: along buffer dim `dim` (every
/// earlier dim of the value has one element), `rows` rows of `row_bytes`.
pub(crate) struct Rows {
    dim: usize,
    rows: usize,
    row_bytes: usize,
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
        Some(Rows { dim, rows: dims[dim].size as usize, row_bytes: row_elems * itemsize, dims })
    }

    /// The sub-region of rows `[a, b)`.
    fn sub(&self, a: usize, b: usize) -> Region {
        let mut dims = self.dims.clone();
        let d = dims[self.dim];
        dims[self.dim] = DimSel::slice(d.start + a as i64 * d.stride, (b - a) as i64, d.stride);
        Region::new(dims)
    }

    /// The touched rows of `map` (offsets into the region's value), sorted
    /// and distinct, and their runs of consecutive rows `(first, end)`.
    fn touched(&self, map: &ViewEntries) -> (Vec<usize>, Vec<(usize, usize)>) {
        let rb = self.row_bytes.max(1);
        let mut rows: Vec<usize> = Vec::new();
        let mut recent = Recent::new(rb);
        // A run of the map lies in one row (`run_in_rows`): its first byte
        // names the row.
        for &b in map.iter().step_by(self.run_in_rows(map)) {
            let b = b as usize;
            if recent.at(b).is_none() {
                let r = b / rb;
                rows.push(r);
                recent.remember(r, 0);
            }
        }
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
    let (rows, runs) = split.touched(map);
    let rb = split.row_bytes;
    let mut compact = crate::memory::zeroed(rows.len() * rb, || format!("a DMA of {} rows", rows.len()))?;
    let mut at = 0;
    for &(a, b) in &runs {
        let region = split.sub(a, b);
        memory.load(MemRef { region: &region, ..src }, &mut compact[at..at + (b - a) * rb])?;
        at += (b - a) * rb;
    }
    let mut out = crate::memory::zeroed(map.len(), || format!("a DMA of {} bytes", map.len()))?;
    match split.run_in_rows(map) {
        8 => gather_runs::<8>(&compact, map, &rows, rb, &mut out),
        4 => gather_runs::<4>(&compact, map, &rows, rb, &mut out),
        2 => gather_runs::<2>(&compact, map, &rows, rb, &mut out),
        _ => gather_runs::<1>(&compact, map, &rows, rb, &mut out),
    }
    Ok(out)
}

/// `out`'s runs of K bytes from `compact` (the touched `rows`, of `rb`
/// bytes each), through `map`.
fn gather_runs<const K: usize>(compact: &[u8], map: &[u32], rows: &[usize], rb: usize, out: &mut [u8]) {
    let mut recent = Recent::new(rb);
    for (o, &b) in out.chunks_exact_mut(K).zip(map.iter().step_by(K)) {
        let at = recent.place(b as usize, rows);
        o.copy_from_slice(&compact[at..at + K]);
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
    let (rows, runs) = split.touched(map);
    let rb = split.row_bytes;
    let mut compact = crate::memory::zeroed(rows.len() * rb, || format!("a DMA of {} rows", rows.len()))?;
    let mut covered = vec![0u8; compact.len()];
    let k = split.run_in_rows(map);
    let mut recent = Recent::new(rb);
    for (&byte, v) in map.iter().step_by(k).zip(data.chunks_exact(k)) {
        let at = recent.place(byte as usize, &rows);
        compact[at..at + k].copy_from_slice(v);
        covered[at..at + k].fill(1);
    }
    let itemsize = itemsize.max(1);
    let mut at = 0;
    for &(a, b) in &runs {
        let len = (b - a) * rb;
        let (value, cover) = (&mut compact[at..at + len], &covered[at..at + len]);
        let mask: Vec<u8> = cover.chunks(itemsize).map(|c| c.iter().any(|&x| x != 0) as u8).collect();
        let partial = cover.chunks(itemsize).any(|c| c.iter().any(|&x| x != 0) && !c.iter().all(|&x| x != 0));
        let region = split.sub(a, b);
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
