//! Enums that cross a boundary as strings (configuration values, FFI
//! attributes, Python arguments): each gets exactly one spelling per
//! variant, one `as_str` and one `FromStr`, generated here, so that no layer
//! above parses or re-spells them by hand.

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
