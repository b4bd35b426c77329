//! The Threefry-2x32 hash (20 rounds, Salmon et al., "Parallel Random
//! Numbers: As Easy as 1, 2, 3", 2011), bit for bit what `jax.random`'s
//! `threefry2x32` primitive computes: jax's PRNG kernels call it inside the
//! kernel body, and XLA would compile its 20 unrolled rounds as fusions.
//!
//! May use: nothing (std only).

/// Rotation amounts of the rounds: groups of four, alternating halves.
const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
/// The key-schedule parity constant of Threefry's 32-bit variant.
const PARITY: u32 = 0x1BD1_1BDA;

/// The hash of one counter pair `x` under `key`.
#[inline(always)]
pub fn hash(key: [u32; 2], x: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ PARITY];
    let (mut a, mut b) = (x[0].wrapping_add(ks[0]), x[1].wrapping_add(ks[1]));
    for group in 1..=5u32 {
        for r in ROTATIONS[((group - 1) % 2) as usize] {
            a = a.wrapping_add(b);
            b = b.rotate_left(r) ^ a;
        }
        // Key injection after every four rounds.
        a = a.wrapping_add(ks[(group % 3) as usize]);
        b = b.wrapping_add(ks[((group + 1) % 3) as usize]).wrapping_add(group);
    }
    [a, b]
}

/// One operand of [`hash_all`]: a value for every element, or one for all.
#[derive(Clone, Copy)]
pub enum Words<'a> {
    One(u32),
    Each(&'a [u32]),
}

impl Words<'_> {
    #[inline(always)]
    fn at(self, i: usize) -> u32 {
        match self {
            Words::One(v) => v,
            Words::Each(s) => s[i],
        }
    }

    fn fits(self, n: usize) -> bool {
        match self {
            Words::One(_) => true,
            Words::Each(s) => s.len() == n,
        }
    }
}

/// `out0[i], out1[i] = hash([k0, k1], [x0, x1])` at every element `i`.
/// Every operand holds one value or `out0.len()` of them (else `false`,
/// nothing written).
pub fn hash_all(k0: Words, k1: Words, x0: Words, x1: Words, out0: &mut [u32], out1: &mut [u32]) -> bool {
    let n = out0.len();
    if out1.len() != n || ![k0, k1, x0, x1].iter().all(|w| w.fits(n)) {
        return false;
    }
    for (i, (o0, o1)) in out0.iter_mut().zip(out1.iter_mut()).enumerate() {
        [*o0, *o1] = hash([k0.at(i), k1.at(i)], [x0.at(i), x1.at(i)]);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers_of_the_paper() {
        // Random123's known-answer vectors for threefry2x32_20.
        assert_eq!(hash([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(hash([u32::MAX; 2], [u32::MAX; 2]), [0x1cb9_96fc, 0xbb00_2be7]);
        assert_eq!(hash([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]), [0xc492_3a9c, 0x483d_f7a0]);
    }

    #[test]
    fn operands_broadcast_one_value() {
        let xs: Vec<u32> = (0..5).collect();
        let keys = [7u32, 8, 9, 10, 11];
        let (mut a, mut b) = (vec![0; 5], vec![0; 5]);
        assert!(hash_all(Words::One(3), Words::Each(&keys), Words::Each(&xs), Words::One(1), &mut a, &mut b));
        for i in 0..5 {
            assert_eq!([a[i], b[i]], hash([3, keys[i]], [xs[i], 1]));
        }
        assert!(!hash_all(Words::One(3), Words::Each(&keys[..4]), Words::Each(&xs), Words::One(1), &mut a, &mut b));
    }
}
