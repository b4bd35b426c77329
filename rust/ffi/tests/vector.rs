//! The pure `vector_program` handler with fake XLA call frames: arrays of
//! any shape with n elements, one-element scalars broadcast, the decode cache
//! with fingerprints, and the checks of buffers against the program.

use mosaic_rt_ffi::abi;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::FakeCall;
use mosaic_rt_programs::scalar::fingerprint;
use mosaic_rt_programs::vector::{VectorOp, VectorType, FORMAT};

const F32: i64 = VectorType::F32.code();

/// `[FORMAT, n, n_in, n_instr, n_out, inputs.., instrs.., outputs..]`.
fn program(n: i64, inputs: &[[i64; 2]], instrs: &[&[i64]], outputs: &[i64]) -> Vec<i64> {
    let mut w = vec![FORMAT, n, inputs.len() as i64, instrs.len() as i64, outputs.len() as i64];
    inputs.iter().for_each(|i| w.extend(i));
    instrs.iter().for_each(|i| w.extend(*i));
    w.extend(outputs);
    w
}

fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn f32_values(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// `x * s + 1` over a float32 (2, 3) array and a float32 scalar; and `x < s`.
fn x_times_s_plus_one() -> Vec<i64> {
    program(
        6,
        &[[F32, 0], [F32, 1]],
        &[
            &[VectorOp::Const.code(), F32, 0, 1f32.to_bits() as i64],
            &[VectorOp::Mul.code(), F32, 2, 0, 1, 0],
            &[VectorOp::Add.code(), F32, 2, 3, 2, 0],
            &[VectorOp::Lt.code(), 0, 2, 0, 1, 0],
        ],
        &[4, 5],
    )
}

#[test]
fn runs_a_program_over_arrays_and_a_scalar() {
    let words = x_times_s_plus_one();
    let x = [0.5f32, -1.0, 2.0, 3.0, -0.0, 10.0];
    let mut c = FakeCall::new()
        .arg(abi::DT_F32, &[2, 3], f32_bytes(&x))
        .arg(abi::DT_F32, &[], f32_bytes(&[3.0]))
        .ret(abi::DT_F32, &[6], 24)
        .ret(abi::DT_PRED, &[3, 2], 6)
        .attr_i64s("program", &words)
        .attr_i64("fingerprint", fingerprint(&words) as i64);
    for _ in 0..2 {
        // The second call finds the program in the thread's cache.
        c.call(h::vector_program).unwrap();
        assert_eq!(f32_values(c.ret_bytes(0)), [2.5, -2.0, 7.0, 10.0, 1.0, 31.0]);
        assert_eq!(c.ret_bytes(1), &[1, 1, 1, 0, 1, 0]);
    }
    // Without a fingerprint too.
    let mut c = FakeCall::new()
        .arg(abi::DT_F32, &[6], f32_bytes(&x))
        .arg(abi::DT_F32, &[], f32_bytes(&[-1.0]))
        .ret(abi::DT_F32, &[6], 24)
        .ret(abi::DT_PRED, &[6], 6)
        .attr_i64s("program", &words);
    c.call(h::vector_program).unwrap();
    assert_eq!(f32_values(c.ret_bytes(0)), [0.5, 2.0, -1.0, -2.0, 1.0, -9.0]);
    // A scalar operand of one element in any shape (a `(1, 1)` block's value).
    let mut c = FakeCall::new()
        .arg(abi::DT_F32, &[6], f32_bytes(&x))
        .arg(abi::DT_F32, &[1, 1], f32_bytes(&[-1.0]))
        .ret(abi::DT_F32, &[6], 24)
        .ret(abi::DT_PRED, &[6], 6)
        .attr_i64s("program", &words);
    c.call(h::vector_program).unwrap();
    assert_eq!(f32_values(c.ret_bytes(0)), [0.5, 2.0, -1.0, -2.0, 1.0, -9.0]);
}

#[test]
fn buffers_that_do_not_match_the_program_are_value_errors() {
    let words = x_times_s_plus_one();
    let x = f32_bytes(&[0.0; 6]);
    let s = f32_bytes(&[0.0]);
    let call = |a0: (i32, &[i64], Vec<u8>), a1: (i32, &[i64], Vec<u8>), r0: (i32, &[i64], usize)| {
        let mut c = FakeCall::new()
            .arg(a0.0, a0.1, a0.2)
            .arg(a1.0, a1.1, a1.2)
            .ret(r0.0, r0.1, r0.2)
            .ret(abi::DT_PRED, &[6], 6)
            .attr_i64s("program", &words);
        c.call(h::vector_program).unwrap_err()
    };
    let e = call((abi::DT_S32, &[6], x.clone()), (abi::DT_F32, &[], s.clone()), (abi::DT_F32, &[6], 24));
    assert!(e.contains("ValueError") && e.contains("operand 0 must be float32, got int32"), "{e}");
    let e = call((abi::DT_F32, &[5], x[..20].to_vec()), (abi::DT_F32, &[], s.clone()), (abi::DT_F32, &[6], 24));
    assert!(e.contains("operand 0 has shape [5], the vector program expects 6 elements of float32"), "{e}");
    let two = f32_bytes(&[0.0; 2]);
    let e = call((abi::DT_F32, &[6], x.clone()), (abi::DT_F32, &[2], two), (abi::DT_F32, &[6], 24));
    assert!(e.contains("operand 1 has shape [2], the vector program expects one element of float32"), "{e}");
    let e = call((abi::DT_F32, &[6], x.clone()), (abi::DT_F32, &[], s.clone()), (abi::DT_F64, &[6], 48));
    assert!(e.contains("result 0 must be float32, got float64"), "{e}");
    let e = call((abi::DT_F32, &[6], x.clone()), (abi::DT_F32, &[], s.clone()), (abi::DT_F32, &[7], 28));
    assert!(e.contains("result 0 has shape [7], the vector program expects 6 elements"), "{e}");
    // One operand too few.
    let mut c = FakeCall::new()
        .arg(abi::DT_F32, &[6], x.clone())
        .ret(abi::DT_F32, &[6], 24)
        .ret(abi::DT_PRED, &[6], 6)
        .attr_i64s("program", &words);
    let e = c.call(h::vector_program).unwrap_err();
    assert!(e.contains("expected 2 operand(s) and 2 result(s), got 1 and 2"), "{e}");
    // A malformed program, and a fingerprint of other words.
    let mut c = FakeCall::new().ret(abi::DT_F32, &[6], 24).attr_i64s("program", &[FORMAT, 6, 0]);
    let e = c.call(h::vector_program).unwrap_err();
    assert!(e.contains("ValueError") && e.contains("vector program: truncated"), "{e}");
    let mut c = FakeCall::new()
        .arg(abi::DT_F32, &[6], x)
        .arg(abi::DT_F32, &[], s)
        .ret(abi::DT_F32, &[6], 24)
        .ret(abi::DT_PRED, &[6], 6)
        .attr_i64s("program", &words)
        .attr_i64("fingerprint", 12345);
    let e = c.call(h::vector_program).unwrap_err();
    assert!(e.contains("does not match its words"), "{e}");
}
