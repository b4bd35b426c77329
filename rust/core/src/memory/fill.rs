//! The values that fill fresh and out-of-bounds memory, per dtype: what
//! stock interpret mode stores, bit for bit.
//!
//! May use: `crate::config`.

use std::ops::Deref;

use crate::config::FillMode;
use mosaic_rt_wire::DType;

/// The bytes of one element that fill fresh memory (at most 16 bytes, so no
/// allocation per out-of-bounds read). Derefs to the byte slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FillBytes {
    bytes: [u8; 16],
    len: u8,
}

impl FillBytes {
    fn new(le: &[u8]) -> FillBytes {
        let mut bytes = [0u8; 16];
        bytes[..le.len()].copy_from_slice(le);
        FillBytes { bytes, len: le.len() as u8 }
    }
}

impl Deref for FillBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl FillMode {
    /// Little-endian bytes of the `dtype` value that fills fresh or
    /// out-of-bounds memory, bit for bit what stock interpret mode stores (it converts
    /// NaN, the max integer, `True` or 0 to the dtype):
    ///
    /// * `Nan`: the quiet NaN converting `np.nan` gives (`0x7e` float8_e5m2,
    ///   `0x7f` e4m3fn, `0x80` for the fnuz types, `0x7c` e4m3, `0x78`
    ///   e3m4, `0xff` e8m0fnu; complex: NaN real part, zero imaginary part);
    ///   float4_e2m1fn has no NaN and gets `0x8` (-0.0) like stock; integers
    ///   their max value (int4 7, uint4 15, int2 1, uint2 3); bool `true`.
    /// * `Zero`: all zero bits, except float8_e8m0fnu, which has no zero:
    ///   converting 0 gives its NaN `0xff` (stock stores that too).
    ///
    /// Stock fails in `Nan` mode for complex dtypes (no rule for them); we
    /// fill NaN + 0j.
    pub fn bytes_of(self, dtype: DType) -> FillBytes {
        use DType::*;
        if self == FillMode::Zero {
            return match dtype {
                F8E8M0FNU => FillBytes::new(&[0xff]),
                _ => FillBytes::new(&[0; 16][..dtype.itemsize()]),
            };
        }
        match dtype {
            Bool => FillBytes::new(&[1]),
            I8 => FillBytes::new(&i8::MAX.to_le_bytes()),
            I16 => FillBytes::new(&i16::MAX.to_le_bytes()),
            I32 => FillBytes::new(&i32::MAX.to_le_bytes()),
            I64 => FillBytes::new(&i64::MAX.to_le_bytes()),
            U8 => FillBytes::new(&u8::MAX.to_le_bytes()),
            U16 => FillBytes::new(&u16::MAX.to_le_bytes()),
            U32 => FillBytes::new(&u32::MAX.to_le_bytes()),
            U64 => FillBytes::new(&u64::MAX.to_le_bytes()),
            I4 => FillBytes::new(&[0x7]),
            U4 => FillBytes::new(&[0xf]),
            I2 => FillBytes::new(&[0x1]),
            U2 => FillBytes::new(&[0x3]),
            // Quiet NaNs with the bit patterns numpy / ml_dtypes produce for np.nan.
            F16 => FillBytes::new(&0x7e00u16.to_le_bytes()),
            BF16 => FillBytes::new(&0x7fc0u16.to_le_bytes()),
            F32 => FillBytes::new(&f32::NAN.to_bits().to_le_bytes()),
            F64 => FillBytes::new(&f64::NAN.to_bits().to_le_bytes()),
            F4E2M1FN => FillBytes::new(&[0x8]),
            F8E5M2 => FillBytes::new(&[0x7e]),
            F8E4M3FN => FillBytes::new(&[0x7f]),
            F8E4M3B11FNUZ | F8E5M2FNUZ | F8E4M3FNUZ => FillBytes::new(&[0x80]),
            F8E4M3 => FillBytes::new(&[0x7c]),
            F8E3M4 => FillBytes::new(&[0x78]),
            F8E8M0FNU => FillBytes::new(&[0xff]),
            C64 => {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&f32::NAN.to_bits().to_le_bytes());
                FillBytes::new(&b)
            }
            C128 => {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
                FillBytes::new(&b)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_element_per_itemsize() {
        for d in DType::ALL {
            assert_eq!(FillMode::Nan.bytes_of(d).len(), d.itemsize());
            assert_eq!(FillMode::Zero.bytes_of(d).len(), d.itemsize());
        }
    }

    #[test]
    fn nan_fill_values() {
        let nan = |d: DType| FillMode::Nan.bytes_of(d).to_vec();
        let zero = |d: DType| FillMode::Zero.bytes_of(d).to_vec();
        assert_eq!(nan(DType::F32), 0x7fc0_0000u32.to_le_bytes());
        assert_eq!(nan(DType::U16), [0xff, 0xff]);
        assert_eq!(nan(DType::I8), [0x7f]);
        assert_eq!(zero(DType::F16), [0, 0]);
        // Measured from stock interpret mode (jax 0.10.2 and 0.12.0.1).
        let stock = [
            (DType::I4, 0x07),
            (DType::U4, 0x0f),
            (DType::I2, 0x01),
            (DType::U2, 0x03),
            (DType::F4E2M1FN, 0x08),
            (DType::F8E5M2, 0x7e),
            (DType::F8E4M3FN, 0x7f),
            (DType::F8E4M3B11FNUZ, 0x80),
            (DType::F8E5M2FNUZ, 0x80),
            (DType::F8E4M3FNUZ, 0x80),
            (DType::F8E4M3, 0x7c),
            (DType::F8E3M4, 0x78),
            (DType::F8E8M0FNU, 0xff),
        ];
        for (d, byte) in stock {
            assert_eq!(nan(d), [byte], "{}", d.name());
            let z = if d == DType::F8E8M0FNU { 0xff } else { 0 };
            assert_eq!(zero(d), [z], "{}", d.name());
        }
        let mut c64 = f32::NAN.to_bits().to_le_bytes().to_vec();
        c64.extend([0; 4]);
        assert_eq!(nan(DType::C64), c64);
        assert_eq!(&nan(DType::C128)[..8], f64::NAN.to_bits().to_le_bytes());
        assert_eq!(&nan(DType::C128)[8..], [0; 8]);
        assert_eq!(zero(DType::C128), [0; 16]);
    }
}
