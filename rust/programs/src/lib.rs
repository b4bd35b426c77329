//! mosaic_rt_programs: the pure computations a kernel's native ops run,
//! fenced off from the runtime. Scalar programs ([`scalar`]: a kernel's
//! rank-0 integer/bool index math), vector programs ([`vector`]: a block's
//! elementwise compute), their shared word decoding and decode cache
//! (`program_words`) and the Threefry-2x32 hash ([`threefry`]), each
//! bit-identical to what XLA:CPU would compute. Their op and type codes are
//! `mosaic_rt_wire` enums (the types parts of its `DType` table).
//!
//! May use: std, `mosaic_rt_wire`. No runtime (`mosaic_rt_core` depends on this crate,
//! never the reverse), no pyo3, no XLA: the FFI handlers feed these
//! evaluators their operands and convert [`ProgramError`] into the
//! runtime's error at the boundary.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod error;
mod program_words;
pub mod scalar;
pub mod threefry;
pub mod vector;

pub use error::{ProgramError, ProgramErrorKind, ProgramResult};

#[cfg(test)]
mod tests {
    /// Every program op table's names in code order (code 0 first): the
    /// tables exported to Python and the codes in program words. A change
    /// here is a change of the wire (append new variants; never reorder).
    /// The types are parts of `DType`'s table, pinned in `mosaic_rt_wire`.
    #[test]
    fn wire_codes_are_pinned() {
        fn table<T: Copy>(all: &[T], code: fn(T) -> i64, name: fn(T) -> &'static str) -> String {
            for (i, &v) in all.iter().enumerate() {
                assert_eq!(code(v), i as i64, "{}", name(v));
            }
            all.iter().map(|&v| name(v)).collect::<Vec<_>>().join(" ")
        }
        use crate::scalar::ScalarOp;
        use crate::vector::{FmaForm, VectorOp};
        assert_eq!(
            table(&ScalarOp::ALL, ScalarOp::code, ScalarOp::name),
            "const add sub mul div rem neg abs sign max min clamp and or xor not shift_left \
             shift_right_arithmetic shift_right_logical eq ne lt le gt ge select_n convert_element_type \
             integer_pow index"
        );
        assert_eq!(
            table(&VectorOp::ALL, VectorOp::code, VectorOp::name),
            "const add sub mul div rem neg abs max min and or xor not shift_left shift_right_arithmetic \
             shift_right_logical eq ne lt le gt ge select_n convert_element_type fma iota"
        );
        assert_eq!(table(&FmaForm::ALL, FmaForm::code, FmaForm::name), "mul_add mul_sub neg_mul_add");
    }

    #[test]
    fn type_errors_name_the_codes_and_the_choices() {
        use crate::scalar::ScalarType;
        use crate::vector::VectorType;
        assert_eq!(ScalarType::from_code(9).unwrap_err().message, "unknown type code 9: expected 0 to 8");
        let e = crate::ProgramError::from(ScalarType::from_code(-1).unwrap_err());
        assert_eq!(e.kind, crate::ProgramErrorKind::Value);
        assert_eq!(
            VectorType::from_code(9).unwrap_err().message,
            "unknown type code 9: expected one of 0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12"
        );
        let e = ScalarType::from_name("float32").unwrap_err().message;
        assert_eq!(
            e,
            "unsupported type \"float32\": expected one of \
             bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64"
        );
    }

    #[test]
    fn program_types_are_the_dtypes_of_their_names_and_sizes() {
        use crate::scalar::ScalarType;
        use crate::vector::VectorType;
        use mosaic_rt_wire::DType;
        for t in ScalarType::ALL {
            let d = DType::from(t);
            assert_eq!((d.code(), d.name(), d.itemsize()), (t.code(), t.name(), t.size()), "{t:?}");
        }
        for t in VectorType::ALL {
            let d = DType::from(t);
            assert_eq!((d.code(), d.name(), d.itemsize()), (t.code(), t.name(), t.size()), "{t:?}");
        }
    }
}
