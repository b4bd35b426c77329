//! Detection of output blocks written twice across grid iterations.
//!
//! A core may write the same output block in consecutive iterations (that is
//! how reductions over an "arbitrary" grid axis accumulate), but coming back
//! to a block after moving on is an error, as in stock interpret mode. Stock
//! scans the whole history each iteration; we keep, per output, the last
//! block and a map block -> (first, last) iteration, so a check is O(1).

use crate::error::{ErrorKind, Result, RtError};
use crate::hash::KeyHasher;
use crate::region::{python_tuple, Region};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Block -> (first, last) iteration that wrote it. Hashed with the
/// memory table's integer hasher: one insert per grid step, SipHash
/// showed in grid-step profiles.
type Seen = HashMap<Region, (Vec<i64>, Vec<i64>), BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
struct OutputHistory {
    last: Option<Region>,
    seen: Seen,
}

/// Revisit history of one core.
#[derive(Default)]
pub struct RevisitTracker {
    outputs: Vec<OutputHistory>,
}

fn loop_repr(idx: &[i64]) -> String {
    let items: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
    python_tuple(&items)
}

impl RevisitTracker {
    /// Records that iteration `loop_idx` wrote `blocks[i]` of output `i`
    /// (`None`: output not tracked, e.g. aliased or in HBM). Fails if a
    /// block was written before, but not in the previous iteration.
    pub fn visit(&mut self, loop_idx: &[i64], blocks: &[Option<Region>]) -> Result<()> {
        if self.outputs.len() < blocks.len() {
            self.outputs.resize_with(blocks.len(), OutputHistory::default);
        }
        for (i, block) in blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            let hist = &self.outputs[i];
            if hist.last.as_ref() == Some(block) {
                continue;
            }
            if let Some((first, last)) = hist.seen.get(block) {
                return Err(RtError::new(
                    ErrorKind::Runtime,
                    format!(
                        "Revisited block {} of output {i} in iteration {}. The block was \
                         previously visited in iterations {} through {} .",
                        block.python_repr(),
                        loop_repr(loop_idx),
                        loop_repr(first),
                        loop_repr(last)
                    ),
                ));
            }
        }
        for (i, block) in blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            let hist = &mut self.outputs[i];
            match hist.seen.get_mut(block) {
                Some((_, last)) => {
                    last.clear();
                    last.extend_from_slice(loop_idx);
                }
                None => {
                    hist.seen.insert(block.clone(), (loop_idx.to_vec(), loop_idx.to_vec()));
                }
            }
            // Reuse the last block's allocation (same rank every step).
            match &mut hist.last {
                Some(last) if last.dims.len() == block.dims.len() => last.dims.copy_from_slice(&block.dims),
                last => *last = Some(block.clone()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::DimSel;

    fn block(i: i64) -> Option<Region> {
        Some(Region::new(vec![DimSel::slice(i * 8, 8, 1), DimSel::slice(0, 128, 1)]))
    }

    #[test]
    fn consecutive_visits_are_fine() {
        let mut t = RevisitTracker::default();
        t.visit(&[0, 0], &[block(0)]).unwrap();
        t.visit(&[0, 1], &[block(0)]).unwrap();
        t.visit(&[1, 0], &[block(1)]).unwrap();
    }

    #[test]
    fn coming_back_is_an_error_with_stocks_text() {
        let mut t = RevisitTracker::default();
        t.visit(&[0], &[block(0), None]).unwrap();
        t.visit(&[1], &[block(0), None]).unwrap();
        t.visit(&[2], &[block(1), None]).unwrap();
        let e = t.visit(&[3], &[block(0), None]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Runtime);
        assert_eq!(
            e.message,
            "Revisited block (slice(0, 8, 1), slice(0, 128, 1)) of output 0 in iteration (3,). \
             The block was previously visited in iterations (0,) through (1,) ."
        );
    }

    #[test]
    fn untracked_outputs_are_ignored() {
        let mut t = RevisitTracker::default();
        t.visit(&[0], &[None, block(0)]).unwrap();
        t.visit(&[1], &[None, block(1)]).unwrap();
        let e = t.visit(&[2], &[None, block(0)]).unwrap_err();
        assert!(e.message.contains("of output 1 in iteration (2,)"), "{e}");
    }
}
