//! Element types of simulated memory: every dtype jax can hand a Pallas TPU
//! kernel on CPU (numpy's, ml_dtypes' float8/float4/int4/int2 family,
//! bfloat16 and complex).
//!
//! Simulated memory keeps **one element per `itemsize()` bytes**, exactly as
//! numpy / ml_dtypes lay arrays out: sub-byte types (int4, uint4, int2,
//! uint2, float4_e2m1fn) take one byte each, value in the low bits, high
//! bits zero. XLA's CPU runtime instead hands FFI handlers those types
//! *packed* (`bits()` per element, element 0 in the lowest bits of byte 0,
//! dense over the whole C-order array, no per-row padding); [`DType::pack`]
//! and [`DType::unpack`] convert at that boundary. DMA semaphores count
//! `elements * itemsize()` bytes, as stock interpret mode does (numpy's
//! itemsize is 1 for the sub-byte types).

use std::ops::Deref;

use crate::config::FillMode;
use mosaic_rt_programs::scalar::ScalarType;
use mosaic_rt_programs::vector::VectorType;
use mosaic_rt_programs::wire_enum;

wire_enum! {
    /// An element type, named as numpy names it (ml_dtypes for the ml
    /// types). Codes are stable: new dtypes are appended.
    pub enum DType as "dtype" {
        Bool = 0 => "bool",
        I8 = 1 => "int8",
        I16 = 2 => "int16",
        I32 = 3 => "int32",
        I64 = 4 => "int64",
        U8 = 5 => "uint8",
        U16 = 6 => "uint16",
        U32 = 7 => "uint32",
        U64 = 8 => "uint64",
        F16 = 9 => "float16",
        BF16 = 10 => "bfloat16",
        F32 = 11 => "float32",
        F64 = 12 => "float64",
        // Added after the first 13: their codes follow those.
        I4 = 13 => "int4",
        U4 = 14 => "uint4",
        I2 = 15 => "int2",
        U2 = 16 => "uint2",
        F4E2M1FN = 17 => "float4_e2m1fn",
        F8E5M2 = 18 => "float8_e5m2",
        F8E4M3FN = 19 => "float8_e4m3fn",
        F8E4M3B11FNUZ = 20 => "float8_e4m3b11fnuz",
        F8E5M2FNUZ = 21 => "float8_e5m2fnuz",
        F8E4M3FNUZ = 22 => "float8_e4m3fnuz",
        F8E4M3 = 23 => "float8_e4m3",
        F8E3M4 = 24 => "float8_e3m4",
        F8E8M0FNU = 25 => "float8_e8m0fnu",
        C64 = 26 => "complex64",
        C128 = 27 => "complex128",
    }
}

/// The dtype of a scalar program's type (program type codes are the
/// dtype codes).
impl From<ScalarType> for DType {
    #[inline]
    fn from(t: ScalarType) -> DType {
        DType::ALL[t.code() as usize]
    }
}

/// The dtype of a vector program's type (the integer and bool ones are
/// the scalar programs', the floats' codes differ from the dtypes').
impl From<VectorType> for DType {
    #[inline]
    fn from(t: VectorType) -> DType {
        match t.scalar() {
            Some(s) => DType::from(s),
            None if t == VectorType::F32 => DType::F32,
            None => DType::F64,
        }
    }
}

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

impl DType {
    /// Bytes per element in simulated memory (numpy's itemsize; 1 for the
    /// sub-byte types). DMA semaphores count in these bytes.
    pub fn itemsize(self) -> usize {
        use DType::*;
        match self {
            Bool | I8 | U8 | I4 | U4 | I2 | U2 | F4E2M1FN => 1,
            F8E5M2 | F8E4M3FN | F8E4M3B11FNUZ | F8E5M2FNUZ | F8E4M3FNUZ | F8E4M3 | F8E3M4 | F8E8M0FNU => 1,
            I16 | U16 | F16 | BF16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 | C64 => 8,
            C128 => 16,
        }
    }

    /// Bits per element in XLA's buffers (packed for the sub-byte types).
    pub fn bits(self) -> usize {
        use DType::*;
        match self {
            I4 | U4 | F4E2M1FN => 4,
            I2 | U2 => 2,
            _ => 8 * self.itemsize(),
        }
    }

