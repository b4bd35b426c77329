//! The chunked shadow against per-element shadow state (chunks of one
//! element, i.e. plain FastTrack): on random runs of accesses by threads
//! with random happens-before, every chunk size gives the same first
//! conflict per access and the same state per element.

mod memory_support;

use memory_support::Rng;
use mosaic_rt_core::internals::{Epoch, Memo, Shadow, VectorClock};

const THREADS: u32 = 4;

/// Runs one program; returns (accesses with a conflict, elements seen read-shared).
fn program(seed: u64, len: usize, steps: usize, chunks: &[usize]) -> (usize, usize) {
    let (mut conflicts, mut shared) = (0, 0);
    let mut rng = Rng::new(seed);
    let mut clocks: Vec<VectorClock> = (0..THREADS).map(|_| VectorClock::default()).collect();
    let mut plain = Shadow::with_chunk(len, 1);
    let mut chunked: Vec<Shadow> = chunks.iter().map(|&c| Shadow::with_chunk(len, c)).collect();
    for step in 0..steps {
        let t = rng.below(THREADS as u64) as u32;
        // Synchronisation rates vary, so clean and racy runs both occur.
        if rng.below(4) < 1 + seed % 3 {
            // A synchronisation: t learns another thread's past.
            let from = clocks[rng.below(THREADS as u64) as usize].clone();
            clocks[t as usize].join(&from);
            continue;
        }
        let now = clocks[t as usize].tick(t);
        let clock = &clocks[t as usize];
        let write = rng.below(2) == 0;
        // Several runs per access, like the rows of a block; often aligned.
        let runs = 1 + rng.below(3) as usize;
        let row = len / runs;
        let (off, n) = if rng.below(2) == 0 {
            (0, row)
        } else {
            let off = rng.below(row as u64) as usize;
            (off, 1 + rng.below((row - off) as u64) as usize)
        };
        let mut expect = None;
        let mut memo = Memo::default();
        for r in 0..runs {
            expect = expect.or(plain.access_run(r * row + off, n, now, clock, write, &mut memo));
        }
        conflicts += expect.is_some() as usize;
        shared += (0..len).filter(|&i| plain.state(i).1.len() > 1).count();
        for (shadow, &c) in chunked.iter_mut().zip(chunks) {
            let mut got = None;
            let mut memo = Memo::default();
            for r in 0..runs {
                got = got.or(shadow.access_run(r * row + off, n, now, clock, write, &mut memo));
            }
            assert_eq!(got, expect, "seed {seed}, step {step}, chunk {c}: first conflict");
            for i in 0..len {
                assert_eq!(shadow.state(i), plain.state(i), "seed {seed}, step {step}, chunk {c}: element {i}");
            }
        }
    }
    (conflicts, shared)
}

#[test]
fn chunked_shadow_matches_per_element_state() {
    let iterations: u64 = std::env::var("RACES_SHADOW_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let (mut conflicts, mut shared) = (0, 0);
    for seed in 0..iterations {
        let len = [24, 37, 64, 130][(seed % 4) as usize];
        let (c, s) = program(seed, len, 40, &[2, 4, 8, 16, 32, 64]);
        conflicts += c;
        shared += s;
    }
    println!("{conflicts} accesses with a conflict, {shared} read-shared element states");
    // Both conflicts and read-shared states are well exercised.
    assert!(conflicts > iterations as usize && shared > iterations as usize);
}

#[test]
fn a_block_over_uniform_chunks_stays_uniform() {
    // 16 rows of 128, a 16x64 column block (runs of 64), as 64-element chunks.
    let mut s = Shadow::new(16 * 128, 128);
    let mut clock = VectorClock::default();
    for _ in 0..3 {
        for write in [true, false] {
            let now: Epoch = clock.tick(0);
            let mut memo = Memo::default();
            for row in 0..16 {
                assert_eq!(s.access_run(row * 128 + 64, 64, now, &clock, write, &mut memo), None);
            }
        }
    }
    assert_eq!(s.split_chunks(), 0);
}
