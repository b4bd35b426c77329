//! Every dtype through the memory handlers with fake XLA call frames:
//! allocation (fill values and packed initial values), store, load, swap and
//! a DMA, with sub-byte dtypes packed the way XLA's CPU runtime packs them.

use mosaic_rt_core::{DType, FillMode};
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::{begin_single_device, core_call, whole_region, FakeCall};
use mosaic_rt_ffi::{abi, dtype_to_xla, xla_to_dtype};

const VMEM: i64 = 0;

fn begin(fill: &str) -> [u32; 2] {
    begin_single_device(fill)
}

fn end(handle: [u32; 2]) {
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end).unwrap();
}

/// XLA's bytes for `elements` (one per itemsize bytes) of `d`.
fn packed(d: DType, elements: &[u8]) -> Vec<u8> {
    let mut out = vec![0; d.packed_len(elements.len() / d.itemsize())];
    d.pack(elements, &mut out);
    out
}

fn alloc(handle: [u32; 2], d: DType, n: usize, init: Option<&[u8]>) -> Result<i32, String> {
    let mut c = core_call(handle);
    if let Some(init) = init {
        c = c.arg(dtype_to_xla(d), &[n as i64], packed(d, init));
    }
    let mut c =
        c.ret_i32().ret_i32().attr_i64("space", VMEM).attr_str("dtype", d.name()).attr_i64s("shape", &[n as i64]);
    c.call(h::allocate_buffer)?;
    Ok(c.ret_i32_value(1))
}

/// Loads the whole buffer; returns XLA's (packed) bytes.
fn load(handle: [u32; 2], d: DType, n: usize, id: i32) -> Vec<u8> {
    let mut c = whole_region(
        core_call(handle)
            .arg_i32(id)
            .arg_i32s(&[])
            .ret_i32()
            .ret(dtype_to_xla(d), &[n as i64], d.packed_len(n))
            .attr_i64("space", VMEM),
        "",
    );
    c.call(h::load).unwrap();
    c.ret_bytes(1).to_vec()
}

fn store(handle: [u32; 2], d: DType, id: i32, elements: &[u8]) {
    let n = elements.len() / d.itemsize();
    whole_region(
        core_call(handle)
            .arg_i32(id)
            .arg_i32s(&[])
            .arg(dtype_to_xla(d), &[n as i64], packed(d, elements))
            .ret_i32()
            .attr_i64("space", VMEM),
        "",
    )
    .call(h::store)
    .unwrap();
}

/// Distinct canonical element bytes (sub-byte values in the low bits).
fn sample(d: DType, n: usize, seed: u8) -> Vec<u8> {
    let mask = if d.is_packed() { (1u8 << d.bits()) - 1 } else { 0xff };
    (0..n * d.itemsize()).map(|i| ((i as u8).wrapping_mul(37).wrapping_add(seed)) & mask).collect()
}

#[test]
fn xla_codes_map_one_to_one() {
    for d in DType::ALL {
        assert_eq!(xla_to_dtype(dtype_to_xla(d)), Some(d), "{}", d.name());
    }
    let mapped = (0..64).filter(|&c| xla_to_dtype(c).is_some()).count();
    assert_eq!(mapped, DType::ALL.len());
    for unsupported in [abi::DT_INVALID, abi::DT_TOKEN, abi::DT_S1, abi::DT_U1] {
        assert_eq!(xla_to_dtype(unsupported), None);
    }
}

