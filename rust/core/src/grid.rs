//! The grid loop of a BlockSpec `pallas_call`, kept natively per core.
//!
//! Stock interpret mode (and our interpreter before this module) emits the
//! bookkeeping of every grid step as XLA: next grid indices, the visiting
//! order lookup, "did this block move?" compares feeding one `lax.cond` per
//! block, start vectors, the revisit check. Each of those is a kernel XLA
//! compiles with LLVM (benches/PERFORMANCE.md, "Native compute instead of XLA
//! fusions"). Here the same decisions are made natively: the
//! program passes the block indices its index maps computed (user code, so
//! they stay XLA) and gets back the grid points to evaluate them at.
//!
//! Semantics are stock's, step for step (core `c`, `n` iterations,
//! `per_core` iterations per core):
//! * iterations `c * per_core .. min((c + 1) * per_core, n)`; the loop
//!   indices of the first come from div/mod over the grid, each next one
//!   from a carry from the last dimension (wrapping to all zeros);
//! * the grid point maps each loop index through its dimension's visiting
//!   order (empty: the index itself);
//! * an input block is copied in on the first iteration and whenever its
//!   start differs from the previous iteration's; an output block is copied
//!   out on the last iteration and whenever its start differs from the next
//!   iteration's; starts are `index * block size` (int32, wrapping) for
//!   blocked dims and the index itself otherwise.

use crate::error::{Result, RtError};
use crate::memory::MemorySpace;
use crate::region::{DimSel, Region};

/// The static shape of the loop.
#[derive(Clone, Debug)]
pub struct GridSpec {
    /// Grid dimensions (each >= 1).
    pub grid: Vec<i64>,
    /// Per dimension: the visiting order (a permutation of `0..grid[d]`), or
    /// empty for the identity.
    pub order: Vec<Vec<i64>>,
    pub iters_per_core: i64,
    pub num_iterations: i64,
}

/// One block copied between an HBM buffer and a kernel buffer.
#[derive(Clone, Debug)]
pub struct Block {
    /// An output block (kernel buffer -> HBM) rather than an input.
    pub output: bool,
    /// The kernel buffer's space and id; the HBM buffer's id.
    pub space: MemorySpace,
    pub kernel_id: u32,
    pub hbm_id: u32,
    /// Per block dimension: size, squeezed flag, and the factor from block
    /// index to element start (the block size, or 1 for squeezed/element dims).
    pub sizes: Vec<i64>,
    pub squeezed: Vec<bool>,
    pub factors: Vec<i64>,
    /// The pallas_call argument's name (for error messages).
    pub name: String,
}

impl Block {
    pub fn rank(&self) -> usize {
        self.sizes.len()
    }

    /// Element start along dim `k` of block index `i` (int32 wrapping, as stock).
    fn start(&self, k: usize, i: i32) -> i64 {
        i.wrapping_mul(self.factors[k] as i32) as i64
    }

    /// Whether block indices `a` and `b` give different element starts.
    fn starts_differ(&self, a: &[i32], b: &[i32]) -> bool {
        (0..self.rank()).any(|k| self.start(k, a[k]) != self.start(k, b[k]))
    }

    /// The block's region at element start 0 (its starts are set per step).
    fn region_at_origin(&self) -> Region {
        Region::new(
            self.sizes
                .iter()
                .zip(&self.squeezed)
                .map(|(&size, &squeezed)| DimSel { start: 0, size, stride: 1, squeezed })
                .collect(),
        )
    }

    /// Moves `region` (this block's) to block indices `idx`; whether it moved.
    fn move_region(&self, region: &mut Region, idx: &[i32]) -> bool {
        let mut moved = false;
        for (k, dim) in region.dims.iter_mut().enumerate() {
            let start = self.start(k, idx[k]);
            moved |= dim.start != start;
            dim.start = start;
        }
        moved
    }
}

/// What a copy callback is told about one block copy.
pub struct BlockCopy<'a> {
    pub block: &'a Block,
    /// The block's region of the HBM buffer.
    pub region: &'a Region,
    /// Its block indices, as the index map returned them.
    pub indices: &'a [i32],
    /// The grid point of the iteration.
    pub point: &'a [i32],
}

