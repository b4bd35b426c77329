//! [`wire_enum!`](crate::wire_enum): the one macro of enums that cross a
//! boundary. The functions below are its expansion's (public for use from
//! other crates); not an API.
//!
//! May use: `crate::error`.

use crate::error::WireError;

/// Declares a fieldless enum that crosses a boundary by code (program
/// words, FFI attributes, tables exported to Python) or by name (FFI
/// string attributes, configuration), each variant's code and name stated
/// once. Two forms:
///
/// ```ignore
/// wire_enum! {
///     /// A table of its own: codes 0, 1, 2, ... in declaration order
///     /// (checked at compile time), so `ALL[code]` is the variant.
///     pub enum DmaMode as setting "dma_execution_mode" {
///         Eager = 0 => "eager",
///         OnWait = 1 => "on_wait",
///     }
/// }
/// wire_enum! {
///     /// A part of another wire enum's table: each variant has that
///     /// table's code and name (the one table of the fact), and converts
///     /// into it (`From`).
///     pub enum VectorType as listed "type" in DType { Bool, I32, F32, }
/// }
/// ```
///
/// Generates `WHAT`, `ALL` (in code order), `code`, `from_code` (error: `"unknown
/// <what> code 7: expected 0 to 5"`), `name`, `from_name` / `FromStr` and
/// `Display`. How a bad name is told is the enum's *style*: `setting`
/// names every choice in a sentence (`"<what> must be 'a' or 'b', got
/// \"x\""`), `listed` lists them (`"unsupported <what> \"x\": expected one
/// of a, b"`). The errors are [`WireError`](crate::WireError)s, raised as
/// `ValueError`.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $style:ident $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $name {
            /// The variant's name at the boundary.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        $crate::wire_enum!(@common $name $style $what [$($variant)+]);

        // Codes are positions: evaluation loops index `ALL` by a decoded code.
        const _: () = {
            let mut i = 0;
            while i < $name::ALL.len() {
                let in_order = $name::ALL[i] as usize == i;
                assert!(in_order, concat!(stringify!($name), ": codes must be 0, 1, 2, ... in order"));
                i += 1;
            }
        };
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $style:ident $what:literal in $table:ident {
            $( $(#[$vmeta:meta])* $variant:ident, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $table::$variant as isize, )+
        }

        impl $name {
            /// The variant's name: its table's.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $table::$variant.name(),)+
                }
            }
        }

        impl From<$name> for $table {
            #[inline]
            fn from(v: $name) -> $table {
                match v {
                    $($name::$variant => $table::$variant,)+
                }
            }
        }

        $crate::wire_enum!(@common $name $style $what [$($variant)+]);

        // `ALL` is in code order: declare the variants in the table's order.
        const _: () = {
            let mut i = 1;
            while i < $name::ALL.len() {
                let ascending = ($name::ALL[i - 1] as i64) < ($name::ALL[i] as i64);
                assert!(ascending, concat!(stringify!($name), ": variants must follow the table's code order"));
                i += 1;
            }
        };
    };
    (@common $name:ident $style:ident $what:literal [$($variant:ident)+]) => {
        impl $name {
            /// What the enum is called in its errors (a setting's name).
            #[allow(dead_code)] // read by the tables exported to Python, if any
            pub const WHAT: &'static str = $what;

            /// Every variant, in code order.
            pub const ALL: [$name; [$($name::$variant),+].len()] = [$($name::$variant),+];

            /// `BY_CODE[code]`: the variant of each code up to the largest.
            const BY_CODE: [Option<$name>; $name::ALL[$name::ALL.len() - 1] as usize + 1] = {
                let mut table = [None; $name::ALL[$name::ALL.len() - 1] as usize + 1];
                let mut i = 0;
                while i < $name::ALL.len() {
                    table[$name::ALL[i] as usize] = Some($name::ALL[i]);
                    i += 1;
                }
                table
            };

            /// The variant's wire code.
            #[inline]
            pub const fn code(self) -> i64 {
                self as i64
            }

            #[inline]
            pub fn from_code(code: i64) -> ::std::result::Result<$name, $crate::WireError> {
                match usize::try_from(code).ok().and_then(|i| $name::BY_CODE.get(i).copied()) {
                    Some(Some(v)) => Ok(v),
                    _ => Err($crate::wire_enum::unknown_code($what, code, &$name::ALL.map($name::code))),
                }
            }

            pub fn from_name(name: &str) -> ::std::result::Result<$name, $crate::WireError> {
                match $name::ALL.iter().find(|v| v.name() == name) {
                    Some(&v) => Ok(v),
                    None => Err($crate::wire_enum::$style($what, name, &$name::ALL.map($name::name))),
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::WireError;
            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                $name::from_name(s)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// `"unknown <what> code 7: expected 0 to 5"` (codes 0 to 5), or `...:
/// expected one of 0, 1, 11"`.
#[cold]
pub fn unknown_code(what: &str, code: i64, codes: &[i64]) -> WireError {
    let dense = codes.iter().enumerate().all(|(i, &c)| c == i as i64);
    let expected = match codes.last() {
        Some(last) if dense => format!("0 to {last}"),
        _ => format!("one of {}", codes.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")),
    };
    WireError::new(format!("unknown {what} code {code}: expected {expected}"))
}

/// A bad name of a `setting`: `"<what> must be 'a', 'b' or 'c', got \"x\""`.
#[cold]
pub fn setting(what: &str, got: &str, valid: &[&str]) -> WireError {
    let quoted: Vec<String> = valid.iter().map(|v| format!("'{v}'")).collect();
    let choices = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    };
    WireError::new(format!("{what} must be {choices}, got {got:?}"))
}

/// A bad name of a `listed` enum: `"unsupported <what> \"x\": expected one
/// of a, b, c"`.
#[cold]
pub fn listed(what: &str, got: &str, valid: &[&str]) -> WireError {
    WireError::new(format!("unsupported {what} {got:?}: expected one of {}", valid.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::wire_enum! {
        enum Colour as setting "colour" {
            Red = 0 => "red",
            Green = 1 => "green",
            Blue = 2 => "blue",
        }
    }

    crate::wire_enum! {
        enum Warm as listed "warm colour" in Colour {
            Red,
            Blue,
        }
    }

    #[test]
    fn a_table_round_trips_and_names_its_choices() {
        for c in Colour::ALL {
            assert_eq!(Colour::from_code(c.code()).unwrap(), c);
            assert_eq!(c.name().parse::<Colour>().unwrap(), c);
            assert_eq!(c.to_string(), c.name());
        }
        assert_eq!(
            Colour::from_name("pink").unwrap_err().message,
            "colour must be 'red', 'green' or 'blue', got \"pink\""
        );
        assert_eq!(Colour::from_code(3).unwrap_err().message, "unknown colour code 3: expected 0 to 2");
        assert_eq!(Colour::from_code(-1).unwrap_err().message, "unknown colour code -1: expected 0 to 2");
    }

    #[test]
    fn a_part_keeps_its_tables_codes_and_names() {
        assert_eq!(Warm::ALL.map(Warm::code), [0, 2]);
        assert_eq!(Warm::ALL.map(Warm::name), ["red", "blue"]);
        assert_eq!(Colour::from(Warm::Blue), Colour::Blue);
        assert_eq!(Warm::from_code(2).unwrap(), Warm::Blue);
        assert_eq!(Warm::from_code(1).unwrap_err().message, "unknown warm colour code 1: expected one of 0, 2");
        assert_eq!(
            Warm::from_name("green").unwrap_err().message,
            "unsupported warm colour \"green\": expected one of red, blue"
        );
    }

    #[test]
    fn a_setting_of_one_or_two_choices_reads_as_a_sentence() {
        assert_eq!(setting("mode", "x", &["a"]).message, "mode must be 'a', got \"x\"");
        assert_eq!(setting("mode", "x", &["a", "b"]).message, "mode must be 'a' or 'b', got \"x\"");
    }
}
