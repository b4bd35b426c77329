//! The element types of vector programs: the scalar programs' integer and
//! bool types plus float32 and float64 (no bf16/f16: XLA may keep excess
//! precision in those, so no native evaluation could match it bit for bit).

use crate::dtype::DType;
use crate::enum_str::wire_enum;
use crate::scalar::ScalarType;

wire_enum! {
    /// An element type of vector programs, named as its dtype (the integer
    /// and bool codes are the scalar programs').
    pub enum VectorType as "type" {
        Bool = 0 => "bool",
        I8 = 1 => "int8",
        I16 = 2 => "int16",
        I32 = 3 => "int32",
        I64 = 4 => "int64",
        U8 = 5 => "uint8",
        U16 = 6 => "uint16",
        U32 = 7 => "uint32",
        U64 = 8 => "uint64",
        F32 = 9 => "float32",
        F64 = 10 => "float64",
    }
}

impl VectorType {
    pub fn dtype(self) -> DType {
        use VectorType::*;
        match self {
            Bool => DType::Bool,
            I8 => DType::I8,
            I16 => DType::I16,
            I32 => DType::I32,
            I64 => DType::I64,
            U8 => DType::U8,
            U16 => DType::U16,
            U32 => DType::U32,
            U64 => DType::U64,
            F32 => DType::F32,
            F64 => DType::F64,
        }
    }

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
        self.dtype().itemsize()
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
            assert_eq!(t.name(), t.dtype().name());
            if let Some(s) = t.scalar() {
                assert_eq!(s.code(), t.code(), "{t:?}");
            }
        }
        assert!(VectorType::from_code(11).is_err());
        assert!(VectorType::from_code(-1).is_err());
        assert_eq!(VectorType::F32.name(), "float32");
        assert_eq!(VectorType::F64.size(), 8);
        assert!(VectorType::U8.is_int() && !VectorType::Bool.is_int() && !VectorType::F32.is_int());
    }
}
