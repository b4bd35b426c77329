//! The pure `scalar_program` handler with fake XLA call frames: operands
//! and results of several dtypes, a semaphore-id vector indexed by a
//! scalar, and the checks of buffers against the program.

use mosaic_rt_ffi::abi;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::FakeCall;
use mosaic_rt_programs::scalar::{ScalarOp, ScalarType, FORMAT};

/// `[FORMAT, n_in, n_instr, n_out, inputs.., instrs.., outputs..]`.
fn program(inputs: &[&[i64]], instrs: &[&[i64]], outputs: &[i64]) -> Vec<i64> {
    let mut w = vec![FORMAT, inputs.len() as i64, instrs.len() as i64, outputs.len() as i64];
    inputs.iter().for_each(|i| w.extend(*i));
    instrs.iter().for_each(|i| w.extend(*i));
    w.extend(outputs);
    w
}

const I32: i64 = 3;
const BOOL: i64 = 0;

fn code(op: ScalarOp) -> i64 {
    op.code()
}

#[test]
fn runs_a_program_over_scalar_operands() {
    assert_eq!(ScalarType::I32.code(), I32);
    // (x + 1) % 8 and x + 1 < 8, from one int32 operand.
    let words = program(
        &[&[I32, 0]],
        &[
            &[code(ScalarOp::Const), I32, 0, 1],
            &[code(ScalarOp::Const), I32, 0, 8],
            &[code(ScalarOp::Add), I32, 2, 0, 1, 0],
            &[code(ScalarOp::Rem), I32, 2, 3, 2, 0],
            &[code(ScalarOp::Lt), BOOL, 2, 3, 2, 0],
        ],
        &[4, 5],
    );
    let mut c = FakeCall::new().arg_i32(7).ret_i32().ret(abi::DT_PRED, &[], 1).attr_i64s("program", &words);
    c.call(h::scalar_program).unwrap();
    assert_eq!(c.ret_i32_value(0), 0);
    assert_eq!(c.ret_bytes(1), &[0]);
}

#[test]
fn indexes_a_semaphore_id_vector_with_clamping() {
    let words = program(&[&[I32, 1, 3], &[I32, 0]], &[&[code(ScalarOp::Index), I32, 2, 0, 1, 0]], &[2]);
    for (i, want) in [(0, 2000), (2, 2002), (-4, 2000), (9, 2002)] {
        let mut c = FakeCall::new().arg_i32s(&[2000, 2001, 2002]).arg_i32(i).ret_i32().attr_i64s("program", &words);
        c.call(h::scalar_program).unwrap();
        assert_eq!(c.ret_i32_value(0), want, "index {i}");
    }
}

#[test]
fn buffers_that_do_not_match_the_program_are_value_errors() {
    let words = program(&[&[I32, 0]], &[], &[0]);
    // An int64 operand where the program reads int32.
    let mut c = FakeCall::new().arg(abi::DT_S64, &[], vec![0; 8]).ret_i32().attr_i64s("program", &words);
    let e = c.call(h::scalar_program).unwrap_err();
    assert!(e.contains("ValueError") && e.contains("must be int32, got int64"), "{e}");
    // A vector where it reads a scalar.
    let mut c = FakeCall::new().arg_i32s(&[1, 2]).ret_i32().attr_i64s("program", &words);
    let e = c.call(h::scalar_program).unwrap_err();
    assert!(e.contains("the program expects []"), "{e}");
    // One operand too many.
    let mut c = FakeCall::new().arg_i32(1).arg_i32(2).ret_i32().attr_i64s("program", &words);
    let e = c.call(h::scalar_program).unwrap_err();
    assert!(e.contains("expected 1 operand(s) and 1 result(s), got 2 and 1"), "{e}");
    // A malformed program.
    let mut c = FakeCall::new().arg_i32(1).ret_i32().attr_i64s("program", &[FORMAT, 1]);
    let e = c.call(h::scalar_program).unwrap_err();
    assert!(e.contains("scalar program: truncated"), "{e}");
}
