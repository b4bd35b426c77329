//! The core's wire enums as users see them: every spelling parses back,
//! a bad one is a `ValueError` naming the choices, and the codes Python
//! reads (`_native.MEMORY_SPACES`) are pinned.

use mosaic_rt_core::{
    Access, DmaMode, ErrorKind, FillMode, LeakPolicy, MemorySpace, OobReads, RacePolicy, RtError, SemKind,
};
use mosaic_rt_wire::WireError;

fn check<T: std::str::FromStr<Err = WireError> + PartialEq + std::fmt::Debug + Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    error: &str,
) {
    for &v in all {
        assert_eq!(name(v).parse::<T>().unwrap(), v);
    }
    let e = RtError::from("bogus".parse::<T>().unwrap_err());
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Value, error));
}

#[test]
fn every_spelling_round_trips_and_errors_name_the_choices() {
    check(&DmaMode::ALL, DmaMode::name, "dma_execution_mode must be 'eager', 'on_wait' or 'tpu', got \"bogus\"");
    check(
        &OobReads::ALL,
        OobReads::name,
        "out_of_bounds_reads must be 'raise', 'uninitialized' or 'tpu', got \"bogus\"",
    );
    check(&FillMode::ALL, FillMode::name, "uninitialized_memory must be 'nan' or 'zero', got \"bogus\"");
    check(&RacePolicy::ALL, RacePolicy::name, "on_race must be 'raise', 'warn' or 'print', got \"bogus\"");
    check(&LeakPolicy::ALL, LeakPolicy::name, "leak policy must be 'ignore', 'warn' or 'raise', got \"bogus\"");
    check(&SemKind::ALL, SemKind::name, "semaphore kind must be 'regular', 'dma' or 'barrier', got \"bogus\"");
    check(&Access::ALL, Access::name, "access must be 'read', 'load', 'write' or 'swap', got \"bogus\"");
    check(
        &MemorySpace::ALL,
        MemorySpace::name,
        "memory space must be 'vmem', 'vmem_shared', 'smem', 'cmem', 'semaphore_mem', 'hbm' or 'any', got \"bogus\"",
    );
}

/// Memory-space codes in code order (code 0 first): stock's numbering, and
/// the table Python reads. A change here is a change of the wire.
#[test]
fn memory_space_codes_are_pinned() {
    let names: Vec<&str> = MemorySpace::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names.join(" "), "vmem vmem_shared smem cmem semaphore_mem hbm any");
    for (i, s) in MemorySpace::ALL.iter().enumerate() {
        assert_eq!(s.code(), i as i64);
    }
    let e = RtError::from(MemorySpace::from_code(42).unwrap_err());
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Value, "unknown memory space code 42: expected 0 to 6"));
}
