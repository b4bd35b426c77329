//! The grid loop of a BlockSpec `pallas_call`, kept natively per core.
//!
//! Stock interpret mode (and our interpreter before this module) emits the
//! bookkeeping of every grid step as XLA: next grid indices, the visiting
//! order lookup, "did this block move?" compares feeding one `lax.cond` per
//! block, start vectors, the revisit check. Each of those is a kernel XLA
//! compiles (~10 ms each). Here the same decisions are made natively: the
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

    fn starts(&self, idx: &[i32]) -> Vec<i64> {
        idx.iter().zip(&self.factors).map(|(&i, &f)| i.wrapping_mul(f as i32) as i64).collect()
    }

    fn region(&self, starts: &[i64]) -> Region {
        Region::new(
            starts
                .iter()
                .zip(self.sizes.iter().zip(&self.squeezed))
                .map(|(&start, (&size, &squeezed))| DimSel { start, size, stride: 1, squeezed })
                .collect(),
        )
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
    /// Whether an iteration has copied its inputs (the first copies all).
    stepped: bool,
    /// Per block: the starts of the last iteration that copied in (inputs).
    prev: Vec<Vec<i64>>,
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
        let prev = vec![Vec::new(); blocks.len()];
        Ok(GridLoop { spec, blocks, revisit, it: first, bound, loop_idx, stepped: false, prev })
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

    fn next_indices(&self, idx: &[i64]) -> Vec<i64> {
        let mut next = idx.to_vec();
        for d in (0..next.len()).rev() {
            next[d] += 1;
            if next[d] != self.spec.grid[d] {
                break;
            }
            next[d] = 0;
        }
        next
    }

    fn point_of(&self, idx: &[i64]) -> Vec<i32> {
        idx.iter()
            .zip(&self.spec.order)
            .map(|(&i, order)| if order.is_empty() { i as i32 } else { order[i as usize] as i32 })
            .collect()
    }

    /// The grid point of the current iteration.
    pub fn point(&self) -> Vec<i32> {
        self.point_of(&self.loop_idx)
    }

    /// The grid point of the next iteration (wrapping after the last).
    pub fn next_point(&self) -> Vec<i32> {
        self.point_of(&self.next_indices(&self.loop_idx))
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
        let point = self.point();
        let mut at = 0;
        for b in 0..self.blocks.len() {
            let block = &self.blocks[b];
            if block.output {
                continue;
            }
            let indices = &idx[at..at + block.rank()];
            at += block.rank();
            let starts = block.starts(indices);
            if !self.stepped || starts != self.prev[b] {
                let region = block.region(&starts);
                copy(&BlockCopy { block, region: &region, indices, point: &point })?;
            }
            self.prev[b] = starts;
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
        let point = self.point();
        let last = self.it + 1 == self.bound;
        let mut regions: Vec<Option<Region>> = vec![None; self.blocks.len()];
        let mut at = 0;
        for (b, block) in self.blocks.iter().enumerate() {
            if !block.output {
                continue;
            }
            let indices = &cur[at..at + block.rank()];
            let starts = block.starts(indices);
            let moved = last || starts != block.starts(&next[at..at + block.rank()]);
            at += block.rank();
            let region = block.region(&starts);
            if moved {
                copy(&BlockCopy { block, region: &region, indices, point: &point })?;
            }
            regions[b] = Some(region);
        }
        let tracked: Vec<Option<Region>> = self.revisit.iter().map(|r| r.and_then(|b| regions[b].take())).collect();
        revisit(&self.loop_idx, &tracked)?;
        self.it += 1;
        self.loop_idx = self.next_indices(&self.loop_idx);
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
        assert_eq!(b.starts(&[4096, 5]), vec![0, 5]);
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
