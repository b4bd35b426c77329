//! Per-core pseudo-random bits for `pltpu.prng_seed` / `prng_random_bits`.
//!
//! Stock interpret mode returns zeros; kernels that use the hardware PRNG
//! (dropout, stochastic rounding) need real bits to be tested. Each core has
//! its own generator, seeded from the seed words the kernel passes, so a
//! kernel is reproducible run to run. The generator is SplitMix64 feeding
//! xoshiro256**: small, fast, statistically solid (not cryptographic).

#[derive(Clone, Debug)]
pub struct CorePrng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Default for CorePrng {
    fn default() -> Self {
        CorePrng::seeded(&[])
    }
}

impl CorePrng {
    pub fn seeded(seeds: &[i64]) -> Self {
        let mut x = 0x6d6f_7361_6963_5f72u64; // fixed base: unseeded is reproducible too
        for &w in seeds {
            x ^= splitmix64(&mut (w as u64));
            splitmix64(&mut x);
        }
        let mut s = [0u64; 4];
        for v in &mut s {
            *v = splitmix64(&mut x);
        }
        CorePrng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Fills `out` with random 32-bit words.
    pub fn fill_u32(&mut self, out: &mut [u32]) {
        let mut chunks = out.chunks_exact_mut(2);
        for pair in &mut chunks {
            let r = self.next_u64();
            pair[0] = r as u32;
            pair[1] = (r >> 32) as u32;
        }
        if let [last] = chunks.into_remainder() {
            *last = self.next_u64() as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bits_different_seed_different_bits() {
        let (mut a, mut b, mut c) = (CorePrng::seeded(&[42]), CorePrng::seeded(&[42]), CorePrng::seeded(&[43]));
        let (mut x, mut y, mut z) = ([0u32; 9], [0u32; 9], [0u32; 9]);
        a.fill_u32(&mut x);
        b.fill_u32(&mut y);
        c.fill_u32(&mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert!(x.iter().any(|&w| w != 0));
    }

    #[test]
    fn bits_look_uniform() {
        let mut g = CorePrng::seeded(&[7, 8]);
        let mut words = vec![0u32; 1 << 14];
        g.fill_u32(&mut words);
        let ones: u32 = words.iter().map(|w| w.count_ones()).sum();
        let frac = ones as f64 / (words.len() as f64 * 32.0);
        assert!((frac - 0.5).abs() < 0.01, "{frac}");
    }
}
