//! Element types of simulated memory (every dtype stock interpret mode handles).

use crate::config::FillMode;
use crate::error::{Result, RtError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    pub fn itemsize(self) -> usize {
        use DType::*;
        match self {
            Bool | I8 | U8 => 1,
            I16 | U16 | F16 | BF16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 => 8,
        }
    }

    /// numpy's name of the dtype (`ml_dtypes` for bfloat16).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            Bool => "bool",
            I8 => "int8",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            U8 => "uint8",
            U16 => "uint16",
            U32 => "uint32",
            U64 => "uint64",
            F16 => "float16",
            BF16 => "bfloat16",
            F32 => "float32",
            F64 => "float64",
        }
    }

    pub fn from_name(name: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| RtError::value(format!("unsupported dtype {name:?}")))
    }

    /// Stable small integer used on the FFI wire (attribute `dtype`).
    pub fn code(self) -> i64 {
        DType::ALL.iter().position(|d| *d == self).unwrap() as i64
    }

    pub fn from_code(code: i64) -> Result<DType> {
        usize::try_from(code)
            .ok()
            .and_then(|i| DType::ALL.get(i).copied())
            .ok_or_else(|| RtError::value(format!("unknown dtype code {code}")))
    }

    /// Little-endian bytes of the value that fills fresh or out-of-bounds
    /// memory: NaN for floats, the max value for integers, `true` for bool
    /// (as stock interpret mode does), or all zeros.
    pub fn fill_bytes(self, mode: FillMode) -> Vec<u8> {
        use DType::*;
        if mode == FillMode::Zero {
            return vec![0; self.itemsize()];
        }
        match self {
            Bool => vec![1],
            I8 => i8::MAX.to_le_bytes().to_vec(),
            I16 => i16::MAX.to_le_bytes().to_vec(),
            I32 => i32::MAX.to_le_bytes().to_vec(),
            I64 => i64::MAX.to_le_bytes().to_vec(),
            U8 => u8::MAX.to_le_bytes().to_vec(),
            U16 => u16::MAX.to_le_bytes().to_vec(),
            U32 => u32::MAX.to_le_bytes().to_vec(),
            U64 => u64::MAX.to_le_bytes().to_vec(),
            // Quiet NaNs with the bit patterns numpy / ml_dtypes produce for np.nan.
            F16 => 0x7e00u16.to_le_bytes().to_vec(),
            BF16 => 0x7fc0u16.to_le_bytes().to_vec(),
            F32 => f32::NAN.to_bits().to_le_bytes().to_vec(),
            F64 => f64::NAN.to_bits().to_le_bytes().to_vec(),
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
        }
        assert!(DType::from_name("complex64").is_err());
        assert!(DType::from_code(99).is_err());
    }

    #[test]
    fn nan_fill_values() {
        assert_eq!(DType::F32.fill_bytes(FillMode::Nan), 0x7fc0_0000u32.to_le_bytes());
        assert_eq!(DType::U16.fill_bytes(FillMode::Nan), [0xff, 0xff]);
        assert_eq!(DType::I8.fill_bytes(FillMode::Nan), [0x7f]);
        assert_eq!(DType::F16.fill_bytes(FillMode::Zero), [0, 0]);
    }
}
