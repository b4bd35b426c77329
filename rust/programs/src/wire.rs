//! Enums that cross a boundary as integer codes (program ops and types
//! here, dtypes in the runtime): [`wire_enum!`](crate::wire_enum) states
//! each variant's code and name once and generates `ALL`, the conversions
//! and their errors, so that no layer above re-lists or re-spells them.
//! The helpers below are the macro's (public for its expansion in other
//! crates); not an API.
//!
//! May use: `crate::error`.

use crate::error::ProgramError;

/// Declares a fieldless enum that crosses a boundary as an integer code
/// (program words, FFI attributes, tables exported to Python), each variant
/// with its code and its name stated once: `Variant = code => "name"`.
/// Codes must be 0, 1, 2, ... in declaration order (checked at compile
/// time), so `ALL[code]` is the variant; a test pins each enum's table so
/// that a change of the wire is deliberate. Generates `ALL`, `code`,
/// `from_code` (error: `"unknown <what> code 7: expected 0 to 5"`), `name`
/// and `from_name` (error: `"unsupported <what> \"x\": expected one of a, b"`);
/// the errors are [`ProgramError`]s of kind `Value`.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $name {
            /// Every variant, in code order: `ALL[c].code() == c`.
            pub const ALL: [$name; [$($code),+].len()] = [$($name::$variant),+];

            /// The variant's wire code.
            #[inline]
            pub const fn code(self) -> i64 {
                self as i64
            }

            pub fn from_code(code: i64) -> ::std::result::Result<$name, $crate::ProgramError> {
                match code {
                    $($code => Ok($name::$variant),)+
                    _ => Err($crate::wire::unknown_code($what, code, $name::ALL.len())),
                }
            }

            /// The variant's name at the boundary.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            pub fn from_name(name: &str) -> ::std::result::Result<$name, $crate::ProgramError> {
                match name {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::wire::unknown_name($what, name, &[$($text),+])),
                }
            }
        }

        // Codes are positions: `ALL[code]` indexing (evaluation loops) and
        // the exported tables rely on it.
        const _: () = {
            let mut i = 0;
            while i < $name::ALL.len() {
                let in_order = $name::ALL[i] as usize == i;
                assert!(in_order, concat!(stringify!($name), ": codes must be 0, 1, 2, ... in order"));
                i += 1;
            }
        };
    };
}

/// `"unknown <what> code 7: expected 0 to 5"`.
#[cold]
pub fn unknown_code(what: &str, code: i64, n: usize) -> ProgramError {
    ProgramError::value(format!("unknown {what} code {code}: expected 0 to {}", n.saturating_sub(1)))
}

/// `"unsupported <what> \"x\": expected one of a, b, c"`.
#[cold]
pub fn unknown_name(what: &str, got: &str, valid: &[&str]) -> ProgramError {
    ProgramError::value(format!("unsupported {what} {got:?}: expected one of {}", valid.join(", ")))
}

#[cfg(test)]
mod tests {
    /// Every program wire enum's names in code order (code 0 first): the
    /// tables exported to Python and the codes in program words. A change
    /// here is a change of the wire (append new variants; never reorder).
    #[test]
    fn wire_codes_are_pinned() {
        fn table<T: Copy>(all: &[T], code: fn(T) -> i64, name: fn(T) -> &'static str) -> String {
            for (i, &v) in all.iter().enumerate() {
                assert_eq!(code(v), i as i64, "{}", name(v));
            }
            all.iter().map(|&v| name(v)).collect::<Vec<_>>().join(" ")
        }
        use crate::scalar::{ScalarOp, ScalarType};
        use crate::vector::{FmaForm, VectorOp, VectorType};
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
        let ints = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64";
        assert_eq!(table(&ScalarType::ALL, ScalarType::code, ScalarType::name), ints);
        assert_eq!(table(&VectorType::ALL, VectorType::code, VectorType::name), format!("{ints} float32 float64"));
        assert_eq!(table(&FmaForm::ALL, FmaForm::code, FmaForm::name), "mul_add mul_sub neg_mul_add");
    }

    #[test]
    fn wire_enum_errors_name_the_range_and_the_choices() {
        use crate::scalar::ScalarType;
        assert_eq!(ScalarType::from_code(9).unwrap_err().message, "unknown type code 9: expected 0 to 8");
        assert_eq!(ScalarType::from_code(-1).unwrap_err().kind, crate::ProgramErrorKind::Value);
        let e = ScalarType::from_name("float32").unwrap_err().message;
        assert_eq!(
            e,
            "unsupported type \"float32\": expected one of \
             bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64"
        );
    }
}