    /// Whether XLA packs several elements into one byte.
    #[inline]
    pub fn is_packed(self) -> bool {
        self.bits() < 8
    }

    /// Bytes XLA uses for `n` elements: `ceil(n * bits / 8)`.
    pub fn packed_len(self, n: usize) -> usize {
        match self.bits() {
            b if b < 8 => n.div_ceil(8 / b),
            b => n * (b / 8),
        }
    }

    /// Packed size of `unpacked` bytes of simulated memory.
    fn packed_bytes(self, unpacked: usize) -> usize {
        if self.is_packed() {
            self.packed_len(unpacked)
        } else {
            unpacked
        }
    }

    /// Little-endian bytes of the value that fills fresh or out-of-bounds
    /// memory, bit for bit what stock interpret mode stores (it converts
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
    pub fn fill_bytes(self, mode: FillMode) -> FillBytes {
        use DType::*;
        if mode == FillMode::Zero {
            return match self {
                F8E8M0FNU => FillBytes::new(&[0xff]),
                _ => FillBytes::new(&[0; 16][..self.itemsize()]),
            };
        }
        match self {
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

    /// Packs `elements` (one per byte, value in the low `bits()` bits) into
    /// XLA's layout: element `i` at bit `(i % per_byte) * bits` of byte
    /// `i / per_byte`. Unused high bits of the last byte are zero. For
    /// byte-sized types this is a plain copy of equally long slices.
    pub fn pack(self, elements: &[u8], packed: &mut [u8]) {
        assert_eq!(packed.len(), self.packed_bytes(elements.len()), "pack: wrong output size");
        let bits = self.bits();
        if bits >= 8 {
            packed.copy_from_slice(elements);
            return;
        }
        let per_byte = 8 / bits;
        let mask = (1u8 << bits) - 1;
        for (out, chunk) in packed.iter_mut().zip(elements.chunks(per_byte)) {
            *out = chunk.iter().enumerate().fold(0u8, |acc, (j, &e)| acc | ((e & mask) << (j * bits)));
        }
    }

    /// The inverse of [`DType::pack`]: fills `elements` (one per byte, high
    /// bits zero, as ml_dtypes stores them) from XLA's packed bytes. Unused
    /// bits of the last byte are ignored (XLA leaves them undefined).
    pub fn unpack(self, packed: &[u8], elements: &mut [u8]) {
        assert_eq!(packed.len(), self.packed_bytes(elements.len()), "unpack: wrong input size");
        let bits = self.bits();
        if bits >= 8 {
            elements.copy_from_slice(packed);
            return;
        }
        let per_byte = 8 / bits;
        let mask = (1u8 << bits) - 1;
        for (chunk, &byte) in elements.chunks_mut(per_byte).zip(packed) {
            for (j, e) in chunk.iter_mut().enumerate() {
                *e = (byte >> (j * bits)) & mask;
            }
        }
    }

    /// Clears the bits above `bits()` of every element (one per byte), so
    /// memory only ever holds canonical values; a no-op for byte-sized types.
    pub fn canonicalize(self, elements: &mut [u8]) {
        if self.is_packed() {
            let mask = (1u8 << self.bits()) - 1;
            elements.iter_mut().for_each(|e| *e &= mask);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()).unwrap(), d);
            assert_eq!(DType::from_code(d.code()).unwrap(), d);
            assert_eq!(d.fill_bytes(FillMode::Nan).len(), d.itemsize());
            assert_eq!(d.fill_bytes(FillMode::Zero).len(), d.itemsize());
        }
        let err = crate::RtError::from(DType::from_name("float6_e2m3fn").unwrap_err());
        assert_eq!(err.kind, crate::error::ErrorKind::Value);
        assert!(err.message.contains("\"float6_e2m3fn\""), "{}", err.message);
        assert!(err.message.contains("float8_e4m3fn"), "{}", err.message);
        assert!(DType::from_name("complex").is_err());
        assert!(DType::from_code(99).is_err());
        assert!(DType::from_code(-1).is_err());
    }

    #[test]
    fn program_types_are_the_dtypes_of_their_names_and_sizes() {
        for t in ScalarType::ALL {
            let d = DType::from(t);
            assert_eq!((d.name(), d.itemsize()), (t.name(), t.size()), "{t:?}");
        }
        for t in VectorType::ALL {
            let d = DType::from(t);
            assert_eq!((d.name(), d.itemsize()), (t.name(), t.size()), "{t:?}");
        }
    }

