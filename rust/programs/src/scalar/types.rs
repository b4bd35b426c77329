//! The element types of scalar programs and their one value representation.
//!
//! Every value is a `u64` in *canonical* form: signed types sign-extended
//! from their width, unsigned types zero-extended, bool 0 or 1. Wrapping
//! arithmetic on `u64` has the right low bits for every width, so an op
//! computes on `u64`/`i64` and [`ScalarType::wrap`]s the result once.

use mosaic_rt_wire::{wire_enum, DType};

wire_enum! {
    /// An element type of scalar programs: the integer and bool dtypes,
    /// with their codes and names.
    pub enum ScalarType as listed "type" in DType {
        Bool,
        I8,
        I16,
        I32,
        I64,
        U8,
        U16,
        U32,
        U64,
    }
}

impl ScalarType {
    /// Bits of the type (1 for bool).
    pub fn width(self) -> u32 {
        use ScalarType::*;
        match self {
            Bool => 1,
            I8 | U8 => 8,
            I16 | U16 => 16,
            I32 | U32 => 32,
            I64 | U64 => 64,
        }
    }

    pub fn is_signed(self) -> bool {
        matches!(self, ScalarType::I8 | ScalarType::I16 | ScalarType::I32 | ScalarType::I64)
    }

    pub fn is_int(self) -> bool {
        self != ScalarType::Bool
    }

    /// The all-ones mask of the type's width.
    fn mask(self) -> u64 {
        match self.width() {
            64 => u64::MAX,
            w => (1u64 << w) - 1,
        }
    }

    /// `x`'s low `width` bits in canonical form (two's-complement wrap).
    #[inline]
    pub fn wrap(self, x: u64) -> u64 {
        let w = self.width();
        if self.is_signed() {
            sign_extend(x, w)
        } else {
            x & self.mask()
        }
    }

    /// The value as a mathematical integer (for comparisons).
    #[inline]
    pub fn to_i128(self, v: u64) -> i128 {
        if self.is_signed() {
            v as i64 as i128
        } else {
            v as i128
        }
    }

    /// The smallest and largest value, canonical.
    pub fn min_max(self) -> (u64, u64) {
        if self.is_signed() {
            let w = self.width();
            (sign_extend(1u64 << (w - 1), w), self.mask() >> 1)
        } else {
            (0, self.mask())
        }
    }

    /// Bytes of one element in an XLA buffer (bool: 1).
    pub fn size(self) -> usize {
        self.width().div_ceil(8) as usize
    }

    /// Element `i` of native-endian `bytes` of this type, canonical.
    #[inline]
    pub fn read(self, bytes: &[u8], i: usize) -> u64 {
        let n = self.size();
        let mut word = [0u8; 8];
        let src = &bytes[i * n..(i + 1) * n];
        if cfg!(target_endian = "little") {
            word[..n].copy_from_slice(src);
        } else {
            word[8 - n..].copy_from_slice(src);
        }
        let raw = u64::from_ne_bytes(word);
        match self {
            ScalarType::Bool => (raw != 0) as u64,
            _ => self.wrap(raw),
        }
    }

    /// Canonical `v` as one native-endian element: the first `size()` bytes.
    #[inline]
    pub fn bytes(self, v: u64) -> [u8; 8] {
        let word = v.to_ne_bytes();
        if cfg!(target_endian = "little") {
            word
        } else {
            let mut out = [0u8; 8];
            let n = self.size();
            out[..n].copy_from_slice(&word[8 - n..]);
            out
        }
    }

    /// Writes canonical `v` as one native-endian element into `out`.
    #[inline]
    pub fn write(self, v: u64, out: &mut [u8]) {
        let n = self.size();
        let word = v.to_ne_bytes();
        if cfg!(target_endian = "little") {
            out[..n].copy_from_slice(&word[..n]);
        } else {
            out[..n].copy_from_slice(&word[8 - n..]);
        }
    }
}

/// `x`'s low `w` bits, sign-extended to 64.
#[inline]
pub fn sign_extend(x: u64, w: u32) -> u64 {
    let s = 64 - w;
    (((x << s) as i64) >> s) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScalarType::*;

    #[test]
    fn wrap_is_twos_complement_per_width() {
        assert_eq!(I8.wrap(200), (-56i64) as u64);
        assert_eq!(U8.wrap(300), 44);
        assert_eq!(I32.wrap(1 << 31), i32::MIN as i64 as u64);
        assert_eq!(U32.wrap(u64::MAX), u32::MAX as u64);
        assert_eq!(I64.wrap(u64::MAX), u64::MAX);
        assert_eq!(U16.wrap((-1i64) as u64), 0xffff);
    }

    #[test]
    fn min_max_and_codes() {
        assert_eq!(I8.min_max(), ((-128i64) as u64, 127));
        assert_eq!(I64.min_max(), (i64::MIN as u64, i64::MAX as u64));
        assert_eq!(U64.min_max(), (0, u64::MAX));
        assert_eq!(Bool.min_max(), (0, 1));
        for t in ScalarType::ALL {
            assert_eq!(ScalarType::from_code(t.code()).unwrap(), t);
        }
        assert!(ScalarType::from_code(9).is_err());
        assert!(ScalarType::from_code(-1).is_err());
        let sizes: Vec<usize> = ScalarType::ALL.iter().map(|t| t.size()).collect();
        assert_eq!(sizes, [1, 1, 2, 4, 8, 1, 2, 4, 8]);
    }

    #[test]
    fn read_write_round_trip() {
        let mut buf = [0u8; 8];
        for (t, v) in [(I8, (-3i64) as u64), (U16, 65535), (I32, i32::MIN as i64 as u64), (U64, u64::MAX), (Bool, 1)] {
            t.write(v, &mut buf);
            assert_eq!(t.read(&buf, 0), v, "{t:?}");
        }
        // Any non-zero byte of a PRED buffer is true.
        assert_eq!(Bool.read(&[7u8], 0), 1);
        // Element indexing.
        let words: Vec<u8> = [5i32, -6, 7].iter().flat_map(|x| x.to_ne_bytes()).collect();
        assert_eq!(I32.read(&words, 1), (-6i64) as u64);
    }
}