#[test]
fn every_dtype_fills_stores_loads_swaps_and_copies() {
    for mode in [FillMode::Nan, FillMode::Zero] {
        let handle = begin(if mode == FillMode::Nan { "nan" } else { "zero" });
        for d in DType::ALL {
            // 7 elements: an odd count leaves a partly used last packed byte.
            let n = 7;
            let fresh = alloc(handle, d, n, None).unwrap();
            let fill: Vec<u8> = mode.bytes_of(d).repeat(n);
            assert_eq!(load(handle, d, n, fresh), packed(d, &fill), "fill of {}", d.name());

            let init = sample(d, n, 1);
            let id = alloc(handle, d, n, Some(&init)).unwrap();
            assert_eq!(load(handle, d, n, id), packed(d, &init), "init of {}", d.name());

            let value = sample(d, n, 5);
            store(handle, d, fresh, &value);
            assert_eq!(load(handle, d, n, fresh), packed(d, &value), "store of {}", d.name());

            // swap: returns the old contents, leaves the new ones.
            let new = sample(d, n, 9);
            let mut c = whole_region(
                core_call(handle)
                    .arg_i32(id)
                    .arg_i32s(&[])
                    .arg(dtype_to_xla(d), &[n as i64], packed(d, &new))
                    .ret_i32()
                    .ret(dtype_to_xla(d), &[n as i64], d.packed_len(n))
                    .attr_i64("space", VMEM),
                "",
            );
            c.call(h::swap).unwrap();
            assert_eq!(c.ret_bytes(1), &packed(d, &init)[..], "swap of {}", d.name());
            assert_eq!(load(handle, d, n, id), packed(d, &new), "swap of {}", d.name());

            // DMA fresh -> id (eager), then wait for n * itemsize bytes.
            let sem = {
                let mut c = core_call(handle).ret_i32().ret_i32().attr_str("kind", "dma").attr_i64("count", 1);
                c.call(h::allocate_semaphores).unwrap();
                c.ret_i32_value(1)
            };
            let c = core_call(handle)
                .arg_i32(fresh)
                .arg_i32s(&[])
                .arg_i32(id)
                .arg_i32s(&[])
                .arg_i32(sem)
                .arg_i32(-1)
                .arg_i32(-1)
                .ret_i32()
                .attr_i64("src_space", VMEM)
                .attr_i64("dst_space", VMEM);
            whole_region(whole_region(c, "src_"), "dst_").call(h::dma_start).unwrap();
            core_call(handle)
                .arg_i32(sem)
                .ret_i32()
                .attr_i64("bytes", (n * d.itemsize()) as i64)
                .call(h::dma_wait)
                .unwrap();
            assert_eq!(load(handle, d, n, id), packed(d, &value), "DMA of {}", d.name());
        }
        end(handle);
    }
}

#[test]
fn packed_operands_ignore_undefined_high_bits() {
    let handle = begin("nan");
    let id = alloc(handle, DType::I4, 3, None).unwrap();
    // int4 [1, 2, 3]: XLA leaves the high nibble of the last byte undefined.
    whole_region(
        core_call(handle)
            .arg_i32(id)
            .arg_i32s(&[])
            .arg(abi::DT_S4, &[3], vec![0x21, 0xf3])
            .ret_i32()
            .attr_i64("space", VMEM),
        "",
    )
    .call(h::store)
    .unwrap();
    assert_eq!(load(handle, DType::I4, 3, id), [0x21, 0x03]);
    end(handle);
}

#[test]
fn unsupported_dtypes_are_named() {
    let handle = begin("nan");
    let err = alloc(handle, DType::F32, 2, None).and_then(|_| {
        let mut c = core_call(handle)
            .ret_i32()
            .ret_i32()
            .attr_i64("space", VMEM)
            .attr_str("dtype", "float6_e2m3fn")
            .attr_i64s("shape", &[2]);
        c.call(h::allocate_buffer).map(|_| 0)
    });
    let e = err.unwrap_err();
    assert!(e.contains("unsupported dtype \"float6_e2m3fn\""), "{e}");

    // jaxlib 0.12 passes float6 arrays as XLA_FFI_DataType_INVALID.
    let handle = begin("nan");
    let id = alloc(handle, DType::U8, 2, None).unwrap();
    let e = whole_region(
        core_call(handle)
            .arg_i32(id)
            .arg_i32s(&[])
            .arg(abi::DT_INVALID, &[2], vec![0, 0])
            .ret_i32()
            .attr_i64("space", VMEM),
        "",
    )
    .call(h::store)
    .unwrap_err();
    assert!(e.contains("operand 6 has unsupported dtype INVALID"), "{e}");
    assert!(e.contains("float6"), "{e}");
}