    #[test]
    fn codes_of_the_first_dtypes_never_change() {
        let first = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"];
        for (code, name) in first.iter().enumerate() {
            assert_eq!(DType::from_code(code as i64).unwrap().name(), *name);
        }
        assert_eq!(DType::F64.code(), 12);
        assert_eq!(DType::I4.code(), 13);
        assert_eq!(DType::C128.code(), 27);
    }

    #[test]
    fn sizes() {
        for d in DType::ALL {
            assert!(d.bits() <= 8 * d.itemsize());
            assert_eq!(d.is_packed(), d.bits() < 8);
            assert_eq!(d.packed_len(0), 0);
        }
        assert_eq!(DType::I4.packed_len(9), 5);
        assert_eq!(DType::F4E2M1FN.packed_len(8), 4);
        assert_eq!(DType::U2.packed_len(5), 2);
        assert_eq!(DType::I2.packed_len(1), 1);
        assert_eq!(DType::F8E4M3FN.packed_len(3), 3);
        assert_eq!(DType::C64.packed_len(3), 24);
        assert_eq!(DType::C128.itemsize(), 16);
    }

    #[test]
    fn nan_fill_values() {
        let nan = |d: DType| d.fill_bytes(FillMode::Nan).to_vec();
        let zero = |d: DType| d.fill_bytes(FillMode::Zero).to_vec();
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

    #[test]
    fn pack_matches_xla_layout() {
        // Bytes observed in an FFI operand on jaxlib 0.10.2 and 0.12.0.1.
        let mut out = [0u8; 4];
        DType::I4.pack(&[1, 2, 3, 4, 5, 6, 7, 8], &mut out);
        assert_eq!(out, [0x21, 0x43, 0x65, 0x87]);
        let mut out = [0u8; 5];
        DType::I4.pack(&[0, 1, 2, 3, 4, 5, 6, 7, 0], &mut out);
        assert_eq!(out, [0x10, 0x32, 0x54, 0x76, 0x00]);
        let mut out = [0u8; 2];
        // uint2 [0, 1, 2, 3, 0]; int2 [1, 2(-2), 3(-1), 0].
        DType::U2.pack(&[0, 1, 2, 3, 0], &mut out);
        assert_eq!(out, [0xe4, 0x00]);
        let mut out = [0u8; 1];
        DType::I2.pack(&[1, 2, 3, 0], &mut out);
        assert_eq!(out, [0x39]);
        // High bits of an element byte are ignored.
        DType::U4.pack(&[0xf1], &mut out);
        assert_eq!(out, [0x01]);
    }

    #[test]
    fn unpack_inverts_pack() {
        for d in [DType::I4, DType::U4, DType::F4E2M1FN, DType::I2, DType::U2] {
            let mask = (1u8 << d.bits()) - 1;
            for n in 0..11usize {
                let elements: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(7) & mask).collect();
                let mut packed = vec![0xaa; d.packed_len(n)];
                d.pack(&elements, &mut packed);
                // Garbage in the unused bits of the last byte is ignored.
                if n % (8 / d.bits()) != 0 {
                    *packed.last_mut().unwrap() |= !((1u8 << ((n % (8 / d.bits())) * d.bits())) - 1);
                }
                let mut back = vec![0xff; n];
                d.unpack(&packed, &mut back);
                assert_eq!(back, elements, "{} n={n}", d.name());
            }
        }
        let mut back = [0u8; 3];
        DType::BF16.unpack(&[1, 2, 3], &mut back[..]);
        assert_eq!(back, [1, 2, 3]);
    }

    #[test]
    fn canonicalize_clears_high_bits() {
        let mut v = [0xff, 0x17, 0x08];
        DType::I4.canonicalize(&mut v);
        assert_eq!(v, [0x0f, 0x07, 0x08]);
        let mut v = [0xff];
        DType::U2.canonicalize(&mut v);
        assert_eq!(v, [0x03]);
        let mut v = [0xff];
        DType::F8E4M3FN.canonicalize(&mut v);
        assert_eq!(v, [0xff]);
    }
}
