//! Enums that cross a boundary: as strings (`enum_str!`: configuration
//! values, FFI attributes, Python arguments) or as integer codes
//! (`wire_enum!`: program ops and types, dtypes). Each variant's spelling
//! (and code) is stated once, here generated into `ALL`, the conversions
//! and their errors, so that no layer above parses or re-spells them.

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

/// Declares a fieldless enum that crosses a boundary as an integer code
/// (program words, FFI attributes, tables exported to Python), each variant
/// with its code and its name stated once: `Variant = code => "name"`.
/// Codes must be 0, 1, 2, ... in declaration order (checked at compile
/// time), so `ALL[code]` is the variant; a test pins each enum's table so
/// that a change of the wire is deliberate. Generates `ALL`, `code`,
/// `from_code` (error: `"unknown <what> code 7: expected 0 to 5"`), `name`
/// and `from_name` (error: `"unsupported <what> \"x\": expected one of a, b"`).
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

            pub fn from_code(code: i64) -> $crate::error::Result<$name> {
                match code {
                    $($code => Ok($name::$variant),)+
                    _ => Err($crate::enum_str::unknown_code($what, code, $name::ALL.len())),
                }
            }

            /// The variant's name at the boundary.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            pub fn from_name(name: &str) -> $crate::error::Result<$name> {
                match name {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::enum_str::unknown_name($what, name, &[$($text),+])),
                }
            }
        }

        // Codes are positions: `ALL[code]` indexing (evaluation loops) and
        // the exported tables rely on it.
        const _: () = {
            let mut i = 0;
            while i < $name::ALL.len() {
                assert!($name::ALL[i] as usize == i, concat!(stringify!($name), ": codes must be 0, 1, 2, ... in order"));
                i += 1;
            }
        };
    };
}

pub(crate) use wire_enum;

/// `"unknown <what> code 7: expected 0 to 5"`.
#[cold]
pub(crate) fn unknown_code(what: &str, code: i64, n: usize) -> RtError {
    RtError::value(format!("unknown {what} code {code}: expected 0 to {}", n.saturating_sub(1)))
}

/// `"unsupported <what> \"x\": expected one of a, b, c"`.
#[cold]
pub(crate) fn unknown_name(what: &str, got: &str, valid: &[&str]) -> RtError {
    RtError::value(format!("unsupported {what} {got:?}: expected one of {}", valid.join(", ")))
}

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
        check(DmaMode::ALL, DmaMode::as_str, "dma_execution_mode must be 'eager' or 'on_wait', got \"bogus\"");
        check(OobReads::ALL, OobReads::as_str, "out_of_bounds_reads must be 'raise' or 'uninitialized', got \"bogus\"");
        check(FillMode::ALL, FillMode::as_str, "uninitialized_memory must be 'nan' or 'zero', got \"bogus\"");
        check(RacePolicy::ALL, RacePolicy::as_str, "on_race must be 'raise', 'warn' or 'print', got \"bogus\"");
        check(LeakPolicy::ALL, LeakPolicy::as_str, "leak policy must be 'ignore', 'warn' or 'raise', got \"bogus\"");
        check(SemKind::ALL, SemKind::as_str, "semaphore kind must be 'regular', 'dma' or 'barrier', got \"bogus\"");
        check(Access::ALL, Access::as_str, "access must be 'read', 'write' or 'swap', got \"bogus\"");
        check(
            MemorySpace::ALL,
            MemorySpace::as_str,
            "memory space must be 'vmem', 'vmem_shared', 'smem', 'cmem', 'semaphore_mem', 'hbm' or 'any', got \"bogus\"",
        );
    }
}
