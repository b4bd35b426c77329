//! Shared helpers of the memory tests: a seeded PRNG (the race tests'
//! too), a MemoryTable factory, and a naive element-by-element reference
//! of stock's semantics.
#![allow(dead_code)]

use mosaic_rt_core::internals::MemoryTable;
use mosaic_rt_core::{Config, FillMode, OobReads, Region};

/// xorshift64*: deterministic, dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

pub fn table(devices: u32, cores: u32, oob: OobReads, fill: FillMode) -> MemoryTable {
    let config = Config { num_devices: devices, cores_per_device: cores, oob_reads: oob, fill, ..Config::default() };
    MemoryTable::new(&config)
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Per buffer dim (start, size, stride, squeezed), trailing dims whole logical dims.
pub fn normalized(region: &Region, logical: &[usize]) -> Vec<(usize, usize, usize, bool)> {
    let mut v: Vec<_> =
        region.dims.iter().map(|d| (d.start as usize, d.size as usize, d.stride as usize, d.squeezed)).collect();
    for &n in &logical[region.dims.len()..] {
        v.push((0, n, 1, false));
    }
    v
}

pub fn full_shape(region: &Region, logical: &[usize]) -> Vec<usize> {
    normalized(region, logical).iter().filter(|d| !d.3).map(|d| d.1).collect()
}

/// For each element of the full shape (C order), its coordinate in the buffer.
pub fn element_coords(region: &Region, logical: &[usize]) -> Vec<Vec<usize>> {
    let dims = normalized(region, logical);
    let mut out = vec![vec![]];
    for &(start, size, stride, squeezed) in &dims {
        let idxs: Vec<usize> = if squeezed { vec![start] } else { (0..size).map(|i| start + i * stride).collect() };
        out = out
            .into_iter()
            .flat_map(|c| {
                idxs.iter().map(move |&i| {
                    let mut c = c.clone();
                    c.push(i);
                    c
                })
            })
            .collect();
    }
    out
}

pub fn flat(coord: &[usize], shape: &[usize]) -> usize {
    coord.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

pub fn inside(coord: &[usize], shape: &[usize]) -> bool {
    coord.iter().zip(shape).all(|(&i, &n)| i < n)
}

/// Reference load: Some(bytes) or None when stock raises ("raise" policy).
pub fn ref_load(
    content: &[u8],
    shape: &[usize],
    logical: &[usize],
    itemsize: usize,
    region: &Region,
    fill: &[u8],
    uninitialized: bool,
) -> Option<Vec<u8>> {
    let dims = normalized(region, logical);
    let entirely_oob = dims.iter().zip(shape).any(|(d, &n)| d.0 >= n);
    let coords = element_coords(region, logical);
    // Stock compares clipped and full shapes per dim, so a dim running past
    // the end counts even when another dim selects nothing.
    let partial =
        dims.iter().zip(shape).any(|(&(start, size, stride, _), &n)| size > 0 && start + (size - 1) * stride >= n);
    if (entirely_oob || partial) && !uninitialized {
        return None;
    }
    let mut out = Vec::new();
    for c in &coords {
        if !entirely_oob && inside(c, shape) {
            let f = flat(c, shape) * itemsize;
            out.extend_from_slice(&content[f..f + itemsize]);
        } else {
            out.extend_from_slice(fill);
        }
    }
    Some(out)
}

/// Reference store: Err(()) when stock raises, else writes in place.
pub fn ref_store(
    content: &mut [u8],
    shape: &[usize],
    logical: &[usize],
    itemsize: usize,
    region: &Region,
    data: &[u8],
) -> Result<(), ()> {
    let dims = normalized(region, logical);
    let oob =
        dims.iter().zip(shape).any(
            |(&(start, size, stride, squeezed), &n)| {
                if squeezed {
                    start >= n
                } else {
                    size > 0 && start + (size - 1) * stride >= n
                }
            },
        );
    if oob {
        return Err(());
    }
    for (i, c) in element_coords(region, logical).iter().enumerate() {
        if inside(c, logical) {
            let f = flat(c, shape) * itemsize;
            content[f..f + itemsize].copy_from_slice(&data[i * itemsize..(i + 1) * itemsize]);
        }
    }
    Ok(())
}
