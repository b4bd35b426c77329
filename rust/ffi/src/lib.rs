//! XLA FFI layer. OWNER: FFI helper.
