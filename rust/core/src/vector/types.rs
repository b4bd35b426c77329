//! The element types of vector programs: the scalar programs' integer and
//! bool types plus float32 and float64 (no bf16/f16: XLA may keep excess
//! precision in those, so no native evaluation could match it bit for bit).

use crate::dtype::DType;
use crate::error::{Result, RtError};
use crate::scalar::ScalarType;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorType {
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

impl VectorType {
    /// Every type in wire-code order (the integer and bool codes are the
    /// scalar programs').
    pub const ALL: [VectorType; 11] = [
        VectorType::Bool,
        VectorType::I8,
        VectorType::I16,
        VectorType::I32,
        VectorType::I64,
        VectorType::U8,
        VectorType::U16,
        VectorType::U32,
        VectorType::U64,
        VectorType::F32,
        VectorType::F64,
    ];

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

    pub fn code(self) -> i64 {
        VectorType::ALL.iter().position(|&t| t == self).unwrap_or(0) as i64
    }

    pub fn from_code(code: i64) -> Result<VectorType> {
        usize::try_from(code)
            .ok()
            .and_then(|i| VectorType::ALL.get(i).copied())
            .ok_or_else(|| RtError::value(format!("vector program: unknown type code {code}")))
    }

    pub fn name(self) -> &'static str {
        self.dtype().name()
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
