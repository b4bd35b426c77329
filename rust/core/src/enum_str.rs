//! Enums that cross a boundary as strings (`enum_str!`: configuration
//! values, FFI attributes, Python arguments). Each variant's spelling is
//! stated once, here generated into `ALL`, the conversions and their
//! errors, so that no layer above parses or re-spells them. Enums that
//! cross as integer codes (dtypes, program ops and types) use
//! `mosaic_rt_programs::wire_enum!` instead.
//!
//! May use: `crate::error`.

use crate::error::RtError;

/// Declares a fieldless enum whose variants are spelled `"text"` at the
/// boundary. Generates `ALL` (declaration order), `as_str`, `FromStr`
/// (errors: `"<what> must be 'a', 'b' or 'c', got \"x\""`) and `Display`.
macro_rules! enum_str {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The variant's spelling at the boundary.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::error::RtError;
            fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::enum_str::invalid($what, &[$($text),+], s)),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use enum_str;

/// `"<what> must be 'a', 'b' or 'c', got \"x\""`.
#[cold]
pub(crate) fn invalid(what: &str, valid: &[&str], got: &str) -> RtError {
    let quoted: Vec<String> = valid.iter().map(|v| format!("'{v}'")).collect();
    let choices = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    };
    RtError::value(format!("{what} must be {choices}, got {got:?}"))
}

#[cfg(test)]
mod tests {
    use crate::config::{DmaMode, FillMode, LeakPolicy, OobReads, RacePolicy};
    use crate::memory::{Access, MemorySpace};
    use crate::sem::SemKind;

    #[test]
    fn every_spelling_round_trips_and_errors_name_the_choices() {
        fn check<T: std::str::FromStr<Err = crate::RtError> + PartialEq + std::fmt::Debug + Copy>(
            all: &[T],
            as_str: fn(T) -> &'static str,
            error: &str,
        ) {
            for &v in all {
                assert_eq!(as_str(v).parse::<T>().unwrap(), v);
            }
            assert_eq!("bogus".parse::<T>().unwrap_err().message, error);
        }
        check(DmaMode::ALL, DmaMode::as_str, "dma_execution_mode must be 'eager', 'on_wait' or 'tpu', got \"bogus\"");
        check(
            OobReads::ALL,
            OobReads::as_str,
            "out_of_bounds_reads must be 'raise', 'uninitialized' or 'tpu', got \"bogus\"",
        );
        check(FillMode::ALL, FillMode::as_str, "uninitialized_memory must be 'nan' or 'zero', got \"bogus\"");
        check(RacePolicy::ALL, RacePolicy::as_str, "on_race must be 'raise', 'warn' or 'print', got \"bogus\"");
        check(LeakPolicy::ALL, LeakPolicy::as_str, "leak policy must be 'ignore', 'warn' or 'raise', got \"bogus\"");
        check(SemKind::ALL, SemKind::as_str, "semaphore kind must be 'regular', 'dma' or 'barrier', got \"bogus\"");
        check(Access::ALL, Access::as_str, "access must be 'read', 'load', 'write' or 'swap', got \"bogus\"");
        check(
            MemorySpace::ALL,
            MemorySpace::as_str,
            "memory space must be 'vmem', 'vmem_shared', 'smem', 'cmem', 'semaphore_mem', 'hbm' or 'any', got \"bogus\"",
        );
    }

    /// The core's code-carrying enums' names in code order (code 0
    /// first; the program enums are pinned in `mosaic_rt_programs`): the
    /// tables exported to Python. A change here is a change of the wire
    /// (append new variants; never reorder).
    #[test]
    fn wire_codes_are_pinned() {
        fn table<T: Copy>(all: &[T], code: fn(T) -> i64, name: fn(T) -> &'static str) -> String {
            for (i, &v) in all.iter().enumerate() {
                assert_eq!(code(v), i as i64, "{}", name(v));
            }
            all.iter().map(|&v| name(v)).collect::<Vec<_>>().join(" ")
        }
        use crate::dtype::DType;
        use crate::memory::MemorySpace;
        let ints = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64";
        assert_eq!(
            table(&DType::ALL, DType::code, DType::name),
            format!(
                "{ints} float16 bfloat16 float32 float64 int4 uint4 int2 uint2 float4_e2m1fn float8_e5m2 \
                 float8_e4m3fn float8_e4m3b11fnuz float8_e5m2fnuz float8_e4m3fnuz float8_e4m3 float8_e3m4 \
                 float8_e8m0fnu complex64 complex128"
            )
        );
        assert_eq!(
            table(MemorySpace::ALL, MemorySpace::code, MemorySpace::as_str),
            "vmem vmem_shared smem cmem semaphore_mem hbm any"
        );
    }

    #[test]
    fn wire_enum_errors_name_the_range_and_convert_to_value_errors() {
        use crate::dtype::DType;
        assert_eq!(DType::from_code(28).unwrap_err().message, "unknown dtype code 28: expected 0 to 27");
        let e = crate::RtError::from(DType::from_code(-1).unwrap_err());
        assert_eq!(e.kind, crate::error::ErrorKind::Value);
        assert_eq!(e.message, "unknown dtype code -1: expected 0 to 27");
    }
}
