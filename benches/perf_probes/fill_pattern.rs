use std::time::Instant;
// today's fill (rust/core/src/memory/copy.rs fill_pattern) after resize(bytes, 0)
fn fill_chunks(dst: &mut [u8], pattern: &[u8]) {
    if pattern.iter().all(|&b| b == pattern[0]) { dst.fill(pattern[0]); } else {
        for chunk in dst.chunks_exact_mut(pattern.len()) { chunk.copy_from_slice(pattern); }
    }
}
// candidate: seed one pattern, then double with copy_within (memcpy speed)
fn fill_doubling(dst: &mut [u8], pattern: &[u8]) {
    let n = dst.len(); if n == 0 { return; }
    let p = pattern.len().min(n);
    dst[..p].copy_from_slice(&pattern[..p]);
    let mut filled = p;
    while filled < n { let m = filled.min(n - filled); dst.copy_within(..m, filled); filled += m; }
}
fn main() {
    let pat_arr = f32::NAN.to_le_bytes(); let pat_vec: Vec<u8> = std::hint::black_box(pat_arr.to_vec()); let pat: &[u8] = &pat_vec;
    for mib in [1usize, 8] {
        let bytes = mib << 20;
        let reps = 50;
        for (name, which) in [("resize0+chunks (today)", 0), ("resize0+doubling", 1), ("with_capacity+doubling (no zeroing)", 2), ("vec![0u8] alloc only", 3)] {
            let t = Instant::now();
            for _ in 0..reps {
                let v: Vec<u8> = match which {
                    0 => { let mut v = Vec::new(); v.resize(bytes, 0); fill_chunks(&mut v, pat); v }
                    1 => { let mut v = Vec::new(); v.resize(bytes, 0); fill_doubling(&mut v, pat); v }
                    2 => { let mut v = Vec::with_capacity(bytes);
                           unsafe { v.set_len(bytes); } fill_doubling(&mut v, pat); v }
                    _ => { let mut v = Vec::new(); v.resize(bytes, 0); v }
                };
                std::hint::black_box(&v);
            }
            let per = t.elapsed().as_secs_f64() / reps as f64 * 1e3 / mib as f64;
            println!("{mib} MiB  {name:38} {per:.3} ms/MiB");
        }
    }
}