/// Loop state of one core.
pub struct GridLoop {
    spec: GridSpec,
    blocks: Vec<Block>,
    /// Per pallas_call output: the block whose region the revisit check
    /// tracks, or `None` (an HBM or aliased output).
    revisit: Vec<Option<usize>>,
    it: i64,
    bound: i64,
    loop_idx: Vec<i64>,
    /// The grid point of `loop_idx` (kept, not rebuilt per step).
    point: Vec<i32>,
    /// Whether an iteration has copied its inputs (the first copies all).
    stepped: bool,
    /// Per block: its region at the latest iteration that computed it
    /// (inputs: the last copy-in step, so a compare tells a move).
    regions: Vec<Region>,
    /// Per pallas_call output: the region the revisit check is given (the
    /// tracked block's, updated in place each step), or `None`.
    revisit_regions: Vec<Option<Region>>,
}

impl GridLoop {
    /// The loop of local core `core`, before its first iteration.
    pub fn new(spec: GridSpec, blocks: Vec<Block>, revisit: Vec<Option<usize>>, core: u32) -> Result<GridLoop> {
        let nd = spec.grid.len();
        if spec.order.len() != nd || spec.grid.iter().any(|&g| g < 1) {
            return Err(RtError::value(format!(
                "grid_begin: bad grid {:?} (visiting orders for {} dims)",
                spec.grid,
                spec.order.len()
            )));
        }
        for (d, o) in spec.order.iter().enumerate() {
            if !o.is_empty() && o.len() as i64 != spec.grid[d] {
                return Err(RtError::value(format!(
                    "grid_begin: the visiting order of dimension {d} has {} entries, the grid {}",
                    o.len(),
                    spec.grid[d]
                )));
            }
        }
        for b in &blocks {
            if b.squeezed.len() != b.rank() || b.factors.len() != b.rank() {
                return Err(RtError::value("grid_begin: block sizes, squeezed flags and factors differ in length"));
            }
        }
        if let Some(&Some(b)) =
            revisit.iter().find(|r| matches!(r, Some(b) if *b >= blocks.len() || !blocks[*b].output))
        {
            return Err(RtError::value(format!("grid_begin: revisit block {b} is not an output block")));
        }
        let first = core as i64 * spec.iters_per_core;
        let bound = ((core as i64 + 1) * spec.iters_per_core).min(spec.num_iterations);
        let mut loop_idx = vec![0; nd];
        let mut rest = first;
        for d in (0..nd).rev() {
            loop_idx[d] = rest.rem_euclid(spec.grid[d]);
            rest = rest.div_euclid(spec.grid[d]);
        }
        let regions: Vec<Region> = blocks.iter().map(Block::region_at_origin).collect();
        let revisit_regions = revisit.iter().map(|r| r.map(|b| regions[b].clone())).collect();
        let mut grid = GridLoop {
            spec,
            blocks,
            revisit,
            it: first,
            bound,
            loop_idx,
            point: Vec::new(),
            stepped: false,
            regions,
            revisit_regions,
        };
        grid.point = grid.point_of(&grid.loop_idx);
        Ok(grid)
    }

    /// Whether the current iteration runs.
    pub fn go(&self) -> bool {
        self.it < self.bound
    }

    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Loop indices of the current iteration (the revisit check names them).
    pub fn loop_indices(&self) -> &[i64] {
        &self.loop_idx
    }

