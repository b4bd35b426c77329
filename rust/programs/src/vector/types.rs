//! The element types of vector programs: the scalar programs' integer and
//! bool types plus float32 and float64 (no bf16/f16: XLA may keep excess
//! precision in those, so no native evaluation could match it bit for bit).

use crate::scalar::ScalarType;
use mosaic_rt_wire::{wire_enum, DType};

wire_enum! {
    /// An element type of vector programs: the scalar programs' types and
    /// float32 / float64, with their dtype codes and names.
    pub enum VectorType as listed "type" in DType {
        Bool,
        I8,
        I16,
        I32,
        I64,
        U8,
        U16,
        U32,
        U64,
        F32,
        F64,
    }
}

impl VectorType {
    /// The scalar-program type of an integer or bool type.
    pub const fn scalar(self) -> Option<ScalarType> {
        use VectorType::*;
        Some(match self {
            Bool => ScalarType::Bool,
            I8 => ScalarType::I8,
            I16 => ScalarType::I16,
            I32 => ScalarType::I32,
            I64 => ScalarType::I64,
            U8 => ScalarType::U8,
            U16 => ScalarType::U16,
            U32 => ScalarType::U32,
            U64 => ScalarType::U64,
            F32 | F64 => return None,
        })
    }

    /// Bytes of one element (bool: 1).
    pub fn size(self) -> usize {
        match self.scalar() {
            Some(s) => s.size(),
            None if self == VectorType::F32 => 4,
            None => 8,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(self, VectorType::F32 | VectorType::F64)
    }

    /// An integer type (not bool, not a float).
    pub const fn is_int(self) -> bool {
        !self.is_float() && !matches!(self, VectorType::Bool)
    }

    pub const fn is_signed(self) -> bool {
        matches!(self, VectorType::I8 | VectorType::I16 | VectorType::I32 | VectorType::I64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_extend_the_scalar_codes() {
        for t in VectorType::ALL {
            assert_eq!(VectorType::from_code(t.code()).unwrap(), t);
            if let Some(s) = t.scalar() {
                assert_eq!(s.code(), t.code(), "{t:?}");
            }
        }
        assert!(VectorType::from_code(9).is_err());
        assert!(VectorType::from_code(13).is_err());
        assert!(VectorType::from_code(-1).is_err());
        assert_eq!(VectorType::F32.name(), "float32");
        assert_eq!(VectorType::F64.size(), 8);
        assert_eq!(VectorType::F32.size(), 4);
        assert_eq!(VectorType::I16.size(), 2);
        assert!(VectorType::U8.is_int() && !VectorType::Bool.is_int() && !VectorType::F32.is_int());
    }
}
