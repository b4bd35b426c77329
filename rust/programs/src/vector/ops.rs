//! The ops of vector programs, named as jax's primitives.

use crate::scalar::ScalarOp;
use mosaic_rt_wire::wire_enum;

wire_enum! {
    /// A vector-program op, named as jax's primitive (as the scalar
    /// program's op of the same name, whose integer semantics it shares).
    pub enum VectorOp as listed "op" {
        Const = 0 => "const",
        Add = 1 => "add",
        Sub = 2 => "sub",
        Mul = 3 => "mul",
        Div = 4 => "div",
        Rem = 5 => "rem",
        Neg = 6 => "neg",
        Abs = 7 => "abs",
        Max = 8 => "max",
        Min = 9 => "min",
        And = 10 => "and",
        Or = 11 => "or",
        Xor = 12 => "xor",
        Not = 13 => "not",
        ShiftLeft = 14 => "shift_left",
        ShiftRightArithmetic = 15 => "shift_right_arithmetic",
        ShiftRightLogical = 16 => "shift_right_logical",
        Eq = 17 => "eq",
        Ne = 18 => "ne",
        Lt = 19 => "lt",
        Le = 20 => "le",
        Gt = 21 => "gt",
        Ge = 22 => "ge",
        SelectN = 23 => "select_n",
        Convert = 24 => "convert_element_type",
        Fma = 25 => "fma",
        Iota = 26 => "iota",
    }
}

impl VectorOp {
    /// The scalar-program op of the same name (integer semantics live there).
    pub const fn scalar(self) -> Option<ScalarOp> {
        use VectorOp::*;
        Some(match self {
            Const => ScalarOp::Const,
            Add => ScalarOp::Add,
            Sub => ScalarOp::Sub,
            Mul => ScalarOp::Mul,
            Div => ScalarOp::Div,
            Rem => ScalarOp::Rem,
            Neg => ScalarOp::Neg,
            Abs => ScalarOp::Abs,
            Max => ScalarOp::Max,
            Min => ScalarOp::Min,
            And => ScalarOp::And,
            Or => ScalarOp::Or,
            Xor => ScalarOp::Xor,
            Not => ScalarOp::Not,
            ShiftLeft => ScalarOp::ShiftLeft,
            ShiftRightArithmetic => ScalarOp::ShiftRightArithmetic,
            ShiftRightLogical => ScalarOp::ShiftRightLogical,
            Eq => ScalarOp::Eq,
            Ne => ScalarOp::Ne,
            Lt => ScalarOp::Lt,
            Le => ScalarOp::Le,
            Gt => ScalarOp::Gt,
            Ge => ScalarOp::Ge,
            SelectN => ScalarOp::SelectN,
            Convert => ScalarOp::Convert,
            Fma | Iota => return None,
        })
    }

    /// Whether the op compares (bool result, operands of any one type).
    pub fn is_comparison(self) -> bool {
        matches!(self, VectorOp::Eq | VectorOp::Ne | VectorOp::Lt | VectorOp::Le | VectorOp::Gt | VectorOp::Ge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        let mut names = std::collections::HashSet::new();
        for op in VectorOp::ALL {
            assert_eq!(VectorOp::from_code(op.code()).unwrap(), op);
            assert!(names.insert(op.name()), "{op:?}");
            if let Some(s) = op.scalar() {
                assert_eq!(s.name(), op.name(), "named as the scalar op");
            }
        }
        assert_eq!(VectorOp::Convert.name(), "convert_element_type");
        assert_eq!(VectorOp::Fma.name(), "fma");
        assert!(VectorOp::from_code(VectorOp::ALL.len() as i64).is_err());
        assert!(VectorOp::from_code(-1).is_err());
    }
}