    /// Advances loop indices `idx` by one iteration (carry from the last
    /// dim, wrapping to all zeros).
    fn advance(&self, idx: &mut [i64]) {
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] != self.spec.grid[d] {
                break;
            }
            idx[d] = 0;
        }
    }

    /// Grid coordinate `d` of loop index `i` (through the visiting order).
    fn coord(&self, d: usize, i: i64) -> i32 {
        let order = &self.spec.order[d];
        if order.is_empty() {
            i as i32
        } else {
            order[i as usize] as i32
        }
    }

    fn point_of(&self, idx: &[i64]) -> Vec<i32> {
        idx.iter().enumerate().map(|(d, &i)| self.coord(d, i)).collect()
    }

    /// The grid point of the current iteration.
    pub fn point(&self) -> &[i32] {
        &self.point
    }

    /// Calls `f` with each coordinate of the next iteration's grid point
    /// (wrapping after the last), without building the point.
    pub fn for_next_point(&self, mut f: impl FnMut(usize, i32) -> Result<()>) -> Result<()> {
        // The carry of `advance`, coordinate by coordinate: dims after the
        // first that does not wrap are incremented or wrapped to 0.
        let nd = self.loop_idx.len();
        let carry_from = (0..nd).rev().find(|&d| self.loop_idx[d] + 1 != self.spec.grid[d]);
        for d in 0..nd {
            let i = match carry_from {
                Some(c) if d < c => self.loop_idx[d],
                Some(c) if d == c => self.loop_idx[d] + 1,
                _ => 0,
            };
            f(d, self.coord(d, i))?;
        }
        Ok(())
    }

    /// The grid point of the next iteration (wrapping after the last).
    pub fn next_point(&self) -> Vec<i32> {
        let mut idx = self.loop_idx.clone();
        self.advance(&mut idx);
        self.point_of(&idx)
    }

    fn check_indices(&self, what: &str, outputs: bool, idx: &[i32], copies: usize) -> Result<()> {
        let want: usize = self.blocks.iter().filter(|b| b.output == outputs).map(Block::rank).sum::<usize>() * copies;
        if idx.len() != want {
            return Err(RtError::value(format!("{what}: expected {want} block indices, got {}", idx.len())));
        }
        Ok(())
    }

    /// Copies in the input blocks of the current iteration that moved since
    /// the previous one (all of them on the first): `idx` holds their block
    /// indices, input after input. `copy` moves one block.
    pub fn copy_in(&mut self, idx: &[i32], mut copy: impl FnMut(&BlockCopy<'_>) -> Result<()>) -> Result<()> {
        self.check_indices("grid_copy_in", false, idx, 1)?;
        let mut at = 0;
        for (block, region) in self.blocks.iter().zip(self.regions.iter_mut()) {
            if block.output {
                continue;
            }
            let indices = &idx[at..at + block.rank()];
            at += block.rank();
            if block.move_region(region, indices) || !self.stepped {
                copy(&BlockCopy { block, region, indices, point: &self.point })?;
            }
        }
        self.stepped = true;
        Ok(())
    }

    /// Copies out the output blocks of the current iteration that the next
    /// one will not write (all of them on the last iteration), runs the
    /// revisit check and moves to the next iteration. `cur` and `next` hold
    /// the output blocks' indices of this and the next iteration.
    pub fn copy_out(
        &mut self,
        cur: &[i32],
        next: &[i32],
        mut copy: impl FnMut(&BlockCopy<'_>) -> Result<()>,
        revisit: impl FnOnce(&[i64], &[Option<Region>]) -> Result<()>,
    ) -> Result<()> {
        self.check_indices("grid_copy_out", true, cur, 1)?;
        self.check_indices("grid_copy_out", true, next, 1)?;
        let last = self.it + 1 == self.bound;
        let mut at = 0;
        for (block, region) in self.blocks.iter().zip(self.regions.iter_mut()) {
            if !block.output {
                continue;
            }
            let (indices, next) = (&cur[at..at + block.rank()], &next[at..at + block.rank()]);
            at += block.rank();
            block.move_region(region, indices);
            if last || block.starts_differ(indices, next) {
                copy(&BlockCopy { block, region, indices, point: &self.point })?;
            }
        }
        for (tracked, b) in self.revisit_regions.iter_mut().zip(&self.revisit) {
            if let (Some(tracked), Some(b)) = (tracked, b) {
                tracked.dims.copy_from_slice(&self.regions[*b].dims);
            }
        }
        revisit(&self.loop_idx, &self.revisit_regions)?;
        self.it += 1;
        let mut idx = std::mem::take(&mut self.loop_idx);
        self.advance(&mut idx);
        for (d, &i) in idx.iter().enumerate() {
            self.point[d] = self.coord(d, i);
        }
        self.loop_idx = idx;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(grid: &[i64], order: Vec<Vec<i64>>, per_core: i64) -> GridSpec {
        let n = grid.iter().product();
        GridSpec { grid: grid.to_vec(), order, iters_per_core: per_core, num_iterations: n }
    }

    fn block(output: bool, rows: i64) -> Block {
        Block {
            output,
            space: MemorySpace::Vmem,
            kernel_id: if output { 3 } else { 2 },
            hbm_id: if output { 1 } else { 0 },
            sizes: vec![rows, 128],
            squeezed: vec![false, false],
            factors: vec![rows, 128],
            name: if output { "o".into() } else { "x".into() },
        }
    }

    /// (output?, first start, point) of one copy.
    type Copy = (bool, i64, Vec<i32>);

    /// Runs the loop with the index map `i, j -> (i, 0)`; returns the copies
    /// and the revisit calls' loop indices.
    fn run(mut g: GridLoop) -> (Vec<Copy>, Vec<Vec<i64>>) {
        let mut copies = Vec::new();
        let mut visits = Vec::new();
        while g.go() {
            let p = g.point();
            let np = g.next_point();
            let cur = [p[0], 0];
            let nxt = [np[0], 0];
            g.copy_in(&cur, |c| {
                copies.push((false, c.region.dims[0].start, c.point.to_vec()));
                Ok(())
            })
            .unwrap();
            g.copy_out(
                &cur,
                &nxt,
                |c| {
                    copies.push((true, c.region.dims[0].start, c.point.to_vec()));
                    Ok(())
                },
                |idx, regions| {
                    assert_eq!(regions.len(), 1);
                    visits.push(idx.to_vec());
                    Ok(())
                },
            )
            .unwrap();
        }
        (copies, visits)
    }

    #[test]
    fn copies_only_blocks_that_move() {
        let g = GridLoop::new(
            spec(&[2, 3], vec![vec![], vec![]], 6),
            vec![block(false, 8), block(true, 8)],
            vec![Some(1)],
            0,
        )
        .unwrap();
        let (copies, visits) = run(g);
        // Input copied at (0, 0) and (1, 0); output copied out after (0, 2) and (1, 2).
        assert_eq!(
            copies,
            vec![(false, 0, vec![0, 0]), (true, 0, vec![0, 2]), (false, 8, vec![1, 0]), (true, 8, vec![1, 2]),]
        );
        assert_eq!(visits.len(), 6);
        assert_eq!(visits[4], vec![1, 1]);
    }

    #[test]
    fn cores_split_the_iterations_and_visit_in_order() {
        // Two cores over a parallel dim of 4 visited as 2, 0, 3, 1.
        let order = vec![vec![2, 0, 3, 1]];
        let g = GridLoop::new(spec(&[4], order.clone(), 2), vec![block(false, 8), block(true, 8)], vec![Some(1)], 1)
            .unwrap();
        assert_eq!(g.point(), vec![3]);
        assert_eq!(g.next_point(), vec![1]);
        let (copies, visits) = run(g);
        assert_eq!(visits, vec![vec![2], vec![3]]);
        assert_eq!(copies[0], (false, 24, vec![3]));
        assert_eq!(copies.last().unwrap(), &(true, 8, vec![1]));
        // A core past the end runs nothing.
        let g = GridLoop::new(spec(&[4], order, 4), vec![], vec![], 1).unwrap();
        assert!(!g.go());
    }

    #[test]
    fn starts_wrap_like_int32() {
        let b = Block { factors: vec![1 << 20, 1], ..block(false, 8) };
        let mut region = b.region_at_origin();
        assert!(b.move_region(&mut region, &[4096, 5]));
        assert_eq!((region.dims[0].start, region.dims[1].start), (0, 5));
        assert!(!b.starts_differ(&[4096, 0], &[0, 0]));
    }

    #[test]
    fn next_point_coordinates_carry_and_wrap() {
        // A 2 x 3 grid whose last dim is visited as 2, 0, 1.
        let mut g = GridLoop::new(spec(&[2, 3], vec![vec![], vec![2, 0, 1]], 6), vec![], vec![], 0).unwrap();
        let mut seen = Vec::new();
        while g.go() {
            let mut next = vec![0; 2];
            g.for_next_point(|d, p| {
                next[d] = p;
                Ok(())
            })
            .unwrap();
            assert_eq!(next, g.next_point());
            seen.push((g.point().to_vec(), next));
            g.copy_out(&[], &[], |_| Ok(()), |_, _| Ok(())).unwrap();
        }
        assert_eq!(seen[0], (vec![0, 2], vec![0, 0]));
        assert_eq!(seen[2], (vec![0, 1], vec![1, 2]));
        assert_eq!(seen[5], (vec![1, 1], vec![0, 2]));
    }

    #[test]
    fn bad_specs_are_rejected() {
        assert!(GridLoop::new(spec(&[0], vec![vec![]], 1), vec![], vec![], 0).is_err());
        assert!(GridLoop::new(spec(&[3], vec![vec![0, 1]], 3), vec![], vec![], 0).is_err());
        assert!(GridLoop::new(spec(&[3], vec![vec![]], 3), vec![block(false, 8)], vec![Some(0)], 0).is_err());
        let mut g = GridLoop::new(spec(&[3], vec![vec![]], 3), vec![block(false, 8)], vec![], 0).unwrap();
        assert!(g.copy_in(&[0], |_| Ok(())).is_err());
    }
}
