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
//!
//! May use: `crate::wire_enum`.

use crate::wire_enum;

wire_enum! {
    /// An element type, named as numpy names it (ml_dtypes for the ml
    /// types): the one table of dtype codes (memory, FFI attributes,
    /// program words, `_native.DTYPES`). Codes are stable: new dtypes are
    /// appended.
    pub enum DType as listed "dtype" {
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
        }
        let err = DType::from_name("float6_e2m3fn").unwrap_err().message;
        assert!(err.starts_with("unsupported dtype \"float6_e2m3fn\": expected one of bool, "), "{err}");
        assert!(err.contains("float8_e4m3fn"), "{err}");
        assert!(DType::from_name("complex").is_err());
        assert_eq!(DType::from_code(28).unwrap_err().message, "unknown dtype code 28: expected 0 to 27");
        assert_eq!(DType::from_code(-1).unwrap_err().message, "unknown dtype code -1: expected 0 to 27");
    }

    /// The table in code order (code 0 first): what simulated memory, the
    /// programs' types and `_native.DTYPES` share. A change here is a change
    /// of the wire (append new dtypes; never reorder).
    #[test]
    fn codes_are_pinned() {
        let names = DType::ALL.map(DType::name).join(" ");
        assert_eq!(
            names,
            "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 int4 uint4 \
             int2 uint2 float4_e2m1fn float8_e5m2 float8_e4m3fn float8_e4m3b11fnuz float8_e5m2fnuz \
             float8_e4m3fnuz float8_e4m3 float8_e3m4 float8_e8m0fnu complex64 complex128"
        );
        for (i, d) in DType::ALL.iter().enumerate() {
            assert_eq!(d.code(), i as i64, "{}", d.name());
        }
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
