//! Vector-program evaluation over arrays of several lengths (plain
//! std::time; prints a table). The program is one philox round as the
//! interpreter emits it for jax's philox kernel: 2 uint32 arrays and 2
//! uint32 scalars in, 23 instructions (mul, shifts, xor, and, add, convert
//! through uint64 for the high half of the product), 2 arrays out.
//! Run: cargo bench -p mosaic_rt_programs --bench vector [-- N...]

use mosaic_rt_programs::vector::{VectorProgram, VectorScratch};
use std::hint::black_box;
use std::time::Instant;

/// The round's words; word 1 (the element count) is replaced per length.
const PHILOX_ROUND: [i64; 149] = [
    1, 0, 4, 23, 2, 7, 0, 7, 1, 7, 1, 7, 0, 0, 7, 0, 16, 16, 7, 2, 0, 4, 0, 0, 7, 0, 65535, 10, 7, 2, 0, 6, 0, 3, 7, 2,
    1, 5, 0, 3, 7, 2, 2, 7, 0, 3, 7, 2, 1, 7, 0, 3, 7, 2, 2, 5, 0, 10, 7, 2, 10, 6, 0, 10, 7, 2, 11, 6, 0, 1, 7, 2, 12,
    13, 0, 16, 7, 2, 9, 4, 0, 1, 7, 2, 14, 15, 0, 16, 7, 2, 10, 4, 0, 1, 7, 2, 8, 17, 0, 16, 7, 2, 11, 4, 0, 1, 7, 2,
    18, 19, 0, 16, 7, 2, 16, 4, 0, 1, 7, 2, 20, 21, 0, 14, 7, 2, 16, 4, 0, 10, 7, 2, 9, 6, 0, 1, 7, 2, 23, 24, 0, 12,
    7, 2, 22, 3, 0, 25, 26,
];

/// Median of 9 runs of `iters` calls of `f`, in ns per call.
fn time(iters: u64, mut f: impl FnMut()) -> f64 {
    f(); // warm-up: scratch grown, caches and branch predictors primed
    let mut runs: Vec<f64> = (0..9)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// `MOSAIC_RT_BENCH_CHUNKS=a,b,..`: also time these chunk lengths (0: one
/// chunk of n, the unchunked order).
fn chunk_lengths() -> Vec<usize> {
    std::env::var("MOSAIC_RT_BENCH_CHUNKS")
        .map(|s| s.split(',').filter_map(|c| c.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![0])
}

fn main() {
    let lengths: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let lengths = if lengths.is_empty() { vec![1024, 8192, 65536, 262144] } else { lengths };
    let chunks = chunk_lengths();
    println!("| {:>8} | {:>8} | {:>12} | {:>12} |", "n", "chunk", "time/call", "ns/element");
    println!("|{:->10}|{:->10}|{:->14}|{:->14}|", "", "", "", "");
    for n in lengths {
        let mut words = PHILOX_ROUND;
        words[1] = n as i64;
        let program = VectorProgram::decode(&words).unwrap();
        let array: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        let reversed: Vec<u32> = array.iter().rev().copied().collect();
        let bytes = |xs: &[u32]| xs.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let (a, b, k0, k1) = (bytes(&array), bytes(&reversed), bytes(&[7]), bytes(&[9]));
        let inputs: [&[u8]; 4] = [&a, &k0, &k1, &b];
        let mut outs = [vec![0u8; n * 4], vec![0u8; n * 4]];
        let mut scratch = VectorScratch::new();
        let iters = (50_000_000 / (n as u64 * 23)).max(3);
        let mut results = vec![];
        // None: the default choice (`VectorProgram::run`).
        for chunk in std::iter::once(None).chain(chunks.iter().map(|&c| Some(if c == 0 { n } else { c }))) {
            let ns = time(iters, || {
                let [o0, o1] = &mut outs;
                let outputs = &mut [&mut o0[..], &mut o1[..]];
                match chunk {
                    None => program.run(black_box(&inputs), outputs, &mut scratch).unwrap(),
                    Some(c) => program.run_in_chunks(black_box(&inputs), outputs, &mut scratch, c).unwrap(),
                }
            });
            results.push(outs.clone());
            let shown = if ns >= 10_000.0 { format!("{:.1} us", ns / 1000.0) } else { format!("{ns:.0} ns") };
            let label = chunk.map_or("default".to_string(), |c| c.to_string());
            println!("| {n:>8} | {label:>8} | {shown:>12} | {:>12.3} |", ns / n as f64);
        }
        assert!(results.iter().all(|r| r == &results[0]), "chunk lengths disagree");
    }
}
