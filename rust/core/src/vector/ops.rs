//! The ops of vector programs, named as jax's primitives.

use crate::scalar::Op as ScalarOp;

/// A vector-program op; its wire code is its position in [`Op::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Const,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Neg,
    Abs,
    Max,
    Min,
    And,
    Or,
    Xor,
    Not,
    ShiftLeft,
    ShiftRightArithmetic,
    ShiftRightLogical,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    SelectN,
    Convert,
    Fma,
}

impl Op {
    pub const ALL: [Op; 26] = [
        Op::Const,
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Rem,
        Op::Neg,
        Op::Abs,
        Op::Max,
        Op::Min,
        Op::And,
        Op::Or,
        Op::Xor,
        Op::Not,
        Op::ShiftLeft,
        Op::ShiftRightArithmetic,
        Op::ShiftRightLogical,
        Op::Eq,
        Op::Ne,
        Op::Lt,
        Op::Le,
        Op::Gt,
        Op::Ge,
        Op::SelectN,
        Op::Convert,
        Op::Fma,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Fma => "fma",
            _ => self.scalar().map_or("?", ScalarOp::name),
        }
    }

    pub fn code(self) -> i64 {
        Op::ALL.iter().position(|&o| o == self).unwrap_or(0) as i64
    }

    pub fn from_code(code: i64) -> Option<Op> {
        usize::try_from(code).ok().and_then(|i| Op::ALL.get(i).copied())
    }

    /// The scalar-program op of the same name (integer semantics live there).
    pub const fn scalar(self) -> Option<ScalarOp> {
        use Op::*;
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
            Fma => return None,
        })
    }

    /// Whether the op compares (bool result, operands of any one type).
    pub fn is_comparison(self) -> bool {
        matches!(self, Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        let mut names = std::collections::HashSet::new();
        for op in Op::ALL {
            assert_eq!(Op::from_code(op.code()), Some(op));
            assert!(names.insert(op.name()), "{op:?}");
        }
        assert_eq!(Op::Convert.name(), "convert_element_type");
        assert_eq!(Op::Fma.name(), "fma");
        assert_eq!(Op::from_code(Op::ALL.len() as i64), None);
        assert_eq!(Op::from_code(-1), None);
    }
}
